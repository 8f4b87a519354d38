//! `jumppod webhook`: the policy module served as a Kubernetes mutating admission webhook
//! (AdmissionReview v1 over HTTPS, JSONPatch), run as policy-server runs it: compiled once, a
//! fresh instance per request, the epoch deadline bounding each call, the settings checked at
//! start. What a cluster without Kubewarden can run; what the tests' real apiserver calls.
//!
//! [`review`] turns one request body into the AdmissionReview to answer (pure but for the
//! policy call); [`serve`] is the TLS and HTTP around it. Every body gets an AdmissionReview
//! back, a bad one with a message saying what is wrong, never a dropped connection.

mod answer;
mod configuration;
mod expiry;
mod metrics;
mod reload;
mod serve;

pub use configuration::{Endpoint, Kind, Scope, configuration};
pub use serve::{Options, evaluations_at_once, serve};

use jumppod_review::{Policy, ValidationResponse, admission_response};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// The path the MutatingWebhookConfiguration points at.
pub const PATH: &str = "/mutate";
/// The path the ValidatingWebhookConfiguration points at: [`validate`].
pub const VALIDATE_PATH: &str = "/validate";
/// The annotation the mutating pass puts on every object it admits, and without which the
/// validating configuration sends nothing (its matchConditions): the validating pass judges
/// only what the mutating pass has seen, whichever of the two configurations the API server
/// has at a given moment (created, updated or deleted one after the other).
pub const MUTATED_ANNOTATION: &str = "jumppod.dstack.ai/mutated";
/// Its value.
pub const MUTATED_VALUE: &str = "true";

/// The operator's settings as each pass sends them to the policy, written once at start.
pub struct Settings {
    mutating: String,
    validating: String,
}

impl Settings {
    pub fn new(settings: &Value) -> Settings {
        Settings {
            mutating: settings.to_string(),
            validating: validating_settings(settings).to_string(),
        }
    }
}

/// An AdmissionReview as far as the webhook reads it: the request is forwarded to the policy as
/// the API server wrote it, not read into a `Value` and written again (for a 12 KB pod that was
/// most of the webhook's own time per review).
#[derive(Deserialize)]
struct Body<'a> {
    kind: Option<Value>,
    #[serde(rename = "apiVersion")]
    api_version: Option<Value>,
    #[serde(borrow)]
    request: Option<&'a RawValue>,
}

/// The AdmissionReview answering one request body. A body that is not an AdmissionReview v1
/// with a request is refused (allowed: false, code 400) with what is wrong; a policy that
/// fails (a trap, the deadline) refuses with code 500, as policy-server does.
pub fn review(policy: &dyn Policy, settings: &Settings, body: &[u8]) -> Value {
    envelope(response(policy, |_| &settings.mutating, body, true))
}

/// The AdmissionResponse to one body, under the settings the pass sends for its request;
/// `marking`: the mutating pass, which marks what it admits.
fn response<'s>(
    policy: &dyn Policy,
    settings: impl FnOnce(&RawValue) -> &'s str,
    body: &[u8],
    marking: bool,
) -> Value {
    let document: Body = match serde_json::from_slice(body) {
        Ok(document) => document,
        Err(e) => {
            let what = match e.classify() {
                serde_json::error::Category::Data => "is not an AdmissionReview",
                _ => "is not JSON",
            };
            return refuse(
                &json!(answer::request_uid(body).unwrap_or_default()),
                400,
                format!("jumppod webhook: the body {what}: {e}"),
            );
        }
    };
    let request = document.request.filter(|r| r.get().starts_with('{'));
    let uid = request.and_then(|r| answer::uid_of_request(r.get()));
    match (&document.kind, &document.api_version, request, uid) {
        (Some(k), Some(v), Some(request), Some(uid))
            if k == "AdmissionReview" && v == "admission.k8s.io/v1" =>
        {
            let payload = jumppod_review::payload_of_text(request.get(), settings(request));
            match policy.validate_payload(&payload) {
                Ok(answer) => match admitted(request, &uid, answer, marking) {
                    Ok(response) => fitted(response),
                    // Never allowed without the patch the policy asked for.
                    Err(e) => refuse(
                        &json!(uid),
                        500,
                        format!("jumppod webhook: cannot read the request to patch it: {e}"),
                    ),
                },
                Err(e) => {
                    let error = report(&e);
                    // Not the request's fault: the operator sees it at the default level.
                    tracing::warn!(%uid, %error, "the policy failed; the review is refused");
                    refuse(
                        &json!(uid),
                        500,
                        format!("jumppod webhook: the policy failed: {error}"),
                    )
                }
            }
        }
        (kind, version, _, uid) => refuse(
            &json!(uid.unwrap_or_default()),
            400,
            format!(
                "jumppod webhook: expected an AdmissionReview (admission.k8s.io/v1) with a request and its uid, got kind {}, apiVersion {}",
                kind.as_ref().map_or("none".into(), Value::to_string),
                version.as_ref().map_or("none".into(), Value::to_string)
            ),
        ),
    }
}

/// The AdmissionResponse of the policy's answer, an admitted object marked
/// ([`MUTATED_ANNOTATION`]). The request is read whole only for a mutation, whose patch is the
/// difference from the request's object; otherwise only its annotations are read, for the mark.
fn admitted(
    request: &RawValue,
    uid: &str,
    mut answer: ValidationResponse,
    marking: bool,
) -> Result<Value, serde_json::Error> {
    if !answer.accepted {
        return Ok(admission_response(&json!({"uid": uid}), &answer));
    }
    if let Some(mutated) = answer.mutated_object.as_mut() {
        let request: Value = serde_json::from_str(request.get())?;
        if marking {
            mark(mutated);
        }
        return Ok(admission_response(&request, &answer));
    }
    let mut response = admission_response(&json!({"uid": uid}), &answer);
    if marking && let Some(op) = mark_operation(request)? {
        use base64::Engine as _;
        response["patchType"] = json!("JSONPatch");
        response["patch"] =
            json!(base64::engine::general_purpose::STANDARD.encode(json!([op]).to_string()));
    }
    Ok(response)
}

/// The mark set on an object (a mutated one, as the policy returned it).
fn mark(object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata.entry("annotations").or_insert(Value::Null);
        if !annotations.is_object() {
            *annotations = json!({});
        }
        annotations[MUTATED_ANNOTATION] = json!(MUTATED_VALUE);
    }
}

/// The JSONPatch operation that marks the request's object, none when it is marked already
/// (or has no object). Only `object.metadata.annotations` is read into memory.
fn mark_operation(request: &RawValue) -> Result<Option<Value>, serde_json::Error> {
    #[derive(Deserialize)]
    struct Request {
        object: Option<Object>,
    }
    #[derive(Deserialize)]
    struct Object {
        metadata: Option<Metadata>,
    }
    #[derive(Deserialize)]
    struct Metadata {
        annotations: Option<std::collections::BTreeMap<String, String>>,
    }
    let request: Request = serde_json::from_str(request.get())?;
    let Some(metadata) = request.object.and_then(|o| o.metadata) else {
        return Ok(None);
    };
    Ok(match metadata.annotations {
        Some(a) if a.get(MUTATED_ANNOTATION).map(String::as_str) == Some(MUTATED_VALUE) => None,
        Some(_) => Some(json!({
            "op": "add",
            // JSON Pointer: `/` in a key is written `~1`.
            "path": format!("/metadata/annotations/{}", MUTATED_ANNOTATION.replace('/', "~1")),
            "value": MUTATED_VALUE,
        })),
        None => Some(json!({
            "op": "add",
            "path": "/metadata/annotations",
            "value": {MUTATED_ANNOTATION: MUTATED_VALUE},
        })),
    })
}

/// The validating pass: the policy's verdict on the object as it will be stored, after every
/// mutating webhook (Kubernetes runs validating webhooks after all mutating ones, and does not
/// order mutating webhooks of different configurations by anything but their names). The
/// policy runs with mutation off, so what a later mutation left out (a sidecar without
/// resources) is refused naming what is missing instead of being patched in: a validating
/// webhook cannot patch. A ReplicaSet is judged under the operator's settings: no pass mutates
/// it, and with mutation on its template is judged by the pods it makes, which the mutating
/// pass fills in at their creation; with mutation off refusing what it lacks.
pub fn validate(policy: &dyn Policy, settings: &Settings, body: &[u8]) -> Value {
    let settings = |request: &RawValue| match answer::kind_of_request(request.get()).as_deref() {
        Some("ReplicaSet") => settings.mutating.as_str(),
        _ => settings.validating.as_str(),
    };
    validation(envelope(response(policy, settings, body, false)))
}

/// The settings of the validating pass: the operator's, with `mutate` off.
fn validating_settings(settings: &Value) -> Value {
    let mut settings = match settings {
        Value::Object(_) => settings.clone(),
        _ => json!({}),
    };
    settings["mutate"] = json!(false);
    settings
}

/// A review as a validating webhook answers it: the verdict without patch and patchType (the
/// API server refuses a patch from a validating webhook), a refusal saying it came from the
/// validating pass.
pub fn validation(mut review: Value) -> Value {
    if let Some(response) = review.get_mut("response").and_then(Value::as_object_mut) {
        response.remove("patch");
        response.remove("patchType");
        if response.get("allowed") == Some(&json!(false))
            && let Some(message) = response
                .get_mut("status")
                .and_then(|s| s.get_mut("message"))
            && let Some(text) = message.as_str()
        {
            *message = json!(format!(
                "jumppod validating pass (the object as stored, after every mutating webhook): {text}"
            ));
        }
    }
    review
}

/// The answer with its warnings cut to what the API server keeps whole.
fn fitted(mut response: Value) -> Value {
    if let Some(warnings) = response.get_mut("warnings")
        && let Ok(list) = serde_json::from_value::<Vec<String>>(warnings.clone())
    {
        *warnings = json!(answer::fit_warnings(&list));
    }
    response
}

/// A refusal: allowed false, with the code and what is wrong.
pub(crate) fn refuse(uid: &Value, code: u16, message: String) -> Value {
    json!({"uid": uid, "allowed": false, "status": {"code": code, "message": message}})
}

pub(crate) fn envelope(response: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

fn report(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use jumppod_review::Native;
    use rstest::rstest;

    fn answer(body: &[u8]) -> Value {
        review(&Native, &Settings::new(&json!({})), body)["response"].clone()
    }

    #[rstest]
    #[case::not_json(b"{not json".as_slice(), "not JSON")]
    #[case::an_admission_review_v1beta1(
        br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{"uid":"u"}}"#.as_slice(),
        "apiVersion \"admission.k8s.io/v1beta1\"")]
    #[case::no_request(br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#.as_slice(), "with a request")]
    #[case::a_request_without_its_uid(
        br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"kind":{}}}"#.as_slice(),
        "and its uid")]
    fn a_bad_body_gets_a_refusal_that_says_what_is_wrong(#[case] body: &[u8], #[case] says: &str) {
        let response = answer(body);
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 400);
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }

    /// Every refusal names the call it answers when the body has a uid before it breaks: the
    /// API server counts an answer with an empty uid as a failed call.
    #[rstest]
    #[case::broken_json_after_the_uid(
        br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u-1","object":{"#.as_slice(),
        "u-1")]
    #[case::another_version(
        br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{"uid":"u-2"}}"#.as_slice(),
        "u-2")]
    #[case::broken_json_before_any_uid(b"{not json".as_slice(), "")]
    fn a_refusal_echoes_the_uid_it_can_find(#[case] body: &[u8], #[case] uid: &str) {
        let response = answer(body);
        assert_eq!(response["allowed"], false);
        assert_eq!(response["uid"], uid, "{response}");
    }

    /// A policy that mutates every request into an empty object.
    struct Emptying;

    impl Policy for Emptying {
        fn validate_payload(
            &self,
            _payload: &[u8],
        ) -> Result<ValidationResponse, jumppod_review::Error> {
            Ok(ValidationResponse {
                accepted: true,
                message: None,
                code: None,
                mutated_object: Some(json!({})),
                audit_annotations: None,
                warnings: None,
            })
        }

        fn validate_settings(
            &self,
            _settings: &Value,
        ) -> Result<jumppod_review::SettingsResponse, jumppod_review::Error> {
            unreachable!("not called by a review")
        }
    }

    /// A request nested deeper than a `Value` reads (serde_json stops at 128) cannot be diffed
    /// against a mutation: it is refused, never allowed without the patch.
    #[test]
    fn a_mutation_the_webhook_cannot_diff_is_refused_not_allowed_unpatched() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let body = format!(
            r#"{{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{{"uid":"u-9","object":{{"a":{deep}}}}}}}"#
        );
        let response =
            review(&Emptying, &Settings::new(&json!({})), body.as_bytes())["response"].clone();
        assert_eq!(response["allowed"], false, "{response}");
        assert_eq!(response["uid"], "u-9", "{response}");
        assert_eq!(response.get("patch"), None, "{response}");
        let message = response["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("cannot read the request to patch it"),
            "{message}"
        );
    }

    /// A bare AdmissionRequest of policy/test_data as the API server sends it: in a review;
    /// the answer with its patch decoded.
    fn reviewed(request: &str) -> Value {
        let request: Value = serde_json::from_str(request).unwrap();
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        decoded(answer(body.to_string().as_bytes()))
    }

    /// An answer with its base64 JSONPatch as JSON.
    fn decoded(mut response: Value) -> Value {
        use base64::Engine as _;
        if let Some(patch) = response.get("patch").and_then(Value::as_str) {
            let patch = base64::engine::general_purpose::STANDARD
                .decode(patch)
                .expect("the patch is base64");
            response["patch"] = serde_json::from_slice(&patch).expect("the patch is JSON");
        }
        response
    }

    /// The JSONPatch operation that marks an object without annotations.
    fn marked() -> Value {
        json!({"op": "add", "path": "/metadata/annotations", "value": {MUTATED_ANNOTATION: MUTATED_VALUE}})
    }

    /// The expected answers are written out (the verdicts and messages kwctl run gives for the
    /// same fixtures, policy/e2e.bats), not computed by the policy and the response builder
    /// that `review` itself calls.
    #[test]
    fn a_legacy_bare_pod_gets_its_uid_and_the_patch_that_labels_marks_and_sizes_it() {
        // The kit off: its patch is `policy_wasm`'s to check.
        let response = decoded(
            review(
                &Native,
                &Settings::new(&json!({"kit": false})),
                include_str!(
                    "../../../policy/test_data/admission_review_legacy_bare_pod_create.json"
                )
                .as_bytes(),
            )["response"]
                .clone(),
        );
        assert_eq!(
            response,
            json!({"uid": "9c2f5e8b-1a4d-4c7f-b0e3-6a9d2f5c8b41", "allowed": true, "patchType": "JSONPatch",
                   "patch": [
                marked(),
                {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1instance", "value": "dstack-main-ssh-jump-pod"},
                {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1managed-by", "value": "dstack"},
                {"op": "add", "path": "/metadata/labels/k8s.dstack.ai~1project", "value": "main"},
                {"op": "add", "path": "/spec/containers/0/resources/limits", "value": {"cpu": "500m", "memory": "1Gi"}},
                {"op": "add", "path": "/spec/containers/0/resources/requests",
                 "value": {"cpu": "500m", "ephemeral-storage": "64Mi", "memory": "1Gi"}},
            ]})
        );
    }

    const BEST_EFFORT: &str = "container \"dstack-main-ssh-jump-pod-container\": cpu has no request and no limit (Guaranteed QoS needs both, equal); \
        container \"dstack-main-ssh-jump-pod-container\": memory has no request and no limit (Guaranteed QoS needs both, equal); \
        container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request is missing (at least 64Mi is required)";

    #[rstest]
    // The configurations never send it; sent anyway, it is admitted with only the mark, which
    // it adds to the annotations it has.
    #[case::an_ordinary_pod_is_allowed_only_marked(
        include_str!("../../../policy/test_data/ordinary_pod_create.json"),
        json!({"uid": "6b2e9f1a-4c7d-4e8b-a3f5-1d9c7e2b4a60", "allowed": true, "patchType": "JSONPatch",
               "patch": [{"op": "add", "path": "/metadata/annotations/jumppod.dstack.ai~1mutated", "value": "true"}]}))]
    #[case::an_undersized_jump_pod_is_refused_naming_container_value_and_minimum(
        include_str!("../../../policy/test_data/undersized_jump_pod_create.json"),
        json!({"uid": "c3e6a9d2-1f4b-4c8e-9a7d-5b2e8f1c4a73", "allowed": false, "status": {"message":
            "jump pod \"dstack-main-ssh-jump-pod-w5n8r\" does not meet the jump-pod contract: \
             container \"dstack-main-ssh-jump-pod-container\": cpu request 50m is below the minimum 100m"}}))]
    #[case::a_best_effort_replicaset_template_is_allowed_only_marked_as_its_pods_get_resources(
        include_str!("../../../policy/test_data/replicaset_besteffort_template_create.json"),
        json!({"uid": "2a5d8c1f-4e7b-4b0a-9d3c-6f9e2b5a8d63", "allowed": true, "patchType": "JSONPatch",
               "patch": [marked()]}))]
    // The policy's one warning of 461 characters, as one per finding: the API server may cut
    // a warning past 256 characters.
    #[case::adopting_a_best_effort_legacy_pod_is_allowed_with_a_warning_per_finding(
        include_str!("../../../policy/test_data/legacy_pod_adoption_update.json"),
        json!({"uid": "4a7d0c3f-6e9b-4b2e-a5d8-1c4f7a0d3e66", "allowed": true, "patchType": "JSONPatch",
               "patch": [marked()], "warnings": [
            "jump pod \"dstack-main-ssh-jump-pod\" does not meet the jump-pod contract (accepted: its resources did not change): \
             container \"dstack-main-ssh-jump-pod-container\": cpu has no request and no limit (Guaranteed QoS needs both, equal)",
            "container \"dstack-main-ssh-jump-pod-container\": memory has no request and no limit (Guaranteed QoS needs both, equal)",
            "container \"dstack-main-ssh-jump-pod-container\": ephemeral-storage request is missing (at least 64Mi is required)"]}))]
    fn a_request_gets_the_policys_verdict_under_its_uid(
        #[case] request: &str,
        #[case] expected: Value,
    ) {
        assert_eq!(reviewed(request), expected);
    }

    /// What marks an object: the annotation added to those it has, or the annotations made;
    /// nothing for an object marked already.
    #[rstest]
    #[case::no_annotations(json!({"metadata": {"name": "p"}}), Some(marked()))]
    #[case::null_annotations(json!({"metadata": {"annotations": null}}), Some(marked()))]
    #[case::other_annotations(json!({"metadata": {"annotations": {"a": "b"}}}),
        Some(json!({"op": "add", "path": "/metadata/annotations/jumppod.dstack.ai~1mutated", "value": "true"})))]
    #[case::marked_already(json!({"metadata": {"annotations": {MUTATED_ANNOTATION: MUTATED_VALUE}}}), None)]
    #[case::no_object(json!(null), None)]
    fn the_mutating_pass_marks_what_it_admits_once(
        #[case] object: Value,
        #[case] expected: Option<Value>,
    ) {
        let request = serde_json::to_string(&json!({"uid": "u", "object": object})).unwrap();
        let request = RawValue::from_string(request).unwrap();
        assert_eq!(mark_operation(&request).unwrap(), expected);
    }

    #[rstest]
    #[case::a_patch_and_its_type_are_removed(
        json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": "W10=", "warnings": ["w"]}),
        json!({"uid": "u", "allowed": true, "warnings": ["w"]}))]
    #[case::a_refusal_says_it_came_from_the_validating_pass(
        json!({"uid": "u", "allowed": false, "status": {"code": 500, "message": "m"}}),
        json!({"uid": "u", "allowed": false, "status": {"code": 500, "message":
            "jumppod validating pass (the object as stored, after every mutating webhook): m"}}))]
    #[case::an_allowance_without_a_patch_is_kept(
        json!({"uid": "u", "allowed": true}), json!({"uid": "u", "allowed": true}))]
    fn a_validating_answer_never_patches(#[case] response: Value, #[case] expected: Value) {
        assert_eq!(validation(envelope(response)), envelope(expected));
    }

    #[rstest]
    #[case::no_settings(json!(null), json!({"mutate": false}))]
    #[case::mutation_on(json!({"mutate": true, "cpu": {"default": "1"}}), json!({"mutate": false, "cpu": {"default": "1"}}))]
    fn the_validating_pass_runs_with_mutation_off(
        #[case] settings: Value,
        #[case] expected: Value,
    ) {
        assert_eq!(validating_settings(&settings), expected);
    }

    /// Applies to the review `body`'s object the patch of the mutating pass under `settings`.
    fn mutated(body: &mut Value, settings: &Settings) {
        use base64::Engine as _;
        let answer = review(&Native, settings, body.to_string().as_bytes())["response"].clone();
        let patch = base64::engine::general_purpose::STANDARD
            .decode(answer["patch"].as_str().expect("the mutating pass patches"))
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        json_patch::patch(&mut body["request"]["object"], &patch).unwrap();
    }

    /// The bare legacy pod as the mutating pass left it, then as a later mutating webhook (a
    /// sidecar injector) left it: the first passes the validating pass, the second is refused.
    #[test]
    fn the_validating_pass_admits_a_mutated_legacy_pod_and_refuses_what_a_later_mutation_broke() {
        let mut body: Value = serde_json::from_str(include_str!(
            "../../../policy/test_data/admission_review_legacy_bare_pod_create.json"
        ))
        .unwrap();
        mutated(&mut body, &Settings::new(&json!({})));
        let validated = |body: &Value| {
            validate(
                &Native,
                &Settings::new(&json!({})),
                body.to_string().as_bytes(),
            )["response"]
                .clone()
        };
        assert_eq!(
            validated(&body),
            json!({"uid": "9c2f5e8b-1a4d-4c7f-b0e3-6a9d2f5c8b41", "allowed": true})
        );

        body["request"]["object"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar", "image": "busybox"}));
        let refused = validated(&body);
        assert_eq!(refused["allowed"], false, "{refused}");
        assert_eq!(refused.get("patch"), None);
        let message = refused["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("jumppod validating pass")
                && message.contains(
                    "container \"sidecar\": resources.requests.cpu is missing (would be set to 500m)"
                ),
            "{message}"
        );
    }

    /// dstack's ReplicaSet (its template dstack's pod, no resources) through both passes: the
    /// validating pass judges it as the mutating pass does, by the pods it makes, with
    /// mutation on; with mutation off both refuse it.
    #[rstest]
    #[case::mutation_on(json!({}), true)]
    #[case::mutation_off(json!({"mutate": false}), false)]
    fn dstacks_replicaset_passes_both_passes_exactly_when_its_pods_are_filled_in(
        #[case] settings: Value,
        #[case] allowed: bool,
    ) {
        let request: Value = serde_json::from_str(include_str!(
            "../../../policy/test_data/dstack_replicaset_template_without_resources_create.json"
        ))
        .unwrap();
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
            .to_string();
        let settings = Settings::new(&settings);
        let mutating = review(&Native, &settings, body.as_bytes())["response"].clone();
        let validating = validate(&Native, &settings, body.as_bytes())["response"].clone();
        for response in [&mutating, &validating] {
            assert_eq!(response["allowed"], allowed, "{response}");
        }
        // The template is not filled in: the mutating pass only marks what it admits.
        let patch = decoded(mutating.clone()).get("patch").cloned();
        assert_eq!(patch, allowed.then(|| json!([marked()])), "{mutating}");
        assert_eq!(validating.get("patch"), None, "{validating}");
        if !allowed {
            let message = validating["status"]["message"].as_str().unwrap();
            assert!(message.ends_with(BEST_EFFORT), "{message}");
        }
    }

    /// dstack's bare jump pod as the mutating pass leaves it (resources and the kit) passes
    /// the validating pass, which adds and asks for no kit.
    #[test]
    fn dstacks_jump_pod_with_the_kit_passes_the_validating_pass() {
        let request: Value = serde_json::from_str(include_str!(
            "../../../policy/test_data/dstack_0_22_5_bare_jump_pod_create.json"
        ))
        .unwrap();
        let mut body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        let settings = Settings::new(&json!({}));
        mutated(&mut body, &settings);
        let container = &body["request"]["object"]["spec"]["containers"][0];
        assert!(container["lifecycle"]["preStop"].is_object(), "{container}");
        let validated =
            validate(&Native, &settings, body.to_string().as_bytes())["response"].clone();
        assert_eq!(
            validated,
            json!({"uid": "0b7d3e52-9c1a-4f6e-b8d2-5a3c7e9f1d46", "allowed": true})
        );
    }
}
