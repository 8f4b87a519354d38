//! The upgrade from older dstack releases: bare pods and old Services adopted, deleted or
//! left alone, NodePorts kept, two hosts racing, an older server still running jobs, and
//! nothing deleted by mistake.

use super::*;

/// Scenario 2: a running bare pod with the current labels (a release after #3891): the ReplicaSet
/// adopts it, no second pod is started, the Service is kept.
pub async fn a_running_bare_pod_with_current_labels_is_adopted(cluster: &Cluster) {
    cluster.namespace().await;
    let bare = cluster.seed_bare_pod("Running", true).await;
    let svc = cluster.seed_service(30060, true).await;
    let config = cluster.config("hostname: h");
    let report = cluster.ensure(&config).await.unwrap();
    assert!(
        report.findings.contains(&Finding::BarePodAdoptable {
            pod: NAME.into(),
            adopted: false
        }),
        "{report}"
    );
    cluster.settle().await;
    let pods = cluster.active_pods().await;
    assert_eq!(pods.len(), 1, "no second pod: {pods:#?}");
    assert_eq!(pods[0]["metadata"]["name"], NAME);
    assert_eq!(uid(&pods[0]), uid(&bare), "the same pod, adopted");
    let owner = &pods[0]["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "ReplicaSet");
    assert_eq!(owner["controller"], true);
    assert_eq!(
        uid(&cluster.service().await),
        uid(&svc),
        "the Service is kept"
    );
    let proxy = cluster.resolve(&config).await.unwrap().proxy;
    assert_eq!((proxy.pod.as_str(), proxy.port), (NAME, 30060));
}

/// Scenario 3: a finished bare pod (Evicted, or Succeeded): deleted; the ReplicaSet's pod takes over.
pub async fn a_finished_bare_pod_is_deleted(cluster: &Cluster, phase: &str, port: i32) {
    cluster.namespace().await;
    let legacy = cluster.seed_bare_pod(phase, true).await;
    cluster.seed_service(port, true).await;
    let config = cluster.config("hostname: h");
    let report = cluster.ensure(&config).await.unwrap();
    assert!(
        report.applied.iter().any(|a| a
            .action
            .to_string()
            .starts_with(&format!("delete pod {NAME}"))),
        "{report}"
    );
    cluster.settle().await;
    let gone = cluster.get("pods", NAME).await;
    assert!(
        gone.is_none_or(|p| uid(&p) != uid(&legacy)),
        "the finished pod is deleted"
    );
    let proxy = cluster.resolve(&config).await.unwrap().proxy;
    assert!(proxy.pod.starts_with(&format!("{NAME}-")), "{proxy:?}");
    assert_eq!(proxy.port, port);
}

/// Scenario 4: a running pre-#3891 pod with its old-selector Service on NodePort N: left alone, not
/// adopted; `resolve` falls back to it; once it is evicted, `ensure` deletes it and recreates
/// the Service with the current selector on N.
pub async fn a_pre_3891_pod_is_left_alone_then_its_service_recreated(cluster: &Cluster) {
    cluster.namespace().await;
    let legacy = cluster.seed_bare_pod("Running", false).await;
    let old_svc = cluster.seed_service(30063, false).await;
    let config = cluster.config("hostname: h");

    let report = cluster.ensure(&config).await.unwrap();
    assert_eq!(report.applied.len(), 1, "only the ReplicaSet: {report}");
    assert!(report.findings.contains(&Finding::LegacyServiceKept {
        service: SVC.into(),
        node_port: Some(30063)
    }));
    cluster.settle().await;
    let pod = cluster.get("pods", NAME).await.expect("left alone");
    assert_eq!(uid(&pod), uid(&legacy));
    assert!(
        pod["metadata"]["ownerReferences"].is_null(),
        "a pre-#3891 pod is not adopted"
    );
    assert_eq!(uid(&cluster.service().await), uid(&old_svc));
    let proxy = cluster.resolve(&config).await.unwrap().proxy;
    assert!(
        proxy.bare,
        "the Service still routes to the legacy pod: {proxy:?}"
    );
    assert_eq!((proxy.pod.as_str(), proxy.port), (NAME, 30063));

    // A second ensure changes nothing while the legacy pod runs.
    let report = cluster.ensure(&config).await.unwrap();
    assert!(report.applied.is_empty(), "{report}");

    cluster.evict(NAME).await;
    let report = cluster.ensure(&config).await.unwrap();
    let actions: Vec<String> = report
        .applied
        .iter()
        .map(|a| a.action.to_string())
        .collect();
    assert_eq!(actions.len(), 3, "{report}");
    assert!(
        actions[0].starts_with(&format!("delete pod {NAME}")),
        "{report}"
    );
    assert!(
        actions[1].starts_with(&format!("delete service {SVC}")),
        "{report}"
    );
    assert!(
        actions[2].contains("on NodePort 30063 (kept: running jobs use it)"),
        "{report}"
    );
    let svc = cluster.service().await;
    assert_ne!(uid(&svc), uid(&old_svc), "recreated");
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME})
    );
    assert_eq!(node_port(&svc), 30063, "the same NodePort");
    let proxy = cluster.resolve(&config).await.unwrap().proxy;
    assert_eq!(proxy.port, 30063);
    assert!(!proxy.bare);
}

/// Scenario 5: a finished pre-#3891 pod: `resolve` fails at once with a clear error, in 3 requests.
pub async fn a_finished_pre_3891_pod_makes_resolve_fail_at_once(cluster: &Cluster) {
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", false).await;
    cluster.seed_service(30064, false).await;
    let config = cluster.config("hostname: h");
    let (result, requests) = cluster.requests_of(cluster.resolve(&config)).await;
    let err = result.unwrap_err();
    let text = err.to_string();
    assert_eq!(err.exit_code(), 4);
    assert!(text.contains("has finished (Failed, Evicted)"), "{text}");
    assert!(
        text.contains("never replaced") && text.contains("jumppod ensure"),
        "{text}"
    );
    assert_eq!(
        requests.len(),
        3,
        "pods, service, then the legacy pod: {requests:#?}"
    );
}

/// Scenario 7e: a pre-#3891 pod left terminating and not Ready on a node that stopped
/// answering (it may stay so for hours) does not pin the old Service: ensure replaces it with
/// the current selector on the same NodePort, and leaves the pod itself alone.
pub async fn a_pre_3891_pod_stranded_on_a_dead_node_does_not_pin_the_old_service(
    cluster: &Cluster,
) {
    cluster.namespace().await;
    cluster.seed_stranded_legacy_pod().await;
    cluster.seed_service(30024, false).await;
    let report = cluster.ensure(&cluster.config("")).await.expect("ensure");
    assert!(
        report
            .findings
            .contains(&Finding::LegacyPodStranded { pod: NAME.into() }),
        "{report}"
    );
    let svc = cluster.service().await;
    assert_eq!(node_port(&svc), 30024, "the same NodePort");
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME}),
        "the current selector"
    );
    let pod = cluster
        .get("pods", NAME)
        .await
        .expect("the stranded pod is left alone");
    assert!(pod["metadata"]["deletionTimestamp"].is_string());
}

/// Scenario 11e: nothing deleted by mistake. A finished bare pod replaced under the same name
/// between observe and apply survives: the delete carries the uid it was decided on, and the
/// refusal (the real registry's 409 `the UID in the precondition ... does not match`) is taken
/// for "replaced meanwhile" at once, not retried.
pub async fn a_pod_replaced_between_observe_and_apply_is_left_alone(cluster: &Cluster) {
    use jumppod_host::apply::{ActionOutcome, apply};
    use jumppod_host::observe;
    use jumppod_plan::action::Action;
    use jumppod_plan::manifest::Desired;
    use jumppod_plan::planner as plan;
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", true).await;
    let config = cluster.config("");
    let kube = cluster.kube().await;
    let observed = observe::for_ensure(&kube, &config).await.expect("observe");
    let planned = plan::plan(&config, &Desired::from_config(&config), &observed);
    let deletes_the_pod = |a: &Action| matches!(a, Action::DeletePod { .. });
    assert!(
        planned.actions.iter().any(deletes_the_pod),
        "{:?}",
        planned.actions
    );
    // Meanwhile an older dstack recreates its pod under the same name.
    cluster.delete("pods", NAME).await;
    let replacement = cluster.seed_bare_pod("Running", true).await;
    let (applied, requests) = cluster
        .requests_of(apply(&kube, cluster.ns(), &planned.actions))
        .await;
    let applied = applied.expect("apply");
    let delete = applied
        .iter()
        .find(|a| deletes_the_pod(&a.action))
        .expect("the delete was tried");
    assert_eq!(delete.outcome, ActionOutcome::ReplacedMeanwhile);
    let pod_deletes = requests
        .iter()
        .filter(|r| r.to_lowercase().starts_with("delete ") && r.contains("/pods/"))
        .count();
    assert_eq!(
        pod_deletes, 1,
        "a refused precondition is not retried: {requests:#?}"
    );
    let pod = cluster
        .get("pods", NAME)
        .await
        .expect("the new pod survives");
    assert_eq!(pod["metadata"]["uid"], replacement["metadata"]["uid"]);
}

/// Scenario 8b: two hosts racing through the upgrade path: one Service on the old NodePort, no error.
pub async fn two_hosts_racing_through_the_upgrade_keep_one_service_on_the_old_port(
    cluster: &Cluster,
) {
    cluster.namespace().await;
    cluster.seed_bare_pod("Failed", false).await;
    cluster.seed_service(30065, false).await;
    let config = cluster.config("");
    let (a, b) = (cluster.kube().await, cluster.kube().await);
    let (gate_a, gate_b) = (gate(), gate());
    let (ra, rb) = tokio::join!(
        jumppod_host::ensure(&a, &config, &gate_a),
        jumppod_host::ensure(&b, &config, &gate_b)
    );
    ra.unwrap();
    rb.unwrap();
    let services = cluster.list("services").await;
    assert_eq!(services.len(), 1);
    assert_eq!(node_port(&services[0]), 30065);
    assert_eq!(
        services[0]["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME})
    );
    assert_eq!(cluster.list("replicasets").await.len(), 1);
}

/// The service registry allocates NodePorts before storage finds a name taken (found on the
/// real control plane by 8b, then taught to the simulator): a Service created again on the
/// NodePort its namesake holds is refused for the port (422), on a free port for the name
/// (409, the port released again). `apply` takes the 422 of its twin for "already existed".
pub async fn a_service_created_again_is_refused_for_its_port_before_its_name(cluster: &Cluster) {
    use jumppod_host::apply::{ActionOutcome, apply};
    use jumppod_plan::action::Action;
    use jumppod_plan::manifest::Desired;
    use k8s_openapi::api::core::v1::Service;
    use kube::Api;
    use kube::api::PostParams;

    cluster.namespace().await;
    cluster.seed_service(30066, true).await;
    let config = cluster.config("");
    let kube = cluster.kube().await;
    let api: Api<Service> = Api::namespaced(kube.client.clone(), cluster.ns());
    let desired = Desired::from_config(&config);
    let again = desired.service_on(Some(30066));
    let status = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.reason, s.message),
        other => panic!("not an API error: {other}"),
    };
    let (code, reason, message) = status(
        api.create(&PostParams::default(), &again)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(
        message.contains("provided port is already allocated"),
        "{message}"
    );

    let elsewhere = desired.service_on(Some(30067));
    let (code, reason, message) = status(
        api.create(&PostParams::default(), &elsewhere)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"), "{message}");
    let mut other = desired.service_on(Some(30067));
    other.metadata.name = Some("another-service".into());
    api.create(&PostParams::default(), &other)
        .await
        .expect("the port of the refused create is free again");

    let applied = apply(
        &kube,
        cluster.ns(),
        &[Action::CreateService {
            service: Box::new(again),
            keeps_port: Some(30066),
        }],
    )
    .await
    .unwrap();
    assert_eq!(applied[0].outcome, ActionOutcome::AlreadyExisted);
}

/// How long the ReplicaSet's pod has been ready, by the ready time the API recorded, before an
/// older server's first job on the real control plane. Here a time is the fact itself: the
/// ReplicaSet controller chooses between two ready pods by ⌊log2⌋ of the nanoseconds each has
/// been ready at the moment it compares them, from ready times recorded to the second
/// (LogarithmicScaleDown), and only when those buckets are equal by uid, a coin toss. 5 s
/// puts the ReplicaSet's pod in bucket 32 or above (2^32 ns = 4.29 s); the older server's pod
/// is compared within half a second of its creation (10-378 ms measured), so its recorded
/// ready time is under 2 s old (bucket 30 or below) and it is the one deleted. A jump pod that
/// has run for more than a few seconds is what the scenario is about; on the simulator its
/// controller deletes the older server's pod before its kubelet has run it.
const READY_BEFORE_THE_OLD_SERVERS_JOBS: Duration = Duration::from_secs(5);

/// Until the pod's Ready condition, as the API recorded it, is `age` old by this machine's
/// clock, the clock of the control plane's controllers too.
async fn until_ready_for(cluster: &Cluster, pod: &str, age: Duration) {
    let found = cluster.get("pods", pod).await.expect("the pod");
    let found: k8s_openapi::api::core::v1::Pod = serde_json::from_value(found).expect("a pod");
    let since = found
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time)
        .unwrap_or_else(|| panic!("pod {pod} is not Ready"))
        .0
        .as_second();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    let ready_at = Duration::from_secs(u64::try_from(since).expect("a ready time after 1970"));
    let ready_for = now.saturating_sub(ready_at);
    println!("pod {pod} ready for {ready_for:?}; waiting until it has been for {age:?}");
    tokio::time::sleep(age.saturating_sub(ready_for)).await;
}

/// Scenario 9: an older dstack server still running jobs after the upgrade, as it really
/// behaves: its `run_job` reads the jump pod by exact name, never finds the ReplicaSet's pod,
/// and on every job deletes the Service, creates it again (on a NodePort the cluster allocates
/// unless its `proxy_jump.port` is set) and creates a bare pod `<name>`, then looks for that pod
/// by name and fails. The policy's mutation, which the backend's admission applies on the
/// way in (on the real control plane `jumppod webhook`, called by the API server), gives the
/// bare pod the current labels, so the ReplicaSet controller adopts it and deletes it as
/// surplus (it keeps its older, ready pod); `ensure` reports the fight and, for a pre-#3891
/// server, puts the current selector back on the recreated Service's NodePort.
pub async fn an_older_server_in_the_loop_recreates_the_service_and_fails_each_job(
    cluster: &Cluster,
    release: Release,
    port: Option<i32>,
) {
    assert!(
        cluster.mutates_pods(),
        "a backend with the policy's admission"
    );
    let config = cluster.config(&match port {
        Some(p) => format!("hostname: h\nport: {p}"),
        None => "hostname: h".to_owned(),
    });
    cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let first_pod = cluster.resolve(&config).await.expect("resolve").proxy.pod;
    if !cluster.is_sim() {
        until_ready_for(cluster, &first_pod, READY_BEFORE_THE_OLD_SERVERS_JOBS).await;
    }
    let old = OldServer {
        namespace: cluster.ns().into(),
        release,
        port,
    };
    let kube = cluster.kube().await;
    let mut ports = vec![node_port(&cluster.service().await) as i32];
    for job in 0..3 {
        let started = std::time::Instant::now();
        let done = old_server_job(&kube, &old, || cluster.until_gone("pods", NAME)).await;
        println!(
            "old server job {job}: the surplus pod gone after {:?}",
            started.elapsed()
        );
        assert!(!done.untouched, "job {job}: {done:?}");
        assert!(done.service_deleted, "job {job}: {done:?}");
        assert!(
            matches!(done.pod_created, Some(Ok(_))),
            "job {job}: {done:?}"
        );
        assert!(
            done.final_read.is_none(),
            "job {job}: the bare pod was deleted as surplus: {done:?}"
        );
        assert!(!done.found_running(), "so the older server's job fails");
        let recreated_on = done
            .service_recreated
            .clone()
            .unwrap()
            .expect("the Service recreated");
        match port {
            Some(p) => assert_eq!(
                recreated_on, p,
                "a fixed proxy_jump.port keeps the NodePort"
            ),
            None => assert!(DYNAMIC_NODE_PORTS.contains(&recreated_on), "{recreated_on}"),
        }
        // The churn of one job: the old server's pod, created and deleted; the ReplicaSet
        // kept its ready pod and created none (a replacement would have another name).
        let active = cluster.active_pods().await;
        assert_eq!(active.len(), 1, "{active:#?}");
        assert_eq!(active[0]["metadata"]["name"], first_pod.as_str());

        let report = cluster.ensure(&config).await.expect("ensure");
        let fight = report
            .findings
            .iter()
            .find(|f| matches!(f, Finding::OlderServerFight { .. }))
            .unwrap_or_else(|| panic!("{report}"));
        if let Some(p) = port {
            let advice = format!("keep proxy_jump.port: {p} on every server");
            assert!(fight.to_string().contains(&advice), "{fight}");
        }
        let svc = cluster.service().await;
        assert_eq!(
            svc["spec"]["selector"],
            json!({"app.kubernetes.io/instance": NAME}),
            "ensure leaves the current selector: {report}"
        );
        let kept = format!("on NodePort {recreated_on} (kept");
        let rewritten = report
            .applied
            .iter()
            .any(|a| a.action.to_string().contains(&kept));
        assert_eq!(rewritten, release == Release::Pre3891, "{report}");
        assert_eq!(
            node_port(&svc) as i32,
            recreated_on,
            "on the NodePort the old server's Service got"
        );
        cluster.settle().await;
        let proxy = cluster.resolve(&config).await.expect("resolve").proxy;
        assert_eq!(
            (proxy.pod.as_str(), proxy.port),
            (first_pod.as_str(), recreated_on)
        );
        ports.push(recreated_on);
    }
    let distinct: std::collections::BTreeSet<i32> = ports.iter().copied().collect();
    match port {
        Some(_) => assert_eq!(distinct.len(), 1, "{ports:?}"),
        // Each job allocates a new NodePort: running jobs lose their proxy each time.
        None => assert!(distinct.len() > 1, "{ports:?}"),
    }
}

/// The NodePorts the allocator hands out when none is asked for: since
/// ServiceNodePortStaticSubrange (GA in 1.29) it picks at random above the static band kept
/// for ports asked for by number, `min(max(16, size/32), 128)` = 86 ports of 30000-32767.
pub const DYNAMIC_NODE_PORTS: std::ops::RangeInclusive<i32> = 30086..=32767;

/// Scenario 9b: without the policy a pre-#3891 server's bare pod keeps its old labels: the
/// ReplicaSet controller neither adopts nor deletes it, so it runs beside the ReplicaSet's pod
/// (two pods), its Service routes to it, and the server's next jobs find both by name and touch
/// nothing. `ensure` keeps the old Service while that pod runs and reports the fight; once the
/// pod is gone the Service gets the current selector on the same NodePort.
pub async fn without_the_policy_a_pre_3891_servers_pod_runs_beside_the_replicasets(
    cluster: &Cluster,
) {
    assert!(!cluster.mutates_pods(), "a backend without the policy");
    let config = cluster.config("hostname: h");
    cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let old = OldServer {
        namespace: cluster.ns().into(),
        release: Release::Pre3891,
        port: None,
    };
    let kube = cluster.kube().await;
    let first = old_server_job(&kube, &old, || async {
        cluster.settle().await;
        // What the ReplicaSet controller did about the old server's pod is final once it has
        // acted on a pod created after it.
        cluster.replicaset_controller_caught_up().await;
    })
    .await;
    assert!(first.found_running(), "its pod runs beside: {first:?}");
    let bare = first.final_read.clone().unwrap();
    assert_eq!(
        jumppod_plan::objects::controller_of(&bare),
        None,
        "not adopted"
    );
    let port = first.node_port_after().unwrap();
    assert_ne!(Some(port), first.node_port_before);
    assert_eq!(cluster.active_pods().await.len(), 2);
    for _ in 0..2 {
        let again = old_server_job(&kube, &old, || cluster.settle()).await;
        assert!(again.untouched && again.found_running(), "{again:?}");
    }
    let report = cluster.ensure(&config).await.expect("ensure");
    assert!(report.applied.is_empty(), "{report}");
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f, Finding::LegacyPodRunning { .. })),
        "{report}"
    );
    let fight = report
        .findings
        .iter()
        .find(|f| matches!(f, Finding::OlderServerFight { .. }))
        .unwrap_or_else(|| panic!("{report}"));
    let text = fight.to_string();
    assert!(
        report.to_string().contains(&format!("warning: {text}")),
        "ensure prints it as a warning: {report}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert!(
        json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "olderServerFight" && f["nodePort"] == port),
        "ensure -o json: {json:#}"
    );
    assert!(text.contains("with the pre-#3891 selector"), "{text}");
    assert!(
        text.contains("a bare pod dstack-main-ssh-jump-pod (pre-#3891 labels)"),
        "{text}"
    );
    assert!(
        report.findings.contains(&Finding::LegacyServiceKept {
            service: SVC.into(),
            node_port: Some(port)
        }),
        "{report}"
    );
    let status = jumppod_host::status::status(&kube, &config)
        .await
        .expect("status");
    assert_eq!(status.pods.len(), 2, "{status}");
    assert!(
        status
            .to_string()
            .contains("finding: an older dstack server is running jobs"),
        "{status}"
    );
    let json = serde_json::to_value(&status).unwrap();
    assert!(
        json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "olderServerFight"),
        "{json:#}"
    );

    // The old server is stopped and its pod goes: the Service is repaired on the same port.
    cluster.delete("pods", NAME).await;
    let report = cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let svc = cluster.service().await;
    assert_eq!(
        svc["spec"]["selector"],
        json!({"app.kubernetes.io/instance": NAME}),
        "{report}"
    );
    assert_eq!(node_port(&svc) as i32, port);
    let proxy = cluster.resolve(&config).await.expect("resolve").proxy;
    assert_eq!(proxy.port, port);
    assert_eq!(cluster.active_pods().await.len(), 1);
}

/// This file's scenarios on one backend (`both_tests!`): `upgrade_scenarios!(sim)` in
/// `scenarios.rs`, `upgrade_scenarios!(real)` in `real_cluster.rs`. Scenarios 3 and 9 take
/// cases (rstest's, or run at once on the real control plane), so each binary calls them itself.
#[macro_export]
macro_rules! upgrade_scenarios {
    ($on:ident) => {
        $crate::both_tests! { $on, upgrade;
            a_running_bare_pod_with_current_labels_is_adopted:
                sim a_running_bare_pod_with_current_labels_is_adopted_and_the_service_kept
                    = sim(),
                /// The real ReplicaSet controller adopts the bare pod and starts no second pod.
                real the_real_replicaset_controller_adopts_a_bare_pod_with_the_current_labels
                    = real("rc-adopt");
            a_pre_3891_pod_is_left_alone_then_its_service_recreated:
                sim a_pre_3891_pod_is_left_alone_then_its_service_is_recreated_on_the_same_port
                    = sim(),
                /// With real objects and an eviction; the NodePort of running jobs is kept.
                real the_upgrade_from_a_bare_pre_3891_pod_keeps_the_node_port_of_running_jobs
                    = real("rc-upgrade");
            a_finished_pre_3891_pod_makes_resolve_fail_at_once:
                sim a_finished_pre_3891_pod_makes_resolve_fail_at_once = sim(),
                /// In the audit log's 3 requests.
                real a_finished_pre_3891_pod_makes_resolve_fail_at_once
                    = real("rc-finished-legacy");
            a_pre_3891_pod_stranded_on_a_dead_node_does_not_pin_the_old_service:
                sim a_pre_3891_pod_stranded_on_a_dead_node_does_not_pin_the_old_service
                    = sim(),
                /// On a node whose kubelet never answers, the pod stays terminating once
                /// deleted.
                real a_pre_3891_pod_left_terminating_on_a_dead_node_does_not_pin_the_old_service
                    = real("rc-stranded");
            a_pod_replaced_between_observe_and_apply_is_left_alone:
                sim a_pod_replaced_between_observe_and_apply_is_not_deleted = sim(),
                /// The real registry refuses a delete whose uid precondition no longer holds
                /// with 409 `Operation cannot be fulfilled on pods "x": the UID in the
                /// precondition (...) does not match the UID in record (...)`; the host takes
                /// it for "replaced meanwhile".
                real a_pod_replaced_between_observe_and_apply_is_left_alone
                    = real("rc-race");
            two_hosts_racing_through_the_upgrade_keep_one_service_on_the_old_port:
                sim two_hosts_racing_through_the_upgrade_keep_one_service_on_the_old_port
                    = sim(),
                real two_hosts_racing_through_the_upgrade_keep_one_service_on_the_old_port
                    = real("rc-two-hosts");
            a_service_created_again_is_refused_for_its_port_before_its_name:
                sim a_service_created_again_is_refused_for_its_port_before_its_name
                    = sim(),
                real a_service_created_again_is_refused_for_its_port_before_its_name
                    = real("rc-port-first");
            without_the_policy_a_pre_3891_servers_pod_runs_beside_the_replicasets:
                sim without_the_policy_a_pre_3891_servers_pod_runs_beside_the_replicasets
                    = sim_without_the_policy(),
                /// The bare pod keeps only its old label; the real ReplicaSet controller
                /// neither adopts nor deletes it.
                real without_the_policy_a_pre_3891_servers_pod_runs_beside_the_real_replicasets
                    = real("rc-fight-beside");
        }
    };
}
