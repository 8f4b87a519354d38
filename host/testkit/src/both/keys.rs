//! Users' SSH keys outlive the pod (issue 9 §1), through the library.

use super::*;

/// The Secret `jumppod keys` writes for project `main`.
const SECRET: &str = "dstack-main-ssh-jump-pod-authorized-keys";

/// The entry names of the keys' Secret.
async fn key_entries(cluster: &Cluster) -> Vec<String> {
    cluster
        .get("secrets", SECRET)
        .await
        .and_then(|s| s["data"].as_object().map(|d| d.keys().cloned().collect()))
        .unwrap_or_default()
}

/// Users' SSH keys outlive the pod (issue 9 §1): a key added through `jumppod keys` is in the
/// Secret that the replacement of an evicted pod mounts (optional, so that the pod starts
/// before any key exists); a removed key is gone from it; removing it twice is no error.
/// What sshd does with the mounted Secret is proven under a real sshd (`sshd.rs`).
pub async fn a_key_added_is_mounted_by_the_replacement_pod_and_a_removed_key_is_gone(
    cluster: &Cluster,
) {
    use jumppod_host::keys;
    use jumppod_plan::keys::{Change, EntryOutcome};
    use jumppod_plan::manifest::{KEYS_MOUNT, keys_secret_name};
    let config = cluster.config("hostname: h");
    cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let kube = cluster.kube().await;
    let before = cluster.resolve(&config).await.expect("resolve").proxy.pod;
    let added = keys::change(&kube, &config, &Change::add(ALICE, Some("alice")).unwrap())
        .await
        .expect("add a key");
    assert_eq!(
        (added.outcome, added.secret.as_str()),
        (EntryOutcome::Added, SECRET)
    );
    assert_eq!(keys_secret_name(&config.name), SECRET);

    cluster.evict(&before).await;
    let after = cluster
        .until("a replacement pod", || async {
            let proxy = cluster.resolve(&config).await.ok()?.proxy;
            (proxy.pod != before).then_some(proxy.pod)
        })
        .await;
    let pod = cluster.get("pods", &after).await.expect("the replacement");
    let volume = pod["spec"]["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["secret"].is_object()))
        .unwrap_or_else(|| panic!("no Secret volume in {pod:#}"));
    assert_eq!(volume["secret"]["secretName"], SECRET);
    assert_eq!(
        volume["secret"]["optional"], true,
        "the pod starts before any key exists"
    );
    let mounted = pod["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .is_some_and(|m| {
            m.iter()
                .any(|m| m["name"] == volume["name"] && m["mountPath"] == KEYS_MOUNT)
        });
    assert!(mounted, "{pod:#}");
    let list = keys::list(&kube, &config).await.expect("list the keys");
    assert_eq!(list.entries.len(), 1);
    assert_eq!(
        list.entries[0].line,
        format!("command=\"/bin/false\" {ALICE}"),
        "{:?}",
        list.entries
    );

    let removed = keys::change(&kube, &config, &Change::remove(ALICE).unwrap())
        .await
        .expect("remove the key");
    assert_eq!(
        (removed.outcome, removed.entry.as_str()),
        (EntryOutcome::Removed, "alice")
    );
    assert_eq!(key_entries(cluster).await, Vec::<String>::new());
    let again = keys::change(&kube, &config, &Change::remove("alice").unwrap())
        .await
        .expect("remove it again");
    assert_eq!(
        again.outcome,
        EntryOutcome::NotPresent,
        "removing twice is not an error"
    );
}

/// A change tells the running pod that mounts the Secret to remount it: the pod's annotation
/// carries the digest of the Secret as written (a pod's changed annotations make its kubelet
/// sync it, and a sync remounts its Secrets), the report names the pod; a change that writes
/// nothing tells nobody.
pub async fn the_running_pod_is_told_of_each_change(cluster: &Cluster) {
    use jumppod_host::keys;
    use jumppod_plan::keys::{Change, EntryOutcome};
    use jumppod_plan::refresh::{DIGEST_ANNOTATION, digest};
    let config = cluster.config("hostname: h");
    cluster.ensure(&config).await.expect("ensure");
    cluster.settle().await;
    let kube = cluster.kube().await;
    let pod = cluster.resolve(&config).await.expect("resolve").proxy.pod;
    let told_of = || async {
        let pod = cluster.get("pods", &pod).await.expect("the running pod");
        let secret = cluster.get("secrets", SECRET).await.expect("the Secret");
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(secret).unwrap();
        (
            pod["metadata"]["annotations"][DIGEST_ANNOTATION].clone(),
            digest(&secret),
        )
    };

    let added = keys::change(&kube, &config, &Change::add(ALICE, Some("alice")).unwrap())
        .await
        .expect("add a key");
    assert_eq!(
        (added.outcome, &added.told),
        (EntryOutcome::Added, &vec![pod.clone()])
    );
    let (annotated, after_add) = told_of().await;
    assert_eq!(annotated, after_add.as_str());

    let again = keys::change(&kube, &config, &Change::add(ALICE, Some("alice")).unwrap())
        .await
        .expect("add it again");
    assert_eq!(
        (again.outcome, again.told.len()),
        (EntryOutcome::Unchanged, 0)
    );

    let removed = keys::change(&kube, &config, &Change::remove("alice").unwrap())
        .await
        .expect("remove it");
    assert_eq!(removed.told, vec![pod.clone()]);
    let (annotated, after_remove) = told_of().await;
    assert_eq!(annotated, after_remove.as_str());
    assert_ne!(after_remove, after_add);
}

/// The same key added again costs one read of the Secret and no write.
pub async fn the_same_key_again_costs_one_read_and_no_write(cluster: &Cluster) {
    use jumppod_host::keys;
    use jumppod_plan::keys::{Change, EntryOutcome};
    cluster.namespace().await;
    let config = cluster.config("");
    let kube = cluster.kube().await;
    let alice = Change::add(ALICE, Some("alice")).unwrap();
    keys::change(&kube, &config, &alice)
        .await
        .expect("add a key");
    let (again, requests) = cluster
        .requests_of(keys::change(&kube, &config, &alice))
        .await;
    assert_eq!(
        again.expect("add it again").outcome,
        EntryOutcome::Unchanged
    );
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert!(!is_write(&requests[0]), "{requests:#?}");
    let secret = format!("/api/v1/namespaces/{}/secrets/{SECRET}", cluster.ns());
    assert!(requests[0].ends_with(&secret), "{requests:#?}");
}

/// Eight users added at once, by eight hosts: each write carries the resourceVersion it was
/// decided on, a lost race (409 on the create or the patch) is decided again, nobody's key is
/// lost.
pub async fn keys_added_concurrently_are_all_kept(cluster: &Cluster) {
    use jumppod_host::keys;
    use jumppod_plan::keys::{Change, EntryOutcome};
    cluster.namespace().await;
    let config = cluster.config("");
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let kube = cluster.kube().await;
        let (config, barrier) = (config.clone(), barrier.clone());
        let key = if i % 2 == 0 { ALICE } else { BOB };
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let change = Change::add(key, Some(&format!("user-{i}"))).unwrap();
            keys::change(&kube, &config, &change).await
        }));
    }
    for t in tasks {
        assert_eq!(
            t.await.unwrap().expect("add a key").outcome,
            EntryOutcome::Added
        );
    }
    if let Some(sim) = cluster.as_sim() {
        let lost = sim.requests().iter().filter(|r| r.status == 409).count();
        println!("races lost and decided again: {lost}");
    }
    let mut names = key_entries(cluster).await;
    names.sort();
    let all: Vec<String> = (0..8).map(|i| format!("user-{i}")).collect();
    assert_eq!(names, all);
}

/// This file's scenarios on one backend (`both_tests!`): `keys_scenarios!(sim)` in `keys.rs`,
/// `keys_scenarios!(real)` in `real_cluster.rs`.
#[macro_export]
macro_rules! keys_scenarios {
    ($on:ident) => {
        $crate::both_tests! { $on, keys;
            a_key_added_is_mounted_by_the_replacement_pod_and_a_removed_key_is_gone:
                sim a_key_added_is_mounted_by_the_replacement_pod_and_a_removed_key_is_gone
                    = sim(),
                /// With the real ReplicaSet controller: the replacement of an evicted pod.
                real a_key_added_is_mounted_by_the_pod_that_replaces_an_evicted_one
                    = real("rc-keys");
            the_running_pod_is_told_of_each_change:
                sim the_running_pod_is_told_of_each_change = sim(),
                real the_running_pod_is_told_of_each_change = real("rc-keys-told");
            the_same_key_again_costs_one_read_and_no_write:
                sim the_same_key_again_costs_one_read_and_no_write = sim(),
                /// Counted in the audit log.
                real the_same_key_again_costs_one_read_and_no_write
                    = real("rc-keys-again");
            keys_added_concurrently_are_all_kept:
                sim keys_added_concurrently_are_all_kept = sim(),
                /// Against the real API server's optimistic concurrency.
                real keys_added_concurrently_are_all_kept = real("rc-keys-race");
        }
    };
}
