//! The admission gate: `ensure` judges the ReplicaSet it is about to create by the contract the
//! cluster's policy enforces, before writing anything. By default with the policy's own code
//! compiled natively (microseconds, nothing to compile); with `--policy FILE`, with that module
//! run the way policy-server runs it (the exact bytes the cluster loaded).

use crate::error::HostError;
use jumppod_review::{Native, Policy};
use k8s_openapi::api::apps::v1::ReplicaSet;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Where the gate's policy comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// The policy's code, linked into `jumppod`.
    Native,
    /// A policy module file, compiled on first use.
    #[cfg(feature = "wasm")]
    Module(PathBuf),
}

pub struct Gate {
    source: Source,
    loaded: Mutex<Option<Arc<dyn Policy>>>,
}

impl Gate {
    /// The native policy: what `ensure` uses unless told otherwise.
    pub fn native() -> Gate {
        Gate::from_source(Source::Native)
    }

    pub fn from_source(source: Source) -> Gate {
        Gate {
            source,
            loaded: Mutex::new(None),
        }
    }

    /// A gate with an already loaded policy (tests, benchmarks).
    pub fn with_policy(policy: Arc<dyn Policy>) -> Gate {
        Gate {
            source: Source::Native,
            loaded: Mutex::new(Some(policy)),
        }
    }

    /// `--policy FILE`, else the native policy.
    pub fn for_flag(path: Option<PathBuf>) -> Result<Gate, HostError> {
        match path {
            None => Ok(Gate::native()),
            #[cfg(feature = "wasm")]
            Some(path) => Ok(Gate::from_source(Source::Module(path))),
            #[cfg(not(feature = "wasm"))]
            Some(path) => Err(jumppod_plan::config::ConfigError {
                field: "--policy".into(),
                value: path.display().to_string(),
                problem: "this jumppod was built without the Wasm runtime (feature `wasm`): it judges with the native policy only".into(),
            }
            .into()),
        }
    }

    /// The policy, loaded (for a module: compiled) on first use only: a steady-state `ensure`
    /// writes nothing and needs no check.
    pub fn policy(&self) -> Result<Arc<dyn Policy>, HostError> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(policy) = loaded.as_ref() {
            return Ok(policy.clone());
        }
        let policy: Arc<dyn Policy> = match &self.source {
            Source::Native => Arc::new(Native),
            #[cfg(feature = "wasm")]
            Source::Module(path) => {
                let _span = tracing::info_span!("compile", module = %path.display()).entered();
                let cache = jumppod_wasm::ModuleCache::user();
                Arc::new(jumppod_wasm::WasmPolicy::from_file_cached(
                    path,
                    cache.as_ref(),
                    jumppod_wasm::Instances::OnDemand,
                )?)
            }
        };
        *loaded = Some(policy.clone());
        Ok(policy)
    }

    /// Judges the ReplicaSet as the cluster's policy would on CREATE; Ok(warnings) when
    /// accepted.
    pub fn check_replicaset(
        &self,
        rs: &ReplicaSet,
        settings: &Value,
    ) -> Result<Vec<String>, HostError> {
        let request = replicaset_request(rs)?;
        let verdict = self.policy()?.validate(&request, settings)?;
        if !verdict.accepted {
            return Err(HostError::PolicyRejected {
                message: verdict
                    .message
                    .unwrap_or_else(|| "rejected without a message".into()),
            });
        }
        Ok(verdict.warnings.unwrap_or_default())
    }
}

/// The AdmissionRequest the API server would send the policy for creating `rs`.
pub fn replicaset_request(rs: &ReplicaSet) -> Result<Value, HostError> {
    let object = serde_json::to_value(rs).map_err(|source| HostError::Encode {
        what: "the ReplicaSet",
        source,
    })?;
    let gvk = json!({"group": "apps", "version": "v1", "kind": "ReplicaSet"});
    let gvr = json!({"group": "apps", "version": "v1", "resource": "replicasets"});
    Ok(json!({
        "uid": "jumppod-ensure",
        "kind": gvk, "requestKind": gvk,
        "resource": gvr, "requestResource": gvr,
        "name": rs.metadata.name,
        "namespace": rs.metadata.namespace,
        "operation": "CREATE",
        "userInfo": {"username": "jumppod"},
        "object": object,
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    }))
}
