//! Shared by the policy tests: the built `policy.wasm`, loaded once and run the way
//! policy-server runs it (a fresh instance per evaluation), and the fixtures.

#![allow(
    dead_code,
    reason = "each test crate uses a different part of this module"
)]

use jumppod_review::Policy as _;
use jumppod_review::{
    SettingsResponse, ValidationResponse, admission_response, decode_patch, request_of,
};
use jumppod_wasm::WasmPolicy;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `$JUMPPOD_POLICY_WASM`, or the release build in the workspace's target directory.
pub fn wasm_path() -> PathBuf {
    std::env::var_os("JUMPPOD_POLICY_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/wasm32-wasip1/release/jumppod_policy.wasm"))
}

pub fn wasm() -> &'static [u8] {
    static WASM: OnceLock<Vec<u8>> = OnceLock::new();
    WASM.get_or_init(|| {
        let path = wasm_path();
        std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read the policy module {}: {e}\nbuild it first with `make policy` \
                 (cargo build -p jumppod-policy --target wasm32-wasip1 --release), or point \
                 JUMPPOD_POLICY_WASM at it",
                path.display()
            )
        })
    })
}

/// The module, precompiled once per test binary with policy-server's defaults.
pub fn policy() -> &'static WasmPolicy {
    static POLICY: OnceLock<WasmPolicy> = OnceLock::new();
    POLICY.get_or_init(|| WasmPolicy::load(wasm()).expect("the policy module loads"))
}

pub fn test_data(relative: &str) -> PathBuf {
    workspace().join("policy/test_data").join(relative)
}

/// A fixture file's JSON: an AdmissionRequest, an AdmissionReview or settings.
pub fn read_json(relative: &str) -> Value {
    let path = test_data(relative);
    let text =
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The bare AdmissionRequest of a fixture (unwrapping an AdmissionReview).
pub fn request(fixture: &str) -> Value {
    request_of(&read_json(fixture))
        .expect("an AdmissionRequest")
        .clone()
}

pub fn settings(file: Option<&str>) -> Value {
    file.map_or_else(|| json!({}), |f| read_json(&format!("settings/{f}")))
}

/// What policy-server answers for one request, evaluated in a fresh instance.
pub struct Evaluation {
    pub request: Value,
    pub response: ValidationResponse,
    /// The AdmissionResponse as kwctl prints it.
    pub admission: Value,
    pub patch: Option<json_patch::Patch>,
}

impl Evaluation {
    /// The request's object with the JSONPatch applied.
    pub fn patched(&self) -> Value {
        let mut object = self.request["object"].clone();
        let patch = self.patch.as_ref().expect("a patch");
        json_patch::patch(&mut object, patch).expect("the patch applies to the request's object");
        object
    }

    pub fn message(&self) -> &str {
        self.response.message.as_deref().unwrap_or_default()
    }

    pub fn warnings(&self) -> Vec<String> {
        self.response.warnings.clone().unwrap_or_default()
    }
}

pub fn evaluate(request: &Value, settings: &Value) -> Evaluation {
    let response = policy()
        .validate(request, settings)
        .expect("the waPC call returns a verdict");
    let admission = admission_response(request, &response);
    let patch = decode_patch(&admission).expect("a decodable patch");
    Evaluation {
        request: request.clone(),
        response,
        admission,
        patch,
    }
}

pub fn evaluate_fixture(fixture: &str, settings_file: Option<&str>) -> Evaluation {
    evaluate(&request(fixture), &settings(settings_file))
}

pub fn validate_settings(settings: &Value) -> SettingsResponse {
    policy()
        .validate_settings(settings)
        .expect("the waPC call returns a settings verdict")
}

/// Calls `validate` with raw bytes in a fresh instance and reads the answer as a
/// ValidationResponse: a trap, a guest error or an answer that is not one fails the test.
pub fn validate_raw(payload: &[u8]) -> ValidationResponse {
    let answer = policy()
        .instance()
        .expect("a fresh instance")
        .call("validate", payload)
        .unwrap_or_else(|e| {
            panic!("the policy must answer every payload with a verdict, got: {e:#}")
        });
    serde_json::from_slice(&answer).unwrap_or_else(|e| {
        panic!(
            "the answer is not a ValidationResponse ({e}): {}",
            String::from_utf8_lossy(&answer)
        )
    })
}
