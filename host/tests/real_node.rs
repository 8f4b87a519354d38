//! The host's jump pod on real nodes: the upstream kubelet, containerd and kube-proxy of
//! `jumppod-controlplane up --real-nodes 2` run the sshd of the ReplicaSet `ensure` creates,
//! from jumppod's own start script and the locally built Debian image, and a real OpenSSH
//! client reaches it through the Service's NodePort on 127.0.0.1. What the fake nodes of
//! `real_cluster.rs` cannot show: that the pod really serves SSH with the project's key, that
//! each pod makes its own host key (the image ships baked-in ones), that the kernel holds the
//! pod to the limits the policy checked (its cgroup), that a pod the Eviction API removes is
//! replaced and reached again on the same NodePort, and that a pre-#3891 server's bare pod,
//! sized by the real `jumppod webhook`, runs Guaranteed.
//!
//! `make real-node-scenarios` runs this file inside a control plane with real nodes (feature
//! `real-node`); it needs root, as the real nodes do.

mod real_node_support;

use futures::StreamExt;
use jumppod_host::api::Kube;
use jumppod_host::{Gate, resolve};
use jumppod_plan::config::{Config, RawConfig};
use jumppod_plan::manifest::HANDOVER_SECONDS as HANDOVER;
use jumppod_testkit::cluster::{
    CleanUp, admin, cluster_dir, namespace, policy_webhook_for, typed, wait_for_up_to,
};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::{EvictParams, ListParams, PostParams, WatchEvent, WatchParams};
use real_node_support::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The scenarios that take a node away (its power cut, a drain, a cordon, the autoscaler's
/// taint) run alone: every other one holds this for reading while it runs, so none of them
/// finds its node gone.
static NODES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// What every scenario starts with, in this order: its hold on the nodes (shared, or alone for
/// the power cut), the real nodes, the admin client, its namespace (removed when this is
/// dropped, before the hold is let go) and the project's key pair in its directory.
struct Scenario {
    nodes: RealNodes,
    kube: Kube,
    ns: &'static str,
    dir: PathBuf,
    key: PathBuf,
    public: String,
    _cleanup: CleanUp,
    _hold: Hold,
}

/// A guard of [`NODES`], read or write, held for the scenario's length.
type Hold = Box<dyn std::any::Any + Send + Sync>;

impl Scenario {
    async fn start(ns: &'static str, hold: Hold) -> Scenario {
        let nodes = real_nodes();
        let cleanup = CleanUp(ns.into());
        let kube = admin().await;
        namespace(&kube, ns).await;
        let dir = cluster_dir().join(ns);
        let (key, public) = key_pair(&dir.join("project"));
        Scenario {
            nodes,
            kube,
            ns,
            dir,
            key,
            public,
            _cleanup: cleanup,
            _hold: hold,
        }
    }

    /// Beside the other scenarios.
    async fn shared(ns: &'static str) -> Scenario {
        Scenario::start(ns, Box::new(NODES.read().await)).await
    }

    /// While no other scenario runs.
    async fn alone(ns: &'static str) -> Scenario {
        Scenario::start(ns, Box::new(NODES.write().await)).await
    }

    /// The project's configuration, its pod placed as `placement` says.
    fn config(&self, placement: &Placement) -> Config {
        config(self.ns, &self.nodes, placement, &self.public)
    }
}

/// The node `--pressure-headroom` set up (controlplane/realnode.go `pressureInfo`): its kubelet
/// evicts for memory once the machine's available memory falls that far below what it was
/// when the node started.
struct Pressure {
    node: String,
    taint_key: String,
    headroom: u64,
    threshold: u64,
}

fn pressure() -> Pressure {
    let ready = cluster_dir().join("ready.json");
    let ready: Value =
        serde_json::from_str(&std::fs::read_to_string(&ready).unwrap()).expect("ready.json");
    let pressure = &ready["real_nodes"]["pressure"];
    assert!(
        pressure.is_object(),
        "the control plane in {} has no pressure node: `make real-node-scenarios` starts one \
         (jumppod-controlplane run --real-nodes 2 --pressure-headroom 2Gi)",
        cluster_dir().display()
    );
    let field = |name: &str| {
        pressure[name]
            .as_str()
            .unwrap_or_else(|| panic!("ready.json: real_nodes.pressure.{name} missing"))
            .to_owned()
    };
    let bytes = |name: &str| {
        pressure[name]
            .as_u64()
            .unwrap_or_else(|| panic!("ready.json: real_nodes.pressure.{name} missing"))
    };
    Pressure {
        node: field("node"),
        taint_key: field("taint")
            .split('=')
            .next()
            .unwrap_or_default()
            .to_owned(),
        headroom: bytes("headroom"),
        threshold: bytes("threshold"),
    }
}

/// The machine's memory.available as the kubelet computes it (cgroup v1, as the real nodes run):
/// MemTotal less the root cgroup's usage without its inactive file pages; what the pressure
/// node's threshold is compared with (controlplane/realnode.go `memoryAvailable`).
fn memory_available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let total = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("MemTotal in /proc/meminfo")
        * 1024;
    let read = |path: &str| {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e} (cgroup v1)"))
    };
    let usage: u64 = read("/sys/fs/cgroup/memory/memory.usage_in_bytes")
        .trim()
        .parse()
        .expect("memory.usage_in_bytes");
    let inactive_file: u64 = read("/sys/fs/cgroup/memory/memory.stat")
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    total.saturating_sub(usage.saturating_sub(inactive_file))
}

/// Where a test's pods go: the real nodes' label (and, for the pressure node, its hostname)
/// as node selector, and the taints they carry tolerated.
struct Placement {
    node_selector: Vec<(String, String)>,
    tolerated: Vec<String>,
    /// How long the pod stays bound to a node that is lost (unreachable or not ready): the
    /// `tolerationSeconds` of NoExecute tolerations for those taints. None: the API server's
    /// DefaultTolerationSeconds admission gives it 300 s.
    lost_node_after: Option<u32>,
}

impl Placement {
    /// Any real node but the pressure node.
    fn real(nodes: &RealNodes) -> Placement {
        Placement {
            node_selector: vec![nodes.label.clone()],
            tolerated: vec![nodes.taint_key.clone()],
            lost_node_after: None,
        }
    }

    /// Any real node, the pressure node too; a lost node is left after `seconds`.
    fn either(nodes: &RealNodes, pressure: &Pressure, seconds: u32) -> Placement {
        let mut placement = Placement::real(nodes);
        placement.tolerated.push(pressure.taint_key.clone());
        placement.lost_node_after = Some(seconds);
        placement
    }

    /// The pressure node only.
    fn pressed(nodes: &RealNodes, pressure: &Pressure) -> Placement {
        let mut placement = Placement::real(nodes);
        placement
            .node_selector
            .push(("kubernetes.io/hostname".into(), pressure.node.clone()));
        placement.tolerated.push(pressure.taint_key.clone());
        placement
    }

    /// The configuration's `node_selector` and `tolerations`.
    fn yaml(&self) -> String {
        let mut text = String::from("node_selector:\n");
        for (key, value) in &self.node_selector {
            text += &format!("  {key}: \"{value}\"\n");
        }
        text += "tolerations:\n";
        for key in &self.tolerated {
            text += &format!(
                "- key: {key}\n  operator: Equal\n  value: \"true\"\n  effect: NoSchedule\n"
            );
        }
        if let Some(seconds) = self.lost_node_after {
            for key in LOST_NODE_TAINTS {
                text += &format!(
                    "- key: {key}\n  operator: Exists\n  effect: NoExecute\n  tolerationSeconds: {seconds}\n"
                );
            }
        }
        text
    }

    /// A pod spec's `nodeSelector` and `tolerations`, merged into `spec`.
    fn on(&self, mut spec: Value) -> Value {
        let selector: serde_json::Map<String, Value> = self
            .node_selector
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        spec["nodeSelector"] = Value::Object(selector);
        spec["tolerations"] = self
            .tolerated
            .iter()
            .map(|key| json!({"key": key, "operator": "Equal", "value": "true", "effect": "NoSchedule"}))
            .chain(self.lost_node_after.into_iter().flat_map(|seconds| {
                LOST_NODE_TAINTS.map(|key| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}))
            }))
            .collect();
        spec
    }
}

/// The configuration of a project whose jump pod must land where `placement` says: the image
/// built for the real nodes, NodePorts on 127.0.0.1; as a file's text (the CLI reads it) and
/// validated.
fn config_text(ns: &str, nodes: &RealNodes, placement: &Placement, public_key: &str) -> String {
    format!(
        "namespace: {ns}\nproject: main\nssh_public_key: {public_key}\nhostname: 127.0.0.1\n\
         image: {image}\n{placement}",
        image = nodes.sshd_image,
        placement = placement.yaml(),
    )
}

fn config(ns: &str, nodes: &RealNodes, placement: &Placement, public_key: &str) -> Config {
    RawConfig::from_text(&config_text(ns, nodes, placement, public_key))
        .unwrap()
        .validate("default")
        .unwrap()
}

/// The ed25519 host key sshd at 127.0.0.1:`port` serves (ssh-keyscan), when it answers.
async fn host_key(port: i32) -> Option<String> {
    let output = tokio::process::Command::new("ssh-keyscan")
        .args([
            "-T",
            "5",
            "-t",
            "ed25519",
            "-p",
            &port.to_string(),
            "127.0.0.1",
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .next()
        .map(str::to_owned)
}

/// Waits until `resolve` answers with a ready pod other than `not`, and SSH through its
/// NodePort with `key` lands in that pod (its hostname is the pod's name); returns the pod's
/// name and the port. Fails with the last thing that stood in the way.
async fn reached(kube: &Kube, config: &Config, key: &Path, not: Option<&str>) -> (String, i32) {
    reached_within(kube, config, key, not, POD_UP).await
}

/// [`reached`], waiting up to `limit`.
async fn reached_within(
    kube: &Kube,
    config: &Config,
    key: &Path,
    not: Option<&str>,
    limit: Duration,
) -> (String, i32) {
    let deadline = Instant::now() + limit;
    loop {
        let last = match resolve::resolve(kube, config).await {
            Err(e) => format!("resolve: {e}"),
            Ok(report) if not == Some(report.proxy.pod.as_str()) => {
                format!("resolve still names {}", report.proxy.pod)
            }
            Ok(report) => match ssh(key, report.proxy.port, "hostname").await {
                Ok(hostname) if hostname == report.proxy.pod => {
                    return (report.proxy.pod, report.proxy.port);
                }
                Ok(hostname) => {
                    format!("ssh reached {hostname}, resolve names {}", report.proxy.pod)
                }
                Err(e) => e,
            },
        };
        assert!(
            Instant::now() < deadline,
            "ssh through the NodePort never reached a ready jump pod within {limit:?}: {last}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn pods(kube: &Kube, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(kube.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list pods")
        .items
}

/// The kernel holds `pod` to the jump pod's default size: a Guaranteed pod's cgroup sits
/// directly under kubepods (cgroupfs driver, cgroup v1 here, the node's own cgroup root), with
/// the limits the policy checked as equal to the requests: 1Gi of memory, 500m of cpu (a 50 ms
/// quota per 100 ms period).
fn held_to_the_default_size(pod: &Pod) {
    let uid = pod.metadata.uid.clone().unwrap();
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let cgroup = |controller: &str, file: &str| {
        let path = format!("/sys/fs/cgroup/{controller}/jumppod-{node}/kubepods/pod{uid}/{file}");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
            .trim()
            .to_owned()
    };
    assert_eq!(
        cgroup("memory", "memory.limit_in_bytes"),
        (1u64 << 30).to_string()
    );
    assert_eq!(cgroup("cpu", "cpu.cfs_quota_us"), "50000");
    assert_eq!(cgroup("cpu", "cpu.cfs_period_us"), "100000");
}

/// What a dstack server before #3891 creates for project `main`: the legacy label alone, no
/// resources (BestEffort), here placed by `placement` and kept running by a shell that exits
/// 0 when stopped.
fn legacy_pod(nodes: &RealNodes, placement: &Placement) -> Pod {
    let name = jumppod::schema::jump_pod_name("main");
    sleeper(
        &name,
        jumppod::schema::legacy_selector(&name),
        &jumppod::schema::container_name(&name),
        nodes,
        placement,
    )
}

/// A pod of the sshd image that only sleeps, with `labels`, as `placement` says.
fn sleeper(
    name: &str,
    labels: std::collections::BTreeMap<String, String>,
    container: &str,
    nodes: &RealNodes,
    placement: &Placement,
) -> Pod {
    typed(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": placement.on(json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": container,
                "image": &nodes.sshd_image,
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"],
            }],
        })),
    }))
}

#[tokio::test]
async fn the_jump_pod_ensure_creates_serves_ssh_on_a_real_node_and_its_replacement_keeps_the_nodeport()
 {
    let scenario = Scenario::shared("real-node-ensure").await;
    let Scenario {
        kube, ns, dir, key, ..
    } = &scenario;
    let config = scenario.config(&Placement::real(&scenario.nodes));

    jumppod_host::ensure(kube, &config, &Gate::native())
        .await
        .expect("ensure");
    let (first, port) = reached(kube, &config, key, None).await;

    // The real kubelet ran it, on a real node, Guaranteed.
    let pod = Api::<Pod>::namespaced(kube.client.clone(), ns)
        .get(&first)
        .await
        .unwrap();
    let status = pod.status.as_ref().unwrap();
    assert_eq!(status.qos_class.as_deref(), Some("Guaranteed"));
    let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
    assert!(node.starts_with("real-node-"), "{first} runs on {node}");
    eprintln!("{first} reached by ssh on {node} through NodePort {port}");

    // And the kernel holds it to its size.
    held_to_the_default_size(&pod);

    // A stranger's key is refused by the same sshd.
    let (stranger_key, _) = key_pair(&dir.join("stranger"));
    let refused = ssh(&stranger_key, port, "hostname").await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("Permission denied")),
        "a key not in the Secret: {refused:?}"
    );

    let first_host_key = host_key(port).await.expect("the first pod's host key");

    // The Eviction API, as a drain or the descheduler uses it: the kubelet stops the pod, the
    // real ReplicaSet controller makes another, and the Service keeps its NodePort.
    Api::<Pod>::namespaced(kube.client.clone(), ns)
        .evict(&first, &EvictParams::default())
        .await
        .expect("evict the jump pod");
    jumppod_host::ensure(kube, &config, &Gate::native())
        .await
        .expect("ensure after the eviction");
    let (second, second_port) = reached(kube, &config, key, Some(&first)).await;
    assert_eq!(second_port, port, "the NodePort changed with the pod");
    let service: Service = Api::<Service>::namespaced(kube.client.clone(), ns)
        .get(&jumppod::schema::service_name(
            &jumppod::schema::jump_pod_name("main"),
        ))
        .await
        .unwrap();
    let node_port = service.spec.unwrap().ports.unwrap()[0].node_port;
    assert_eq!(node_port, Some(port));

    // Each pod made its own host key at start: the image's baked-in ones were removed first.
    let second_host_key =
        wait_for_up_to("the replacement's host key", POD_UP, || host_key(port)).await;
    assert_ne!(
        first_host_key, second_host_key,
        "two pods of the same image served the same host key"
    );

    let names: Vec<String> = pods(kube, ns)
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(
        names.contains(&second),
        "{second} missing from the namespace's pods {names:?}"
    );
}

/// The scenario's pod leaves a lost node after this long (its NoExecute tolerations of the
/// lost-node taints); without them the API server's DefaultTolerationSeconds gives 300 s.
const LOST_NODE_TOLERATION: u32 = 20;

/// From a power cut to SSH through the replacement: the node-lifecycle controller's grace for a
/// silent node (kube-controller-manager `--node-monitor-grace-period`, 50 s by default since
/// 1.32), the pod's toleration, then a pod's start.
const REPLACED_AFTER_A_POWER_CUT: Duration =
    Duration::from_secs(50 + LOST_NODE_TOLERATION as u64 + POD_UP.as_secs());

fn condition(pod: &Pod, type_: &str) -> Option<k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

fn node_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("a scheduled pod")
}

/// Issue 20 §2.5, a node lost: the node under the jump pod loses its power (its kubelet,
/// containerd and pods killed at once, the API server not told). The node-lifecycle controller
/// finds it silent and taints it unreachable; the taint-eviction controller deletes the pod
/// once its toleration runs out (the deletion cannot finish: no kubelet confirms it); the real
/// ReplicaSet controller makes a replacement, which the scheduler puts on the other node; and
/// SSH through the same NodePort reaches it. When the node boots, its kubelet finishes the old
/// pod's deletion and the replacement stays.
#[tokio::test]
async fn a_node_that_loses_its_power_has_its_jump_pod_replaced_on_the_other_node_behind_the_same_nodeport()
 {
    let scenario = Scenario::alone("real-node-lost").await;
    let Scenario { kube, ns, key, .. } = &scenario;
    let placement = Placement::either(&scenario.nodes, &pressure(), LOST_NODE_TOLERATION);
    let config = scenario.config(&placement);
    let pods = Api::<Pod>::namespaced(kube.client.clone(), ns);

    jumppod_host::ensure(kube, &config, &Gate::native())
        .await
        .expect("ensure");
    let (first, port) = reached(kube, &config, key, None).await;
    let lost = node_of(&pods.get(&first).await.unwrap());

    let power = PowerCut::cut(kube, &lost).await;
    let cut = Instant::now();
    let cut_at = k8s_openapi::jiff::Timestamp::now();
    // Its sshd went with it: nothing answers on the NodePort until a replacement is ready.
    let gone = wait_for_up_to(
        "the lost node's sshd to stop answering",
        Duration::from_secs(60),
        || async { ssh(key, port, "hostname").await.err() },
    )
    .await;
    eprintln!("{lost} lost its power; ssh through NodePort {port}: {gone}");

    let (second, second_port) =
        reached_within(kube, &config, key, Some(&first), REPLACED_AFTER_A_POWER_CUT).await;
    let took = cut.elapsed();
    assert_eq!(second_port, port, "the NodePort changed with the node");
    let other = node_of(&pods.get(&second).await.unwrap());
    assert_ne!(
        other, lost,
        "{second}, the replacement, runs on the lost node"
    );

    // What Kubernetes did meanwhile, as it did it.
    let (ready, taints) = node_state(kube, &lost).await;
    assert_eq!(
        ready, "Unknown",
        "{lost}'s Ready condition; taints {taints:?}"
    );
    assert!(
        taints
            .iter()
            .any(|t| *t == format!("{}:NoExecute", LOST_NODE_TAINTS[0])),
        "{lost} is not tainted {}: {taints:?}",
        LOST_NODE_TAINTS[0]
    );
    let old = pods.get(&first).await.unwrap();
    assert!(
        old.metadata.deletion_timestamp.is_some(),
        "{first}, on the lost node, is not being deleted"
    );
    let deleted = condition(&old, "DisruptionTarget");
    assert_eq!(
        deleted.as_ref().and_then(|c| c.reason.as_deref()),
        Some("DeletionByTaintManager"),
        "{first}'s DisruptionTarget condition"
    );

    // Where the time went, from the objects' own timestamps (whole seconds after the cut).
    let since = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.map_or("?".to_owned(), |t| {
            format!("{} s", t.0.as_second() - cut_at.as_second())
        })
    };
    let replacement = pods.get(&second).await.unwrap();
    let node_lost = Api::<Node>::all(kube.client.clone())
        .get(&lost)
        .await
        .unwrap()
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.last_transition_time);
    let ready_at = condition(&replacement, "Ready").and_then(|c| c.last_transition_time);
    eprintln!(
        "power cut on {lost} to ssh through NodePort {port} into {second} on {other}: {took:.1?}: \
         {lost} Ready Unknown at {}, {first} deleted by the taint-eviction controller at {} \
         ({LOST_NODE_TOLERATION} s of toleration), {second} created at {}, Ready at {}; \
         {lost} tainted {taints:?}",
        since(node_lost.as_ref()),
        since(
            deleted
                .as_ref()
                .and_then(|c| c.last_transition_time.as_ref())
        ),
        since(replacement.metadata.creation_timestamp.as_ref()),
        since(ready_at.as_ref()),
    );

    // The node boots: its kubelet finishes the old pod's deletion; the replacement serves on.
    let booted = power.restore(kube).await;
    wait_for_up_to(&format!("{first} gone"), POD_UP, || async {
        pods.get_opt(&first).await.unwrap().is_none().then_some(())
    })
    .await;
    let (serving, _) = reached(kube, &config, key, None).await;
    assert_eq!(serving, second, "the jump pod moved again after the boot");
    eprintln!("{lost} booted and Ready in {booted:.1?}; {first} deleted by its kubelet");
}

#[tokio::test]
async fn a_bare_legacy_pod_the_webhook_mutated_runs_guaranteed_on_a_real_node() {
    let scenario = Scenario::shared("real-node-webhook").await;
    let Scenario {
        kube, ns, nodes, ..
    } = &scenario;
    policy_webhook_for(kube, ns).await;

    let name = jumppod::schema::jump_pod_name("main");
    let legacy = legacy_pod(nodes, &Placement::real(nodes));
    let pods = Api::<Pod>::namespaced(kube.client.clone(), ns);
    let created = pods
        .create(&PostParams::default(), &legacy)
        .await
        .expect("the API server admits the legacy pod through the webhook");
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(jumppod::schema::INSTANCE_LABEL),
        Some(&name),
        "the webhook labels it: {labels:?}"
    );
    let running = wait_for_up_to(
        "the mutated legacy pod to run on a real node",
        POD_UP,
        || async {
            pods.get(&name)
                .await
                .ok()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        },
    )
    .await;
    assert_eq!(
        running.status.as_ref().and_then(|s| s.qos_class.as_deref()),
        Some("Guaranteed")
    );
    held_to_the_default_size(&running);
}

/// How long the kubelet may take from the pressure to the last of the three evictions: the
/// allocator's start, the eviction manager's round (10 s), the soft threshold's grace (5 s),
/// then one eviction after another, each once the last pod's cgroup is gone (at most 30 s);
/// measured about 33 s here.
const EVICTIONS_WITHIN: Duration = Duration::from_secs(240);

/// Whether the kubelet evicted `pod`: kubelet 1.36 marks it with a `DisruptionTarget`
/// condition (reason `TerminationByKubelet`); a container that exits 0 when stopped, as sshd
/// and these sleepers do, then leaves the pod `Succeeded`, not `Failed`/`Evicted`, so the
/// phase alone does not tell.
fn evicted_by_the_kubelet(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.type_ == "DisruptionTarget"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("TerminationByKubelet")
            })
        })
        || status.and_then(|s| s.reason.as_deref()) == Some("Evicted")
}

/// Issue 20 §2.4 and §2.7: memory pressure decided by the kubelet itself. On the pressure node
/// run a pre-#3891 server's bare jump pod (BestEffort) with its Service, a BestEffort
/// workload, jumppod's Guaranteed jump pod with an SSH session open on it, and `jumppod run`.
/// Then a pod allocates past the node's soft threshold. The kubelet evicts the two
/// BestEffort pods first, then the allocator (Burstable, using less than it requested, which
/// ranks it after pods over their requests), and the pressure ends: the Guaranteed jump pod
/// keeps running and the session stays open. The controller sees the pre-#3891 pod finished
/// and recreates its Service with the current selector on the same NodePort, through which
/// SSH now reaches the Guaranteed pod.
///
/// The kubelet ranks pods for memory (eviction `rankMemoryPressure`) by whether their usage
/// exceeds their request, then priority, then usage less request: the allocator uses what
/// takes the machine 768Mi past the threshold and requests 256Mi more, so its usage less
/// request (-256Mi) is above the jump pod's (its few MiB less 1Gi) and it goes before the jump
/// pod would.
#[tokio::test]
async fn under_memory_pressure_the_kubelet_evicts_the_besteffort_pods_and_keeps_the_guaranteed_jump_pod()
 {
    let scenario = Scenario::shared("real-node-pressure").await;
    let Scenario {
        kube,
        ns,
        dir,
        key,
        nodes,
        ..
    } = &scenario;
    let pressure = pressure();
    let placement = Placement::pressed(nodes, &pressure);
    let config = scenario.config(&placement);
    let pods = Api::<Pod>::namespaced(kube.client.clone(), ns);
    let name = jumppod::schema::jump_pod_name("main");

    // The upgrade in progress: the pre-#3891 pod and its Service, then jumppod's ReplicaSet.
    pods.create(&PostParams::default(), &legacy_pod(nodes, &placement))
        .await
        .expect("the pre-#3891 pod (no webhook in this namespace)");
    const PORT: i32 = 30222;
    jumppod_testkit::cluster::old_service_of(kube, ns, "main", PORT).await;
    let workload = sleeper(
        "workload",
        [("app".to_owned(), "workload".to_owned())].into(),
        "workload",
        nodes,
        &placement,
    );
    pods.create(&PostParams::default(), &workload)
        .await
        .expect("the BestEffort workload");
    jumppod_host::ensure(kube, &config, &Gate::native())
        .await
        .expect("ensure beside the pre-#3891 pod");
    let jump = wait_for_up_to("the ReplicaSet's pod to be Ready", POD_UP, || async {
        pods.list(
            &ListParams::default().labels(&format!("{}={name}", jumppod::schema::INSTANCE_LABEL)),
        )
        .await
        .ok()?
        .items
        .into_iter()
        .find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    })
    .await;
    let jump_name = jump.metadata.name.clone().unwrap();
    let jump_uid = jump.metadata.uid.clone().unwrap();
    assert_eq!(
        jump.status.as_ref().and_then(|s| s.qos_class.as_deref()),
        Some("Guaranteed")
    );
    for besteffort in [&name, "workload"] {
        let pod = wait_for_up_to(&format!("{besteffort} to run"), POD_UP, || async {
            pods.get(besteffort)
                .await
                .ok()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        })
        .await;
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.qos_class.as_deref()),
            Some("BestEffort"),
            "{besteffort}"
        );
    }

    // An SSH session on the Guaranteed pod, at its address on the harness's bridge (the
    // Service still selects the pre-#3891 pod).
    let jump_ip = jump.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
    let mut session = Session::open(key, &jump_ip, 22);
    session.still_open_after(0, "before the pressure").await;

    // `jumppod run`, as an operator runs it beside dstack.
    let template = dir.join("template.yaml");
    std::fs::write(
        &template,
        format!("image: {}\n{}", nodes.sshd_image, placement.yaml()),
    )
    .unwrap();
    let controller = jumppod_testkit::run::Controller::watching(
        &jumppod_testkit::cluster::admin_kubeconfig(),
        ns,
        &template,
        "info",
        &dir.join("controller.log"),
    );
    controller.leading().await;

    // The allocator: GNU tail buffers a stream without a newline whole, and the sleep after
    // head keeps tail from reaching the end of it. It takes what separates the machine from
    // the threshold now, at least the headroom, and 768 MiB more: the memory other processes
    // of the machine have given back since the node started (builds ending before the suites)
    // would otherwise leave it short of the threshold.
    const MIB: u64 = 1 << 20;
    let short_of_threshold = memory_available().saturating_sub(pressure.threshold);
    let uses = pressure.headroom.max(short_of_threshold) / MIB + 768;
    let requests = uses + 256;
    let allocator: Pod = typed(json!({
        "metadata": {"name": "allocator"},
        "spec": placement.on(json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "allocator",
                "image": &nodes.sshd_image,
                "command": ["/bin/sh", "-c", format!("{{ head -c {uses}m /dev/zero; exec sleep 3600; }} | tail > /dev/null")],
                "resources": {"requests": {"memory": format!("{requests}Mi"), "cpu": "10m"}},
            }],
        })),
    }));
    // The order of the kubelet's evictions, from a watch started before the pressure: every
    // change of the namespace's pods in the API server's order, so that a pod the controller
    // deletes as soon as it has finished (the pre-#3891 one) is seen evicted all the same.
    let from = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    // A watch client: its read timeout outlasts a quiet watch (the admin client's is 10 s).
    let (watcher, _) = jumppod_host::api::client(&jumppod_host::api::ClientOptions {
        kubeconfig: Some(jumppod_testkit::cluster::admin_kubeconfig()),
        watch: true,
        ..Default::default()
    })
    .await
    .expect("a watch client");
    let mut changes = Api::<Pod>::namespaced(watcher, ns)
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch the pods")
        .boxed();
    let pressed_at = Instant::now();
    pods.create(&PostParams::default(), &allocator)
        .await
        .expect("the allocator");
    eprintln!(
        "pressure node {}: soft threshold {} MiB available, {} MiB short of it; allocator \
         requests {requests} MiB, uses {uses} MiB",
        pressure.node,
        pressure.threshold / MIB,
        short_of_threshold / MIB
    );
    let watched = [name.as_str(), "workload", "allocator", jump_name.as_str()];
    let mut order: Vec<(String, Duration)> = Vec::new();
    while !order.iter().any(|(p, _)| p == "allocator") {
        let left = EVICTIONS_WITHIN.saturating_sub(pressed_at.elapsed());
        let change = tokio::time::timeout(left, changes.next()).await;
        let pod = match change {
            Err(_) => panic!("the kubelet evicted only {order:?} within {EVICTIONS_WITHIN:?}"),
            Ok(None) => panic!("the watch ended; evicted so far: {order:?}"),
            Ok(Some(Err(e))) => panic!("the watch failed: {e}; evicted so far: {order:?}"),
            Ok(Some(Ok(
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) | WatchEvent::Deleted(pod),
            ))) => pod,
            Ok(Some(Ok(_))) => continue,
        };
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        if watched.contains(&pod_name.as_str())
            && evicted_by_the_kubelet(&pod)
            && !order.iter().any(|(p, _)| *p == pod_name)
        {
            order.push((pod_name, pressed_at.elapsed()));
        }
    }
    // The node reports the pressure, and keeps saying so for the kubelet's
    // evictionPressureTransitionPeriod (5 minutes) after it ended.
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(kube.client.clone())
        .get(&pressure.node)
        .await
        .unwrap();
    let memory_pressure = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "MemoryPressure");
    eprintln!(
        "evicted by the kubelet, in order: {order:?}; the node's MemoryPressure: {:?}",
        memory_pressure
            .as_ref()
            .map(|c| (&c.status, &c.reason, &c.message))
    );
    assert_eq!(
        memory_pressure.map(|c| c.status).as_deref(),
        Some("True"),
        "the node's MemoryPressure condition"
    );
    let names: Vec<&str> = order.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        names.len(),
        3,
        "the two BestEffort pods, then the allocator: {order:?}"
    );
    assert_eq!(names[2], "allocator", "{order:?}");
    assert!(
        names.contains(&name.as_str()) && names.contains(&"workload"),
        "{order:?}"
    );

    // The Guaranteed jump pod is the same pod, still Ready, and the session still prints.
    let after = pods.get(&jump_name).await.expect("the jump pod");
    assert_eq!(after.metadata.uid.as_deref(), Some(jump_uid.as_str()));
    assert!(!evicted_by_the_kubelet(&after), "{after:?}");
    let seen = session.lines();
    session.still_open_after(seen, "after the evictions").await;

    // The controller recreated the pre-#3891 Service on the same NodePort: SSH through it now
    // lands in the Guaranteed pod.
    let port = jumppod_testkit::run::service_switched(kube, ns, "main").await;
    assert_eq!(port, PORT, "controller log:\n{}", controller.log());
    let (reached_pod, reached_port) = reached(kube, &config, key, None).await;
    assert_eq!(
        (reached_pod.as_str(), reached_port),
        (jump_name.as_str(), PORT)
    );
    eprintln!(
        "the Service was recreated on {PORT} and SSH reached {reached_pod} {:?} after the \
         pressure began",
        pressed_at.elapsed()
    );
}

/// How long a key change may take to reach the running pod: the kubelet refreshes a mounted
/// Secret on its pod sync (every `syncFrequency`, 1 minute by default, with jitter), then the
/// pod merges the mount every 10 s; measured 50-90 s here.
const KEY_PROPAGATION: Duration = Duration::from_secs(180);

/// `jumppod` itself, as an operator runs it, with the control plane's admin kubeconfig.
fn jumppod(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jumppod"))
        .arg("--kubeconfig")
        .arg(jumppod_testkit::cluster::admin_kubeconfig())
        .args(args)
        .output()
        .expect("the jumppod binary");
    assert!(
        out.status.success(),
        "jumppod {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `command` on `host` over SSH with the configuration file `config` (as dstack writes
/// one for a job: the jump pod as `ProxyJump`); its output, or why it failed.
async fn ssh_with(config: &Path, args: &[&str]) -> Result<String, String> {
    let mut ssh = tokio::process::Command::new("ssh");
    ssh.arg("-F").arg(config).args(args);
    outcome(ssh, Duration::from_secs(30)).await
}

/// Issue 20 §2.3: a user's key added with `jumppod keys add` opens a jump (`ssh -J`) through
/// the running jump pod to a job's pod running sshd, but runs no command on the jump pod
/// itself; after `jumppod keys remove` the same running pod refuses it. How long each took
/// is printed: the kubelet's Secret refresh on its pod sync, then the pod's merge.
#[tokio::test]
async fn a_users_key_added_by_the_cli_jumps_to_a_job_and_stops_once_removed() {
    let scenario = Scenario::shared("real-node-keys").await;
    let Scenario {
        kube,
        ns,
        dir,
        key,
        nodes,
        public,
        ..
    } = &scenario;
    let (alice, alice_public) = key_pair(&dir.join("alice"));
    let placement = Placement::real(nodes);
    let config = scenario.config(&placement);
    let config_file = dir.join("config.yaml");
    std::fs::write(&config_file, config_text(ns, nodes, &placement, public)).unwrap();
    jumppod_host::ensure(kube, &config, &Gate::native())
        .await
        .expect("ensure");
    let (jump_pod, port) = reached(kube, &config, key, None).await;

    // A job's pod: sshd with alice's key for root, as dstack puts the user's key in a job.
    let job: Pod = typed(json!({
        "metadata": {"name": "job"},
        "spec": placement.on(json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "job",
                "image": &nodes.sshd_image,
                "env": [{"name": "USER_KEY", "value": &alice_public}],
                "command": ["/bin/sh", "-c", "set -e; rm -f /etc/ssh/ssh_host_*; ssh-keygen -A; \
                    mkdir -p /run/sshd /root/.ssh; printf '%s\\n' \"$USER_KEY\" > /root/.ssh/authorized_keys; \
                    chmod 600 /root/.ssh/authorized_keys; exec /usr/sbin/sshd -D -e -o PasswordAuthentication=no"],
                "readinessProbe": {"tcpSocket": {"port": 22}, "periodSeconds": 1},
            }],
        })),
    }));
    let pods = Api::<Pod>::namespaced(kube.client.clone(), ns);
    pods.create(&PostParams::default(), &job)
        .await
        .expect("the job's pod");
    let job = wait_for_up_to("the job's sshd to be Ready", POD_UP, || async {
        pods.get("job").await.ok().filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    })
    .await;
    let job_ip = job.status.and_then(|s| s.pod_ip).unwrap();

    // The configuration a user's ssh gets: the jump pod on the NodePort, the job behind it.
    let ssh_config = dir.join("ssh_config");
    let common_options = format!(
        "  User root\n  IdentityFile {}\n  IdentitiesOnly yes\n  BatchMode yes\n  \
         StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  ConnectTimeout 5\n  \
         LogLevel ERROR\n",
        alice.display()
    );
    std::fs::write(
        &ssh_config,
        format!(
            "Host jump\n  HostName 127.0.0.1\n  Port {port}\n{common_options}\
             Host job\n  HostName {job_ip}\n{common_options}"
        ),
    )
    .unwrap();
    let through_the_jump = || ssh_with(&ssh_config, &["-J", "jump", "job", "hostname"]);
    let before = through_the_jump().await;
    assert!(
        before
            .as_ref()
            .is_err_and(|e| e.contains("Permission denied")),
        "alice's key before it is added: {before:?}"
    );

    let added_at = Instant::now();
    jumppod(&[
        "keys",
        "add",
        "-f",
        config_file.to_str().unwrap(),
        "--key-file",
        alice.with_extension("pub").to_str().unwrap(),
        "--name",
        "alice",
    ]);
    let hostname = wait_for_up_to(
        "alice's key to open a jump through the running pod",
        KEY_PROPAGATION,
        || async { through_the_jump().await.ok() },
    )
    .await;
    let add_took = added_at.elapsed();
    assert_eq!(hostname, "job");

    // On the jump pod itself her key runs nothing: command="/bin/false".
    let shell = ssh_with(&ssh_config, &["jump", "hostname"]).await;
    assert!(
        shell
            .as_ref()
            .is_err_and(|e| e.contains("exited exit status: 1")),
        "alice on the jump pod: {shell:?}"
    );

    let removed_at = Instant::now();
    jumppod(&[
        "keys",
        "remove",
        "-f",
        config_file.to_str().unwrap(),
        "alice",
    ]);
    let refused = wait_for_up_to(
        "alice's key to be refused by the running pod",
        KEY_PROPAGATION,
        || async {
            through_the_jump()
                .await
                .err()
                .filter(|e| e.contains("Permission denied"))
        },
    )
    .await;
    let remove_took = removed_at.elapsed();
    eprintln!(
        "keys on a real kubelet: added, the jump opened after {add_took:?}; removed, refused \
         after {remove_took:?} ({refused})"
    );

    // The same pod all along, and the project's key still works in it.
    let (still, still_port) = reached(kube, &config, key, None).await;
    assert_eq!((still.as_str(), still_port), (jump_pod.as_str(), port));
}

/// How long the disruption scenarios' sessions may go on once the old pod's listener has
/// closed: long enough to tell the session drain from the handover (the session is seen once
/// a second), short because each of the four scenarios waits it out with both nodes to itself.
const SESSION_DRAIN: u64 = 5;

/// The disruption scenarios' project: on either real node (the pressure node too: the
/// replacement needs the other one; the scenarios that take a node away run alone, so no
/// pressure is made there while they do, and the roll's Guaranteed pods are not what pressure
/// evicts), with [`SESSION_DRAIN`]; the configuration and its file's text.
fn disruption_config(scenario: &Scenario) -> (Config, String) {
    let placement = Placement::either(&scenario.nodes, &pressure(), 300);
    let text = format!(
        "{}session_drain_seconds: {SESSION_DRAIN}\n",
        config_text(scenario.ns, &scenario.nodes, &placement, &scenario.public)
    );
    let config = RawConfig::from_text(&text)
        .unwrap()
        .validate("default")
        .unwrap();
    (config, text)
}

/// The handover and the session drain: how long an open session outlives the start of its
/// pod's termination.
fn outlives() -> Duration {
    Duration::from_secs(u64::from(jumppod_plan::manifest::HANDOVER_SECONDS) + SESSION_DRAIN)
}

/// `kubectl drain` of `node`, only the project's pods evicted (the other scenarios' pods are
/// not there: the drain scenarios run alone); how long it took.
async fn drain(node: &str, config: &Config) -> Duration {
    only_ours_on(node, config).await;
    let started = Instant::now();
    let selector = format!(
        "--pod-selector={}={}",
        jumppod::schema::INSTANCE_LABEL,
        config.name
    );
    let out = kubectl(&[
        "drain",
        node,
        "--ignore-daemonsets",
        "--timeout=300s",
        &selector,
    ])
    .await;
    assert!(
        out.status.success(),
        "kubectl drain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed()
}

/// Waits (bounded) until the pods on `node` with the project's instance label are the
/// scenario's own. Every scenario's project is `main`, and a scenario that ended has its
/// namespace deleted, not waited for: a pod of it left on the node (the webhook scenario's
/// bare pod has no controller) would make `kubectl drain --pod-selector` refuse.
async fn only_ours_on(node: &str, config: &Config) {
    let kube = admin().await;
    let params = ListParams::default()
        .labels(&format!(
            "{}={}",
            jumppod::schema::INSTANCE_LABEL,
            config.name
        ))
        .fields(&format!("spec.nodeName={node}"));
    wait_for_up_to(
        &format!("the pods of ended scenarios gone from {node}"),
        POD_UP,
        || async {
            let pods = Api::<Pod>::all(kube.client.clone())
                .list(&params)
                .await
                .ok()?;
            pods.items
                .iter()
                .all(|p| p.metadata.namespace.as_deref() == Some(config.namespace.as_str()))
                .then_some(())
        },
    )
    .await;
}

/// Issue 34 §1-3, a planned disruption with no controller running: `kubectl drain` of the jump
/// pod's node. There is no PodDisruptionBudget, so nothing holds the drain: the eviction makes
/// the real ReplicaSet controller start a replacement at once (on the other node: this one is
/// cordoned). Meanwhile the old pod, terminating, keeps accepting for its handover (a serving
/// endpoint, which kube-proxy uses while no ready one exists), then stops its listener and
/// waits for its sessions, which the kubelet ends with the grace period. So: a new connection
/// every 200 ms through the NodePort is never refused, a session opened before the drain
/// answers until the handover and the session drain are over, the drain finishes when the old
/// pod is gone, and the replacement serves on the same NodePort.
#[tokio::test]
async fn a_drain_without_the_controller_refuses_no_connection_and_an_open_session_lasts_the_session_drain()
 {
    let scenario = Scenario::alone("real-node-drain").await;
    let Scenario { kube, ns, key, .. } = &scenario;
    let (config, _) = disruption_config(&scenario);
    jumppod_host::ensure(kube, &config, &Gate::native())
        .await
        .expect("ensure");
    let (first, port) = reached(kube, &config, key, None).await;
    let pods_api = Api::<Pod>::namespaced(kube.client.clone(), ns);
    let node = node_of(&pods_api.get(&first).await.unwrap());
    let mut session = Session::open(key, "127.0.0.1", port);
    session.still_open_after(0, "once opened").await;
    let probes = Probes::start(key, port);
    probes.answering(&first).await;

    let _uncordon = Restore(vec!["uncordon".into(), node.clone()]);
    only_ours_on(&node, &config).await;
    let started = Instant::now();
    let drained = drain(&node, &config).await;
    eprintln!("kubectl drain of {node} without the controller took {drained:?}");
    let old = pods_api.get_opt(&first).await.unwrap();
    assert!(old.is_none(), "{first} is still there after the drain");
    let last = session.ended(Duration::from_secs(30)).await;
    let lasted = last.duration_since(started);
    eprintln!("the session opened before the drain answered for {lasted:?} after it started");
    assert!(
        lasted + Duration::from_secs(3) >= outlives(),
        "the session stopped answering after {lasted:?}, before the handover and the session \
         drain ({:?}) were over",
        outlives()
    );

    let (second, second_port) = reached(kube, &config, key, Some(&first)).await;
    assert_eq!(second_port, port, "the NodePort changed");
    assert_ne!(node_of(&pods_api.get(&second).await.unwrap()), node);
    probes.answering(&second).await;
    probes.none_failed(&first, &second).await;
}

/// How a node is told to go away in the surge scenarios.
#[derive(Clone, Copy, Debug)]
enum GoingAway {
    /// `kubectl cordon`, what `kubectl drain` and node upgrades start with.
    Cordon,
    /// The cluster autoscaler's taint on a node it is about to remove (set by the test).
    AutoscalerTaint,
    /// Not the node: a new template (700m of cpu) applied to the ReplicaSet, and the pod
    /// marked retiring by hand, as the operator's docs roll it.
    Roll,
    /// `kubectl drain` at once (it cordons and evicts in the same second, as the cluster
    /// autoscaler evicts right after its taint): the eviction races the surge, and each may
    /// make a replacement.
    Drain,
}

/// Issue 34 §1 and §3, make-before-break by the controller: `jumppod run` watches the nodes;
/// once the jump pod's node is going away it marks the pod retiring and surges its ReplicaSet
/// to two replicas; the scheduler puts the new pod on the other node; once it is Ready the
/// ReplicaSet goes back to one, and the ReplicaSet controller removes the retiring pod (its
/// deletion cost is the lowest). A new connection every 200 ms is never refused, the open
/// session outlives the old pod's termination by the handover and the session drain, and a
/// `kubectl drain` afterwards has nothing left to wait for but that termination. Prints how
/// long the replacement took to be Ready.
async fn surge_scenario(ns: &'static str, how: GoingAway) {
    // A node going away leaves the other scenarios one node: it runs alone. The roll touches
    // no node, and its Guaranteed pods are never the ones memory pressure evicts.
    let scenario = match how {
        GoingAway::Roll => Scenario::shared(ns).await,
        GoingAway::Cordon | GoingAway::AutoscalerTaint | GoingAway::Drain => {
            Scenario::alone(ns).await
        }
    };
    let Scenario { kube, key, dir, .. } = &scenario;
    let (config, text) = disruption_config(&scenario);
    jumppod_host::ensure(kube, &config, &Gate::native())
        .await
        .expect("ensure");
    let (first, port) = reached(kube, &config, key, None).await;
    let pods_api = Api::<Pod>::namespaced(kube.client.clone(), ns);
    let node = node_of(&pods_api.get(&first).await.unwrap());

    // The controller, with the project's template (no drift), as the admin.
    let template = dir.join("controller.yaml");
    let per_project = ["project:", "ssh_public_key:", "hostname:", "namespace:"];
    let template_text: String = text
        .lines()
        .filter(|l| !per_project.iter().any(|p| l.starts_with(p)))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&template, template_text).unwrap();
    let controller = jumppod_testkit::run::Controller::watching(
        &jumppod_testkit::cluster::admin_kubeconfig(),
        ns,
        &template,
        "info",
        &dir.join("controller.log"),
    );
    controller.leading().await;

    let mut session = Session::open(key, "127.0.0.1", port);
    session.still_open_after(0, "once opened").await;
    // For the drain, through the other node too, as a client outside the cluster reaches it.
    let hosts = match how {
        GoingAway::Drain => vec!["127.0.0.1", scenario.nodes.other_than(&node)],
        _ => vec!["127.0.0.1"],
    };
    let probes = Probes::start_on(key, &hosts, port);
    probes.answering(&first).await;

    if let GoingAway::Drain = how {
        only_ours_on(&node, &config).await;
    }
    let started = Instant::now();
    let started_at = k8s_openapi::jiff::Timestamp::now();
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let _restore = match how {
        GoingAway::Cordon => {
            ok(kubectl(&["cordon", &node]).await);
            Some(Restore(vec!["uncordon".into(), node.clone()]))
        }
        GoingAway::AutoscalerTaint => {
            let taint = "ToBeDeletedByClusterAutoscaler=1733000000:NoSchedule";
            ok(kubectl(&["taint", "nodes", &node, taint]).await);
            Some(Restore(vec![
                "taint".into(),
                "nodes".into(),
                node.clone(),
                "ToBeDeletedByClusterAutoscaler-".into(),
            ]))
        }
        GoingAway::Roll => {
            let container = jumppod::schema::container_name(&config.name);
            let set = [
                "-n",
                ns,
                "set",
                "resources",
                "replicaset",
                &config.name,
                "-c",
                &container,
                "--requests=cpu=700m",
                "--limits=cpu=700m",
            ];
            ok(kubectl(&set).await);
            let mark = "jumppod.io/retiring=a new template";
            ok(kubectl(&["-n", ns, "annotate", "pod", &first, mark]).await);
            None
        }
        GoingAway::Drain => {
            let restore = Restore(vec!["uncordon".into(), node.clone()]);
            let drained = drain(&node, &config).await;
            eprintln!("kubectl drain of {node} with the controller took {drained:?}");
            Some(restore)
        }
    };

    // The old pod is deleted by the ReplicaSet once its replacement is Ready elsewhere.
    wait_for_up_to("the retiring pod deleted", POD_UP * 2, || async {
        pods_api
            .get_opt(&first)
            .await
            .unwrap()
            .map_or(Some(()), |p| p.metadata.deletion_timestamp.map(|_| ()))
    })
    .await;
    eprintln!(
        "{how:?}: {first} deleted within {:?}; controller log:\n{}",
        started.elapsed(),
        controller.log()
    );
    // The drain's eviction deleted it at the start; the surge ends once a replacement is Ready.
    let deleted_at = match how {
        GoingAway::Drain => started,
        _ => Instant::now(),
    };
    let sets = Api::<k8s_openapi::api::apps::v1::ReplicaSet>::namespaced(kube.client.clone(), ns);
    wait_for_up_to(
        "the ReplicaSet back at one, its record removed",
        POD_UP,
        || async {
            let rs = sets.get(&config.name).await.ok()?;
            let recorded = jumppod_testkit::run::surge_recorded(&rs);
            (!recorded && rs.spec?.replicas == Some(1)).then_some(())
        },
    )
    .await;

    if let GoingAway::Cordon = how {
        // The drain that follows has only the old pod's termination to wait for.
        let drained = drain(&node, &config).await;
        eprintln!("kubectl drain of {node} after the surge took {drained:?}");
    }
    let last = session.ended(outlives() + Duration::from_secs(30)).await;
    let lasted = last.saturating_duration_since(deleted_at);
    eprintln!("the open session answered for {lasted:?} after the old pod's deletion");
    assert!(
        lasted + Duration::from_secs(3) >= outlives(),
        "the session stopped answering {lasted:?} after the old pod's deletion, before the \
         handover and the session drain ({:?}) were over",
        outlives()
    );
    let (second, second_port) = reached(kube, &config, key, Some(&first)).await;
    assert_eq!(second_port, port, "the NodePort changed");
    let replacement = pods_api.get(&second).await.unwrap();
    let ready_at = condition(&replacement, "Ready").and_then(|c| c.last_transition_time);
    let made: Vec<String> = pods_api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.name.as_deref() != Some(&first))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    eprintln!(
        "{how:?}: {second} Ready {} s after it began; pods made meanwhile and left: {made:?}",
        ready_at.map_or("?".to_owned(), |t| (t.0.as_second()
            - started_at.as_second())
        .to_string())
    );
    if let GoingAway::Roll = how {
        let cpu = replacement.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("cpu"))
            .map(|q| q.0.clone());
        assert_eq!(
            cpu.as_deref(),
            Some("700m"),
            "the new pod has the new template"
        );
    } else {
        assert_ne!(
            node_of(&replacement),
            node,
            "the replacement is on the node going away"
        );
    }
    probes.answering(&second).await;
    probes.none_failed(&first, &second).await;
}

#[tokio::test]
async fn a_pod_marked_retiring_after_a_template_change_is_rolled_by_the_controller() {
    surge_scenario("real-node-roll", GoingAway::Roll).await;
}

#[tokio::test]
async fn a_cordoned_node_has_its_jump_pod_replaced_by_the_controller_before_the_drain() {
    surge_scenario("real-node-cordon", GoingAway::Cordon).await;
}

#[tokio::test]
async fn the_cluster_autoscalers_taint_has_the_jump_pod_replaced_like_a_cordon() {
    surge_scenario("real-node-autoscaler", GoingAway::AutoscalerTaint).await;
}

/// A drain that evicts at once with the controller running: the eviction and the surge race,
/// and each may make a replacement. None of the new connections through the NodePort, on
/// 127.0.0.1 and on the other node's address, is refused; the ReplicaSet ends at one.
#[tokio::test]
async fn a_drain_that_evicts_at_once_with_the_controller_refuses_no_connection_on_either_address() {
    surge_scenario("real-node-drain-now", GoingAway::Drain).await;
}

/// What the handover test's pod logs when it is stopped (plan/src/manifest.rs `SSHD_SCRIPT`).
const TERMINATING: [&str; 2] = [
    "jumppod: terminating: accepting for 20 s more, then sessions only",
    "jumppod: terminating: no session left",
];

/// The start script's handover as the real kubelet stops the pod, deleted with a session open
/// on it and a connection that never logs in held to its sshd (as a scanner on a public
/// NodePort holds one): sshd keeps accepting for the handover and stops at its end (the
/// handover ± 3 s); the pod's Ready condition turns False after that (its TCP probe: every
/// 2 s, three failures); the pod logs its termination; and once the session ends (the test
/// ends it when the pod is Ready False) the pod ends within a few seconds, waiting neither for
/// the stranger nor for its grace period (the handover and 60 s of session drain). With no
/// session at all it ends within a second of the handover, before its probe can fail three
/// times (its endpoint then goes with it), so the session is what lets the test see the
/// probe fail. A pod that ignored SIGTERM would accept until the kubelet's SIGKILL.
#[tokio::test]
async fn a_stopped_jump_pod_accepts_for_the_handover_then_ends_without_waiting_for_a_stranger() {
    const DRAIN: u64 = 60;
    let scenario = Scenario::shared("real-node-handover").await;
    let Scenario { kube, ns, key, .. } = &scenario;
    let text = format!(
        "{}session_drain_seconds: {DRAIN}\n",
        config_text(
            ns,
            &scenario.nodes,
            &Placement::real(&scenario.nodes),
            &scenario.public
        )
    );
    let config = RawConfig::from_text(&text)
        .unwrap()
        .validate("default")
        .unwrap();
    jumppod_host::ensure(kube, &config, &Gate::native())
        .await
        .expect("ensure");
    let (first, _) = reached(kube, &config, key, None).await;
    let pods_api = Api::<Pod>::namespaced(kube.client.clone(), ns);
    let pod = pods_api.get(&first).await.unwrap();
    let ip: std::net::IpAddr = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .expect("the pod's address")
        .parse()
        .unwrap();
    let log_path = cluster_dir().join(format!(
        "nodes/{}/pod-logs/{ns}_{first}_{}/{}/0.log",
        node_of(&pod),
        pod.metadata.uid.as_deref().unwrap(),
        jumppod::schema::container_name(&config.name)
    ));

    // Read from one open file: the kubelet removes the pod's log with the pod, which may be
    // before the last look at its path.
    let mut log_file = std::fs::File::open(&log_path)
        .unwrap_or_else(|e| panic!("the pod's log {}: {e}", log_path.display()));

    let mut session = Session::open(key, &ip.to_string(), 22);
    session.still_open_after(0, "once opened").await;
    // The stranger: sshd's banner read, its own sent, then silence.
    let mut stranger = tokio::net::TcpStream::connect((ip, 22))
        .await
        .expect("a connection to the pod's sshd");
    let mut banner = [0u8; 64];
    let read = tokio::io::AsyncReadExt::read(&mut stranger, &mut banner)
        .await
        .unwrap();
    assert!(banner[..read].starts_with(b"SSH-2.0-"), "{banner:?}");
    tokio::io::AsyncWriteExt::write_all(&mut stranger, b"SSH-2.0-stranger\r\n")
        .await
        .unwrap();

    pods_api
        .delete(&first, &Default::default())
        .await
        .expect("delete the pod");
    let stopped = Instant::now();
    let before = session.lines();
    let handover = Duration::from_secs(u64::from(HANDOVER));
    let slack = Duration::from_secs(3);
    // Every 200 ms: a new connection to sshd, the pod's Ready condition, its log; the session
    // ended once the pod is Ready False (or long after the handover, for the failure message).
    let (mut closed, mut unready, mut ended, mut gone) = (None, None, None, None);
    let (mut accepted, mut log, mut printed) = (0, String::new(), 0);
    while gone.is_none() {
        let at = stopped.elapsed();
        assert!(
            at < handover + Duration::from_secs(DRAIN + 30),
            "the pod still exists {at:?} after its deletion; its log:\n{log}"
        );
        let connect = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect((ip, 22)),
        )
        .await;
        match connect {
            Ok(Ok(_)) if closed.is_none() => accepted += 1,
            Ok(Ok(_)) => panic!("sshd accepted again at {at:?}, after refusing at {closed:?}"),
            _ => {
                closed.get_or_insert(at);
            }
        }
        match pods_api.get_opt(&first).await.unwrap() {
            None => gone = Some(stopped.elapsed()),
            Some(p) => {
                if condition(&p, "Ready").is_some_and(|c| c.status == "False") {
                    unready.get_or_insert(at);
                }
            }
        }
        if ended.is_none() && (unready.is_some() || at > handover + Duration::from_secs(15)) {
            printed = session.lines();
            session.end();
            ended = Some(stopped.elapsed());
        }
        std::io::Read::read_to_string(&mut log_file, &mut log).expect("read the pod's log");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    std::io::Read::read_to_string(&mut log_file, &mut log).expect("read the pod's log");
    let (closed, gone) = (closed.expect("sshd never refused"), gone.unwrap());
    eprintln!(
        "the stopped pod accepted {accepted} connections, refused from {closed:?}, was Ready \
         False from {unready:?}, its session ended at {ended:?} (after {printed} lines), the pod \
         gone at {gone:?} (grace period {} s); its log:\n{log}",
        u64::from(HANDOVER) + DRAIN
    );
    assert!(
        closed + slack >= handover && closed <= handover + slack,
        "sshd stopped accepting {closed:?} after the deletion, not at the end of the {handover:?} handover"
    );
    let unready = unready.expect("the pod was never Ready False");
    assert!(
        unready >= closed && unready <= closed + Duration::from_secs(3 * 2) + slack,
        "Ready turned False {unready:?} after the deletion; sshd stopped accepting at {closed:?}"
    );
    assert!(
        (printed - before) as u64 + 2 >= handover.as_secs(),
        "the session printed {} lines (one a second) between the deletion and the pod Ready False",
        printed - before
    );
    for line in TERMINATING {
        assert!(
            log.contains(line),
            "{line:?} missing from the pod's log:\n{log}"
        );
    }
    let ended = ended.unwrap();
    assert!(
        gone <= ended + Duration::from_secs(5),
        "the pod ended {gone:?} after its deletion, its last session {ended:?}"
    );
    drop(stranger);
}
