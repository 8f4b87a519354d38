//! One project's reconcile: observe (the caches), decide ([`jumppod_plan::controller`]), write
//! ([`crate::apply`]), tell (Events, once per situation).

use super::events;
use super::metrics::{ActionLabel, Metrics, ResultLabel};
use super::watches::Caches;
use crate::api::{Kube, Op, explain};
use crate::apply::{ActionOutcome, apply};
use crate::error::HostError;
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
}

/// One project: observe (the caches), decide, write, tell. `Ok(None)`: nothing of it is left.
#[tracing::instrument(name = "reconcile", skip_all, fields(namespace = %key.namespace, jump_pod = %key.name))]
pub(super) async fn reconcile(
    ctx: &Context,
    key: &ProjectKey,
    mut mem: Memory,
) -> (Memory, Result<Option<State>, HostError>) {
    let started = Instant::now();
    let observed = ctx.caches.observed(key, mem.remembered.as_ref());
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
        let mut applied = apply(&kube, &key.namespace, &decision.actions).await?;
        // A write refused as stale changed nothing: the change it met decides again.
        applied.retain(|a| {
            let stale = a.outcome == ActionOutcome::Stale;
            if stale {
                tracing::info!(action = %a.action, "the object changed since this was decided: deciding again on the change");
            }
            !stale
        });
        // The keys of the live jobs, into the Secret every jump pod merges: read and written
        // only when they changed since the last write (or were never written and there are some).
        let granted = &decision.granted;
        if mem
            .granted
            .as_ref()
            .map_or(!granted.is_empty(), |g| g != granted)
        {
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
        let once: Vec<Note> = applied
            .iter()
            .map(|a| decisions::applied_note(&a.action))
            .collect();
        publish(ctx, &observed, &mut mem, &current, &once).await;
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
