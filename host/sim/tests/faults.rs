//! Fidelity tests of injected faults and the request log, seen through the real kube client.

use jumppod_sim::testing::*;
use jumppod_sim::{Fault, Sim, SimConfig};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::time::Duration;

fn pod(name: &str) -> Pod {
    typed(
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
}

// 429 is answered as API Priority and Fairness / max-inflight answer it: plain text
// `Too many requests, please try again later.` with a `Retry-After` header in seconds and no
// Status object; the request does not happen.
#[tokio::test(flavor = "multi_thread")]
async fn too_many_requests_is_plain_text_with_retry_after() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    sim.inject(Fault::too_many_requests("POST", "/pods", 7, 1));
    let body = serde_json::to_value(pod("a")).unwrap();
    let (code, headers, text) = raw_text(
        &sim,
        "admin",
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        Some(&body),
    );
    assert_eq!(code, 429);
    assert_eq!(text, "Too many requests, please try again later.\n");
    let header = |name: &str| {
        headers
            .iter()
            .find_map(|h| {
                let (k, v) = h.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    assert_eq!(header("retry-after"), "7");
    assert_eq!(header("content-type"), "text/plain; charset=utf-8");
    assert!(sim.get("pods", Some("default"), "a").is_none());
    // `Fault::status` with 429 answers the same way, with `Retry-After: 1`.
    sim.inject(Fault::status("GET", "/pods", 429, 1));
    let (code, headers, text) = raw_text(
        &sim,
        "admin",
        "GET",
        "/api/v1/namespaces/default/pods",
        "application/json",
        None,
    );
    assert_eq!(code, 429);
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_err());
    assert!(
        headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("retry-after: 1"))
    );
}

// A client without retries sees the 429 code; kube's default retry policy tries again and succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn too_many_requests_is_retried_by_default_client() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    sim.inject(Fault::status("GET", "/pods", 429, 1));
    let plain: Api<Pod> = Api::namespaced(raw_client(&sim, None).await, "default");
    match plain.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 429, "{s:?}"),
        other => panic!("expected the 429 as an API error, got {other:?}"),
    }
    sim.inject(Fault::status("GET", "/pods", 429, 1));
    sim.clear_requests();
    let retrying: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    within("the retried list", retrying.list(&ListParams::default()))
        .await
        .unwrap();
    assert_eq!(
        sim.count(|r| r.path.ends_with("/pods") && r.status == 429),
        1
    );
    assert_eq!(
        sim.count(|r| r.path.ends_with("/pods") && r.status == 200),
        1
    );
}

// 500 and 503 are Status errors with InternalError / ServiceUnavailable; an injected failure means the request did not happen.
#[tokio::test(flavor = "multi_thread")]
async fn server_errors_before_processing() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(raw_client(&sim, None).await, "default");
    sim.inject(Fault::status("POST", "/pods", 500, 1));
    let s = status(pods.create(&PostParams::default(), &pod("a")).await);
    assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
    sim.inject(Fault::status("POST", "/pods", 503, 1));
    let s = status(pods.create(&PostParams::default(), &pod("a")).await);
    assert_eq!((s.code, s.reason.as_str()), (503, "ServiceUnavailable"));
    assert!(sim.get("pods", Some("default"), "a").is_none());
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
}

// A 503 answered twice is retried by kube's default client until it gets through.
#[tokio::test(flavor = "multi_thread")]
async fn unavailable_is_retried_by_default_client() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    sim.inject(Fault::status("", "/namespaces/default/pods", 503, 2));
    within(
        "the retried create",
        pods.create(&PostParams::default(), &pod("a")),
    )
    .await
    .unwrap();
    assert_eq!(sim.count(|r| r.method == "POST" && r.status == 503), 2);
    assert_eq!(sim.count(|r| r.method == "POST" && r.status == 201), 1);
}

// "After" faults apply the request and still fail: a retried create then meets AlreadyExists.
#[tokio::test(flavor = "multi_thread")]
async fn failure_after_applying() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(raw_client(&sim, None).await, "default");
    sim.inject(Fault::status_after("POST", "/pods", 500, 1));
    assert_eq!(
        status(pods.create(&PostParams::default(), &pod("a")).await).code,
        500
    );
    assert!(sim.get("pods", Some("default"), "a").is_some());
    assert_eq!(
        status(pods.create(&PostParams::default(), &pod("a")).await).reason,
        "AlreadyExists"
    );
}

// Injected 403 and 409 carry reasons Forbidden and Conflict.
#[tokio::test(flavor = "multi_thread")]
async fn forbidden_and_conflict() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(raw_client(&sim, None).await, "default");
    sim.inject(Fault::status("GET", "", 403, 1));
    assert_eq!(status(pods.get("x").await).reason, "Forbidden");
    sim.inject(Fault::status("GET", "", 409, 1));
    assert_eq!(status(pods.get("x").await).reason, "Conflict");
    assert_eq!(status(pods.get("x").await).reason, "NotFound");
}

/// The client's read timeout in the timeout tests.
const READ_TIMEOUT: Duration = Duration::from_millis(100);
/// How long the stall lasts: longer than any test, so only the client's timer can end the call.
const STALL: Duration = Duration::from_secs(3600);

// A stall longer than the client's read timeout makes the call fail with a timeout while the
// simulator still holds the request; a hang fails the same way. The request log, which records
// a request once it is answered or dropped, shows neither; the next list, with both faults used
// up, is the only request answered.
#[tokio::test(flavor = "multi_thread")]
async fn stall_and_hang_hit_the_read_timeout() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(raw_client(&sim, Some(READ_TIMEOUT)).await, "default");
    sim.clear_requests();
    sim.inject(Fault::stall("GET", "/pods", STALL, 1));
    let r = within(
        "the stalled list to fail",
        pods.list(&ListParams::default()),
    )
    .await;
    match &r {
        Err(e) => assert!(is_timeout(e), "expected a read timeout, got {e:?}"),
        Ok(_) => panic!("a stalled list answered"),
    }
    sim.inject(Fault::hang("GET", "/pods", 1));
    let r = within("the hung list to fail", pods.list(&ListParams::default())).await;
    match &r {
        Err(e) => assert!(is_timeout(e), "expected a read timeout, got {e:?}"),
        Ok(_) => panic!("a hung list answered"),
    }
    let log = sim.requests();
    assert!(
        log.is_empty(),
        "the stalled or the hung list was answered or dropped: {log:?}"
    );
    // Both faults were taken, so both requests reached the simulator: a fault still queued
    // would hold this list too.
    within("a list after the faults", pods.list(&ListParams::default()))
        .await
        .unwrap();
    let log = sim.requests();
    assert_eq!(
        log.iter()
            .map(|r| (r.method.as_str(), r.path.as_str(), r.status))
            .collect::<Vec<_>>(),
        [("GET", "/api/v1/namespaces/default/pods", 200)]
    );
}

// A dropped connection is a transport error (the connection closed before a response), not an
// API error and not a timeout; the request did not happen, and the log records it with no status.
#[tokio::test(flavor = "multi_thread")]
async fn dropped_connection() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(raw_client(&sim, None).await, "default");
    sim.inject(Fault::drop_connection("POST", "/pods", 1));
    let r = within(
        "the dropped create to fail",
        pods.create(&PostParams::default(), &pod("a")),
    )
    .await;
    match &r {
        Err(e) => assert!(
            is_connection_closed(e) && !is_timeout(e),
            "expected a closed connection, got {e:?}"
        ),
        Ok(_) => panic!("a dropped create answered"),
    }
    assert!(sim.get("pods", Some("default"), "a").is_none());
    assert_eq!(sim.count(|r| r.method == "POST" && r.status == 0), 1);
}

// The request log records method, path, query, status and user of every request.
#[tokio::test(flavor = "multi_thread")]
async fn request_log() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&sim).await, "default");
    sim.clear_requests();
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    pods.list(&ListParams::default().labels("app=x"))
        .await
        .unwrap();
    let _ = pods.get("nope").await;
    let log = sim.requests();
    assert_eq!(log.len(), 3);
    assert_eq!(
        (log[0].method.as_str(), log[0].path.as_str(), log[0].status),
        ("POST", "/api/v1/namespaces/default/pods", 201)
    );
    assert!(log[1].query.contains("labelSelector=app%3Dx"));
    assert_eq!(log[2].status, 404);
    assert!(log.iter().all(|r| r.user == "admin"));
    sim.clear_requests();
    assert!(sim.requests().is_empty());
}
