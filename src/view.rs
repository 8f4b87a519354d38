//! A borrowed view of a pod: exactly the fields the rules and the mutation read (metadata name
//! and labels, owner references, and per container its name and resources), straight from the
//! request's JSON. Everything else (annotations, managed fields, images, volumes, status) is
//! skipped unread instead of being built into a k8s-openapi `Pod`.
//!
//! The view accepts what k8s-openapi accepts for these fields and reads the same values from it
//! (a quantity written as a JSON number becomes its decimal text, a duplicate map key keeps
//! its last value, `null` is absent). Where it is stricter (a duplicate field, `apiVersion`
//! or `kind` of another object), the caller falls back to the typed parse, which then names
//! the problem exactly as before.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// Text borrowed from the JSON where it has no escapes, owned where it had to be unescaped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl Text<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TextVisitor { numbers: false })
    }
}

/// A quantity's text. k8s-openapi's `Quantity` also takes a JSON number and keeps its
/// decimal rendering; so does the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantityText<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for QuantityText<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(TextVisitor { numbers: true })
            .map(|t| QuantityText(t.0))
    }
}

struct TextVisitor {
    numbers: bool,
}

impl TextVisitor {
    fn number<E: de::Error>(
        &self,
        text: String,
        unexpected: de::Unexpected,
    ) -> Result<Text<'static>, E> {
        if self.numbers {
            Ok(Text(Cow::Owned(text)))
        } else {
            Err(E::invalid_type(unexpected, self))
        }
    }
}

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.numbers {
            "a quantity"
        } else {
            "a string"
        })
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.number(v.to_string(), de::Unexpected::Signed(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.number(v.to_string(), de::Unexpected::Unsigned(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.number(v.to_string(), de::Unexpected::Float(v))
    }
}

/// A JSON object read as its pairs in order (no tree, no hashing); its keys are distinct.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs<'a, V>(pub Vec<(Text<'a>, V)>);

impl<V> Pairs<'_, V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

/// More pairs than this and the view leaves the object to the typed parse: checking for
/// duplicate keys is quadratic, and labels and resources hold a handful.
const MAX_PAIRS: usize = 64;

impl<'de: 'a, 'a, V: Deserialize<'de>> Deserialize<'de> for Pairs<'a, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PairsVisitor<'a, V>(std::marker::PhantomData<(&'a (), V)>);
        impl<'de: 'a, 'a, V: Deserialize<'de>> Visitor<'de> for PairsVisitor<'a, V> {
            type Value = Pairs<'a, V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut pairs: Vec<(Text<'a>, V)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<Text<'a>, V>()? {
                    // A duplicate key is refused, as the metadata pre-parse (a struct) refuses
                    // a duplicate `app.kubernetes.io/name`: the typed parse then decides.
                    if pairs.len() == MAX_PAIRS || pairs.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom("left to the typed parse"));
                    }
                    pairs.push((key, value));
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(PairsVisitor(std::marker::PhantomData))
    }
}

/// Reads a struct from a JSON object only: serde's derived structs also take an array of
/// their fields, which k8s-openapi (and so the typed parse) refuses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    // One copy of each object's reading code, however many places read it.
    #[inline(never)]
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

impl<T> std::ops::Deref for Object<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Object<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// A string that may be absent but not `null` (k8s-openapi reads `apiVersion` and `kind` as
/// `String`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Present<'a>(pub Option<Text<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Present<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Text::deserialize(deserializer).map(|t| Present(Some(t)))
    }
}

pub type Amounts<'a> = Pairs<'a, QuantityText<'a>>;

/// Below serde_json's recursion limit (128), with room for the request around the object.
pub const NESTING_LIMIT: usize = 100;

// Every field's type decides how it is read (no `deserialize_with`): fields of one type share
// one instance of the reading code, which keeps the module small.

/// The view of a pod; `S` is how its spec is held: read ([`SpecView`]), or kept as raw JSON
/// ([`PodHead`]) until a jump pod needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "S: Deserialize<'de>"))]
pub struct PodView<'a, S = Object<SpecView<'a>>> {
    #[serde(borrow, default)]
    pub api_version: Present<'a>,
    #[serde(borrow, default)]
    pub kind: Present<'a>,
    #[serde(borrow, default)]
    pub metadata: Option<Object<MetaView<'a>>>,
    #[serde(default)]
    pub spec: Option<S>,
}

/// A pod read for its metadata, its spec left unread: every pod in the policy's scope is
/// read this far, and only a jump pod's spec is read further (most pods are not jump pods).
pub type PodHead<'a> = PodView<'a, &'a RawValue>;

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetaView<'a> {
    #[serde(borrow, default)]
    pub name: Option<Text<'a>>,
    /// A pod a controller creates has no name yet at admission, only this prefix.
    #[serde(borrow, default)]
    pub generate_name: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub labels: Option<Pairs<'a, Text<'a>>>,
    #[serde(default)]
    pub owner_references: Option<Owners>,
}

/// What the rules need of `ownerReferences`: whether one of them is the controller. Each
/// reference is read (an object, `controller` a boolean), none is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owners {
    pub controlled: bool,
}

impl<'de> Deserialize<'de> for Owners {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OwnersVisitor;
        impl<'de> Visitor<'de> for OwnersVisitor {
            type Value = Owners;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of owner references")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Owners, A::Error> {
                let mut controlled = false;
                while let Some(Object(owner)) = seq.next_element::<Object<OwnerView>>()? {
                    controlled |= owner.controller == Some(true);
                }
                Ok(Owners { controlled })
            }
        }
        deserializer.deserialize_seq(OwnersVisitor)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerView {
    #[serde(default)]
    pub controller: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecView<'a> {
    #[serde(borrow, default)]
    pub containers: Option<Vec<Object<ContainerView<'a>>>>,
    #[serde(borrow, default)]
    pub init_containers: Option<Vec<Object<ContainerView<'a>>>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView<'a> {
    #[serde(borrow, default)]
    pub name: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub resources: Option<Object<ResourcesView<'a>>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesView<'a> {
    #[serde(borrow, default)]
    pub requests: Option<Amounts<'a>>,
    #[serde(borrow, default)]
    pub limits: Option<Amounts<'a>>,
}

/// Either list of containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    Containers,
    InitContainers,
}

impl<'a> PodView<'a> {
    /// Reads the view from a pod's JSON, or None where the typed parse must decide (and
    /// name the problem).
    pub fn read(json: &'a str) -> Option<PodView<'a>> {
        if !nests_less_than(json.as_bytes(), NESTING_LIMIT) {
            return None;
        }
        // From bytes, as the policy reads its payload: one instance of the view's code.
        let Object(head) = serde_json::from_slice::<Object<PodHead<'a>>>(json.as_bytes()).ok()?;
        head.is_a_pod().then(|| head.read_spec()).flatten()
    }
}

impl<'a> PodHead<'a> {
    /// Reads the spec the head kept raw, or None where the typed parse must decide.
    pub fn read_spec(self) -> Option<PodView<'a>> {
        let spec = match self.spec {
            Some(raw) => Some(serde_json::from_slice(raw.get().as_bytes()).ok()?),
            None => None,
        };
        Some(PodView {
            api_version: self.api_version,
            kind: self.kind,
            metadata: self.metadata,
            spec,
        })
    }
}

impl<'a, S> PodView<'a, S> {
    /// k8s-openapi refuses a `Pod` whose `apiVersion` or `kind` names another object.
    pub fn is_a_pod(&self) -> bool {
        self.api_version
            .0
            .as_ref()
            .is_none_or(|v| v.as_str() == "v1")
            && self.kind.0.as_ref().is_none_or(|k| k.as_str() == "Pod")
    }

    pub fn name(&self) -> Option<&str> {
        self.metadata.as_ref()?.name.as_ref().map(Text::as_str)
    }

    pub fn labels(&self) -> Option<&Pairs<'a, Text<'a>>> {
        self.metadata.as_ref()?.labels.as_ref()
    }

    /// Whether a controller owns the pod (a ReplicaSet's pod, not a bare one).
    pub fn is_controlled(&self) -> bool {
        self.metadata
            .as_ref()
            .and_then(|m| m.owner_references.as_ref())
            .is_some_and(|o| o.controlled)
    }
}

impl<'a> PodView<'a> {
    /// The view of a typed pod (borrowing its strings).
    pub fn of_pod(pod: &'a Pod) -> PodView<'a> {
        let meta = &pod.metadata;
        PodView {
            api_version: Present(None),
            kind: Present(None),
            metadata: Some(Object(MetaView {
                name: meta.name.as_deref().map(borrowed),
                generate_name: meta.generate_name.as_deref().map(borrowed),
                labels: meta.labels.as_ref().map(|labels| {
                    Pairs(
                        labels
                            .iter()
                            .map(|(k, v)| (borrowed(k), borrowed(v)))
                            .collect(),
                    )
                }),
                owner_references: meta.owner_references.as_ref().map(|owners| Owners {
                    controlled: owners.iter().any(|o| o.controller == Some(true)),
                }),
            })),
            spec: pod
                .spec
                .as_ref()
                .map(|spec| Object(SpecView::of_spec(spec))),
        }
    }
}

fn borrowed(text: &str) -> Text<'_> {
    Text(Cow::Borrowed(text))
}

impl<'a> SpecView<'a> {
    /// Regular containers, then init containers, each with its list and index.
    pub fn all(&self) -> impl Iterator<Item = (List, usize, &ContainerView<'a>)> {
        let regular = self.containers.iter().flatten().enumerate();
        let init = self.init_containers.iter().flatten().enumerate();
        regular
            .map(|(i, c)| (List::Containers, i, &c.0))
            .chain(init.map(|(i, c)| (List::InitContainers, i, &c.0)))
    }

    /// The view of a typed spec (borrowing its strings).
    pub fn of_spec(spec: &'a PodSpec) -> SpecView<'a> {
        SpecView {
            containers: Some(
                spec.containers
                    .iter()
                    .map(|c| Object(ContainerView::of_container(c)))
                    .collect(),
            ),
            init_containers: spec.init_containers.as_ref().map(|list| {
                list.iter()
                    .map(|c| Object(ContainerView::of_container(c)))
                    .collect()
            }),
        }
    }
}

impl<'a> ContainerView<'a> {
    pub fn name(&self) -> &str {
        self.name.as_ref().map_or("", Text::as_str)
    }

    pub fn requests(&self) -> Option<&Amounts<'a>> {
        self.resources.as_ref()?.requests.as_ref()
    }

    pub fn limits(&self) -> Option<&Amounts<'a>> {
        self.resources.as_ref()?.limits.as_ref()
    }

    fn of_container(container: &'a Container) -> ContainerView<'a> {
        let amounts = |map: &'a std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >| {
            Pairs(
                map.iter()
                    .map(|(k, q)| (borrowed(k), QuantityText(Cow::Borrowed(q.0.as_str()))))
                    .collect(),
            )
        };
        ContainerView {
            name: Some(borrowed(&container.name)),
            resources: container.resources.as_ref().map(|r| {
                Object(ResourcesView {
                    requests: r.requests.as_ref().map(amounts),
                    limits: r.limits.as_ref().map(amounts),
                })
            }),
        }
    }
}

/// Whether JSON text nests fewer than `limit` arrays and objects deep. The view skips what it
/// does not read without recursing, while the typed parse refuses nesting beyond serde_json's
/// recursion limit (128): a deeper object is left to the typed parse to refuse.
pub fn nests_less_than(json: &[u8], limit: usize) -> bool {
    // Fewer brackets than the limit cannot nest that deep, and counting them is several times
    // faster than following the strings: most pods, jump pods among them, stop here.
    if opening_brackets(json, limit) < limit {
        return true;
    }
    let mut depth = 0usize;
    let mut bytes = json.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'{' | b'[' => {
                depth += 1;
                if depth >= limit {
                    return false;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                // Skip the string; an escaped quote does not end it.
                while let Some(&c) = bytes.next() {
                    match c {
                        b'"' => break,
                        b'\\' => {
                            bytes.next();
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    true
}

/// How many `{` and `[` bytes `json` holds, counted a block at a time until `limit` is
/// reached (so possibly a little past it).
fn opening_brackets(json: &[u8], limit: usize) -> usize {
    // Native code turns a byte count into vector code; Wasm (without its SIMD extension)
    // runs it byte by byte, and counts faster eight bytes to a word.
    let count = if cfg!(target_arch = "wasm32") {
        opening_brackets_in_words
    } else {
        opening_brackets_in_bytes
    };
    let mut total = 0;
    for block in json.chunks(248) {
        total += count(block);
        if total >= limit {
            break;
        }
    }
    total
}

/// For a block of at most 255 bytes: the count is kept in a byte, which vectorises best.
/// `b | 0x20` is `{` exactly when `b` is `{` or `[`.
fn opening_brackets_in_bytes(block: &[u8]) -> usize {
    let count = block
        .iter()
        .fold(0u8, |n, &b| n.wrapping_add(u8::from(b | 0x20 == b'{')));
    usize::from(count)
}

fn opening_brackets_in_words(block: &[u8]) -> usize {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut words = block.chunks_exact(8);
    let mut count = 0;
    for word in &mut words {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            continue;
        };
        let x = (u64::from_le_bytes(word) | 0x2020_2020_2020_2020) ^ 0x7b7b_7b7b_7b7b_7b7b;
        // The high bit of each zero byte of `x`, and of no other (no carry crosses bytes).
        let zeros = !(((x & LOW7) + LOW7) | x | LOW7);
        count += zeros.count_ones() as usize;
    }
    count + opening_brackets_in_bytes(words.remainder())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::{Value, json};

    /// A container as the rules see it: list, index, name, and each side's value per resource.
    type ReadContainer = (List, usize, String, Vec<(String, Option<String>)>);

    fn typed_agrees(text: &str) {
        let typed: Result<Pod, _> = serde_json::from_str(text);
        match (PodView::read(text), typed) {
            (Some(view), Ok(typed)) => {
                let from_typed = PodView::of_pod(&typed);
                assert_eq!(view.name(), from_typed.name(), "{text}");
                assert_eq!(view.is_controlled(), from_typed.is_controlled(), "{text}");
                let labels = |v: &PodView| {
                    v.labels().map(|l| {
                        let mut all: Vec<_> =
                            l.0.iter()
                                .map(|(k, _)| {
                                    (
                                        k.as_str().to_owned(),
                                        l.get(k.as_str()).unwrap().as_str().to_owned(),
                                    )
                                })
                                .collect();
                        all.sort();
                        all.dedup();
                        all
                    })
                };
                assert_eq!(labels(&view), labels(&from_typed), "{text}");
                let containers = |v: &PodView| -> Vec<ReadContainer> {
                    v.spec
                        .iter()
                        .flat_map(|s| s.all())
                        .map(|(list, i, c)| {
                            let mut read = Vec::new();
                            for (side, map) in [("requests", c.requests()), ("limits", c.limits())]
                            {
                                for key in ["cpu", "memory", "ephemeral-storage"] {
                                    read.push((
                                        format!("{side}.{key}"),
                                        map.and_then(|m| m.get(key)).map(|q| q.0.to_string()),
                                    ));
                                }
                            }
                            (list, i, c.name().to_owned(), read)
                        })
                        .collect()
                };
                assert_eq!(containers(&view), containers(&from_typed), "{text}");
            }
            (Some(_), Err(e)) => panic!("the view read what the typed parse refuses ({e}): {text}"),
            (None, _) => {}
        }
    }

    /// Escapes in every string the view reads: the name, label keys and values, a
    /// container's name, resource names and quantities (`\u` escapes, a surrogate pair, the
    /// short escapes). Raw text: a Rust literal would resolve `\u{..}` before JSON sees it.
    const ESCAPED: &str = r#"{"metadata": {"name": "a\"b\u0041", "labels": {"k\n": "v\\",
        "app.kubernetes.io\/name": "dstack\u002Dssh-proxy", "\u00e9": "\ud83d\ude00"}},
        "spec": {"containers": [{"name": "\u00e9\t", "resources": {"requests": {"cpu": "5\u0030m",
        "m\u0065mory": "1\u0047i"}, "limits": {"\u0063pu": "\u0035\u0030m"}}}]}}"#;

    /// Duplicate keys where the view reads: a label and a quantity. Raw text: `json!`
    /// keeps only one of two equal keys.
    const DUPLICATED: &str = r#"{"metadata": {"name": "p", "labels": {"a": "b", "a": "c"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "cpu": "2"}}}]}}"#;

    #[rstest]
    #[case::a_full_pod(r#"{"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "b", "c": "d"}, "annotations": {"x": "y"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": 5, "cpu": 0.5}}}],
                 "initContainers": [{"name": "i", "resources": null}]}}"#)]
    #[case::nulls_everywhere(r#"{"metadata": {"name": null, "labels": null, "ownerReferences": null},
        "spec": {"containers": null, "initContainers": [{"name": null, "resources": {"requests": null}}]}}"#)]
    #[case::escaped_strings(ESCAPED)]
    #[case::spec_null(r#"{"metadata": {"name": "p"}, "spec": null}"#)]
    #[case::metadata_null(r#"{"metadata": null}"#)]
    fn the_view_reads_what_the_typed_pod_holds(#[case] text: &str) {
        typed_agrees(text);
        assert!(PodView::read(text).is_some());
    }

    #[test]
    fn escapes_are_read_as_the_text_they_stand_for() {
        let view = PodView::read(ESCAPED).expect("the view reads escaped strings");
        assert_eq!(view.name(), Some("a\"bA"));
        let labels = view.labels().expect("labels");
        assert_eq!(
            labels.get("app.kubernetes.io/name").map(Text::as_str),
            Some("dstack-ssh-proxy")
        );
        assert_eq!(labels.get("\u{e9}").map(Text::as_str), Some("\u{1f600}"));
        let (_, _, container) = view.spec.as_ref().unwrap().all().next().unwrap();
        assert_eq!(container.name(), "\u{e9}\t");
        let quantity =
            |map: Option<&Amounts>, key| map.and_then(|m| m.get(key)).map(|q| q.0.to_string());
        assert_eq!(
            quantity(container.requests(), "cpu").as_deref(),
            Some("50m")
        );
        assert_eq!(
            quantity(container.requests(), "memory").as_deref(),
            Some("1Gi")
        );
        assert_eq!(quantity(container.limits(), "cpu").as_deref(), Some("50m"));
    }

    #[test]
    fn a_duplicate_key_is_left_to_the_typed_parse_which_keeps_the_last() {
        assert!(PodView::read(DUPLICATED).is_none());
        let typed: Pod = serde_json::from_str(DUPLICATED).expect("the typed parse reads it");
        assert_eq!(typed.metadata.labels.unwrap()["a"], "c");
        let requests = typed.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap();
        assert_eq!(requests["cpu"].0, "2");
        // So a jump pod is judged by the last of two requests, whichever order they come in.
        let judge = |first: &str, last: &str| {
            let text = format!(
                r#"{{"metadata": {{"name": "dstack-main-ssh-jump-pod-x7k2q", "labels": {{"app.kubernetes.io/name": "dstack-ssh-proxy"}}}},
                   "spec": {{"containers": [{{"name": "c", "resources": {{
                     "requests": {{"cpu": "{first}", "memory": "1Gi", "ephemeral-storage": "64Mi", "cpu": "{last}"}},
                     "limits": {{"cpu": "500m", "memory": "1Gi"}}}}}}]}}}}"#
            );
            let object = RawValue::from_string(text).unwrap();
            // The kit off: the verdict is the resources' alone.
            let settings = RawValue::from_string(r#"{"kit": false}"#.into()).unwrap();
            crate::admission::judge(
                crate::admission::Request {
                    group: "",
                    kind: "Pod",
                    operation: "CREATE",
                    name: None,
                    object: Some(crate::admission::Object::Raw {
                        object: &object,
                        old: None,
                    }),
                },
                Some(&settings),
            )
        };
        assert_eq!(judge("50m", "500m"), crate::Verdict::accept());
        let rejected = judge("500m", "50m");
        assert!(
            matches!(&rejected, crate::Verdict::Reject(rejection)
                if rejection.message().contains("cpu request 50m is not equal to its limit 500m")),
            "{rejected:?}"
        );
    }

    #[rstest]
    #[case::resources_as_a_list(json!({"spec": {"containers": [{"name": "c", "resources": [{"cpu": "1"}]}]}}))]
    #[case::containers_as_a_string(json!({"spec": {"containers": "sshd"}}))]
    #[case::a_container_as_a_list(json!({"spec": {"containers": [["c"]]}}))]
    #[case::labels_as_a_list(json!({"metadata": {"labels": ["dstack-ssh-proxy"]}}))]
    #[case::a_label_value_that_is_a_number(json!({"metadata": {"labels": {"a": 7}}}))]
    #[case::a_quantity_that_is_null(json!({"spec": {"containers": [{"resources": {"requests": {"cpu": null}}}]}}))]
    #[case::a_quantity_that_is_a_boolean(json!({"spec": {"containers": [{"resources": {"requests": {"cpu": true}}}]}}))]
    #[case::another_kind(json!({"kind": "Deployment", "metadata": {"name": "p"}}))]
    #[case::another_api_version(json!({"apiVersion": "v2", "metadata": {"name": "p"}}))]
    #[case::a_null_kind(json!({"kind": null}))]
    #[case::the_pod_as_a_list(json!([{"name": "p"}]))]
    #[case::a_controller_flag_that_is_a_string(json!({"metadata": {"ownerReferences": [{"controller": "true"}]}}))]
    fn what_the_typed_parse_refuses_the_view_leaves_to_it(#[case] pod: Value) {
        let text = pod.to_string();
        assert!(
            serde_json::from_str::<Pod>(&text).is_err(),
            "the typed parse refuses {text}"
        );
        assert!(PodView::read(&text).is_none(), "{text}");
    }

    #[test]
    fn fields_the_rules_do_not_read_are_skipped_unread() {
        // The API server decodes every object into its Go types before admission, so a
        // mistyped field it does not read never reaches the policy: the view does not check
        // one, where the typed parse would refuse it.
        let text = r#"{"metadata": {"name": "p", "annotations": 5, "ownerReferences": [{"uid": 5}]},
                       "spec": {"nodeName": 7, "containers": [{"name": "c", "image": []}]}}"#;
        assert!(serde_json::from_str::<Pod>(text).is_err());
        let view = PodView::read(text).expect("read");
        assert_eq!(view.name(), Some("p"));
    }

    #[test]
    fn duplicate_keys_are_left_to_the_typed_parse() {
        for text in [
            r#"{"metadata": {"labels": {"a": "b", "a": "c"}}}"#,
            r#"{"spec": {"containers": [{"resources": {"requests": {"cpu": "1", "cpu": "2"}}}]}}"#,
            r#"{"metadata": {"name": "a", "name": "b"}}"#,
        ] {
            assert!(PodView::read(text).is_none(), "{text}");
        }
    }

    #[rstest]
    #[case::shallow(r#"{"a": [[{"b": "[[[["}]]]}"#, 5, true)]
    #[case::escaped_quotes_do_not_end_strings(r#"["\"[[[[[[", 1]"#, 2, true)]
    #[case::at_the_limit("[[[[[]]]]]", 5, false)]
    fn nesting_is_counted_outside_strings(
        #[case] text: &str,
        #[case] limit: usize,
        #[case] less: bool,
    ) {
        assert_eq!(nests_less_than(text.as_bytes(), limit), less);
    }

    #[test]
    fn brackets_are_counted_exactly_at_every_byte_value_and_offset() {
        for offset in 0..8 {
            let bytes: Vec<u8> = (0..offset)
                .map(|_| b'a')
                .chain((0..=255u8).cycle().take(777))
                .collect();
            let naive = bytes.iter().filter(|&&b| b == b'{' || b == b'[').count();
            assert_eq!(
                opening_brackets(&bytes, usize::MAX),
                naive,
                "offset {offset}"
            );
            for count in [opening_brackets_in_words, opening_brackets_in_bytes] {
                let blocks: usize = bytes.chunks(248).map(count).sum();
                assert_eq!(blocks, naive, "offset {offset}");
            }
        }
    }

    #[test]
    fn counting_stops_at_the_first_block_that_reaches_the_limit() {
        let bytes = [b'{'; 1000];
        assert_eq!(opening_brackets(&bytes, 3), 248);
    }
}
