//! The `validate` payload policy-server sends, `{"request": AdmissionRequest, "settings":
//! {...}}`, read and decided the way the policy does it (`jumppod-review` writes the answer).
//! The Wasm guest, the host's native gate and the JavaScript build all call these functions,
//! so they cannot disagree.
//!
//! The payload is read in one borrowed pass over the pod's metadata; a jump pod's spec is then
//! read from the same bytes, and a mutation finds the pod's text in the payload to return it
//! with the fills spliced in (`crate::splice`).
//! Anything these reads cannot read goes to the full typed read, which names the problem.

use crate::admission::{self, Object, PodText, Request};
use crate::splice::Checked;
use crate::verdict::Verdict;
use crate::view::{self, PodHead};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The verdict on a payload, and the name of the object it judged (for the policy's log).
pub fn decide(payload: &[u8]) -> (Verdict, Option<Cow<'_, str>>) {
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
/// the object as the borrowed head of a pod and skips the old object.
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
type QuickPayload<'a> =
    Payload<'a, view::Object<AdmissionRequest<'a, view::Object<PodHead<'a>>, IgnoredAny>>>;

#[derive(Deserialize)]
struct GroupVersionKind<'a> {
    #[serde(borrow, default)]
    group: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
}

/// The verdict from the one-pass read (which hands to the full read what it cannot judge), or
/// None where the payload is not what that read reads.
fn decide_quickly(bytes: &[u8]) -> Option<(Verdict, Option<Cow<'_, str>>)> {
    let view::Object(payload) = serde_json::from_slice::<view::Object<QuickPayload>>(bytes).ok()?;
    let view::Object(request) = payload.request?;
    let kind = request.kind.as_ref();
    // Only a mutation needs the pod's JSON (it returns the pod whole). A compact payload (as
    // the API server, policy-server and jumppod's hosts write it) is checked once and the
    // object found in it by its members; any other is read a second time, keeping the object
    // raw.
    let raw_object = || {
        let checked = std::str::from_utf8(bytes).ok().and_then(Checked::of);
        if let Some(pod) = checked.and_then(|c| c.into_object_at(&["request", "object"])) {
            return Some(PodText::Checked(pod));
        }
        serde_json::from_slice::<FullPayload>(bytes)
            .ok()?
            .request?
            .object
            .map(PodText::Raw)
    };
    let full = || decide_fully(bytes).0;
    let verdict = admission::judge(
        Request {
            group: kind.map_or("", |k| &k.group),
            kind: kind.map_or("", |k| &k.kind),
            operation: request.operation.as_deref().unwrap_or_default(),
            name: request.name.as_deref(),
            object: request.object.map(|view::Object(pod)| Object::Head {
                pod,
                payload: bytes,
                raw_object: &raw_object,
                full: &full,
            }),
        },
        payload.settings,
    );
    Some((verdict, request.name))
}

fn decide_fully(payload: &[u8]) -> (Verdict, Option<Cow<'_, str>>) {
    let payload: FullPayload = match serde_json::from_slice(payload) {
        Ok(payload) => payload,
        Err(e) => {
            let message = format!("cannot read the validation request: {e}");
            return (Verdict::unreadable(message), None);
        }
    };
    let Some(request) = payload.request else {
        let message = "the validation request has no `request`".to_owned();
        return (Verdict::unreadable(message), None);
    };
    let kind = request.kind.as_ref();
    let verdict = admission::judge(
        Request {
            group: kind.map_or("", |k| &k.group),
            kind: kind.map_or("", |k| &k.kind),
            operation: request.operation.as_deref().unwrap_or_default(),
            name: request.name.as_deref(),
            object: request.object.map(|object| Object::Raw {
                object,
                old: request.old_object,
            }),
        },
        payload.settings,
    );
    (verdict, request.name)
}

#[cfg(test)]
mod tests {
    use super::*;
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
            // A fixture is an AdmissionRequest, or an AdmissionReview around one. Both are
            // kept as written: a value read and written again would lose their escapes.
            #[derive(Deserialize)]
            struct Review<'a> {
                #[serde(borrow)]
                request: Option<&'a RawValue>,
            }
            let review: Review = serde_json::from_str(&text).expect("JSON");
            let request = review.request.map_or(text.trim(), RawValue::get);
            for settings in settings
                .iter()
                .map(|s| std::fs::read_to_string(s).expect("settings"))
            {
                let payload = format!(
                    r#"{{"request": {request}, "settings": {}}}"#,
                    settings.trim()
                )
                .into_bytes();
                if let Some((outcome, name)) = decide_quickly(&payload) {
                    let (full, full_name) = decide_fully(&payload);
                    assert_eq!(outcome, full, "{}", file.display());
                    assert_eq!(name, full_name, "{}", file.display());
                    decided.push(file.file_name().expect("a name").to_owned());
                }
            }
        }
        // The one-pass read decides created jump pods, mutations among them, escapes too.
        for fixture in [
            "conforming_jump_pod_create.json",
            "undersized_jump_pod_create.json",
            "legacy_bare_pod_create.json",
            "ordinary_pod_create.json",
            "escaped_undersized_jump_pod.json",
            "escaped_legacy_bare_pod.json",
        ] {
            assert!(
                decided.iter().any(|f| f == fixture),
                "{fixture} left to the full read"
            );
        }
    }
}
