//! Kubewarden policy for dstack SSH jump pods.
//!
//! Validates that every jump pod (and every jump-pod ReplicaSet template) is Guaranteed with
//! at least the configured cpu, memory and ephemeral-storage request, and upgrades bare
//! legacy pods at creation into the labelled schema. The contract itself lives in the
//! `jumppod` crate (`jumppod::payload` reads and decides the payload), the answer in
//! `jumppod-review` (the typed verdict rendered as the SDK writes it); this crate only speaks
//! waPC and logs. The host's native gate and the JavaScript build call
//! the same functions, so they cannot disagree with the module.

pub mod settings;

use jumppod::Verdict;
use jumppod::payload;
use jumppod_review::Answer;
use kubewarden_policy_sdk::protocol_version_guest;
use kubewarden_policy_sdk::settings::SettingsValidationResponse;
use kubewarden_policy_sdk::wapc_guest::{self as guest, CallResult};

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    guest::register_function("validate", validate);
    guest::register_function("validate_settings", validate_settings);
    guest::register_function("protocol_version", protocol_version_guest);
}

fn validate(payload: &[u8]) -> CallResult {
    Ok(evaluate(payload))
}

fn validate_settings(payload: &[u8]) -> CallResult {
    Ok(encode(&check_settings(payload)))
}

/// The `validate` answer for any payload: never an error, never a panic.
pub fn evaluate(payload: &[u8]) -> Vec<u8> {
    match decide(payload) {
        // The answer to almost every request, written once.
        Verdict::Accept { warnings } if warnings.is_empty() => ACCEPTED.to_vec(),
        // A mutated pod is written once, where the verdict was decided.
        verdict => Answer::from(&verdict)
            .write()
            .unwrap_or_else(|e| cannot_encode(&e)),
    }
}

/// A plain acceptance, as the SDK writes it (a test compares the two).
const ACCEPTED: &[u8] = br#"{"accepted":true,"message":null,"code":null,"mutated_object":null,"audit_annotations":null,"warnings":null}"#;

/// The `validate_settings` answer.
pub fn check_settings(payload: &[u8]) -> SettingsValidationResponse {
    settings::check(payload)
}

fn decide(payload: &[u8]) -> Verdict {
    let (verdict, name) = payload::decide(payload);
    // Natively there is no policy-server to log to (the SDK would print to stdout).
    if cfg!(target_arch = "wasm32") && !matches!(verdict, Verdict::Accept { .. }) {
        log(&verdict, name.as_deref().unwrap_or_default());
    }
    verdict
}

/// Tells the policy-server's log what happened to a jump pod (the hot path never logs).
fn log(verdict: &Verdict, name: &str) {
    if let Some(record) = log_record(verdict, name, (file!(), line!(), column!())) {
        // A log that cannot be delivered changes no verdict.
        let _ = guest::host_call("kubewarden", "tracing", "log", &record);
    }
}

/// The record the SDK's slog drain sends for `info!(logger, message; "name" => name, ...)`
/// under a logger carrying `"policy" => "jumppod"`: the same fields, in the same order.
/// Written directly, without slog, the module is about 17 KB smaller.
fn log_record(verdict: &Verdict, name: &str, at: (&str, u32, u32)) -> Option<Vec<u8>> {
    let (message, reason) = match verdict {
        Verdict::Mutate { .. } => ("filled in what the jump-pod contract requires", None),
        Verdict::Reject(rejection) => ("rejected", Some(rejection.message())),
        Verdict::Accept { .. } => return None,
    };
    let (file, line, column) = at;
    let mut record = serde_json::json!({
        "column": column, "file": file, "level": "info", "line": line,
        "message": message, "name": name, "policy": "jumppod",
    });
    if let Some(reason) = reason {
        record["reason"] = reason.into();
    }
    serde_json::to_vec(&record).ok()
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| cannot_encode(&e))
}

fn cannot_encode(e: &serde_json::Error) -> Vec<u8> {
    format!(r#"{{"accepted":false,"message":"cannot encode the answer: {e}"}}"#).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jumppod_review::ValidationResponse;

    #[test]
    fn the_written_acceptance_is_what_the_answer_encodes_to() {
        assert_eq!(
            ACCEPTED,
            encode(&ValidationResponse::from(&Verdict::accept()))
        );
        // And what the SDK writes: the same fields in the same order.
        let sdk = kubewarden_policy_sdk::response::ValidationResponse {
            accepted: true,
            message: None,
            code: None,
            mutated_object: None,
            audit_annotations: None,
            warnings: None,
        };
        assert_eq!(ACCEPTED, encode(&sdk));
    }

    #[test]
    fn a_rejection_is_logged_with_its_reason_and_an_acceptance_not_at_all() {
        let reject = Verdict::Reject(jumppod::Rejection::Unreadable {
            message: "too small".to_owned(),
        });
        let record = log_record(
            &reject,
            "dstack-p-ssh-jump-pod",
            ("policy/src/lib.rs", 7, 9),
        );
        assert_eq!(
            String::from_utf8(record.expect("a record")).unwrap(),
            r#"{"column":9,"file":"policy/src/lib.rs","level":"info","line":7,"message":"rejected","name":"dstack-p-ssh-jump-pod","policy":"jumppod","reason":"too small"}"#
        );
        assert_eq!(log_record(&Verdict::accept(), "x", ("f", 1, 1)), None);
    }
}
