use crate::{Error, Policy, SettingsResponse, ValidationResponse};
use jumppod::Verdict;
use jumppod::settings::Settings;
use serde_json::Value;

/// The policy's own code, compiled natively: the functions the Wasm guest calls
/// (`jumppod::payload::decide` and the settings' contract), given the payload policy-server
/// would send. No Wasm runtime, so judging costs microseconds and no compilation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Native;

impl Native {
    /// The typed verdict on one AdmissionRequest, before `validate` renders it: what a
    /// rejection found (container, resource, rule, values) as data.
    pub fn verdict(&self, request: &Value, settings: &Value) -> Verdict {
        jumppod::payload::decide(&crate::payload(request, settings)).0
    }
}

impl Policy for Native {
    fn validate_payload(&self, payload: &[u8]) -> Result<ValidationResponse, Error> {
        Ok(ValidationResponse::from(
            &jumppod::payload::decide(payload).0,
        ))
    }

    fn validate_settings(&self, settings: &Value) -> Result<SettingsResponse, Error> {
        let verdict =
            Settings::from_json(settings.to_string().as_bytes()).and_then(|s| s.contract());
        Ok(SettingsResponse {
            valid: verdict.is_ok(),
            message: verdict.err().map(|e| e.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_request(labels: Value, resources: Value) -> Value {
        json!({
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "name": "dstack-main-ssh-jump-pod-x1",
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "dstack-main-ssh-jump-pod-x1", "labels": labels},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}
            }
        })
    }

    #[test]
    fn an_ordinary_pod_is_accepted_untouched() {
        let answer = Native
            .validate(&pod_request(json!({"app": "web"}), json!({})), &json!({}))
            .unwrap();
        assert!(answer.accepted);
        assert_eq!(answer.mutated_object, None);
    }

    #[test]
    fn an_undersized_jump_pod_is_rejected_with_the_policys_message() {
        let tiny = json!({"requests": {"cpu": "10m", "memory": "1Gi", "ephemeral-storage": "64Mi"},
                          "limits": {"cpu": "10m", "memory": "1Gi"}});
        let answer = Native
            .validate(
                &pod_request(json!({"app.kubernetes.io/name": "dstack-ssh-proxy"}), tiny),
                &json!({}),
            )
            .unwrap();
        assert!(!answer.accepted);
        let message = answer.message.unwrap();
        assert!(
            message.contains("cpu") && message.contains("10m"),
            "{message}"
        );
    }

    #[test]
    fn settings_are_checked_by_the_policys_rules() {
        let answer = Native
            .validate_settings(&json!({"cpu": {"minimum": "50m"}}))
            .unwrap();
        assert!(!answer.valid);
        assert_eq!(
            answer.message.as_deref(),
            Some(
                "invalid setting `cpu.minimum`: 50m is below the floor 100m: settings may raise the contract's floors, never lower them"
            )
        );
    }
}
