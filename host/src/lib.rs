//! The jumppod host: keeps one guaranteed, correctly labelled SSH jump pod per dstack project
//! running, through a ReplicaSet and a NodePort Service, checked by the contract the cluster's
//! Kubewarden policy enforces.
//!
//! observe (reads) -> plan (pure) -> gate (the policy judges what would be created) -> apply
//! (thin, 409-tolerant, retrying transient errors) -> report.

pub mod api;
pub mod apply;
pub mod cli;
pub mod commands;
pub(crate) mod controller;
pub mod ensure;
pub mod error;
#[cfg(feature = "wasm")]
pub mod eval;
pub(crate) mod gate;
pub mod keys;
pub mod observe;
pub mod rbac;
pub mod reference;
pub mod resolve;
pub mod status;
#[cfg(feature = "wasm")]
pub(crate) mod webhook;

pub use ensure::{EnsureReport, ensure};
pub use error::HostError;
pub use gate::Gate;
pub use jumppod_plan::{Config, RawConfig};
pub use resolve::{Proxy, resolve};
