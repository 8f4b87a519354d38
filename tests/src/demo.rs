//! `jumppod demo`: the policy on four example pods, then the upgrade story told against the
//! in-process simulated cluster, step by step. Also the sim's admission hook backed by the
//! policy Wasm, as a Kubewarden cluster runs it (the scenario tests use it too).

use crate::api::Kube;
use crate::config::{Config, RawConfig};
use crate::error::HostError;
use crate::policy::{Policy, admission_response, decode_patch};
use crate::{PolicyGate, ensure, resolve, status};
use jumppod::schema;
use jumppod_sim::{Admission, AdmissionVerdict, Sim, SimConfig};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The policy as the cluster's admission webhook: pods and ReplicaSets are validated and
/// mutated on CREATE and UPDATE, with the JSONPatch kwctl/policy-server compute.
pub struct PolicyAdmission {
    pub policy: Arc<Policy>,
    pub settings: Value,
}

impl PolicyAdmission {
    pub fn new(policy: Arc<Policy>) -> PolicyAdmission {
        PolicyAdmission {
            policy,
            settings: json!({}),
        }
    }
}

impl Admission for PolicyAdmission {
    fn name(&self) -> &str {
        "jumppod.kubewarden.admission"
    }

    fn review(&self, request: &Value) -> AdmissionVerdict {
        match self.policy.validate(request, &self.settings) {
            Ok(response) => {
                let answer = admission_response(request, &response);
                let mut verdict = AdmissionVerdict {
                    allowed: response.accepted,
                    message: response.message.clone(),
                    code: response.code,
                    warnings: response.warnings.clone().unwrap_or_default(),
                    patch: None,
                };
                if let Ok(Some(patch)) = decode_patch(&answer) {
                    verdict.patch = serde_json::to_value(patch).ok();
                }
                verdict
            }
            Err(e) => AdmissionVerdict {
                allowed: false,
                message: Some(format!("the policy failed: {e:#}")),
                code: Some(500),
                ..AdmissionVerdict::default()
            },
        }
    }
}

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

/// Part (a): the four fixtures through the Wasm.
pub fn policy_part(policy: &Policy) -> Result<(), HostError> {
    heading("The admission policy, through the waPC runtime as Kubewarden runs it");
    for (title, file, text) in FIXTURES {
        let document: Value = serde_json::from_str(text).map_err(anyhow::Error::from)?;
        let request = crate::policy::admission_request(&document)?;
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
                    for op in serde_json::to_value(&patch)
                        .map_err(anyhow::Error::from)?
                        .as_array()
                        .into_iter()
                        .flatten()
                    {
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
pub async fn run(policy: Policy) -> Result<(), HostError> {
    let policy = Arc::new(policy);
    policy_part(&policy)?;

    heading("The host against a simulated cluster (3 nodes, Kubewarden with the jumppod policy)");
    let sim = Sim::start(SimConfig {
        admission: Some(Arc::new(PolicyAdmission::new(policy.clone()))),
        kubelet_delay: Duration::from_millis(50),
        ..SimConfig::default()
    })
    .await?;
    let options = crate::api::ClientOptions {
        kubeconfig: Some(sim.kubeconfig_path().to_owned()),
        ..crate::api::ClientOptions::default()
    };
    let (client, _) = crate::api::client(&options).await?;
    let kube = || Kube::new(client.clone(), Duration::from_secs(30));
    let config: Config = RawConfig::from_text(
        "namespace: dstack\nproject: main\nssh_public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDemo main@dstack",
    )
    .and_then(|r| r.validate("default"))?;
    let name = config.name.clone();
    let gate = PolicyGate::loaded(policy.clone());

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

    heading("2. resolve: no labelled pod yet, so it falls back to the legacy pod");
    print!("{}", resolve::resolve(&kube(), &config).await?);

    heading(
        "3. ensure: the ReplicaSet is created (checked by the policy first); the pre-#3891 pod and its Service are left alone",
    );
    print!("{}", ensure::ensure(&kube(), &config, &gate).await?);
    sim.settle().await;
    print!("{}", status::status(&kube(), &config).await?);

    heading(
        "4. The kubelet evicts the legacy pod (memory pressure: it was BestEffort); the old Service now routes nowhere",
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
    print!("{}", ensure::ensure(&kube(), &config, &gate).await?);
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
    print!("{}", ensure::ensure(&kube(), &config, &gate).await?);
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
