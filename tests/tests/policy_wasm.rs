//! The built `policy.wasm`, run as Kubewarden runs it: wasmtime through the waPC host, a
//! fresh instance per evaluation, epoch deadlines. Every fixture of `policy/test_data` gets
//! its verdict, message, warnings and JSONPatch (computed as kwctl does: the diff between
//! the request's object and the mutated object) checked, the patch applied back.

mod policy_support;

use json_patch::PatchOperation;
use jumppod_review::Policy as _;
use jumppod_wasm::WasmPolicy;
use policy_support::*;
use rstest::rstest;
use serde_json::{Value, json};

const JUMP_CONTAINER: &str = "dstack-main-ssh-jump-pod-container";

/// The full message of a rejected jump pod.
fn contract(pod: &str, problems: &[&str]) -> String {
    format!(
        "jump pod \"{pod}\" does not meet the jump-pod contract: {}",
        problems.join("; ")
    )
}

fn template_contract(rs: &str, problems: &[&str]) -> String {
    format!(
        "the pod template of jump-pod ReplicaSet \"{rs}\" does not meet the jump-pod contract: {}",
        problems.join("; ")
    )
}

fn assert_no_patch(evaluation: &Evaluation) {
    assert_eq!(
        evaluation.response.mutated_object, None,
        "nothing changes: no mutated object"
    );
    assert_eq!(evaluation.patch, None);
    assert_eq!(evaluation.admission.get("patchType"), None);
}

fn assert_uid_echoed(evaluation: &Evaluation) {
    assert_eq!(evaluation.admission["uid"], evaluation.request["uid"]);
    assert!(
        evaluation.admission["uid"]
            .as_str()
            .is_some_and(|uid| !uid.is_empty())
    );
}

#[rstest]
#[case::an_ordinary_ten_kilobyte_pod_is_not_judged("ordinary_pod_create.json", None)]
#[case::a_conforming_jump_pod_is_accepted_as_it_is_with_the_kit_off(
    "conforming_jump_pod_create.json",
    Some("no_kit.json")
)]
#[case::dstacks_jump_pod_with_the_kit_and_resources_is_accepted_as_it_is(
    "dstack_0_22_5_bare_jump_pod_with_kit_create.json",
    None
)]
#[case::dstacks_jump_pod_with_the_kit_is_accepted_with_explicit_default_settings(
    "dstack_0_22_5_bare_jump_pod_with_kit_create.json",
    Some("defaults.json")
)]
#[case::dstacks_replicaset_without_resources_is_accepted_since_its_pods_get_them(
    "dstack_replicaset_template_without_resources_create.json",
    None
)]
#[case::a_replicaset_with_a_besteffort_template_is_accepted_not_mutated(
    "replicaset_besteffort_template_create.json",
    None
)]
#[case::scaling_down_a_besteffort_replicaset_needs_no_warning_when_its_pods_get_resources(
    "replicaset_besteffort_scale_update.json",
    None
)]
#[case::a_pod_named_otherwise_is_no_jump_pod_whatever_its_labels("impostor_pod_create.json", None)]
#[case::a_configmap_with_jump_pod_labels_is_not_judged("configmap_create.json", None)]
#[case::deleting_a_besteffort_jump_pod_is_not_judged("jump_pod_delete.json", None)]
#[case::relabelling_a_conforming_jump_pod_is_accepted("jump_pod_label_update.json", None)]
#[case::a_conforming_replicaset_is_accepted("replicaset_conforming_create.json", None)]
#[case::an_ordinary_pod_is_not_judged_even_with_mutation_off(
    "ordinary_pod_create.json",
    Some("no_mutation.json")
)]
#[case::a_conforming_jump_pod_needs_nothing_with_mutation_off(
    "conforming_jump_pod_create.json",
    Some("no_mutation.json")
)]
fn accepted_untouched(#[case] fixture: &str, #[case] settings: Option<&str>) {
    let evaluation = evaluate_fixture(fixture, settings);
    assert!(evaluation.response.accepted, "{:?}", evaluation.response);
    assert_eq!(evaluation.response.message, None);
    assert_eq!(evaluation.response.warnings, None);
    assert_no_patch(&evaluation);
    assert_uid_echoed(&evaluation);
    assert_eq!(evaluation.admission["allowed"], true);
    assert_eq!(evaluation.admission.get("status"), None);
}

#[rstest]
#[case::an_undersized_jump_pod_is_rejected_naming_container_value_and_minimum(
    "undersized_jump_pod_create.json", None,
    contract("dstack-main-ssh-jump-pod-w5n8r", &[
        "container \"dstack-main-ssh-jump-pod-container\": cpu request 50m is below the minimum 100m",
    ]))]
#[case::an_ephemeral_storage_limit_is_rejected(
    "ephemeral_storage_limit_create.json", None,
    contract("dstack-main-ssh-jump-pod-q8f3v", &[
        "container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage limit 1Gi must not be set (the kubelet evicts a pod that exceeds it; set only a request)",
    ]))]
#[case::requests_below_their_limits_are_rejected_each_named(
    "request_not_equal_limit_create.json", None,
    contract("dstack-main-ssh-jump-pod-t4g7b", &[
        "container \"dstack-main-ssh-jump-pod-container\": cpu request 250m is not equal to its limit 1 (Guaranteed QoS needs request == limit)",
        "container \"dstack-main-ssh-jump-pod-container\": memory request 512Mi is not equal to its limit 1Gi (Guaranteed QoS needs request == limit)",
    ]))]
#[case::an_unparsable_quantity_is_a_violation_named_as_such(
    "unparsable_quantity_create.json", None,
    contract("dstack-main-ssh-jump-pod-k3m6p", &[
        "container \"dstack-main-ssh-jump-pod-container\": resources.requests.cpu \"half\" is not a valid quantity (not a quantity: expected <number><suffix> such as 500m, 0.5, 1Gi or 1e3)",
        "container \"dstack-main-ssh-jump-pod-container\": resources.limits.cpu \"half\" is not a valid quantity (not a quantity: expected <number><suffix> such as 500m, 0.5, 1Gi or 1e3)",
    ]))]
#[case::an_init_container_must_be_guaranteed_too(
    "init_container_request_not_equal_limit_create.json", None,
    contract("dstack-main-ssh-jump-pod-y6c1h", &[
        "init container \"install-keys\": cpu request 100m is not equal to its limit 200m (Guaranteed QoS needs request == limit)",
    ]))]
#[case::resizing_a_running_jump_pod_below_the_minimums_is_rejected(
    "jump_pod_resize_below_minimum_update.json", None,
    contract("dstack-main-ssh-jump-pod-x7k2q", &[
        "container \"dstack-main-ssh-jump-pod-container\": cpu request 50m is below the minimum 100m",
        "container \"dstack-main-ssh-jump-pod-container\": memory request 16Mi is below the minimum 32Mi",
    ]))]
#[case::with_mutation_off_a_new_replicaset_with_a_besteffort_template_is_rejected(
    "replicaset_besteffort_template_create.json", Some("no_mutation.json"),
    template_contract("dstack-main-ssh-jump-pod", &[
        "container \"dstack-main-ssh-jump-pod-container\": cpu has no request and no limit (Guaranteed QoS needs both, equal)",
        "container \"dstack-main-ssh-jump-pod-container\": memory has no request and no limit (Guaranteed QoS needs both, equal)",
        "container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request is missing (at least 64Mi is required)",
    ]))]
#[case::with_mutation_off_dstacks_replicaset_without_resources_is_rejected(
    "dstack_replicaset_template_without_resources_create.json", Some("no_mutation.json"),
    template_contract("dstack-main-ssh-jump-pod", &[
        "container \"dstack-main-ssh-jump-pod-container\": cpu has no request and no limit (Guaranteed QoS needs both, equal)",
        "container \"dstack-main-ssh-jump-pod-container\": memory has no request and no limit (Guaranteed QoS needs both, equal)",
        "container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request is missing (at least 64Mi is required)",
    ]))]
#[case::changing_a_template_to_burstable_is_rejected(
    "replicaset_template_resources_changed_update.json", None,
    template_contract("dstack-main-ssh-jump-pod", &[
        "container \"dstack-main-ssh-jump-pod-container\": cpu request 500m is not equal to its limit 2 (Guaranteed QoS needs request == limit)",
    ]))]
#[case::a_raised_ephemeral_storage_minimum_rejects_a_pod_that_met_the_default(
    "conforming_jump_pod_create.json", Some("raised_minimums.json"),
    contract("dstack-main-ssh-jump-pod-x7k2q", &[
        "container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request 64Mi is below the minimum 128Mi",
    ]))]
#[case::raised_minimums_are_named_in_the_message(
    "undersized_jump_pod_create.json", Some("raised_minimums.json"),
    contract("dstack-main-ssh-jump-pod-w5n8r", &[
        "container \"dstack-main-ssh-jump-pod-container\": cpu request 50m is below the minimum 250m",
        "container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request 64Mi is below the minimum 128Mi",
    ]))]
#[case::a_raised_minimum_applies_to_replicaset_templates_too(
    "replicaset_conforming_create.json", Some("raised_minimums.json"),
    template_contract("dstack-main-ssh-jump-pod", &[
        "container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request 64Mi is below the minimum 128Mi",
    ]))]
fn rejected_with_every_violation_named(
    #[case] fixture: &str,
    #[case] settings: Option<&str>,
    #[case] message: String,
) {
    let evaluation = evaluate_fixture(fixture, settings);
    assert!(!evaluation.response.accepted);
    assert_eq!(evaluation.message(), message);
    assert_eq!(evaluation.response.warnings, None);
    assert_no_patch(&evaluation);
    assert_uid_echoed(&evaluation);
    assert_eq!(evaluation.admission["allowed"], false);
    assert_eq!(evaluation.admission["status"]["message"], message);
}

#[rstest]
#[case::adopting_a_besteffort_legacy_pod_is_never_blocked(
    "legacy_pod_adoption_update.json",
    None,
    "jump pod \"dstack-main-ssh-jump-pod\" does not meet the jump-pod contract (accepted: its resources did not change): \
     container \"dstack-main-ssh-jump-pod-container\": cpu has no request and no limit (Guaranteed QoS needs both, equal); \
     container \"dstack-main-ssh-jump-pod-container\": memory has no request and no limit (Guaranteed QoS needs both, equal); \
     container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request is missing (at least 64Mi is required)"
)]
#[case::with_mutation_off_scaling_down_a_besteffort_replicaset_is_never_blocked(
    "replicaset_besteffort_scale_update.json",
    Some("no_mutation.json"),
    "the pod template of jump-pod ReplicaSet \"dstack-main-ssh-jump-pod\" does not meet the jump-pod contract (accepted: its resources did not change): \
     container \"dstack-main-ssh-jump-pod-container\": cpu has no request and no limit (Guaranteed QoS needs both, equal); \
     container \"dstack-main-ssh-jump-pod-container\": memory has no request and no limit (Guaranteed QoS needs both, equal); \
     container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request is missing (at least 64Mi is required)"
)]
#[case::relabelling_a_pod_that_misses_a_raised_minimum_is_warned_not_blocked(
    "jump_pod_label_update.json",
    Some("raised_minimums.json"),
    "jump pod \"dstack-main-ssh-jump-pod-x7k2q\" does not meet the jump-pod contract (accepted: its resources did not change): \
     container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request 64Mi is below the minimum 128Mi"
)]
#[case::adoption_is_not_blocked_with_mutation_off_either(
    "legacy_pod_adoption_update.json",
    Some("no_mutation.json"),
    "jump pod \"dstack-main-ssh-jump-pod\" does not meet the jump-pod contract (accepted: its resources did not change): \
     container \"dstack-main-ssh-jump-pod-container\": cpu has no request and no limit (Guaranteed QoS needs both, equal); \
     container \"dstack-main-ssh-jump-pod-container\": memory has no request and no limit (Guaranteed QoS needs both, equal); \
     container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request is missing (at least 64Mi is required)"
)]
fn unchanged_resources_are_accepted_with_a_warning(
    #[case] fixture: &str,
    #[case] settings: Option<&str>,
    #[case] warning: &str,
) {
    let evaluation = evaluate_fixture(fixture, settings);
    assert!(evaluation.response.accepted);
    assert_eq!(evaluation.response.message, None);
    assert_eq!(evaluation.warnings(), [warning]);
    assert_eq!(evaluation.admission["warnings"], json!([warning]));
    assert_no_patch(&evaluation);
}

/// What a mutation should add to a pod's object.
struct Added {
    labels: &'static [(&'static str, &'static str)],
    /// (JSON pointer of a container, its requests, its limits)
    resources: Vec<(&'static str, Value, Value)>,
    warnings: &'static [&'static str],
    /// The kit on the first container: its session drain and the Secret of users' keys.
    kit: Option<(u32, &'static str)>,
}

fn default_resources() -> (Value, Value) {
    (
        json!({"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "64Mi"}),
        json!({"cpu": "500m", "memory": "1Gi"}),
    )
}

fn main_container_defaults() -> Vec<(&'static str, Value, Value)> {
    let (requests, limits) = default_resources();
    vec![("/spec/containers/0", requests, limits)]
}

const LEGACY_MAIN_LABELS: &[(&str, &str)] = &[
    ("app.kubernetes.io/instance", "dstack-main-ssh-jump-pod"),
    ("app.kubernetes.io/managed-by", "dstack"),
    ("k8s.dstack.ai/project", "main"),
];

/// The kit with the default session drain, for project `main`.
const MAIN_KIT: Option<(u32, &str)> = Some((300, "dstack-main-ssh-jump-pod-authorized-keys"));

/// `/bin/sh -c <script>`.
fn exec(script: String) -> Value {
    json!({"exec": {"command": ["/bin/sh", "-c", script]}})
}

fn expected_object(object: &Value, added: &Added) -> Value {
    let mut expected = object.clone();
    for (key, value) in added.labels {
        expected["metadata"]["labels"][*key] = json!(value);
    }
    for (pointer, requests, limits) in &added.resources {
        let container = expected.pointer_mut(pointer).expect("the container exists");
        container["resources"] = json!({"requests": requests, "limits": limits});
    }
    if let Some((drain, secret)) = added.kit {
        let spec = &mut expected["spec"];
        let grace = 20 + i64::from(drain);
        if spec["terminationGracePeriodSeconds"].as_i64().unwrap_or(30) < grace {
            spec["terminationGracePeriodSeconds"] = json!(grace);
        }
        spec["volumes"]
            .as_array_mut()
            .expect("volumes")
            .push(json!({
            "name": "authorized-keys",
            "secret": {"secretName": secret, "optional": true, "defaultMode": 0o444}}));
        let container = &mut spec["containers"][0];
        container["lifecycle"] = json!({
            "preStop": exec(jumppod::kit::pre_stop_script(drain)),
            "postStart": exec(jumppod::kit::post_start_script()),
        });
        let mut probe = exec(jumppod::kit::readiness_script());
        probe["periodSeconds"] = json!(2);
        probe["failureThreshold"] = json!(1);
        probe["timeoutSeconds"] = json!(5);
        container["readinessProbe"] = probe;
        container["volumeMounts"]
            .as_array_mut()
            .expect("volume mounts")
            .push(json!({"name": "authorized-keys", "mountPath": "/etc/ssh/jumppod/keys", "readOnly": true}));
    }
    expected
}

#[rstest]
#[case::a_bare_legacy_pod_gets_the_current_labels_guaranteed_resources_and_the_kit(
    "legacy_bare_pod_create.json", None,
    Added { labels: LEGACY_MAIN_LABELS, resources: main_container_defaults(), warnings: &[], kit: MAIN_KIT })]
#[case::with_the_kit_off_a_bare_legacy_pod_gets_the_labels_and_resources_alone(
    "legacy_bare_pod_create.json", Some("no_kit.json"),
    Added { labels: LEGACY_MAIN_LABELS, resources: main_container_defaults(), warnings: &[], kit: None })]
#[case::an_admission_review_is_read_like_a_bare_request(
    "admission_review_legacy_bare_pod_create.json", None,
    Added { labels: LEGACY_MAIN_LABELS, resources: main_container_defaults(), warnings: &[], kit: MAIN_KIT })]
#[case::a_legacy_name_without_the_dstack_prefix_still_names_its_project(
    "legacy_unprefixed_bare_pod_create.json", None,
    Added {
        labels: &[("app.kubernetes.io/instance", "main-ssh-jump-pod"), ("app.kubernetes.io/managed-by", "dstack"), ("k8s.dstack.ai/project", "main")],
        resources: vec![("/spec/containers/0", default_resources().0, default_resources().1)],
        warnings: &[],
        kit: Some((300, "main-ssh-jump-pod-authorized-keys")),
    })]
#[case::a_legacy_pod_with_resources_gets_labels_and_the_kit(
    "legacy_bare_pod_with_resources_create.json", None,
    Added {
        labels: &[("app.kubernetes.io/instance", "dstack-research-ssh-jump-pod"), ("app.kubernetes.io/managed-by", "dstack"), ("k8s.dstack.ai/project", "research")],
        resources: vec![],
        warnings: &[],
        kit: Some((300, "dstack-research-ssh-jump-pod-authorized-keys")),
    })]
#[case::a_name_too_long_for_a_label_value_is_left_out_with_a_warning_and_still_names_the_secret(
    "legacy_long_name_create.json", None,
    Added {
        labels: &[("app.kubernetes.io/managed-by", "dstack"), ("k8s.dstack.ai/project", "ml-platform-shared-gpu-training-cluster-eu-west-4b")],
        resources: main_container_defaults(),
        warnings: &["label app.kubernetes.io/instance not set: \"dstack-ml-platform-shared-gpu-training-cluster-eu-west-4b-ssh-jump-pod\" \
                     is not a valid label value (must be no more than 63 characters)"],
        kit: Some((300, "dstack-ml-platform-shared-gpu-training-cluster-eu-west-4b-ssh-jump-pod-authorized-keys")),
    })]
#[case::a_pod_of_an_old_besteffort_template_gets_resources_and_the_kit_but_no_labels(
    "rs_pod_from_besteffort_template_create.json", None,
    Added { labels: &[], resources: main_container_defaults(), warnings: &[], kit: MAIN_KIT })]
#[case::a_besteffort_init_container_gets_cpu_and_memory_but_no_ephemeral_storage(
    "init_container_besteffort_create.json", None,
    Added {
        labels: &[],
        resources: vec![("/spec/initContainers/0", json!({"cpu": "500m", "memory": "1Gi"}), json!({"cpu": "500m", "memory": "1Gi"}))],
        warnings: &[],
        kit: MAIN_KIT,
    })]
#[case::the_defaults_come_from_the_settings(
    "legacy_bare_pod_create.json", Some("raised_minimums.json"),
    Added {
        labels: LEGACY_MAIN_LABELS,
        resources: vec![("/spec/containers/0",
            json!({"cpu": "1", "memory": "2Gi", "ephemeral-storage": "128Mi"}),
            json!({"cpu": "1", "memory": "2Gi"}))],
        warnings: &[],
        kit: MAIN_KIT,
    })]
#[case::dstacks_bare_jump_pod_gets_resources_and_the_kit(
    "dstack_0_22_5_bare_jump_pod_create.json", None,
    Added { labels: &[], resources: main_container_defaults(), warnings: &[], kit: MAIN_KIT })]
#[case::the_session_drain_comes_from_the_settings(
    "dstack_0_22_5_bare_jump_pod_create.json", Some("short_session_drain.json"),
    Added { labels: &[], resources: main_container_defaults(), warnings: &[],
            kit: Some((60, "dstack-main-ssh-jump-pod-authorized-keys")) })]
#[case::a_conforming_jump_pod_gets_the_kit_alone(
    "conforming_jump_pod_create.json", None,
    Added { labels: &[], resources: vec![], warnings: &[], kit: MAIN_KIT })]
fn mutated_by_a_patch_that_only_adds(
    #[case] fixture: &str,
    #[case] settings: Option<&str>,
    #[case] added: Added,
) {
    let evaluation = evaluate_fixture(fixture, settings);
    let response = &evaluation.response;
    assert!(response.accepted, "{response:?}");
    assert_eq!(response.message, None);
    assert_eq!(evaluation.warnings(), added.warnings);
    assert_uid_echoed(&evaluation);
    assert_eq!(evaluation.admission["patchType"], "JSONPatch");

    let patch = evaluation.patch.as_ref().expect("a patch");
    for op in &patch.0 {
        // The kit raises the grace period the API server defaulted to 30 s: the one value
        // replaced.
        let raised = matches!(op, PatchOperation::Replace(r)
            if added.kit.is_some() && r.path == "/spec/terminationGracePeriodSeconds");
        assert!(
            matches!(op, PatchOperation::Add(_)) || raised,
            "the patch only adds: {op}"
        );
    }
    let object = &evaluation.request["object"];
    let patched = evaluation.patched();
    assert_eq!(patched, expected_object(object, &added));
    assert_eq!(Some(&patched), response.mutated_object.as_ref());
    // What the mutation must never touch.
    for untouched in [
        "/metadata/managedFields",
        "/metadata/name",
        "/metadata/ownerReferences",
        "/status",
        "/spec/containers/0/command",
        "/spec/containers/0/args",
    ] {
        assert_eq!(
            patched.pointer(untouched),
            object.pointer(untouched),
            "{untouched} is untouched"
        );
    }
    let volumes = |pod: &Value| {
        pod["spec"]["volumes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(
        volumes(&patched)[..volumes(object).len()],
        volumes(object)[..],
        "the volumes are kept"
    );
    assert_eq!(
        patched["metadata"]["labels"]["app.kubernetes.io/name"],
        object["metadata"]["labels"]["app.kubernetes.io/name"],
        "the name label is kept: a pre-#3891 Service selects on it"
    );

    // The mutated pod passes the rules: created as it is, it needs nothing more.
    let mut again = evaluation.request.clone();
    again["object"] = patched;
    let second = evaluate(&again, &settings_value(settings));
    assert!(second.response.accepted, "{:?}", second.response);
    assert_no_patch(&second);
}

/// The JSONPatch of dstack 0.22.5's own jump pod: the resources and the kit, nothing else.
#[test]
fn dstacks_jump_pod_is_patched_with_the_resources_and_the_kit() {
    let evaluation = evaluate_fixture("dstack_0_22_5_bare_jump_pod_create.json", None);
    let patch = serde_json::to_value(evaluation.patch.unwrap()).unwrap();
    let ops: Vec<(&str, &str)> = patch
        .as_array()
        .unwrap()
        .iter()
        .map(|op| (op["op"].as_str().unwrap(), op["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ops,
        [
            ("add", "/spec/containers/0/lifecycle"),
            ("add", "/spec/containers/0/readinessProbe"),
            ("add", "/spec/containers/0/resources/limits"),
            ("add", "/spec/containers/0/resources/requests"),
            ("add", "/spec/containers/0/volumeMounts/1"),
            ("replace", "/spec/terminationGracePeriodSeconds"),
            ("add", "/spec/volumes/1"),
        ]
    );
    let value = |path: &str| {
        patch
            .as_array()
            .unwrap()
            .iter()
            .find(|op| op["path"] == path)
            .map(|op| op["value"].clone())
            .unwrap()
    };
    assert_eq!(value("/spec/terminationGracePeriodSeconds"), 320);
    assert_eq!(
        value("/spec/volumes/1"),
        json!({"name": "authorized-keys", "secret": {
            "secretName": "dstack-main-ssh-jump-pod-authorized-keys", "optional": true, "defaultMode": 292}})
    );
    assert_eq!(
        value("/spec/containers/0/volumeMounts/1"),
        json!({"name": "authorized-keys", "mountPath": "/etc/ssh/jumppod/keys", "readOnly": true})
    );
    let lifecycle = value("/spec/containers/0/lifecycle");
    let pre_stop = lifecycle["preStop"]["exec"]["command"][2].as_str().unwrap();
    assert!(pre_stop.contains("\nsleep 20\n"), "{pre_stop}");
    assert!(pre_stop.contains(r#"[ "$waited" -lt 300 ]"#), "{pre_stop}");
    assert_eq!(
        value("/spec/containers/0/readinessProbe")["periodSeconds"],
        2
    );
}

fn settings_value(file: Option<&str>) -> Value {
    policy_support::settings(file)
}

#[test]
fn the_legacy_pod_patch_adds_the_labels_and_resources_it_lacks() {
    let evaluation = evaluate_fixture("legacy_bare_pod_create.json", Some("no_kit.json"));
    let patch = serde_json::to_value(evaluation.patch.unwrap()).unwrap();
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1instance", "value": "dstack-main-ssh-jump-pod"},
            {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1managed-by", "value": "dstack"},
            {"op": "add", "path": "/metadata/labels/k8s.dstack.ai~1project", "value": "main"},
            {"op": "add", "path": format!("/spec/containers/0/resources/limits"), "value": {"cpu": "500m", "memory": "1Gi"}},
            {"op": "add", "path": "/spec/containers/0/resources/requests",
             "value": {"cpu": "500m", "ephemeral-storage": "64Mi", "memory": "1Gi"}},
        ])
    );
    assert_eq!(
        evaluation.request["object"]["spec"]["containers"][0]["name"],
        JUMP_CONTAINER
    );
}

#[rstest]
#[case::a_bare_legacy_pod_is_rejected_naming_every_missing_label_and_resource(
    "legacy_bare_pod_create.json",
    "jump pod \"dstack-main-ssh-jump-pod\" is missing what the jump-pod contract requires (mutation is off): \
     container \"dstack-main-ssh-jump-pod-container\": resources.requests.cpu is missing (would be set to 500m); \
     container \"dstack-main-ssh-jump-pod-container\": resources.limits.cpu is missing (would be set to 500m); \
     container \"dstack-main-ssh-jump-pod-container\": resources.requests.memory is missing (would be set to 1Gi); \
     container \"dstack-main-ssh-jump-pod-container\": resources.limits.memory is missing (would be set to 1Gi); \
     container \"dstack-main-ssh-jump-pod-container\": resources.requests.ephemeral-storage is missing (would be set to 64Mi); \
     label app.kubernetes.io/instance is missing (would be set to \"dstack-main-ssh-jump-pod\"); \
     label app.kubernetes.io/managed-by is missing (would be set to \"dstack\"); \
     label k8s.dstack.ai/project is missing (would be set to \"main\")"
)]
#[case::a_legacy_pod_with_resources_is_rejected_for_its_labels_alone(
    "legacy_bare_pod_with_resources_create.json",
    "jump pod \"dstack-research-ssh-jump-pod\" is missing what the jump-pod contract requires (mutation is off): \
     label app.kubernetes.io/instance is missing (would be set to \"dstack-research-ssh-jump-pod\"); \
     label app.kubernetes.io/managed-by is missing (would be set to \"dstack\"); \
     label k8s.dstack.ai/project is missing (would be set to \"research\")"
)]
#[case::a_besteffort_init_container_is_rejected_naming_the_init_container(
    "init_container_besteffort_create.json",
    "jump pod \"dstack-main-ssh-jump-pod-v2b8n\" is missing what the jump-pod contract requires (mutation is off): \
     init container \"install-keys\": resources.requests.cpu is missing (would be set to 500m); \
     init container \"install-keys\": resources.limits.cpu is missing (would be set to 500m); \
     init container \"install-keys\": resources.requests.memory is missing (would be set to 1Gi); \
     init container \"install-keys\": resources.limits.memory is missing (would be set to 1Gi)"
)]
#[case::dstacks_bare_jump_pod_is_rejected_for_its_resources_alone_not_the_kit(
    "dstack_0_22_5_bare_jump_pod_create.json",
    "jump pod \"dstack-main-ssh-jump-pod\" is missing what the jump-pod contract requires (mutation is off): \
     container \"dstack-main-ssh-jump-pod-container\": resources.requests.cpu is missing (would be set to 500m); \
     container \"dstack-main-ssh-jump-pod-container\": resources.limits.cpu is missing (would be set to 500m); \
     container \"dstack-main-ssh-jump-pod-container\": resources.requests.memory is missing (would be set to 1Gi); \
     container \"dstack-main-ssh-jump-pod-container\": resources.limits.memory is missing (would be set to 1Gi); \
     container \"dstack-main-ssh-jump-pod-container\": resources.requests.ephemeral-storage is missing (would be set to 64Mi)"
)]
fn with_mutation_off_what_would_be_filled_in_is_rejected(
    #[case] fixture: &str,
    #[case] message: &str,
) {
    let evaluation = evaluate_fixture(fixture, Some("no_mutation.json"));
    assert!(!evaluation.response.accepted);
    assert_eq!(evaluation.message(), message);
    assert_no_patch(&evaluation);
}

#[rstest]
#[case::explicit_defaults("defaults.json")]
#[case::no_settings_at_all("empty.json")]
#[case::raised_minimums_and_defaults("raised_minimums.json")]
#[case::mutation_off("no_mutation.json")]
#[case::the_kit_off("no_kit.json")]
#[case::a_shorter_session_drain("short_session_drain.json")]
fn valid_settings_are_accepted(#[case] file: &str) {
    let answer = validate_settings(&settings(Some(file)));
    assert!(answer.valid, "{answer:?}");
    assert_eq!(answer.message, None);
}

#[rstest]
#[case::an_unknown_key_is_named(
    "invalid_unknown_key.json",
    "invalid setting `gpu`: unknown field `gpu`, expected one of `cpu`, `memory`, `ephemeralStorage`, `mutate`, `kit`, `sessionDrainSeconds`"
)]
#[case::a_session_drain_above_an_hour_is_refused(
    "invalid_session_drain_above_an_hour.json",
    "invalid setting `sessionDrainSeconds`: 3601 is above the maximum 3600 (an hour): every drain of the pod's node waits for it"
)]
#[case::a_kit_switch_that_is_not_a_boolean_is_named(
    "invalid_kit_not_a_boolean.json",
    "invalid setting `kit`: invalid type: string \"on\", expected a boolean"
)]
#[case::an_unknown_nested_key_is_named_with_its_path(
    "invalid_unknown_nested_key.json",
    "invalid setting `memory.maximum`: unknown field `maximum`, expected `minimum` or `default`"
)]
#[case::a_minimum_below_the_floor_is_refused(
    "invalid_cpu_minimum_below_floor.json",
    "invalid setting `cpu.minimum`: 50m is below the floor 100m: settings may raise the contract's floors, never lower them"
)]
#[case::a_default_below_its_minimum_is_refused(
    "invalid_memory_default_below_minimum.json",
    "invalid setting `memory.default`: 256Mi is below memory.minimum (512Mi)"
)]
#[case::a_quantity_that_does_not_parse_is_named(
    "invalid_ephemeral_storage_quantity.json",
    "invalid setting `ephemeralStorage.minimumRequest`: \"lots\" is not a quantity: not a quantity: expected <number><suffix> such as 500m, 0.5, 1Gi or 1e3"
)]
#[case::a_mutate_flag_that_is_not_a_boolean_is_named(
    "invalid_mutate_not_a_boolean.json",
    "invalid setting `mutate`: invalid type: string \"yes\", expected a boolean"
)]
#[case::settings_that_are_not_an_object_are_refused(
    "invalid_not_an_object.json",
    "invalid settings: settings must be a JSON object, not [\"cpu\",\"100m\"]"
)]
fn invalid_settings_are_refused_naming_the_key(#[case] file: &str, #[case] message: &str) {
    let answer = validate_settings(&settings(Some(file)));
    assert!(!answer.valid);
    assert_eq!(answer.message.as_deref(), Some(message));
}

#[test]
fn settings_that_are_null_mean_the_defaults() {
    assert!(validate_settings(&Value::Null).valid);
}

#[test]
fn invalid_settings_sent_with_a_request_reject_a_jump_pod() {
    let evaluation = evaluate(
        &request("conforming_jump_pod_create.json"),
        &settings(Some("invalid_cpu_minimum_below_floor.json")),
    );
    assert!(!evaluation.response.accepted);
    assert_eq!(evaluation.response.code, Some(400));
    assert!(
        evaluation
            .message()
            .starts_with("invalid setting `cpu.minimum`: 50m is below the floor 100m")
    );
}

#[test]
fn protocol_version_answers_v1() {
    let instance = policy().instance().expect("an instance");
    let answer = instance
        .call("protocol_version", b"")
        .expect("protocol_version answers");
    assert_eq!(
        serde_json::from_slice::<Value>(&answer).unwrap(),
        json!("v1")
    );
}

#[test]
fn an_unknown_operation_is_a_guest_error() {
    let instance = policy().instance().expect("an instance");
    let error = instance
        .call("mutate", b"{}")
        .expect_err("no such waPC function");
    assert!(error.to_string().contains("mutate"), "{error:#}");
}

#[test]
fn a_reused_instance_gives_the_same_verdicts_as_fresh_ones() {
    let instance = policy().instance().expect("an instance");
    for fixture in [
        "ordinary_pod_create.json",
        "legacy_bare_pod_create.json",
        "undersized_jump_pod_create.json",
        "conforming_jump_pod_create.json",
    ] {
        let request = request(fixture);
        let fresh = policy().validate(&request, &json!({})).unwrap();
        for _ in 0..3 {
            assert_eq!(
                instance.validate(&request, &json!({})).unwrap(),
                fresh,
                "{fixture}"
            );
        }
    }
}

#[test]
fn a_zero_tick_deadline_interrupts_the_module_instead_of_hanging() {
    // With epoch interruption a deadline of 0 ticks has already passed when the guest starts:
    // wasmtime interrupts `wapc_init` at its first epoch check.
    let policy = WasmPolicy::with_deadline(wasm(), 0).expect("the module compiles");
    let error = policy
        .instance()
        .err()
        .expect("the deadline interrupts initialisation");
    let mut message = error.to_string();
    let mut cause = std::error::Error::source(&error);
    while let Some(c) = cause {
        message.push_str(&format!(": {c}"));
        cause = c.source();
    }
    assert!(message.contains("interrupted"), "{message}");
    assert!(message.contains("deadline"), "{message}");
}

/// A test's code (comments removed): the string literals a fixture must appear in.
fn code_of(source: &str) -> String {
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every fixture under `policy/test_data` (the hostile corpus too), relative to it.
fn fixtures_under(dir: &std::path::Path, prefix: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = format!("{prefix}{}", path.file_name().unwrap().to_string_lossy());
        if path.is_dir() {
            fixtures_under(&path, &format!("{name}/"), out);
        } else if name.ends_with(".json") {
            out.push(name);
        }
    }
}

#[test]
fn every_fixture_is_read_by_a_test() {
    let code = [
        code_of(include_str!("policy_wasm.rs")),
        code_of(include_str!("policy_hostile.rs")),
    ]
    .join("\n");
    let mut fixtures = Vec::new();
    fixtures_under(&test_data(""), "", &mut fixtures);
    assert!(
        fixtures.len() > 30,
        "only {} fixtures found",
        fixtures.len()
    );
    // Settings fixtures are named without their folder (`settings(Some("x.json"))`).
    let missing: Vec<&String> = fixtures
        .iter()
        .filter(|f| {
            let literal = f.strip_prefix("settings/").unwrap_or(f);
            !code.contains(&format!("\"{literal}\""))
        })
        .collect();
    assert!(missing.is_empty(), "fixtures no test reads: {missing:?}");
}
