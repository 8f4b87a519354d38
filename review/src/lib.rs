//! The AdmissionReview around the jumppod policy.
//!
//! A policy answers `validate` with a [`ValidationResponse`] (the waPC shape the Kubewarden SDK
//! writes); policy-server turns it into the AdmissionResponse the API server receives, with the
//! mutated object as a base64 JSONPatch ([`admission_response`], what `kwctl run` prints).
//! [`Native::verdict`] is the typed verdict the answer is rendered from (the browser reads its
//! violations as data). [`Policy`] is "judge this request": [`Native`] runs the guest's own code compiled natively
//! (no Wasm runtime, the default of `jumppod ensure`); the `jumppod-wasm` crate runs the built
//! module the way policy-server does. Both give the same bytes for the same request.

mod error;
mod native;
mod response;

pub use error::Error;
pub use native::Native;
pub use response::{
    Answer, SettingsResponse, ValidationResponse, admission_response, decode_patch, patch_of,
    request_of,
};

use serde_json::Value;

/// The `validate` payload policy-server sends, as `json!({"request": request, "settings":
/// settings})` writes it, written from the borrowed values: copying a 12 KB request into a new
/// `Value` first was a tenth of the webhook's time per review.
pub fn payload(request: &Value, settings: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(br#"{"request":"#);
    // Writing a `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut out, request);
    out.extend_from_slice(br#","settings":"#);
    let _ = serde_json::to_writer(&mut out, settings);
    out.push(b'}');
    out
}

/// The `validate` payload of a request and settings already written as JSON, each copied as
/// it stands: what the webhook sends, so a 12 KB request is not read into a `Value` and
/// written again only to be forwarded.
pub fn payload_of_text(request: &str, settings: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(request.len() + settings.len() + 24);
    out.extend_from_slice(br#"{"request":"#);
    out.extend_from_slice(request.as_bytes());
    out.extend_from_slice(br#","settings":"#);
    out.extend_from_slice(settings.as_bytes());
    out.push(b'}');
    out
}

/// A policy that judges AdmissionRequests, as policy-server calls it.
pub trait Policy: Send + Sync {
    /// `validate` of a payload as policy-server sends it: `{"request": ..., "settings": ...}`.
    fn validate_payload(&self, payload: &[u8]) -> Result<ValidationResponse, Error>;

    /// `validate` of one AdmissionRequest (camelCase, as the API server sends it).
    fn validate(&self, request: &Value, settings: &Value) -> Result<ValidationResponse, Error> {
        self.validate_payload(&payload(request, settings))
    }

    /// `validate_settings`.
    fn validate_settings(&self, settings: &Value) -> Result<SettingsResponse, Error>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_payload_is_what_json_writes() {
        let request =
            json!({"uid": "u", "object": {"metadata": {"name": "p\"q"}, "a": [1, 2.5, null]}});
        let settings = json!({"cpu": "1"});
        let written = json!({"request": request, "settings": settings}).to_string();
        assert_eq!(payload(&request, &settings), written.into_bytes());
    }

    #[test]
    fn a_payload_of_compact_text_is_what_json_writes() {
        let request =
            json!({"uid": "u", "object": {"metadata": {"name": "p\"q"}, "a": [1, 2.5, null]}});
        let settings = json!({"cpu": "1"});
        assert_eq!(
            payload_of_text(&request.to_string(), &settings.to_string()),
            payload(&request, &settings)
        );
    }
}
