use super::*;
use rstest::rstest;
use serde_json::{Value, json};

fn node(spec: Value) -> Node {
    serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": spec})).unwrap()
}

/// The ReplicaSet at `replicas`; `record`: the surge recorded on it (from, to); `retired`: the
/// uids its last scale-back was to remove.
fn rs(replicas: i32, record: Option<(i32, i32)>, retired: &[&str]) -> ReplicaSet {
    let mut annotations = serde_json::Map::new();
    if let Some((from, to)) = record {
        annotations.insert(SURGED_FROM_ANNOTATION.into(), json!(from.to_string()));
        annotations.insert(SURGED_TO_ANNOTATION.into(), json!(to.to_string()));
    }
    if !retired.is_empty() {
        annotations.insert(RETIRED_ANNOTATION.into(), json!(retired.join(",")));
    }
    serde_json::from_value(json!({
        "metadata": {"name": "dstack-main-ssh-jump-pod", "annotations": annotations,
                     "resourceVersion": "rs-7"},
        "spec": {"replicas": replicas, "selector": {}},
    }))
    .unwrap()
}

/// A pod named `name` (uid `uid-<name>`) on `node` ("": not scheduled), in `phase`, Ready or not.
fn pod_on(name: &str, node: &str, phase: &str, ready: bool) -> Pod {
    let spec = if node.is_empty() {
        json!({"containers": []})
    } else {
        json!({"nodeName": node, "containers": []})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": format!("7-{name}")},
        "spec": spec,
        "status": {"phase": phase, "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}
        ]},
    }))
    .unwrap()
}

/// Running and Ready.
fn ready(name: &str, node: &str) -> Pod {
    pod_on(name, node, "Running", true)
}

/// Running, not Ready yet.
fn starting(name: &str, node: &str) -> Pod {
    pod_on(name, node, "Running", false)
}

/// Not scheduled.
fn pending(name: &str) -> Pod {
    pod_on(name, "", "Pending", false)
}

fn annotate(mut pod: Pod, pairs: &[(&str, &str)]) -> Pod {
    let annotations = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for (k, v) in pairs {
        annotations.insert((*k).to_owned(), (*v).to_owned());
    }
    pod
}

/// Marked retiring by the controller because of its node, with the lowest cost.
fn marked(pod: Pod) -> Pod {
    let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
    let mark = node_mark(&node, "is cordoned (spec.unschedulable)");
    annotate(
        pod,
        &[
            (RETIRING_ANNOTATION, &mark),
            (DELETION_COST_ANNOTATION, RETIRING_COST),
        ],
    )
}

/// Marked retiring by hand, the controller having added the cost since.
fn by_hand(pod: Pod) -> Pod {
    annotate(
        pod,
        &[
            (RETIRING_ANNOTATION, "a new template"),
            (DELETION_COST_ANNOTATION, RETIRING_COST),
        ],
    )
}

fn terminating(mut pod: Pod) -> Pod {
    pod.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-12-03T00:00:00Z")).unwrap());
    pod
}

fn leaving_nodes(nodes: &[&str]) -> NodeTrouble {
    NodeTrouble {
        leaving: why(nodes, "is cordoned (spec.unschedulable)"),
        ..NodeTrouble::default()
    }
}

fn why(nodes: &[&str], why: &str) -> BTreeMap<String, String> {
    nodes.iter().map(|n| (n.to_string(), why.into())).collect()
}

/// Nodes in each kind of trouble but leaving: `silent`, `not-ready` or `lost`.
fn troubled(kind: &str, nodes: &[&str]) -> NodeTrouble {
    let mut trouble = NodeTrouble::default();
    match kind {
        "silent" => trouble.silent = why(nodes, "has not renewed its Lease for 20 s or more"),
        "not-ready" => trouble.not_ready = why(nodes, "is not Ready (False: KubeletNotReady)"),
        "lost" => trouble.lost = why(nodes, "is not Ready (Unknown: NodeStatusUnknown)"),
        other => panic!("{other}"),
    }
    trouble
}

/// A decision's writes, short: `mark P`, `withdraw P`, `delete P UID`, `scale N`, `scale N
/// from B` (a surge recorded), `scale N retiring UIDS` (a scale-back naming what it removes).
fn short(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|action| match action {
            Action::RetirePod { name, .. } => format!("mark {name}"),
            Action::WithdrawRetiring { name, .. } => format!("withdraw {name}"),
            Action::DeleteRetiringPod { name, uid, .. } => format!("delete {name} {uid}"),
            Action::ScaleReplicaSet {
                replicas,
                surged_from: Some(from),
                ..
            } => format!("scale {replicas} from {from}"),
            Action::ScaleReplicaSet {
                replicas, retired, ..
            } if retired.is_empty() => format!("scale {replicas}"),
            Action::ScaleReplicaSet {
                replicas, retired, ..
            } => format!("scale {replicas} retiring {}", retired.join(",")),
            other => panic!("not a surge's action: {other}"),
        })
        .collect()
}

#[rstest]
#[case::a_schedulable_node_is_staying(json!({}), None)]
#[case::a_cordoned_node_is_leaving(json!({"unschedulable": true}), Some("is cordoned (spec.unschedulable)"))]
#[case::the_unschedulable_taint_is_a_cordon(
    json!({"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}),
    Some("is cordoned (taint node.kubernetes.io/unschedulable)")
)]
#[case::the_cluster_autoscalers_taint_is_a_removal(
    json!({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1733000000", "effect": "NoSchedule"}]}),
    Some("is being removed by the cluster autoscaler (taint ToBeDeletedByClusterAutoscaler)")
)]
#[case::karpenters_taint_is_a_removal(
    json!({"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}),
    Some("is being removed by Karpenter (taint karpenter.sh/disrupted)")
)]
#[case::karpenters_taint_before_v1_is_a_removal(
    json!({"taints": [{"key": "karpenter.sh/disruption", "value": "disrupting", "effect": "NoSchedule"}]}),
    Some("is being removed by Karpenter (taint karpenter.sh/disruption=disrupting)")
)]
#[case::karpenters_old_key_with_another_value_is_not(
    json!({"taints": [{"key": "karpenter.sh/disruption", "value": "candidate", "effect": "NoSchedule"}]}),
    None
)]
#[case::another_taint_is_not(json!({"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}), None)]
fn a_node_is_leaving_when_cordoned_or_tainted_for_removal(
    #[case] spec: Value,
    #[case] why: Option<&str>,
) {
    assert_eq!(leaving(&node(spec)).as_deref(), why);
}

#[rstest]
// One pod on a cordoned node (a), its replacement made, Ready, and the way back.
#[case::a_ready_pod_on_a_cordoned_node_is_retired_and_a_replica_added(
    vec![ready("old", "a")], rs(1, None, &[]), &["a"],
    &["mark old", "scale 2 from 1"])]
#[case::while_the_replacement_starts_nothing_changes(
    vec![marked(ready("old", "a")), starting("new", "b")], rs(2, Some((1, 2)), &[]), &["a"],
    &[])]
#[case::the_replacement_ready_the_replicaset_goes_back_naming_the_retiring_pod(
    vec![marked(ready("old", "a")), ready("new", "b")], rs(2, Some((1, 2)), &[]), &["a"],
    &["scale 1 retiring uid-old"])]
#[case::scaled_back_and_the_old_pod_terminating_nothing_is_left_to_do(
    vec![terminating(marked(ready("old", "a"))), ready("new", "b")], rs(1, None, &["uid-old"]), &["a"],
    &[])]
#[case::a_pod_not_ready_on_a_cordoned_node_needs_no_surge(
    vec![starting("old", "a")], rs(1, None, &[]), &["a"],
    &[])]
#[case::a_pod_marked_retiring_by_hand_is_replaced_the_same_way(
    vec![by_hand(ready("old", "b"))], rs(1, None, &[]), &[],
    &["scale 2 from 1"])]
#[case::a_ready_pod_elsewhere_is_left_alone(
    vec![ready("new", "b")], rs(1, None, &[]), &["a"],
    &[])]
#[case::a_replicaset_scaled_to_zero_is_not_surged(
    vec![ready("old", "a")], rs(0, None, &[]), &["a"],
    &[])]
#[case::two_replicas_surge_to_three(
    vec![ready("old", "a"), ready("other", "b")], rs(2, None, &[]), &["a"],
    &["mark old", "scale 3 from 2"])]
// One replacement per retiring pod, bounded.
#[case::a_replacement_whose_node_is_cordoned_too_is_replaced_in_turn(
    vec![marked(ready("old", "a")), ready("new", "c")], rs(2, Some((1, 2)), &[]), &["a", "c"],
    &["mark new", "scale 3 from 1"])]
#[case::a_hand_mark_that_caught_the_replacement_too_adds_a_third_pod(
    vec![by_hand(ready("old", "b")), by_hand(ready("new", "c"))], rs(2, Some((1, 2)), &[]), &[],
    &["scale 3 from 1"])]
#[case::two_replicas_whose_nodes_are_both_cordoned_surge_to_four(
    vec![ready("x", "a"), ready("y", "b")], rs(2, None, &[]), &["a", "b"],
    &["mark x", "mark y", "scale 4 from 2"])]
#[case::the_surge_adds_at_most_twice_the_count(
    vec![marked(ready("x", "a")), marked(ready("y", "a")), marked(ready("z", "a")), pending("p")],
    rs(3, Some((1, 3)), &[]), &["a"],
    &[])]
#[case::two_retiring_pods_go_back_together_once_one_replacement_is_ready(
    vec![marked(ready("x", "a")), marked(ready("y", "a")), ready("new", "b")], rs(3, Some((1, 3)), &[]), &["a"],
    &["scale 1 retiring uid-x,uid-y"])]
// Drains that evict at once: a replacement of the eviction's beside the surge's.
#[case::a_drain_that_evicted_first_leaves_both_replacements_until_one_is_ready(
    vec![terminating(marked(ready("old", "a"))), starting("r1", "b"), pending("r2")], rs(2, Some((1, 2)), &[]), &["a"],
    &[])]
#[case::a_drain_that_evicted_first_ends_the_surge_once_a_replacement_is_ready(
    vec![terminating(marked(ready("old", "a"))), ready("r1", "b"), starting("r2", "b")], rs(2, Some((1, 2)), &[]), &["a"],
    &["scale 1"])]
#[case::a_drain_that_evicted_first_with_no_surplus_ends_the_surge_at_once(
    vec![terminating(marked(ready("old", "a"))), starting("r1", "b")], rs(2, Some((1, 2)), &[]), &["a"],
    &["scale 1"])]
// The operator's count.
#[case::a_scale_to_zero_during_the_surge_is_kept_and_its_record_dropped(
    vec![marked(ready("old", "a")), starting("new", "b")], rs(0, Some((1, 2)), &[]), &["a"],
    &["scale 0"])]
#[case::a_scale_to_three_during_the_surge_is_the_new_count_to_surge_from(
    vec![marked(ready("old", "a")), starting("new", "b")], rs(3, Some((1, 2)), &[]), &["a"],
    &["scale 4 from 3"])]
#[case::a_count_nobody_recorded_with_nothing_retiring_keeps_and_drops_the_record(
    vec![ready("p", "b"), ready("q", "c")], rs(2, Some((1, 3)), &[]), &[],
    &["scale 2"])]
// A retiring pod the ReplicaSet controller kept when it scaled back.
#[case::a_retiring_pod_the_scale_back_kept_is_deleted_by_its_uid_while_another_is_ready(
    vec![marked(ready("old", "a")), ready("other", "c"), terminating(ready("new", "b"))], rs(2, None, &["uid-old"]), &["a"],
    &["delete old uid-old"])]
#[case::a_retiring_pod_the_scale_back_kept_alone_serves_on(
    vec![marked(ready("old", "a")), terminating(ready("new", "b"))], rs(1, None, &["uid-old"]), &["a"],
    &[])]
#[case::while_the_replicaset_has_its_surplus_the_retiring_pod_waits_for_it(
    vec![marked(ready("old", "a")), ready("new", "b")], rs(1, None, &["uid-old"]), &["a"],
    &[])]
// A node that stays after all.
#[case::an_uncordoned_node_withdraws_its_mark_and_the_pending_replacement_goes(
    vec![marked(ready("old", "a")), pending("new")], rs(2, Some((1, 2)), &[]), &[],
    &["withdraw old", "scale 1"])]
#[case::a_cordon_lifted_before_the_surge_withdraws_the_mark(
    vec![marked(ready("old", "a"))], rs(1, None, &[]), &[],
    &["withdraw old"])]
#[case::with_a_replacement_ready_the_swap_goes_on(
    vec![marked(ready("old", "a")), ready("new", "b")], rs(2, Some((1, 2)), &[]), &[],
    &["scale 1 retiring uid-old"])]
#[case::a_mark_set_by_hand_is_never_withdrawn(
    vec![by_hand(ready("old", "a")), starting("new", "b")], rs(2, Some((1, 2)), &[]), &[],
    &[])]
fn a_pod_on_a_leaving_node_is_replaced_before_it_goes(
    #[case] pods: Vec<Pod>,
    #[case] rs: ReplicaSet,
    #[case] leaving: &[&str],
    #[case] expected: &[&str],
) {
    let actions = decide(&rs, &pods, &leaving_nodes(leaving));
    assert_eq!(short(&actions), expected, "{actions:#?}");
}

#[test]
fn a_record_without_the_count_set_is_taken_as_the_count_now() {
    let mut surged = rs(2, Some((1, 2)), &[]);
    surged
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(SURGED_TO_ANNOTATION);
    let pods = [marked(ready("old", "a")), ready("new", "b")];
    let actions = decide(&surged, &pods, &leaving_nodes(&["a"]));
    assert_eq!(short(&actions), ["scale 1 retiring uid-old"]);
}

/// A pod an operator marked with `kubectl annotate` alone: it gets the lowest cost first,
/// and the ReplicaSet goes back only once it has it (without it the ReplicaSet would delete
/// the replacement, Ready the shortest time, and the surge would start again).
#[rstest]
#[case::before_the_surge(vec![], rs(1, None, &[]), &["mark old", "scale 2 from 1"])]
#[case::with_the_replacement_ready(vec![ready("new", "b")], rs(2, Some((1, 2)), &[]), &["mark old"])]
fn a_pod_marked_by_hand_gets_the_lowest_cost_before_the_replicaset_goes_back(
    #[case] others: Vec<Pod>,
    #[case] rs: ReplicaSet,
    #[case] expected: &[&str],
) {
    let marked = annotate(
        ready("old", "b"),
        &[(RETIRING_ANNOTATION, "a new template")],
    );
    let pods: Vec<Pod> = std::iter::once(marked).chain(others).collect();
    let actions = decide(&rs, &pods, &NodeTrouble::default());
    assert_eq!(short(&actions), expected, "{actions:?}");
    assert_eq!(
        actions[0].to_string(),
        "mark pod old retiring (a new template)"
    );
}

#[rstest]
// Silence by this controller's clock, or a kubelet that says its node is not Ready: a
// replacement beside the pod, never its deletion.
#[case::a_pod_on_a_silent_node_gets_a_replacement_and_no_mark(
    vec![ready("old", "a")], rs(1, None, &[]), "silent",
    &["scale 2 from 1"])]
#[case::a_pod_on_a_not_ready_node_gets_a_replacement_too(
    vec![starting("old", "a")], rs(1, None, &[]), "not-ready",
    &["scale 2 from 1"])]
#[case::the_replacement_ready_nothing_is_scaled_back_while_the_node_is_silent(
    vec![ready("old", "a"), ready("new", "b")], rs(2, Some((1, 2)), &[]), "silent",
    &[])]
#[case::the_replacement_ready_nothing_is_scaled_back_while_the_node_is_not_ready(
    vec![starting("old", "a"), ready("new", "b")], rs(2, Some((1, 2)), &[]), "not-ready",
    &[])]
#[case::a_mark_on_a_node_now_only_in_doubt_is_withdrawn_and_nothing_scaled_back(
    vec![marked(ready("old", "a")), ready("new", "b")], rs(2, Some((1, 2)), &[]), "silent",
    &["withdraw old"])]
#[case::a_pod_on_a_lost_node_is_not_ready_and_the_surge_ends_once_its_replacement_is(
    vec![starting("old", "a"), ready("new", "b")], rs(2, Some((1, 2)), &[]), "lost",
    &["scale 1"])]
#[case::a_ready_pod_on_a_lost_node_is_retired_like_one_on_a_cordoned_node(
    vec![ready("old", "a")], rs(1, None, &[]), "lost",
    &["mark old", "scale 2 from 1"])]
fn a_pod_on_a_node_in_doubt_gets_a_replacement_and_stays(
    #[case] pods: Vec<Pod>,
    #[case] rs: ReplicaSet,
    #[case] kind: &str,
    #[case] expected: &[&str],
) {
    let actions = decide(&rs, &pods, &troubled(kind, &["a"]));
    assert_eq!(short(&actions), expected, "{actions:#?}");
}

/// `pod` as the controller leaves a pod on a silent node once another serves.
fn taken_out(mut pod: Pod) -> Pod {
    pod.status = Some(
        serde_json::from_value(json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False", "reason": crate::rotation::REASON}]}))
        .unwrap(),
    );
    pod
}

#[test]
fn a_pod_taken_out_of_rotation_holds_the_surge_until_its_kubelet_says_it_is_ready() {
    // The node speaks again (or a new leader has not seen it silent yet), but its kubelet has
    // not written the pod's Ready back: a scale-back now would remove that pod first.
    let pods = [taken_out(ready("old", "a")), ready("new", "b")];
    let actions = decide(&rs(2, Some((1, 2)), &[]), &pods, &NodeTrouble::default());
    assert_eq!(short(&actions), Vec::<String>::new());
}

/// `pod` created at `at`, as the API server dates every pod.
fn created(mut pod: Pod, at: &str) -> Pod {
    pod.metadata.creation_timestamp = Some(serde_json::from_value(json!(at)).unwrap());
    pod
}

#[test]
fn once_the_node_is_back_the_newest_pod_is_marked_and_the_surge_ends_on_it() {
    // The pod whose node was in doubt was Ready again only a moment ago: left to its own
    // ranking, the ReplicaSet controller would remove it, sessions and all.
    let old = created(ready("old", "a"), "2026-12-07T10:00:00Z");
    let new = created(ready("new", "b"), "2026-12-07T10:05:00Z");
    let surged = rs(2, Some((1, 2)), &[]);
    let actions = decide(
        &surged,
        &[old.clone(), new.clone()],
        &NodeTrouble::default(),
    );
    assert_eq!(short(&actions), ["mark new"]);
    assert_eq!(
        actions[0].to_string(),
        "mark pod new retiring (the newest pods of a surge that is over go first)"
    );
    let marked = annotate(
        new,
        &[
            (
                RETIRING_ANNOTATION,
                "the newest pods of a surge that is over go first",
            ),
            (DELETION_COST_ANNOTATION, RETIRING_COST),
        ],
    );
    let actions = decide(&surged, &[old, marked], &NodeTrouble::default());
    assert_eq!(short(&actions), ["scale 1 retiring uid-new"]);
}

#[test]
fn a_surge_over_with_a_pod_not_ready_ends_at_once_and_the_replicaset_removes_that_pod() {
    let pods = [
        created(ready("old", "a"), "2026-12-07T10:00:00Z"),
        created(starting("new", "b"), "2026-12-07T10:05:00Z"),
    ];
    let actions = decide(&rs(2, Some((1, 2)), &[]), &pods, &NodeTrouble::default());
    assert_eq!(short(&actions), ["scale 1"]);
    assert_eq!(
        actions[0].to_string(),
        "scale replicaset dstack-main-ssh-jump-pod to 1 (no retiring pod is left)"
    );
}

/// The writes' counts of surges undone in a row, in order.
fn undone_counts(actions: &[Action]) -> Vec<u32> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ScaleReplicaSet { undone, .. } => Some(*undone),
            _ => None,
        })
        .collect()
}

fn undone_before(mut rs: ReplicaSet, times: u32) -> ReplicaSet {
    rs.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(SURGE_UNDONE_ANNOTATION.into(), times.to_string());
    rs
}

#[test]
fn a_surge_undone_by_another_writer_is_made_again_once_and_counted() {
    // Surged to 2, and set back to 1 by someone else while the pod still retires.
    let undone = rs(1, Some((1, 2)), &[]);
    let actions = decide(
        &undone,
        &[marked(ready("old", "a"))],
        &leaving_nodes(&["a"]),
    );
    assert_eq!(short(&actions), ["scale 2 from 1"]);
    assert_eq!(undone_counts(&actions), [1]);
    assert_eq!(fought(&undone), None);
}

#[test]
fn a_surge_undone_twice_in_a_row_stops_and_leaves_their_count() {
    let again = undone_before(rs(1, Some((1, 2)), &[]), 1);
    let actions = decide(&again, &[marked(ready("old", "a"))], &leaving_nodes(&["a"]));
    assert_eq!(short(&actions), ["scale 1"]);
    assert_eq!(undone_counts(&actions), [2]);
    assert!(
        actions[0]
            .to_string()
            .ends_with("undone 2 times in a row, it is surged no more)"),
        "{}",
        actions[0]
    );
    // What it wrote: surged no more.
    assert_eq!(fought(&undone_before(rs(1, None, &[]), 2)), Some(2));
}

#[test]
fn a_surge_that_ends_as_planned_forgets_the_one_undone_before() {
    let surged = undone_before(rs(2, Some((1, 2)), &[]), 1);
    let actions = decide(
        &surged,
        &[marked(ready("old", "a")), ready("new", "b")],
        &leaving_nodes(&["a"]),
    );
    assert_eq!(short(&actions), ["scale 1 retiring uid-old"]);
    assert_eq!(undone_counts(&actions), [0]);
}

#[test]
fn the_retirement_says_which_node_and_why() {
    let actions = decide(
        &rs(1, None, &[]),
        &[ready("old", "a")],
        &leaving_nodes(&["a"]),
    );
    assert_eq!(
        actions[0].to_string(),
        "mark pod old retiring (its node a is cordoned (spec.unschedulable))"
    );
    assert_eq!(
        actions[1].to_string(),
        "scale replicaset dstack-main-ssh-jump-pod to 2 (a replacement starts before the retiring pod goes)"
    );
}

/// Each write names the version of the object it was decided on: the API server refuses it
/// once that object has changed (a `kubectl scale` meanwhile), and the change decides again.
#[test]
fn every_write_carries_the_resource_version_it_was_decided_on() {
    let actions = decide(
        &rs(1, None, &[]),
        &[ready("old", "a")],
        &leaving_nodes(&["a"]),
    );
    let versions: Vec<Option<&str>> = actions
        .iter()
        .map(|a| match a {
            Action::RetirePod {
                resource_version, ..
            }
            | Action::ScaleReplicaSet {
                resource_version, ..
            } => resource_version.as_deref(),
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(versions, [Some("7-old"), Some("rs-7")]);
    let withdrawn = decide(
        &rs(1, None, &[]),
        &[marked(ready("old", "a"))],
        &NodeTrouble::default(),
    );
    assert!(
        matches!(&withdrawn[..], [Action::WithdrawRetiring { resource_version: Some(v), .. }] if v == "7-old"),
        "{withdrawn:?}"
    );
}

/// A node whose ExternalIP is `ip` (None: no address), going away or not.
fn addressed(name: &str, ip: Option<&str>, leaving: bool) -> Node {
    let addresses: Vec<Value> = ip
        .map(|ip| json!({"type": "ExternalIP", "address": ip}))
        .into_iter()
        .chain([json!({"type": "InternalIP", "address": "10.0.0.1"})])
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"unschedulable": leaving},
        "status": {"addresses": addresses},
    }))
    .unwrap()
}

#[rstest]
#[case::the_newest_pods_node_when_it_is_staying(&["a", "b"], &[("a", Some("1.1.1.1"), false), ("b", Some("2.2.2.2"), false)], Some("1.1.1.1"))]
#[case::another_pods_node_when_the_newest_pods_node_is_cordoned(&["a", "b"], &[("a", Some("1.1.1.1"), true), ("c", Some("3.3.3.3"), false), ("b", Some("2.2.2.2"), false)], Some("2.2.2.2"))]
#[case::any_staying_node_when_every_pods_node_is_going(&["a"], &[("a", Some("1.1.1.1"), true), ("c", Some("3.3.3.3"), false)], Some("3.3.3.3"))]
#[case::a_node_going_away_only_when_no_other_has_an_address(&["a"], &[("a", Some("1.1.1.1"), true), ("c", None, false)], Some("1.1.1.1"))]
#[case::no_address_when_no_node_has_one(&["a"], &[("a", None, false)], None)]
fn jobs_get_the_address_of_a_node_that_is_staying(
    #[case] preferred: &[&str],
    #[case] nodes: &[(&str, Option<&str>, bool)],
    #[case] expected: Option<&str>,
) {
    let nodes: Vec<Node> = nodes
        .iter()
        .map(|(name, ip, leaving)| addressed(name, *ip, *leaving))
        .collect();
    assert_eq!(job_address(preferred, &nodes).as_deref(), expected);
}
