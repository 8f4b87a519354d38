//! The mutated pod written as the request's own text with the fills spliced in.
//!
//! A mutation answers the whole pod, and reading all of it into a tree to write it again was
//! most of the mutation's cost. Where the request's text is compact JSON that reads the same
//! however it is read ([`Checked`]: no whitespace, each object's keys distinct, JSON's escapes
//! with surrogates paired, integers only), the answer is that text with the fills written into
//! the few objects they reach: those objects are opened one level at a time ([`Spliced`]) and
//! every other member is copied as it stands. A fill goes in key order into an object whose
//! keys are in order, else last. Any other text is read whole by [`crate::json`].
//!
//! So the answer is the same value as a whole read's, and the same JSONPatch from the request
//! (the patch is the difference of the two values). Where the text is what serde_json writes for
//! a `Value` (keys in order, serde_json's escapes), as `eval`, the gate and kwctl write the
//! payload, the answer is byte for byte what a `Value` would write. `jumppod webhook` forwards
//! the API server's own text: Go writes fields in their declared order and escapes `<`, `>` and
//! `&` as `\u003c`, `\u003e` and `\u0026`, which the answer keeps.

use crate::mutate::{Document, Mutation};
use std::borrow::Cow;

/// Checked JSON text (`Checker`), and where each of its objects and arrays ends.
#[derive(Debug, PartialEq)]
pub struct Checked<'t> {
    text: &'t str,
    /// (start, end) of every object and array, by start: the check found them, so opening
    /// one skips its members' objects without reading them again.
    containers: Vec<(usize, usize)>,
}

/// A value of checked text (the whole text, or the object [`Checked::into_object_at`] found),
/// to write back with a mutation's fills.
#[derive(Debug, PartialEq)]
pub struct Span<'t> {
    checked: Checked<'t>,
    start: usize,
    end: usize,
}

impl<'t> Span<'t> {
    /// The value's text with the fills written in; None if checked text did not open (not
    /// seen: the caller then reads the value another way).
    pub fn fill(&self, mutation: &Mutation) -> Option<String> {
        let mut document = self.checked.document(self.start, self.end);
        mutation.apply(&mut document);
        self.checked.write(&document)
    }

    /// The value's text as it stands.
    pub fn text(&self) -> &'t str {
        self.checked.text(self.start, self.end)
    }
}

/// A pod's JSON text, opened only where a fill reaches.
#[derive(Clone, Debug, PartialEq)]
pub enum Spliced<'a> {
    /// Checked text from `start` to `end`, written as it stands.
    Text {
        source: &'a Checked<'a>,
        start: usize,
        end: usize,
    },
    /// An object's members in the text's order, fills among them (`position`).
    Object(Members<'a>),
    Array(Vec<Spliced<'a>>),
    /// A fill's value, escaped on writing.
    String(&'a str),
    /// Text that could not be opened though it was checked: never written, so the whole pod
    /// is then read another way. What is filled into it is held here and dropped.
    Unreadable(Members<'a>),
}

/// Keys as they read, escapes undone (managed fields' `k:{\"...\"}` keys, Go's `\u0026`).
pub type Members<'a> = Vec<(Cow<'a, str>, Spliced<'a>)>;

impl<'t> Checked<'t> {
    /// The text, if it passes the `Checker`.
    pub fn of(text: &'t str) -> Option<Checked<'t>> {
        let mut checker = Checker {
            bytes: text.as_bytes(),
            at: 0,
            // About one object or array per 32 bytes in a pod with managed fields.
            containers: Vec::with_capacity(text.len() / 32),
            keys: Vec::with_capacity(64),
        };
        checker.check().then_some(Checked {
            text,
            containers: checker.containers,
        })
    }

    /// The whole text as one value.
    pub fn whole(self) -> Span<'t> {
        let end = self.text.len();
        Span {
            checked: self,
            start: 0,
            end,
        }
    }

    /// The object reached from the top by the members `path` (`object_at`).
    pub fn into_object_at(self, path: &[&str]) -> Option<Span<'t>> {
        let (start, end) = self.object_at(path)?;
        Some(Span {
            checked: self,
            start,
            end,
        })
    }

    /// The text of a [`document`](Checked::document) of this text, None if any part was
    /// unreadable.
    fn write(&self, document: &Spliced<'_>) -> Option<String> {
        // Room for the text and the fills: one allocation.
        let mut out = String::with_capacity(self.text.len() + 512);
        document.write_into(&mut out)?;
        Some(out)
    }

    /// The value from `start` to `end` as a document to fill in.
    fn document(&self, start: usize, end: usize) -> Spliced<'_> {
        Spliced::Text {
            source: self,
            start,
            end,
        }
    }

    /// The text from `start` to `end` (empty if that is not a span of it).
    fn text(&self, start: usize, end: usize) -> &'t str {
        self.text.get(start..end).unwrap_or_default()
    }

    /// The span of the object reached from the top by the members `path`, if the top and
    /// each member on the way are objects. Keys are distinct in checked text and compared as
    /// they read, so this is the object serde_json's derived readers would take there.
    fn object_at(&self, path: &[&str]) -> Option<(usize, usize)> {
        let is_object = |start: usize| self.text.as_bytes().get(start) == Some(&b'{');
        let (mut start, mut end) = (0, self.text.len());
        for key in path {
            if !is_object(start) {
                return None;
            }
            let members = self.members(start, end)?;
            let (_, value) = members.iter().find(|(k, _)| k == key)?;
            let Spliced::Text {
                start: from,
                end: to,
                ..
            } = *value
            else {
                return None;
            };
            (start, end) = (from, to);
        }
        is_object(start).then_some((start, end))
    }

    /// Where the value that starts at `at` ends.
    fn value_end(&self, at: usize) -> Option<usize> {
        let bytes = self.text.as_bytes();
        match bytes.get(at)? {
            b'"' => string_end(bytes, at).map(|(end, _)| end),
            b'{' | b'[' => {
                let found = self
                    .containers
                    .binary_search_by_key(&at, |&(start, _)| start);
                found.ok().map(|i| self.containers[i].1)
            }
            _ => Some(
                at + bytes[at..]
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']'))
                    .unwrap_or(bytes.len() - at),
            ),
        }
    }

    /// The members of the object from `start` to `end`, their values left as text.
    fn members(&self, start: usize, end: usize) -> Option<Members<'_>> {
        let bytes = self.text.as_bytes();
        let mut members = Vec::with_capacity(16);
        if end == start + 2 {
            return Some(members);
        }
        let mut at = start + 1;
        loop {
            let (key_end, escaped) = string_end(bytes, at)?;
            let quoted = self.text.get(at..key_end)?;
            let key = if escaped {
                Cow::Owned(serde_json::from_str(quoted).ok()?)
            } else {
                Cow::Borrowed(quoted.get(1..quoted.len() - 1)?)
            };
            if bytes.get(key_end) != Some(&b':') {
                return None;
            }
            let value_end = self.value_end(key_end + 1)?;
            members.push((key, self.document(key_end + 1, value_end)));
            match bytes.get(value_end) {
                Some(b',') if value_end + 1 < end => at = value_end + 1,
                Some(b'}') if value_end + 1 == end => return Some(members),
                _ => return None,
            }
        }
    }

    /// The elements of the array from `start` to `end`, left as text.
    fn elements(&self, start: usize, end: usize) -> Option<Vec<Spliced<'_>>> {
        let bytes = self.text.as_bytes();
        let mut items = Vec::new();
        if end == start + 2 {
            return Some(items);
        }
        let mut at = start + 1;
        loop {
            let item_end = self.value_end(at)?;
            items.push(self.document(at, item_end));
            match bytes.get(item_end) {
                Some(b',') if item_end + 1 < end => at = item_end + 1,
                Some(b']') if item_end + 1 == end => return Some(items),
                _ => return None,
            }
        }
    }
}

impl<'a> Spliced<'a> {
    /// Opens an object or array one level; a string, number, literal or opened node stays.
    fn open(&mut self) {
        if let Spliced::Text { source, start, end } = *self {
            *self = match source.text.as_bytes().get(start) {
                Some(b'{') => source
                    .members(start, end)
                    .map_or_else(Spliced::unreadable, Spliced::Object),
                Some(b'[') => source
                    .elements(start, end)
                    .map_or_else(Spliced::unreadable, Spliced::Array),
                _ => return,
            };
        }
    }

    fn unreadable() -> Spliced<'a> {
        Spliced::Unreadable(Vec::new())
    }

    fn write_into(&self, out: &mut String) -> Option<()> {
        match self {
            Spliced::Text { source, start, end } => out.push_str(source.text.get(*start..*end)?),
            Spliced::String(text) => push_string(out, text),
            Spliced::Object(members) => {
                out.push('{');
                for (at, (key, value)) in members.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    push_string(out, key);
                    out.push(':');
                    value.write_into(out)?;
                }
                out.push('}');
            }
            Spliced::Array(items) => {
                out.push('[');
                for (at, item) in items.iter().enumerate() {
                    if at > 0 {
                        out.push(',');
                    }
                    item.write_into(out)?;
                }
                out.push(']');
            }
            Spliced::Unreadable(_) => return None,
        }
        Some(())
    }
}

/// A string as serde_json writes it: as it is between quotes when nothing needs escaping.
fn push_string(out: &mut String, text: &str) {
    if next_special(text.as_bytes(), 0) == text.len() {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        // serde_json writes any string.
        out.push_str(&serde_json::to_string(text).unwrap_or_default());
    }
}

/// Where `key` is among the members, or where a fill of it goes: in key order among members in
/// key order (as a `Value` writes them), else last.
fn position(members: &Members<'_>, key: &str) -> Result<usize, usize> {
    if let Some(at) = members.iter().position(|(k, _)| k == key) {
        return Ok(at);
    }
    let sorted = members.windows(2).all(|pair| pair[0].0 < pair[1].0);
    Err(match sorted {
        true => members.partition_point(|(k, _)| k.as_ref() < key),
        false => members.len(),
    })
}

/// The walk of [`crate::mutate::Mutation::apply`], as over a `Value`.
impl<'a> Document<'a> for Spliced<'a> {
    type Map = Members<'a>;

    fn member_mut(&mut self, key: &str) -> Option<&mut Spliced<'a>> {
        let members = self.as_map_mut()?;
        let at = position(members, key).ok()?;
        Some(&mut members[at].1)
    }

    fn element_mut(&mut self, index: usize) -> Option<&mut Spliced<'a>> {
        self.open();
        match self {
            Spliced::Array(items) => items.get_mut(index),
            _ => None,
        }
    }

    fn as_map_mut(&mut self) -> Option<&mut Members<'a>> {
        self.open();
        match self {
            Spliced::Object(members) => Some(members),
            _ => None,
        }
    }

    fn map_at<'m>(map: &'m mut Members<'a>, key: &'static str) -> &'m mut Members<'a> {
        let at = position(map, key).unwrap_or_else(|at| {
            map.insert(at, (Cow::Borrowed(key), Spliced::Object(Vec::new())));
            at
        });
        let slot = &mut map[at].1;
        slot.open();
        if !matches!(slot, Spliced::Object(_) | Spliced::Unreadable(_)) {
            *slot = Spliced::Object(Vec::new());
        }
        match slot {
            Spliced::Object(members) | Spliced::Unreadable(members) => members,
            // Made an object just above.
            _ => unreachable!(),
        }
    }

    fn set(map: &mut Members<'a>, key: &'static str, value: &'a str) {
        match position(map, key) {
            Ok(at) => map[at].1 = Spliced::String(value),
            Err(at) => map.insert(at, (Cow::Borrowed(key), Spliced::String(value))),
        }
    }
}

/// Just past the closing quote of the string whose opening quote is at `at`, and whether it
/// has escapes; None if an escape is not JSON's (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`,
/// `\t`, `\uXXXX`) or is half a surrogate pair (serde_json refuses to read it as a string).
fn string_end(bytes: &[u8], at: usize) -> Option<(usize, bool)> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut i = at + 1;
    let mut escaped = false;
    loop {
        i = next_special(bytes, i);
        match *bytes.get(i)? {
            b'"' => return Some((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                match bytes.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    b'u' => i = unicode_escape(bytes, i)?.1,
                    _ => return None,
                }
            }
            _ => return None,
        }
    }
}

/// The character of the `\uXXXX` escape (or surrogate pair of two) whose backslash is at `at`,
/// and where it ends. Go's encoder writes `<`, `>` and `&` so (`\u003c`, `\u003e`, `\u0026`),
/// and the API server's text is written by Go.
fn unicode_escape(bytes: &[u8], at: usize) -> Option<(char, usize)> {
    let hex = |from: usize| -> Option<u32> {
        let digits = bytes.get(from..from + 4)?;
        digits.iter().try_fold(0, |code, &digit| {
            Some(code * 16 + char::from(digit).to_digit(16)?)
        })
    };
    let code = hex(at + 2)?;
    match code {
        0xd800..=0xdbff => {
            if bytes.get(at + 6..at + 8)? != b"\\u" {
                return None;
            }
            let low = hex(at + 8)?;
            if !(0xdc00..=0xdfff).contains(&low) {
                return None;
            }
            let code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            Some((char::from_u32(code)?, at + 12))
        }
        _ => Some((char::from_u32(code)?, at + 6)),
    }
}

/// The first quote, backslash or control character at or after `at` (or the end): eight
/// bytes at a time, as most of a pod's text is inside strings.
fn next_special(bytes: &[u8], mut at: usize) -> usize {
    while let Some(word) = bytes
        .get(at..at + 8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
    {
        let found = special(u64::from_le_bytes(word));
        if found != 0 {
            // The lowest flagged byte is exact: a false flag only ever sits above a true one.
            return at + found.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    let tail = bytes.get(at..).unwrap_or_default();
    at + tail
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .unwrap_or(tail.len())
}

/// The high bit of each of eight bytes that is a quote, a backslash or below 0x20 (the classic
/// "has a zero byte" and "has a byte less than n" tests).
fn special(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    below(quote, 1) | below(backslash, 1) | below(word, 0x20)
}

/// Checks that the text is one compact JSON value that reads the same however it is read and
/// can be filled in where it stands: no whitespace; each object's keys distinct (whatever their
/// order), none of them serde_json's private raw-value token (a `Value` reads such a map as the
/// JSON in its string); strings with JSON's escapes, surrogates paired ([`string_end`]);
/// numbers integers that fit an `i64` or a `u64`, and not `-0` (a `Value` holds any other
/// number as an `f64`, written its own way). Where the keys are also in order and the strings
/// escaped as serde_json escapes them, the text is what a `Value` read from it writes.
struct Checker<'t> {
    bytes: &'t [u8],
    at: usize,
    containers: Vec<(usize, usize)>,
    /// The keys of the objects open, outermost first.
    keys: Vec<Key<'t>>,
}

/// What an open container expects next, and its slot in `containers`.
enum Open {
    /// An object: where its keys start in `keys`, and whether they are in order so far.
    Object {
        slot: usize,
        keys: usize,
        sorted: bool,
    },
    Array(usize),
}

/// A key's text between its quotes.
struct Key<'t> {
    text: &'t [u8],
    escaped: bool,
}

impl Key<'_> {
    /// How this key sorts against `other` in a `BTreeMap<String, _>`: by the bytes they stand
    /// for (`k:{\"name\":...}` keys of managed fields carry escapes).
    fn order(&self, other: &Key<'_>) -> std::cmp::Ordering {
        if self.escaped || other.escaped {
            unescaped(self.text).cmp(unescaped(other.text))
        } else {
            self.text.cmp(other.text)
        }
    }
}

impl Key<'_> {
    /// Whether the two keys stand for the same string; keys without escapes are the same
    /// only if their bytes are (a slice compare, its lengths first).
    fn same(&self, other: &Key<'_>) -> bool {
        if self.escaped || other.escaped {
            self.order(other).is_eq()
        } else {
            self.text == other.text
        }
    }
}

/// Whether no two of the keys stand for the same string: each pair compared in an object of
/// a few keys (most of a pod's), else the keys sorted.
fn distinct(keys: &mut [Key<'_>]) -> bool {
    if keys.len() <= 16 {
        return keys
            .iter()
            .enumerate()
            .all(|(at, key)| keys[at + 1..].iter().all(|other| !key.same(other)));
    }
    heapsort(keys);
    keys.windows(2).all(|pair| pair[0].order(&pair[1]).is_lt())
}

/// Sorts keys in place in O(n log n) whatever their order: a heapsort, as the standard
/// library's sort added 26 KB to the module.
fn heapsort(keys: &mut [Key<'_>]) {
    fn sift_down(keys: &mut [Key<'_>], mut root: usize, end: usize) {
        loop {
            let mut child = 2 * root + 1;
            if child >= end {
                return;
            }
            if child + 1 < end && keys[child].order(&keys[child + 1]).is_lt() {
                child += 1;
            }
            if keys[root].order(&keys[child]).is_ge() {
                return;
            }
            keys.swap(root, child);
            root = child;
        }
    }
    for root in (0..keys.len() / 2).rev() {
        sift_down(keys, root, keys.len());
    }
    for end in (1..keys.len()).rev() {
        keys.swap(0, end);
        sift_down(keys, 0, end);
    }
}

/// The bytes (UTF-8) a checked string's text stands for.
fn unescaped(text: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut i = 0;
    // The rest of a `\u` escape's character past its first byte.
    let mut pending = [0u8; 4];
    let (mut next, mut end) = (0, 0);
    std::iter::from_fn(move || {
        if next < end {
            next += 1;
            return Some(pending[next - 1]);
        }
        let byte = *text.get(i)?;
        if byte != b'\\' {
            i += 1;
            return Some(byte);
        }
        let escape = *text.get(i + 1)?;
        Some(match escape {
            b'u' => {
                let (character, after) = unicode_escape(text, i)?;
                i = after;
                end = character.encode_utf8(&mut pending).len();
                next = 1;
                pending[0]
            }
            _ => {
                i += 2;
                match escape {
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    quoted => quoted,
                }
            }
        })
    })
}

impl<'t> Checker<'t> {
    fn peek(&self) -> u8 {
        // No JSON value starts with or continues at a NUL byte outside a string.
        self.bytes.get(self.at).copied().unwrap_or(0)
    }

    fn check(&mut self) -> bool {
        // Containers open: a stack, not recursion, so no text is too deep for it.
        let mut open: Vec<Open> = Vec::new();
        loop {
            // A value.
            match self.peek() {
                opener @ (b'{' | b'[') => {
                    let slot = self.containers.len();
                    self.containers.push((self.at, 0));
                    self.at += 1;
                    let closer = if opener == b'{' { b'}' } else { b']' };
                    if self.peek() == closer {
                        self.at += 1;
                        self.containers[slot].1 = self.at;
                    } else if opener == b'[' {
                        open.push(Open::Array(slot));
                        continue;
                    } else {
                        open.push(Open::Object {
                            slot,
                            keys: self.keys.len(),
                            sorted: true,
                        });
                        if !self.key(&mut open) {
                            return false;
                        }
                        continue;
                    }
                }
                b'"' => match string_end(self.bytes, self.at) {
                    Some((end, _)) => self.at = end,
                    None => return false,
                },
                b't' => {
                    if !self.literal(b"true") {
                        return false;
                    }
                }
                b'f' => {
                    if !self.literal(b"false") {
                        return false;
                    }
                }
                b'n' => {
                    if !self.literal(b"null") {
                        return false;
                    }
                }
                b'-' | b'0'..=b'9' => {
                    if !self.integer() {
                        return false;
                    }
                }
                _ => return false,
            }
            // After a value: the next member or element, or the end of containers.
            loop {
                match (open.last(), self.peek()) {
                    (None, _) => return self.at == self.bytes.len(),
                    (Some(Open::Object { .. }), b',') => {
                        self.at += 1;
                        if !self.key(&mut open) {
                            return false;
                        }
                        break;
                    }
                    (Some(Open::Array(_)), b',') => {
                        self.at += 1;
                        break;
                    }
                    (Some(&Open::Object { slot, keys, sorted }), b'}') => {
                        if !sorted && !distinct(&mut self.keys[keys..]) {
                            return false;
                        }
                        self.keys.truncate(keys);
                        self.at += 1;
                        self.containers[slot].1 = self.at;
                        open.pop();
                    }
                    (Some(&Open::Array(slot)), b']') => {
                        self.at += 1;
                        self.containers[slot].1 = self.at;
                        open.pop();
                    }
                    _ => return false,
                }
            }
        }
    }

    /// A key and its colon: not the raw-value token; whether it follows the previous key in
    /// order is noted (out of order, the object's keys are checked distinct when it closes).
    fn key(&mut self, open: &mut [Open]) -> bool {
        let start = self.at;
        let Some((end, escaped)) = string_end(self.bytes, start) else {
            return false;
        };
        let key = Key {
            text: &self.bytes[start + 1..end - 1],
            escaped,
        };
        // serde_json's `Value` reads an object keyed by its private token as a raw value: such
        // text is left to it, however the key is written (`\u0024serde_json::...` too).
        const PRIVATE: &[u8] = b"$serde_json::private::";
        let private = if key.escaped {
            unescaped(key.text)
                .take(PRIVATE.len())
                .eq(PRIVATE.iter().copied())
        } else {
            key.text.starts_with(PRIVATE)
        };
        if private {
            return false;
        }
        let Some(Open::Object { keys, sorted, .. }) = open.last_mut() else {
            return false;
        };
        if let Some(last) = self.keys[*keys..].last() {
            match last.order(&key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return false,
                std::cmp::Ordering::Greater => *sorted = false,
            }
        }
        self.keys.push(key);
        self.at = end;
        if self.peek() != b':' {
            return false;
        }
        self.at += 1;
        true
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            true
        } else {
            false
        }
    }

    fn integer(&mut self) -> bool {
        let start = self.at;
        let negative = self.bytes.get(start) == Some(&b'-');
        let digits = &self.bytes[start + usize::from(negative)..];
        let length = digits
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(digits.len());
        let digits = &digits[..length];
        self.at = start + usize::from(negative) + length;
        if matches!(self.peek(), b'.' | b'e' | b'E') {
            return false;
        }
        // serde_json read this text already, so this is only whether a `Value` holds it as an
        // integer: -0 it holds as a float; up to 18 digits always fit; longer ones are parsed.
        match (negative, digits) {
            (_, []) | (_, [b'0', _, ..]) | (true, [b'0']) => false,
            (_, digits) if digits.len() <= 18 => true,
            _ => {
                let text = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or_default();
                if negative {
                    text.parse::<i64>().is_ok()
                } else {
                    text.parse::<u64>().is_ok()
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::Value;

    /// What a `Value` writes for the text.
    fn rewritten(text: &str) -> String {
        serde_json::to_string(&serde_json::from_str::<Value>(text).unwrap()).unwrap()
    }

    #[rstest]
    #[case::a_compact_sorted_object(r#"{"a":1,"b":[true,false,null],"c":{"d":"e"}}"#)]
    #[case::empty_containers_and_scalars(r#"[{},[],"",0,-1,18446744073709551615]"#)]
    #[case::the_smallest_i64(r#"[-9223372036854775808]"#)]
    #[case::escapes_serde_json_writes("[\"\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\\u000b\"]")]
    #[case::unicode_and_delete_written_raw("{\"z\":\"\u{7f}\",\"é\":\"Ω😀\"}")]
    #[case::managed_fields_keys_with_escapes(r#"{"k:{\"a\":1}":{},"k:{\"b\":1}":{"\\":"\u0000"}}"#)]
    #[case::keys_in_the_order_of_what_they_stand_for(r#"{"a\"":1,"a#":2}"#)]
    #[case::a_key_sorting_before_the_raw_value_token(r#"{"$serde_json":1,"a":2}"#)]
    fn canonical_text_is_what_a_value_writes(#[case] text: &str) {
        assert!(Checked::of(text).is_some(), "{text} should be canonical");
        assert_eq!(rewritten(text), text);
    }

    /// Text the API server writes (Go: fields in their declared order, `<`, `>` and `&`
    /// escaped) and other escapes: checked, so filled in where it stands; a `Value` reads it as
    /// the same value, though it writes it another way.
    #[rstest]
    #[case::keys_out_of_order(r#"{"b":1,"a":2}"#)]
    #[case::keys_in_the_raw_order_not_the_order_of_what_they_stand_for(r#"{"a#":2,"a\"":1}"#)]
    #[case::go_s_escapes_of_html(r#"["a \u0026\u0026 b \u003e c \u003c"]"#)]
    #[case::an_escaped_key(r#"{"\u0061":1}"#)]
    #[case::an_escaped_slash(r#"["a\/b"]"#)]
    #[case::an_escaped_printable_character(r#"["\u0041"]"#)]
    #[case::an_upper_case_control_escape(r#"["\u001F"]"#)]
    #[case::a_control_written_as_u_that_serde_writes_as_a_letter(r#"["\u000a"]"#)]
    #[case::a_surrogate_pair(r#"["\ud83d\ude00"]"#)]
    #[case::an_escaped_delete(r#"["\u007f"]"#)]
    #[case::distinct_keys_out_of_order_in_nested_objects(
        r#"{"z":{"y":1,"x":{"b":2,"a":3}},"a":[{"d":1,"c":2}]}"#
    )]
    fn other_compact_text_is_checked_and_reads_as_it_stands(#[case] text: &str) {
        assert!(Checked::of(text).is_some(), "{text} should be checked");
        assert_ne!(rewritten(text), text);
    }

    #[rstest]
    #[case::whitespace(r#"{"a": 1}"#)]
    #[case::a_duplicate_key(r#"{"a":1,"a":2}"#)]
    #[case::a_duplicate_key_out_of_order(r#"{"a":1,"b":2,"a":3}"#)]
    #[case::a_duplicate_key_written_another_way(r#"{"b":0,"a":1,"\u0061":2}"#)]
    #[case::a_duplicate_key_in_an_inner_object(r#"{"a":{"c":1,"b":2,"c":3},"b":1}"#)]
    #[case::a_lone_high_surrogate(r#"["\ud83d"]"#)]
    #[case::a_lone_low_surrogate(r#"["\ude00"]"#)]
    #[case::a_high_surrogate_before_no_low_one(r#"["\ud83d\u0041"]"#)]
    #[case::an_escape_json_has_not(r#"["\x41"]"#)]
    #[case::a_short_u_escape(r#"["\u41"]"#)]
    #[case::a_float(r#"[1.0]"#)]
    #[case::an_exponent(r#"[1e3]"#)]
    #[case::minus_zero(r#"[-0]"#)]
    #[case::past_u64(r#"[18446744073709551616]"#)]
    #[case::past_i64(r#"[-9223372036854775809]"#)]
    #[case::the_raw_value_token(r#"{"$serde_json::private::RawValue":"[1]"}"#)]
    #[case::the_raw_value_token_written_with_an_escape(
        r#"{"\u0024serde_json::private::RawValue":"[1]"}"#
    )]
    #[case::the_raw_value_token_with_an_escape_further_in(
        r#"{"$serde_json::priv\u0061te::RawValue":"[1]"}"#
    )]
    #[case::trailing_text(r#"{"a":1}x"#)]
    #[case::cut_short(r#"{"a":[1,"#)]
    #[case::empty("")]
    fn other_text_is_not_checked(#[case] text: &str) {
        assert_eq!(Checked::of(text), None, "{text} should not be checked");
    }

    /// Past 16 keys an object out of order has its keys sorted to find a key twice; below,
    /// each pair is compared.
    #[rstest]
    #[case::a_few_keys(5)]
    #[case::more_keys_than_are_compared_pair_by_pair(40)]
    fn a_key_twice_is_found_in_an_object_out_of_order_of_any_size(#[case] keys: usize) {
        let object = |keys: &[String]| {
            let members: Vec<String> = keys.iter().map(|k| format!("\"{k}\":0")).collect();
            format!("{{{}}}", members.join(","))
        };
        let mut names: Vec<String> = (0..keys).rev().map(|n| format!("k{n:02}")).collect();
        assert!(Checked::of(&object(&names)).is_some(), "{}", object(&names));
        // The same name again, written with an escape, far from its twin.
        names.push(format!("\\u006b{:02}", keys / 2));
        assert_eq!(Checked::of(&object(&names)), None, "{}", object(&names));
    }

    #[test]
    fn the_heapsort_sorts_keys_as_they_read() {
        let texts = [
            "k10",
            "a",
            r"\u0062",
            "k02",
            "zz",
            "k:{\\\"a\\\":1}",
            "é",
            "k01",
            "",
            "b0",
            "k20",
            "k03",
            "a0",
            "y",
            r"\u00e8",
            "x",
            "k04",
            "m",
            "k00",
            "c",
        ];
        let mut keys: Vec<Key<'_>> = texts
            .iter()
            .map(|text| Key {
                text: text.as_bytes(),
                escaped: text.contains('\\'),
            })
            .collect();
        heapsort(&mut keys);
        let read = |key: &Key<'_>| String::from_utf8(unescaped(key.text).collect()).unwrap();
        let got: Vec<String> = keys.iter().map(read).collect();
        let mut expected: Vec<String> = got.clone();
        expected.sort();
        assert_eq!(got, expected);
        assert_eq!(got.len(), texts.len());
    }

    #[test]
    fn keys_are_compared_by_what_they_stand_for() {
        let keys = |text: &'static str| Key {
            text: text.as_bytes(),
            escaped: text.contains('\\'),
        };
        assert!(keys(r"\u0061").order(&keys("a")).is_eq());
        assert!(keys(r"\ud83d\ude00").order(&keys("😀")).is_eq());
        assert!(keys(r"\u00e9").order(&keys("é")).is_eq());
        assert!(keys(r#"k:{\"a\":1}"#).order(&keys("k:{#")).is_lt());
        assert!(keys(r"a\nb").order(&keys("a\nb")).is_eq());
    }

    #[test]
    fn the_word_scan_finds_the_first_special_byte_wherever_it_is() {
        let plain = [b' ', b'a', 0x7f, 0xc3, 0xff, b'!', b'#', b'[', 0x21, 0x5b];
        for special in [0x00, 0x1f, b'"', b'\\'] {
            for length in 0..20 {
                for at in 0..=length {
                    let mut bytes: Vec<u8> = (0..length).map(|i| plain[i % plain.len()]).collect();
                    if at < length {
                        bytes[at] = special;
                        // A second one after it must not move the answer.
                        if at + 1 < length {
                            bytes[at + 1] = b'"';
                        }
                    }
                    assert_eq!(next_special(&bytes, 0), at, "{bytes:?}");
                }
            }
        }
    }

    #[test]
    fn opening_and_writing_back_changes_nothing() {
        let text = r#"{"a":{"b":[1,{"c":"d\"}"}],"e":"]"},"f":[],"k:{\"x\":1}":0}"#;
        let checked = Checked::of(text).unwrap();
        let mut doc = checked.document(0, text.len());
        doc.member_mut("a")
            .and_then(|a| a.member_mut("b"))
            .and_then(|b| b.element_mut(1))
            .and_then(Spliced::as_map_mut)
            .unwrap();
        assert!(doc.member_mut("k:{\"x\":1}").is_some());
        assert_eq!(checked.write(&doc).as_deref(), Some(text));
    }

    /// A fill goes in key order among keys in order (as a `Value` writes them), last among keys
    /// out of order (as the API server writes them); a member is found wherever it is, and
    /// what is not an object where a fill needs one becomes one.
    #[rstest]
    #[case::in_key_order_among_keys_in_order(
        r#"{"m":{"labels":null,"name":"x"},"z":1}"#,
        r#"{"a":{"k":"v"},"m":{"labels":{"a":"\"1\"","b":"2"},"name":"x"},"z":1}"#
    )]
    #[case::last_among_keys_out_of_order(
        r#"{"z":1,"m":{"name":"x","labels":{"c":"1","b":"0"}}}"#,
        r#"{"z":1,"m":{"name":"x","labels":{"c":"1","b":"2","a":"\"1\""}},"a":{"k":"v"}}"#
    )]
    fn fills_go_where_a_value_or_the_text_would_have_them(
        #[case] text: &str,
        #[case] filled: &str,
    ) {
        let checked = Checked::of(text).unwrap();
        let mut doc = checked.document(0, text.len());
        let root = doc.as_map_mut().unwrap();
        let labels = Spliced::map_at(Spliced::map_at(root, "m"), "labels");
        Spliced::set(labels, "b", "2");
        Spliced::set(labels, "a", "\"1\"");
        Spliced::set(Spliced::map_at(root, "a"), "k", "v");
        assert_eq!(checked.write(&doc).as_deref(), Some(filled));
    }

    #[rstest]
    #[case::the_object_of_the_request(&["request", "object"], Some(r#"{"a":[1]}"#))]
    #[case::the_top(&[], Some(PAYLOAD))]
    #[case::a_member_that_is_not_an_object(&["request", "uid"], None)]
    #[case::through_a_member_that_is_not_an_object(&["request", "uid", "x"], None)]
    #[case::a_missing_member(&["request", "oldObject"], None)]
    #[case::a_key_that_only_prefixes_one(&["request", "obj"], None)]
    fn finds_an_object_by_its_members(#[case] path: &[&str], #[case] found: Option<&str>) {
        let checked = Checked::of(PAYLOAD).unwrap();
        let text = checked
            .object_at(path)
            .map(|(start, end)| checked.text(start, end));
        assert_eq!(text, found);
    }

    const PAYLOAD: &str =
        r#"{"request":{"kind":{"kind":"Pod"},"object":{"a":[1]},"uid":"u"},"settings":{}}"#;
}
