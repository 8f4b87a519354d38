//! `ensure`: what dstack's `run_job()` does for the jump pod. observe -> plan -> policy check
//! -> apply -> report.

use crate::api::Kube;
use crate::apply::{Applied, apply};
use crate::config::Config;
use crate::error::HostError;
use crate::manifest::Desired;
use crate::observe;
use crate::plan::{self, Finding};
use crate::policy::Policy;
use k8s_openapi::api::apps::v1::ReplicaSet;
use serde::Serialize;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The policy Wasm the host checks its ReplicaSet with: the one built into the binary, or a
/// file. Loaded (compiled) on first use only: a steady-state `ensure` writes nothing and needs
/// no check.
pub struct PolicyGate {
    source: Option<PathBuf>,
    loaded: OnceLock<Result<Arc<Policy>, String>>,
}

impl PolicyGate {
    /// `None`: the module built into the binary.
    pub fn new(source: Option<PathBuf>) -> PolicyGate {
        PolicyGate {
            source,
            loaded: OnceLock::new(),
        }
    }

    /// An already loaded module.
    pub fn loaded(policy: Arc<Policy>) -> PolicyGate {
        let gate = PolicyGate::new(None);
        let _ = gate.loaded.set(Ok(policy));
        gate
    }

    pub fn policy(&self) -> Result<Arc<Policy>, HostError> {
        self.loaded
            .get_or_init(|| {
                match &self.source {
                    Some(path) => Policy::from_file(path),
                    None => Policy::builtin(),
                }
                .map(Arc::new)
                .map_err(|e| format!("{e:#}"))
            })
            .clone()
            .map_err(|e| HostError::Other(anyhow::anyhow!(e)))
    }

    /// Evaluates the ReplicaSet as Kubewarden would on CREATE; Ok(warnings) when accepted.
    pub fn check_replicaset(
        &self,
        rs: &ReplicaSet,
        settings: &Value,
    ) -> Result<Vec<String>, HostError> {
        let policy = self.policy()?;
        let request = replicaset_request(rs)?;
        let verdict = policy.validate(&request, settings)?;
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
    let object = serde_json::to_value(rs).map_err(anyhow::Error::from)?;
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

/// What `ensure` did and found.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnsureReport {
    pub namespace: String,
    pub replicaset: String,
    pub applied: Vec<Applied>,
    pub findings: Vec<Finding>,
    /// Warnings of the policy on the ReplicaSet (when it was checked).
    pub policy_warnings: Vec<String>,
    /// Whether the policy evaluated the ReplicaSet (only when something is written or drifts).
    pub policy_checked: bool,
}

impl std::fmt::Display for EnsureReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.applied.is_empty() {
            writeln!(
                f,
                "jump pod {}/{}: up to date, nothing to do",
                self.namespace, self.replicaset
            )?;
        } else {
            writeln!(f, "jump pod {}/{}:", self.namespace, self.replicaset)?;
            for a in &self.applied {
                let note = match a.outcome {
                    crate::apply::Outcome::Done => "",
                    crate::apply::Outcome::AlreadyExisted => " (already existed)",
                    crate::apply::Outcome::AlreadyGone => " (already gone)",
                    crate::apply::Outcome::ReplacedMeanwhile => {
                        " (skipped: replaced by another object in the meantime)"
                    }
                };
                writeln!(f, "  {}{note}", a.action)?;
            }
        }
        for w in &self.policy_warnings {
            writeln!(f, "policy warning: {w}")?;
        }
        for finding in &self.findings {
            let prefix = if matches!(
                finding,
                Finding::Unschedulable { .. } | Finding::Drift { .. } | Finding::PortDiffers { .. }
            ) {
                "warning"
            } else {
                "note"
            };
            writeln!(f, "{prefix}: {finding}")?;
        }
        Ok(())
    }
}

/// Makes the namespace, the ReplicaSet and the Service exist and cleans up after older
/// releases. Unschedulable pods and drift are reported, not errors.
pub async fn ensure(
    kube: &Kube,
    config: &Config,
    gate: &PolicyGate,
) -> Result<EnsureReport, HostError> {
    let desired = Desired::from_config(config);
    let observed = observe::for_ensure(kube, config).await?;
    let plan = plan::plan(config, &desired, &observed);
    for finding in &plan.findings {
        match finding {
            Finding::Unschedulable { .. } | Finding::Drift { .. } => tracing::warn!("{finding}"),
            _ => tracing::info!("{finding}"),
        }
    }
    let check = !plan.actions.is_empty()
        || plan
            .findings
            .iter()
            .any(|f| matches!(f, Finding::Drift { .. }));
    let policy_warnings = if check {
        gate.check_replicaset(&desired.replicaset, &config.policy_settings)?
    } else {
        Vec::new()
    };
    let applied = apply(kube, &config.namespace, &plan.actions).await?;
    Ok(EnsureReport {
        namespace: config.namespace.clone(),
        replicaset: config.name.clone(),
        applied,
        findings: plan.findings,
        policy_warnings,
        policy_checked: check,
    })
}
