//! The real API server behind a front that holds back the answers to chosen requests: an API
//! server slow to list pods, as one under load is, for a controller that must not decide
//! before it has listed everything. The front serves plain HTTP on 127.0.0.1 and sends each
//! request on with a client of its own (the user of the kubeconfig it was given), streaming
//! the answer back, watches too.

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::http::{Method, Uri, header};
use hyper::{Request, Response};
use kube::Client;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Which requests are held back.
pub type Slow = fn(&Method, &Uri) -> bool;

pub struct SlowFront {
    pub addr: SocketAddr,
    held: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowFront {
    /// A front of the API server `upstream` (a kubeconfig) holding back each request `slow`
    /// picks by `delay` before sending it on.
    pub async fn start(upstream: &Path, slow: Slow, delay: Duration) -> SlowFront {
        let (client, _) = jumppod_host::api::client(&jumppod_host::api::ClientOptions {
            kubeconfig: Some(upstream.to_owned()),
            watch: true,
            ..Default::default()
        })
        .await
        .expect("a client of the API server");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let held = Arc::new(AtomicUsize::new(0));
        let counted = held.clone();
        let task = tokio::spawn(async move {
            // Dropped with the task: every connection ends with the front.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let (client, held) = (client.clone(), counted.clone());
                let service = hyper::service::service_fn(move |request| {
                    forward(client.clone(), slow, delay, held.clone(), request)
                });
                connections.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        SlowFront { addr, held, task }
    }

    /// How many requests were held back so far.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Writes a kubeconfig that reaches the API server through the front (which authenticates
    /// on its own: the kubeconfig carries no credentials).
    pub fn write_kubeconfig(&self, path: &Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: front\n  cluster:\n    server: http://{}\n\
             users:\n- name: front\n  user: {{}}\ncontexts:\n- name: front\n  context:\n    cluster: front\n    user: front\n\
             current-context: front\n",
            self.addr
        );
        std::fs::write(path, text).unwrap();
    }
}

impl Drop for SlowFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    client: Client,
    slow: Slow,
    delay: Duration,
    held: Arc<AtomicUsize>,
    request: Request<Incoming>,
) -> Result<Response<kube::client::Body>, std::convert::Infallible> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    if slow(&parts.method, &parts.uri) {
        held.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(delay).await;
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut upstream = Request::builder().method(parts.method).uri(path);
    for (name, value) in &parts.headers {
        if name != header::HOST {
            upstream = upstream.header(name, value);
        }
    }
    let upstream = upstream
        .body(kube::client::Body::from(body))
        .expect("a request made of a valid one");
    Ok(match client.send(upstream).await {
        Ok(response) => response,
        Err(e) => Response::builder()
            .status(502)
            .body(kube::client::Body::from(e.to_string().into_bytes()))
            .expect("a valid response"),
    })
}
