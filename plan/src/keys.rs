//! Users' SSH keys that outlive the pod: kept in the Secret `<name>-authorized-keys`, one
//! entry per key, which the ReplicaSet's template mounts (see `manifest::SSHD_SCRIPT`).
//!
//! dstack authorizes a job's user by appending `command="/bin/false" <key>` to the running
//! pod's `authorized_keys`; a replacement pod starts without it. `jumppod keys add` writes the
//! same line into the Secret, so every later pod has it from its start, and the running pod,
//! told of the change ([`crate::refresh`]), within [`PROPAGATION`].
//!
//! Decide apart from write: [`decide`] turns the Secret as read and the wanted change into one
//! write (or none); the host's `keys::change` reads, decides and writes, again on a lost race.

use crate::config::Config;
use crate::error::ConfigError;
use crate::manifest::keys_secret_name;
use crate::public_key::{KEY_TYPES, PublicKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jumppod::schema;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt;

/// How long a change of the Secret takes to reach a running pod that was told of it
/// ([`crate::refresh`]): its kubelet remounts the Secret at once, then the pod's merge loop
/// copies it within `manifest::KEYS_MERGE_SECONDS`.
pub const PROPAGATION: &str =
    "about 10 seconds (its kubelet remounts the Secret at once, then the pod's 10-second merge)";

/// The same for a running pod that was not told: the kubelet remounts a Secret on its
/// periodic sync (`syncFrequency`, 1 minute by default, plus up to half of it as jitter).
pub const PROPAGATION_UNTOLD: &str = "about 100 seconds (the kubelet's 1-minute sync and its jitter, then the pod's 10-second merge)";

/// Why `name` cannot name a Secret entry (the API server's rule for data keys), or None.
pub fn entry_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 253 {
        return Some("must be 1 to 253 characters");
    }
    if name == "." || name == ".." || name.starts_with("..") {
        // `..data` and the like are the kubelet's own entries in the mounted volume.
        return Some("must not start with '..'");
    }
    (!name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
    .then_some("must consist of alphanumerics, '-', '_' or '.'")
}

/// One key of the Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub name: String,
    /// The line as the pod's `authorized_keys` gets it.
    pub line: String,
    /// Null when the line is not a key jumppod can read (written by hand).
    pub fingerprint: Option<String>,
    pub comment: String,
}

impl Entry {
    fn from_data(name: &str, value: &ByteString) -> Entry {
        let line = String::from_utf8_lossy(&value.0).trim().to_owned();
        // The key follows the options, if any: find the first known type.
        let key = line
            .split_whitespace()
            .position(|t| KEY_TYPES.contains(&t))
            .map(|i| {
                line.split_whitespace()
                    .skip(i)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .and_then(|k| PublicKey::parse("entry", &k).ok());
        Entry {
            name: name.to_owned(),
            fingerprint: key.as_ref().map(PublicKey::fingerprint),
            comment: key.map(|k| k.comment).unwrap_or_default(),
            line,
        }
    }

    fn has_key(&self, key: &PublicKey) -> bool {
        self.line.split_whitespace().any(|t| t == key.blob.as_str())
    }
}

/// The entries of the Secret, by name.
pub fn entries(secret: Option<&Secret>) -> Vec<Entry> {
    secret
        .and_then(|s| s.data.as_ref())
        .map(|data| data.iter().map(|(k, v)| Entry::from_data(k, v)).collect())
        .unwrap_or_default()
}

/// What to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Authorize `key` under `name` (replacing what `name` held).
    Add { name: String, key: PublicKey },
    /// Remove the entry named so, or holding that key.
    Remove(Selector),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    Name(String),
    Key(PublicKey),
}

impl Change {
    /// `add`'s argument: a key; the entry name defaults to the key's.
    pub fn add(key_text: &str, name: Option<&str>) -> Result<Change, ConfigError> {
        let key = PublicKey::parse("key", key_text)?;
        let name = name.map_or_else(|| key.default_name(), str::to_owned);
        if let Some(problem) = entry_name_problem(&name) {
            return Err(ConfigError {
                field: "--name".into(),
                value: name,
                problem: problem.into(),
            });
        }
        Ok(Change::Add { name, key })
    }

    /// `remove`'s argument: an entry name, or a key.
    pub fn remove(text: &str) -> Result<Change, ConfigError> {
        let text = text.trim();
        if text.split_whitespace().count() > 1 || KEY_TYPES.contains(&text) {
            return Ok(Change::Remove(Selector::Key(PublicKey::parse(
                "key", text,
            )?)));
        }
        if let Some(problem) = entry_name_problem(text) {
            return Err(ConfigError {
                field: "NAME".into(),
                value: text.into(),
                problem: problem.into(),
            });
        }
        Ok(Change::Remove(Selector::Name(text.to_owned())))
    }
}

/// The one write a change needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    Create(Box<Secret>),
    /// A JSON merge patch, carrying the resourceVersion it was decided on: the API server
    /// refuses it with 409 Conflict if the Secret changed meanwhile (optimistic concurrency).
    Patch(serde_json::Value),
    None,
}

/// What a change did to the Secret's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EntryOutcome {
    Added,
    Replaced,
    Unchanged,
    Removed,
    NotPresent,
}

impl fmt::Display for EntryOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EntryOutcome::Added => "added",
            EntryOutcome::Replaced => "replaced",
            EntryOutcome::Unchanged => "already there, unchanged",
            EntryOutcome::Removed => "removed",
            EntryOutcome::NotPresent => "not there, nothing to remove",
        })
    }
}

/// The Secret of `config`'s jump pod, holding `data`.
pub fn secret(config: &Config, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(keys_secret_name(&config.name)),
            namespace: Some(config.namespace.clone()),
            labels: Some(schema::current_labels(&config.name, &config.project)),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Decides the write for `change` on the Secret as read. Pure.
pub fn decide(
    config: &Config,
    found: Option<&Secret>,
    change: &Change,
) -> (Write, EntryOutcome, String) {
    let present = entries(found);
    let resource_version = found.and_then(|s| s.metadata.resource_version.clone());
    let patch = |name: &str, value: serde_json::Value| {
        Write::Patch(json!({
            "metadata": {"resourceVersion": resource_version},
            "data": {name: value},
        }))
    };
    match change {
        Change::Add { name, key } => {
            let line = key.user_line();
            let outcome = match present.iter().find(|e| &e.name == name) {
                Some(e) if e.line == line => {
                    return (Write::None, EntryOutcome::Unchanged, name.clone());
                }
                Some(_) => EntryOutcome::Replaced,
                None => EntryOutcome::Added,
            };
            let value = format!("{line}\n");
            let write = match found {
                None => Write::Create(Box::new(secret(
                    config,
                    BTreeMap::from([(name.clone(), ByteString(value.into_bytes()))]),
                ))),
                Some(_) => patch(name, json!(STANDARD.encode(value))),
            };
            (write, outcome, name.clone())
        }
        Change::Remove(selector) => {
            let entry = present.iter().find(|e| match selector {
                Selector::Name(n) => &e.name == n,
                Selector::Key(k) => e.has_key(k),
            });
            match entry {
                Some(e) => (
                    patch(&e.name, serde_json::Value::Null),
                    EntryOutcome::Removed,
                    e.name.clone(),
                ),
                None => {
                    let name = match selector {
                        Selector::Name(n) => n.clone(),
                        Selector::Key(k) => k.fingerprint(),
                    };
                    (Write::None, EntryOutcome::NotPresent, name)
                }
            }
        }
    }
}

/// What `jumppod keys add|remove` did.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeReport {
    pub namespace: String,
    pub secret: String,
    pub entry: String,
    pub outcome: EntryOutcome,
    /// The running jump pods told to remount the Secret as it is now ([`crate::refresh`]).
    pub told: Vec<String>,
    /// How long until a running pod has the change.
    pub propagation: &'static str,
}

impl ChangeReport {
    /// What happened to the entry, in one line.
    pub fn headline(&self) -> String {
        format!(
            "key {} in secret {}/{}: {}",
            self.entry, self.namespace, self.secret, self.outcome
        )
    }
}

impl fmt::Display for ChangeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.headline())?;
        let changed = matches!(
            self.outcome,
            EntryOutcome::Added | EntryOutcome::Replaced | EntryOutcome::Removed
        );
        if changed {
            writeln!(f, "  a replacement jump pod has it from its start")?;
        }
        if !self.told.is_empty() {
            writeln!(
                f,
                "  running jump pod(s) {} told to remount the Secret: they have it within {}",
                self.told.join(", "),
                self.propagation
            )?;
        } else if changed {
            writeln!(
                f,
                "  no running jump pod to tell: one that starts mounts it as it is"
            )?;
        }
        Ok(())
    }
}

/// What `jumppod keys list` shows.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyList {
    pub namespace: String,
    pub secret: String,
    pub exists: bool,
    pub entries: Vec<Entry>,
}

impl fmt::Display for KeyList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.exists {
            return writeln!(
                f,
                "secret {}/{}: none yet (no user key added; the project key is in the ReplicaSet's template)",
                self.namespace, self.secret
            );
        }
        writeln!(
            f,
            "secret {}/{}: {} key(s)",
            self.namespace,
            self.secret,
            self.entries.len()
        )?;
        for e in &self.entries {
            writeln!(
                f,
                "  {}  {}  {}",
                e.name,
                e.fingerprint
                    .as_deref()
                    .unwrap_or("(not a key jumppod can read)"),
                e.comment
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const ALICE: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHVzZXIgYWxpY2UuLi4u alice@laptop";
    const BOB: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHVzZXIgYm9iLi4uLi4u";

    fn config() -> Config {
        Config::for_project("dstack", "main")
    }

    fn secret_with(entries: &[(&str, &str)]) -> Secret {
        let mut s = secret(
            &config(),
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(format!("{v}\n").into_bytes())))
                .collect(),
        );
        s.metadata.resource_version = Some("7".into());
        s
    }

    #[rstest]
    #[case::a_private_key_is_refused_without_echoing_it(
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "is a private key"
    )]
    #[case::an_unknown_type_is_named("ssh-foo AAAA x", "\"ssh-foo\" is not a key type")]
    #[case::options_are_refused("command=\"/bin/sh\" ssh-ed25519 AAAA", "options such as command")]
    #[case::data_that_is_not_base64("ssh-ed25519 not*base64", "not base64")]
    #[case::a_type_without_its_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5", "is not a ssh-ed25519 key")]
    #[case::a_truncated_key(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHVzZXIgYWxpY2Uu",
        "is not a ssh-ed25519 key"
    )]
    #[case::a_key_of_another_type_under_this_name(
        "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHVzZXIgYm9iLi4uLi4u",
        "is not a ssh-rsa key"
    )]
    #[case::two_keys_at_once("ssh-ed25519 AAAA\nssh-ed25519 AAAA", "one key on one line")]
    fn a_bad_key_is_refused_with_the_reason(#[case] text: &str, #[case] problem: &str) {
        let e = PublicKey::parse("key", text).unwrap_err();
        assert!(e.to_string().contains(problem), "{e}");
        assert!(!e.to_string().contains("BEGIN OPENSSH"), "{e}");
    }

    #[test]
    fn a_key_is_read_with_its_comment_and_restricted_for_a_user() {
        let key = PublicKey::parse("key", ALICE).unwrap();
        assert_eq!(key.comment, "alice@laptop");
        assert_eq!(key.user_line(), format!("command=\"/bin/false\" {ALICE}"));
        assert!(key.default_name().starts_with("key-") && key.default_name().len() == 20);
    }

    #[rstest]
    #[case::a_plain_name("alice", None)]
    #[case::dots_and_underscores("alice.job_1-a", None)]
    #[case::a_slash_is_not_a_data_key("a/b", Some("alphanumerics"))]
    #[case::the_kubelets_own_entries_are_reserved("..data", Some("'..'"))]
    fn entry_names_follow_the_api_servers_rule(#[case] name: &str, #[case] problem: Option<&str>) {
        let found = entry_name_problem(name);
        assert_eq!(found.is_some(), problem.is_some(), "{found:?}");
        if let (Some(f), Some(p)) = (found, problem) {
            assert!(f.contains(p), "{f}");
        }
    }

    #[test]
    fn the_first_key_creates_the_secret_with_the_restricted_line() {
        let change = Change::add(ALICE, Some("alice")).unwrap();
        let (write, outcome, entry) = decide(&config(), None, &change);
        assert_eq!((outcome, entry.as_str()), (EntryOutcome::Added, "alice"));
        let Write::Create(s) = write else {
            panic!("{write:?}")
        };
        assert_eq!(
            s.metadata.name.as_deref(),
            Some("dstack-main-ssh-jump-pod-authorized-keys")
        );
        let line = String::from_utf8(s.data.unwrap()["alice"].0.clone()).unwrap();
        assert_eq!(line, format!("command=\"/bin/false\" {ALICE}\n"));
    }

    #[rstest]
    #[case::a_new_name_is_added_by_a_patch_on_the_version_read(&[("bob", BOB)], EntryOutcome::Added)]
    #[case::another_key_under_the_same_name_replaces_it(&[("alice", BOB)], EntryOutcome::Replaced)]
    fn a_key_is_written_with_optimistic_concurrency(
        #[case] present: &[(&str, &str)],
        #[case] expected: EntryOutcome,
    ) {
        let present: Vec<(&str, String)> = present
            .iter()
            .map(|(n, k)| (*n, PublicKey::parse("k", k).unwrap().user_line()))
            .collect();
        let refs: Vec<(&str, &str)> = present.iter().map(|(n, l)| (*n, l.as_str())).collect();
        let found = secret_with(&refs);
        let change = Change::add(ALICE, Some("alice")).unwrap();
        let (write, outcome, _) = decide(&config(), Some(&found), &change);
        assert_eq!(outcome, expected);
        let Write::Patch(p) = write else {
            panic!("{write:?}")
        };
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        let line = STANDARD
            .decode(p["data"]["alice"].as_str().unwrap())
            .unwrap();
        assert!(String::from_utf8(line).unwrap().ends_with("alice@laptop\n"));
    }

    #[test]
    fn the_same_key_again_writes_nothing() {
        let line = PublicKey::parse("k", ALICE).unwrap().user_line();
        let found = secret_with(&[("alice", &line)]);
        let change = Change::add(ALICE, Some("alice")).unwrap();
        assert_eq!(decide(&config(), Some(&found), &change).0, Write::None);
    }

    #[rstest]
    #[case::by_name("alice", EntryOutcome::Removed)]
    #[case::by_key(ALICE, EntryOutcome::Removed)]
    #[case::by_key_without_its_comment(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGp1bXBwb2QgdGVzdCBrZXk6IHVzZXIgYWxpY2UuLi4u",
        EntryOutcome::Removed
    )]
    #[case::an_absent_name_is_nothing_to_do("carol", EntryOutcome::NotPresent)]
    #[case::an_absent_key_is_nothing_to_do(BOB, EntryOutcome::NotPresent)]
    fn a_key_is_removed_by_name_or_by_key(#[case] text: &str, #[case] expected: EntryOutcome) {
        let line = PublicKey::parse("k", ALICE).unwrap().user_line();
        let found = secret_with(&[("alice", &line)]);
        let (write, outcome, _) = decide(&config(), Some(&found), &Change::remove(text).unwrap());
        assert_eq!(outcome, expected);
        match write {
            Write::Patch(p) => {
                assert_eq!(p["data"], json!({"alice": null}));
                assert_eq!(p["metadata"]["resourceVersion"], "7");
            }
            Write::None => assert_eq!(expected, EntryOutcome::NotPresent),
            Write::Create(_) => panic!("a removal never creates"),
        }
    }

    #[test]
    fn entries_show_the_fingerprint_ssh_keygen_prints() {
        let line = PublicKey::parse("k", ALICE).unwrap().user_line();
        let found = secret_with(&[("alice", &line), ("hand", "not a key")]);
        let list = entries(Some(&found));
        assert_eq!(list[0].comment, "alice@laptop");
        // What `ssh-keygen -lf` (OpenSSH 9.2) prints for ALICE.
        assert_eq!(
            list[0].fingerprint.as_deref(),
            Some("SHA256:pNpnj+bt0Ij47gSKdxSbHEbm2WLXU4wkQdw5c8pbOM4")
        );
        assert_eq!(list[1].fingerprint, None);
    }
}
