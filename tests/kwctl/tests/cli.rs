//! kwctl-wapc as policy/e2e.sh runs it: the binary, on the policy module `make policy` builds.
//! Its answers against kwctl's own are policy/runners.bats's (where kwctl is installed).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `$JUMPPOD_POLICY_WASM`, or the release build in the workspace's target directory.
fn policy() -> PathBuf {
    std::env::var_os("JUMPPOD_POLICY_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/wasm32-wasip1/release/jumppod_policy.wasm"))
}

fn kwctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kwctl-wapc"))
        .args(args)
        .current_dir(workspace())
        .output()
        .expect("kwctl-wapc runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kwctl-wapc-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

#[test]
fn the_annotated_module_carries_the_metadata_and_still_runs() {
    let dir = scratch("annotate");
    let annotated = dir.join("annotated.wasm");
    let policy = policy();
    let out = kwctl(&[
        "annotate",
        "-m",
        "policy/metadata.yml",
        "-u",
        "policy/README.md",
        "-o",
        annotated.to_str().unwrap(),
        policy.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = kwctl(&["inspect", "-o", "yaml", annotated.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let metadata: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).expect("YAML");
    assert_eq!(metadata["mutating"], serde_yaml::Value::Bool(true));
    assert_eq!(metadata["protocolVersion"].as_str(), Some("v1"));
    let usage = metadata["annotations"]["io.kubewarden.policy.usage"].as_str();
    assert!(usage.is_some_and(|u| u.starts_with("# jumppod: Kubewarden policy")));

    let out = kwctl(&[
        "run",
        "--request-path",
        "policy/test_data/ordinary_pod_create.json",
        annotated.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let response: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(response["allowed"], true);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_module_without_metadata_is_named_by_inspect() {
    let policy = policy();
    let out = kwctl(&["inspect", policy.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("No Kubewarden metadata found"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn settings_that_are_not_json_are_refused_naming_the_flag() {
    let policy = policy();
    let out = kwctl(&[
        "run",
        "--request-path",
        "policy/test_data/ordinary_pod_create.json",
        "--settings-json",
        "{mutate: [",
        policy.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--settings-json is not valid settings"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn metadata_kwctl_would_refuse_is_not_written() {
    let dir = scratch("invalid");
    let metadata = dir.join("metadata.yml");
    std::fs::write(
        &metadata,
        "rules:\n- apiGroups: ['']\n  apiVersions: [v1]\n  resources: [pods]\n  operations: [PATCH]\nmutating: true\n",
    )
    .unwrap();
    let annotated = dir.join("annotated.wasm");
    let policy = policy();
    let out = kwctl(&[
        "annotate",
        "-m",
        metadata.to_str().unwrap(),
        "-o",
        annotated.to_str().unwrap(),
        policy.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("rules[0].operations = \"PATCH\""),
        "{}",
        text(&out.stderr)
    );
    assert!(!annotated.exists());
    std::fs::remove_dir_all(dir).ok();
}
