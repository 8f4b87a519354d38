//! What the controller exposes on its HTTP port: Prometheus metrics on `/metrics`, liveness on
//! `/healthz`, readiness on `/readyz` (a leader once its caches are filled; a standby at once,
//! so that a rollout is not held up by the replica that waits).

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use jumppod_plan::controller::State;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: &'static str,
}

/// The controller's role right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    Starting = 0,
    Standby = 1,
    /// Leading, the watch caches not yet filled.
    Syncing = 2,
    Leading = 3,
}

pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<ResultLabel, Counter>,
    pub actions: Family<ActionLabel, Counter>,
    pub events: Counter,
    pub duration: Histogram,
    pub projects: Family<StateLabel, Gauge>,
    pub leader: Gauge,
    pub deferred: Counter,
    pub disrupted: Gauge,
    role: AtomicU8,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("jumppod");
        let reconciles = Family::<ResultLabel, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles of a project, by result (ok, error)",
            reconciles.clone(),
        );
        let actions = Family::<ActionLabel, Counter>::default();
        registry.register(
            "actions",
            "Writes made, by kind (delete-pod, delete-service, create-service, retire-pod, scale-replicaset)",
            actions.clone(),
        );
        let events = Counter::default();
        registry.register("events", "Kubernetes Events published", events.clone());
        // From 1 ms (a reconcile that writes nothing) to 10 s (writes retried).
        let duration = Histogram::new([
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ]);
        registry.register(
            "reconcile_duration_seconds",
            "Time of one project's reconcile, writes included",
            duration.clone(),
        );
        let projects = Family::<StateLabel, Gauge>::default();
        registry.register(
            "projects",
            "Projects watched, by state (ready, upgrading, pending, degraded, no-replicaset, invalid)",
            projects.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica leads (writes), 0 while it stands by",
            leader.clone(),
        );
        let deferred = Counter::default();
        registry.register(
            "node_deletions_deferred",
            "Writes that would take a pod away for its node, deferred because the destruction budget (--node-deletion-rate) was spent",
            deferred.clone(),
        );
        let disrupted = Gauge::default();
        registry.register(
            "nodes_disrupted",
            "1 while most nodes look silent, not Ready or lost at once, so that the controller acts on none of it",
            disrupted.clone(),
        );
        Metrics {
            registry,
            reconciles,
            actions,
            events,
            duration,
            projects,
            leader,
            deferred,
            disrupted,
            role: AtomicU8::new(Role::Starting as u8),
        }
    }

    /// A replica that does not lead counts no project: its last term's counts are not true
    /// any more (the new leader's are), and two replicas summed would count them twice.
    pub fn set_role(&self, role: Role) {
        self.role.store(role as u8, Ordering::Relaxed);
        let leads = matches!(role, Role::Syncing | Role::Leading);
        self.leader.set(i64::from(leads));
        if !leads {
            self.set_projects(&BTreeMap::new());
        }
    }

    pub fn role(&self) -> Role {
        match self.role.load(Ordering::Relaxed) {
            1 => Role::Standby,
            2 => Role::Syncing,
            3 => Role::Leading,
            _ => Role::Starting,
        }
    }

    /// Sets the projects gauge from every project's state (all states present, zeros too).
    pub fn set_projects(&self, states: &BTreeMap<State, i64>) {
        for state in State::ALL {
            self.projects
                .get_or_create(&StateLabel {
                    state: state.as_str(),
                })
                .set(states.get(&state).copied().unwrap_or(0));
        }
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

fn response(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

/// Answers one request.
pub fn answer(metrics: &Metrics, path: &str) -> Response<Full<Bytes>> {
    let role = metrics.role();
    match path {
        "/metrics" => response(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.text(),
        ),
        "/healthz" | "/livez" => response(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => match role {
            Role::Leading => response(StatusCode::OK, "text/plain", "ok: leading\n".into()),
            Role::Standby => response(StatusCode::OK, "text/plain", "ok: standing by\n".into()),
            Role::Syncing => response(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "not ready: leading, the watch caches are being filled\n".into(),
            ),
            Role::Starting => response(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "not ready: starting\n".into(),
            ),
        },
        _ => response(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: /metrics, /healthz, /readyz\n".into(),
        ),
    }
}

/// Binds the address (port 0: a free one) and serves until the task is dropped.
pub async fn serve(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let server = async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let r = answer(&metrics, req.uri().path());
                        async move { Ok::<_, std::convert::Infallible>(r) }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    };
    Ok((addr, server))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(r: Response<Full<Bytes>>) -> (StatusCode, String) {
        let status = r.status();
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readiness_follows_the_role_and_health_does_not() {
        let m = Metrics::new();
        assert_eq!(
            body(answer(&m, "/readyz")).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        m.set_role(Role::Standby);
        assert_eq!(
            body(answer(&m, "/readyz")).await,
            (StatusCode::OK, "ok: standing by\n".into())
        );
        m.set_role(Role::Syncing);
        assert_eq!(
            body(answer(&m, "/readyz")).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(body(answer(&m, "/healthz")).await.0, StatusCode::OK);
        m.set_role(Role::Leading);
        assert_eq!(body(answer(&m, "/readyz")).await.0, StatusCode::OK);
        assert_eq!(body(answer(&m, "/nope")).await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_metrics_name_every_state_and_count_reconciles() {
        let m = Metrics::new();
        m.set_role(Role::Leading);
        m.set_projects(&BTreeMap::from([(State::Ready, 3), (State::Degraded, 1)]));
        m.reconciles
            .get_or_create(&ResultLabel { result: "ok" })
            .inc();
        m.duration.observe(0.002);
        let (_, text) = body(answer(&m, "/metrics")).await;
        for line in [
            "jumppod_projects{state=\"ready\"} 3",
            "jumppod_projects{state=\"degraded\"} 1",
            "jumppod_projects{state=\"no-replicaset\"} 0",
            "jumppod_reconciles_total{result=\"ok\"} 1",
            "jumppod_reconcile_duration_seconds_count 1",
            "jumppod_leader 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
    }

    /// Issue 21 §9: a leader deposed (or cut off from the API) stops counting projects.
    #[tokio::test]
    async fn a_replica_that_stands_by_counts_no_project() {
        let m = Metrics::new();
        m.set_role(Role::Leading);
        m.set_projects(&BTreeMap::from([(State::Ready, 3), (State::Degraded, 1)]));
        m.set_role(Role::Standby);
        let (_, text) = body(answer(&m, "/metrics")).await;
        for state in State::ALL {
            let line = format!("jumppod_projects{{state=\"{}\"}} 0", state.as_str());
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
        assert!(text.lines().any(|l| l == "jumppod_leader 0"), "{text}");
    }
}
