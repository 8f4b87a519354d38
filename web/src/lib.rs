//! The jump-pod contract for JavaScript (Node, bundlers, the browser playground): the core's
//! admission review compiled to `wasm32-unknown-unknown` through wasm-bindgen. A review
//! answers exactly what the Kubewarden module answers for the same request and settings.
//!
//! Input the module would never see (text that is not one JSON or YAML object) is refused
//! with a JS `Error` naming what was wrong; everything else gets the module's answer, a
//! rejection with a message included. Nothing here panics on input.

pub mod contract;
pub mod document;
pub mod review;

use document::{InputError, Submission};
use serde::Serialize;
use serde_json::Value;
use wasm_bindgen::prelude::*;

pub use jumppod_review::SettingsResponse;
pub use review::{Review, RuleBroken, VerdictKind};

/// Reviews an AdmissionRequest or a whole AdmissionReview, as the module would.
pub fn review_document(document: &Value, settings: &Value) -> Result<Review, InputError> {
    let request = document::admission_request(document)?;
    Ok(review::review_request(request, settings))
}

/// Reviews a bare Pod or ReplicaSet manifest as the API server would submit it: created, or
/// updated from `old`.
pub fn judge_manifest(
    manifest: &Value,
    settings: &Value,
    old: Option<Value>,
) -> Result<Review, InputError> {
    let request = document::admission_request_for(manifest, &Submission { update_of: old })?;
    Ok(review::review_request(&request, settings))
}

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &'static str = r#"
/** A JSON object. */
export type JsonObject = { [key: string]: unknown };
/** JSON or YAML text, or the parsed object. */
export type Document = string | JsonObject;

/** The policy's settings (every key optional), as JSON or YAML text or an object. */
export interface Settings {
  cpu?: { minimum?: string; default?: string };
  memory?: { minimum?: string; default?: string };
  ephemeralStorage?: { minimumRequest?: string };
  mutate?: boolean;
}
export type SettingsInput = Settings | string | null | undefined;

export interface JudgeOptions {
  /** `CREATE` (the default) or `UPDATE`; `UPDATE` needs `oldObject`. */
  operation?: "CREATE" | "UPDATE";
  /** The object as it was before the update. */
  oldObject?: Document;
}

export interface JsonPatchOperation {
  op: "add" | "remove" | "replace" | "move" | "copy" | "test";
  path: string;
  value?: unknown;
  from?: string;
}

/** What the policy-server returns to the API server (and `kwctl run` prints). */
export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  patchType?: "JSONPatch";
  /** The JSONPatch, base64. */
  patch?: string;
  status?: { message: string; code?: number };
  warnings?: string[];
}

/** The module's own answer to `validate`, as the Kubewarden SDK writes it. */
export interface ValidationResponse {
  accepted: boolean;
  message: string | null;
  code: number | null;
  mutated_object: JsonObject | null;
  audit_annotations: { [key: string]: string } | null;
  warnings: string[] | null;
}

/** One broken rule, or one value missing when mutation is off. */
export interface Finding {
  container?: string;
  init: boolean;
  /** `cpu`, `memory`, `ephemeral-storage`, or a label key. */
  resource?: string;
  text: string;
}

export interface Review {
  allowed: boolean;
  verdict: "accepted" | "mutated" | "rejected";
  message?: string;
  /** 400 when the object cannot be read. */
  code?: number;
  warnings: string[];
  /** The rejection (or the warning about an unchanged update), one rule each. */
  violations: Finding[];
  /** Empty when nothing changes. */
  patch: JsonPatchOperation[];
  /** The request's object. */
  object?: JsonObject;
  /** The object as admitted, when the policy changed it. */
  patchedObject?: JsonObject;
  response: AdmissionResponse;
  validation: ValidationResponse;
}

/** The module's answer to `validate_settings`. */
export interface SettingsCheck {
  valid: boolean;
  message?: string;
}

export interface Rule {
  id: string;
  /** The settings key that configures it. */
  setting?: string;
  /** The value in force. */
  value?: string;
  /** The value when the setting is absent. */
  default?: string;
  /** The lowest value the settings may give it. */
  floor?: string;
  appliesTo: string;
  text: string;
}
"#;

#[wasm_bindgen]
extern "C" {
    /// Optional parameters typed for TypeScript (`settings?: SettingsInput`).
    #[wasm_bindgen(typescript_type = "SettingsInput")]
    pub type SettingsArg;
    #[wasm_bindgen(typescript_type = "JudgeOptions")]
    pub type JudgeOptionsArg;
}

/// Reviews an AdmissionRequest or a whole AdmissionReview with the given settings (absent:
/// the defaults). Throws only when the input is not one JSON or YAML object.
#[wasm_bindgen(js_name = review, unchecked_return_type = "Review")]
pub fn review_js(
    #[wasm_bindgen(unchecked_param_type = "Document")] input: JsValue,
    settings: Option<SettingsArg>,
) -> Result<JsValue, JsError> {
    let document = read_object(
        "the admission review",
        &input,
        "an AdmissionReview or an AdmissionRequest object",
    )?;
    let settings = read_settings(settings.as_deref())?;
    to_js(&review_document(&document, &settings).map_err(input_error)?)
}

/// Reviews a bare Pod or ReplicaSet manifest as if it were created (or updated from
/// `options.oldObject`), so no AdmissionRequest is needed.
#[wasm_bindgen(js_name = judge, unchecked_return_type = "Review")]
pub fn judge_js(
    #[wasm_bindgen(unchecked_param_type = "Document")] manifest: JsValue,
    settings: Option<SettingsArg>,
    options: Option<JudgeOptionsArg>,
) -> Result<JsValue, JsError> {
    let manifest = read_object("the manifest", &manifest, "a Pod or ReplicaSet object")?;
    let settings = read_settings(settings.as_deref())?;
    let options = match options {
        Some(options) => read_optional("the options", &options)?.unwrap_or(Value::Null),
        None => Value::Null,
    };
    let old = match options.get("oldObject").filter(|o| !o.is_null()) {
        Some(Value::String(text)) => Some(document::parse_object(
            "the old object",
            text,
            "a Pod or ReplicaSet object",
        )),
        Some(old) => Some(document::object(
            "the old object",
            old.clone(),
            "a Pod or ReplicaSet object",
        )),
        None => None,
    }
    .transpose()
    .map_err(input_error)?;
    match (options.get("operation").and_then(Value::as_str), &old) {
        (Some("UPDATE"), None) => {
            return Err(JsError::new("an UPDATE needs the old object (`oldObject`)"));
        }
        (Some("CREATE"), Some(_)) => {
            return Err(JsError::new(
                "a CREATE has no old object: set `operation: \"UPDATE\"` or leave `oldObject` out",
            ));
        }
        (Some(op), _) if op != "CREATE" && op != "UPDATE" => {
            return Err(JsError::new(&format!(
                "operation {op:?} is not judged here: use CREATE or UPDATE (the policy accepts DELETE and CONNECT untouched)"
            )));
        }
        _ => {}
    }
    to_js(&judge_manifest(&manifest, &settings, old).map_err(input_error)?)
}

/// The module's `validate_settings`: `{valid, message}`; never throws.
#[wasm_bindgen(js_name = checkSettings, unchecked_return_type = "SettingsCheck")]
pub fn check_settings_js(settings: Option<SettingsArg>) -> Result<JsValue, JsError> {
    let check = match settings_value(settings.as_deref()) {
        Ok(settings) => review::check_settings(&settings),
        Err(message) => SettingsResponse {
            valid: false,
            message: Some(message),
        },
    };
    to_js(&check)
}

/// The rules with the values these settings give them. Throws when the settings are invalid.
#[wasm_bindgen(js_name = rules, unchecked_return_type = "Rule[]")]
pub fn rules_js(settings: Option<SettingsArg>) -> Result<JsValue, JsError> {
    let settings = read_settings(settings.as_deref())?;
    let contract = contract::contract(&settings).map_err(|e| JsError::new(&e.to_string()))?;
    to_js(&contract::rules(&contract))
}

/// Reads JSON or YAML text into a value (the playground decides from it what was pasted).
/// Throws with a readable message when the text is neither.
#[wasm_bindgen(js_name = parseDocument, unchecked_return_type = "unknown")]
pub fn parse_document_js(text: &str) -> Result<JsValue, JsError> {
    to_js(&document::parse("the input", text).map_err(input_error)?)
}

/// YAML text of a JSON value (the playground shows objects the way they were pasted).
#[wasm_bindgen(js_name = toYaml)]
pub fn to_yaml_js(value: JsValue) -> Result<String, JsError> {
    let value = read_optional("the value", &value)?.unwrap_or(Value::Null);
    serde_yaml::to_string(&value).map_err(|e| JsError::new(&format!("cannot write YAML: {e}")))
}

fn input_error(e: InputError) -> JsError {
    JsError::new(&e.to_string())
}

fn to_js<T: Serialize>(value: &T) -> Result<JsValue, JsError> {
    let text = serde_json::to_string(value)
        .map_err(|e| JsError::new(&format!("cannot encode the answer: {e}")))?;
    js_sys::JSON::parse(&text).map_err(|_| JsError::new("cannot decode the answer"))
}

/// A JS value as JSON: text is read as JSON or YAML, anything else through `JSON.stringify`.
fn read_optional(what: &str, value: &JsValue) -> Result<Option<Value>, JsError> {
    read_value(what, value).map_err(|message| JsError::new(&message))
}

fn read_value(what: &str, value: &JsValue) -> Result<Option<Value>, String> {
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    if let Some(text) = value.as_string() {
        return document::parse(what, &text)
            .map(Some)
            .map_err(|e| e.to_string());
    }
    // JSON.stringify throws on cycles and gives undefined for a function: both refused.
    let text = js_sys::JSON::stringify(value)
        .ok()
        .and_then(|text| text.as_string())
        .ok_or_else(|| format!("{what} cannot be written as JSON"))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{what} is not JSON: {e}"))
}

fn read_object(what: &str, value: &JsValue, expected: &str) -> Result<Value, JsError> {
    let value = read_optional(what, value)?.unwrap_or(Value::Null);
    document::object(what, value, expected).map_err(input_error)
}

/// Settings: absent means `{}` (what `kwctl run` sends without `--settings-json`).
fn settings_value(value: Option<&JsValue>) -> Result<Value, String> {
    let Some(value) = value else {
        return Ok(Value::Object(Default::default()));
    };
    Ok(read_value("the settings", value)?.unwrap_or_else(|| Value::Object(Default::default())))
}

fn read_settings(value: Option<&JsValue>) -> Result<Value, JsError> {
    settings_value(value).map_err(|message| JsError::new(&message))
}
