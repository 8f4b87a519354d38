//! The controller's pure half: which project an object belongs to, what the watch caches say
//! about it, what to write and what to tell. No I/O, no clock: every decision is a unit test.
//!
//! The decisions are `ensure`'s ([`crate::planner::plan`]), with two differences, because dstack
//! decides which projects exist and only dstack holds a project's SSH key:
//! - a missing namespace or ReplicaSet is never created (reported instead);
//! - without a ReplicaSet, only finished bare pods are deleted: an older dstack server, whose
//!   project this still is, recreates its pod only when none exists by that name.

use crate::action::{Action, Finding};
use crate::config::{ConfigError, RawConfig};
use crate::manifest::Desired;
use crate::nodes::NodeTrouble;
use crate::objects::{is_ready, name_of, node_port};
use crate::planner::{self, Observed};
use crate::{grants, keeper, rotation, surge};
use jumppod::schema;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::{BTreeMap, BTreeSet};

/// One project's jump pod: its namespace and `dstack-<project>-ssh-jump-pod`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProjectKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ProjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl ProjectKey {
    /// The key of a jump pod's name, when it is one: `dstack-<project>-ssh-jump-pod` (releases
    /// before the `dstack-` prefix never made ReplicaSets, and their pods are not watched).
    pub fn of_name(namespace: &str, name: &str) -> Option<ProjectKey> {
        let project = name
            .strip_prefix(schema::NAME_PREFIX)?
            .strip_suffix(schema::JUMP_POD_SUFFIX)?;
        (!project.is_empty()).then(|| ProjectKey {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    pub fn project(&self) -> &str {
        &self.name[schema::NAME_PREFIX.len()..self.name.len() - schema::JUMP_POD_SUFFIX.len()]
    }

    pub fn of_replicaset(rs: &ReplicaSet) -> Option<ProjectKey> {
        ProjectKey::of_name(rs.metadata.namespace.as_deref()?, name_of(&rs.metadata))
    }

    pub fn of_service(svc: &Service) -> Option<ProjectKey> {
        let name = name_of(&svc.metadata).strip_suffix("-service")?;
        ProjectKey::of_name(svc.metadata.namespace.as_deref()?, name)
    }

    /// A pod counts for the project named by its instance label (the ReplicaSet's pods) and
    /// for the one named like it (the bare pod of older releases); usually they are the same.
    pub fn of_pod(pod: &Pod) -> Vec<ProjectKey> {
        let Some(ns) = pod.metadata.namespace.as_deref() else {
            return Vec::new();
        };
        // A dstack job pod: the keys it was granted belong to its project's jump pod.
        if let Some(project) = grants::job_project(pod) {
            let name = format!(
                "{}{project}{}",
                schema::NAME_PREFIX,
                schema::JUMP_POD_SUFFIX
            );
            return ProjectKey::of_name(ns, &name).into_iter().collect();
        }
        let instance = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(schema::INSTANCE_LABEL))
            .and_then(|name| ProjectKey::of_name(ns, name));
        let own = ProjectKey::of_name(ns, name_of(&pod.metadata));
        let mut keys: Vec<ProjectKey> = instance.into_iter().chain(own).collect();
        keys.dedup();
        keys
    }
}

/// Which label selector the watches use: every jump pod and ReplicaSet of either schema carries
/// `app.kubernetes.io/name` (the current `dstack-ssh-proxy`, or the pre-#3891 pod's own name),
/// so the API server filters out most other pods. Services of older releases carry no labels,
/// so Services are watched unfiltered and picked by name.
pub const WATCH_SELECTOR: &str = schema::NAME_LABEL;

/// What the watch caches hold for a project, in the planner's terms. The caches hold
/// everything the planner could read, so it always "looked further".
pub fn observed<'a>(
    key: &ProjectKey,
    replicaset: Option<ReplicaSet>,
    service: Option<Service>,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Observed {
    let mut bare_pod = None;
    let mut instance_pods = Vec::new();
    let mut job_pods = Vec::new();
    for pod in pods {
        if grants::job_project(pod) == Some(key.project()) {
            job_pods.push(pod.clone());
            continue;
        }
        if name_of(&pod.metadata) == key.name {
            bare_pod = Some(pod.clone());
        }
        let labelled = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(schema::INSTANCE_LABEL))
            .is_some_and(|v| *v == key.name);
        if labelled {
            instance_pods.push(pod.clone());
        }
    }
    Observed {
        // Objects exist in it (it was seen through them), or nothing is created anyway.
        namespace_exists: Some(true),
        replicaset,
        service,
        looked_further: true,
        bare_pod,
        pods: instance_pods,
        // Filled by the caller that watches nodes and remembers.
        leaving_nodes: BTreeMap::new(),
        silent_nodes: BTreeMap::new(),
        not_ready_nodes: BTreeMap::new(),
        lost_nodes: BTreeMap::new(),
        disruption: None,
        nodes_unknown: None,
        job_pods,
        remembered_pod: None,
        quota_refused: None,
    }
}

/// How a project stands, for the `jumppod_projects` gauge and the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// A ready pod behind a Service with the current selector.
    Ready,
    /// A pre-#3891 pod still serves through its old Service.
    Upgrading,
    /// No ready pod yet, and nothing known to stop it.
    Pending,
    /// Something stops it: unschedulable, refused, an image that cannot be pulled, drift, ...
    Degraded,
    /// No ReplicaSet: the project has not yet run a job with a release that makes one.
    NoReplicaSet,
    /// Its name does not make a valid configuration with the controller's settings.
    Invalid,
}

impl State {
    pub const ALL: [State; 6] = [
        State::Ready,
        State::Upgrading,
        State::Pending,
        State::Degraded,
        State::NoReplicaSet,
        State::Invalid,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Upgrading => "upgrading",
            State::Pending => "pending",
            State::Degraded => "degraded",
            State::NoReplicaSet => "no-replicaset",
            State::Invalid => "invalid",
        }
    }
}

/// What the controller does for a project.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub actions: Vec<Action>,
    pub findings: Vec<Finding>,
    pub state: State,
    /// The bare jump pod to remember, to make it again from ([`keeper::template`]).
    pub remember: Option<Pod>,
    /// The users' keys the project's live jobs were granted ([`grants::granted`]).
    pub granted: BTreeMap<String, String>,
}

/// `template`: the controller's configuration (resources, image, placement, policy settings);
/// the project and namespace come from the key. A Service's NodePort is always kept.
pub fn decide(
    template: &RawConfig,
    key: &ProjectKey,
    observed: &Observed,
) -> Result<Decision, ConfigError> {
    let config = RawConfig {
        namespace: Some(key.namespace.clone()),
        project: Some(key.project().to_owned()),
        ..template.clone()
    }
    .validate(&key.namespace)?;
    let desired = Desired::from_config(&config);
    let plan = planner::plan(&config, &desired, observed);
    let has_rs = observed.replicaset.is_some();
    let mut actions: Vec<Action> = plan
        .actions
        .into_iter()
        .filter(|a| match a {
            Action::CreateNamespace(_) | Action::CreateReplicaSet(_) => false,
            Action::DeletePod { .. } => true,
            Action::DeleteService { .. } | Action::CreateService { .. } => has_rs,
            Action::RetirePod { .. }
            | Action::WithdrawRetiring { .. }
            | Action::DeleteRetiringPod { .. }
            | Action::ScaleReplicaSet { .. }
            | Action::CreatePod { .. }
            | Action::DeleteStandby { .. }
            | Action::MovePodOff { .. }
            | Action::ForceDeletePod { .. }
            | Action::TakeOutOfRotation { .. } => true,
        })
        .collect();
    let nodes = trouble(observed);
    // Only a ReplicaSet of the current schema is surged (a foreign one is reported instead),
    // and not one whose count another writer keeps undoing.
    let mut fought = None;
    if let Some(rs) = &observed.replicaset
        && !plan
            .findings
            .iter()
            .any(|f| matches!(f, Finding::ForeignReplicaSet { .. }))
    {
        match surge::fought(rs) {
            // A surge decided without the nodes would read "no retiring pod is left".
            _ if observed.nodes_unknown.is_some() => {}
            Some(times) => {
                let replicaset = name_of(&rs.metadata).to_owned();
                fought = Some(Finding::SurgeUndone {
                    resume: format!(
                        "kubectl annotate replicaset {replicaset} {}-",
                        surge::SURGE_UNDONE_ANNOTATION
                    ),
                    replicaset,
                    times,
                })
            }
            None => actions.extend(surge::decide(rs, &observed.pods, &nodes)),
        }
        actions.extend(off_lost_nodes(observed, &nodes));
    }
    let keeps = keeper::keeps(observed);
    let kept = keeps.is_ok();
    // A ReplicaSet replaces its own pods: the bare pod it adopted or succeeded is forgotten, so
    // that its old spec never comes back if the ReplicaSet goes.
    let mut remember = match &observed.replicaset {
        Some(_) => None,
        None => keeper::template(observed, observed.remembered_pod.as_ref()),
    };
    let mut findings = plan.findings;
    // Not while the view of the nodes is in doubt: a pod lost with its node is not a person's.
    if kept
        && observed.disruption.is_none()
        && keeper::deleted_by_hand(observed, observed.remembered_pod.as_ref(), &nodes)
    {
        actions.extend(keeper::let_go(
            observed,
            "the jump pod was deleted by hand: it is dstack's to make again",
        ));
        findings.push(Finding::DeletedByHand {
            pod: key.name.clone(),
        });
        remember = None;
    } else if let Err(why) = keeps {
        actions.extend(keeper::let_go(
            observed,
            &format!("the keeper stands aside: {why}"),
        ));
    } else if remember.is_some() {
        // The keeper deletes a finished bare pod itself, and makes it again.
        actions.retain(|a| !matches!(a, Action::DeletePod { .. }));
        actions.extend(keeper::decide(
            &key.name,
            observed,
            remember.as_ref(),
            &nodes,
            &config.contract,
        ));
    }
    // A project jumppod looks after: its ReplicaSet, or its bare pod kept.
    if kept || observed.replicaset.is_some() {
        actions.extend(rotation::decide(&observed.pods, &nodes));
    }
    findings.extend(fought);
    if let Some(why) = &observed.disruption {
        findings.push(Finding::NodesDisrupted { why: why.clone() });
    }
    if let Some(why) = &observed.nodes_unknown {
        findings.push(Finding::NodesUnknown { why: why.clone() });
    }
    let state = state_of(observed, &findings);
    Ok(Decision {
        actions,
        findings,
        state,
        remember,
        granted: grants::granted(&observed.job_pods),
    })
}

/// The nodes of the project's pods that cannot be counted on.
pub fn trouble(observed: &Observed) -> NodeTrouble {
    NodeTrouble {
        leaving: observed.leaving_nodes.clone(),
        silent: observed.silent_nodes.clone(),
        not_ready: observed.not_ready_nodes.clone(),
        lost: observed.lost_nodes.clone(),
    }
}

/// A ReplicaSet's pod on a node found lost is not Ready, so the surge leaves it, and the
/// ReplicaSet controller counts it until the taint manager evicts it (300 s by default):
/// deleted, it stops counting and is replaced at once. It stays terminating until its node
/// answers or is removed.
fn off_lost_nodes(observed: &Observed, nodes: &NodeTrouble) -> Vec<Action> {
    observed
        .pods
        .iter()
        .filter(|p| crate::objects::is_active(p) && crate::objects::controller_of(p).is_some())
        .filter_map(|pod| {
            let node = pod.spec.as_ref()?.node_name.as_deref()?;
            let why = nodes.lost.get(node)?;
            Some(Action::MovePodOff {
                name: name_of(&pod.metadata).to_owned(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                why: format!(
                    "its node {node} {why}: the ReplicaSet replaces it once it is deleted"
                ),
            })
        })
        .collect()
}

fn state_of(observed: &Observed, findings: &[Finding]) -> State {
    let Some(rs) = &observed.replicaset else {
        return State::NoReplicaSet;
    };
    if findings.iter().any(Finding::is_warning) {
        return State::Degraded;
    }
    if findings
        .iter()
        .any(|f| matches!(f, Finding::LegacyServiceKept { .. }))
    {
        return State::Upgrading;
    }
    let current_service = observed.service.as_ref().is_some_and(|s| {
        crate::objects::service_schema(s, name_of(&rs.metadata)) == Some(schema::Schema::Current)
    });
    if current_service && observed.pods.iter().any(is_ready) {
        State::Ready
    } else {
        State::Pending
    }
}

/// Whether nothing of the project is left in the caches: no ReplicaSet, Service or pod.
pub fn gone(observed: &Observed) -> bool {
    observed.replicaset.is_none()
        && observed.service.is_none()
        && observed.bare_pod.is_none()
        && observed.pods.is_empty()
        && observed.job_pods.is_empty()
}

/// The projects the controller counts, and how each stands: what the `jumppod_projects` gauge
/// says. A project leaves it only when a reconcile finds it [`gone`].
#[derive(Debug, Default)]
pub struct Projects(BTreeMap<ProjectKey, State>);

impl Projects {
    /// A reconcile's outcome: the project's state, or None when it is gone.
    pub fn record(&mut self, key: &ProjectKey, state: Option<State>) {
        match state {
            Some(state) => self.0.insert(key.clone(), state),
            None => self.0.remove(key),
        };
    }

    /// What to reconcile once a watch has listed again (at start, or after its watch expired
    /// or failed): every project the caches hold, and every project counted that they no
    /// longer hold. kube-runtime's watcher sends no delete for an object that vanished while
    /// it was not watching (client-go's informer makes a `DeletedFinalStateUnknown` for it;
    /// kube-runtime's reflector only swaps its store), so without a reconcile of its own
    /// such a project would stay counted for good.
    pub fn relisted(&self, cached: BTreeSet<ProjectKey>) -> BTreeSet<ProjectKey> {
        let mut keys = cached;
        keys.extend(self.0.keys().cloned());
        keys
    }

    /// Projects by state, every state present (zeros too).
    pub fn counts(&self) -> BTreeMap<State, i64> {
        let mut counts: BTreeMap<State, i64> = State::ALL.iter().map(|s| (*s, 0)).collect();
        for state in self.0.values() {
            *counts.entry(*state).or_default() += 1;
        }
        counts
    }
}

/// Severity of a Kubernetes Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    Normal,
    Warning,
}

/// An Event to publish: on the ReplicaSet when the project has one (where `kubectl describe`
/// of the jump pod's owner shows it), else on the Service, else on the bare pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Note {
    pub severity: Severity,
    /// PascalCase, as Kubernetes' own reasons.
    pub reason: &'static str,
    pub message: String,
}

/// Events are at most 1 KiB of message; longer prose is cut at a character boundary.
const MAX_MESSAGE: usize = 1024;

fn note(severity: Severity, reason: &'static str, message: String) -> Note {
    let mut message = message;
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - 3;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    Note {
        severity,
        reason,
        message,
    }
}

/// The Events a reconcile's findings call for (each finding in its operator prose).
pub fn notes(findings: &[Finding]) -> Vec<Note> {
    findings
        .iter()
        .filter_map(|f| {
            let reason = match f {
                Finding::Unschedulable { .. } => "Unschedulable",
                Finding::PodsRefused { .. } => "FailedCreate",
                Finding::ContainerWaiting { .. } => "ContainerWaiting",
                Finding::Drift { .. } => "TemplateDrift",
                Finding::PortDiffers { .. } => "NodePortDiffers",
                Finding::OlderServerFight { .. } => "OlderServerFight",
                Finding::ForeignReplicaSet { .. } => "ForeignReplicaSet",
                Finding::ForeignService { .. } => "ForeignService",
                Finding::LegacyServiceKept { .. } => "LegacyServiceKept",
                Finding::LegacyPodStranded { .. } => "LegacyPodStranded",
                Finding::NodesDisrupted { .. } => "NodesDisrupted",
                Finding::NodesUnknown { .. } => "NodesUnknown",
                Finding::SurgeUndone { .. } => "SurgeUndone",
                Finding::DeletedByHand { .. } => "DeletedByHand",
                // Said by LegacyServiceKept, or the ReplicaSet controller's own events.
                Finding::LegacyPodRunning { .. } | Finding::BarePodAdoptable { .. } => {
                    return None;
                }
            };
            let severity = if f.is_warning()
                || matches!(
                    f,
                    Finding::ForeignReplicaSet { .. } | Finding::ForeignService { .. }
                ) {
                Severity::Warning
            } else {
                Severity::Normal
            };
            Some(note(severity, reason, f.to_string()))
        })
        .collect()
}

/// The Event for a write the controller made.
pub fn applied_note(action: &Action) -> Note {
    let reason = match action {
        Action::DeletePod { .. } => "FinishedPodDeleted",
        Action::DeleteService { .. } => "LegacyServiceDeleted",
        Action::CreateService {
            keeps_port: Some(_),
            ..
        } => "ServiceRecreated",
        Action::CreateService { .. } => "ServiceCreated",
        Action::CreateNamespace(_) | Action::CreateReplicaSet(_) => "Created",
        Action::RetirePod { .. } => "Retiring",
        Action::WithdrawRetiring { .. } => "RetiringWithdrawn",
        Action::DeleteRetiringPod { .. } => "RetiringPodDeleted",
        Action::ScaleReplicaSet {
            surged_from: Some(_),
            ..
        } => "SurgeStarted",
        Action::ScaleReplicaSet { .. } => "SurgeEnded",
        Action::CreatePod { pod, .. } if pod.metadata.name.is_some() => "JumpPodRecreated",
        Action::CreatePod { .. } => "StandbyCreated",
        Action::DeleteStandby { .. } => "StandbyDeleted",
        Action::MovePodOff { .. } => "MovedOffLostNode",
        Action::ForceDeletePod { .. } => "LostPodDeleted",
        Action::TakeOutOfRotation { .. } => "TakenOutOfRotation",
    };
    note(Severity::Normal, reason, format!("{action}"))
}

/// The Event for a write the API refused (`error`: its answer, explained).
pub fn refused_note(action: &Action, error: &str) -> Note {
    note(
        Severity::Warning,
        "WriteRefused",
        format!("{action}: refused: {error}"),
    )
}

/// The NodePort of the Service as last seen, to tell when someone else changes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeenPort {
    pub uid: String,
    pub node_port: Option<i32>,
}

impl SeenPort {
    pub fn of(svc: Option<&Service>) -> Option<SeenPort> {
        svc.map(|s| SeenPort {
            uid: s.metadata.uid.clone().unwrap_or_default(),
            node_port: node_port(s),
        })
    }
}

/// The same Service (same uid) on another NodePort than before: someone edited it, and the
/// jobs whose SSH proxy names the old port lose their jump host. (A Service replaced by
/// another is an older server's doing, reported as `OlderServerFight`.)
pub fn port_changed(before: Option<&SeenPort>, now: Option<&SeenPort>) -> Option<Note> {
    let (before, now) = (before?, now?);
    (before.uid == now.uid && before.node_port != now.node_port).then(|| {
        let port = |p: Option<i32>| p.map_or("none".to_owned(), |p| p.to_string());
        note(
            Severity::Warning,
            "NodePortChanged",
            format!(
                "the Service's NodePort was changed from {} to {} by someone else: jobs whose SSH proxy names port {} can no longer reach the jump pod",
                port(before.node_port),
                port(now.node_port),
                port(before.node_port)
            ),
        )
    })
}

/// The notes not already published for what is still the case: an Event per change of
/// situation, not per reconcile (a reconcile runs on every status update of the pods).
pub fn unpublished(published: &BTreeSet<Note>, current: &[Note]) -> Vec<Note> {
    current
        .iter()
        .filter(|n| !published.contains(n))
        .cloned()
        .collect()
}

/// Which object an Event is about: the ReplicaSet, else the Service, else the bare pod.
pub fn regarding(observed: &Observed) -> Option<ObjectReference> {
    let reference = |api_version: &str, kind: &str, meta: &ObjectMeta| ObjectReference {
        api_version: Some(api_version.to_owned()),
        kind: Some(kind.to_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: None,
        field_path: None,
    };
    if let Some(rs) = &observed.replicaset {
        Some(reference("apps/v1", "ReplicaSet", &rs.metadata))
    } else if let Some(svc) = &observed.service {
        Some(reference("v1", "Service", &svc.metadata))
    } else {
        observed
            .bare_pod
            .as_ref()
            .map(|p| reference("v1", "Pod", &p.metadata))
    }
}

/// What the cache keeps of a pod: the planner reads its metadata and status, and of its spec
/// (the largest part) only the node, but for a bare jump pod or its standby, whose whole spec
/// the keeper makes it again from, and a job pod, of which only the keys it was granted are
/// kept. Managed fields go from every cached object.
pub fn slim_pod(pod: &mut Pod) {
    if grants::job_project(pod).is_some() {
        grants::slim_job_pod(pod);
        return;
    }
    pod.metadata.managed_fields = None;
    let whole = crate::objects::controller_of(pod).is_none()
        && (ProjectKey::of_name(
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            name_of(&pod.metadata),
        )
        .is_some()
            || crate::objects::annotation(&pod.metadata, keeper::STANDBY_ANNOTATION).is_some());
    if !whole {
        // The node, which the surge asks about, and the volumes of Secrets, which tell whether
        // the pod mounts the users' keys (to be told of their change: `refresh`).
        pod.spec = pod
            .spec
            .take()
            .map(|spec| k8s_openapi::api::core::v1::PodSpec {
                node_name: spec.node_name,
                volumes: spec.volumes.map(|volumes| {
                    volumes
                        .into_iter()
                        .filter(|v| {
                            v.secret.is_some()
                                || v.projected
                                    .iter()
                                    .any(|p| p.sources.iter().flatten().any(|s| s.secret.is_some()))
                        })
                        .collect()
                }),
                ..Default::default()
            });
        if let Some(a) = pod.metadata.annotations.as_mut() {
            // jumppod's own, and the deletion cost the surge reads beside its retiring mark.
            a.retain(|k, _| k.starts_with("jumppod.") || k == surge::DELETION_COST_ANNOTATION);
        }
    }
}

pub fn slim_replicaset(rs: &mut ReplicaSet) {
    rs.metadata.managed_fields = None;
}

pub fn slim_service(svc: &mut Service) {
    svc.metadata.managed_fields = None;
    svc.status = None;
}

#[cfg(test)]
mod tests;
