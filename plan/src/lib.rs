//! The host's pure half: everything jumppod decides, nothing it reads or writes. Values in,
//! values out: no client, no runtime, no clock (the callers pass `now`). Cargo enforces it: this
//! crate depends on the contract (`jumppod`), k8s-openapi and serde, not on kube or tokio.
//!
//! Modules, leaves first (no module imports one that imports it back; `tests/imports.rs`
//! checks it):
//! - [`error`]: the one error, an invalid value named by its field;
//! - [`public_key`]: OpenSSH public keys, parsed and fingerprinted;
//! - [`config`]: the configuration and its validation;
//! - [`manifest`]: the objects jumppod creates (namespace, ReplicaSet, Service);
//! - [`objects`]: reading names, phases, conditions, selectors and owners of what exists;
//! - [`action`]: the vocabulary: actions and findings;
//! - [`findings`]: what the scheduler, the ReplicaSet controller and the kubelet report;
//! - [`planner`]: observed objects in, a plan out (and drift of the template);
//! - [`keys`]: the Secret of users' keys: the one write a change needs;
//! - [`grants`]: the keys dstack granted to live jobs, read from their pods, kept in that Secret;
//! - [`refresh`]: the running pods told of that Secret's change, so that their kubelet remounts it;
//! - [`nodes`]: the nodes in trouble, by how sure the cluster is, and what each kind allows;
//! - [`rotation`]: a pod on a silent node taken out of its Service's endpoints, not deleted;
//! - [`surge`]: a pod on a node going away replaced before it goes;
//! - [`keeper`]: a released dstack server's bare jump pod made again under its name, and its standby;
//! - [`controller`]: `jumppod run`'s decisions per project;
//! - [`lease`]: the leader election's step (client-go's semantics).

pub mod action;
pub mod config;
pub mod controller;
pub mod error;
pub mod findings;
pub mod grants;
pub mod keeper;
pub mod keys;
pub mod lease;
pub mod manifest;
pub mod nodes;
pub mod objects;
pub mod planner;
pub mod public_key;
pub mod refresh;
pub mod rotation;
pub mod surge;

pub use config::{Config, RawConfig};
pub use error::ConfigError;
