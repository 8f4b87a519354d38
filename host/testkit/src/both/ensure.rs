//! What `ensure` does in a namespace of its own: the first ensure, the steady state, 50 at
//! once, a configuration below the floor, drift.

use super::*;

/// Scenario 1: an empty namespace: namespace, ReplicaSet and Service are created; `resolve` gives
/// host:port once the pod is Ready; then ensure and resolve cost 2 requests each.
pub async fn an_empty_namespace_gets_a_replicaset_and_a_service(cluster: &Cluster) {
    let config = cluster.config("hostname: jump.example.com");
    let report = cluster.ensure(&config).await.unwrap();
    assert_eq!(report.applied.len(), 3, "{report}");
    assert!(report.policy_checked);
    let rs = cluster.get("replicasets", NAME).await.expect("replicaset");
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/instance": NAME})
    );
    let svc = cluster.service().await;
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME})
    );
    assert_eq!(svc["spec"]["type"], "NodePort");

    // Before the kubelet has run the pod: not ready, a clear error. Only the simulator can
    // hold its kubelet back; a real one may have run the pod already.
    if cluster.is_sim() {
        let err = cluster.resolve(&config).await.unwrap_err();
        assert!(matches!(err, HostError::NotReady(_)), "{err}");
    }

    cluster.settle().await;
    let pods = cluster.active_pods().await;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["status"]["qosClass"], "Guaranteed");
    let (proxy, requests) = cluster
        .requests_of(async { cluster.resolve(&config).await.unwrap() })
        .await;
    assert_eq!(proxy.proxy.hostname, "jump.example.com");
    assert_eq!(i64::from(proxy.proxy.port), node_port(&svc));
    assert_eq!(proxy.proxy.username, "root");
    assert!(!proxy.proxy.bare);
    assert_eq!(requests.len(), 2, "resolve: {requests:#?}");

    let (report, requests) = cluster.requests_of(cluster.ensure(&config)).await;
    let report = report.unwrap();
    assert!(report.applied.is_empty(), "{report}");
    assert!(!report.policy_checked, "nothing to write, nothing to check");
    assert_eq!(requests.len(), 2, "steady-state ensure: {requests:#?}");
}

/// Scenario 12: a configuration below the floor is rejected by the policy before any write,
/// naming the field, the value and the floor.
pub async fn a_config_below_the_floor_is_rejected_by_the_policy_before_any_write(
    cluster: &Cluster,
) {
    let (result, requests) = cluster
        .requests_of(cluster.ensure(&cluster.config("cpu: 50m")))
        .await;
    let err = result.unwrap_err();
    assert_eq!(err.exit_code(), 3);
    let text = err.to_string();
    assert!(
        text.contains("cpu") && text.contains("50m") && text.contains("100m"),
        "{text}"
    );
    assert!(text.contains("nothing was written"), "{text}");
    let writes: Vec<&String> = requests.iter().filter(|r| is_write(r)).collect();
    assert_eq!(writes, Vec::<&String>::new());
    assert!(!cluster.namespace_exists().await);
}

/// Drift: a ReplicaSet with older resources is reported with kubectl commands, not rewritten;
/// the steady state still costs 2 reads.
pub async fn a_replicaset_with_older_resources_is_reported_not_rewritten(cluster: &Cluster) {
    cluster
        .ensure(&cluster.config("cpu: 250m"))
        .await
        .expect("the first ensure");
    cluster.settle().await;
    let (report, requests) = cluster
        .requests_of(cluster.ensure(&cluster.config("")))
        .await;
    let report = report.expect("ensure");
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert!(!requests.iter().any(|r| is_write(r)), "{requests:#?}");
    let text = report.to_string();
    assert!(
        text.contains("resources.requests.cpu: found 250m, configured 500m"),
        "{text}"
    );
    let command = format!(
        "kubectl -n {} set resources replicaset {NAME}",
        cluster.ns()
    );
    assert!(text.contains(&command), "{text}");
}

/// Scenario 8a: 50 concurrent `ensure` calls: one ReplicaSet, one Service, one pod, no error.
pub async fn fifty_concurrent_ensures_make_one_of_each(cluster: &Cluster) {
    let config = cluster.config("");
    let gate = gate();
    let kube = cluster.kube().await;
    let calls = (0..50).map(|_| jumppod_host::ensure(&kube, &config, &gate));
    let (results, requests) = cluster.requests_of(futures::future::join_all(calls)).await;
    for r in &results {
        assert!(r.is_ok(), "{:?}", r.as_ref().err().map(ToString::to_string));
    }
    assert_eq!(cluster.list("replicasets").await.len(), 1);
    assert_eq!(cluster.list("services").await.len(), 1);
    cluster.settle().await;
    assert_eq!(cluster.active_pods().await.len(), 1);
    if let Some(sim) = cluster.as_sim() {
        let created = sim.count(|r| r.method == "POST" && r.status == 201);
        assert_eq!(
            created, 3,
            "namespace, replicaset, service created once each"
        );
    }
    assert!(
        requests.len() >= 100,
        "at least 2 reads per call: {}",
        requests.len()
    );
}

/// This file's scenarios on one backend (`both_tests!`): `ensure_scenarios!(sim)` in
/// `scenarios.rs`, `ensure_scenarios!(real)` in `real_cluster.rs`.
#[macro_export]
macro_rules! ensure_scenarios {
    ($on:ident) => {
        $crate::both_tests! { $on, ensure;
            an_empty_namespace_gets_a_replicaset_and_a_service:
                sim an_empty_namespace_gets_a_replicaset_and_a_service_and_resolves_once_ready
                    = sim(),
                /// A fresh namespace gets a Guaranteed jump pod; a steady-state ensure and a
                /// resolve cost 2 requests each in the audit log.
                real a_fresh_namespace_gets_a_guaranteed_jump_pod_and_the_steady_state_costs_two_requests
                    = real("rc-fresh");
            a_config_below_the_floor_is_rejected_by_the_policy_before_any_write:
                sim a_config_below_the_floor_is_rejected_by_the_policy_before_any_write
                    = sim(),
                real a_config_below_the_floor_is_rejected_by_the_policy_before_any_write
                    = real("rc-below-floor");
            a_replicaset_with_older_resources_is_reported_not_rewritten:
                sim a_replicaset_with_older_resources_is_reported_not_rewritten = sim(),
                real a_replicaset_with_older_resources_is_reported_not_rewritten
                    = real("rc-drift");
            fifty_concurrent_ensures_make_one_of_each:
                sim fifty_concurrent_ensures_make_one_replicaset_and_one_service = sim(),
                real fifty_concurrent_ensures_make_one_replicaset_and_one_service
                    = real("rc-fifty");
        }
    };
}
