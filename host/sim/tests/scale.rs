//! Scale: 1000 namespaces, each with a ReplicaSet, a pod and a Service, through the kube client.

use jumppod_sim::testing::*;
use jumppod_sim::{NodeSpec, Sim, SimConfig};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

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

// A thousand namespaces' worth of objects are all served and reconciled (RSS is reported, not asserted).
#[tokio::test(flavor = "multi_thread")]
async fn thousand_namespaces() {
    let nodes = (1..=3).map(|i| {
        let mut n = NodeSpec::new(&format!("node-{i}"))
            .cpu("1000")
            .memory("1Ti");
        n.pods = 1000;
        n
    });
    let sim = Sim::start(SimConfig {
        nodes: nodes.collect(),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = client(&sim).await;
    let before = rss_kib();
    let nss: Api<Namespace> = Api::all(c.clone());
    for i in 0..1000 {
        let ns = format!("ns-{i}");
        nss.create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": ns}})),
        )
        .await
        .unwrap();
        let rs: ReplicaSet = typed(
            json!({"metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}),
        );
        Api::<ReplicaSet>::namespaced(c.clone(), &ns)
            .create(&PostParams::default(), &rs)
            .await
            .unwrap();
        let pod: Pod = typed(
            json!({"metadata": {"name": "jump", "labels": {"app": "jump"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        );
        Api::<Pod>::namespaced(c.clone(), &ns)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        let svc: Service = typed(
            json!({"metadata": {"name": "ssh"}, "spec": {"type": "NodePort", "selector": {"app": "jump"},
            "ports": [{"port": 22}]}}),
        );
        Api::<Service>::namespaced(c.clone(), &ns)
            .create(&PostParams::default(), &svc)
            .await
            .unwrap();
    }
    settle(&sim).await;
    let after = rss_kib();
    let pods: Api<Pod> = Api::all(c.clone());
    let all = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 2000);
    assert!(
        all.iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    );
    let svcs: Api<Service> = Api::all(c);
    assert_eq!(
        svcs.list(&ListParams::default().labels(""))
            .await
            .unwrap()
            .items
            .len(),
        1001
    );
    println!(
        "1000 namespaces: VmRSS {before} KiB before, {after} KiB after ({} KiB growth)",
        after.saturating_sub(before)
    );
}
