//! The controllers: garbage collector, ReplicaSet controller, scheduler, kubelet and pod GC.
//! Each pass runs under the state lock; passes repeat until nothing changes.

mod garbage_collector;
mod kubelet;
mod pod_gc;
mod pod_state;
mod replicaset;
mod scheduler;

pub use kubelet::{evicted, with_phase};
pub use pod_gc::gc_failed;

use crate::cluster::Cluster;
use crate::resources::{self, ResDef};
use crate::store::State;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// `settle` waits for due kubelet/termination work only within this horizon.
const SETTLE_HORIZON: Duration = Duration::from_secs(5);

fn pods_def() -> &'static ResDef {
    resources::by_name("pods").unwrap()
}

/// Background loop: a pass whenever something changed or work falls due.
pub async fn run_background(inner: Arc<Cluster>, mut shutdown: watch::Receiver<bool>) {
    loop {
        // A restless run waits like a quiet one: the tests' own bounded waits say what is missing.
        let _ = run_until_quiet(&inner);
        let next = next_due(&inner.state(), None);
        let sleep = async {
            match next {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = inner.notify.notified() => {}
            _ = sleep => {}
            _ = shutdown.changed() => return,
        }
    }
}

fn next_due(st: &State, horizon: Option<Instant>) -> Option<Instant> {
    st.kubelet_due
        .iter()
        .map(|d| d.0)
        .chain(st.deletion_due.iter().map(|d| d.0))
        .filter(|d| horizon.is_none_or(|h| *d <= h))
        .min()
}

/// Passes in a row that may change something before the controllers count as fighting.
pub const MAX_PASSES: usize = 1000;

/// What a run of passes ended in.
pub enum Passes {
    /// A pass changed nothing; work falls due at this instant, if within the horizon.
    Quiet(Option<Instant>),
    /// [`MAX_PASSES`] passes all changed something; the objects the last one changed.
    Restless(Vec<String>),
}

/// Runs passes until one changes nothing, or names what still changes after [`MAX_PASSES`].
pub fn run_until_quiet(inner: &Cluster) -> Passes {
    let mut st = inner.state();
    for _ in 1..MAX_PASSES {
        let before = st.rv;
        pass(&mut st, inner.pod_gc);
        if st.rv == before {
            return Passes::Quiet(next_due(&st, Some(Instant::now() + SETTLE_HORIZON)));
        }
    }
    // The last pass allowed: kept apart so the failure can say what it changed.
    let before = st.rv;
    let had = object_versions(&st);
    pass(&mut st, inner.pod_gc);
    if st.rv == before {
        return Passes::Quiet(next_due(&st, Some(Instant::now() + SETTLE_HORIZON)));
    }
    let now = object_versions(&st);
    let mut changed: Vec<String> = now
        .iter()
        .filter(|(key, rv)| had.get(*key) != Some(*rv))
        .map(|(key, _)| key.clone())
        .collect();
    changed.extend(
        had.keys()
            .filter(|key| !now.contains_key(*key))
            .map(|key| format!("{key} (removed)")),
    );
    Passes::Restless(changed)
}

/// Every object as `resource namespace/name`, with its resourceVersion.
fn object_versions(st: &State) -> std::collections::BTreeMap<String, String> {
    resources::RESOURCES
        .iter()
        .flat_map(|r| {
            st.iter(r.resource, None).map(move |o| {
                let ns = crate::meta::meta_str(o, "namespace");
                let name = crate::meta::meta_str(o, "name");
                let key = if ns.is_empty() {
                    format!("{} {name}", r.resource)
                } else {
                    format!("{} {ns}/{name}", r.resource)
                };
                (key, crate::meta::meta_str(o, "resourceVersion").to_string())
            })
        })
        .collect()
}

/// The work `settle` would still wait for: pods due to start or to finish terminating.
pub fn due_work(st: &State) -> Vec<String> {
    let start = st
        .kubelet_due
        .iter()
        .map(|(_, ns, name, _)| format!("the kubelet to start pod {ns}/{name}"));
    let end = st
        .deletion_due
        .iter()
        .map(|(_, ns, name, _)| format!("pod {ns}/{name} to finish terminating"));
    start.chain(end).collect()
}

fn pass(st: &mut State, pod_gc: bool) {
    kubelet::finish_terminations(st);
    if st.gc_needed {
        st.gc_needed = false;
        garbage_collector::garbage_collect(st);
    }
    if pod_gc {
        pod_gc::gc_failed(st);
    }
    replicaset::replicasets(st);
    scheduler::schedule(st);
    kubelet::kubelet(st);
}
