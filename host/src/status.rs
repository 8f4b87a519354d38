//! `status`: what exists for a project's jump pod: legacy objects, QoS classes, selectors,
//! the NodePort, drift and unschedulable reasons.

use crate::api::Kube;
use crate::config::Config;
use crate::error::HostError;
use crate::manifest::Desired;
use crate::observe;
use crate::plan::{self, Finding, controller_of, is_ready, name_of, node_port, phase_of};
use jumppod::schema;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    pub name: String,
    pub phase: String,
    pub reason: Option<String>,
    pub ready: bool,
    pub qos_class: Option<String>,
    pub node: Option<String>,
    /// `current`, `pre-#3891` or `other`.
    pub schema: String,
    pub owner: Option<String>,
    pub terminating: bool,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    pub name: String,
    pub node_port: Option<i32>,
    pub selector: String,
    /// `current`, `pre-#3891` or `other`.
    pub schema: String,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSetStatus {
    pub name: String,
    pub replicas: i32,
    pub ready_replicas: i32,
    pub selector: String,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub namespace: String,
    pub namespace_exists: bool,
    pub replicaset: Option<ReplicaSetStatus>,
    pub service: Option<ServiceStatus>,
    pub pods: Vec<PodStatus>,
    pub findings: Vec<Finding>,
    /// What `ensure` would do now.
    pub pending_actions: Vec<String>,
}

pub async fn status(kube: &Kube, config: &Config) -> Result<Status, HostError> {
    let observed = observe::everything(kube, config).await?;
    let name = &config.name;
    let desired = Desired::from_config(config);
    let planned = plan::plan(config, &desired, &observed);
    let rs = observed.replicaset.as_ref().map(|rs| ReplicaSetStatus {
        name: name.clone(),
        replicas: rs.status.as_ref().map(|s| s.replicas).unwrap_or(0),
        ready_replicas: rs
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        selector: plan::selector_text(
            &rs.spec
                .as_ref()
                .and_then(|s| s.selector.match_labels.clone())
                .unwrap_or_default(),
        ),
    });
    let svc = observed.service.as_ref().map(|svc| {
        let selector = svc
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        ServiceStatus {
            name: name_of(&svc.metadata).to_owned(),
            node_port: node_port(svc),
            selector: plan::selector_text(&selector),
            schema: if selector == schema::current_selector(name) {
                "current"
            } else if selector == schema::legacy_selector(name) {
                "pre-#3891"
            } else {
                "other"
            }
            .into(),
        }
    });
    let mut pods = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for pod in observed.pods.iter().chain(observed.legacy_pod.iter()) {
        if !seen.insert(name_of(&pod.metadata).to_owned()) {
            continue;
        }
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let schema = if labels.get(schema::INSTANCE_LABEL) == Some(name) {
            "current"
        } else if labels.get(schema::NAME_LABEL) == Some(name) {
            "pre-#3891"
        } else {
            "other"
        };
        pods.push(PodStatus {
            name: name_of(&pod.metadata).to_owned(),
            phase: phase_of(pod).to_owned(),
            reason: pod.status.as_ref().and_then(|s| s.reason.clone()),
            ready: is_ready(pod),
            qos_class: pod.status.as_ref().and_then(|s| s.qos_class.clone()),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            schema: schema.into(),
            owner: controller_of(pod).map(|(k, n)| format!("{k}/{n}")),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        });
    }
    Ok(Status {
        namespace: config.namespace.clone(),
        namespace_exists: observed.namespace_exists.unwrap_or(true),
        replicaset: rs,
        service: svc,
        pods,
        findings: planned.findings,
        pending_actions: planned.actions.iter().map(ToString::to_string).collect(),
    })
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "namespace {}: {}",
            self.namespace,
            if self.namespace_exists {
                "exists"
            } else {
                "missing"
            }
        )?;
        match &self.replicaset {
            Some(rs) => writeln!(
                f,
                "replicaset {}: {}/{} ready, selector {}",
                rs.name, rs.ready_replicas, rs.replicas, rs.selector
            )?,
            None => writeln!(f, "replicaset: missing")?,
        }
        match &self.service {
            Some(s) => writeln!(
                f,
                "service {}: NodePort {}, selector {} ({})",
                s.name,
                s.node_port
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "none".into()),
                s.selector,
                s.schema
            )?,
            None => writeln!(f, "service: missing")?,
        }
        if self.pods.is_empty() {
            writeln!(f, "pods: none")?;
        }
        for p in &self.pods {
            writeln!(
                f,
                "pod {}: {}{}{}, {}, QoS {}, node {}, {} labels, {}",
                p.name,
                p.phase,
                p.reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default(),
                if p.terminating { ", terminating" } else { "" },
                if p.ready { "ready" } else { "not ready" },
                p.qos_class.as_deref().unwrap_or("unknown"),
                p.node.as_deref().unwrap_or("none"),
                p.schema,
                p.owner
                    .as_ref()
                    .map(|o| format!("owned by {o}"))
                    .unwrap_or_else(|| "bare".into()),
            )?;
        }
        for finding in &self.findings {
            writeln!(f, "finding: {finding}")?;
        }
        if self.pending_actions.is_empty() {
            writeln!(f, "ensure would change nothing")?;
        } else {
            for a in &self.pending_actions {
                writeln!(f, "ensure would: {a}")?;
            }
        }
        Ok(())
    }
}
