//! Reading and setting a pod's state as the controllers see it: phase, activity, conditions,
//! controller ownership.

use crate::meta::meta_str;
use serde_json::{Value, json};

pub(super) fn phase(p: &Value) -> &str {
    p.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(super) fn is_active(p: &Value) -> bool {
    !matches!(phase(p), "Failed" | "Succeeded") && meta_str(p, "deletionTimestamp").is_empty()
}

pub(super) fn condition_true(p: &Value, ty: &str) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == ty && c["status"] == "True"))
}

pub(super) fn controller_uid(p: &Value) -> Option<&str> {
    p.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

/// Sets a pod condition, keeping `lastTransitionTime` when the status does not change.
/// A no-op when the condition already reads the same.
pub(super) fn set_condition(
    pod: &mut Value,
    ty: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
    now: &str,
) {
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let conds = pod["status"]
        .as_object_mut()
        .unwrap()
        .entry("conditions")
        .or_insert_with(|| json!([]));
    let Some(conds) = conds.as_array_mut() else {
        return;
    };
    let mut c =
        json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    match conds.iter_mut().find(|x| x["type"] == ty) {
        Some(old) => {
            if old["status"] == status
                && old.get("reason") == c.get("reason")
                && old.get("message") == c.get("message")
            {
                return;
            }
            if old["status"] == status {
                c["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
            *old = c;
        }
        None => conds.push(c),
    }
}
