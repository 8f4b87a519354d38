//! `status`: what exists for a project's jump pod: objects of older releases, QoS classes,
//! selectors, the NodePort, drift and unschedulable reasons.

use crate::api::Kube;
use crate::error::HostError;
use crate::keys;
use crate::observe;
use jumppod::schema::Schema;
use jumppod_plan::action::{Action, Finding};
use jumppod_plan::config::Config;
use jumppod_plan::keys::KeyList;
use jumppod_plan::manifest::Desired;
use jumppod_plan::objects::{
    controller_of, is_ready, name_of, node_port, phase_of, replicaset_selector, schema_of,
    selector_text, service_schema, service_selector, template_spec,
};
use jumppod_plan::planner;
use k8s_openapi::api::core::v1::Toleration;
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
    /// `current` or `pre-#3891`; null for a pod of neither schema.
    pub schema: Option<Schema>,
    pub owner: Option<String>,
    pub terminating: bool,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    pub name: String,
    pub node_port: Option<i32>,
    pub selector: String,
    /// `current` or `pre-#3891`; null for a selector of neither schema.
    pub schema: Option<Schema>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSetStatus {
    pub name: String,
    pub replicas: i32,
    pub ready_replicas: i32,
    pub selector: String,
    /// The template's tolerations, as `key operator [value] [effect]` (GPU taints among them
    /// when `gpu_tolerations` is on).
    pub tolerations: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub namespace: String,
    pub namespace_exists: bool,
    pub replicaset: Option<ReplicaSetStatus>,
    pub service: Option<ServiceStatus>,
    pub pods: Vec<PodStatus>,
    /// The users' keys the pod mounts (`jumppod keys`).
    pub authorized_keys: KeyList,
    pub findings: Vec<Finding>,
    /// What `ensure` would do now.
    pub pending_actions: Vec<Action>,
}

#[tracing::instrument(name = "status", skip_all, fields(namespace = %config.namespace, jump_pod = %config.name))]
pub async fn status(kube: &Kube, config: &Config) -> Result<Status, HostError> {
    let (observed, authorized_keys) =
        tokio::try_join!(observe::everything(kube, config), keys::list(kube, config))?;
    let name = &config.name;
    let desired = Desired::from_config(config);
    let planned = planner::plan(config, &desired, &observed);
    let rs = observed.replicaset.as_ref().map(|rs| ReplicaSetStatus {
        name: name.clone(),
        replicas: rs.status.as_ref().map(|s| s.replicas).unwrap_or(0),
        ready_replicas: rs
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        selector: selector_text(&replicaset_selector(rs)),
        tolerations: template_spec(rs)
            .and_then(|s| s.tolerations.as_ref())
            .into_iter()
            .flatten()
            .map(toleration_text)
            .collect(),
    });
    let svc = observed.service.as_ref().map(|svc| ServiceStatus {
        name: name_of(&svc.metadata).to_owned(),
        node_port: node_port(svc),
        selector: selector_text(&service_selector(svc)),
        schema: service_schema(svc, name),
    });
    let mut pods = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for pod in observed.pods.iter().chain(observed.bare_pod.iter()) {
        if !seen.insert(name_of(&pod.metadata).to_owned()) {
            continue;
        }
        pods.push(PodStatus {
            name: name_of(&pod.metadata).to_owned(),
            phase: phase_of(pod).to_owned(),
            reason: pod.status.as_ref().and_then(|s| s.reason.clone()),
            ready: is_ready(pod),
            qos_class: pod.status.as_ref().and_then(|s| s.qos_class.clone()),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            schema: schema_of(pod, name),
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
        authorized_keys,
        findings: planned.findings,
        pending_actions: planned.actions,
    })
}

fn toleration_text(t: &Toleration) -> String {
    [
        t.key.as_deref().unwrap_or("*"),
        t.operator.as_deref().unwrap_or("Equal"),
        t.value.as_deref().unwrap_or(""),
        t.effect.as_deref().unwrap_or("every effect"),
    ]
    .iter()
    .filter(|part| !part.is_empty())
    .copied()
    .collect::<Vec<_>>()
    .join(" ")
}

fn schema_text(schema: Option<Schema>) -> &'static str {
    schema.map_or("other", Schema::as_str)
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
                "replicaset {}: {}/{} ready, selector {}, tolerations: {}",
                rs.name,
                rs.ready_replicas,
                rs.replicas,
                rs.selector,
                if rs.tolerations.is_empty() {
                    "none".to_owned()
                } else {
                    rs.tolerations.join(", ")
                }
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
                schema_text(s.schema)
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
                schema_text(p.schema),
                p.owner
                    .as_ref()
                    .map(|o| format!("owned by {o}"))
                    .unwrap_or_else(|| "bare".into()),
            )?;
        }
        let keys = &self.authorized_keys;
        if keys.exists {
            let names: Vec<&str> = keys.entries.iter().map(|e| e.name.as_str()).collect();
            writeln!(
                f,
                "user keys in secret {}: {}",
                keys.secret,
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )?;
        } else {
            writeln!(
                f,
                "user keys: none (secret {} not created yet)",
                keys.secret
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
