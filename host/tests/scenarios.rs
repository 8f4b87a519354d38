//! The scenarios of issue 4, end to end: the host library over real HTTP, through the real kube
//! client, against the simulated API with the jumppod policy as its admission webhook.

mod common;

use common::both::{self, Cluster};
use common::*;
use jumppod_host::resolve;
use jumppod_sim::{Fault, NodeSpec, SimConfig};
use rstest::rstest;
use serde_json::json;
use std::time::Duration;

/// 1. An empty namespace (common/both.rs, on both backends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_namespace_gets_a_replicaset_and_a_service_and_resolves_once_ready() {
    both::an_empty_namespace_gets_a_replicaset_and_a_service(&Cluster::sim().await).await;
}

/// Without `hostname`, the proxy is the ExternalIP of the pod's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_hostname_the_proxy_is_the_external_ip_of_the_pods_node() {
    let sim = start().await;
    let config = config("");
    ensure(&sim, &config).await.unwrap();
    sim.settle().await;
    let report = resolve::resolve(&kube(&sim).await, &config).await.unwrap();
    let pod = sim.get("pods", Some(NS), &report.proxy.pod).unwrap();
    let node = sim
        .get("nodes", None, pod["spec"]["nodeName"].as_str().unwrap())
        .unwrap();
    let external = node["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "ExternalIP")
        .unwrap()["address"]
        .clone();
    assert_eq!(json!(report.proxy.hostname), external);
}

/// 2. A running bare pod with the current labels is adopted (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_bare_pod_with_current_labels_is_adopted_and_the_service_kept() {
    both::a_running_bare_pod_with_current_labels_is_adopted(&Cluster::sim().await).await;
}

/// 3. A finished bare pod (Evicted, or Succeeded) is deleted (common/both.rs).
#[rstest]
#[case::evicted("Failed")]
#[case::succeeded("Succeeded")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_bare_pod_is_deleted_and_the_replicasets_pod_takes_over(#[case] phase: &str) {
    both::a_finished_bare_pod_is_deleted(&Cluster::sim().await, phase, 30061).await;
}

/// 4. A running pre-#3891 pod and its Service: left alone, then replaced on the same NodePort
/// (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_3891_pod_is_left_alone_then_its_service_is_recreated_on_the_same_port() {
    both::a_pre_3891_pod_is_left_alone_then_its_service_recreated(&Cluster::sim().await).await;
}

/// 5. A finished pre-#3891 pod makes `resolve` fail at once (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_pre_3891_pod_makes_resolve_fail_at_once() {
    both::a_finished_pre_3891_pod_makes_resolve_fail_at_once(&Cluster::sim().await).await;
}

/// 6. The ReplicaSet's pod evicted (common/both.rs), or its node removed (the simulator only:
/// on the shared real control plane a removed node would take other tests' pods): replaced;
/// `resolve` picks the ready one; the NodePort is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicasets_pod_is_replaced_on_the_same_node_port_after_an_eviction() {
    both::an_evicted_replicaset_pod_is_replaced_on_the_same_node_port(&Cluster::sim().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicasets_pod_is_replaced_on_the_same_node_port_after_its_node_is_removed() {
    both::the_replicasets_pod_is_replaced_after_its_node_is_removed(Cluster::sim().await).await;
}

/// 7. An unschedulable jump pod is reported with the scheduler's message (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unschedulable_jump_pod_is_reported_with_the_schedulers_reason() {
    both::an_unschedulable_jump_pod_is_reported_with_the_schedulers_message(&Cluster::sim().await)
        .await;
}

/// 7b. The ReplicaSet controller cannot create the pod (a LimitRange refuses it):
/// reported with the API's message (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_the_replicaset_cannot_create_are_reported_with_the_apis_message() {
    both::pods_the_replicaset_cannot_create_are_reported(&Cluster::sim().await).await;
}

/// 7c. The kubelet cannot pull the image: reported with its message (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_the_kubelet_cannot_pull_is_reported_with_its_message() {
    both::an_image_the_kubelet_cannot_pull_is_reported_with_its_message(&Cluster::sim().await)
        .await;
}

/// 7d. `gpu_tolerations` on tainted GPU nodes (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_tolerations_let_the_jump_pod_run_on_tainted_gpu_nodes() {
    both::gpu_tolerations_let_the_jump_pod_run_on_tainted_gpu_nodes(Cluster::sim().await).await;
}

/// 7e. A pre-#3891 pod stranded on a dead node does not pin the old Service (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_3891_pod_stranded_on_a_dead_node_does_not_pin_the_old_service() {
    both::a_pre_3891_pod_stranded_on_a_dead_node_does_not_pin_the_old_service(Cluster::sim().await)
        .await;
}

/// 8a. 50 concurrent `ensure` calls make one of each (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_ensures_make_one_replicaset_and_one_service() {
    both::fifty_concurrent_ensures_make_one_of_each(&Cluster::sim().await).await;
}

/// The registry's order: a Service's port before its name (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_created_again_is_refused_for_its_port_before_its_name() {
    both::a_service_created_again_is_refused_for_its_port_before_its_name(&Cluster::sim().await)
        .await;
}

/// 8b. Two hosts racing through the upgrade path (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_racing_through_the_upgrade_keep_one_service_on_the_old_port() {
    both::two_hosts_racing_through_the_upgrade_keep_one_service_on_the_old_port(
        &Cluster::sim().await,
    )
    .await;
}

/// 9. An older dstack server in the loop: each job recreates the Service and fails; the
/// policy's mutation lets the ReplicaSet delete its pod as surplus (common/both.rs).
#[rstest]
#[case::pre_3891_without_a_port(Release::Pre3891, None)]
#[case::pre_3891_with_a_port(Release::Pre3891, Some(30028))]
#[case::post_3891_without_a_port(Release::Post3891, None)]
#[case::post_3891_with_a_port(Release::Post3891, Some(30025))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_server_in_the_loop_recreates_the_service_and_fails_each_job(
    #[case] release: Release,
    #[case] port: Option<i32>,
) {
    both::an_older_server_in_the_loop_recreates_the_service_and_fails_each_job(
        &Cluster::sim().await,
        release,
        port,
    )
    .await;
}

/// 9b. Without the policy a pre-#3891 server's pod runs beside the ReplicaSet's
/// (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_policy_a_pre_3891_servers_pod_runs_beside_the_replicasets() {
    both::without_the_policy_a_pre_3891_servers_pod_runs_beside_the_replicasets(
        &Cluster::sim_without_the_policy().await,
    )
    .await;
}

/// 11a. Faults on each call of a first ensure: retried, end state correct.
#[rstest]
#[case::get_replicaset_429("GET", "/replicasets/", Fault::status("GET", "/replicasets/", 429, 2))]
#[case::get_service_500("GET", "/services/", Fault::status("GET", "/services/", 500, 2))]
#[case::get_namespace_503(
    "GET",
    "/api/v1/namespaces/dstack",
    Fault::status("GET", "/api/v1/namespaces/dstack", 503, 1)
)]
#[case::list_pods_dropped("GET", "/pods", Fault::drop_connection("GET", "/pods", 1))]
#[case::create_namespace_stalled(
    "POST",
    "/api/v1/namespaces",
    Fault::stall("POST", "/api/v1/namespaces", Duration::from_secs(2), 1)
)]
#[case::create_replicaset_500_after_it_happened(
    "POST",
    "/replicasets",
    Fault::status_after("POST", "/replicasets", 500, 1)
)]
#[case::create_replicaset_409_conflict(
    "POST",
    "/replicasets",
    Fault::status("POST", "/replicasets", 409, 1)
)]
#[case::create_service_dropped("POST", "/services", Fault::drop_connection("POST", "/services", 1))]
#[case::create_service_429("POST", "/services", Fault::status("POST", "/services", 429, 1))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_faults_on_a_first_ensure_are_retried(
    #[case] method: &str,
    #[case] path: &str,
    #[case] fault: Fault,
) {
    let sim = start().await;
    sim.inject(fault);
    ensure(&sim, &config("")).await.unwrap();
    assert!(
        sim.count(|r| r.method == method && r.path.contains(path)) >= 2,
        "the faulty call was retried: {:#?}",
        sim.requests()
    );
    assert!(sim.get("namespaces", None, NS).is_some());
    assert_eq!(replicasets(&sim).len(), 1);
    assert_eq!(sim.list("services", Some(NS)).len(), 1);
}

/// 11a'. A 429 as API Priority and Fairness sends it (plain text, `Retry-After: 2`): the retry
/// waits the two seconds the server asked for, not the client's 20 ms backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retried_after_the_servers_retry_after() {
    let sim = start().await;
    sim.inject(Fault::too_many_requests("GET", "/replicasets/", 2, 1));
    let started = std::time::Instant::now();
    ensure(&sim, &config("")).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "retried after {:?}, before the 2 s the server asked for",
        started.elapsed()
    );
    assert_eq!(
        sim.count(|r| r.method == "GET" && r.path.contains("/replicasets/") && r.status == 429),
        1
    );
    assert_eq!(replicasets(&sim).len(), 1);
}

/// 11b. Faults on the deletes of the upgrade path: retried; only the named objects go; the
/// Service comes back on the old port.
#[rstest]
#[case::delete_pod_503(Fault::status("DELETE", "/pods/", 503, 1))]
#[case::delete_pod_dropped(Fault::drop_connection("DELETE", "/pods/", 1))]
#[case::delete_service_500_after_it_happened(Fault::status_after("DELETE", "/services/", 500, 1))]
#[case::delete_service_stalled(Fault::stall("DELETE", "/services/", Duration::from_secs(2), 1))]
#[case::create_service_after_delete_503(Fault::status("POST", "/services", 503, 2))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_faults_on_the_upgrade_path_are_retried(#[case] fault: Fault) {
    let sim = start().await;
    namespace(&sim, NS);
    seed_bare_pod(&sim, "Failed", false);
    seed_service(&sim, 30225, false);
    // A pod of another application, named nothing like ours, must survive.
    sim.seed(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}}));
    sim.inject(fault);
    ensure(&sim, &config("")).await.unwrap();
    assert!(sim.get("pods", Some(NS), NAME).is_none());
    assert!(sim.get("pods", Some(NS), "web").is_some());
    let svc = service(&sim);
    assert_eq!(node_port(&svc), 30225);
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME})
    );
}

/// 11c. Permanent errors are reported with what to do, and nothing after them is written.
#[rstest]
#[case::forbidden_by_rbac(
    Fault::refusal("POST", "/replicasets", 403, r#"replicasets.apps is forbidden: User "dstack" cannot create resource "replicasets" in API group "apps" in the namespace "dstack""#, 1),
    5,
    "`create` verb on `replicasets`"
)]
#[case::refused_by_a_quota(
    Fault::refusal("POST", "/replicasets", 403, r#"replicasets.apps "x" is forbidden: exceeded quota: q, requested: count/replicasets.apps=1, used: count/replicasets.apps=1, limited: count/replicasets.apps=1"#, 1),
    5,
    "exceeded quota: q"
)]
#[case::refused_for_another_reason(
    Fault::status("POST", "/replicasets", 403, 1),
    5,
    "the request was refused"
)]
#[case::invalid_service_create(Fault::status("POST", "/services", 422, 1), 5, "create services")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_are_reported(
    #[case] fault: Fault,
    #[case] code: i32,
    #[case] text: &str,
) {
    let sim = start().await;
    sim.inject(fault);
    sim.clear_requests();
    let err = ensure(&sim, &config("")).await.unwrap_err();
    assert_eq!(err.exit_code(), code, "{err}");
    assert!(err.to_string().contains(text), "{err}");
    // Only RBAC's own refusal sends the operator to the RBAC rules.
    assert_eq!(
        err.to_string().contains("jumppod rbac --namespace"),
        text.contains("verb on"),
        "{err}"
    );
    // The refused write is the last request: not retried, nothing written after it.
    let requests = sim.requests();
    let refused = requests
        .iter()
        .rposition(|r| r.status == 403 || r.status == 422)
        .expect("the refused request is in the log");
    assert_eq!(refused, requests.len() - 1, "{requests:#?}");
    assert_eq!(
        requests.iter().filter(|r| r.method == "POST").count(),
        writes(&requests).len(),
        "only creates were sent"
    );
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.status == 403 || r.status == 422)
            .count(),
        1,
        "a permanent error is not retried: {requests:#?}"
    );
}

/// 11d. Unavailable until the deadline: gives up with a message, exit code 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_down_past_the_deadline_is_reported() {
    let sim = start().await;
    sim.inject(Fault::status("GET", "", 503, 10_000));
    let mut kube = kube(&sim).await;
    kube.deadline = std::time::Instant::now() + Duration::from_millis(300);
    let err = jumppod_host::ensure(&kube, &config(""), &gate())
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains("kept failing"), "{err}");
    assert!(writes(&sim.requests()).is_empty());
}

/// 11e. Nothing deleted by mistake: a pod replaced between observe and apply survives
/// (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_replaced_between_observe_and_apply_is_not_deleted() {
    both::a_pod_replaced_between_observe_and_apply_is_left_alone(&Cluster::sim().await).await;
}

/// 12. A configuration below the floor: rejected by the policy before any write
/// (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_below_the_floor_is_rejected_by_the_policy_before_any_write() {
    both::a_config_below_the_floor_is_rejected_by_the_policy_before_any_write(
        &Cluster::sim().await,
    )
    .await;
}

/// Drift: reported with kubectl commands, not rewritten (common/both.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicaset_with_older_resources_is_reported_not_rewritten() {
    both::a_replicaset_with_older_resources_is_reported_not_rewritten(&Cluster::sim().await).await;
}

/// Without any ExternalIP and no `hostname`, resolve asks for `hostname`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_any_external_ip_resolve_asks_for_a_hostname() {
    let sim = jumppod_sim::Sim::start(SimConfig {
        nodes: vec![NodeSpec::new("n1")],
        ..sim_config()
    })
    .await
    .unwrap();
    let config = config("");
    ensure(&sim, &config).await.unwrap();
    sim.settle().await;
    let err = resolve::resolve(&kube(&sim).await, &config)
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("`hostname`"), "{err}");
}

/// 4b. The old NodePort taken by another Service between the delete and the create of the
/// upgrade: ensure stops and says so, naming the port and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_node_port_taken_in_the_meantime_is_reported_clearly() {
    let sim = std::sync::Arc::new(start().await);
    namespace(&sim, NS);
    seed_bare_pod(&sim, "Failed", false);
    seed_service(&sim, 30227, false);
    // Hold our create back long enough for another Service to take the port.
    sim.inject(Fault::stall("POST", "/services", Duration::from_secs(2), 3));
    let task = {
        let sim = sim.clone();
        tokio::spawn(async move { ensure(&sim, &config("")).await })
    };
    let waited = std::time::Instant::now();
    while sim.count(|r| r.method == "DELETE" && r.path.contains("/services/")) == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "ensure never deleted the old Service: {:#?}",
            sim.requests()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sim.create(
        "services",
        Some(NS),
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "intruder"},
            "spec": {"type": "NodePort", "selector": {"app": "x"},
                     "ports": [{"port": 80, "targetPort": 80, "nodePort": 30227}]}
        }),
    )
    .expect("the port is free after the delete");
    let err = task.await.unwrap().unwrap_err();
    let text = err.to_string();
    assert_eq!(err.exit_code(), 5, "{text}");
    assert!(text.contains("NodePort 30227"), "{text}");
    assert!(
        text.contains("taken by another Service in the meantime"),
        "{text}"
    );
}
