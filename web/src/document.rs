//! Reading what a person pastes: JSON or YAML text, one object. And turning a bare manifest
//! into the AdmissionRequest the API server would send for it.

use serde_json::{Map, Value, json};

/// Input the policy never gets to see: it is not one JSON or YAML object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// What was being read: `the manifest`, `the settings`, `the old object`...
    pub what: String,
    pub problem: String,
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.what, self.problem)
    }
}

impl std::error::Error for InputError {}

fn error(what: &str, problem: String) -> InputError {
    InputError {
        what: what.to_owned(),
        problem,
    }
}

/// Parses JSON, else YAML (YAML's flow style looks like JSON: `{kind: Pod}`).
pub fn parse(what: &str, text: &str) -> Result<Value, InputError> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        return Err(error(what, "is empty".to_owned()));
    }
    let json_error = match serde_json::from_str::<Value>(text) {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    serde_yaml::from_str::<Value>(text).map_err(|yaml_error| {
        // Text that starts like JSON is best told what JSON found wrong.
        if trimmed.starts_with(['{', '[']) {
            error(what, format!("is not valid JSON: {json_error}"))
        } else {
            error(what, format!("is not valid YAML: {yaml_error}"))
        }
    })
}

/// Parses and insists on one object (a Kubernetes object, a review, the settings).
pub fn parse_object(what: &str, text: &str, expected: &str) -> Result<Value, InputError> {
    let value = parse(what, text)?;
    object(what, value, expected)
}

pub fn object(what: &str, value: Value, expected: &str) -> Result<Value, InputError> {
    let found = match &value {
        Value::Object(_) => return Ok(value),
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::String(_) => "a string".to_owned(),
        Value::Number(_) => "a number".to_owned(),
        Value::Bool(_) => "a boolean".to_owned(),
        Value::Null => "empty (null)".to_owned(),
    };
    Err(error(what, format!("must be {expected}, not {found}")))
}

/// The AdmissionRequest inside a document: a whole AdmissionReview or a bare request (what
/// `kwctl run --request-path` accepts).
pub fn admission_request(document: &Value) -> Result<&Value, InputError> {
    jumppod_review::request_of(document).map_err(|_| {
        error(
            "the admission review",
            "has a `request` that is not an object".to_owned(),
        )
    })
}

/// How a manifest is submitted: created, or updated from an old object.
#[derive(Clone, Debug, Default)]
pub struct Submission {
    pub update_of: Option<Value>,
}

/// The AdmissionRequest the API server sends a webhook when `manifest` is submitted: kind and
/// resource from `apiVersion` and `kind`, name and namespace from the metadata, quantities
/// in their canonical string form.
pub fn admission_request_for(
    manifest: &Value,
    submission: &Submission,
) -> Result<Value, InputError> {
    let what = "the manifest";
    let text = |key: &str| {
        manifest
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let kind = text("kind");
    if kind.is_empty() {
        return Err(error(
            what,
            "has no `kind`: expected `kind: Pod` or `kind: ReplicaSet` (or paste a whole AdmissionReview)"
                .to_owned(),
        ));
    }
    let api_version = text("apiVersion");
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None if api_version.is_empty() => match kind {
            "ReplicaSet" => ("apps", "v1"),
            _ => ("", "v1"),
        },
        None => ("", api_version),
    };
    let resource = format!("{}s", kind.to_ascii_lowercase());
    let metadata = manifest.get("metadata");
    let meta = |key: &str| {
        metadata
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (operation, old) = match &submission.update_of {
        Some(old) => ("UPDATE", Some(canonical_quantities(old.clone()))),
        None => ("CREATE", None),
    };
    let namespace = if meta("namespace").is_empty() {
        "default"
    } else {
        meta("namespace")
    };
    let mut request = json!({
        "uid": "00000000-0000-0000-0000-000000000000",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": meta("name"),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "jumppod-playground"},
        "object": canonical_quantities(manifest.clone()),
        "dryRun": true,
    });
    if let Some(old) = old {
        request["oldObject"] = old;
    }
    Ok(request)
}

/// The API server reads a quantity written as a YAML or JSON number (`cpu: 1`) and sends it
/// to webhooks as a string (`"1"`); the policy reads quantities as strings.
pub fn canonical_quantities(mut object: Value) -> Value {
    let spec = if object.get("kind").and_then(Value::as_str) == Some("ReplicaSet") {
        object.pointer_mut("/spec/template/spec")
    } else {
        object.get_mut("spec")
    };
    let Some(spec) = spec else {
        return object;
    };
    for list in ["containers", "initContainers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            for side in ["requests", "limits"] {
                let Some(map) = container
                    .pointer_mut(&format!("/resources/{side}"))
                    .and_then(Value::as_object_mut)
                else {
                    continue;
                };
                stringify_numbers(map);
            }
        }
    }
    object
}

fn stringify_numbers(map: &mut Map<String, Value>) {
    for value in map.values_mut() {
        if let Value::Number(number) = value {
            *value = Value::String(number.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::json("{\"kind\": \"Pod\"}")]
    #[case::yaml("kind: Pod\n")]
    #[case::yaml_flow_style("{kind: Pod}")]
    fn json_and_yaml_read_the_same(#[case] text: &str) {
        assert_eq!(
            parse_object("the manifest", text, "an object").unwrap(),
            json!({"kind": "Pod"})
        );
    }

    #[rstest]
    #[case::invalid_yaml("kind: Pod\n  spec: [", "is not valid YAML")]
    #[case::invalid_json("{\"kind\": ", "is not valid JSON")]
    #[case::an_array("[1, 2]", "must be an object, not an array of 2 items")]
    #[case::a_string("just words", "must be an object, not a string")]
    #[case::nothing("  \n", "is empty")]
    fn what_is_not_one_object_is_refused_with_a_readable_message(
        #[case] text: &str,
        #[case] expected: &str,
    ) {
        let e = parse_object("the manifest", text, "an object").unwrap_err();
        assert!(e.to_string().starts_with("the manifest "), "{e}");
        assert!(e.to_string().contains(expected), "{e}");
    }

    #[test]
    fn a_quantity_written_as_a_number_reaches_the_policy_as_a_string() {
        let pod = json!({"kind": "Pod", "spec": {"containers": [
            {"name": "c", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}, "requests": {"cpu": 0.5}}}]}});
        let canonical = canonical_quantities(pod);
        assert_eq!(
            canonical["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "0.5"}})
        );
    }

    #[test]
    fn a_replica_set_manifest_becomes_an_apps_v1_request() {
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "metadata": {"name": "r", "namespace": "dstack"}});
        let request = admission_request_for(&rs, &Submission::default()).unwrap();
        assert_eq!(
            request["kind"],
            json!({"group": "apps", "version": "v1", "kind": "ReplicaSet"})
        );
        assert_eq!(request["resource"]["resource"], "replicasets");
        assert_eq!(request["operation"], "CREATE");
        assert_eq!(request["namespace"], "dstack");
    }

    #[test]
    fn an_update_carries_the_old_object() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let request = admission_request_for(
            &pod,
            &Submission {
                update_of: Some(pod.clone()),
            },
        )
        .unwrap();
        assert_eq!(request["operation"], "UPDATE");
        assert_eq!(request["oldObject"], pod);
    }

    #[test]
    fn a_manifest_without_kind_is_refused() {
        let e =
            admission_request_for(&json!({"metadata": {}}), &Submission::default()).unwrap_err();
        assert!(e.to_string().contains("has no `kind`"), "{e}");
    }
}
