//! The chart's values named in the documentation against `values.yaml` and
//! `values.schema.json`: a value exists when the schema takes it and `values.yaml` declares it
//! or an object or list it lies in (`controller.config.cpu` lies in `controller.config: {}`).

use serde_json::Value;
use std::path::Path;

pub struct Values {
    defaults: Value,
    schema: Value,
}

impl Values {
    pub fn read(chart: &Path) -> Values {
        let text = |file: &str| {
            std::fs::read_to_string(chart.join(file))
                .unwrap_or_else(|e| panic!("{}: {e}", chart.join(file).display()))
        };
        Values {
            defaults: serde_yaml::from_str(&text("values.yaml")).expect("values.yaml is YAML"),
            schema: serde_json::from_str(&text("values.schema.json"))
                .expect("values.schema.json is JSON"),
        }
    }

    /// The top-level keys of `values.yaml`.
    pub fn roots(&self) -> Vec<&str> {
        self.defaults
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// Checks a value's path as `--set` writes it: `a.b.c`, list items as `a[0].b`.
    pub fn check(&self, path: &str) -> Result<(), String> {
        let segments = segments(path);
        if segments.is_empty() {
            return Err(format!("`{path}` is not a value's path"));
        }
        if !self.schema_takes(&segments) {
            return Err(format!("`{path}`: values.schema.json refuses it"));
        }
        // values.yaml must declare the value, or an object or list it lies in.
        let mut node = &self.defaults;
        for segment in &segments {
            match segment {
                Segment::Key(key) => match node.get(key.as_str()) {
                    Some(child) => node = child,
                    None if node.is_object() && !std::ptr::eq(node, &self.defaults) => {
                        return Ok(());
                    }
                    None => return Err(format!("`{path}`: values.yaml has no `{key}`")),
                },
                Segment::Index => {
                    return if node.is_array() {
                        Ok(())
                    } else {
                        Err(format!("`{path}`: values.yaml has no list there"))
                    };
                }
            }
        }
        Ok(())
    }

    /// Whether the schema takes a value at `segments` (its `properties`, `$ref`s followed; an
    /// object without `additionalProperties: false` takes any key, a list any index).
    fn schema_takes(&self, segments: &[Segment]) -> bool {
        let mut node = &self.schema;
        for segment in segments {
            node = self.resolve(node);
            match segment {
                Segment::Key(key) => {
                    if let Some(child) = node.get("properties").and_then(|p| p.get(key.as_str())) {
                        node = child;
                    } else {
                        return node.get("additionalProperties") != Some(&Value::Bool(false))
                            && node.get("type").is_none_or(|t| t == "object");
                    }
                }
                Segment::Index => match node.get("items") {
                    Some(items) => node = items,
                    None => return node.get("type") == Some(&Value::from("array")),
                },
            }
        }
        true
    }

    /// `node`, or what its `$ref` (`#/$defs/NAME`) names.
    fn resolve<'v>(&'v self, mut node: &'v Value) -> &'v Value {
        while let Some(reference) = node.get("$ref").and_then(Value::as_str) {
            let pointer = reference.trim_start_matches('#');
            match self.schema.pointer(pointer) {
                Some(target) => node = target,
                None => break,
            }
        }
        node
    }
}

#[derive(Debug, PartialEq)]
enum Segment {
    Key(String),
    Index,
}

/// `a.b[0].c` as keys and indices; an escaped dot (`a\.b`) stays in its key.
fn segments(path: &str) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut key = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => key.push(chars.next().unwrap_or('.')),
            '.' => {
                if !key.is_empty() {
                    segments.push(Segment::Key(std::mem::take(&mut key)));
                }
            }
            '[' => {
                if !key.is_empty() {
                    segments.push(Segment::Key(std::mem::take(&mut key)));
                }
                for c in chars.by_ref() {
                    if c == ']' {
                        break;
                    }
                }
                segments.push(Segment::Index);
            }
            c => key.push(c),
        }
    }
    if !key.is_empty() {
        segments.push(Segment::Key(key));
    }
    segments
}

/// The values a helm command line sets: the keys of `--set`, `--set-string`, `--set-json` and
/// `--set-file` (each `a=1,b=2`, or `--set=a=1`).
pub fn set_by(words: &[String]) -> Vec<String> {
    let mut keys = Vec::new();
    let mut words = words.iter();
    while let Some(word) = words.next() {
        let flag = word.split_once('=').map_or(word.as_str(), |(f, _)| f);
        if !matches!(
            flag,
            "--set" | "--set-string" | "--set-json" | "--set-file" | "--set-literal"
        ) {
            continue;
        }
        let assignments = match word.split_once('=') {
            Some((_, rest)) => rest.to_owned(),
            None => match words.next() {
                Some(next) => next.clone(),
                None => continue,
            },
        };
        // `--set-json` takes one value, whose JSON may hold commas.
        let parts: Vec<&str> = if flag == "--set-json" {
            vec![assignments.as_str()]
        } else {
            assignments.split(',').collect()
        };
        keys.extend(
            parts
                .iter()
                .filter_map(|a| a.split_once('=').map(|(k, _)| k.to_owned())),
        );
    }
    keys
}

/// The words of prose that name a value: `root.key...`, optionally `=something`, where `root`
/// is a top-level key of `values.yaml` and the rest is keys and list indices (so
/// `controller.kubernetes.io/pod-deletion-cost` is not one).
pub fn named_in(word: &str, roots: &[&str]) -> Option<String> {
    let path = word.split_once('=').map_or(word, |(p, _)| p);
    let path = path.trim_end_matches(['.', ',', ';', ':', ')']);
    let (root, rest) = path.split_once(['.', '['])?;
    if !roots.contains(&root) || rest.is_empty() {
        return None;
    }
    // A file named like a value (`controller.rs`) is a file.
    const EXTENSIONS: [&str; 10] = [
        "rs", "md", "go", "sh", "txt", "yaml", "yml", "json", "toml", "tpl",
    ];
    if path
        .rsplit('.')
        .next()
        .is_some_and(|last| EXTENSIONS.contains(&last))
    {
        return None;
    }
    path.chars()
        .all(|c| c.is_ascii_alphanumeric() || "._[]".contains(c))
        .then(|| path.to_owned())
}

/// The paths of `.Values` a Helm template reads, but those under a key starting with `_`: the
/// chart's own templates keep what they compute there (`set .Values "_name"`), no user's value.
pub fn read_by_template(template: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in template.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find(".Values.") {
            let tail = &rest[at + ".Values.".len()..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                .unwrap_or(tail.len());
            if !tail.starts_with('_') {
                found.push((n + 1, tail[..end].trim_end_matches('.').to_owned()));
            }
            rest = &tail[end..];
        }
    }
    found
}
