//! `ensure`: what dstack's `run_job()` does for the jump pod. observe -> plan -> the gate's
//! policy check -> apply -> report.

use crate::api::Kube;
use crate::apply::{ActionOutcome, Applied, apply};
use crate::error::HostError;
use crate::gate::Gate;
use crate::observe;
use jumppod_plan::action::Finding;
use jumppod_plan::config::{Config, ConfigError};
use jumppod_plan::manifest::Desired;
use jumppod_plan::planner;
use serde::Serialize;

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
                    ActionOutcome::Done => "",
                    ActionOutcome::AlreadyExisted => " (already existed)",
                    ActionOutcome::AlreadyGone => " (already gone)",
                    ActionOutcome::ReplacedMeanwhile => {
                        " (skipped: replaced by another object in the meantime)"
                    }
                    ActionOutcome::NamespaceTerminating => {
                        " (skipped: the namespace is being deleted)"
                    }
                    ActionOutcome::Stale => " (not written: the object changed in the meantime)",
                };
                writeln!(f, "  {}{note}", a.action)?;
            }
        }
        for w in &self.policy_warnings {
            writeln!(f, "policy warning: {w}")?;
        }
        for finding in &self.findings {
            let prefix = if finding.is_warning() {
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
/// releases. Pods that cannot be created, scheduled or started, and drift, are reported, not
/// errors.
#[tracing::instrument(name = "ensure", skip_all, fields(namespace = %config.namespace, jump_pod = %config.name))]
pub async fn ensure(kube: &Kube, config: &Config, gate: &Gate) -> Result<EnsureReport, HostError> {
    // Without the project's key the pod's authorized_keys would hold only user keys, which
    // cannot open a shell: the dstack server could not reach its own jump pod.
    if config.ssh_public_key.is_none() {
        return Err(ConfigError {
            field: "ssh_public_key".into(),
            value: String::new(),
            problem: "is required by ensure: the project's SSH public key, authorized for root in the jump pod (--ssh-public-key, --ssh-public-key-file or ssh_public_key in the file)".into(),
        }
        .into());
    }
    let desired = Desired::from_config(config);
    let observed = observe::for_ensure(kube, config).await?;
    let plan = planner::plan(config, &desired, &observed);
    for finding in &plan.findings {
        if finding.is_warning() {
            tracing::warn!(%finding, "finding")
        } else {
            tracing::info!(%finding, "finding")
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
