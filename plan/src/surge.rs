//! Make-before-break for a jump pod whose node is going away: cordoned (`kubectl drain`, a
//! node upgrade) or marked for removal by an autoscaler. Kubernetes has no such thing for one
//! replica: a Deployment's `maxSurge` covers rollouts only, and a PodDisruptionBudget on one
//! replica either never holds a drain or holds it forever. So the controller does it:
//!
//! 1. a Ready pod on a node going away is marked *retiring* ([`RETIRING_ANNOTATION`]) with the
//!    lowest deletion cost, and the ReplicaSet gets one replica more per retiring pod, at most
//!    twice its own count; the counts before and after are recorded on it
//!    ([`SURGED_FROM_ANNOTATION`], [`SURGED_TO_ANNOTATION`]); the scheduler keeps the new pods
//!    off the nodes going away;
//! 2. once as many pods as before are Ready elsewhere, the ReplicaSet goes back to its count,
//!    naming the retiring pods that scale is to remove ([`RETIRED_ANNOTATION`]). The
//!    ReplicaSet controller deletes surplus pods ranked as `ActivePodsWithRanks` ranks them
//!    (pkg/controller/controller_utils.go): unscheduled first, then Pending < Unknown <
//!    Running, then not Ready, then the lower `controller.kubernetes.io/pod-deletion-cost`
//!    (only with the PodDeletionCost feature gate, on by default since 1.22), then more pods
//!    on the same node, then Ready the shortest time. Among Ready pods the retiring ones go
//!    first by their cost. The old pod's own handover (the start script's) covers the moment
//!    kube-proxy takes to learn of it;
//! 3. a retiring pod still active once the ReplicaSet has no surplus left was kept by that
//!    ranking (the gate off, or the replacement not Ready at that moment): it is deleted by
//!    its uid while another pod is Ready, and the ReplicaSet replaces it while it hands over.
//!    The only pod left serves on until its node's drain evicts it. Surging again would end
//!    the same way;
//! 4. if the retiring pods went another way (a drain evicted them first), the ReplicaSet goes
//!    back once as many pods are Ready as before: a drain that evicts at once makes a
//!    replacement of its own beside the surge's, and the ranking then keeps the one that is
//!    Ready, not the one created first;
//! 5. a mark the controller set because of the node is withdrawn when the node stays after all
//!    (uncordoned, the autoscaler's taint removed) and no replacement is Ready yet: the old pod
//!    keeps its sessions, and the ReplicaSet goes back, removing the replacement that is not
//!    Ready;
//! 6. a count on the ReplicaSet other than the one the controller set is someone else's (a
//!    `kubectl scale` during the surge): the record is dropped and that count is the new base;
//! 7. a pod on a node in doubt (silent, not Ready: [`crate::nodes`]), or taken out of rotation
//!    and not yet Ready again, gets a replacement too, but no mark, and nothing is scaled back
//!    meanwhile: once the cluster finds the node lost its pod goes as in 1-2; once the node is
//!    back, the newest pods are marked retiring and the surplus goes as in 2, so that the pod
//!    that held its sessions stays, though its kubelet set it Ready only a moment ago.
//!
//! Every write carries the resourceVersion of the object it was decided on: an object changed
//! meanwhile refuses it (409 Conflict), and the change it saw makes the controller decide
//! again.
//!
//! A pod marked retiring by hand (`kubectl annotate pod ... jumppod.io/retiring=why`) is replaced
//! the same way, wherever it runs: how an operator rolls a new template without an outage.
//!
//! Nothing here can hold a drain: no budget is created. A controller that is down surges
//! nothing, and the drain evicts the pod as it would without jumppod; the pod's handover then
//! keeps accepting until the replacement the eviction caused is Ready.

use crate::action::Action;
use crate::nodes::NodeTrouble;
use crate::objects::{annotation, is_active, is_ready, name_of};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::{BTreeMap, BTreeSet};

/// On a pod being replaced before its node goes away: why.
pub const RETIRING_ANNOTATION: &str = "jumppod.io/retiring";
/// On a ReplicaSet the controller surged: its replicas before the surge.
pub const SURGED_FROM_ANNOTATION: &str = "jumppod.io/surged-from";
/// On a ReplicaSet the controller surged: the replicas it set. Another count there was set by
/// someone else, whose decision it is.
pub const SURGED_TO_ANNOTATION: &str = "jumppod.io/surged-to";
/// On a ReplicaSet the controller scaled back: the uids of the retiring pods that scale was
/// to remove (comma-separated), kept until the next surge.
pub const RETIRED_ANNOTATION: &str = "jumppod.io/retired";
/// On a ReplicaSet the controller surged: how many surges in a row another writer of its
/// `replicas` undid. Removed when a surge ends as planned.
pub const SURGE_UNDONE_ANNOTATION: &str = "jumppod.io/surge-undone";
/// Undone this many times in a row, a ReplicaSet is surged no more: its count is another
/// writer's (an autoscaler, a GitOps tool's self-heal), and a fight with it would never end.
pub const UNDONE_AT_MOST: u32 = 2;

/// How many times in a row another writer undid the surge of `rs`, once that is
/// [`UNDONE_AT_MOST`] or more: then it is surged no more.
pub fn fought(rs: &ReplicaSet) -> Option<u32> {
    undone(rs).filter(|n| *n >= UNDONE_AT_MOST)
}

fn undone(rs: &ReplicaSet) -> Option<u32> {
    annotation(&rs.metadata, SURGE_UNDONE_ANNOTATION)?
        .trim()
        .parse()
        .ok()
}

/// The ReplicaSet controller deletes pods of a lower cost first when it scales down
/// (Kubernetes' PodDeletionCost, on by default since 1.22).
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The cost of a retiring pod: below any a user would set to keep a pod.
pub const RETIRING_COST: &str = "-1000";

/// The taints that say a node is going away: key, the value that says so (None: any) and
/// what it means.
const LEAVING_TAINTS: [(&str, Option<&str>, &str); 4] = [
    (
        "node.kubernetes.io/unschedulable",
        None,
        "is cordoned (taint node.kubernetes.io/unschedulable)",
    ),
    (
        "ToBeDeletedByClusterAutoscaler",
        None,
        "is being removed by the cluster autoscaler (taint ToBeDeletedByClusterAutoscaler)",
    ),
    (
        "karpenter.sh/disrupted",
        None,
        "is being removed by Karpenter (taint karpenter.sh/disrupted)",
    ),
    // Karpenter before v1.
    (
        "karpenter.sh/disruption",
        Some("disrupting"),
        "is being removed by Karpenter (taint karpenter.sh/disruption=disrupting)",
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
            .find(|(key, value, _)| {
                *key == taint.key && value.is_none_or(|v| taint.value.as_deref() == Some(v))
            })
            .map(|(_, _, why)| (*why).to_owned())
    })
}

/// The mark the controller sets on a pod because its node is going away. Its start names the
/// node, so that the mark can be told from one set by hand and withdrawn when the node stays.
fn node_mark(node: &str, why: &str) -> String {
    format!("its node {node} {why}")
}

fn is_node_mark(mark: &str, node: &str) -> bool {
    mark.strip_prefix("its node ")
        .and_then(|rest| rest.strip_prefix(node))
        .is_some_and(|rest| rest.starts_with(' '))
}

/// The surge recorded on a ReplicaSet: the count before it and the count the controller set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    from: i32,
    to: i32,
}

impl Record {
    /// The record on `rs`, if any; `replicas`: its count now. A record without `surged-to`
    /// (an earlier build wrote `surged-from` alone) is taken as the count now.
    fn of(rs: &ReplicaSet, replicas: i32) -> Option<Option<Record>> {
        let from = annotation(&rs.metadata, SURGED_FROM_ANNOTATION)?;
        let to = annotation(&rs.metadata, SURGED_TO_ANNOTATION);
        let parse = |v: &str| v.trim().parse::<i32>().ok().filter(|n| *n >= 0);
        // Present but unreadable: a record all the same, which nobody could have meant.
        Some(
            parse(from)
                .zip(to.map_or(Some(replicas), parse))
                .map(|(from, to)| Record { from, to }),
        )
    }
}

/// How the surge bounds itself: one replica per retiring pod, at most twice the ReplicaSet's
/// own count (a replacement whose node goes away too is replaced in turn; a mark on every pod
/// cannot grow the ReplicaSet without end).
fn surge_for(retiring: usize, base: i32) -> i32 {
    i32::try_from(retiring)
        .unwrap_or(i32::MAX)
        .min(base.saturating_mul(2))
}

/// What the controller writes so that the pods of `rs` on nodes in trouble are replaced before
/// they go. A pod on a node leaving or lost is marked retiring and scaled off once its
/// replacement is Ready; one on a node in doubt (silent, not Ready) only gets its replacement:
/// nothing is scaled back while a node is in doubt, and once it is not, the newest pods go.
pub fn decide(rs: &ReplicaSet, pods: &[Pod], nodes: &NodeTrouble) -> Vec<Action> {
    let name = name_of(&rs.metadata);
    let rs_version = rs.metadata.resource_version.clone();
    let replicas = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let record = Record::of(rs, replicas);
    // A record whose count is still the one the controller set; any other is dropped.
    let ours = record
        .flatten()
        .filter(|r| r.to == replicas && r.to > r.from);
    let base = ours.map_or(replicas, |r| r.from);
    let foreign = record.is_some() && ours.is_none();
    let undone_before = undone(rs).unwrap_or(0);
    // A surge ended as planned forgets the surges undone before it; one undone counts.
    let scale = |replicas: i32, surged_from: Option<i32>, retired: Vec<String>, why: String| {
        let undone = match (surged_from, foreign) {
            (Some(_), true) => undone_before + 1,
            (Some(_), false) => undone_before,
            (None, _) => 0,
        };
        Action::ScaleReplicaSet {
            name: name.to_owned(),
            replicas,
            surged_from,
            retired,
            undone,
            resource_version: rs_version.clone(),
            why,
        }
    };
    let dropped = |undone: u32| Action::ScaleReplicaSet {
        name: name.to_owned(),
        replicas,
        surged_from: None,
        retired: Vec::new(),
        undone,
        resource_version: rs_version.clone(),
        why: format!(
            "its replicas were set to {replicas} by someone else during the surge: the count is theirs, the surge's record is dropped"
        ),
    };
    if base == 0 {
        // Scaled to zero on purpose: nothing serves, nothing to replace.
        return if record.is_some() {
            vec![dropped(0)]
        } else {
            Vec::new()
        };
    }

    let pods = Sorted::of(pods, nodes, base);
    let mut actions: Vec<Action> = pods.withdrawn.iter().map(|p| withdraw(p)).collect();
    actions.extend(pods.to_mark.iter().map(|(p, why)| Action::RetirePod {
        name: name_of(&p.metadata).to_owned(),
        why: why.clone(),
        resource_version: p.metadata.resource_version.clone(),
    }));

    // The retiring pods a scale-back was to remove, still active.
    let retired: BTreeSet<&str> = annotation(&rs.metadata, RETIRED_ANNOTATION)
        .map(|v| v.split(',').map(str::trim).collect())
        .unwrap_or_default();
    let kept: Vec<&Pod> = pods
        .marked
        .iter()
        .copied()
        .filter(|p| {
            p.metadata
                .uid
                .as_deref()
                .is_some_and(|u| retired.contains(u))
        })
        .collect();
    if record.is_none() && !kept.is_empty() {
        // Once the ReplicaSet has no surplus left, it chose another pod over them; they go only
        // while another pod is Ready (make before break). Alone, one serves on until its node's
        // drain evicts it, as without jumppod.
        if pods.active <= usize::try_from(replicas).unwrap_or(0) && pods.ready > 0 {
            actions.extend(kept.iter().map(|p| Action::DeleteRetiringPod {
                name: name_of(&p.metadata).to_owned(),
                uid: p.metadata.uid.clone().unwrap_or_default(),
                why: "the ReplicaSet controller kept this retiring pod when it scaled back (is the PodDeletionCost feature gate off?): deleted, so that it is replaced while it hands over".into(),
            }));
        }
        return actions;
    }

    let retiring = pods.marked.len() + pods.to_mark.len();
    let priced = pods.to_mark.is_empty();
    let ready = i32::try_from(pods.ready).unwrap_or(i32::MAX);
    let wanted = retiring + pods.doubted;
    if wanted > 0 {
        if ready >= base {
            // Back only once every retiring pod has the lowest cost (this round's marks are
            // written before the scale, but the cache shows them only on the next reconcile),
            // and no node is in doubt: a pod there may be serving, and stays until the
            // cluster decides.
            if priced && pods.doubted == 0 {
                let uids = pods
                    .marked
                    .iter()
                    .filter_map(|p| p.metadata.uid.clone())
                    .collect();
                let why = "the replacement is Ready: the retiring pod goes".to_owned();
                actions.push(scale(base, None, uids, why));
            }
        } else if foreign && undone_before + 1 >= UNDONE_AT_MOST {
            // Undone again: their count stays, and the surge stops here.
            let mut stop = dropped(undone_before + 1);
            if let Action::ScaleReplicaSet { why, .. } = &mut stop {
                why.push_str(&format!(
                    "; undone {} times in a row, it is surged no more",
                    undone_before + 1
                ));
            }
            actions.push(stop);
        } else {
            let target = base + surge_for(wanted, base);
            if ours.is_none_or(|r| r.to != target) {
                actions.push(scale(target, Some(base), Vec::new(), surge_why(&pods)));
            }
        }
    } else if foreign {
        actions.push(dropped(0));
    } else if ours.is_some() {
        // Without a retiring pod the surplus is removed once as many pods are Ready as
        // before, so that the ReplicaSet controller removes the ones not Ready yet. When every
        // pod is Ready, the newest are marked first: among Ready pods it removes the one Ready
        // the shortest time, which a pod whose node was in doubt is once its kubelet sets it
        // Ready again, though it has held its sessions all along.
        let base_count = usize::try_from(base).unwrap_or(0);
        let surplus = pods.newest_surplus(base_count);
        if !surplus.is_empty() {
            actions.extend(surplus.into_iter().map(|p| Action::RetirePod {
                name: name_of(&p.metadata).to_owned(),
                why: SURPLUS_MARK.to_owned(),
                resource_version: p.metadata.resource_version.clone(),
            }));
        } else if ready >= base || pods.active <= base_count {
            actions.push(scale(
                base,
                None,
                Vec::new(),
                "no retiring pod is left".into(),
            ));
        }
    }
    actions
}

/// The mark on the newest pods of a surge that is over, which its scale-back removes.
const SURPLUS_MARK: &str = "the newest pods of a surge that is over go first";

/// Why the ReplicaSet surges: the pods it replaces, retiring or on a node in doubt.
fn surge_why(pods: &Sorted) -> String {
    let retiring = pods.marked.len() + pods.to_mark.len();
    match (retiring, pods.doubted) {
        (1, 0) => "a replacement starts before the retiring pod goes".to_owned(),
        (n, 0) => format!(
            "replacements start before the {n} retiring pods go (one each, at most twice its count)"
        ),
        (0, 1) => "a replacement starts beside the pod on a node in doubt".to_owned(),
        (0, d) => format!(
            "replacements start beside the {d} pods on nodes in doubt (one each, at most twice its count)"
        ),
        (r, d) => format!(
            "replacements start for {r} retiring pods and {d} on nodes in doubt (one each, at most twice its count)"
        ),
    }
}

/// The active pods of a ReplicaSet, sorted by what the surge does with them.
struct Sorted<'a> {
    active: usize,
    /// Retiring, marked with the lowest cost.
    marked: Vec<&'a Pod>,
    /// To be marked retiring (or marked by hand and to get the lowest cost), and why.
    to_mark: Vec<(&'a Pod, String)>,
    /// Marked because of a node that is staying after all (with no replacement Ready yet), or
    /// whose node is only in doubt now.
    withdrawn: Vec<&'a Pod>,
    /// On a node in doubt (silent, not Ready): each gets a replacement, and stays.
    doubted: usize,
    /// Ready, not retiring, on a node without trouble.
    ready: usize,
    /// Those pods.
    serving: Vec<&'a Pod>,
}

impl<'a> Sorted<'a> {
    fn of(pods: &'a [Pod], nodes: &NodeTrouble, base: i32) -> Sorted<'a> {
        let mut sorted = Sorted {
            active: 0,
            marked: Vec::new(),
            to_mark: Vec::new(),
            withdrawn: Vec::new(),
            doubted: 0,
            ready: 0,
            serving: Vec::new(),
        };
        // Marks of a node that is staying: withdrawn unless a replacement is Ready.
        let mut staying = Vec::new();
        for pod in pods.iter().filter(|p| is_active(p)) {
            sorted.active += 1;
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
            let going = node.and_then(|n| nodes.breaking(n).map(|why| (n, why)));
            let doubt = node.and_then(|n| nodes.doubt(n));
            if let Some(mark) = annotation(&pod.metadata, RETIRING_ANNOTATION) {
                if going.is_none() && node.is_some_and(|n| is_node_mark(mark, n)) {
                    if doubt.is_some() {
                        sorted.doubted += 1;
                        sorted.withdrawn.push(pod);
                    } else {
                        staying.push(pod);
                    }
                } else if annotation(&pod.metadata, DELETION_COST_ANNOTATION) != Some(RETIRING_COST)
                {
                    // Marked by hand, without the cost: without it the ReplicaSet would
                    // delete the replacement (the pod Ready the shortest time) when it scales
                    // back.
                    sorted.to_mark.push((pod, mark.to_owned()));
                } else {
                    sorted.marked.push(pod);
                }
            } else if let Some((node, why)) = going {
                // A pod not Ready there serves nobody, and the ReplicaSet removes it before any
                // Ready one when it scales back: it needs no mark.
                if is_ready(pod) {
                    sorted.to_mark.push((pod, node_mark(node, why)));
                }
            } else if doubt.is_some() || crate::rotation::taken_out(pod) {
                // Serving or not, it may be back in a moment: Kubernetes alone would keep it. A
                // pod taken out of rotation stays in doubt until its kubelet says it is Ready
                // (a scale-back would remove it first, as not Ready).
                sorted.doubted += 1;
            } else if is_ready(pod) {
                sorted.ready += 1;
                sorted.serving.push(pod);
            }
        }
        if i32::try_from(sorted.ready).unwrap_or(i32::MAX) < base {
            sorted.ready += staying.iter().filter(|p| is_ready(p)).count();
            sorted.withdrawn.extend(staying);
        } else {
            // A replacement is Ready: the swap is as good as done, and goes on.
            sorted.marked.extend(staying);
        }
        sorted
    }
}

impl<'a> Sorted<'a> {
    /// The newest of the pods beyond `base`, once every active pod serves and each has its
    /// creation time (else the ReplicaSet controller's own ranking decides: not Ready first).
    fn newest_surplus(&self, base: usize) -> Vec<&'a Pod> {
        let all_serve = self.serving.len() == self.active;
        let dated = self
            .serving
            .iter()
            .all(|p| p.metadata.creation_timestamp.is_some());
        if !all_serve || !dated || self.active <= base {
            return Vec::new();
        }
        let mut newest = self.serving.clone();
        newest.sort_by_key(|p| std::cmp::Reverse(p.metadata.creation_timestamp.clone()));
        newest.truncate(self.active - base);
        newest
    }
}

fn withdraw(pod: &Pod) -> Action {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    Action::WithdrawRetiring {
        name: name_of(&pod.metadata).to_owned(),
        why: format!("its node {node} is not leaving or lost, and no replacement took its place"),
        resource_version: pod.metadata.resource_version.clone(),
    }
}

/// The address to give jobs for the NodePort when `hostname` is not configured: the
/// ExternalIP of a node that is staying and Ready, the first of `preferred` (the nodes of the Ready jump
/// pods, newest first) that has one, else of any node that is staying. A job keeps that
/// address for its whole life, so a node going away is given only when no other has an
/// ExternalIP.
pub fn job_address(preferred: &[&str], nodes: &[Node]) -> Option<String> {
    let by_name: BTreeMap<&str, &Node> = nodes.iter().map(|n| (name_of(&n.metadata), n)).collect();
    let ordered = preferred
        .iter()
        .filter_map(|name| by_name.get(name).copied())
        .chain(nodes.iter());
    let mut fallback = None;
    for node in ordered {
        let Some(ip) = external_ip(node) else {
            continue;
        };
        let troubled = leaving(node)
            .or_else(|| crate::nodes::lost(node))
            .or_else(|| crate::nodes::not_ready(node));
        if troubled.is_none() {
            return Some(ip);
        }
        fallback.get_or_insert(ip);
    }
    fallback
}

/// A node's first ExternalIP.
pub fn external_ip(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "ExternalIP")
        .map(|a| a.address.clone())
}

#[cfg(test)]
mod tests;
