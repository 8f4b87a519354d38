//! The documentation cannot drift from the code silently:
//!
//! - docs/reference/cli.md is exactly what `jumppod help-markdown` prints;
//! - every `jumppod ...` and `make ...` command of every markdown file, in a shell code block or
//!   in inline code, exists: the subcommand path and every flag are checked against the clap
//!   `Command` the binary parses with, and each make target against make's own database;
//! - the synopsis of host/README.md names every flag of every command, and only those;
//! - every chart value the documentation names (`--set` in a helm command, inline code such as
//!   `webhook.drainSeconds`, the chart's NOTES.txt and the comments of values.yaml) is declared
//!   by values.yaml and taken by values.schema.json.
//!
//! Flags need the `wasm` feature (the default): without it `eval`, `webhook` and
//! `webhook-configuration` do not exist, and the pages document them.
#![cfg(feature = "wasm")]

#[path = "docs/commands.rs"]
mod commands;
#[path = "docs/synopsis.rs"]
mod synopsis;
#[path = "docs/values.rs"]
mod values;

use clap::CommandFactory;
use commands::{Make, check_jumppod, commands, inline_code, markdown_files, program, shell_lines};
use jumppod_host::cli::Cli;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use values::Values;

const REGENERATE: &str = "make docs-reference";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ is in the repository")
        .to_path_buf()
}

fn shown(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

#[test]
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

/// What a documentation file says, as the checks below read it: its shell command lines and
/// inline code, each with its line.
fn said(text: &str) -> Vec<(usize, String, bool)> {
    let mut said: Vec<(usize, String, bool)> = shell_lines(text)
        .into_iter()
        .map(|(n, line)| (n, line, true))
        .collect();
    said.extend(
        inline_code(text)
            .into_iter()
            .map(|(n, code)| (n, code, false)),
    );
    said
}

#[test]
fn every_command_in_the_docs_exists() {
    let root = repo_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    let cli = built_cli();
    let mut make = Make::new(&root);
    let mut problems = Vec::new();
    let mut checked = BTreeMap::<&str, usize>::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        for (line, command, _) in said(&text) {
            for words in commands(&command) {
                let result = match program(&words) {
                    Some(("jumppod", args)) => {
                        *checked.entry("jumppod").or_default() += 1;
                        check_jumppod(&cli, args)
                    }
                    Some(("make", args)) => {
                        *checked.entry("make").or_default() += 1;
                        make.check(args)
                    }
                    _ => Ok(()),
                };
                if let Err(problem) = result {
                    problems.push(format!(
                        "{}:{line}: {problem}\n    {}",
                        shown(&root, file),
                        command.trim()
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} command(s) of the documentation do not exist ({} checked):\n{}",
        problems.len(),
        checked.values().sum::<usize>(),
        problems.join("\n")
    );
    for program in ["jumppod", "make"] {
        assert!(
            checked.get(program).copied().unwrap_or(0) > 0,
            "no `{program}` command found in {} markdown files: is the scanner broken?",
            files.len()
        );
    }
}

#[test]
fn the_synopsis_of_the_hosts_readme_names_every_flag_and_no_other() {
    let readme = std::fs::read_to_string(repo_root().join("host/README.md")).unwrap();
    let problems = synopsis::problems(&built_cli(), &readme);
    assert!(
        problems.is_empty(),
        "host/README.md's synopsis and the command line differ:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_chart_value_the_docs_name_exists() {
    let root = repo_root();
    let chart = root.join("charts/jumppod");
    let values = Values::read(&chart);
    let roots = values.roots();
    let mut named: Vec<(String, usize, String)> = Vec::new(); // file, line, value
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, code, shell) in said(&text) {
            let words = commands(&code);
            for words in &words {
                if shell
                    && words
                        .first()
                        .is_some_and(|w| w.rsplit('/').next() == Some("helm"))
                {
                    for key in values::set_by(words) {
                        named.push((shown(&root, file), line, key));
                    }
                }
                if !shell {
                    for word in words {
                        named.extend(
                            values::named_in(word, &roots).map(|v| (shown(&root, file), line, v)),
                        );
                    }
                }
            }
        }
    }
    let notes_path = chart.join("templates/NOTES.txt");
    let notes = std::fs::read_to_string(&notes_path).unwrap();
    let notes_shown = shown(&root, &notes_path);
    for (line, value) in values::read_by_template(&notes) {
        named.push((notes_shown.clone(), line, value));
    }
    for (n, line) in notes.lines().enumerate() {
        for word in without_actions(line).split_whitespace() {
            named.extend(values::named_in(word, &roots).map(|v| (notes_shown.clone(), n + 1, v)));
        }
    }
    let defaults = std::fs::read_to_string(chart.join("values.yaml")).unwrap();
    for (n, line) in defaults.lines().enumerate() {
        if let Some((_, comment)) = line.split_once('#') {
            for word in comment.split_whitespace() {
                let word = word.trim_matches(['`', '(', ')', ',', ';', ':', '"']);
                named.extend(
                    values::named_in(word, &roots)
                        .map(|v| ("charts/jumppod/values.yaml".to_owned(), n + 1, v)),
                );
            }
        }
    }
    let problems: Vec<String> = named
        .iter()
        .filter_map(|(file, line, value)| {
            values
                .check(value)
                .err()
                .map(|problem| format!("{file}:{line}: {problem}"))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "{} chart value(s) named in the documentation do not exist ({} checked):\n{}",
        problems.len(),
        named.len(),
        problems.join("\n")
    );
    for file in [
        "charts/jumppod/README.md",
        "charts/jumppod/templates/NOTES.txt",
        "README.md",
    ] {
        assert!(
            named.iter().any(|(f, _, _)| f == file),
            "no chart value found in {file}: is the scanner broken?"
        );
    }
}

/// A template's line without its actions (`{{ ... }}`).
fn without_actions(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        rest = rest[at..]
            .find("}}")
            .map_or("", |end| &rest[at + end + 2..]);
    }
    out.push_str(rest);
    out
}

/// The clap command as the binary has it, built: help flags, the `help` subcommand and the
/// global arguments propagated to every subcommand.
fn built_cli() -> clap::Command {
    let mut cli = Cli::command();
    cli.build();
    cli
}

// The checker itself: that it finds what it must, and only that.

#[test]
fn shell_blocks_are_found_and_others_are_not() {
    let doc = "\
text jumppod nope
```sh
$ jumppod status -n dstack \\
    -p main   # a comment
```
```yaml
jumppod: not a command
```
   ```console
   $ make demo
     jumppod run (controller) ──▶ a diagram's line
   ```
~~~
jumppod keys list
~~~
";
    assert_eq!(
        shell_lines(doc),
        [
            (
                3,
                "jumppod status -n dstack -p main   # a comment".to_owned()
            ),
            (10, "make demo".to_owned()),
            (14, "jumppod keys list".to_owned()),
        ]
    );
}

#[test]
fn shell_words_split_at_operators_and_keep_quotes_and_substitutions() {
    assert_eq!(
        commands(r#"jumppod rbac -n dstack | kubectl apply -f - && make x; echo "a b" 2>&1 # c"#),
        [
            vec!["jumppod", "rbac", "-n", "dstack"],
            vec!["kubectl", "apply", "-f", "-"],
            vec!["make", "x"],
            vec!["echo", "a b", "2>&1"],
        ]
    );
    assert_eq!(
        commands(r#"jumppod keys add --name 'a b' "$(cat a.pub)" --x=$(cat f | wc -l)"#),
        [vec![
            "jumppod",
            "keys",
            "add",
            "--name",
            "a b",
            "$(cat a.pub)",
            "--x=$(cat f | wc -l)"
        ]]
    );
}

#[test]
fn a_missing_subcommand_or_flag_is_named() {
    let cli = built_cli();
    let check = |line: &str| {
        let words = &commands(line)[0];
        let (_, args) = program(words).expect("a jumppod command");
        check_jumppod(&cli, args)
    };
    for good in [
        "jumppod --help",
        "jumppod -o json status -n dstack -p main",
        "jumppod --kubeconfig=k ensure -n dstack -p main --gpu-tolerations --cpu 1",
        "jumppod keys add -ndstack -p main --key-file alice.pub",
        "jumppod keys <add|remove|list> -p main",
        "jumppod rbac -n dstack --controller -A [--image IMAGE]",
        "KUBECONFIG=k ./target/debug/jumppod run -v -n dstack",
        "jumppod help keys add",
        "jumppod completions bash",
        "jumppod ensure --help",
    ] {
        assert_eq!(check(good), Ok(()), "{good}");
    }
    assert_eq!(
        check("jumppod ensure -n dstack --no-such-flag"),
        Err("`jumppod ensure` has no flag --no-such-flag".to_owned())
    );
    assert_eq!(
        check("jumppod keys add -x"),
        Err("`jumppod keys add` has no flag -x".to_owned())
    );
    assert_eq!(
        check("jumppod keys rotate -p main"),
        Err("`jumppod keys` has no subcommand rotate".to_owned())
    );
    assert_eq!(
        check("jumppod status --controller"),
        Err("`jumppod status` has no flag --controller".to_owned()),
        "a flag of another command"
    );
}

#[test]
fn a_missing_make_target_fails_and_an_existing_one_passes() {
    let mut make = Make::new(&repo_root());
    let args = |line: &str| commands(line)[0][1..].to_vec();
    assert_eq!(make.check(&args("make -j4 demo")), Ok(()));
    // Targets whose recipes call $(MAKE) (which `make -n` would run) and one from web/web.mk.
    assert_eq!(make.check(&args("make test check playground")), Ok(()));
    let missing = make.check(&args("make no-such-target-here"));
    assert!(
        missing
            .as_ref()
            .is_err_and(|e| e.contains("no-such-target-here")),
        "{missing:?}"
    );
}

#[test]
fn inline_code_is_found_across_a_line_break_and_not_in_fences() {
    let doc = "\
Run `jumppod status
-n dstack` and ``make `demo` `` here.
```sh
`jumppod nope`
```
An unclosed ` tick.

Then `make test`.
";
    assert_eq!(
        inline_code(doc),
        [
            (1, "jumppod status -n dstack".to_owned()),
            (2, "make `demo`".to_owned()),
            (8, "make test".to_owned()),
        ]
    );
}

#[test]
fn a_synopsis_missing_a_flag_or_naming_a_wrong_one_is_refused() {
    let cli = built_cli();
    let readme = std::fs::read_to_string(repo_root().join("host/README.md")).unwrap();
    assert_eq!(synopsis::problems(&cli, &readme), Vec::<String>::new());
    let without = readme.replacen(" [--drain-delay D]", "", 1);
    assert_ne!(without, readme, "the synopsis names --drain-delay");
    let problems = synopsis::problems(&cli, &without);
    assert!(
        problems
            .iter()
            .any(|p| p.ends_with("`jumppod webhook` takes --drain-delay, not in the synopsis")),
        "{problems:?}"
    );
    let wrong = readme.replacen("[--drain-delay D]", "[--drain-dealy D]", 1);
    let problems = synopsis::problems(&cli, &wrong);
    assert!(
        problems
            .iter()
            .any(|p| p.ends_with("`jumppod webhook` has no flag --drain-dealy")),
        "{problems:?}"
    );
    let no_man = readme.replacen("jumppod [GLOBAL] man [--out-dir DIR]\n", "", 1);
    assert!(
        synopsis::problems(&cli, &no_man).contains(&"no entry for `jumppod man`".to_owned()),
        "a command left out"
    );
}

#[test]
fn a_value_is_one_that_values_yaml_declares_and_the_schema_takes() {
    let values = Values::read(&repo_root().join("charts/jumppod"));
    for good in [
        "image.repository",
        "webhook.tls.caBundle",
        "controller.config.session_drain_seconds",
        "imagePullSecrets[0].name",
        "webhook.certManager.issuerRef.name",
    ] {
        assert_eq!(values.check(good), Ok(()), "{good}");
    }
    for (bad, why) in [
        ("image.repo", "values.schema.json refuses it"),
        ("webhook.drainSecond", "values.schema.json refuses it"),
        ("controller.config.project", "values.schema.json refuses it"),
        ("nosuch", "values.schema.json refuses it"),
    ] {
        let problem = values.check(bad).expect_err(bad);
        assert!(problem.contains(why), "{bad}: {problem}");
    }
    let words =
        commands("helm install j c --set a.b=1,c=2 --set-json 'd={\"x\":1,\"y\":2}' --set=e=3")
            .remove(0);
    assert_eq!(values::set_by(&words), ["a.b", "c", "d", "e"]);
    let roots = values.roots();
    assert_eq!(
        values::named_in("webhook.enabled=true", &roots).as_deref(),
        Some("webhook.enabled")
    );
    assert_eq!(
        values::named_in("controller.kubernetes.io/pod-deletion-cost", &roots),
        None
    );
    assert_eq!(values::named_in("policy.wasm", &roots), None);
    assert_eq!(values::named_in("controller.rs", &roots), None);
    assert_eq!(
        values::read_by_template(
            "{{ if .Values.webhook.enabled }}{{ .Values.image.tag }}{{ .Values._computed.x }}"
        ),
        [
            (1, "webhook.enabled".to_owned()),
            (1, "image.tag".to_owned())
        ]
    );
}
