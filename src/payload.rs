//! The `validate` payload policy-server sends, `{"request": AdmissionRequest, "settings":
//! {...}}`, read and decided the way the policy does it (`jumppod-review` writes the answer).
//! The Wasm guest, the host's native gate and the JavaScript build all call these functions,
//! so they cannot disagree.
//!
//! The payload is read in one borrowed pass over the pod's metadata; a jump pod's spec is then
//! read from the same bytes, and a mutation reads the pod once more, whole, to return it.
//! Anything these reads cannot read goes to the full typed read, which names the problem.

use crate::admission::{self, Object, Request};
use crate::verdict::Verdict;
use crate::view::{self, PodHead};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The verdict on a payload, and the name of the object it judged (for the policy's log).
pub fn decide(payload: &[u8]) -> (Verdict, Option<Cow<'_, str>>) {
    // Most requests are ordinary pods, accepted as they are: a scan of the bytes answers them
    // without serde_json, which costs most of their time.
    if let Some(name) = crate::ordinary::accepts(payload) {
        return (Verdict::accept(), name.map(Cow::Borrowed));
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
    // Only a mutation needs the pod's JSON (it returns the pod whole): a second read of the
    // payload, keeping the object raw.
    let raw_object = || {
        serde_json::from_slice::<FullPayload>(bytes)
            .ok()?
            .request?
            .object
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
    use serde_json::{Value, json};
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
        assert_eq!(outcome, Verdict::accept(), "{}", shown());
        assert_eq!(name, serde_name.as_deref(), "{}", shown());
        true
    }

    /// How [`write`] lays out JSON text.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Layout {
        Compact,
        /// JSON's four whitespace bytes around every token, lines ending in `\r\n`.
        Spaced,
        /// Every object's members in the reverse of the order `serde_json` writes them.
        Reversed,
        SpacedReversed,
    }

    /// JSON text of `value` in `layout`: the same document as `serde_json` writes, with other
    /// whitespace and other member orders than any serde_json writer produces.
    fn write(value: &Value, layout: Layout, depth: usize, out: &mut Vec<u8>) {
        let spaced = matches!(layout, Layout::Spaced | Layout::SpacedReversed);
        let reversed = matches!(layout, Layout::Reversed | Layout::SpacedReversed);
        let newline = |out: &mut Vec<u8>, depth: usize| {
            if spaced {
                out.extend_from_slice(b"\r\n");
                out.extend(std::iter::repeat_n(b'\t', depth));
                out.push(b' ');
            }
        };
        let (open, close, items): (u8, u8, Vec<(Option<&String>, &Value)>) = match value {
            Value::Object(map) => {
                let mut members: Vec<_> = map.iter().map(|(k, v)| (Some(k), v)).collect();
                if reversed {
                    members.reverse();
                }
                (b'{', b'}', members)
            }
            Value::Array(list) => (b'[', b']', list.iter().map(|v| (None, v)).collect()),
            scalar => {
                serde_json::to_writer(&mut *out, scalar).expect("JSON");
                return;
            }
        };
        out.push(open);
        for (i, (key, item)) in items.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(if spaced { b" ," } else { b"," });
            }
            newline(out, depth + 1);
            if let Some(key) = key {
                serde_json::to_writer(&mut *out, key).expect("JSON");
                out.extend_from_slice(if spaced { b" :\t" } else { b":" });
            }
            write(item, layout, depth + 1, out);
        }
        if !items.is_empty() {
            newline(out, depth);
        }
        out.push(close);
    }

    /// xorshift64: a fixed sequence, so a failure repeats.
    struct Seeded(u64);

    impl Seeded {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
            &items[self.below(items.len())]
        }
    }

    /// Single bytes JSON gives meaning to, and others.
    const BYTES: &[u8] = b"\"\\,:{}[] \n0-1.eEtfnux/\x7f\x80\x01";

    /// Text a mutation writes in: escapes, UTF-8 and a lone surrogate, numbers serde reads
    /// and the scan does not, literals, whitespace, jump-pod names.
    const TOKENS: &[&[u8]] = &[
        br#"\u0041"#,
        br#"\u0022"#,
        br#"\""#,
        br#"\\"#,
        "\u{e9}".as_bytes(),
        b"\xed\xa0\x80",
        br#","a":1"#,
        br#"{"controller":true},"#,
        b"1.5",
        b"1e3",
        b"-0",
        b"01",
        b"null",
        b"true",
        b" \t\r\n",
        b"[]",
        b"{}",
        br#""dstack-main-ssh-jump-pod""#,
        b"-ssh-jump-pod",
        b"\x00",
    ];

    /// Members a mutation adds at the start of an object: duplicates of the fields and
    /// labels the scan reads, another kind and operation, a controller, other settings.
    const MEMBERS: &[&[u8]] = &[
        br#""a":1,"#,
        br#""name":"x","#,
        br#""name":null,"#,
        br#""generateName":"dstack-main-ssh-jump-pod-","#,
        br#""app.kubernetes.io/name":"dstack-ssh-proxy","#,
        br#""app.kubernetes.io/name":"web","#,
        br#""labels":{},"#,
        br#""metadata":{},"#,
        br#""ownerReferences":[{"controller":true}],"#,
        br#""controller":true,"#,
        br#""kind":{"group":"apps","kind":"ReplicaSet"},"#,
        br#""kind":"Pod","#,
        br#""operation":"UPDATE","#,
        br#""object":null,"#,
        br#""request":{},"#,
        br#""settings":{"mutate":false},"#,
    ];

    /// Strings that mean something to the scan or to serde, to write over a string.
    const WORDS: &[&[u8]] = &[
        br#""dstack-ssh-proxy""#,
        br#""dstack-main-ssh-jump-pod""#,
        br#""app.kubernetes.io/name""#,
        br#""Pod""#,
        br#""ReplicaSet""#,
        br#""apps""#,
        br#""CREATE""#,
        br#""UPDATE""#,
        br#""name""#,
        br#""labels""#,
        br#""metadata""#,
        br#""object""#,
        br#""controller""#,
        br#""""#,
        br#""x\u0041""#,
        br#""\u00e9""#,
        br#""a\/b""#,
    ];

    /// The strings of JSON text, quotes included, and its `{` outside them: where a mutation
    /// writes one string over another, and where it adds a member.
    fn strings_and_braces(json: &[u8]) -> (Vec<(usize, usize)>, Vec<usize>) {
        let (mut strings, mut braces) = (Vec::new(), Vec::new());
        let (mut open, mut escaped) = (None, false);
        for (at, &b) in json.iter().enumerate() {
            match (open, b) {
                (Some(_), _) if escaped => escaped = false,
                (Some(_), b'\\') => escaped = true,
                (Some(start), b'"') => {
                    strings.push((start, at + 1));
                    open = None;
                }
                (None, b'"') => open = Some(at),
                (None, b'{') => braces.push(at),
                _ => {}
            }
        }
        (strings, braces)
    }

    /// A copy of `payload` with two to four edits: a byte bent, grown or cut, a range cut or
    /// replaced by a token, a range of the payload copied elsewhere, a string written over
    /// by another string of the payload or a word, or a member added at the start of an
    /// object. Half the byte edits land at a quote, where keys and the values the scan
    /// reads start.
    fn mutate(payload: &[u8], rng: &mut Seeded) -> Vec<u8> {
        let mut out = payload.to_vec();
        for _ in 0..2 + rng.below(3) {
            let len = out.len();
            let (found, braces) = strings_and_braces(&out);
            let at = if rng.below(2) == 0 && !found.is_empty() {
                (rng.pick(&found).0 + rng.below(3)).min(len)
            } else {
                rng.below(len + 1)
            };
            let span = (1 + rng.below(16)).min(len - at);
            match rng.below(10) {
                0 if at < len => out[at] = *rng.pick(BYTES),
                1 => out.insert(at, *rng.pick(BYTES)),
                2 if at < len => drop(out.remove(at)),
                3 => drop(out.drain(at..at + span)),
                4 => {
                    let cut = rng.below(span + 1);
                    out.splice(at..at + cut, rng.pick(TOKENS).iter().copied());
                }
                5 => {
                    let from = rng.below(len);
                    let copied = out[from..(from + 1 + rng.below(24)).min(len)].to_vec();
                    out.splice(at..at, copied);
                }
                6 if !found.is_empty() => {
                    let (start, end) = *rng.pick(&found);
                    let (from, to) = *rng.pick(&found);
                    let copied = out[from..to].to_vec();
                    out.splice(start..end, copied);
                }
                7 if !found.is_empty() => {
                    let (start, end) = *rng.pick(&found);
                    out.splice(start..end, rng.pick(WORDS).iter().copied());
                }
                _ if !braces.is_empty() => {
                    let after = rng.pick(&braces) + 1;
                    out.splice(after..after, rng.pick(MEMBERS).iter().copied());
                }
                _ => {}
            }
        }
        out
    }

    /// Reads and answers of one part of the scan test.
    #[derive(Default)]
    struct Tally {
        reads: usize,
        answered: usize,
    }

    impl Tally {
        fn check(&mut self, payload: &[u8]) -> bool {
            let answered = the_scan_answers_what_serde_answers(payload);
            self.reads += 1;
            self.answered += usize::from(answered);
            answered
        }
    }

    /// Ordinary requests and jump pods bent, cut and grown: a byte at a time everywhere in
    /// four compact requests, then seeded samples of several edits at once in the same
    /// requests written with other whitespace, another member order, other settings (some
    /// not valid, which an ordinary pod never reads) and bytes after the payload. Wherever
    /// the scan answers, the serde reads answer the same.
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
        // (request, whether it is ordinary: the scan answers it as it is)
        let bases = [
            (ordinary, true),
            (owned, false),
            (fixture("legacy_bare_pod_create.json"), false),
            (fixture("conforming_jump_pod_create.json"), false),
        ];
        // Each byte bent, grown and cut, and every cut of the payload.
        let mut single = Tally::default();
        for (request, _) in &bases {
            let payload = serde_json::to_vec(&json!({"request": request, "settings": {}})).unwrap();
            single.check(&payload);
            for at in 0..payload.len() {
                single.check(&payload[..at]);
                let mut cut = payload.clone();
                cut.remove(at);
                single.check(&cut);
                for &b in BYTES {
                    let mut bent = payload.clone();
                    bent[at] = b;
                    single.check(&bent);
                    let mut grown = payload.clone();
                    grown.insert(at, b);
                    single.check(&grown);
                }
            }
        }
        // Settings other than `{}`: raised floors, no mutation, none, and documents that are
        // not valid settings (an ordinary pod is accepted without reading them).
        let settings = [
            Some(json!({"cpu": {"minimum": "200m", "default": "1"},
                        "memory": {"minimum": "64Mi", "default": "2Gi"},
                        "ephemeralStorage": {"minimumRequest": "128Mi"}, "mutate": false})),
            Some(json!({"mutate": true, "cpu": {"default": "0.5"}})),
            Some(Value::Null),
            None,
            Some(json!("mutate")),
            Some(json!({"cpu": {"minimum": 100}, "extra": [[], {}, -7, "x"]})),
        ];
        let layouts = [
            Layout::Spaced,
            Layout::Reversed,
            Layout::SpacedReversed,
            Layout::Compact,
        ];
        // After the payload only whitespace may follow: the rest must be refused.
        let trailing: [&[u8]; 10] = [
            b" \r\n\t",
            b"x",
            b"{}",
            b",",
            b"}",
            b"]",
            b"\x00",
            b"0",
            b"\"\"",
            b" {\"request\":{}}",
        ];
        let mut rng = Seeded(0x9e37_79b9_7f4a_7c15);
        let (mut trailed, mut sampled) = (Tally::default(), Tally::default());
        let mut variants = 0;
        for (request, ordinary) in &bases {
            for (i, settings) in settings.iter().enumerate() {
                let layout = layouts[(i + variants) % layouts.len()];
                variants += 1;
                let mut document = json!({"request": request});
                if let Some(settings) = settings {
                    document["settings"] = settings.clone();
                }
                let mut payload = Vec::new();
                write(&document, layout, 0, &mut payload);
                assert_eq!(
                    serde_json::from_slice::<Value>(&payload).expect("JSON"),
                    document
                );
                assert_eq!(
                    trailed.check(&payload),
                    *ordinary,
                    "the scan answers the ordinary request as it is, and only it: {}",
                    String::from_utf8_lossy(&payload)
                );
                for tail in trailing {
                    let grown = [&payload[..], tail].concat();
                    let blank = tail.iter().all(|b| b" \r\n\t".contains(b));
                    assert_eq!(trailed.check(&grown), *ordinary && blank, "{tail:?}");
                }
                for _ in 0..900 {
                    sampled.check(&mutate(&payload, &mut rng));
                }
            }
        }
        eprintln!(
            "the scan answered {} of {} payloads bent a byte at a time, {} of {} with bytes \
             after them, {} of {} with several edits ({variants} layouts and settings)",
            single.answered,
            single.reads,
            trailed.answered,
            trailed.reads,
            sampled.answered,
            sampled.reads
        );
        // Each part must have put answers of the scan to the test.
        for (part, tally) in [
            ("single", &single),
            ("trailing", &trailed),
            ("several", &sampled),
        ] {
            assert!(
                tally.answered * 50 > tally.reads,
                "{part}: {} of {}",
                tally.answered,
                tally.reads
            );
        }
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
