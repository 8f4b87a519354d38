//! The Kubewarden module's answer, computed with the functions the module runs, in the shape
//! the JavaScript API returns: the typed verdict from `jumppod_review::Native` (violations
//! as data, not parsed back from the message), the module's `validate` answer rendered from
//! it, and what policy-server (and `kwctl run`) make of that answer
//! (`jumppod_review::admission_response`, with the JSONPatch of `jumppod_review::patch_of`).

use jumppod::mutate::Fill;
use jumppod::rules::Violation;
use jumppod::verdict::{Rejection, Verdict, Warning};
use jumppod_review::{
    Native, Policy as _, SettingsResponse, ValidationResponse, admission_response, patch_of,
};
use serde::Serialize;
use serde_json::Value;

/// What the JavaScript API calls the verdict: accepted, mutated or rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictKind {
    Accepted,
    Mutated,
    Rejected,
}

/// One broken rule (or one value missing when mutation is off), as the JavaScript API lists
/// it (the TypeScript type `Finding`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleBroken {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub init: bool,
    /// `cpu`, `memory`, `ephemeral-storage`, or a label key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The part after the container, e.g. `cpu request 50m is below the minimum 100m`.
    pub text: String,
}

impl From<&Violation> for RuleBroken {
    fn from(violation: &Violation) -> RuleBroken {
        RuleBroken {
            container: Some(violation.container.clone()),
            init: violation.init,
            resource: Some(violation.problem.resource().key().to_owned()),
            text: violation.problem.to_string(),
        }
    }
}

impl From<&Fill> for RuleBroken {
    fn from(fill: &Fill) -> RuleBroken {
        match fill {
            Fill::Resource {
                init,
                container,
                resource,
                ..
            } => RuleBroken {
                container: Some(container.clone()),
                init: *init,
                resource: Some(resource.key().to_owned()),
                text: fill.missing(),
            },
            Fill::Label { key, .. } => RuleBroken {
                container: None,
                init: false,
                resource: Some((*key).to_owned()),
                text: fill.missing(),
            },
        }
    }
}

/// The rules a verdict names: a rejection's, else those an accepted update still breaks.
fn broken_rules(verdict: &Verdict) -> Vec<RuleBroken> {
    let unchanged = |warnings: &[Warning]| -> Vec<RuleBroken> {
        warnings
            .iter()
            .flat_map(|w| match w {
                Warning::Unchanged { violations, .. } => violations.as_slice(),
                Warning::LabelNotSet(_) => &[],
            })
            .map(RuleBroken::from)
            .collect()
    };
    match verdict {
        Verdict::Reject(Rejection::Broken { violations, .. }) => {
            violations.iter().map(RuleBroken::from).collect()
        }
        Verdict::Reject(Rejection::Missing { fills, .. }) => {
            fills.iter().map(RuleBroken::from).collect()
        }
        Verdict::Reject(Rejection::Unreadable { .. }) => Vec::new(),
        Verdict::Accept { warnings } | Verdict::Mutate { warnings, .. } => unchanged(warnings),
    }
}

/// Everything the module says about one request, and the views of it people read.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    pub allowed: bool,
    pub verdict: VerdictKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    pub warnings: Vec<String>,
    /// The rejection (or the warning about an unchanged update), one rule each.
    pub violations: Vec<RuleBroken>,
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
    pub validation: ValidationResponse,
}

/// The guest's `validate_settings` on a settings document.
pub fn check_settings(settings: &Value) -> SettingsResponse {
    Native
        .validate_settings(settings)
        .unwrap_or_else(|e| SettingsResponse {
            valid: false,
            message: Some(e.to_string()),
        })
}

/// Reviews one AdmissionRequest with the given settings, as the module and the
/// policy-server would.
pub fn review_request(request: &Value, settings: &Value) -> Review {
    let verdict = Native.verdict(request, settings);
    let validation = ValidationResponse::from(&verdict);
    let response = admission_response(request, &validation);
    let patch = patch_of(request, &validation);
    let object = request.get("object").filter(|o| !o.is_null()).cloned();
    let kind = match (validation.accepted, patch.0.is_empty()) {
        (false, _) => VerdictKind::Rejected,
        (true, true) => VerdictKind::Accepted,
        (true, false) => VerdictKind::Mutated,
    };
    let patched_object = match (&object, kind) {
        (Some(object), VerdictKind::Mutated) => {
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &patch.0)
                .ok()
                .map(|()| patched)
        }
        _ => None,
    };
    Review {
        allowed: validation.accepted,
        verdict: kind,
        message: validation.message.clone(),
        code: validation.code,
        warnings: validation.warnings.clone().unwrap_or_default(),
        violations: broken_rules(&verdict),
        patch: serde_json::to_value(&patch).unwrap_or(Value::Array(Vec::new())),
        object,
        patched_object,
        response,
        validation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_request(name: &str, containers: Value) -> Value {
        json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "operation": "CREATE",
               "object": {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": name,
                                       "labels": {"app.kubernetes.io/name": "dstack-ssh-proxy"}},
                          "spec": {"containers": containers}}})
    }

    #[test]
    fn a_rejection_lists_one_rule_per_container_and_resource_from_the_verdict() {
        let request = pod_request(
            "dstack-main-ssh-jump-pod-x",
            json!([{"name": "a\"; b", "resources": {
                "requests": {"cpu": "50m", "memory": "1Gi", "ephemeral-storage": "64Mi"},
                "limits": {"cpu": "50m", "memory": "1Gi", "ephemeral-storage": "1Gi"}}}]),
        );
        let review = review_request(&request, &json!({}));
        assert_eq!(review.verdict, VerdictKind::Rejected);
        let found: Vec<_> = review
            .violations
            .iter()
            .map(|v| {
                (
                    v.container.as_deref(),
                    v.resource.as_deref(),
                    v.text.as_str(),
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                (
                    Some("a\"; b"),
                    Some("cpu"),
                    "cpu request 50m is below the minimum 100m"
                ),
                (
                    Some("a\"; b"),
                    Some("ephemeral-storage"),
                    "ephemeral-storage limit 1Gi must not be set (the kubelet evicts a pod that exceeds it; set only a request)"
                ),
            ]
        );
        // The message is the same rules, rendered.
        let message = review.message.unwrap();
        for v in &review.violations {
            assert!(message.contains(&v.text), "{message}");
        }
    }

    #[test]
    fn with_mutation_off_the_missing_values_are_listed_with_their_resource_or_label() {
        let mut request = pod_request("dstack-main-ssh-jump-pod", json!([{"name": "sshd"}]));
        request["object"]["metadata"]["labels"] =
            json!({"app.kubernetes.io/name": "dstack-main-ssh-jump-pod"});
        let review = review_request(&request, &json!({"mutate": false}));
        assert_eq!(review.verdict, VerdictKind::Rejected);
        let label = review
            .violations
            .iter()
            .find(|v| v.container.is_none())
            .expect("a label");
        assert!(label.text.starts_with("label "), "{label:?}");
        let cpu = review
            .violations
            .iter()
            .find(|v| v.resource.as_deref() == Some("cpu"))
            .expect("the cpu request");
        assert_eq!(cpu.container.as_deref(), Some("sshd"));
        assert_eq!(
            cpu.text,
            "resources.requests.cpu is missing (would be set to 500m)"
        );
    }

    #[test]
    fn a_bad_request_lists_no_rules() {
        let request = pod_request("dstack-main-ssh-jump-pod-x", json!("sshd"));
        let review = review_request(&request, &json!({}));
        assert_eq!(review.code, Some(400));
        assert!(review.violations.is_empty(), "{:?}", review.violations);
    }

    #[test]
    fn a_mutated_review_carries_the_patch_and_the_patched_object() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "dstack-main-ssh-jump-pod",
                         "labels": {"app.kubernetes.io/name": "dstack-main-ssh-jump-pod"}},
            "spec": {"containers": [{"name": "sshd"}]}});
        let request = json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                             "operation": "CREATE", "object": pod});
        let review = review_request(&request, &json!({}));
        assert_eq!(review.verdict, VerdictKind::Mutated);
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
