//! The ReplicaSet controller (kube-controller-manager's rules): adopts and releases pods,
//! creates and deletes them to reach `spec.replicas`, and writes the status.

use super::pod_state::{condition_true, controller_uid, is_active, phase};
use super::pods_def;
use crate::meta::{meta_str, now_rfc3339};
use crate::request::Ctx;
use crate::resources;
use crate::selector::LabelSelector;
use crate::store::{DeleteOpts, State};
use serde_json::{Value, json};

const RS_CONTROLLER: &str = "system:serviceaccount:kube-system:replicaset-controller";

pub(super) fn replicasets(st: &mut State) {
    for ns in std::mem::take(&mut st.dirty_ns) {
        let rss: Vec<Value> = st.iter("replicasets", Some(&ns)).cloned().collect();
        for rs in rss {
            replicaset(st, &rs);
        }
    }
}

fn replicaset(st: &mut State, rs: &Value) {
    let ns = meta_str(rs, "namespace").to_string();
    let rs_name = meta_str(rs, "name").to_string();
    let uid = meta_str(rs, "uid").to_string();
    let Some(sel) = rs
        .pointer("/spec/selector")
        .and_then(LabelSelector::from_object)
    else {
        return;
    };
    if sel.is_empty() || !meta_str(rs, "deletionTimestamp").is_empty() {
        return;
    }
    let want = rs
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0) as usize;
    let pods = pods_def();
    let mut owned: Vec<Value> = Vec::new();
    let mut adopt = Vec::new();
    let mut release = Vec::new();
    for p in st.iter("pods", Some(&ns)) {
        let labels = p.pointer("/metadata/labels").and_then(Value::as_object);
        match controller_uid(p) {
            Some(u) if u == uid => {
                if sel.matches(labels) {
                    owned.push(p.clone());
                } else {
                    release.push(p.clone());
                }
            }
            Some(_) => {}
            None => {
                if is_active(p) && sel.matches(labels) {
                    adopt.push(p.clone());
                }
            }
        }
    }
    for mut p in release {
        if let Some(refs) = p
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(&uid));
        }
        st.put_raw(pods, p);
    }
    let owner_ref = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true});
    for mut p in adopt {
        let meta = p["metadata"].as_object_mut().unwrap();
        let refs = meta.entry("ownerReferences").or_insert_with(|| json!([]));
        if let Some(a) = refs.as_array_mut() {
            a.push(owner_ref.clone());
        }
        owned.push(st.put_raw(pods, p));
    }
    let mut active: Vec<Value> = owned.iter().filter(|p| is_active(p)).cloned().collect();
    // The error of this sync's creates or deletes, as `manageReplicas` returns it.
    let mut manage_err: Option<(&str, String)> = None;
    if active.len() < want {
        for _ in active.len()..want {
            let mut pod = json!({
                "metadata": rs.pointer("/spec/template/metadata").cloned().unwrap_or(json!({})),
                "spec": rs.pointer("/spec/template/spec").cloned().unwrap_or(json!({})),
            });
            let meta = pod["metadata"].as_object_mut().unwrap();
            meta.remove("name");
            meta.insert("generateName".into(), json!(format!("{rs_name}-")));
            meta.insert("ownerReferences".into(), json!([owner_ref]));
            match st.create(pods, Some(&ns), pod, &mut Ctx::user(RS_CONTROLLER)) {
                Ok(p) => active.push(p),
                Err(e) => {
                    // The controller's pod control records a Warning event and stops the batch.
                    record_event(
                        st,
                        rs,
                        "FailedCreate",
                        &format!("Error creating: {}", e.message),
                    );
                    manage_err = Some(("FailedCreate", e.message));
                    break;
                }
            }
        }
    } else if active.len() > want {
        // Delete the least useful first: unassigned, pending, not ready, newest.
        let rank = |p: &Value| {
            (
                p.pointer("/spec/nodeName").is_some(),
                match phase(p) {
                    "Pending" => 0,
                    "Unknown" => 1,
                    _ => 2,
                },
                condition_true(p, "Ready"),
                std::cmp::Reverse(meta_str(p, "creationTimestamp").to_string()),
            )
        };
        active.sort_by_key(rank);
        let surplus: Vec<Value> = active.drain(..active.len() - want).collect();
        for p in surplus {
            let deleted = st.delete(
                pods,
                Some(&ns),
                meta_str(&p, "name"),
                &DeleteOpts::default(),
                &mut Ctx::user(RS_CONTROLLER),
            );
            // A pod already gone is not an error to the controller.
            if let Err(e) = deleted
                && e.code != 404
            {
                record_event(
                    st,
                    rs,
                    "FailedDelete",
                    &format!("Error deleting: {}", e.message),
                );
                manage_err = Some(("FailedDelete", e.message));
            }
        }
    }
    // Status from what is there now.
    let tlabels = rs
        .pointer("/spec/template/metadata/labels")
        .and_then(Value::as_object);
    let tsel =
        LabelSelector::from_object(&json!({"matchLabels": tlabels.cloned().unwrap_or_default()}))
            .unwrap_or_default();
    let current: Vec<&Value> = st
        .iter("pods", Some(&ns))
        .filter(|p| controller_uid(p) == Some(uid.as_str()) && is_active(p))
        .collect();
    let ready = current
        .iter()
        .filter(|p| condition_true(p, "Ready"))
        .count();
    let labeled = current
        .iter()
        .filter(|p| tsel.matches(p.pointer("/metadata/labels").and_then(Value::as_object)))
        .count();
    let mut status = json!({
        "replicas": current.len(), "fullyLabeledReplicas": labeled, "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": rs.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
    });
    let Some(mut latest) = st.get("replicasets", Some(&ns), &rs_name).cloned() else {
        return;
    };
    let conditions = replica_failure(
        latest
            .pointer("/status/conditions")
            .and_then(Value::as_array),
        manage_err,
    );
    if !conditions.is_empty() {
        status["conditions"] = Value::Array(conditions);
    }
    if latest.get("status") != Some(&status) {
        latest["status"] = status;
        st.put_raw(resources::by_name("replicasets").unwrap(), latest);
    }
}

/// The status conditions after a sync, as `calculateStatus` of the ReplicaSet controller
/// (pkg/controller/replicaset/replica_set_utils.go) leaves them: an error of this sync adds
/// `ReplicaFailure` True (reason FailedCreate or FailedDelete, the error's message) unless one
/// is already there, which then stays as it was; a sync without error removes it.
fn replica_failure(old: Option<&Vec<Value>>, err: Option<(&str, String)>) -> Vec<Value> {
    let mut conditions: Vec<Value> = old.cloned().unwrap_or_default();
    let present = conditions.iter().any(|c| c["type"] == "ReplicaFailure");
    match err {
        Some((reason, message)) if !present => conditions.push(json!({
            "type": "ReplicaFailure", "status": "True", "lastTransitionTime": now_rfc3339(),
            "reason": reason, "message": message,
        })),
        Some(_) => {}
        None => conditions.retain(|c| c["type"] != "ReplicaFailure"),
    }
    conditions
}

/// Records a Warning event on the ReplicaSet as the controller's event recorder does: a repeat
/// of the same reason and message counts up on the existing event instead of adding one.
fn record_event(st: &mut State, rs: &Value, reason: &str, message: &str) {
    let ns = meta_str(rs, "namespace").to_string();
    let uid = meta_str(rs, "uid");
    let events = resources::by_name("events").unwrap();
    let now = now_rfc3339();
    let same = st
        .iter("events", Some(&ns))
        .find(|e| {
            e.pointer("/involvedObject/uid").and_then(Value::as_str) == Some(uid)
                && e["reason"] == reason
                && e["message"] == message
        })
        .cloned();
    if let Some(mut event) = same {
        let count = event["count"].as_i64().unwrap_or(1);
        event["count"] = json!(count + 1);
        event["lastTimestamp"] = json!(now);
        st.put_raw(events, event);
        return;
    }
    let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{}.{nanos:x}", meta_str(rs, "name")), "namespace": ns},
        "involvedObject": {"kind": "ReplicaSet", "namespace": ns, "name": meta_str(rs, "name"),
            "uid": uid, "apiVersion": "apps/v1", "resourceVersion": meta_str(rs, "resourceVersion")},
        "reason": reason, "message": message, "type": "Warning",
        "source": {"component": "replicaset-controller"},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "reportingComponent": "replicaset-controller", "reportingInstance": "",
    });
    let _ = st.seed(event);
}
