//! The demo: the policy on four example pods, then the upgrade story told against the
//! in-process simulated cluster, step by step.
//!
//! The verdicts come from the policy's own code compiled natively, the very functions the Wasm
//! module exports: the tests prove the module answers the same (`jumppod eval --policy
//! policy.wasm FILE` shows it for any file). So the demo needs no Wasm runtime and builds fast.

use crate::admission::PolicyAdmission;
use jumppod::schema;
use jumppod_host::api::{ClientOptions, Kube, client};
use jumppod_host::config::{Config, RawConfig};
use jumppod_host::{Gate, HostError, ensure, resolve, status};
use jumppod_review::{Native, Policy, admission_response, decode_patch, request_of};
use jumppod_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const FIXTURES: [(&str, &str, &str); 4] = [
    (
        "an ordinary pod",
        "ordinary_pod_create.json",
        include_str!("../../policy/test_data/ordinary_pod_create.json"),
    ),
    (
        "a conforming jump pod",
        "conforming_jump_pod_create.json",
        include_str!("../../policy/test_data/conforming_jump_pod_create.json"),
    ),
    (
        "a bare legacy BestEffort jump pod",
        "legacy_bare_pod_create.json",
        include_str!("../../policy/test_data/legacy_bare_pod_create.json"),
    ),
    (
        "an under-sized jump pod",
        "undersized_jump_pod_create.json",
        include_str!("../../policy/test_data/undersized_jump_pod_create.json"),
    ),
];

fn heading(text: &str) {
    println!("\n== {text}");
}

fn fixture(file: &str, text: &str) -> Result<Value, HostError> {
    serde_json::from_str(text).map_err(|e| {
        HostError::Config(jumppod_host::config::ConfigError {
            field: "fixture".into(),
            value: file.into(),
            problem: format!("is not JSON: {e}"),
        })
    })
}

/// Part (a): the four fixtures through the policy.
pub fn policy_part(policy: &dyn Policy) -> Result<(), HostError> {
    heading("The admission policy (its own code, natively: the Wasm module answers the same)");
    for (title, file, text) in FIXTURES {
        let document = fixture(file, text)?;
        let request = request_of(&document)?;
        let settings = document
            .get("settings")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let response = policy.validate(request, &settings)?;
        let answer = admission_response(request, &response);
        println!("\n{title} (policy/test_data/{file}):");
        if response.accepted {
            match decode_patch(&answer)? {
                None => println!("  allowed, unchanged"),
                Some(patch) => {
                    println!("  allowed, mutated by this JSONPatch:");
                    for op in &patch.0 {
                        let op = serde_json::to_value(op).unwrap_or_default();
                        println!(
                            "    {:<7} {} {}",
                            op["op"].as_str().unwrap_or(""),
                            op["path"].as_str().unwrap_or(""),
                            op.get("value").map(Value::to_string).unwrap_or_default()
                        );
                    }
                }
            }
        } else {
            println!(
                "  rejected ({}): {}",
                response.code.unwrap_or(400),
                response.message.unwrap_or_default()
            );
        }
        for w in response.warnings.unwrap_or_default() {
            println!("  warning: {w}");
        }
    }
    Ok(())
}

fn count_since(sim: &Sim, from: usize) -> usize {
    sim.requests().len() - from
}

/// Runs the demo.
pub async fn run() -> Result<(), HostError> {
    let policy: Arc<dyn Policy> = Arc::new(Native);
    policy_part(policy.as_ref())?;

    heading("The host against a simulated cluster (3 nodes, Kubewarden with the jumppod policy)");
    let sim = Sim::start(SimConfig {
        admission: Some(Arc::new(PolicyAdmission::new(policy.clone()))),
        kubelet_delay: Duration::from_millis(50),
        ..SimConfig::default()
    })
    .await
    .map_err(|e| HostError::NotReady(format!("cannot start the simulated cluster: {e:#}")))?;
    let options = ClientOptions {
        kubeconfig: Some(sim.kubeconfig_path().to_owned()),
        ..ClientOptions::default()
    };
    let (client, _) = client(&options).await?;
    let kube = || Kube::new(client.clone(), Duration::from_secs(30));
    let config: Config = RawConfig::from_text(
        "namespace: dstack\nproject: main\nssh_public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgZGVtbyBrZXkuLi4uLi4uLi4uLi4uLi4u main@dstack",
    )
    .and_then(|r| r.validate("default"))?;
    let name = config.name.clone();
    let gate = Gate::with_policy(policy.clone());

    heading("1. An older dstack left a bare BestEffort jump pod and its Service on NodePort 30022");
    sim.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dstack"}}));
    sim.seed(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "dstack", "labels": schema::legacy_selector(&name)},
        "spec": {"nodeName": "node-1", "restartPolicy": "Never", "containers": [
            {"name": schema::container_name(&name), "image": schema::DEFAULT_IMAGE}]},
        "status": {"phase": "Running", "qosClass": "BestEffort", "conditions": [
            {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}
    }));
    sim.seed(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": schema::service_name(&name), "namespace": "dstack"},
        "spec": {"type": "NodePort", "selector": schema::legacy_selector(&name),
                 "ports": [{"port": 22, "targetPort": 22, "nodePort": 30022, "protocol": "TCP"}]}
    }));
    print!("{}", status::status(&kube(), &config).await?);

    heading("2. resolve: no labelled pod yet, so it falls back to the bare pod");
    print!("{}", resolve::resolve(&kube(), &config).await?);

    heading(
        "3. ensure: the ReplicaSet is created (checked by the policy first); the pre-#3891 pod and its Service are left alone",
    );
    print!("{}", ensure(&kube(), &config, &gate).await?);
    sim.settle().await;
    print!("{}", status::status(&kube(), &config).await?);

    heading(
        "4. The kubelet evicts the bare pod (memory pressure: it was BestEffort); the old Service now routes nowhere",
    );
    sim.evict_pod("dstack", &name);
    sim.settle().await;
    match resolve::resolve(&kube(), &config).await {
        Ok(r) => print!("resolve: {r}"),
        Err(e) => println!("resolve: {e}"),
    }

    heading(
        "5. ensure: the finished pod is deleted, the Service recreated with the current selector on the same NodePort",
    );
    print!("{}", ensure(&kube(), &config, &gate).await?);
    sim.settle().await;
    let report = resolve::resolve(&kube(), &config).await?;
    print!("resolve: {report}");

    heading("6. The ReplicaSet's pod is evicted: the ReplicaSet replaces it, the NodePort stays");
    sim.evict_pod("dstack", &report.proxy.pod);
    sim.settle().await;
    let after = resolve::resolve(&kube(), &config).await?;
    print!("resolve: {after}");
    println!(
        "NodePort before the upgrade 30022, now {}: running jobs keep their ssh_proxy",
        after.proxy.port
    );

    heading("7. ensure in the steady state");
    let from = sim.requests().len();
    print!("{}", ensure(&kube(), &config, &gate).await?);
    println!("API requests: {}", count_since(&sim, from));
    let mut with_host = config.clone();
    with_host.hostname = Some("jump.example.com".into());
    let from = sim.requests().len();
    print!("resolve: {}", resolve::resolve(&kube(), &with_host).await?);
    println!(
        "API requests (hostname configured): {}",
        count_since(&sim, from)
    );
    print!("{}", status::status(&kube(), &config).await?);
    sim.shutdown().await;
    Ok(())
}
