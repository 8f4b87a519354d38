//! The nodes a project's pods run on that cannot be counted on, sorted by how sure the cluster
//! is of it, and what each kind allows. The bounds are Kubernetes' own:
//!
//! - every kind starts a replacement before anything stops (a standby, a surge): harmless when
//!   the node was fine after all;
//! - only a node *leaving* by someone's decision (a cordon, an autoscaler's taint) or *lost* by
//!   the cluster's judgement has its pod deleted or scaled off;
//! - only a *lost* node has its pod force-deleted (grace 0): no kubelet there will run the
//!   pod's drain or confirm the deletion, which is when PodGC force-deletes too.
//!
//! A node *silent* by this controller's clock, or *not Ready* by its own kubelet's word, is in
//! doubt: a paused kubelet, a runtime or network plugin restarting, or this controller's watch
//! falling behind all look the same, and Kubernetes alone keeps the pod through them.

use k8s_openapi::api::core::v1::Node;
use std::collections::BTreeMap;

/// The taints the cluster sets on a node it found lost, and what each means: the
/// node-lifecycle controller's when it has heard nothing for its grace period, and the one an
/// operator sets on a node known to be down (non-graceful node shutdown, Kubernetes 1.28+).
const LOST_TAINTS: [(&str, &str); 2] = [
    (
        "node.kubernetes.io/unreachable",
        "is unreachable (taint node.kubernetes.io/unreachable)",
    ),
    (
        "node.kubernetes.io/out-of-service",
        "is out of service (taint node.kubernetes.io/out-of-service)",
    ),
];

/// Why the cluster found `node` lost, if it did: its Ready condition Unknown (the
/// node-lifecycle controller heard nothing for its `--node-monitor-grace-period`), or one of
/// the [`LOST_TAINTS`].
pub fn lost(node: &Node) -> Option<String> {
    if let Some((status, reason)) = ready(node)
        && status == "Unknown"
    {
        return Some(format!("is not Ready (Unknown: {reason})"));
    }
    let taints = node.spec.as_ref()?.taints.as_ref()?;
    LOST_TAINTS
        .iter()
        .find(|(key, _)| taints.iter().any(|t| t.key == *key))
        .map(|(_, why)| (*why).to_owned())
}

/// Why `node`'s kubelet says it is not Ready, if it does (Ready False): the kubelet is alive,
/// its runtime or network plugin is not.
pub fn not_ready(node: &Node) -> Option<String> {
    let (status, reason) = ready(node)?;
    (status == "False").then(|| format!("is not Ready (False: {reason})"))
}

/// The status of the node's Ready condition and its reason.
fn ready(node: &Node) -> Option<(&str, &str)> {
    let ready = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((
        ready.status.as_str(),
        ready.reason.as_deref().unwrap_or("no reason given"),
    ))
}

/// Why the nodes in trouble are too many to act on, if they are: every node (and at least
/// one), or more than two and at least 55% of them. These are the node-lifecycle controller's
/// full and partial disruption (`--unhealthy-zone-threshold` 0.55), in which it stops or slows
/// its evictions: so many nodes failing at once is more likely the view (this controller's
/// watch, the control plane's network) than the nodes.
pub fn disruption(nodes: usize, troubled: usize) -> Option<String> {
    let all = troubled >= nodes && troubled > 0;
    let most = troubled > 2 && troubled * 100 >= nodes * 55;
    (all || most)
        .then(|| format!("{troubled} of {nodes} nodes look silent, not Ready or lost at once"))
}

/// The nodes that cannot be counted on, and why, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeTrouble {
    /// Going away: cordoned or tainted for removal ([`crate::surge::leaving`]).
    pub leaving: BTreeMap<String, String>,
    /// Silent: its kubelet has not renewed the node's Lease for a while, by this controller's
    /// clock. Not proof of anything.
    pub silent: BTreeMap<String, String>,
    /// Not Ready by its own kubelet (Ready False): the kubelet is alive and would run a pod's
    /// drain. Kubernetes' taint manager evicts its pods once their toleration runs out.
    pub not_ready: BTreeMap<String, String>,
    /// Lost by the cluster's judgement: Ready Unknown (the node-lifecycle controller heard
    /// nothing for its grace period), tainted unreachable or out-of-service, or its Node gone.
    pub lost: BTreeMap<String, String>,
}

impl NodeTrouble {
    /// Why `node` cannot be counted on, if it cannot: the surest kind first.
    pub fn of(&self, node: &str) -> Option<&String> {
        self.lost
            .get(node)
            .or_else(|| self.leaving.get(node))
            .or_else(|| self.not_ready.get(node))
            .or_else(|| self.silent.get(node))
    }

    /// Why a pod on `node` may be deleted or scaled off, if it may: the node is leaving or lost.
    pub fn breaking(&self, node: &str) -> Option<&String> {
        self.lost.get(node).or_else(|| self.leaving.get(node))
    }

    /// Why `node` is in doubt, if it is: silent or not Ready, and neither leaving nor lost. A
    /// pod there gets a replacement beside it, never a deletion.
    pub fn doubt(&self, node: &str) -> Option<&String> {
        if self.breaking(node).is_some() {
            return None;
        }
        self.not_ready.get(node).or_else(|| self.silent.get(node))
    }

    /// Whether nothing is known against any node.
    pub fn is_empty(&self) -> bool {
        self.leaving.is_empty()
            && self.silent.is_empty()
            && self.not_ready.is_empty()
            && self.lost.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trouble() -> NodeTrouble {
        let why = |n: &str, w: &str| BTreeMap::from([(n.to_owned(), w.to_owned())]);
        NodeTrouble {
            leaving: why("a", "is cordoned"),
            silent: why("b", "is silent"),
            not_ready: why("c", "is not Ready"),
            lost: why("d", "is lost"),
        }
    }

    fn node(ready: &str, taints: &[&str]) -> Node {
        let taints: Vec<_> = taints
            .iter()
            .map(|k| serde_json::json!({"key": k, "effect": "NoExecute"}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Because"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_node_is_lost_when_the_cluster_says_so_and_not_ready_when_its_kubelet_does() {
        let judged = |n: &Node| (lost(n), not_ready(n));
        assert_eq!(judged(&node("True", &[])), (None, None));
        assert_eq!(
            judged(&node("False", &["node.kubernetes.io/not-ready"])),
            (None, Some("is not Ready (False: Because)".into()))
        );
        assert_eq!(
            judged(&node("Unknown", &["node.kubernetes.io/unreachable"])),
            (Some("is not Ready (Unknown: Because)".into()), None)
        );
        assert_eq!(
            lost(&node("True", &["node.kubernetes.io/unreachable"])).as_deref(),
            Some("is unreachable (taint node.kubernetes.io/unreachable)")
        );
        assert_eq!(
            judged(&node("False", &["node.kubernetes.io/out-of-service"]))
                .0
                .as_deref(),
            Some("is out of service (taint node.kubernetes.io/out-of-service)")
        );
    }

    #[test]
    fn every_node_or_most_of_more_than_two_in_trouble_is_a_disruption() {
        let held: Vec<bool> = [
            (1, 1),
            (2, 1),
            (2, 2),
            (5, 2),
            (5, 3),
            (6, 3),
            (100, 54),
            (100, 55),
        ]
        .iter()
        .map(|(nodes, troubled)| disruption(*nodes, *troubled).is_some())
        .collect();
        assert_eq!(held, [true, false, true, false, true, false, false, true]);
        assert_eq!(disruption(0, 0), None);
    }

    #[test]
    fn only_a_leaving_or_lost_node_lets_its_pod_go() {
        let t = trouble();
        let breaking: Vec<bool> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| t.breaking(n).is_some())
            .collect();
        assert_eq!(breaking, [true, false, false, true, false]);
    }

    #[test]
    fn a_silent_or_not_ready_node_is_in_doubt_unless_it_is_also_leaving_or_lost() {
        let mut t = trouble();
        assert_eq!(t.doubt("b").map(String::as_str), Some("is silent"));
        assert_eq!(t.doubt("c").map(String::as_str), Some("is not Ready"));
        t.silent.insert("a".into(), "is silent".into());
        t.not_ready.insert("d".into(), "is not Ready".into());
        assert_eq!(t.doubt("a"), None);
        assert_eq!(t.doubt("d"), None);
        assert_eq!(t.of("d").map(String::as_str), Some("is lost"));
    }
}
