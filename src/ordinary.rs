//! The answer for an ordinary request from one scan of the payload's bytes. Most requests the
//! policy sees are pods that are not jump pods, and for them serde_json's read was most of
//! the policy's time in Wasm. The scan reads the fields the one-pass read in
//! [`crate::payload`] reads (the request's kind, operation and name, the pod's name, labels
//! and owners), checks that every other value is JSON as that read checks it, and answers
//! only where that read accepts. It is deliberately narrow, and kept small by one loop and
//! one table: on anything else (an escape in a string it reads, `\u` or a byte outside
//! printable ASCII in any string, a fraction or an exponent, a value of another type, a
//! duplicate field or label, more than 10 labels, deep nesting, a jump pod, a ReplicaSet) it
//! answers None, and the payload takes the serde path, which decides exactly as before.
//! A test bends and cuts every byte of four requests to hold the scan to that.

use crate::admission::{self, Scope};
use crate::schema;

/// The objects the one-pass read reads field by field; `Skipped` is any other value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Payload,
    Request,
    Kind,
    Pod,
    Meta,
    Labels,
    Owners,
    Owner,
    Skipped,
    SkippedArray,
}

/// What a value must be: an object (`Owners`: an array) read at that level, a string (kept in
/// a slot, or not), `controller`'s `Option<bool>`, or any JSON.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Level(Level),
    Text(u8),
    Bool,
    Any,
}

// The slots of the strings the verdict needs.
const GROUP: u8 = 0;
const KIND: u8 = 1;
const OPERATION: u8 = 2;
const NAME: u8 = 3;
const POD_NAME: u8 = 4;
const APP: u8 = 5;
/// Where a string nothing reads goes.
const UNREAD: u8 = 6;

/// The fields of the one-pass read's structs, as serde names them. A field's index is its bit
/// in `seen`: a struct refuses a duplicate field, and so does the scan.
const FIELDS: [(Level, &[u8], Want); 18] = [
    (Level::Payload, b"request", Want::Level(Level::Request)),
    (Level::Payload, b"settings", Want::Any),
    (Level::Request, b"kind", Want::Level(Level::Kind)),
    (Level::Request, b"operation", Want::Text(OPERATION)),
    (Level::Request, b"name", Want::Text(NAME)),
    (Level::Request, b"object", Want::Level(Level::Pod)),
    (Level::Request, b"oldObject", Want::Any),
    (Level::Kind, b"group", Want::Text(GROUP)),
    (Level::Kind, b"kind", Want::Text(KIND)),
    (Level::Pod, b"apiVersion", Want::Text(UNREAD)),
    (Level::Pod, b"kind", Want::Text(UNREAD)),
    (Level::Pod, b"metadata", Want::Level(Level::Meta)),
    (Level::Pod, b"spec", Want::Any),
    (Level::Meta, b"name", Want::Text(POD_NAME)),
    (Level::Meta, b"generateName", Want::Text(UNREAD)),
    (Level::Meta, b"labels", Want::Level(Level::Labels)),
    (Level::Meta, b"ownerReferences", Want::Level(Level::Owners)),
    (Level::Owner, b"controller", Want::Bool),
];
const REQUEST_SEEN: u32 = 1 << 0;
const OBJECT_SEEN: u32 = 1 << 5;
const CONTROLLER_SEEN: u32 = 1 << 17;

/// Nesting the scan follows (the serde read allows more); more labels than it compares.
const DEPTH: usize = 32;
const LABELS: usize = 10;

/// The name of `request` where the one-pass read would accept the payload unchanged and
/// without warnings (no object, another operation or kind, a pod that is not a jump pod);
/// None where [`crate::payload::decide`] must read it.
pub fn accepts(payload: &[u8]) -> Option<Option<&str>> {
    let mut slots: [Option<&str>; 7] = [None; 7];
    let mut seen = 0u32;
    let mut labels: [&[u8]; LABELS] = [&[]; LABELS];
    let mut label_count = 0;
    // The open objects and arrays, innermost last.
    let mut stack = [Level::Skipped; DEPTH];
    let mut depth = 0;
    let mut scan = Scan {
        bytes: payload,
        at: 0,
    };
    let mut want = Want::Level(Level::Payload);
    loop {
        // One value of the kind `want` says.
        scan.blank();
        let b = scan.peek()?;
        let opened = match (want, b) {
            (Want::Level(Level::Owners), b'[') => Some(Level::Owners),
            (Want::Level(level), b'{') if level != Level::Owners => Some(level),
            (Want::Any, b'{') => Some(Level::Skipped),
            (Want::Any, b'[') => Some(Level::SkippedArray),
            (Want::Text(slot), b'"') => {
                *slots.get_mut(usize::from(slot))? =
                    Some(std::str::from_utf8(scan.string(false)?).ok()?);
                None
            }
            (Want::Bool, b't' | b'f' | b'n') | (Want::Any, _) => {
                scan.scalar()?;
                None
            }
            _ => return None,
        };
        let mut fresh = false;
        if let Some(frame) = opened {
            if frame == Level::Owner {
                seen &= !CONTROLLER_SEEN;
            }
            *stack.get_mut(depth)? = frame;
            depth += 1;
            scan.at += 1;
            fresh = true;
        }
        // Then what follows it: the next member or element, or the end of what encloses it.
        let next = loop {
            scan.blank();
            if depth == 0 {
                break None;
            }
            let level = *stack.get(depth - 1)?;
            let array = matches!(level, Level::Owners | Level::SkippedArray);
            let b = scan.peek()?;
            if b == if array { b']' } else { b'}' } {
                scan.at += 1;
                depth -= 1;
                fresh = false;
                continue;
            }
            if !fresh {
                if b != b',' {
                    return None;
                }
                scan.at += 1;
                scan.blank();
            }
            if array {
                break Some(if level == Level::Owners {
                    Want::Level(Level::Owner)
                } else {
                    Want::Any
                });
            }
            // serde reads a key of the objects it reads, and skips the others.
            let key = scan.string(level == Level::Skipped)?;
            scan.blank();
            if scan.peek()? != b':' {
                return None;
            }
            scan.at += 1;
            break Some(member(
                level,
                key,
                &mut seen,
                &mut labels,
                &mut label_count,
            )?);
        };
        match next {
            Some(next) => want = next,
            None => break,
        }
    }
    // Nothing may follow the payload.
    if scan.at != payload.len() || seen & REQUEST_SEEN == 0 {
        return None;
    }
    // The verdict, as `admission::review_view` reaches it before it reads more.
    let slot = |slot: u8| slots[usize::from(slot)];
    let name = slot(NAME);
    if seen & OBJECT_SEEN == 0 {
        return Some(name);
    }
    let operation = slot(OPERATION).unwrap_or_default();
    match admission::scope(
        operation,
        slot(GROUP).unwrap_or(""),
        slot(KIND).unwrap_or(""),
    ) {
        Scope::Pod => {}
        Scope::ReplicaSet => return None,
        Scope::Other => return Some(name),
    }
    let pod_name = admission::judged_name(slot(POD_NAME), name);
    schema::classify(slot(APP), pod_name)
        .is_none()
        .then_some(name)
}

/// What the value of `key` in an object at `level` must be.
fn member<'a>(
    level: Level,
    key: &'a [u8],
    seen: &mut u32,
    labels: &mut [&'a [u8]; LABELS],
    label_count: &mut usize,
) -> Option<Want> {
    if level == Level::Labels {
        // A duplicate label is refused by the view; too many are left to it.
        if labels[..*label_count].contains(&key) {
            return None;
        }
        *labels.get_mut(*label_count)? = key;
        *label_count += 1;
        let app = key == schema::NAME_LABEL.as_bytes();
        return Some(Want::Text(if app { APP } else { UNREAD }));
    }
    if level == Level::Skipped {
        return Some(Want::Any);
    }
    for (i, (at, name, want)) in FIELDS.iter().enumerate() {
        if *at == level && *name == key {
            if *seen & (1 << i) != 0 {
                return None;
            }
            *seen |= 1 << i;
            return Some(*want);
        }
    }
    Some(Want::Any)
}

struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// JSON's whitespace.
    fn blank(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// A string of printable ASCII, at its opening quote; its text. Escapes only where
    /// `skipped` (serde checks a skipped string's escapes, and the managed fields of every pod
    /// have some); not `\u`, left to serde.
    fn string(&mut self, skipped: bool) -> Option<&'a [u8]> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        let mut end = start;
        loop {
            // Eight bytes at a time up to the first that is not plain printable ASCII: in
            // Wasm serde_json's scan of a string goes four bytes at a time.
            while let Some(word) = self.bytes.get(end..end + 8) {
                let stops = stops(u64::from_le_bytes(word.try_into().ok()?));
                // The next word's address must not wait on this one's result.
                if stops != 0 {
                    end += stops.trailing_zeros() as usize / 8;
                    break;
                }
                end += 8;
            }
            match *self.bytes.get(end)? {
                b'"' => break,
                b'\\' if skipped && b"\"\\/bfnrt".contains(self.bytes.get(end + 1)?) => end += 2,
                b'\\' | 0..0x20 | 0x7f.. => return None,
                _ => end += 1,
            }
        }
        self.at = end + 1;
        self.bytes.get(start..end)
    }

    /// A string, a number or a literal, as serde_json reads one.
    fn scalar(&mut self) -> Option<()> {
        let literal: &[u8] = match self.peek()? {
            b'"' => return self.string(true).map(drop),
            b't' => b"true",
            b'f' => b"false",
            b'n' => b"null",
            _ => return self.number(),
        };
        if !self.bytes.get(self.at..)?.starts_with(literal) {
            return None;
        }
        self.at += literal.len();
        Some(())
    }

    /// An integer, `-?(0|[1-9][0-9]*)`. A fraction or an exponent ends the scan (the byte
    /// after the number must be a comma or a bracket): pods rarely hold one.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let start = self.at;
        self.digits()?;
        // One leading zero only, as in JSON.
        (self.bytes.get(start) != Some(&b'0') || self.at == start + 1).then_some(())
    }

    /// One digit or more.
    fn digits(&mut self) -> Option<()> {
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        (self.at > start).then_some(())
    }
}

/// The high bit of each byte of `word` that is a quote, a backslash, a control character or
/// not printable ASCII (0x7f and above). Each term may also mark a byte above one the terms
/// mark truly (a borrow or a carry moves up), or a byte of 0x80 and above (marked anyway),
/// so the lowest bit set marks the first such byte exactly. Eleven operations a word.
fn stops(word: u64) -> u64 {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    let quote = (word ^ (ONES * u64::from(b'"'))).wrapping_sub(ONES);
    let backslash = (word ^ (ONES * u64::from(b'\\'))).wrapping_sub(ONES);
    let below_space = word.wrapping_sub(ONES * 0x20);
    let from_delete = word.wrapping_add(ONES);
    (quote | backslash | below_space | from_delete | word) & (ONES << 7)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the scan must stop byte by byte, as the byte-wise match decides it.
    fn stops_at(byte: u8) -> bool {
        matches!(byte, b'"' | b'\\' | 0..0x20 | 0x7f..)
    }

    #[test]
    fn the_word_scan_stops_at_the_first_byte_the_byte_scan_stops_at() {
        // Every byte at every position, before and after every other kind of byte.
        for at in 0..8 {
            for byte in 0..=255u8 {
                for after in [b'a', b'"', 0x00, 0x1f, 0x20, 0x7f, 0x80, 0xff] {
                    let mut word = [b'a'; 8];
                    word[at] = byte;
                    if at < 7 {
                        word[7] = after;
                    }
                    assert_first_stop(word);
                }
            }
        }
        // And words drawn from the bytes where the arithmetic turns (a fixed generator, so
        // a failure repeats).
        let turns = [
            0x00, 0x01, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7e, 0x7f,
        ];
        let turns = [
            &turns[..],
            &[0x80, 0x81, 0xa0, 0xdf, 0xe0, 0xfe, 0xff, b'a'],
        ]
        .concat();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..200_000 {
            let mut word = [0; 8];
            for byte in &mut word {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *byte = turns[(state % turns.len() as u64) as usize];
            }
            assert_first_stop(word);
        }
    }

    fn assert_first_stop(word: [u8; 8]) {
        let first = word.iter().position(|&b| stops_at(b)).unwrap_or(8);
        let mask = stops(u64::from_le_bytes(word));
        assert_eq!(mask.trailing_zeros() as usize / 8, first, "{word:x?}");
    }
}
