//! The keys dstack granted to a project's live jobs, kept in the users' keys Secret so that
//! every jump pod has them, a replacement from its start.
//!
//! dstack (0.22.x and its ReplicaSet change alike) grants a job's users the jump host by
//! appending `command="/bin/false" <key>` to the running jump pod's `authorized_keys` over
//! SSH, once per job; a replacement pod starts without those lines. But every job pod carries
//! the same keys in its own spec: dstack starts its runner with one `--ssh-authorized-key KEY`
//! argument per key, the project's first (`build_authorized_keys`), inside the `/bin/sh -c`
//! script of the job container (`get_docker_commands`). So the keys of the live jobs can be
//! read from the API, without SSH, and written into the Secret `<name>-authorized-keys` that
//! every jump pod merges (`jumppod keys` writes the same Secret; entries of its own are left
//! alone). Keys of finished jobs go.

use crate::keys::{self, Write};
use crate::objects::is_active;
use crate::public_key::PublicKey;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jumppod::schema;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use std::collections::BTreeMap;

/// dstack's `app.kubernetes.io/name` of a job pod (`build_base_labels(component="job")`).
pub const JOB_APP: &str = "dstack-job";
/// The label naming a dstack object's project.
pub const PROJECT_LABEL: &str = "k8s.dstack.ai/project";
/// The runner's flag before each authorized key (dstack's `get_docker_commands`).
pub const KEY_FLAG: &str = "--ssh-authorized-key";
/// The Secret entries the controller owns: one per key granted to a live job.
pub const ENTRY_PREFIX: &str = "dstack-job-";

/// The project of a dstack job pod, by its labels.
pub fn job_project(pod: &Pod) -> Option<&str> {
    let labels = pod.metadata.labels.as_ref()?;
    (labels.get(schema::NAME_LABEL).map(String::as_str) == Some(JOB_APP))
        .then(|| labels.get(PROJECT_LABEL).map(String::as_str))
        .flatten()
        .filter(|p| !p.is_empty())
}

/// The keys a job pod's runner is started with, in order (the project's first), as written.
pub fn keys_of(pod: &Pod) -> Vec<String> {
    let mut keys = Vec::new();
    for container in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        let argv: Vec<&String> = container
            .command
            .iter()
            .flatten()
            .chain(container.args.iter().flatten())
            .collect();
        // The runner's own argv, or a `-c` script holding its command line (dstack's).
        scan(argv.iter().map(|a| a.as_str()), &mut keys);
        for script in argv
            .iter()
            .filter(|a| a.contains(KEY_FLAG) && !a.starts_with(KEY_FLAG))
        {
            let words = shell_words(script);
            scan(words.iter().map(String::as_str), &mut keys);
        }
    }
    keys
}

/// The values of `--ssh-authorized-key VALUE` and `--ssh-authorized-key=VALUE` among `words`.
fn scan<'a>(mut words: impl Iterator<Item = &'a str>, keys: &mut Vec<String>) {
    while let Some(word) = words.next() {
        if word == KEY_FLAG {
            keys.extend(words.next().map(str::to_owned));
        } else if let Some(key) = word
            .strip_prefix(KEY_FLAG)
            .and_then(|w| w.strip_prefix('='))
        {
            keys.push(key.to_owned());
        }
    }
}

/// The words of a POSIX shell command line, as the shell would split them, enough to read
/// `shlex.join`'s quoting back: blanks separate words, single quotes take everything up to the
/// next one literally, double quotes keep blanks and honour `\` before `"`, `\`, `$` and a
/// backquote, and a `\` outside quotes takes the next character literally. Operators (`&&`, `;`)
/// come out as words of their own when blanks surround them, as dstack writes them.
pub fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
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
                        '\\' => match chars.next() {
                            Some(n @ ('"' | '\\' | '$' | '`')) => word.push(n),
                            Some('\n') => {}
                            Some(n) => {
                                word.push('\\');
                                word.push(n);
                            }
                            None => word.push('\\'),
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(n) => word.push(n),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The users' keys the live job pods of a project were granted (every key but the first of
/// each, the project's), as Secret entries: `dstack-job-<16 hex digits of the fingerprint>`
/// holding the jump-only line. A key that is not an OpenSSH public key is skipped (dstack's
/// `normalize_authorized_keys` skips it too); a comment that could not be written safely is
/// left out.
pub fn granted<'a>(job_pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    for pod in job_pods.into_iter().filter(|p| is_active(p)) {
        for text in cached_keys(pod).iter().skip(1) {
            let Some(key) = parse(text) else { continue };
            entries.insert(entry_name(&key), key.user_line());
        }
    }
    entries
}

/// `dstack-job-` and the 16 hex digits `jumppod keys` names a key by.
fn entry_name(key: &PublicKey) -> String {
    let default = key.default_name();
    let hex = default.strip_prefix("key-").unwrap_or(&default);
    format!("{ENTRY_PREFIX}{hex}")
}

fn parse(text: &str) -> Option<PublicKey> {
    PublicKey::parse("key", text).ok().or_else(|| {
        // Without its comment: the key is what authorizes, the comment only names it.
        let mut parts = text.split_whitespace();
        let bare = format!("{} {}", parts.next()?, parts.next()?);
        PublicKey::parse("key", &bare).ok()
    })
}

/// The write that makes the Secret `found` (None: absent) hold exactly `granted` among the
/// controller's entries, the others untouched: a create, a merge patch carrying the
/// resourceVersion it was decided on, or nothing.
pub fn decide(
    namespace: &str,
    jump_pod: &str,
    project: &str,
    found: Option<&Secret>,
    granted: &BTreeMap<String, String>,
) -> Write {
    let present: BTreeMap<String, String> = keys::entries(found)
        .into_iter()
        .filter(|e| e.name.starts_with(ENTRY_PREFIX))
        .map(|e| (e.name, e.line))
        .collect();
    if &present == granted {
        return Write::None;
    }
    let Some(found) = found else {
        let data = granted
            .iter()
            .map(|(k, v)| (k.clone(), ByteString(format!("{v}\n").into_bytes())))
            .collect();
        return Write::Create(Box::new(Secret {
            metadata: ObjectMeta {
                name: Some(crate::manifest::keys_secret_name(jump_pod)),
                namespace: Some(namespace.to_owned()),
                labels: Some(schema::current_labels(jump_pod, project)),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(data),
            ..Secret::default()
        }));
    };
    let mut data = serde_json::Map::new();
    for name in present.keys().filter(|n| !granted.contains_key(*n)) {
        data.insert(name.clone(), serde_json::Value::Null);
    }
    for (name, line) in granted {
        if present.get(name) != Some(line) {
            data.insert(name.clone(), json!(STANDARD.encode(format!("{line}\n"))));
        }
    }
    Write::Patch(json!({
        "metadata": {"resourceVersion": found.metadata.resource_version},
        "data": data,
    }))
}

/// What the pod cache keeps of a job pod: its keys, read once here, in the annotation
/// [`KEYS_ANNOTATION`], and no spec.
pub const KEYS_ANNOTATION: &str = "jumppod.io/job-keys";

/// Slims a job pod for the cache: the keys its spec carries move into [`KEYS_ANNOTATION`].
pub fn slim_job_pod(pod: &mut Pod) {
    let keys = keys_of(pod).join("\n");
    pod.spec = None;
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = Some(BTreeMap::from([(KEYS_ANNOTATION.to_owned(), keys)]));
    if let Some(status) = pod.status.as_mut() {
        *status = k8s_openapi::api::core::v1::PodStatus {
            phase: status.phase.take(),
            ..Default::default()
        };
    }
}

/// The keys of a job pod as the cache holds it (slimmed) or as read (whole).
pub fn cached_keys(pod: &Pod) -> Vec<String> {
    match pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(KEYS_ANNOTATION))
    {
        Some(keys) if pod.spec.is_none() => keys.lines().map(str::to_owned).collect(),
        _ => keys_of(pod),
    }
}

#[cfg(test)]
mod tests;
