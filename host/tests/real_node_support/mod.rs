//! Shared by the test binaries that run on the real nodes of `jumppod-controlplane run
//! --real-nodes` (`real_node.rs`, `dstack/`): what the nodes are, key pairs, the OpenSSH client
//! through a NodePort, and a node's power cut, kubelet pause or containerd stop.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of this module"
)]

use jumppod_host::api::Kube;
use jumppod_testkit::cluster::{admin, cluster_dir, wait_for_up_to};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a pod on a real node may take from its creation to sshd answering: measured
/// 1.3-15.5 s on this machine under load; an image pull never happens (it is imported).
pub const POD_UP: Duration = Duration::from_secs(180);

/// The real nodes as `ready.json` describes them (controlplane/realnode.go `realNodesInfo`).
pub struct RealNodes {
    pub label: (String, String),
    pub taint_key: String,
    pub sshd_image: String,
    /// Each node's name and address on the harness's bridge, where its NodePorts answer too.
    pub addresses: Vec<(String, String)>,
}

pub fn real_nodes() -> RealNodes {
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
    let addresses = real["nodes"]
        .as_array()
        .expect("ready.json: real_nodes.nodes")
        .iter()
        .map(|n| {
            let field = |f: &str| n[f].as_str().expect("a node's name and ip").to_owned();
            (field("name"), field("ip"))
        })
        .collect();
    RealNodes {
        label: (key, value),
        taint_key,
        sshd_image: text("sshd_image"),
        addresses,
    }
}

impl RealNodes {
    /// The address of a real node other than `node`, where its NodePorts answer.
    pub fn other_than(&self, node: &str) -> &str {
        self.addresses
            .iter()
            .find(|(name, _)| name != node)
            .map(|(_, ip)| ip.as_str())
            .expect("a second real node")
    }
}

/// What the pod's `container` wrote (`kubectl logs`), read where its real kubelet keeps it (its
/// `podLogsDir`, controlplane/realnode.go): the API server has no client certificate for the
/// kubelets, so `kubectl logs` is refused (401) on these nodes. Why not, once the kubelet has
/// removed it with the pod.
pub fn container_log(pod: &Pod, container: &str) -> Result<String, String> {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let meta = &pod.metadata;
    let path = cluster_dir().join(format!(
        "nodes/{node}/pod-logs/{}_{}_{}/{container}/0.log",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default(),
    ));
    std::fs::read_to_string(&path).map_err(|e| format!("(no log at {}: {e})", path.display()))
}

/// A fresh ed25519 key pair, made by ssh-keygen; returns the private key's path and the
/// public key's line.
pub fn key_pair(dir: &Path) -> (PathBuf, String) {
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

/// What every SSH client of these tests says: only the key given, no prompt, any host key (each
/// pod makes its own), errors only, a bounded connect.
pub const SSH_OPTIONS: [&str; 12] = [
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
];

/// `ssh` running `command` as root at `host`:`port` with `key`, accepting any host key.
pub fn ssh_command(key: &Path, host: &str, port: i32, command: &str) -> tokio::process::Command {
    let mut ssh = tokio::process::Command::new("ssh");
    ssh.arg("-i")
        .arg(key)
        .args(["-p", &port.to_string()])
        .args(SSH_OPTIONS)
        .args([&format!("root@{host}"), command]);
    ssh
}

/// `ssh` with `user`'s key through the jump pod at 127.0.0.1:`port` (`ssh -W`, as `ssh -J`
/// does) to root at `target`:`target_port`, with `user`'s key there too, running `command`.
pub fn jump_command(
    user: &Path,
    port: i32,
    target: &str,
    target_port: u16,
    command: &str,
) -> tokio::process::Command {
    let proxy = format!(
        "ProxyCommand=ssh {} -i {} -p {port} -W %h:%p root@127.0.0.1",
        SSH_OPTIONS.join(" "),
        user.display()
    );
    let mut ssh = tokio::process::Command::new("ssh");
    ssh.arg("-i").arg(user).args(SSH_OPTIONS).args([
        "-o",
        &proxy,
        "-p",
        &target_port.to_string(),
        &format!("root@{target}"),
        command,
    ]);
    ssh
}

/// Runs `command` over SSH as root at 127.0.0.1:`port` with `key`, accepting any host key;
/// its output, or why it failed.
pub async fn ssh(key: &Path, port: i32, command: &str) -> Result<String, String> {
    ssh_at(key, "127.0.0.1", port, command).await
}

/// [`ssh`] at `host`.
pub async fn ssh_at(key: &Path, host: &str, port: i32, command: &str) -> Result<String, String> {
    outcome(
        ssh_command(key, host, port, command),
        Duration::from_secs(20),
    )
    .await
}

/// What an ssh client printed, if it succeeded within `limit`, else why not.
pub async fn outcome(mut ssh: tokio::process::Command, limit: Duration) -> Result<String, String> {
    let output = ssh
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(limit, output).await {
        Err(_) => Err(format!("ssh took more than {limit:?}")),
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

/// An SSH session left open: a remote loop that prints a line every second, whose lines are
/// counted as they come, and when the last one came.
pub struct Session {
    child: tokio::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<(usize, Option<Instant>)>>,
}

impl Session {
    /// The remote loop.
    const TICKS: &str = "while :; do echo tick; sleep 1; done";

    pub fn open(key: &Path, host: &str, port: i32) -> Session {
        Session::spawn(ssh_command(key, host, port, Session::TICKS))
    }

    /// A jump held open, as a dstack user's `ssh -J` to their job: through the jump pod at the
    /// NodePort `port` to the sshd at `target`:`target_port` ([`jump_command`]).
    pub fn jump(user: &Path, port: i32, target: &str, target_port: u16) -> Session {
        Session::spawn(jump_command(
            user,
            port,
            target,
            target_port,
            Session::TICKS,
        ))
    }

    fn spawn(mut ssh: tokio::process::Command) -> Session {
        let mut child = ssh
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("ssh");
        let lines = std::sync::Arc::new(std::sync::Mutex::new((0, None)));
        let count = lines.clone();
        let stdout = child.stdout.take().unwrap();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(_)) = reader.next_line().await {
                let mut seen = count.lock().unwrap();
                *seen = (seen.0 + 1, Some(Instant::now()));
            }
        });
        Session { child, lines }
    }

    pub fn lines(&self) -> usize {
        self.lines.lock().unwrap().0
    }

    /// Once it ended (within `limit`): when it last printed.
    pub async fn ended(mut self, limit: Duration) -> Instant {
        let exit = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the session still runs after {limit:?}"));
        eprintln!("the open session ended: {exit:?}");
        // Its output is read to the end once ssh has exited.
        wait_for_up_to(
            "the session's output read",
            Duration::from_secs(5),
            || async { (std::sync::Arc::strong_count(&self.lines) == 1).then_some(()) },
        )
        .await;
        self.lines.lock().unwrap().1.expect("a line")
    }

    /// Ends it from the client's side, as a user closing their terminal.
    pub async fn close(mut self) {
        let _ = self.child.kill().await;
    }

    /// Starts ending it from the client's side, without waiting.
    pub fn end(&mut self) {
        self.child.start_kill().expect("end the session");
    }

    /// Waits (bounded) for a line after the `seen`-th, with the session still open.
    pub async fn still_open_after(&mut self, seen: usize, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.lines() <= seen {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the SSH session ended ({status}) {what}");
            }
            assert!(
                Instant::now() < deadline,
                "the SSH session printed nothing for 20 s {what}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// One connection's outcome (the hostname that answered, or why none did), and when it was
/// made.
pub type Probe = (Instant, Result<String, String>);

/// A [`Probe`] with the index of the address it went through.
type Attempt = (usize, Instant, Result<String, String>);

/// A new SSH connection through the NodePort every 200 ms, to each of its addresses in turn,
/// until [`Probes::none_failed`] or [`Probes::stopped`]: the outcome of each, as they come. One
/// connection per 200 ms whatever the addresses: twice that rate met resets in the key exchange
/// ("Connection reset by peer"), what sshd answers past its MaxStartups (10 unauthenticated
/// connections at once), in a pod of 500m of cpu.
pub struct Probes {
    /// Where they connect: 127.0.0.1, a node's address.
    hosts: Vec<String>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Which address, when, and what came of it.
    outcomes: std::sync::Arc<std::sync::Mutex<Vec<Attempt>>>,
    began: Instant,
    task: tokio::task::JoinHandle<()>,
}

impl Probes {
    /// Through the NodePort at 127.0.0.1.
    pub fn start(key: &Path, port: i32) -> Probes {
        Probes::start_on(key, &["127.0.0.1"], port)
    }

    /// Through the NodePort at each of `hosts` in turn.
    pub fn start_on(key: &Path, hosts: &[&str], port: i32) -> Probes {
        let key = key.to_owned();
        let targets: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let outcomes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stopped, recorded) = (stop.clone(), outcomes.clone());
        let hosts = targets.clone();
        let task = tokio::spawn(async move {
            let mut attempts = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            for turn in (0..targets.len()).cycle() {
                if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                tick.tick().await;
                let (key, target, recorded) =
                    (key.clone(), targets[turn].clone(), recorded.clone());
                attempts.push(tokio::spawn(async move {
                    let made = Instant::now();
                    let outcome = ssh_at(&key, &target, port, "hostname").await;
                    recorded.lock().unwrap().push((turn, made, outcome));
                }));
            }
            for attempt in attempts {
                attempt.await.expect("an attempt's task");
            }
        });
        Probes {
            hosts,
            stop,
            outcomes,
            began: Instant::now(),
            task,
        }
    }

    /// How many connections `pod` answered so far, through each address.
    pub fn answered_on(&self, pod: &str) -> Vec<usize> {
        let outcomes = self.outcomes.lock().unwrap();
        (0..self.hosts.len())
            .map(|host| {
                outcomes
                    .iter()
                    .filter(|(h, _, o)| *h == host && o.as_ref().is_ok_and(|name| name == pod))
                    .count()
            })
            .collect()
    }

    /// How many connections `pod` answered so far, through every address.
    pub fn answered(&self, pod: &str) -> usize {
        self.answered_on(pod).iter().sum()
    }

    /// Waits (bounded) until `pod` has answered a few more connections than now through each
    /// address.
    pub async fn answering(&self, pod: &str) {
        let before = self.answered_on(pod);
        let (since, limit) = (self.outcomes.lock().unwrap().len(), Duration::from_secs(30));
        let deadline = Instant::now() + limit;
        while !self
            .answered_on(pod)
            .iter()
            .zip(&before)
            .all(|(n, b)| *n >= b + 3)
        {
            if Instant::now() > deadline {
                // What came instead: another pod's name, or why none answered.
                let seen: Vec<String> = self.outcomes.lock().unwrap()[since..]
                    .iter()
                    .map(|(h, at, o)| {
                        let at = at.saturating_duration_since(self.began);
                        format!("{} at {at:.1?}: {o:?}", self.hosts[*h])
                    })
                    .collect();
                panic!(
                    "timed out after {limit:?} waiting for {pod} to answer new connections; they got: {seen:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops them; every connection must have been answered, some by `second` through each
    /// address. Prints how many each pod answered through each.
    pub async fn none_failed(mut self, first: &str, second: &str) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (&mut self.task).await.unwrap();
        let outcomes = self.outcomes.lock().unwrap().clone();
        let (by_first, by_second) = (self.answered_on(first), self.answered_on(second));
        let mut failed = Vec::new();
        for (i, host) in self.hosts.iter().enumerate() {
            let made = outcomes.iter().filter(|(h, _, _)| *h == i).count();
            let errors: Vec<String> = outcomes
                .iter()
                .filter(|(h, _, _)| *h == i)
                .filter_map(|(_, at, o)| {
                    let at = at.saturating_duration_since(self.began);
                    o.as_ref().err().map(|e| format!("at {at:.1?}: {e}"))
                })
                .collect();
            eprintln!(
                "new connections through {host}: {made} made, {} failed; {} answered by {first}, {} by {second}",
                errors.len(),
                by_first[i],
                by_second[i]
            );
            failed.extend(errors.into_iter().map(|e| format!("{host}: {e}")));
        }
        assert!(
            failed.is_empty(),
            "refused or failed connections: {failed:?}"
        );
        for (i, host) in self.hosts.iter().enumerate() {
            assert!(
                by_second[i] > 0,
                "no connection through {host} reached the replacement"
            );
        }
    }

    /// Stops them; every connection's outcome, and when it was made, in the order they were
    /// made.
    pub async fn stopped(mut self) -> Vec<Probe> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (&mut self.task).await.unwrap();
        let mut outcomes: Vec<Probe> = self
            .outcomes
            .lock()
            .unwrap()
            .iter()
            .map(|(_, made, o)| (*made, o.clone()))
            .collect();
        outcomes.sort_by_key(|(made, _)| *made);
        outcomes
    }
}

/// The taints the node-lifecycle controller puts on a lost node, NoExecute: a pod leaves the
/// node once its toleration of them runs out.
pub const LOST_NODE_TAINTS: [&str; 2] = [
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/not-ready",
];

/// The annotation that makes `jumppod-controlplane` cut a real node's power and, removed, boot
/// it again (controlplane/power.go; `jumppod-controlplane node-not-ready` sets it).
pub const POWER_CUT: &str = "jumppod.test/not-ready";

/// A real node's power, cut until [`PowerCut::restore`] boots it again; dropped without that
/// (a panic), it boots the node on its own, so the scenarios after it find both nodes.
pub struct PowerCut {
    node: String,
    restored: bool,
}

impl PowerCut {
    pub async fn cut(kube: &Kube, node: &str) -> PowerCut {
        set_power(kube, node, false).await;
        PowerCut {
            node: node.to_owned(),
            restored: false,
        }
    }

    /// Boots the node; returns once it is Ready and no longer tainted as lost, with how long
    /// that took.
    pub async fn restore(mut self, kube: &Kube) -> Duration {
        self.restored = true;
        let began = Instant::now();
        set_power(kube, &self.node, true).await;
        back_up(kube, &self.node).await;
        began.elapsed()
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        if self.restored {
            return;
        }
        let node = self.node.clone();
        let boot = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to boot the node")
                .block_on(async {
                    let kube = admin().await;
                    set_power(&kube, &node, true).await;
                    back_up(&kube, &node).await;
                });
        });
        if boot.join().is_err() {
            eprintln!("{} did not boot again; see the panic above", self.node);
        }
    }
}

pub async fn set_power(kube: &Kube, node: &str, on: bool) {
    annotate_node(kube, node, POWER_CUT, !on).await;
}

/// Sets `annotation` to `"true"` on `node`, or removes it.
async fn annotate_node(kube: &Kube, node: &str, annotation: &str, set: bool) {
    let value = if set { json!("true") } else { Value::Null };
    let mut annotations = serde_json::Map::new();
    annotations.insert(annotation.into(), value);
    Api::<Node>::all(kube.client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .unwrap_or_else(|e| panic!("annotating {node} {annotation}: {e}"));
}

/// The annotation that makes `jumppod-controlplane` stop a real node's kubelet (SIGSTOP) and,
/// removed, continue it (SIGCONT); its containerd, pods and kube-proxy run on
/// (controlplane/power.go).
pub const KUBELET_PAUSE: &str = "jumppod.test/kubelet-paused";

/// A real node's kubelet, paused until [`KubeletPause::resume`]; dropped without that (a panic),
/// it continues the kubelet on its own, so the scenarios after it find the node whole.
pub struct KubeletPause {
    node: String,
    resumed: bool,
}

impl KubeletPause {
    /// Returns once the kubelet's process is stopped.
    pub async fn pause(kube: &Kube, node: &str) -> KubeletPause {
        annotate_node(kube, node, KUBELET_PAUSE, true).await;
        let pause = KubeletPause {
            node: node.to_owned(),
            resumed: false,
        };
        kubelet_stopped_is(node, true).await;
        pause
    }

    /// Returns once the kubelet's process runs again.
    pub async fn resume(mut self, kube: &Kube) {
        self.resumed = true;
        annotate_node(kube, &self.node, KUBELET_PAUSE, false).await;
        kubelet_stopped_is(&self.node, false).await;
    }
}

impl Drop for KubeletPause {
    fn drop(&mut self) {
        if self.resumed {
            return;
        }
        let node = self.node.clone();
        let resume = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to resume the kubelet")
                .block_on(async {
                    let kube = admin().await;
                    annotate_node(&kube, &node, KUBELET_PAUSE, false).await;
                    kubelet_stopped_is(&node, false).await;
                });
        });
        if resume.join().is_err() {
            eprintln!(
                "{}'s kubelet did not run again; see the panic above",
                self.node
            );
        }
    }
}

/// Waits (bounded) until the kubelet of `node` is stopped (state `T`), or runs, as `stopped`
/// says. The kubelets run on this machine: `jumppod-controlplane kubelet
/// --hostname-override=<node>` (controlplane/realnode.go).
async fn kubelet_stopped_is(node: &str, stopped: bool) {
    let flag = format!("--hostname-override={node}");
    let what = format!(
        "{node}'s kubelet {}",
        if stopped { "stopped" } else { "running" }
    );
    wait_for_up_to(&what, Duration::from_secs(20), || async {
        let state = std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                if args.get(1) != Some(&&b"kubelet"[..]) || !args.contains(&flag.as_bytes()) {
                    return None;
                }
                // /proc/PID/stat: the state follows the command's name, in parentheses.
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                Some(stat.rsplit_once(") ")?.1.split(' ').next()?.to_owned())
            })?;
        ((state == "T") == stopped).then_some(())
    })
    .await;
}

/// The annotation that makes `jumppod-controlplane` stop a real node's containerd (SIGTERM) and,
/// removed, start it again from its state; its shims and pods run on, and its kubelet reports
/// the node Ready False once it finds the runtime down (controlplane/power.go).
pub const CONTAINERD_STOPPED: &str = "jumppod.test/containerd-stopped";

/// A real node's containerd, stopped until [`ContainerdStop::start`]; dropped without that (a
/// panic), it starts containerd on its own, so the scenarios after it find the node whole.
pub struct ContainerdStop {
    node: String,
    started: bool,
}

impl ContainerdStop {
    /// Returns once containerd's process is gone.
    pub async fn stop(kube: &Kube, node: &str) -> ContainerdStop {
        annotate_node(kube, node, CONTAINERD_STOPPED, true).await;
        let stop = ContainerdStop {
            node: node.to_owned(),
            started: false,
        };
        containerd_runs(node, false).await;
        stop
    }

    /// Returns once containerd runs again, its socket answers, and the node is Ready with no
    /// not-ready taint.
    pub async fn start(mut self, kube: &Kube) {
        self.started = true;
        annotate_node(kube, &self.node, CONTAINERD_STOPPED, false).await;
        containerd_runs(&self.node, true).await;
        // The next scenario finds the node as it was: its kubelet has told the API server.
        back_up(kube, &self.node).await;
    }
}

impl Drop for ContainerdStop {
    fn drop(&mut self) {
        if self.started {
            return;
        }
        let node = self.node.clone();
        let start = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to start containerd")
                .block_on(async {
                    let kube = admin().await;
                    annotate_node(&kube, &node, CONTAINERD_STOPPED, false).await;
                    containerd_runs(&node, true).await;
                    back_up(&kube, &node).await;
                });
        });
        if start.join().is_err() {
            eprintln!(
                "{}'s containerd did not run again; see the panic above",
                self.node
            );
        }
    }
}

/// Waits (bounded: containerd's stop grace, 10 s, and its start) until the containerd of `node`
/// runs and its socket accepts connections, or its process is gone, as `runs` says. The
/// containerds run on this machine: `/usr/bin/containerd --config DIR/nodes/<node>/containerd.toml`
/// (controlplane/realnode.go); its socket is `ready.json`'s.
async fn containerd_runs(node: &str, runs: bool) {
    let config = format!("/{node}/containerd.toml");
    let socket = containerd_socket(node);
    let what = format!(
        "{node}'s containerd {}",
        if runs { "running" } else { "gone" }
    );
    wait_for_up_to(&what, Duration::from_secs(60), || async {
        let running = std::fs::read_dir("/proc").ok()?.flatten().any(|entry| {
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.first().is_some_and(|a| a.ends_with(b"/containerd"))
                && args.iter().any(|a| a.ends_with(config.as_bytes()))
        });
        let answers = std::os::unix::net::UnixStream::connect(&socket).is_ok();
        (if runs { running && answers } else { !running }).then_some(())
    })
    .await;
}

/// The path of `node`'s containerd socket, as `ready.json` gives it.
fn containerd_socket(node: &str) -> PathBuf {
    let ready = cluster_dir().join("ready.json");
    let text = std::fs::read_to_string(&ready)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", ready.display()));
    let ready: Value = serde_json::from_str(&text).expect("ready.json is JSON");
    let nodes = ready["real_nodes"]["nodes"].as_array().cloned();
    nodes
        .unwrap_or_default()
        .iter()
        .find(|n| n["name"] == node)
        .and_then(|n| n["containerd_socket"].as_str())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("ready.json: no containerd_socket for {node}"))
}

/// The node's Ready condition (`Unknown` once the node-lifecycle controller has not heard
/// from it for its grace period) and the keys of its taints.
pub async fn node_state(kube: &Kube, node: &str) -> (String, Vec<String>) {
    let node = Api::<Node>::all(kube.client.clone())
        .get(node)
        .await
        .expect("read the node");
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status)
        .unwrap_or_default();
    let taints = node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    (ready, taints)
}

/// Waits until `node` is Ready and carries none of the lost-node taints.
pub async fn back_up(kube: &Kube, node: &str) {
    wait_for_up_to(&format!("{node} Ready again"), POD_UP, || async {
        let (ready, taints) = node_state(kube, node).await;
        let lost = |t: &String| {
            LOST_NODE_TAINTS
                .iter()
                .any(|key| t.strip_prefix(key).is_some_and(|e| e.starts_with(':')))
        };
        (ready == "True" && !taints.iter().any(lost)).then_some(())
    })
    .await;
}

/// Runs `kubectl` as the admin, arguments as given; its output.
pub async fn kubectl(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(jumppod_testkit::cluster::admin_kubeconfig())
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .expect("kubectl")
}

/// Undoes, when dropped, what a scenario did to a node (`kubectl` arguments), so that a failed
/// scenario leaves both nodes schedulable for the ones after it.
pub struct Restore(pub Vec<String>);

impl Drop for Restore {
    fn drop(&mut self) {
        let status = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(jumppod_testkit::cluster::admin_kubeconfig())
            .args(&self.0)
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("kubectl {:?} failed: {status:?}", self.0);
        }
    }
}
