//! The simulator: controllers and the kubelet act only in `settle()`; every request is in its
//! log, read in process.

use super::Backend;
use crate::both::SA_USER;
use crate::{NS, cluster_wide_objects, kube_as, namespace, seed_bare_pod, seed_service};
use futures::future::BoxFuture;
use jumppod_host::api::Kube;
use jumppod_host::rbac::Rule;
use jumppod_sim::{NodeSpec, Sim};
use serde_json::{Value, json};
use std::path::PathBuf;

pub struct SimBackend(pub Sim);

impl SimBackend {
    /// Seeds `objects` (the simulator's authorizer reads them as they are written; it needs no
    /// wait, so `refused` is not checked) and a client of the ServiceAccount they bind.
    async fn granted_objects(&self, objects: Vec<Value>) -> Kube {
        for o in objects {
            self.0.seed(o);
        }
        kube_as(&self.0.kubeconfig_for(SA_USER)).await
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "simulator"
    }

    fn as_sim(&self) -> Option<&Sim> {
        Some(&self.0)
    }

    fn ns(&self) -> &str {
        NS
    }

    fn kube(&self) -> BoxFuture<'_, Kube> {
        Box::pin(kube_as(self.0.kubeconfig_path()))
    }

    fn namespace(&self) -> BoxFuture<'_, ()> {
        namespace(&self.0, NS);
        Box::pin(async {})
    }

    fn namespace_exists(&self) -> BoxFuture<'_, bool> {
        let exists = self.0.get("namespaces", None, NS).is_some();
        Box::pin(async move { exists })
    }

    fn seed_bare_pod<'a>(&'a self, phase: &'a str, current: bool) -> BoxFuture<'a, Value> {
        let pod = seed_bare_pod(&self.0, phase, current);
        Box::pin(async move { pod })
    }

    fn seed_service(&self, port: i32, current: bool) -> BoxFuture<'_, Value> {
        let svc = seed_service(&self.0, port, current);
        Box::pin(async move { svc })
    }

    fn seed_stranded_legacy_pod(&self) -> BoxFuture<'_, ()> {
        let mut pod = seed_bare_pod(&self.0, "Running", false);
        pod["metadata"]["deletionTimestamp"] = json!("2026-11-30T10:00:00Z");
        pod["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        pod["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "NodeNotReady"}]);
        self.0.seed(pod);
        Box::pin(async {})
    }

    fn settle(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.0.settle())
    }

    /// Its controllers act only in `settle()`: any time after it.
    fn replicaset_controller_caught_up(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn get<'a>(&'a self, resource: &'a str, name: &'a str) -> BoxFuture<'a, Option<Value>> {
        let obj = self.0.get(resource, Some(NS), name);
        Box::pin(async move { obj })
    }

    fn list<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Vec<Value>> {
        let objs = self.0.list(resource, Some(NS));
        Box::pin(async move { objs })
    }

    fn delete<'a>(&'a self, resource: &'a str, name: &'a str) -> BoxFuture<'a, ()> {
        self.0.delete(resource, Some(NS), name);
        Box::pin(async {})
    }

    fn evict<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        self.0.evict_pod(NS, name);
        Box::pin(async {})
    }

    fn limit_range(&self, range: Value) -> BoxFuture<'_, ()> {
        self.0
            .create("limitranges", Some(NS), range)
            .expect("create the LimitRange");
        Box::pin(async {})
    }

    fn add_node(&self, node: NodeSpec) -> BoxFuture<'_, ()> {
        self.0.add_node(node);
        Box::pin(async {})
    }

    /// Its pods go with it at once.
    fn remove_node<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        self.0.remove_node(name);
        Box::pin(async {})
    }

    /// As the printed ServiceAccount.
    fn granted<'a>(
        &'a self,
        rules: &'a [Rule],
        _refused: &'a [(&'a str, &'a str, &'a str)],
    ) -> BoxFuture<'a, Kube> {
        let objects = jumppod_host::rbac::objects_with(rules, NS, "jumppod");
        Box::pin(self.granted_objects(objects))
    }

    fn granted_cluster_wide<'a>(
        &'a self,
        rules: &'a [Rule],
        _refused: &'a [(&'a str, &'a str, &'a str)],
    ) -> BoxFuture<'a, Kube> {
        let objects = cluster_wide_objects(rules, NS, "jumppod");
        Box::pin(self.granted_objects(objects))
    }

    /// RBAC must be on.
    fn nobody_kubeconfig(&self) -> PathBuf {
        self.0.kubeconfig_for("nobody")
    }

    /// The simulator's admin.
    fn kubeconfig(&self) -> PathBuf {
        self.0.kubeconfig_path().to_owned()
    }

    /// node-2's ExternalIP.
    fn external_ip(&self) -> &'static str {
        "203.0.113.2"
    }

    /// Clears the request log: the count starts empty.
    fn mark_requests(&self) -> u64 {
        self.0.clear_requests();
        0
    }

    /// Every request it logged, discovery excluded.
    fn requests_since(&self, _mark: u64) -> Vec<String> {
        self.0
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }
}
