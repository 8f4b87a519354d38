use crate::Error;
use base64::Engine as _;
use jumppod::Verdict;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The answer to `validate`, as the Kubewarden SDK writes it (the same fields in the same
/// order, so the same bytes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationResponse {
    pub accepted: bool,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub code: Option<u16>,
    #[serde(default)]
    pub mutated_object: Option<Value>,
    #[serde(default)]
    pub audit_annotations: Option<Value>,
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
}

/// The typed verdict as the module answers it: the message and warnings rendered.
impl From<&Verdict> for ValidationResponse {
    fn from(verdict: &Verdict) -> ValidationResponse {
        let answer = Answer::from(verdict);
        let mutated_object = match answer.mutated_object.map(serde_json::from_str) {
            None => None,
            Some(Ok(object)) => Some(object),
            // serde_json reads what it wrote: not reached.
            Some(Err(e)) => {
                return ValidationResponse {
                    accepted: false,
                    message: Some(format!("cannot read the mutated object: {e}")),
                    code: Some(500),
                    ..ValidationResponse::default()
                };
            }
        };
        ValidationResponse {
            accepted: answer.accepted,
            message: answer.message,
            code: answer.code,
            mutated_object,
            audit_annotations: None,
            warnings: answer.warnings,
        }
    }
}

/// A [`ValidationResponse`] as the module writes it ([`Answer::write`]): the same fields in the
/// same order, the mutated object written as the verdict holds its text rather than read into
/// a `Value` and written again. The same bytes (a test compares them).
#[derive(Clone, Debug)]
pub struct Answer<'v> {
    pub accepted: bool,
    pub message: Option<String>,
    pub code: Option<u16>,
    /// JSON text.
    pub mutated_object: Option<&'v str>,
    pub audit_annotations: Option<Value>,
    pub warnings: Option<Vec<String>>,
}

impl Answer<'_> {
    /// The answer as serde_json writes a [`ValidationResponse`], the mutated object's text
    /// copied in (serde_json would check it by reading it again).
    pub fn write(&self) -> Result<Vec<u8>, serde_json::Error> {
        let object = self.mutated_object.unwrap_or("null");
        let mut out = Vec::with_capacity(128 + object.len());
        out.extend_from_slice(br#"{"accepted":"#);
        serde_json::to_writer(&mut out, &self.accepted)?;
        out.extend_from_slice(br#","message":"#);
        serde_json::to_writer(&mut out, &self.message)?;
        out.extend_from_slice(br#","code":"#);
        serde_json::to_writer(&mut out, &self.code)?;
        out.extend_from_slice(br#","mutated_object":"#);
        out.extend_from_slice(object.as_bytes());
        out.extend_from_slice(br#","audit_annotations":"#);
        serde_json::to_writer(&mut out, &self.audit_annotations)?;
        out.extend_from_slice(br#","warnings":"#);
        serde_json::to_writer(&mut out, &self.warnings)?;
        out.push(b'}');
        Ok(out)
    }
}

impl<'v> From<&'v Verdict> for Answer<'v> {
    fn from(verdict: &'v Verdict) -> Answer<'v> {
        let text = |w: &[jumppod::Warning]| w.iter().map(ToString::to_string).collect();
        let (accepted, message, code, mutated_object, warnings): (_, _, _, _, Vec<String>) =
            match verdict {
                Verdict::Accept { warnings } => (true, None, None, None, text(warnings)),
                Verdict::Mutate { object, warnings } => {
                    (true, None, None, Some(object.text()), text(warnings))
                }
                Verdict::Reject(rejection) => (
                    false,
                    Some(rejection.message()),
                    rejection.code(),
                    None,
                    Vec::new(),
                ),
            };
        Answer {
            accepted,
            message,
            code,
            mutated_object,
            audit_annotations: None,
            warnings: (!warnings.is_empty()).then_some(warnings),
        }
    }
}

/// The guest's answer to `validate_settings`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SettingsResponse {
    pub valid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The AdmissionRequest in a document: a bare request or a whole AdmissionReview (both are
/// what `kwctl run --request-path` accepts).
pub fn request_of(document: &Value) -> Result<&Value, Error> {
    let request = document.get("request").unwrap_or(document);
    if request.is_object() {
        Ok(request)
    } else {
        Err(Error::NotARequest {
            found: kind_of(request),
        })
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The JSONPatch from the request's object to the mutated object the answer carries (empty
/// when there is none, or it changes nothing).
pub fn patch_of(request: &Value, response: &ValidationResponse) -> json_patch::Patch {
    match (&response.mutated_object, request.get("object")) {
        (Some(mutated), Some(object)) => json_patch::diff(object, mutated),
        _ => json_patch::Patch(Vec::new()),
    }
}

/// The AdmissionResponse policy-server sends back (and `kwctl run` prints): the mutated object
/// becomes a base64 JSONPatch of the request's object; an empty diff is no patch.
pub fn admission_response(request: &Value, response: &ValidationResponse) -> Value {
    let mut answer = json!({
        "uid": request.get("uid").cloned().unwrap_or(Value::String(String::new())),
        "allowed": response.accepted,
    });
    {
        let patch = patch_of(request, response);
        if !patch.0.is_empty() {
            let text = serde_json::to_vec(&patch).unwrap_or_default();
            answer["patchType"] = json!("JSONPatch");
            answer["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    if !response.accepted {
        let mut status = json!({"message": response.message.clone().unwrap_or_default()});
        if let Some(code) = response.code {
            status["code"] = json!(code);
        }
        answer["status"] = status;
    }
    if let Some(warnings) = response.warnings.as_ref().filter(|w| !w.is_empty()) {
        answer["warnings"] = json!(warnings);
    }
    answer
}

/// The JSONPatch of an AdmissionResponse, if it has one.
pub fn decode_patch(answer: &Value) -> Result<Option<json_patch::Patch>, Error> {
    let Some(text) = answer.get("patch").and_then(Value::as_str) else {
        return Ok(None);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| Error::Patch { source: e.into() })?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::Patch { source: e.into() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::a_bare_request_is_taken_as_it_is(json!({"uid": "a"}), "a")]
    #[case::a_review_gives_its_request(json!({"kind": "AdmissionReview", "request": {"uid": "b"}}), "b")]
    fn finds_the_request(#[case] document: Value, #[case] uid: &str) {
        assert_eq!(request_of(&document).unwrap()["uid"], uid);
    }

    #[rstest]
    #[case::an_array_names_itself(json!([1]), "expected an AdmissionRequest or an AdmissionReview object, found an array")]
    #[case::a_review_whose_request_is_a_string(json!({"request": "x"}), "expected an AdmissionRequest or an AdmissionReview object, found a string")]
    fn refuses_what_is_not_a_request(#[case] document: Value, #[case] message: &str) {
        assert_eq!(request_of(&document).unwrap_err().to_string(), message);
    }

    #[test]
    fn a_mutation_becomes_a_base64_json_patch_that_decodes_back() {
        let request = json!({"uid": "u", "object": {"metadata": {"labels": {"a": "1"}}}});
        let response = ValidationResponse {
            accepted: true,
            mutated_object: Some(json!({"metadata": {"labels": {"a": "1", "b": "2"}}})),
            ..ValidationResponse::default()
        };
        let answer = admission_response(&request, &response);
        assert_eq!(answer["patchType"], "JSONPatch");
        let patch = serde_json::to_value(decode_patch(&answer).unwrap().unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/metadata/labels/b", "value": "2"}])
        );
    }

    #[test]
    fn an_unchanged_mutated_object_is_no_patch() {
        let object = json!({"metadata": {"name": "x"}});
        let request = json!({"uid": "u", "object": object});
        let response = ValidationResponse {
            accepted: true,
            mutated_object: Some(object),
            ..ValidationResponse::default()
        };
        let answer = admission_response(&request, &response);
        assert_eq!(answer, json!({"uid": "u", "allowed": true}));
    }

    #[test]
    fn a_rejection_carries_its_message_code_and_warnings() {
        let response = ValidationResponse {
            accepted: false,
            message: Some("no".into()),
            code: Some(400),
            warnings: Some(vec!["careful".into()]),
            ..ValidationResponse::default()
        };
        assert_eq!(
            admission_response(&json!({"uid": "u"}), &response),
            json!({"uid": "u", "allowed": false, "status": {"message": "no", "code": 400},
                   "warnings": ["careful"]})
        );
    }
}
