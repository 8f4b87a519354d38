//! `jumppod run`, the real binary, against the real control plane (issue 12): the controller
//! watches, repairs and reports between dstack's calls, under exactly the RBAC
//! `jumppod rbac --controller` prints, with one leader of several replicas. Watches exist only
//! on a real API server (the simulator does not serve them), so these tests have no simulator
//! twin. Each test works in a namespace of its own and runs its controllers as a user of its own,
//! so the audit log tells their requests apart.
//!
//! Timings are printed (`--nocapture` shows them), never asserted.

mod common;

use common::cluster::{
    admin, admin_kubeconfig, audit, bare_pod_of, cluster_dir, evict, namespace, old_service_of,
    wait_for,
};
use common::config_for;
use common::run::{Controller, metric};
use jumppod::schema;
use jumppod_host::api::Kube;
use jumppod_host::rbac;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Short election timings, so that failover fits in a test: the same ratios as client-go's.
const LEASE: [&str; 6] = [
    "--lease-duration",
    "3s",
    "--renew-deadline",
    "2s",
    "--retry-period",
    "500ms",
];

/// The jump pods' size here, and the controllers' template (no drift): the policy's floors,
/// because `make test` runs these tests beside the other real-cluster tests on three 4-cpu
/// nodes.
const SMALL: &str = "cpu: 100m\nmemory: 32Mi\n";

fn user_kubeconfig(user: &str) -> PathBuf {
    cluster_dir().join(format!("users/{user}.kubeconfig"))
}

/// `kubectl apply` of YAML documents as the admin; `extra`: more flags (`--dry-run=server`).
fn kubectl_apply(yaml: &str, extra: &[&str]) -> std::process::Output {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(admin_kubeconfig())
        .args([
            "apply",
            "--server-side",
            "--field-manager",
            "jumppod-tests",
            "-f",
            "-",
        ])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl (make kubectl installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The rules `jumppod rbac --controller` prints for `ns`, bound to the control plane's plain
/// users instead of the ServiceAccount (a user's token is what the tests hold).
fn grant_controller_rules(ns: &str, users: &[&str]) {
    grant_controller_rules_edited(ns, users, |_| {});
}

/// [`grant_controller_rules`], the Role's rules edited first.
fn grant_controller_rules_edited(ns: &str, users: &[&str], edit: impl Fn(&mut Vec<Value>)) {
    let subjects: Vec<Value> = users
        .iter()
        .map(|u| json!({"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"}))
        .collect();
    let objects: Vec<Value> = rbac::controller_objects(ns, "jumppod", false, "unused")
        .into_iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("Role" | "RoleBinding")))
        .map(|mut o| {
            if o.get("subjects").is_some() {
                o["subjects"] = json!(subjects);
            }
            if let Some(rules) = o.get_mut("rules").and_then(Value::as_array_mut) {
                edit(rules);
            }
            o
        })
        .collect();
    let out = kubectl_apply(&rbac::yaml_stream("test grant", &objects), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `jumppod run` as the controller tests run it: `-v`, a template without drift, short
/// election timings, its log in the cluster directory.
fn start(kubeconfig: &Path, ns: &str, identity: &str) -> Controller {
    let log = cluster_dir().join(format!("controller-{ns}-{identity}.log"));
    let template = cluster_dir().join(format!("controller-{ns}-{identity}.yaml"));
    std::fs::write(&template, SMALL).unwrap();
    let template = template.to_str().unwrap();
    let mut args = vec!["run", "-v", "--namespace", ns, "--listen", "127.0.0.1:0"];
    args.extend(["--identity", identity, "-f", template]);
    args.extend(LEASE);
    Controller::start(kubeconfig, &args, Some(&log))
}

async fn holder(kube: &Kube, ns: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(kube.client.clone(), ns);
    leases
        .get_opt("jumppod")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
}

/// A project as the upgrade leaves it: a pre-#3891 pod and Service on `port`, and the
/// ReplicaSet `ensure` made beside them, its pod ready.
async fn upgrading_project(kube: &Kube, ns: &str, project: &str, port: i32) {
    bare_pod_of(kube, ns, project, false).await;
    old_service_of(kube, ns, project, port).await;
    let small = config_for(ns, project, SMALL);
    jumppod_host::ensure(kube, &small, &jumppod_host::Gate::native())
        .await
        .unwrap();
    let rs: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), ns);
    let name = schema::jump_pod_name(project);
    wait_for("the ReplicaSet's pod to be ready", || async {
        rs.get(&name)
            .await
            .ok()
            .filter(|rs| rs.status.as_ref().and_then(|s| s.ready_replicas) == Some(1))
    })
    .await;
}

/// Polls until the project's Service has the current selector; its NodePort.
async fn service_switched(kube: &Kube, ns: &str, project: &str) -> i32 {
    let api: Api<Service> = Api::namespaced(kube.client.clone(), ns);
    let name = schema::jump_pod_name(project);
    let start = Instant::now();
    loop {
        if let Ok(svc) = api.get(&schema::service_name(&name)).await {
            let spec = svc.spec.unwrap_or_default();
            if spec.selector == Some(schema::current_selector(&name)) {
                return spec.ports.unwrap()[0].node_port.unwrap();
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the Service of {project} was not switched in 90 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Deletes a test's namespace, so that its pods leave the nodes to the tests that follow.
async fn done(kube: &Kube, ns: &str) {
    let namespaces: Api<Namespace> = Api::all(kube.client.clone());
    namespaces
        .delete(ns, &Default::default())
        .await
        .expect("delete the namespace");
}

async fn gone(kube: &Kube, ns: &str, pod: &str) {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    wait_for("the finished pod to be deleted", || async {
        matches!(pods.get_opt(pod).await, Ok(None)).then_some(())
    })
    .await;
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Issue 12 §6 and the measurements: an old pod finishes and, with nobody calling `ensure`,
/// the controller deletes it and recreates the Service with the current selector on the same
/// NodePort; repeated to time it. Then the steady state costs no request beyond the watches
/// and the Lease. The controller runs with exactly the printed Role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_pod_that_finishes_has_its_service_switched_on_the_same_node_port_by_the_controller()
{
    let kube = admin().await;
    let ns = "ctl-upgrade";
    namespace(&kube, ns).await;
    grant_controller_rules(ns, &["user-2"]);
    let controller = start(&user_kubeconfig("user-2"), ns, "a");
    controller.leading().await;

    const RUNS: i32 = 20;
    let mut took = Vec::new();
    for i in 0..RUNS {
        let project = format!("up{i}");
        let port = 30000 + i;
        upgrading_project(&kube, ns, &project, port).await;
        let name = schema::jump_pod_name(&project);
        let start = Instant::now();
        evict(&kube, ns, &name).await;
        let node_port = service_switched(&kube, ns, &project).await;
        took.push(start.elapsed());
        assert_eq!(
            node_port,
            port,
            "the same NodePort; log:\n{}",
            controller.log()
        );
        gone(&kube, ns, &name).await;
    }
    took.sort();
    println!(
        "old pod finished -> Service recreated, {RUNS} runs: p50 {:?}, p99 {:?}, max {:?}",
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        took.last().unwrap()
    );

    let events: Api<Event> = Api::namespaced(kube.client.clone(), ns);
    let recreated = wait_for("the ServiceRecreated events", || async {
        let list = events.list(&Default::default()).await.ok()?;
        let recreated: Vec<Event> = list
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ServiceRecreated"))
            .collect();
        (recreated.len() == RUNS as usize).then_some(recreated)
    })
    .await;
    let e = &recreated[0];
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.reporting_controller.as_deref(), Some("jumppod"));
    let regarding = e.regarding.as_ref().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("ReplicaSet"));
    assert!(
        e.note
            .as_deref()
            .unwrap()
            .contains("(kept: running jobs use it)"),
        "{e:?}"
    );

    // Steady state: nothing changes, so nothing but the watches and the Lease is requested.
    let audit = audit();
    let from = audit.mark();
    let window = Duration::from_secs(20);
    tokio::time::sleep(window).await;
    let requests = audit.by_user(from, "user-2");
    let (lease, other): (Vec<&String>, Vec<&String>) =
        requests.iter().partition(|r| r.contains("/leases/"));
    let beyond: Vec<&&String> = other.iter().filter(|r| !r.starts_with("watch ")).collect();
    assert_eq!(beyond, Vec::<&&String>::new(), "steady state, {window:?}");
    println!(
        "steady state over {window:?}: {} watch requests, {} lease requests, {} others",
        other.len(),
        lease.len(),
        beyond.len()
    );
    let (_, metrics) = controller.get("/metrics").await;
    assert_eq!(
        metric(&metrics, "jumppod_actions_total{action=\"create-service\"}"),
        Some(f64::from(RUNS)),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "jumppod_projects{state=\"ready\"}"),
        Some(f64::from(RUNS)),
        "{metrics}"
    );

    // Someone moves a Service to another NodePort: the jobs on the old one lose their jump
    // host, and the operator hears of it.
    let services: Api<Service> = Api::namespaced(kube.client.clone(), ns);
    let svc = schema::service_name(&schema::jump_pod_name("up0"));
    services
        .patch(
            &svc,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(
                    json!([{"op": "replace", "path": "/spec/ports/0/nodePort", "value": 30023}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let moved = wait_for("the NodePortChanged event", || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("NodePortChanged"))
    })
    .await;
    assert_eq!(moved.type_.as_deref(), Some("Warning"));
    let note = moved.note.unwrap_or_default();
    assert!(note.contains("from 30000 to 30023"), "{note}");
    done(&kube, ns).await;
}

/// §2: the scheduler's reason reaches the operator as a Warning Event on the ReplicaSet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_no_node_can_hold_yields_a_warning_event_with_the_schedulers_message() {
    let kube = admin().await;
    let ns = "ctl-unschedulable";
    namespace(&kube, ns).await;
    grant_controller_rules(ns, &["user-6"]);
    let controller = start(&user_kubeconfig("user-6"), ns, "a");
    controller.leading().await;
    // The fake nodes have 4 cpus each.
    jumppod_host::ensure(
        &kube,
        &config_for(ns, "main", "cpu: '6'"),
        &jumppod_host::Gate::native(),
    )
    .await
    .unwrap();
    let events: Api<Event> = Api::namespaced(kube.client.clone(), ns);
    let event = wait_for("the Unschedulable event", || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Unschedulable"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.unwrap_or_default();
    assert!(note.contains("0/3 nodes are available"), "{note}");
    assert!(note.contains("Insufficient cpu"), "{note}");
    let (_, metrics) = controller.get("/metrics").await;
    assert_eq!(
        metric(&metrics, "jumppod_projects{state=\"degraded\"}"),
        Some(1.0),
        "{metrics}"
    );
    done(&kube, ns).await;
}

/// §3: two replicas, one leader; the standby neither watches nor writes; the leader killed,
/// the standby takes over within the lease duration; SIGTERM releases the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_controllers_one_leads_and_the_other_takes_over_when_it_is_killed() {
    let kube = admin().await;
    let ns = "ctl-failover";
    namespace(&kube, ns).await;
    grant_controller_rules(ns, &["user-3", "user-4"]);
    let audit = audit();
    let from = audit.mark();
    let a = start(&user_kubeconfig("user-3"), ns, "a");
    a.leading().await;
    let mut b = start(&user_kubeconfig("user-4"), ns, "b");
    wait_for("b to stand by", || async {
        let (code, body) = b.get("/readyz").await;
        (code == 200 && body.contains("standing by")).then_some(())
    })
    .await;
    assert_eq!(holder(&kube, ns).await.as_deref(), Some("a"));
    let (_, metrics) = b.get("/metrics").await;
    assert_eq!(metric(&metrics, "jumppod_leader"), Some(0.0), "{metrics}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let standby = audit.by_user(from, "user-4");
    assert!(!standby.is_empty(), "the standby looks at the Lease");
    assert!(
        standby.iter().all(|r| r.contains("/leases/jumppod")),
        "the standby only reads the Lease: {standby:#?}"
    );

    a.signal("-KILL");
    let killed = Instant::now();
    wait_for("b to take the Lease", || async {
        (holder(&kube, ns).await.as_deref() == Some("b")).then_some(())
    })
    .await;
    let failover = killed.elapsed();
    b.leading().await;
    println!(
        "failover: the standby holds the Lease {failover:?} after the leader was killed (lease duration 3 s, retry period 500 ms)"
    );
    assert!(b.log().contains("took the lease"), "{}", b.log());

    b.signal("-TERM");
    let status = b.child.wait().unwrap();
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
    assert_eq!(holder(&kube, ns).await, None, "the Lease is released");
    done(&kube, ns).await;
}

/// §3: one broken project never stalls the others. The controller may delete only one
/// project's Service (RBAC by resource name): the other's delete is refused with 403 on every
/// try, retried with backoff, while the first is switched as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_whose_writes_fail_is_retried_with_backoff_and_stalls_no_other() {
    let kube = admin().await;
    let ns = "ctl-isolation";
    namespace(&kube, ns).await;
    let ok_service = schema::service_name(&schema::jump_pod_name("ok"));
    grant_controller_rules_edited(ns, &["user-7"], |rules| {
        for rule in rules.iter_mut() {
            if rule["resources"] == json!(["services"]) {
                rule["verbs"] = json!(["list", "watch", "create"]);
            }
        }
        rules.push(
            json!({"apiGroups": [""], "resources": ["services"], "verbs": ["delete"],
                          "resourceNames": [ok_service]}),
        );
    });
    let controller = start(&user_kubeconfig("user-7"), ns, "a");
    controller.leading().await;
    upgrading_project(&kube, ns, "bad", 30026).await;
    upgrading_project(&kube, ns, "ok", 30027).await;

    evict(&kube, ns, &schema::jump_pod_name("bad")).await;
    wait_for("the bad project's second failure", || async {
        let (_, metrics) = controller.get("/metrics").await;
        (metric(&metrics, "jumppod_reconciles_total{result=\"error\"}")? >= 2.0).then_some(())
    })
    .await;
    let start = Instant::now();
    evict(&kube, ns, &schema::jump_pod_name("ok")).await;
    assert_eq!(service_switched(&kube, ns, "ok").await, 30027);
    println!(
        "beside a failing project, the other's Service was switched {:?} after its pod finished",
        start.elapsed()
    );
    let log = controller.log();
    assert!(log.contains("reconcile failed"), "{log}");
    assert!(log.contains("`delete` verb on `services`"), "{log}");
    let services: Api<Service> = Api::namespaced(kube.client.clone(), ns);
    let bad = services
        .get(&schema::service_name(&schema::jump_pod_name("bad")))
        .await
        .unwrap();
    assert_eq!(
        bad.spec.unwrap().selector,
        Some(schema::legacy_selector(&schema::jump_pod_name("bad"))),
        "the refused project is left as it was"
    );
    done(&kube, ns).await;
}

/// A TCP proxy in front of the API server that can go away and come back on the same port.
struct Outage {
    port: u16,
    upstream: SocketAddr,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Outage {
    async fn start(upstream: SocketAddr) -> Outage {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut proxy = Outage {
            port,
            upstream,
            task: None,
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let upstream = self.upstream;
        self.task = Some(tokio::spawn(async move {
            // Dropped with the task: every connection ends when the API "goes away".
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut down, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
            }
        }));
    }

    fn down(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    async fn up(&mut self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap();
        self.serve(listener);
    }
}

/// §6: the API goes away for longer than the renew deadline and comes back: the controller
/// stops writing, stands by, takes the Lease again and catches up, all without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_recovers_without_a_restart_when_the_api_goes_away_and_comes_back() {
    let kube = admin().await;
    let ns = "ctl-outage";
    namespace(&kube, ns).await;
    grant_controller_rules(ns, &["user-5"]);
    let kubeconfig = std::fs::read_to_string(user_kubeconfig("user-5")).unwrap();
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .trim_matches('"')
        .to_owned();
    let upstream: SocketAddr = server.trim_start_matches("https://").parse().unwrap();
    let mut outage = Outage::start(upstream).await;
    let proxied = cluster_dir().join("user-5-proxied.kubeconfig");
    std::fs::write(
        &proxied,
        kubeconfig.replace(&server, &format!("https://127.0.0.1:{}", outage.port)),
    )
    .unwrap();
    let mut controller = start(&proxied, ns, "a");
    controller.leading().await;
    upgrading_project(&kube, ns, "main", 30020).await;

    outage.down();
    evict(&kube, ns, &schema::jump_pod_name("main")).await;
    wait_for("the controller to give up the lease", || async {
        controller.log().contains("lost the lease").then_some(())
    })
    .await;
    let (code, body) = controller.get("/readyz").await;
    assert_eq!((code, body.as_str()), (200, "ok: standing by\n"));
    outage.up().await;

    let port = service_switched(&kube, ns, "main").await;
    assert_eq!(port, 30020);
    gone(&kube, ns, &schema::jump_pod_name("main")).await;
    assert!(
        controller.child.try_wait().unwrap().is_none(),
        "still the same process"
    );
    let log = controller.log();
    assert!(
        log.matches("leading: watching and writing").count() >= 2,
        "{log}"
    );
    done(&kube, ns).await;
}

/// §5: what `jumppod rbac --controller` prints passes the real API server's server-side dry
/// run, for one namespace and for all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_controller_manifests_pass_the_api_servers_dry_run() {
    let kube = admin().await;
    let ns = "ctl-manifests";
    namespace(&kube, ns).await;
    for all in [false, true] {
        let mut args = vec!["rbac", "--controller", "--namespace", ns];
        if all {
            args.push("--all-namespaces");
        }
        let printed = Command::new(env!("CARGO_BIN_EXE_jumppod"))
            .args(&args)
            .output()
            .unwrap();
        assert!(printed.status.success());
        let yaml = String::from_utf8(printed.stdout).unwrap();
        let out = kubectl_apply(&yaml, &["--dry-run=server", "--validate=strict"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout
                .contains("deployment.apps/jumppod-controller serverside-applied (server dry run)"),
            "{stdout}"
        );
    }
}
