//! Shared by the scenario tests: a simulated cluster with the jumppod policy as its admission
//! webhook (the policy's code natively: the tests of `tests/` prove the module answers the
//! same), a host client over real HTTP, and seeds of what older dstack releases left.
#![allow(dead_code)]

use jumppod::schema;
use jumppod_e2e::PolicyAdmission;
use jumppod_host::api::{ClientOptions, Kube, client};
use jumppod_host::config::{Config, RawConfig};
use jumppod_host::rbac::{RULES, Rule};
use jumppod_host::{EnsureReport, Gate, HostError};
use jumppod_review::Native;
use jumppod_sim::{RequestRecord, Sim, SimConfig};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const NS: &str = "dstack";
pub const NAME: &str = "dstack-main-ssh-jump-pod";
pub const SVC: &str = "dstack-main-ssh-jump-pod-service";
pub const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHByb2plY3QgbWFpbi4u main@dstack";

/// Users' keys (ed25519 public keys; their key data is only ever parsed, never used to log in).
pub const ALICE: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHVzZXIgYWxpY2UuLi4u alice@laptop";
pub const BOB: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHVzZXIgYm9iLi4uLi4u bob@laptop";

/// Every verb `jumppod keys` uses: alice added (the Secret created), bob added (patched),
/// alice removed (patched).
pub async fn keys_flow(kube: &Kube, config: &Config) -> Result<(), HostError> {
    use jumppod_host::keys::{Change, Outcome, change};
    let added = change(kube, config, &Change::add(ALICE, Some("alice")).unwrap()).await?;
    assert_eq!(added.outcome, Outcome::Added);
    change(kube, config, &Change::add(BOB, Some("bob")).unwrap()).await?;
    let removed = change(kube, config, &Change::remove("alice").unwrap()).await?;
    assert_eq!(removed.outcome, Outcome::Removed);
    Ok(())
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

/// A host client for a kubeconfig, with a short per-request timeout so stalls are retried.
pub async fn kube_at(path: &Path) -> Kube {
    let (client, _) = client(&ClientOptions {
        kubeconfig: Some(path.to_owned()),
        context: None,
        request_timeout: Duration::from_millis(700),
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

/// Pods of the namespace that are not finished and not being deleted.
pub fn active_pods(sim: &Sim) -> Vec<Value> {
    sim.list("pods", Some(NS))
        .into_iter()
        .filter(|p| {
            !matches!(p["status"]["phase"].as_str(), Some("Failed" | "Succeeded"))
                && p["metadata"]["deletionTimestamp"].is_null()
        })
        .collect()
}

pub fn replicasets(sim: &Sim) -> Vec<Value> {
    sim.list("replicasets", Some(NS))
}

/// Requests of `f`, discovery excluded.
pub async fn requests_of<T, F: std::future::Future<Output = T>>(
    sim: &Sim,
    f: F,
) -> (T, Vec<RequestRecord>) {
    sim.clear_requests();
    let out = f.await;
    (out, sim.requests())
}

pub fn writes(records: &[RequestRecord]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
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
    is: fn(&jumppod_host::action::Finding) -> bool,
    words: &[&str],
) -> jumppod_host::action::Finding {
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
