//! The object store: every object of the simulated cluster, kept as JSON by resource type,
//! with the bookkeeping the controllers read. The API verbs over it live in the submodules:
//! [`create`], [`update`], [`patch`], [`delete`]; what differs per kind (defaulting,
//! validation, initial status) in [`kinds`]; Service address allocation in [`services`].

mod create;
mod delete;
mod kinds;
mod limit_ranges;
mod patch;
mod services;
mod update;

pub use delete::DeleteOpts;
use services::node_ports;

use crate::admission::Admission;
use crate::errors::ApiError;
use crate::meta::{meta_mut, meta_str, now_rfc3339};
use crate::request::Ctx;
use crate::resources::{self, ResDef};
use crate::validate;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Objects of one resource type keyed by (namespace, name); cluster-scoped use "".
pub type Coll = BTreeMap<(String, String), Value>;

/// The whole simulated cluster state.
pub struct State {
    colls: BTreeMap<&'static str, Coll>,
    pub rv: u64,
    node_ports: BTreeSet<i64>,
    next_cluster_ip: u32,
    pub next_pod_ip: u32,
    /// Pods bound to a node, waiting for the kubelet: (due, namespace, name, uid).
    pub kubelet_due: Vec<(Instant, String, String, String)>,
    /// Pods terminating, to be removed when due: (due, namespace, name, uid).
    pub deletion_due: Vec<(Instant, String, String, String)>,
    /// Set when an owner might have gone, so the garbage collector looks.
    pub gc_needed: bool,
    /// Namespaces whose pods or ReplicaSets changed since the ReplicaSet controller looked.
    pub dirty_ns: BTreeSet<String>,
    /// Pods created since the scheduler last looked: (namespace, name).
    pub sched_queue: Vec<(String, String)>,
    /// Set when capacity may have been freed or added: the scheduler retries every pending pod.
    pub capacity_changed: bool,
    /// Requests in use per node, kept by the scheduler; `None` when it must be recomputed.
    pub used_cache: Option<BTreeMap<String, BTreeMap<String, i128>>>,
    pub admission: Option<Arc<dyn Admission>>,
    pub pod_termination: Duration,
    pub kubelet_delay: Duration,
}

impl State {
    pub fn new(
        admission: Option<Arc<dyn Admission>>,
        kubelet_delay: Duration,
        pod_termination: Duration,
    ) -> Self {
        let mut s = Self {
            colls: BTreeMap::new(),
            rv: 1000,
            node_ports: BTreeSet::new(),
            next_cluster_ip: 1,
            next_pod_ip: 0,
            kubelet_due: Vec::new(),
            deletion_due: Vec::new(),
            gc_needed: false,
            dirty_ns: BTreeSet::new(),
            sched_queue: Vec::new(),
            capacity_changed: false,
            used_cache: None,
            admission,
            pod_termination,
            kubelet_delay,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let ns_def = resources::by_name("namespaces").unwrap();
            s.create(
                ns_def,
                None,
                json!({"metadata": {"name": ns}}),
                &mut Ctx::user("system:apiserver"),
            )
            .ok();
        }
        s.create(
            resources::by_name("services").unwrap(),
            Some("default"),
            json!({"metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                   "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 6443}]}}),
            &mut Ctx::user("system:apiserver"),
        )
        .ok();
        s
    }

    pub fn coll_mut(&mut self, res: &'static ResDef) -> &mut Coll {
        self.colls.entry(res.resource).or_default()
    }

    pub(crate) fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    pub fn get(&self, resource: &str, ns: Option<&str>, name: &str) -> Option<&Value> {
        self.colls
            .get(resource)?
            .get(&(ns.unwrap_or("").to_string(), name.to_string()))
    }

    /// Objects of a resource, in one namespace or all.
    pub fn iter<'a>(
        &'a self,
        resource: &str,
        ns: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = &'a Value> + 'a> {
        let Some(c) = self.colls.get(resource) else {
            return Box::new(std::iter::empty());
        };
        match ns {
            Some(ns) => Box::new(
                c.range((ns.to_string(), String::new())..)
                    .take_while(move |((n, _), _)| n == ns)
                    .map(|(_, v)| v),
            ),
            None => Box::new(c.values()),
        }
    }

    /// Stores an object as-is, bumping its resourceVersion.
    pub fn put_raw(&mut self, res: &'static ResDef, mut obj: Value) -> Value {
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv));
        let key = (
            meta_str(&obj, "namespace").to_string(),
            meta_str(&obj, "name").to_string(),
        );
        if matches!(res.resource, "pods" | "replicasets") {
            self.dirty_ns.insert(key.0.clone());
        }
        let terminal = matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Failed" | "Succeeded")
        );
        if res.resource == "nodes" || (res.resource == "pods" && terminal) {
            self.capacity_changed = true;
            self.used_cache = None;
        }
        self.coll_mut(res).insert(key, obj.clone());
        obj
    }

    /// Removes an object at once, releasing what it held.
    pub fn remove(&mut self, res: &'static ResDef, ns: &str, name: &str) -> Option<Value> {
        let old = self
            .coll_mut(res)
            .remove(&(ns.to_string(), name.to_string()))?;
        self.rv += 1;
        self.gc_needed = true;
        if matches!(res.resource, "pods" | "replicasets") {
            self.dirty_ns.insert(ns.to_string());
        }
        if matches!(res.resource, "pods" | "nodes") {
            self.capacity_changed = true;
            self.used_cache = None;
        }
        if res.resource == "services" {
            for p in node_ports(&old) {
                self.node_ports.remove(&p);
            }
        }
        if res.resource == "namespaces" {
            let namespaced: Vec<&'static ResDef> = resources::RESOURCES
                .iter()
                .filter(|r| r.namespaced)
                .collect();
            for r in namespaced {
                let names: Vec<String> = self
                    .iter(r.resource, Some(name))
                    .map(|o| meta_str(o, "name").to_string())
                    .collect();
                for n in names {
                    self.remove(r, name, &n);
                }
            }
        }
        Some(old)
    }

    /// The namespace an object of `res` is keyed under ("" for cluster-scoped kinds).
    fn key_ns<'a>(res: &ResDef, ns: Option<&'a str>) -> &'a str {
        if res.namespaced {
            ns.unwrap_or("default")
        } else {
            ""
        }
    }

    fn namespace_check(&self, res: &ResDef, ns: Option<&str>) -> Result<(), ApiError> {
        if res.namespaced {
            let ns = ns.unwrap_or("");
            if self.get("namespaces", None, ns).is_none() {
                return Err(ApiError::not_found(
                    resources::by_name("namespaces").unwrap(),
                    ns,
                ));
            }
        }
        Ok(())
    }

    /// Inserts an object as given (kind and apiVersion pick the collection), filling the
    /// system metadata it lacks and keeping its status.
    pub fn seed(&mut self, mut obj: Value) -> Result<Value, String> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let res = resources::by_kind(api_version, kind)
            .ok_or_else(|| format!("unknown kind {api_version}/{kind}"))?;
        let meta = meta_mut(&mut obj);
        if res.namespaced {
            meta.entry("namespace").or_insert(json!("default"));
        }
        meta.entry("uid")
            .or_insert_with(|| json!(uuid::Uuid::new_v4().to_string()));
        meta.entry("creationTimestamp")
            .or_insert_with(|| json!(now_rfc3339()));
        if res.resource == "services" {
            self.node_ports.extend(node_ports(&obj));
        }
        if res.resource == "replicasets" {
            meta_mut(&mut obj).entry("generation").or_insert(json!(1));
        }
        if res.resource == "pods" && obj.pointer("/status/phase").is_none() {
            let qos = obj
                .get("spec")
                .map(validate::qos_class)
                .unwrap_or("BestEffort");
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        if res.resource == "pods" {
            let key = (
                meta_str(&obj, "namespace").into(),
                meta_str(&obj, "name").into(),
            );
            self.sched_queue.push(key);
            self.used_cache = None;
        }
        if res.resource == "pods"
            && obj.pointer("/spec/nodeName").is_some()
            && obj.pointer("/status/phase").and_then(Value::as_str) == Some("Pending")
        {
            self.kubelet_due.push((
                Instant::now() + self.kubelet_delay,
                meta_str(&obj, "namespace").into(),
                meta_str(&obj, "name").into(),
                meta_str(&obj, "uid").into(),
            ));
        }
        Ok(self.put_raw(res, obj))
    }
}
