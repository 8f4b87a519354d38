//! The garbage collector: deletes objects all of whose owners are gone.

use crate::meta::meta_str;
use crate::request::Ctx;
use crate::resources;
use crate::store::{DeleteOpts, State};
use serde_json::Value;
use std::collections::HashSet;

/// Deletes objects all of whose owners are gone.
pub(super) fn garbage_collect(st: &mut State) {
    let uids: HashSet<String> = resources::RESOURCES
        .iter()
        .flat_map(|r| st.iter(r.resource, None))
        .map(|o| meta_str(o, "uid").to_string())
        .collect();
    let mut doomed = Vec::new();
    for r in resources::RESOURCES {
        for o in st.iter(r.resource, None) {
            let Some(refs) = o
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
            else {
                continue;
            };
            let live = refs.iter().any(|x| {
                x.get("uid")
                    .and_then(Value::as_str)
                    .is_some_and(|u| uids.contains(u))
            });
            if !refs.is_empty() && !live {
                doomed.push((
                    r,
                    meta_str(o, "namespace").to_string(),
                    meta_str(o, "name").to_string(),
                ));
            }
        }
    }
    for (r, ns, name) in doomed {
        let opts = DeleteOpts {
            propagation: Some("Background".into()),
            ..DeleteOpts::default()
        };
        let _ = st.delete(
            r,
            Some(&ns),
            &name,
            &opts,
            &mut Ctx::user("system:serviceaccount:kube-system:generic-garbage-collector"),
        );
    }
}
