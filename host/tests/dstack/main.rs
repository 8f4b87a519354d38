//! dstack's own Kubernetes backend on the real nodes: the code of the release operators run
//! (dstack 0.22.5, pinned in the virtual environment `make dstack-venv` makes), driven through
//! `tests/dstack/driver.py` as a server drives it, beside `jumppod webhook`. Its jump pod names
//! no node: each scenario's namespace places its pods on the real nodes by the namespace's
//! default node selector and tolerations (the API server's PodNodeSelector and
//! PodTolerationRestriction).
//!
//! `make real-node-scenarios` runs this file inside a control plane with real nodes (feature
//! `real-node`); it needs root, as the real nodes do.

#[path = "../real_node_support/mod.rs"]
mod real_node_support;

mod faults;
mod generations;
mod kit;

use jumppod::kit::{HANDOVER_SECONDS, pre_stop_script};
use jumppod_host::api::Kube;
use jumppod_testkit::cluster::{
    CleanUp, admin, admin_kubeconfig, cluster_dir, policy_webhook_for, typed, wait_for_up_to,
};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use real_node_support::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a change of the Secret may take to reach a running pod: the kubelet's periodic
/// sync (`syncFrequency`: a minute by default, plus jitter; `make real-node-scenarios` sets
/// `REAL_NODE_SYNC`) refreshes the mounted Secret, then the pod's merge loop (every 10 s)
/// copies it. Bounded for the default.
const KEY_PROPAGATION: Duration = Duration::from_secs(180);

/// The handover, as a duration.
fn handover() -> Duration {
    Duration::from_secs(u64::from(HANDOVER_SECONDS))
}

/// dstack's own code, run by `driver.py` in the virtual environment: each call one command,
/// its JSON answer.
struct Dstack {
    python: PathBuf,
    driver: PathBuf,
    namespace: String,
    image: String,
}

impl Dstack {
    /// dstack for `namespace`, its jump pod's image the real nodes' sshd image.
    fn new(namespace: &str, nodes: &RealNodes) -> Dstack {
        let var = |name: &str| {
            std::env::var_os(name).map(PathBuf::from).unwrap_or_else(|| {
                panic!("{name} is not set: `make dstack-venv` makes dstack's environment and the Makefile sets it")
            })
        };
        Dstack {
            python: var("JUMPPOD_DSTACK_PYTHON"),
            driver: var("JUMPPOD_DSTACK_DRIVER"),
            namespace: namespace.to_owned(),
            image: nodes.sshd_image.clone(),
        }
    }

    /// `driver.py <command> <args>`: its answer, or a failure with dstack's own error.
    async fn run(&self, command: &str, args: &[&str]) -> Value {
        let out = tokio::process::Command::new(&self.python)
            .arg(&self.driver)
            .arg("--kubeconfig")
            .arg(admin_kubeconfig())
            .args(["--namespace", &self.namespace, "--image", &self.image])
            .arg(command)
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .expect("dstack's python");
        assert!(
            out.status.success(),
            "dstack {command} {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "dstack {command}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// What `run_job` does for the jump pod: the pod and its NodePort Service, each created
    /// if either is missing. The uids and the NodePort.
    async fn jump_pod(&self, project: &Project) -> Value {
        self.run(
            "jump-pod",
            &[
                "--project",
                &project.name,
                "--project-key",
                &project.public_file(),
            ],
        )
        .await
    }

    /// What `update_provisioning_data` does once per job: `_check_and_configure_jump_pod_service`
    /// until it returns the job's SSH proxy, the job's users' `keys` appended over SSH.
    async fn configure(&self, project: &Project, keys: &[&Path]) -> Value {
        let private = project.key.display().to_string();
        let mut args = vec![
            "--project",
            &project.name,
            "--project-private-key",
            &private,
            "--hostname",
            "127.0.0.1",
        ];
        let keys: Vec<String> = keys.iter().map(|k| public_file(k)).collect();
        for key in &keys {
            args.extend(["--key", key]);
        }
        self.run("configure", &args).await
    }

    /// A job's users' `keys` appended to the jump pod over SSH, as `update_provisioning_data`
    /// appends them.
    async fn grant(&self, project: &Project, port: i32, keys: &[&Path]) {
        let private = project.key.display().to_string();
        let port = port.to_string();
        let mut args = vec![
            "--project-private-key",
            &private,
            "--hostname",
            "127.0.0.1",
            "--port",
            &port,
        ];
        let keys: Vec<String> = keys.iter().map(|k| public_file(k)).collect();
        for key in &keys {
            args.extend(["--key", key]);
        }
        self.run("grant", &args).await;
    }
}

/// The public key file of a private key made by [`key_pair`].
fn public_file(private: &Path) -> String {
    private.with_extension("pub").display().to_string()
}

/// A dstack project: its name and its SSH key pair (the project key dstack's server holds).
struct Project {
    name: String,
    key: PathBuf,
}

impl Project {
    fn public_file(&self) -> String {
        public_file(&self.key)
    }

    /// `dstack-<project>-ssh-jump-pod`.
    fn jump_pod(&self) -> String {
        jumppod::schema::jump_pod_name(&self.name)
    }
}

/// The scenarios that take a node away (a drain, a power cut) run alone: every other one holds
/// this for reading while it runs, so none of them finds its node gone.
static NODES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A guard of [`NODES`], read or write, held for the scenario's length.
type Hold = Box<dyn std::any::Any + Send + Sync>;

/// What every scenario starts with, in this order: its hold on the nodes, the real nodes, the
/// admin client, its namespace (its pods placed on the real nodes; removed when this is dropped,
/// before the hold is let go), `jumppod webhook` registered for it, dstack, and project `main`
/// with its key pair.
struct Scenario {
    kube: Kube,
    ns: &'static str,
    dir: PathBuf,
    dstack: Dstack,
    project: Project,
    _cleanup: CleanUp,
    _hold: Hold,
}

impl Scenario {
    /// Beside the other scenarios.
    async fn start(ns: &'static str) -> Scenario {
        Scenario::with(ns, Box::new(NODES.read().await)).await
    }

    /// While no other scenario runs.
    async fn alone(ns: &'static str) -> Scenario {
        Scenario::with(ns, Box::new(NODES.write().await)).await
    }

    async fn with(ns: &'static str, hold: Hold) -> Scenario {
        let nodes = real_nodes();
        let cleanup = CleanUp(ns.into());
        let kube = admin().await;
        placed_namespace(&kube, ns, &nodes).await;
        policy_webhook_for(&kube, ns).await;
        let dir = cluster_dir().join(ns);
        let (key, _) = key_pair(&dir.join("project"));
        Scenario {
            dstack: Dstack::new(ns, &nodes),
            kube,
            ns,
            dir,
            project: Project {
                name: "main".into(),
                key,
            },
            _cleanup: cleanup,
            _hold: hold,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.kube.client.clone(), self.ns)
    }

    /// A user's key pair, `name` in its comment's directory.
    fn user(&self, name: &str) -> PathBuf {
        key_pair(&self.dir.join(name)).0
    }

    /// dstack's jump pod, created by dstack, Ready, and reached by SSH with the project's key
    /// through the NodePort (once kube-proxy has its endpoint); the pod and its NodePort.
    async fn ready_jump_pod(&self) -> (Pod, i32) {
        let created = self.dstack.jump_pod(&self.project).await;
        let port = created["node_port"].as_i64().expect("dstack's NodePort") as i32;
        let name = self.project.jump_pod();
        let pod = ready(&self.pods(), &name).await;
        let what = format!("ssh through NodePort {port} to reach {name}");
        wait_for_up_to(&what, POD_UP, || async {
            ssh(&self.project.key, port, "hostname")
                .await
                .ok()
                .filter(|hostname| *hostname == name)
        })
        .await;
        (pod, port)
    }

    /// `jumppod keys` on this project's Secret.
    fn keys(&self, args: &[&str]) {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_jumppod"))
            .arg("--kubeconfig")
            .arg(admin_kubeconfig())
            .arg("keys")
            .args(args)
            .args(["-n", self.ns, "-p", &self.project.name])
            .output()
            .expect("the jumppod binary");
        assert!(
            out.status.success(),
            "jumppod keys {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The namespace, its pods placed on the real nodes: their label as the default node selector
/// (PodNodeSelector), and their taint, and the pressure node's if there is one, tolerated by
/// default (PodTolerationRestriction): a pod has two nodes to be on, as a drain needs.
async fn placed_namespace(kube: &Kube, ns: &str, nodes: &RealNodes) {
    let (label, value) = &nodes.label;
    let ready: Value = serde_json::from_str(
        &std::fs::read_to_string(cluster_dir().join("ready.json")).expect("ready.json"),
    )
    .expect("ready.json is JSON");
    let pressure = ready["real_nodes"]["pressure"]["taint"]
        .as_str()
        .and_then(|t| t.split('=').next());
    let tolerations: Vec<Value> = std::iter::once(nodes.taint_key.as_str())
        .chain(pressure)
        .map(
            |key| json!({"key": key, "operator": "Equal", "value": "true", "effect": "NoSchedule"}),
        )
        .collect();
    let namespace: Namespace = typed(json!({"metadata": {"name": ns, "annotations": {
        "scheduler.alpha.kubernetes.io/node-selector": format!("{label}={value}"),
        "scheduler.alpha.kubernetes.io/defaultTolerations": Value::from(tolerations).to_string(),
    }}}));
    Api::<Namespace>::all(kube.client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create the namespace");
}

fn condition(pod: &Pod, type_: &str) -> Option<bool> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status == "True")
}

/// Waits (bounded) until the pod `name` is Ready.
async fn ready(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for_up_to(&format!("{name} to be Ready"), POD_UP, || async {
        pods.get(name)
            .await
            .ok()
            .filter(|p| condition(p, "Ready") == Some(true))
    })
    .await
}

/// What the jump pod's container wrote (`kubectl logs`); empty once it is gone.
fn jump_pod_log(pod: &Pod) -> String {
    let container = &pod.spec.as_ref().expect("a spec").containers[0].name;
    container_log(pod, container).unwrap_or_default()
}

/// SSH with `user`'s key through the jump pod at the NodePort (`ssh -W`, as `ssh -J` does) to
/// the pod's own sshd, where the project's key logs in: the hostname it answers, or why not.
async fn jump(user: &Path, project: &Path, port: i32) -> Result<String, String> {
    let proxy = format!(
        "ProxyCommand=ssh {} -i {} -p {port} -W %h:%p root@127.0.0.1",
        SSH_OPTIONS.join(" "),
        user.display()
    );
    let mut ssh = tokio::process::Command::new("ssh");
    ssh.arg("-i")
        .arg(project)
        .args(SSH_OPTIONS)
        .args(["-o", &proxy, "root@127.0.0.1", "hostname"]);
    outcome(ssh, Duration::from_secs(30)).await
}

/// Whether `key` is accepted jump-only: it jumps, and a shell of its own runs /bin/false.
async fn jump_only(key: &Path, project: &Path, port: i32, pod: &str) -> bool {
    let jumped = jump(key, project, port).await;
    let shell = ssh(key, port, "hostname").await;
    jumped.as_deref() == Ok(pod) && shell.is_err_and(|e| e.contains("exit status: 1"))
}

/// What happened to a deleted pod: when each thing was seen after the deletion.
struct Ending {
    /// The Ready condition first False.
    not_ready: Option<Duration>,
    /// The pod gone from the API.
    gone: Duration,
    /// The container's log, as last read before it went.
    log: String,
}

/// Deletes the pod (its own grace period) and watches it end, bounded by `limit`; when it was
/// deleted.
async fn delete_and_watch(pods: &Api<Pod>, name: &str, limit: Duration) -> (Instant, Ending) {
    pods.delete(name, &DeleteParams::default())
        .await
        .expect("delete the jump pod");
    let deleted = Instant::now();
    (deleted, watch_end(pods, name, deleted, limit).await)
}

/// Watches the pod `name` until it is gone, bounded by `limit`: each thing seen after `since`.
async fn watch_end(pods: &Api<Pod>, name: &str, since: Instant, limit: Duration) -> Ending {
    let (mut not_ready, mut log) = (None, String::new());
    loop {
        let Some(pod) = pods.get_opt(name).await.expect("read the pod") else {
            return Ending {
                not_ready,
                gone: since.elapsed(),
                log,
            };
        };
        if not_ready.is_none() && condition(&pod, "Ready") == Some(false) {
            not_ready = Some(since.elapsed());
        }
        // The log only grows, until the kubelet removes it with the pod.
        let read = jump_pod_log(&pod);
        if read.len() >= log.len() {
            log = read;
        }
        assert!(
            since.elapsed() < limit,
            "{name} still exists {limit:?} on; its log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The kit's steps as the pod logs them: each must be there, with the sessions it waited for
/// at the handover's end when the scenario knows them (`None`: connections every 200 ms, of
/// which one may be logged in at that moment).
fn logged_each_step(log: &str, sessions: Option<u32>) {
    let waiting = sessions.map_or(String::new(), |n| {
        format!(" {n} authenticated SSH connection(s)")
    });
    for step in [
        format!("jumppod: stopping: sshd accepts new connections for {HANDOVER_SECONDS} s more"),
        format!(
            "jumppod: handover over: the readiness probe fails from now on; waiting for{waiting}"
        ),
        "jumppod: no authenticated SSH connection left after".into(),
        "jumppod: stopping the sshd listener (pid ".into(),
    ] {
        assert!(log.contains(&step), "{step:?} not in the pod's log:\n{log}");
    }
}
