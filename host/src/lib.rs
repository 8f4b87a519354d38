//! The jumppod host: keeps one guaranteed, correctly labelled SSH jump pod per dstack project
//! running, through a ReplicaSet and a NodePort Service, checked by the same policy Wasm the
//! cluster's Kubewarden runs.

pub mod policy;
