//! The module compiled as `eval`, `--policy` and `webhook` compile it ([`Compilation::Lean`])
//! answers every fixture of the policy exactly as when compiled as policy-server compiles it:
//! a compilation that saves memory must not change a verdict, nor trap where policy-server's
//! code does not (cranelift's single-pass allocator did, on a ReplicaSet: its larger frames
//! exhausted the Wasm stack).

use jumppod_review::Policy;
use jumppod_wasm::{Instances, WasmPolicy};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn module() -> PathBuf {
    std::env::var_os("JUMPPOD_POLICY_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy.wasm"))
}

/// Every JSON fixture under policy/test_data (the hostile ones included), as a request.
fn fixtures() -> Vec<(PathBuf, Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy/test_data");
    let mut found = Vec::new();
    for dir in [root.clone(), root.join("hostile")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let value: Value =
                    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
                let request = value.get("request").cloned().unwrap_or(value);
                found.push((path, request));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// The lean compilation, and its instances taken from a pool of one slot (each fixture on the
/// memory the one before it used, put back), answer every fixture as policy-server's
/// compilation on fresh mappings does.
#[rstest::rstest]
#[case::on_fresh_mappings(Instances::OnDemand)]
#[case::from_a_pool_of_one_slot(Instances::Pooled { slots: 1 })]
fn the_lean_compilation_answers_every_fixture_as_policy_servers_does(#[case] instances: Instances) {
    let module = module();
    let policy_server = WasmPolicy::from_file(&module).expect("compiled as policy-server does");
    let lean = WasmPolicy::from_file_cached(&module, None, instances).expect("compiled lean");
    let fixtures = fixtures();
    assert!(fixtures.len() > 30, "{} fixtures", fixtures.len());
    for (path, request) in fixtures {
        let expected = policy_server.validate(&request, &json!({}));
        let got = lean.validate(&request, &json!({}));
        match (&expected, &got) {
            (Ok(expected), Ok(got)) => assert_eq!(
                serde_json::to_value(got).unwrap(),
                serde_json::to_value(expected).unwrap(),
                "{}",
                path.display()
            ),
            _ => panic!(
                "{}: policy-server's compilation {:?}, the lean one {:?}",
                path.display(),
                expected
                    .as_ref()
                    .map(|_| "answered")
                    .map_err(|e| e.to_string()),
                got.as_ref().map(|_| "answered").map_err(|e| e.to_string())
            ),
        }
    }
}

/// The largest function body of a module, in bytes of Wasm, and its index.
fn largest_function(wasm: &[u8]) -> (usize, usize) {
    fn leb(bytes: &[u8], at: &mut usize) -> usize {
        let (mut value, mut shift) = (0, 0);
        loop {
            let byte = bytes[*at];
            *at += 1;
            value |= usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 {
                return value;
            }
        }
    }
    let mut at = 8; // the magic number and the version
    while at < wasm.len() {
        let id = wasm[at];
        at += 1;
        let size = leb(wasm, &mut at);
        let end = at + size;
        if id == 10 {
            // The code section: a count, then each body behind its size.
            let mut largest = (0, 0);
            for index in 0..leb(wasm, &mut at) {
                let body = leb(wasm, &mut at);
                largest = largest.max((body, index));
                at += body;
            }
            return largest;
        }
        at = end;
    }
    panic!("the module has no code section");
}

/// Cranelift's backtracking register allocator (policy-server's, and the lean compilation's)
/// needs memory that grows faster than a function's size: the module's functions of 110 KB and
/// 68 KB (the typed parse of a `Volume` and of a `PodSpec`, inlined whole) made compiling it
/// peak at 476 MiB of RSS, 61 MiB without them. The policy parses each struct in a function of
/// its own (`jumppod`'s `outlined.rs`); this keeps a new monster from coming back unnoticed.
#[test]
fn no_function_of_the_module_is_large_enough_to_make_compiling_it_costly() {
    const LIMIT: usize = 32 * 1024;
    let wasm = std::fs::read(module()).expect("the policy module (`make policy`)");
    let (size, index) = largest_function(&wasm);
    assert!(
        size <= LIMIT,
        "function {index} of the module's code section has {size} bytes of Wasm (at most {LIMIT})"
    );
}
