//! Round trips through the real kube client: get, list and create, plus a one-off report of
//! the process RSS after 1000 namespaces each with a ReplicaSet, a pod and a Service.

use criterion::{Criterion, Throughput};
use jumppod_sim::{NodeSpec, Sim, SimConfig};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("typed")
}

async fn client(sim: &Sim) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(sim.kubeconfig_path()).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(cfg).expect("client")
}

fn pod(name: &str) -> Pod {
    typed(
        json!({"metadata": {"name": name, "generateName": "bench-", "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1m"}}}]}}),
    )
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn round_trips(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let nodes = (1..=3)
        .map(|i| {
            let mut n = NodeSpec::new(&format!("node-{i}")).cpu("100000");
            n.pods = 1_000_000;
            n
        })
        .collect();
    let sim = rt
        .block_on(Sim::start(SimConfig {
            nodes,
            ..SimConfig::default()
        }))
        .unwrap();
    let client = rt.block_on(client(&sim));
    let pods: Api<Pod> = Api::namespaced(client, "default");
    rt.block_on(async {
        for i in 0..10 {
            pods.create(&PostParams::default(), &pod(&format!("p{i}")))
                .await
                .unwrap();
        }
    });
    let mut g = c.benchmark_group("kube-client");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    g.bench_function("get", |b| b.iter(|| rt.block_on(pods.get("p0")).unwrap()));
    g.bench_function("list-10", |b| {
        b.iter(|| {
            rt.block_on(pods.list(&ListParams::default().labels("app=bench")))
                .unwrap()
        })
    });
    g.bench_function("create", |b| {
        b.iter(|| {
            rt.block_on(pods.create(&PostParams::default(), &pod("")))
                .unwrap()
        })
    });
    g.finish();
    rt.block_on(sim.shutdown());
}

fn thousand_namespaces() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let nodes = (1..=3)
            .map(|i| {
                let mut n = NodeSpec::new(&format!("node-{i}")).cpu("1000").memory("1Ti");
                n.pods = 1000;
                n
            })
            .collect();
        let sim = Sim::start(SimConfig { nodes, ..SimConfig::default() }).await.unwrap();
        let c = client(&sim).await;
        let before = rss_kib();
        let start = Instant::now();
        let nss: Api<Namespace> = Api::all(c.clone());
        for i in 0..1000 {
            let ns = format!("ns-{i}");
            nss.create(&PostParams::default(), &typed(json!({"metadata": {"name": ns}}))).await.unwrap();
            let rs: ReplicaSet = typed(json!({"metadata": {"name": "web"}, "spec": {"replicas": 1,
                "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}}}}));
            Api::<ReplicaSet>::namespaced(c.clone(), &ns).create(&PostParams::default(), &rs).await.unwrap();
            let p: Pod = typed(json!({"metadata": {"name": "jump"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}));
            Api::<Pod>::namespaced(c.clone(), &ns).create(&PostParams::default(), &p).await.unwrap();
            let s: Service = typed(json!({"metadata": {"name": "ssh"}, "spec": {"type": "NodePort", "ports": [{"port": 22}]}}));
            Api::<Service>::namespaced(c.clone(), &ns).create(&PostParams::default(), &s).await.unwrap();
        }
        let created = start.elapsed();
        sim.settle().await;
        let settled = start.elapsed();
        let after = rss_kib();
        let n = sim.list("pods", None).len();
        println!(
            "1000 namespaces (4000 creates, {n} pods): created in {created:?}, settled in {settled:?}; \
             VmRSS {before} KiB -> {after} KiB (+{} KiB)",
            after.saturating_sub(before)
        );
        sim.shutdown().await;
    });
}

fn main() {
    thousand_namespaces();
    let mut c = Criterion::default().configure_from_args();
    round_trips(&mut c);
    c.final_summary();
}
