//! Reading the observed objects: names, phases, conditions, ports, selectors and owners, the
//! way Kubernetes defines them. Shared by the planner, `resolve` and `status`.

use jumppod::schema::{self, Schema};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodSpec, Service};
use std::collections::BTreeMap;

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

pub fn phase_text(pod: &Pod) -> String {
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
    pod.metadata.deletion_timestamp.is_none() && phase_of(pod) == "Running" && ready_condition(pod)
}

/// The pod's Ready condition is True (whether or not it is being deleted).
pub fn ready_condition(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|(status, _, _)| status == "True")
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

/// The pod spec of a ReplicaSet's template.
pub fn template_spec(rs: &ReplicaSet) -> Option<&PodSpec> {
    rs.spec.as_ref()?.template.as_ref()?.spec.as_ref()
}

/// A ReplicaSet as a jumppod before `keys` made it: no keys volume, no mount, a start script
/// that does not merge them. For the tests of drift on both backends.
pub fn without_keys(mut rs: ReplicaSet) -> ReplicaSet {
    if let Some(spec) = rs
        .spec
        .as_mut()
        .and_then(|s| s.template.as_mut())
        .and_then(|t| t.spec.as_mut())
    {
        spec.volumes = None;
        for c in &mut spec.containers {
            c.volume_mounts = None;
            c.command = Some(vec![
                "/bin/sh".into(),
                "-c".into(),
                "exec /usr/sbin/sshd -D -e".into(),
            ]);
        }
    }
    rs
}

/// The label schema a project's pod follows (None: neither schema names this jump pod).
pub fn schema_of(pod: &Pod, jump_pod_name: &str) -> Option<Schema> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|labels| Schema::of_labels(labels, jump_pod_name))
}

/// The label schema a Service selects (None: a selector of neither schema).
pub fn service_schema(svc: &Service, jump_pod_name: &str) -> Option<Schema> {
    Schema::of_selector(&service_selector(svc), jump_pod_name)
}

/// The Service's selector (empty when it has none).
pub fn service_selector(svc: &Service) -> BTreeMap<String, String> {
    svc.spec
        .as_ref()
        .and_then(|s| s.selector.clone())
        .unwrap_or_default()
}

/// The ReplicaSet's `matchLabels` (empty when it has none).
pub fn replicaset_selector(rs: &ReplicaSet) -> BTreeMap<String, String> {
    rs.spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default()
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

/// The annotation `ensure` puts on every Service it creates. A Service that lacks it and is not
/// the one the ReplicaSet found at its creation was made by someone else after the upgrade: an
/// older dstack server recreating it on each job (issue 9 §4). An annotation, not a label:
/// dstack's own labels on the Service are not ours to give a meaning to.
pub const CREATED_BY_ANNOTATION: &str = "jumppod.dstack.ai/created-by";
pub const CREATED_BY: &str = "jumppod";

/// On the ReplicaSet: the uid of the Service, and of the bare pod named like it, that existed
/// when `ensure` created it (empty when none). Objects of older releases found then are the
/// upgrade's; a different unmarked Service or bare pod later is the sign of an older server
/// still running jobs. Recorded by uid rather than by comparing creationTimestamps: those have
/// a resolution of one second, and jumppod itself legitimately recreates the Service after the
/// ReplicaSet's pod came up (the pre-#3891 Service, once its pod is gone).
pub const FOUND_SERVICE_ANNOTATION: &str = "jumppod.dstack.ai/found-service-uid";
pub const FOUND_POD_ANNOTATION: &str = "jumppod.dstack.ai/found-pod-uid";

/// The value of an annotation.
pub fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}
