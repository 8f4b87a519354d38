//! Whether the caches may be decided from: every watch a project's decision reads has finished
//! its first list, and none of them is listing again. kube-runtime's watcher lists at start and
//! again whenever its watch can no longer resume (410 Gone): `Init`, the objects, `InitDone`.
//! Its store keeps the old objects until `InitDone` and then swaps in the new list whole, so a
//! store that is listing is stale, and one that has not listed yet is empty.
//! `Store::wait_until_ready` covers the first list only. A decision made meanwhile sees, say, a
//! surged ReplicaSet without its pods: "no retiring pod is left", the ReplicaSet goes back, and
//! the replacement that is not Ready yet is deleted. So a project's reconcile waits while a
//! watch of its namespace (or of every namespace), or of the nodes, lists; its triggers queue
//! meanwhile. A namespace whose watches cannot list (a Role missing there) holds up its own
//! projects only.

use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::watch;

/// One watch: of a kind in a namespace, or in every namespace (or of a cluster-wide kind).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Watch {
    pub(super) kind: &'static str,
    /// None: every namespace, or a kind of no namespace (nodes).
    pub(super) namespace: Option<String>,
}

impl Watch {
    /// Whether a decision about a project in `namespace` reads this watch's cache.
    fn covers(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }
}

impl std::fmt::Display for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} in namespace {ns}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

/// The watches that are listing: each one from its start until its first `InitDone`, and
/// from each later `Init` until the `InitDone` that follows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Lists {
    listing: BTreeSet<Watch>,
}

impl Lists {
    /// `watches`, none of which has listed yet.
    fn new(watches: impl IntoIterator<Item = Watch>) -> Lists {
        Lists {
            listing: watches.into_iter().collect(),
        }
    }

    /// `watch` starts a list (its `Init`); whether that changed anything.
    fn listing(&mut self, watch: &Watch) -> bool {
        self.listing.insert(watch.clone())
    }

    /// `watch` has its whole list in its store (its `InitDone`); whether that changed anything.
    fn listed(&mut self, watch: &Watch) -> bool {
        self.listing.remove(watch)
    }

    /// Whether every cache holds a whole list.
    pub(super) fn synced(&self) -> bool {
        self.listing.is_empty()
    }

    /// Whether every cache a project in `namespace` is decided from holds a whole list.
    pub(super) fn synced_for(&self, namespace: &str) -> bool {
        !self.listing.iter().any(|w| w.covers(namespace))
    }
}

/// [`Lists`], shared by the watches that change it and the queue that waits on it.
#[derive(Clone)]
pub(super) struct Synced(Arc<watch::Sender<Lists>>);

impl Synced {
    pub(super) fn new(watches: impl IntoIterator<Item = Watch>) -> Synced {
        Synced(Arc::new(watch::Sender::new(Lists::new(watches))))
    }

    pub(super) fn listing(&self, watch: &Watch) {
        let was = self.0.borrow().synced();
        if self.0.send_if_modified(|lists| lists.listing(watch)) && was {
            tracing::info!(%watch, "a watch lists again: its projects wait until it has listed");
        }
    }

    pub(super) fn listed(&self, watch: &Watch) {
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

    /// The watches of one namespace `a` and the nodes', by kind.
    fn watch(kind: &'static str) -> Watch {
        Watch {
            kind,
            namespace: (kind != "nodes").then(|| "a".to_owned()),
        }
    }

    const KINDS: [&str; 4] = ["replicasets", "services", "pods", "nodes"];
    const ALL_LISTED: [Step; 4] = [
        InitDone("replicasets"),
        InitDone("services"),
        InitDone("pods"),
        InitDone("nodes"),
    ];

    fn after(steps: &[Step]) -> Lists {
        let mut lists = Lists::new(KINDS.map(watch));
        for step in steps {
            match step {
                Init(kind) => lists.listing(&watch(kind)),
                InitDone(kind) => lists.listed(&watch(kind)),
            };
        }
        lists
    }

    #[rstest]
    #[case::nothing_listed_yet(&[], false)]
    #[case::the_replicasets_listed_first_and_the_pods_not_yet(
        &[Init("replicasets"), InitDone("replicasets"), Init("services"), InitDone("services"), Init("nodes"), InitDone("nodes"), Init("pods")], false)]
    #[case::every_watch_listed(&ALL_LISTED, true)]
    #[case::a_watch_that_lists_again_holds_decisions_until_its_init_done(
        &[ALL_LISTED[0], ALL_LISTED[1], ALL_LISTED[2], ALL_LISTED[3], Init("pods")], false)]
    #[case::and_lets_them_go_once_it_has_listed(
        &[ALL_LISTED[0], ALL_LISTED[1], ALL_LISTED[2], ALL_LISTED[3], Init("pods"), InitDone("pods")], true)]
    #[case::a_list_that_failed_and_started_again_is_still_one_list(
        &[ALL_LISTED[0], ALL_LISTED[1], ALL_LISTED[2], ALL_LISTED[3], Init("pods"), Init("pods"), InitDone("pods")], true)]
    #[case::two_watches_listing_again_hold_until_both_have_listed(
        &[ALL_LISTED[0], ALL_LISTED[1], ALL_LISTED[2], ALL_LISTED[3], Init("pods"), Init("replicasets"), InitDone("pods")], false)]
    #[case::the_nodes_listing_again_hold_every_namespace(
        &[ALL_LISTED[0], ALL_LISTED[1], ALL_LISTED[2], ALL_LISTED[3], Init("nodes")], false)]
    fn decisions_wait_for_every_list_they_read(#[case] steps: &[Step], #[case] synced: bool) {
        let lists = after(steps);
        assert_eq!(lists.synced_for("a"), synced, "after {steps:?}");
        assert_eq!(lists.synced(), synced, "after {steps:?}");
    }

    #[test]
    fn a_namespace_whose_watch_lists_holds_up_its_own_projects_only() {
        let in_b = Watch {
            kind: "pods",
            namespace: Some("b".into()),
        };
        let mut lists = after(&ALL_LISTED);
        lists.listing(&in_b);
        assert!(lists.synced_for("a"));
        assert!(!lists.synced_for("b"));
        assert!(!lists.synced(), "not every cache is whole");
        let every = Watch {
            kind: "pods",
            namespace: None,
        };
        let mut all = Lists::new([every]);
        assert!(!all.synced_for("a") && !all.synced_for("b"));
        all.listed(&Watch {
            kind: "pods",
            namespace: None,
        });
        assert!(all.synced_for("a") && all.synced());
    }

    #[tokio::test]
    async fn a_waiter_is_woken_when_the_last_watch_has_listed() {
        let synced = Synced::new([watch("pods"), watch("nodes")]);
        let mut lists = synced.subscribe();
        synced.listed(&watch("pods"));
        assert!(!lists.borrow_and_update().synced());
        synced.listed(&watch("nodes"));
        assert!(lists.has_changed().unwrap());
        tokio::time::timeout(std::time::Duration::from_secs(5), synced.wait())
            .await
            .expect("synced");
        synced.listing(&watch("pods"));
        assert!(!synced.subscribe().borrow().synced());
    }
}
