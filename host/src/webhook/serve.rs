//! The TLS and HTTP around [`super::review`]: the serving certificate, the listener, the
//! routes (`POST /mutate`, `POST /validate`, `/healthz`, `/readyz`, `/metrics`).

use super::metrics::Metrics;
use super::reload::Reloading;
use super::{PATH, Settings, VALIDATE_PATH, envelope, refuse, review, validate};
use crate::error::HostError;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use jumppod_plan::config::ConfigError;
use jumppod_review::Policy;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tokio_rustls::rustls;

/// The API server sends an object and an oldObject of up to 3 MiB each (etcd's request limit):
/// a body up to 7 MiB is read, as controller-runtime's webhook server reads it; past that it
/// is refused, under the uid read from its front.
pub const MAX_BODY: usize = 7 * 1024 * 1024;

/// How the webhook runs.
pub struct Options {
    pub listen: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Compiles the module and checks the settings with it (blocking): run once the listener
    /// is bound.
    pub load: Box<dyn FnOnce() -> Result<Arc<dyn Policy>, HostError> + Send>,
    pub settings: Value,
    /// How long a shutdown waits for the reviews in flight.
    pub grace: std::time::Duration,
    /// How long, once told to shut down, the webhook goes on accepting and answering (each
    /// answer closing its connection, /readyz 503) before it closes the listener: the time the
    /// pod's removal from the Service's endpoints takes to reach every node's kube-proxy.
    pub drain: std::time::Duration,
}

/// The TLS configuration from PEM files: the serving chain and its key (PKCS#8, SEC1 or RSA),
/// read again on a handshake after they change ([`Reloading`], also returned: the server asks
/// it before each answer whether the pair changed).
pub fn tls(cert: &Path, key: &Path) -> Result<(rustls::ServerConfig, Arc<Reloading>), HostError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pair = Arc::new(Reloading::new(cert, key, provider.clone())?);
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError {
            field: "--tls-key".into(),
            value: key.display().to_string(),
            problem: e.to_string(),
        })?
        .with_no_client_auth()
        .with_cert_resolver(pair.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, pair))
}

/// Serves until `shutdown` resolves. The listener is bound first, so the probes answer while
/// the module compiles: `/healthz` at once, `/readyz` (and every review) 503 until `load` has
/// compiled the module and its settings are accepted; then `ready` gets the address actually
/// listened on (port 0 picks a free one). If `load` fails, its error ends the serving.
///
/// On `shutdown` it drains first, for `drain`: it still accepts and answers, but /readyz
/// answers 503 and every answer carries `Connection: close`, so a client holding a kept-alive
/// connection (the API server's, through a Service whose endpoints still name this pod) opens
/// its next one where the Service now sends it. Then the listener is closed (a new connection
/// is refused), each open connection answers the request it is reading or reviewing and closes
/// (hyper's graceful shutdown), and serving ends once they are all closed or `grace` has
/// passed, whichever comes first.
pub async fn serve(
    options: Options,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), HostError> {
    let (config, pair) = tls(&options.cert, &options.key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| ConfigError {
            field: "--listen".into(),
            value: options.listen.to_string(),
            problem: format!("cannot listen there: {e}"),
        })?;
    let local = listener.local_addr().map_err(|e| ConfigError {
        field: "--listen".into(),
        value: options.listen.to_string(),
        problem: e.to_string(),
    })?;
    tracing::info!(
        addr = %local,
        "listening; not ready until the module is compiled and its settings accepted"
    );
    let state = Arc::new(State {
        policy: OnceLock::new(),
        settings: Arc::new(Settings::new(&options.settings)),
        evaluating: evaluations(),
        draining: std::sync::atomic::AtomicBool::new(false),
        pair,
        metrics: Metrics::new(),
    });
    // The certificate's expiry logged again each day (at start and on each reload too): a
    // warning once its renewal is due.
    let mut expiry_report =
        tokio::time::interval_at(tokio::time::Instant::now() + EXPIRY_REPORT, EXPIRY_REPORT);
    // wasmtime compiles synchronously: on the blocking pool, while the probes are answered.
    let mut load = tokio::task::spawn_blocking(options.load);
    let mut loading = true;
    let mut ready = Some(ready);
    // Every connection holds a receiver: `closed` is every connection finished.
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    // Armed when the shutdown comes: the end of the drain.
    let drained = tokio::time::sleep(std::time::Duration::ZERO);
    tokio::pin!(drained);
    let mut draining = false;
    loop {
        let (tcp, peer) = tokio::select! {
            loaded = &mut load, if loading => {
                loading = false;
                let policy = loaded.map_err(|e| {
                    HostError::Controller(format!("compiling the policy module failed: {e}"))
                })??;
                let _ = state.policy.set(policy);
                tracing::info!(addr = %local, "ready: the module is compiled and its settings accepted");
                if let Some(ready) = ready.take() {
                    ready(local);
                }
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            () = &mut shutdown, if !draining => {
                if options.drain.is_zero() {
                    break;
                }
                draining = true;
                state.draining.store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(
                    drain = ?options.drain,
                    "draining: still answering, each answer closing its connection, /readyz 503, \
                     until the endpoints' change has reached every kube-proxy"
                );
                drained.as_mut().reset(tokio::time::Instant::now() + options.drain);
                continue;
            }
            () = &mut drained, if draining => break,
            _ = expiry_report.tick() => {
                state.pair.report_expiry();
                continue;
            }
        };
        tokio::spawn(connection(
            tcp,
            peer,
            acceptor.clone(),
            state.clone(),
            stopping.clone(),
        ));
    }
    drop(listener);
    drop(stopping);
    tracing::info!(
        connections = stop.receiver_count(),
        grace = ?options.grace,
        "shutting down: no longer accepting; finishing the reviews in flight"
    );
    stop.send_replace(true);
    match tokio::time::timeout(options.grace, stop.closed()).await {
        Ok(()) => tracing::info!("shut down: every connection finished"),
        Err(_) => tracing::warn!(
            connections = stop.receiver_count(),
            grace = ?options.grace,
            "shut down: the grace period ended with connections still open; they are cut"
        ),
    }
    Ok(())
}

/// How often the serving certificate's expiry is logged.
const EXPIRY_REPORT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What the connections share: the policy once it is compiled and its settings accepted.
struct State {
    policy: OnceLock<Arc<dyn Policy>>,
    settings: Arc<Settings>,
    /// A permit per evaluation running.
    evaluating: Arc<tokio::sync::Semaphore>,
    /// Shutting down: not ready, and no connection kept alive.
    draining: std::sync::atomic::AtomicBool,
    /// The serving pair.
    pair: Arc<Reloading>,
    metrics: Metrics,
}

/// As many evaluations at a time as there are cores: each runs on a thread of the blocking
/// pool, and more threads than cores only take turns on them. Unbounded (tokio's 512 blocking
/// threads), 8 connections on 2 cores made 10 threads share 2 cores: the p99 was 2-3x what it
/// is with the others waiting for a permit (`make bench-webhook`).
fn evaluations() -> Arc<tokio::sync::Semaphore> {
    Arc::new(tokio::sync::Semaphore::new(evaluations_at_once() as usize))
}

/// How many reviews are evaluated at a time: one per core. The module's instance pool has as
/// many slots, so a review never waits for one.
pub fn evaluations_at_once() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
}

/// One connection: the TLS handshake, then HTTP/1.1 until the client closes it or the server
/// stops; `stopping` held until it ends is what the shutdown waits for.
async fn connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    state: Arc<State>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    // Taken before the handshake: a pair replaced during it closes the connection after its
    // first answer, at worst one connection more than needed.
    let generation = state.pair.generation();
    let tls = tokio::select! {
        accepted = acceptor.accept(tcp) => match accepted {
            Ok(tls) => tls,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "TLS handshake failed");
                return;
            }
        },
        // No request was read on it yet: nothing in flight to finish.
        _ = stopping.changed() => return,
    };
    let service = hyper::service::service_fn(move |req| {
        let state = state.clone();
        async move {
            let draining = state.draining.load(std::sync::atomic::Ordering::Relaxed);
            let mut answer = match state.policy.get() {
                _ if req.method() == Method::GET && req.uri().path() == "/metrics" => reply(
                    StatusCode::OK,
                    "text/plain; version=0.0.4; charset=utf-8",
                    state.metrics.render(&state.pair).into_bytes(),
                ),
                Some(_) if draining && req.uri().path() == "/readyz" => reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    b"jumppod webhook: shutting down\n".to_vec(),
                ),
                Some(policy) => handle(req, policy, &state.settings, &state.evaluating).await,
                None => not_ready(req).await,
            };
            // Draining, or the serving pair replaced since this connection's handshake: hyper
            // closes the connection once this answer is written, and the client's next one
            // goes where the Service sends it now, verifying the pair served now.
            if draining || state.pair.generation() != generation {
                answer.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, std::convert::Infallible>(answer)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(tls), service);
    let mut conn = std::pin::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        _ = stopping.changed() => {
            // The request being read or reviewed is answered, then the connection closes.
            conn.as_mut().graceful_shutdown();
            conn.as_mut().await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
}

/// A response of `status` with `body`, of `content_type`.
fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

/// The answers before the module is compiled and its settings accepted: alive, not ready, and
/// a review refused with 503 under its uid (an empty uid makes the API server count the call
/// as failed).
async fn not_ready(req: Request<Incoming>) -> Response<Full<Bytes>> {
    const NOT_READY: &str =
        "jumppod webhook: not ready: the policy module is being compiled and its settings checked";
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => reply(StatusCode::OK, "text/plain", b"ok\n".to_vec()),
        (&Method::POST, _) => {
            let (Ok(body) | Err((body, _))) = read_body(req.into_body()).await;
            let uid = super::answer::request_uid(&body).unwrap_or_default();
            tracing::info!(%uid, "refused a review: not ready");
            let answer = envelope(refuse(&json!(uid), 503, NOT_READY.into()));
            let body = serde_json::to_vec(&answer).unwrap_or_default();
            reply(StatusCode::OK, "application/json", body)
        }
        _ => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            format!("{NOT_READY}\n").into_bytes(),
        ),
    }
}

/// The whole body, or its first [`MAX_BODY`] bytes and why it was not read to the end.
async fn read_body(mut body: Incoming) -> Result<Bytes, (Bytes, String)> {
    let mut read = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| (read.clone().freeze(), e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if read.len() + data.len() > MAX_BODY {
            read.extend_from_slice(&data[..MAX_BODY - read.len()]);
            return Err((
                read.freeze(),
                format!("it is longer than {MAX_BODY} bytes (7 MiB)"),
            ));
        }
        read.extend_from_slice(&data);
    }
    Ok(read.freeze())
}

async fn handle(
    req: Request<Incoming>,
    policy: &Arc<dyn Policy>,
    settings: &Arc<Settings>,
    evaluating: &Arc<tokio::sync::Semaphore>,
) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz" | "/readyz") => {
            reply(StatusCode::OK, "text/plain", b"ok\n".to_vec())
        }
        (&Method::POST, path @ (PATH | VALIDATE_PATH)) => {
            let validating = path == VALIDATE_PATH;
            let started = Instant::now();
            let body = match read_body(req.into_body()).await {
                Ok(body) => body,
                Err((front, problem)) => {
                    let uid = super::answer::request_uid(&front).unwrap_or_default();
                    let answer = envelope(refuse(
                        &json!(uid),
                        400,
                        format!("jumppod webhook: cannot read the body: {problem}"),
                    ));
                    tracing::warn!(%uid, %problem, "refused a body it cannot read");
                    let body = serde_json::to_vec(&answer).unwrap_or_default();
                    return reply(StatusCode::OK, "application/json", body);
                }
            };
            let (policy, settings) = (policy.clone(), settings.clone());
            let uid = super::answer::request_uid(&body).unwrap_or_default();
            tracing::debug!(%uid, "review started");
            let permit = evaluating.clone().acquire_owned().await;
            // wasmtime runs synchronously: off the reactor, on the blocking pool.
            let review =
                tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    match validating {
                    true => validate(policy.as_ref(), &settings, &body),
                    false => review(policy.as_ref(), &settings, &body),
                }})
                    .await
                    .unwrap_or_else(|e| {
                        envelope(refuse(
                            &json!(uid),
                            500,
                            format!("jumppod webhook: the evaluation panicked: {e}"),
                        ))
                    });
            let response = &review["response"];
            tracing::info!(
                uid = %response["uid"],
                validating,
                allowed = %response["allowed"],
                patched = response.get("patch").is_some(),
                message = %response["status"]["message"],
                elapsed = ?started.elapsed(),
                "reviewed"
            );
            reply(
                StatusCode::OK,
                "application/json",
                serde_json::to_vec(&review).unwrap_or_default(),
            )
        }
        (_, path) => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!("jumppod webhook: no {path} here; AdmissionReviews go to POST {PATH} or {VALIDATE_PATH}\n")
                .into_bytes(),
        ),
    }
}
