use super::*;
use crate::nodes::NodeTrouble;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Service;
use rstest::rstest;
use serde_json::{Value, json};

const NAME: &str = "dstack-main-ssh-jump-pod";

fn service(annotations: Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "dstack-main-ssh-jump-pod-service", "namespace": "dstack",
                     "uid": "svc-uid", "annotations": annotations},
        "spec": {"type": "NodePort", "selector": {"app.kubernetes.io/instance": NAME},
                 "ports": [{"port": 22, "nodePort": 31022}]},
    }))
    .unwrap()
}

/// How a pod stands.
#[derive(Clone, Copy)]
enum Is {
    Ready,
    Starting,
    Terminating,
    Finished,
}

/// dstack 0.22.5's bare jump pod (its labels, command and tolerations), as it runs on `node`,
/// with the service account token volume the API server added.
fn named(node: &str, is: Is) -> Pod {
    pod(NAME, "named-uid", node, is, json!({}))
}

fn standby(suffix: &str, node: &str, is: Is) -> Pod {
    pod(
        &format!("{NAME}-standby-{suffix}"),
        &format!("standby-{suffix}"),
        node,
        is,
        json!({STANDBY_ANNOTATION: NAME}),
    )
}

fn pod(name: &str, uid: &str, node: &str, is: Is, annotations: Value) -> Pod {
    let mut meta = json!({
        "name": name, "namespace": "dstack", "uid": uid, "resourceVersion": "7",
        "annotations": annotations,
        "labels": {
            "app.kubernetes.io/name": "dstack-ssh-proxy",
            "app.kubernetes.io/instance": NAME,
            "app.kubernetes.io/managed-by": "dstack",
            "k8s.dstack.ai/project": "main",
        },
    });
    if matches!(is, Is::Terminating) {
        meta["deletionTimestamp"] = json!("2026-12-05T00:00:00Z");
    }
    let (phase, ready) = match is {
        Is::Ready | Is::Terminating => ("Running", "True"),
        Is::Starting => ("Pending", "False"),
        Is::Finished => ("Failed", "False"),
    };
    serde_json::from_value(json!({
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "priority": 0,
            "containers": [{
                "name": format!("{NAME}-container"),
                "image": "testcontainers/sshd:1.3.0",
                "command": ["/bin/sh"],
                "args": ["-c", "mkdir -p ~/.ssh && /usr/sbin/sshd -D -e -p 22"],
                "ports": [{"containerPort": 22}],
                "volumeMounts": [{"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            }],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": []}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]},
    }))
    .unwrap()
}

fn observed(named: Option<Pod>, standbys: Vec<Pod>) -> Observed {
    let mut pods = standbys;
    pods.extend(named.clone());
    Observed {
        service: Some(service(json!({}))),
        bare_pod: named,
        pods,
        ..Observed::default()
    }
}

fn trouble(kind: &str, node: &str) -> NodeTrouble {
    let mut nodes = NodeTrouble::default();
    let why = BTreeMap::from([(node.to_owned(), format!("is {kind}"))]);
    match kind {
        "cordoned" => nodes.leaving = why,
        "silent" => nodes.silent = why,
        "not-ready" => nodes.not_ready = why,
        "lost" => nodes.lost = why,
        _ => {}
    }
    nodes
}

/// The decision in short: `create <name|standby>`, `delete-standby <name>`, `delete <name>`,
/// `move-off <name>`, `force-delete <name>`.
fn outline(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::CreatePod { pod, .. } => match &pod.metadata.name {
                Some(n) => format!("create {n}"),
                None => "create standby".to_owned(),
            },
            Action::DeleteStandby { name, .. } => format!("delete-standby {name}"),
            Action::DeletePod { name, .. } => format!("delete {name}"),
            Action::MovePodOff { name, .. } => format!("move-off {name}"),
            Action::ForceDeletePod { name, .. } => format!("force-delete {name}"),
            other => panic!("not the keeper's: {other}"),
        })
        .collect()
}

/// The contract with the kit off: the copies' own fields, nothing the policy adds.
fn no_kit() -> Contract {
    Contract {
        kit: false,
        ..Contract::default()
    }
}

fn run(observed: &Observed, nodes: &NodeTrouble) -> Vec<String> {
    let template = template(observed, Some(&named("a", Is::Ready)));
    outline(&decide(
        NAME,
        observed,
        template.as_ref(),
        nodes,
        &Contract::default(),
    ))
}

#[rstest]
#[case::a_ready_jump_pod_on_a_fine_node_needs_nothing(
    observed(Some(named("a", Is::Ready)), vec![]), NodeTrouble::default(), vec![])]
#[case::a_jump_pod_dstack_just_made_needs_no_standby(
    observed(Some(named("a", Is::Starting)), vec![]), NodeTrouble::default(), vec![])]
#[case::a_cordoned_node_gets_a_standby_before_the_drain(
    observed(Some(named("a", Is::Ready)), vec![]), trouble("cordoned", "a"), vec!["create standby"])]
#[case::while_the_standby_starts_nothing_more_is_made(
    observed(Some(named("a", Is::Ready)), vec![standby("1", "b", Is::Starting)]), trouble("cordoned", "a"), vec![])]
#[case::an_evicted_jump_pod_is_deleted_and_a_standby_made(
    observed(Some(named("a", Is::Finished)), vec![]), NodeTrouble::default(),
    vec!["create standby", "delete dstack-main-ssh-jump-pod"])]
#[case::an_evicted_terminating_jump_pod_gets_a_standby(
    observed(Some(evicted(named("a", Is::Terminating))), vec![]), NodeTrouble::default(), vec!["create standby"])]
#[case::a_jump_pod_deleted_by_hand_gets_no_standby(
    observed(Some(named("a", Is::Terminating)), vec![]), NodeTrouble::default(), vec![])]
#[case::a_gone_jump_pod_is_made_again_under_its_name(
    observed(None, vec![standby("1", "b", Is::Ready)]), trouble("cordoned", "a"),
    vec!["create dstack-main-ssh-jump-pod"])]
#[case::a_gone_jump_pod_with_no_standby_gets_both(
    observed(None, vec![]), NodeTrouble::default(),
    vec!["create standby", "create dstack-main-ssh-jump-pod"])]
#[case::the_jump_pod_back_and_ready_elsewhere_ends_the_standby(
    observed(Some(named("b", Is::Ready)), vec![standby("1", "b", Is::Ready)]), trouble("cordoned", "a"),
    vec!["delete-standby dstack-main-ssh-jump-pod-standby-1"])]
#[case::the_jump_pod_back_but_starting_keeps_the_standby(
    observed(Some(named("b", Is::Starting)), vec![standby("1", "b", Is::Ready)]), NodeTrouble::default(), vec![])]
#[case::an_uncordon_withdraws_the_standby(
    observed(Some(named("a", Is::Ready)), vec![standby("1", "b", Is::Ready)]), NodeTrouble::default(),
    vec!["delete-standby dstack-main-ssh-jump-pod-standby-1"])]
#[case::a_silent_node_gets_a_standby_first(
    observed(Some(named("a", Is::Ready)), vec![]), trouble("silent", "a"), vec!["create standby"])]
#[case::a_silent_node_keeps_its_jump_pod_while_the_standby_serves(
    observed(Some(named("a", Is::Ready)), vec![standby("1", "b", Is::Ready)]), trouble("silent", "a"),
    vec![])]
#[case::a_node_not_ready_by_its_kubelet_gets_a_standby_and_keeps_its_jump_pod(
    observed(Some(named("a", Is::Starting)), vec![]), trouble("not-ready", "a"), vec!["create standby"])]
#[case::a_node_not_ready_by_its_kubelet_never_has_its_jump_pod_force_deleted(
    observed(Some(named("a", Is::Terminating)), vec![standby("1", "b", Is::Ready)]), trouble("not-ready", "a"),
    vec![])]
#[case::a_node_found_lost_frees_the_name_at_once(
    observed(Some(named("a", Is::Terminating)), vec![standby("1", "b", Is::Ready)]), trouble("lost", "a"),
    vec!["force-delete dstack-main-ssh-jump-pod"])]
#[case::a_node_found_lost_has_its_serving_jump_pod_force_deleted_too(
    observed(Some(named("a", Is::Ready)), vec![standby("1", "b", Is::Ready)]), trouble("lost", "a"),
    vec!["force-delete dstack-main-ssh-jump-pod"])]
#[case::the_node_back_the_standby_goes(
    observed(Some(named("a", Is::Ready)), vec![standby("1", "b", Is::Ready)]), NodeTrouble::default(),
    vec!["delete-standby dstack-main-ssh-jump-pod-standby-1"])]
#[case::a_finished_standby_is_deleted(
    observed(Some(named("a", Is::Ready)), vec![standby("1", "b", Is::Finished)]), NodeTrouble::default(),
    vec!["delete-standby dstack-main-ssh-jump-pod-standby-1"])]
#[case::a_finished_standby_is_replaced_while_the_jump_pod_does_not_serve(
    observed(Some(evicted(named("a", Is::Terminating))), vec![standby("1", "b", Is::Finished)]), NodeTrouble::default(),
    vec!["delete-standby dstack-main-ssh-jump-pod-standby-1", "create standby"])]
#[case::two_standbys_are_one_too_many(
    observed(Some(named("a", Is::Terminating)), vec![standby("1", "b", Is::Ready), standby("2", "b", Is::Starting)]),
    NodeTrouble::default(), vec!["delete-standby dstack-main-ssh-jump-pod-standby-2"])]
fn the_bare_jump_pod_is_kept_under_its_name(
    #[case] observed: Observed,
    #[case] nodes: NodeTrouble,
    #[case] expected: Vec<&str>,
) {
    assert_eq!(run(&observed, &nodes), expected);
}

#[rstest]
#[case::without_its_service_the_pod_is_dstacks_to_make(
    Observed { service: None, ..observed(None, vec![]) })]
#[case::a_replicaset_replaces_its_own_pods(
    Observed { replicaset: Some(ReplicaSet::default()), ..observed(None, vec![]) })]
#[case::the_operator_turned_it_off(
    Observed { service: Some(service(json!({KEEP_ANNOTATION: "false"}))), ..observed(None, vec![]) })]
fn the_keeper_stands_aside(#[case] observed: Observed) {
    assert!(keeps(&observed).is_err());
    assert_eq!(run(&observed, &trouble("lost", "a")), Vec::<String>::new());
}

#[rstest]
#[case::the_service_gone(Observed { service: None, ..observed(None, vec![]) })]
#[case::a_replicaset_serving(Observed { replicaset: Some(ReplicaSet::default()), ..observed(None, vec![]) })]
#[case::turned_off(
    Observed { service: Some(service(json!({KEEP_ANNOTATION: "false"}))), ..observed(None, vec![]) })]
fn a_keeper_that_stands_aside_lets_its_standbys_go(#[case] mut observed: Observed) {
    observed.pods = vec![
        standby("1", "b", Is::Ready),
        standby("2", "b", Is::Terminating),
    ];
    let why = keeps(&observed).unwrap_err();
    assert_eq!(
        outline(&let_go(&observed, why)),
        ["delete-standby dstack-main-ssh-jump-pod-standby-1"]
    );
}

#[test]
fn a_pod_never_seen_is_not_made() {
    let observed = observed(None, vec![]);
    assert_eq!(template(&observed, None), None);
    assert!(
        decide(
            NAME,
            &observed,
            None,
            &NodeTrouble::default(),
            &Contract::default()
        )
        .is_empty()
    );
}

#[test]
fn the_template_is_the_named_pod_else_what_was_remembered_else_a_standby() {
    let remembered = named("r", Is::Ready);
    let with_pod = observed(
        Some(named("a", Is::Ready)),
        vec![standby("1", "b", Is::Ready)],
    );
    let node = |p: Option<Pod>| p.and_then(|p| p.spec?.node_name);
    assert_eq!(
        node(template(&with_pod, Some(&remembered))).as_deref(),
        Some("a")
    );
    let gone = observed(None, vec![standby("1", "b", Is::Ready)]);
    assert_eq!(
        node(template(&gone, Some(&remembered))).as_deref(),
        Some("r")
    );
    assert_eq!(node(template(&gone, None)).as_deref(), Some("b"));
}

#[test]
fn the_copy_under_its_name_is_dstacks_pod_without_what_the_cluster_filled_in() {
    let template = named("a", Is::Ready);
    let copy = copy(NAME, &template, Copy::Named, None, &no_kit());
    assert_eq!(copy.metadata.name.as_deref(), Some(NAME));
    assert_eq!(copy.metadata.labels, template.metadata.labels);
    assert_eq!(copy.metadata.uid, None);
    assert_eq!(copy.metadata.resource_version, None);
    assert_eq!(
        annotation(&copy.metadata, RECREATED_ANNOTATION),
        Some("named-uid")
    );
    let (spec, was) = (copy.spec.unwrap(), template.spec.unwrap());
    assert_eq!(spec.node_name, None);
    assert_eq!(spec.priority, None);
    assert_eq!(
        spec.volumes,
        Some(vec![]),
        "no service account token volume"
    );
    assert_eq!(spec.containers[0].volume_mounts, Some(vec![]));
    assert_eq!(spec.containers[0].command, was.containers[0].command);
    assert_eq!(spec.containers[0].args, was.containers[0].args);
    assert_eq!(spec.containers[0].image, was.containers[0].image);
    assert_eq!(spec.tolerations, was.tolerations);
    assert_eq!(spec.affinity, None, "no node to avoid");
    assert!(copy.status.is_none());
}

#[test]
fn a_standby_has_a_generated_name_and_stays_off_the_named_pods_node() {
    let copy = copy(
        NAME,
        &named("a", Is::Ready),
        Copy::Standby,
        Some("a"),
        &no_kit(),
    );
    assert_eq!(copy.metadata.name, None);
    assert_eq!(
        copy.metadata.generate_name.as_deref(),
        Some("dstack-main-ssh-jump-pod-standby-")
    );
    assert_eq!(annotation(&copy.metadata, STANDBY_ANNOTATION), Some(NAME));
    assert_eq!(
        serde_json::to_value(copy.spec.unwrap().affinity).unwrap(),
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["a"]}
            ]}]
        }}})
    );
}

#[test]
fn every_required_term_of_the_pod_avoids_the_node() {
    let mut template = named("a", Is::Ready);
    template.spec.as_mut().unwrap().affinity = serde_json::from_value(json!({"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]},
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]},
        ]}
    }}))
    .unwrap();
    let copy = copy(NAME, &template, Copy::Standby, Some("a"), &no_kit());
    let terms = copy
        .spec
        .unwrap()
        .affinity
        .unwrap()
        .node_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms;
    assert_eq!(terms.len(), 2);
    for term in terms {
        let exprs = term.match_expressions.unwrap();
        assert_eq!(exprs.len(), 2);
        assert_eq!(exprs[1].values.as_deref(), Some(&["a".to_owned()][..]));
    }
}

#[test]
fn the_jump_pod_made_again_off_a_lost_node_avoids_it() {
    let observed = observed(None, vec![standby("1", "b", Is::Ready)]);
    let template = named("a", Is::Ready);
    let actions = decide(
        NAME,
        &observed,
        Some(&template),
        &trouble("lost", "a"),
        &Contract::default(),
    );
    let Action::CreatePod { pod, .. } = &actions[0] else {
        panic!("{actions:?}");
    };
    assert!(
        serde_json::to_string(&pod.spec).unwrap().contains("NotIn"),
        "{pod:?}"
    );
    let fine = decide(
        NAME,
        &observed,
        Some(&template),
        &NodeTrouble::default(),
        &Contract::default(),
    );
    let Action::CreatePod { pod, .. } = &fine[0] else {
        panic!("{fine:?}");
    };
    assert_eq!(
        pod.spec.as_ref().unwrap().affinity,
        None,
        "an evicted pod's node is fine"
    );
}

/// `pod` as the Eviction API leaves it.
fn evicted(pod: Pod) -> Pod {
    disrupted(pod, "EvictionByEvictionAPI")
}

/// `pod` with the condition Kubernetes sets on a pod it takes away for a disruption.
fn disrupted(mut pod: Pod, reason: &str) -> Pod {
    pod.status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(
            serde_json::from_value(
                json!({"type": "DisruptionTarget", "status": "True", "reason": reason}),
            )
            .unwrap(),
        );
    pod
}

#[rstest]
#[case::kubectl_delete_is_a_persons_decision(
    named("a", Is::Terminating),
    NodeTrouble::default(),
    true
)]
#[case::a_drain_or_an_eviction_is_a_disruption(
    disrupted(named("a", Is::Terminating), "EvictionByEvictionAPI"),
    NodeTrouble::default(),
    false
)]
#[case::the_taint_manager_is_a_disruption(
    disrupted(named("a", Is::Terminating), "DeletionByTaintManager"),
    NodeTrouble::default(),
    false
)]
#[case::preemption_is_a_disruption(
    disrupted(named("a", Is::Ready), "PreemptionByScheduler"),
    NodeTrouble::default(),
    false
)]
#[case::a_finished_pod_the_keeper_deleted_is_a_disruption(
    named("a", Is::Finished),
    NodeTrouble::default(),
    false
)]
#[case::a_pod_gone_with_its_lost_node_is_a_disruption(
    named("a", Is::Ready),
    trouble("lost", "a"),
    false
)]
#[case::a_pod_gone_off_a_cordoned_node_is_a_disruption(
    named("a", Is::Ready),
    trouble("cordoned", "a"),
    false
)]
fn a_jump_pod_deleted_by_hand_is_told_from_one_disrupted(
    #[case] last_seen: Pod,
    #[case] nodes: NodeTrouble,
    #[case] by_hand: bool,
) {
    let gone = observed(None, vec![standby("1", "b", Is::Ready)]);
    assert_eq!(deleted_by_hand(&gone, Some(&last_seen), &nodes), by_hand);
    let here = observed(Some(last_seen.clone()), vec![]);
    assert!(
        !deleted_by_hand(&here, Some(&last_seen), &nodes),
        "still there"
    );
}

#[test]
fn a_jump_pod_deleted_by_hand_lets_its_standby_go_and_is_not_made_again_from_it() {
    let gone = observed(None, vec![standby("1", "b", Is::Ready)]);
    assert_eq!(
        outline(&let_go(&gone, "deleted by hand")),
        ["delete-standby dstack-main-ssh-jump-pod-standby-1"]
    );
    let going = observed(None, vec![standby("1", "b", Is::Terminating)]);
    assert_eq!(
        template(&going, None),
        None,
        "a terminating standby is no template"
    );
}

#[test]
fn a_standby_holding_the_quota_the_jump_pod_needs_gives_way() {
    let mut gone = observed(None, vec![standby("1", "b", Is::Ready)]);
    gone.quota_refused =
        Some("exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1".into());
    assert_eq!(
        run(&gone, &NodeTrouble::default()),
        ["delete-standby dstack-main-ssh-jump-pod-standby-1"]
    );
    // Then the pod under its name, and no standby while the quota is tight.
    gone.pods.clear();
    assert_eq!(
        run(&gone, &NodeTrouble::default()),
        ["create dstack-main-ssh-jump-pod"]
    );
}

#[test]
fn a_copy_leaves_out_the_ephemeral_containers_kubectl_debug_added() {
    let mut template = named("a", Is::Ready);
    template.spec.as_mut().unwrap().ephemeral_containers = Some(vec![
        serde_json::from_value(json!({"name": "debugger-x7k2p", "image": "busybox"})).unwrap(),
    ]);
    let pod = copy(NAME, &template, Copy::Named, None, &Contract::default());
    assert_eq!(pod.spec.unwrap().ephemeral_containers, None);
}

#[test]
fn a_copy_of_a_pod_the_policy_never_saw_gets_what_the_policy_fills_in() {
    // dstack's pod as dstack made it: no resources, no kit.
    let template = named("a", Is::Ready);
    let copy = copy(NAME, &template, Copy::Named, None, &Contract::default());
    let container = &copy.spec.as_ref().unwrap().containers[0];
    let limits = container.resources.as_ref().and_then(|r| r.limits.clone());
    assert_eq!(
        limits
            .unwrap_or_default()
            .get("memory")
            .map(|q| q.0.as_str()),
        Some("1Gi"),
        "made Guaranteed"
    );
    assert!(
        container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .is_some(),
        "the kit: its handover"
    );
    assert_eq!(
        container.command,
        template.spec.as_ref().unwrap().containers[0].command
    );
}

#[test]
fn a_copy_of_a_copy_is_kept_off_the_node_going_away_now_not_every_one_before() {
    let template = named("a", Is::Ready);
    let first = copy(NAME, &template, Copy::Named, Some("a"), &no_kit());
    assert_eq!(annotation(&first.metadata, AVOIDS_ANNOTATION), Some("a"));
    let second = copy(NAME, &first, Copy::Standby, Some("b"), &no_kit());
    let text = serde_json::to_value(&second.spec.as_ref().unwrap().affinity).unwrap();
    assert_eq!(
        text,
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["b"]}
            ]}]
        }}})
    );
    let third = copy(NAME, &second, Copy::Named, None, &no_kit());
    assert_eq!(
        third.spec.unwrap().affinity,
        None,
        "a fine node: no affinity left"
    );
    assert_eq!(annotation(&third.metadata, AVOIDS_ANNOTATION), None);
}

#[test]
fn a_node_affinity_of_dstacks_own_is_kept_when_the_copy_forgets_the_node() {
    let mut template = named("a", Is::Ready);
    template.spec.as_mut().unwrap().affinity = serde_json::from_value(json!({"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]},
        ]}
    }}))
    .unwrap();
    let kept_off = copy(NAME, &template, Copy::Named, Some("a"), &no_kit());
    let back = copy(NAME, &kept_off, Copy::Named, None, &no_kit());
    assert_eq!(back.spec.unwrap().affinity, template.spec.unwrap().affinity);
}
