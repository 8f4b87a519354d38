//! Pod GC: removes terminated (Failed) pods.

use super::pod_state::phase;
use super::pods_def;
use crate::meta::meta_str;
use crate::store::State;

/// Removes every Failed pod.
pub fn gc_failed(st: &mut State) {
    let failed: Vec<(String, String)> = st
        .iter("pods", None)
        .filter(|p| phase(p) == "Failed")
        .map(|p| {
            (
                meta_str(p, "namespace").to_string(),
                meta_str(p, "name").to_string(),
            )
        })
        .collect();
    for (ns, name) in failed {
        st.remove(pods_def(), &ns, &name);
    }
}
