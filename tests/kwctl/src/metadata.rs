//! A policy's Kubewarden metadata as `kwctl annotate` writes it and `kwctl inspect` shows it:
//! policy-evaluator's `Metadata` (camelCase JSON in the module's custom section), its defaults
//! and the checks its `validate` makes that a waPC policy's metadata can fail.

use serde_json::{Map, Value, json};

/// policy-evaluator's `KUBEWARDEN_ANNOTATION_POLICY_USAGE`: `annotate -u` puts the file here.
pub const USAGE: &str = "io.kubewarden.policy.usage";
const TITLE: &str = "io.kubewarden.policy.title";
const OPERATIONS: [&str; 5] = ["CREATE", "UPDATE", "DELETE", "CONNECT", "*"];

/// A metadata file that `kwctl annotate` refuses: the field, its value and why.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("metadata is invalid: {field} = {value}: {problem}")]
pub struct MetadataError {
    pub field: String,
    pub value: String,
    pub problem: String,
}

fn invalid(field: impl Into<String>, value: &Value, problem: &str) -> MetadataError {
    MetadataError {
        field: field.into(),
        value: value.to_string(),
        problem: problem.into(),
    }
}

/// A list of strings, not empty, `*` alone if at all (policy-evaluator's `Rule` checks).
fn strings(rule: &Value, index: usize, key: &str) -> Result<(), MetadataError> {
    let field = format!("rules[{index}].{key}");
    let value = rule.get(key).unwrap_or(&Value::Null);
    let items = value
        .as_array()
        .filter(|items| !items.is_empty())
        .ok_or_else(|| invalid(&field, value, "must be a list of at least one string"))?;
    if items.iter().any(|item| !item.is_string()) {
        return Err(invalid(&field, value, "must hold strings only"));
    }
    if items.len() > 1 && items.iter().any(|item| item == "*") {
        return Err(invalid(&field, value, "no other item may stand beside '*'"));
    }
    if key == "operations"
        && let Some(unknown) = items
            .iter()
            .find(|item| !OPERATIONS.contains(&item.as_str().unwrap_or_default()))
    {
        return Err(invalid(
            &field,
            unknown,
            "is not one of CREATE, UPDATE, DELETE, CONNECT or *",
        ));
    }
    Ok(())
}

/// The metadata of `metadata_yaml` as the annotated module carries it: policy-evaluator's
/// defaults filled in, the protocol version the module answered, and the usage text.
pub fn annotate(
    metadata_yaml: &str,
    usage: Option<&str>,
    protocol_version: Value,
) -> Result<Value, MetadataError> {
    let parsed: Value = serde_yaml::from_str(metadata_yaml).map_err(|e| MetadataError {
        field: "(the file)".into(),
        value: String::new(),
        problem: format!("is not YAML: {e}"),
    })?;
    let Value::Object(given) = parsed else {
        return Err(invalid("(the file)", &parsed, "must be a mapping"));
    };
    let rules = given.get("rules").cloned().unwrap_or(Value::Null);
    let Some(list) = rules.as_array() else {
        return Err(invalid("rules", &rules, "must be a list"));
    };
    for (index, rule) in list.iter().enumerate() {
        for key in ["apiGroups", "apiVersions", "resources", "operations"] {
            strings(rule, index, key)?;
        }
    }
    let mutating = given.get("mutating").cloned().unwrap_or(Value::Null);
    if !mutating.is_boolean() {
        return Err(invalid("mutating", &mutating, "must be true or false"));
    }
    let mode = given
        .get("executionMode")
        .cloned()
        .unwrap_or_else(|| json!("kubewarden-wapc"));
    if mode != "kubewarden-wapc" {
        return Err(invalid(
            "executionMode",
            &mode,
            "this runner runs waPC policies only (kubewarden-wapc)",
        ));
    }
    if !protocol_version.is_string() || protocol_version == "Unknown" {
        return Err(invalid(
            "protocolVersion",
            &protocol_version,
            "the module must answer protocol_version with a known version",
        ));
    }
    let mut annotations = match given.get("annotations") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) if map.values().all(Value::is_string) => map.clone(),
        Some(other) => {
            return Err(invalid("annotations", other, "must map names to strings"));
        }
    };
    if let Some(usage) = usage {
        annotations.insert(USAGE.into(), usage.into());
    }
    let mut metadata = given;
    metadata.insert("protocolVersion".into(), protocol_version);
    metadata.insert("annotations".into(), Value::Object(annotations));
    metadata.insert("executionMode".into(), mode);
    metadata.entry("backgroundAudit").or_insert(json!(true));
    metadata.entry("policyType").or_insert(json!("kubernetes"));
    metadata.entry("contextAwareResources").or_insert(json!([]));
    Ok(Value::Object(metadata))
}

/// `kwctl inspect` without `-o yaml`: the annotations but the usage, one per line, the rules,
/// then the usage text.
pub fn pretty(metadata: &Value) -> String {
    let annotations = metadata["annotations"].as_object();
    let annotation = |key: &str| {
        annotations
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let mut out = format!("Details\ntitle: {}\n", annotation(TITLE));
    for (key, value) in annotations.into_iter().flatten() {
        if key != TITLE && key != USAGE {
            out.push_str(&format!("{key}: {}\n", value.as_str().unwrap_or_default()));
        }
    }
    for key in [
        "mutating",
        "backgroundAudit",
        "executionMode",
        "protocolVersion",
    ] {
        out.push_str(&format!("{key}: {}\n", metadata[key]));
    }
    out.push_str("\nRules\n");
    out.push_str(&serde_yaml::to_string(&metadata["rules"]).unwrap_or_default());
    let usage = annotation(USAGE);
    if !usage.is_empty() {
        out.push_str("\nUsage\n");
        out.push_str(usage);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: &str = "rules:\n- apiGroups: ['']\n  apiVersions: [v1]\n  resources: [pods]\n  operations: [CREATE]\n";

    #[test]
    fn the_defaults_the_protocol_version_and_the_usage_are_filled_in() {
        let metadata = annotate(
            &format!("{RULE}mutating: true\n"),
            Some("# usage"),
            json!("v1"),
        )
        .unwrap();
        assert_eq!(metadata["protocolVersion"], "v1");
        assert_eq!(metadata["executionMode"], "kubewarden-wapc");
        assert_eq!(metadata["backgroundAudit"], true);
        assert_eq!(metadata["annotations"][USAGE], "# usage");
    }

    #[test]
    fn an_unknown_operation_is_refused_naming_the_rule() {
        let error = annotate(
            &format!("{}mutating: true\n", RULE.replace("CREATE", "PATCH")),
            None,
            json!("v1"),
        )
        .unwrap_err();
        assert_eq!(error.field, "rules[0].operations");
        assert_eq!(error.value, "\"PATCH\"");
    }

    #[test]
    fn a_missing_mutating_flag_is_refused() {
        let error = annotate(RULE, None, json!("v1")).unwrap_err();
        assert_eq!(error.field, "mutating");
    }

    #[test]
    fn a_wildcard_beside_another_resource_is_refused() {
        let error = annotate(
            &format!("{}mutating: false\n", RULE.replace("[pods]", "[pods, '*']")),
            None,
            json!("v1"),
        )
        .unwrap_err();
        assert_eq!(error.field, "rules[0].resources");
    }

    #[test]
    fn a_module_without_a_known_protocol_version_is_refused() {
        let error =
            annotate(&format!("{RULE}mutating: true\n"), None, json!("Unknown")).unwrap_err();
        assert_eq!(error.field, "protocolVersion");
    }
}
