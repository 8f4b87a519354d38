//! What the simulator's fidelity tests share (feature `testing`, which only they turn on):
//! real kube clients and raw HTTP. In the library, not in a module every test binary compiles,
//! so that what one binary leaves unused is not dead code to hide.

use crate::Sim;
use serde_json::Value;
use std::future::Future;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// How long any single wait in these tests may take before it fails, naming what it awaited.
pub const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// Awaits `fut`, failing the test with `what` if it takes longer than [`WAIT_LIMIT`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT_LIMIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {WAIT_LIMIT:?} waiting for {what}"),
    }
}

/// Runs the controllers until quiet ([`Sim::settle`]), bounded by [`WAIT_LIMIT`].
pub async fn settle(sim: &Sim) {
    within("the simulator's controllers to settle", sim.settle()).await
}

/// The kinds of failure a transport error can be, found anywhere in its source chain.
pub fn is_timeout(err: &(dyn std::error::Error + 'static)) -> bool {
    sources(err).any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    })
}

/// Whether the connection closed before a response came (hyper's `IncompleteMessage`).
pub fn is_connection_closed(err: &(dyn std::error::Error + 'static)) -> bool {
    sources(err).any(|e| {
        e.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_incomplete_message() || h.is_closed())
    })
}

fn sources<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| e.source())
}

/// A kube client for the kubeconfig at `path`, with kube's default retry policy.
pub async fn client_at(path: &Path) -> kube::Client {
    build(path, true, None).await
}

/// The admin client.
pub async fn client(sim: &Sim) -> kube::Client {
    client_at(sim.kubeconfig_path()).await
}

/// A client that does not retry 429/503 and gives up reading after `read_timeout`.
pub async fn raw_client(sim: &Sim, read_timeout: Option<Duration>) -> kube::Client {
    build(sim.kubeconfig_path(), false, read_timeout).await
}

async fn build(path: &Path, retry: bool, read_timeout: Option<Duration>) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    cfg.default_retry = retry;
    if read_timeout.is_some() {
        cfg.read_timeout = read_timeout;
    }
    kube::Client::try_from(cfg).expect("client")
}

/// The API `Status` of a failed kube call.
pub fn status<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> Box<kube::core::Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// One raw HTTP/1.1 exchange as `token`; returns the status code and the JSON body.
pub fn raw(sim: &Sim, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    raw_with(sim, token, method, path, "application/json", body)
}

/// [`raw`] with a content type.
pub fn raw_with(
    sim: &Sim,
    token: &str,
    method: &str,
    path: &str,
    ctype: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let (code, _, body) = raw_text(sim, token, method, path, ctype, body);
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// One raw HTTP/1.1 exchange; returns the status code, the header lines and the body as text.
/// Reading is bounded by [`WAIT_LIMIT`].
pub fn raw_text(
    sim: &Sim,
    token: &str,
    method: &str,
    path: &str,
    ctype: &str,
    body: Option<&Value>,
) -> (u16, Vec<String>, String) {
    let mut s = std::net::TcpStream::connect(sim.addr()).expect("connect");
    s.set_read_timeout(Some(WAIT_LIMIT)).expect("read timeout");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: sim\r\nAuthorization: Bearer {token}\r\nContent-Type: {ctype}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out)
        .unwrap_or_else(|e| panic!("reading the answer to {method} {path}: {e}"));
    let code: u16 = out[9..12].parse().expect("status code");
    let (head, body) = out.split_once("\r\n\r\n").expect("body");
    let headers = head.lines().skip(1).map(String::from).collect();
    (code, headers, body.to_string())
}

/// Deserialises JSON into a typed object.
pub fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("typed object")
}

/// A namespace for a test.
pub fn namespace(sim: &Sim, name: &str) {
    sim.create(
        "namespaces",
        None,
        serde_json::json!({"metadata": {"name": name}}),
    )
    .expect("namespace");
}
