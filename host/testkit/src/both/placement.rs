//! Where the jump pod runs, and why it does not: eviction, a removed node, nodes of the
//! scenario's own (selector, tolerations, a tainted GPU node), the scheduler's, the
//! ReplicaSet controller's and the kubelet's reasons.

use super::*;

/// Scenario 6: the ReplicaSet's pod evicted: replaced; `resolve` picks the ready one; the NodePort is
/// unchanged; the evicted pod stays Failed and `ensure` leaves it (it did not name it).
pub async fn an_evicted_replicaset_pod_is_replaced_on_the_same_node_port(cluster: &Cluster) {
    let config = cluster.config("hostname: h");
    cluster.ensure(&config).await.unwrap();
    cluster.settle().await;
    let before = cluster.resolve(&config).await.unwrap().proxy;
    cluster.evict(&before.pod).await;
    cluster.settle().await;
    let after = cluster.resolve(&config).await.unwrap().proxy;
    assert_ne!(after.pod, before.pod, "a replacement");
    assert_eq!(after.port, before.port);
    assert_eq!(cluster.active_pods().await.len(), 1);
    let report = cluster.ensure(&config).await.unwrap();
    assert!(report.applied.is_empty(), "{report}");
}

/// A label and taint that keep a scenario's pods on the nodes it added, and other tests'
/// pods off them.
const POOL: &str = "jumppod.test/pool";

/// The configuration lines that put the jump pod on the nodes of `pool`.
fn on_pool(pool: &str) -> String {
    format!(
        "node_selector: {{{POOL}: {pool}}}\ntolerations: [{{key: {POOL}, operator: Equal, value: {pool}, effect: NoSchedule}}]"
    )
}

/// Scenario 6b: a node selector and tolerations place the pod on the scenario's own two
/// nodes, and `resolve` without `hostname` gives its node's ExternalIP. The node is cordoned,
/// as a drain begins: `resolve` gives another node's (a job keeps its address for its whole
/// life, and the NodePort answers on every node). The node goes away: the pod is replaced on
/// the other node (on the real control plane once the pod GC has removed the orphaned pod,
/// after its 40 s quarantine) and the NodePort is unchanged.
pub async fn the_replicasets_pod_is_replaced_after_its_node_is_removed(cluster: &Cluster) {
    let pool = cluster.ns().to_owned();
    for (n, ip) in [("a", "203.0.113.11"), ("b", "203.0.113.12")] {
        let node = NodeSpec::new(&format!("{pool}-{n}"))
            .ips(ip, "10.0.0.1")
            .label(POOL, &pool)
            .taint(POOL, &pool, "NoSchedule");
        cluster.add_node(node).await;
    }
    let config = cluster.config(&on_pool(&pool));
    cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let before = cluster.resolve(&config).await.expect("resolve").proxy;
    let pod = cluster.get("pods", &before.pod).await.expect("the pod");
    let node = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let ip = |node: &str| {
        if node.ends_with("-a") {
            "203.0.113.11"
        } else {
            "203.0.113.12"
        }
    };
    assert!(node.starts_with(&pool), "on a node of the pool: {node}");
    assert_eq!(before.hostname, ip(&node), "its node's ExternalIP");
    let other = if node.ends_with("-a") { "-b" } else { "-a" };

    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
        kube::Api::all(cluster.kube().await.client);
    let cordon = serde_json::json!({"spec": {"unschedulable": true}});
    nodes
        .patch(
            &node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&cordon),
        )
        .await
        .expect("cordon the node");
    // Another node's: the pool's other one, or (on the shared control plane) any other.
    let cordoned = cluster.resolve(&config).await.expect("resolve").proxy;
    assert_eq!(cordoned.pod, before.pod, "the same pod serves");
    assert_ne!(
        cordoned.hostname,
        ip(&node),
        "the cordoned node's ExternalIP, not another's"
    );

    cluster.remove_node(&node).await;
    let after = cluster
        .until_within(
            "the replacement pod, once the orphan is collected",
            Duration::from_secs(150),
            || async {
                let proxy = cluster.resolve(&config).await.ok()?.proxy;
                (proxy.pod != before.pod).then_some(proxy)
            },
        )
        .await;
    assert_eq!(after.hostname, ip(other), "on the other node");
    assert_eq!(after.port, before.port, "the same NodePort");
    assert_eq!(cluster.active_pods().await.len(), 1);
}

/// Scenario 7d: `gpu_tolerations`, as dstack sets it on clusters whose every node is tainted:
/// on a GPU node tainted as the NVIDIA device plugin's docs advise (the only node the
/// scenario's node selector allows), a pod without the tolerations is unschedulable; with
/// them it runs there, and status shows them.
pub async fn gpu_tolerations_let_the_jump_pod_run_on_tainted_gpu_nodes(cluster: &Cluster) {
    let pool = cluster.ns().to_owned();
    let gpu = NodeSpec::new(&format!("{pool}-gpu"))
        .ips("203.0.113.21", "10.0.0.21")
        .label(POOL, &pool)
        .taint("nvidia.com/gpu", "", "NoSchedule");
    cluster.add_node(gpu).await;
    let selector = format!("hostname: h\nnode_selector: {{{POOL}: {pool}}}");
    let plain = cluster.config(&selector);
    cluster.ensure(&plain).await.expect("ensure");
    let unschedulable = |f: &Finding| matches!(f, Finding::Unschedulable { .. });
    cluster
        .until_ensure_finds(
            &plain,
            "without the tolerations no node takes the pod",
            unschedulable,
        )
        .await;

    let tolerant = config_for(
        cluster.ns(),
        "tolerant",
        &format!("{selector}\ngpu_tolerations: true"),
    );
    cluster.ensure(&tolerant).await.expect("ensure");
    cluster.settle().await;
    cluster.resolve(&tolerant).await.expect("resolve");
    let status = jumppod_host::status::status(&cluster.kube().await, &tolerant)
        .await
        .expect("status");
    let text = status.to_string();
    assert!(
        text.contains(
            "tolerations: nvidia.com/gpu Exists NoSchedule, amd.com/gpu Exists NoSchedule"
        ),
        "{text}"
    );
}

/// Scenario 7: a jump pod no node can hold: ensure and resolve say so with the scheduler's message.
pub async fn an_unschedulable_jump_pod_is_reported_with_the_schedulers_message(cluster: &Cluster) {
    // Three nodes of 4 cpus on both backends.
    let config = cluster.config("hostname: h\ncpu: '64'\nmemory: 1Gi");
    cluster.ensure(&config).await.unwrap();
    cluster.settle().await;
    let report = cluster.ensure(&config).await.unwrap();
    let Some(Finding::Unschedulable {
        reason, message, ..
    }) = report
        .findings
        .iter()
        .find(|f| matches!(f, Finding::Unschedulable { .. }))
    else {
        panic!("no unschedulable finding: {report}")
    };
    assert_eq!(reason, "Unschedulable");
    // The scheduler's words: no node of the cluster fits, and cpu is why. The node count is
    // not asserted: scenarios 6b, 7d and 7e add nodes of their own to the shared control
    // plane (some cordoned or tainted), so it depends on which tests ran first.
    assert!(
        message.starts_with("0/")
            && message.contains(" nodes are available: ")
            && message.contains("Insufficient cpu"),
        "{message}"
    );
    let err = cluster.resolve(&config).await.unwrap_err();
    assert_eq!(err.exit_code(), 4);
    assert!(err.to_string().contains("Insufficient cpu"), "{err}");
}

/// Scenario 7b: the ReplicaSet controller cannot create the pod (a LimitRange caps cpu below
/// the jump pod's): ensure, resolve and status report the ReplicaFailure condition's message
/// (FailedCreate, the LimitRanger's words) instead of "up to date" and "run jumppod ensure".
pub async fn pods_the_replicaset_cannot_create_are_reported(cluster: &Cluster) {
    cluster.namespace().await;
    cluster.cap_container_cpu("100m").await;
    let config = cluster.config("hostname: h");
    cluster.ensure(&config).await.expect("the first ensure");
    cluster
        .found_and_reported_by_every_command(
            &config,
            "the ReplicaSet's ReplicaFailure",
            |f| matches!(f, Finding::PodsRefused { .. }),
            &[
                "cannot create its pod (FailedCreate)",
                "is forbidden: maximum cpu usage per Container is 100m, but limit is 500m",
            ],
        )
        .await;
}

/// Scenario 7c: the kubelet cannot pull an image whose registry does not resolve (a host under
/// `.invalid`): ensure, resolve and status report the container's ImagePullBackOff and the
/// runtime's message, not just "Pending".
pub async fn an_image_the_kubelet_cannot_pull_is_reported_with_its_message(cluster: &Cluster) {
    let config = cluster.config("hostname: h\nimage: registry.invalid/sshd:1");
    cluster.ensure(&config).await.expect("the first ensure");
    cluster
        .found_and_reported_by_every_command(
            &config,
            "the kubelet's ImagePullBackOff",
            |f| matches!(f, Finding::ContainerWaiting { .. }),
            &[
                "is waiting: ImagePullBackOff",
                "lookup registry.invalid: no such host",
            ],
        )
        .await;
}

/// This file's scenarios on one backend (`both_tests!`): `placement_scenarios!(sim)` in
/// `scenarios.rs`, `placement_scenarios!(real)` in `real_cluster.rs`.
#[macro_export]
macro_rules! placement_scenarios {
    ($on:ident) => {
        $crate::both_tests! { $on, placement;
            an_evicted_replicaset_pod_is_replaced_on_the_same_node_port:
                sim the_replicasets_pod_is_replaced_on_the_same_node_port_after_an_eviction
                    = sim(),
                /// The real ReplicaSet controller replaces the evicted pod.
                real an_evicted_replicaset_pod_is_replaced_on_the_same_node_port
                    = real("rc-evicted");
            the_replicasets_pod_is_replaced_after_its_node_is_removed:
                sim the_replicasets_pod_is_replaced_on_the_same_node_port_after_its_node_is_removed
                    = sim(),
                /// On two nodes of the test's own, played by the fake kubelet; the replacement
                /// comes after the pod GC's quarantine.
                real the_replicasets_pod_is_replaced_on_the_same_node_port_after_its_node_is_removed
                    = real("rc-node-gone");
            gpu_tolerations_let_the_jump_pod_run_on_tainted_gpu_nodes:
                sim gpu_tolerations_let_the_jump_pod_run_on_tainted_gpu_nodes = sim(),
                /// On a GPU node of the test's own, tainted.
                real gpu_tolerations_let_the_jump_pod_run_on_tainted_gpu_nodes
                    = real("rc-gpu");
            an_unschedulable_jump_pod_is_reported_with_the_schedulers_message:
                sim an_unschedulable_jump_pod_is_reported_with_the_schedulers_reason
                    = sim(),
                /// The real scheduler's `0/3 nodes are available: 3 Insufficient cpu`.
                real a_pod_no_node_can_hold_is_reported_with_the_real_schedulers_message
                    = real("rc-unschedulable");
            pods_the_replicaset_cannot_create_are_reported:
                sim pods_the_replicaset_cannot_create_are_reported_with_the_apis_message
                    = sim(),
                /// The real ReplicaSet controller cannot create the pod when a LimitRange caps
                /// cpu below the jump pod's; its ReplicaFailure reaches every command.
                real pods_a_limitrange_refuses_are_reported_with_the_apis_message
                    = real("rc-limitrange");
            an_image_the_kubelet_cannot_pull_is_reported_with_its_message:
                sim an_image_the_kubelet_cannot_pull_is_reported_with_its_message
                    = sim(),
                /// The control plane's kubelet reports an image whose registry does not resolve
                /// as a real one does.
                real an_image_the_kubelet_cannot_pull_is_reported_with_its_message
                    = real("rc-image-pull");
        }
    };
}
