//! `jumppod run`: the reconciler as a Kubernetes controller.
//!
//! Three watches (ReplicaSets and pods carrying `app.kubernetes.io/name`, Services) fill caches;
//! each change names the projects it concerns; a work queue reconciles each project from the
//! caches alone ([`jumppod_plan::controller`] decides, [`crate::apply`] writes), so a steady cluster costs no
//! request beyond the watches. One project is never reconciled twice at once; a failing one
//! is retried with jittered exponential backoff while the others go on. With leader election
//! only the holder of the Lease watches and writes ([`lease`]), and its writes pass a
//! [`Fence`] that closes at the renew deadline by its own clock.

pub mod events;
pub mod lease;
pub mod metrics;

use crate::api::{Kube, Op, explain};
use crate::apply::apply;
use crate::error::HostError;
use futures::{Stream, StreamExt, TryStreamExt};
use jumppod_plan::config::RawConfig;
use jumppod_plan::controller::{
    self as decisions, Note, ProjectKey, Projects, SeenPort, Severity, State,
};
use jumppod_plan::lease::Timing;
use jumppod_plan::planner::Observed;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use lease::{Elector, Look};
use metrics::{ActionLabel, Metrics, ResultLabel, Role};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// The name Events carry as their reporting controller.
pub const CONTROLLER_NAME: &str = "jumppod";

/// Objects per page of a watch's initial list.
const LIST_PAGE: u32 = 100;

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub lease: String,
    pub identity: String,
    pub timing: Timing,
}

/// How `jumppod run` runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Resources, image and placement the ReplicaSets should have (drift is reported against
    /// them); never a project, a namespace or a port.
    pub template: RawConfig,
    /// The namespace watched; None: every namespace.
    pub namespace: Option<String>,
    pub listen: SocketAddr,
    /// None: no leader election (one replica only).
    pub election: Option<Election>,
    /// Projects reconciled at once.
    pub concurrency: usize,
    /// Deadline of one project's writes, retries included.
    pub reconcile_timeout: Duration,
    /// First retry delay of a failing project; doubles up to `max_backoff`, with jitter.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

/// The two clients: `watch` with a watch's read timeout, `write` with the per-request one.
#[derive(Clone)]
pub struct Clients {
    pub watch: Client,
    pub write: Client,
}

/// Until when this replica may write, by its own clock: the renew deadline after its last
/// successful look at the Lease was sent. Another replica takes the Lease only once it has seen
/// it unchanged for the lease duration, longer than the renew deadline, from a look after that
/// write. Aborting the reconciles when the lease is lost is not enough: a replica paused
/// (SIGSTOP, a frozen VM) past its lease resumes with its watches' news and its timers due at
/// once, and its reconciles can write before it notices the loss. The fence refuses such
/// writes unsent.
#[derive(Clone)]
struct Fence(Option<Arc<Mutex<Instant>>>);

impl Fence {
    /// No leader election: every write passes.
    fn open() -> Fence {
        Fence(None)
    }

    /// Closed until the first successful look at the Lease.
    fn closed() -> Fence {
        Fence(Some(Arc::new(Mutex::new(Instant::now()))))
    }

    fn until(&self) -> Option<std::sync::MutexGuard<'_, Instant>> {
        let until = self.0.as_ref()?;
        // The lock guards one Instant: a panic elsewhere cannot leave it half written.
        Some(until.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn extend_to(&self, until: Instant) {
        if let Some(mut u) = self.until() {
            *u = until;
        }
    }

    fn close(&self) {
        self.extend_to(Instant::now());
    }

    fn holds(&self) -> bool {
        self.until().is_none_or(|u| Instant::now() < *u)
    }

    /// `client`, its requests refused unsent once the fence is closed.
    fn guard(&self, client: Client) -> Client {
        let fence = self.clone();
        let default_namespace = client.default_namespace().to_owned();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let client = client.clone();
            let fence = fence.clone();
            async move {
                if !fence.holds() {
                    return Err(tower::BoxError::from(
                        "not sent: this replica's lease may have passed to another (its renew deadline is over)",
                    ));
                }
                client.send(request).await.map_err(tower::BoxError::from)
            }
        });
        Client::new(service, default_namespace)
    }
}

/// Runs until `shutdown` resolves; then stops writing and releases the Lease.
pub async fn run(
    clients: Clients,
    options: Options,
    on_listen: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()>,
) -> Result<(), HostError> {
    let metrics = Arc::new(Metrics::new());
    let (addr, server) = metrics::serve(options.listen, metrics.clone())
        .await
        .map_err(|e| jumppod_plan::config::ConfigError {
            field: "--listen".into(),
            value: options.listen.to_string(),
            problem: format!("cannot listen there: {e}"),
        })?;
    on_listen(addr);
    let server = tokio::spawn(server);
    let result = lead_or_stand_by(clients, options, metrics, shutdown).await;
    server.abort();
    result
}

async fn lead_or_stand_by(
    clients: Clients,
    options: Options,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), HostError> {
    tokio::pin!(shutdown);
    let Some(election) = options.election.clone() else {
        tracing::info!("leader election off: this replica writes");
        tokio::select! {
            result = control(clients, options, metrics, Fence::open()) => return result,
            () = &mut shutdown => return Ok(()),
        }
    };
    let fence = Fence::closed();
    let mut elector = Elector::new(
        clients.write.clone(),
        &election.namespace,
        &election.lease,
        &election.identity,
        election.timing,
    );
    loop {
        metrics.set_role(Role::Standby);
        tokio::select! {
            acquired = acquire(&mut elector, &election, &fence) => acquired,
            () = &mut shutdown => return Ok(()),
        }
        tracing::info!(lease = %election.lease, identity = %election.identity, "leading: watching and writing");
        metrics.set_role(Role::Syncing);
        let mut controller = tokio::spawn(control(
            clients.clone(),
            options.clone(),
            metrics.clone(),
            fence.clone(),
        ));
        tokio::select! {
            lost = hold(&mut elector, &fence) => {
                // Stopped, not only asked to stop: no write of this replica may follow.
                fence.close();
                controller.abort();
                let _ = controller.await;
                tracing::error!(lease = %election.lease, reason = %lost, "lost the lease: stopped writing; standing by");
            }
            ended = &mut controller => {
                elector.release().await.ok();
                return match ended {
                    Ok(Ok(())) => Err(HostError::Controller("its watches ended".into())),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(HostError::Controller(e.to_string())),
                };
            }
            () = &mut shutdown => {
                fence.close();
                controller.abort();
                let _ = controller.await;
                return elector.release().await;
            }
        }
    }
}

/// Looks at the Lease every 1 to 2.2 retry periods until this replica holds it.
async fn acquire(elector: &mut Elector, election: &Election, fence: &Fence) {
    let mut last_holder = None;
    loop {
        let asked = Instant::now();
        match elector.look().await {
            Ok(Look::Leading) => {
                fence.extend_to(asked + election.timing.renew_deadline);
                return;
            }
            Ok(Look::Following { holder }) => {
                if last_holder.as_ref() != Some(&holder) {
                    tracing::info!(lease = %election.lease, %holder, "standing by: another replica leads");
                    last_holder = Some(holder);
                }
            }
            Err(e) => {
                tracing::warn!(lease = %election.lease, error = %e.report(), "cannot read the lease")
            }
        }
        // Jittered as client-go's acquire loop, so replicas started together do not ask in step.
        tokio::time::sleep(election.timing.acquire_wait(fastrand::f64())).await;
    }
}

/// Renews every retry period, counting the renew deadline from when a renewal was sent;
/// returns why leadership was lost.
async fn hold(elector: &mut Elector, fence: &Fence) -> String {
    let timing = elector.timing();
    let mut renewed = Instant::now();
    loop {
        tokio::time::sleep(timing.retry_period).await;
        let left = timing.renew_deadline.saturating_sub(renewed.elapsed());
        let asked = Instant::now();
        match tokio::time::timeout(left, elector.look()).await {
            Ok(Ok(Look::Leading)) => {
                renewed = asked;
                fence.extend_to(asked + timing.renew_deadline);
            }
            Ok(Ok(Look::Following { holder })) => return format!("{holder} holds it"),
            Ok(Err(e)) => tracing::warn!(error = %e.report(), "cannot renew the lease"),
            Err(_) => {}
        }
        if renewed.elapsed() >= timing.renew_deadline {
            return format!(
                "not renewed for the renew deadline ({:?})",
                timing.renew_deadline
            );
        }
    }
}

/// What a reconcile is run on.
enum Trigger {
    Project(ProjectKey),
    /// A watch (re)listed: every project the caches know.
    All,
    /// A failing project's backoff is over.
    Retry(ProjectKey),
}

/// The caches the watches fill.
#[derive(Clone)]
struct Caches {
    replicasets: Store<ReplicaSet>,
    services: Store<Service>,
    pods: Store<Pod>,
}

impl Caches {
    fn observed(&self, key: &ProjectKey) -> Observed {
        let rs = self
            .replicasets
            .get(&ObjectRef::new(&key.name).within(&key.namespace))
            .map(|rs| rs.as_ref().clone());
        let svc = self
            .services
            .get(&ObjectRef::new(&jumppod::schema::service_name(&key.name)).within(&key.namespace))
            .map(|s| s.as_ref().clone());
        // `decisions::observed` picks the project's pods (by name and instance label) itself.
        let pods = self
            .pods
            .state_filter(|p| p.metadata.namespace.as_deref() == Some(&key.namespace));
        decisions::observed(key, rs, svc, pods.iter().map(|p| p.as_ref()))
    }

    fn keys(&self) -> BTreeSet<ProjectKey> {
        let mut keys = BTreeSet::new();
        keys.extend(
            self.replicasets
                .state()
                .iter()
                .filter_map(|r| ProjectKey::of_replicaset(r)),
        );
        keys.extend(
            self.services
                .state()
                .iter()
                .filter_map(|s| ProjectKey::of_service(s)),
        );
        for p in self.pods.state() {
            keys.extend(ProjectKey::of_pod(&p));
        }
        keys
    }
}

/// One watch: objects that are not a jump pod's never enter the cache (an object relabelled
/// away becomes a delete), and what the planner does not read is dropped from those that do.
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    ours: fn(&K) -> bool,
    slim: fn(&mut K),
    keys: fn(&K) -> Vec<ProjectKey>,
) -> impl Stream<Item = Result<Vec<Trigger>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let events = watcher(api, config)
        .default_backoff()
        .try_filter_map(move |event| {
            futures::future::ready(Ok(match event {
                watcher::Event::InitApply(o) if !ours(&o) => None,
                watcher::Event::Apply(o) if !ours(&o) => Some(watcher::Event::Delete(o)),
                other => Some(other.modify(slim)),
            }))
        });
    reflector::reflector(writer, events).map_ok(move |event| match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
            keys(&o).into_iter().map(Trigger::Project).collect()
        }
        watcher::Event::InitDone => vec![Trigger::All],
        watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
    })
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What a project's reconciles remember between runs.
#[derive(Default)]
struct Memory {
    /// Notes published for what is still the case.
    published: BTreeSet<Note>,
    port: Option<SeenPort>,
    failures: u32,
    /// In backoff after an error: triggers wait for the retry.
    backing_off: bool,
}

struct Context {
    caches: Caches,
    write: Client,
    reporter: events::Reporter,
    /// Open Event series of this leadership term.
    series: Mutex<events::Series>,
    template: RawConfig,
    metrics: Arc<Metrics>,
    timeout: Duration,
}

/// Watches and reconciles until aborted (leadership lost, shutdown); writes pass `fence`.
async fn control(
    clients: Clients,
    options: Options,
    metrics: Arc<Metrics>,
    fence: Fence,
) -> Result<(), HostError> {
    let write = fence.guard(clients.write.clone());
    let ns = options.namespace.as_deref();
    let (replicasets, rs_writer) = reflector::store();
    let (services, svc_writer) = reflector::store();
    let (pods, pod_writer) = reflector::store();
    // Pages of 100, not kube-rs' 500: a page is held whole, before the objects are slimmed
    // for the cache, and it sets a fresh controller's peak memory.
    let unfiltered = watcher::Config::default().page_size(LIST_PAGE);
    let labelled = unfiltered.clone().labels(decisions::WATCH_SELECTOR);
    let streams = futures::stream::select_all([
        watch(
            api::<ReplicaSet>(&clients.watch, ns),
            labelled.clone(),
            rs_writer,
            |rs| ProjectKey::of_replicaset(rs).is_some(),
            decisions::slim_replicaset,
            |rs| ProjectKey::of_replicaset(rs).into_iter().collect(),
        )
        .boxed(),
        watch(
            api::<Service>(&clients.watch, ns),
            unfiltered,
            svc_writer,
            |s| ProjectKey::of_service(s).is_some(),
            decisions::slim_service,
            |s| ProjectKey::of_service(s).into_iter().collect(),
        )
        .boxed(),
        watch(
            api::<Pod>(&clients.watch, ns),
            labelled,
            pod_writer,
            |p| !ProjectKey::of_pod(p).is_empty(),
            decisions::slim_pod,
            ProjectKey::of_pod,
        )
        .boxed(),
    ]);
    let caches = Caches {
        replicasets,
        services,
        pods,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let forward = {
        let tx = tx.clone();
        async move {
            let mut streams = streams;
            while let Some(item) = streams.next().await {
                match item {
                    Ok(triggers) => {
                        for trigger in triggers {
                            let _ = tx.send(trigger);
                        }
                    }
                    // The watcher retries with backoff on its own; say what failed.
                    Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
                }
            }
        }
    };
    let ready = {
        let caches = caches.clone();
        let metrics = metrics.clone();
        async move {
            let waited = Instant::now();
            let _ = tokio::join!(
                caches.replicasets.wait_until_ready(),
                caches.services.wait_until_ready(),
                caches.pods.wait_until_ready()
            );
            metrics.set_role(Role::Leading);
            tracing::info!(
                took = ?waited.elapsed(),
                replicasets = caches.replicasets.len(),
                services = caches.services.len(),
                pods = caches.pods.len(),
                "caches filled"
            );
        }
    };
    let context = Arc::new(Context {
        caches,
        write,
        reporter: events::Reporter {
            controller: CONTROLLER_NAME.into(),
            instance: options
                .election
                .as_ref()
                .map_or_else(|| CONTROLLER_NAME.into(), |e| e.identity.clone()),
        },
        series: Mutex::default(),
        template: options.template.clone(),
        metrics,
        timeout: options.reconcile_timeout,
    });
    tokio::join!(forward, ready, work(context, options, tx, rx));
    Ok(())
}

/// The work queue: runs reconciles, at most one per project and `concurrency` at once.
async fn work(
    ctx: Arc<Context>,
    options: Options,
    tx: mpsc::UnboundedSender<Trigger>,
    mut rx: mpsc::UnboundedReceiver<Trigger>,
) {
    let mut pending: BTreeSet<ProjectKey> = BTreeSet::new();
    let mut running: BTreeSet<ProjectKey> = BTreeSet::new();
    let mut again: BTreeSet<ProjectKey> = BTreeSet::new();
    let mut memory: HashMap<ProjectKey, Memory> = HashMap::new();
    let mut projects = Projects::default();
    let mut tasks: JoinSet<(ProjectKey, Memory, Result<Option<State>, HostError>)> = JoinSet::new();
    loop {
        while running.len() < options.concurrency.max(1) {
            let Some(key) = pending.pop_first() else {
                break;
            };
            let mem = memory.remove(&key).unwrap_or_default();
            running.insert(key.clone());
            let ctx = ctx.clone();
            tasks.spawn(async move {
                let (mem, result) = reconcile(&ctx, &key, mem).await;
                (key, mem, result)
            });
        }
        tokio::select! {
            trigger = rx.recv() => {
                let Some(trigger) = trigger else { return };
                let mut enqueue = |key: ProjectKey, retry: bool| {
                    if let Some(mem) = memory.get_mut(&key) {
                        if mem.backing_off && !retry {
                            return;
                        }
                        mem.backing_off = false;
                    }
                    if running.contains(&key) {
                        again.insert(key);
                    } else {
                        pending.insert(key);
                    }
                };
                match trigger {
                    Trigger::Project(key) => enqueue(key, false),
                    Trigger::Retry(key) => enqueue(key, true),
                    Trigger::All => {
                        for key in projects.relisted(ctx.caches.keys()) {
                            enqueue(key, false);
                        }
                    }
                }
            }
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                let Ok((key, mut mem, result)) = joined else { continue };
                running.remove(&key);
                match result {
                    Ok(Some(state)) => {
                        mem.failures = 0;
                        projects.record(&key, Some(state));
                        memory.insert(key.clone(), mem);
                    }
                    Ok(None) => projects.record(&key, None),
                    Err(e) => {
                        mem.failures += 1;
                        let delay = backoff(options.backoff, options.max_backoff, mem.failures);
                        tracing::warn!(project = %key, error = %e.report(), failures = mem.failures, retry_in = ?delay, "reconcile failed");
                        // Changes seen meanwhile wait for the retry too, which reads them.
                        mem.backing_off = true;
                        again.remove(&key);
                        memory.insert(key.clone(), mem);
                        let tx = tx.clone();
                        let retry = key.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = tx.send(Trigger::Retry(retry));
                        });
                    }
                }
                if again.remove(&key) {
                    pending.insert(key);
                }
                ctx.metrics.set_projects(&projects.counts());
            }
        }
    }
}

/// Exponential backoff with full jitter over its upper half: `first * 2^(failures-1)`, at most
/// `max`, times a random factor in [0.5, 1.0], so that projects failing together (an API
/// outage) do not retry in lockstep.
pub fn backoff(first: Duration, max: Duration, failures: u32) -> Duration {
    let exp = first.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    exp.min(max).mul_f64(0.5 + fastrand::f64() * 0.5)
}

/// One project: observe (the caches), decide, write, tell. `Ok(None)`: nothing of it is left.
#[tracing::instrument(name = "reconcile", skip_all, fields(namespace = %key.namespace, jump_pod = %key.name))]
async fn reconcile(
    ctx: &Context,
    key: &ProjectKey,
    mut mem: Memory,
) -> (Memory, Result<Option<State>, HostError>) {
    let started = Instant::now();
    let observed = ctx.caches.observed(key);
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
        let kube = Kube::new(ctx.write.clone(), ctx.timeout);
        let applied = apply(&kube, &key.namespace, &decision.actions).await?;
        for a in &applied {
            ctx.metrics
                .actions
                .get_or_create(&ActionLabel {
                    action: match a.action {
                        jumppod_plan::action::Action::DeletePod { .. } => "delete-pod",
                        jumppod_plan::action::Action::DeleteService { .. } => "delete-service",
                        jumppod_plan::action::Action::CreateService { .. } => "create-service",
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

#[cfg(test)]
mod tests {
    use super::*;

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
