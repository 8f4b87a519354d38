//! The bare jump pod of a released dstack server, kept: the same name, the same Service and
//! NodePort, whatever ends the pod.
//!
//! dstack 0.22.x creates `dstack-<project>-ssh-jump-pod` as a bare pod, and its NodePort
//! Service. At each job (`run_job`) it recreates both, the Service on a new NodePort, when
//! *either* is missing; `update_provisioning_data` reads the pod by its exact name and fails the
//! job at once if that pod has finished. A bare pod that is evicted, drained or lost is never
//! replaced: every running job keeps an `ssh_proxy` naming the old NodePort, and loses it at the
//! next job. So the keeper, for a project without a ReplicaSet whose Service exists:
//!
//! 1. remembers the pod's spec while it exists ([`template`]);
//! 2. once the pod is gone (deleted, evicted and deleted, force-deleted off a lost node),
//!    creates it again under the same name from that spec, on another node if its node is going
//!    away or lost. dstack then finds both objects and keeps them: the NodePort never changes;
//! 3. keeps a *standby* beside it while it is not serving or about to stop: a copy under a
//!    generated name, which the Service selects as well (it selects
//!    `app.kubernetes.io/instance` alone), on another node. It is made as soon as the pod's node
//!    is in any trouble ([`crate::nodes`]: cordoned or tainted for removal, silent, not Ready,
//!    lost), or the pod is terminating or finished, and it goes once the named pod is back and
//!    Ready on a node without trouble;
//! 4. force-deletes the pod once the cluster has found its node lost (Ready Unknown, tainted
//!    unreachable or out-of-service, or its Node gone), so that its name is free: no kubelet
//!    there will confirm a deletion. A node merely silent or not Ready keeps its pod, as
//!    Kubernetes would: the standby serves beside it meanwhile.
//!
//! It never fights dstack or an operator: without the Service the pod is dstack's to make (its
//! creates do not tolerate 409), and `jumppod.io/keep: "false"` on the Service turns it off.

use crate::action::Action;
use crate::nodes::NodeTrouble;
use crate::objects::{annotation, condition, is_active, is_finished, is_ready, name_of};
use crate::planner::Observed;
use jumppod::schema;
use jumppod::settings::Contract;
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// On a standby: the name of the pod it stands in for.
pub const STANDBY_ANNOTATION: &str = "jumppod.io/standby-for";
/// On a pod the keeper created again: the uid of the pod it replaces.
pub const RECREATED_ANNOTATION: &str = "jumppod.io/recreated-from";
/// On the Service, `"false"`: the keeper leaves the project to dstack.
pub const KEEP_ANNOTATION: &str = "jumppod.io/keep";
/// On a copy kept off a node: that node, whose requirement a later copy drops (a copy of a copy
/// must not stay off every node its ancestors left).
pub const AVOIDS_ANNOTATION: &str = "jumppod.io/avoids";

/// Whether the keeper acts for this project, and if not, why not.
pub fn keeps(observed: &Observed) -> Result<(), &'static str> {
    if observed.replicaset.is_some() {
        return Err("a ReplicaSet replaces its pods");
    }
    let Some(svc) = &observed.service else {
        return Err("without its Service the jump pod is dstack's to make");
    };
    if annotation(&svc.metadata, KEEP_ANNOTATION) == Some("false") {
        return Err("the Service says jumppod.io/keep: false");
    }
    Ok(())
}

/// The spec to make the pod again from: the named pod's while it has one (the cache keeps the
/// whole spec of a bare jump pod), else what was remembered, else an active standby's.
pub fn template(observed: &Observed, remembered: Option<&Pod>) -> Option<Pod> {
    let with_spec = |p: &&Pod| p.spec.as_ref().is_some_and(|s| !s.containers.is_empty());
    observed
        .bare_pod
        .as_ref()
        .filter(with_spec)
        .or(remembered)
        .or_else(|| standbys(observed).filter(|p| is_active(p)).find(with_spec))
        .cloned()
}

/// Whether the named pod went by a person's hand (`kubectl delete pod`): gone, and as last
/// seen (`remembered`) it bore no sign of a disruption. Kubernetes marks each pod it takes
/// away for one with the condition `DisruptionTarget` (the Eviction API, so `kubectl drain`;
/// preemption; the taint manager; PodGC; the kubelet's node-pressure eviction, which also
/// finishes it: PodDisruptionConditions, GA in 1.31), and a pod whose node is in trouble is
/// taken away with it. A person's deletion is their decision: the pod is not made again, and
/// dstack makes a new one at its next job, as without jumppod.
pub fn deleted_by_hand(observed: &Observed, remembered: Option<&Pod>, nodes: &NodeTrouble) -> bool {
    observed.bare_pod.is_none() && remembered.is_some_and(|last| undisrupted(last, nodes))
}

/// Whether `pod` bears no sign of a disruption: no `DisruptionTarget` condition, not finished,
/// its node in no trouble.
fn undisrupted(pod: &Pod, nodes: &NodeTrouble) -> bool {
    let disrupted =
        condition(pod, "DisruptionTarget").is_some_and(|(status, _, _)| status == "True");
    !disrupted && !is_finished(pod) && node_of(pod).is_none_or(|n| nodes.of(n).is_none())
}

/// The keeper's standbys deleted, `why`: once it stands aside ([`keeps`]: a ReplicaSet serves
/// the project, the Service is gone, or says `jumppod.io/keep: "false"`), or the named pod went
/// by a person's hand. Nothing of the keeper's outlives its reason.
pub fn let_go(observed: &Observed, why: &str) -> Vec<Action> {
    standbys(observed)
        .filter(|p| is_active(p))
        .map(|p| delete_standby(p, why))
        .collect()
}

/// The standbys among the project's pods.
fn standbys(observed: &Observed) -> impl Iterator<Item = &Pod> {
    observed
        .pods
        .iter()
        .filter(|p| annotation(&p.metadata, STANDBY_ANNOTATION).is_some())
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// What the keeper writes for the project, in order.
pub fn decide(
    name: &str,
    observed: &Observed,
    template: Option<&Pod>,
    nodes: &NodeTrouble,
    contract: &Contract,
) -> Vec<Action> {
    if keeps(observed).is_err() {
        return Vec::new();
    }
    let Some(template) = template else {
        // Gone before the controller ever saw it: dstack makes it again at its next job.
        return Vec::new();
    };
    let named = observed.bare_pod.as_ref();
    let named_node = named.and_then(node_of).or_else(|| node_of(template));
    let troubled = |node: Option<&str>| node.and_then(|n| nodes.of(n));
    let serving = named.is_some_and(|p| is_ready(p) && troubled(node_of(p)).is_none());
    // A finished standby (evicted, its node gone, its container failed) serves no one and no
    // controller removes it: it goes, and another is made if one is still needed.
    let mut actions: Vec<Action> = standbys(observed)
        .filter(|p| is_finished(p) && p.metadata.deletion_timestamp.is_none())
        .map(|p| delete_standby(p, "the standby has finished"))
        .collect();

    // The standby: made when the named pod stops serving or is about to, kept until it serves
    // again (a pod dstack just created and not yet Ready needs none).
    let active: Vec<&Pod> = standbys(observed).filter(|p| is_active(p)).collect();
    // The quota has no room for both: the pod under its name is the one dstack and its jobs
    // know, so the standby gives way, and none is made until that pod is back.
    let quota = named
        .is_none()
        .then_some(observed.quota_refused.as_ref())
        .flatten();
    if let Some(answer) = quota
        && !active.is_empty()
    {
        let why = format!(
            "the jump pod's creation was refused by a quota ({answer}): its standby gives way"
        );
        actions.extend(active.iter().map(|p| delete_standby(p, &why)));
        return actions;
    }
    if serving {
        for standby in &active {
            actions.push(delete_standby(
                standby,
                "the jump pod is back and Ready: its standby goes",
            ));
        }
    } else {
        let keep = active.iter().find(|p| is_ready(p)).or(active.first());
        for standby in active.iter().filter(|p| Some(*p) != keep) {
            actions.push(delete_standby(standby, "one standby is enough"));
        }
        let why = match named {
            None => Some("the jump pod is gone".to_owned()),
            Some(p) if is_finished(p) => Some("the jump pod has finished".to_owned()),
            // Deleted by hand, it is not stood in for: see `deleted_by_hand`.
            Some(p) if p.metadata.deletion_timestamp.is_some() && !undisrupted(p, nodes) => {
                Some("the jump pod is terminating".to_owned())
            }
            Some(p) if p.metadata.deletion_timestamp.is_some() => None,
            Some(p) => troubled(node_of(p))
                .map(|why| format!("its node {} {why}", node_of(p).unwrap_or_default())),
        };
        if let (None, Some(why), None) = (keep, why, quota) {
            actions.push(Action::CreatePod {
                pod: Box::new(copy(name, template, Copy::Standby, named_node, contract)),
                why: format!("a standby serves while the jump pod does not: {why}"),
            });
        }
    }

    // The named pod itself.
    match named {
        None => {
            let avoid = named_node.filter(|n| troubled(Some(n)).is_some());
            actions.push(Action::CreatePod {
                pod: Box::new(copy(name, template, Copy::Named, avoid, contract)),
                why: "the jump pod is gone: made again under its name, so dstack keeps its Service and NodePort".into(),
            });
        }
        Some(pod) if is_finished(pod) => actions.push(Action::DeletePod {
            name: name_of(&pod.metadata).to_owned(),
            uid: uid(pod),
            why: "the jump pod has finished; it is made again under its name once gone".into(),
        }),
        Some(pod) => {
            let node = node_of(pod).unwrap_or_default();
            // Only on the cluster's proof: no kubelet there will confirm a deletion, so the
            // name stays taken until the pod is force-deleted. No Service sends a terminating
            // pod anything.
            if let Some(why) = nodes.lost.get(node) {
                actions.push(Action::ForceDeletePod {
                    name: name_of(&pod.metadata).to_owned(),
                    uid: uid(pod),
                    why: format!("its node {node} {why}; it is made again elsewhere"),
                });
            }
        }
    }
    actions
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn delete_standby(pod: &Pod, why: &str) -> Action {
    Action::DeleteStandby {
        name: name_of(&pod.metadata).to_owned(),
        uid: uid(pod),
        why: why.to_owned(),
    }
}

/// Which copy of the template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copy {
    /// Under the jump pod's own name.
    Named,
    /// Under a generated name, beside it.
    Standby,
}

/// The pod to create from `template`, off `avoid` (a node going away or lost). What the API
/// server, a node or `kubectl debug` filled in is left out: the node, the status, the uid and
/// versions, the ephemeral containers, the service account token volume (the ServiceAccount admission plugin adds it again), and the
/// priority (the Priority admission plugin computes it from the class). What the policy fills
/// in at a jump pod's creation (resources, labels, the kit) is filled in under `contract`, so a
/// copy of a pod the policy never saw has it too.
pub fn copy(
    name: &str,
    template: &Pod,
    which: Copy,
    avoid: Option<&str>,
    contract: &Contract,
) -> Pod {
    let meta = &template.metadata;
    let mut annotations: BTreeMap<String, String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with("jumppod.io/") && k.as_str() != RECREATED_ANNOTATION)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    match which {
        Copy::Named => {
            annotations.insert(
                RECREATED_ANNOTATION.to_owned(),
                meta.uid.clone().unwrap_or_default(),
            );
        }
        Copy::Standby => {
            annotations.insert(STANDBY_ANNOTATION.to_owned(), name.to_owned());
        }
    }
    let mut spec = template.spec.clone().unwrap_or_default();
    if let Some(node) = annotation(meta, AVOIDS_ANNOTATION) {
        forget_node(&mut spec, node);
    }
    spec.node_name = None;
    spec.priority = None;
    // `kubectl debug` adds these to a running pod; the API refuses a pod created with them.
    spec.ephemeral_containers = None;
    let token = |v: &str| v.starts_with("kube-api-access-");
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| !token(&v.name));
    }
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if let Some(mounts) = container.volume_mounts.as_mut() {
            mounts.retain(|m| !token(&m.name));
        }
    }
    if let Some(node) = avoid {
        avoid_node(&mut spec, node);
        annotations.insert(AVOIDS_ANNOTATION.to_owned(), node.to_owned());
    }
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: (which == Copy::Named).then(|| name.to_owned()),
            generate_name: (which == Copy::Standby).then(|| format!("{name}-standby-")),
            namespace: meta.namespace.clone(),
            labels: meta.labels.clone(),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    };
    let app = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(schema::NAME_LABEL))
        .map(String::as_str);
    if let Some(schema) = schema::classify(app, meta.name.as_deref()) {
        // A pod the policy has filled in already gets nothing; one it cannot write is left as
        // dstack made it, which the API server then judges.
        let _ = jumppod::mutate::fill_pod(&mut pod, schema, contract);
    }
    pod
}

/// The node name requirement [`avoid_node`] added, the terms it leaves empty and the affinity it
/// leaves empty removed with it.
fn forget_node(spec: &mut k8s_openapi::api::core::v1::PodSpec, node: &str) {
    let Some(affinity) = spec.affinity.as_mut() else {
        return;
    };
    if let Some(required) = affinity.node_affinity.as_mut().and_then(|a| {
        a.required_during_scheduling_ignored_during_execution
            .as_mut()
    }) {
        for term in &mut required.node_selector_terms {
            if let Some(exprs) = term.match_expressions.as_mut() {
                exprs.retain(|e| !is_not_on(e, node));
                if exprs.is_empty() {
                    term.match_expressions = None;
                }
            }
        }
        required
            .node_selector_terms
            .retain(|t| t.match_expressions.is_some() || t.match_fields.is_some());
        if required.node_selector_terms.is_empty()
            && let Some(a) = affinity.node_affinity.as_mut()
        {
            a.required_during_scheduling_ignored_during_execution = None;
        }
    }
    if affinity.node_affinity.as_ref().is_some_and(|a| {
        a.required_during_scheduling_ignored_during_execution
            .is_none()
            && a.preferred_during_scheduling_ignored_during_execution
                .is_none()
    }) {
        affinity.node_affinity = None;
    }
    if affinity.node_affinity.is_none()
        && affinity.pod_affinity.is_none()
        && affinity.pod_anti_affinity.is_none()
    {
        spec.affinity = None;
    }
}

fn is_not_on(requirement: &NodeSelectorRequirement, node: &str) -> bool {
    requirement.key == HOSTNAME_LABEL
        && requirement.operator == "NotIn"
        && requirement.values.as_deref() == Some(&[node.to_owned()][..])
}

/// The node name label every node carries (the kubelet sets it).
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Adds "not on `node`" to every term of the pod's required node affinity (the terms are ORed,
/// so each needs it), or makes it the one term.
fn avoid_node(spec: &mut k8s_openapi::api::core::v1::PodSpec, node: &str) {
    let not_there = NodeSelectorRequirement {
        key: HOSTNAME_LABEL.into(),
        operator: "NotIn".into(),
        values: Some(vec![node.to_owned()]),
    };
    let required = spec
        .affinity
        .get_or_insert_with(Affinity::default)
        .node_affinity
        .get_or_insert_with(NodeAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(|| NodeSelector {
            node_selector_terms: Vec::new(),
        });
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_expressions
            .get_or_insert_with(Vec::new)
            .push(not_there.clone());
    }
}

#[cfg(test)]
mod tests;
