//! `jumppod-sim`: a stateful, in-process, simulated Kubernetes API over real HTTP.
//!
//! [`Sim::start`] serves the Kubernetes REST API on `127.0.0.1:<random port>` inside the
//! current tokio runtime and writes a kubeconfig for it, so the real `kube` client and
//! `kubectl` talk to it unchanged. Objects are kept as `serde_json::Value` (unknown fields
//! survive) and behave the way the API server and the controllers make them behave.
//!
//! # Modelled
//! - Discovery (`/api`, `/api/v1`, `/apis`, `/apis/GROUP[/v1]`), `/version`, `/healthz`.
//! - Resources: namespaces, nodes, pods (+`/status`), services (+`/status`), configmaps,
//!   secrets, serviceaccounts, events, `apps/v1` replicasets (+`/status`), and the four
//!   `rbac.authorization.k8s.io/v1` kinds.
//! - Verbs: get, list (all namespaces too), create, update (PUT, optimistic concurrency
//!   with 409 Conflict), patch (JSON patch, merge patch, strategic merge patch with plain
//!   merge semantics, apply patch as a merge that creates when absent), delete,
//!   deletecollection. `labelSelector` in every form, `fieldSelector` on any field path,
//!   `dryRun=All`.
//! - Errors are `Status` objects with the API server's `reason`, `code`, `details` and
//!   wording (NotFound, AlreadyExists, Conflict, Invalid with causes, Forbidden, ...).
//! - Create: uid, resourceVersion (one global counter), creationTimestamp, `generateName`
//!   (5 characters from `bcdfghjklmnpqrstvwxz2456789`), namespace must exist, names are DNS
//!   subdomains (namespaces DNS labels, services DNS-1035 labels), container names DNS-1123
//!   labels (63), label keys and values validated, generated names at most 63 characters,
//!   `metadata.generation` for ReplicaSets.
//! - Defaulting before admission: container requests default to limits; pod
//!   `status.qosClass`; Service type, protocol, targetPort, clusterIP; NodePorts allocated
//!   from 30000-32767, unique cluster-wide, released on delete.
//! - ReplicaSet validation (selector required and matching the template labels,
//!   restartPolicy Always).
//! - Delete: pods get `deletionTimestamp`/`deletionGracePeriodSeconds` and go after
//!   [`SimConfig::pod_termination`] (at once when zero, when unbound or terminal, or with
//!   `gracePeriodSeconds: 0`); objects with finalizers wait for them; other kinds go at
//!   once. A uid or resourceVersion precondition that no longer holds is 409 Conflict with
//!   the registry's wording (`Operation cannot be fulfilled on Pod "x": the UID in the
//!   precondition ...`). `propagationPolicy` Background (default) and Foreground delete dependents
//!   through ownerReferences, Orphan strips the ownerReference. Deleting a namespace
//!   deletes what it contains. The response is the object as last seen.
//! - Controllers: ReplicaSet controller (kube-controller-manager's rules, including the
//!   `ReplicaFailure` condition and the FailedCreate/FailedDelete Warning events), garbage
//!   collector, scheduler (requests vs allocatable, pod count, nodeSelector, taints and
//!   tolerations, `Unschedulable` message in the scheduler's format), kubelet (Running and
//!   Ready after [`SimConfig::kubelet_delay`]; an image from a registry under `.invalid`
//!   stays in ImagePullBackOff, as on the real control plane), pod GC of Failed pods on
//!   demand.
//! - Faults on demand ([`Fault`]; 429 is plain text with `Retry-After`, as API Priority and
//!   Fairness sends it), RBAC ([`SimConfig::rbac`]), an admission hook
//!   ([`Admission`]), LimitRanges' `max` per container, a request log ([`RequestRecord`]).
//!
//! # Identity
//! The kubeconfig user carries `token: NAME` and `as: NAME`. The user is the bearer token
//! (kube-rs), else the `Impersonate-User` header (kubectl sends no bearer token over plain
//! HTTP), else `system:anonymous`. [`SimConfig::admin_user`] bypasses RBAC.
//!
//! # Deliberately not modelled
//! - OpenAPI documents (use `kubectl create --validate=false`) and protobuf bodies (415; kubectl's
//!   typed generators such as `kubectl create ns` fail, `kubectl create -f` works).
//! - Watch (`?watch=1` answers 405 MethodNotAllowed), server-side apply field ownership,
//!   strategic-merge list merging by key (lists are replaced), Table output (kubectl falls
//!   back to plain lists), paging (`limit`/`continue` are ignored: everything comes at
//!   once), protobuf, Deployments, Endpoints, Events from controllers other than the
//!   ReplicaSet controller, preemption, pod spec immutability, node affinity beyond
//!   `nodeSelector`, NoExecute eviction, the ReplicaSet controller's backoff timer (a failed
//!   sync is tried again when something in its namespace changes), authentication beyond
//!   "the bearer token is the user name".
//! - Removing a node deletes the pods bound to it, as pod GC does for orphaned pods.

mod admission;
mod cluster;
mod config;
mod controllers;
mod errors;
mod faults;
mod meta;
mod quantity;
mod rbac;
mod request;
mod request_log;
mod resources;
mod selector;
mod server;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod validate;

pub use admission::{Admission, AdmissionVerdict};
pub use config::{NodeSpec, SimConfig, Taint};
pub use faults::{Fault, FaultAction};
pub use request_log::RequestRecord;

use cluster::Cluster;
use controllers::Passes;
use request::Ctx;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use store::State;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// How many times [`Sim::settle`] waits for due work before it fails. Each wait retires at
/// least the earliest item due, so only work that keeps arming more (pods replaced as fast as
/// they start or end) comes near it: no settle in the simulator's tests or the host's
/// scenarios waits more than once.
pub const SETTLE_ROUNDS: usize = 100;

/// A running simulator. Dropping it stops the server.
pub struct Sim {
    inner: Arc<Cluster>,
    addr: SocketAddr,
    dir: PathBuf,
    kubeconfig: PathBuf,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

fn kubeconfig_json(url: &str, user: &str) -> String {
    let cfg = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim", "preferences": {},
        "clusters": [{"name": "sim", "cluster": {"server": url}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": user, "namespace": "default"}}],
        "users": [{"name": user, "user": {"token": user, "as": user}}],
    });
    serde_json::to_string_pretty(&cfg).unwrap_or_default()
}

impl Sim {
    /// Starts the simulator on 127.0.0.1 (random port) in the current tokio runtime.
    pub async fn start(cfg: SimConfig) -> anyhow::Result<Sim> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        let dir = std::env::temp_dir().join(format!("jumppod-sim-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_json(&url, &cfg.admin_user))?;
        let mut state = State::new(
            cfg.admission.clone(),
            cfg.kubelet_delay,
            cfg.pod_termination,
        );
        for n in &cfg.nodes {
            state.seed(n.to_json()).map_err(anyhow::Error::msg)?;
        }
        let inner = Arc::new(Cluster {
            state: Mutex::new(state),
            faults: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            notify: Notify::new(),
            rbac: cfg.rbac,
            admin_user: cfg.admin_user.clone(),
            pod_gc: cfg.pod_gc,
            url: url.clone(),
        });
        let (tx, rx) = watch::channel(false);
        let mut tasks = vec![tokio::spawn(server::serve(
            listener,
            inner.clone(),
            rx.clone(),
        ))];
        if cfg.background_controllers {
            tasks.push(tokio::spawn(controllers::run_background(inner.clone(), rx)));
        }
        Ok(Sim {
            inner,
            addr,
            dir,
            kubeconfig,
            shutdown: tx,
            tasks,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.inner.url.clone()
    }

    /// The socket address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The kubeconfig of the admin user (context `sim`, namespace `default`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes (once) and returns a kubeconfig whose bearer token makes requests come from `user`
    /// (e.g. `alice` or `system:serviceaccount:ns:name`).
    pub fn kubeconfig_for(&self, user: &str) -> PathBuf {
        let safe: String = user
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = self.dir.join(format!("kubeconfig-{safe}"));
        if !path.exists() {
            let _ = std::fs::write(&path, kubeconfig_json(&self.url(), user));
        }
        path
    }

    /// Runs the controllers, scheduler and kubelet until nothing changes, waiting for the
    /// kubelet delay and pod termination when they are due within a few seconds.
    ///
    /// # Panics
    /// When the controllers keep changing objects for 1000 passes in a row, or work keeps
    /// falling due for [`SETTLE_ROUNDS`] waits: the message names the objects still changing
    /// or the work still due.
    pub async fn settle(&self) {
        for _ in 0..SETTLE_ROUNDS {
            match controllers::run_until_quiet(&self.inner) {
                Passes::Quiet(None) => return,
                Passes::Quiet(Some(due)) => tokio::time::sleep_until(due.into()).await,
                Passes::Restless(changed) => panic!(
                    "the simulator did not settle: {} passes of its controllers in a row changed \
                     something; the last changed {}",
                    controllers::MAX_PASSES,
                    changed.join(", ")
                ),
            }
        }
        let due = controllers::due_work(&self.inner.state());
        panic!(
            "the simulator did not settle: after {SETTLE_ROUNDS} waits for due work, still \
             waiting for {}",
            due.join(", ")
        );
    }

    /// Inserts an object as-is (see module docs); returns it as stored.
    ///
    /// # Panics
    /// When kind/apiVersion are not a served resource.
    pub fn seed(&self, obj: Value) -> Value {
        let out = self
            .inner
            .state()
            .seed(obj)
            .unwrap_or_else(|e| panic!("seed: {e}"));
        self.inner.notify.notify_one();
        out
    }

    /// Creates an object through the full API path (defaulting, admission, validation), as
    /// the admin user. `Err` is the `Status` the API would answer.
    pub fn create(&self, resource: &str, ns: Option<&str>, obj: Value) -> Result<Value, Value> {
        let res =
            resources::by_name(resource).ok_or_else(|| json!({"message": "unknown resource"}))?;
        let out = self
            .inner
            .state()
            .create(res, ns, obj, &mut Ctx::user(&self.inner.admin_user));
        self.inner.notify.notify_one();
        out.map_err(|e| e.to_status())
    }

    /// One object; `resource` is the plural (`pods`, `services`, `replicasets`, `nodes`...).
    pub fn get(&self, resource: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        self.inner.state().get(resource, ns, name).cloned()
    }

    /// All objects of a resource in one namespace (or all, or cluster-scoped with `None`).
    pub fn list(&self, resource: &str, ns: Option<&str>) -> Vec<Value> {
        self.inner.state().iter(resource, ns).cloned().collect()
    }

    /// The kubelet evicts the pod for memory pressure: phase Failed, reason Evicted.
    pub fn evict_pod(&self, ns: &str, name: &str) {
        let mut st = self.inner.state();
        if let Some(pod) = st.get("pods", Some(ns), name).cloned() {
            let pod = controllers::evicted(pod);
            st.put_raw(resources::by_name("pods").unwrap(), pod);
        }
        drop(st);
        self.inner.notify.notify_one();
    }

    /// Sets the pod's phase as the kubelet would report it (`Pending`, `Running`,
    /// `Succeeded`, `Failed`, `Unknown`); terminal phases mark containers terminated.
    pub fn set_pod_phase(&self, ns: &str, name: &str, phase: &str) {
        let mut st = self.inner.state();
        if let Some(pod) = st.get("pods", Some(ns), name).cloned() {
            let pod = controllers::with_phase(pod, phase);
            st.put_raw(resources::by_name("pods").unwrap(), pod);
        }
        drop(st);
        self.inner.notify.notify_one();
    }

    /// Deletes an object out-of-band (as another actor would, default options).
    pub fn delete(&self, resource: &str, ns: Option<&str>, name: &str) {
        if let Some(res) = resources::by_name(resource) {
            let mut ctx = Ctx::user(&self.inner.admin_user);
            let _ =
                self.inner
                    .state()
                    .delete(res, ns, name, &store::DeleteOpts::default(), &mut ctx);
            self.inner.notify.notify_one();
        }
    }

    /// Removes a node; the pods bound to it are deleted (as pod GC does for orphaned pods).
    pub fn remove_node(&self, name: &str) {
        let mut st = self.inner.state();
        st.remove(resources::by_name("nodes").unwrap(), "", name);
        let pods = resources::by_name("pods").unwrap();
        let bound: Vec<(String, String)> = st
            .iter("pods", None)
            .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(name))
            .map(|p| {
                (
                    meta::meta_str(p, "namespace").to_string(),
                    meta::meta_str(p, "name").to_string(),
                )
            })
            .collect();
        for (ns, n) in bound {
            st.remove(pods, &ns, &n);
        }
        drop(st);
        self.inner.notify.notify_one();
    }

    /// Adds (or replaces) a node; pending pods are scheduled again.
    pub fn add_node(&self, node: NodeSpec) {
        self.inner.state().seed(node.to_json()).ok();
        self.inner.notify.notify_one();
    }

    /// Removes every Failed pod, as pod GC eventually does.
    pub fn gc_failed_pods(&self) {
        controllers::gc_failed(&mut self.inner.state());
        self.inner.notify.notify_one();
    }

    /// Queues a fault; the first queued fault matching a request applies.
    pub fn inject(&self, fault: Fault) {
        self.inner.faults().push(fault);
    }

    /// Forgets all queued faults.
    pub fn clear_faults(&self) {
        self.inner.faults().clear();
    }

    /// Every request served so far (discovery included).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.inner.log().clone()
    }

    pub fn clear_requests(&self) {
        self.inner.log().clear();
    }

    /// How many logged requests satisfy `pred`.
    pub fn count(&self, pred: impl Fn(&RequestRecord) -> bool) -> usize {
        self.inner.log().iter().filter(|r| pred(r)).count()
    }

    /// Stops serving and waits for the server and controllers to end.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for t in &self.tasks {
            t.abort();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
