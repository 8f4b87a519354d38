//! The executor: sends the planned actions, nothing else. A create answered 409 AlreadyExists
//! is a success (another host got there first); a delete answered 404 is a success; a delete
//! whose uid precondition fails (409 Conflict: the object was replaced in between) deletes
//! nothing and is reported; a patch answered 404 is a success (what it marked is gone); a
//! patch carrying the resourceVersion it was decided on and answered 409 Conflict (the object
//! changed since) ends the run: what follows was decided on the same stale view, and the
//! change, once seen, decides again. Transient errors are retried within the deadline (see
//! `api`).

use crate::api::{
    Kube, Op, explain, is_already_exists, is_conflict, is_not_found, is_precondition_failed,
};
use crate::error::HostError;
use jumppod_plan::action::Action;
use jumppod_plan::objects::{name_of, node_port};
use jumppod_plan::surge;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde::Serialize;

/// What happened to one action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ActionOutcome {
    Done,
    /// Create answered 409 AlreadyExists.
    AlreadyExisted,
    /// Delete answered 404.
    AlreadyGone,
    /// Delete precondition failed: another object of that name now exists; left alone.
    ReplacedMeanwhile,
    /// Create answered 403: the namespace is being deleted.
    NamespaceTerminating,
    /// Patch answered 409 Conflict: the object changed since the decision; nothing written,
    /// and nothing after it sent.
    Stale,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Applied {
    pub action: Action,
    pub outcome: ActionOutcome,
}

/// Sends the actions in order; stops at the first permanent error, and after a stale write.
pub async fn apply(
    kube: &Kube,
    namespace: &str,
    actions: &[Action],
) -> Result<Vec<Applied>, HostError> {
    let mut done = Vec::with_capacity(actions.len());
    for action in actions {
        let outcome = apply_one(kube, namespace, action).await?;
        tracing::info!(%action, ?outcome, "applied");
        done.push(Applied {
            action: action.clone(),
            outcome,
        });
        if outcome == ActionOutcome::Stale {
            break;
        }
    }
    Ok(done)
}

/// Sends the actions in order, past a permanent error (a create the API refuses, a quota):
/// the controller's other writes for the project do not wait on one the API will not take.
/// Stops after a stale write. The errors, each with its action.
pub async fn apply_each(
    kube: &Kube,
    namespace: &str,
    actions: &[Action],
) -> (Vec<Applied>, Vec<(Action, HostError)>) {
    let mut done = Vec::with_capacity(actions.len());
    let mut refused = Vec::new();
    for action in actions {
        match apply_one(kube, namespace, action).await {
            Ok(outcome) => {
                tracing::info!(%action, ?outcome, "applied");
                done.push(Applied {
                    action: action.clone(),
                    outcome,
                });
                if outcome == ActionOutcome::Stale {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(%action, error = %e.report(), "refused");
                refused.push((action.clone(), e));
            }
        }
    }
    (done, refused)
}

/// Sends one action.
async fn apply_one(
    kube: &Kube,
    namespace: &str,
    action: &Action,
) -> Result<ActionOutcome, HostError> {
    Ok(match action {
        Action::CreateNamespace(ns) => {
            let api: Api<Namespace> = Api::all(kube.client.clone());
            create(
                kube,
                &api,
                ns,
                Op::new("create", "namespaces", None, ns.metadata.name.as_deref()),
            )
            .await?
        }
        Action::CreateReplicaSet(rs) => {
            let api: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), namespace);
            create(
                kube,
                &api,
                rs.as_ref(),
                Op::new(
                    "create",
                    "replicasets",
                    Some(namespace),
                    rs.metadata.name.as_deref(),
                ),
            )
            .await?
        }
        Action::CreateService {
            service,
            keeps_port,
        } => {
            let api: Api<Service> = Api::namespaced(kube.client.clone(), namespace);
            let o = Op::new(
                "create",
                "services",
                Some(namespace),
                service.metadata.name.as_deref(),
            );
            match create(kube, &api, service.as_ref(), o).await {
                Err(HostError::Api {
                    code: 422,
                    message,
                    source,
                    ..
                }) if message.contains("already allocated") => {
                    // The registry allocates the NodePort before it finds the name taken,
                    // so another host's create of this very Service (the same selector, on
                    // this port) answers 422, not 409 AlreadyExists: a read tells which.
                    // That create may still be in flight (its port allocated, its Service
                    // not yet stored), so the read is repeated for a moment.
                    let name = name_of(&service.metadata);
                    if twin_appears(kube, &api, namespace, service).await? {
                        ActionOutcome::AlreadyExisted
                    } else {
                        return Err(HostError::NodePortTaken {
                            service: name.to_owned(),
                            port: keeps_port.or_else(|| node_port(service)).unwrap_or(0),
                            kept: keeps_port.is_some(),
                            message,
                            source,
                        });
                    }
                }
                other => other?,
            }
        }
        Action::DeletePod { name, uid, .. }
        | Action::DeleteStandby { name, uid, .. }
        | Action::MovePodOff { name, uid, .. }
        | Action::DeleteRetiringPod { name, uid, .. }
        | Action::ForceDeletePod { name, uid, .. } => {
            let api: Api<Pod> = Api::namespaced(kube.client.clone(), namespace);
            // A pod on a lost node: its kubelet never confirms, so only a grace period of
            // 0 removes it (what `kubectl delete --force --grace-period=0` does).
            let grace = matches!(action, Action::ForceDeletePod { .. }).then_some(0);
            delete(
                kube,
                &api,
                uid,
                grace,
                Op::new("delete", "pods", Some(namespace), Some(name)),
            )
            .await?
        }
        Action::CreatePod { pod, .. } => {
            let api: Api<Pod> = Api::namespaced(kube.client.clone(), namespace);
            let op = Op::new(
                "create",
                "pods",
                Some(namespace),
                pod.metadata.name.as_deref(),
            );
            match create(kube, &api, pod.as_ref(), op).await {
                // The namespace is being deleted: whatever was in it is going too.
                Err(HostError::Api {
                    code: 403, message, ..
                }) if message.contains("being terminated") => ActionOutcome::NamespaceTerminating,
                other => other?,
            }
        }
        Action::DeleteService { name, uid, .. } => {
            let api: Api<Service> = Api::namespaced(kube.client.clone(), namespace);
            delete(
                kube,
                &api,
                uid,
                None,
                Op::new("delete", "services", Some(namespace), Some(name)),
            )
            .await?
        }
        Action::RetirePod {
            name,
            why,
            resource_version,
        } => {
            mark_retiring(
                kube,
                namespace,
                name,
                resource_version.as_deref(),
                Some(why),
            )
            .await?
        }
        Action::WithdrawRetiring {
            name,
            resource_version,
            ..
        } => mark_retiring(kube, namespace, name, resource_version.as_deref(), None).await?,
        Action::TakeOutOfRotation {
            name,
            why,
            resource_version,
        } => take_out_of_rotation(kube, namespace, name, why, resource_version.as_deref()).await?,
        Action::ScaleReplicaSet {
            name,
            replicas,
            surged_from,
            retired,
            undone,
            resource_version,
            ..
        } => {
            let api: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), namespace);
            // null removes a record (JSON merge patch, RFC 7386).
            let patch = serde_json::json!({
                "metadata": {
                    "resourceVersion": resource_version,
                    "annotations": {
                        surge::SURGED_FROM_ANNOTATION: surged_from.map(|n| n.to_string()),
                        surge::SURGED_TO_ANNOTATION: surged_from.map(|_| replicas.to_string()),
                        surge::RETIRED_ANNOTATION: (!retired.is_empty()).then(|| retired.join(",")),
                        surge::SURGE_UNDONE_ANNOTATION: (*undone > 0).then(|| undone.to_string()),
                    },
                },
                "spec": {"replicas": replicas},
            });
            merge_patch(
                kube,
                &api,
                &patch,
                Op::new("patch", "replicasets", Some(namespace), Some(name)),
            )
            .await?
        }
    })
}

/// Whether the Service `wanted` describes exists, made by another host, within a moment
/// (5 reads, 100 ms apart, within the deadline).
async fn twin_appears(
    kube: &Kube,
    api: &Api<Service>,
    namespace: &str,
    wanted: &Service,
) -> Result<bool, HostError> {
    let name = name_of(&wanted.metadata);
    for attempt in 0..5 {
        let get = Op::new("get", "services", Some(namespace), Some(name));
        if let Some(found) = crate::observe::get_opt(kube, api, get).await? {
            return Ok(same_service(&found, wanted));
        }
        let pause = std::time::Duration::from_millis(100);
        if attempt == 4 || std::time::Instant::now() + pause >= kube.deadline {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    Ok(false)
}

/// The Service `wanted` describes, as another host created it: same selector, same NodePort.
fn same_service(found: &Service, wanted: &Service) -> bool {
    let selector = |s: &Service| s.spec.as_ref().and_then(|s| s.selector.clone());
    selector(found) == selector(wanted) && node_port(found) == node_port(wanted)
}

async fn create<K>(
    kube: &Kube,
    api: &Api<K>,
    obj: &K,
    op: Op<'_>,
) -> Result<ActionOutcome, HostError>
where
    K: Clone + Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PostParams::default();
    match kube.retry(&op, || api.create(&params, obj)).await {
        Ok(_) => Ok(ActionOutcome::Done),
        Err(e) if is_already_exists(&e) => Ok(ActionOutcome::AlreadyExisted),
        Err(e) => Err(explain(&op, e)),
    }
}

/// Sets the retiring mark and the lowest deletion cost on a pod (`why`), or removes both
/// (None: a JSON merge patch's null removes a key, RFC 7386), if the pod is still at
/// `resource_version`.
async fn mark_retiring(
    kube: &Kube,
    namespace: &str,
    name: &str,
    resource_version: Option<&str>,
    why: Option<&str>,
) -> Result<ActionOutcome, HostError> {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": resource_version,
        "annotations": {
            surge::RETIRING_ANNOTATION: why,
            surge::DELETION_COST_ANNOTATION: why.map(|_| surge::RETIRING_COST),
        },
    }});
    merge_patch(
        kube,
        &api,
        &patch,
        Op::new("patch", "pods", Some(namespace), Some(name)),
    )
    .await
}

/// The pod's Ready condition set False through its status, as the node-lifecycle controller's
/// `MarkPodsNotReady` does: a strategic merge patch, which merges the conditions by type and
/// leaves the others as they are. The version it carries makes a pod changed since the
/// decision refuse it.
async fn take_out_of_rotation(
    kube: &Kube,
    namespace: &str,
    name: &str,
    why: &str,
    resource_version: Option<&str>,
) -> Result<ActionOutcome, HostError> {
    let api: Api<Pod> = Api::namespaced(kube.client.clone(), namespace);
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"conditions": [{
            "type": "Ready",
            "status": "False",
            "reason": jumppod_plan::rotation::REASON,
            "message": format!("jumppod: {why}"),
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now(),
        }]},
    });
    let op = Op::new("patch", "pods/status", Some(namespace), Some(name));
    let params = PatchParams::default();
    let patch = Patch::Strategic(&patch);
    match kube
        .retry(&op, || api.patch_status(name, &params, &patch))
        .await
    {
        Ok(_) => Ok(ActionOutcome::Done),
        Err(e) if is_not_found(&e) => Ok(ActionOutcome::AlreadyGone),
        Err(e) if is_conflict(&e) => Ok(ActionOutcome::Stale),
        Err(e) => Err(explain(&op, e)),
    }
}

/// A JSON merge patch; a 404 (the pod or ReplicaSet gone meanwhile) is a success, a 409
/// Conflict (the resourceVersion it carries is no longer the object's) is stale.
pub(crate) async fn merge_patch<K>(
    kube: &Kube,
    api: &Api<K>,
    patch: &serde_json::Value,
    op: Op<'_>,
) -> Result<ActionOutcome, HostError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::default();
    let name = op.name.unwrap_or_default();
    let patch = Patch::Merge(patch);
    match kube.retry(&op, || api.patch(name, &params, &patch)).await {
        Ok(_) => Ok(ActionOutcome::Done),
        Err(e) if is_not_found(&e) => Ok(ActionOutcome::AlreadyGone),
        Err(e) if is_conflict(&e) => Ok(ActionOutcome::Stale),
        Err(e) => Err(explain(&op, e)),
    }
}

/// Deletes `op`'s object if it still has `uid`; `grace`: the grace period (0: at once), else
/// the object's own.
async fn delete<K>(
    kube: &Kube,
    api: &Api<K>,
    uid: &str,
    grace: Option<u32>,
    op: Op<'_>,
) -> Result<ActionOutcome, HostError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        grace_period_seconds: grace,
        ..DeleteParams::default()
    };
    let name = op.name.unwrap_or_default();
    match kube.retry(&op, || api.delete(name, &params)).await {
        Ok(_) => Ok(ActionOutcome::Done),
        Err(e) if is_not_found(&e) => Ok(ActionOutcome::AlreadyGone),
        Err(e) if is_precondition_failed(&e) => Ok(ActionOutcome::ReplacedMeanwhile),
        Err(e) => Err(explain(&op, e)),
    }
}
