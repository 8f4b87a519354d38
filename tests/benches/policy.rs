//! `validate` of the policy, reported as the policy's own work above the runtime's floor.
//!
//! The floor is the accept-all guest (tests/fixtures/accept-all): a waPC module that answers
//! `{"accepted":true}` without reading its payload, run by the same host in the same criterion
//! run. `own_work` times the policy and the accept-all module over the same iterations,
//! alternating, and reports the difference. Two columns:
//! * `fresh`: what policy-server pays per request: read the AdmissionReview JSON, build the
//!   `validate` payload, a fresh instance, the call, read the answer.
//! * `reused`: the bare waPC call on a kept instance with a prepared payload.
//!
//! Natively: the guest's `evaluate` compiled for the host, beside a plain serde_json parse of
//! the same payload into a borrowed structure holding just what the rules read.
//!
//! `make bench`, or after `make policy accept-all`:
//! `cargo bench -p jumppod-e2e --bench policy -- --measurement-time 3 --warm-up-time 1`.

#[path = "../tests/policy_support/mod.rs"]
mod policy_support;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use jumppod_review::{Policy as _, ValidationResponse};
use jumppod_wasm::{Instance, WasmPolicy};
use policy_support::{policy, request, workspace};
use serde::Deserialize;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What the policy must answer, or the numbers mean nothing.
#[derive(Clone, Copy, PartialEq)]
enum Verdict {
    Accept,
    Mutate,
    Reject,
}

/// An ordinary workload pod of about 0.8 KB, as the API server hands it to admission.
fn ordinary_pod() -> Value {
    json!({
        "uid": "4f1c8a2e-7b3d-4e9a-9c6f-2d8e1a5b7c30",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": "web-7d4b9c8f6-x2k9p", "namespace": "shop", "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        "object": {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-7d4b9c8f6-x2k9p", "generateName": "web-7d4b9c8f6-",
                         "namespace": "shop",
                         "labels": {"app.kubernetes.io/name": "web", "pod-template-hash": "7d4b9c8f6"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                             "name": "web-7d4b9c8f6", "uid": "0c2e4a6b-8d1f-4e3a-b5c7-9e1d3f5a7b90",
                             "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                     "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                                     "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                                   "limits": {"memory": "256Mi"}}}],
                     "restartPolicy": "Always", "serviceAccountName": "web"},
            "status": {"phase": "Pending", "qosClass": "Burstable"}
        }
    })
}

/// The same pod carrying 400 annotations (about 85 KB): tooling that records its state there.
fn annotated_pod() -> Value {
    let mut request = ordinary_pod();
    let annotations: serde_json::Map<String, Value> = (0..400)
        .map(|i| {
            (
                format!("tooling.example.com/record-{i:04}"),
                json!(format!("{i:04}-{}", "state-".repeat(30))),
            )
        })
        .collect();
    request["object"]["metadata"]["annotations"] = Value::Object(annotations);
    request
}

/// A jump pod breaking three rules: cpu under the minimum, memory request != limit, and an
/// ephemeral-storage limit.
fn several_violations() -> Value {
    let mut request = request("conforming_jump_pod_create.json");
    request["object"]["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "50m", "memory": "512Mi", "ephemeral-storage": "64Mi"},
        "limits": {"cpu": "50m", "memory": "1Gi", "ephemeral-storage": "1Gi"}});
    request
}

/// Each case: its name, the request, the settings and the verdict. Default settings add the
/// kit to a jump pod that lacks it, which the typed parse plans; with the kit off a jump pod is
/// judged in the one-pass read, as before the kit.
fn cases() -> Vec<(&'static str, Value, Value, Verdict)> {
    let no_kit = json!({"kit": false});
    vec![
        (
            "ordinary_pod_0.8kb",
            ordinary_pod(),
            json!({}),
            Verdict::Accept,
        ),
        (
            "ordinary_pod_managed_fields_12kb",
            request("ordinary_pod_create.json"),
            json!({}),
            Verdict::Accept,
        ),
        (
            "ordinary_pod_400_annotations_85kb",
            annotated_pod(),
            json!({}),
            Verdict::Accept,
        ),
        (
            "conforming_jump_pod_with_the_kit",
            request("dstack_0_22_5_bare_jump_pod_with_kit_create.json"),
            json!({}),
            Verdict::Accept,
        ),
        (
            "conforming_jump_pod_kit_off",
            request("conforming_jump_pod_create.json"),
            no_kit.clone(),
            Verdict::Accept,
        ),
        (
            "dstack_pod_mutated_with_the_kit",
            request("dstack_0_22_5_bare_jump_pod_create.json"),
            json!({}),
            Verdict::Mutate,
        ),
        (
            "legacy_pod_mutated_kit_off",
            request("legacy_bare_pod_create.json"),
            no_kit,
            Verdict::Mutate,
        ),
        (
            "undersized_rejected",
            request("undersized_jump_pod_create.json"),
            json!({}),
            Verdict::Reject,
        ),
        (
            "three_violations_rejected",
            several_violations(),
            json!({}),
            Verdict::Reject,
        ),
    ]
}

fn accept_all_path() -> PathBuf {
    std::env::var_os("JUMPPOD_ACCEPT_ALL_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/wasm32-wasip1/release/jumppod_accept_all.wasm"))
}

fn accept_all() -> WasmPolicy {
    let path = accept_all_path();
    WasmPolicy::from_file(&path).unwrap_or_else(|e| {
        panic!(
            "{e:#}\nbuild the accept-all guest first: `make accept-all` (or `make bench`), or point \
             JUMPPOD_ACCEPT_ALL_WASM at it"
        )
    })
}

/// Just what the rules read, borrowed from the payload: the reference for the native target.
#[derive(Deserialize)]
struct BorrowedPayload<'a> {
    #[serde(borrow)]
    request: BorrowedRequest<'a>,
}

#[derive(Deserialize)]
struct BorrowedRequest<'a> {
    #[serde(borrow)]
    object: BorrowedPod<'a>,
}

#[derive(Deserialize)]
struct BorrowedPod<'a> {
    #[serde(borrow)]
    metadata: BorrowedMeta<'a>,
    #[serde(borrow)]
    spec: BorrowedSpec<'a>,
}

#[derive(Deserialize)]
struct BorrowedMeta<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    labels: BTreeMap<&'a str, Cow<'a, str>>,
}

#[derive(Deserialize)]
struct BorrowedSpec<'a> {
    #[serde(borrow)]
    containers: Vec<BorrowedContainer<'a>>,
}

#[derive(Deserialize)]
struct BorrowedContainer<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    resources: BTreeMap<&'a str, BTreeMap<&'a str, Cow<'a, str>>>,
}

/// What policy-server does for one request: read the review, build the payload, evaluate it in
/// a fresh instance, read the answer.
fn serve(policy: &WasmPolicy, review: &[u8], settings: &Value) -> ValidationResponse {
    let review: Value = serde_json::from_slice(review).unwrap();
    policy
        .validate(&review["request"], settings)
        .expect("a verdict")
}

/// Times `ours` and `floor` over the same iterations, alternating in batches, and returns
/// the difference: the policy's own work.
fn own_work(iters: u64, mut ours: impl FnMut(), mut floor: impl FnMut()) -> Duration {
    let (mut own, mut base) = (Duration::ZERO, Duration::ZERO);
    let mut left = iters;
    while left > 0 {
        let batch = left.min(8);
        let start = Instant::now();
        for _ in 0..batch {
            ours();
        }
        own += start.elapsed();
        let start = Instant::now();
        for _ in 0..batch {
            floor();
        }
        base += start.elapsed();
        left -= batch;
    }
    // Where the fresh instance's noise hides the difference, a sample counts as 1 ns (criterion
    // refuses a zero).
    own.saturating_sub(base).max(Duration::from_nanos(1))
}

fn check(
    name: &str,
    payload: &[u8],
    review: &[u8],
    ours: &Instance,
    floor: &WasmPolicy,
    expected: Verdict,
) {
    let answer: ValidationResponse =
        serde_json::from_slice(&ours.call("validate", payload).unwrap()).unwrap();
    let native: ValidationResponse =
        serde_json::from_slice(&jumppod_policy::evaluate(payload)).unwrap();
    assert_eq!(
        answer, native,
        "{name}: the Wasm and the native policy disagree"
    );
    let verdict = match (answer.accepted, answer.mutated_object.is_some()) {
        (true, false) => Verdict::Accept,
        (true, true) => Verdict::Mutate,
        (false, _) => Verdict::Reject,
    };
    assert!(verdict == expected, "{name}: unexpected verdict {answer:?}");
    assert!(
        serve(floor, review, &json!({})).accepted,
        "{name}: the accept-all guest"
    );
    // The reference parse reads what the rules read: the same names and resources.
    let reference: BorrowedPayload =
        serde_json::from_slice(payload).expect("the reference parse reads the pod");
    let pod = &reference.request.object;
    let request: Value = serde_json::from_slice(payload).unwrap();
    let object = &request["request"]["object"];
    assert_eq!(
        pod.metadata.name.as_deref(),
        object["metadata"]["name"].as_str()
    );
    assert_eq!(
        pod.metadata.labels.len(),
        object["metadata"]["labels"]
            .as_object()
            .map_or(0, |l| l.len())
    );
    for (container, json) in pod
        .spec
        .containers
        .iter()
        .zip(object["spec"]["containers"].as_array().unwrap())
    {
        assert_eq!(container.name, json["name"].as_str().unwrap());
        assert_eq!(
            container.resources.len(),
            json["resources"].as_object().map_or(0, |r| r.len())
        );
    }
}

fn bench(c: &mut Criterion) {
    let policy = policy();
    let floor = accept_all();
    let ours_reused = policy.instance().unwrap();
    let floor_reused = floor.instance().unwrap();
    for (name, request, settings, expected) in cases() {
        let payload =
            serde_json::to_vec(&json!({"request": request, "settings": settings})).unwrap();
        let review = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview", "request": request}))
        .unwrap();
        check(name, &payload, &review, &ours_reused, &floor, expected);
        let settings = &settings;

        let mut group = c.benchmark_group(name);
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .throughput(Throughput::Bytes(payload.len() as u64));
        group.bench_function(BenchmarkId::new("fresh", "accept_all"), |b| {
            b.iter(|| serve(&floor, black_box(&review), settings))
        });
        group.bench_function(BenchmarkId::new("fresh", "own_work"), |b| {
            b.iter_custom(|iters| {
                own_work(
                    iters,
                    || {
                        black_box(serve(policy, black_box(&review), settings));
                    },
                    || {
                        black_box(serve(&floor, black_box(&review), settings));
                    },
                )
            })
        });
        group.bench_function(BenchmarkId::new("reused", "accept_all"), |b| {
            b.iter(|| floor_reused.call("validate", black_box(&payload)).unwrap())
        });
        group.bench_function(BenchmarkId::new("reused", "own_work"), |b| {
            b.iter_custom(|iters| {
                own_work(
                    iters,
                    || {
                        black_box(ours_reused.call("validate", black_box(&payload)).unwrap());
                    },
                    || {
                        black_box(floor_reused.call("validate", black_box(&payload)).unwrap());
                    },
                )
            })
        });
        // The guest's own `validate`, compiled natively: the same code minus waPC.
        group.bench_function(BenchmarkId::new("native", "evaluate"), |b| {
            b.iter(|| jumppod_policy::evaluate(black_box(&payload)))
        });
        group.bench_function(BenchmarkId::new("native", "serde_json_borrowed"), |b| {
            b.iter(|| serde_json::from_slice::<BorrowedPayload>(black_box(&payload)).unwrap())
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
