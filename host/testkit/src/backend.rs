//! What a shared scenario ([`super::both::Cluster`]) needs done its own way on each backend:
//! one implementation for the simulator (`sim.rs`) and one for the real control plane
//! (`real.rs`). Everything the two do alike is in `Cluster`.

use futures::future::BoxFuture;
use jumppod_host::api::Kube;
use jumppod_host::rbac::Rule;
use jumppod_sim::{NodeSpec, Sim};
use serde_json::Value;
use std::path::PathBuf;

mod real;
mod sim;

pub use real::RealBackend;
pub use sim::SimBackend;

/// A backend of the shared scenarios, in the namespace the scenario works in. Async methods
/// return boxed futures so that `Cluster` can hold either backend as a trait object.
pub trait Backend: Send + Sync {
    /// "simulator" or "real control plane", for the timing line.
    fn name(&self) -> &'static str;

    /// The simulator, for what only it can show (holding its kubelet back, its request log).
    fn as_sim(&self) -> Option<&Sim>;

    /// The namespace the scenario works in.
    fn ns(&self) -> &str;

    /// A client of the scenario's user, as a command makes one (the production timeout; its
    /// deadline starts now).
    fn kube(&self) -> BoxFuture<'_, Kube>;

    /// Creates the scenario's namespace.
    fn namespace(&self) -> BoxFuture<'_, ()>;

    /// Whether the scenario's namespace exists.
    fn namespace_exists(&self) -> BoxFuture<'_, bool>;

    /// The bare pod an older release left, in `phase` (Running, Failed as evicted, Succeeded).
    fn seed_bare_pod<'a>(&'a self, phase: &'a str, current: bool) -> BoxFuture<'a, Value>;

    /// The Service an older release created on `port`; `current`: with the current selector.
    fn seed_service(&self, port: i32, current: bool) -> BoxFuture<'_, Value>;

    /// A pre-#3891 pod on a node whose kubelet stopped answering, deleted: it stays
    /// terminating, not Ready.
    fn seed_stranded_legacy_pod(&self) -> BoxFuture<'_, ()>;

    /// Until the controllers and the kubelet have done what they will do.
    fn settle(&self) -> BoxFuture<'_, ()>;

    /// Until the ReplicaSet controller has acted on every pod created so far.
    fn replicaset_controller_caught_up(&self) -> BoxFuture<'_, ()>;

    fn get<'a>(&'a self, resource: &'a str, name: &'a str) -> BoxFuture<'a, Option<Value>>;

    fn list<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Vec<Value>>;

    /// Deletes the object (its deletion may end later).
    fn delete<'a>(&'a self, resource: &'a str, name: &'a str) -> BoxFuture<'a, ()>;

    /// What the kubelet writes when it evicts a pod.
    fn evict<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()>;

    /// Creates the LimitRange `range` in the scenario's namespace.
    fn limit_range(&self, range: Value) -> BoxFuture<'_, ()>;

    /// A node of the scenario's own.
    fn add_node(&self, node: NodeSpec) -> BoxFuture<'_, ()>;

    /// What a cloud's node controller does to a node that went away: delete the Node.
    fn remove_node<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()>;

    /// A client of a user granted the Role, RoleBinding, ClusterRole and ClusterRoleBinding
    /// `jumppod rbac` prints for `rules`, once the authorizer allows them and refuses
    /// `refused`.
    fn granted<'a>(
        &'a self,
        rules: &'a [Rule],
        refused: &'a [(&'a str, &'a str, &'a str)],
    ) -> BoxFuture<'a, Kube>;

    /// A client of a user granted only the ClusterRole and ClusterRoleBinding of `rules`.
    fn granted_cluster_wide<'a>(
        &'a self,
        rules: &'a [Rule],
        refused: &'a [(&'a str, &'a str, &'a str)],
    ) -> BoxFuture<'a, Kube>;

    /// The kubeconfig of a user nobody granted anything.
    fn nobody_kubeconfig(&self) -> PathBuf;

    /// The kubeconfig of the scenario's user, whose requests [`Backend::requests_since`] gives.
    fn kubeconfig(&self) -> PathBuf;

    /// The address `resolve` finds without `hostname`.
    fn external_ip(&self) -> &'static str;

    /// Where the count of the scenario's user's requests starts: now.
    fn mark_requests(&self) -> u64;

    /// `verb path` of each request of the scenario's user since `mark`.
    fn requests_since(&self, mark: u64) -> Vec<String>;
}
