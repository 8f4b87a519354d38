//! The demo: the policy on four example pods, then the upgrade story told step by step against
//! the in-process simulated cluster (`make demo`), or against the real control plane from the
//! same code (`make demo-real`).
//!
//! The verdicts come from the policy's own code compiled natively, the very functions the Wasm
//! module exports: the tests prove the module answers the same (`jumppod eval --policy
//! policy.wasm FILE` shows it for any file). So the demo needs no Wasm runtime and builds fast.

use crate::admission::PolicyAdmission;
use crate::audit::Audit;
use jumppod::schema;
use jumppod_host::api::{ClientOptions, Kube, client};
use jumppod_host::{Gate, HostError, ensure, resolve, status};
use jumppod_plan::config::{Config, RawConfig};
use jumppod_review::{Native, Policy, admission_response, decode_patch, request_of};
use jumppod_sim::{Sim, SimConfig};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::path::PathBuf;
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
        HostError::Config(jumppod_plan::config::ConfigError {
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

/// Where the story is told: the in-process simulator (`make demo`), or the real control plane
/// `jumppod-controlplane run` started (`make demo-real`: JUMPPOD_CLUSTER_DIR names it). There
/// the host runs as the control plane's user `demo`, so that the audit log counts its requests
/// apart from the seeding's (as `admin`) and from any test's.
enum Cluster {
    Sim(Sim),
    Real { dir: PathBuf, admin: Kube },
}

/// Where the bare pod of the older release runs.
const NODE: &str = "node-1";

/// The host's user on the real control plane.
const DEMO_USER: &str = "demo";

impl Cluster {
    async fn start(policy: Arc<dyn Policy>) -> Result<Cluster, HostError> {
        if let Some(dir) = std::env::var_os("JUMPPOD_CLUSTER_DIR") {
            let dir = PathBuf::from(dir);
            heading(
                "The host against the real control plane (kube-apiserver, controllers and scheduler 1.36.3; fake nodes)",
            );
            let admin = connect(dir.join("admin.kubeconfig")).await?;
            return Ok(Cluster::Real { dir, admin });
        }
        heading(
            "The host against a simulated cluster (3 nodes, Kubewarden with the jumppod policy)",
        );
        let sim = Sim::start(SimConfig {
            admission: Some(Arc::new(PolicyAdmission::new(policy))),
            kubelet_delay: Duration::from_millis(50),
            ..SimConfig::default()
        })
        .await
        .map_err(|e| HostError::NotReady(format!("cannot start the simulated cluster: {e:#}")))?;
        Ok(Cluster::Sim(sim))
    }

    fn kubeconfig(&self) -> PathBuf {
        match self {
            Cluster::Sim(sim) => sim.kubeconfig_path().to_owned(),
            Cluster::Real { dir, .. } => dir.join(format!("users/{DEMO_USER}.kubeconfig")),
        }
    }

    /// What an older dstack left: the namespace, a running bare BestEffort pod with the
    /// pre-#3891 labels, its Service on `node_port`.
    async fn seed_legacy(&self, ns: &str, name: &str, node_port: i32) -> Result<(), HostError> {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": schema::legacy_selector(name)},
            "spec": {"nodeName": NODE, "restartPolicy": "Never", "containers": [
                {"name": schema::container_name(name), "image": schema::DEFAULT_IMAGE}]}
        });
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": schema::service_name(name), "namespace": ns},
            "spec": {"type": "NodePort", "selector": schema::legacy_selector(name),
                     "ports": [{"port": 22, "targetPort": 22, "nodePort": node_port, "protocol": "TCP"}]}
        });
        match self {
            Cluster::Sim(sim) => {
                let mut pod = pod;
                pod["status"] = json!({"phase": "Running", "qosClass": "BestEffort", "conditions": [
                    {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]});
                for object in [namespace, pod, service] {
                    sim.seed(object);
                }
            }
            Cluster::Real { admin, .. } => {
                let post = PostParams::default();
                let c = admin.client.clone();
                Api::<Namespace>::all(c.clone())
                    .create(&post, &typed(namespace)?)
                    .await
                    .map_err(kube_error("create the namespace"))?;
                Api::<Pod>::namespaced(c.clone(), ns)
                    .create(&post, &typed(pod)?)
                    .await
                    .map_err(kube_error("create the bare pod"))?;
                Api::<Service>::namespaced(c.clone(), ns)
                    .create(&post, &typed(service)?)
                    .await
                    .map_err(kube_error("create the old Service"))?;
                // The fake kubelet runs the pod.
                let pods: Api<Pod> = Api::namespaced(c, ns);
                wait("the bare pod to run", || async {
                    pods.get(name)
                        .await
                        .ok()
                        .is_some_and(|p| jumppod_plan::objects::is_ready(&p))
                })
                .await?;
            }
        }
        Ok(())
    }

    /// What the kubelet writes when it evicts a pod under memory pressure.
    async fn evict(&self, ns: &str, pod: &str) -> Result<(), HostError> {
        match self {
            Cluster::Sim(sim) => sim.evict_pod(ns, pod),
            Cluster::Real { admin, .. } => {
                Api::<Pod>::namespaced(admin.client.clone(), ns)
                    .patch_status(
                        pod,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {
                        "phase": "Failed", "reason": "Evicted",
                        "message": "The node was low on resource: memory.",
                        "conditions": [{"type": "Ready", "status": "False"}]}})),
                    )
                    .await
                    .map_err(kube_error("evict the pod"))?;
            }
        }
        Ok(())
    }

    /// Lets the controllers act: the simulator runs them once; on the real control plane, waits
    /// until a pod of the ReplicaSet other than `gone` is ready.
    async fn settle(
        &self,
        kube: &Kube,
        config: &Config,
        gone: Option<&str>,
    ) -> Result<(), HostError> {
        match self {
            Cluster::Sim(sim) => sim.settle().await,
            Cluster::Real { .. } => {
                let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &config.namespace);
                let selector = format!("{}={}", schema::INSTANCE_LABEL, config.name);
                wait("a ready pod of the ReplicaSet", || async {
                    pods.list(&ListParams::default().labels(&selector))
                        .await
                        .is_ok_and(|list| {
                            list.items.iter().any(|p| {
                                jumppod_plan::objects::is_ready(p)
                                    && p.metadata.deletion_timestamp.is_none()
                                    && Some(jumppod_plan::objects::name_of(&p.metadata)) != gone
                                    && jumppod_plan::objects::controller_of(p).is_some()
                            })
                        })
                })
                .await?;
            }
        }
        Ok(())
    }

    fn mark(&self) -> u64 {
        match self {
            Cluster::Sim(sim) => sim.requests().len() as u64,
            Cluster::Real { dir, .. } => Audit::new(dir.join("audit.log")).mark(),
        }
    }

    /// The host's API requests since `mark`: the simulator's log, or the apiserver's audit
    /// log (every request of the host's user, each in the log before it was answered).
    fn requests_since(&self, mark: u64) -> usize {
        match self {
            Cluster::Sim(sim) => sim.requests().len() - mark as usize,
            Cluster::Real { dir, .. } => Audit::new(dir.join("audit.log"))
                .by_user(mark, DEMO_USER)
                .len(),
        }
    }

    async fn stop(self) {
        if let Cluster::Sim(sim) = self {
            sim.shutdown().await;
        }
    }
}

async fn connect(kubeconfig: PathBuf) -> Result<Kube, HostError> {
    let options = ClientOptions {
        kubeconfig: Some(kubeconfig),
        ..ClientOptions::default()
    };
    let (client, _) = client(&options).await?;
    Ok(Kube::new(client, Duration::from_secs(30)))
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, HostError> {
    serde_json::from_value(value).map_err(|source| HostError::Encode {
        what: "a seed object",
        source,
    })
}

fn kube_error(what: &'static str) -> impl FnOnce(kube::Error) -> HostError {
    move |e| HostError::NotReady(format!("cannot {what}: {e}"))
}

/// Polls `ready` every 100 ms, for at most a minute.
async fn wait<F, Fut>(what: &str, mut ready: F) -> Result<(), HostError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !ready().await {
        if start.elapsed() > Duration::from_secs(60) {
            return Err(HostError::NotReady(format!("timed out waiting for {what}")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Runs the demo.
pub async fn run() -> Result<(), HostError> {
    let policy: Arc<dyn Policy> = Arc::new(Native);
    policy_part(policy.as_ref())?;

    let cluster = Cluster::start(policy.clone()).await?;
    let client = connect(cluster.kubeconfig()).await?.client;
    let kube = || Kube::new(client.clone(), Duration::from_secs(30));
    let config: Config = RawConfig::from_text(
        "namespace: dstack\nproject: main\nssh_public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgZGVtbyBrZXkuLi4uLi4uLi4uLi4uLi4u main@dstack",
    )
    .and_then(|r| r.validate("default"))?;
    let name = config.name.clone();
    let ns = config.namespace.clone();
    let gate = Gate::with_policy(policy.clone());

    heading("1. An older dstack left a bare BestEffort jump pod and its Service on NodePort 30022");
    cluster.seed_legacy(&ns, &name, 30022).await?;
    print!("{}", status::status(&kube(), &config).await?);

    heading("2. resolve: no labelled pod yet, so it falls back to the bare pod");
    print!("{}", resolve::resolve(&kube(), &config).await?);

    heading(
        "3. ensure: the ReplicaSet is created (checked by the policy first); the pre-#3891 pod and its Service are left alone",
    );
    print!("{}", ensure(&kube(), &config, &gate).await?);
    cluster.settle(&kube(), &config, None).await?;
    print!("{}", status::status(&kube(), &config).await?);

    heading(
        "4. The kubelet evicts the bare pod (memory pressure: it was BestEffort); the old Service now routes nowhere",
    );
    cluster.evict(&ns, &name).await?;
    cluster.settle(&kube(), &config, Some(&name)).await?;
    match resolve::resolve(&kube(), &config).await {
        Ok(r) => print!("resolve: {r}"),
        Err(e) => println!("resolve: {e}"),
    }

    heading(
        "5. ensure: the finished pod is deleted, the Service recreated with the current selector on the same NodePort",
    );
    print!("{}", ensure(&kube(), &config, &gate).await?);
    cluster.settle(&kube(), &config, Some(&name)).await?;
    let report = resolve::resolve(&kube(), &config).await?;
    print!("resolve: {report}");

    heading("6. The ReplicaSet's pod is evicted: the ReplicaSet replaces it, the NodePort stays");
    cluster.evict(&ns, &report.proxy.pod).await?;
    cluster
        .settle(&kube(), &config, Some(&report.proxy.pod))
        .await?;
    let after = resolve::resolve(&kube(), &config).await?;
    print!("resolve: {after}");
    println!(
        "NodePort before the upgrade 30022, now {}: running jobs keep their ssh_proxy",
        after.proxy.port
    );

    heading("7. ensure in the steady state");
    let from = cluster.mark();
    print!("{}", ensure(&kube(), &config, &gate).await?);
    println!("API requests: {}", cluster.requests_since(from));
    let mut with_host = config.clone();
    with_host.hostname = Some("jump.example.com".into());
    let from = cluster.mark();
    print!("resolve: {}", resolve::resolve(&kube(), &with_host).await?);
    println!(
        "API requests (hostname configured): {}",
        cluster.requests_since(from)
    );
    print!("{}", status::status(&kube(), &config).await?);
    cluster.stop().await;
    Ok(())
}
