//! The jump-pod contract of dstack's SSH jump pod, shared by the Kubewarden policy (Wasm) and
//! the native host: the label schema, Kubernetes quantities, the rules, the mutation (the kit
//! among it) and the settings. Pure functions over typed k8s-openapi objects and borrowed views of the
//! request's JSON; no I/O.

pub mod admission;
pub mod json;
pub mod kit;
pub mod mutate;
mod outlined;
pub mod payload;
pub mod quantity;
pub mod rules;
pub mod schema;
pub mod settings;
pub mod splice;
pub mod verdict;
pub mod view;

pub use admission::{Request, judge};
pub use quantity::Quantity;
pub use settings::{Contract, Settings};
pub use verdict::{Mutated, Rejection, Verdict, Warning};
