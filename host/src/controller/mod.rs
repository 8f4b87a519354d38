//! `jumppod run`: the reconciler as a Kubernetes controller.
//!
//! Split by job: [`watches`] fill caches, each change naming the projects it concerns;
//! [`queue`] reconciles each project, one at a time per project, retrying a failing one with
//! jittered backoff while the others go on; [`reconcile`] works from the caches alone
//! ([`jumppod_plan::controller`] decides, [`crate::apply`] writes), so a steady cluster costs
//! no request beyond the watches; [`events`] tells. This module leads or stands by: with
//! leader election only the holder of the Lease watches and writes ([`lease`]), and its writes
//! pass a [`Fence`] that closes at the renew deadline by its own clock.

mod access;
mod budget;
mod events;
mod lease;
mod leases;
mod metrics;
mod queue;
mod reconcile;
mod synced;
mod watches;

use crate::error::HostError;
use futures::StreamExt;
use jumppod_plan::config::RawConfig;
use jumppod_plan::lease::Timing;
use kube::Client;
use lease::{Elector, Look};
use metrics::{Metrics, Role};
use reconcile::Context;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The name Events carry as their reporting controller.
pub const CONTROLLER_NAME: &str = "jumppod";

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
    /// The namespaces watched; None: every namespace.
    pub namespaces: Option<Vec<String>>,
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
    /// A node whose Lease is not renewed for this long is silent: its jump pod gets a
    /// replacement beside it before the node-lifecycle controller finds it lost. None: only
    /// once it does.
    pub silent_node_after: Option<Duration>,
    /// The destruction budget: writes that take serving pods away for their node, per second
    /// across every project, and at once.
    pub node_deletion_rate: f64,
    pub node_deletion_burst: u32,
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

/// Watches and reconciles until aborted (leadership lost, shutdown); writes pass `fence`.
async fn control(
    clients: Clients,
    options: Options,
    metrics: Arc<Metrics>,
    fence: Fence,
) -> Result<(), HostError> {
    let write = fence.guard(clients.write.clone());
    let watch_nodes = watches::may_watch_nodes(&clients.watch).await;
    let silent_after = match options.silent_node_after {
        Some(after) if leases::may_watch(&clients.watch).await => Some(after),
        _ => None,
    };
    let (caches, streams) = watches::start(
        &clients.watch,
        options.namespaces.as_deref(),
        watch_nodes,
        silent_after,
    );
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
            caches.wait_until_ready().await;
            metrics.set_role(Role::Leading);
            let (replicasets, services, pods) = caches.sizes();
            tracing::info!(
                took = ?waited.elapsed(),
                replicasets,
                services,
                pods,
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
        budget: budget::Budget::new(
            options.node_deletion_rate,
            options.node_deletion_burst,
            std::time::Instant::now(),
        ),
    });
    tokio::join!(
        forward,
        ready,
        queue::work(
            context,
            queue::Pace {
                concurrency: options.concurrency,
                backoff: options.backoff,
                max_backoff: options.max_backoff,
            },
            tx,
            rx
        )
    );
    Ok(())
}
