//! `jumppod run` on the real control plane (`make bench-controller` starts it).
//!
//! First, with criterion: how long after an old pod finishes the controller has its project's
//! Service recreated with the current selector (the upgrade of issue 12 §6), each sample a
//! fresh project set up outside the timed part, the Service polled every 5 ms.
//!
//! Then its memory and start-up with many projects: 1, 100 and 1000 healthy projects (a
//! ReplicaSet, its ready pod, a NodePort Service each) in one namespace; for each count, the
//! controller's RSS once every project is reconciled, and the time a fresh controller takes to
//! fill its caches and reconcile them all (polled every 200 ms). Issue 12's goal: under 64 MiB
//! at 1000 projects. Not criterion: one sample per count is the measure (a controller's memory
//! does not vary between runs the way a hot loop's time does).

use criterion::{Criterion, SamplingMode};
use futures::StreamExt;
use jumppod::schema;
use jumppod_host::api::Kube;
use jumppod_plan::manifest::Desired;
use jumppod_testkit::cluster::{
    admin, admin_kubeconfig, cluster_dir, evict, namespace, typed, wait_for,
};
use jumppod_testkit::config_for;
use jumppod_testkit::run::{Controller, SMALL, gone, metric, switched_port, upgrading_project};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use std::time::{Duration, Instant};

const NS: &str = "bench-controller";

/// The namespace of the switch's samples, apart from the memory's projects.
const SWITCH_NS: &str = "bench-switch";

/// Samples of the switch; each takes a NodePort of the static band (30000-30085), which the
/// allocator never hands out unasked.
const SWITCH_SAMPLES: usize = 20;

/// An old pod finishes -> its Service is recreated: criterion's samples, one project each.
fn switch(rt: &tokio::runtime::Runtime, c: &mut Criterion) {
    let kube = rt.block_on(admin());
    rt.block_on(namespace(&kube, SWITCH_NS));
    let template = cluster_dir().join("bench-switch-template.yaml");
    std::fs::write(&template, SMALL).unwrap();
    let args = [
        "run",
        "--namespace",
        SWITCH_NS,
        "--listen",
        "127.0.0.1:0",
        "--leader-elect",
        "false",
        "-f",
        template.to_str().unwrap(),
    ];
    let controller = Controller::start(&admin_kubeconfig(), &args, &[], None);
    rt.block_on(controller.leading());
    let mut next = 0;
    let mut group = c.benchmark_group("controller");
    // One project per sample: no warm-up beyond one sample, the fewest samples criterion takes.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(SWITCH_SAMPLES)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_millis(1));
    group.bench_function("old pod finished -> Service switched", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let port = 30000 + next;
                    assert!(port <= 30085, "more samples than the static NodePort band");
                    let project = format!("sw{next}");
                    next += 1;
                    upgrading_project(&kube, SWITCH_NS, &project, port).await;
                    let name = schema::jump_pod_name(&project);
                    let start = Instant::now();
                    evict(&kube, SWITCH_NS, &name).await;
                    let node_port = loop {
                        if let Some(p) = switched_port(&kube, SWITCH_NS, &project).await {
                            break p;
                        }
                        assert!(
                            start.elapsed() < Duration::from_secs(90),
                            "timed out after 90 s waiting for the Service of {project} to be switched"
                        );
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    };
                    took += start.elapsed();
                    assert_eq!(node_port, port, "the same NodePort");
                    gone(&kube, SWITCH_NS, &name).await;
                }
                took
            })
        })
    });
    group.finish();
}

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
    let desired = Desired::from_config(&config);
    svc.create(&PostParams::default(), &desired.service_on(None))
        .await
        .unwrap();
    let rs: Api<ReplicaSet> = Api::namespaced(kube.client.clone(), NS);
    rs.create(&PostParams::default(), &desired.replicaset)
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
    Controller::start(&admin_kubeconfig(), &args, &[], None)
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

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut criterion = Criterion::default().configure_from_args();
    switch(&rt, &mut criterion);
    criterion.final_summary();
    rt.block_on(memory());
}

async fn memory() {
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
