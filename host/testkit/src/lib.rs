//! What the host's test and bench binaries share (`host/tests/*.rs`, `host/benches/controller.rs`,
//! each with its own part of it): a simulated cluster with the jumppod policy as its admission
//! webhook (the policy's code natively: the tests of `tests/` prove the module answers the
//! same), a host client over real HTTP, seeds of what older dstack releases left, the real
//! control plane ([`cluster`]), the scenarios that run on both ([`both`]), `jumppod run` as a
//! process ([`run`]) and a front of the API server that is slow to answer ([`proxy`]). A
//! library, so that what one binary leaves unused is not dead code.

use jumppod::schema;
use jumppod_e2e::PolicyAdmission;
use jumppod_host::api::{ClientOptions, Kube, client};
use jumppod_host::rbac::{RULES, Rule};
use jumppod_host::{EnsureReport, Gate, HostError};
use jumppod_plan::config::{Config, RawConfig};
use jumppod_review::Native;
use jumppod_sim::{RequestRecord, Sim, SimConfig};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod admissions;
pub mod backend;
pub mod both;
pub mod cluster;
pub mod proxy;
pub mod run;

pub const NS: &str = "dstack";
pub const NAME: &str = "dstack-main-ssh-jump-pod";
pub const SVC: &str = "dstack-main-ssh-jump-pod-service";
pub const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHByb2plY3QgbWFpbi4u main@dstack";

/// The `jumppod` binary Cargo built beside the test or benchmark that runs it. Cargo names it in
/// `CARGO_BIN_EXE_jumppod` when it runs one (since 1.94; at build time only, which a library
/// does not share, before); otherwise it is in the directory above the runner's own (`deps/`).
pub fn jumppod_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_jumppod") {
        return path.into();
    }
    let runner = std::env::current_exe().expect("the path of the running test binary");
    let path = runner
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("jumppod"))
        .unwrap_or_default();
    assert!(
        path.is_file(),
        "CARGO_BIN_EXE_jumppod is not set and the jumppod binary is not at {path:?}: run the \
         tests through `cargo test` (it builds the binary), or set CARGO_BIN_EXE_jumppod"
    );
    path
}

/// Users' keys (ed25519 public keys; their key data is only ever parsed, never used to log in).
pub const ALICE: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHVzZXIgYWxpY2UuLi4u alice@laptop";
pub const BOB: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHVzZXIgYm9iLi4uLi4u bob@laptop";

/// Every verb `jumppod keys` uses: alice added (the Secret created), bob added (patched),
/// alice removed (patched).
pub async fn keys_flow(kube: &Kube, config: &Config) -> Result<(), HostError> {
    use jumppod_host::keys::change;
    use jumppod_plan::keys::{Change, EntryOutcome};
    let added = change(kube, config, &Change::add(ALICE, Some("alice")).unwrap()).await?;
    assert_eq!(added.outcome, EntryOutcome::Added);
    change(kube, config, &Change::add(BOB, Some("bob")).unwrap()).await?;
    let removed = change(kube, config, &Change::remove("alice").unwrap()).await?;
    assert_eq!(removed.outcome, EntryOutcome::Removed);
    Ok(())
}

/// Waits at most `limit` for `check` to give Some, polling; fails naming what was awaited
/// (`cluster::wait_for` waits 90 s).
pub async fn wait_for_up_to<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn gate() -> Gate {
    Gate::native()
}

/// A simulator with Kubewarden's jumppod policy and controllers run only by `settle()`.
pub fn sim_config() -> SimConfig {
    SimConfig {
        admission: Some(Arc::new(PolicyAdmission::new(Arc::new(Native)))),
        background_controllers: false,
        kubelet_delay: Duration::ZERO,
        ..SimConfig::default()
    }
}

pub async fn start() -> Sim {
    Sim::start(sim_config()).await.expect("simulator")
}

/// A host client for a kubeconfig, with the production request timeout and backoff (what
/// `jumppod` uses): for every backend that stalls nothing on purpose. A request timed out and
/// retried under load would add one to a count a test asserts.
pub async fn kube_as(path: &Path) -> Kube {
    let (client, _) = client(&ClientOptions {
        kubeconfig: Some(path.to_owned()),
        ..ClientOptions::default()
    })
    .await
    .expect("client");
    Kube::new(client, Duration::from_secs(30))
}

/// A host client for a kubeconfig of the simulator, with a short per-request timeout, so that
/// the stalls the fault tests inject are retried quickly.
pub async fn kube_at(path: &Path) -> Kube {
    let (client, _) = client(&ClientOptions {
        kubeconfig: Some(path.to_owned()),
        context: None,
        request_timeout: Duration::from_millis(700),
        watch: false,
    })
    .await
    .expect("client");
    let mut kube = Kube::new(client, Duration::from_secs(30));
    kube.backoff = Duration::from_millis(20);
    kube
}

pub async fn kube(sim: &Sim) -> Kube {
    kube_at(sim.kubeconfig_path()).await
}

pub fn config(extra: &str) -> Config {
    config_for(NS, "main", extra)
}

pub fn config_for(ns: &str, project: &str, extra: &str) -> Config {
    RawConfig::from_text(&format!(
        "namespace: {ns}\nproject: {project}\nssh_public_key: {KEY}\n{extra}"
    ))
    .unwrap()
    .validate("default")
    .unwrap()
}

pub async fn ensure(sim: &Sim, config: &Config) -> Result<EnsureReport, HostError> {
    jumppod_host::ensure(&kube(sim).await, config, &gate()).await
}

pub fn namespace(sim: &Sim, ns: &str) {
    sim.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
}

/// The bare jump pod an older release created: `current` labels (after #3891) or only
/// `app.kubernetes.io/name=<name>` (before). Bound to node-1, BestEffort.
pub fn seed_bare_pod(sim: &Sim, phase: &str, current: bool) -> Value {
    let labels = if current {
        schema::current_labels(NAME, "main")
    } else {
        schema::legacy_selector(NAME)
    };
    let (reason, ready) = match phase {
        "Failed" => (Some("Evicted"), "False"),
        "Running" => (None, "True"),
        _ => (None, "False"),
    };
    let mut status = json!({"phase": phase, "qosClass": "BestEffort", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": ready}]});
    if let Some(r) = reason {
        status["reason"] = json!(r);
        status["message"] = json!(
            "The node was low on resource: memory. Container dstack-main-ssh-jump-pod-container was using 12Mi, request is 0."
        );
    }
    sim.seed(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": NAME, "namespace": NS, "labels": labels},
        "spec": {"nodeName": "node-1", "restartPolicy": "Never",
                 "containers": [{"name": schema::container_name(NAME), "image": schema::DEFAULT_IMAGE}]},
        "status": status
    }))
}

/// The Service an older release created, on `port`; `current`: with the current selector.
pub fn seed_service(sim: &Sim, port: i32, current: bool) -> Value {
    let selector = if current {
        schema::current_selector(NAME)
    } else {
        schema::legacy_selector(NAME)
    };
    sim.seed(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SVC, "namespace": NS},
        "spec": {"type": "NodePort", "selector": selector,
                 "ports": [{"port": 22, "targetPort": 22, "nodePort": port, "protocol": "TCP"}]}
    }))
}

pub fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub fn node_port(svc: &Value) -> i64 {
    svc["spec"]["ports"][0]["nodePort"].as_i64().unwrap_or(0)
}

pub fn service(sim: &Sim) -> Value {
    sim.get("services", Some(NS), SVC)
        .expect("the service exists")
}

pub fn replicasets(sim: &Sim) -> Vec<Value> {
    sim.list("replicasets", Some(NS))
}

pub fn writes(records: &[RequestRecord]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// Only the ClusterRole and ClusterRoleBinding of what `jumppod rbac` prints for `rules`: what a
/// namespace that does not exist yet allows (a RoleBinding needs its namespace).
pub fn cluster_wide_objects(rules: &[Rule], ns: &str, subject: &str) -> Vec<Value> {
    let mut objects = jumppod_host::rbac::objects_with(rules, ns, subject);
    objects.retain(|o| o["kind"] == "ClusterRole" || o["kind"] == "ClusterRoleBinding");
    objects
}

/// The rules `jumppod rbac` prints, less one verb on one resource.
pub fn without(verb: &str, resource: &str) -> Vec<Rule> {
    RULES
        .iter()
        .map(|r| {
            let mut r = *r;
            if r.resource == resource {
                let verbs: Vec<&'static str> =
                    r.verbs.iter().copied().filter(|v| *v != verb).collect();
                r.verbs = Box::leak(verbs.into_boxed_slice());
            }
            r
        })
        .collect()
}

/// Why no pod serves, as every command must say it, on either backend: `ensure` reports the
/// finding `is` picks as a warning, `resolve` fails (exit 4) naming it, `status` lists it, and
/// its text holds each of `words`. Returns the finding.
pub async fn reported_by_every_command(
    kube: &Kube,
    config: &Config,
    is: fn(&jumppod_plan::action::Finding) -> bool,
    words: &[&str],
) -> jumppod_plan::action::Finding {
    let report = jumppod_host::ensure(kube, config, &gate()).await.unwrap();
    let finding = report
        .findings
        .iter()
        .find(|f| is(f))
        .unwrap_or_else(|| panic!("not among ensure's findings: {report}"))
        .clone();
    let text = finding.to_string();
    for word in words {
        assert!(text.contains(word), "{word:?} not in {text}");
    }
    assert!(
        report.to_string().contains(&format!("warning: {text}")),
        "{report}"
    );
    let err = jumppod_host::resolve::resolve(kube, config)
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), 4, "{err}");
    for word in words {
        assert!(err.to_string().contains(word), "{word:?} not in {err}");
    }
    assert!(!err.to_string().contains("run `jumppod ensure`"), "{err}");
    let status = jumppod_host::status::status(kube, config).await.unwrap();
    assert!(status.findings.contains(&finding), "{status}");
    finding
}

/// Which older dstack release plays the old server: its pod labels and its Service selector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Before #3891: the pod labelled `app.kubernetes.io/name=<name>` only, the Service
    /// selecting on it.
    Pre3891,
    /// After #3891, before jumppod: the current labels and selector, still a bare pod.
    Post3891,
}

/// An older dstack server running jobs of a project whose jump pod jumppod manages.
#[derive(Clone, Debug)]
pub struct OldServer {
    pub namespace: String,
    pub release: Release,
    /// Its `proxy_jump.port`: the NodePort it asks for when it recreates the Service.
    pub port: Option<i32>,
}

/// What one job of the older server did to the jump pod's objects.
#[derive(Clone, Debug)]
pub struct OldJob {
    /// The Service and a pod named `<name>` were both found: the job touched nothing.
    pub untouched: bool,
    pub service_deleted: bool,
    /// The NodePort of the Service it recreated, or the API's refusal.
    pub service_recreated: Option<Result<i32, String>>,
    pub node_port_before: Option<i32>,
    /// The bare pod's uid, or the API's refusal (409 while the previous one terminates).
    pub pod_created: Option<Result<String, String>>,
    /// The pod named `<name>` when the job looked for it again (None: 404, the job fails).
    pub final_read: Option<k8s_openapi::api::core::v1::Pod>,
}

impl OldJob {
    pub fn node_port_after(&self) -> Option<i32> {
        match &self.service_recreated {
            Some(Ok(p)) => Some(*p),
            _ => self.node_port_before,
        }
    }

    /// What the job's read by name found: a Running pod not being deleted. Anything else
    /// fails the job (404 raises; a terminating pod never gets ready).
    pub fn found_running(&self) -> bool {
        self.final_read.as_ref().is_some_and(|p| {
            jumppod_plan::objects::phase_of(p) == "Running"
                && p.metadata.deletion_timestamp.is_none()
        })
    }
}

fn status_message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
        other => other.to_string(),
    }
}

/// One `run_job` of an older dstack server for project `main`, as its Kubernetes backend does
/// it (`_create_jump_pod_service_if_not_exists`, then `_check_and_configure_jump_pod_service`):
/// read the Service and the pod by exact name; if both exist, go on; otherwise delete the pod
/// by name, create a bare BestEffort pod `<name>` (no resources, labels of its release), delete
/// the Service and create it again (NodePort `port` or allocated, selector of its release).
/// `settle` lets the cluster act (controllers, kubelet); then the job reads the pod by name
/// again. Through the host's kube client, so the same code runs on the simulator and on the
/// real control plane.
pub async fn old_server_job<F, Fut>(kube: &Kube, old: &OldServer, settle: F) -> OldJob
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use k8s_openapi::api::core::v1::{Pod, Service};
    use kube::Api;
    use kube::api::{DeleteParams, PostParams};
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &old.namespace);
    let services: Api<Service> = Api::namespaced(kube.client.clone(), &old.namespace);
    let service = services.get_opt(SVC).await.expect("read the Service");
    let pod = pods.get_opt(NAME).await.expect("read the pod");
    let mut job = OldJob {
        untouched: false,
        service_deleted: false,
        service_recreated: None,
        node_port_before: service.as_ref().and_then(jumppod_plan::objects::node_port),
        pod_created: None,
        final_read: None,
    };
    if service.is_some() && pod.is_some() {
        job.untouched = true;
    } else {
        match pods.delete(NAME, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if jumppod_host::api::is_not_found(&e) => {}
            Err(e) => panic!("delete the pod: {e}"),
        }
        let (labels, selector) = match old.release {
            Release::Pre3891 => (schema::legacy_selector(NAME), schema::legacy_selector(NAME)),
            Release::Post3891 => (
                schema::current_labels(NAME, "main"),
                schema::current_selector(NAME),
            ),
        };
        // As the older server sends it: whatever the policy makes of it is the backend's
        // admission's doing (the simulator's, or the real API server calling `jumppod webhook`).
        let body = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": NAME, "labels": labels},
            "spec": {"containers": [{
                "name": schema::container_name(NAME), "image": schema::DEFAULT_IMAGE,
                "ports": [{"containerPort": 22}]}]}
        });
        let body: Pod = serde_json::from_value(body).expect("a pod");
        job.pod_created = Some(
            pods.create(&PostParams::default(), &body)
                .await
                .map(|p| p.metadata.uid.unwrap_or_default())
                .map_err(status_message),
        );
        match services.delete(SVC, &DeleteParams::default()).await {
            Ok(_) => job.service_deleted = true,
            Err(e) if jumppod_host::api::is_not_found(&e) => {}
            Err(e) => panic!("delete the Service: {e}"),
        }
        let svc: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": SVC},
            "spec": {"type": "NodePort", "selector": selector,
                     "ports": [{"port": 22, "targetPort": 22, "nodePort": old.port}]}
        }))
        .expect("a service");
        job.service_recreated = Some(
            services
                .create(&PostParams::default(), &svc)
                .await
                .map(|s| jumppod_plan::objects::node_port(&s).unwrap_or_default())
                .map_err(status_message),
        );
    }
    settle().await;
    job.final_read = pods.get_opt(NAME).await.expect("read the pod again");
    job
}
