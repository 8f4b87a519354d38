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
/// the node-lifecycle controller's grace period (50 s), so the node stays Ready.
const PAUSE: Duration = Duration::from_secs(30);

/// What polling saw, every 500 ms, while a fault lasted.
#[derive(Clone, Debug, Default)]
struct Seen {
    /// The uids of the pod under the jump pod's name; `gone` when there was none.
    uids: BTreeSet<String>,
    /// The pod seen with a deletionTimestamp.
    deleting: bool,
    /// The node's Ready condition, each status seen.
    node_ready: BTreeSet<String>,
    /// The standbys seen (annotation `jumppod.io/standby-for`), by name.
    standbys: BTreeSet<String>,
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

/// The jump pod's kubelet stopped for [`PAUSE`]: its containerd, its pods and kube-proxy run on,
/// only its node's Lease goes unrenewed. `jumppod run` must not take the pod for lost: it stays
/// (the same uid, never deleted), the node stays Ready, no new SSH connection is refused, and a
/// jump held through it to a job keeps carrying data.
#[tokio::test]
async fn a_paused_kubelet_cuts_no_jump_and_the_jump_pod_stays() {
    let scenario = Scenario::alone("dstack-paused").await;
    let _controller = controller(&scenario);
    let (kube, name, pods) = (&scenario.kube, scenario.project.jump_pod(), scenario.pods());
    let (pod, port) = scenario.ready_jump_pod().await;
    let (uid, node) = (pod.metadata.uid.clone().unwrap_or_default(), node_of(&pod));
    let alice = scenario.user("alice");
    let job_ip = first_job(
        &scenario,
        &alice,
        port,
        "alice's key, appended by dstack, to jump",
    )
    .await;

    let mut held = Session::jump(&alice, port, &job_ip, RUNNER_PORT);
    held.still_open_after(0, "once opened").await;
    let nodes = real_nodes();
    let probes = Probes::start_on(
        &scenario.project.key,
        &["127.0.0.1", nodes.other_than(&node)],
        port,
    );
    probes.answering(&name).await;
    let (seen, watching) = watch(kube, scenario.ns, &name, &node);

    let began = Instant::now();
    let paused = KubeletPause::pause(kube, &node).await;
    let (paused_at, lines_at_pause) = (Instant::now(), held.lines());
    let lease_at_pause = lease_renewed(kube, &node).await;
    // The fault's length, counted from the kubelet seen stopped.
    tokio::time::sleep_until((paused_at + PAUSE).into()).await;
    let lease_at_resume = lease_renewed(kube, &node).await;
    let during = held.lines() - lines_at_pause;
    paused.resume(kube).await;
    let resumed = Instant::now();

    let back = wait_for_up_to(
        "the node's Lease renewed and the jump pod, the same, Ready after the resume",
        Duration::from_secs(90),
        || async {
            let renewed = Some(lease_renewed(kube, &node).await?) != lease_at_resume;
            let pod = pods.get_opt(&name).await.ok()?;
            // A deletion is for good: no use waiting out the bound.
            let kept = pod.as_ref().filter(|p| {
                p.metadata.uid.as_deref() == Some(&*uid) && p.metadata.deletion_timestamp.is_none()
            });
            let kept = kept.unwrap_or_else(|| {
                let meta = pod
                    .as_ref()
                    .map(|p| (&p.metadata.uid, &p.metadata.deletion_timestamp));
                panic!("the jump pod deleted or replaced (uid {uid} before): {meta:?}")
            });
            (renewed && condition(kept, "Ready") == Some(true)).then(|| resumed.elapsed())
        },
    )
    .await;
    wait_for_up_to(
        "no standby left active",
        Duration::from_secs(90),
        || async {
            let list = pods.list(&Default::default()).await.ok()?;
            let active = list
                .items
                .iter()
                .filter(|p| p.annotations().contains_key(STANDBY_ANNOTATION) && is_active(p));
            (active.count() == 0).then_some(())
        },
    )
    .await;
    probes.answering(&name).await;
    let outcomes = probes.stopped().await;
    watching.abort();
    let seen = seen.lock().unwrap().clone();
    let (failed, made) = refused(&outcomes, began);
    let lines = held.lines();
    held.still_open_after(lines, "after the resume").await;
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
    assert_eq!(
        seen.uids,
        BTreeSet::from([uid.clone()]),
        "the jump pod was replaced"
    );
    assert!(
        !seen.deleting,
        "the jump pod was deleted while its kubelet was paused"
    );
    assert_eq!(
        seen.node_ready,
        BTreeSet::from(["True".to_owned()]),
        "{node}'s Ready condition"
    );
    assert_eq!(failed, 0, "new connections refused during the pause");
    assert!(during > 0, "the held jump carried nothing during the pause");
    held.close().await;
}
