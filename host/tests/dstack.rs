//! dstack's own Kubernetes backend on the real nodes: the code of the release operators run
//! (dstack 0.22.5, pinned in the virtual environment `make dstack-venv` makes), driven through
//! `tests/dstack/driver.py` as a server drives it, beside `jumppod webhook`. Its jump pod names
//! no node: each scenario's namespace places its pods on the real nodes by the namespace's
//! default node selector and tolerations (the API server's PodNodeSelector and
//! PodTolerationRestriction).
//!
//! `make real-node-scenarios` runs this file inside a control plane with real nodes (feature
//! `real-node`); it needs root, as the real nodes do.

mod real_node_support;

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

/// How long dstack's jump pod may take from its creation to Ready (the image is imported:
/// never pulled).
const POD_UP: Duration = Duration::from_secs(180);

/// How long a change of the Secret may take to reach a running pod: the kubelet's periodic
/// sync (a minute, plus jitter) refreshes the mounted Secret, then the pod's merge loop
/// (every 10 s) copies it.
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

/// What every scenario starts with: the real nodes, the admin client, its namespace (its pods
/// placed on the real nodes; removed when this is dropped), `jumppod webhook` registered for
/// it, dstack, and project `main` with its key pair.
struct Scenario {
    kube: Kube,
    ns: &'static str,
    dir: PathBuf,
    dstack: Dstack,
    project: Project,
    _cleanup: CleanUp,
}

impl Scenario {
    async fn start(ns: &'static str) -> Scenario {
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
/// (PodNodeSelector) and their taint tolerated by default (PodTolerationRestriction).
async fn placed_namespace(kube: &Kube, ns: &str, nodes: &RealNodes) {
    let (label, value) = &nodes.label;
    let tolerations = json!([{"key": nodes.taint_key, "operator": "Equal", "value": "true",
                              "effect": "NoSchedule"}]);
    let namespace: Namespace = typed(json!({"metadata": {"name": ns, "annotations": {
        "scheduler.alpha.kubernetes.io/node-selector": format!("{label}={value}"),
        "scheduler.alpha.kubernetes.io/defaultTolerations": tolerations.to_string(),
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
        format!(" {n} authenticated SSH session(s)")
    });
    for step in [
        format!("jumppod: stopping: sshd accepts new connections for {HANDOVER_SECONDS} s more"),
        format!(
            "jumppod: handover over: the readiness probe fails from now on; waiting for{waiting}"
        ),
        "jumppod: no authenticated SSH session left after".into(),
        "jumppod: stopping the sshd listener (pid ".into(),
    ] {
        assert!(log.contains(&step), "{step:?} not in the pod's log:\n{log}");
    }
}

/// dstack 0.22.5's own jump pod, created by its own code: the webhook gives it the kit and
/// Guaranteed resources without touching dstack's command; it becomes Ready by the kit's probe,
/// and dstack's `_check_and_configure_jump_pod_service` gets through it, appending a user's key
/// over SSH, which then jumps (and runs nothing else) through the NodePort.
#[tokio::test]
async fn dstacks_own_jump_pod_gets_the_kit_runs_guaranteed_and_dstack_configures_it() {
    let scenario = Scenario::start("dstack-kit").await;
    let (pod, port) = scenario.ready_jump_pod().await;
    let spec = pod.spec.as_ref().unwrap();
    let container = &spec.containers[0];
    assert_eq!(
        container.command.as_deref(),
        Some(&["/bin/sh".to_owned()][..]),
        "dstack's command is its own"
    );
    let pre_stop = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.exec.as_ref())
        .and_then(|e| e.command.clone());
    assert_eq!(
        pre_stop,
        Some(vec!["/bin/sh".into(), "-c".into(), pre_stop_script(300)])
    );
    assert!(container.readiness_probe.is_some());
    assert_eq!(spec.termination_grace_period_seconds, Some(320));
    let secret = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "authorized-keys")
        .and_then(|v| v.secret.as_ref())
        .and_then(|s| s.secret_name.clone());
    assert_eq!(
        secret.as_deref(),
        Some("dstack-main-ssh-jump-pod-authorized-keys")
    );
    let qos = pod.status.as_ref().and_then(|s| s.qos_class.clone());
    assert_eq!(qos.as_deref(), Some("Guaranteed"));

    let alice = scenario.user("alice");
    let proxy = scenario
        .dstack
        .configure(&scenario.project, &[&alice])
        .await;
    assert_eq!(proxy["hostname"], "127.0.0.1");
    assert_eq!(proxy["port"], port, "{proxy}");
    let name = scenario.project.jump_pod();
    assert!(
        jump_only(&alice, &scenario.project.key, port, &name).await,
        "the key dstack appended jumps, jump-only"
    );
    let log = jump_pod_log(&pod);
    assert!(log.contains("jumppod: keys: sshd listens;"), "{log}");
    eprintln!("dstack's jump pod, with the kit, configured by dstack: {proxy}");
}

/// The users' keys of the Secret `<name>-authorized-keys` (written by `jumppod keys`) reach
/// dstack's own pod: a key there before the pod starts is accepted jump-only at once, one added
/// later arrives within the kubelet's sync and the merge's period, one removed goes; the key
/// dstack appended over SSH, and the project's, stay.
#[tokio::test]
async fn the_secrets_keys_reach_dstacks_own_jump_pod_and_leave_it_while_dstacks_stay() {
    let scenario = Scenario::start("dstack-keys").await;
    let (alice, bob, carol) = (
        scenario.user("alice"),
        scenario.user("bob"),
        scenario.user("carol"),
    );
    let project = &scenario.project.key;
    let name = scenario.project.jump_pod();
    let key_file = |key: &Path| public_file(key);
    scenario.keys(&["add", "--key-file", &key_file(&alice), "--name", "alice"]);

    let (_, port) = scenario.ready_jump_pod().await;
    let ready_at = Instant::now();
    wait_for_up_to(
        "alice's key, in the Secret before the pod started, to jump",
        Duration::from_secs(30),
        || async { jump_only(&alice, project, port, &name).await.then_some(()) },
    )
    .await;
    let alice_after = ready_at.elapsed();

    scenario
        .dstack
        .grant(&scenario.project, port, &[&carol])
        .await;
    assert!(jump_only(&carol, project, port, &name).await);

    let added = Instant::now();
    scenario.keys(&["add", "--key-file", &key_file(&bob), "--name", "bob"]);
    wait_for_up_to(
        "bob's key, added to the Secret, to jump",
        KEY_PROPAGATION,
        || async { jump_only(&bob, project, port, &name).await.then_some(()) },
    )
    .await;
    let bob_after = added.elapsed();

    let removed = Instant::now();
    scenario.keys(&["remove", "alice"]);
    wait_for_up_to(
        "alice's key, removed from the Secret, to be refused",
        KEY_PROPAGATION,
        || async {
            jump(&alice, project, port)
                .await
                .err()
                .filter(|e| e.contains("Permission denied"))
        },
    )
    .await;
    let alice_gone = removed.elapsed();
    assert!(
        jump_only(&carol, project, port, &name).await,
        "the key dstack appended survives the merge"
    );
    assert_eq!(ssh(project, port, "hostname").await.as_deref(), Ok(&*name));
    eprintln!(
        "keys on dstack's pod: a key of the Secret jumped {alice_after:?} after the pod was Ready; \
         one added jumped after {bob_after:?}; one removed was refused after {alice_gone:?}"
    );
}

/// Deleted with no session open: new connections through the NodePort are accepted until the
/// handover is over; the readiness probe fails then; the pod logs each step and is gone a few
/// seconds later (without the kit dstack's `sh`, which ignores SIGTERM, waits out the 30 s
/// grace period, accepting all along).
#[tokio::test]
async fn a_deleted_dstack_jump_pod_hands_over_then_ends_without_waiting_out_its_grace() {
    let scenario = Scenario::start("dstack-handover").await;
    let (_, port) = scenario.ready_jump_pod().await;
    let key = &scenario.project.key;
    let name = scenario.project.jump_pod();
    let probes = Probes::start(key, port);
    probes.answering(&name).await;

    let (deleted, ending) =
        delete_and_watch(&scenario.pods(), &name, Duration::from_secs(120)).await;
    let outcomes = probes.stopped().await;
    let after = |made: &Instant| made.saturating_duration_since(deleted);
    let last_accepted = outcomes
        .iter()
        .filter(|(made, o)| *made >= deleted && o.is_ok())
        .map(|(made, _)| after(made))
        .max()
        .expect("a connection accepted after the deletion");
    let refused_early: Vec<_> = outcomes
        .iter()
        .filter(|(made, o)| {
            *made >= deleted && o.is_err() && after(made) + Duration::from_secs(3) < handover()
        })
        .collect();
    let accepted = outcomes
        .iter()
        .filter(|(made, o)| *made >= deleted && o.is_ok())
        .count();
    eprintln!(
        "dstack's pod deleted with no session: {accepted} new connections accepted, the last made \
         {last_accepted:?} after the deletion; Ready False after {:?}; gone after {:?}",
        ending.not_ready, ending.gone
    );
    assert!(
        refused_early.is_empty(),
        "refused during the handover: {refused_early:?}"
    );
    let window = |at: Duration| {
        at + Duration::from_secs(3) >= handover() && at <= handover() + Duration::from_secs(3)
    };
    assert!(
        window(last_accepted),
        "the last connection accepted {last_accepted:?} after the deletion, not at the handover's end"
    );
    let not_ready = ending.not_ready.expect("the pod turned not Ready");
    assert!(
        window(not_ready),
        "Ready turned False {not_ready:?} after the deletion, not at the handover's end"
    );
    assert!(
        ending.gone < Duration::from_secs(30),
        "the pod was gone only {:?} after its deletion: no earlier than a pod without the kit",
        ending.gone
    );
    logged_each_step(&ending.log, None);
}

/// Deleted with a session open: the session goes on past the handover (and past the 30 s
/// grace period a pod without the kit has), and the pod ends when the session closes. Whether
/// the pod is Ready meanwhile is the kubelet's to report: kubelet 1.36.3 (these nodes') runs no
/// exec probe once a pod terminates (each fails "context canceled" and is thrown away), so it
/// keeps the Ready the pod had; it is printed, not asserted.
#[tokio::test]
async fn a_deleted_dstack_jump_pod_keeps_an_open_session_and_ends_when_it_closes() {
    let scenario = Scenario::start("dstack-session").await;
    let (_, port) = scenario.ready_jump_pod().await;
    let name = scenario.project.jump_pod();
    let mut session = Session::open(&scenario.project.key, "127.0.0.1", port);
    session.still_open_after(0, "once opened").await;

    let pods = scenario.pods();
    pods.delete(&name, &DeleteParams::default())
        .await
        .expect("delete the jump pod");
    let deleted = Instant::now();
    let kept_until = Duration::from_secs(40);
    while deleted.elapsed() < kept_until {
        let seen = session.lines();
        session
            .still_open_after(seen, "while its pod was terminating")
            .await;
    }
    let pod = pods.get(&name).await.expect("the pod is still there");
    let ready = condition(&pod, "Ready");
    session.close().await;
    // Far below what is left of the session drain (280 s): it ends with its last session.
    let ending = watch_end(&pods, &name, Instant::now(), Duration::from_secs(30)).await;
    eprintln!(
        "dstack's pod deleted with a session open: the session lasted {kept_until:?} and more \
         (Ready {ready:?} then); the pod was gone {:?} after it closed",
        ending.gone
    );
    logged_each_step(&ending.log, Some(1));
}
