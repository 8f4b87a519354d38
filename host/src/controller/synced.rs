//! Whether the caches may be decided from: every watch has finished its first list, and none is
//! listing again. kube-runtime's watcher lists at start and again whenever its watch can no
//! longer resume (410 Gone): `Init`, the objects, `InitDone`. Its store keeps the old objects
//! until `InitDone` and then swaps in the new list whole, so a store that is listing is stale,
//! and one that has not listed yet is empty. `Store::wait_until_ready` covers the first list
//! only. A decision made meanwhile sees, say, a surged ReplicaSet without its pods: "no
//! retiring pod is left", the ReplicaSet goes back, and the replacement that is not Ready yet
//! is deleted. So reconciles wait while any watch lists; their triggers queue meanwhile.

use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::watch;

/// The watches that are listing: each one from its start until its first `InitDone`, and
/// from each later `Init` until the `InitDone` that follows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Lists {
    listing: BTreeSet<String>,
}

impl Lists {
    /// `watches`, none of which has listed yet.
    fn new(watches: impl IntoIterator<Item = String>) -> Lists {
        Lists {
            listing: watches.into_iter().collect(),
        }
    }

    /// `watch` starts a list (its `Init`); whether that changed anything.
    fn listing(&mut self, watch: &str) -> bool {
        self.listing.insert(watch.to_owned())
    }

    /// `watch` has its whole list in its store (its `InitDone`); whether that changed anything.
    fn listed(&mut self, watch: &str) -> bool {
        self.listing.remove(watch)
    }

    /// Whether every cache holds a whole list.
    pub(super) fn synced(&self) -> bool {
        self.listing.is_empty()
    }
}

/// [`Lists`], shared by the watches that change it and the queue that waits on it.
#[derive(Clone)]
pub(super) struct Synced(Arc<watch::Sender<Lists>>);

impl Synced {
    pub(super) fn new(watches: impl IntoIterator<Item = String>) -> Synced {
        Synced(Arc::new(watch::Sender::new(Lists::new(watches))))
    }

    pub(super) fn listing(&self, watch: &str) {
        let was = self.0.borrow().synced();
        if self.0.send_if_modified(|lists| lists.listing(watch)) && was {
            tracing::info!(%watch, "a watch lists again: no decision until it has listed");
        }
    }

    pub(super) fn listed(&self, watch: &str) {
        if self.0.send_if_modified(|lists| lists.listed(watch)) {
            tracing::debug!(%watch, synced = self.0.borrow().synced(), "a watch has listed");
        }
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<Lists> {
        self.0.subscribe()
    }

    /// Once every cache holds a whole list.
    pub(super) async fn wait(&self) {
        let mut lists = self.subscribe();
        // The sender lives as long as `self`: this ends only once synced.
        let _ = lists.wait_for(Lists::synced).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// What a watch reports: its list starts, or it has its whole list.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        Init(&'static str),
        InitDone(&'static str),
    }
    use Step::*;

    const WATCHES: [&str; 4] = ["replicasets", "services", "pods", "nodes"];

    #[rstest]
    #[case::nothing_listed_yet(&[], false)]
    #[case::the_replicasets_listed_first_and_the_pods_not_yet(
        &[Init("replicasets"), InitDone("replicasets"), Init("services"), InitDone("services"), Init("nodes"), InitDone("nodes"), Init("pods")], false)]
    #[case::every_watch_listed(
        &[InitDone("replicasets"), InitDone("services"), InitDone("pods"), InitDone("nodes")], true)]
    #[case::a_watch_that_lists_again_holds_decisions_until_its_init_done(
        &[InitDone("replicasets"), InitDone("services"), InitDone("pods"), InitDone("nodes"), Init("pods")], false)]
    #[case::and_lets_them_go_once_it_has_listed(
        &[InitDone("replicasets"), InitDone("services"), InitDone("pods"), InitDone("nodes"), Init("pods"), InitDone("pods")], true)]
    #[case::a_list_that_failed_and_started_again_is_still_one_list(
        &[InitDone("replicasets"), InitDone("services"), InitDone("pods"), InitDone("nodes"), Init("pods"), Init("pods"), InitDone("pods")], true)]
    #[case::two_watches_listing_again_hold_until_both_have_listed(
        &[InitDone("replicasets"), InitDone("services"), InitDone("pods"), InitDone("nodes"), Init("pods"), Init("replicasets"), InitDone("pods")], false)]
    fn decisions_wait_for_every_list(#[case] steps: &[Step], #[case] synced: bool) {
        let mut lists = Lists::new(WATCHES.map(str::to_owned));
        for step in steps {
            match step {
                Init(watch) => lists.listing(watch),
                InitDone(watch) => lists.listed(watch),
            };
        }
        assert_eq!(lists.synced(), synced, "after {steps:?}");
    }

    #[tokio::test]
    async fn a_waiter_is_woken_when_the_last_watch_has_listed() {
        let synced = Synced::new(["pods".to_owned(), "nodes".to_owned()]);
        let mut lists = synced.subscribe();
        synced.listed("pods");
        assert!(!lists.borrow_and_update().synced());
        synced.listed("nodes");
        assert!(lists.has_changed().unwrap());
        tokio::time::timeout(std::time::Duration::from_secs(5), synced.wait())
            .await
            .expect("synced");
        synced.listing("pods");
        assert!(!synced.subscribe().borrow().synced());
    }
}
