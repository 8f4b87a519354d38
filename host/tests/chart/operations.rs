//! The chart under an operator's operations, on the real control plane: the webhook disabled,
//! renamed, rolled back or uninstalled leaves no configuration behind and refuses no jump pod
//! on the way (its configurations are deleted before its Service); `helm template | kubectl
//! apply` registers a working webhook and a second render changes nothing; an upgrade updates
//! the configurations in place, and a killed upgrade leaves them working. The webhook is
//! `jumppod webhook`, served on 127.0.0.1 (live.rs says how the API server reaches it); a
//! client creates a jump pod every 200 ms through each operation.

use super::live::{Release, get, kubectl, kubectl_ok, names, reachable, rendered};
use jumppod_e2e::audit::Audit;
use jumppod_testkit::admissions::{Tally, creating, dry_run, legacy_pod, mutated, no_refusal};
use jumppod_testkit::cluster::{admin, cluster_dir, wait_for_up_to};
use rstest::rstest;
use serde_json::{Value, json};
use std::time::Duration;

/// Whether, within 60 s, a dry-run jump pod of `ns` comes back mutated (`webhook`: a webhook is
/// configured for it) or admitted as it was (none is). The API server reads configurations
/// through an informer, so a change takes a moment.
async fn admitted_as(client: &kube::Client, ns: &str, webhook: bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if dry_run(client, ns, &legacy_pod())
            .await
            .is_ok_and(|pod| mutated(&pod) == webhook)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Waits until the API server sends a jump pod of `ns` to the webhook.
pub async fn registered(client: &kube::Client, ns: &str) {
    assert!(
        admitted_as(client, ns, true).await,
        "no jump pod of {ns} mutated by the webhook within 60 s"
    );
}

/// Waits until a jump pod of `ns` is admitted without a webhook.
async fn unregistered(client: &kube::Client, ns: &str) {
    assert!(
        admitted_as(client, ns, false).await,
        "no jump pod of {ns} admitted without the webhook within 60 s"
    );
}

/// What takes the webhook out of a release.
#[derive(Clone, Copy, Debug)]
enum Removal {
    /// `helm upgrade` with `webhook.enabled=false`.
    Disabled,
    /// `helm upgrade` with another `fullnameOverride`: the webhook is made again under it.
    Renamed,
    /// `helm upgrade` with another `nameOverride`: the same.
    NameOverridden,
    /// `helm rollback` to the revision before the webhook was enabled.
    RolledBack,
    /// `helm uninstall`.
    Uninstalled,
}

/// The path of a DELETE of the configuration `name` of `kind` in the audit log.
fn deletion(kind: &str, name: &str) -> String {
    format!(
        "delete /apis/admissionregistration.k8s.io/v1/{}s/{name}",
        kind.to_lowercase()
    )
}

/// Each operation that takes the webhook out of a release deletes both its configurations
/// before the webhook's Service (the order of helm's requests in the API server's audit log),
/// refuses none of the jump pods created meanwhile, and leaves none of them in the cluster; a
/// jump pod is then admitted as the release now says: unchecked (no webhook), or mutated by
/// the webhook under its new name. Before, the configurations were hooks, which Helm never
/// deletes when a revision leaves them out: the Service went, they stayed, and jump pods of
/// their scope were refused ("service ... not found"; here, where the API server's kept-alive
/// connections still reach 127.0.0.1, those that needed a new connection; in a cluster, where
/// the Service's address stops routing, all).
///
/// The five operations run at once, each on a thread and a runtime of its own in a namespace
/// of its own: they mostly wait (on helm, on the API server's informers), so the test takes
/// the time of the longest, not of the five.
#[test]
fn taking_the_webhook_out_deletes_its_configurations_before_its_service_and_refuses_no_jump_pod() {
    let runs: Vec<_> = [
        (Removal::Disabled, "chart-disable"),
        (Removal::Renamed, "chart-rename"),
        (Removal::NameOverridden, "chart-name"),
        (Removal::RolledBack, "chart-rollback"),
        (Removal::Uninstalled, "chart-uninstall"),
    ]
    .into_iter()
    .map(|(removal, ns)| {
        let run = std::thread::spawn(move || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
                .block_on(taking_out(removal, ns))
        });
        (removal, run)
    })
    .collect();
    let failed: Vec<Removal> = runs
        .into_iter()
        .filter_map(|(removal, run)| run.join().is_err().then_some(removal))
        .collect();
    assert!(failed.is_empty(), "failed, as said above: {failed:?}");
}

/// One operation of [`taking_the_webhook_out_deletes_its_configurations_before_its_service_and_refuses_no_jump_pod`].
async fn taking_out(removal: Removal, ns: &'static str) {
    let client = admin().await.client;
    let release = Release::new("jp", ns);
    let mut values = release.served_values();
    if let Removal::RolledBack = removal {
        values["webhook"]["enabled"] = json!(false);
        release.apply("install", &values);
        values["webhook"]["enabled"] = json!(true);
        release.apply("upgrade", &values);
    } else {
        release.apply("install", &values);
    }
    registered(&client, &release.covered).await;
    let before = release.configurations();
    assert_eq!(before.len(), 2, "{before:?}");
    let service = "jp-jumppod-webhook";

    let audit = Audit::new(cluster_dir().join("audit.log"));
    let mark = audit.mark();
    let pods = creating(client.clone(), &release.covered);
    let renamed = match removal {
        Removal::Disabled => {
            values["webhook"]["enabled"] = json!(false);
            release.apply("upgrade", &values);
            None
        }
        Removal::Renamed => {
            values["fullnameOverride"] = json!("renamed");
            release.apply("upgrade", &values);
            Some(format!("renamed-{ns}"))
        }
        Removal::NameOverridden => {
            values["nameOverride"] = json!("other");
            release.apply("upgrade", &values);
            Some(format!("jp-other-{ns}"))
        }
        Removal::RolledBack => {
            release.helm_ok(&["rollback", "jp", "1"]);
            None
        }
        Removal::Uninstalled => {
            release.helm_ok(&["uninstall", "jp"]);
            None
        }
    };
    // The client goes on until a jump pod is admitted as the release now says (bounded): any
    // configuration left pointing at the webhook's deleted Service would refuse it meanwhile.
    let settled = admitted_as(&client, &release.covered, renamed.is_some()).await;
    let tally = no_refusal(&format!("{removal:?}"), pods).await;
    assert!(tally.total() > 0, "{tally:?}");
    assert!(
        settled,
        "no jump pod admitted as the release now says within 60 s"
    );

    let requests = audit.by_user(mark, &release.user);
    let at = |path: &str| {
        requests
            .iter()
            .position(|r| r.starts_with(path))
            .unwrap_or_else(|| panic!("no {path:?} among helm's requests:\n{requests:#?}"))
    };
    let service_gone = at(&format!(
        "delete /api/v1/namespaces/{ns}/services/{service}"
    ));
    for (kind, name, ..) in &before {
        assert!(
            at(&deletion(kind, name)) < service_gone,
            "{kind} {name} deleted after the Service:\n{requests:#?}"
        );
    }

    let after: Vec<(String, String)> = release
        .configurations()
        .into_iter()
        .map(|(kind, name, ..)| (kind, name))
        .collect();
    match renamed {
        None => assert_eq!(after, vec![], "left behind"),
        Some(name) => assert_eq!(
            after,
            vec![
                ("MutatingWebhookConfiguration".into(), name.clone()),
                ("ValidatingWebhookConfiguration".into(), name),
            ]
        ),
    }
    // A later uninstall leaves nothing either.
    if !matches!(removal, Removal::Uninstalled) {
        release.helm_ok(&["uninstall", "jp"]);
        assert_eq!(release.configurations().len(), 0);
        unregistered(&client, &release.covered).await;
    }
}

/// The release's objects applied by `kubectl apply`, deleted the same way when dropped (the
/// webhook configurations and cluster roles are cluster-scoped: the namespace's deletion does
/// not take them).
struct Applied(String);

impl Drop for Applied {
    fn drop(&mut self) {
        let _ = kubectl(
            &["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
            Some(&self.0),
        );
    }
}

/// What GitOps does with the chart (`helm template | kubectl apply`; Argo CD renders with
/// `helm template` too): one object per name, no hook; applied, the webhook mutates a bare
/// jump pod; rendered and applied again, nothing the API server sees changes (`kubectl diff`
/// finds nothing, no object's resourceVersion moves), with the serving certificate given as a
/// Secret of the operator's (the GitOps path: `webhook.tls.existingSecret` and `caBundle`).
/// Before, the render held two MutatingWebhookConfigurations and three
/// ValidatingWebhookConfigurations of one name, the last of each empty: applied, the webhook
/// was never called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_template_applied_registers_the_webhook_and_applied_again_changes_nothing() {
    let client = admin().await.client;
    let release = Release::new("jp", "chart-gitops");
    let values = release.served_values();
    let yaml = reachable(&rendered("jp", release.ns, &values));
    let objects = names(&yaml);
    let mut unique = objects.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        objects.len(),
        "one object per name: {objects:?}"
    );
    assert!(!yaml.contains("helm.sh/hook"), "no hook in the render");
    let applied = Applied(yaml.clone());
    let apply = [
        "apply",
        "--server-side",
        "--field-manager",
        "gitops",
        "-f",
        "-",
    ];
    kubectl_ok(&apply, Some(&yaml));
    registered(&client, &release.covered).await;

    let versions = || -> Vec<(String, String, Value)> {
        objects
            .iter()
            .map(|(kind, name)| {
                let object = get(&["-n", release.ns, kind, name])
                    .unwrap_or_else(|| panic!("{kind} {name} was applied"));
                (
                    kind.clone(),
                    name.clone(),
                    object["metadata"]["resourceVersion"].clone(),
                )
            })
            .collect()
    };
    let before = versions();
    let again = reachable(&rendered("jp", release.ns, &values));
    let diff = kubectl(
        &[
            "diff",
            "--server-side",
            "--field-manager",
            "gitops",
            "-f",
            "-",
        ],
        Some(&again),
    );
    assert_eq!(
        diff.status.code(),
        Some(0),
        "kubectl diff: {}{}",
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr)
    );
    kubectl_ok(&apply, Some(&again));
    assert_eq!(versions(), before, "the second apply changed objects");
    registered(&client, &release.covered).await;
    drop(applied);
}

/// An upgrade that changes the configurations (here their scope) updates both in place (the
/// same uids), and every jump pod created meanwhile is checked: none refused, none admitted
/// unchecked. An upgrade killed while it waits for the webhook's rollout (`--wait`, which the
/// plain control plane never ends: it runs no Deployment) leaves them updated and working.
/// Before, every upgrade deleted and recreated both (hooks): new uids, and jump pods admitted
/// unchecked, or refused, in between; killed between two hooks, checking stayed off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_updates_the_configurations_in_place_and_a_killed_one_leaves_them_working() {
    let client = admin().await.client;
    let release = Release::new("jp", "chart-upgrade");
    let mut values = release.served_values();
    release.apply("install", &values);
    registered(&client, &release.covered).await;
    let uids = |release: &Release| -> Vec<String> {
        release
            .configurations()
            .into_iter()
            .map(|(.., uid, _)| uid)
            .collect()
    };
    let scope = |release: &Release| -> Vec<Value> {
        release
            .configurations()
            .into_iter()
            .map(|(.., object)| object["webhooks"][0]["namespaceSelector"].clone())
            .collect()
    };
    let installed = uids(&release);
    assert_eq!(installed.len(), 2);

    let pods = creating(client.clone(), &release.covered);
    values["webhook"]["onlyNamespaces"] = json!([release.covered, "chart-upgrade-more"]);
    release.apply("upgrade", &values);
    for selector in scope(&release) {
        assert!(
            selector.to_string().contains("chart-upgrade-more"),
            "{selector}"
        );
    }
    let tally: Tally = no_refusal("helm upgrade", pods).await;
    assert_eq!(
        tally.unchecked, 0,
        "jump pods admitted unchecked: {tally:?}"
    );
    assert_eq!(uids(&release), installed, "updated in place");

    // Killed while it waits.
    let pods = creating(client.clone(), &release.covered);
    values["webhook"]["onlyNamespaces"] = json!([release.covered]);
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-upgrade-killed.json");
    std::fs::write(&file, values.to_string()).unwrap();
    let renderer = super::live::post_renderer();
    let mut helm = super::helm()
        .args(["upgrade", "jp"])
        .arg(super::chart())
        .args([
            "--namespace",
            release.ns,
            "--wait",
            "--timeout",
            "300s",
            "--values",
        ])
        .arg(&file)
        .arg("--post-renderer")
        .arg(&renderer)
        .arg("--kubeconfig")
        .arg(jumppod_testkit::cluster::kubeconfig_of(&release.user))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_up_to(
        "the killed upgrade's change to reach the configurations",
        Duration::from_secs(60),
        || async {
            scope(&release)
                .iter()
                .all(|s| !s.to_string().contains("chart-upgrade-more"))
                .then_some(())
        },
    )
    .await;
    helm.kill().unwrap();
    let _ = helm.wait();
    let tally = no_refusal("helm upgrade, killed", pods).await;
    assert_eq!(tally.unchecked, 0, "{tally:?}");
    assert_eq!(uids(&release), installed);
    registered(&client, &release.covered).await;
}

/// A hook of a dry run's release: (kind, name, events, weight, whether it empties).
fn hooks(release: &Value) -> Vec<(String, String, Vec<String>, String, bool)> {
    let mut hooks: Vec<_> = release["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let manifest: Value = serde_yaml::from_str(h["manifest"].as_str().unwrap()).unwrap();
            (
                h["kind"].as_str().unwrap().to_owned(),
                h["name"].as_str().unwrap().to_owned(),
                h["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e.as_str().unwrap().to_owned())
                    .collect(),
                // Written only when it is not 0.
                h["weight"].as_i64().unwrap_or(0).to_string(),
                manifest["webhooks"] == json!([]),
            )
        })
        .collect();
    hooks.sort();
    hooks
}

/// When helm reaches the cluster (here `helm install --dry-run=server`, which reads it as an
/// install does), it orders the configurations with hooks of their names: a configuration not
/// yet in the cluster is rendered empty, and made whole after the install (post-install, also
/// post-upgrade and post-rollback), mutating before validating; both are emptied and deleted
/// before an uninstall (pre-delete), validating first. A revision without the webhook deletes
/// them before a rollback to it (pre-rollback).
#[rstest]
#[case::with_the_webhook(true, "chart-hooks")]
#[case::without_it(false, "chart-hooks-off")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_cluster_helm_orders_the_configurations_with_hooks_of_their_names(
    #[case] enabled: bool,
    #[case] ns: &'static str,
) {
    let release = Release::new("jp", ns);
    let mut values = release.served_values();
    values["webhook"]["enabled"] = json!(enabled);
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("chart-hooks-{enabled}.json"));
    std::fs::write(&file, values.to_string()).unwrap();
    let chart = super::chart();
    let dry = release.helm_ok(&[
        "install",
        "jp",
        chart.to_str().unwrap(),
        "--dry-run=server",
        "-o",
        "json",
        "--values",
        file.to_str().unwrap(),
    ]);
    let dry: Value = serde_json::from_str(&dry).unwrap();
    let name = format!("jp-jumppod-{ns}");
    let (mutating, validating) = (
        "MutatingWebhookConfiguration".to_owned(),
        "ValidatingWebhookConfiguration".to_owned(),
    );
    let after = ["post-install", "post-upgrade", "post-rollback"]
        .map(String::from)
        .to_vec();
    let before = vec!["pre-delete".to_owned()];
    let expected = if enabled {
        vec![
            (
                mutating.clone(),
                name.clone(),
                after.clone(),
                "0".into(),
                false,
            ),
            (
                mutating.clone(),
                name.clone(),
                before.clone(),
                "-5".into(),
                true,
            ),
            (validating.clone(), name.clone(), after, "10".into(), false),
            (validating.clone(), name.clone(), before, "-10".into(), true),
        ]
    } else {
        let rollback = vec!["pre-rollback".to_owned()];
        vec![
            (mutating, name.clone(), rollback.clone(), "-5".into(), true),
            (validating, name.clone(), rollback, "-10".into(), true),
        ]
    };
    assert_eq!(hooks(&dry), expected);
    let manifest = dry["manifest"].as_str().unwrap();
    let configurations: Vec<Value> = super::documents(manifest)
        .into_iter()
        .filter(|o| {
            o["kind"]
                .as_str()
                .unwrap()
                .ends_with("WebhookConfiguration")
        })
        .collect();
    assert_eq!(configurations.len(), if enabled { 2 } else { 0 });
    for config in configurations {
        assert_eq!(
            config["webhooks"],
            json!([]),
            "empty until its hook: {config}"
        );
    }
}
