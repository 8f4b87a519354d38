//! Reading pods and ReplicaSets into findings: what the scheduler, the ReplicaSet controller
//! and the kubelet say is wrong, in their own reasons and messages.

use crate::action::Finding;
use crate::objects::{condition, is_active, name_of};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;

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

/// The ReplicaSet controller's verdict when it cannot create pods: its `ReplicaFailure`
/// condition, True with reason FailedCreate (or FailedDelete) and the API's message, until a
/// create succeeds.
pub fn pods_refused(rs: &ReplicaSet) -> Option<Finding> {
    let condition = rs
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")?;
    Some(Finding::PodsRefused {
        replicaset: name_of(&rs.metadata).to_owned(),
        reason: condition
            .reason
            .clone()
            .unwrap_or_else(|| "FailedCreate".to_owned()),
        message: condition.message.clone().unwrap_or_default(),
    })
}

/// The kubelet's reasons for containers of an active pod that wait and will not start by
/// themselves; the reasons of a normal start (ContainerCreating, PodInitializing) are not
/// findings.
pub fn containers_waiting(pod: &Pod) -> Vec<Finding> {
    if !is_active(pod) {
        return Vec::new();
    }
    let Some(status) = &pod.status else {
        return Vec::new();
    };
    let all = status.init_container_statuses.iter().flatten();
    all.chain(status.container_statuses.iter().flatten())
        .filter_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref()?;
            (!matches!(reason, "ContainerCreating" | "PodInitializing")).then(|| {
                Finding::ContainerWaiting {
                    pod: name_of(&pod.metadata).to_owned(),
                    container: c.name.clone(),
                    reason: reason.to_owned(),
                    message: waiting.message.clone().unwrap_or_default(),
                }
            })
        })
        .collect()
}
