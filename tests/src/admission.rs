//! The jumppod policy as the simulated cluster's admission webhook, the way a cluster with
//! Kubewarden runs it: pods and ReplicaSets are judged on CREATE and UPDATE, and a mutation
//! reaches the object as the JSONPatch policy-server computes.

use jumppod_review::{Policy, admission_response, decode_patch};
use jumppod_sim::{Admission, AdmissionVerdict};
use serde_json::{Value, json};
use std::sync::Arc;

pub struct PolicyAdmission {
    pub policy: Arc<dyn Policy>,
    pub settings: Value,
}

impl PolicyAdmission {
    pub fn new(policy: Arc<dyn Policy>) -> PolicyAdmission {
        PolicyAdmission {
            policy,
            settings: json!({}),
        }
    }
}

impl Admission for PolicyAdmission {
    fn name(&self) -> &str {
        "jumppod.kubewarden.admission"
    }

    fn review(&self, request: &Value) -> AdmissionVerdict {
        let failed = |message: String| AdmissionVerdict {
            allowed: false,
            message: Some(message),
            code: Some(500),
            ..AdmissionVerdict::default()
        };
        let response = match self.policy.validate(request, &self.settings) {
            Ok(response) => response,
            Err(e) => return failed(format!("the policy failed: {e}")),
        };
        let patch = match decode_patch(&admission_response(request, &response)) {
            Ok(patch) => patch.and_then(|p| serde_json::to_value(p).ok()),
            Err(e) => return failed(format!("the policy's patch is unusable: {e}")),
        };
        AdmissionVerdict {
            allowed: response.accepted,
            message: response.message,
            code: response.code,
            warnings: response.warnings.unwrap_or_default(),
            patch,
        }
    }
}
