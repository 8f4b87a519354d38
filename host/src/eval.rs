//! `jumppod eval`: one AdmissionRequest through the policy module, as `kwctl run` does it.

use crate::config::ConfigError;
use crate::error::HostError;
use jumppod_review::{Policy, admission_response, decode_patch, request_of};
use jumppod_wasm::WasmPolicy;
use serde_json::Value;
use std::path::Path;

/// What `eval` found: the AdmissionResponse and, when there is one, its patch decoded.
pub struct Evaluation {
    pub response: Value,
    pub patch: Option<json_patch::Patch>,
}

/// Reads the request file (JSON or YAML, a bare AdmissionRequest or an AdmissionReview),
/// checks the settings as policy-server does at start, and evaluates the request in a fresh
/// instance of the module.
pub fn eval(file: &Path, settings: &Value, module: &Path) -> Result<Evaluation, HostError> {
    let unreadable = |problem: String| ConfigError {
        field: "FILE".into(),
        value: file.display().to_string(),
        problem,
    };
    let text =
        std::fs::read_to_string(file).map_err(|e| unreadable(format!("cannot read it: {e}")))?;
    let document: Value =
        serde_yaml::from_str(&text).map_err(|e| unreadable(format!("is not JSON or YAML: {e}")))?;
    let request = request_of(&document).map_err(|e| unreadable(e.to_string()))?;
    let policy = WasmPolicy::from_file(module)?;
    let verdict = policy.validate_settings(settings)?;
    if !verdict.valid {
        return Err(ConfigError {
            field: "--settings".into(),
            value: settings.to_string(),
            problem: format!(
                "Provided settings are not valid: {}",
                verdict.message.unwrap_or_default()
            ),
        }
        .into());
    }
    let answer = policy.validate(request, settings)?;
    let response = admission_response(request, &answer);
    let patch = decode_patch(&response)?;
    Ok(Evaluation { response, patch })
}
