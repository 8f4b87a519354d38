use super::*;
use crate::planner::fixtures::*;
use rstest::rstest;

fn key() -> ProjectKey {
    ProjectKey::of_name("dstack", NAME).unwrap()
}

fn template() -> RawConfig {
    RawConfig::default()
}

fn kinds(decision: &Decision) -> Vec<String> {
    decision
        .actions
        .iter()
        .map(|a| a.to_string().split(" (").next().unwrap().to_owned())
        .collect()
}

fn ready_pod() -> Pod {
    let mut pod = owned(bare_pod("Running", true), "ReplicaSet", NAME);
    pod.metadata.name = Some(format!("{NAME}-x7k2q"));
    pod.status = Some(typed(serde_json::json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]})));
    pod
}

#[rstest]
#[case::a_replicaset_names_its_project("dstack-main-ssh-jump-pod", Some("main"))]
#[case::a_project_may_contain_dashes("dstack-ml-team-ssh-jump-pod", Some("ml-team"))]
#[case::a_name_without_the_prefix_is_not_watched("main-ssh-jump-pod", None)]
#[case::an_empty_project_is_no_project("dstack--ssh-jump-pod", None)]
#[case::another_object_is_not_a_project("dstack-server", None)]
fn project_keys_come_from_names(#[case] name: &str, #[case] project: Option<&str>) {
    assert_eq!(
        ProjectKey::of_name("ns", name)
            .as_ref()
            .map(ProjectKey::project),
        project
    );
}

#[test]
fn a_service_and_a_pod_name_their_project() {
    assert_eq!(ProjectKey::of_service(&current_svc(30001)), Some(key()));
    assert_eq!(ProjectKey::of_pod(&ready_pod()), vec![key()]);
    assert_eq!(ProjectKey::of_pod(&bare_pod("Running", false)), vec![key()]);
    let mut stranger = ready_pod();
    stranger.metadata.labels = None;
    assert_eq!(ProjectKey::of_pod(&stranger), vec![]);
}

#[test]
fn the_caches_give_the_planner_the_bare_pod_and_the_instance_pods() {
    let other = {
        let mut p = ready_pod();
        p.metadata.labels = Some(schema::current_labels("dstack-x-ssh-jump-pod", "x"));
        p
    };
    let pods = [ready_pod(), bare_pod("Failed", false), other];
    let observed = observed(&key(), Some(rs(1)), None, pods.iter());
    assert_eq!(observed.pods.len(), 1);
    assert_eq!(
        observed.bare_pod.as_ref().map(|p| name_of(&p.metadata)),
        Some(NAME)
    );
    assert!(observed.looked_further);
}

#[rstest]
#[case::the_steady_state_writes_nothing(
    Some(rs(1)), Some(current_svc(31022)), vec![ready_pod()], &[], State::Ready)]
#[case::once_the_pre_3891_pod_is_gone_the_service_is_recreated_on_the_same_port(
    Some(rs(1)), Some(legacy_svc(30555)), vec![ready_pod()],
    &["delete service dstack-main-ssh-jump-pod-service", "create service dstack-main-ssh-jump-pod-service on NodePort 30555"],
    State::Pending)]
#[case::a_finished_pre_3891_pod_is_deleted_and_its_service_replaced(
    Some(rs(1)), Some(legacy_svc(30555)), vec![ready_pod(), bare_pod("Failed", false)],
    &["delete pod dstack-main-ssh-jump-pod", "delete service dstack-main-ssh-jump-pod-service",
      "create service dstack-main-ssh-jump-pod-service on NodePort 30555"],
    State::Pending)]
#[case::a_running_pre_3891_pod_keeps_its_service(
    Some(rs(1)), Some(legacy_svc(30555)), vec![ready_pod(), bare_pod("Running", false)], &[],
    State::Upgrading)]
#[case::a_missing_replicaset_is_never_created(
    None, Some(current_svc(31022)), vec![], &[], State::NoReplicaSet)]
#[case::without_a_replicaset_or_service_only_a_finished_bare_pod_is_deleted(
    None, None, vec![bare_pod("Failed", false)],
    &["delete pod dstack-main-ssh-jump-pod"], State::NoReplicaSet)]
#[case::without_a_replicaset_the_keeper_deletes_a_finished_bare_pod_once_and_makes_a_standby(
    None, Some(legacy_svc(30555)), vec![bare_pod("Failed", false)],
    &["create pod dstack-main-ssh-jump-pod-standby-<generated>", "delete pod dstack-main-ssh-jump-pod"],
    State::NoReplicaSet)]
#[case::a_missing_service_of_a_replicaset_is_created(
    Some(rs(1)), None, vec![ready_pod()],
    &["create service dstack-main-ssh-jump-pod-service"], State::Pending)]
#[case::an_unschedulable_pod_degrades_the_project(
    Some(rs(0)), Some(current_svc(31022)), vec![pending_unschedulable("dstack-main-ssh-jump-pod-x")], &[],
    State::Degraded)]
fn decides(
    #[case] rs: Option<ReplicaSet>,
    #[case] svc: Option<Service>,
    #[case] pods: Vec<Pod>,
    #[case] expected: &[&str],
    #[case] state: State,
) {
    let observed = observed(&key(), rs, svc, pods.iter());
    let decision = decide(&template(), &key(), &observed).unwrap();
    assert_eq!(kinds(&decision), expected);
    assert_eq!(decision.state, state);
}

#[test]
fn a_project_too_long_for_the_container_name_is_a_config_error_not_a_write() {
    let long = format!("dstack-{}-ssh-jump-pod", "a".repeat(40));
    let key = ProjectKey::of_name("dstack", &long).unwrap();
    let err = decide(&template(), &key, &Observed::default()).unwrap_err();
    assert_eq!(err.field, "project");
}

#[test]
fn the_schedulers_message_becomes_a_warning_event() {
    let observed = observed(
        &key(),
        Some(rs(0)),
        Some(current_svc(31022)),
        [pending_unschedulable("dstack-main-ssh-jump-pod-x")].iter(),
    );
    let decision = decide(&template(), &key(), &observed).unwrap();
    let notes = notes(&decision.findings);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].severity, Severity::Warning);
    assert_eq!(notes[0].reason, "Unschedulable");
    assert!(
        notes[0]
            .message
            .contains("0/3 nodes are available: 3 Insufficient cpu.")
    );
    let regarding = regarding(&observed).unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("ReplicaSet"));
    assert_eq!(regarding.uid.as_deref(), Some("rs-uid"));
}

#[test]
fn drift_and_refused_pods_are_warnings_with_kubernetes_reasons() {
    let observed = observed(
        &key(),
        Some(refused_rs()),
        Some(current_svc(31022)),
        std::iter::empty(),
    );
    let drifted = RawConfig {
        cpu: Some("750m".into()),
        memory: Some("1Gi".into()),
        ..RawConfig::default()
    };
    let decision = decide(&drifted, &key(), &observed).unwrap();
    let reasons: Vec<&str> = notes(&decision.findings).iter().map(|n| n.reason).collect();
    assert_eq!(reasons, ["TemplateDrift", "FailedCreate"]);
    assert_eq!(decision.state, State::Degraded);
}

#[test]
fn an_event_is_published_once_per_situation() {
    let a = note(Severity::Warning, "Unschedulable", "x".into());
    let b = note(Severity::Warning, "FailedCreate", "y".into());
    let published = BTreeSet::from([a.clone()]);
    assert_eq!(unpublished(&published, &[a.clone(), b.clone()]), vec![b]);
    assert_eq!(unpublished(&published, std::slice::from_ref(&a)), vec![]);
}

#[test]
fn a_long_message_is_cut_to_the_events_limit_at_a_character_boundary() {
    let n = note(Severity::Normal, "X", "é".repeat(1000));
    assert!(n.message.len() <= MAX_MESSAGE, "{}", n.message.len());
    assert!(n.message.ends_with("..."));
}

#[rstest]
#[case::the_same_service_on_another_port_is_reported(("u", 30001), ("u", 30002), true)]
#[case::the_same_port_is_quiet(("u", 30001), ("u", 30001), false)]
#[case::a_replaced_service_is_another_finding(("u", 30001), ("v", 30002), false)]
fn node_port_changes(
    #[case] before: (&str, i32),
    #[case] now: (&str, i32),
    #[case] reported: bool,
) {
    let seen = |(uid, port): (&str, i32)| SeenPort {
        uid: uid.into(),
        node_port: Some(port),
    };
    let note = port_changed(Some(&seen(before)), Some(&seen(now)));
    assert_eq!(note.is_some(), reported);
    if let Some(n) = note {
        assert_eq!(n.reason, "NodePortChanged");
        assert!(n.message.contains("from 30001 to 30002"), "{}", n.message);
    }
}

#[test]
fn the_cache_keeps_of_a_pod_spec_only_its_node_and_no_managed_fields() {
    let mut pod = ready_pod();
    pod.metadata.managed_fields = Some(vec![Default::default()]);
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some("node-a".into());
    spec.containers = vec![Default::default()];
    slim_pod(&mut pod);
    assert_eq!(
        pod.spec,
        Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some("node-a".into()),
            ..Default::default()
        })
    );
    assert!(pod.metadata.managed_fields.is_none());
    assert_eq!(ProjectKey::of_pod(&pod), vec![key()], "what decides stays");
}

fn project(name: &str) -> ProjectKey {
    ProjectKey::of_name("dstack", &format!("dstack-{name}-ssh-jump-pod")).unwrap()
}

/// Issue 21 §9: a project whose objects all vanished while a watch was restarting (no delete
/// comes for them) is reconciled after the relist, found gone and no longer counted; the
/// projects the caches hold are reconciled as before.
#[test]
fn a_relist_reconciles_the_projects_it_no_longer_holds_and_they_stop_being_counted() {
    let mut projects = Projects::default();
    projects.record(&project("kept"), Some(State::Ready));
    projects.record(&project("vanished"), Some(State::Degraded));
    let cached = BTreeSet::from([project("kept"), project("new")]);
    assert_eq!(
        projects.relisted(cached),
        BTreeSet::from([project("kept"), project("new"), project("vanished")])
    );
    // What the caches hold of the vanished project after the relist: nothing.
    let vanished = observed(&project("vanished"), None, None, std::iter::empty());
    assert!(gone(&vanished));
    projects.record(&project("vanished"), None);
    projects.record(&project("new"), Some(State::Pending));
    let counts = projects.counts();
    assert_eq!(counts[&State::Ready], 1);
    assert_eq!(counts[&State::Pending], 1);
    assert_eq!(counts[&State::Degraded], 0, "{counts:?}");
    assert_eq!(counts.values().sum::<i64>(), 2);
}

#[rstest]
#[case::a_replicaset(Some(rs(1)), None, vec![])]
#[case::a_service(None, Some(current_svc(31022)), vec![])]
#[case::a_pod(None, None, vec![ready_pod()])]
fn a_project_with_any_object_left_is_not_gone(
    #[case] rs: Option<ReplicaSet>,
    #[case] svc: Option<Service>,
    #[case] pods: Vec<Pod>,
) {
    assert!(!gone(&observed(&key(), rs, svc, pods.iter())));
}

/// `ready_pod` on `node`.
fn ready_on(node: &str) -> Pod {
    let mut pod = ready_pod();
    pod.metadata.uid = Some("rs-pod-uid".into());
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node.into());
    pod
}

/// The first container of `rs`'s template.
fn first_container(rs: &mut ReplicaSet) -> &mut k8s_openapi::api::core::v1::Container {
    &mut rs
        .spec
        .as_mut()
        .unwrap()
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
}

/// dstack's own ReplicaSet (its ReplicaSet change): its template is dstack's pod, its command
/// `/bin/sh` with `-c` and the steps as arguments, and no resources.
fn dstacks_rs() -> ReplicaSet {
    let mut rs = rs(1);
    let container = first_container(&mut rs);
    container.command = Some(vec!["/bin/sh".into()]);
    container.args = Some(vec![
        "-c".into(),
        "mkdir -p ~/.ssh && /usr/sbin/sshd -D -e -p 22".into(),
    ]);
    container.resources = None;
    rs
}

#[test]
fn dstacks_own_replicaset_is_not_drift_but_is_surged_off_a_cordoned_node() {
    let mut observed = observed(
        &key(),
        Some(dstacks_rs()),
        Some(current_svc(31022)),
        [ready_on("a")].iter(),
    );
    assert!(crate::manifest::is_dstacks_own(
        observed.replicaset.as_ref().unwrap()
    ));
    let steady = decide(&template(), &key(), &observed).unwrap();
    assert!(
        steady
            .findings
            .iter()
            .all(|f| !matches!(f, Finding::Drift { .. })),
        "{:?}",
        steady.findings
    );
    assert_eq!(steady.state, State::Ready);
    observed.leaving_nodes = BTreeMap::from([("a".into(), "is cordoned".into())]);
    assert_eq!(
        kinds(&decide(&template(), &key(), &observed).unwrap()),
        [
            "mark pod dstack-main-ssh-jump-pod-x7k2q retiring",
            "scale replicaset dstack-main-ssh-jump-pod to 2"
        ]
    );
}

#[test]
fn ensures_replicaset_with_another_command_is_still_drift() {
    let mut rs = rs(1);
    first_container(&mut rs).command =
        Some(vec!["/bin/sh".into(), "-c".into(), "exec sshd -D".into()]);
    assert!(!crate::manifest::is_dstacks_own(&rs));
    let observed = observed(
        &key(),
        Some(rs),
        Some(current_svc(31022)),
        [ready_on("a")].iter(),
    );
    let decision = decide(&template(), &key(), &observed).unwrap();
    assert!(
        decision
            .findings
            .iter()
            .any(|f| matches!(f, Finding::Drift { .. }))
    );
}

#[test]
fn a_node_that_stopped_renewing_its_lease_gets_a_replacement_and_keeps_its_pod() {
    let mut observed = observed(
        &key(),
        Some(rs(1)),
        Some(current_svc(31022)),
        [ready_on("a")].iter(),
    );
    observed.silent_nodes =
        BTreeMap::from([("a".into(), "has not renewed its Lease for 25 s".into())]);
    assert_eq!(
        kinds(&decide(&template(), &key(), &observed).unwrap()),
        ["scale replicaset dstack-main-ssh-jump-pod to 2"]
    );
}

/// `rs` as the surge leaves it: from 1 to its count.
fn surged_from_one(mut rs: ReplicaSet) -> ReplicaSet {
    let to = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    rs.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend([
            (surge::SURGED_FROM_ANNOTATION.to_owned(), "1".to_owned()),
            (surge::SURGED_TO_ANNOTATION.to_owned(), to.to_string()),
        ]);
    rs
}

#[test]
fn on_a_silent_node_the_pod_leaves_the_rotation_once_its_replacement_is_ready_and_stays() {
    let mut replacement = ready_on("b");
    replacement.metadata.name = Some(format!("{NAME}-p9z4m"));
    let mut observed = observed(
        &key(),
        Some(surged_from_one(rs(2))),
        Some(current_svc(31022)),
        [ready_on("a"), replacement].iter(),
    );
    observed.silent_nodes = BTreeMap::from([(
        "a".into(),
        "has not renewed its Lease for 20 s or more".into(),
    )]);
    assert_eq!(
        kinds(&decide(&template(), &key(), &observed).unwrap()),
        [
            "take pod dstack-main-ssh-jump-pod-x7k2q out of the Service's endpoints, its connections kept"
        ]
    );
}

#[test]
fn a_replicaset_whose_surge_another_writer_undid_twice_is_surged_no_more_and_said() {
    let mut fought = rs(1);
    fought
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(surge::SURGE_UNDONE_ANNOTATION.into(), "2".into());
    let mut observed = observed(
        &key(),
        Some(fought),
        Some(current_svc(31022)),
        [ready_on("a")].iter(),
    );
    observed.leaving_nodes = BTreeMap::from([("a".into(), "is cordoned".into())]);
    let decision = decide(&template(), &key(), &observed).unwrap();
    assert!(decision.actions.is_empty(), "{:?}", decision.actions);
    let said: Vec<String> = notes(&decision.findings)
        .into_iter()
        .filter(|n| n.reason == "SurgeUndone")
        .map(|n| n.message)
        .collect();
    assert_eq!(said.len(), 1);
    assert!(
        said[0].starts_with("another writer of replicaset dstack-main-ssh-jump-pod's replicas"),
        "{said:?}"
    );
}

#[test]
fn a_replicaset_pod_slimmed_for_the_cache_is_still_told_of_a_change_of_the_keys() {
    let keys = crate::manifest::keys_secret_name(NAME);
    let mut pod = ready_on("a");
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.volumes = Some(vec![
        typed(serde_json::json!({"name": "keys", "secret": {"secretName": keys}})),
        typed(serde_json::json!({"name": "kube-api-access-x7k2p",
            "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}})),
    ]);
    slim_pod(&mut pod);
    let volumes = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
    assert_eq!(
        volumes.len(),
        1,
        "only the Secret's volume is kept: {volumes:?}"
    );
    let secret = typed(serde_json::json!({"metadata": {"name": keys}, "data": {}}));
    let told: Vec<String> = crate::refresh::refreshes(&secret, &[pod])
        .into_iter()
        .map(|r| r.pod)
        .collect();
    assert_eq!(told, [format!("{NAME}-x7k2q")]);
}

#[test]
fn once_a_replicaset_serves_the_project_the_keepers_standby_goes() {
    let mut standby = bare_pod("Running", true);
    standby.metadata.name = Some(format!("{NAME}-standby-x7k2p"));
    standby.metadata.uid = Some("standby-uid".into());
    standby
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(keeper::STANDBY_ANNOTATION.into(), NAME.into());
    let observed = observed(
        &key(),
        Some(rs(1)),
        Some(current_svc(31022)),
        [ready_on("a"), standby].iter(),
    );
    let decision = decide(&template(), &key(), &observed).unwrap();
    assert_eq!(
        kinds(&decision),
        [format!("delete standby {NAME}-standby-x7k2p")]
    );
}

#[test]
fn once_a_replicaset_serves_the_project_the_bare_pods_spec_is_forgotten() {
    let mut observed = observed(
        &key(),
        Some(rs(1)),
        Some(current_svc(31022)),
        [ready_on("a")].iter(),
    );
    observed.remembered_pod = Some(bare_pod("Running", true));
    let decision = decide(&template(), &key(), &observed).unwrap();
    assert_eq!(decision.remember, None);
}

#[test]
fn while_the_nodes_are_unknown_a_surge_is_left_as_it_is_and_said() {
    // Surged, the replacement Ready: with the nodes known, "no retiring pod is left" would
    // scale the ReplicaSet back over a pod whose node may be going.
    let mut replacement = ready_on("b");
    replacement.metadata.name = Some(format!("{NAME}-p9z4m"));
    let mut observed = observed(
        &key(),
        Some(surged_from_one(rs(2))),
        Some(current_svc(31022)),
        [ready_on("a"), replacement].iter(),
    );
    observed.nodes_unknown = Some("the watch of the nodes fails (403 Forbidden)".into());
    let decision = decide(&template(), &key(), &observed).unwrap();
    assert!(decision.actions.is_empty(), "{:?}", decision.actions);
    assert!(
        decision
            .findings
            .iter()
            .any(|f| matches!(f, Finding::NodesUnknown { .. }))
    );
}

#[test]
fn most_nodes_in_trouble_at_once_is_said_and_acted_on_for_none() {
    // What the controller's caches give when most nodes look silent: no node named in trouble,
    // and why.
    let mut observed = observed(
        &key(),
        Some(rs(1)),
        Some(current_svc(31022)),
        [ready_on("a")].iter(),
    );
    observed.disruption = Some("3 of 3 nodes look silent, not Ready or lost at once".into());
    let decision = decide(&template(), &key(), &observed).unwrap();
    assert!(decision.actions.is_empty(), "{:?}", decision.actions);
    let said: Vec<String> = notes(&decision.findings)
        .into_iter()
        .filter(|n| n.reason == "NodesDisrupted")
        .map(|n| n.message)
        .collect();
    assert_eq!(
        said,
        [
            "3 of 3 nodes look silent, not Ready or lost at once: taken for a fault of this controller's view or of the control plane; no pod is replaced, deleted or scaled off because its node looks silent, not Ready or lost until fewer do"
        ]
    );
}

#[test]
fn a_replicaset_pod_on_a_node_found_lost_is_deleted_so_that_it_is_replaced_at_once() {
    let mut lost = ready_on("a");
    lost.status = Some(typed(serde_json::json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": "False"}]})));
    let mut observed = observed(&key(), Some(rs(1)), Some(current_svc(31022)), [lost].iter());
    observed.lost_nodes = BTreeMap::from([("a".into(), "is lost (Ready Unknown)".into())]);
    let decision = decide(&template(), &key(), &observed).unwrap();
    assert_eq!(
        kinds(&decision),
        ["delete pod dstack-main-ssh-jump-pod-x7k2q"]
    );
    assert!(matches!(&decision.actions[0], Action::MovePodOff { uid, .. } if uid == "rs-pod-uid"));
}

#[test]
fn job_pods_name_their_projects_jump_pod_and_bring_their_keys() {
    let job: Pod = typed(serde_json::json!({
        "metadata": {"name": "main-job-1", "namespace": "dstack", "labels": {
            "app.kubernetes.io/name": "dstack-job", "app.kubernetes.io/instance": "main-job-1",
            "k8s.dstack.ai/project": "main"}},
        "spec": {"containers": [{"name": "c", "command": ["/bin/sh"], "args": ["-c",
            "runner --ssh-authorized-key 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICvlFH8jdsOxLlhfXSot7CaE7yKzQ+xCNC4AlzCuWsC5 project' --ssh-authorized-key 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHeyQo/3L9deSvuZT1MzN+0KIL2DwIC+7DNGrlLtTOO2 alice'"]}]},
        "status": {"phase": "Running"},
    }));
    assert_eq!(ProjectKey::of_pod(&job), vec![key()]);
    let observed = observed(&key(), None, Some(current_svc(31022)), [job].iter());
    assert_eq!(observed.job_pods.len(), 1);
    assert!(observed.pods.is_empty() && observed.bare_pod.is_none());
    assert!(
        !gone(&observed),
        "a project with a live job is not forgotten"
    );
    let decision = decide(&template(), &key(), &observed).unwrap();
    assert_eq!(decision.granted.len(), 1);
}

#[test]
fn the_cache_keeps_the_whole_bare_pod_and_only_the_node_of_a_replicasets_pod() {
    let mut bare = bare_pod("Running", true);
    bare.spec = Some(typed(
        serde_json::json!({"nodeName": "a", "containers": [{"name": "c", "image": "sshd"}]}),
    ));
    let mut of_rs = ready_on("a");
    of_rs.spec.as_mut().unwrap().containers = bare.spec.as_ref().unwrap().containers.clone();
    slim_pod(&mut bare);
    slim_pod(&mut of_rs);
    assert_eq!(bare.spec.unwrap().containers.len(), 1);
    let spec = of_rs.spec.unwrap();
    assert!(spec.containers.is_empty());
    assert_eq!(spec.node_name.as_deref(), Some("a"));
}
