//! The real `jumppod` binary through a kubeconfig: commands, output formats and exit codes as
//! users see them. The cases that need a cluster run from host/testkit/src/both.rs, here
//! against the simulator and in real_cluster.rs against the real control plane.

use jumppod_testkit::both::{Cluster, json_of, jumppod, text};

use base64::Engine as _;
use serde_json::Value;

jumppod_testkit::cli_scenarios!(sim);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_documents_the_commands_and_exit_codes() {
    let out = jumppod(&["--help"]).await;
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "ensure",
        "resolve",
        "status",
        "rbac",
        "eval",
        "run",
        "Exit codes",
        "KUBECONFIG",
        "--context",
    ] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
    assert!(
        !help.contains("demo"),
        "the demo is `make demo`, not part of the binary:\n{help}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_prints_the_rules_as_yaml() {
    let out = jumppod(&["rbac", "--namespace", "dstack"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let yaml = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 5);
    assert_eq!(docs[1]["kind"], "Role");
    assert_eq!(docs[1]["metadata"]["namespace"], "dstack");
}

/// `jumppod run` refuses what it cannot use before it connects: the kubeconfig named here
/// does not exist, so reaching for it would be a different error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_projects_values_and_an_impossible_election_before_connecting() {
    let dir = std::env::temp_dir().join(format!("jumppod-cli-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.yaml");
    std::fs::write(&file, "cpu: 250m\nport: 32000\n").unwrap();
    let none = dir.join("no-such.kubeconfig");
    let out = jumppod(&[
        "--kubeconfig",
        none.to_str().unwrap(),
        "run",
        "-f",
        file.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid `port`"), "{stderr}");
    assert!(stderr.contains("keeps each Service's NodePort"), "{stderr}");

    let out = jumppod(&[
        "--kubeconfig",
        none.to_str().unwrap(),
        "run",
        "--lease-duration",
        "5s",
        "--renew-deadline",
        "5s",
    ])
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("must be shorter than --lease-duration"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_for_the_controller_prints_its_deployment() {
    let out = jumppod(&["rbac", "--controller", "-n", "ops", "-A", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let list = json_of(&out);
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            // Node Leases, in kube-node-lease.
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment"
        ]
    );
    let out = jumppod(&["rbac", "-n", "ops", "-A"]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "-A needs --controller: {}",
        text(&out)
    );
}

/// The policy module `eval` runs: $JUMPPOD_POLICY_WASM (the Makefile sets it), else the
/// workspace's release build.
fn policy_module() -> String {
    std::env::var("JUMPPOD_POLICY_WASM").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/wasm32-wasip1/release/jumppod_policy.wasm"
        )
        .to_owned()
    })
}

fn fixture(name: &str) -> String {
    format!("{}/../policy/test_data/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// kwctl's answers for the same fixtures (policy/e2e.bats, run against kwctl 1.36): the uid
/// echoed, the verdict, the rejection message, the JSONPatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_prints_what_kwctl_run_prints() {
    let module = policy_module();
    // The kit off: the patch is the labels and resources alone (policy_wasm checks the kit's).
    let out = jumppod(&[
        "eval",
        &fixture("legacy_bare_pod_create.json"),
        "--policy",
        &module,
        "--settings",
        r#"{"kit": false}"#,
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let answer = json_of(&out);
    let patch = answer["patch"].as_str().expect("a patch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .expect("the patch is base64");
    let patch: Value = serde_json::from_slice(&patch).expect("the patch is JSON");
    assert_eq!(
        answer,
        serde_json::json!({
            "uid": "e5f8b1c4-3a6d-4e9f-8b2c-7d4a1e6f9b35",
            "allowed": true,
            "patchType": "JSONPatch",
            "patch": answer["patch"],
        })
    );
    assert_eq!(
        patch,
        serde_json::json!([
            {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1instance", "value": "dstack-main-ssh-jump-pod"},
            {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1managed-by", "value": "dstack"},
            {"op": "add", "path": "/metadata/labels/k8s.dstack.ai~1project", "value": "main"},
            {"op": "add", "path": "/spec/containers/0/resources/limits", "value": {"cpu": "500m", "memory": "1Gi"}},
            {"op": "add", "path": "/spec/containers/0/resources/requests",
             "value": {"cpu": "500m", "ephemeral-storage": "64Mi", "memory": "1Gi"}},
        ])
    );

    let undersized = fixture("undersized_jump_pod_create.json");
    let out = jumppod(&["eval", &undersized, "--policy", &module]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        json_of(&out),
        serde_json::json!({
            "uid": "c3e6a9d2-1f4b-4c8e-9a7d-5b2e8f1c4a73",
            "allowed": false,
            "status": {"message": "jump pod \"dstack-main-ssh-jump-pod-w5n8r\" does not meet the jump-pod contract: container \"dstack-main-ssh-jump-pod-container\": cpu request 50m is below the minimum 100m"},
        })
    );

    let out = jumppod(&[
        "eval",
        &undersized,
        "--policy",
        &module,
        "--settings",
        r#"{"cpu": {"minimum": "50m"}}"#,
    ])
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "Provided settings are not valid: invalid setting `cpu.minimum`: 50m is below the floor 100m"
        ),
        "{}",
        text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_without_a_module_says_how_to_build_it() {
    let out = jumppod(&[
        "eval",
        &fixture("legacy_bare_pod_create.json"),
        "--policy",
        "/nonexistent/policy.wasm",
    ])
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/policy.wasm"),
        "{}",
        text(&out)
    );
    assert!(stderr.contains("make policy"), "{}", text(&out));
}

/// Several files: one compact AdmissionResponse per line, each what the file alone gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_of_several_files_answers_one_line_each_in_order() {
    let module = policy_module();
    let files = [
        fixture("undersized_jump_pod_create.json"),
        fixture("ordinary_pod_create.json"),
    ];
    let out = jumppod(&["eval", &files[0], &files[1], "--policy", &module]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for (line, file) in lines.iter().zip(&files) {
        let alone = jumppod(&["eval", file, "--policy", &module]).await;
        assert_eq!(*line, json_of(&alone), "{file}");
    }
    assert_eq!(lines[0]["allowed"], false);
    assert_eq!(lines[1]["allowed"], true);
}

/// `eval` with a cache directory of its own ($XDG_CACHE_HOME): the first run compiles the
/// module and writes its entry, the second loads it from there; an entry cut short or with a
/// byte flipped is compiled again and replaced, with a warning, and the answer is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_loads_the_module_compiled_from_the_cache_and_recompiles_a_damaged_entry() {
    let module = policy_module();
    let cache = std::env::temp_dir().join(format!("jumppod-cli-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let file = fixture("legacy_bare_pod_create.json");
    let eval = || {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_jumppod"))
            .args(["eval", &file, "--policy", &module])
            .env("XDG_CACHE_HOME", &cache)
            .env("RUST_LOG", "info")
            .output()
    };
    let origin = |out: &std::process::Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        stderr
            .lines()
            .find(|l| l.contains("policy module loaded"))
            .unwrap_or_else(|| panic!("no load logged: {}", text(out)))
            .to_owned()
    };
    let first = eval().await.unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert!(
        origin(&first).contains("origin=Compiled"),
        "{}",
        text(&first)
    );
    let entries: Vec<_> = std::fs::read_dir(cache.join("jumppod"))
        .expect("the cache directory is made")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let second = eval().await.unwrap();
    assert!(
        origin(&second).contains("origin=Cached"),
        "{}",
        text(&second)
    );
    assert_eq!(json_of(&second), json_of(&first));

    let damages: [fn(&mut Vec<u8>); 2] = [
        |entry| entry.truncate(entry.len() / 3),
        |entry| {
            let at = entry.len() / 2;
            entry[at] ^= 0x01;
        },
    ];
    for damage in damages {
        let mut bytes = std::fs::read(&entries[0]).unwrap();
        damage(&mut bytes);
        std::fs::write(&entries[0], &bytes).unwrap();
        let again = eval().await.unwrap();
        assert_eq!(again.status.code(), Some(0), "{}", text(&again));
        assert!(
            origin(&again).contains("origin=Recompiled"),
            "{}",
            text(&again)
        );
        assert!(
            String::from_utf8_lossy(&again.stderr).contains("cache entry is unusable"),
            "{}",
            text(&again)
        );
        assert_eq!(json_of(&again), json_of(&first));
        assert!(origin(&eval().await.unwrap()).contains("origin=Cached"));
    }
    std::fs::remove_dir_all(&cache).unwrap();
}

/// A bad value of a flag: exit 2 (usage or configuration, host/README.md) with a message
/// naming the flag and the value. The kubeconfig named does not exist: each is refused before
/// the cluster is reached for, which would be another error.
#[rstest::rstest]
#[case::memory_not_a_quantity(&["--memory", "1GB"], "invalid `memory` \"1GB\"")]
#[case::output_not_a_format(&["-o", "yaml"], "invalid value 'yaml' for '--output <OUTPUT>'")]
#[case::timeout_not_a_duration(&["--timeout", "soon"],
    "invalid value 'soon' for '--timeout <TIMEOUT>': \"soon\" is not a duration like 30s, 500ms or 2m")]
#[case::timeout_of_zero(&["--timeout", "0s"], "invalid value '0s' for '--timeout <TIMEOUT>': \"0s\" must be positive")]
#[case::timeout_in_days(&["--timeout", "2d"],
    "invalid value '2d' for '--timeout <TIMEOUT>': \"2d\": unknown unit \"d\" (ms, s, m, h)")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_flag_value_exits_2_naming_the_flag_and_the_value(
    #[case] flag: &[&str],
    #[case] says: &str,
) {
    let mut args = vec![
        "--kubeconfig",
        "/nonexistent/jumppod.kubeconfig",
        "ensure",
        "-n",
        "dstack",
        "-p",
        "main",
        "--ssh-public-key",
        jumppod_testkit::KEY,
    ];
    args.extend(flag);
    let out = jumppod(&args).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(says),
        "{says}\nnot in:\n{}",
        text(&out)
    );
}

/// A context the kubeconfig does not have: exit 2 naming `--context` and the name, whether
/// the kubeconfig comes from --kubeconfig or from KUBECONFIG. Its one cluster is a port
/// nothing listens on: nothing is asked of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_the_kubeconfig_lacks_exits_2_naming_it() {
    let dir = std::env::temp_dir().join(format!("jumppod-cli-context-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: only\n\
         clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: only, context: {cluster: c, user: u}}]\n",
    )
    .unwrap();
    let status = ["status", "-n", "dstack", "-p", "main", "--context", "nope"];
    let by_flag =
        jumppod(&[&["--kubeconfig", kubeconfig.to_str().unwrap()], &status[..]].concat()).await;
    let by_env = tokio::process::Command::new(env!("CARGO_BIN_EXE_jumppod"))
        .args(status)
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("RUST_LOG")
        .output()
        .await
        .unwrap();
    for (how, out) in [("--kubeconfig", by_flag), ("KUBECONFIG", by_env)] {
        assert_eq!(out.status.code(), Some(2), "{how}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("invalid `--context` \"nope\""),
            "{how}: {}",
            text(&out)
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Without --policy and without $JUMPPOD_POLICY_WASM, `eval` runs ./policy.wasm, what `make
/// policy` writes at the top of the repository; where there is none, it says how to build it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_runs_policy_wasm_of_the_working_directory_by_default() {
    let dir = std::env::temp_dir().join(format!("jumppod-cli-default-{}", std::process::id()));
    let (with, without) = (dir.join("with"), dir.join("without"));
    std::fs::create_dir_all(&with).unwrap();
    std::fs::create_dir_all(&without).unwrap();
    let module = policy_module();
    std::fs::copy(&module, with.join("policy.wasm"))
        .unwrap_or_else(|e| panic!("{module}: {e} (`make policy` builds it)"));
    let eval = |cwd: std::path::PathBuf| async move {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_jumppod"))
            .args(["eval", &fixture("undersized_jump_pod_create.json")])
            .current_dir(cwd)
            .env_remove("JUMPPOD_POLICY_WASM")
            .env_remove("RUST_LOG")
            .output()
            .await
            .unwrap()
    };
    let out = eval(with).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(json_of(&out)["allowed"], false, "{}", text(&out));
    assert_eq!(
        json_of(&out)["uid"],
        "c3e6a9d2-1f4b-4c8e-9a7d-5b2e8f1c4a73",
        "{}",
        text(&out)
    );

    let out = eval(without).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read the policy module policy.wasm (`make policy` builds it)"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The binary built without the Wasm runtime (`--no-default-features`, `make no-wasm`), the
/// native gate only: it has no `eval` or `webhook`, refuses `--policy` saying why, and does
/// its work against the simulator: ensure, resolve, and a ReplicaSet below the floor refused
/// by the native gate (exit 3) with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_without_wasm_judges_with_the_native_policy() {
    let binary = std::env::var("JUMPPOD_NO_WASM_BIN").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/no-wasm/debug/jumppod"
        )
        .to_owned()
    });
    assert!(
        std::path::Path::new(&binary).is_file(),
        "{binary} is missing: `make no-wasm` builds it"
    );
    let run = |args: Vec<String>| {
        let binary = binary.clone();
        async move {
            tokio::process::Command::new(binary)
                .args(args)
                .env_remove("RUST_LOG")
                .output()
                .await
                .unwrap()
        }
    };
    let owned = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let out = run(owned(&["--help"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        // A command's line is indented by two; its wrapped description by more.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        commands,
        [
            "ensure",
            "resolve",
            "status",
            "keys",
            "rbac",
            "run",
            "completions",
            "man",
            "help"
        ],
        "{help}"
    );
    let out = run(owned(&["eval", &fixture("ordinary_pod_create.json")])).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand 'eval'"),
        "{}",
        text(&out)
    );

    let cluster = Cluster::sim().await;
    let kc = cluster.kubeconfig();
    let target = |project: &str| {
        owned(&[
            "--kubeconfig",
            kc.to_str().unwrap(),
            "-n",
            cluster.ns(),
            "-p",
            project,
            "--ssh-public-key",
            jumppod_testkit::KEY,
            "--hostname",
            "203.0.113.10",
        ])
    };
    let with = |command: &str, project: &str, extra: &[&str]| {
        let mut args = owned(&[command]);
        args.extend(target(project));
        args.extend(owned(extra));
        args
    };
    let out = run(with("ensure", "main", &["--policy", "policy.wasm"])).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "invalid `--policy` \"policy.wasm\": this jumppod was built without the Wasm runtime"
        ),
        "{}",
        text(&out)
    );
    let out = run(with("ensure", "main", &[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    cluster.settle().await;
    let out = run(with("resolve", "main", &[])).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let service = cluster.service().await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next(),
        Some(&*format!(
            "root@203.0.113.10:{}",
            service["spec"]["ports"][0]["nodePort"]
        )),
        "{}",
        text(&out)
    );

    let out = run(with("ensure", "small", &["--cpu", "50m"])).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cpu request 50m is below the minimum 100m"),
        "{}",
        text(&out)
    );
    assert!(
        cluster
            .get("replicasets", "dstack-small-ssh-jump-pod")
            .await
            .is_none(),
        "the native gate refused it before it was written"
    );
}

/// The visible commands of `jumppod` as paths (`keys add`), from the definition the binary
/// parses with.
fn command_paths() -> Vec<Vec<String>> {
    fn walk(cmd: &clap::Command, path: &[String], into: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let mut path = path.to_vec();
            path.push(sub.get_name().to_owned());
            into.push(path.clone());
            walk(sub, &path, into);
        }
    }
    let mut paths = Vec::new();
    walk(
        &<jumppod_host::cli::Cli as clap::CommandFactory>::command(),
        &[],
        &mut paths,
    );
    paths
}

/// Bash, given the script, completes `jumppod <TAB>` with every command and `jumppod keys
/// <TAB>` with every keys command: the script is run, not searched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_completion_offers_every_subcommand() {
    let out = jumppod(&["completions", "bash"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let dir = std::env::temp_dir().join(format!("jumppod-cli-completions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("jumppod.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let complete = |words: &[&str]| {
        // What bash's programmable completion sets before it calls the function: the words
        // so far and an empty one being completed, the function's arguments the command, the
        // current word and the one before it.
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let program = format!(
            "source '{}'; COMP_WORDS=({} ''); COMP_CWORD={}; _jumppod jumppod '' {}; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display(),
            quoted.join(" "),
            words.len(),
            quoted.last().unwrap(),
        );
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(program)
            .output()
            .expect("run bash");
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let top = complete(&["jumppod"]);
    let keys = complete(&["jumppod", "keys"]);
    for path in command_paths() {
        let offered = match path.as_slice() {
            [_] => &top,
            [parent, _] if parent == "keys" => &keys,
            _ => continue,
        };
        let name = path.last().unwrap();
        assert!(
            offered.contains(name),
            "`{}` not offered: {offered:?}",
            path.join(" ")
        );
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = jumppod(&["completions", shell]).await;
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", text(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains("webhook-configuration"),
            "{shell}:\n{script}"
        );
    }
    let out = jumppod(&["completions", "tcsh"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// `jumppod man` is a roff page that names every command; where groff is installed it formats
/// the page without a warning. With --out-dir, every command has its page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_man_page_is_roff_and_names_every_subcommand() {
    let out = jumppod(&["man"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let page = String::from_utf8(out.stdout.clone()).unwrap();
    // The title comes first; only clap_mangen's definition of the apostrophe string (`.ie`,
    // `.el`) precedes it.
    let title = page
        .lines()
        .position(|l| l.starts_with(".TH "))
        .expect(".TH");
    assert!(
        page.lines()
            .take(title)
            .all(|l| l.starts_with(".ie ") || l.starts_with(".el ")),
        "{page}"
    );
    assert!(
        page.lines()
            .nth(title)
            .unwrap()
            .starts_with(".TH jumppod 1 "),
        "{page}"
    );
    let plain = page.replace("\\-", "-");
    for path in command_paths().iter().filter(|p| p.len() == 1) {
        let name = format!("jumppod-{}(1)", path[0]);
        assert!(plain.contains(&name), "{name} missing from:\n{page}");
    }
    assert!(plain.contains("Exit codes"), "{page}");
    if std::process::Command::new("groff")
        .arg("--version")
        .output()
        .is_ok()
    {
        let mut groff = std::process::Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut groff.stdin.take().unwrap(), page.as_bytes()).unwrap();
        let formatted = groff.wait_with_output().unwrap();
        assert!(formatted.status.success(), "{}", text(&formatted));
        assert!(formatted.stderr.is_empty(), "{}", text(&formatted));
    }

    let dir = std::env::temp_dir().join(format!("jumppod-cli-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = jumppod(&["man", "--out-dir", dir.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut expected = vec!["jumppod.1".to_owned()];
    expected.extend(
        command_paths()
            .iter()
            .map(|p| format!("jumppod-{}.1", p.join("-"))),
    );
    expected.sort();
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, expected);
    let _ = std::fs::remove_dir_all(&dir);

    let out = jumppod(&["man", "--out-dir", "/nonexistent/jumppod-man"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot write the manual pages"),
        "{}",
        text(&out)
    );
}
