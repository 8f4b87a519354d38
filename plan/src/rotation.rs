//! A pod on a silent node taken out of its Service's rotation, not deleted. Silence by this
//! controller's clock proves nothing (a kubelet paused, a watch behind), so the pod stays; but
//! if the node is really down, every new connection kube-proxy sends it fails until the
//! node-lifecycle controller finds the node lost (50 s by default) and sets the pod's Ready
//! condition False. Once another pod of the project serves from a node without trouble (a
//! standby, a surged replacement), the controller sets that condition itself, as the
//! node-lifecycle controller would: the EndpointSlice controller drops the pod from the
//! Service's endpoints, new connections go to the other pod, and the connections already open
//! stay (kube-proxy removes no established flow of a TCP endpoint that goes: iptables and
//! nftables modes leave its conntrack entry, IPVS waits for its connections to end). When the
//! kubelet speaks again, its status manager finds the condition differs from its own and
//! writes Ready back (it reconciles every 10 s).

use crate::action::Action;
use crate::nodes::NodeTrouble;
use crate::objects::{is_active, is_ready, name_of};
use k8s_openapi::api::core::v1::Pod;

/// The reason on the Ready condition of a pod taken out of rotation, until its kubelet writes
/// its own again.
pub const REASON: &str = "NodeSilent";

/// Whether `pod` is out of rotation by this controller's hand: its Ready condition False with
/// [`REASON`]. Its kubelet has not spoken since, so whatever ranks pods by readiness must not
/// take it for one that failed.
pub fn taken_out(pod: &Pod) -> bool {
    crate::objects::condition(pod, "Ready")
        .is_some_and(|(status, reason, _)| status == "False" && reason == REASON)
}

/// The pods of a project (`pods`: every pod its Service selects) to take out of rotation.
pub fn decide(pods: &[Pod], nodes: &NodeTrouble) -> Vec<Action> {
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let serving_elsewhere = pods
        .iter()
        .any(|p| is_active(p) && is_ready(p) && nodes.of(&node(p)).is_none());
    if !serving_elsewhere {
        // The only pod that may serve is kept in rotation: a silent node may still answer.
        return Vec::new();
    }
    pods.iter()
        .filter(|p| is_active(p) && is_ready(p))
        .filter_map(|p| {
            let on = node(p);
            // A node lost or leaving has its pods deleted instead; one not Ready has them
            // taken out by the node-lifecycle controller.
            let why = nodes
                .silent
                .get(&on)
                .filter(|_| nodes.breaking(&on).is_none() && !nodes.not_ready.contains_key(&on))?;
            Some(Action::TakeOutOfRotation {
                name: name_of(&p.metadata).to_owned(),
                why: format!("its node {on} {why}; another pod serves"),
                resource_version: p.metadata.resource_version.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn pod(name: &str, node: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "resourceVersion": format!("7-{name}")},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
        }))
        .unwrap()
    }

    fn trouble(silent: &[&str], lost: &[&str]) -> NodeTrouble {
        let why = |nodes: &[&str], why: &str| -> BTreeMap<String, String> {
            nodes
                .iter()
                .map(|n| (n.to_string(), why.to_owned()))
                .collect()
        };
        NodeTrouble {
            silent: why(silent, "is silent"),
            lost: why(lost, "is lost"),
            ..NodeTrouble::default()
        }
    }

    fn taken(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                Action::TakeOutOfRotation { name, .. } => name.clone(),
                other => panic!("{other}"),
            })
            .collect()
    }

    #[rstest]
    #[case::a_pod_on_a_silent_node_goes_out_once_another_serves(
        vec![pod("old", "a", true), pod("standby", "b", true)], &["a"], &[], &["old"])]
    #[case::the_only_pod_that_may_serve_stays_in(
        vec![pod("old", "a", true), pod("standby", "b", false)], &["a"], &[], &[])]
    #[case::a_pod_serving_on_another_silent_node_is_not_serving_elsewhere(
        vec![pod("old", "a", true), pod("standby", "b", true)], &["a", "b"], &[], &[])]
    #[case::a_pod_already_out_is_left(
        vec![pod("old", "a", false), pod("standby", "b", true)], &["a"], &[], &[])]
    #[case::a_pod_on_a_lost_node_is_deleted_not_taken_out(
        vec![pod("old", "a", true), pod("standby", "b", true)], &["a"], &["a"], &[])]
    #[case::nothing_in_doubt_nothing_taken_out(
        vec![pod("old", "a", true), pod("standby", "b", true)], &[], &[], &[])]
    fn a_pod_on_a_silent_node_leaves_the_rotation_only_while_another_serves(
        #[case] pods: Vec<Pod>,
        #[case] silent: &[&str],
        #[case] lost: &[&str],
        #[case] expected: &[&str],
    ) {
        assert_eq!(taken(&decide(&pods, &trouble(silent, lost))), expected);
    }

    #[test]
    fn the_write_names_the_node_and_carries_the_pods_version() {
        let actions = decide(
            &[pod("old", "a", true), pod("standby", "b", true)],
            &trouble(&["a"], &[]),
        );
        assert_eq!(
            actions[0].to_string(),
            "take pod old out of the Service's endpoints, its connections kept (its node a is silent; another pod serves)"
        );
        assert!(
            matches!(&actions[0], Action::TakeOutOfRotation { resource_version: Some(v), .. } if v == "7-old")
        );
    }
}
