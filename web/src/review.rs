//! The Kubewarden module's answer, computed with the functions the module runs: the payload
//! read and decided by `jumppod::payload` (through `jumppod_review::Native`), and what
//! policy-server (and `kwctl run`) make of the answer (`jumppod_review::admission_response`:
//! the mutated object as a base64 JSONPatch, no patch for an empty diff).

use jumppod_review::{Native, Policy as _, ValidationResponse, admission_response};
use serde::Serialize;
use serde_json::Value;

/// The guest's `validate` answer, field for field as the Kubewarden SDK writes it.
pub type Validation = ValidationResponse;

/// The guest's `validate_settings` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SettingsCheck {
    pub valid: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Accepted,
    Mutated,
    Rejected,
}

/// One broken rule (or one missing value), as the policy words it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub init: bool,
    /// `cpu`, `memory`, `ephemeral-storage`, or a label key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The part after the container, e.g. `cpu request 50m is below the minimum 100m`.
    pub text: String,
}

/// Everything the module says about one request, and the views of it people read.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    pub allowed: bool,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    pub warnings: Vec<String>,
    /// The rejection message (or a warning about an unchanged update), one rule a line.
    pub violations: Vec<Finding>,
    /// The JSONPatch operations; empty when nothing changes.
    pub patch: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// The object as admitted: the request's object with the patch applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patched_object: Option<Value>,
    /// The AdmissionResponse the policy-server returns (what `kwctl run` prints).
    pub response: Value,
    /// The module's own `validate` answer.
    pub validation: Validation,
}

/// The guest's `validate_settings` on a settings document.
pub fn check_settings(settings: &Value) -> SettingsCheck {
    match Native.validate_settings(settings) {
        Ok(answer) => SettingsCheck {
            valid: answer.valid,
            message: answer.message,
        },
        Err(e) => SettingsCheck {
            valid: false,
            message: Some(e.to_string()),
        },
    }
}

/// Reviews one AdmissionRequest with the given settings, as the module and the
/// policy-server would.
pub fn review(request: &Value, settings: &Value) -> Review {
    // Native never fails: the core answers every payload.
    let validation = Native.validate(request, settings).unwrap_or_default();
    let response = admission_response(request, &validation);
    let patch = match (&validation.mutated_object, request.get("object")) {
        (Some(mutated), Some(object)) => json_patch::diff(object, mutated),
        _ => json_patch::Patch(Vec::new()),
    };
    let object = request.get("object").filter(|o| !o.is_null()).cloned();
    let verdict = match (validation.accepted, patch.0.is_empty()) {
        (false, _) => Verdict::Rejected,
        (true, true) => Verdict::Accepted,
        (true, false) => Verdict::Mutated,
    };
    let patched_object = match (&object, verdict) {
        (Some(object), Verdict::Mutated) => {
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &patch.0)
                .ok()
                .map(|()| patched)
        }
        _ => None,
    };
    let warnings = validation.warnings.clone().unwrap_or_default();
    let violations = match &validation.message {
        Some(message) => findings(message),
        None => warnings.iter().flat_map(|w| findings(w)).collect(),
    };
    Review {
        allowed: validation.accepted,
        verdict,
        message: validation.message.clone(),
        code: validation.code,
        warnings,
        violations,
        patch: serde_json::to_value(&patch).unwrap_or(Value::Array(Vec::new())),
        object,
        patched_object,
        response,
        validation,
    }
}

const ITEM_STARTS: [&str; 3] = ["container \"", "init container \"", "label "];

/// Splits a message of the core (`<what> does not meet the jump-pod contract: <item>; <item>`)
/// into its items. A message with no such items (a bad request) gives none.
pub fn findings(message: &str) -> Vec<Finding> {
    let Some(start) = ITEM_STARTS
        .iter()
        .filter_map(|item| message.find(&format!(": {item}")))
        .min()
    else {
        return Vec::new();
    };
    let mut items = Vec::new();
    let mut rest = &message[start + 2..];
    loop {
        let next = ITEM_STARTS
            .iter()
            .filter_map(|item| rest.find(&format!("; {item}")))
            .min();
        match next {
            Some(end) => {
                items.push(&rest[..end]);
                rest = &rest[end + 2..];
            }
            None => {
                items.push(rest);
                break;
            }
        }
    }
    items.into_iter().map(finding).collect()
}

fn finding(item: &str) -> Finding {
    if let Some(label) = item.strip_prefix("label ") {
        return Finding {
            container: None,
            init: false,
            resource: label.split_whitespace().next().map(str::to_owned),
            text: item.to_owned(),
        };
    }
    let (init, quoted) = match item.strip_prefix("init container ") {
        Some(rest) => (true, rest),
        None => (false, item.strip_prefix("container ").unwrap_or(item)),
    };
    let Some((container, text)) = split_quoted(quoted) else {
        return Finding {
            container: None,
            init,
            resource: None,
            text: item.to_owned(),
        };
    };
    Finding {
        container: Some(container),
        init,
        resource: resource_of(text).map(str::to_owned),
        text: text.to_owned(),
    }
}

/// `"name": text` (the name as Rust's `{:?}` quotes it) into the name and the text.
fn split_quoted(quoted: &str) -> Option<(String, &str)> {
    let mut escaped = false;
    for (i, c) in quoted.char_indices().skip(1) {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => {
                let name = serde_json::from_str::<String>(&quoted[..=i])
                    .unwrap_or_else(|_| quoted[1..i].to_owned());
                let text = quoted[i + 1..].strip_prefix(": ")?;
                return Some((name, text));
            }
            _ => escaped = false,
        }
    }
    None
}

fn resource_of(text: &str) -> Option<&'static str> {
    let text = text
        .strip_prefix("resources.requests.")
        .or_else(|| text.strip_prefix("resources.limits."))
        .unwrap_or(text);
    ["ephemeral-storage", "cpu", "memory"]
        .into_iter()
        .find(|resource| text.starts_with(resource))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[test]
    fn a_rejection_is_split_into_one_finding_per_container_and_resource() {
        let message = "jump pod \"p\" does not meet the jump-pod contract: container \"sshd\": cpu request 50m is below the minimum 100m; \
                       container \"sshd\": ephemeral-storage limit 1Gi must not be set (the kubelet evicts a pod that exceeds it; set only a request); \
                       init container \"setup\": memory request 1Gi is not equal to its limit 2Gi (Guaranteed QoS needs request == limit)";
        let found = findings(message);
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0].container.as_deref(), Some("sshd"));
        assert_eq!(found[0].resource.as_deref(), Some("cpu"));
        assert_eq!(found[0].text, "cpu request 50m is below the minimum 100m");
        assert_eq!(found[1].resource.as_deref(), Some("ephemeral-storage"));
        assert!(found[1].text.ends_with("set only a request)"), "{found:?}");
        assert!(found[2].init);
        assert_eq!(found[2].container.as_deref(), Some("setup"));
        assert_eq!(found[2].resource.as_deref(), Some("memory"));
    }

    #[rstest]
    #[case::unparsable(
        "container \"c\": resources.limits.cpu \"1.1.M\" is not a valid quantity (x)",
        "cpu"
    )]
    #[case::missing_when_mutation_is_off(
        "container \"c\": resources.requests.ephemeral-storage is missing (would be set to 64Mi)",
        "ephemeral-storage"
    )]
    fn the_resource_is_found_in_field_paths_too(#[case] item: &str, #[case] resource: &str) {
        let found = findings(&format!("jump pod \"p\" is off: {item}"));
        assert_eq!(found[0].resource.as_deref(), Some(resource), "{found:?}");
    }

    #[test]
    fn a_bad_request_has_no_findings() {
        assert!(findings("cannot read jump pod \"p\": spec.containers: invalid type").is_empty());
    }

    #[test]
    fn a_container_name_with_quotes_and_semicolons_is_read_whole() {
        let found =
            findings(r#"x: container "a\"; b": cpu has no request and no limit (needs both)"#);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].container.as_deref(), Some("a\"; b"));
    }

    #[test]
    fn a_mutated_review_carries_the_patch_and_the_patched_object() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "dstack-main-ssh-jump-pod",
                         "labels": {"app.kubernetes.io/name": "dstack-main-ssh-jump-pod"}},
            "spec": {"containers": [{"name": "sshd"}]}});
        let request = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                             "operation": "CREATE", "object": pod});
        let review = review(&request, &json!({}));
        assert_eq!(review.verdict, Verdict::Mutated);
        assert_eq!(review.response["patchType"], "JSONPatch");
        let patched = review.patched_object.unwrap();
        assert_eq!(
            patched["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "500m"
        );
        assert_eq!(Some(&patched), review.validation.mutated_object.as_ref());
    }

    #[test]
    fn invalid_settings_are_named_by_key() {
        let check = check_settings(&json!({"cpu": {"minimum": "50m"}}));
        assert!(!check.valid);
        assert!(
            check.message.unwrap().contains("`cpu.minimum`"),
            "names the key"
        );
    }
}
