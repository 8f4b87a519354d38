//! The planner: observed objects in, actions and findings out. Pure: no I/O, no clock.
//!
//! Decisions (issue 4, `ensure`):
//! 1. a missing namespace is created;
//! 2. a missing ReplicaSet is created; an existing one whose template differs from the
//!    configuration is reported with the kubectl commands that apply the configuration (never
//!    rewritten: the Role has no update on replicasets);
//! 3. the bare legacy pod named `<name>` is left alone while it runs (with the current labels
//!    the ReplicaSet adopts it; a pre-#3891 one stays until it is gone) and deleted once it has
//!    finished, with its uid as a precondition;
//! 4. a missing Service is created (NodePort `port` if configured); a Service that still selects
//!    on the pre-#3891 label is kept while the pre-#3891 pod is active, then deleted (uid
//!    precondition) and recreated with the current selector and the same NodePort;
//! 5. pods the scheduler cannot place are reported with its reason and message.

use crate::config::Config;
use crate::manifest::{self, AUTHORIZED_KEYS_ENV, Desired};
use jumppod::quantity::Quantity;
use jumppod::schema;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec, Service};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// What `observe` read. `looked_further` says whether the legacy pod and the pods were read
/// (they are only read when the ReplicaSet or the Service is missing or not as expected).
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// `None`: not read (the ReplicaSet was found, so the namespace exists).
    pub namespace_exists: Option<bool>,
    pub replicaset: Option<ReplicaSet>,
    pub service: Option<Service>,
    pub looked_further: bool,
    /// The pod named `<name>` (bare jump pods of older releases had the ReplicaSet's name).
    pub legacy_pod: Option<Pod>,
    /// Pods labelled `app.kubernetes.io/instance=<name>`.
    pub pods: Vec<Pod>,
}

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
}

impl Action {
    pub fn is_delete(&self) -> bool {
        matches!(
            self,
            Action::DeletePod { .. } | Action::DeleteService { .. }
        )
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
    LegacyPodAdoptable { pod: String, adopted: bool },
    /// A running pre-#3891 pod: left alone until it is gone.
    LegacyPodRunning { pod: String, phase: String },
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
    /// The scheduler cannot place the pod.
    Unschedulable {
        pod: String,
        reason: String,
        message: String,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::LegacyPodAdoptable { pod, adopted: true } => write!(
                f,
                "bare pod {pod} from an older release carries the current labels and is adopted by the ReplicaSet"
            ),
            Finding::LegacyPodAdoptable {
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
                    "replicaset {replicaset} differs from the configuration (not rewritten; the Role has no update on replicasets):"
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
            Finding::Unschedulable {
                pod,
                reason,
                message,
            } => write!(f, "pod {pod} cannot be scheduled ({reason}): {message}"),
        }
    }
}

/// The planner's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub findings: Vec<Finding>,
}

/// Decides what `ensure` writes.
pub fn plan(config: &Config, desired: &Desired, observed: &Observed) -> Plan {
    let mut out = Plan::default();
    let name = config.name.as_str();

    if observed.namespace_exists == Some(false) {
        out.actions
            .push(Action::CreateNamespace(Box::new(desired.namespace.clone())));
    }

    match &observed.replicaset {
        None => out.actions.push(Action::CreateReplicaSet(Box::new(
            desired.replicaset.clone(),
        ))),
        Some(rs) => {
            let selector = rs
                .spec
                .as_ref()
                .and_then(|s| s.selector.match_labels.clone())
                .unwrap_or_default();
            if selector != schema::current_selector(name) {
                out.findings.push(Finding::ForeignReplicaSet {
                    replicaset: name.to_owned(),
                    selector: selector_text(&selector),
                });
            } else if let Some(drift) = drift(config, rs) {
                out.findings.push(drift);
            }
        }
    }

    // The bare pod of older releases.
    let mut pre_3891_active = false;
    if let Some(pod) = &observed.legacy_pod {
        let pod_name = name_of(&pod.metadata);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let owner = controller_of(pod);
        let foreign_owner =
            owner.is_some_and(|(kind, owner)| kind != "ReplicaSet" || owner != name);
        if foreign_owner {
            // Not ours and not bare: someone else's controller manages it.
        } else if is_finished(pod) {
            out.actions.push(Action::DeletePod {
                name: pod_name.to_owned(),
                uid,
                why: format!(
                    "the jump pod of an older release has finished ({}); it is never replaced",
                    phase_text(pod)
                ),
            });
        } else if has_current_instance(pod, name) {
            out.findings.push(Finding::LegacyPodAdoptable {
                pod: pod_name.to_owned(),
                adopted: owner.is_some(),
            });
        } else {
            pre_3891_active = true;
            out.findings.push(Finding::LegacyPodRunning {
                pod: pod_name.to_owned(),
                phase: if pod.metadata.deletion_timestamp.is_some() {
                    "terminating".to_owned()
                } else {
                    phase_of(pod).to_owned()
                },
            });
        }
    }

    let service_name = schema::service_name(name);
    match &observed.service {
        None => out.actions.push(Action::CreateService {
            service: Box::new(desired.service.clone()),
            keeps_port: None,
        }),
        Some(svc) => {
            let spec = svc.spec.clone().unwrap_or_default();
            let selector = spec.selector.clone().unwrap_or_default();
            let port = node_port(svc);
            if selector == schema::current_selector(name) {
                if spec.type_.as_deref() != Some("NodePort") {
                    out.findings.push(Finding::ForeignService {
                        service: service_name.clone(),
                        problem: format!(
                            "is of type {}, not NodePort",
                            spec.type_.as_deref().unwrap_or("ClusterIP")
                        ),
                    });
                } else if let Some(configured) = config.port
                    && port != Some(configured)
                {
                    out.findings.push(Finding::PortDiffers {
                        service: service_name.clone(),
                        configured,
                        actual: port,
                    });
                }
            } else if selector == schema::legacy_selector(name) {
                if pre_3891_active || !observed.looked_further {
                    out.findings.push(Finding::LegacyServiceKept {
                        service: service_name.clone(),
                        node_port: port,
                    });
                } else {
                    let keep = port.or(config.port);
                    if let (Some(configured), Some(actual)) = (config.port, port)
                        && configured != actual
                    {
                        out.findings.push(Finding::PortDiffers {
                            service: service_name.clone(),
                            configured,
                            actual: Some(actual),
                        });
                    }
                    out.actions.push(Action::DeleteService {
                        name: service_name.clone(),
                        uid: svc.metadata.uid.clone().unwrap_or_default(),
                        why: "it selects the pre-#3891 label and that pod is gone".to_owned(),
                    });
                    out.actions.push(Action::CreateService {
                        service: Box::new(manifest::service(config, keep)),
                        keeps_port: port,
                    });
                }
            } else {
                out.findings.push(Finding::ForeignService {
                    service: service_name.clone(),
                    problem: format!("selects {}", selector_text(&selector)),
                });
            }
        }
    }

    let mut seen = std::collections::BTreeSet::new();
    for pod in observed.pods.iter().chain(observed.legacy_pod.iter()) {
        if !seen.insert(name_of(&pod.metadata).to_owned()) {
            continue;
        }
        if let Some(u) = unschedulable(pod) {
            out.findings.push(u);
        }
    }
    out
}

/// Whether `observe` must read further than the ReplicaSet and the Service: something is
/// missing, or the Service still has the pre-#3891 selector, or the ReplicaSet lacks a ready
/// replica (then the pods tell why).
pub fn needs_a_closer_look(
    config: &Config,
    rs: Option<&ReplicaSet>,
    svc: Option<&Service>,
) -> bool {
    let Some(rs) = rs else { return true };
    let Some(svc) = svc else { return true };
    let selector = svc.spec.as_ref().and_then(|s| s.selector.clone());
    if selector.as_ref() != Some(&schema::current_selector(&config.name)) {
        return true;
    }
    let wanted = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let ready = rs
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    ready < wanted
}

/// The ReplicaSet's template compared with the configuration.
pub fn drift(config: &Config, rs: &ReplicaSet) -> Option<Finding> {
    let name = config.name.as_str();
    let container_name = schema::container_name(name);
    let wanted = manifest::pod_spec(config);
    let wanted_c = &wanted.containers[0];
    let found_spec: PodSpec = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.spec.clone())
        .unwrap_or_default();
    let mut differences = Vec::new();
    let mut commands = Vec::new();
    let ns = &config.namespace;
    let Some(found_c) = found_spec
        .containers
        .iter()
        .find(|c| c.name == container_name)
    else {
        differences.push(Difference {
            field: "container".into(),
            found: found_spec
                .containers
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
                .join(","),
            wanted: container_name.clone(),
        });
        commands.push(format!(
            "kubectl -n {ns} delete replicaset {name}   # then run `jumppod ensure` (open SSH sessions through this pod drop)"
        ));
        return Some(Finding::Drift {
            replicaset: name.to_owned(),
            differences,
            commands,
        });
    };

    let mut resources_differ = false;
    for (side, key) in [
        ("requests", "cpu"),
        ("limits", "cpu"),
        ("requests", "memory"),
        ("limits", "memory"),
        ("requests", "ephemeral-storage"),
        ("limits", "ephemeral-storage"),
    ] {
        let found = resource(found_c, side, key);
        let want = resource(wanted_c, side, key);
        if !same_quantity(found.as_deref(), want.as_deref()) {
            resources_differ = true;
            differences.push(Difference {
                field: format!("resources.{side}.{key}"),
                found: found.unwrap_or_else(|| "unset".into()),
                wanted: want.unwrap_or_else(|| "unset".into()),
            });
        }
    }
    if resources_differ {
        let mut cmd = format!(
            "kubectl -n {ns} set resources replicaset {name} -c {container_name} --requests=cpu={},memory={},ephemeral-storage={} --limits=cpu={},memory={}",
            config.cpu,
            config.memory,
            config.contract.ephemeral_storage_request,
            config.cpu,
            config.memory
        );
        if resource(found_c, "limits", "ephemeral-storage").is_some() {
            cmd.push_str(&format!(
                "\n    kubectl -n {ns} patch replicaset {name} --type json -p '[{{\"op\":\"remove\",\"path\":\"/spec/template/spec/containers/0/resources/limits/ephemeral-storage\"}}]'"
            ));
        }
        commands.push(cmd);
    }
    if found_c.image != wanted_c.image {
        differences.push(Difference {
            field: "image".into(),
            found: found_c.image.clone().unwrap_or_else(|| "unset".into()),
            wanted: config.image.clone(),
        });
        commands.push(format!(
            "kubectl -n {ns} set image replicaset/{name} {container_name}={}",
            config.image
        ));
    }
    if config.ssh_public_key.is_some() && env_value(found_c) != env_value(wanted_c) {
        differences.push(Difference {
            field: format!("env.{AUTHORIZED_KEYS_ENV}"),
            found: env_value(found_c).unwrap_or_else(|| "unset".into()),
            wanted: env_value(wanted_c).unwrap_or_default(),
        });
        commands.push(format!(
            "kubectl -n {ns} set env replicaset/{name} -c {container_name} {AUTHORIZED_KEYS_ENV}='{}'",
            env_value(wanted_c).unwrap_or_default()
        ));
    }
    let found_sel = found_spec.node_selector.clone().unwrap_or_default();
    let found_tol = found_spec.tolerations.clone().unwrap_or_default();
    let sel_differs = found_sel != config.node_selector;
    let tol_differs = found_tol != config.tolerations;
    if sel_differs {
        differences.push(Difference {
            field: "nodeSelector".into(),
            found: selector_text(&found_sel),
            wanted: selector_text(&config.node_selector),
        });
    }
    if tol_differs {
        differences.push(Difference {
            field: "tolerations".into(),
            found: serde_json::to_string(&found_tol).unwrap_or_default(),
            wanted: serde_json::to_string(&config.tolerations).unwrap_or_default(),
        });
    }
    if sel_differs || tol_differs {
        let patch = serde_json::json!({"spec": {"template": {"spec": {
            "nodeSelector": if config.node_selector.is_empty() { serde_json::Value::Null } else { serde_json::json!(config.node_selector) },
            "tolerations": if config.tolerations.is_empty() { serde_json::Value::Null } else { serde_json::json!(config.tolerations) },
        }}}});
        commands.push(format!(
            "kubectl -n {ns} patch replicaset {name} --type merge -p '{patch}'"
        ));
    }
    if differences.is_empty() {
        return None;
    }
    commands.push(format!(
        "kubectl -n {ns} delete pod -l {}={name}   # the ReplicaSet recreates the pod from the new template; SSH sessions through it drop",
        schema::INSTANCE_LABEL
    ));
    Some(Finding::Drift {
        replicaset: name.to_owned(),
        differences,
        commands,
    })
}

fn resource(c: &Container, side: &str, key: &str) -> Option<String> {
    let r = c.resources.as_ref()?;
    let map = if side == "requests" {
        r.requests.as_ref()
    } else {
        r.limits.as_ref()
    }?;
    map.get(key).map(|q| q.0.clone())
}

fn same_quantity(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => match (Quantity::parse(a), Quantity::parse(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => a == b,
        },
        _ => false,
    }
}

fn env_value(c: &Container) -> Option<String> {
    c.env
        .as_ref()?
        .iter()
        .find(|e| e.name == AUTHORIZED_KEYS_ENV)
        .and_then(|e| e.value.clone())
}

pub fn selector_text(sel: &BTreeMap<String, String>) -> String {
    if sel.is_empty() {
        return "nothing".into();
    }
    sel.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("")
}

pub fn node_port(svc: &Service) -> Option<i32> {
    svc.spec
        .as_ref()?
        .ports
        .as_ref()?
        .iter()
        .find(|p| p.port == schema::SSH_PORT)
        .or_else(|| svc.spec.as_ref()?.ports.as_ref()?.first())?
        .node_port
}

pub fn phase_of(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn phase_text(pod: &Pod) -> String {
    let phase = phase_of(pod);
    match pod.status.as_ref().and_then(|s| s.reason.as_deref()) {
        Some(reason) => format!("{phase}, {reason}"),
        None => phase.to_owned(),
    }
}

/// Failed or Succeeded: its containers will not run again.
pub fn is_finished(pod: &Pod) -> bool {
    matches!(phase_of(pod), "Failed" | "Succeeded")
}

/// Not finished and not being deleted: counted by a ReplicaSet.
pub fn is_active(pod: &Pod) -> bool {
    !is_finished(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// Running, Ready=True, not being deleted.
pub fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && phase_of(pod) == "Running"
        && condition(pod, "Ready").is_some_and(|(status, _, _)| status == "True")
}

/// `(status, reason, message)` of a pod condition.
pub fn condition<'a>(pod: &'a Pod, kind: &str) -> Option<(&'a str, &'a str, &'a str)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| {
            (
                c.status.as_str(),
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or(""),
            )
        })
}

/// The scheduler's verdict on an active pending pod it could not place.
pub fn unschedulable(pod: &Pod) -> Option<Finding> {
    if !is_active(pod) {
        return None;
    }
    let (status, reason, message) = condition(pod, "PodScheduled")?;
    (status == "False").then(|| Finding::Unschedulable {
        pod: name_of(&pod.metadata).to_owned(),
        reason: if reason.is_empty() {
            "Unschedulable"
        } else {
            reason
        }
        .to_owned(),
        message: message.to_owned(),
    })
}

fn has_current_instance(pod: &Pod, name: &str) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(schema::INSTANCE_LABEL))
        .is_some_and(|v| v == name)
}

/// `(kind, name)` of the pod's controller, if any.
pub fn controller_of(pod: &Pod) -> Option<(&str, &str)> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.as_str(), o.name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;
    use rstest::rstest;
    use serde_json::{Value, json};

    const NAME: &str = "dstack-main-ssh-jump-pod";
    const SVC: &str = "dstack-main-ssh-jump-pod-service";

    fn config() -> Config {
        Config::for_project("dstack", "main")
    }

    fn config_with(yaml: &str) -> Config {
        RawConfig::from_text(&format!("namespace: dstack\nproject: main\n{yaml}"))
            .unwrap()
            .validate("default")
            .unwrap()
    }

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn rs_from(config: &Config, ready: i32) -> ReplicaSet {
        let mut rs = manifest::replicaset(config);
        rs.metadata.uid = Some("rs-uid".into());
        rs.status = Some(typed(json!({"replicas": 1, "readyReplicas": ready})));
        rs
    }

    fn rs(ready: i32) -> ReplicaSet {
        rs_from(&config(), ready)
    }

    fn svc(selector: BTreeMap<String, String>, port: i32) -> Service {
        typed(json!({
            "metadata": {"name": SVC, "namespace": "dstack", "uid": "svc-uid"},
            "spec": {"type": "NodePort", "selector": selector,
                     "ports": [{"port": 22, "targetPort": 22, "nodePort": port}]}
        }))
    }

    fn current_svc(port: i32) -> Service {
        svc(schema::current_selector(NAME), port)
    }

    fn legacy_svc(port: i32) -> Service {
        svc(schema::legacy_selector(NAME), port)
    }

    /// A bare pod named like the ReplicaSet; `current`: with the current labels.
    fn legacy_pod(phase: &str, current: bool) -> Pod {
        let labels = if current {
            schema::current_labels(NAME, "main")
        } else {
            schema::legacy_selector(NAME)
        };
        typed(json!({
            "metadata": {"name": NAME, "namespace": "dstack", "uid": "legacy-uid", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "sshd"}]},
            "status": {"phase": phase}
        }))
    }

    fn owned(mut pod: Pod, kind: &str, owner: &str) -> Pod {
        pod.metadata.owner_references = Some(vec![typed(json!({
            "apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": "o", "controller": true
        }))]);
        pod
    }

    fn pending_unschedulable(name: &str) -> Pod {
        typed(json!({
            "metadata": {"name": name, "namespace": "dstack", "uid": "p",
                         "labels": schema::current_labels(NAME, "main")},
            "spec": {"containers": [{"name": "c", "image": "sshd"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}
        }))
    }

    fn steady() -> Observed {
        Observed {
            namespace_exists: None,
            replicaset: Some(rs(1)),
            service: Some(current_svc(31022)),
            ..Observed::default()
        }
    }

    fn run(observed: &Observed) -> Plan {
        let c = config();
        plan(&c, &Desired::from_config(&c), observed)
    }

    fn kinds(plan: &Plan) -> Vec<String> {
        plan.actions
            .iter()
            .map(|a| match a {
                Action::CreateNamespace(_) => "create namespace".to_owned(),
                Action::CreateReplicaSet(_) => "create replicaset".to_owned(),
                Action::DeletePod { name, .. } => format!("delete pod {name}"),
                Action::DeleteService { name, .. } => format!("delete service {name}"),
                Action::CreateService { service, .. } => {
                    format!("create service on {:?}", node_port(service))
                }
            })
            .collect()
    }

    #[rstest]
    #[case::an_empty_namespace_gets_the_namespace_the_replicaset_and_the_service(
        Observed { namespace_exists: Some(false), looked_further: true, ..Observed::default() },
        &["create namespace", "create replicaset", "create service on None"])]
    #[case::an_existing_namespace_is_not_created_again(
        Observed { namespace_exists: Some(true), looked_further: true, ..Observed::default() },
        &["create replicaset", "create service on None"])]
    #[case::the_steady_state_writes_nothing(steady(), &[])]
    #[case::a_missing_service_is_created(
        Observed { service: None, looked_further: true, ..steady() }, &["create service on None"])]
    #[case::a_missing_replicaset_is_created_and_the_service_kept(
        Observed { replicaset: None, namespace_exists: Some(true), looked_further: true, ..steady() },
        &["create replicaset"])]
    #[case::a_running_bare_pod_with_current_labels_is_left_to_be_adopted(
        Observed { replicaset: None, namespace_exists: Some(true), looked_further: true,
                   legacy_pod: Some(legacy_pod("Running", true)), ..steady() },
        &["create replicaset"])]
    #[case::a_failed_bare_pod_is_deleted(
        Observed { looked_further: true, legacy_pod: Some(legacy_pod("Failed", true)), ..steady() },
        &["delete pod dstack-main-ssh-jump-pod"])]
    #[case::a_succeeded_bare_pod_is_deleted(
        Observed { looked_further: true, legacy_pod: Some(legacy_pod("Succeeded", true)), ..steady() },
        &["delete pod dstack-main-ssh-jump-pod"])]
    #[case::a_finished_adopted_pod_is_deleted_too(
        Observed { looked_further: true,
                   legacy_pod: Some(owned(legacy_pod("Failed", true), "ReplicaSet", NAME)), ..steady() },
        &["delete pod dstack-main-ssh-jump-pod"])]
    #[case::a_finished_pod_of_another_controller_is_never_deleted(
        Observed { looked_further: true,
                   legacy_pod: Some(owned(legacy_pod("Failed", true), "Job", "other")), ..steady() },
        &[])]
    #[case::a_running_pre_3891_pod_keeps_its_old_service(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   legacy_pod: Some(legacy_pod("Running", false)), ..steady() },
        &[])]
    #[case::a_pending_pre_3891_pod_keeps_its_old_service(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   legacy_pod: Some(legacy_pod("Pending", false)), ..steady() },
        &[])]
    #[case::once_the_pre_3891_pod_is_gone_the_service_is_recreated_on_the_same_port(
        Observed { looked_further: true, service: Some(legacy_svc(30555)), legacy_pod: None, ..steady() },
        &["delete service dstack-main-ssh-jump-pod-service", "create service on Some(30555)"])]
    #[case::a_finished_pre_3891_pod_is_deleted_and_the_service_recreated_on_the_same_port(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   legacy_pod: Some(legacy_pod("Failed", false)), ..steady() },
        &["delete pod dstack-main-ssh-jump-pod", "delete service dstack-main-ssh-jump-pod-service",
          "create service on Some(30555)"])]
    #[case::an_old_service_is_never_replaced_without_a_look_at_the_legacy_pod(
        Observed { looked_further: false, service: Some(legacy_svc(30555)), ..steady() }, &[])]
    #[case::a_service_with_a_foreign_selector_is_left_alone(
        Observed { service: Some(svc(BTreeMap::from([("app".into(), "x".into())]), 30001)),
                   looked_further: true, ..steady() }, &[])]
    fn decides(#[case] observed: Observed, #[case] expected: &[&str]) {
        assert_eq!(kinds(&run(&observed)), expected);
    }

    #[test]
    fn deletes_carry_the_uid_they_were_decided_on() {
        let plan = run(&Observed {
            looked_further: true,
            service: Some(legacy_svc(30555)),
            legacy_pod: Some(legacy_pod("Failed", false)),
            ..steady()
        });
        let uids: Vec<&str> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod { uid, .. } | Action::DeleteService { uid, .. } => {
                    Some(uid.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(uids, ["legacy-uid", "svc-uid"]);
    }

    #[test]
    fn the_kept_port_wins_over_a_different_configured_port_and_is_reported() {
        let c = config_with("port: 31000");
        let observed = Observed {
            looked_further: true,
            service: Some(legacy_svc(30555)),
            ..steady()
        };
        let plan = plan(&c, &Desired::from_config(&c), &observed);
        assert!(plan.actions.iter().any(|a| matches!(a,
            Action::CreateService { service, keeps_port: Some(30555) } if node_port(service) == Some(30555))));
        assert!(plan.findings.contains(&Finding::PortDiffers {
            service: SVC.into(),
            configured: 31000,
            actual: Some(30555)
        }));
    }

    #[test]
    fn a_new_service_takes_the_configured_port() {
        let c = config_with("port: 31000");
        let observed = Observed {
            service: None,
            looked_further: true,
            ..steady()
        };
        let plan = plan(&c, &Desired::from_config(&c), &observed);
        assert!(matches!(&plan.actions[0],
            Action::CreateService { service, keeps_port: None } if node_port(service) == Some(31000)));
    }

    #[rstest]
    #[case::a_running_pre_3891_pod_is_reported_as_left_alone(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   legacy_pod: Some(legacy_pod("Running", false)), ..steady() },
        Finding::LegacyPodRunning { pod: NAME.into(), phase: "Running".into() })]
    #[case::the_kept_old_service_is_reported_with_its_port(
        Observed { looked_further: true, service: Some(legacy_svc(30555)),
                   legacy_pod: Some(legacy_pod("Running", false)), ..steady() },
        Finding::LegacyServiceKept { service: SVC.into(), node_port: Some(30555) })]
    #[case::a_bare_pod_with_current_labels_is_reported_as_adoptable(
        Observed { looked_further: true, legacy_pod: Some(legacy_pod("Running", true)), ..steady() },
        Finding::LegacyPodAdoptable { pod: NAME.into(), adopted: false })]
    #[case::an_adopted_pod_is_reported_as_adopted(
        Observed { looked_further: true,
                   legacy_pod: Some(owned(legacy_pod("Running", true), "ReplicaSet", NAME)), ..steady() },
        Finding::LegacyPodAdoptable { pod: NAME.into(), adopted: true })]
    #[case::an_unschedulable_pod_is_reported_with_the_schedulers_message(
        Observed { looked_further: true, replicaset: Some(rs(0)),
                   pods: vec![pending_unschedulable("dstack-main-ssh-jump-pod-x7k2q")], ..steady() },
        Finding::Unschedulable { pod: "dstack-main-ssh-jump-pod-x7k2q".into(), reason: "Unschedulable".into(),
                                 message: "0/3 nodes are available: 3 Insufficient cpu.".into() })]
    #[case::a_configured_port_other_than_the_services_is_reported(
        Observed { service: Some(current_svc(30001)), ..steady() },
        Finding::PortDiffers { service: SVC.into(), configured: 31000, actual: Some(30001) })]
    fn reports(#[case] observed: Observed, #[case] expected: Finding) {
        let c = if matches!(expected, Finding::PortDiffers { .. }) {
            config_with("port: 31000")
        } else {
            config()
        };
        let plan = plan(&c, &Desired::from_config(&c), &observed);
        assert!(
            plan.findings.contains(&expected),
            "{:#?} not in {:#?}",
            expected,
            plan.findings
        );
    }

    #[rstest]
    #[case::older_resources_are_drift_with_a_set_resources_command(
        "cpu: 250m",
        "resources.requests.cpu",
        "set resources replicaset dstack-main-ssh-jump-pod"
    )]
    #[case::another_image_is_drift_with_a_set_image_command(
        "image: sshd:2",
        "image",
        "set image replicaset/dstack-main-ssh-jump-pod"
    )]
    #[case::another_node_selector_is_drift_with_a_patch_command(
        "node_selector: {pool: jump}",
        "nodeSelector",
        "patch replicaset dstack-main-ssh-jump-pod --type merge"
    )]
    fn drift_is_reported_with_the_commands_to_apply_it(
        #[case] yaml: &str,
        #[case] field: &str,
        #[case] command: &str,
    ) {
        let c = config_with(yaml);
        let observed = steady(); // built from the default configuration
        let plan = plan(&c, &Desired::from_config(&c), &observed);
        assert!(plan.actions.is_empty(), "drift is never rewritten");
        let Some(Finding::Drift {
            differences,
            commands,
            ..
        }) = plan.findings.first()
        else {
            panic!("no drift in {:?}", plan.findings)
        };
        assert!(
            differences.iter().any(|d| d.field == field),
            "{differences:?}"
        );
        assert!(commands.iter().any(|c| c.contains(command)), "{commands:?}");
        assert!(
            commands
                .last()
                .unwrap()
                .contains("delete pod -l app.kubernetes.io/instance=")
        );
    }

    #[test]
    fn equal_quantities_written_differently_are_not_drift() {
        let c = config_with("cpu: '0.5'\nmemory: 1024Mi");
        let observed = steady();
        assert_eq!(
            plan(&c, &Desired::from_config(&c), &observed),
            Plan::default()
        );
    }

    #[test]
    fn a_replicaset_with_a_foreign_selector_is_reported_not_diffed() {
        let mut foreign = rs(1);
        foreign.spec.as_mut().unwrap().selector.match_labels =
            Some(BTreeMap::from([("app".into(), "x".into())]));
        let plan = run(&Observed {
            replicaset: Some(foreign),
            ..steady()
        });
        assert!(matches!(
            plan.findings[..],
            [Finding::ForeignReplicaSet { .. }]
        ));
    }

    #[rstest]
    #[case::a_missing_replicaset_needs_a_closer_look(None, Some(current_svc(1)), true)]
    #[case::a_missing_service_needs_a_closer_look(Some(rs(1)), None, true)]
    #[case::an_old_selector_service_needs_a_closer_look(Some(rs(1)), Some(legacy_svc(1)), true)]
    #[case::a_replicaset_without_a_ready_pod_needs_a_closer_look(
        Some(rs(0)),
        Some(current_svc(1)),
        true
    )]
    #[case::a_ready_replicaset_and_a_current_service_are_enough(
        Some(rs(1)),
        Some(current_svc(1)),
        false
    )]
    fn looks_further_only_when_something_is_off(
        #[case] rs: Option<ReplicaSet>,
        #[case] svc: Option<Service>,
        #[case] expected: bool,
    ) {
        assert_eq!(
            needs_a_closer_look(&config(), rs.as_ref(), svc.as_ref()),
            expected
        );
    }

    #[test]
    fn actions_describe_themselves_for_the_operator() {
        let plan = run(&Observed {
            looked_further: true,
            service: Some(legacy_svc(30555)),
            ..steady()
        });
        let text: Vec<String> = plan.actions.iter().map(ToString::to_string).collect();
        assert_eq!(
            text[1],
            "create service dstack-main-ssh-jump-pod-service on NodePort 30555 (kept: running jobs use it)"
        );
    }
}
