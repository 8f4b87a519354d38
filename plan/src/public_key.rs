//! OpenSSH public keys as `authorized_keys` holds them: parsed and checked (the type is known,
//! the blob says the same type), fingerprinted as `ssh-keygen -l` prints them.

use crate::error::ConfigError;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use sha2::{Digest, Sha256};

/// What restricts a user's key to jumping, as dstack writes it: no shell, no command; sshd still
/// opens the forwarding channels `ssh -J` uses.
pub const USER_KEY_OPTIONS: &str = "command=\"/bin/false\"";

/// The key types OpenSSH accepts in `authorized_keys`.
pub(crate) const KEY_TYPES: &[&str] = &[
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "ssh-dss",
];

/// An OpenSSH public key, checked: its type is known and its blob says the same type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    pub kind: String,
    /// The key blob, base64 as written.
    pub blob: String,
    pub comment: String,
}

impl PublicKey {
    /// Parses one `type base64 [comment]` line; `field` names the input in errors.
    pub fn parse(field: &str, text: &str) -> Result<PublicKey, ConfigError> {
        let line = text.trim();
        let bad = |problem: &str| ConfigError {
            field: field.to_owned(),
            value: line.chars().take(120).collect(),
            problem: problem.to_owned(),
        };
        if line.contains("PRIVATE KEY") {
            return Err(ConfigError {
                value: String::new(),
                ..bad("is a private key: give the public key (the .pub file beside it)")
            });
        }
        if line.is_empty() {
            return Err(bad("must not be empty"));
        }
        if line.contains(['\n', '\r']) {
            return Err(bad("must be one key on one line"));
        }
        let mut parts = line.split_whitespace();
        let kind = parts.next().unwrap_or_default();
        if !KEY_TYPES.contains(&kind) {
            return Err(bad(&format!(
                "is not an OpenSSH public key (`ssh-ed25519 AAAA... comment`): {kind:?} is not a key type ({}); options such as command=... are not accepted, jumppod writes them",
                KEY_TYPES.join(", ")
            )));
        }
        let blob = parts.next().unwrap_or_default();
        let decoded = STANDARD
            .decode(blob)
            .map_err(|e| bad(&format!("its key data is not base64: {e}")))?;
        if embedded_type(&decoded) != Some(kind.as_bytes()) || !has_key_material(kind, &decoded) {
            return Err(bad(&format!(
                "its key data is not a {kind} key (truncated, or another key's type)"
            )));
        }
        // A single quote would break the kubectl command that drift reports for the project key.
        if line.contains('\'') {
            return Err(bad("must not contain a single quote"));
        }
        Ok(PublicKey {
            kind: kind.to_owned(),
            blob: blob.to_owned(),
            comment: parts.collect::<Vec<_>>().join(" "),
        })
    }

    /// SHA-256 of the key data (checked to be base64 by `parse`).
    fn digest(&self) -> [u8; 32] {
        Sha256::digest(STANDARD.decode(&self.blob).unwrap_or_default()).into()
    }

    /// `SHA256:...`, as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> String {
        format!("SHA256:{}", STANDARD_NO_PAD.encode(self.digest()))
    }

    /// The Secret entry's default name: `key-` and 16 hex digits of the fingerprint.
    pub fn default_name(&self) -> String {
        let hex: String = self.digest()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("key-{hex}")
    }

    /// The `authorized_keys` line of a user: restricted to jumping.
    pub fn user_line(&self) -> String {
        let mut line = format!("{USER_KEY_OPTIONS} {} {}", self.kind, self.blob);
        if !self.comment.is_empty() {
            line.push(' ');
            line.push_str(&self.comment);
        }
        line
    }
}

/// The type string at the start of an SSH key blob (`uint32 length`, then the name).
fn embedded_type(blob: &[u8]) -> Option<&[u8]> {
    let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    blob.get(4..4 + len)
}

/// Whether key material follows the type: an Ed25519 key is exactly its 32 bytes.
fn has_key_material(kind: &str, blob: &[u8]) -> bool {
    let after_type = 4 + kind.len();
    match kind {
        "ssh-ed25519" => blob.len() == after_type + 4 + 32,
        _ => blob.len() > after_type + 4,
    }
}
