//! Helpers shared by the fidelity tests: real kube clients and raw HTTP.
#![allow(dead_code)]

use jumppod_sim::Sim;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

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
    let mut s = std::net::TcpStream::connect(sim.addr()).expect("connect");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: sim\r\nAuthorization: Bearer {token}\r\nContent-Type: {ctype}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let code: u16 = out[9..12].parse().expect("status code");
    let (_, body) = out.split_once("\r\n\r\n").expect("body");
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
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
