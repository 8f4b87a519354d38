//! The jumppod host: keeps one guaranteed, correctly labelled SSH jump pod per dstack project
//! running, through a ReplicaSet and a NodePort Service, checked by the same policy Wasm the
//! cluster's Kubewarden runs.
//!
//! observe -> plan (pure) -> apply (thin, 409-tolerant, retrying transient errors) -> report.

pub mod api;
pub mod apply;
pub mod config;
#[cfg(feature = "sim")]
pub mod demo;
pub mod ensure;
pub mod error;
pub mod manifest;
pub mod observe;
pub mod plan;
pub mod policy;
pub mod rbac;
pub mod resolve;
pub mod status;

pub use config::{Config, RawConfig};
pub use ensure::{EnsureReport, PolicyGate, ensure};
pub use error::HostError;
pub use resolve::{Proxy, resolve};
