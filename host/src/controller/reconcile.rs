//! One project's reconcile: observe (the caches), decide ([`jumppod_plan::controller`]), write
//! ([`crate::apply`]), tell (Events, once per situation).

use super::budget::Budget;
use super::events;
use super::metrics::{ActionLabel, Metrics, ResultLabel};
use super::watches::Caches;
use crate::api::{Kube, Op, explain};
use crate::apply::{ActionOutcome, apply_each};
use crate::error::HostError;
use jumppod_plan::action::Action;
use jumppod_plan::config::RawConfig;
use jumppod_plan::controller::{self as decisions, Note, ProjectKey, SeenPort, Severity, State};
use jumppod_plan::planner::Observed;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::{Api, Client};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a project's reconciles remember between runs.
#[derive(Default)]
pub(super) struct Memory {
    /// Notes published for what is still the case.
    published: BTreeSet<Note>,
    port: Option<SeenPort>,
    /// The bare jump pod as last seen whole: what the keeper makes it again from.
    remembered: Option<Pod>,
    /// The users' keys of the live jobs the Secret was last made to hold; None: not yet.
    granted: Option<BTreeMap<String, String>>,
    /// The API's answer when a quota last refused the bare jump pod under its name, until a
    /// creation of it goes through.
    quota_refused: Option<String>,
}

pub(super) struct Context {
    pub(super) caches: Caches,
    pub(super) write: Client,
    pub(super) reporter: events::Reporter,
    /// Open Event series of this leadership term.
    pub(super) series: Mutex<events::Series>,
    pub(super) template: RawConfig,
    pub(super) metrics: Arc<Metrics>,
    pub(super) timeout: Duration,
    /// How fast pods may be taken away for their node, across every project.
    pub(super) budget: Budget,
}

/// One project: observe (the caches), decide, write, tell. `Ok(None)`: nothing of it is left.
#[tracing::instrument(name = "reconcile", skip_all, fields(namespace = %key.namespace, jump_pod = %key.name))]
pub(super) async fn reconcile(
    ctx: &Context,
    key: &ProjectKey,
    mut mem: Memory,
) -> (Memory, Result<Option<State>, HostError>) {
    let started = Instant::now();
    let mut observed = ctx.caches.observed(key, mem.remembered.as_ref());
    observed.quota_refused = mem.quota_refused.clone();
    ctx.metrics
        .disrupted
        .set(i64::from(observed.disruption.is_some()));
    if decisions::gone(&observed) {
        return (mem, Ok(None));
    }
    let result = async {
        let decision = match decisions::decide(&ctx.template, key, &observed) {
            Ok(d) => d,
            Err(problem) => {
                let note = Note {
                    severity: Severity::Warning,
                    reason: "InvalidProject",
                    message: format!(
                        "jumppod cannot manage this project with its settings: {problem}"
                    ),
                };
                publish(ctx, &observed, &mut mem, &[note], &[]).await;
                return Ok(State::Invalid);
            }
        };
        mem.remembered = decision.remember.clone();
        let kube = Kube::new(ctx.write.clone(), ctx.timeout);
        // One write the API refuses (a quota, a field it will not take) holds up none of the
        // others, nor the keys: it is said in an Event and tried again after a backoff.
        let (actions, deferred) = within_budget(&ctx.budget, &decision.actions);
        let (mut applied, refused) = apply_each(&kube, &key.namespace, &actions).await;
        if applied.iter().any(|a| is_named_create(&a.action)) {
            mem.quota_refused = None;
        }
        if let Some(answer) = refused.iter().find_map(|(a, e)| quota_answer(a, e)) {
            mem.quota_refused = Some(answer);
        }
        // A write refused as stale changed nothing: the change it met decides again.
        applied.retain(|a| {
            let stale = a.outcome == ActionOutcome::Stale;
            if stale {
                tracing::info!(action = %a.action, "the object changed since this was decided: deciding again on the change");
            }
            !stale
        });
        // The keys of the live jobs, into the Secret every jump pod merges: read and written
        // when they changed since the last write, and once per leadership term (the memory
        // starts empty): a job that ended while no replica led has its keys revoked then.
        let granted = &decision.granted;
        if mem.granted.as_ref() != Some(granted) {
            if crate::keys::grant(&kube, key, granted, &observed.pods).await? {
                tracing::info!(
                    keys = granted.len(),
                    "the users' keys of the live jobs written"
                );
                ctx.metrics
                    .actions
                    .get_or_create(&ActionLabel {
                        action: "grant-keys",
                    })
                    .inc();
            }
            mem.granted = Some(granted.clone());
        }
        for a in &applied {
            ctx.metrics
                .actions
                .get_or_create(&ActionLabel {
                    action: match &a.action {
                        jumppod_plan::action::Action::DeletePod { .. } => "delete-pod",
                        jumppod_plan::action::Action::DeleteService { .. } => "delete-service",
                        jumppod_plan::action::Action::CreateService { .. } => "create-service",
                        jumppod_plan::action::Action::RetirePod { .. } => "retire-pod",
                        jumppod_plan::action::Action::WithdrawRetiring { .. } => {
                            "withdraw-retiring"
                        }
                        jumppod_plan::action::Action::DeleteRetiringPod { .. } => "delete-pod",
                        jumppod_plan::action::Action::ScaleReplicaSet { .. } => "scale-replicaset",
                        jumppod_plan::action::Action::CreatePod { pod, .. }
                            if pod.metadata.name.is_some() =>
                        {
                            "recreate-pod"
                        }
                        jumppod_plan::action::Action::CreatePod { .. } => "create-standby",
                        jumppod_plan::action::Action::DeleteStandby { .. } => "delete-standby",
                        jumppod_plan::action::Action::MovePodOff { .. } => "move-pod-off",
                        jumppod_plan::action::Action::TakeOutOfRotation { .. } => {
                            "take-out-of-rotation"
                        }
                        jumppod_plan::action::Action::ForceDeletePod { .. } => "force-delete-pod",
                        _ => "other",
                    },
                })
                .inc();
        }
        let seen = SeenPort::of(observed.service.as_ref());
        let mut current = decisions::notes(&decision.findings);
        current.extend(decisions::port_changed(mem.port.as_ref(), seen.as_ref()));
        mem.port = seen;
        let mut once: Vec<Note> = applied
            .iter()
            .map(|a| decisions::applied_note(&a.action))
            .collect();
        once.extend(
            refused
                .iter()
                .map(|(action, e)| decisions::refused_note(action, &e.report())),
        );
        publish(ctx, &observed, &mut mem, &current, &once).await;
        if let Some((_, e)) = refused.into_iter().next() {
            return Err(e);
        }
        if deferred > 0 {
            ctx.metrics.deferred.inc_by(deferred as u64);
            return Err(HostError::BudgetSpent {
                deferred,
                rate: ctx.budget.rate(),
                burst: ctx.budget.burst(),
            });
        }
        tracing::debug!(state = decision.state.as_str(), took = ?started.elapsed(), "reconciled");
        Ok(decision.state)
    }
    .await;
    let label = if result.is_ok() { "ok" } else { "error" };
    ctx.metrics
        .reconciles
        .get_or_create(&ResultLabel { result: label })
        .inc();
    ctx.metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    (mem, result.map(Some))
}

/// Whether `action` makes the bare jump pod again under its name.
fn is_named_create(action: &Action) -> bool {
    matches!(action, Action::CreatePod { pod, .. } if pod.metadata.name.is_some())
}

/// The API's answer, if `action`, the bare jump pod made again under its name, was refused for
/// a quota (403 "exceeded quota", the ResourceQuota admission plugin's words).
fn quota_answer(action: &Action, error: &HostError) -> Option<String> {
    match error {
        HostError::Api {
            code: 403, message, ..
        } if is_named_create(action) && message.contains("exceeded quota") => Some(message.clone()),
        _ => None,
    }
}

/// The actions the destruction budget allows now, in their order, and how many it defers. What
/// follows a deferred write waits with it: it was decided as if that write were done (the pod
/// under its name made again once the lost one is force-deleted).
fn within_budget(budget: &Budget, actions: &[Action]) -> (Vec<Action>, usize) {
    let now = Instant::now();
    let allowed = actions
        .iter()
        .position(|a| a.removes_for_a_node() && !budget.take(now))
        .unwrap_or(actions.len());
    for a in &actions[allowed..] {
        tracing::warn!(action = %a, "deferred: the destruction budget is spent");
    }
    (actions[..allowed].to_vec(), actions.len() - allowed)
}

/// Publishes the notes not yet published (`current`: what is the case, remembered; `once`:
/// what was done, never remembered). A note that cannot be published is tried again at the
/// next reconcile.
async fn publish(
    ctx: &Context,
    observed: &Observed,
    mem: &mut Memory,
    current: &[Note],
    once: &[Note],
) {
    let Some(regarding) = decisions::regarding(observed) else {
        return;
    };
    let mut published = BTreeSet::new();
    let fresh = decisions::unpublished(&mem.published, current);
    for note in current {
        if !fresh.contains(note) {
            published.insert(note.clone());
        }
    }
    for note in fresh.iter().chain(once) {
        match send(ctx, &regarding, note).await {
            Ok(()) => {
                if current.contains(note) {
                    published.insert(note.clone());
                }
            }
            Err(e) => {
                tracing::warn!(reason = note.reason, error = %e.report(), "cannot publish the event")
            }
        }
    }
    mem.published = published;
}

async fn send(ctx: &Context, regarding: &ObjectReference, note: &Note) -> Result<(), HostError> {
    match note.severity {
        Severity::Warning => tracing::warn!(reason = note.reason, message = %note.message, "event"),
        Severity::Normal => tracing::info!(reason = note.reason, message = %note.message, "event"),
    }
    let namespace = regarding.namespace.as_deref().unwrap_or("default");
    let api = Api::namespaced(ctx.write.clone(), namespace);
    let (name, verb) = events::write(&api, &ctx.series, &ctx.reporter, regarding, note)
        .await
        .map_err(|(verb, e)| explain(&Op::new(verb, "events", Some(namespace), None), e))?;
    tracing::debug!(event = %name, verb, "event written");
    ctx.metrics.events.inc();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delete(kind: &str) -> Action {
        let (name, uid, why) = ("p".to_owned(), "u".to_owned(), "w".to_owned());
        match kind {
            "force" => Action::ForceDeletePod { name, uid, why },
            "move-off" => Action::MovePodOff { name, uid, why },
            _ => Action::DeleteStandby { name, uid, why },
        }
    }

    fn refused(code: u16, message: &str) -> HostError {
        HostError::Api {
            op: "create pods".into(),
            code,
            reason: "Forbidden".into(),
            message: message.into(),
            hint: None,
            source: Box::new(kube::Error::Service("refused".into())),
        }
    }

    fn create(name: Option<&str>) -> Action {
        let mut pod = Pod::default();
        pod.metadata.name = name.map(str::to_owned);
        Action::CreatePod {
            pod: Box::new(pod),
            why: "w".into(),
        }
    }

    #[test]
    fn only_a_quota_refusing_the_pod_under_its_name_is_remembered() {
        let quota = "pods \"p\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1";
        assert_eq!(
            quota_answer(&create(Some("p")), &refused(403, quota)).as_deref(),
            Some(quota)
        );
        assert_eq!(
            quota_answer(&create(None), &refused(403, quota)),
            None,
            "a standby"
        );
        assert_eq!(
            quota_answer(&create(Some("p")), &refused(403, "pods is forbidden: no")),
            None
        );
    }

    #[test]
    fn writes_that_take_a_pod_away_for_its_node_wait_once_the_budget_is_spent_and_what_follows() {
        let budget = Budget::new(0.0, 1, Instant::now());
        let actions = [
            delete("force"),
            delete("standby"),
            delete("move-off"),
            delete("standby"),
        ];
        let (allowed, deferred) = within_budget(&budget, &actions);
        assert_eq!(deferred, 2);
        assert_eq!(allowed, actions[..2]);
        // Others than these are never held by it.
        let (allowed, deferred) = within_budget(&budget, &[delete("standby")]);
        assert_eq!((allowed.len(), deferred), (1, 0));
    }
}
