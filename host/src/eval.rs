//! `jumppod eval`: AdmissionRequests through the policy module, as `kwctl run` does it.

use crate::error::HostError;
use jumppod_plan::config::ConfigError;
use jumppod_review::{Policy, admission_response, decode_patch, request_of};
use jumppod_wasm::{Instances, ModuleCache, WasmPolicy};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What `eval` found: the AdmissionResponse and, when there is one, its patch decoded.
pub struct Evaluation {
    pub response: Value,
    pub patch: Option<json_patch::Patch>,
}

/// Checks the settings as policy-server does at start, then evaluates each request file (JSON
/// or YAML, a bare AdmissionRequest or an AdmissionReview) in a fresh instance of the module,
/// compiled once.
pub fn eval(
    files: &[PathBuf],
    settings: &Value,
    module: &Path,
) -> Result<Vec<Evaluation>, HostError> {
    let documents = files
        .iter()
        .map(|file| read(file))
        .collect::<Result<Vec<_>, _>>()?;
    let policy = load_checked(
        module,
        settings,
        ModuleCache::user().as_ref(),
        Instances::OnDemand,
    )?;
    documents
        .iter()
        .zip(files)
        .map(|(document, file)| {
            let request = request_of(document).map_err(|e| unreadable(file, e.to_string()))?;
            let answer = policy.validate(request, settings)?;
            let response = admission_response(request, &answer);
            let patch = decode_patch(&response)?;
            Ok(Evaluation { response, patch })
        })
        .collect()
}

/// Compiles the module (or loads it compiled from `cache`) and checks the settings with it, as
/// policy-server does at start.
pub fn load_checked(
    module: &Path,
    settings: &Value,
    cache: Option<&ModuleCache>,
    instances: Instances,
) -> Result<WasmPolicy, HostError> {
    let policy = WasmPolicy::from_file_cached(module, cache, instances)?;
    tracing::info!(module = %module.display(), origin = ?policy.origin(), "policy module loaded");
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
    Ok(policy)
}

fn unreadable(file: &Path, problem: String) -> ConfigError {
    ConfigError {
        field: "FILE".into(),
        value: file.display().to_string(),
        problem,
    }
}

fn read(file: &Path) -> Result<Value, ConfigError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| unreadable(file, format!("cannot read it: {e}")))?;
    serde_yaml::from_str(&text).map_err(|e| unreadable(file, format!("is not JSON or YAML: {e}")))
}
