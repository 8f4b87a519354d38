//! A WebAssembly module's custom sections, as far as `annotate` and `inspect` need them: read,
//! replaced, appended. The layout is the binary format's (WebAssembly Core Specification,
//! "Modules" / "Sections"): the magic and version, then sections of an id byte, a LEB128 u32
//! size and that many bytes; a custom section (id 0) starts with its name, a LEB128 length and
//! UTF-8. Custom sections may stand anywhere, so one appended at the end leaves the module as
//! valid as it was.

/// Where kwctl keeps a policy's metadata (policy-evaluator's `KUBEWARDEN_CUSTOM_SECTION_METADATA`).
pub const METADATA: &str = "io.kubewarden.metadata";

const HEADER: [u8; 8] = *b"\0asm\x01\0\0\0";
const CUSTOM: u8 = 0;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FormatError {
    #[error("not a WebAssembly module (it does not start with \\0asm, version 1)")]
    NotWasm,
    #[error("the section starting at byte {offset} runs past the end of the module")]
    Truncated { offset: usize },
    #[error("the custom section at byte {offset} has a name that is not UTF-8")]
    Name { offset: usize },
}

/// One section: where it starts (its id byte) and ends, and for a custom section its name and
/// contents.
struct Section<'a> {
    start: usize,
    end: usize,
    custom: Option<(&'a str, &'a [u8])>,
}

/// Reads an unsigned LEB128 u32 at `*at`, moving past it.
fn leb128(bytes: &[u8], at: &mut usize, offset: usize) -> Result<usize, FormatError> {
    let mut value: u64 = 0;
    for shift in (0..35).step_by(7) {
        let byte = *bytes.get(*at).ok_or(FormatError::Truncated { offset })?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return usize::try_from(value).map_err(|_| FormatError::Truncated { offset });
        }
    }
    Err(FormatError::Truncated { offset })
}

fn push_leb128(out: &mut Vec<u8>, mut value: usize) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn sections(wasm: &[u8]) -> Result<Vec<Section<'_>>, FormatError> {
    if !wasm.starts_with(&HEADER) {
        return Err(FormatError::NotWasm);
    }
    let mut found = Vec::new();
    let mut at = HEADER.len();
    while at < wasm.len() {
        let start = at;
        let id = wasm[at];
        at += 1;
        let size = leb128(wasm, &mut at, start)?;
        let end = at
            .checked_add(size)
            .filter(|end| *end <= wasm.len())
            .ok_or(FormatError::Truncated { offset: start })?;
        let custom = if id == CUSTOM {
            let mut name_at = at;
            let length = leb128(&wasm[..end], &mut name_at, start)?;
            let name_end = name_at
                .checked_add(length)
                .filter(|name_end| *name_end <= end)
                .ok_or(FormatError::Truncated { offset: start })?;
            let name = std::str::from_utf8(&wasm[name_at..name_end])
                .map_err(|_| FormatError::Name { offset: start })?;
            Some((name, &wasm[name_end..end]))
        } else {
            None
        };
        found.push(Section { start, end, custom });
        at = end;
    }
    Ok(found)
}

/// The contents of the first custom section called `name`.
pub fn custom<'a>(wasm: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, FormatError> {
    Ok(sections(wasm)?
        .into_iter()
        .find_map(|section| section.custom.filter(|(n, _)| *n == name))
        .map(|(_, contents)| contents))
}

/// The module with every custom section called `name` dropped and one holding `contents`
/// appended: annotating twice leaves one annotation.
pub fn with_custom(wasm: &[u8], name: &str, contents: &[u8]) -> Result<Vec<u8>, FormatError> {
    let mut out = Vec::with_capacity(wasm.len() + contents.len() + name.len() + 16);
    out.extend_from_slice(&HEADER);
    for section in sections(wasm)? {
        if section.custom.is_some_and(|(n, _)| n == name) {
            continue;
        }
        out.extend_from_slice(&wasm[section.start..section.end]);
    }
    let mut body = Vec::with_capacity(name.len() + contents.len() + 5);
    push_leb128(&mut body, name.len());
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(contents);
    out.push(CUSTOM);
    push_leb128(&mut out, body.len());
    out.extend_from_slice(&body);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty module with one type section (id 1, one function type `() -> ()`).
    fn module() -> Vec<u8> {
        let mut wasm = HEADER.to_vec();
        wasm.extend_from_slice(&[1, 4, 1, 0x60, 0, 0]);
        wasm
    }

    #[test]
    fn an_appended_section_is_read_back_and_the_rest_is_kept() {
        let annotated = with_custom(&module(), METADATA, b"{\"mutating\":true}").unwrap();
        assert!(annotated.starts_with(&module()));
        assert_eq!(
            custom(&annotated, METADATA).unwrap(),
            Some(&b"{\"mutating\":true}"[..])
        );
        assert_eq!(custom(&annotated, "name").unwrap(), None);
    }

    #[test]
    fn annotating_again_replaces_the_section() {
        let once = with_custom(&module(), METADATA, b"first").unwrap();
        let twice = with_custom(&once, METADATA, b"second").unwrap();
        assert_eq!(twice.len(), once.len() + 1);
        assert_eq!(custom(&twice, METADATA).unwrap(), Some(&b"second"[..]));
    }

    #[test]
    fn a_section_larger_than_127_bytes_gets_a_multi_byte_size() {
        let contents = vec![b'x'; 300];
        let annotated = with_custom(&module(), METADATA, &contents).unwrap();
        assert_eq!(custom(&annotated, METADATA).unwrap(), Some(&contents[..]));
    }

    #[test]
    fn what_is_not_a_module_is_refused() {
        assert_eq!(custom(b"not wasm", METADATA), Err(FormatError::NotWasm));
    }

    #[test]
    fn a_section_cut_short_is_refused_naming_its_offset() {
        let mut wasm = module();
        wasm.extend_from_slice(&[0, 20, 3]);
        assert_eq!(
            custom(&wasm, METADATA),
            Err(FormatError::Truncated { offset: 14 })
        );
    }
}
