//! Make-before-break for a jump pod whose node is going away: cordoned (`kubectl drain`, a
//! node upgrade) or marked for removal by an autoscaler. Kubernetes has no such thing for one
//! replica: a Deployment's `maxSurge` covers rollouts only, and a PodDisruptionBudget on one
//! replica either never holds a drain or holds it forever. So the controller does it:
//!
//! 1. a Ready pod on a node going away is marked *retiring* ([`RETIRING_ANNOTATION`]) with the
//!    lowest deletion cost, and the ReplicaSet gets one replica more, recorded on it
//!    ([`SURGED_FROM_ANNOTATION`]); the scheduler keeps the new pod off the cordoned node;
//! 2. once as many pods as before are Ready elsewhere, the ReplicaSet goes back to its count.
//!    It removes the retiring pod: among Ready pods the ReplicaSet controller deletes the one
//!    with the lowest `controller.kubernetes.io/pod-deletion-cost` first (without it, the one
//!    Ready the shortest time: the new pod). The old pod's own handover (the start script's)
//!    covers the moment kube-proxy takes to learn of it;
//! 3. if the retiring pods went another way (a drain evicted them first), the ReplicaSet goes
//!    back to its count all the same.
//!
//! A pod marked retiring by hand (`kubectl annotate pod ... jumppod.io/retiring=why`) is replaced
//! the same way, wherever it runs: how an operator rolls a new template without an outage.
//!
//! Nothing here can hold a drain: no budget is created. A controller that is down surges
//! nothing, and the drain evicts the pod as it would without jumppod; the pod's handover then
//! keeps accepting until the replacement the eviction caused is Ready.

use crate::action::Action;
use crate::objects::{annotation, is_active, is_ready, name_of};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::BTreeMap;

/// On a pod being replaced before its node goes away: why.
pub const RETIRING_ANNOTATION: &str = "jumppod.io/retiring";
/// On a ReplicaSet the controller surged: its replicas before the surge.
pub const SURGED_FROM_ANNOTATION: &str = "jumppod.io/surged-from";
/// The ReplicaSet controller deletes pods of a lower cost first when it scales down
/// (Kubernetes' PodDeletionCost, on by default since 1.22).
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The cost of a retiring pod: below any a user would set to keep a pod.
pub const RETIRING_COST: &str = "-1000";

/// The taints that say a node is going away, and what each means.
const LEAVING_TAINTS: [(&str, &str); 3] = [
    (
        "node.kubernetes.io/unschedulable",
        "is cordoned (taint node.kubernetes.io/unschedulable)",
    ),
    (
        "ToBeDeletedByClusterAutoscaler",
        "is being removed by the cluster autoscaler (taint ToBeDeletedByClusterAutoscaler)",
    ),
    (
        "karpenter.sh/disrupted",
        "is being removed by Karpenter (taint karpenter.sh/disrupted)",
    ),
];

/// Why `node` is going away, if it is: cordoned (`spec.unschedulable`, what `kubectl cordon`
/// and `drain` set, or its taint), or tainted for removal by an autoscaler.
pub fn leaving(node: &Node) -> Option<String> {
    let spec = node.spec.as_ref()?;
    if spec.unschedulable == Some(true) {
        return Some("is cordoned (spec.unschedulable)".into());
    }
    spec.taints.iter().flatten().find_map(|taint| {
        LEAVING_TAINTS
            .iter()
            .find(|(key, _)| *key == taint.key)
            .map(|(_, why)| (*why).to_owned())
    })
}

/// What the controller writes so that the pods of `rs` on nodes going away (`leaving`: node
/// name, why) are replaced before they go.
pub fn decide(rs: &ReplicaSet, pods: &[Pod], leaving: &BTreeMap<String, String>) -> Vec<Action> {
    let name = name_of(&rs.metadata);
    let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let surged_from = annotation(&rs.metadata, SURGED_FROM_ANNOTATION)
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|n| *n >= 0);
    let base = surged_from.unwrap_or(replicas);
    if base == 0 {
        // Scaled to zero on purpose: nothing serves, nothing to replace.
        return Vec::new();
    }
    let mut actions = Vec::new();
    let mut retiring = 0;
    let mut ready_elsewhere = 0;
    let mut unpriced = false;
    for pod in pods.iter().filter(|p| is_active(p)) {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let going = node.and_then(|n| leaving.get(n).map(|why| (n, why)));
        if let Some(why) = annotation(&pod.metadata, RETIRING_ANNOTATION) {
            retiring += 1;
            // Marked by hand, without the cost: without it the ReplicaSet would delete the
            // replacement (the pod Ready the shortest time) when it scales back.
            if annotation(&pod.metadata, DELETION_COST_ANNOTATION) != Some(RETIRING_COST) {
                unpriced = true;
                actions.push(Action::RetirePod {
                    name: name_of(&pod.metadata).to_owned(),
                    why: why.to_owned(),
                });
            }
        } else if let Some((node, why)) = going {
            // A pod not Ready there serves nobody, and the ReplicaSet removes it before any
            // Ready one when it scales back: it needs no mark.
            if is_ready(pod) {
                retiring += 1;
                actions.push(Action::RetirePod {
                    name: name_of(&pod.metadata).to_owned(),
                    why: format!("its node {node} {why}"),
                });
            }
        } else if is_ready(pod) {
            ready_elsewhere += 1;
        }
    }
    if retiring > 0 {
        // Back only once every retiring pod has the lowest cost (this round's marks are
        // written before the scale, but the cache shows them only on the next reconcile).
        let (target, why) = if ready_elsewhere >= base && !unpriced {
            (base, "the replacement is Ready: the retiring pod goes")
        } else {
            (
                base + 1,
                "a replacement starts before the retiring pod goes",
            )
        };
        let record = (target > base).then_some(base);
        // Not while a replacement is Ready and waits only for the marks: no surge beyond it.
        let waiting_for_marks = unpriced && ready_elsewhere >= base;
        if (target != replicas || record != surged_from) && !waiting_for_marks {
            actions.push(Action::ScaleReplicaSet {
                name: name.to_owned(),
                replicas: target,
                surged_from: record,
                why: why.into(),
            });
        }
    } else if let Some(from) = surged_from {
        actions.push(Action::ScaleReplicaSet {
            name: name.to_owned(),
            replicas: from,
            surged_from: None,
            why: "no retiring pod is left".into(),
        });
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::{Value, json};

    fn node(spec: Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": spec})).unwrap()
    }

    fn rs(replicas: i32, surged_from: Option<i32>) -> ReplicaSet {
        let annotations = surged_from
            .map(|n| json!({SURGED_FROM_ANNOTATION: n.to_string()}))
            .unwrap_or(json!({}));
        serde_json::from_value(json!({
            "metadata": {"name": "dstack-main-ssh-jump-pod", "annotations": annotations},
            "spec": {"replicas": replicas, "selector": {}},
        }))
        .unwrap()
    }

    /// A pod on `node`, Ready or not, retiring or not, terminating or not.
    fn pod(name: &str, node: &str, ready: bool, retiring: bool, terminating: bool) -> Pod {
        let mut meta = json!({"name": name});
        if retiring {
            meta["annotations"] = json!({
                RETIRING_ANNOTATION: "its node a is cordoned",
                DELETION_COST_ANNOTATION: RETIRING_COST,
            });
        }
        if terminating {
            meta["deletionTimestamp"] = json!("2026-12-03T00:00:00Z");
        }
        serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]},
        }))
        .unwrap()
    }

    fn cordoned(nodes: &[&str]) -> BTreeMap<String, String> {
        nodes
            .iter()
            .map(|n| (n.to_string(), "is cordoned (spec.unschedulable)".into()))
            .collect()
    }

    /// The scales and retirements of a decision, without their prose.
    fn outline(actions: &[Action]) -> (Vec<String>, Option<(i32, Option<i32>)>) {
        let mut retired = Vec::new();
        let mut scaled = None;
        for action in actions {
            match action {
                Action::RetirePod { name, .. } => retired.push(name.clone()),
                Action::ScaleReplicaSet {
                    replicas,
                    surged_from,
                    ..
                } => scaled = Some((*replicas, *surged_from)),
                other => panic!("not a surge's action: {other}"),
            }
        }
        (retired, scaled)
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
    #[case::another_taint_is_not(json!({"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}), None)]
    fn a_node_is_leaving_when_cordoned_or_tainted_for_removal(
        #[case] spec: Value,
        #[case] why: Option<&str>,
    ) {
        assert_eq!(leaving(&node(spec)).as_deref(), why);
    }

    #[rstest]
    #[case::a_ready_pod_on_a_cordoned_node_is_retired_and_a_replica_added(
        vec![pod("old", "a", true, false, false)], rs(1, None),
        (vec!["old".into()], Some((2, Some(1))))
    )]
    #[case::while_the_replacement_starts_nothing_changes(
        vec![pod("old", "a", true, true, false), pod("new", "b", false, false, false)], rs(2, Some(1)),
        (vec![], None)
    )]
    #[case::the_replacement_ready_the_replicaset_goes_back_to_one(
        vec![pod("old", "a", true, true, false), pod("new", "b", true, false, false)], rs(2, Some(1)),
        (vec![], Some((1, None)))
    )]
    #[case::scaled_back_and_the_old_pod_terminating_nothing_is_left_to_do(
        vec![pod("old", "a", true, true, true), pod("new", "b", true, false, false)], rs(1, None),
        (vec![], None)
    )]
    #[case::a_retiring_pod_a_drain_evicted_first_ends_the_surge(
        vec![pod("old", "a", true, true, true), pod("new", "b", false, false, false), pod("extra", "b", false, false, false)], rs(2, Some(1)),
        (vec![], Some((1, None)))
    )]
    #[case::a_pod_not_ready_on_a_cordoned_node_needs_no_surge(
        vec![pod("old", "a", false, false, false)], rs(1, None),
        (vec![], None)
    )]
    #[case::a_pod_marked_retiring_by_hand_is_replaced_the_same_way(
        vec![pod("old", "b", true, true, false)], rs(1, None),
        (vec![], Some((2, Some(1))))
    )]
    #[case::a_ready_pod_elsewhere_is_left_alone(
        vec![pod("new", "b", true, false, false)], rs(1, None),
        (vec![], None)
    )]
    #[case::a_replicaset_scaled_to_zero_is_not_surged(
        vec![pod("old", "a", true, false, false)], rs(0, None),
        (vec![], None)
    )]
    #[case::two_replicas_surge_to_three_and_back_to_two(
        vec![pod("old", "a", true, false, false), pod("other", "b", true, false, false)], rs(2, None),
        (vec!["old".into()], Some((3, Some(2))))
    )]
    fn a_pod_on_a_leaving_node_is_replaced_before_it_goes(
        #[case] pods: Vec<Pod>,
        #[case] rs: ReplicaSet,
        #[case] expected: (Vec<String>, Option<(i32, Option<i32>)>),
    ) {
        let actions = decide(&rs, &pods, &cordoned(&["a"]));
        assert_eq!(outline(&actions), expected, "{actions:?}");
    }

    /// A pod an operator marked with `kubectl annotate` alone: it gets the lowest cost first,
    /// and the ReplicaSet goes back only once it has it (without it the ReplicaSet would delete
    /// the replacement, Ready the shortest time, and the surge would start again).
    #[rstest]
    #[case::before_the_surge(vec![], rs(1, None), Some((2, Some(1))))]
    #[case::with_the_replacement_ready(vec![pod("new", "b", true, false, false)], rs(2, Some(1)), None)]
    fn a_pod_marked_by_hand_gets_the_lowest_cost_before_the_replicaset_goes_back(
        #[case] others: Vec<Pod>,
        #[case] rs: ReplicaSet,
        #[case] scaled: Option<(i32, Option<i32>)>,
    ) {
        let mut marked = pod("old", "b", true, true, false);
        marked
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(DELETION_COST_ANNOTATION);
        let pods: Vec<Pod> = std::iter::once(marked).chain(others).collect();
        let actions = decide(&rs, &pods, &BTreeMap::new());
        assert_eq!(
            outline(&actions),
            (vec!["old".to_owned()], scaled),
            "{actions:?}"
        );
        assert_eq!(
            actions[0].to_string(),
            "mark pod old retiring (its node a is cordoned)"
        );
    }

    #[test]
    fn the_retirement_says_which_node_and_why() {
        let actions = decide(
            &rs(1, None),
            &[pod("old", "a", true, false, false)],
            &cordoned(&["a"]),
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
}
