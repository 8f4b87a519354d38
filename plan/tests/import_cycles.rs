//! No import circle in the core, the host or this crate: a module never imports, directly or through
//! others, a module that imports it back. The check reads the sources: every `crate::a::b` path
//! (in `use` lines and in code), `super::` and `use child::` becomes an edge from the module
//! that writes it to the module it names; a parent's `pub use child::x` is its public face, not
//! an edge; a `#[cfg(test)] mod tests` block is its own module (a test may import anything). A strongly connected component of more than one module is a
//! circle, printed with its members.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`a::b`, the crate root is "") of each `.rs` file under `src`.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts == ["main"] {
                // The binary is its own crate: it imports the library by name, not `crate::`.
                continue;
            }
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The text without `//` comments (doc links name modules without importing them).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths written after each occurrence of `prefix` (`crate::a::b`, `crate::{a, b::c}`).
fn paths_after(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices(prefix) {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &text[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                out.push(segments(item.trim()));
            }
        } else {
            out.push(segments(rest));
        }
    }
    out
}

fn segments(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_owned());
        match rest[end..].strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    out
}

/// The longest module naming a prefix of `path`.
fn resolve(known: &BTreeSet<String>, path: &[String]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| known.contains(m))
}

fn join(base: &str, more: &str) -> String {
    if base.is_empty() {
        more.to_owned()
    } else {
        format!("{base}::{more}")
    }
}

/// What each module shows of its children (`pub use verdict::{Verdict, Warning};` in the
/// crate root): `Verdict` (the root's) -> `verdict`. A path through such a name is an edge to
/// the child that defines it, so `crate::Verdict` cannot hide an import of `verdict`.
fn faces(files: &BTreeMap<String, PathBuf>, known: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (module, path) in files {
        let text = code(&std::fs::read_to_string(path).expect("read a source file"));
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("pub use ") else {
                continue;
            };
            let rest = rest.trim_end_matches(';');
            let (from, names) = match rest.split_once("::{") {
                Some((from, group)) => (from, group.trim_end_matches('}').split(',').collect()),
                None => rest
                    .rsplit_once("::")
                    .map_or((rest, vec![]), |(f, n)| (f, vec![n])),
            };
            let mut full = segments(module);
            full.extend(segments(from));
            let Some(child) = resolve(known, &full).filter(|c| c != module) else {
                continue;
            };
            for name in names {
                // `x as y` shows `y`; `self` shows the module itself.
                let name = name.rsplit(" as ").next().unwrap_or(name).trim();
                if !name.is_empty() && name != "self" {
                    out.insert(join(module, name), child.clone());
                }
            }
        }
    }
    out
}

/// `module` and the name that follows it in `path` (`verdict::Verdict` for `crate::verdict::
/// Verdict::accept` and the module `verdict`).
fn path_below(module: &str, path: &[String]) -> String {
    let depth = if module.is_empty() {
        0
    } else {
        module.split("::").count()
    };
    path.get(depth)
        .map_or(module.to_owned(), |name| join(module, name))
}

/// Edges between modules (test blocks are nodes of their own).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = modules(src);
    let known: BTreeSet<String> = files.keys().cloned().collect();
    let faces = faces(&files, &known);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in &files {
        let text = code(&std::fs::read_to_string(path).expect("read a source file"));
        // A test block starts at `#[cfg(test)]` followed by `mod tests {`; it runs to the end.
        let split = text
            .find("#[cfg(test)]\nmod tests {")
            .or_else(|| text.find("#[cfg(test)]\n    mod tests {"));
        let parts = match split {
            Some(i) => vec![
                (module.clone(), &text[..i]),
                (join(module, "tests"), &text[i..]),
            ],
            None => vec![(module.clone(), &text[..])],
        };
        for (node, body) in parts {
            let parent = node.rsplit_once("::").map_or("", |(p, _)| p).to_owned();
            let is_test = node == "tests" || node.ends_with("::tests");
            let mut named: Vec<Vec<String>> = paths_after(body, "crate::");
            for p in paths_after(body, "super::") {
                let mut full = if parent.is_empty() {
                    Vec::new()
                } else {
                    segments(&parent)
                };
                full.extend(p);
                named.push(full);
            }
            // `child::x` (in `use` or in code) from a module to its own child. A parent's
            // `pub use child::x` is its public face (`webhook` shows `serve::serve`), not
            // something it uses.
            if !is_test {
                let private: String = body
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("pub use "))
                    .collect::<Vec<_>>()
                    .join("\n");
                let prefix = if node.is_empty() {
                    String::new()
                } else {
                    format!("{node}::")
                };
                for child in known.iter().filter_map(|m| m.strip_prefix(&prefix)) {
                    if child.contains("::") || child.is_empty() {
                        continue;
                    }
                    for path in paths_after(&private, &format!("{child}::")) {
                        let mut full = segments(&node);
                        full.push(child.to_owned());
                        full.extend(path);
                        named.push(full);
                    }
                }
            }
            let from = edges.entry(node.clone()).or_default();
            for path in named {
                // A name at the crate root (`crate::Verdict`) resolves to "" before its face.
                let to = resolve(&known, &path).unwrap_or_default();
                let to = faces.get(&path_below(&to, &path)).cloned().unwrap_or(to);
                if to != node && !to.is_empty() {
                    from.insert(to);
                }
            }
        }
    }
    edges
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.out.sort();
    walk.out
}

fn check(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let found = circles(&graph(&src));
    assert!(
        found.is_empty(),
        "import circles in {}: {found:?}",
        src.display()
    );
}

#[test]
fn the_core_has_no_import_circle() {
    check(".");
}

#[test]
fn the_planning_crate_has_no_import_circle() {
    check("plan");
}

#[test]
fn the_host_has_no_import_circle() {
    check("host");
}

/// The check sees a circle when there is one: the host's former `action.rs` <-> `objects.rs`,
/// a circle through the crate root's re-export, and one through `super::` and an inline path.
#[test]
fn a_circle_is_found() {
    let dir = std::env::temp_dir().join(format!("jumppod-import-cycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plan")).unwrap();
    let files = [
        (
            "lib.rs",
            "mod action;\nmod objects;\nmod plan;\nmod leaf;\nmod face;\nmod shown;\npub use shown::{Other, Shown};\n",
        ),
        (
            "action.rs",
            "use crate::objects::{name_of, node_port};\nuse crate::leaf::X;\n",
        ),
        ("objects.rs", "use crate::{action::Finding, leaf};\n"),
        // Through the root's re-export: `crate::Shown` is `shown`'s.
        ("face.rs", "fn f() -> crate::Shown { todo() }\n"),
        ("shown.rs", "use crate::face::F;\npub struct Shown;\n"),
        (
            "plan/mod.rs",
            "mod drift;\nuse drift::shell_quote;\npub use drift::drift;\n",
        ),
        (
            "plan/drift.rs",
            "fn f() { super::plan(); }\n// use crate::action::Action;\n",
        ),
        (
            "leaf.rs",
            "pub struct X;\n#[cfg(test)]\nmod tests {\n    use crate::action::*;\n}\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let found = circles(&graph(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        vec![
            vec!["action".to_owned(), "objects".to_owned()],
            vec!["face".to_owned(), "shown".to_owned()],
            vec!["plan".to_owned(), "plan::drift".to_owned()],
        ]
    );
}
