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
use jumppod_review::ValidationResponse;
use policy_support::{policy, request};
use serde_json::{Value, json};
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

fn bench(c: &mut Criterion) {
    let policy = policy();
    let reused = policy.instance().unwrap();
    for (name, fixture) in CASES {
        let payload = payload(fixture);
        // The four decisions are what they should be, or the numbers mean nothing.
        let answer: ValidationResponse =
            serde_json::from_slice(&reused.call("validate", &payload).unwrap()).unwrap();
        let native: ValidationResponse =
            serde_json::from_slice(&jumppod_policy::evaluate(&payload)).unwrap();
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
        // The guest's own `validate`, compiled natively: the same code minus waPC.
        group.bench_function(BenchmarkId::new("native", "evaluate"), |b| {
            b.iter(|| jumppod_policy::evaluate(black_box(&payload)))
        });
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
