//! `resolve`: what dstack's `update_provisioning_data()` does. Finds a ready jump pod behind the
//! Service and answers the SSH proxy: hostname, the Service's NodePort, user root.
//!
//! Requests: the pods by instance label and the Service, concurrently (2 with `hostname`
//! configured). The bare pod by name only when no labelled pod is ready; the pod's node, and
//! all nodes when that one has no ExternalIP or is going away, only when `hostname` is not
//! configured.

use crate::api::Kube;
use crate::error::HostError;
use crate::observe;
use jumppod::schema;
use jumppod_plan::action::Finding;
use jumppod_plan::config::Config;
use jumppod_plan::findings::{containers_waiting, pods_refused, unschedulable};
use jumppod_plan::objects::{
    is_active, is_finished, is_ready, name_of, node_port, phase_of, selector_text, service_selector,
};
use jumppod_plan::surge;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use std::collections::BTreeMap;

/// The SSH proxy of the project's jobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Proxy {
    pub hostname: String,
    pub port: i32,
    pub username: String,
    /// The ready pod the Service routes to.
    pub pod: String,
    /// Whether that pod is the bare pod of an older release.
    pub bare: bool,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolveReport {
    pub proxy: Proxy,
    pub warnings: Vec<Finding>,
}

impl std::fmt::Display for ResolveReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        let p = &self.proxy;
        writeln!(
            f,
            "{}@{}:{}  (pod {}{})",
            p.username,
            p.hostname,
            p.port,
            p.pod,
            if p.bare {
                ", bare pod of an older release"
            } else {
                ""
            }
        )
    }
}

fn matches(pod: &Pod, selector: &BTreeMap<String, String>) -> bool {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[tracing::instrument(name = "resolve", skip_all, fields(namespace = %config.namespace, jump_pod = %config.name))]
pub async fn resolve(kube: &Kube, config: &Config) -> Result<ResolveReport, HostError> {
    let name = &config.name;
    let ns = &config.namespace;
    let (pods, svc) =
        tokio::try_join!(observe::pods(kube, config), observe::service(kube, config))?;
    let Some(svc) = svc else {
        return Err(HostError::NotReady(format!(
            "no service {} in namespace {ns}: the jump pod is not provisioned; run `jumppod ensure`",
            schema::service_name(name)
        )));
    };
    let Some(port) = node_port(&svc) else {
        return Err(HostError::NotReady(format!(
            "service {} in namespace {ns} has no NodePort: it is not a jump-pod Service (type {}); delete it and run `jumppod ensure`",
            schema::service_name(name),
            svc.spec
                .as_ref()
                .and_then(|s| s.type_.clone())
                .unwrap_or_default()
        )));
    };
    let selector = service_selector(&svc);
    let mut warnings: Vec<Finding> = pods.iter().filter_map(unschedulable).collect();

    let mut chosen = pods
        .iter()
        .filter(|p| is_ready(p) && matches(p, &selector))
        .max_by_key(|p| p.metadata.creation_timestamp.clone())
        .cloned();
    if chosen.is_none() {
        // The bare pod of an older release, if the list did not already hold it.
        let bare = match pods.iter().find(|p| name_of(&p.metadata) == name) {
            Some(p) => Some(p.clone()),
            None => observe::bare_pod(kube, config).await?,
        };
        if let Some(bare) = bare {
            if let Some(u) = unschedulable(&bare) {
                warnings.push(u);
            }
            if is_ready(&bare) && matches(&bare, &selector) {
                chosen = Some(bare);
            } else if is_finished(&bare) && !pods.iter().any(is_active) {
                let reason = bare
                    .status
                    .as_ref()
                    .and_then(|s| s.reason.clone())
                    .map(|r| format!(", {r}"))
                    .unwrap_or_default();
                return Err(HostError::NotReady(format!(
                    "the jump pod {name} in namespace {ns} has finished ({}{reason}) and, being a bare pod of an older release, is never replaced: run `jumppod ensure` to replace it with a ReplicaSet",
                    phase_of(&bare)
                )));
            }
        }
    }
    if chosen.is_none() {
        // Why no pod serves: containers that do not start, and (one more read, on this
        // failure path only) pods the ReplicaSet controller cannot create.
        warnings.extend(pods.iter().flat_map(containers_waiting));
        warnings.extend(
            observe::replicaset(kube, config)
                .await?
                .as_ref()
                .and_then(pods_refused),
        );
    }
    for w in &warnings {
        tracing::warn!(finding = %w, "finding");
    }
    let Some(pod) = chosen else {
        let mut message = format!(
            "no ready jump pod behind service {} (selector {}) in namespace {ns}",
            schema::service_name(name),
            selector_text(&selector)
        );
        let pending: Vec<String> = pods
            .iter()
            .filter(|p| is_active(p))
            .map(|p| format!("{} is {}", name_of(&p.metadata), phase_of(p)))
            .collect();
        if !pending.is_empty() {
            message.push_str(&format!(": {}", pending.join(", ")));
        }
        for w in &warnings {
            message.push_str(&format!("\n  {w}"));
        }
        if pods.is_empty() && warnings.is_empty() {
            message.push_str("; run `jumppod ensure`");
        }
        return Err(HostError::NotReady(message));
    };

    let hostname = match &config.hostname {
        Some(h) => h.clone(),
        None => {
            // The chosen pod's node first, then the other Ready pods' nodes, newest first.
            let mut ready: Vec<&Pod> = pods
                .iter()
                .filter(|p| is_ready(p) && matches(p, &selector))
                .collect();
            ready.sort_by_key(|p| std::cmp::Reverse(p.metadata.creation_timestamp.clone()));
            let mut preferred: Vec<&str> = Vec::new();
            for p in std::iter::once(&pod).chain(ready) {
                if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                    && !preferred.contains(&node)
                {
                    preferred.push(node);
                }
            }
            hostname_of(kube, &preferred).await?
        }
    };
    let bare = name_of(&pod.metadata) == name;
    Ok(ResolveReport {
        proxy: Proxy {
            hostname,
            port,
            username: "root".into(),
            pod: name_of(&pod.metadata).to_owned(),
            bare,
        },
        warnings,
    })
}

/// The ExternalIP of the first of `preferred` (the Ready pods' nodes) if that node is staying;
/// else, from a list of the nodes, of the first node that is staying and has one (a job keeps
/// the address it is given for its whole life: a node cordoned or tainted for removal is about
/// to go), else of any node.
async fn hostname_of(kube: &Kube, preferred: &[&str]) -> Result<String, HostError> {
    if let Some(first) = preferred.first()
        && let Some(node) = observe::node(kube, first).await?
        && surge::leaving(&node).is_none()
        && let Some(ip) = surge::external_ip(&node)
    {
        return Ok(ip);
    }
    let nodes = observe::nodes(kube).await?;
    surge::job_address(preferred, &nodes).ok_or_else(|| {
        HostError::Config(jumppod_plan::config::ConfigError {
            field: "hostname".into(),
            value: String::new(),
            problem: "is required: no node of the cluster has an ExternalIP; set `hostname` (proxy_jump.hostname) to an address that reaches the nodes' NodePorts".into(),
        })
    })
}
