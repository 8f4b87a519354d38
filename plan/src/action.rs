//! The planner's vocabulary: the writes it decides ([`Action`]) and what it tells the operator
//! ([`Finding`]), each with its operator prose (Display) and a typed form for `-o json`.

use crate::objects::{name_of, node_port};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use serde::{Serialize, Serializer};
use std::fmt;

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    CreateNamespace(Box<Namespace>),
    CreateReplicaSet(Box<ReplicaSet>),
    /// Deletes a pod, only if it still has this uid.
    DeletePod {
        name: String,
        uid: String,
        why: String,
    },
    /// Deletes a Service, only if it still has this uid.
    DeleteService {
        name: String,
        uid: String,
        why: String,
    },
    /// `keeps_port`: the NodePort of a Service being replaced, which running jobs use.
    CreateService {
        service: Box<Service>,
        keeps_port: Option<i32>,
    },
    /// Marks a pod to be replaced before its node goes ([`crate::surge`]): annotated retiring,
    /// with the lowest deletion cost. Pods of a ReplicaSet never reuse a name.
    /// `resource_version`: the pod's as decided on (a pod changed since refuses the write).
    RetirePod {
        name: String,
        why: String,
        resource_version: Option<String>,
    },
    /// Takes back the retiring mark and its deletion cost from a pod whose node is staying
    /// after all ([`crate::surge`]).
    WithdrawRetiring {
        name: String,
        why: String,
        resource_version: Option<String>,
    },
    /// Deletes a retiring pod the ReplicaSet controller kept when the surge scaled back, only
    /// if it still has this uid.
    DeleteRetiringPod {
        name: String,
        uid: String,
        why: String,
    },
    /// Sets a ReplicaSet's replicas; `surged_from`: the count before a surge, recorded on it
    /// with `replicas` as the count the controller set (None: the record removed);
    /// `retired`: the uids of the retiring pods this scale is to remove, recorded on it (empty:
    /// the record removed); `undone`: how many surges in a row another writer of `replicas`
    /// undid, recorded on it (0: the record removed); `resource_version`: the ReplicaSet's as
    /// decided on.
    ScaleReplicaSet {
        name: String,
        replicas: i32,
        surged_from: Option<i32>,
        retired: Vec<String>,
        undone: u32,
        resource_version: Option<String>,
        why: String,
    },
    /// Creates a pod: a bare jump pod made again under its name, or its standby
    /// ([`crate::keeper`]).
    CreatePod {
        pod: Box<Pod>,
        why: String,
    },
    /// Deletes a standby the jump pod no longer needs ([`crate::keeper`]), only if it still has
    /// this uid; it hands over like any jump pod.
    DeleteStandby {
        name: String,
        uid: String,
        why: String,
    },
    /// Deletes a ReplicaSet's pod on a node the cluster found lost, only if it still has this
    /// uid: the ReplicaSet stops counting it and replaces it at once.
    MovePodOff {
        name: String,
        uid: String,
        why: String,
    },
    /// Deletes a pod at once (grace period 0), only if it still has this uid: a pod on a node
    /// the cluster found lost, whose kubelet will never confirm a graceful deletion.
    ForceDeletePod {
        name: String,
        uid: String,
        why: String,
    },
    /// Sets a pod's Ready condition False, as the node-lifecycle controller does for the pods
    /// of a node it finds lost: the Service's endpoints drop it, its open connections stay,
    /// and its kubelet, once it speaks, sets the condition back
    /// ([`crate::rotation`]). `resource_version`: the pod's as decided on.
    TakeOutOfRotation {
        name: String,
        why: String,
        resource_version: Option<String>,
    },
}

impl Action {
    /// Whether this write takes away, because of its node, a pod that may still serve: a pod
    /// deleted or force-deleted off a lost node, a retiring pod deleted or scaled off. These
    /// count against the controller's destruction budget.
    pub fn removes_for_a_node(&self) -> bool {
        match self {
            Action::MovePodOff { .. }
            | Action::ForceDeletePod { .. }
            | Action::DeleteRetiringPod { .. } => true,
            Action::ScaleReplicaSet { retired, .. } => !retired.is_empty(),
            _ => false,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::CreateNamespace(ns) => {
                write!(f, "create namespace {}", name_of(&ns.metadata))
            }
            Action::CreateReplicaSet(rs) => {
                write!(f, "create replicaset {}", name_of(&rs.metadata))
            }
            Action::DeletePod { name, why, .. } => write!(f, "delete pod {name} ({why})"),
            Action::DeleteService { name, why, .. } => {
                write!(f, "delete service {name} ({why})")
            }
            Action::CreateService {
                service,
                keeps_port,
            } => {
                write!(f, "create service {}", name_of(&service.metadata))?;
                match (keeps_port, node_port(service)) {
                    (Some(p), _) => write!(f, " on NodePort {p} (kept: running jobs use it)"),
                    (None, Some(p)) => write!(f, " on NodePort {p}"),
                    (None, None) => write!(f, " (NodePort allocated by the cluster)"),
                }
            }
            Action::RetirePod { name, why, .. } => write!(f, "mark pod {name} retiring ({why})"),
            Action::WithdrawRetiring { name, why, .. } => {
                write!(f, "withdraw the retiring mark of pod {name} ({why})")
            }
            Action::DeleteRetiringPod { name, why, .. } => {
                write!(f, "delete retiring pod {name} ({why})")
            }
            Action::ScaleReplicaSet {
                name,
                replicas,
                why,
                ..
            } => write!(f, "scale replicaset {name} to {replicas} ({why})"),
            Action::CreatePod { pod, why } => write!(f, "create pod {} ({why})", shown(pod)),
            Action::DeleteStandby { name, why, .. } => write!(f, "delete standby {name} ({why})"),
            Action::MovePodOff { name, why, .. } => write!(f, "delete pod {name} ({why})"),
            Action::ForceDeletePod { name, why, .. } => {
                write!(f, "force-delete pod {name} ({why})")
            }
            Action::TakeOutOfRotation { name, why, .. } => write!(
                f,
                "take pod {name} out of the Service's endpoints, its connections kept ({why})"
            ),
        }
    }
}

/// One template field that differs from the configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub field: String,
    pub found: String,
    pub wanted: String,
}

/// Something the operator should know; none of them is an error of `ensure`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Finding {
    /// A bare pod with the current labels: the ReplicaSet adopts it.
    BarePodAdoptable { pod: String, adopted: bool },
    /// A running pre-#3891 pod: left alone until it is gone.
    LegacyPodRunning { pod: String, phase: String },
    /// A pre-#3891 pod terminating and not Ready (its node does not answer): it serves nobody
    /// and counts as gone, so its Service is replaced on the same NodePort.
    LegacyPodStranded { pod: String },
    /// The pre-#3891 Service is kept while the pre-#3891 pod runs.
    LegacyServiceKept {
        service: String,
        node_port: Option<i32>,
    },
    /// The ReplicaSet's template differs from the configuration; not rewritten.
    Drift {
        replicaset: String,
        differences: Vec<Difference>,
        commands: Vec<String>,
    },
    /// The ReplicaSet does not select `app.kubernetes.io/instance=<name>`.
    ForeignReplicaSet {
        replicaset: String,
        selector: String,
    },
    /// The Service selects neither schema's labels, or is not a NodePort Service.
    ForeignService { service: String, problem: String },
    /// The Service's NodePort is not the configured `port` (it is kept: jobs use it).
    PortDiffers {
        service: String,
        configured: i32,
        actual: Option<i32>,
    },
    /// An older dstack server (a release that manages a bare jump pod) still runs jobs of this
    /// project: after `ensure` created the ReplicaSet, someone recreated the Service or created
    /// a bare pod named like the ReplicaSet. `signs`: what gave it away.
    #[serde(rename_all = "camelCase")]
    OlderServerFight {
        namespace: String,
        service: String,
        pod: String,
        node_port: Option<i32>,
        configured_port: Option<i32>,
        signs: Vec<String>,
    },
    /// Most nodes look silent or lost at once: taken for a fault of the controller's own view
    /// or of the control plane, so nothing is done on that until fewer do.
    NodesDisrupted { why: String },
    /// Nothing is known of the nodes (their watch fails): nothing is surged or done for a node
    /// until it answers again; the rest goes on.
    NodesUnknown { why: String },
    /// A released dstack server's bare jump pod was deleted by hand, not disrupted: not made
    /// again ([`crate::keeper::deleted_by_hand`]).
    DeletedByHand { pod: String },
    /// Another writer of the ReplicaSet's `replicas` (an autoscaler, a GitOps tool's self-heal)
    /// undid the surge `times` in a row: the controller stops surging it.
    /// `resume`: the command that surges it again.
    SurgeUndone {
        replicaset: String,
        times: u32,
        resume: String,
    },
    /// The scheduler cannot place the pod.
    Unschedulable {
        pod: String,
        reason: String,
        message: String,
    },
    /// The ReplicaSet controller cannot create the pod: its `ReplicaFailure` condition (a
    /// quota, a LimitRange, Pod Security or an admission policy refused the pod).
    PodsRefused {
        replicaset: String,
        reason: String,
        message: String,
    },
    /// A container of an active pod waits for a reason that does not pass by itself
    /// (ErrImagePull, ImagePullBackOff, CrashLoopBackOff, CreateContainerConfigError, ...).
    ContainerWaiting {
        pod: String,
        container: String,
        reason: String,
        message: String,
    },
}

impl Finding {
    /// A finding that keeps the jump pod from serving (or may, once jobs need it), as opposed
    /// to a note on what older releases left behind.
    pub fn is_warning(&self) -> bool {
        matches!(
            self,
            Finding::Unschedulable { .. }
                | Finding::PodsRefused { .. }
                | Finding::ContainerWaiting { .. }
                | Finding::Drift { .. }
                | Finding::PortDiffers { .. }
                | Finding::OlderServerFight { .. }
                | Finding::NodesDisrupted { .. }
                | Finding::NodesUnknown { .. }
                | Finding::SurgeUndone { .. }
        )
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::BarePodAdoptable { pod, adopted: true } => write!(
                f,
                "bare pod {pod} from an older release carries the current labels and is adopted by the ReplicaSet"
            ),
            Finding::BarePodAdoptable {
                pod,
                adopted: false,
            } => write!(
                f,
                "bare pod {pod} from an older release carries the current labels: the ReplicaSet adopts it (no second pod)"
            ),
            Finding::LegacyPodRunning { pod, phase } => write!(
                f,
                "pre-#3891 pod {pod} is {phase}: left alone until it is gone (its SSH sessions keep working)"
            ),
            Finding::DeletedByHand { pod } => write!(
                f,
                "jump pod {pod} was deleted by hand (no DisruptionTarget condition, its node fine): not made again; dstack makes a new one at its next job"
            ),
            Finding::SurgeUndone {
                replicaset,
                times,
                resume,
            } => write!(
                f,
                "another writer of replicaset {replicaset}'s replicas (an autoscaler, a GitOps tool's self-heal) undid its surge {times} times in a row: it is no longer surged, so a pod on a node going away is not replaced before it goes; exclude its replicas from that writer, then `{resume}`"
            ),
            Finding::NodesUnknown { why } => write!(
                f,
                "{why}: no pod is surged, replaced or taken away for its node until it answers again; the rest (the bare pod kept, the users' keys) goes on"
            ),
            Finding::NodesDisrupted { why } => write!(
                f,
                "{why}: taken for a fault of this controller's view or of the control plane; no pod is replaced, deleted or scaled off because its node looks silent, not Ready or lost until fewer do"
            ),
            Finding::LegacyPodStranded { pod } => write!(
                f,
                "pre-#3891 pod {pod} is terminating and not Ready (its node does not answer): it serves no SSH session and counts as gone; it is left for its node or the pod GC to remove"
            ),
            Finding::LegacyServiceKept { service, node_port } => write!(
                f,
                "service {service} still selects the pre-#3891 pod: kept{} until that pod is gone, then recreated with the current selector on the same NodePort",
                node_port
                    .map(|p| format!(" on NodePort {p}"))
                    .unwrap_or_default()
            ),
            Finding::Drift {
                replicaset,
                differences,
                commands,
            } => {
                write!(
                    f,
                    "replicaset {replicaset} differs from the configuration (not rewritten: jumppod never changes a template):"
                )?;
                for d in differences {
                    write!(
                        f,
                        "\n    {}: found {}, configured {}",
                        d.field, d.found, d.wanted
                    )?;
                }
                write!(f, "\n  to apply the configuration:")?;
                for c in commands {
                    write!(f, "\n    {c}")?;
                }
                Ok(())
            }
            Finding::ForeignReplicaSet {
                replicaset,
                selector,
            } => write!(
                f,
                "replicaset {replicaset} selects {selector}, not the jump pod's instance label: left as is"
            ),
            Finding::ForeignService { service, problem } => {
                write!(f, "service {service} {problem}: left as is")
            }
            Finding::PortDiffers {
                service,
                configured,
                actual,
            } => write!(
                f,
                "service {service} is on NodePort {}, not the configured {configured}: kept, because running jobs use it (delete the Service to move it)",
                actual
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "none".into())
            ),
            Finding::OlderServerFight {
                namespace,
                service,
                pod,
                node_port,
                configured_port,
                signs,
            } => {
                write!(
                    f,
                    "an older dstack server is running jobs of this project ({}): each of its jobs deletes and recreates service {service} (the NodePort may change{}; SSH through the old NodePort breaks) and creates a bare pod {pod}, which the ReplicaSet deletes as surplus or which runs beside it, then fails, because it looks for the jump pod by that name. Upgrade every dstack server of this project to a release that uses jumppod, or stop the old one; ",
                    signs.join("; "),
                    node_port.map(|p| format!(", now {p}")).unwrap_or_default()
                )?;
                match configured_port {
                    Some(p) => write!(
                        f,
                        "meanwhile keep proxy_jump.port: {p} on every server of the project, so that the NodePort stays"
                    )?,
                    None => write!(
                        f,
                        "meanwhile set proxy_jump.port (the same NodePort on every server of the project) to keep the NodePort stable"
                    )?,
                }
                write!(
                    f,
                    ". Once no older server is left, `kubectl -n {namespace} annotate service {service} {}={}` marks the Service as kept",
                    crate::objects::CREATED_BY_ANNOTATION,
                    crate::objects::CREATED_BY
                )
            }
            Finding::Unschedulable {
                pod,
                reason,
                message,
            } => write!(f, "pod {pod} cannot be scheduled ({reason}): {message}"),
            Finding::PodsRefused {
                replicaset,
                reason,
                message,
            } => write!(
                f,
                "replicaset {replicaset} cannot create its pod ({reason}): {message}"
            ),
            Finding::ContainerWaiting {
                pod,
                container,
                reason,
                message,
            } => {
                write!(f, "container {container} of pod {pod} is waiting: {reason}")?;
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
        }
    }
}

/// `-o json` form of an action: what and which object, never the whole manifest.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum ActionRecord<'a> {
    CreateNamespace {
        name: &'a str,
    },
    CreateReplicaSet {
        name: &'a str,
    },
    DeletePod {
        name: &'a str,
        uid: &'a str,
        why: &'a str,
    },
    DeleteService {
        name: &'a str,
        uid: &'a str,
        why: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    CreateService {
        name: &'a str,
        node_port: Option<i32>,
        keeps_port: Option<i32>,
    },
    RetirePod {
        name: &'a str,
        why: &'a str,
    },
    WithdrawRetiring {
        name: &'a str,
        why: &'a str,
    },
    DeleteRetiringPod {
        name: &'a str,
        uid: &'a str,
        why: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    ScaleReplicaSet {
        name: &'a str,
        replicas: i32,
        surged_from: Option<i32>,
        why: &'a str,
    },
    CreatePod {
        name: String,
        why: &'a str,
    },
    DeleteStandby {
        name: &'a str,
        uid: &'a str,
        why: &'a str,
    },
    MovePodOff {
        name: &'a str,
        uid: &'a str,
        why: &'a str,
    },
    ForceDeletePod {
        name: &'a str,
        uid: &'a str,
        why: &'a str,
    },
    TakeOutOfRotation {
        name: &'a str,
        why: &'a str,
    },
}

/// A pod to create by its name, or its generated name's prefix.
fn shown(pod: &Pod) -> String {
    match (&pod.metadata.name, &pod.metadata.generate_name) {
        (Some(name), _) => name.clone(),
        (None, Some(prefix)) => format!("{prefix}<generated>"),
        (None, None) => String::new(),
    }
}

impl Serialize for Action {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let record = match self {
            Action::CreateNamespace(ns) => ActionRecord::CreateNamespace {
                name: name_of(&ns.metadata),
            },
            Action::CreateReplicaSet(rs) => ActionRecord::CreateReplicaSet {
                name: name_of(&rs.metadata),
            },
            Action::DeletePod { name, uid, why } => ActionRecord::DeletePod { name, uid, why },
            Action::DeleteService { name, uid, why } => {
                ActionRecord::DeleteService { name, uid, why }
            }
            Action::CreateService {
                service,
                keeps_port,
            } => ActionRecord::CreateService {
                name: name_of(&service.metadata),
                node_port: node_port(service),
                keeps_port: *keeps_port,
            },
            Action::RetirePod { name, why, .. } => ActionRecord::RetirePod { name, why },
            Action::WithdrawRetiring { name, why, .. } => {
                ActionRecord::WithdrawRetiring { name, why }
            }
            Action::DeleteRetiringPod { name, uid, why } => {
                ActionRecord::DeleteRetiringPod { name, uid, why }
            }
            Action::ScaleReplicaSet {
                name,
                replicas,
                surged_from,
                why,
                ..
            } => ActionRecord::ScaleReplicaSet {
                name,
                replicas: *replicas,
                surged_from: *surged_from,
                why,
            },
            Action::CreatePod { pod, why } => ActionRecord::CreatePod {
                name: shown(pod),
                why,
            },
            Action::DeleteStandby { name, uid, why } => {
                ActionRecord::DeleteStandby { name, uid, why }
            }
            Action::MovePodOff { name, uid, why } => ActionRecord::MovePodOff { name, uid, why },
            Action::ForceDeletePod { name, uid, why } => {
                ActionRecord::ForceDeletePod { name, uid, why }
            }
            Action::TakeOutOfRotation { name, why, .. } => {
                ActionRecord::TakeOutOfRotation { name, why }
            }
        };
        record.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_delete_serializes_as_a_typed_record() {
        let action = Action::DeletePod {
            name: "p".into(),
            uid: "u".into(),
            why: "finished".into(),
        };
        assert_eq!(
            serde_json::to_value(&action).unwrap(),
            json!({"kind": "deletePod", "name": "p", "uid": "u", "why": "finished"})
        );
    }

    #[test]
    fn a_service_create_names_its_ports_not_its_manifest() {
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": "s"},
            "spec": {"type": "NodePort", "ports": [{"port": 22, "nodePort": 30022}]}
        }))
        .unwrap();
        let action = Action::CreateService {
            service: Box::new(service),
            keeps_port: Some(30022),
        };
        assert_eq!(
            serde_json::to_value(&action).unwrap(),
            json!({"kind": "createService", "name": "s", "nodePort": 30022, "keepsPort": 30022})
        );
    }
}
