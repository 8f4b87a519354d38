//! Kubewarden policy for dstack SSH jump pods.
//!
//! Validates that every jump pod (and every jump-pod ReplicaSet template) is Guaranteed with
//! at least the configured cpu, memory and ephemeral-storage request, and upgrades bare
//! legacy pods at creation into the labelled schema. The contract itself lives in the
//! `jumppod` crate; this crate only speaks waPC. The same functions run natively in the host
//! (`jumppod_review::Native`), so the module and the host cannot disagree.

pub mod settings;

use jumppod::admission::{self, Outcome, Request, ViewRequest};
use jumppod::view::{Object, PodView};
use kubewarden_policy_sdk::response::ValidationResponse;
use kubewarden_policy_sdk::settings::SettingsValidationResponse;
use kubewarden_policy_sdk::wapc_guest::{self as guest, CallResult};
use kubewarden_policy_sdk::{logging, protocol_version_guest};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use std::borrow::Cow;

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    guest::register_function("validate", validate);
    guest::register_function("validate_settings", validate_settings);
    guest::register_function("protocol_version", protocol_version_guest);
}

/// The payload policy-server sends: `{"request": AdmissionRequest, "settings": {...}}`.
/// The object stays raw: most pods are not jump pods and are never parsed beyond metadata.
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow)]
    request: Option<AdmissionRequest<'a>>,
    #[serde(borrow)]
    settings: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionRequest<'a> {
    #[serde(borrow)]
    kind: Option<GroupVersionKind<'a>>,
    #[serde(borrow)]
    operation: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
    #[serde(borrow)]
    old_object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct GroupVersionKind<'a> {
    #[serde(borrow, default)]
    group: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
}

fn validate(payload: &[u8]) -> CallResult {
    Ok(evaluate(payload))
}

fn validate_settings(payload: &[u8]) -> CallResult {
    Ok(encode(&check_settings(payload)))
}

/// The `validate` answer for any payload: never an error, never a panic.
pub fn evaluate(payload: &[u8]) -> Vec<u8> {
    encode(&response(decide(payload)))
}

/// The `validate_settings` answer.
pub fn check_settings(payload: &[u8]) -> SettingsValidationResponse {
    settings::check(payload)
}

/// The same payload read in one pass with the object as the borrowed view of a pod: enough
/// for every ordinary pod and most jump pods. Both levels are read from JSON objects only,
/// and anything this pass cannot read goes to the full path, which names the problem.
#[derive(Deserialize)]
struct QuickPayload<'a> {
    #[serde(borrow)]
    request: Option<Object<QuickRequest<'a>>>,
    #[serde(borrow)]
    settings: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QuickRequest<'a> {
    #[serde(borrow)]
    kind: Option<GroupVersionKind<'a>>,
    #[serde(borrow)]
    operation: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    object: Option<Object<PodView<'a>>>,
    #[serde(rename = "oldObject")]
    _old_object: Option<IgnoredAny>,
}

/// The verdict from the one-pass read, or None where the full path decides.
fn decide_quickly(bytes: &[u8]) -> Option<(Outcome, Option<Cow<'_, str>>)> {
    let Object(payload) = serde_json::from_slice::<Object<QuickPayload>>(bytes).ok()?;
    let Object(request) = payload.request?;
    let kind = request.kind.as_ref();
    let outcome = admission::review_view(
        &ViewRequest {
            group: kind.map_or("", |k| &k.group),
            kind: kind.map_or("", |k| &k.kind),
            operation: request.operation.as_deref().unwrap_or_default(),
            name: request.name.as_deref(),
            object: request.object.as_deref(),
        },
        payload.settings,
        bytes,
    )?;
    Some((outcome, request.name))
}

fn decide(payload: &[u8]) -> Outcome {
    let (outcome, name) = decide_quickly(payload).unwrap_or_else(|| decide_fully(payload));
    // Natively there is no policy-server to log to (the SDK would print to stdout).
    if cfg!(target_arch = "wasm32") && !matches!(outcome, Outcome::Accept { .. }) {
        log(&outcome, name.as_deref().unwrap_or_default());
    }
    outcome
}

fn decide_fully(payload: &[u8]) -> (Outcome, Option<Cow<'_, str>>) {
    let payload: Payload = match serde_json::from_slice(payload) {
        Ok(payload) => payload,
        Err(e) => {
            let message = format!("cannot read the validation request: {e}");
            return (bad_request(message), None);
        }
    };
    let Some(request) = payload.request else {
        let message = "the validation request has no `request`".to_owned();
        return (bad_request(message), None);
    };
    let kind = request.kind.as_ref();
    let outcome = admission::review(
        &Request {
            group: kind.map_or("", |k| &k.group),
            kind: kind.map_or("", |k| &k.kind),
            operation: request.operation.as_deref().unwrap_or_default(),
            name: request.name.as_deref(),
            object: request.object,
            old_object: request.old_object,
        },
        payload.settings,
    );
    (outcome, request.name)
}

fn bad_request(message: String) -> Outcome {
    Outcome::Reject {
        message,
        code: Some(400),
    }
}

/// Tells the policy-server's log what happened to a jump pod (the hot path never logs).
fn log(outcome: &Outcome, name: &str) {
    let logger = slog::Logger::root(
        logging::KubewardenDrain::new(),
        slog::o!("policy" => "jumppod"),
    );
    match outcome {
        Outcome::Mutate { .. } => {
            slog::info!(logger, "filled in what the jump-pod contract requires"; "name" => name)
        }
        Outcome::Reject { message, .. } => {
            slog::info!(logger, "rejected"; "name" => name, "reason" => message.as_str())
        }
        Outcome::Accept { .. } => {}
    }
}

fn response(outcome: Outcome) -> ValidationResponse {
    let (accepted, message, code, mutated_object, warnings) = match outcome {
        Outcome::Accept { warnings } => (true, None, None, None, warnings),
        Outcome::Mutate { object, warnings } => (true, None, None, Some(object), warnings),
        Outcome::Reject { message, code } => (false, Some(message), code, None, Vec::new()),
    };
    ValidationResponse {
        accepted,
        message,
        code,
        mutated_object,
        audit_annotations: None,
        warnings: (!warnings.is_empty()).then_some(warnings),
    }
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| {
        format!(r#"{{"accepted":false,"message":"cannot encode the answer: {e}"}}"#).into_bytes()
    })
}
