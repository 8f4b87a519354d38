//! The surge and the nodes as the real control plane gives them (API server, scheduler,
//! ReplicaSet controller, node-lifecycle controller; the fake kubelet runs the pods): another
//! writer of a ReplicaSet's `replicas` (an autoscaler, a GitOps tool's self-heal) that sets the
//! count back every few seconds is detected and not fought, and a Node that is deleted is taken
//! for gone. The controller runs as a user of its own with exactly the rules `jumppod rbac
//! --controller` prints.

use jumppod_plan::surge::{SURGE_UNDONE_ANNOTATION, UNDONE_AT_MOST};
use jumppod_testkit::cluster::{
    UserKind, admin, cluster_dir, events, fresh_user, grant_controller, kubeconfig_of, namespace,
    played_node, remove_node, remove_played_nodes, wait_for,
};
use jumppod_testkit::config_for;
use jumppod_testkit::run::Controller;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const RUST_LOG: &str = "info,jumppod_host::controller=debug";
const POOL: &str = "jumppod.test/pool";
/// How often the second writer sets the count back.
const EVERY: Duration = Duration::from_secs(5);

/// How many times Events of `reason` happened in `ns`.
async fn occurrences(kube: &jumppod_host::api::Kube, ns: &str, reason: &str) -> i32 {
    jumppod_testkit::cluster::occurrences(&events(kube, ns, reason).await)
}

/// A namespace with `nodes` of its own (played by the fake kubelet, only its pods tolerate
/// them), `ensure`'s ReplicaSet placed there with its pod Ready, and the controller leading.
struct Project {
    kube: jumppod_host::api::Kube,
    config: jumppod_plan::Config,
    controller: Controller,
    pod: Pod,
}

impl Project {
    async fn start(ns: &'static str, nodes: &[&str]) -> Project {
        let kube = admin().await;
        namespace(&kube, ns).await;
        for n in nodes {
            let node = jumppod_sim::NodeSpec::new(&format!("{ns}-{n}"))
                .label(POOL, ns)
                .taint(POOL, ns, "NoSchedule");
            played_node(&kube, ns, node.to_json()).await;
        }
        let user = fresh_user(UserKind::Plain);
        grant_controller(&kube, ns, &user).await;
        let placement = format!(
            "node_selector: {{{POOL}: {ns}}}\ntolerations: [{{key: {POOL}, operator: Equal, value: {ns}, effect: NoSchedule}}]"
        );
        let config = config_for(ns, "main", &placement);
        jumppod_host::ensure(&kube, &config, &jumppod_host::Gate::native())
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
        let pod = wait_for("the jump pod Ready", || async {
            let list = pods.list(&Default::default()).await.ok()?;
            list.items.into_iter().find(jumppod_plan::objects::is_ready)
        })
        .await;
        let template = cluster_dir().join(format!("surge-{ns}.yaml"));
        std::fs::write(&template, format!("{placement}\n")).unwrap();
        let controller = Controller::watching(
            &kubeconfig_of(&user),
            ns,
            &template,
            RUST_LOG,
            &cluster_dir().join(format!("surge-{ns}.log")),
        );
        controller.leading().await;
        Project {
            kube,
            config,
            controller,
            pod,
        }
    }
}

async fn done(kube: &jumppod_host::api::Kube, ns: &str) {
    remove_played_nodes(kube, ns).await;
    Api::<Namespace>::all(kube.client.clone())
        .delete(ns, &DeleteParams::default())
        .await
        .expect("delete the namespace");
}

/// One node of the test's own, cordoned after the jump pod is Ready on it: the surge's
/// replacement cannot be placed, so the surge stays while a second writer sets the ReplicaSet
/// back to one replica every [`EVERY`]. The first time is taken for an operator's count and the
/// surge made again from it; at the second in a row the controller keeps that writer's count,
/// records it, says so in a Warning Event, and surges that ReplicaSet no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_of_replicas_is_detected_and_not_fought() {
    let ns = "surge-fought";
    let Project {
        kube,
        config,
        controller,
        ..
    } = Project::start(ns, &["a"]).await;

    Api::<Node>::all(kube.client.clone())
        .patch(
            &format!("{ns}-a"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let sets: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), ns);
    let replicas = |rs: &ReplicaSet| rs.spec.as_ref().and_then(|s| s.replicas);
    wait_for("the surge to two", || async {
        (replicas(&sets.get(&config.name).await.ok()?) == Some(2)).then_some(())
    })
    .await;

    // The second writer, as an autoscaler holding the count at one.
    let resets = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (sets, name, resets) = (sets.clone(), config.name.clone(), resets.clone());
        tokio::spawn(async move {
            loop {
                let patch = Patch::Merge(json!({"spec": {"replicas": 1}}));
                if sets
                    .patch(&name, &PatchParams::default(), &patch)
                    .await
                    .is_ok()
                {
                    resets.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(EVERY).await;
            }
        })
    };
    let said = wait_for("the SurgeUndone Event", || async {
        events(&kube, ns, "SurgeUndone").await.into_iter().next()
    })
    .await;
    let rs = sets.get(&config.name).await.unwrap();
    let undone = rs
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SURGE_UNDONE_ANNOTATION))
        .cloned();
    assert_eq!(undone, Some(UNDONE_AT_MOST.to_string()), "{rs:?}");
    let surges = occurrences(&kube, ns, "SurgeStarted").await;

    // Two more of its resets, each answered by a reconcile: no surge any more.
    let at = resets.load(Ordering::SeqCst);
    wait_for("two more resets by the second writer", || async {
        (resets.load(Ordering::SeqCst) >= at + 2).then_some(())
    })
    .await;
    writer.abort();
    let reconciled = controller.log().matches("reconciled").count();
    // A change of the ReplicaSet (what a surge would answer) is decided on.
    sets.patch(
        &config.name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"jumppod.test/touched": "1"}}})),
    )
    .await
    .unwrap();
    wait_for("a reconcile of the touched ReplicaSet", || async {
        (controller.log().matches("reconciled").count() > reconciled).then_some(())
    })
    .await;
    let rs = sets.get(&config.name).await.unwrap();
    assert_eq!(replicas(&rs), Some(1), "surged again: {}", controller.log());
    assert_eq!(
        occurrences(&kube, ns, "SurgeStarted").await,
        surges,
        "surged after it said it would not"
    );
    eprintln!(
        "{surges} surges before it stopped; {}",
        said.note.unwrap_or_default()
    );

    drop(controller);
    done(&kube, ns).await;
}

/// The Node under the jump pod is deleted (a node pool scaled in by hand, a machine removed):
/// its kubelet will confirm nothing. The controller takes the deletion for the cluster's word
/// that the node is gone and deletes the pod itself, so that the ReplicaSet replaces it at once
/// on the other node, instead of after the pod garbage collector's quarantine of orphans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_node_is_deleted_is_deleted_by_the_controller_and_replaced() {
    let ns = "surge-node-gone";
    let Project {
        kube,
        config,
        controller,
        pod,
    } = Project::start(ns, &["a", "b"]).await;
    let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
    remove_node(&kube, &node).await;
    let said = wait_for("the MovedOffLostNode Event", || async {
        events(&kube, ns, "MovedOffLostNode")
            .await
            .into_iter()
            .next()
    })
    .await;
    let note = said.note.unwrap_or_default();
    assert!(
        note.contains(&format!("its node {node} is gone (its Node was deleted)")),
        "{note}"
    );
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let of_main = kube::api::ListParams::default().labels(&format!(
        "{}={}",
        jumppod::schema::INSTANCE_LABEL,
        config.name
    ));
    let replacement = wait_for("a replacement Ready on the other node", || async {
        let list = pods.list(&of_main).await.ok()?;
        list.items.into_iter().find(|p| {
            jumppod_plan::objects::is_ready(p)
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node.as_str())
        })
    })
    .await;
    eprintln!(
        "{} replaced by {}: {note}",
        pod.metadata.name.unwrap_or_default(),
        replacement.metadata.name.unwrap_or_default()
    );
    drop(controller);
    done(&kube, ns).await;
}
