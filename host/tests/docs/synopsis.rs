//! The synopsis of host/README.md against the clap `Command`: one entry per command, each
//! naming every flag that command takes, and no flag it does not.
//!
//! The synopsis is a `text` block under the heading `## Synopsis`. An entry starts with
//! `jumppod` and goes on over the lines indented below it. A group (`GLOBAL:`, `PROJECT:`,
//! `TARGET:`) is defined the same way and stands for its flags wherever its name appears,
//! bracketed or not.

use std::collections::{BTreeMap, BTreeSet};

/// A flag as written: `--name` or `-c`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flag {
    Long(String),
    Short(char),
}

impl std::fmt::Display for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Flag::Long(name) => write!(f, "--{name}"),
            Flag::Short(c) => write!(f, "-{c}"),
        }
    }
}

/// One entry of the synopsis: the line it starts on, the words of its command's path (`keys
/// add`) and the flags it names, its groups expanded.
pub struct Entry {
    pub line: usize,
    pub path: Vec<String>,
    pub flags: BTreeSet<Flag>,
}

/// The synopsis's entries.
pub fn entries(readme: &str) -> Result<Vec<Entry>, String> {
    let block = block(readme)?;
    // Join each entry with the lines indented below it.
    let mut joined: Vec<(usize, String)> = Vec::new();
    for (n, line) in block {
        match joined.last_mut() {
            Some((_, text)) if line.starts_with(char::is_whitespace) => {
                text.push(' ');
                text.push_str(line.trim());
            }
            _ if line.trim().is_empty() => {}
            _ => joined.push((n, line.trim().to_owned())),
        }
    }
    let mut groups: BTreeMap<String, String> = BTreeMap::new();
    let mut commands = Vec::new();
    for (n, text) in joined {
        if let Some(rest) = text.strip_prefix("jumppod ") {
            commands.push((n, rest.to_owned()));
        } else if let Some((name, definition)) = text.split_once(':')
            && !name.is_empty()
            && name.chars().all(|c| c.is_ascii_uppercase())
        {
            groups.insert(name.to_owned(), definition.to_owned());
        } else {
            return Err(format!(
                "line {n}: neither an entry (`jumppod ...`) nor a group (`NAME: ...`): {text}"
            ));
        }
    }
    commands
        .into_iter()
        .map(|(n, text)| {
            let words = words(&text);
            let mut flags = BTreeSet::new();
            let mut path = Vec::new();
            let mut seen = BTreeSet::new();
            flags_of(&words, &groups, &mut flags, &mut seen)?;
            // The command's path: the lower-case words before the first flag or placeholder.
            for word in &words {
                if groups.contains_key(word.as_str()) {
                    continue;
                }
                if word.starts_with('-')
                    || !word
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c == '-' || c.is_ascii_digit())
                {
                    break;
                }
                path.push(word.clone());
            }
            Ok(Entry {
                line: n,
                path,
                flags,
            })
        })
        .collect()
}

/// The lines of the first fenced block after `## Synopsis`, numbered from 1 in the file.
fn block(readme: &str) -> Result<Vec<(usize, &str)>, String> {
    let mut lines = readme.lines().enumerate();
    lines
        .by_ref()
        .find(|(_, l)| l.trim() == "## Synopsis")
        .ok_or("no heading `## Synopsis`")?;
    lines
        .by_ref()
        .find(|(_, l)| l.starts_with("```"))
        .ok_or("no code block under `## Synopsis`")?;
    let block: Vec<(usize, &str)> = lines
        .take_while(|(_, l)| !l.starts_with("```"))
        .map(|(n, l)| (n + 1, l))
        .collect();
    Ok(block)
}

/// The words of a synopsis text: brackets, braces, parentheses and `|` separate words, a
/// trailing `...` is dropped, and `--flag=VALUE` is the flag.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "[](){}|".contains(c))
        .map(|w| w.trim_end_matches("..."))
        .filter(|w| !w.is_empty())
        .map(|w| match w.split_once('=') {
            Some((flag, _)) if flag.starts_with('-') => flag.to_owned(),
            _ => w.to_owned(),
        })
        .collect()
}

/// The flags among `words`, with those of every group named.
fn flags_of(
    words: &[String],
    groups: &BTreeMap<String, String>,
    into: &mut BTreeSet<Flag>,
    expanding: &mut BTreeSet<String>,
) -> Result<(), String> {
    for word in words {
        if let Some(definition) = groups.get(word.as_str()) {
            if !expanding.insert(word.clone()) {
                continue; // named twice in one entry
            }
            flags_of(&self::words(definition), groups, into, expanding)?;
        } else if let Some(long) = word.strip_prefix("--") {
            into.insert(Flag::Long(long.to_owned()));
        } else if let Some(shorts) = word.strip_prefix('-')
            && shorts
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
        {
            // `-vv` is -v twice.
            into.extend(shorts.chars().map(Flag::Short));
        }
    }
    Ok(())
}

/// What is wrong with the synopsis against `cli` (built, so the global flags are each
/// command's): a flag named that the command lacks, one it has that is not named, a command
/// with no entry.
pub fn problems(cli: &clap::Command, readme: &str) -> Vec<String> {
    let entries = match entries(readme) {
        Ok(entries) => entries,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    let mut covered = BTreeSet::new();
    for Entry {
        line,
        path,
        flags: named,
    } in &entries
    {
        let mut cmd = cli;
        for word in path {
            match cmd.find_subcommand(word) {
                Some(sub) => cmd = sub,
                None => {
                    problems.push(format!(
                        "line {line}: `jumppod {}` has no subcommand {word}",
                        path.join(" ")
                    ));
                    break;
                }
            }
        }
        let shown = format!("jumppod {}", path.join(" "));
        if cmd.has_subcommands() {
            problems.push(format!(
                "line {line}: `{shown}` is not a command of its own"
            ));
            continue;
        }
        covered.insert(path.join(" "));
        let takes: BTreeSet<Flag> = flags(cmd);
        for flag in named.iter().filter(|f| !takes.contains(f)) {
            // A short flag is named for its long one too (`-n` for `--namespace`).
            problems.push(format!("line {line}: `{shown}` has no flag {flag}"));
        }
        for arg in cmd.get_arguments().filter(|a| documented(a)) {
            let long = arg.get_long().map(|l| Flag::Long(l.to_owned()));
            let short = arg.get_short().map(Flag::Short);
            if !long.iter().chain(&short).any(|f| named.contains(f)) {
                let flag = long.or(short).expect("a documented argument has a flag");
                problems.push(format!(
                    "line {line}: `{shown}` takes {flag}, not in the synopsis"
                ));
            }
        }
    }
    for path in leaves(cli, Vec::new()) {
        if !covered.contains(&path.join(" ")) {
            problems.push(format!("no entry for `jumppod {}`", path.join(" ")));
        }
    }
    problems
}

/// The flags `cmd` takes, long and short, aliases included.
fn flags(cmd: &clap::Command) -> BTreeSet<Flag> {
    let mut flags = BTreeSet::new();
    for arg in cmd.get_arguments() {
        flags.extend(arg.get_long().map(|l| Flag::Long(l.to_owned())));
        flags.extend(arg.get_short().map(Flag::Short));
        flags.extend(
            arg.get_all_aliases()
                .unwrap_or_default()
                .into_iter()
                .map(|a| Flag::Long(a.to_owned())),
        );
    }
    flags
}

/// A flag the synopsis must name: not positional, not hidden, not clap's `--help` or
/// `--version`.
fn documented(arg: &clap::Arg) -> bool {
    !arg.is_positional()
        && !arg.is_hide_set()
        && !matches!(arg.get_id().as_str(), "help" | "version")
}

/// The paths of the commands that take arguments: every subcommand without subcommands of its
/// own, but hidden ones and clap's `help`.
fn leaves(cmd: &clap::Command, path: Vec<String>) -> Vec<Vec<String>> {
    if !cmd.has_subcommands() {
        return vec![path];
    }
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .flat_map(|s| {
            let mut path = path.clone();
            path.push(s.get_name().to_owned());
            leaves(s, path)
        })
        .collect()
}
