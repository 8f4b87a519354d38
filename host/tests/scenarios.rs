//! The scenarios of issue 4, end to end: the host library over real HTTP, through the real kube
//! client, against the simulated API with the jumppod policy as its admission webhook.

use jumppod_host::resolve;
use jumppod_sim::{Fault, NodeSpec, SimConfig};
use jumppod_testkit::both::{Cluster, upgrade};
use jumppod_testkit::*;
use rstest::rstest;
use serde_json::json;
use std::time::Duration;

jumppod_testkit::ensure_scenarios!(sim);
jumppod_testkit::placement_scenarios!(sim);
jumppod_testkit::upgrade_scenarios!(sim);

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

/// 3. A finished bare pod (Evicted, or Succeeded) is deleted (host/testkit/src/both/upgrade.rs).
#[rstest]
#[case::evicted("Failed")]
#[case::succeeded("Succeeded")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_bare_pod_is_deleted_and_the_replicasets_pod_takes_over(#[case] phase: &str) {
    upgrade::a_finished_bare_pod_is_deleted(&Cluster::sim().await, phase, 30061).await;
}

/// 9. An older dstack server in the loop: each job recreates the Service and fails; the
/// policy's mutation lets the ReplicaSet delete its pod as surplus
/// (host/testkit/src/both/upgrade.rs).
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
    upgrade::an_older_server_in_the_loop_recreates_the_service_and_fails_each_job(
        &Cluster::sim().await,
        release,
        port,
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
