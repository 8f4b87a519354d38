//! Every generation of dstack server an operator runs, unmodified, beside `jumppod webhook` and
//! `jumppod run`: its jump pod comes back by itself behind the same Service and NodePort, the
//! keys dstack granted its live jobs survive every replacement, and a drain refuses no new SSH
//! connection. The released server (0.22.5) is dstack's own code; a server of dstack's
//! ReplicaSet change is the driver's `replicaset`, which makes the ReplicaSet of the pod that same
//! code builds.

use super::*;
use jumppod_testkit::run::{Controller, SMALL};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Service;
use kube::api::EvictParams;

/// What stands in for dstack's runner in a job pod (it is downloaded at the pod's start, which
/// cannot happen here): sshd on the runner's port, with the keys dstack gave the job.
const RUNNER: &str = "mkdir -p /run/sshd /root/.ssh && printf '%s\\n' \"$JOB_AUTHORIZED_KEYS\" \
    > /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys && ssh-keygen -A \
    >/dev/null && exec /usr/sbin/sshd -D -e -p 10022";
/// [`RUNNER`]'s port.
pub(super) const RUNNER_PORT: u16 = 10022;

/// The controller's log filter in these scenarios.
const RUST_LOG: &str = "info,jumppod_host::controller=debug";

/// `jumppod run` for the scenario's namespace, as the admin, its log beside the scenario's.
pub(super) fn controller(scenario: &Scenario) -> Controller {
    let template = scenario.dir.join("controller.yaml");
    std::fs::create_dir_all(&scenario.dir).unwrap();
    std::fs::write(&template, SMALL).unwrap();
    let template = template.display().to_string();
    let args = [
        "run",
        "-v",
        "--namespace",
        scenario.ns,
        "--listen",
        "127.0.0.1:0",
        "--leader-elect=false",
        "-f",
        &template,
    ];
    Controller::start(
        &admin_kubeconfig(),
        &args,
        &[("RUST_LOG", RUST_LOG)],
        Some(&scenario.dir.join("controller.log")),
    )
}

/// A job of the project, as `run_job` makes its pod: dstack's labels, and its users' `keys`
/// with the project's in the runner's arguments. Its pod, once it runs, and its IP.
async fn job(scenario: &Scenario, name: &str, keys: &[&Path]) -> String {
    let project = scenario.project.public_file();
    let keys: Vec<String> = keys.iter().map(|k| public_file(k)).collect();
    let mut args = vec![
        "--project",
        &scenario.project.name,
        "--name",
        name,
        "--project-key",
        &project,
        "--runner",
        RUNNER,
    ];
    for key in &keys {
        args.extend(["--key", key]);
    }
    scenario.dstack.run("job-pod", &args).await;
    let pod = ready(&scenario.pods(), name).await;
    pod.status
        .and_then(|s| s.pod_ip)
        .expect("the job pod has an IP")
}

/// SSH with `user`'s key through the jump pod at the NodePort (`ssh -W`, as `ssh -J` does) to
/// the job's runner at `target`: the hostname it answers, or why not.
async fn jump_to(user: &Path, port: i32, target: &str) -> Result<String, String> {
    let ssh = jump_command(user, port, target, RUNNER_PORT, "hostname");
    outcome(ssh, Duration::from_secs(30)).await
}

/// Job 1 with `user`'s key, provisioned by dstack through the jump pod on `port` (its
/// `ssh_proxy` that port), and `user`'s key jumping to it (`what` names the wait): its IP.
pub(super) async fn first_job(scenario: &Scenario, user: &Path, port: i32, what: &str) -> String {
    let job_ip = job(scenario, "main-job-1", &[user]).await;
    let proxy = scenario.dstack.configure(&scenario.project, &[user]).await;
    assert_eq!(proxy["port"], port, "dstack's ssh_proxy: {proxy}");
    jumps(user, port, &job_ip, "main-job-1", what).await;
    job_ip
}

/// Waits (bounded) until `user`'s key jumps through the NodePort to the job `job` at `target`.
async fn jumps(user: &Path, port: i32, target: &str, job: &str, what: &str) -> Duration {
    let started = Instant::now();
    wait_for_up_to(what, POD_UP, || async {
        (jump_to(user, port, target).await.as_deref() == Ok(job)).then_some(())
    })
    .await;
    started.elapsed()
}

/// The Service's uid and NodePort.
async fn service(scenario: &Scenario) -> (String, i32) {
    let name = jumppod::schema::service_name(&scenario.project.jump_pod());
    let svc = Api::<Service>::namespaced(scenario.kube.client.clone(), scenario.ns)
        .get(&name)
        .await
        .expect("the jump pod's Service");
    let port = jumppod_plan::objects::node_port(&svc).expect("a NodePort");
    (svc.metadata.uid.unwrap_or_default(), port)
}

pub(super) fn node_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// Waits (bounded) until the pod `name` is Ready, another than `uid`.
async fn ready_again(pods: &Api<Pod>, name: &str, uid: &str) -> Pod {
    wait_for_up_to(&format!("{name} made again and Ready"), POD_UP, || async {
        pods.get(name).await.ok().filter(|p| {
            p.metadata.uid.as_deref() != Some(uid) && condition(p, "Ready") == Some(true)
        })
    })
    .await
}

/// `kubectl drain` of `node`, only the project's jump pods evicted (`--force`: a bare pod has
/// no controller, which drain refuses without it); how long it took.
async fn drain(node: &str, jump_pod: &str) -> Duration {
    let started = Instant::now();
    let selector = format!(
        "--pod-selector={}={jump_pod}",
        jumppod::schema::INSTANCE_LABEL
    );
    let out = kubectl(&[
        "drain",
        node,
        "--force",
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

/// Of the probes made since `from`: how many were refused or failed, of how many. Each
/// failure is printed, with when it was made.
pub(super) fn refused(outcomes: &[Probe], from: Instant) -> (usize, usize) {
    let since: Vec<&Probe> = outcomes.iter().filter(|(made, _)| *made >= from).collect();
    let failed: Vec<(Duration, &String)> = since
        .iter()
        .filter_map(|(made, o)| Some((made.duration_since(from), o.as_ref().err()?)))
        .collect();
    for (at, why) in &failed {
        eprintln!("  failed {at:?} after: {why}");
    }
    (failed.len(), since.len())
}

/// dstack 0.22.5, unmodified, beside `jumppod webhook` and `jumppod run`:
/// (a) dstack provisions job 1 (its own `run_job` and `update_provisioning_data` path) and the
/// job's user key jumps to the job pod;
/// (c) `kubectl drain` of the jump pod's node, a new SSH connection every 200 ms through the
/// NodePort of the node that stays and of the node's loopback: none refused, and job 1's key
/// still jumps;
/// (b) the jump pod evicted through the Eviction API: SSH comes back with no call of dstack's,
/// on the same NodePort, job 1's key still jumps, and dstack's next job leaves the pod and the
/// Service alone (the same Service uid);
/// (d) the jump pod's node loses its power: how long until SSH is back, and the pod under its
/// name Ready behind the same Service once the node boots.
#[tokio::test]
async fn a_released_servers_jump_pod_comes_back_by_itself_on_its_nodeport_with_its_users_keys() {
    let scenario = Scenario::alone("dstack-released").await;
    let _controller = controller(&scenario);
    let name = scenario.project.jump_pod();
    let pods = scenario.pods();
    let key = &scenario.project.key;

    // (a)
    let (pod, port) = scenario.ready_jump_pod().await;
    let (service_uid, _) = service(&scenario).await;
    let alice = scenario.user("alice");
    let job_ip = first_job(
        &scenario,
        &alice,
        port,
        "(a) job 1's user key to jump to its job",
    )
    .await;
    eprintln!("(a) job 1 provisioned by dstack 0.22.5 through NodePort {port}; its user key jumps");

    // (c) Through the node's loopback and through the address of the node that stays.
    let node = node_of(&pod);
    let nodes = real_nodes();
    let probes = Probes::start_on(key, &["127.0.0.1", nodes.other_than(&node)], port);
    probes.answering(&name).await;
    let began = Instant::now();
    let _uncordon = Restore(vec!["uncordon".into(), node.clone()]);
    let took = drain(&node, &name).await;
    let again = ready_again(
        &pods,
        &name,
        pod.metadata.uid.as_deref().unwrap_or_default(),
    )
    .await;
    probes.answering(&name).await;
    let outcomes = probes.stopped().await;
    let (failed, made) = refused(&outcomes, began);
    assert_ne!(node_of(&again), node, "made again on the drained node");
    assert_eq!(service(&scenario).await, (service_uid.clone(), port));
    let after = jumps(
        &alice,
        port,
        &job_ip,
        "main-job-1",
        "(c) job 1's key to jump after the drain",
    )
    .await;
    eprintln!(
        "(c) drain of {node}: {failed} of {made} new connections refused (through 127.0.0.1 and \
         {}); the drain took {took:?}; \
         job 1's key jumped {after:?} after the pod was back",
        nodes.other_than(&node)
    );
    assert_eq!(
        failed,
        0,
        "refused during the drain: {:?}",
        outcomes
            .iter()
            .filter(|(_, o)| o.is_err())
            .collect::<Vec<_>>()
    );
    drop(_uncordon);

    // (b)
    let probes = Probes::start(key, port);
    probes.answering(&name).await;
    let began = Instant::now();
    pods.evict(&name, &EvictParams::default())
        .await
        .expect("evict the jump pod");
    let back = ready_again(
        &pods,
        &name,
        again.metadata.uid.as_deref().unwrap_or_default(),
    )
    .await;
    probes.answering(&name).await;
    let outcomes = probes.stopped().await;
    let (failed, made) = refused(&outcomes, began);
    assert_eq!(
        service(&scenario).await,
        (service_uid.clone(), port),
        "the same Service and NodePort"
    );
    let after = jumps(
        &alice,
        port,
        &job_ip,
        "main-job-1",
        "(b) job 1's key to jump after the eviction",
    )
    .await;
    let next = scenario.dstack.jump_pod(&scenario.project).await;
    assert_eq!(
        next["service_uid"], service_uid,
        "dstack's next job recreated the Service: {next}"
    );
    assert_eq!(
        next["pod_uid"],
        back.metadata.uid.clone().unwrap_or_default(),
        "dstack's next job recreated the pod: {next}"
    );
    eprintln!(
        "(b) eviction: {failed} of {made} new connections refused, no dstack call; the pod back \
         {:?} after; job 1's key jumped {after:?} after; dstack's next job kept the Service",
        began.elapsed()
    );

    // (d)
    let node = node_of(&back);
    let cut = Instant::now();
    let power = PowerCut::cut(&scenario.kube, &node).await;
    let what = "(d) SSH through the NodePort after the power cut";
    wait_for_up_to(what, POD_UP, || async {
        // Three connections in a row answered: SSH is back, not one lucky probe.
        for _ in 0..3 {
            ssh(key, port, "hostname").await.ok()?;
        }
        Some(())
    })
    .await;
    let back_after = cut.elapsed();
    eprintln!("(d) power cut of {node}: SSH back through NodePort {port} {back_after:?} after");
    // Booted before the cluster found the node lost, its kubelet starts the same pod again (it
    // was taken out of rotation, never deleted); found lost first, the pod was made again
    // elsewhere. Either way the pod under its name serves behind the same Service.
    power.restore(&scenario.kube).await;
    let last = ready(&pods, &name).await;
    let again = if last.metadata.uid == back.metadata.uid {
        "the same pod, restarted by its kubelet"
    } else {
        "made again"
    };
    assert_eq!(service(&scenario).await, (service_uid, port));
    eprintln!("(d) after the boot: {again} on {}", node_of(&last));
}

/// A server of dstack's ReplicaSet change: the ReplicaSet (its template the pod dstack 0.22.5
/// builds) and the Service, each created if missing. A user's key dstack appends over SSH for a
/// job is kept across the drain of the pod's node, which refuses no new SSH connection: the
/// surge starts a replacement first, with the kit and the job's keys.
#[tokio::test]
async fn dstacks_own_replicaset_is_drained_refusing_nothing_and_keeps_the_users_keys() {
    let scenario = Scenario::alone("dstack-replicaset").await;
    let _controller = controller(&scenario);
    let name = scenario.project.jump_pod();
    let pods = scenario.pods();
    let key = &scenario.project.key;
    let made = scenario
        .dstack
        .run(
            "replicaset",
            &[
                "--project",
                &scenario.project.name,
                "--project-key",
                &scenario.project.public_file(),
            ],
        )
        .await;
    let port = made["node_port"].as_i64().expect("a NodePort") as i32;
    let selector = format!("{}={name}", jumppod::schema::INSTANCE_LABEL);
    let first = wait_for_up_to("the ReplicaSet's pod Ready", POD_UP, || async {
        let list = pods
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
            .ok()?;
        list.items
            .into_iter()
            .find(|p| condition(p, "Ready") == Some(true))
    })
    .await;
    let first_name = first.metadata.name.clone().unwrap_or_default();
    wait_for_up_to("ssh through the NodePort", POD_UP, || async {
        ssh(key, port, "hostname")
            .await
            .ok()
            .filter(|h| *h == first_name)
    })
    .await;
    let bob = scenario.user("bob");
    let job_ip = job(&scenario, "main-job-2", &[&bob]).await;
    scenario
        .dstack
        .grant(&scenario.project, port, &[&bob])
        .await;
    jumps(
        &bob,
        port,
        &job_ip,
        "main-job-2",
        "bob's key, appended by dstack, to jump",
    )
    .await;

    let node = node_of(&first);
    let nodes = real_nodes();
    let probes = Probes::start_on(key, &["127.0.0.1", nodes.other_than(&node)], port);
    probes.answering(&first_name).await;
    let began = Instant::now();
    let _uncordon = Restore(vec!["uncordon".into(), node.clone()]);
    let took = drain(&node, &name).await;
    // The drain's eviction races the surge, and each may make a replacement: the one that stays
    // is the pod left once the ReplicaSet is back at one replica.
    let sets = Api::<ReplicaSet>::namespaced(scenario.kube.client.clone(), scenario.ns);
    let second = wait_for_up_to(
        "the ReplicaSet back at one replica, its one pod another and Ready",
        POD_UP,
        || async {
            let replicas = sets.get(&name).await.ok()?.spec?.replicas;
            let list = pods
                .list(&kube::api::ListParams::default().labels(&selector))
                .await
                .ok()?;
            let left: Vec<Pod> = list
                .items
                .into_iter()
                .filter(jumppod_plan::objects::is_active)
                .collect();
            match left.as_slice() {
                [p] if replicas == Some(1)
                    && p.metadata.name != first.metadata.name
                    && condition(p, "Ready") == Some(true) =>
                {
                    Some(p.clone())
                }
                _ => None,
            }
        },
    )
    .await;
    let second_name = second.metadata.name.clone().unwrap_or_default();
    probes.answering(&second_name).await;
    let outcomes = probes.stopped().await;
    let (failed, total) = refused(&outcomes, began);
    let after = jumps(
        &bob,
        port,
        &job_ip,
        "main-job-2",
        "bob's key to jump through the replacement",
    )
    .await;
    eprintln!(
        "(e) dstack's ReplicaSet, drain of {node}: {failed} of {total} new connections refused \
         (through 127.0.0.1 and {}); the drain took {took:?}; bob's key jumped through \
         {second_name} {after:?} after it was Ready",
        nodes.other_than(&node)
    );
    assert_eq!(
        failed,
        0,
        "refused during the drain: {:?}",
        outcomes
            .iter()
            .filter(|(_, o)| o.is_err())
            .collect::<Vec<_>>()
    );
    assert_ne!(node_of(&second), node);
}
