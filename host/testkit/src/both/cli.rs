//! The `jumppod` binary against a cluster: the main flow, exit codes, `jumppod keys`.

use super::*;

/// The CLI's main flow through the real binary: `ensure` from a configuration file (dstack's
/// `proxy_jump`), `resolve -o json` and a steady `ensure -o json` in 2 requests each, and
/// `status` reading the pod Guaranteed with nothing left to do.
pub async fn the_binary_ensures_resolves_and_reports(cluster: &Cluster) {
    let kc = cluster.kubeconfig();
    let kc = kc.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!(
        "jumppod-cli-{}-{}",
        cluster.ns(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("jumppod.yaml");
    std::fs::write(
        &file,
        format!(
            "namespace: {}\nproject: main\nproxy_jump: {{hostname: jump.example.com}}\nssh_public_key: {KEY}\n",
            cluster.ns()
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let run = |command: &'static str, json: bool| {
        let mut args = vec![command, "--kubeconfig", kc, "--config", file];
        if json {
            args.extend(["-o", "json"]);
        }
        async move { jumppod(&args).await }
    };

    let out = run("ensure", false).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("create replicaset dstack-main-ssh-jump-pod"),
        "{}",
        text(&out)
    );
    // Only the simulator can hold its kubelet back long enough to see "not ready".
    if cluster.is_sim() {
        let out = run("resolve", false).await;
        assert_eq!(out.status.code(), Some(4), "not ready yet: {}", text(&out));
    }

    cluster.settle().await;
    let (out, requests) = cluster.requests_of(run("resolve", true)).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let proxy = &serde_json::from_slice::<Value>(&out.stdout).unwrap()["proxy"];
    assert_eq!(proxy["hostname"], "jump.example.com");
    assert_eq!(proxy["username"], "root");
    assert_eq!(
        proxy["port"].as_i64().unwrap(),
        node_port(&cluster.service().await)
    );
    assert_eq!(requests.len(), 2, "{requests:#?}");

    let (out, requests) = cluster.requests_of(run("ensure", true)).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["applied"],
        json!([])
    );
    assert_eq!(requests.len(), 2, "{requests:#?}");

    let out = run("status", false).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("QoS Guaranteed"), "{}", text(&out));
    assert!(
        stdout.contains("ensure would change nothing"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CLI's exit codes through the binary: 2 for configuration (naming the field and the
/// value) and usage, 3 when the policy rejects what ensure would write (nothing written), 4
/// when nothing is provisioned, 5 when forbidden (with the way out). On the simulator RBAC
/// must be on.
pub async fn exit_codes_say_what_went_wrong(cluster: &Cluster) {
    let kc = cluster.kubeconfig();
    let ns = cluster.ns();
    let target = |kc: &std::path::Path| -> Vec<String> {
        let args = ["--kubeconfig", kc.to_str().unwrap(), "-n", ns, "-p", "main"];
        let key = ["--ssh-public-key", KEY];
        args.iter().chain(&key).map(|s| s.to_string()).collect()
    };
    let run = |command: &'static str, target: Vec<String>, extra: &'static [&'static str]| async move {
        let mut args = vec![command];
        args.extend(target.iter().map(String::as_str));
        args.extend(extra);
        jumppod(&args).await
    };

    let out = run("ensure", target(&kc), &["--cpu", "lots"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid `cpu` \"lots\""), "{}", text(&out));

    let (out, requests) = cluster
        .requests_of(run("ensure", target(&kc), &["--cpu", "50m"]))
        .await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("50m"),
        "{}",
        text(&out)
    );
    let writes: Vec<&String> = requests.iter().filter(|r| is_write(r)).collect();
    assert_eq!(writes, Vec::<&String>::new(), "nothing written");

    let out = run("resolve", target(&kc), &[]).await;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));

    let out = run(
        "ensure",
        target(&cluster.nobody_kubeconfig()),
        &["-o", "json"],
    )
    .await;
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    let json: Value = serde_json::from_slice(&out.stdout).expect("-o json");
    assert_eq!(json["error"]["kind"], "api", "{json}");
    let way_out = format!("jumppod rbac --namespace {ns}");
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&way_out), "{json}");

    let out = jumppod(&["ensure", "--port", "x"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// `jumppod keys` as dstack or an operator calls it: a key as an argument, from stdin or a
/// file; the list with the fingerprints `ssh-keygen -l` prints; removal by key; bad input
/// named with exit code 2, nothing sent to the API and a private key never echoed.
pub async fn keys_are_added_listed_and_removed_through_the_binary(cluster: &Cluster) {
    cluster.namespace().await;
    let kc = cluster.kubeconfig();
    let ns = cluster.ns();
    let target = ["--kubeconfig", kc.to_str().unwrap(), "-n", ns, "-p", "main"];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter().chain(&target).map(|s| s.to_string()).collect()
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        jumppod(&args).await
    };

    let out = run(with(&["keys", "add", ALICE, "--name", "alice"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let added = format!("key alice in secret {ns}/dstack-main-ssh-jump-pod-authorized-keys: added");
    assert!(stdout.contains(&added), "{}", text(&out));
    assert!(
        stdout.contains("no running jump pod to tell"),
        "{}",
        text(&out)
    );

    let mut child = tokio::process::Command::new(crate::jumppod_bin())
        .args(with(&["keys", "add", "-"]))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run jumppod");
    use tokio::io::AsyncWriteExt as _;
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{BOB}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let out = run(with(&["keys", "list", "-o", "json"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let list = json_of(&out);
    let entries = list["entries"].as_array().expect("entries");
    let names: Vec<&str> = entries.iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.contains(&"alice") && names.iter().any(|n| n.starts_with("key-")),
        "{names:?}"
    );
    let alice = entries.iter().find(|e| e["name"] == "alice").unwrap();
    // What `ssh-keygen -lf` (OpenSSH 9.2) prints for ALICE.
    assert_eq!(
        alice["fingerprint"],
        "SHA256:pNpnj+bt0Ij47gSKdxSbHEbm2WLXU4wkQdw5c8pbOM4"
    );

    let out = run(with(&["keys", "remove", ALICE])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("key alice in secret"), "{}", text(&out));

    let dir = std::env::temp_dir().join(format!("jumppod-keys-{ns}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let private = dir.join("id_ed25519");
    std::fs::write(&private, "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n").unwrap();
    let (_, requests) = cluster
        .requests_of(async {
            for (args, says) in [
                (
                    vec!["keys", "add", "--key-file", private.to_str().unwrap()],
                    "is a private key",
                ),
                (
                    vec!["keys", "add", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5"],
                    "invalid `key`",
                ),
                (
                    vec!["keys", "add", ALICE, "--name", "a/b"],
                    "invalid `--name` \"a/b\"",
                ),
            ] {
                let out = run(with(&args)).await;
                assert_eq!(out.status.code(), Some(2), "{}", text(&out));
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(stderr.contains(says), "{}", text(&out));
                assert!(
                    !stderr.contains("b3BlbnNzaC1rZXktdjEAAAAA"),
                    "a private key is never echoed"
                );
            }
        })
        .await;
    assert_eq!(requests, Vec::<String>::new(), "bad input reaches no API");
    let _ = std::fs::remove_dir_all(&dir);
}

/// This file's scenarios on one backend (`both_tests!`): `cli_scenarios!(sim)` in `cli.rs`,
/// `cli_scenarios!(real)` in `real_cluster.rs`.
#[macro_export]
macro_rules! cli_scenarios {
    ($on:ident) => {
        $crate::both_tests! { $on, cli;
            the_binary_ensures_resolves_and_reports:
                sim ensure_then_resolve_through_the_binary = sim(),
                /// 2 requests each for a steady `ensure` and a `resolve`, in the audit log.
                real ensure_then_resolve_through_the_binary = real("rc-cli");
            exit_codes_say_what_went_wrong:
                sim exit_codes_say_what_went_wrong = sim_with_rbac(),
                /// 5 as a user granted nothing.
                real exit_codes_say_what_went_wrong = real("rc-cli-exit");
            keys_are_added_listed_and_removed_through_the_binary:
                sim keys_are_added_listed_and_removed_through_the_binary = sim(),
                real keys_are_added_listed_and_removed_through_the_binary
                    = real("rc-cli-keys");
        }
    };
}
