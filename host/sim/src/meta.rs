//! Reading and writing `metadata` of objects kept as JSON, and timestamps in the API's format.

use serde_json::{Map, Value, json};

/// Now, as RFC 3339 with whole seconds (`metav1.Time`).
pub fn now_rfc3339() -> String {
    rfc3339(chrono::Utc::now())
}

pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A string field of `metadata`, empty when absent.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `metadata` as a map, created when missing or not an object.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().unwrap()
}
