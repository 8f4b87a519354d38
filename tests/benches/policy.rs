//! `validate` of the policy: through waPC (the built `policy.wasm` in wasmtime, as
//! policy-server runs it) with a reused instance and with a fresh instance per call, against
//! the same decision natively and against the floor (parsing the request JSON once).
//!
//! Targets (issue 2, section 9): the non-jump pod through waPC (reused instance) within 3x of
//! natively parsing its request JSON; jump-pod validation through waPC within 3x of the same
//! core call natively. `cargo bench -p jumppod-e2e --bench policy` (about a minute).

#[path = "../tests/policy_support/mod.rs"]
mod policy_support;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use jumppod::admission::{self, Outcome, Request};
use jumppod_host::policy::ValidationResponse;
use policy_support::{policy, request};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::hint::black_box;
use std::time::Duration;

const CASES: [(&str, &str); 4] = [
    ("ordinary_10kb_pod", "ordinary_pod_create.json"),
    ("conforming_jump_pod", "conforming_jump_pod_create.json"),
    ("legacy_pod_mutated", "legacy_bare_pod_create.json"),
    ("undersized_rejected", "undersized_jump_pod_create.json"),
];

fn payload(fixture: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"request": request(fixture), "settings": {}})).unwrap()
}

/// The payload as the guest reads it (policy/src/lib.rs): the object stays raw.
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow)]
    request: Option<AdmissionRequest<'a>>,
    #[serde(borrow)]
    settings: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionRequest<'a> {
    #[serde(borrow)]
    kind: Option<Gvk<'a>>,
    #[serde(borrow)]
    operation: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
    #[serde(borrow)]
    old_object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Gvk<'a> {
    #[serde(borrow, default)]
    group: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
}

/// The guest's `validate` natively, minus the waPC log call (natively the SDK's logger
/// prints to stdout, which would measure the terminal): read the payload, the core's
/// verdict, the answer written as JSON.
fn native_validate(payload: &[u8]) -> Vec<u8> {
    let payload: Payload = serde_json::from_slice(payload).unwrap();
    let request = payload.request.unwrap();
    let kind = request.kind.as_ref();
    let outcome = admission::review(
        &Request {
            group: kind.map_or("", |k| &k.group),
            kind: kind.map_or("", |k| &k.kind),
            operation: request.operation.as_deref().unwrap_or_default(),
            name: request.name.as_deref(),
            object: request.object,
            old_object: request.old_object,
        },
        payload.settings,
    );
    let answer = match outcome {
        Outcome::Accept { warnings } => json!({"accepted": true, "warnings": warnings}),
        Outcome::Mutate { object, warnings } => {
            json!({"accepted": true, "mutated_object": object, "warnings": warnings})
        }
        Outcome::Reject { message, code } => {
            json!({"accepted": false, "message": message, "code": code})
        }
    };
    serde_json::to_vec(&answer).unwrap()
}

fn bench(c: &mut Criterion) {
    let policy = policy();
    let reused = policy.instance().unwrap();
    for (name, fixture) in CASES {
        let payload = payload(fixture);
        // The four decisions are what they should be, or the numbers mean nothing.
        let answer: ValidationResponse =
            serde_json::from_slice(&reused.call("validate", &payload).unwrap()).unwrap();
        let native: ValidationResponse =
            serde_json::from_slice(&native_validate(&payload)).unwrap();
        assert_eq!(answer.accepted, native.accepted, "{name}");
        assert_eq!(answer.mutated_object, native.mutated_object, "{name}");
        let expected_accepted = name != "undersized_rejected";
        assert_eq!(answer.accepted, expected_accepted, "{name}: {answer:?}");
        assert_eq!(
            answer.mutated_object.is_some(),
            name == "legacy_pod_mutated",
            "{name}"
        );

        let mut group = c.benchmark_group(name);
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .throughput(Throughput::Bytes(payload.len() as u64));
        group.bench_function(BenchmarkId::new("wapc", "reused_instance"), |b| {
            b.iter(|| reused.call("validate", black_box(&payload)).unwrap())
        });
        group.bench_function(BenchmarkId::new("wapc", "fresh_instance"), |b| {
            b.iter(|| {
                policy
                    .instance()
                    .unwrap()
                    .call("validate", black_box(&payload))
                    .unwrap()
            })
        });
        group.bench_function(BenchmarkId::new("native", "core"), |b| {
            b.iter(|| native_validate(black_box(&payload)))
        });
        if expected_accepted && name != "legacy_pod_mutated" {
            // The exported function itself (it logs only on mutation or rejection).
            group.bench_function(BenchmarkId::new("native", "evaluate"), |b| {
                b.iter(|| jumppod_policy::evaluate(black_box(&payload)))
            });
        }
        group.bench_function(BenchmarkId::new("floor", "serde_json_value"), |b| {
            b.iter(|| serde_json::from_slice::<Value>(black_box(&payload)).unwrap())
        });
        group.finish();
    }
    let mut group = c.benchmark_group("instance");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(2));
    group.bench_function("create", |b| b.iter(|| policy.instance().unwrap()));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
