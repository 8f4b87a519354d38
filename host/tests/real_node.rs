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

mod common;

use common::cluster::{
    CleanUp, admin, cluster_dir, namespace, policy_webhook_for, typed, wait_for_up_to,
};
use jumppod_host::api::Kube;
use jumppod_host::{Gate, resolve};
use jumppod_plan::config::{Config, RawConfig};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{EvictParams, ListParams, PostParams};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a pod on a real node may take from its ReplicaSet to sshd answering: measured
/// 1.3-15.5 s on this machine under load; an image pull never happens (it is imported).
const POD_UP: Duration = Duration::from_secs(180);

/// The real nodes as `ready.json` describes them (controlplane/realnode.go `realNodesInfo`).
struct RealNodes {
    label: (String, String),
    taint_key: String,
    sshd_image: String,
}

fn real_nodes() -> RealNodes {
    let ready = cluster_dir().join("ready.json");
    let text = std::fs::read_to_string(&ready)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", ready.display()));
    let ready: Value = serde_json::from_str(&text).expect("ready.json is JSON");
    let real = &ready["real_nodes"];
    assert!(
        real.is_object(),
        "the control plane in {} has no real nodes: `make real-node-scenarios` starts one with \
         them (jumppod-controlplane run --real-nodes 2)",
        cluster_dir().display()
    );
    let text = |field: &str| {
        real[field]
            .as_str()
            .unwrap_or_else(|| panic!("ready.json: real_nodes.{field} missing"))
            .to_owned()
    };
    let (key, value) = text("label")
        .split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .expect("real_nodes.label is key=value");
    let taint = text("taint");
    let taint_key = taint.split('=').next().unwrap_or_default().to_owned();
    RealNodes {
        label: (key, value),
        taint_key,
        sshd_image: text("sshd_image"),
    }
}

/// A fresh ed25519 key pair, made by ssh-keygen; returns the private key's path and the
/// public key's line.
fn key_pair(dir: &Path) -> (PathBuf, String) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let private = dir.join("id_ed25519");
    let status = std::process::Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "real-node-test",
            "-f",
        ])
        .arg(&private)
        .status()
        .expect("ssh-keygen (openssh-client)");
    assert!(status.success(), "ssh-keygen failed: {status}");
    let public = std::fs::read_to_string(private.with_extension("pub")).unwrap();
    (private, public.trim().to_owned())
}

/// The configuration of a project whose jump pod must land on a real node: the image built
/// for them, their label as node selector, their taint tolerated, NodePorts on 127.0.0.1.
fn config(ns: &str, nodes: &RealNodes, public_key: &str) -> Config {
    let text = format!(
        "namespace: {ns}\nproject: main\nssh_public_key: {public_key}\nhostname: 127.0.0.1\n\
         image: {image}\nnode_selector:\n  {lk}: \"{lv}\"\ntolerations:\n\
         - key: {tk}\n  operator: Equal\n  value: \"true\"\n  effect: NoSchedule\n",
        image = nodes.sshd_image,
        lk = nodes.label.0,
        lv = nodes.label.1,
        tk = nodes.taint_key,
    );
    RawConfig::from_text(&text)
        .unwrap()
        .validate("default")
        .unwrap()
}

/// Runs `command` over SSH as root at 127.0.0.1:`port` with `key`, accepting any host key;
/// its output, or why it failed.
async fn ssh(key: &Path, port: i32, command: &str) -> Result<String, String> {
    let output = tokio::process::Command::new("ssh")
        .arg("-i")
        .arg(key)
        .args(["-p", &port.to_string()])
        .args([
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "LogLevel=ERROR",
            "root@127.0.0.1",
            command,
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(20), output).await {
        Err(_) => Err("ssh took more than 20 s".into()),
        Ok(Err(e)) => Err(format!("cannot run ssh: {e}")),
        Ok(Ok(out)) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }
        Ok(Ok(out)) => Err(format!(
            "ssh exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
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
    let deadline = Instant::now() + POD_UP;
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
            "ssh through the NodePort never reached a ready jump pod within {POD_UP:?}: {last}"
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

#[tokio::test]
async fn the_jump_pod_ensure_creates_serves_ssh_on_a_real_node_and_its_replacement_keeps_the_nodeport()
 {
    let nodes = real_nodes();
    let ns = "real-node-ensure";
    let _cleanup = CleanUp(ns.into());
    let kube = admin().await;
    namespace(&kube, ns).await;
    let dir = cluster_dir().join(ns);
    let (key, public) = key_pair(&dir.join("project"));
    let config = config(ns, &nodes, &public);

    jumppod_host::ensure(&kube, &config, &Gate::native())
        .await
        .expect("ensure");
    let (first, port) = reached(&kube, &config, &key, None).await;

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
    jumppod_host::ensure(&kube, &config, &Gate::native())
        .await
        .expect("ensure after the eviction");
    let (second, second_port) = reached(&kube, &config, &key, Some(&first)).await;
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

    let names: Vec<String> = pods(&kube, ns)
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(
        names.contains(&second),
        "{second} missing from the namespace's pods {names:?}"
    );
}

#[tokio::test]
async fn a_bare_legacy_pod_the_webhook_mutated_runs_guaranteed_on_a_real_node() {
    let nodes = real_nodes();
    let ns = "real-node-webhook";
    let _cleanup = CleanUp(ns.into());
    let kube = admin().await;
    namespace(&kube, ns).await;
    policy_webhook_for(&kube, ns).await;

    // What a dstack server before #3891 creates: the legacy label alone, no resources
    // (BestEffort), here placed on the real nodes and kept running by a shell.
    let name = jumppod::schema::jump_pod_name("main");
    let legacy: Pod = typed(json!({
        "metadata": {"name": name, "labels": jumppod::schema::legacy_selector(&name)},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {&nodes.label.0: &nodes.label.1},
            "tolerations": [{"key": &nodes.taint_key, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            "containers": [{
                "name": jumppod::schema::container_name(&name),
                "image": &nodes.sshd_image,
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"],
            }],
        },
    }));
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
