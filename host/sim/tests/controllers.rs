//! Fidelity tests of the ReplicaSet controller, garbage collector, scheduler and kubelet.

use jumppod_sim::testing::*;
use jumppod_sim::{NodeSpec, Sim, SimConfig};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

fn rs(name: &str, replicas: i32) -> ReplicaSet {
    typed(
        json!({"metadata": {"name": name}, "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": "100m"}}}]}}}}),
    )
}

fn bare_pod(name: &str, app: &str) -> Pod {
    typed(json!({"metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}))
}

fn owner_uid(p: &Pod) -> Option<String> {
    p.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn pods_of(api: &Api<Pod>, app: &str) -> Vec<Pod> {
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

// The ReplicaSet controller creates pods named `<rs>-xxxxx` with a controller ownerReference, and reports status.
#[tokio::test(flavor = "multi_thread")]
async fn replicaset_creates_pods_and_reports_status() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let c = client(&sim).await;
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    let created = rss
        .create(&PostParams::default(), &rs("web", 3))
        .await
        .unwrap();
    settle(&sim).await;
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let ps = pods_of(&pods, "web").await;
    assert_eq!(ps.len(), 3);
    for p in &ps {
        assert!(p.metadata.name.as_ref().unwrap().starts_with("web-"));
        assert_eq!(owner_uid(p), created.metadata.uid);
        let r = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                r.kind.as_str(),
                r.api_version.as_str(),
                r.block_owner_deletion
            ),
            ("ReplicaSet", "apps/v1", Some(true))
        );
        assert!(ready(p));
    }
    let st = rss.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        (
            st.replicas,
            st.ready_replicas,
            st.available_replicas,
            st.fully_labeled_replicas
        ),
        (3, Some(3), Some(3), Some(3))
    );
    assert_eq!(st.observed_generation, Some(1));
}

// The ReplicaSet controller adopts a matching orphan pod instead of creating a new one.
#[tokio::test(flavor = "multi_thread")]
async fn replicaset_adopts_orphans() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let c = client(&sim).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(&PostParams::default(), &bare_pod("orphan", "web"))
        .await
        .unwrap();
    let rss: Api<ReplicaSet> = Api::namespaced(c, "default");
    let created = rss
        .create(&PostParams::default(), &rs("web", 1))
        .await
        .unwrap();
    settle(&sim).await;
    let ps = pods_of(&pods, "web").await;
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].metadata.name.as_deref(), Some("orphan"));
    assert_eq!(owner_uid(&ps[0]), created.metadata.uid);
}

// The ReplicaSet controller neither adopts nor counts Failed pods, and never adopts pods of another controller.
#[tokio::test(flavor = "multi_thread")]
async fn replicaset_skips_failed_and_foreign_pods() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let c = client(&sim).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(&PostParams::default(), &bare_pod("failed", "web"))
        .await
        .unwrap();
    sim.set_pod_phase("default", "failed", "Failed");
    let mut foreign = bare_pod("foreign", "web");
    foreign.metadata.owner_references = Some(vec![typed(
        json!({"apiVersion": "batch/v1", "kind": "Job", "name": "j",
        "uid": "11111111-1111-1111-1111-111111111111", "controller": true}),
    )]);
    sim.seed(
        json!(foreign)
            .as_object()
            .map(|o| {
                let mut o = Value::Object(o.clone());
                o["apiVersion"] = json!("v1");
                o["kind"] = json!("Pod");
                o["metadata"]["namespace"] = json!("default");
                o
            })
            .unwrap(),
    );
    let rss: Api<ReplicaSet> = Api::namespaced(c, "default");
    let created = rss
        .create(&PostParams::default(), &rs("web", 1))
        .await
        .unwrap();
    settle(&sim).await;
    let ps = pods_of(&pods, "web").await;
    assert_eq!(ps.len(), 3);
    let owned: Vec<&Pod> = ps
        .iter()
        .filter(|p| owner_uid(p) == created.metadata.uid)
        .collect();
    assert_eq!(owned.len(), 1);
    assert!(owned[0].metadata.name.as_ref().unwrap().starts_with("web-"));
    let failed = pods.get("failed").await.unwrap();
    assert!(failed.metadata.owner_references.is_none());
    assert_eq!(
        owner_uid(&pods.get("foreign").await.unwrap()).as_deref(),
        Some("11111111-1111-1111-1111-111111111111")
    );
}

// The ReplicaSet controller does not count or delete an evicted (Failed) pod; it creates a replacement.
#[tokio::test(flavor = "multi_thread")]
async fn eviction_gets_a_replacement_and_failed_pod_stays() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let c = client(&sim).await;
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    rss.create(&PostParams::default(), &rs("web", 1))
        .await
        .unwrap();
    settle(&sim).await;
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let first = pods_of(&pods, "web").await.remove(0);
    let first_name = first.metadata.name.clone().unwrap();
    sim.evict_pod("default", &first_name);
    settle(&sim).await;
    let evicted = pods.get(&first_name).await.unwrap();
    let st = evicted.status.clone().unwrap();
    assert_eq!(
        (st.phase.as_deref(), st.reason.as_deref()),
        (Some("Failed"), Some("Evicted"))
    );
    assert!(
        st.message
            .unwrap()
            .starts_with("The node was low on resource: memory.")
    );
    assert!(!ready(&evicted));
    let ps = pods_of(&pods, "web").await;
    assert_eq!(ps.len(), 2);
    assert_eq!(ps.iter().filter(|p| ready(p)).count(), 1);
    assert_eq!(rss.get("web").await.unwrap().status.unwrap().replicas, 1);
    sim.gc_failed_pods();
    settle(&sim).await;
    assert_eq!(pods_of(&pods, "web").await.len(), 1);
}

// Scaling down deletes surplus active pods, not-ready ones first.
#[tokio::test(flavor = "multi_thread")]
async fn surplus_pods_are_deleted() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let c = client(&sim).await;
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    rss.create(&PostParams::default(), &rs("web", 3))
        .await
        .unwrap();
    settle(&sim).await;
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let victim = pods_of(&pods, "web").await[1]
        .metadata
        .name
        .clone()
        .unwrap();
    sim.set_pod_phase("default", &victim, "Pending");
    rss.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    settle(&sim).await;
    let names: Vec<String> = pods_of(&pods, "web")
        .await
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(!names.contains(&victim));
    let rs_now = rss.get("web").await.unwrap();
    assert_eq!(rs_now.metadata.generation, Some(2));
    assert_eq!(rs_now.status.unwrap().observed_generation, Some(2));
}

// Among ready pods, a lower `controller.kubernetes.io/pod-deletion-cost` goes first, before
// age is considered (the real controller's rule 4; pinned on the real control plane by
// host/tests/real_cluster.rs). Each pod in turn is the costly one and survives.
#[tokio::test(flavor = "multi_thread")]
async fn the_pod_with_the_lower_deletion_cost_goes_first() {
    for keep in 0..2 {
        let sim = Sim::start(SimConfig::default()).await.unwrap();
        let c = client(&sim).await;
        let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
        rss.create(&PostParams::default(), &rs("web", 2))
            .await
            .unwrap();
        settle(&sim).await;
        let pods: Api<Pod> = Api::namespaced(c, "default");
        let kept = pods_of(&pods, "web").await[keep]
            .metadata
            .name
            .clone()
            .unwrap();
        let cost = json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "100"}}});
        pods.patch(&kept, &PatchParams::default(), &Patch::Merge(&cost))
            .await
            .unwrap();
        rss.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
        settle(&sim).await;
        let names: Vec<String> = pods_of(&pods, "web")
            .await
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect();
        assert_eq!(names, [kept], "keep {keep}");
    }
}

// A terminating pod (deletionTimestamp set) is not counted: the controller replaces it before it is gone.
#[tokio::test(flavor = "multi_thread")]
async fn terminating_pods_are_not_counted() {
    let cfg = SimConfig {
        pod_termination: Duration::from_secs(3600),
        ..SimConfig::default()
    };
    let sim = Sim::start(cfg).await.unwrap();
    let c = client(&sim).await;
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    rss.create(&PostParams::default(), &rs("web", 1))
        .await
        .unwrap();
    settle(&sim).await;
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let old = pods_of(&pods, "web").await.remove(0).metadata.name.unwrap();
    let deleted = pods
        .delete(&old, &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(deleted.metadata.deletion_grace_period_seconds, Some(30));
    settle(&sim).await;
    let ps = pods_of(&pods, "web").await;
    assert_eq!(ps.len(), 2);
    assert!(
        pods.get(&old)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let zero = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete(&old, &zero).await.unwrap();
    assert_eq!(status(pods.get(&old).await).code, 404);
}

// Deleting a ReplicaSet with Background or Foreground propagation removes its pods; Orphan keeps them unowned.
#[tokio::test(flavor = "multi_thread")]
async fn delete_propagation() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let c = client(&sim).await;
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c, "default");
    for (name, dp) in [
        ("bg", DeleteParams::background()),
        ("fg", DeleteParams::foreground()),
    ] {
        rss.create(&PostParams::default(), &rs(name, 2))
            .await
            .unwrap();
        settle(&sim).await;
        assert_eq!(pods_of(&pods, name).await.len(), 2);
        rss.delete(name, &dp).await.unwrap();
        settle(&sim).await;
        assert!(pods_of(&pods, name).await.is_empty(), "{name}");
    }
    rss.create(&PostParams::default(), &rs("or", 2))
        .await
        .unwrap();
    settle(&sim).await;
    rss.delete("or", &DeleteParams::orphan()).await.unwrap();
    settle(&sim).await;
    let left = pods_of(&pods, "or").await;
    assert_eq!(left.len(), 2);
    assert!(left.iter().all(|p| {
        p.metadata
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty)
    }));
}

// A pod that fits no node stays Pending with PodScheduled=False/Unschedulable in the scheduler's words.
#[tokio::test(flavor = "multi_thread")]
async fn unschedulable_message() {
    let cfg = SimConfig {
        nodes: vec![
            NodeSpec::new("cp").taint("node-role.kubernetes.io/control-plane", "", "NoSchedule"),
            NodeSpec::new("w1").cpu("2"),
            NodeSpec::new("w2").cpu("2"),
        ],
        ..SimConfig::default()
    };
    let sim = Sim::start(cfg).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let p: Pod = typed(
        json!({"metadata": {"name": "big"}, "spec": {"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": "3"}}}]}}),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    settle(&sim).await;
    let got = pods.get("big").await.unwrap();
    let st = got.status.unwrap();
    assert_eq!(st.phase.as_deref(), Some("Pending"));
    let cond = st
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    assert_eq!(
        cond.message.as_deref(),
        Some(
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        )
    );
    // Re-evaluated when nodes change.
    sim.add_node(NodeSpec::new("big").cpu("8"));
    settle(&sim).await;
    let got = pods.get("big").await.unwrap();
    assert_eq!(got.spec.as_ref().unwrap().node_name.as_deref(), Some("big"));
    assert!(ready(&got));
}

// The scheduler honours nodeSelector and tolerations.
#[tokio::test(flavor = "multi_thread")]
async fn node_selector_and_tolerations() {
    let cfg = SimConfig {
        nodes: vec![
            NodeSpec::new("gpu")
                .taint("gpu", "yes", "NoSchedule")
                .label("accel", "gpu"),
            NodeSpec::new("plain"),
        ],
        ..SimConfig::default()
    };
    let sim = Sim::start(cfg).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let mk = |name: &str, tolerate: bool| -> Pod {
        let mut spec =
            json!({"nodeSelector": {"accel": "gpu"}, "containers": [{"name": "c", "image": "i"}]});
        if tolerate {
            spec["tolerations"] = json!([{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]);
        }
        typed(json!({"metadata": {"name": name}, "spec": spec}))
    };
    pods.create(&PostParams::default(), &mk("tol", true))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &mk("intol", false))
        .await
        .unwrap();
    settle(&sim).await;
    assert_eq!(
        pods.get("tol")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .as_deref(),
        Some("gpu")
    );
    let cond = pods
        .get("intol")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap()
        .remove(0);
    assert_eq!(
        cond.message.as_deref(),
        Some(
            "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {gpu: yes}. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );
}

// A scheduled pod becomes Running and Ready only after the kubelet delay, with IPs and container statuses.
#[tokio::test(flavor = "multi_thread")]
async fn ready_after_kubelet_delay() {
    let cfg = SimConfig {
        kubelet_delay: Duration::from_secs(3600),
        ..SimConfig::default()
    };
    let sim = Sim::start(cfg).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    pods.create(&PostParams::default(), &bare_pod("slow", "x"))
        .await
        .unwrap();
    settle(&sim).await;
    let p = pods.get("slow").await.unwrap();
    assert!(p.spec.as_ref().unwrap().node_name.is_some());
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert!(!ready(&p));

    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    pods.create(&PostParams::default(), &bare_pod("fast", "x"))
        .await
        .unwrap();
    settle(&sim).await;
    let p = pods.get("fast").await.unwrap();
    let st = p.status.clone().unwrap();
    assert_eq!(st.phase.as_deref(), Some("Running"));
    assert!(ready(&p));
    let node = p.spec.unwrap().node_name.unwrap();
    let internal = format!("10.0.0.1{}", node.trim_start_matches("node-"));
    assert_eq!(st.host_ip.as_deref(), Some(internal.as_str()));
    assert!(st.pod_ip.is_some() && st.start_time.is_some());
    assert!(st.container_statuses.unwrap().iter().all(|c| c.ready));
}

// Removing a node deletes its pods (as pod GC does for orphans); the ReplicaSet replaces them elsewhere.
#[tokio::test(flavor = "multi_thread")]
async fn node_removal() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let c = client(&sim).await;
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    rss.create(&PostParams::default(), &rs("web", 6))
        .await
        .unwrap();
    settle(&sim).await;
    sim.remove_node("node-1");
    settle(&sim).await;
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let ps = pods_of(&pods, "web").await;
    assert_eq!(ps.len(), 6);
    assert!(
        ps.iter()
            .all(|p| p.spec.as_ref().unwrap().node_name.as_deref() != Some("node-1") && ready(p))
    );
    assert!(sim.get("nodes", None, "node-1").is_none());
}

// Pods that do not fit because the node is full stay Pending with "Insufficient memory".
#[tokio::test(flavor = "multi_thread")]
async fn requests_fill_nodes() {
    let cfg = SimConfig {
        nodes: vec![NodeSpec::new("n").memory("1Gi")],
        ..SimConfig::default()
    };
    let sim = Sim::start(cfg).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    for name in ["a", "b", "c"] {
        let p: Pod = typed(
            json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i",
            "resources": {"limits": {"memory": "400Mi"}}}]}}),
        );
        pods.create(&PostParams::default(), &p).await.unwrap();
        settle(&sim).await;
    }
    let c = pods.get("c").await.unwrap().status.unwrap();
    assert_eq!(c.phase.as_deref(), Some("Pending"));
    assert!(
        c.conditions.unwrap()[0]
            .message
            .as_deref()
            .unwrap()
            .starts_with("0/1 nodes are available: 1 Insufficient memory.")
    );
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    settle(&sim).await;
    assert_eq!(
        pods.get("c")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Running")
    );
}
