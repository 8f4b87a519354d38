//! The `validate` payload policy-server sends, `{"request": AdmissionRequest, "settings":
//! {...}}`, read and decided the way the policy does it, and the answer it gives, field for
//! field as the Kubewarden SDK writes it. The Wasm guest, the host's native gate and the
//! JavaScript build all call these functions, so they cannot disagree.
//!
//! The payload is read in one borrowed pass over the pod's metadata; a jump pod's spec is then
//! read from the same bytes, and a mutation reads the pod once more, whole, to return it.
//! Anything these reads cannot read goes to the full typed read, which names the problem.

use crate::admission::{self, Outcome, Request, ViewRequest};
use crate::view::{Object, PodHead};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;

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

impl From<Outcome> for ValidationResponse {
    fn from(outcome: Outcome) -> ValidationResponse {
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
}

/// The verdict on a payload, and the name of the object it judged (for the policy's log).
pub fn decide(payload: &[u8]) -> (Outcome, Option<Cow<'_, str>>) {
    // Most requests are ordinary pods, accepted as they are: a scan of the bytes answers them
    // without serde_json, which costs most of their time.
    if let Some(name) = crate::ordinary::accepts(payload) {
        return (Outcome::accept(), name.map(Cow::Borrowed));
    }
    decide_quickly(payload).unwrap_or_else(|| decide_fully(payload))
}

/// The payload policy-server sends: `{"request": AdmissionRequest, "settings": {...}}`.
#[derive(Deserialize)]
#[serde(bound(deserialize = "R: Deserialize<'de>"))]
struct Payload<'a, R> {
    request: Option<R>,
    #[serde(borrow)]
    settings: Option<&'a RawValue>,
}

/// The fields of the AdmissionRequest the policy reads. The full read keeps both objects raw
/// (most pods are not jump pods and are never parsed beyond metadata); the one-pass read takes
/// the object as the borrowed view of a pod and skips the old object.
#[derive(Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound(deserialize = "O: Deserialize<'de>, Old: Deserialize<'de>")
)]
struct AdmissionRequest<'a, O, Old> {
    #[serde(borrow)]
    kind: Option<GroupVersionKind<'a>>,
    #[serde(borrow)]
    operation: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    object: Option<O>,
    old_object: Option<Old>,
}

/// The full read: both objects raw.
type FullPayload<'a> = Payload<'a, AdmissionRequest<'a, &'a RawValue, &'a RawValue>>;

/// The one-pass read: enough for every ordinary pod and created jump pods. Both levels are
/// read from JSON objects only, and anything this pass cannot read goes to the full read,
/// which names the problem.
type QuickPayload<'a> = Payload<'a, Object<AdmissionRequest<'a, Object<PodHead<'a>>, IgnoredAny>>>;

#[derive(Deserialize)]
struct GroupVersionKind<'a> {
    #[serde(borrow, default)]
    group: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
}

/// The verdict from the one-pass read, or None where the full path decides.
fn decide_quickly(bytes: &[u8]) -> Option<(Outcome, Option<Cow<'_, str>>)> {
    let Object(payload) = serde_json::from_slice::<Object<QuickPayload>>(bytes).ok()?;
    let Object(request) = payload.request?;
    let kind = request.kind.as_ref();
    let outcome = admission::review_view(
        ViewRequest {
            group: kind.map_or("", |k| &k.group),
            kind: kind.map_or("", |k| &k.kind),
            operation: request.operation.as_deref().unwrap_or_default(),
            name: request.name.as_deref(),
            object: request.object.map(|Object(head)| head),
        },
        payload.settings,
        bytes,
        // Only a mutation needs the pod's JSON (it returns the pod whole): a second read of
        // the payload, keeping the object raw.
        || {
            serde_json::from_slice::<FullPayload>(bytes)
                .ok()?
                .request?
                .object
        },
    )?;
    Some((outcome, request.name))
}

fn decide_fully(payload: &[u8]) -> (Outcome, Option<Cow<'_, str>>) {
    let payload: FullPayload = match serde_json::from_slice(payload) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::{Path, PathBuf};

    fn json_files(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        files
    }

    /// Where the scan of an ordinary request answers, the serde reads answer the same: an
    /// acceptance without warnings, and the request's name. Whether it answered.
    fn the_scan_answers_what_serde_answers(payload: &[u8]) -> bool {
        let Some(name) = crate::ordinary::accepts(payload) else {
            return false;
        };
        let (outcome, serde_name) =
            decide_quickly(payload).unwrap_or_else(|| decide_fully(payload));
        let shown = || String::from_utf8_lossy(payload).into_owned();
        assert_eq!(outcome, Outcome::accept(), "{}", shown());
        assert_eq!(name, serde_name.as_deref(), "{}", shown());
        true
    }

    /// Ordinary requests broken or bent a byte at a time (every cut, every position given
    /// each byte JSON gives meaning to, and others): the scan never answers otherwise than
    /// the serde reads.
    #[test]
    fn the_scan_answers_only_what_the_serde_reads_answer() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/test_data");
        let fixture = |name: &str| -> Value {
            serde_json::from_slice(&std::fs::read(data.join(name)).expect("a fixture"))
                .expect("JSON")
        };
        // The ordinary fixture cut down to about 1 KB (each base is read once per byte
        // variant, so the time grows with the square of its size), keeping what the scan
        // must handle: skipped objects, a managed-fields key with escapes, an owner.
        let mut ordinary = fixture("ordinary_pod_create.json");
        let pod = &mut ordinary["object"];
        pod["spec"] = json!({"containers": [{"name": "web", "image": "nginx:1.27",
            "resources": {"requests": {"cpu": "250m"}}}]});
        pod["status"] = json!({"phase": "Pending"});
        let meta = pod["metadata"].as_object_mut().expect("metadata");
        meta.remove("annotations");
        meta["managedFields"] = json!([{"manager": "kube-controller-manager",
            "fieldsV1": {"f:spec": {"k:{\"name\":\"web\"}": {".": {}}}}}]);
        ordinary["oldObject"] = Value::Null;
        let mut owned = ordinary.clone();
        owned["object"]["metadata"]["ownerReferences"] =
            json!([{"kind": "ReplicaSet", "controller": true}, {"controller": null}]);
        owned["object"]["metadata"]["labels"] = json!({"a": "1", "app.kubernetes.io/name": "x"});
        owned["object"]["spec"]["n"] = json!([0, -1, 10, 1.5, 2e3, true, false, null, "", {}, []]);
        let bases = [
            ordinary,
            owned,
            fixture("legacy_bare_pod_create.json"),
            fixture("conforming_jump_pod_create.json"),
        ];
        let bytes: &[u8] = b"\"\\,:{}[] \n0-1.eEtfnux/\x7f\x80\x01";
        let mut answered = 0;
        for request in &bases {
            let payload = serde_json::to_vec(&json!({"request": request, "settings": {}})).unwrap();
            answered += usize::from(the_scan_answers_what_serde_answers(&payload));
            for at in 0..payload.len() {
                answered += usize::from(the_scan_answers_what_serde_answers(&payload[..at]));
                let mut cut = payload.clone();
                cut.remove(at);
                answered += usize::from(the_scan_answers_what_serde_answers(&cut));
                for &b in bytes {
                    let mut bent = payload.clone();
                    bent[at] = b;
                    answered += usize::from(the_scan_answers_what_serde_answers(&bent));
                    let mut grown = payload.clone();
                    grown.insert(at, b);
                    answered += usize::from(the_scan_answers_what_serde_answers(&grown));
                }
            }
        }
        assert!(answered > 1000, "{answered}");
    }

    /// Every fixture of the policy (requests, reviews, hostile objects) under every settings
    /// document: where the one-pass read decides, it answers exactly what the full read does.
    #[test]
    fn the_one_pass_read_answers_what_the_full_read_answers() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/test_data");
        let mut requests = json_files(&data);
        requests.extend(json_files(&data.join("hostile")));
        let settings = json_files(&data.join("settings"));
        let mut decided = Vec::new();
        for file in &requests {
            let text = std::fs::read_to_string(file).expect("a fixture");
            let fixture: Value = serde_json::from_str(&text).expect("JSON");
            // A fixture is an AdmissionRequest, or an AdmissionReview around one.
            let request = fixture.get("request").cloned().unwrap_or(fixture);
            for settings in settings.iter().map(|s| std::fs::read(s).expect("settings")) {
                let settings: Value = serde_json::from_slice(&settings).expect("JSON");
                let payload =
                    serde_json::to_vec(&json!({"request": request, "settings": settings}))
                        .expect("a payload");
                the_scan_answers_what_serde_answers(&payload);
                if let Some((outcome, name)) = decide_quickly(&payload) {
                    let (full, full_name) = decide_fully(&payload);
                    assert_eq!(outcome, full, "{}", file.display());
                    assert_eq!(name, full_name, "{}", file.display());
                    decided.push(file.file_name().expect("a name").to_owned());
                }
            }
        }
        // The scan answers an ordinary pod.
        let ordinary = std::fs::read(data.join("ordinary_pod_create.json")).expect("a fixture");
        let ordinary: Value = serde_json::from_slice(&ordinary).expect("JSON");
        let payload = serde_json::to_vec(&json!({"request": ordinary, "settings": {}})).unwrap();
        assert!(crate::ordinary::accepts(&payload).is_some());
        // The one-pass read decides created jump pods, mutations among them.
        for fixture in [
            "conforming_jump_pod_create.json",
            "undersized_jump_pod_create.json",
            "legacy_bare_pod_create.json",
            "ordinary_pod_create.json",
        ] {
            assert!(
                decided.iter().any(|f| f == fixture),
                "{fixture} left to the full read"
            );
        }
    }
}
