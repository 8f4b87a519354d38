//! The real control plane, shared by every real-cluster test: each scenario works in a
//! namespace of its own, as a user of its own ([`cluster::UserKind::Tester`]), whose requests
//! the audit log counts; when dropped, it removes what the scenario left there, panic or not.

use super::Backend;
use crate::{NAME, SVC, cluster, kube_as};
use futures::future::BoxFuture;
use jumppod_host::api::Kube;
use jumppod_host::rbac::Rule;
use jumppod_sim::{NodeSpec, Sim};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

pub struct RealBackend {
    /// The harness's client (`admin`): seeds, reads, waits. Its requests are not counted.
    admin: Kube,
    /// The client of the scenario's user, for the code under test.
    client: kube::Client,
    user: String,
    ns: String,
    /// The users the scenario granted rules to, or handed out as granted nothing.
    grantees: std::sync::Mutex<Vec<String>>,
}

impl RealBackend {
    /// In namespace `ns` (created by the scenario, or by `ensure`), as a fresh tester.
    pub async fn new(ns: String) -> RealBackend {
        let user = cluster::fresh_user(cluster::UserKind::Tester);
        let kube = kube_as(&cluster::kubeconfig_of(&user)).await;
        RealBackend {
            admin: cluster::admin().await,
            client: kube.client,
            user,
            ns,
            grantees: Default::default(),
        }
    }

    /// Creates the namespace and registers the policy (the real binary `jumppod webhook`,
    /// which the API server calls) as its admission webhook.
    pub async fn with_the_policy(self) -> RealBackend {
        cluster::namespace(&self.admin, &self.ns).await;
        cluster::policy_webhook_for(&self.admin, &self.ns).await;
        self
    }

    /// A user of the real control plane for this scenario alone, cleaned up after it.
    fn grantee(&self) -> String {
        let user = cluster::fresh_user(cluster::UserKind::Plain);
        self.grantees.lock().unwrap().push(user.clone());
        user
    }
}

impl Drop for RealBackend {
    fn drop(&mut self) {
        let users = std::mem::take(&mut *self.grantees.lock().unwrap_or_else(|e| e.into_inner()));
        cluster::clean_up_after(&self.ns, users);
    }
}

impl Backend for RealBackend {
    fn name(&self) -> &'static str {
        "real control plane"
    }

    fn as_sim(&self) -> Option<&Sim> {
        None
    }

    fn ns(&self) -> &str {
        &self.ns
    }

    fn kube(&self) -> BoxFuture<'_, Kube> {
        let kube = Kube::new(self.client.clone(), Duration::from_secs(30));
        Box::pin(async move { kube })
    }

    fn namespace(&self) -> BoxFuture<'_, ()> {
        Box::pin(cluster::namespace(&self.admin, &self.ns))
    }

    fn namespace_exists(&self) -> BoxFuture<'_, bool> {
        Box::pin(async {
            let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                kube::Api::all(self.admin.client.clone());
            api.get_opt(&self.ns)
                .await
                .expect("read the namespace")
                .is_some()
        })
    }

    /// Run by the fake kubelet first, then finished the way the kubelet finishes it.
    fn seed_bare_pod<'a>(&'a self, phase: &'a str, current: bool) -> BoxFuture<'a, Value> {
        Box::pin(async move {
            let (kube, ns) = (&self.admin, &self.ns);
            cluster::bare_pod(kube, ns, current).await;
            match phase {
                "Running" => {}
                "Failed" => cluster::evict(kube, ns, NAME).await,
                other => cluster::set_phase(kube, ns, NAME, other).await,
            }
            self.get("pods", NAME).await.expect("the bare pod")
        })
    }

    fn seed_service(&self, port: i32, current: bool) -> BoxFuture<'_, Value> {
        Box::pin(async move {
            cluster::service_of(&self.admin, &self.ns, "main", port, current).await;
            self.get("services", SVC).await.expect("the Service")
        })
    }

    /// The real API server keeps a bound pod until its kubelet confirms the deletion, so the
    /// pod runs on a node of its own that no kubelet plays (unschedulable, so that no other
    /// test's pod lands on it; the drop removes it).
    fn seed_stranded_legacy_pod(&self) -> BoxFuture<'_, ()> {
        Box::pin(cluster::stranded_legacy_pod(&self.admin, &self.ns))
    }

    fn settle(&self) -> BoxFuture<'_, ()> {
        Box::pin(cluster::settled(&self.admin, &self.ns))
    }

    fn replicaset_controller_caught_up(&self) -> BoxFuture<'_, ()> {
        let labels = jumppod::schema::current_labels(NAME, "main");
        Box::pin(cluster::replicaset_controller_caught_up(
            &self.admin,
            &self.ns,
            labels,
        ))
    }

    fn get<'a>(&'a self, resource: &'a str, name: &'a str) -> BoxFuture<'a, Option<Value>> {
        Box::pin(cluster::get(&self.admin, &self.ns, resource, name))
    }

    fn list<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Vec<Value>> {
        Box::pin(cluster::list(&self.admin, &self.ns, resource))
    }

    fn delete<'a>(&'a self, resource: &'a str, name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(cluster::delete(&self.admin, &self.ns, resource, name))
    }

    fn evict<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(cluster::evict(&self.admin, &self.ns, name))
    }

    fn limit_range(&self, range: Value) -> BoxFuture<'_, ()> {
        Box::pin(cluster::limit_range(&self.admin, &self.ns, range))
    }

    /// Played by the fake kubelet, and removed by the drop.
    fn add_node(&self, node: NodeSpec) -> BoxFuture<'_, ()> {
        Box::pin(cluster::played_node(&self.admin, &self.ns, node.to_json()))
    }

    /// Its pods go after the pod GC's 40 s quarantine.
    fn remove_node<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(cluster::remove_node(&self.admin, name))
    }

    /// As a plain user of this call alone.
    fn granted<'a>(
        &'a self,
        rules: &'a [Rule],
        refused: &'a [(&'a str, &'a str, &'a str)],
    ) -> BoxFuture<'a, Kube> {
        Box::pin(async move {
            let user = self.grantee();
            cluster::grant(&self.admin, rules, &self.ns, &user).await;
            cluster::authorized(&self.admin, rules, refused, &self.ns, &user).await;
            kube_as(&cluster::kubeconfig_of(&user)).await
        })
    }

    fn granted_cluster_wide<'a>(
        &'a self,
        rules: &'a [Rule],
        refused: &'a [(&'a str, &'a str, &'a str)],
    ) -> BoxFuture<'a, Kube> {
        Box::pin(async move {
            let user = self.grantee();
            cluster::grant_cluster_wide(&self.admin, rules, &self.ns, &user).await;
            cluster::authorized(&self.admin, rules, refused, &self.ns, &user).await;
            kube_as(&cluster::kubeconfig_of(&user)).await
        })
    }

    /// A plain user of this call alone.
    fn nobody_kubeconfig(&self) -> PathBuf {
        cluster::kubeconfig_of(&self.grantee())
    }

    /// A user in system:masters.
    fn kubeconfig(&self) -> PathBuf {
        cluster::kubeconfig_of(&self.user)
    }

    /// The fake nodes' address.
    fn external_ip(&self) -> &'static str {
        "127.0.0.1"
    }

    fn mark_requests(&self) -> u64 {
        cluster::audit().mark()
    }

    /// Every request of the user in the audit log, cluster-scoped ones included, each logged
    /// before it was handled, so none is missed and none waited for.
    fn requests_since(&self, mark: u64) -> Vec<String> {
        cluster::audit().by_user(mark, &self.user)
    }
}
