//! The work queue: at most one reconcile per project at a time, `--concurrency` at once, a
//! failing project retried with jittered exponential backoff while the others go on.
//!
//! Why not kube-runtime's `Controller`: it reconciles one object of its main kind (other kinds
//! reach it through `owns`/`watches` mappers to that object's reference) and calls the
//! reconciler only while that object is in its store. A project here is a ReplicaSet, a Service
//! and pods, and must be reconciled without its ReplicaSet too (a finished bare pod of an older
//! release is deleted, see [`jumppod_plan::controller`]), so the key is the project
//! ([`ProjectKey`]), derived from the names and labels of all three kinds. After a relist the
//! queue also reconciles the projects it counted that the caches no longer hold, since the
//! watcher sends no delete for an object that vanished while the watch was down. And a change
//! seen during a project's backoff waits for the retry instead of cutting it short, where
//! `Controller`'s scheduler runs a new trigger at once.

use super::reconcile::{Context, Memory, reconcile};
use super::watches::Trigger;
use crate::error::HostError;
use jumppod_plan::controller::{ProjectKey, Projects, State};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// The queue's bookkeeping, apart from the tasks it runs: which projects wait, run, or must
/// run again when they end, which back off, and what each remembers between reconciles.
pub(super) struct Queue<M> {
    pending: BTreeSet<ProjectKey>,
    running: BTreeSet<ProjectKey>,
    /// Changed while running: queued again when the running reconcile ends.
    again: BTreeSet<ProjectKey>,
    /// Failed: triggers wait for the retry.
    backing_off: BTreeSet<ProjectKey>,
    /// Failures in a row.
    failures: HashMap<ProjectKey, u32>,
    /// What a project's reconciles remember; taken while one runs.
    memory: HashMap<ProjectKey, M>,
}

impl<M> Default for Queue<M> {
    fn default() -> Queue<M> {
        Queue {
            pending: BTreeSet::new(),
            running: BTreeSet::new(),
            again: BTreeSet::new(),
            backing_off: BTreeSet::new(),
            failures: HashMap::new(),
            memory: HashMap::new(),
        }
    }
}

impl<M: Default> Queue<M> {
    /// A change of `key`; `retry`: its backoff is over.
    pub(super) fn enqueue(&mut self, key: ProjectKey, retry: bool) {
        if self.backing_off.contains(&key) {
            if !retry {
                return;
            }
            self.backing_off.remove(&key);
        }
        if self.running.contains(&key) {
            self.again.insert(key);
        } else {
            self.pending.insert(key);
        }
    }

    /// The next project to reconcile and its memory, while fewer than `concurrency` run.
    #[cfg(test)]
    pub(super) fn start(&mut self, concurrency: usize) -> Option<(ProjectKey, M)> {
        self.start_if(concurrency, |_| true)
    }

    /// [`Queue::start`] of the first pending project `may` lets start (its caches are whole);
    /// the others stay pending.
    pub(super) fn start_if(
        &mut self,
        concurrency: usize,
        may: impl Fn(&ProjectKey) -> bool,
    ) -> Option<(ProjectKey, M)> {
        if self.running.len() >= concurrency.max(1) {
            return None;
        }
        let key = self.pending.iter().find(|k| may(k))?.clone();
        self.pending.remove(&key);
        let memory = self.memory.remove(&key).unwrap_or_default();
        self.running.insert(key.clone());
        Some((key, memory))
    }

    /// A reconcile succeeded; `None`: nothing of the project is left, it is forgotten.
    pub(super) fn succeeded(&mut self, key: &ProjectKey, memory: Option<M>) {
        self.running.remove(key);
        self.failures.remove(key);
        if let Some(memory) = memory {
            self.memory.insert(key.clone(), memory);
        }
        if self.again.remove(key) {
            self.pending.insert(key.clone());
        }
    }

    /// A reconcile failed: the project backs off, and changes seen meanwhile wait for the retry
    /// (which reads them). Returns the failures in a row.
    pub(super) fn failed(&mut self, key: &ProjectKey, memory: M) -> u32 {
        self.running.remove(key);
        self.again.remove(key);
        self.backing_off.insert(key.clone());
        self.memory.insert(key.clone(), memory);
        let failures = self.failures.entry(key.clone()).or_default();
        *failures += 1;
        *failures
    }
}

/// How many reconciles run at once, and how a failing project is retried.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    pub(super) concurrency: usize,
    /// First retry delay; doubles up to `max_backoff`, with jitter.
    pub(super) backoff: Duration,
    pub(super) max_backoff: Duration,
}

/// Runs reconciles from the triggers until the channel closes (or the task is aborted); a
/// project's waits while a watch its decision reads lists ([`super::synced`]): its triggers
/// queue meanwhile.
pub(super) async fn work(
    ctx: Arc<Context>,
    options: Pace,
    tx: mpsc::UnboundedSender<Trigger>,
    mut rx: mpsc::UnboundedReceiver<Trigger>,
) {
    let mut queue: Queue<Memory> = Queue::default();
    let mut projects = Projects::default();
    let mut tasks: JoinSet<(ProjectKey, Memory, Result<Option<State>, HostError>)> = JoinSet::new();
    let mut lists = ctx.caches.synced.subscribe();
    loop {
        let whole = lists.borrow_and_update().clone();
        while let Some((key, mem)) =
            queue.start_if(options.concurrency, |key| whole.synced_for(&key.namespace))
        {
            let ctx = ctx.clone();
            tasks.spawn(async move {
                let (mem, result) = reconcile(&ctx, &key, mem).await;
                (key, mem, result)
            });
        }
        tokio::select! {
            changed = lists.changed() => if changed.is_err() { return },
            trigger = rx.recv() => {
                let Some(trigger) = trigger else { return };
                match trigger {
                    Trigger::Project(key) => queue.enqueue(key, false),
                    Trigger::Retry(key) => queue.enqueue(key, true),
                    Trigger::Node(node) => {
                        for key in ctx.caches.on_node(&node) {
                            queue.enqueue(key, false);
                        }
                    }
                    Trigger::All => {
                        for key in projects.relisted(ctx.caches.keys()) {
                            queue.enqueue(key, false);
                        }
                    }
                }
            }
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                let Ok((key, mem, result)) = joined else { continue };
                match result {
                    Ok(Some(state)) => {
                        projects.record(&key, Some(state));
                        queue.succeeded(&key, Some(mem));
                    }
                    Ok(None) => {
                        projects.record(&key, None);
                        queue.succeeded(&key, None);
                    }
                    Err(e) => {
                        let failures = queue.failed(&key, mem);
                        let delay = backoff(options.backoff, options.max_backoff, failures);
                        tracing::warn!(project = %key, error = %e.report(), failures, retry_in = ?delay, "reconcile failed");
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = tx.send(Trigger::Retry(key));
                        });
                    }
                }
                ctx.metrics.set_projects(&projects.counts());
            }
        }
    }
}

/// Exponential backoff with full jitter over its upper half: `first * 2^(failures-1)`, at most
/// `max`, times a random factor in [0.5, 1.0], so that projects failing together (an API
/// outage) do not retry in lockstep.
pub(super) fn backoff(first: Duration, max: Duration, failures: u32) -> Duration {
    let exp = first.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    exp.min(max).mul_f64(0.5 + fastrand::f64() * 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// Where a project is in the queue.
    #[derive(Debug, PartialEq)]
    enum Place {
        Idle,
        Pending,
        Running,
        RunningThenAgain,
        BackingOff,
    }

    impl<M> Queue<M> {
        fn place(&self, key: &ProjectKey) -> Place {
            match (
                self.pending.contains(key),
                self.running.contains(key),
                self.again.contains(key),
                self.backing_off.contains(key),
            ) {
                (true, ..) => Place::Pending,
                (_, true, true, _) => Place::RunningThenAgain,
                (_, true, ..) => Place::Running,
                (.., true) => Place::BackingOff,
                _ => Place::Idle,
            }
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        Change,
        Retry,
        Start,
        Succeed,
        Gone,
        Fail,
    }
    use Step::*;

    fn key(name: &str) -> ProjectKey {
        ProjectKey::of_name("dstack", &format!("dstack-{name}-ssh-jump-pod")).unwrap()
    }

    /// Runs `steps` on project `main` in a queue of concurrency 1; memory is a counter of
    /// the reconciles that kept it.
    fn after(steps: &[Step]) -> (Queue<u32>, Option<u32>) {
        let mut queue: Queue<u32> = Queue::default();
        let main = key("main");
        let mut running = None;
        let mut failures = None;
        for step in steps {
            match step {
                Change => queue.enqueue(main.clone(), false),
                Retry => queue.enqueue(main.clone(), true),
                Start => running = queue.start(1).map(|(_, m)| m),
                Succeed => queue.succeeded(&main, running.take().map(|m| m + 1)),
                Gone => queue.succeeded(&main, None),
                Fail => failures = Some(queue.failed(&main, running.take().unwrap_or_default())),
            }
        }
        (queue, failures)
    }

    #[rstest]
    #[case::a_change_queues_the_project(&[Change], Place::Pending)]
    #[case::two_changes_queue_it_once(&[Change, Change, Start], Place::Running)]
    #[case::a_started_project_runs(&[Change, Start], Place::Running)]
    #[case::a_change_while_it_runs_queues_it_again_after(&[Change, Start, Change], Place::RunningThenAgain)]
    #[case::the_change_seen_while_running_is_reconciled_next(&[Change, Start, Change, Succeed], Place::Pending)]
    #[case::a_success_leaves_it_idle(&[Change, Start, Succeed], Place::Idle)]
    #[case::a_project_gone_is_forgotten(&[Change, Start, Gone], Place::Idle)]
    #[case::a_failure_backs_off(&[Change, Start, Fail], Place::BackingOff)]
    #[case::a_change_during_the_backoff_waits_for_the_retry(&[Change, Start, Fail, Change], Place::BackingOff)]
    #[case::a_change_seen_while_failing_waits_for_the_retry(&[Change, Start, Change, Fail], Place::BackingOff)]
    #[case::the_retry_queues_it(&[Change, Start, Fail, Retry], Place::Pending)]
    #[case::after_the_retry_changes_queue_it_again(&[Change, Start, Fail, Retry, Start, Succeed, Change], Place::Pending)]
    fn places(#[case] steps: &[Step], #[case] expected: Place) {
        let (queue, _) = after(steps);
        assert_eq!(queue.place(&key("main")), expected, "after {steps:?}");
    }

    #[rstest]
    #[case::the_first_failure_counts_one(&[Change, Start, Fail], 1)]
    #[case::failures_in_a_row_add_up(&[Change, Start, Fail, Retry, Start, Fail], 2)]
    #[case::a_success_starts_the_count_again(&[Change, Start, Fail, Retry, Start, Succeed, Change, Start, Fail], 1)]
    fn failures_in_a_row(#[case] steps: &[Step], #[case] expected: u32) {
        assert_eq!(after(steps).1, Some(expected), "after {steps:?}");
    }

    #[test]
    fn memory_is_kept_between_reconciles_and_dropped_when_the_project_is_gone() {
        let (mut queue, _) = after(&[Change, Start, Succeed, Change]);
        assert_eq!(queue.start(1), Some((key("main"), 1)));
        queue.succeeded(&key("main"), None);
        queue.enqueue(key("main"), false);
        assert_eq!(queue.start(1), Some((key("main"), 0)));
    }

    #[test]
    fn no_more_run_at_once_than_the_concurrency_and_never_one_project_twice() {
        let mut queue: Queue<()> = Queue::default();
        for name in ["a", "b", "c"] {
            queue.enqueue(key(name), false);
        }
        assert!(queue.start(2).is_some());
        assert!(queue.start(2).is_some());
        assert_eq!(queue.start(2), None, "two run, the concurrency is 2");
        queue.enqueue(key("a"), false);
        queue.succeeded(&key("a"), Some(()));
        assert_eq!(queue.place(&key("a")), Place::Pending);
        assert_eq!(queue.start(2).map(|(k, _)| k), Some(key("a")));
        assert_eq!(queue.place(&key("c")), Place::Pending);
    }
    #[test]
    fn a_project_whose_caches_are_listing_waits_and_the_others_start() {
        let mut queue: Queue<()> = Queue::default();
        queue.enqueue(key("a"), false);
        queue.enqueue(key("b"), false);
        let listing = key("a");
        let started = queue.start_if(2, |k| *k != listing).map(|(k, _)| k);
        assert_eq!(started, Some(key("b")));
        assert_eq!(queue.start_if(2, |k| *k != listing), None);
        assert_eq!(queue.place(&key("a")), Place::Pending);
        assert_eq!(queue.start_if(2, |_| true).map(|(k, _)| k), Some(key("a")));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_never_falls_below_half() {
        let first = Duration::from_millis(100);
        let max = Duration::from_secs(5);
        for failures in 1..40 {
            let upper = first.saturating_mul(1 << (failures - 1).min(20)).min(max);
            for _ in 0..20 {
                let d = backoff(first, max, failures);
                assert!(
                    d <= upper && d >= upper / 2,
                    "failure {failures}: {d:?} not in [{:?}, {upper:?}]",
                    upper / 2
                );
            }
        }
    }
}
