//! A JSON document borrowed from the request, written back byte for byte as serde_json writes a
//! `Value` read from the same text: a mutation returns the whole pod, and reading it into a
//! `Value` to write it again cost an allocation per string and per map node, and most of the
//! mutation's time.
//!
//! What a `Value` does, this does: keys in byte order (serde_json's `Map` is a `BTreeMap`
//! here: no `preserve_order`), the last of duplicate keys kept, numbers held as serde_json's
//! `Number` and strings written by its serializer. A map whose first key is serde_json's
//! private raw-value token, which a `Value` reads in a way of its own, is refused: the caller
//! reads that document into a `Value`.

use crate::view::Text;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Number;
use std::borrow::Cow;
use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Members<'a>),
}

/// An object's members, sorted by key, keys distinct: a `Value`'s map.
pub type Members<'a> = Vec<(Cow<'a, str>, Json<'a>)>;

impl<'a> Json<'a> {
    /// The member `key` of an object (None for any other value), as `Value::get_mut`.
    pub fn member_mut(&mut self, key: &str) -> Option<&mut Json<'a>> {
        let Json::Object(members) = self else {
            return None;
        };
        let at = position(members, key).ok()?;
        Some(&mut members[at].1)
    }

    /// The element `index` of an array (None for any other value), as `Value::get_mut`.
    pub fn element_mut(&mut self, index: usize) -> Option<&mut Json<'a>> {
        match self {
            Json::Array(items) => items.get_mut(index),
            _ => None,
        }
    }

    pub fn as_object_mut(&mut self) -> Option<&mut Members<'a>> {
        match self {
            Json::Object(members) => Some(members),
            _ => None,
        }
    }
}

fn position(members: &Members<'_>, key: &str) -> Result<usize, usize> {
    members.binary_search_by(|(k, _)| k.as_bytes().cmp(key.as_bytes()))
}

/// Sets `key` to `value`, replacing the value there, as `Map::insert`.
pub fn insert<'a>(members: &mut Members<'a>, key: &'a str, value: Json<'a>) {
    match position(members, key) {
        Ok(at) => members[at].1 = value,
        Err(at) => members.insert(at, (Cow::Borrowed(key), value)),
    }
}

/// The object at `key`, replacing an absent or non-object value with `{}`.
pub fn object_at<'m, 'a>(members: &'m mut Members<'a>, key: &'a str) -> &'m mut Members<'a> {
    let at = match position(members, key) {
        Ok(at) => at,
        Err(at) => {
            members.insert(at, (Cow::Borrowed(key), Json::Object(Vec::new())));
            at
        }
    };
    let slot = &mut members[at].1;
    if !matches!(slot, Json::Object(_)) {
        *slot = Json::Object(Vec::new());
    }
    match slot {
        Json::Object(members) => members,
        // Made an object just above.
        _ => unreachable!(),
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Json<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Number::from_f64(v).map_or(Json::Null, Json::Number))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Owned(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        Json::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Some(Text(first)) = map.next_key::<Text<'de>>()? else {
            return Ok(Json::Object(Vec::new()));
        };
        // A `Value` reads such a map as the JSON in its string (serde_json's raw value).
        if first.starts_with("$serde_json::private::") {
            return Err(de::Error::custom("left to serde_json's Value"));
        }
        let mut members = vec![(first, map.next_value()?)];
        while let Some((Text(key), value)) = map.next_entry::<Text<'de>, Json<'de>>()? {
            members.push((key, value));
        }
        Ok(Json::Object(sorted(members)))
    }
}

/// The members in a `BTreeMap`'s order, a later duplicate replacing an earlier one.
fn sorted(members: Members<'_>) -> Members<'_> {
    let members = stable_sort(members);
    if !members.windows(2).any(|pair| pair[0].0 == pair[1].0) {
        return members;
    }
    let mut distinct: Members<'_> = Vec::with_capacity(members.len());
    for member in members {
        match distinct.last_mut() {
            Some(last) if last.0 == member.0 => *last = member,
            _ => distinct.push(member),
        }
    }
    distinct
}

/// Sorts by key, equal keys kept in the order read. A merge sort of a few lines: the standard
/// library's stable sort is 7 KB of Wasm, and an object has a handful of members.
fn stable_sort(mut members: Members<'_>) -> Members<'_> {
    if members.len() <= 16 {
        for i in 1..members.len() {
            let mut j = i;
            while j > 0 && members[j - 1].0 > members[j].0 {
                members.swap(j - 1, j);
                j -= 1;
            }
        }
        return members;
    }
    let right = members.split_off(members.len() / 2);
    let (left, right) = (stable_sort(members), stable_sort(right));
    let mut merged = Vec::with_capacity(left.len() + right.len());
    let (mut left, mut right) = (left.into_iter().peekable(), right.into_iter().peekable());
    // Of equal keys the left one first: stable.
    while let (Some(l), Some(r)) = (left.peek(), right.peek()) {
        let next = if r.0 < l.0 { right.next() } else { left.next() };
        merged.extend(next);
    }
    merged.extend(left);
    merged.extend(right);
    merged
}

/// Written as serde_json writes a `Value`.
impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => serializer.serialize_unit(),
            Json::Bool(b) => serializer.serialize_bool(*b),
            Json::Number(n) => n.serialize(serializer),
            Json::String(s) => serializer.serialize_str(s),
            Json::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(members) => {
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (key, value) in members {
                    map.serialize_entry(key.as_ref(), value)?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::Value;

    #[rstest]
    #[case::keys_out_of_order(r#"{"b": 1, "a": {"d": [], "c": {}}, "": null}"#)]
    #[case::a_later_duplicate_wins(r#"{"a": 1, "b": 2, "a": 3, "a": {"x": 4}}"#)]
    #[case::many_members_with_duplicates(
        r#"{"k9":1,"k8":2,"k7":3,"k6":4,"k5":5,"k4":6,"k3":7,"k2":8,"k1":9,"k0":10,"j9":1,"j8":2,"j7":3,"j6":4,"j5":5,"j4":6,"j3":7,"j2":8,"k5":"again","j0":[1,2]}"#
    )]
    #[case::escapes_and_unicode(r#"{"\u00e9\/\"": "a\u0001\ud83d\ude00\t", "é": "\\", "z": "Ω"}"#)]
    #[case::numbers(r#"[0, -0, 1.0, -1.5e3, 1e-7, 18446744073709551615, -9223372036854775808, 1e308, 12345678901234567890123]"#)]
    #[case::scalars(r#"[true, false, null, "", {}, []]"#)]
    #[case::the_raw_value_token_later_is_a_key(
        r#"{"a": 1, "$serde_json::private::RawValue": "[1]"}"#
    )]
    fn is_written_as_a_value_read_from_the_same_text(#[case] text: &str) {
        let json: Json = serde_json::from_slice(text.as_bytes()).expect("read");
        let value: Value = serde_json::from_slice(text.as_bytes()).expect("read");
        assert_eq!(
            serde_json::to_string(&json).unwrap(),
            serde_json::to_string(&value).unwrap()
        );
    }

    #[test]
    fn a_map_a_value_reads_its_own_way_is_refused() {
        let text = r#"{"$serde_json::private::RawValue": "[1, 2]"}"#;
        assert!(serde_json::from_str::<Json>(text).is_err());
        // A Value reads the string's JSON.
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(value, serde_json::json!([1, 2]));
    }
}
