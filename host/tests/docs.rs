//! The documentation cannot drift from the code silently: docs/reference/cli.md is exactly
//! what `jumppod help-markdown` prints.
//!
//! It needs the `wasm` feature (the default): without it `eval`, `webhook` and
//! `webhook-configuration` do not exist, and the page documents them.

use std::path::{Path, PathBuf};
use std::process::Command;

const REGENERATE: &str = "cargo run -p jumppod-host -- help-markdown > docs/reference/cli.md";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ is in the repository")
        .to_path_buf()
}

#[test]
#[cfg_attr(
    not(feature = "wasm"),
    ignore = "without the wasm feature the binary lacks eval, webhook and webhook-configuration"
)]
fn the_cli_reference_is_what_the_binary_prints() {
    let out = Command::new(jumppod_testkit::jumppod_bin())
        .arg("help-markdown")
        .output()
        .expect("run jumppod help-markdown");
    assert!(
        out.status.success(),
        "jumppod help-markdown failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("the reference is UTF-8");
    let path = repo_root().join("docs/reference/cli.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == printed {
        return;
    }
    let (line, ours, theirs) = printed
        .lines()
        .map(Some)
        .chain(std::iter::repeat(None))
        .zip(committed.lines().map(Some).chain(std::iter::repeat(None)))
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(n, (a, b))| (n + 1, a, b))
        .unwrap_or((0, None, None));
    let shown = |line: Option<&str>| line.map_or("(the end)".to_owned(), |l| format!("{l:?}"));
    let (ours, theirs) = (shown(ours), shown(theirs));
    panic!(
        "docs/reference/cli.md is not what `jumppod help-markdown` prints (the command line \
         changed, or the page was edited by hand). Regenerate it from the repository's root:\n\n    \
         {REGENERATE}\n\nand commit it. First difference, line {line}:\n  \
         the binary prints: {ours}\n  the file has:      {theirs}"
    );
}
