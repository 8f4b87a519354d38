//! The packaging of the policy agrees with itself and with the module: metadata.yml, the
//! ClusterAdmissionPolicy and policy-server's policies.yml name the same rules, the same
//! mutating flag and the same settings, and those settings are valid for the built Wasm.

mod policy_support;

use jumppod::settings::{Contract, Settings};
use policy_support::*;
use serde_json::{Value, json};

fn yaml(relative: &str) -> Value {
    let path = workspace().join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
}

fn metadata() -> Value {
    yaml("policy/metadata.yml")
}

fn cluster_policy() -> Value {
    yaml("policy/deploy/cluster-admission-policy.yml")
}

fn policies() -> Value {
    yaml("policy/deploy/policies.yml")
}

fn expected_rules() -> Value {
    json!([
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE", "UPDATE"]},
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["replicasets"], "operations": ["CREATE", "UPDATE"]},
    ])
}

#[test]
fn metadata_declares_pods_and_replicasets_mutating_and_audited() {
    let metadata = metadata();
    assert_eq!(metadata["rules"], expected_rules());
    assert_eq!(metadata["mutating"], true);
    assert_eq!(metadata["backgroundAudit"], true);
    assert_eq!(metadata["executionMode"], "kubewarden-wapc");
    assert_eq!(metadata["contextAwareResources"], json!([]));
}

#[test]
fn metadata_carries_every_kubewarden_annotation() {
    let annotations = &metadata()["annotations"];
    for key in [
        "title",
        "description",
        "author",
        "url",
        "source",
        "license",
        "severity",
        "category",
    ] {
        let value = annotations[format!("io.kubewarden.policy.{key}")].as_str();
        assert!(
            value.is_some_and(|v| !v.trim().is_empty()),
            "io.kubewarden.policy.{key} is missing"
        );
    }
    assert_eq!(annotations["io.kubewarden.policy.license"], "Apache-2.0");
    assert_eq!(
        annotations["io.kubewarden.policy.version"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "the annotated version is the crate's"
    );
}

#[test]
fn the_cluster_admission_policy_agrees_with_metadata() {
    let metadata = metadata();
    let policy = cluster_policy();
    assert_eq!(policy["apiVersion"], "policies.kubewarden.io/v1");
    assert_eq!(policy["kind"], "ClusterAdmissionPolicy");
    let spec = &policy["spec"];
    assert_eq!(spec["rules"], metadata["rules"]);
    assert_eq!(spec["mutating"], metadata["mutating"]);
    assert_eq!(spec["backgroundAudit"], metadata["backgroundAudit"]);
    assert_eq!(spec["mode"], "protect");
    assert_eq!(
        spec["matchConditions"],
        json!([{"name": "jump-pods", "expression": jumppod::schema::match_condition()}]),
        "only jump pods and jump-pod ReplicaSets go to the policy-server, as to `jumppod webhook`"
    );
    let module = spec["module"].as_str().expect("a module");
    assert!(module.starts_with("registry://"), "{module}");
    assert!(
        module.ends_with(&format!(":v{}", env!("CARGO_PKG_VERSION"))),
        "the module's tag is the crate's version: {module}"
    );
    for key in ["title", "severity", "category"] {
        let key = format!("io.kubewarden.policy.{key}");
        assert_eq!(
            policy["metadata"]["annotations"][&key], metadata["annotations"][&key],
            "{key}"
        );
    }
}

#[test]
fn the_policy_never_judges_the_namespaces_it_runs_in() {
    let selector = &cluster_policy()["spec"]["namespaceSelector"]["matchExpressions"][0];
    assert_eq!(selector["key"], "kubernetes.io/metadata.name");
    assert_eq!(selector["operator"], "NotIn");
    assert_eq!(selector["values"], json!(["kube-system", "kubewarden"]));
}

#[test]
fn policy_server_may_mutate_with_the_same_settings() {
    let policies = policies();
    let jumppod = &policies["jumppod"];
    assert_eq!(jumppod["allowedToMutate"], metadata()["mutating"]);
    assert!(
        jumppod["module"]
            .as_str()
            .is_some_and(|m| m.starts_with("file:///") && m.ends_with("policy.wasm"))
    );
    assert_eq!(jumppod["settings"], cluster_policy()["spec"]["settings"]);
}

#[test]
fn the_shipped_settings_are_the_documented_defaults() {
    let shipped = cluster_policy()["spec"]["settings"].clone();
    assert_eq!(shipped, settings(Some("defaults.json")));
    let contract = Settings::from_json(shipped.to_string().as_bytes())
        .and_then(|s| s.contract())
        .expect("valid settings");
    assert_eq!(contract, Contract::default());
}

#[test]
fn the_shipped_settings_are_valid_for_the_built_module() {
    for settings in [
        cluster_policy()["spec"]["settings"].clone(),
        policies()["jumppod"]["settings"].clone(),
    ] {
        let answer = validate_settings(&settings);
        assert!(answer.valid, "{settings}: {answer:?}");
    }
}

/// The settings as a nested object, from `questions-ui.yml`'s dotted variables and defaults.
fn question_defaults() -> Value {
    let questions = yaml("policy/questions-ui.yml");
    let mut settings = json!({});
    for q in questions["questions"]
        .as_array()
        .expect("a list of questions")
    {
        let path: Vec<&str> = q["variable"]
            .as_str()
            .expect("a variable")
            .split('.')
            .collect();
        let (last, parents) = path.split_last().unwrap();
        let mut node = &mut settings;
        for p in parents {
            node = node
                .as_object_mut()
                .unwrap()
                .entry(p.to_string())
                .or_insert(json!({}));
        }
        node[*last] = q["default"].clone();
    }
    settings
}

#[test]
fn the_settings_form_asks_for_every_setting_with_its_default() {
    assert_eq!(question_defaults(), settings(Some("defaults.json")));
    let answer = validate_settings(&question_defaults());
    assert!(answer.valid, "{answer:?}");
}

#[test]
fn artifact_hub_knows_the_repository_owner() {
    let repo = yaml("policy/artifacthub-repo.yml");
    let owners = repo["owners"].as_array().expect("owners");
    assert!(!owners.is_empty());
    assert!(
        owners
            .iter()
            .all(|o| o["email"].as_str().is_some_and(|e| e.contains('@')))
    );
}

#[test]
fn the_policy_readme_is_the_one_annotate_ships() {
    let makefile = std::fs::read_to_string(workspace().join("Makefile")).unwrap();
    assert!(makefile.contains("kwctl annotate -m policy/metadata.yml -u policy/README.md"));
    let readme = std::fs::read_to_string(workspace().join("policy/README.md")).unwrap();
    for section in ["## What it judges", "## Settings", "## Loading it"] {
        assert!(readme.contains(section), "{section} missing");
    }
    assert!(
        !readme.contains("jumppod ensure"),
        "the policy's README is about the policy, not the host"
    );
}
