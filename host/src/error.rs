//! Errors of the host, each with its exit code and a message that says what to do.

use crate::config::ConfigError;

/// Exit codes of the `jumppod` binary.
pub mod exit {
    pub const OK: i32 = 0;
    /// An unexpected error, or transient API errors that outlasted the deadline.
    pub const ERROR: i32 = 1;
    /// Bad flags or configuration.
    pub const USAGE: i32 = 2;
    /// The policy rejects what jumppod would create; nothing was written.
    pub const POLICY_REJECTED: i32 = 3;
    /// No ready jump pod (pending, unschedulable, or a finished legacy pod).
    pub const NOT_READY: i32 = 4;
    /// A permanent API error (403 Forbidden, 422 Invalid, ...).
    pub const API: i32 = 5;
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error(
        "the jumppod policy rejects the ReplicaSet this configuration describes, so nothing was written:\n  {message}"
    )]
    PolicyRejected { message: String },
    #[error("{0}")]
    NotReady(String),
    /// A permanent API error, explained.
    #[error("{message}")]
    Api {
        message: String,
        code: u16,
        reason: String,
    },
    /// Transient errors until the deadline.
    #[error("{0}")]
    GaveUp(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl HostError {
    pub fn exit_code(&self) -> i32 {
        match self {
            HostError::Config(_) => exit::USAGE,
            HostError::PolicyRejected { .. } => exit::POLICY_REJECTED,
            HostError::NotReady(_) => exit::NOT_READY,
            HostError::Api { .. } => exit::API,
            HostError::GaveUp(_) | HostError::Other(_) => exit::ERROR,
        }
    }

    /// A short machine-readable kind for `--output json`.
    pub fn kind(&self) -> &'static str {
        match self {
            HostError::Config(_) => "config",
            HostError::PolicyRejected { .. } => "policyRejected",
            HostError::NotReady(_) => "notReady",
            HostError::Api { .. } => "api",
            HostError::GaveUp(_) => "gaveUp",
            HostError::Other(_) => "error",
        }
    }
}
