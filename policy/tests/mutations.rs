//! A mutation's answer, pinned byte for byte: `test_data/mutated/<fixture>.answer` holds the
//! module's `validate` answer for the legacy fixture under default settings with the kit off and, on its second
//! line, the AdmissionResponse policy-server makes of it (the base64 JSONPatch), both recorded
//! from the policy before the mutated pod was written without a `Value` (issue 25).

mod api_server;

use jumppod::payload;
use jumppod::splice::Checked;
use jumppod_policy::evaluate;
use jumppod_review::{Answer, ValidationResponse, admission_response};
use rstest::rstest;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn test_data(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("test_data")
        .join(relative)
}

/// The payload policy-server sends for a fixture, the request kept as written, with the kit
/// off: the recorded answers are the fills alone (spliced into the pod's text; a pod that gets
/// the kit is read whole, `tests/tests/policy_wasm.rs` checks it).
fn payload(fixture: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(test_data(fixture)).expect("a fixture");
    #[derive(Deserialize)]
    struct Review<'a> {
        #[serde(borrow)]
        request: Option<&'a RawValue>,
    }
    let review: Review = serde_json::from_str(&text).expect("JSON");
    let request = review.request.map_or(text.trim(), RawValue::get);
    format!(r#"{{"request": {request}, "settings": {{"kit": false}}}}"#).into_bytes()
}

#[rstest]
#[case::a_bare_legacy_pod("legacy_bare_pod_create.json")]
#[case::a_legacy_pod_in_an_admission_review("admission_review_legacy_bare_pod_create.json")]
#[case::a_legacy_pod_with_some_resources("legacy_bare_pod_with_resources_create.json")]
#[case::a_legacy_pod_whose_name_is_too_long_for_a_label("legacy_long_name_create.json")]
#[case::a_legacy_pod_without_the_dstack_prefix("legacy_unprefixed_bare_pod_create.json")]
#[case::a_legacy_pod_written_with_escapes("hostile/escaped_legacy_bare_pod.json")]
fn a_mutation_answers_the_recorded_bytes(#[case] fixture: &str) {
    let name = Path::new(fixture).file_stem().expect("a name");
    let golden = test_data(&format!("mutated/{}.answer", name.to_string_lossy()));
    let recorded = std::fs::read_to_string(&golden).expect("a recorded answer");
    let (answer, admission) = recorded.split_once('\n').expect("two lines");
    let payload = payload(fixture);
    let got = evaluate(&payload);
    assert_eq!(String::from_utf8_lossy(&got), answer, "{fixture}");
    let request: Value =
        serde_json::from_slice::<Value>(&payload).expect("JSON")["request"].clone();
    let response: ValidationResponse = serde_json::from_slice(&got).expect("an answer");
    assert_eq!(
        admission_response(&request, &response).to_string(),
        admission.trim_end(),
        "{fixture}"
    );
}

/// The module writes [`Answer`]; the host reads and renders [`ValidationResponse`]: for every
/// fixture, mutations among them, the two are the same bytes.
#[test]
fn the_written_answer_is_the_validation_response_s_bytes() {
    let mut mutations = 0;
    for fixture in &fixtures() {
        let (verdict, _) = payload::decide(&payload(fixture));
        let written = Answer::from(&verdict).write().expect("written");
        let rendered = serde_json::to_vec(&ValidationResponse::from(&verdict)).expect("written");
        assert_eq!(
            String::from_utf8_lossy(&written),
            String::from_utf8_lossy(&rendered),
            "{fixture}"
        );
        mutations += usize::from(matches!(verdict, jumppod::Verdict::Mutate { .. }));
    }
    assert!(mutations >= 6, "{mutations} mutations");
}

/// Every fixture, the hostile ones too, relative to `test_data`.
fn fixtures() -> Vec<String> {
    let mut fixtures = Vec::new();
    for dir in [test_data(""), test_data("hostile")] {
        for entry in std::fs::read_dir(&dir).expect("fixtures") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "json") {
                let relative = path.strip_prefix(test_data("")).expect("under test_data");
                fixtures.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    fixtures
}

/// Every fixture that reads as JSON, and its request.
fn requests() -> Vec<(String, Value)> {
    fixtures()
        .into_iter()
        .filter_map(|fixture| {
            let payload: Value = serde_json::from_slice(&payload(&fixture)).ok()?;
            Some((fixture, payload["request"].clone()))
        })
        .collect()
}

/// Sent as serde_json writes it (as policy-server and jumppod's hosts send it), a pod's text
/// is mutated by splicing the fills into it (`jumppod::splice`); sent with whitespace, the
/// same pod is read whole. For every fixture that reads as JSON, under several settings, the
/// two answer the same bytes.
#[test]
fn a_spliced_mutation_answers_what_a_whole_read_answers() {
    let settings = [
        json!({}),
        json!({"kit": false}),
        json!({"cpu": "250m", "memory": "2Gi", "ephemeralStorageRequest": "128Mi"}),
        json!({"mutate": false}),
    ];
    let mut spliced = 0;
    for (fixture, request) in &requests() {
        for settings in &settings {
            let payload = json!({"request": request, "settings": settings});
            let compact = serde_json::to_vec(&payload).expect("written");
            let pretty = serde_json::to_vec_pretty(&payload).expect("written");
            let answer = evaluate(&compact);
            assert_eq!(
                String::from_utf8_lossy(&answer),
                String::from_utf8_lossy(&evaluate(&pretty)),
                "{fixture} under {settings}"
            );
            let object = serde_json::to_string(&request["object"]).expect("written");
            let mutated = serde_json::from_slice::<ValidationResponse>(&answer)
                .is_ok_and(|a| a.mutated_object.is_some());
            spliced += usize::from(mutated && Checked::of(&object).is_some());
        }
    }
    // The mutating fixtures under the two settings that mutate.
    assert!(spliced >= 9, "{spliced} spliced mutations");
}

/// Sent as the API server writes it (its keys not in serde_json's order, `&` and the like
/// escaped), a pod's text is mutated where it stands; sent with whitespace, the same pod is read
/// whole. The two answers hold the same mutated pod, and policy-server makes the same
/// AdmissionResponse (the same JSONPatch) of both.
#[test]
fn a_mutation_of_the_api_server_s_text_answers_the_value_and_patch_of_a_whole_read() {
    let settings = [
        json!({}),
        json!({"kit": false}),
        json!({"cpu": "250m", "memory": "2Gi", "ephemeralStorageRequest": "128Mi"}),
    ];
    let mut spliced = 0;
    for (fixture, request) in &requests() {
        for settings in &settings {
            let go = format!(
                r#"{{"request":{},"settings":{settings}}}"#,
                api_server::written(request)
            );
            let pretty =
                serde_json::to_vec_pretty(&json!({"request": request, "settings": settings}))
                    .expect("written");
            let (answer, whole) = (evaluate(go.as_bytes()), evaluate(&pretty));
            let read = |answer: &[u8]| serde_json::from_slice::<ValidationResponse>(answer);
            let (Ok(answer), Ok(whole)) = (read(&answer), read(&whole)) else {
                assert_eq!(
                    String::from_utf8_lossy(&answer),
                    String::from_utf8_lossy(&whole),
                    "{fixture} under {settings}"
                );
                continue;
            };
            assert_eq!(
                serde_json::to_value(&answer).expect("a value"),
                serde_json::to_value(&whole).expect("a value"),
                "{fixture} under {settings}"
            );
            assert_eq!(
                admission_response(request, &answer),
                admission_response(request, &whole),
                "{fixture} under {settings}"
            );
            let object = api_server::written(&request["object"]);
            let serde_written = serde_json::to_string(&request["object"]).expect("written");
            spliced += usize::from(
                answer.mutated_object.is_some()
                    && Checked::of(&object).is_some()
                    && object != serde_written,
            );
        }
    }
    // The mutating fixtures under both settings.
    assert!(
        spliced >= 9,
        "{spliced} mutations spliced into the API server's text"
    );
}
