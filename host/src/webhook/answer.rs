//! What an answer needs besides the verdict: the uid of a body that cannot be reviewed (an
//! answer with an empty uid makes the API server count the call as failed), and warnings short
//! enough for the API server to keep.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

/// The longest warning the API server is sure to keep whole: past 256 characters it may cut
/// one (Kubernetes' admission webhook docs, "Response: warnings").
pub const WARNING_MAX: usize = 256;

/// `request.uid` read from the front of a body that may be cut or broken further on. The API
/// server writes it first (Go encodes AdmissionReview's fields, then AdmissionRequest's, in
/// their declared order: kind, apiVersion, request; uid first in it), so a body cut at the size
/// limit or broken after the uid still names the call it answers. Reading stops at the uid;
/// none is found when the body breaks before it or the uid is not a non-empty string.
pub fn request_uid(body: &[u8]) -> Option<String> {
    let mut found = None;
    let mut reader = serde_json::Deserializer::from_slice(body);
    // Stopping is an error that carries nothing: the uid is in `found`.
    let _ = reader.deserialize_map(Review(&mut found));
    found.filter(|uid| !uid.is_empty())
}

/// `uid` of an AdmissionRequest written as JSON: the first one, if it is a non-empty string.
pub fn uid_of_request(request: &str) -> Option<String> {
    let mut found = None;
    let _ = Request(&mut found).deserialize(&mut serde_json::Deserializer::from_str(request));
    found.filter(|uid| !uid.is_empty())
}

/// `kind.kind` of an AdmissionRequest written as JSON (the kind of object it is about), read up
/// to it: the API server writes it second, after the uid.
pub fn kind_of_request(request: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Kind {
        kind: Option<String>,
    }
    let mut found = None;
    let _ = Member {
        key: "kind",
        found: &mut found,
    }
    .deserialize(&mut serde_json::Deserializer::from_str(request));
    found.and_then(|k: Kind| k.kind)
}

/// Reads a map up to its member `key`, into `found`, and stops there.
struct Member<'a, T> {
    key: &'static str,
    found: &'a mut Option<T>,
}

impl<'de, T: serde::Deserialize<'de>> DeserializeSeed<'de> for Member<'_, T> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for Member<'_, T> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a map with `{}`", self.key)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.key {
                *self.found = map.next_value().ok();
                return Err(de::Error::custom(FOUND));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

const FOUND: &str = "found";

struct Review<'a>(&'a mut Option<String>);

impl<'de> Visitor<'de> for Review<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an AdmissionReview")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "request" {
                map.next_value_seed(Request(&mut *self.0))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

struct Request<'a>(&'a mut Option<String>);

impl<'de> DeserializeSeed<'de> for Request<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Request<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an AdmissionRequest")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "uid" {
                if let serde_json::Value::String(uid) = map.next_value()? {
                    *self.0 = Some(uid);
                }
                return Err(de::Error::custom(FOUND));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

/// Warnings the API server keeps whole: one longer than [`WARNING_MAX`] characters becomes one
/// warning per finding (the policy joins its findings with "; "; the first keeps the sentence
/// that says what they are about), and a finding still too long is cut, ending in "…".
/// kubectl prints each warning on a line of its own.
pub fn fit_warnings(warnings: &[String]) -> Vec<String> {
    warnings
        .iter()
        .flat_map(|warning| {
            if warning.chars().count() <= WARNING_MAX {
                vec![warning.clone()]
            } else {
                warning.split("; ").map(cut).collect()
            }
        })
        .collect()
}

fn cut(text: &str) -> String {
    if text.chars().count() <= WARNING_MAX {
        text.to_owned()
    } else {
        let mut short: String = text.chars().take(WARNING_MAX - 1).collect();
        short.push('…');
        short
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const REQUEST: &str = r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u-1","kind":{"kind":"Pod"},"object":{"metadata":{"uid":"not-this-one"}}}}"#;

    #[rstest]
    #[case::a_whole_review(REQUEST, Some("u-1"))]
    #[case::a_review_cut_after_its_uid(&REQUEST[..REQUEST.find("\"object\"").unwrap() + 12], Some("u-1"))]
    #[case::a_review_broken_after_its_uid(
        r#"{"kind":"AdmissionReview","request":{"uid":"u-2","object":{"spec": nope}}}"#,
        Some("u-2")
    )]
    #[case::a_uid_after_the_object(
        r#"{"request":{"object":{"metadata":{"uid":"x"}},"uid":"u-3"}}"#,
        Some("u-3")
    )]
    #[case::a_body_broken_before_the_uid(r#"{"request":{"object": nope, "uid":"u-4"}}"#, None)]
    #[case::a_body_cut_before_the_uid(r#"{"kind":"AdmissionReview","request":{"ui"#, None)]
    #[case::an_empty_uid(r#"{"request":{"uid":""}}"#, None)]
    #[case::a_uid_that_is_no_string(r#"{"request":{"uid":5}}"#, None)]
    #[case::only_an_objects_uid(r#"{"request":{"object":{"metadata":{"uid":"x"}}}}"#, None)]
    #[case::not_json("<html>", None)]
    fn the_request_uid_is_read_up_to_where_the_body_breaks(
        #[case] body: &str,
        #[case] uid: Option<&str>,
    ) {
        assert_eq!(request_uid(body.as_bytes()).as_deref(), uid);
    }

    #[rstest]
    #[case::a_pod(
        r#"{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"object":{}}"#,
        Some("Pod")
    )]
    #[case::a_replicaset_before_its_uid(
        r#"{"kind":{"group":"apps","kind":"ReplicaSet"},"uid":"u"}"#,
        Some("ReplicaSet")
    )]
    #[case::a_request_broken_after_its_kind(
        r#"{"uid":"u","kind":{"kind":"ReplicaSet"},"object":{nope"#,
        Some("ReplicaSet")
    )]
    #[case::a_kind_of_the_wrong_shape(r#"{"uid":"u","kind":"Pod"}"#, None)]
    #[case::no_kind(r#"{"uid":"u","object":{"kind":"Pod"}}"#, None)]
    fn the_requests_kind_is_read_up_to_where_it_is(
        #[case] request: &str,
        #[case] kind: Option<&str>,
    ) {
        assert_eq!(kind_of_request(request).as_deref(), kind);
    }

    #[test]
    fn a_long_warning_becomes_one_warning_per_finding_each_kept_whole() {
        let finding = |n: usize| format!("container \"c{n}\": {}", "x".repeat(90));
        let long = format!(
            "jump pod \"p\" does not meet the jump-pod contract: {}",
            (0..3).map(finding).collect::<Vec<_>>().join("; ")
        );
        let short = "label not set".to_owned();
        let fitted = fit_warnings(&[long.clone(), short.clone()]);
        assert_eq!(
            fitted,
            vec![
                format!(
                    "jump pod \"p\" does not meet the jump-pod contract: {}",
                    finding(0)
                ),
                finding(1),
                finding(2),
                short
            ]
        );
        assert!(fitted.iter().all(|w| w.chars().count() <= WARNING_MAX));
        assert_eq!(fitted[..3].join("; "), long, "nothing is lost");
    }

    #[test]
    fn a_finding_longer_than_the_api_server_keeps_is_cut_with_an_ellipsis() {
        let fitted = fit_warnings(&[format!("{}; short", "é".repeat(300))]);
        assert_eq!(
            fitted,
            vec![format!("{}…", "é".repeat(WARNING_MAX - 1)), "short".into()]
        );
        assert_eq!(fitted[0].chars().count(), WARNING_MAX);
    }
}
