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
//!   subdomains (namespaces DNS labels, services DNS-1035 labels), label keys and values
//!   validated, `metadata.generation` for ReplicaSets.
//! - Defaulting before admission: container requests default to limits; pod
//!   `status.qosClass`; Service type, protocol, targetPort, clusterIP; NodePorts allocated
//!   from 30000-32767, unique cluster-wide, released on delete.
//! - ReplicaSet validation (selector required and matching the template labels,
//!   restartPolicy Always).
//! - Delete: pods get `deletionTimestamp`/`deletionGracePeriodSeconds` and go after
//!   [`SimConfig::pod_termination`] (at once when zero, when unbound or terminal, or with
//!   `gracePeriodSeconds: 0`); objects with finalizers wait for them; other kinds go at
//!   once. `propagationPolicy` Background (default) and Foreground delete dependents
//!   through ownerReferences, Orphan strips the ownerReference. Deleting a namespace
//!   deletes what it contains. The response is the object as last seen.
//! - Controllers: ReplicaSet controller (kube-controller-manager's rules), garbage
//!   collector, scheduler (requests vs allocatable, pod count, nodeSelector, taints and
//!   tolerations, `Unschedulable` message in the scheduler's format), kubelet (Running and
//!   Ready after [`SimConfig::kubelet_delay`]), pod GC of Failed pods on demand.
//! - Faults on demand ([`Fault`]), RBAC ([`SimConfig::rbac`]), an admission hook
//!   ([`Admission`]), a request log ([`RequestRecord`]).
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
//!   once), protobuf, Deployments, Endpoints, Events emitted by controllers, preemption,
//!   pod spec immutability, node affinity beyond `nodeSelector`, NoExecute eviction,
//!   authentication beyond "the bearer token is the user name".
//! - Removing a node deletes the pods bound to it, as pod GC does for orphaned pods.

mod controllers;
mod errors;
mod quantity;
mod rbac;
mod resources;
mod selector;
mod server;
mod store;
mod validate;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use store::{Ctx, State};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

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

    fn to_json(&self) -> Value {
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
        let now = store::now_rfc3339();
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

/// The answer of an [`Admission`] hook (the `response` of an AdmissionReview).
#[derive(Debug, Clone, Default)]
pub struct AdmissionVerdict {
    pub allowed: bool,
    pub message: Option<String>,
    /// HTTP code for a denial (400 when absent).
    pub code: Option<u16>,
    pub warnings: Vec<String>,
    /// An RFC 6902 JSON Patch (a JSON array) applied to the object when allowed.
    pub patch: Option<Value>,
}

impl AdmissionVerdict {
    pub fn allow() -> Self {
        Self {
            allowed: true,
            ..Self::default()
        }
    }
    pub fn deny(message: &str) -> Self {
        Self {
            allowed: false,
            message: Some(message.into()),
            ..Self::default()
        }
    }
    pub fn with_patch(mut self, patch: Value) -> Self {
        self.patch = Some(patch);
        self
    }
}

/// A mutating + validating admission webhook, called in-process for CREATE and UPDATE of
/// pods and replicasets (after defaulting, before validation).
pub trait Admission: Send + Sync {
    /// The webhook name quoted in denials.
    fn name(&self) -> &str {
        "jumppod.sim.local"
    }
    /// Reviews a Kubernetes `AdmissionRequest` JSON.
    fn review(&self, request: &Value) -> AdmissionVerdict;
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

/// What an injected fault does to a matching request.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Answer with this code and a proper `Status` body; the request does not happen.
    Status { code: u16, retry_after: Option<u64> },
    /// Process the request (it happens), then answer with this code anyway.
    StatusAfter { code: u16 },
    /// Wait this long, then process the request normally.
    Stall(Duration),
    /// Never answer (until the simulator shuts down).
    Hang,
    /// Close the connection without any response; the request does not happen.
    Drop,
}

/// A fault for the next `times` requests matching `method` and `path_contains`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// HTTP method (`GET`, `POST`, ...); `None` matches any.
    pub method: Option<String>,
    /// Substring of the request path; `None` matches any.
    pub path_contains: Option<String>,
    pub times: usize,
    pub action: FaultAction,
}

impl Fault {
    fn new(method: &str, path: &str, times: usize, action: FaultAction) -> Self {
        Self {
            method: (!method.is_empty()).then(|| method.to_ascii_uppercase()),
            path_contains: (!path.is_empty()).then(|| path.to_string()),
            times,
            action,
        }
    }
    /// Answer `code` (429 carries `Retry-After: 1`). Empty method/path match anything.
    pub fn status(method: &str, path: &str, code: u16, times: usize) -> Self {
        let retry_after = (code == 429).then_some(1);
        Self::new(
            method,
            path,
            times,
            FaultAction::Status { code, retry_after },
        )
    }
    /// Apply the request, then answer `code`.
    pub fn status_after(method: &str, path: &str, code: u16, times: usize) -> Self {
        Self::new(method, path, times, FaultAction::StatusAfter { code })
    }
    pub fn stall(method: &str, path: &str, delay: Duration, times: usize) -> Self {
        Self::new(method, path, times, FaultAction::Stall(delay))
    }
    pub fn hang(method: &str, path: &str, times: usize) -> Self {
        Self::new(method, path, times, FaultAction::Hang)
    }
    pub fn drop_connection(method: &str, path: &str, times: usize) -> Self {
        Self::new(method, path, times, FaultAction::Drop)
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        self.times > 0
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
    }
}

/// One request as the simulator saw it. `status` is 0 when the connection was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: String,
    pub status: u16,
    pub user: String,
}

pub(crate) struct Inner {
    state: Mutex<State>,
    faults: Mutex<Vec<Fault>>,
    log: Mutex<Vec<RequestRecord>>,
    notify: Notify,
    rbac: bool,
    admin_user: String,
    pod_gc: bool,
    url: String,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take_fault(&self, method: &str, path: &str) -> Option<FaultAction> {
        let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        let i = faults.iter().position(|f| f.matches(method, path))?;
        faults[i].times -= 1;
        let action = faults[i].action.clone();
        if faults[i].times == 0 {
            faults.remove(i);
        }
        Some(action)
    }

    fn record(&self, r: RequestRecord) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(r);
    }
}

/// A running simulator. Dropping it stops the server.
pub struct Sim {
    inner: Arc<Inner>,
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
        let inner = Arc::new(Inner {
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
    pub async fn settle(&self) {
        for _ in 0..100_000 {
            match controllers::run_until_quiet(&self.inner) {
                None => return,
                Some(due) => tokio::time::sleep_until(due.into()).await,
            }
        }
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
                    store::meta_str(p, "namespace").to_string(),
                    store::meta_str(p, "name").to_string(),
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
        self.inner
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(fault);
    }

    /// Forgets all queued faults.
    pub fn clear_faults(&self) {
        self.inner
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Every request served so far (discovery included).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.inner
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn clear_requests(&self) {
        self.inner
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// How many logged requests satisfy `pred`.
    pub fn count(&self, pred: impl Fn(&RequestRecord) -> bool) -> usize {
        self.inner
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|r| pred(r))
            .count()
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
