//! `jumppod run`'s memory and start-up with many projects, on the real control plane
//! (`make bench-controller` starts it): 1, 100 and 1000 healthy projects (a ReplicaSet, its
//! ready pod, a NodePort Service each) in one namespace; for each count, the controller's RSS
//! once every project is reconciled, and the time a fresh controller takes to fill its caches
//! and reconcile them all (polled every 200 ms). Issue 12's goal: under 64 MiB at 1000 projects.
//!
//! Not a criterion benchmark: one sample per count is the measure (a controller's memory does
//! not vary between runs the way a hot loop's time does).

#[path = "../tests/common/mod.rs"]
mod common;

use common::cluster::{admin, admin_kubeconfig, namespace, typed, wait_for};
use common::config_for;
use common::run::{Controller, metric};
use futures::StreamExt;
use jumppod::schema;
use jumppod_host::api::Kube;
use jumppod_host::manifest;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use std::time::{Duration, Instant};

const NS: &str = "bench-controller";

/// One healthy project: its pod first (bound to node-1, where the fake kubelet runs it
/// whatever its size), then the Service, then the ReplicaSet that adopts the pod.
async fn project(kube: &Kube, i: usize) {
    let project = format!("p{i}");
    let config = config_for(NS, &project, "");
    let name = schema::jump_pod_name(&project);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), NS);
    pods.create(
        &PostParams::default(),
        &typed(json!({
            "metadata": {"name": format!("{name}-0"), "labels": schema::current_labels(&name, &project)},
            "spec": {"nodeName": "node-1",
                     "containers": [{"name": schema::container_name(&name), "image": schema::DEFAULT_IMAGE}]}
        })),
    )
    .await
    .unwrap();
    // The Service before the ReplicaSet: a controller that sees a ReplicaSet without its
    // Service creates the Service.
    let svc: Api<Service> = Api::namespaced(kube.client.clone(), NS);
    svc.create(&PostParams::default(), &manifest::service(&config, None))
        .await
        .unwrap();
    let rs: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), NS);
    rs.create(&PostParams::default(), &manifest::replicaset(&config))
        .await
        .unwrap();
}

fn start() -> Controller {
    let args = [
        "run",
        "--namespace",
        NS,
        "--listen",
        "127.0.0.1:0",
        "--leader-elect",
        "false",
    ];
    Controller::start(&admin_kubeconfig(), &args, None)
}

/// Waits until `count` projects are ready in the controller's eyes; how long that took.
async fn ready(controller: &Controller, count: usize) -> Duration {
    let start = Instant::now();
    wait_for(&format!("{count} ready projects"), || async {
        let (_, text) = controller.get("/metrics").await;
        let ready = metric(&text, "jumppod_projects{state=\"ready\"}")?;
        (ready as usize == count).then_some(())
    })
    .await;
    start.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let kube = admin().await;
    namespace(&kube, NS).await;
    let running = start();
    let mut made = 0;
    println!(
        "projects | RSS, all reconciled | a fresh controller: RSS | caches filled and all reconciled"
    );
    for count in [1usize, 100, 1000] {
        futures::stream::iter(made..count)
            .map(|i| project(&kube, i))
            .buffer_unordered(16)
            .collect::<Vec<()>>()
            .await;
        made = count;
        ready(&running, count).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss = running.rss_mib();
        let fresh = start();
        let took = ready(&fresh, count).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        println!(
            "{count} | {rss:.1} MiB | {:.1} MiB | {took:.2?}",
            fresh.rss_mib()
        );
    }
}
