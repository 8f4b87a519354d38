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
        run_until_quiet(&inner);
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

/// Runs passes until one changes nothing; returns when more work falls due soon.
pub fn run_until_quiet(inner: &Cluster) -> Option<Instant> {
    let mut st = inner.state();
    for _ in 0..1000 {
        let before = st.rv;
        pass(&mut st, inner.pod_gc);
        if st.rv == before {
            break;
        }
    }
    next_due(&st, Some(Instant::now() + SETTLE_HORIZON))
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
