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
        // Delete the least useful first, ranked as the real controller ranks them.
        let mut on_node: std::collections::HashMap<String, usize> = Default::default();
        for p in &active {
            *on_node.entry(node_of(p).to_owned()).or_default() += 1;
        }
        let now = chrono::Utc::now();
        active.sort_by(|a, b| {
            let rank = |p: &Value| on_node.get(node_of(p)).copied().unwrap_or(0);
            deletes_first(a, b, rank(a), rank(b), now)
        });
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

fn node_of(p: &Value) -> &str {
    p.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn time_at(v: Option<&Value>) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(v?.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// Which of two active pods of a ReplicaSet is deleted first, as `ActivePodsWithRanks.Less`
/// (pkg/controller/controller_utils.go, 1.36, LogarithmicScaleDown and PodDeletionCost on)
/// decides: unassigned; Pending < Unknown < Running; not ready; lower
/// `controller.kubernetes.io/pod-deletion-cost`; more of the ReplicaSet's active pods on its
/// node (`rank`); ready more recently and then created more recently, both compared by the
/// base-2 logarithm of the nanoseconds since then, ties broken by uid; more container restarts.
fn deletes_first(
    a: &Value,
    b: &Value,
    rank_a: usize,
    rank_b: usize,
    now: chrono::DateTime<chrono::Utc>,
) -> std::cmp::Ordering {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let first = |a_first: bool| if a_first { Less } else { Greater };
    let (na, nb) = (node_of(a), node_of(b));
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return first(na.is_empty());
    }
    let ordinal = |p: &Value| match phase(p) {
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    };
    if ordinal(a) != ordinal(b) {
        return first(ordinal(a) < ordinal(b));
    }
    let (ra, rb) = (condition_true(a, "Ready"), condition_true(b, "Ready"));
    if ra != rb {
        return first(!ra);
    }
    let cost = |p: &Value| {
        p.pointer("/metadata/annotations/controller.kubernetes.io~1pod-deletion-cost")
            .and_then(Value::as_str)
            .and_then(|c| c.parse::<i32>().ok())
            .unwrap_or(0)
    };
    if cost(a) != cost(b) {
        return first(cost(a) < cost(b));
    }
    if rank_a != rank_b {
        return first(rank_a > rank_b);
    }
    // `afterOrZero`, then the logarithmic buckets of LogarithmicScaleDown.
    let by_time = |ta: Option<chrono::DateTime<chrono::Utc>>,
                   tb: Option<chrono::DateTime<chrono::Utc>>|
     -> Option<std::cmp::Ordering> {
        if ta == tb {
            return None;
        }
        let (Some(ta), Some(tb)) = (ta, tb) else {
            return Some(first(ta.is_none()));
        };
        let bucket = |t: chrono::DateTime<chrono::Utc>| {
            let d = (now - t).num_nanoseconds().unwrap_or(i64::MAX);
            if d > 0 { (d as f64).log2() as i64 } else { -1 }
        };
        Some(match bucket(ta).cmp(&bucket(tb)) {
            Equal => first(meta_str(a, "uid") < meta_str(b, "uid")),
            o => o,
        })
    };
    if ra && rb {
        let ready_at = |p: &Value| {
            time_at(
                p.pointer("/status/conditions")
                    .and_then(Value::as_array)?
                    .iter()
                    .find(|c| c["type"] == "Ready" && c["status"] == "True")?
                    .get("lastTransitionTime"),
            )
        };
        if let Some(o) = by_time(ready_at(a), ready_at(b)) {
            return o;
        }
    }
    let restarts = |p: &Value| {
        p.pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
            .max()
            .unwrap_or(0)
    };
    if restarts(a) != restarts(b) {
        return first(restarts(a) > restarts(b));
    }
    by_time(
        time_at(a.pointer("/metadata/creationTimestamp")),
        time_at(b.pointer("/metadata/creationTimestamp")),
    )
    .unwrap_or(Equal)
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
