//! Which nodes have gone silent: their kubelet has not renewed the node's Lease (namespace
//! `kube-node-lease`, renewed every 10 s by default) for `--silent-node-after`. The
//! node-lifecycle controller calls such a node lost only after its `--node-monitor-grace-period`
//! (50 s by default), and evicts its pods after their toleration of it (300 s by default); a
//! standby or a surged replacement made once the node is silent serves SSH again well before.
//!
//! A renewal is dated by this controller's clock when the watch shows it, not by the time the
//! kubelet wrote into it, as the node-lifecycle controller does (its `probeTimestamp`): two
//! machines' clocks need not agree. So silence counts only while the watch is whole: its first
//! list is part of the sync gate, and from an error or a new list until the watch is back,
//! nothing is silent; then every Lease is dated anew, as at the start. An error lets the gate
//! go: with nothing silent, the projects are decided as if no node were.

use super::synced::{Synced, Watch};
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the kubelets keep their nodes' Leases.
pub(super) const NAMESPACE: &str = "kube-node-lease";
/// The watch of those Leases, as the sync gate names it.
pub(super) const WATCH: &str = "node leases";

/// When each node's Lease was last seen renewed, and which nodes are silent.
#[derive(Default)]
pub(super) struct Silence {
    after: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Node: its Lease's renewTime as last seen, and when that was seen.
    renewed: HashMap<String, (Option<String>, Instant)>,
    /// The nodes found silent.
    silent: BTreeSet<String>,
    /// Whether the watch is not whole (an error, a list under way): nothing is silent then.
    stale: bool,
}

impl Silence {
    /// The silent nodes, and why, by this clock. The reason names the threshold, not the time
    /// elapsed: it is part of the Events' message, and one cause is one series of Events, not
    /// an Event per reconcile.
    pub(super) fn silent(&self) -> BTreeMap<String, String> {
        let state = self.lock();
        if state.stale {
            return BTreeMap::new();
        }
        let why = format!(
            "has not renewed its Lease for {} s or more (its kubelet is silent)",
            self.after.as_secs()
        );
        state
            .silent
            .iter()
            .map(|node| (node.clone(), why.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A map of instants: a panic elsewhere cannot leave it half written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A Lease seen: its node renewed it if its renewTime changed. Names the node when it
    /// speaks again after being silent.
    fn seen(&self, lease: &Lease, now: Instant) -> Option<String> {
        let node = lease.metadata.name.clone()?;
        let renew = lease
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0.to_string());
        let mut state = self.lock();
        let changed = state
            .renewed
            .get(&node)
            .is_none_or(|(seen, _)| *seen != renew);
        if changed {
            state.renewed.insert(node.clone(), (renew, now));
            if state.silent.remove(&node) {
                tracing::info!(%node, "the node renews its Lease again");
                return Some(node);
            }
        }
        None
    }

    fn forget(&self, node: &str) -> Option<String> {
        let mut state = self.lock();
        state.renewed.remove(node);
        state.silent.remove(node).then(|| node.to_owned())
    }

    /// The watch failed or lists again: what it showed may be behind.
    fn behind(&self) {
        self.lock().stale = true;
    }

    /// The watch is whole again: every Lease is dated now, and the nodes silent before are
    /// named, since they are no longer.
    fn caught_up(&self, now: Instant) -> Vec<String> {
        let mut state = self.lock();
        if !state.stale {
            return Vec::new();
        }
        state.stale = false;
        for (_, at) in state.renewed.values_mut() {
            *at = now;
        }
        std::mem::take(&mut state.silent).into_iter().collect()
    }

    /// The nodes that went silent since the last look.
    fn newly_silent(&self, now: Instant) -> Vec<String> {
        let mut state = self.lock();
        let State {
            renewed,
            silent,
            stale,
        } = &mut *state;
        if *stale {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (node, (_, at)) in renewed.iter() {
            if now.duration_since(*at) >= self.after && silent.insert(node.clone()) {
                tracing::warn!(%node, after = ?self.after, "the node has not renewed its Lease: silent");
                found.push(node.clone());
            }
        }
        found
    }
}

/// Whether the controller may watch the nodes' Leases (a Role in `kube-node-lease` that
/// `jumppod rbac --controller` prints): without it, a lost node is known only once the
/// node-lifecycle controller says so.
pub(super) async fn may_watch(client: &Client) -> bool {
    super::access::may_list(
        Api::<Lease>::namespaced(client.clone(), NAMESPACE),
        &format!("the nodes' Leases in {NAMESPACE}"),
        "a jump pod on a lost node is replaced only once the node-lifecycle controller finds \
         the node lost; grant the Role `jumppod rbac --controller` prints",
    )
    .await
}

/// The watch of the nodes' Leases and a look every second for nodes gone silent: the nodes that
/// go silent or speak again.
pub(super) fn start(
    client: &Client,
    after: Duration,
    synced: Synced,
) -> (
    Arc<Silence>,
    impl Stream<Item = Result<Vec<String>, watcher::Error>> + Send + Unpin + use<>,
) {
    let silence = Arc::new(Silence {
        after,
        state: Mutex::new(State {
            stale: true,
            ..State::default()
        }),
    });
    let api: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let watch = Watch {
        kind: WATCH,
        namespace: None,
    };
    let watched = {
        let silence = silence.clone();
        watcher(api, watcher::Config::default().page_size(100))
            .default_backoff()
            .map(move |event| {
                let now = Instant::now();
                let event = match event {
                    Ok(event) => event,
                    Err(e) => {
                        // Nothing is silent while it fails, so nothing waits on it either: a
                        // Role withdrawn must not hold up every project.
                        silence.behind();
                        synced.listed(&watch);
                        return Err(e);
                    }
                };
                Ok(match event {
                    watcher::Event::Init => {
                        silence.behind();
                        synced.listing(&watch);
                        Vec::new()
                    }
                    watcher::Event::InitApply(lease) => {
                        silence.seen(&lease, now);
                        Vec::new()
                    }
                    watcher::Event::InitDone => {
                        synced.listed(&watch);
                        silence.caught_up(now)
                    }
                    watcher::Event::Apply(lease) => {
                        let mut back = silence.caught_up(now);
                        back.extend(silence.seen(&lease, now));
                        back
                    }
                    watcher::Event::Delete(lease) => {
                        let mut back = silence.caught_up(now);
                        back.extend(lease.metadata.name.and_then(|n| silence.forget(&n)));
                        back
                    }
                })
            })
    };
    let looks = {
        let silence = silence.clone();
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        futures::stream::poll_fn(move |cx| every.poll_tick(cx).map(Some))
            .map(move |_| Ok(silence.newly_silent(Instant::now())))
    };
    (
        silence,
        futures::stream::select(watched.boxed(), looks.boxed()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lease(node: &str, renewed: &str) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": node, "namespace": NAMESPACE},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renewed},
        }))
        .unwrap()
    }

    fn silence(after: u64) -> Silence {
        Silence {
            after: Duration::from_secs(after),
            ..Silence::default()
        }
    }

    #[test]
    fn a_node_is_silent_once_its_lease_is_not_renewed_for_the_threshold() {
        let silence = silence(20);
        let t0 = Instant::now();
        silence.seen(&lease("a", "2026-12-05T00:00:00.000000Z"), t0);
        assert!(
            silence
                .newly_silent(t0 + Duration::from_secs(19))
                .is_empty()
        );
        assert_eq!(silence.newly_silent(t0 + Duration::from_secs(20)), ["a"]);
        assert!(
            silence
                .newly_silent(t0 + Duration::from_secs(21))
                .is_empty(),
            "named once"
        );
        // The reason names the threshold, not the time elapsed: the Events it is written into
        // form one series.
        assert_eq!(
            silence.silent()["a"],
            "has not renewed its Lease for 20 s or more (its kubelet is silent)"
        );
    }

    #[test]
    fn while_the_watch_is_behind_no_node_is_silent_and_after_it_every_lease_is_dated_anew() {
        let silence = silence(20);
        let t0 = Instant::now();
        silence.seen(&lease("a", "2026-12-05T00:00:00.000000Z"), t0);
        silence.seen(&lease("b", "2026-12-05T00:00:00.000000Z"), t0);
        assert_eq!(silence.newly_silent(t0 + Duration::from_secs(20)).len(), 2);
        // The watch fails: what it showed may be behind, so nothing counts as silent.
        silence.behind();
        assert!(silence.silent().is_empty());
        assert!(
            silence
                .newly_silent(t0 + Duration::from_secs(60))
                .is_empty()
        );
        // Back: the nodes silent before are named (no longer silent), and silence is counted
        // again from now.
        let back = t0 + Duration::from_secs(61);
        assert_eq!(silence.caught_up(back), ["a", "b"]);
        assert!(
            silence
                .newly_silent(back + Duration::from_secs(19))
                .is_empty()
        );
        assert_eq!(
            silence.newly_silent(back + Duration::from_secs(20)).len(),
            2
        );
        assert!(silence.caught_up(back).is_empty(), "caught up once");
    }

    #[test]
    fn a_renewal_seen_again_unchanged_is_not_a_renewal() {
        let silence = silence(20);
        let t0 = Instant::now();
        silence.seen(&lease("a", "2026-12-05T00:00:00.000000Z"), t0);
        // A relist shows the same Lease again: the node said nothing new.
        silence.seen(
            &lease("a", "2026-12-05T00:00:00.000000Z"),
            t0 + Duration::from_secs(15),
        );
        assert_eq!(silence.newly_silent(t0 + Duration::from_secs(20)), ["a"]);
    }

    #[test]
    fn a_silent_node_that_renews_again_is_named_and_no_longer_silent() {
        let silence = silence(20);
        let t0 = Instant::now();
        silence.seen(&lease("a", "2026-12-05T00:00:00.000000Z"), t0);
        silence.newly_silent(t0 + Duration::from_secs(30));
        assert_eq!(
            silence.seen(
                &lease("a", "2026-12-05T00:00:31.000000Z"),
                t0 + Duration::from_secs(31)
            ),
            Some("a".to_owned())
        );
        assert!(silence.silent().is_empty());
    }

    #[test]
    fn a_deleted_lease_forgets_its_node() {
        let silence = silence(20);
        let t0 = Instant::now();
        silence.seen(&lease("a", "2026-12-05T00:00:00.000000Z"), t0);
        silence.newly_silent(t0 + Duration::from_secs(30));
        assert_eq!(silence.forget("a"), Some("a".to_owned()));
        assert!(
            silence
                .newly_silent(t0 + Duration::from_secs(60))
                .is_empty()
        );
    }
}
