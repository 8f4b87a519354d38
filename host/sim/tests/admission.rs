//! Fidelity tests of the admission hook: defaulting first, mutation by JSON Patch, denial.

use jumppod_sim::testing::*;
use jumppod_sim::{Admission, AdmissionVerdict, Sim, SimConfig};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Hook {
    seen: Mutex<Vec<Value>>,
}

impl Admission for Hook {
    fn name(&self) -> &str {
        "jumppod.example.com"
    }
    fn review(&self, request: &Value) -> AdmissionVerdict {
        self.seen.lock().unwrap().push(request.clone());
        if request["kind"]["kind"] != "Pod" {
            return AdmissionVerdict::allow();
        }
        if request.pointer("/object/metadata/labels/deny").is_some() {
            return AdmissionVerdict {
                code: Some(403),
                ..AdmissionVerdict::deny("jump pods need an owner")
            };
        }
        let mut v = AdmissionVerdict::allow().with_patch(
            json!([{"op": "add", "path": "/metadata/annotations", "value": {"mutated": "yes"}}]),
        );
        v.warnings.push("mutated by test".into());
        v
    }
}

fn pod(name: &str, labels: Value) -> Pod {
    typed(
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"containers": [{"name": "c", "image": "i",
        "resources": {"limits": {"cpu": "1"}}}]}}),
    )
}

// Mutating admission sees the defaulted object (requests = limits) and its JSON Patch is applied.
#[tokio::test(flavor = "multi_thread")]
async fn patch_is_applied_after_defaulting() {
    let hook = Arc::new(Hook::default());
    let sim = Sim::start(SimConfig {
        admission: Some(hook.clone()),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let p = pods
        .create(&PostParams::default(), &pod("a", json!({})))
        .await
        .unwrap();
    assert_eq!(p.metadata.annotations.unwrap()["mutated"], "yes");
    let seen = hook.seen.lock().unwrap()[0].clone();
    assert_eq!(seen["operation"], "CREATE");
    assert_eq!(seen["userInfo"]["username"], "admin");
    assert_eq!(
        seen["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(
        seen.pointer("/object/spec/containers/0/resources/requests/cpu"),
        Some(&json!("1"))
    );
}

// A denial answers with the webhook's code and `admission webhook "NAME" denied the request: MSG`.
#[tokio::test(flavor = "multi_thread")]
async fn denial() {
    let sim = Sim::start(SimConfig {
        admission: Some(Arc::new(Hook::default())),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    let s = status(
        pods.create(&PostParams::default(), &pod("a", json!({"deny": "1"})))
            .await,
    );
    assert_eq!(s.code, 403);
    assert_eq!(
        s.message,
        "admission webhook \"jumppod.example.com\" denied the request: jump pods need an owner"
    );
    assert!(sim.get("pods", Some("default"), "a").is_none());
}

// Pods created by the ReplicaSet controller pass through admission too (with the controller as user).
#[tokio::test(flavor = "multi_thread")]
async fn controller_pods_are_admitted() {
    let hook = Arc::new(Hook::default());
    let sim = Sim::start(SimConfig {
        admission: Some(hook.clone()),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = client(&sim).await;
    let rss: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    let rs: ReplicaSet = typed(
        json!({"metadata": {"name": "web"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    );
    rss.create(&PostParams::default(), &rs).await.unwrap();
    settle(&sim).await;
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let ps = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(ps.len(), 2);
    assert!(ps.iter().all(|p| {
        p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a["mutated"] == "yes")
    }));
    let seen = hook.seen.lock().unwrap();
    assert!(seen.iter().any(|r| r["kind"]["kind"] == "ReplicaSet"));
    assert!(seen.iter().any(|r| r["userInfo"]["username"]
        == "system:serviceaccount:kube-system:replicaset-controller"
        && r["name"] == ""));
}

/// Denies every pod while `closed` is set (as a quota or Pod Security would).
struct Gate {
    closed: std::sync::atomic::AtomicBool,
}

impl Admission for Gate {
    fn review(&self, request: &Value) -> AdmissionVerdict {
        if request["kind"]["kind"] == "Pod" && self.closed.load(std::sync::atomic::Ordering::SeqCst)
        {
            return AdmissionVerdict::deny("pods are closed");
        }
        AdmissionVerdict::allow()
    }
}

// A ReplicaSet whose pod create is refused gets `ReplicaFailure` True, reason FailedCreate, the
// API error's message (calculateStatus in pkg/controller/replicaset/replica_set_utils.go), and a
// Warning event FailedCreate `Error creating: <message>`; the condition goes once a create
// succeeds again.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_pod_create_sets_replica_failure_until_it_succeeds() {
    let gate = Arc::new(Gate {
        closed: true.into(),
    });
    let sim = Sim::start(SimConfig {
        admission: Some(gate.clone()),
        background_controllers: false,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let rss: Api<ReplicaSet> = Api::namespaced(client(&sim).await, "default");
    let rs: ReplicaSet = typed(json!({"metadata": {"name": "web"}, "spec": {"replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}));
    rss.create(&PostParams::default(), &rs).await.unwrap();
    settle(&sim).await;
    let message = "admission webhook \"jumppod.sim.local\" denied the request: pods are closed";
    let got = rss.get("web").await.unwrap();
    let status = got.status.expect("status");
    assert_eq!(status.replicas, 0);
    let conditions = status.conditions.expect("conditions");
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    let c = &conditions[0];
    assert_eq!(
        (
            c.type_.as_str(),
            c.status.as_str(),
            c.reason.as_deref(),
            c.message.as_deref()
        ),
        (
            "ReplicaFailure",
            "True",
            Some("FailedCreate"),
            Some(message)
        )
    );
    assert!(c.last_transition_time.is_some());
    let events: Vec<Value> = sim
        .list("events", Some("default"))
        .into_iter()
        .filter(|e| e["reason"] == "FailedCreate")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(events[0]["message"], format!("Error creating: {message}"));
    assert_eq!(events[0]["involvedObject"]["kind"], "ReplicaSet");
    assert_eq!(events[0]["involvedObject"]["name"], "web");
    assert_eq!(events[0]["involvedObject"]["uid"], json!(got.metadata.uid));
    assert_eq!(events[0]["source"]["component"], "replicaset-controller");

    gate.closed
        .store(false, std::sync::atomic::Ordering::SeqCst);
    // The simulator's controller tries again when something in the namespace changes (the real
    // one also retries on its backoff timer): touch the ReplicaSet.
    rss.patch(
        "web",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"retry": "1"}}})),
    )
    .await
    .unwrap();
    settle(&sim).await;
    let status = rss.get("web").await.unwrap().status.expect("status");
    assert_eq!(status.replicas, 1);
    assert!(
        status.conditions.unwrap_or_default().is_empty(),
        "ReplicaFailure stays after a successful create"
    );
}
