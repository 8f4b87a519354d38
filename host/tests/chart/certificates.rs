//! The chart's generated serving certificate over time, on the real control plane: its CA
//! rotated while jump pods are created, none refused; an expired certificate renewed by `helm
//! upgrade`. The chart reads the certificates' dates from the Secrets' annotations (it cannot
//! parse a certificate), so time passes here by writing older dates there; what the API server
//! verifies is the real certificates. `jumppod webhook` runs on 127.0.0.1 (live.rs), with its
//! pair copied from the chart's Secret as the kubelet copies a Secret volume.

use super::live::{Pair, Release, get, kubectl_ok, pair, port_of, write_pair};
use super::operations::registered;
use super::{base64_decode, verify};
use jumppod_testkit::admissions::{creating, dry_run, legacy_pod, no_refusal};
use jumppod_testkit::cluster::{Webhook, admin, tls_connect, wait_for_up_to};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The kubelet's part: the Secret's `tls.crt` and `tls.key` copied into `dir` each time they
/// change (checked every 250 ms), each file written aside and renamed over, until dropped.
struct SecretVolume {
    task: tokio::task::JoinHandle<()>,
}

impl SecretVolume {
    fn start(ns: &'static str, secret: &'static str, dir: PathBuf) -> SecretVolume {
        let task = tokio::spawn(async move {
            let mut copied = Value::Null;
            loop {
                let found = tokio::task::spawn_blocking(move || get(&["secret", "-n", ns, secret]))
                    .await
                    .unwrap();
                if let Some(data) = found.map(|s| s["data"].clone())
                    && data != copied
                {
                    let field = |k: &str| String::from_utf8(base64_decode(&data[k])).unwrap();
                    let pair = Pair {
                        ca: field("ca.crt"),
                        crt: field("tls.crt"),
                        key: field("tls.key"),
                    };
                    write_pair(&dir, &pair);
                    copied = data;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        SecretVolume { task }
    }
}

impl Drop for SecretVolume {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The base64 PEM of each certificate in the mutating configuration's caBundle.
fn bundle(name: &str) -> Vec<String> {
    let config = get(&["mutatingwebhookconfiguration", name]).expect("the configuration");
    let pem = String::from_utf8(base64_decode(
        &config["webhooks"][0]["clientConfig"]["caBundle"],
    ))
    .unwrap();
    pem.split_inclusive("-----END CERTIFICATE-----\n")
        .map(|c| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(c)
        })
        .collect()
}

/// An annotation of the Secret `name` of `ns`, set (the chart reads the dates from them).
fn annotate(ns: &str, name: &str, annotations: &[(&str, &str)]) {
    let mut args = vec!["annotate", "--overwrite", "-n", ns, "secret", name];
    let pairs: Vec<String> = annotations
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    args.extend(pairs.iter().map(String::as_str));
    kubectl_ok(&args, None);
}

/// An RFC 3339 time `days` from now (negative: before).
fn days_from_now(days: i64) -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("{days} days"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The webhook's serving certificate as the API server sees it: the release's generated CA
/// rotated over two upgrades while a jump pod is created every 200 ms (none refused, every one
/// mutated), the next CA in the caBundle from the first upgrade and signing the served
/// certificate from the second, the old one kept in the caBundle; a certificate kept by an
/// upgrade while more than a third of its lifetime is left, renewed once less is; then an
/// expired certificate (a jump pod refused for it) renewed by `helm upgrade`. Before, the
/// chart reused its CA and certificate whatever their dates: no rotation, and the expired
/// certificate kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_ca_rotates_refusing_nothing_and_an_expired_certificate_is_renewed_by_an_upgrade()
 {
    const NS: &str = "chart-certs";
    const CA: &str = "jp-jumppod-webhook-ca";
    const SERVING: &str = "jp-jumppod-webhook-tls";
    let client = admin().await.client;
    let release = Release::new("jp", NS);
    let configuration = format!("jp-jumppod-{NS}");
    let service = format!("jp-jumppod-webhook.{NS}.svc");

    // The webhook starts with a pair of its own until the chart's Secret is copied in.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-certs-volume");
    let (cert, key) = write_pair(&dir, &pair(&["placeholder.invalid"], 1, None));
    let module = super::live::policy_module();
    let webhook = tokio::task::spawn_blocking(move || Webhook::start_serving(&module, &cert, &key))
        .await
        .unwrap();
    let values = json!({
        "controller": {"replicas": 0},
        "webhook": {"enabled": true, "replicas": 1, "failurePolicy": "Fail",
                    "onlyNamespaces": [release.covered],
                    "service": {"port": port_of(&webhook)}},
    });
    release.apply("install", &values);
    let _volume = SecretVolume::start(NS, SERVING, dir.clone());
    registered(&client, &release.covered).await;
    let serving = || get(&["secret", "-n", NS, SERVING]).unwrap()["data"].clone();
    let ca = |key: &str| get(&["secret", "-n", NS, CA]).unwrap()["data"][key].clone();
    let first = (ca("tls.crt"), serving()["tls.crt"].clone());
    assert_eq!(bundle(&configuration), vec![first.0.as_str().unwrap()]);

    // Six of its ten years gone: less than half of the CA's lifetime is left.
    annotate(
        NS,
        CA,
        &[
            ("jumppod.dstack.ai/not-before", &days_from_now(-6 * 365)),
            ("jumppod.dstack.ai/not-after", &days_from_now(4 * 365)),
        ],
    );
    let pods = creating(client.clone(), &release.covered);
    release.apply("upgrade", &values);
    let next = ca("next.crt");
    assert!(next.is_string(), "the next CA is made");
    assert_eq!(
        bundle(&configuration),
        vec![first.0.as_str().unwrap(), next.as_str().unwrap()],
        "the next CA in the caBundle beside the current one"
    );
    assert_eq!(
        serving()["tls.crt"],
        first.1,
        "the served certificate is still the current CA's"
    );

    release.apply("upgrade", &values);
    let rotated = serving();
    assert_ne!(rotated["tls.crt"], first.1, "a certificate of the next CA");
    assert_eq!(ca("tls.crt"), next, "the next CA is the current one");
    verify(
        &base64_decode(&rotated["tls.crt"]),
        &base64_decode(&next),
        &service,
    )
    .expect("the new certificate is the next CA's, for the Service");
    assert_eq!(
        bundle(&configuration),
        vec![next.as_str().unwrap(), first.0.as_str().unwrap()],
        "the previous CA stays in the caBundle"
    );
    // Until the webhook serves the new certificate (the copy, then its next handshake).
    let next_pem = base64_decode(&next);
    wait_for_up_to(
        "the webhook to serve the certificate of the next CA",
        Duration::from_secs(60),
        || async {
            tls_connect(&webhook.addr, &next_pem, &service)
                .await
                .ok()
                .map(drop)
        },
    )
    .await;
    for _ in 0..5 {
        dry_run(&client, &release.covered, &legacy_pod())
            .await
            .expect("a jump pod through the new certificate");
    }
    let tally = no_refusal("the CA's rotation", pods).await;
    assert_eq!(tally.unchecked, 0, "{tally:?}");

    // A certificate is kept while more than a third of its lifetime is left (400 of 1000
    // days), and renewed once less is (300 of 1000).
    for (left, renewed) in [(400, false), (300, true)] {
        annotate(
            NS,
            SERVING,
            &[
                ("jumppod.dstack.ai/not-before", &days_from_now(left - 1000)),
                ("jumppod.dstack.ai/not-after", &days_from_now(left)),
            ],
        );
        let before = serving()["tls.crt"].clone();
        release.apply("upgrade", &values);
        assert_eq!(
            serving()["tls.crt"] != before,
            renewed,
            "{left} of 1000 days left"
        );
    }

    // An expired certificate of the current CA, its dates where the chart reads them.
    let now = days_from_now(0);
    let expired = pair(
        &[&service, &format!("{service}.cluster.local")],
        0,
        Some((
            &String::from_utf8(base64_decode(&ca("tls.crt"))).unwrap(),
            &String::from_utf8(base64_decode(&ca("tls.key"))).unwrap(),
        )),
    );
    let patch = json!({
        "metadata": {"annotations": {"jumppod.dstack.ai/not-before": now, "jumppod.dstack.ai/not-after": now}},
        "stringData": {"tls.crt": expired.crt, "tls.key": expired.key},
    });
    kubectl_ok(
        &[
            "patch",
            "secret",
            "-n",
            NS,
            SERVING,
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
    let refusal = wait_for_up_to(
        "a jump pod refused for the expired certificate",
        Duration::from_secs(60),
        || async {
            dry_run(&client, &release.covered, &legacy_pod())
                .await
                .err()
                .map(|e| e.to_string())
                .filter(|e| e.contains("expired"))
        },
    )
    .await;
    eprintln!("with the expired certificate: {refusal}");
    release.apply("upgrade", &values);
    let renewed = serving();
    assert_ne!(base64_decode(&renewed["tls.crt"]), expired.crt.as_bytes());
    verify(
        &base64_decode(&renewed["tls.crt"]),
        &base64_decode(&ca("tls.crt")),
        &service,
    )
    .expect("the renewed certificate is valid, of the same CA");
    registered(&client, &release.covered).await;
    drop(webhook);
}
