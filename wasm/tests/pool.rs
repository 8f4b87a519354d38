//! Instances from a pool ([`Instances::Pooled`]) start from the module's initial memory, as a
//! fresh mapping does: a slot another instance wrote is put back before it is used again, so
//! pooling keeps policy-server's one-instance-per-request isolation.

use jumppod_wasm::{Instances, WasmPolicy};
use std::path::PathBuf;

/// A waPC guest whose every call answers the byte in its memory cell, then writes the next
/// byte there: the initial memory says "a"; a memory that kept a write says "b" or later.
const COUNTER: &str = r#"
(module
  (import "wapc" "__guest_response" (func $respond (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "a")
  (func (export "__guest_call") (param i32 i32) (result i32)
    (call $respond (i32.const 16) (i32.const 1))
    (i32.store8 (i32.const 16) (i32.add (i32.load8_u (i32.const 16)) (i32.const 1)))
    (i32.const 1)))
"#;

/// The counter from a file of the test's own (tests run at once).
fn counter(test: &str, instances: Instances) -> WasmPolicy {
    let dir = std::env::temp_dir().join(format!("jumppod-pool-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(format!("{test}.wat"));
    std::fs::write(&path, COUNTER).unwrap();
    WasmPolicy::from_file_cached(&path, None, instances).expect("the counter compiles")
}

fn answer(instance: &jumppod_wasm::Instance) -> String {
    String::from_utf8(instance.call("count", b"").expect("the counter answers")).unwrap()
}

/// Each instance sees its own write ("b" on its second call: the test can fail), and the next
/// instance on the same slot does not.
#[test]
fn a_pooled_slot_is_put_back_to_the_initial_memory_for_the_next_instance() {
    let policy = counter("put_back", Instances::Pooled { slots: 1 });
    for _ in 0..5 {
        let instance = policy.instance().unwrap();
        assert_eq!(answer(&instance), "a");
        assert_eq!(answer(&instance), "b");
    }
}

/// More evaluations at a time than slots: each waits for a slot rather than failing (wasmtime
/// refuses an instance past the pool's size).
#[test]
fn more_instances_at_a_time_than_slots_wait_for_one() {
    let policy = counter("waiting", Instances::Pooled { slots: 2 });
    std::thread::scope(|threads| {
        for _ in 0..6 {
            threads.spawn(|| {
                for _ in 0..50 {
                    let instance = policy.instance().expect("an instance, in turn");
                    assert_eq!(answer(&instance), "a");
                }
            });
        }
    });
}
