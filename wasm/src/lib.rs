//! Runs a policy module the way Kubewarden's policy-server does: wasmtime through the waPC
//! runtime, the module compiled once, a fresh instance per evaluation, epoch interruption
//! bounding every call (one tick a second, a 2-tick deadline by default), and the
//! `kubewarden/tracing/log` capability answered.
//!
//! Compiling the 1 MiB module with cranelift costs seconds and, as policy-server compiles it,
//! hundreds of MiB, so only the places where the exact module matters load it: `jumppod eval`,
//! `--policy FILE` and `webhook` (compiled [`Compilation::Lean`], through a cache of compiled
//! modules for `eval` and `--policy`), the tests that prove the module and the native build
//! agree.

mod cache;

pub use cache::{ModuleCache, Origin};
use jumppod_review::{Error, Policy, SettingsResponse, ValidationResponse};
use serde_json::Value;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;
use wapc::WapcHost;
use wasmtime_provider::wasmtime;
use wasmtime_provider::{EpochDeadlines, WasmtimeEngineProviderBuilder, WasmtimeEngineProviderPre};

/// policy-server's default: each evaluation may run for 2 epoch ticks of one second.
pub const DEFAULT_DEADLINE_TICKS: u64 = 2;

/// Why a module cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read the policy module {path} (`make policy` builds it)")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}")]
    Runtime {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn runtime(what: &'static str) -> impl FnOnce(wasmtime::Error) -> LoadError {
    move |e| LoadError::Runtime {
        what,
        source: e.into(),
    }
}

/// A compiled policy module.
pub struct WasmPolicy {
    pre: WasmtimeEngineProviderPre,
    origin: Origin,
    deadlines: EpochDeadlines,
    stop_ticker: Arc<AtomicBool>,
    /// The pool's free slots, when instances come from one.
    slots: Option<Arc<Slots>>,
}

/// Where each instance's memory comes from. Either way every evaluation gets an instance of
/// its own that starts from the module's initial memory, as policy-server runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instances {
    /// Mapped for the instance and unmapped after it: wasmtime's default, policy-server's.
    OnDemand,
    /// A pool of `slots` memories kept mapped, each put back to the module's initial memory
    /// when its instance is dropped (the pages it wrote are copied back from the module's
    /// image): what `jumppod webhook` runs. Mapping a fresh memory, the copy-on-write faults of
    /// its first writes and unmapping it each flush the TLB of every core the process runs on
    /// (perf: `smp_call_function_many_cond`); on 2 cores the pool took the webhook from 5,600 to
    /// 10,500 reviews a second of a 12 KB pod. At most `slots` instances live at a time;
    /// [`WasmPolicy::instance`] waits for a slot.
    Pooled { slots: u32 },
}

/// The pages of a pooled memory kept resident and put back by copying: what an ordinary
/// review dirties; past this, pages are given back to the system.
const POOLED_KEEP_RESIDENT: usize = 4 << 20;

/// The slots of a pool not taken by an instance.
struct Slots {
    free: Mutex<u32>,
    freed: Condvar,
}

/// A pool slot held by an instance until it is dropped.
struct Slot(Arc<Slots>);

impl Slots {
    fn take(self: &Arc<Slots>) -> Slot {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Slot(self.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.0.freed.notify_one();
    }
}

impl Drop for WasmPolicy {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

impl WasmPolicy {
    /// Reads and compiles a module file with policy-server's defaults.
    pub fn from_file(path: &Path) -> Result<WasmPolicy, LoadError> {
        let bytes = read(path)?;
        WasmPolicy::build(
            &bytes,
            DEFAULT_DEADLINE_TICKS,
            Compilation::PolicyServer,
            None,
            Instances::OnDemand,
        )
    }

    /// Reads a module file and compiles it [`Compilation::Lean`], or loads it compiled from
    /// `cache`: what `jumppod eval`, `--policy` and `webhook` (pooled) run.
    pub fn from_file_cached(
        path: &Path,
        cache: Option<&ModuleCache>,
        instances: Instances,
    ) -> Result<WasmPolicy, LoadError> {
        let bytes = read(path)?;
        WasmPolicy::build(
            &bytes,
            DEFAULT_DEADLINE_TICKS,
            Compilation::Lean,
            cache,
            instances,
        )
    }

    /// Compiles a module with policy-server's defaults.
    pub fn load(wasm: &[u8]) -> Result<WasmPolicy, LoadError> {
        WasmPolicy::with_deadline(wasm, DEFAULT_DEADLINE_TICKS)
    }

    /// Compiles a module; every call may run for `ticks` seconds.
    pub fn with_deadline(wasm: &[u8], ticks: u64) -> Result<WasmPolicy, LoadError> {
        WasmPolicy::build(
            wasm,
            ticks,
            Compilation::PolicyServer,
            None,
            Instances::OnDemand,
        )
    }

    /// Where the module came from: compiled, or the cache.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    fn build(
        wasm: &[u8],
        ticks: u64,
        compilation: Compilation,
        cache: Option<&ModuleCache>,
        instances: Instances,
    ) -> Result<WasmPolicy, LoadError> {
        // A pool of no slots would make every instance wait forever.
        let instances = match instances {
            Instances::Pooled { slots } => Instances::Pooled {
                slots: slots.max(1),
            },
            on_demand => on_demand,
        };
        let mut serving = config(compilation);
        if let Instances::Pooled { slots } = instances {
            serving.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool(slots)));
        }
        let engine = wasmtime::Engine::new(&serving).map_err(runtime("cannot start wasmtime"))?;
        let precompiled = || precompile(wasm, compilation);
        let (module, origin) = match cache {
            Some(cache) => cache.module(&engine, wasm, precompiled),
            // SAFETY: compiled just now by an engine of the same configuration.
            None => precompiled()
                .and_then(|serialized| unsafe {
                    wasmtime::Module::deserialize(&engine, &serialized)
                })
                .map(|module| (module, Origin::Compiled)),
        }
        .map_err(runtime("not a loadable WebAssembly module"))?;
        // The compiler's engine is gone: what it freed goes back to the system.
        release_freed_memory();
        let pre = WasmtimeEngineProviderBuilder::new()
            .engine(engine.clone())
            .module(module)
            .build_pre()
            .map_err(|e| LoadError::Runtime {
                what: "cannot prepare the module",
                source: e.into(),
            })?;
        let stop_ticker = Arc::new(AtomicBool::new(false));
        let stop = stop_ticker.clone();
        let weak = engine.weak();
        drop(engine);
        // The epoch clock: one tick a second while the module is alive, as policy-server runs.
        std::thread::Builder::new()
            .name("jumppod-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_secs(1));
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| LoadError::Runtime {
                what: "cannot start the epoch ticker",
                source: e.into(),
            })?;
        Ok(WasmPolicy {
            pre,
            origin,
            deadlines: EpochDeadlines {
                wapc_init: ticks,
                wapc_func: ticks,
            },
            stop_ticker,
            slots: match instances {
                Instances::OnDemand => None,
                Instances::Pooled { slots } => Some(Arc::new(Slots {
                    free: Mutex::new(slots),
                    freed: Condvar::new(),
                })),
            },
        })
    }

    /// A fresh instance, as policy-server makes for every request.
    pub fn instance(&self) -> Result<Instance, Error> {
        let slot = self.slots.as_ref().map(Slots::take);
        let module_error = |source: Box<dyn std::error::Error + Send + Sync>| Error::Module {
            operation: "wapc_init",
            source,
        };
        let provider = self
            .pre
            .rehydrate(Some(self.deadlines))
            .map_err(|e| module_error(e.into()))?;
        let wapc = WapcHost::new(Box::new(provider), Some(Box::new(capabilities)))
            .map_err(|e| module_error(e.into()))?;
        Ok(Instance { wapc, _slot: slot })
    }
}

/// How a module is compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compilation {
    /// As policy-server compiles it: wasmtime's defaults (cranelift's backtracking register
    /// allocator, functions compiled in parallel).
    PolicyServer,
    /// Less memory: one function at a time (the webhook peaked at 624 MiB compiling in
    /// parallel, 494 MiB this way; 73 MiB since the policy parses each struct in a function of
    /// its own, the largest 27 KB: `wasm/tests/compilations.rs` keeps them small). The code is
    /// policy-server's: cranelift's single-pass register allocator would have halved the peak
    /// again, but its larger stack frames exhausted the 512 KiB Wasm stack on a ReplicaSet's
    /// review (`call stack exhausted`), which policy-server's code judges; the module must run
    /// as Kubewarden runs it.
    Lean,
}

/// The engine's configuration: epoch interruption on, as policy-server runs it.
fn config(compilation: Compilation) -> wasmtime::Config {
    let mut config = wasmtime::Config::default();
    config.epoch_interruption(true);
    if compilation == Compilation::Lean {
        config.parallel_compilation(false);
    }
    config
}

/// The pooling allocator for `slots` instances of one module at a time, each with one memory
/// and one table, reset by copying back the pages the kernel reports dirty (PAGEMAP_SCAN,
/// Linux 6.7 and later; without it wasmtime resets the first `keep_resident` bytes whether
/// written or not).
fn pool(slots: u32) -> wasmtime::PoolingAllocationConfig {
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_core_instances(slots)
        .total_memories(slots)
        .total_tables(slots)
        .max_unused_warm_slots(slots)
        .linear_memory_keep_resident(POOLED_KEEP_RESIDENT)
        .table_keep_resident(64 << 10)
        .pagemap_scan(wasmtime::Enabled::Auto);
    pool
}

/// The module compiled and serialized, by an engine of its own, dropped once it is done: an
/// engine keeps its compiler's per-thread contexts (buffers the size of the largest function
/// it compiled) for its next compilation, which the serving engine never makes.
fn precompile(wasm: &[u8], compilation: Compilation) -> wasmtime::Result<Vec<u8>> {
    wasmtime::Engine::new(&config(compilation))?.precompile_module(wasm)
}

/// Gives the memory compiling freed back to the system: glibc keeps freed memory in the
/// arenas of the threads that freed it (the compiling threads': 90 MiB after the module is
/// compiled) until told.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: glibc's malloc_trim only returns free memory of its arenas to the system.
        unsafe { malloc_trim(0) };
    }
}

fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.display().to_string(),
        source,
    })
}

impl Policy for WasmPolicy {
    fn validate_payload(&self, payload: &[u8]) -> Result<ValidationResponse, Error> {
        self.instance()?.validate_payload(payload)
    }

    fn validate_settings(&self, settings: &Value) -> Result<SettingsResponse, Error> {
        self.instance()?.validate_settings(settings)
    }
}

/// One instantiated module; reusable for several calls (policy-server does not reuse them;
/// benchmarks do, to tell the instance's cost from the policy's).
pub struct Instance {
    // Dropped before the slot: wasmtime returns the memory to the pool when the store goes.
    wapc: WapcHost,
    _slot: Option<Slot>,
}

impl Instance {
    /// Calls a waPC function with raw bytes.
    pub fn call(&self, operation: &'static str, payload: &[u8]) -> Result<Vec<u8>, Error> {
        self.wapc
            .call(operation, payload)
            .map_err(|e| Error::Module {
                operation,
                source: e.into(),
            })
    }

    pub fn validate_settings(&self, settings: &Value) -> Result<SettingsResponse, Error> {
        let answer = self.call("validate_settings", settings.to_string().as_bytes())?;
        serde_json::from_slice(&answer).map_err(|source| Error::Answer {
            operation: "validate_settings",
            source,
        })
    }

    pub fn validate(&self, request: &Value, settings: &Value) -> Result<ValidationResponse, Error> {
        self.validate_payload(&jumppod_review::payload(request, settings))
    }

    pub fn validate_payload(&self, payload: &[u8]) -> Result<ValidationResponse, Error> {
        let answer = self.call("validate", payload)?;
        serde_json::from_slice(&answer).map_err(|source| Error::Answer {
            operation: "validate",
            source,
        })
    }
}

/// The runtime capabilities a policy may call. This policy only logs.
fn capabilities(
    _id: u64,
    binding: &str,
    namespace: &str,
    operation: &str,
    payload: &[u8],
) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
    match (binding, namespace, operation) {
        ("kubewarden", "tracing", "log") => {
            tracing::debug!(target: "jumppod::policy", line = %String::from_utf8_lossy(payload), "policy log");
            Ok(Vec::new())
        }
        _ => {
            Err(format!("the capability {binding}/{namespace}/{operation} is not provided").into())
        }
    }
}
