//! The policy's own functions, natively, on the scenario fixtures of `test_data/`: the verdict
//! each scenario calls for. The built module is run on the same fixtures, with exact messages
//! and patches, by `tests/tests/policy_wasm.rs`.

use jumppod_policy::{check_settings, evaluate};
use rstest::rstest;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn test_data(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("test_data")
        .join(relative)
}

fn read(relative: &str) -> Value {
    let path = test_data(relative);
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[derive(Debug, PartialEq)]
enum Verdict {
    Accepted,
    Mutated,
    Rejected,
}

fn verdict(fixture: &str, settings: Option<&str>) -> (Verdict, Value) {
    let document = read(fixture);
    let request = document.get("request").cloned().unwrap_or(document);
    let settings = settings.map_or_else(|| json!({}), |f| read(&format!("settings/{f}")));
    let payload = json!({"request": request, "settings": settings}).to_string();
    let answer: Value = serde_json::from_slice(&evaluate(payload.as_bytes())).unwrap();
    let verdict = match (&answer["accepted"], answer.get("mutated_object")) {
        (Value::Bool(true), Some(object)) if !object.is_null() => Verdict::Mutated,
        (Value::Bool(true), _) => Verdict::Accepted,
        _ => Verdict::Rejected,
    };
    (verdict, answer)
}

#[rstest]
#[case::an_ordinary_pod_is_not_judged("ordinary_pod_create.json", None, Verdict::Accepted)]
#[case::a_conforming_jump_pod_gets_the_kit(
    "conforming_jump_pod_create.json",
    None,
    Verdict::Mutated
)]
#[case::a_conforming_jump_pod_is_accepted_with_the_kit_off(
    "conforming_jump_pod_create.json",
    Some("no_kit.json"),
    Verdict::Accepted
)]
#[case::dstacks_bare_jump_pod_gets_resources_and_the_kit(
    "dstack_0_22_5_bare_jump_pod_create.json",
    None,
    Verdict::Mutated
)]
#[case::dstacks_jump_pod_with_the_kit_present_is_accepted(
    "dstack_0_22_5_bare_jump_pod_with_kit_create.json",
    None,
    Verdict::Accepted
)]
#[case::with_mutation_off_dstacks_bare_jump_pod_is_rejected_for_its_resources(
    "dstack_0_22_5_bare_jump_pod_create.json",
    Some("no_mutation.json"),
    Verdict::Rejected
)]
#[case::dstacks_replicaset_without_resources_is_accepted(
    "dstack_replicaset_template_without_resources_create.json",
    None,
    Verdict::Accepted
)]
#[case::with_mutation_off_dstacks_replicaset_without_resources_is_rejected(
    "dstack_replicaset_template_without_resources_create.json",
    Some("no_mutation.json"),
    Verdict::Rejected
)]
#[case::a_pod_named_otherwise_is_no_jump_pod("impostor_pod_create.json", None, Verdict::Accepted)]
#[case::a_configmap_is_not_judged("configmap_create.json", None, Verdict::Accepted)]
#[case::a_delete_is_not_judged("jump_pod_delete.json", None, Verdict::Accepted)]
#[case::a_bare_legacy_pod_is_mutated("legacy_bare_pod_create.json", None, Verdict::Mutated)]
#[case::an_unprefixed_legacy_pod_is_mutated(
    "legacy_unprefixed_bare_pod_create.json",
    None,
    Verdict::Mutated
)]
#[case::a_review_is_read_like_a_request(
    "admission_review_legacy_bare_pod_create.json",
    None,
    Verdict::Mutated
)]
#[case::with_mutation_off_a_bare_legacy_pod_is_rejected(
    "legacy_bare_pod_create.json",
    Some("no_mutation.json"),
    Verdict::Rejected
)]
#[case::an_undersized_jump_pod_is_rejected(
    "undersized_jump_pod_create.json",
    None,
    Verdict::Rejected
)]
#[case::a_request_unequal_to_its_limit_is_rejected(
    "request_not_equal_limit_create.json",
    None,
    Verdict::Rejected
)]
#[case::an_ephemeral_storage_limit_is_rejected(
    "ephemeral_storage_limit_create.json",
    None,
    Verdict::Rejected
)]
#[case::a_quantity_that_does_not_parse_is_rejected(
    "unparsable_quantity_create.json",
    None,
    Verdict::Rejected
)]
#[case::a_replicaset_with_a_besteffort_template_is_accepted_not_mutated(
    "replicaset_besteffort_template_create.json",
    None,
    Verdict::Accepted
)]
#[case::with_mutation_off_a_replicaset_with_a_besteffort_template_is_rejected(
    "replicaset_besteffort_template_create.json",
    Some("no_mutation.json"),
    Verdict::Rejected
)]
#[case::a_conforming_replicaset_is_accepted(
    "replicaset_conforming_create.json",
    None,
    Verdict::Accepted
)]
#[case::raised_minimums_reject_a_pod_that_meets_the_defaults(
    "conforming_jump_pod_create.json",
    Some("raised_minimums.json"),
    Verdict::Rejected
)]
fn each_scenario_gets_its_verdict(
    #[case] fixture: &str,
    #[case] settings: Option<&str>,
    #[case] expected: Verdict,
) {
    let (verdict, answer) = verdict(fixture, settings);
    assert_eq!(verdict, expected, "{answer}");
    if expected == Verdict::Rejected {
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "a rejection says why: {answer}");
    }
}

#[test]
fn each_settings_fixture_is_valid_or_invalid_as_its_name_says() {
    let dir = test_data("settings");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let answer = check_settings(&std::fs::read(&path).unwrap());
        assert_eq!(
            answer.valid,
            !name.starts_with("invalid_"),
            "{name}: {answer:?}"
        );
        assert_eq!(
            answer.message.is_some(),
            name.starts_with("invalid_"),
            "{name}"
        );
        seen += 1;
    }
    assert!(
        seen >= 10,
        "only {seen} settings fixtures in {}",
        dir.display()
    );
}
