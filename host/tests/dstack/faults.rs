//! Faults of a real node that must cost dstack's users nothing: the jump pod of the released
//! server (0.22.5), bare, kept by `jumppod run`.

use super::generations::{RUNNER_PORT, controller, first_job, node_of, refused};
use super::*;
use jumppod_plan::keeper::STANDBY_ANNOTATION;
use jumppod_plan::objects::is_active;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::ResourceExt;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// How long the kubelet stays paused: past `jumppod run`'s `--silent-node-after` (20 s), within
/// the node-lifecycle controller's grace period (50 s), so the cluster never finds it lost.
const PAUSE: Duration = Duration::from_secs(30);

/// How long the jump pod's node stays Ready False, its runtime down, counted from when that is
/// first seen: a runtime's restart, a few seconds of its kubelet's word that the node is not Ready.
const RUNTIME_DOWN: Duration = Duration::from_secs(10);

/// What polling saw, every 500 ms, while a fault lasted.
#[derive(Clone, Debug, Default)]
struct Seen {
    /// The uids of the pod under the jump pod's name; `gone` when there was none.
    uids: BTreeSet<String>,
    /// The pod seen with a deletionTimestamp.
    deleting: bool,
    /// The pod's Ready condition, each status seen.
    pod_ready: BTreeSet<bool>,
    /// The node's Ready condition, each status seen.
    node_ready: BTreeSet<String>,
    /// The standbys seen (annotation `jumppod.io/standby-for`), by name.
    standbys: BTreeSet<String>,
}

impl Seen {
    /// The pod under the jump pod's name was always the one of `uid`, never being deleted.
    fn never_replaced(&self, uid: &str, when: &str) {
        assert_eq!(
            self.uids,
            BTreeSet::from([uid.to_owned()]),
            "the jump pod was replaced {when}"
        );
        assert!(!self.deleting, "the jump pod was deleted {when}");
    }
}

/// Polls, every 500 ms until aborted, the pod `name`, its node `node` and the standbys.
fn watch(
    kube: &Kube,
    ns: &str,
    name: &str,
    node: &str,
) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (pods, nodes) = (
        Api::<Pod>::namespaced(kube.client.clone(), ns),
        Api::<Node>::all(kube.client.clone()),
    );
    let (record, name, node) = (seen.clone(), name.to_owned(), node.to_owned());
    let task = tokio::spawn(async move {
        loop {
            let pod = pods.get_opt(&name).await;
            let list = pods.list(&Default::default()).await;
            let ready = nodes.get(&node).await.ok().and_then(|n| {
                let conditions = n.status?.conditions?;
                Some(conditions.into_iter().find(|c| c.type_ == "Ready")?.status)
            });
            {
                let mut seen = record.lock().unwrap();
                if let Ok(pod) = pod {
                    let uid = pod.as_ref().and_then(|p| p.metadata.uid.clone());
                    seen.uids.insert(uid.unwrap_or_else(|| "gone".into()));
                    seen.pod_ready
                        .extend(pod.as_ref().and_then(|p| condition(p, "Ready")));
                    seen.deleting |= pod.is_some_and(|p| p.metadata.deletion_timestamp.is_some());
                }
                seen.node_ready.extend(ready);
                for p in list.map(|l| l.items).unwrap_or_default() {
                    if p.annotations().contains_key(STANDBY_ANNOTATION) {
                        seen.standbys.insert(p.name_any());
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    (seen, task)
}

/// The renewTime of `node`'s Lease, as its kubelet last wrote it.
async fn lease_renewed(kube: &Kube, node: &str) -> Option<MicroTime> {
    let leases = Api::<Lease>::namespaced(kube.client.clone(), "kube-node-lease");
    leases.get(node).await.ok()?.spec?.renew_time
}

/// dstack's jump pod Ready under `jumppod run`, a jump held through it to alice's job, new
/// connections probed through the NodePort at 127.0.0.1 and at the other node, and the pod, its
/// node and the standbys polled ([`watch`]): what a fault of the pod's node is tried against.
struct Held {
    name: String,
    uid: String,
    node: String,
    jump: Session,
    probes: Probes,
    seen: Arc<Mutex<Seen>>,
    watching: tokio::task::JoinHandle<()>,
}

impl Held {
    async fn start(scenario: &Scenario) -> Held {
        let (name, (pod, port)) = (scenario.project.jump_pod(), scenario.ready_jump_pod().await);
        let (uid, node) = (pod.metadata.uid.clone().unwrap_or_default(), node_of(&pod));
        let alice = scenario.user("alice");
        let job_ip = first_job(
            scenario,
            &alice,
            port,
            "alice's key, appended by dstack, to jump",
        )
        .await;
        let mut jump = Session::jump(&alice, port, &job_ip, RUNNER_PORT);
        jump.still_open_after(0, "once opened").await;
        let nodes = real_nodes();
        let probes = Probes::start_on(
            &scenario.project.key,
            &["127.0.0.1", nodes.other_than(&node)],
            port,
        );
        probes.answering(&name).await;
        let (seen, watching) = watch(&scenario.kube, scenario.ns, &name, &node);
        Held {
            name,
            uid,
            node,
            jump,
            probes,
            seen,
            watching,
        }
    }

    /// Once the pod answers new connections again: what polling saw, the new connections
    /// refused and made since `began`, and the held jump, checked still open `what`.
    async fn end(self, began: Instant, what: &str) -> (Seen, (usize, usize), Session) {
        self.probes.answering(&self.name).await;
        let outcomes = self.probes.stopped().await;
        self.watching.abort();
        let seen = self.seen.lock().unwrap().clone();
        let mut jump = self.jump;
        let lines = jump.lines();
        jump.still_open_after(lines, what).await;
        (seen, refused(&outcomes, began), jump)
    }
}

/// `pod` if it is still the jump pod `uid` and not being deleted; a panic otherwise: a deletion
/// is for good, no use waiting out a bound.
fn kept(pod: Option<Pod>, uid: &str) -> Pod {
    match pod {
        Some(p)
            if p.metadata.uid.as_deref() == Some(uid)
                && p.metadata.deletion_timestamp.is_none() =>
        {
            p
        }
        other => {
            let meta = other.map(|p| (p.metadata.uid, p.metadata.deletion_timestamp));
            panic!("the jump pod deleted or replaced (uid {uid} before): {meta:?}")
        }
    }
}

/// Waits (bounded by `limit`) until no standby is left active.
async fn no_standby_left(pods: &Api<Pod>, limit: Duration) {
    wait_for_up_to("no standby left active", limit, || async {
        let list = pods.list(&Default::default()).await.ok()?;
        let active = list
            .items
            .iter()
            .filter(|p| p.annotations().contains_key(STANDBY_ANNOTATION) && is_active(p));
        (active.count() == 0).then_some(())
    })
    .await;
}

/// The jump pod's kubelet stopped for [`PAUSE`]: its containerd, its pods and kube-proxy run on,
/// only its node's Lease goes unrenewed. `jumppod run` must not take the pod for lost: it stays
/// (the same uid, never deleted), the cluster never finds the node lost, no new SSH connection
/// is refused, and a jump held through it to a job keeps carrying data.
#[tokio::test]
async fn a_paused_kubelet_cuts_no_jump_and_the_jump_pod_stays() {
    let scenario = Scenario::alone("dstack-paused").await;
    let _controller = controller(&scenario);
    let (kube, pods) = (&scenario.kube, scenario.pods());
    let fault = Held::start(&scenario).await;
    let (name, uid, node) = (fault.name.clone(), fault.uid.clone(), fault.node.clone());

    let began = Instant::now();
    let paused = KubeletPause::pause(kube, &node).await;
    let (paused_at, lines_at_pause) = (Instant::now(), fault.jump.lines());
    let lease_at_pause = lease_renewed(kube, &node).await;
    // The fault's length, counted from the kubelet seen stopped.
    tokio::time::sleep_until((paused_at + PAUSE).into()).await;
    let lease_at_resume = lease_renewed(kube, &node).await;
    let during = fault.jump.lines() - lines_at_pause;
    paused.resume(kube).await;
    let resumed = Instant::now();

    let back = wait_for_up_to(
        "the node's Lease renewed and the jump pod, the same, Ready after the resume",
        Duration::from_secs(90),
        || async {
            let renewed = Some(lease_renewed(kube, &node).await?) != lease_at_resume;
            let kept = kept(pods.get_opt(&name).await.ok()?, &uid);
            (renewed && condition(&kept, "Ready") == Some(true)).then(|| resumed.elapsed())
        },
    )
    .await;
    no_standby_left(&pods, Duration::from_secs(90)).await;
    let (seen, (failed, made), held) = fault.end(began, "after the resume").await;
    eprintln!(
        "kubelet of {node} paused {PAUSE:?}: {failed} of {made} new connections refused; standbys \
         made: {} {:?}; the jump pod Ready with its Lease renewed {back:?} after the resume; \
         node Ready seen {:?}; the held jump printed {during} lines during the pause",
        seen.standbys.len(),
        seen.standbys,
        seen.node_ready,
    );
    assert_eq!(
        lease_at_pause, lease_at_resume,
        "the Lease was renewed during the pause: not paused"
    );
    seen.never_replaced(&uid, "while its kubelet was paused");
    // The cluster never found the node lost. (A kubelet that resumes may report its node not
    // Ready for a moment, until its first look at the runtime since the pause.)
    assert!(
        !seen.node_ready.contains("Unknown"),
        "{node}'s Ready condition: {:?}",
        seen.node_ready
    );
    assert_eq!(failed, 0, "new connections refused during the pause");
    assert!(during > 0, "the held jump carried nothing during the pause");
    held.close().await;
}

/// The jump pod's node's containerd stopped, then started again [`RUNTIME_DOWN`] after its live
/// kubelet reported the node Ready False, as a runtime upgrade does: the shims keep the pod's
/// processes running. `jumppod run` must keep the pod (the same uid, never deleted) and may
/// only start a standby beside it; a jump held through it keeps carrying data, and once the
/// runtime is back the pod is Ready again and no standby is left. New connections meanwhile are
/// counted, not required to pass: the node-lifecycle controller marks the node's pods not Ready
/// at once, and until the standby is Ready the Service has no endpoint to send them to.
#[tokio::test]
async fn a_runtime_restart_keeps_the_jump_pod_and_cuts_no_jump() {
    let scenario = Scenario::alone("dstack-runtime").await;
    let _controller = controller(&scenario);
    let (kube, pods) = (&scenario.kube, scenario.pods());
    let fault = Held::start(&scenario).await;
    let (name, uid, node) = (fault.name.clone(), fault.uid.clone(), fault.node.clone());

    let began = Instant::now();
    let stopped = ContainerdStop::stop(kube, &node).await;
    let gone = Instant::now();
    let not_ready = wait_for_up_to(
        "the node Ready False, its kubelet finding the runtime down",
        Duration::from_secs(90),
        || async { (node_state(kube, &node).await.0 == "False").then(Instant::now) },
    )
    .await;
    let lines_at_not_ready = fault.jump.lines();
    // The fault's length, counted from the node seen not Ready.
    tokio::time::sleep_until((not_ready + RUNTIME_DOWN).into()).await;
    let during = fault.jump.lines() - lines_at_not_ready;
    let started = Instant::now();
    stopped.start(kube).await;
    let limit = Duration::from_secs(120);
    let back = wait_for_up_to(
        "the node Ready and the jump pod, the same, Ready again after containerd's start",
        limit,
        || async {
            let kept = kept(pods.get_opt(&name).await.ok()?, &uid);
            let ready = node_state(kube, &node).await.0 == "True";
            (ready && condition(&kept, "Ready") == Some(true)).then(|| started.elapsed())
        },
    )
    .await;
    no_standby_left(&pods, limit.saturating_sub(started.elapsed())).await;
    let (seen, (failed, made), held) = fault.end(began, "after containerd's start").await;
    eprintln!(
        "containerd of {node} stopped: the node Ready False {:?} after it was gone; {failed} of \
         {made} new connections refused; standbys made: {} {:?}; the jump pod Ready again {back:?} \
         after containerd's start; its Ready seen {:?}, the node's {:?}; the held jump printed \
         {during} lines in the {RUNTIME_DOWN:?} not Ready",
        not_ready - gone,
        seen.standbys.len(),
        seen.standbys,
        seen.pod_ready,
        seen.node_ready,
    );
    seen.never_replaced(&uid, "while its node's runtime was down");
    assert!(
        seen.node_ready.contains("False"),
        "{node} never seen Ready False: {:?}",
        seen.node_ready
    );
    assert!(
        during > 0,
        "the held jump carried nothing while the runtime was down"
    );
    held.close().await;
}
