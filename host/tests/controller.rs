//! `jumppod run`, the real binary, against the real control plane (issue 12): the controller
//! watches, repairs and reports between dstack's calls, under exactly the RBAC
//! `jumppod rbac --controller` prints, with one leader of several replicas. Watches exist only
//! on a real API server (the simulator does not serve them), so these tests have no simulator
//! twin. Each test works in a namespace of its own and runs its controllers as a user of its own,
//! so the audit log tells their requests apart.
//!
//! Timings are printed (`--nocapture` shows them), never asserted. What a controller did is
//! read from the audit log, by user and the test's namespace, once the controller has said (in
//! its log, its metrics, or by the objects it wrote) that it did it: the log holds each request
//! from when it was received, so everything answered by then is in it.

use jumppod::schema;
use jumppod_e2e::audit::Audit;
use jumppod_host::api::Kube;
use jumppod_host::rbac;
use jumppod_testkit::cluster::{
    admin, admin_kubeconfig, audit, cluster_dir, evict, namespace, wait_for,
};
use jumppod_testkit::config_for;
use jumppod_testkit::run::{
    Controller, SMALL, gone, metric, service_switched, switched_port, upgrading_project,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::SignedDuration;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Short election timings, so that failover fits in a test: the same ratios as client-go's.
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RENEW_DEADLINE: Duration = Duration::from_secs(2);
const RETRY_PERIOD: Duration = Duration::from_millis(500);

/// The controllers' log: `-v`'s info, and the debug line each reconcile ends with
/// (`reconcile{namespace=.. jump_pod=..}: reconciled`), which tests wait on.
const RUST_LOG: &str = "info,jumppod_host::controller=debug";

/// How long a controller may take to exit after SIGTERM: it stops its reconciles and makes
/// one request, the Lease's release. Only a bound for one that hangs.
const STOPS_WITHIN: Duration = Duration::from_secs(30);

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
            // kubectl waits for the API without a limit otherwise.
            "--request-timeout",
            "60s",
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
    grant_controller_rules_edited(ns, "jumppod-controller", users, |_| {});
}

/// [`grant_controller_rules`], the Role's rules edited first; `name`: the Role's and the
/// RoleBinding's, so that users of one namespace can hold different grants.
fn grant_controller_rules_edited(
    ns: &str,
    name: &str,
    users: &[&str],
    edit: impl Fn(&mut Vec<Value>),
) {
    let subjects: Vec<Value> = users
        .iter()
        .map(|u| json!({"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"}))
        .collect();
    let objects: Vec<Value> = rbac::controller_objects(
        ns,
        "jumppod",
        rbac::Watched::Own,
        "unused",
        rbac::LEASE_NAME,
    )
    .into_iter()
    .filter(|o| matches!(o["kind"].as_str(), Some("Role" | "RoleBinding")))
    .map(|mut o| {
        // The Role in kube-node-lease is every test's: its name must be this namespace's own,
        // or the last test to write it takes the others' Leases away.
        let name = if o["metadata"]["namespace"] == rbac::NODE_LEASE_NAMESPACE {
            format!("{name}-{ns}")
        } else {
            name.to_owned()
        };
        o["metadata"]["name"] = json!(name);
        if o.get("roleRef").is_some() {
            o["roleRef"]["name"] = json!(name);
        }
        if o.get("subjects").is_some() {
            o["subjects"] = json!(subjects);
        }
        if let Some(rules) = o.get_mut("rules").and_then(Value::as_array_mut) {
            edit(rules);
        }
        o
    })
    .collect();
    apply_grant(&objects);
}

/// The printed `objects` of `kinds`, their bindings' subject the user `user` instead of the
/// ServiceAccount.
fn for_user(objects: Vec<Value>, kinds: &[&str], user: &str) -> Vec<Value> {
    objects
        .into_iter()
        .filter(|o| o["kind"].as_str().is_some_and(|k| kinds.contains(&k)))
        .map(|mut o| {
            if o.get("subjects").is_some() {
                o["subjects"] =
                    json!([{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]);
            }
            o
        })
        .collect()
}

/// `kubectl apply` of a test's grant, which must succeed.
fn apply_grant(objects: &[Value]) {
    let out = kubectl_apply(&rbac::yaml_stream("test grant", objects), &[]);
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
    let lease = [LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD].map(|d| format!("{d:?}"));
    let mut args = vec!["run", "-v", "--namespace", ns, "--listen", "127.0.0.1:0"];
    args.extend(["--identity", identity, "-f", template]);
    args.extend(["--lease-duration", &lease[0], "--renew-deadline", &lease[1]]);
    args.extend(["--retry-period", &lease[2]]);
    Controller::start(kubeconfig, &args, &[("RUST_LOG", RUST_LOG)], Some(&log))
}

async fn lease(kube: &Kube, ns: &str) -> Option<LeaseSpec> {
    let leases: Api<Lease> = Api::namespaced(kube.client.clone(), ns);
    leases
        .get_opt("jumppod")
        .await
        .unwrap()
        .and_then(|l| l.spec)
}

async fn holder(kube: &Kube, ns: &str) -> Option<String> {
    lease(kube, ns).await.and_then(|l| l.holder_identity)
}

/// `verb requestURI` of `user`'s requests in namespace `ns` after `from`: users are shared
/// between tests of this file, namespaces are not.
fn requests_in(audit: &Audit, from: u64, user: &str, ns: &str) -> Vec<String> {
    let scope = format!("/namespaces/{ns}/");
    audit
        .by_user(from, user)
        .into_iter()
        .filter(|r| r.contains(&scope))
        .collect()
}

/// Whether an audit line is a write: anything but a read.
fn is_write(request: &str) -> bool {
    !["get ", "list ", "watch "]
        .iter()
        .any(|read| request.starts_with(read))
}

/// Deletes a test's namespace, so that its pods leave the nodes to the tests that follow.
async fn done(kube: &Kube, ns: &str) {
    let namespaces: Api<Namespace> = Api::all(kube.client.clone());
    namespaces
        .delete(ns, &Default::default())
        .await
        .expect("delete the namespace");
}

/// Issue 12 §6: an old pod finishes and, with nobody calling `ensure`, the controller deletes
/// it and recreates the Service with the current selector on the same NodePort, for each of
/// a few projects. Then the steady state costs no request beyond the watches and the Lease:
/// every project is reconciled again, and nothing is requested. The controller runs with
/// exactly the printed Role. (How long the switch takes: `make bench-controller`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_pod_that_finishes_has_its_service_switched_on_the_same_node_port_by_the_controller()
{
    let kube = admin().await;
    let ns = "ctl-upgrade";
    namespace(&kube, ns).await;
    grant_controller_rules(ns, &["user-2"]);
    let controller = start(&user_kubeconfig("user-2"), ns, "a");
    controller.leading().await;

    const RUNS: i32 = 3;
    for i in 0..RUNS {
        let project = format!("up{i}");
        let port = 30000 + i;
        upgrading_project(&kube, ns, &project, port).await;
        let name = schema::jump_pod_name(&project);
        evict(&kube, ns, &name).await;
        let node_port = service_switched(&kube, ns, &project).await;
        assert_eq!(
            node_port,
            port,
            "the same NodePort; log:\n{}",
            controller.log()
        );
        gone(&kube, ns, &name).await;
    }

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

    // Steady state: a change the controller must look at but has nothing to do about (an
    // annotation of someone else's on each Service) makes it reconcile every project from its
    // caches; until it says it has, nothing but the watches and the Lease may be requested.
    let audit = audit();
    let from = audit.mark();
    let logged = controller.log_len();
    let services: Api<Service> = Api::namespaced(kube.client.clone(), ns);
    for i in 0..RUNS {
        let svc = schema::service_name(&schema::jump_pod_name(&format!("up{i}")));
        services
            .patch(
                &svc,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"example.com/touched": "yes"}}})),
            )
            .await
            .unwrap();
    }
    for i in 0..RUNS {
        let line = format!(
            "jump_pod={}}}: reconciled",
            schema::jump_pod_name(&format!("up{i}"))
        );
        wait_for(&format!("the controller to log {line:?}"), || async {
            controller.log_since(logged).contains(&line).then_some(())
        })
        .await;
    }
    let requests = requests_in(&audit, from, "user-2", ns);
    let (lease, other): (Vec<&String>, Vec<&String>) =
        requests.iter().partition(|r| r.contains("/leases/"));
    let beyond: Vec<&&String> = other.iter().filter(|r| !r.starts_with("watch ")).collect();
    assert_eq!(
        beyond,
        Vec::<&&String>::new(),
        "steady state: {RUNS} projects reconciled"
    );
    println!(
        "steady state, {RUNS} projects reconciled: {} watch requests, {} lease requests, {} others",
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

/// The middle ground between one namespace and every one (`--namespace` repeated, the chart's
/// `controller.watchNamespaces`): with exactly the Roles `jumppod rbac --controller
/// --watch-namespace` prints (one in each watched namespace, the Lease's in a third, no
/// ClusterRole), the controller leads from its Lease at home and repairs a project in each
/// watched namespace; every request it makes is in those three namespaces, but the one list of
/// nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_two_namespaces_it_repairs_in_each_with_a_role_in_each_and_its_lease_at_home() {
    let kube = admin().await;
    let (home, watched) = ("ctl-home", ["ctl-watch-a", "ctl-watch-b"]);
    for ns in [home, watched[0], watched[1]] {
        namespace(&kube, ns).await;
    }
    let user = "user-9";
    let list = watched.map(str::to_owned);
    let objects = for_user(
        rbac::controller_objects(
            home,
            "jumppod",
            rbac::Watched::These(&list),
            "unused",
            rbac::LEASE_NAME,
        ),
        &["Role", "RoleBinding"],
        user,
    );
    assert_eq!(
        objects.len(),
        8,
        "a Role and its binding in each of three namespaces, and in the nodes' Leases'"
    );
    apply_grant(&objects);

    let audit = audit();
    let from = audit.mark();
    let log = cluster_dir().join("controller-ctl-watch-two.log");
    let template = cluster_dir().join("controller-ctl-watch-two.yaml");
    std::fs::write(&template, SMALL).unwrap();
    let lease = [LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD].map(|d| format!("{d:?}"));
    let args = [
        "run",
        "-v",
        "--namespace",
        watched[0],
        "--namespace",
        watched[1],
        "--lease-namespace",
        home,
        "--listen",
        "127.0.0.1:0",
        "--identity",
        "a",
        "-f",
        template.to_str().unwrap(),
        "--lease-duration",
        &lease[0],
        "--renew-deadline",
        &lease[1],
        "--retry-period",
        &lease[2],
    ];
    let controller = Controller::start(
        &user_kubeconfig(user),
        &args,
        &[("RUST_LOG", RUST_LOG)],
        Some(&log),
    );
    controller.leading().await;
    assert_eq!(holder(&kube, home).await.as_deref(), Some("a"));

    for (ns, port) in watched.iter().zip([30110, 30111]) {
        upgrading_project(&kube, ns, "multi", port).await;
        let name = schema::jump_pod_name("multi");
        evict(&kube, ns, &name).await;
        let switched = service_switched(&kube, ns, "multi").await;
        assert_eq!(switched, port, "{ns}; log:\n{}", controller.log());
        gone(&kube, ns, &name).await;
    }
    let requests = audit.by_user(from, user);
    // Nodes are cluster-scoped: the one request outside any namespace (this user may not list
    // them, so the controller asks once and surges nothing); the nodes' Leases are in theirs.
    let elsewhere: Vec<&String> = requests
        .iter()
        .filter(|r| {
            ![home, watched[0], watched[1], rbac::NODE_LEASE_NAMESPACE]
                .iter()
                .any(|ns| r.contains(&format!("/namespaces/{ns}/")))
                && !r.starts_with("list /api/v1/nodes?")
        })
        .collect();
    assert!(!requests.is_empty());
    assert_eq!(
        elsewhere,
        Vec::<&String>::new(),
        "requests outside the three namespaces"
    );
    drop(controller);
    for ns in [home, watched[0], watched[1]] {
        done(&kube, ns).await;
    }
}

/// The `reason` Events about `regarding` (a ReplicaSet's name) in `ns`.
async fn events_of(kube: &Kube, ns: &str, regarding: &str, reason: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(kube.client.clone(), ns);
    let Ok(list) = events.list(&Default::default()).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding)
        })
        .collect()
}

/// Moves a Service's NodePort (as someone else than the controller would).
async fn move_node_port(kube: &Kube, ns: &str, svc: &str, port: i32) {
    let services: Api<Service> = Api::namespaced(kube.client.clone(), ns);
    services
        .patch(
            svc,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(
                    json!([{"op": "replace", "path": "/spec/ports/0/nodePort", "value": port}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
}

/// Issue 21 §8: an Event's series is keyed by its message too, as client-go's events library
/// keys it. kube-runtime's Recorder left the message out: a second NodePortChanged on the same
/// ReplicaSet within its series window was a PATCH of the first one's series, and the
/// operator read the first move's ports for the second move. Here: a move, a move back (a
/// different message: an Event of its own), and the first move again (the same message: the
/// first Event's series, count 2, not a third Event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_message_is_an_event_of_its_own_and_a_repeated_one_is_a_series() {
    let kube = admin().await;
    let ns = "ctl-events";
    namespace(&kube, ns).await;
    grant_controller_rules(ns, &["user-8"]);
    let controller = start(&user_kubeconfig("user-8"), ns, "a");
    controller.leading().await;
    upgrading_project(&kube, ns, "main", 30031).await;
    let name = schema::jump_pod_name("main");
    let svc = schema::service_name(&name);
    // The controller has seen the Service on its first port: a move is a change to it.
    wait_for("the project to be counted as upgrading", || async {
        let (_, metrics) = controller.get("/metrics").await;
        (metric(&metrics, "jumppod_projects{state=\"upgrading\"}")? == 1.0).then_some(())
    })
    .await;
    let away = "from 30031 to 30032";
    let back = "from 30032 to 30031";
    let with = |events: &[Event], text: &str| -> Vec<Event> {
        events
            .iter()
            .filter(|e| e.note.as_deref().is_some_and(|n| n.contains(text)))
            .cloned()
            .collect()
    };

    move_node_port(&kube, ns, &svc, 30032).await;
    wait_for("the Event of the first move", || async {
        let events = events_of(&kube, ns, &name, "NodePortChanged").await;
        (!with(&events, away).is_empty()).then_some(())
    })
    .await;
    move_node_port(&kube, ns, &svc, 30031).await;
    let events = wait_for("an Event saying the port moved back", || async {
        let events = events_of(&kube, ns, &name, "NodePortChanged").await;
        (!with(&events, back).is_empty()).then_some(events)
    })
    .await;
    assert_eq!(
        events.len(),
        2,
        "one Event per message: {events:#?}\nlog:\n{}",
        controller.log()
    );
    assert_eq!(with(&events, away).len(), 1, "{events:#?}");

    move_node_port(&kube, ns, &svc, 30032).await;
    let events = wait_for("the first move's Event to count 2", || async {
        let events = events_of(&kube, ns, &name, "NodePortChanged").await;
        let first = with(&events, away);
        let count = first.first()?.series.as_ref()?.count;
        (count == 2).then_some(events)
    })
    .await;
    assert_eq!(
        events.len(),
        2,
        "the same message again is the first Event's series, not an Event of its own: {events:#?}"
    );
    assert_eq!(with(&events, back).len(), 1, "{events:#?}");
    assert!(
        with(&events, back)[0].series.is_none(),
        "the move back happened once: {events:#?}"
    );
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
    // The scheduler's own words after the controller's: no node of the cluster fits, and cpu
    // is why. Not how many nodes: scenarios 6b, 7d and 7e add nodes of their own to the
    // shared control plane, so the count depends on which tests ran first.
    let note = event.note.unwrap_or_default();
    let (ours, scheduler) = note
        .split_once(" cannot be scheduled (Unschedulable): ")
        .unwrap_or_else(|| panic!("not the controller's Unschedulable note: {note}"));
    assert!(ours.starts_with("pod dstack-main-ssh-jump-pod-"), "{note}");
    assert!(
        scheduler.starts_with("0/") && scheduler.contains(" nodes are available: "),
        "{note}"
    );
    assert!(scheduler.contains("Insufficient cpu"), "{note}");
    let (_, metrics) = controller.get("/metrics").await;
    assert_eq!(
        metric(&metrics, "jumppod_projects{state=\"degraded\"}"),
        Some(1.0),
        "{metrics}"
    );
    done(&kube, ns).await;
}

/// §3: two replicas, one leader; while the leader switches a project's Service, the standby
/// only reads the Lease (no list, no watch, no write); the leader killed, the
/// standby takes over once the lease has run out and within the lease duration counted in
/// its looks at the Lease (its own clock measures the lease; its looks are at least a retry
/// period apart, so this count is an upper bound, not a tight one); SIGTERM releases the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_controllers_one_leads_and_the_other_takes_over_when_it_is_killed() {
    let kube = admin().await;
    let ns = "ctl-failover";
    namespace(&kube, ns).await;
    grant_controller_rules(ns, &["user-3", "user-4"]);
    let audit = audit();
    let a = start(&user_kubeconfig("user-3"), ns, "a");
    a.leading().await;
    let mut b = start(&user_kubeconfig("user-4"), ns, "b");
    b.standing_by().await;
    assert_eq!(holder(&kube, ns).await.as_deref(), Some("a"));
    let (_, metrics) = b.get("/metrics").await;
    assert_eq!(metric(&metrics, "jumppod_leader"), Some(0.0), "{metrics}");

    let from = audit.mark();
    upgrading_project(&kube, ns, "main", 30003).await;
    let name = schema::jump_pod_name("main");
    evict(&kube, ns, &name).await;
    assert_eq!(service_switched(&kube, ns, "main").await, 30003);
    gone(&kube, ns, &name).await;
    let leader = requests_in(&audit, from, "user-3", ns);
    assert!(
        leader
            .iter()
            .any(|r| r.starts_with("delete ") && r.contains("/services/")),
        "the leader switched the Service: {leader:#?}"
    );
    // It looks every retry period; the repair may take less, and the audit log is written as
    // the API server gets to it: wait for a look rather than count on one being there.
    let standby = wait_for("the standby to look at the Lease", || async {
        let seen = requests_in(&audit, from, "user-4", ns);
        (!seen.is_empty()).then_some(seen)
    })
    .await;
    assert!(
        standby
            .iter()
            .all(|r| r.starts_with("get ") && r.contains("/leases/jumppod")),
        "the standby only reads the Lease: {standby:#?}"
    );

    // b's looks from the kill on: perhaps one before a's last renewal reaches it, one that
    // first sees that renewal, then looks at least a retry period apart until the record is
    // as old as the lease duration by b's clock, the last of which takes the Lease.
    let most = (LEASE_DURATION.as_millis() / RETRY_PERIOD.as_millis()) as usize + 2;
    let looks = |from| {
        requests_in(&audit, from, "user-4", ns)
            .into_iter()
            .filter(|r| r.starts_with("get ") && r.contains("/leases/jumppod"))
            .count()
    };
    let from = audit.mark();
    a.signal("-KILL");
    let killed = Instant::now();
    // a's last renewal as the record holds it with a gone (or one before it, if a renewal
    // was still in flight: then the gap below is only longer).
    let renewed = lease(&kube, ns)
        .await
        .and_then(|l| l.renew_time)
        .expect("a renewed the Lease")
        .0;
    wait_for("b to take the Lease", || async {
        if holder(&kube, ns).await.as_deref() == Some("b") {
            return Some(());
        }
        let looked = looks(from);
        assert!(
            looked <= most,
            "b looked at the Lease {looked} times since a was killed without taking it"
        );
        None
    })
    .await;
    let failover = killed.elapsed();
    let looked = looks(from);
    assert!(
        (1..=most).contains(&looked),
        "b took the Lease after {looked} looks; at most {most} fit in a lease duration of \
         {LEASE_DURATION:?} at one look per {RETRY_PERIOD:?}"
    );
    // Never before the lease ran out: b counts it from a look after that renewal, and both
    // times come from this machine's clock.
    let acquired = lease(&kube, ns)
        .await
        .and_then(|l| l.acquire_time)
        .expect("b acquired the Lease")
        .0;
    let gap = acquired.duration_since(renewed);
    assert!(
        gap >= SignedDuration::try_from(LEASE_DURATION).unwrap(),
        "b took the Lease {gap:?} after a's last renewal, sooner than the lease duration {LEASE_DURATION:?}"
    );
    b.leading().await;
    println!(
        "failover: the standby holds the Lease {failover:?} and {looked} looks after the leader was killed (lease duration {LEASE_DURATION:?}, retry period {RETRY_PERIOD:?})"
    );
    assert!(b.log().contains("took the lease"), "{}", b.log());

    b.signal("-TERM");
    let status = b.exited("SIGTERM", STOPS_WITHIN).await;
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
    assert_eq!(holder(&kube, ns).await, None, "the Lease is released");
    done(&kube, ns).await;
}

/// §3, why the renew deadline is shorter than the lease: a leader paused (SIGSTOP) past its
/// lease is deposed by the standby, and once resumed it writes nothing, though its caches
/// hold work it would do as a leader (its project's pod finished while it was paused, and the
/// new leader may not delete, so the work stays undone). Only its refused attempts at the
/// Lease are allowed: the Lease stays the new leader's. And it no longer counts the projects
/// in its metrics (issue 21 §9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_writes_nothing_once_it_resumes() {
    let kube = admin().await;
    let ns = "ctl-deposed";
    namespace(&kube, ns).await;
    grant_controller_rules(ns, &["user-3"]);
    grant_controller_rules_edited(ns, "jumppod-controller-no-delete", &["user-4"], |rules| {
        for rule in rules.iter_mut() {
            if let Some(verbs) = rule["verbs"].as_array_mut() {
                verbs.retain(|v| v != "delete");
            }
        }
    });
    let audit = audit();
    let a = start(&user_kubeconfig("user-3"), ns, "a");
    a.leading().await;
    let b = start(&user_kubeconfig("user-4"), ns, "b");
    b.standing_by().await;
    upgrading_project(&kube, ns, "main", 30004).await;
    // a counts the project before it is paused: what it must stop counting once deposed.
    wait_for("a to count the project", || async {
        let (_, metrics) = a.get("/metrics").await;
        (metric(&metrics, "jumppod_projects{state=\"upgrading\"}")? == 1.0).then_some(())
    })
    .await;

    a.signal("-STOP");
    // The pod finishes while a is paused: a's watches hold the news for when it wakes.
    evict(&kube, ns, &schema::jump_pod_name("main")).await;
    wait_for("b to take the Lease from the paused a", || async {
        (holder(&kube, ns).await.as_deref() == Some("b")).then_some(())
    })
    .await;
    b.leading().await;
    wait_for("b's delete to be refused", || async {
        let (_, metrics) = b.get("/metrics").await;
        (metric(&metrics, "jumppod_reconciles_total{result=\"error\"}")? >= 1.0).then_some(())
    })
    .await;
    let taken = lease(&kube, ns).await.unwrap();

    let from = audit.mark();
    let logged = a.log_len();
    a.signal("-CONT");
    wait_for("a to say it lost the lease", || async {
        a.log_since(logged).contains("lost the lease").then_some(())
    })
    .await;
    a.standing_by().await;
    // A few looks of a standby's after that: time for a deposed leader that kept going to act.
    wait_for(
        "a to look at the Lease three times since it resumed",
        || async {
            let looks = requests_in(&audit, from, "user-3", ns)
                .iter()
                .filter(|r| r.starts_with("get ") && r.contains("/leases/jumppod"))
                .count();
            (looks >= 3).then_some(())
        },
    )
    .await;
    let requests = requests_in(&audit, from, "user-3", ns);
    let writes: Vec<&String> = requests
        .iter()
        .filter(|r| is_write(r) && !r.contains("/leases/jumppod"))
        .collect();
    assert_eq!(
        writes,
        Vec::<&String>::new(),
        "the deposed leader wrote; all its requests since it resumed: {requests:#?}\nlog:\n{}",
        a.log_since(logged)
    );
    let now = lease(&kube, ns).await.unwrap();
    assert_eq!(now.holder_identity.as_deref(), Some("b"));
    assert_eq!(
        now.lease_transitions, taken.lease_transitions,
        "the Lease changed hands again"
    );
    assert_eq!(
        switched_port(&kube, ns, "main").await,
        None,
        "the work a found on waking is still undone"
    );
    // Issue 21 §9: a standby counts no project (b, the leader, counts them now).
    let (_, metrics) = a.get("/metrics").await;
    assert_eq!(metric(&metrics, "jumppod_leader"), Some(0.0), "{metrics}");
    for state in jumppod_plan::controller::State::ALL {
        let gauge = format!("jumppod_projects{{state=\"{}\"}}", state.as_str());
        assert_eq!(metric(&metrics, &gauge), Some(0.0), "{gauge}: {metrics}");
    }
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
    grant_controller_rules_edited(ns, "jumppod-controller", &["user-7"], |rules| {
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

/// Issue 34 §1, make-before-break, its mechanics on the real API server, scheduler and
/// ReplicaSet controller (the fake kubelet plays two nodes of the test's own): the jump pod's
/// node is cordoned, and the controller, with exactly the printed rules (the nodes'
/// ClusterRole too), marks the pod retiring, surges the ReplicaSet to two, and once the new pod
/// is Ready on the other node scales it back to one; the ReplicaSet controller removes the
/// retiring pod. The writes that take effect are exactly those three (one refused because the
/// ReplicaSet changed since it was decided is decided again), and the Events say what it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_on_a_cordoned_node_is_replaced_before_it_goes_in_three_writes() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::{Node, Pod};
    let kube = admin().await;
    let ns = "ctl-surge";
    namespace(&kube, ns).await;
    grant_controller_rules(ns, &["user-1"]);
    // The nodes' ClusterRole, as printed, bound to this test's user.
    let cluster_role = for_user(
        rbac::controller_objects(
            ns,
            "jumppod",
            rbac::Watched::Own,
            "unused",
            rbac::LEASE_NAME,
        ),
        &["ClusterRole", "ClusterRoleBinding"],
        "user-1",
    );
    assert_eq!(
        cluster_role.len(),
        2,
        "the nodes' ClusterRole and its binding"
    );
    apply_grant(&cluster_role);

    // Two nodes of this test's own, which only its pod tolerates.
    let pool = "jumppod.test/pool";
    for n in ["a", "b"] {
        let node = jumppod_sim::NodeSpec::new(&format!("{ns}-{n}"))
            .label(pool, ns)
            .taint(pool, ns, "NoSchedule");
        jumppod_testkit::cluster::played_node(&kube, ns, node.to_json()).await;
    }
    let placement = format!(
        "node_selector: {{{pool}: {ns}}}\ntolerations: [{{key: {pool}, operator: Equal, value: {ns}, effect: NoSchedule}}]"
    );
    let config = config_for(ns, "main", &placement);
    jumppod_host::ensure(&kube, &config, &jumppod_host::Gate::native())
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let ready = |p: &Pod| jumppod_plan::objects::is_ready(p);
    let first = wait_for("the jump pod Ready", || async {
        let list = pods.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|p| ready(p))
    })
    .await;
    let first_name = first.metadata.name.clone().unwrap();
    let node = first.spec.as_ref().unwrap().node_name.clone().unwrap();

    let template = cluster_dir().join(format!("controller-{ns}.yaml"));
    std::fs::write(&template, format!("{placement}\n")).unwrap();
    let controller = Controller::watching(
        &user_kubeconfig("user-1"),
        ns,
        &template,
        RUST_LOG,
        &cluster_dir().join(format!("controller-{ns}.log")),
    );
    controller.leading().await;
    let audit = audit();
    let from = audit.mark();

    Api::<Node>::all(kube.client.clone())
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let second = wait_for("the retiring pod deleted and another Ready", || async {
        let list = pods.list(&Default::default()).await.ok()?;
        let old_going = list.items.iter().all(|p| {
            p.metadata.name.as_deref() != Some(&first_name)
                || p.metadata.deletion_timestamp.is_some()
        });
        let new = list
            .items
            .into_iter()
            .find(|p| ready(p) && p.metadata.name.as_deref() != Some(&first_name))?;
        old_going.then_some(new)
    })
    .await;
    let other = second.spec.as_ref().unwrap().node_name.clone().unwrap();
    assert_ne!(other, node, "the replacement is on the cordoned node");
    let rs: ReplicaSet = Api::namespaced(kube.client.clone(), ns)
        .get(&config.name)
        .await
        .unwrap();
    assert_eq!(rs.spec.unwrap().replicas, Some(1));
    assert!(
        !rs.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(jumppod_plan::surge::SURGED_FROM_ANNOTATION)
    );

    // Its writes: the pod's mark, the surge, the way back (and Events). Those the API server
    // refused because the ReplicaSet had changed since they were decided (its status, as the
    // ReplicaSet controller counts the new pod) changed nothing and are decided again.
    let ours = |r: &String| {
        is_write(r) && !r.contains("/events") && r.contains(&format!("/namespaces/{ns}/"))
    };
    let sent = requests_in(&audit, from, "user-1", ns)
        .into_iter()
        .filter(ours)
        .count();
    let answered = wait_for(
        "an answer to each of its writes in the audit log",
        || async {
            let answered: Vec<(u16, String)> = audit
                .answered_by_user(from, "user-1")
                .into_iter()
                .filter(|(_, r)| ours(r))
                .collect();
            (answered.len() == sent).then_some(answered)
        },
    )
    .await;
    let refused: Vec<&(u16, String)> = answered.iter().filter(|(code, _)| *code == 409).collect();
    println!("writes refused as stale and decided again: {refused:?}");
    let writes: Vec<String> = answered
        .iter()
        .filter(|(code, _)| (200..300).contains(code))
        .map(|(_, r)| r.split('?').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        refused.len() + writes.len(),
        sent,
        "each write written or refused as stale: {answered:?}"
    );
    assert_eq!(
        writes,
        [
            format!("patch /api/v1/namespaces/{ns}/pods/{first_name}"),
            format!(
                "patch /apis/apps/v1/namespaces/{ns}/replicasets/{}",
                config.name
            ),
            format!(
                "patch /apis/apps/v1/namespaces/{ns}/replicasets/{}",
                config.name
            ),
        ],
        "{}",
        controller.log()
    );
    for reason in ["Retiring", "SurgeStarted", "SurgeEnded"] {
        let events = events_of(&kube, ns, &config.name, reason).await;
        assert_eq!(events.len(), 1, "one {reason} Event: {events:?}");
    }
    done(&kube, ns).await;
}

/// Whether a request is the list (not the watch) of the pods of the restart test's namespace.
fn lists_the_restart_tests_pods(method: &http::Method, uri: &http::Uri) -> bool {
    *method == http::Method::GET
        && uri.path() == "/api/v1/namespaces/ctl-surge-restart/pods"
        && !uri.query().unwrap_or_default().contains("watch=true")
}

/// How many times Events of `reason` about `regarding` happened (an Event's series counts its
/// repeats).
async fn occurrences(kube: &Kube, ns: &str, regarding: &str, reason: &str) -> i32 {
    jumppod_testkit::cluster::occurrences(&events_of(kube, ns, regarding, reason).await)
}

/// Make-before-break across a restart of the controller (its own pod is often on the node
/// being drained). A project's node is cordoned while the other node it may use does not exist
/// yet: the controller marks the pod retiring and surges the ReplicaSet to two, and the
/// replacement waits, unscheduled. Beside it, a project whose pre-#3891 pod still runs behind
/// its old Service. The controller is killed and started again through a front of the API
/// server that answers its list of pods 5 s late, so that it holds every ReplicaSet and
/// Service, and no pod, for that long. A decision then would read "no retiring pod is left"
/// and scale back (the ReplicaSet controller deletes the unscheduled replacement), and would
/// replace the old Service while the old pod runs. The restarted controller writes nothing
/// until it has listed everything; then the second node comes, the replacement is Ready on it
/// and the surge ends, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_restarted_mid_surge_decides_nothing_until_it_has_listed_every_pod() {
    use jumppod_testkit::cluster::{played_node, remove_played_nodes};
    use jumppod_testkit::proxy::SlowFront;
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::{Node, Pod};
    let kube = admin().await;
    let ns = "ctl-surge-restart";
    namespace(&kube, ns).await;
    // user-1: the surge test's user, so that both grant its nodes' ClusterRole to one subject.
    grant_controller_rules(ns, &["user-1"]);
    apply_grant(&for_user(
        rbac::controller_objects(
            ns,
            "jumppod",
            rbac::Watched::Own,
            "unused",
            rbac::LEASE_NAME,
        ),
        &["ClusterRole", "ClusterRoleBinding"],
        "user-1",
    ));
    let pool = "jumppod.test/pool";
    let node = |n: &str| {
        jumppod_sim::NodeSpec::new(&format!("{ns}-{n}"))
            .label(pool, ns)
            .taint(pool, ns, "NoSchedule")
            .to_json()
    };
    played_node(&kube, ns, node("a")).await;
    let placement = format!(
        "node_selector: {{{pool}: {ns}}}\ntolerations: [{{key: {pool}, operator: Equal, value: {ns}, effect: NoSchedule}}]"
    );
    let config = config_for(ns, "main", &placement);
    jumppod_host::ensure(&kube, &config, &jumppod_host::Gate::native())
        .await
        .unwrap();
    upgrading_project(&kube, ns, "legacy", 30078).await;
    let legacy_service = schema::service_name(&schema::jump_pod_name("legacy"));
    let services: Api<Service> = Api::namespaced(kube.client.clone(), ns);
    let old_service = services.get(&legacy_service).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let sets: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), ns);
    let of_main = kube::api::ListParams::default().labels(&format!(
        "{}={}",
        schema::INSTANCE_LABEL,
        config.name
    ));
    let first = wait_for("the jump pod Ready", || async {
        let list = pods.list(&of_main).await.ok()?;
        list.items.into_iter().find(jumppod_plan::objects::is_ready)
    })
    .await;
    let first_name = first.metadata.name.clone().unwrap();

    // The controllers' template: the project's placement, so that it finds no drift.
    let template = cluster_dir().join(format!("controller-{ns}.yaml"));
    std::fs::write(&template, format!("{placement}\n")).unwrap();
    let start = |kubeconfig: &Path, identity: &str| {
        let lease = [LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD].map(|d| format!("{d:?}"));
        let args = [
            "run",
            "-v",
            "--namespace",
            ns,
            "--listen",
            "127.0.0.1:0",
            "--identity",
            identity,
            "-f",
            template.to_str().unwrap(),
            "--lease-duration",
            &lease[0],
            "--renew-deadline",
            &lease[1],
            "--retry-period",
            &lease[2],
        ];
        let log = cluster_dir().join(format!("controller-{ns}-{identity}.log"));
        Controller::start(kubeconfig, &args, &[("RUST_LOG", RUST_LOG)], Some(&log))
    };
    let mut a = start(&user_kubeconfig("user-1"), "a");
    a.leading().await;
    Api::<Node>::all(kube.client.clone())
        .patch(
            &format!("{ns}-a"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    // Mid-surge: the ReplicaSet at two, the replacement unscheduled, the surge's Event written.
    let replacement = wait_for("the surge, its replacement unscheduled", || async {
        let rs = sets.get(&config.name).await.ok()?;
        let surged = jumppod_testkit::run::surge_recorded(&rs);
        let list = pods.list(&of_main).await.ok()?;
        let waiting = list.items.into_iter().find(|p| {
            p.metadata.name.as_deref() != Some(&first_name)
                && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
        })?;
        let started = occurrences(&kube, ns, &config.name, "SurgeStarted").await == 1;
        (surged && rs.spec?.replicas == Some(2) && started).then_some(waiting)
    })
    .await;
    a.signal("-KILL");
    a.exited("SIGKILL", STOPS_WITHIN).await;

    let front = SlowFront::start(
        &user_kubeconfig("user-1"),
        lists_the_restart_tests_pods,
        Duration::from_secs(5),
    )
    .await;
    let through_front = cluster_dir().join(format!("controller-{ns}-front.kubeconfig"));
    front.write_kubeconfig(&through_front);
    let audit = audit();
    let from = audit.mark();
    let b = start(&through_front, "b");
    b.leading().await;
    for project in ["main", "legacy"] {
        let line = format!("jump_pod={}}}: reconciled", schema::jump_pod_name(project));
        wait_for(
            &format!("the restarted controller to log {line:?}"),
            || async { b.log().contains(&line).then_some(()) },
        )
        .await;
    }
    assert!(front.held() >= 1, "no list of pods was held back");
    let writes: Vec<String> = requests_in(&audit, from, "user-1", ns)
        .into_iter()
        .filter(|r| is_write(r) && !r.contains("/events") && !r.contains("/leases/"))
        .collect();
    assert_eq!(
        writes,
        Vec::<String>::new(),
        "the restarted controller wrote before it had listed every pod; log:\n{}",
        b.log()
    );
    let waiting = pods
        .get_opt(replacement.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        waiting.and_then(|p| p.metadata.uid),
        replacement.metadata.uid,
        "the unscheduled replacement was deleted"
    );
    let service = services.get(&legacy_service).await.unwrap();
    assert_eq!(
        service.metadata.uid, old_service.metadata.uid,
        "the old Service was replaced while its pod runs"
    );

    // The second node: the replacement is scheduled and Ready there, the surge ends once.
    played_node(&kube, ns, node("b")).await;
    wait_for(
        "the ReplicaSet back at one and the retiring pod deleted",
        || async {
            let rs = sets.get(&config.name).await.ok()?;
            let recorded = jumppod_testkit::run::surge_recorded(&rs);
            let old = pods.get_opt(&first_name).await.ok()?;
            let old_going = old.is_none_or(|p| p.metadata.deletion_timestamp.is_some());
            (!recorded && rs.spec?.replicas == Some(1) && old_going).then_some(())
        },
    )
    .await;
    let kept = pods
        .get(replacement.metadata.name.as_deref().unwrap())
        .await
        .expect("the replacement");
    assert!(jumppod_plan::objects::is_ready(&kept), "{kept:?}");
    // The Event follows the write it tells of.
    wait_for("the SurgeEnded Event", || async {
        (occurrences(&kube, ns, &config.name, "SurgeEnded").await >= 1).then_some(())
    })
    .await;
    for reason in ["SurgeStarted", "SurgeEnded"] {
        assert_eq!(
            occurrences(&kube, ns, &config.name, reason).await,
            1,
            "{reason}; log:\n{}",
            b.log()
        );
    }
    drop(b);
    remove_played_nodes(&kube, ns).await;
    done(&kube, ns).await;
}

/// The surge's writes carry the resourceVersion of what they were decided on: a `kubectl
/// scale` between the decision and its write makes the API server refuse the write (409
/// Conflict), nothing after it is sent, and the operator's count stays. (The controller then
/// decides again on the change it was told of, and keeps that count: see `plan/src/surge.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_surge_decided_before_an_operators_scale_is_refused_and_their_count_stays() {
    use jumppod_host::apply::{ActionOutcome, apply};
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::Pod;
    let kube = admin().await;
    let ns = "ctl-stale-scale";
    namespace(&kube, ns).await;
    let config = config_for(ns, "main", SMALL);
    jumppod_host::ensure(&kube, &config, &jumppod_host::Gate::native())
        .await
        .unwrap();
    let sets: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let pod = wait_for("the jump pod Ready", || async {
        let list = pods.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(jumppod_plan::objects::is_ready)
    })
    .await;
    let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
    let rs = wait_for("the ReplicaSet's status to settle", || async {
        let rs = sets.get(&config.name).await.ok()?;
        (rs.status.as_ref()?.ready_replicas == Some(1)).then_some(rs)
    })
    .await;
    // Decided as if the pod's node were cordoned: mark it, surge to two.
    let leaving = jumppod_plan::nodes::NodeTrouble {
        leaving: std::collections::BTreeMap::from([(
            node,
            "is cordoned (spec.unschedulable)".to_owned(),
        )]),
        ..Default::default()
    };
    let actions = jumppod_plan::surge::decide(&rs, std::slice::from_ref(&pod), &leaving);
    assert_eq!(actions.len(), 2, "{actions:?}");

    let scaled = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(admin_kubeconfig())
        .args([
            "-n",
            ns,
            "scale",
            "replicaset",
            &config.name,
            "--replicas=3",
        ])
        .output()
        .expect("kubectl");
    assert!(
        scaled.status.success(),
        "{}",
        String::from_utf8_lossy(&scaled.stderr)
    );
    let applied = apply(&kube, ns, &actions).await.unwrap();
    let outcomes: Vec<ActionOutcome> = applied.iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        [ActionOutcome::Done, ActionOutcome::Stale],
        "the pod's mark is written, the ReplicaSet's scale refused"
    );
    let rs = sets.get(&config.name).await.unwrap();
    assert_eq!(rs.spec.unwrap().replicas, Some(3), "the operator's count");
    assert!(
        !rs.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(jumppod_plan::surge::SURGED_FROM_ANNOTATION)
    );
    done(&kube, ns).await;
}
