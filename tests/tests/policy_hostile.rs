//! Bad input through the built `policy.wasm`: every payload gets a verdict (a
//! ValidationResponse), never a trap, a panic or a guest error.

mod policy_support;

use jumppod_review::ValidationResponse;
use policy_support::*;
use rstest::rstest;
use serde_json::{Value, json};

/// The `validate` payload policy-server sends for a request.
fn payload(request: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"request": request, "settings": {}})).unwrap()
}

/// A jump pod that needs nothing: dstack's, with its resources and the kit.
fn conforming() -> Value {
    request("dstack_0_22_5_bare_jump_pod_with_kit_create.json")
}

fn legacy() -> Value {
    request("legacy_bare_pod_create.json")
}

fn ordinary() -> Value {
    request("ordinary_pod_create.json")
}

fn with(mut request: Value, pointer: &str, value: Value) -> Value {
    *request
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("{pointer} is in the fixture")) = value;
    request
}

fn set_resources(request: Value, resources: Value) -> Value {
    with(request, "/object/spec/containers/0/resources", resources)
}

fn expect_rejected(answer: &ValidationResponse, fragments: &[&str]) {
    assert!(!answer.accepted, "expected a rejection, got {answer:?}");
    let message = answer.message.as_deref().unwrap_or_default();
    for fragment in fragments {
        assert!(
            message.contains(fragment),
            "the message should name {fragment:?}: {message}"
        );
    }
    assert!(answer.mutated_object.is_none());
}

fn expect_accepted_untouched(answer: &ValidationResponse) {
    assert!(answer.accepted, "expected an acceptance, got {answer:?}");
    assert_eq!(answer.mutated_object, None);
    assert_eq!(answer.message, None);
}

/// Wraps a JSON value in `depth` arrays.
fn nested(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}

/// A bare legacy jump pod whose spec is `depth` nested arrays.
fn jump_pod_nested(depth: usize) -> String {
    format!(
        "{{\"request\": {{\"kind\": {{\"group\": \"\", \"version\": \"v1\", \"kind\": \"Pod\"}}, \"operation\": \"CREATE\", \
         \"object\": {{\"metadata\": {{\"name\": \"dstack-main-ssh-jump-pod\", \
         \"labels\": {{\"app.kubernetes.io/name\": \"dstack-main-ssh-jump-pod\"}}}}, \"spec\": {}}}}}}}",
        nested(depth, "")
    )
}

#[rstest]
#[case::an_empty_payload_is_unreadable(b"".to_vec(), &["cannot read the validation request", "EOF"])]
#[case::truncated_json_is_unreadable(b"{\"request\": {\"uid\": \"1\", \"kind\":".to_vec(), &["cannot read the validation request"])]
#[case::trailing_garbage_is_unreadable(b"{\"request\": {}} trailing".to_vec(), &["cannot read the validation request", "trailing"])]
#[case::a_byte_order_mark_and_invalid_utf8_are_unreadable(b"\xff\xfe{\"request\": {}}".to_vec(), &["cannot read the validation request"])]
#[case::invalid_utf8_inside_a_string_is_unreadable(
    b"{\"request\": {\"kind\": {\"group\": \"\", \"kind\": \"Pod\"}, \"operation\": \"CREATE\", \"name\": \"\xc3\x28\"}}".to_vec(),
    &["cannot read the validation request", "unicode"])]
#[case::a_lone_surrogate_escape_is_unreadable(
    br#"{"request": {"kind": {"group": "", "kind": "Pod"}, "operation": "CREATE", "name": "\udc00"}}"#.to_vec(),
    &["cannot read the validation request"])]
#[case::a_missing_request_is_named(b"{\"settings\": {}}".to_vec(), &["has no `request`"])]
#[case::a_null_request_is_named(b"{\"request\": null}".to_vec(), &["has no `request`"])]
#[case::a_request_that_is_an_array_is_unreadable(b"{\"request\": [1, 2]}".to_vec(), &["cannot read the validation request", "expected struct GroupVersionKind"])]
#[case::a_payload_that_is_a_string_is_unreadable(b"\"request\"".to_vec(), &["cannot read the validation request"])]
#[case::a_kind_that_is_a_string_is_unreadable(
    b"{\"request\": {\"kind\": \"Pod\", \"operation\": \"CREATE\", \"object\": {}}}".to_vec(),
    &["cannot read the validation request"])]
#[case::an_operation_that_is_a_number_is_unreadable(
    b"{\"request\": {\"kind\": {\"group\": \"\", \"kind\": \"Pod\"}, \"operation\": 7, \"object\": {}}}".to_vec(),
    &["cannot read the validation request"])]
#[case::a_request_nested_two_hundred_levels_deep_is_unreadable(
    format!("{{\"request\": {}}}", nested(200, "1")).into_bytes(),
    &["cannot read the validation request"])]
#[case::two_hundred_levels_in_a_jump_pod_are_refused_not_a_stack_overflow(
    jump_pod_nested(200).into_bytes(),
    &["cannot read jump pod \"dstack-main-ssh-jump-pod\"", "recursion limit exceeded"])]
#[case::a_hundred_thousand_levels_in_a_jump_pod_are_refused_not_a_stack_overflow(
    jump_pod_nested(100_000).into_bytes(),
    &["cannot read jump pod \"dstack-main-ssh-jump-pod\"", "recursion limit exceeded"])]
fn unreadable_payloads_are_rejected_with_a_reason(
    #[case] payload: Vec<u8>,
    #[case] fragments: &[&str],
) {
    let answer = validate_raw(&payload);
    expect_rejected(&answer, fragments);
    assert_eq!(answer.code, Some(400), "malformed input is a bad request");
}

#[rstest]
#[case::containers_as_a_string("hostile/containers_as_string.json", &["jump pod \"dstack-main-ssh-jump-pod-x7k2q\"", "spec.containers", "invalid type: string"])]
#[case::resources_as_a_list("hostile/resources_as_list.json", &["spec.containers[0].resources", "invalid type: sequence"])]
fn wrong_types_in_a_jump_pod_are_rejected_naming_the_field(
    #[case] fixture: &str,
    #[case] fragments: &[&str],
) {
    let answer = validate_raw(&payload(&request(fixture)));
    expect_rejected(&answer, fragments);
    assert_eq!(answer.code, Some(400));
}

#[rstest]
#[case::quantities_that_are_not_numbers("hostile/quantities_not_numbers.json", &[
    "container \"dstack-main-ssh-jump-pod-container\": resources.requests.cpu \"NaN\" is not a valid quantity",
    "resources.limits.cpu \"NaN\" is not a valid quantity",
    "resources.requests.memory \"1Ki5\" is not a valid quantity",
    "resources.requests.ephemeral-storage \"0x10\" is not a valid quantity",
])]
#[case::negative_quantities("hostile/quantities_negative.json", &[
    "cpu request -1 is below the minimum 100m",
    "memory request -1Gi is below the minimum 32Mi",
    "ephemeral-storage request -64Mi is below the minimum 64Mi",
])]
#[case::a_huge_request_against_a_small_limit("hostile/quantities_huge.json", &[
    "cpu request 1e400 is not equal to its limit 500m",
])]
fn hostile_quantities_are_rejected_naming_container_resource_and_value(
    #[case] fixture: &str,
    #[case] fragments: &[&str],
) {
    let answer = validate_raw(&payload(&request(fixture)));
    expect_rejected(&answer, fragments);
}

#[test]
fn equal_huge_quantities_are_compared_exactly_and_accepted() {
    // 1e400 is a valid apimachinery quantity: far above every minimum, equal to itself.
    let request = set_resources(
        conforming(),
        json!({"requests": {"cpu": "1e400", "memory": "1e400", "ephemeral-storage": "1e400"},
               "limits": {"cpu": "1e400", "memory": "1e400"}}),
    );
    expect_accepted_untouched(&validate_raw(&payload(&request)));
}

#[rstest]
#[case::an_object_that_is_null("hostile/object_null.json")]
#[case::an_object_that_is_missing("hostile/object_missing.json")]
fn a_request_without_an_object_is_not_judged(#[case] fixture: &str) {
    expect_accepted_untouched(&validate_raw(&payload(&request(fixture))));
}

#[test]
fn a_jump_pod_with_a_null_spec_has_nothing_to_judge() {
    expect_accepted_untouched(&validate_raw(&payload(&request("hostile/spec_null.json"))));
}

#[test]
fn null_fields_everywhere_in_a_legacy_pod_are_filled_in_like_absent_ones() {
    let request = request("hostile/nulls_everywhere.json");
    let answer = validate_raw(&payload(&request));
    assert!(answer.accepted, "{answer:?}");
    let mutated = answer.mutated_object.expect("the legacy pod is mutated");
    assert_eq!(
        mutated["spec"]["containers"][0]["resources"],
        json!({"requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "64Mi"},
               "limits": {"cpu": "500m", "memory": "1Gi"}})
    );
    assert_eq!(
        mutated["metadata"]["labels"]["k8s.dstack.ai/project"],
        "main"
    );
    assert_eq!(mutated["status"], Value::Null, "status stays as it was");
}

#[rstest]
#[case::metadata_null("/object/metadata", Value::Null)]
#[case::labels_null("/object/metadata/labels", Value::Null)]
#[case::labels_a_list_of_something_else("/object/metadata/labels", json!(["web"]))]
fn metadata_without_a_name_label_is_no_jump_pod(#[case] pointer: &str, #[case] value: Value) {
    expect_accepted_untouched(&validate_raw(&payload(&with(legacy(), pointer, value))));
}

#[rstest]
#[case::name_label_a_number("/object/metadata/labels/app.kubernetes.io~1name", json!(7), "cannot read the pod's metadata")]
#[case::labels_a_list_that_looks_like_a_jump_pod(
    "/object/metadata/labels", json!(["dstack-ssh-proxy"]), "cannot read jump pod \"dstack-main-ssh-jump-pod\": metadata.labels")]
fn broken_metadata_of_a_possible_jump_pod_is_a_bad_request(
    #[case] pointer: &str,
    #[case] value: Value,
    #[case] fragment: &str,
) {
    let answer = validate_raw(&payload(&with(legacy(), pointer, value)));
    expect_rejected(&answer, &[fragment]);
    assert_eq!(answer.code, Some(400));
}

#[test]
fn deep_nesting_inside_a_jump_pod_is_refused_not_a_stack_overflow() {
    let mut text = String::from_utf8(payload(&conforming())).unwrap();
    let field = format!("\"x-nested\": {}, ", nested(200, "0"));
    text = text.replacen("\"containers\":", &format!("{field}\"containers\":"), 1);
    let answer = validate_raw(text.as_bytes());
    expect_rejected(&answer, &["recursion limit"]);
}

#[rstest]
#[case::three_hundred_levels(300)]
#[case::a_hundred_thousand_levels(100_000)]
fn deep_nesting_in_the_spec_of_an_ordinary_pod_is_skipped_unread(#[case] depth: usize) {
    // Only the metadata of a pod that is no jump pod is read: the rest is skipped, without
    // recursing (no stack overflow) and without judging it.
    let mut text = String::from_utf8(payload(&ordinary())).unwrap();
    text = text.replacen(
        "\"containers\":",
        &format!("\"x-nested\": {}, \"containers\":", nested(depth, "0")),
        1,
    );
    expect_accepted_untouched(&validate_raw(text.as_bytes()));
}

#[test]
fn a_megabyte_label_value_on_an_ordinary_pod_is_accepted() {
    let request = with(
        ordinary(),
        "/object/metadata/labels/app.kubernetes.io~1name",
        json!("x".repeat(1 << 20)),
    );
    expect_accepted_untouched(&validate_raw(&payload(&request)));
}

#[test]
fn an_absurdly_long_legacy_name_gets_no_invalid_labels_and_a_warning() {
    // 100 KB: far beyond a label value's 63 characters.
    let name = format!("dstack-{}-ssh-jump-pod", "p".repeat(100_000));
    let mut request = legacy();
    request["name"] = json!(name);
    request["object"]["metadata"]["name"] = json!(name);
    request["object"]["metadata"]["labels"] = json!({"app.kubernetes.io/name": name});
    let answer = validate_raw(&payload(&request));
    assert!(answer.accepted, "{answer:?}");
    let warnings = answer.warnings.clone().unwrap_or_default();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].starts_with("label app.kubernetes.io/instance not set: "));
    assert!(warnings[0].contains("must be no more than 63 characters"));
    assert!(warnings[1].starts_with("label k8s.dstack.ai/project not set: "));
    let labels = &answer.mutated_object.unwrap()["metadata"]["labels"];
    assert_eq!(
        labels.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["app.kubernetes.io/managed-by", "app.kubernetes.io/name"]
    );
}

/// A pod of about `bytes` bytes: many environment variables in its first container.
fn inflate(mut request: Value, bytes: usize) -> Value {
    let env: Vec<Value> = (0..bytes / 100)
        .map(|i| json!({"name": format!("VAR_{i:07}"), "value": "v".repeat(70)}))
        .collect();
    request["object"]["spec"]["containers"][0]["env"] = json!(env);
    request
}

#[test]
fn a_two_megabyte_ordinary_pod_is_accepted() {
    let payload = payload(&inflate(ordinary(), 2 << 20));
    assert!(payload.len() > 2 << 20);
    expect_accepted_untouched(&validate_raw(&payload));
}

#[test]
fn a_two_megabyte_legacy_pod_is_mutated() {
    let request = inflate(legacy(), 2 << 20);
    let answer = validate_raw(&payload(&request));
    assert!(answer.accepted);
    let mutated = answer.mutated_object.expect("mutated");
    assert_eq!(
        mutated["spec"]["containers"][0]["env"],
        request["object"]["spec"]["containers"][0]["env"]
    );
    assert_eq!(
        mutated["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "500m"
    );
}

/// The pod with `count` containers: its first, then copies of it without the kit's hooks and
/// probe (the first serves SSH; the others are plain containers).
fn many_containers(mut request: Value, count: usize, resources: Value) -> Value {
    let first = request["object"]["spec"]["containers"][0].clone();
    let mut plain = first.clone();
    if let Some(container) = plain.as_object_mut() {
        container.remove("lifecycle");
        container.remove("readinessProbe");
    }
    let containers: Vec<Value> = (0..count)
        .map(|i| {
            let mut c = if i == 0 { first.clone() } else { plain.clone() };
            c["name"] = json!(format!("sshd-{i}"));
            c["resources"] = resources.clone();
            c
        })
        .collect();
    request["object"]["spec"]["containers"] = json!(containers);
    request
}

#[test]
fn five_thousand_besteffort_containers_are_all_filled_in() {
    let answer = validate_raw(&payload(&many_containers(legacy(), 5000, json!({}))));
    assert!(answer.accepted);
    let mutated = answer.mutated_object.expect("mutated");
    let containers = mutated["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 5000);
    assert!(containers.iter().all(
        |c| c["resources"]["requests"]["ephemeral-storage"] == "64Mi"
            && c["resources"]["limits"]["memory"] == "1Gi"
    ));
}

#[test]
fn five_thousand_undersized_containers_are_all_named_in_the_rejection() {
    let small = json!({"requests": {"cpu": "50m", "memory": "1Gi", "ephemeral-storage": "64Mi"},
                       "limits": {"cpu": "50m", "memory": "1Gi"}});
    let answer = validate_raw(&payload(&many_containers(conforming(), 5000, small)));
    expect_rejected(
        &answer,
        &[
            "container \"sshd-0\": cpu request 50m",
            "container \"sshd-4999\": cpu request 50m",
        ],
    );
    assert_eq!(
        answer
            .message
            .unwrap()
            .matches("is below the minimum 100m")
            .count(),
        5000
    );
}

#[rstest]
#[case::settings_a_string(json!("mutate"), &["invalid settings", "must be a JSON object"])]
#[case::settings_with_an_unknown_key(json!({"cpus": {}}), &["cpus"])]
#[case::settings_with_a_bad_quantity(json!({"cpu": {"minimum": "NaN"}}), &["`cpu.minimum`", "\"NaN\""])]
#[case::a_session_drain_past_a_u32(json!({"sessionDrainSeconds": 4_294_967_296_u64}), &["`sessionDrainSeconds`", "invalid value"])]
#[case::a_session_drain_as_a_float(json!({"sessionDrainSeconds": 1e3}), &["`sessionDrainSeconds`", "invalid type"])]
#[case::a_session_drain_of_the_largest_u32(json!({"sessionDrainSeconds": u32::MAX}), &["`sessionDrainSeconds`", "above the maximum 3600"])]
#[case::a_kit_switch_as_text(json!({"kit": "false"}), &["`kit`", "invalid type"])]
fn bad_settings_in_a_request_reject_a_jump_pod_naming_the_key(
    #[case] settings: Value,
    #[case] fragments: &[&str],
) {
    let payload =
        serde_json::to_vec(&json!({"request": conforming(), "settings": settings})).unwrap();
    expect_rejected(&validate_raw(&payload), fragments);
}

#[test]
fn bad_settings_are_not_read_for_an_ordinary_pod() {
    let payload =
        serde_json::to_vec(&json!({"request": ordinary(), "settings": "mutate"})).unwrap();
    expect_accepted_untouched(&validate_raw(&payload));
}

#[test]
fn the_instance_survives_a_hostile_payload() {
    // policy-server may reuse an instance: a bad payload must leave it able to judge the next.
    let instance = policy().instance().unwrap();
    for bad in [&b""[..], b"\xff", b"[[[[[[", b"{\"request\": 1}"] {
        let answer = instance.call("validate", bad).expect("a verdict");
        let answer: ValidationResponse = serde_json::from_slice(&answer).unwrap();
        assert!(!answer.accepted);
    }
    let answer = instance
        .call("validate", &payload(&legacy()))
        .expect("a verdict");
    let answer: ValidationResponse = serde_json::from_slice(&answer).unwrap();
    assert!(answer.accepted && answer.mutated_object.is_some());
}

/// The `validate` payload around a fixture's text as written: read into a Value and written
/// again, its `\u` escapes would be gone.
fn payload_as_written(fixture: &str) -> Vec<u8> {
    let path = test_data(fixture);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(text.contains("\\u"), "{fixture} holds \\u escapes");
    format!("{{\"request\": {text}, \"settings\": {{}}}}").into_bytes()
}

/// The module's answer, which the native policy gives too.
fn validate_as_written(fixture: &str) -> ValidationResponse {
    let payload = payload_as_written(fixture);
    let answer = validate_raw(&payload);
    let native: ValidationResponse =
        serde_json::from_slice(&jumppod_policy::evaluate(&payload)).unwrap();
    assert_eq!(answer, native, "the module and the native policy agree");
    answer
}

#[test]
fn escapes_in_the_name_labels_and_quantities_of_a_jump_pod_do_not_hide_them() {
    // The name label's key and value, the pod's name and every quantity written with `\u`
    // escapes: the pod is still a jump pod, judged by what the escapes stand for.
    let answer = validate_as_written("hostile/escaped_undersized_jump_pod.json");
    expect_rejected(
        &answer,
        &[
            "jump pod \"dstack-main-ssh-jump-pod-x7k2q\" does not meet the jump-pod contract: ",
            "container \"dstack-main-ssh-jump-pod-container\": resources.requests.memory \"1 Gi\" is not a valid quantity",
            "resources.limits.memory \"1 Gi\" is not a valid quantity",
            "cpu request 50m is below the minimum 100m",
        ],
    );
    assert_eq!(answer.code, None, "a broken rule, not a bad request");
    assert!(
        !answer.message.unwrap().contains("ephemeral-storage"),
        "64Mi is enough"
    );
}

#[test]
fn an_escaped_legacy_name_and_label_still_make_a_legacy_jump_pod() {
    // `\u0064stack-main-ssh-jump-pod` and `dstack-main-ssh-jump-p\u006Fd` are the same name:
    // the label names the pod itself, so it is a bare pre-#3891 jump pod, and mutated.
    let answer = validate_as_written("hostile/escaped_legacy_bare_pod.json");
    assert!(answer.accepted, "{answer:?}");
    let mutated = answer.mutated_object.expect("the legacy pod is mutated");
    assert_eq!(
        mutated["metadata"]["labels"],
        json!({"app.kubernetes.io/name": "dstack-main-ssh-jump-pod",
               "app.kubernetes.io/instance": "dstack-main-ssh-jump-pod",
               "app.kubernetes.io/managed-by": "dstack",
               "k8s.dstack.ai/project": "main"})
    );
    assert_eq!(
        mutated["spec"]["containers"][0]["resources"],
        json!({"requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "64Mi"},
               "limits": {"cpu": "500m", "memory": "1Gi"}})
    );
}

/// dstack 0.22.5's bare jump pod, which gets the kit.
fn dstack() -> Value {
    request("dstack_0_22_5_bare_jump_pod_create.json")
}

/// What the policy answers: a verdict always.
#[derive(Debug)]
enum Outcome {
    Accepted,
    /// Mutated; the grace period and the parts of the kit the answer holds.
    Mutated {
        grace: i64,
        keys: bool,
        pre_stop: bool,
    },
    /// Refused as a bad request naming the field.
    BadRequest(&'static str),
}

/// The fields the kit reads, each broken or at its edge: every payload gets a verdict, and a
/// value set is never lowered or rewritten.
#[rstest]
#[case::the_largest_grace_period_is_kept("/object/spec/terminationGracePeriodSeconds", json!(i64::MAX),
    Outcome::Mutated { grace: i64::MAX, keys: true, pre_stop: true })]
#[case::a_negative_grace_period_is_raised("/object/spec/terminationGracePeriodSeconds", json!(-5),
    Outcome::Mutated { grace: 320, keys: true, pre_stop: true })]
#[case::a_grace_period_as_text_is_named("/object/spec/terminationGracePeriodSeconds", json!("30"),
    Outcome::BadRequest("spec.terminationGracePeriodSeconds"))]
#[case::a_fractional_grace_period_is_named("/object/spec/terminationGracePeriodSeconds", json!(30.5),
    Outcome::BadRequest("spec.terminationGracePeriodSeconds"))]
#[case::no_ports_leave_the_only_container_the_jump_container("/object/spec/containers/0/ports", Value::Null,
    Outcome::Mutated { grace: 320, keys: true, pre_stop: true })]
#[case::ports_as_text_are_named("/object/spec/containers/0/ports", json!("22"),
    Outcome::BadRequest("spec.containers[0].ports"))]
#[case::a_port_as_text_is_named("/object/spec/containers/0/ports", json!([{"containerPort": "22"}]),
    Outcome::BadRequest("spec.containers[0].ports[0].containerPort"))]
#[case::a_null_lifecycle_is_absent("/object/spec/containers/0/lifecycle", Value::Null,
    Outcome::Mutated { grace: 320, keys: true, pre_stop: true })]
#[case::a_lifecycle_as_a_list_is_named("/object/spec/containers/0/lifecycle", json!([1]),
    Outcome::BadRequest("spec.containers[0].lifecycle"))]
#[case::a_pre_stop_hook_of_its_own_keeps_the_kit_out("/object/spec/containers/0/lifecycle", json!({"preStop": {"sleep": {"seconds": 5}}}),
    Outcome::Mutated { grace: 30, keys: false, pre_stop: false })]
#[case::null_volumes_are_absent("/object/spec/volumes", Value::Null,
    Outcome::Mutated { grace: 320, keys: true, pre_stop: true })]
#[case::volumes_as_text_are_named("/object/spec/volumes", json!("authorized-keys"),
    Outcome::BadRequest("spec.volumes"))]
#[case::null_volume_mounts_are_absent("/object/spec/containers/0/volumeMounts", Value::Null,
    Outcome::Mutated { grace: 320, keys: true, pre_stop: true })]
#[case::an_instance_no_secret_can_be_named_after_gets_no_keys(
    "/object/metadata/labels/app.kubernetes.io~1instance", json!("Dstack_Main"),
    Outcome::Mutated { grace: 320, keys: false, pre_stop: true })]
#[case::a_megabyte_command_ending_in_jumppods_own_script_gets_no_kit(
    "/object/spec/containers/0/args", json!(["-c", format!("{}\n{}", "#".repeat(1 << 20), jumppod::kit::OWN_SCRIPT_MARK)]),
    Outcome::Mutated { grace: 30, keys: false, pre_stop: false })]
#[case::a_command_word_as_a_number_is_named("/object/spec/containers/0/command", json!(["/bin/sh", 5]),
    Outcome::BadRequest("spec.containers[0].command[1]"))]
#[case::no_containers_at_all_need_nothing("/object/spec/containers", json!([]), Outcome::Accepted)]
fn hostile_fields_the_kit_reads_get_a_verdict(
    #[case] pointer: &str,
    #[case] value: Value,
    #[case] expected: Outcome,
) {
    // The member is set, whether the fixture has it or not.
    let (parent, key) = pointer.rsplit_once('/').expect("a member");
    let mut request = dstack();
    request
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("{parent} is in the fixture"))[key.replace("~1", "/")] = value;
    let answer = validate_raw(&payload(&request));
    match expected {
        Outcome::Accepted => expect_accepted_untouched(&answer),
        Outcome::BadRequest(field) => {
            expect_rejected(&answer, &[field]);
            assert_eq!(answer.code, Some(400));
        }
        Outcome::Mutated {
            grace,
            keys,
            pre_stop,
        } => {
            assert!(answer.accepted, "{answer:?}");
            let pod = answer.mutated_object.expect("mutated");
            assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], grace);
            let has_keys = pod["spec"]["volumes"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v["name"] == "authorized-keys"));
            assert_eq!(has_keys, keys, "{pod}");
            let command = &pod["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"];
            assert_eq!(command[2].as_str().is_some(), pre_stop, "{pod}");
        }
    }
}
