//! Commands in the documentation: the shell code blocks of markdown files and their inline
//! code, split into simple commands, and the checks of `jumppod ...` against the clap `Command`
//! the binary parses with and of `make ...` against make's own database.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Every markdown file of the repository but those under `target/`, `node_modules/` and
/// dot-directories, in order.
pub fn markdown_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if !(name.starts_with('.') || name == "target" || name == "node_modules") {
                markdown_files(&path, into);
            }
        } else if path.extension().is_some_and(|e| e == "md") {
            into.push(path);
        }
    }
}

/// The inline code spans of a markdown text outside its fenced blocks, with the 1-based line
/// each starts on. A span may cross a line break (Markdown joins it with a space); a span of
/// two backticks may hold one.
pub fn inline_code(text: &str) -> Vec<(usize, String)> {
    let mut prose = String::new();
    let mut lines = Vec::new(); // the line of each byte of `prose`
    let mut fence: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        if marker.len() >= 3 {
            match &fence {
                None => fence = Some(marker),
                Some(open) if marker.starts_with(open.as_str()) => fence = None,
                Some(_) => {}
            }
            continue;
        }
        if fence.is_some() {
            continue;
        }
        prose.push_str(line);
        prose.push('\n');
        lines.resize(prose.len(), n + 1);
    }
    let bytes = prose.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
        let open = &prose[i..i + run];
        let from = i + run;
        // A span ends within its paragraph.
        let paragraph = prose[from..]
            .find("\n\n")
            .map_or(prose.len(), |end| from + end);
        match prose[from..paragraph].find(open) {
            // The closing run must be exactly as long as the opening one.
            Some(at) if !prose[from + at + run..].starts_with('`') => {
                let span = prose[from..from + at].replace('\n', " ");
                spans.push((lines[i], span.trim().to_owned()));
                i = from + at + run;
            }
            _ => i = from,
        }
    }
    spans
}

/// The lines of the fenced code blocks that hold shell commands (``` with no language, sh,
/// bash, shell, zsh or console), with their 1-based line numbers. A line continued with a
/// backslash is joined with the next. The opening fence's indentation is removed, as Markdown
/// does: a line indented further (a diagram's) is not a command. A `$ ` prompt is removed.
pub fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<(String, usize, bool)> = None; // (marker, indent, shell?)
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        let is_fence =
            marker.len() >= 3 && marker.chars().all(|c| c == marker.as_bytes()[0] as char);
        match &fence {
            None if is_fence => {
                let info = trimmed[marker.len()..].trim();
                let language = info.split([' ', '{', ',']).next().unwrap_or("");
                let shell = matches!(
                    language,
                    "" | "sh" | "bash" | "shell" | "zsh" | "console" | "shell-session"
                );
                fence = Some((marker, indent, shell));
            }
            None => {}
            Some((open, _, _))
                if is_fence
                    && marker.starts_with(open.as_str())
                    && trimmed[marker.len()..].trim().is_empty() =>
            {
                fence = None;
                if let Some(p) = pending.take() {
                    out.push(p);
                }
            }
            Some((_, _, false)) => {}
            Some((_, fence_indent, true)) => {
                let strip = indent.min(*fence_indent);
                let content = &line[strip..];
                let (start, joined) = match pending.take() {
                    Some((start, mut text)) => {
                        text.push(' ');
                        text.push_str(content.trim_start());
                        (start, text)
                    }
                    // Indented further than its fence: not a command (a diagram's line).
                    None if content.starts_with(char::is_whitespace) => continue,
                    None => {
                        let command = content
                            .strip_prefix("$ ")
                            .or_else(|| content.strip_prefix("% "))
                            .unwrap_or(content);
                        (n + 1, command.to_owned())
                    }
                };
                match joined.strip_suffix('\\') {
                    Some(head) => pending = Some((start, head.trim_end().to_owned())),
                    None => out.push((start, joined)),
                }
            }
        }
    }
    if let Some(p) = pending {
        out.push(p);
    }
    out
}

/// The simple commands of a shell line, as words: split at `|`, `||`, `&&`, `;` and `&`, quotes
/// removed, a `#` comment dropped. `$(...)` and `` `...` `` stay inside their word.
pub fn commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let finish = |word: &mut String, in_word: &mut bool, words: &mut Vec<String>| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => finish(&mut word, &mut in_word, &mut words),
            '#' if !in_word => break,
            '|' | ';' | '&' if !(c == '&' && word.ends_with('>')) => {
                finish(&mut word, &mut in_word, &mut words);
                if matches!(chars.peek(), Some('|' | '&')) {
                    chars.next();
                }
                commands.push(std::mem::take(&mut words));
            }
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(c) = chars.next() {
                                word.push(c);
                            }
                        }
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                // A command substitution is one word (or part of one) whatever it holds.
                in_word = true;
                word.push(c);
                let mut depth = 0;
                for c in chars.by_ref() {
                    word.push(c);
                    match c {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            '`' => {
                in_word = true;
                word.push(c);
                for c in chars.by_ref() {
                    word.push(c);
                    if c == '`' {
                        break;
                    }
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    finish(&mut word, &mut in_word, &mut words);
    commands.push(words);
    commands.retain(|c| !c.is_empty());
    commands
}

/// The program a command runs and its arguments, past `VAR=value` assignments and `sudo`:
/// `jumppod` (also as a path, `./target/debug/jumppod`) or `make`.
pub fn program(words: &[String]) -> Option<(&'static str, &[String])> {
    let mut rest = words;
    while let Some((first, tail)) = rest.split_first() {
        let assignment = first.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if assignment || first == "sudo" || (first.starts_with('-') && words[0] == "sudo") {
            rest = tail;
            continue;
        }
        return match first.rsplit('/').next() {
            Some("jumppod") => Some(("jumppod", tail)),
            Some("make") => Some(("make", tail)),
            _ => None,
        };
    }
    None
}

/// A word that stands for something the reader fills in: `<NAME>`, `[OPTIONS]`, `{a,b}`,
/// `...`, or a name in capitals (`COMMAND`, `SHELL`).
pub fn placeholder(word: &str) -> bool {
    word.starts_with(['<', '[', '{'])
        || word.trim_end_matches('.').is_empty()
        || word == "…"
        || (word.chars().any(|c| c.is_ascii_uppercase())
            && word
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || "_-|.".contains(c)))
}

/// Checks `jumppod ARGS`: each word where a subcommand is expected names one (or is a
/// placeholder, after which nothing is checked), and every flag is an argument of the command
/// reached so far (the global ones included). Values and positional arguments are not checked.
pub fn check_jumppod(cli: &clap::Command, args: &[String]) -> Result<(), String> {
    let mut cmd = cli;
    let mut path = vec![cli.get_name().to_owned()];
    let mut words = args.iter().peekable();
    while let Some(word) = words.next() {
        let word = word.as_str();
        if word == "--" {
            break;
        }
        // An optional flag written in brackets, `[--flag]` or `[-o json]`, is still a flag.
        let flag = word.trim_start_matches('[').trim_end_matches(']');
        if let Some(long) = flag.strip_prefix("--").filter(|l| !l.is_empty()) {
            let (name, inline) = match long.split_once('=') {
                Some((name, _)) => (name, true),
                None => (long, false),
            };
            let arg = cmd
                .get_arguments()
                .find(|a| {
                    a.get_long() == Some(name)
                        || a.get_all_aliases().unwrap_or_default().contains(&name)
                })
                .ok_or_else(|| format!("`{}` has no flag --{name}", path.join(" ")))?;
            if !inline && needs_value(arg) {
                words.next();
            }
        } else if flag.len() > 1
            && flag.starts_with('-')
            && !flag[1..].starts_with(|c: char| c.is_ascii_digit())
        {
            let shorts: Vec<char> = flag[1..].chars().collect();
            for (i, &c) in shorts.iter().enumerate() {
                let arg = cmd
                    .get_arguments()
                    .find(|a| {
                        a.get_short() == Some(c)
                            || a.get_all_short_aliases().unwrap_or_default().contains(&c)
                    })
                    .ok_or_else(|| format!("`{}` has no flag -{c}", path.join(" ")))?;
                if arg.get_action().takes_values() {
                    // The rest of the word is its value, or the next word is.
                    if i + 1 == shorts.len() && needs_value(arg) {
                        words.next();
                    }
                    break;
                }
            }
        } else if cmd.has_subcommands() {
            if placeholder(word) {
                return Ok(());
            }
            cmd = cmd
                .find_subcommand(word)
                .ok_or_else(|| format!("`{}` has no subcommand {word}", path.join(" ")))?;
            path.push(cmd.get_name().to_owned());
        }
        // Else a positional argument or a flag's value: not checked.
    }
    Ok(())
}

pub fn needs_value(arg: &clap::Arg) -> bool {
    arg.get_action().takes_values() && arg.get_num_args().is_none_or(|n| n.min_values() > 0)
}

/// Each make target named must be a target of the Makefile, read from make's own database
/// (`make -pq`), once per directory and variables. Not `make -n TARGET`: make runs the lines
/// of a recipe that call `$(MAKE)` even then, and `make test`'s do (its stages).
pub struct Make {
    root: PathBuf,
    seen: BTreeMap<Vec<String>, Result<BTreeSet<String>, String>>,
}

impl Make {
    pub fn new(root: &Path) -> Self {
        Make {
            root: root.to_path_buf(),
            seen: BTreeMap::new(),
        }
    }

    /// Checks `make ARGS`: each target (the default goal when none is named) is one of the
    /// Makefile's in `-C DIR` (relative to the repository's root) with those variables.
    pub fn check(&mut self, args: &[String]) -> Result<(), String> {
        let mut dir = self.root.clone();
        let mut assignments = Vec::new();
        let mut targets = Vec::new();
        let mut words = args.iter().peekable();
        while let Some(word) = words.next() {
            let word = word.as_str();
            if let Some(d) = word
                .strip_prefix("--directory=")
                .or_else(|| word.strip_prefix("-C").filter(|d| !d.is_empty()))
            {
                dir = self.root.join(d);
            } else if word == "-C" {
                dir = self
                    .root
                    .join(words.next().map(String::as_str).unwrap_or("."));
            } else if matches!(word, "-f" | "-I" | "-o" | "-W") {
                words.next();
            } else if matches!(word, "-j" | "-l") {
                words.next_if(|w| w.parse::<f64>().is_ok());
            } else if word.starts_with('-') || placeholder(word) {
            } else if word.contains('=') {
                assignments.push(word.to_owned());
            } else {
                targets.push(word.to_owned());
            }
        }
        let mut key = vec![dir.display().to_string()];
        key.extend(assignments.iter().cloned());
        let known = self
            .seen
            .entry(key)
            .or_insert_with(|| targets_of(&dir, &assignments))
            .clone()?;
        for target in &targets {
            if !known.contains(target) {
                return Err(format!(
                    "`make {target}`: no such target in {}",
                    dir.join("Makefile").display()
                ));
            }
        }
        Ok(())
    }
}

/// The targets make knows in `dir` with `assignments` (its database, `make -pq`, asked for a
/// goal that does not exist so that nothing is made).
pub fn targets_of(dir: &Path, assignments: &[String]) -> Result<BTreeSet<String>, String> {
    let out = Command::new("make")
        .arg("-pq")
        .arg("-C")
        .arg(dir)
        .args(assignments)
        .arg(".jumppod-docs-no-such-goal")
        // Not the flags or jobserver of a make this test may run under.
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("MAKELEVEL")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run make: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.contains("No rule to make target '.jumppod-docs-no-such-goal'") {
        return Err(format!(
            "make cannot read the Makefile in {}: {}",
            dir.display(),
            stderr.trim()
        ));
    }
    let mut targets = BTreeSet::new();
    // A rule's line `a b: prerequisites`; one right after "# Not a target:" is a file make
    // only looked at.
    let mut not_a_target = false;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if line == "# Not a target:" {
            not_a_target = true;
            continue;
        }
        if let Some((head, rest)) = line.split_once(':')
            && !not_a_target
            && !head.is_empty()
            && !line.starts_with(['#', '\t', ' '])
            && !head.contains('=')
            && !rest.starts_with('=')
        {
            targets.extend(head.split_whitespace().map(str::to_owned));
        }
        not_a_target = false;
    }
    Ok(targets)
}
