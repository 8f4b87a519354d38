//! The jumppod host: keeps one guaranteed, correctly labelled SSH jump pod per dstack project
//! running, through a ReplicaSet and a NodePort Service, checked by the contract the cluster's
//! Kubewarden policy enforces.
//!
//! observe (reads) -> plan (pure) -> gate (the policy judges what would be created) -> apply
//! (thin, 409-tolerant, retrying transient errors) -> report.

pub mod action;
pub mod api;
pub mod apply;
pub mod cli;
pub mod commands;
pub mod config;
pub mod controller;
pub mod ensure;
pub mod error;
#[cfg(feature = "wasm")]
pub mod eval;
pub mod gate;
pub mod keys;
pub mod manifest;
pub mod objects;
pub mod observe;
pub mod plan;
pub mod rbac;
pub mod resolve;
pub mod status;
#[cfg(feature = "wasm")]
pub mod webhook;

pub use config::{Config, RawConfig};
pub use ensure::{EnsureReport, ensure};
pub use error::HostError;
pub use gate::Gate;
pub use resolve::{Proxy, resolve};
