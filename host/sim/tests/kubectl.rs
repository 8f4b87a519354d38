//! kubectl, a real client, is satisfied by the simulator through its generated kubeconfig.

use jumppod_sim::testing::*;
use jumppod_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use std::path::Path;

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let run = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=30s")
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = within(&format!("kubectl {}", args.join(" ")), run)
        .await
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn web_sim() -> Sim {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    namespace(&sim, "team");
    for ns in ["default", "team"] {
        sim.create("replicasets", Some(ns), json!({"metadata": {"name": "web"}, "spec": {"replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
            .unwrap();
    }
    sim.create(
        "pods",
        Some("team"),
        json!({"metadata": {"name": "other", "labels": {"app": "db"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    settle(&sim).await;
    sim
}

// `kubectl get pods -A -l app=web` lists matching pods of every namespace (kubectl falls back from Table to a list).
#[tokio::test(flavor = "multi_thread")]
async fn get_pods_all_namespaces_with_selector() {
    let sim = web_sim().await;
    let (ok, out, err) = kubectl(
        sim.kubeconfig_path(),
        &["get", "pods", "-A", "-l", "app=web"],
    )
    .await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAMESPACE"), "{out}");
    assert_eq!(lines.len(), 5, "{out}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("team ")).count(), 2);
    assert!(!out.contains("other"));
}

// `kubectl get pod NAME -o json` returns the stored pod.
#[tokio::test(flavor = "multi_thread")]
async fn get_pod_json() {
    let sim = web_sim().await;
    let (ok, out, err) = kubectl(
        sim.kubeconfig_path(),
        &["get", "pod", "other", "-n", "team", "-o", "json"],
    )
    .await;
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "Pod");
    assert_eq!(v["metadata"]["name"], "other");
    assert_eq!(v["status"]["phase"], "Running");
}

// `kubectl create -f` and `kubectl delete` go through the same API (validation needs --validate=false: no OpenAPI served).
#[tokio::test(flavor = "multi_thread")]
async fn create_and_delete() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let file = sim.kubeconfig_path().with_file_name("pod.yaml");
    std::fs::write(&file, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: manual\nspec:\n  containers:\n  - name: c\n    image: i\n").unwrap();
    let (ok, out, err) = kubectl(
        sim.kubeconfig_path(),
        &["create", "--validate=false", "-f", file.to_str().unwrap()],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "pod/manual created");
    assert!(sim.get("pods", Some("default"), "manual").is_some());
    let (ok, out, err) = kubectl(sim.kubeconfig_path(), &["delete", "pod", "manual"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "pod \"manual\" deleted");
    assert!(sim.get("pods", Some("default"), "manual").is_none());
    let (ok, _, err) = kubectl(sim.kubeconfig_path(), &["get", "pod", "manual"]).await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "Error from server (NotFound): pods \"manual\" not found"
    );
}

// kubectl shows RBAC denials with the API server's message.
#[tokio::test(flavor = "multi_thread")]
async fn forbidden_through_kubectl() {
    let sim = Sim::start(SimConfig {
        rbac: true,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let (ok, _, err) = kubectl(&sim.kubeconfig_for("alice"), &["get", "pods"]).await;
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );
}
