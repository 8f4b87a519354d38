//! The simulator's settings and the nodes it starts with.

use crate::admission::Admission;
use crate::meta::now_rfc3339;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl Taint {
    pub fn new(key: &str, value: &str, effect: &str) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        }
    }
}

/// A node to create.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    pub cpu: String,
    pub memory: String,
    pub ephemeral_storage: String,
    pub pods: u32,
    pub external_ip: Option<String>,
    pub internal_ip: Option<String>,
    pub taints: Vec<Taint>,
    pub labels: BTreeMap<String, String>,
}

impl NodeSpec {
    /// A node with 4 cpu, 16Gi memory, 100Gi ephemeral storage, 110 pods and no addresses.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            cpu: "4".into(),
            memory: "16Gi".into(),
            ephemeral_storage: "100Gi".into(),
            pods: 110,
            external_ip: None,
            internal_ip: None,
            taints: Vec::new(),
            labels: BTreeMap::new(),
        }
    }
    pub fn cpu(mut self, cpu: &str) -> Self {
        self.cpu = cpu.into();
        self
    }
    pub fn memory(mut self, memory: &str) -> Self {
        self.memory = memory.into();
        self
    }
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints.push(Taint::new(key, value, effect));
        self
    }
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
    pub fn ips(mut self, external: &str, internal: &str) -> Self {
        self.external_ip = Some(external.into());
        self.internal_ip = Some(internal.into());
        self
    }

    /// The Node object, with the status a kubelet would post (Ready).
    pub fn to_json(&self) -> Value {
        let mut labels: BTreeMap<String, String> = BTreeMap::from([
            ("kubernetes.io/hostname".into(), self.name.clone()),
            ("kubernetes.io/os".into(), "linux".into()),
            ("kubernetes.io/arch".into(), "amd64".into()),
        ]);
        labels.extend(self.labels.clone());
        let mut addresses = Vec::new();
        if let Some(ip) = &self.internal_ip {
            addresses.push(json!({"type": "InternalIP", "address": ip}));
        }
        if let Some(ip) = &self.external_ip {
            addresses.push(json!({"type": "ExternalIP", "address": ip}));
        }
        addresses.push(json!({"type": "Hostname", "address": self.name}));
        let res = json!({"cpu": self.cpu, "memory": self.memory,
            "ephemeral-storage": self.ephemeral_storage, "pods": self.pods.to_string()});
        let now = now_rfc3339();
        let taints: Vec<Value> = self
            .taints
            .iter()
            .map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect}))
            .collect();
        let mut spec = json!({});
        if !taints.is_empty() {
            spec["taints"] = Value::Array(taints);
        }
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": spec,
            "status": {
                "capacity": res, "allocatable": res, "addresses": addresses,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "containerRuntimeVersion": "containerd://1.7.0",
                    "operatingSystem": "linux", "architecture": "amd64", "osImage": "jumppod-sim"},
            }
        })
    }
}

/// Simulator settings.
#[derive(Clone)]
pub struct SimConfig {
    pub nodes: Vec<NodeSpec>,
    /// How long a bound pod stays Pending before the kubelet reports it Running and Ready.
    pub kubelet_delay: Duration,
    /// How long a deleted pod bound to a node stays terminating (zero: removed at once).
    pub pod_termination: Duration,
    pub rbac: bool,
    /// The user (bearer token) that bypasses RBAC; the main kubeconfig uses it.
    pub admin_user: String,
    pub admission: Option<Arc<dyn Admission>>,
    /// Whether Failed pods are garbage-collected by the controllers' loop (off: only
    /// [`Sim::gc_failed_pods`] removes them).
    pub pod_gc: bool,
    /// Whether controllers also run in the background (off: only [`Sim::settle`] runs them).
    pub background_controllers: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            nodes: (1..=3)
                .map(|i| {
                    NodeSpec::new(&format!("node-{i}"))
                        .ips(&format!("203.0.113.1{i}"), &format!("10.0.0.1{i}"))
                })
                .collect(),
            kubelet_delay: Duration::from_millis(20),
            pod_termination: Duration::ZERO,
            rbac: false,
            admin_user: "admin".into(),
            admission: None,
            pod_gc: false,
            background_controllers: true,
        }
    }
}
