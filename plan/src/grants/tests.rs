use super::*;
use rstest::rstest;
use serde_json::Value;

/// The job container's `-c` script as dstack 0.22.5 writes it:
/// `" && ".join(get_docker_commands(build_authorized_keys(project, [alice, bob])))`, where
/// alice's comment holds a single quote (shlex quotes it as `'"'"'`).
const JOB_SCRIPT: &str = include_str!("dstack-0.22.5-job-args.json");
const PROJECT: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICvlFH8jdsOxLlhfXSot7CaE7yKzQ+xCNC4AlzCuWsC5 project";
const ALICE: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHeyQo/3L9deSvuZT1MzN+0KIL2DwIC+7DNGrlLtTOO2 alice's laptop";
const BOB: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDMU+pNmk0FZpgZplJDzUn6P4G4ZA6RqVEdRsiLzqe24SWb2rfBK2kiq22YBqM6EvyQeYiVAKX2ajN4AGqHeejePS7dSR6THTDzrfIsYelfUDxVnXKfDBH1zjbBJlhuhQXQPbvdVTRolIuRbyLnA1DAy6PSoKwGLIVnrQ+8BCDKPQ== bob@host";

fn script() -> String {
    serde_json::from_str(JOB_SCRIPT).expect("the fixture is a JSON string")
}

/// A job pod as dstack builds it: its labels, `/bin/sh -c <script>`.
fn job_pod(name: &str, project: &str, phase: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/name": "dstack-job",
            "app.kubernetes.io/instance": name,
            "app.kubernetes.io/managed-by": "dstack",
            "k8s.dstack.ai/project": project,
        }},
        "spec": {"containers": [{
            "name": format!("{name}-container"),
            "command": ["/bin/sh"],
            "args": ["-c", script],
        }]},
        "status": {"phase": phase},
    }))
    .unwrap()
}

fn line(key: &str) -> String {
    parse(key).unwrap().user_line()
}

fn entry(key: &str) -> String {
    entry_name(&parse(key).unwrap())
}

#[test]
fn the_runner_arguments_dstack_writes_give_back_every_key_in_order() {
    let pod = job_pod("main-job-1", "main", "Running", &script());
    assert_eq!(keys_of(&pod), vec![PROJECT, ALICE, BOB]);
}

#[rstest]
#[case::blanks_separate_words("a  b\tc", &["a", "b", "c"])]
#[case::single_quotes_are_literal("'a b' '$x \\n'", &["a b", "$x \\n"])]
#[case::shlex_quotes_a_single_quote_so(r#"'it'"'"'s'"#, &["it's"])]
#[case::double_quotes_keep_blanks_and_some_escapes(r#""a \"b\" \$c \d""#, &[r#"a "b" $c \d"#])]
#[case::a_backslash_outside_quotes_escapes_one_character(r"a\ b c\\", &["a b", r"c\"])]
#[case::an_empty_quoted_word_is_a_word("x '' y", &["x", "", "y"])]
#[case::an_unclosed_quote_ends_the_text("x 'y z", &["x", "y z"])]
#[case::operators_between_blanks_are_words("a && b", &["a", "&&", "b"])]
fn shell_words_split_as_the_shell_splits(#[case] text: &str, #[case] words: &[&str]) {
    assert_eq!(shell_words(text), words);
}

#[rstest]
#[case::the_flag_and_its_value_as_two_words(&["--ssh-authorized-key", "ssh-ed25519 AAAA x"], &["ssh-ed25519 AAAA x"])]
#[case::the_flag_with_an_equals_sign(&["--ssh-authorized-key=ssh-ed25519 AAAA"], &["ssh-ed25519 AAAA"])]
#[case::a_flag_at_the_end_without_a_value(&["start", "--ssh-authorized-key"], &[])]
#[case::no_flag_no_key(&["start", "--ssh-port", "10022"], &[])]
fn keys_are_read_from_the_command_and_arguments(#[case] args: &[&str], #[case] keys: &[&str]) {
    let pod: Pod = serde_json::from_value(json!({
        "spec": {"containers": [{"name": "c", "command": ["runner"], "args": args}]},
    }))
    .unwrap();
    assert_eq!(keys_of(&pod), keys);
}

#[test]
fn the_project_key_is_left_out_and_users_keys_become_jump_only_entries() {
    let pod = job_pod("main-job-1", "main", "Running", &script());
    let granted = granted([&pod]);
    assert_eq!(
        granted,
        BTreeMap::from([(entry(ALICE), line(ALICE)), (entry(BOB), line(BOB))])
    );
    assert!(
        granted
            .values()
            .all(|l| l.starts_with("command=\"/bin/false\" ")),
        "{granted:?}"
    );
    assert!(granted.keys().all(|k| k.starts_with(ENTRY_PREFIX)));
    assert!(
        granted
            .keys()
            .all(|k| crate::keys::entry_name_problem(k).is_none()),
        "entry names are valid Secret keys: {granted:?}"
    );
}

#[rstest]
#[case::a_pending_job_counts("Pending", true)]
#[case::a_running_job_counts("Running", true)]
#[case::a_finished_job_does_not("Succeeded", false)]
#[case::a_failed_job_does_not("Failed", false)]
fn keys_of_finished_jobs_go(#[case] phase: &str, #[case] kept: bool) {
    let pod = job_pod("main-job-1", "main", phase, &script());
    assert_eq!(!granted([&pod]).is_empty(), kept);
}

#[test]
fn a_terminating_job_pod_is_a_finished_job() {
    let mut pod = job_pod("main-job-1", "main", "Running", &script());
    pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-12-05T00:00:00Z".parse().unwrap(),
    ));
    assert!(granted([&pod]).is_empty());
}

#[test]
fn a_key_that_is_not_a_public_key_is_skipped() {
    let script = format!(
        "runner --ssh-authorized-key '{PROJECT}' --ssh-authorized-key 'not a key' --ssh-authorized-key '{BOB}'"
    );
    let pod = job_pod("j", "main", "Running", &script);
    assert_eq!(
        granted([&pod]).into_keys().collect::<Vec<_>>(),
        [entry(BOB)]
    );
}

#[test]
fn two_jobs_with_the_same_user_key_make_one_entry() {
    let a = job_pod("a", "main", "Running", &script());
    let b = job_pod("b", "main", "Running", &script());
    assert_eq!(granted([&a, &b]).len(), 2);
}

#[test]
fn the_cache_keeps_the_keys_and_drops_the_spec() {
    let mut pod = job_pod("main-job-1", "main", "Running", &script());
    let whole = granted([&pod]);
    slim_job_pod(&mut pod);
    assert!(pod.spec.is_none());
    assert_eq!(cached_keys(&pod), vec![PROJECT, ALICE, BOB]);
    assert_eq!(granted([&pod]), whole);
}

#[rstest]
#[case::dstacks_job_pod(json!({"app.kubernetes.io/name": "dstack-job", "k8s.dstack.ai/project": "main"}), Some("main"))]
#[case::another_app(json!({"app.kubernetes.io/name": "dstack-ssh-proxy", "k8s.dstack.ai/project": "main"}), None)]
#[case::no_project(json!({"app.kubernetes.io/name": "dstack-job"}), None)]
#[case::an_empty_project(json!({"app.kubernetes.io/name": "dstack-job", "k8s.dstack.ai/project": ""}), None)]
fn a_job_pod_is_known_by_its_labels(#[case] labels: Value, #[case] project: Option<&str>) {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"labels": labels}})).unwrap();
    assert_eq!(job_project(&pod), project);
}

fn secret(entries: &[(&str, &str)]) -> Secret {
    let data: BTreeMap<String, ByteString> = entries
        .iter()
        .map(|(k, v)| (k.to_string(), ByteString(format!("{v}\n").into_bytes())))
        .collect();
    Secret {
        metadata: ObjectMeta {
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..Secret::default()
    }
}

const NAME: &str = "dstack-main-ssh-jump-pod";

#[test]
fn no_secret_yet_is_created_with_the_granted_keys() {
    let granted = BTreeMap::from([(entry(ALICE), line(ALICE))]);
    let Write::Create(created) = decide("dstack", NAME, "main", None, &granted) else {
        panic!("a create");
    };
    assert_eq!(
        created.metadata.name.as_deref(),
        Some("dstack-main-ssh-jump-pod-authorized-keys")
    );
    assert_eq!(
        crate::keys::entries(Some(&created))
            .into_iter()
            .map(|e| (e.name, e.line))
            .collect::<BTreeMap<_, _>>(),
        granted
    );
}

#[test]
fn entries_of_the_operator_are_left_alone_and_stale_grants_removed() {
    let found = secret(&[
        ("alice", "command=\"/bin/false\" ssh-ed25519 AAAA operator"),
        (&entry(BOB), &line(BOB)),
    ]);
    let granted = BTreeMap::from([(entry(ALICE), line(ALICE))]);
    let Write::Patch(patch) = decide("dstack", NAME, "main", Some(&found), &granted) else {
        panic!("a patch");
    };
    assert_eq!(patch["metadata"]["resourceVersion"], "42");
    let data = patch["data"].as_object().unwrap();
    assert_eq!(data.len(), 2, "{patch}");
    assert_eq!(data[&entry(BOB)], Value::Null);
    assert_eq!(
        data[&entry(ALICE)],
        json!(STANDARD.encode(format!("{}\n", line(ALICE))))
    );
}

#[test]
fn the_secret_holding_exactly_the_grants_is_not_written() {
    let found = secret(&[("alice", "x"), (&entry(BOB), &line(BOB))]);
    let granted = BTreeMap::from([(entry(BOB), line(BOB))]);
    assert_eq!(
        decide("dstack", NAME, "main", Some(&found), &granted),
        Write::None
    );
    assert_eq!(
        decide("dstack", NAME, "main", None, &BTreeMap::new()),
        Write::None,
        "no grant and no Secret: nothing to create"
    );
}
