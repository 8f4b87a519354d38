//! Users' SSH keys outlive the pod (issue 9 §1), against the simulator: `jumppod keys` writes
//! the Secret the ReplicaSet's template mounts, so a replacement pod mounts the same keys.
//! The real control plane's twin is in `real_cluster.rs`; what sshd does with the mounted
//! Secret is proven under a real sshd in `sshd.rs`.

mod common;

use common::*;
use jumppod_host::keys::{self, Change, Outcome};
use jumppod_host::manifest::{KEYS_MOUNT, keys_secret_name};
use serde_json::Value;

const SECRET: &str = "dstack-main-ssh-jump-pod-authorized-keys";

/// The Secret the pod's volume names, and where its container mounts it.
fn mounted_secret(pod: &Value) -> (String, String) {
    let volume = pod["spec"]["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["secret"].is_object()))
        .unwrap_or_else(|| panic!("no Secret volume in {pod:#}"));
    let mount = pod["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == volume["name"]))
        .unwrap_or_else(|| panic!("volume not mounted in {pod:#}"));
    assert_eq!(
        volume["secret"]["optional"], true,
        "the pod starts before any key exists"
    );
    (
        volume["secret"]["secretName"].as_str().unwrap().to_owned(),
        mount["mountPath"].as_str().unwrap().to_owned(),
    )
}

fn entry_names(sim: &jumppod_sim::Sim) -> Vec<String> {
    sim.get("secrets", Some(NS), SECRET)
        .and_then(|s| s["data"].as_object().map(|d| d.keys().cloned().collect()))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_added_is_mounted_by_the_replacement_pod_and_a_removed_key_is_gone() {
    let sim = start().await;
    let config = config("hostname: h");
    ensure(&sim, &config).await.unwrap();
    sim.settle().await;
    let kube = kube(&sim).await;
    let before = jumppod_host::resolve(&kube, &config)
        .await
        .unwrap()
        .proxy
        .pod;

    let added = keys::change(&kube, &config, &Change::add(ALICE, Some("alice")).unwrap())
        .await
        .unwrap();
    assert_eq!(
        (added.outcome, added.secret.as_str()),
        (Outcome::Added, SECRET)
    );
    assert_eq!(keys_secret_name(&config.name), SECRET);

    sim.evict_pod(NS, &before);
    sim.settle().await;
    let after = jumppod_host::resolve(&kube, &config)
        .await
        .unwrap()
        .proxy
        .pod;
    assert_ne!(after, before, "a replacement pod");
    let pod = sim.get("pods", Some(NS), &after).unwrap();
    assert_eq!(
        mounted_secret(&pod),
        (SECRET.to_owned(), KEYS_MOUNT.to_owned())
    );
    let list = keys::list(&kube, &config).await.unwrap();
    assert_eq!(list.entries.len(), 1);
    assert!(list.entries[0].line.ends_with(ALICE), "{:?}", list.entries);
    assert!(list.entries[0].line.starts_with("command=\"/bin/false\" "));

    let removed = keys::change(&kube, &config, &Change::remove(ALICE).unwrap())
        .await
        .unwrap();
    assert_eq!(
        (removed.outcome, removed.entry.as_str()),
        (Outcome::Removed, "alice")
    );
    assert!(entry_names(&sim).is_empty());
    let again = keys::change(&kube, &config, &Change::remove("alice").unwrap())
        .await
        .unwrap();
    assert_eq!(
        again.outcome,
        Outcome::NotPresent,
        "removing twice is not an error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_again_costs_one_read_and_no_write() {
    let sim = start().await;
    let config = config("");
    namespace(&sim, NS);
    let kube = kube(&sim).await;
    let alice = Change::add(ALICE, Some("alice")).unwrap();
    keys::change(&kube, &config, &alice).await.unwrap();
    let before = sim.requests().len();
    let again = keys::change(&kube, &config, &alice).await.unwrap();
    assert_eq!(again.outcome, Outcome::Unchanged);
    let requests: Vec<String> = sim.requests()[before..]
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        requests,
        [format!("GET /api/v1/namespaces/{NS}/secrets/{SECRET}")]
    );
}

/// Eight users added at once, by eight hosts: each write carries the resourceVersion it was
/// decided on, a lost race (409 on the create or the patch) is decided again, nobody's key is
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_added_concurrently_are_all_kept() {
    let sim = start().await;
    let config = config("");
    namespace(&sim, NS);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let kube = kube(&sim).await;
        let (config, barrier) = (config.clone(), barrier.clone());
        let key = if i % 2 == 0 { ALICE } else { BOB };
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            keys::change(
                &kube,
                &config,
                &Change::add(key, Some(&format!("user-{i}"))).unwrap(),
            )
            .await
            .unwrap()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().outcome, Outcome::Added);
    }
    let lost = sim.requests().iter().filter(|r| r.status == 409).count();
    println!("races lost and decided again: {lost}");
    let mut names = entry_names(&sim);
    names.sort();
    assert_eq!(
        names,
        (0..8).map(|i| format!("user-{i}")).collect::<Vec<_>>()
    );
}
