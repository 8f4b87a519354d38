//! Runs the jumppod policy Wasm the way Kubewarden's policy-server does: wasmtime through the
//! waPC host, the module precompiled once, a fresh instance per evaluation, epoch
//! interruption bounding every call (one tick a second, a 2-tick deadline by default), and
//! the `kubewarden/tracing/log` host capability answered.

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wapc::WapcHost;
use wasmtime_provider::wasmtime;
use wasmtime_provider::{EpochDeadlines, WasmtimeEngineProviderBuilder, WasmtimeEngineProviderPre};

/// The policy module built into this binary (empty when built without `make policy`).
pub static BUILTIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/policy.wasm"));

/// policy-server's default: each evaluation may run for 2 epoch ticks of one second.
pub const DEFAULT_DEADLINE_TICKS: u64 = 2;

/// The guest's answer to `validate`, as the Kubewarden SDK writes it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationResponse {
    pub accepted: bool,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub code: Option<u16>,
    #[serde(default)]
    pub mutated_object: Option<Value>,
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
    #[serde(default)]
    pub audit_annotations: Option<Value>,
}

/// The guest's answer to `validate_settings`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SettingsResponse {
    pub valid: bool,
    #[serde(default)]
    pub message: Option<String>,
}

/// A loaded, precompiled policy module.
pub struct Policy {
    pre: WasmtimeEngineProviderPre,
    deadlines: EpochDeadlines,
    ticker: Arc<AtomicBool>,
}

impl Drop for Policy {
    fn drop(&mut self) {
        self.ticker.store(true, Ordering::Relaxed);
    }
}

impl Policy {
    /// The module built into the binary.
    pub fn builtin() -> Result<Policy> {
        if BUILTIN.is_empty() {
            bail!(
                "this jumppod binary was built without the policy Wasm: pass --policy PATH \
                 (build it with `make policy`) or rebuild after `make policy`"
            );
        }
        Policy::load(BUILTIN)
    }

    /// Loads a module from a file.
    pub fn from_file(path: &std::path::Path) -> Result<Policy> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read the policy module {}", path.display()))?;
        Policy::load(&bytes)
            .with_context(|| format!("cannot load the policy module {}", path.display()))
    }

    /// Compiles a module with policy-server's defaults.
    pub fn load(wasm: &[u8]) -> Result<Policy> {
        Policy::with_deadline(wasm, DEFAULT_DEADLINE_TICKS)
    }

    /// Compiles a module; every call may run for `ticks` seconds.
    pub fn with_deadline(wasm: &[u8], ticks: u64) -> Result<Policy> {
        let mut config = wasmtime::Config::default();
        config.epoch_interruption(true);
        let engine = wasmtime::Engine::new(&config).map_err(|e| anyhow!("wasmtime: {e}"))?;
        let module = compile(&engine, wasm)?;
        let pre = WasmtimeEngineProviderBuilder::new()
            .engine(engine.clone())
            .module(module)
            .build_pre()
            .map_err(|e| anyhow!("cannot prepare the module: {e}"))?;
        let ticker = Arc::new(AtomicBool::new(false));
        let stop = ticker.clone();
        let weak = engine.weak();
        drop(engine);
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
            .context("cannot start the epoch ticker")?;
        Ok(Policy {
            pre,
            deadlines: EpochDeadlines {
                wapc_init: ticks,
                wapc_func: ticks,
            },
            ticker,
        })
    }

    /// A fresh instance, as policy-server makes for every request.
    pub fn instance(&self) -> Result<Instance> {
        let provider = self
            .pre
            .rehydrate(Some(self.deadlines))
            .map_err(|e| anyhow!("cannot instantiate the policy: {e}"))?;
        let host = WapcHost::new(Box::new(provider), Some(Box::new(host_callback)))
            .map_err(|e| anyhow!("cannot initialise the policy: {e}"))?;
        Ok(Instance { host })
    }

    /// `validate_settings` in a fresh instance.
    pub fn validate_settings(&self, settings: &Value) -> Result<SettingsResponse> {
        self.instance()?.validate_settings(settings)
    }

    /// `validate` of one AdmissionRequest in a fresh instance.
    pub fn validate(&self, request: &Value, settings: &Value) -> Result<ValidationResponse> {
        self.instance()?.validate(request, settings)
    }
}

/// Compiles the module, or loads it from the cache of compiled modules: compiling a 1 MiB
/// module with cranelift takes seconds and hundreds of MiB, every time the CLI starts.
/// policy-server likewise compiles a module once and keeps it.
fn compile(engine: &wasmtime::Engine, wasm: &[u8]) -> Result<wasmtime::Module> {
    let cached = cache_path(engine, wasm);
    if let Some(path) = cached.as_deref().filter(|p| p.is_file()) {
        // SAFETY: the file was written by `Module::serialize` of this same wasmtime build
        // (its name carries the engine's compatibility hash and the module's hash) and is
        // only ever replaced atomically.
        match unsafe { wasmtime::Module::deserialize_file(engine, path) } {
            Ok(module) => return Ok(module),
            Err(e) => tracing::debug!("ignoring the compiled module {}: {e}", path.display()),
        }
    }
    let module = wasmtime::Module::new(engine, wasm)
        .map_err(|e| anyhow!("not a loadable WebAssembly module: {e}"))?;
    if let Some(path) = cached
        && let Err(e) = store_compiled(&module, &path)
    {
        tracing::debug!(
            "cannot cache the compiled module at {}: {e:#}",
            path.display()
        );
    }
    Ok(module)
}

/// `$JUMPPOD_CACHE_DIR`, else `$XDG_CACHE_HOME/jumppod`, else `~/.cache/jumppod`; the file name
/// depends on the module's bytes and on the engine, so a new module or wasmtime never loads a
/// stale one.
fn cache_path(engine: &wasmtime::Engine, wasm: &[u8]) -> Option<std::path::PathBuf> {
    use std::hash::{Hash, Hasher};
    let dir = std::env::var_os("JUMPPOD_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|d| std::path::Path::new(&d).join("jumppod"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/jumppod"))
        })?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    wasm.hash(&mut hasher);
    engine.precompile_compatibility_hash().hash(&mut hasher);
    Some(dir.join(format!("policy-{:016x}.cwasm", hasher.finish())))
}

fn store_compiled(module: &wasmtime::Module, path: &std::path::Path) -> Result<()> {
    let bytes = module.serialize().map_err(|e| anyhow!("{e}"))?;
    let dir = path.parent().context("no cache directory")?;
    std::fs::create_dir_all(dir)?;
    let partial = path.with_extension(format!("partial-{}", std::process::id()));
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, path)?;
    Ok(())
}

/// One instantiated module; reusable for several calls.
pub struct Instance {
    host: WapcHost,
}

impl Instance {
    /// Calls a waPC function with raw bytes.
    pub fn call(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>> {
        self.host
            .call(operation, payload)
            .map_err(|e| anyhow!("the policy failed in `{operation}`: {e}"))
    }

    pub fn validate_settings(&self, settings: &Value) -> Result<SettingsResponse> {
        let answer = self.call("validate_settings", &serde_json::to_vec(settings)?)?;
        serde_json::from_slice(&answer).context("the policy's settings answer is not valid JSON")
    }

    pub fn validate(&self, request: &Value, settings: &Value) -> Result<ValidationResponse> {
        let payload = serde_json::to_vec(&json!({"request": request, "settings": settings}))?;
        let answer = self.call("validate", &payload)?;
        serde_json::from_slice(&answer).context("the policy's answer is not a ValidationResponse")
    }
}

/// The host capabilities a policy may call. This policy only logs.
fn host_callback(
    _id: u64,
    binding: &str,
    namespace: &str,
    operation: &str,
    payload: &[u8],
) -> std::result::Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
    match (binding, namespace, operation) {
        ("kubewarden", "tracing", "log") => {
            tracing::debug!(target: "jumppod::policy", "{}", String::from_utf8_lossy(payload));
            Ok(Vec::new())
        }
        _ => {
            Err(format!("host capability {binding}/{namespace}/{operation} is not provided").into())
        }
    }
}

/// The AdmissionRequest in a file's JSON: a bare request or a whole AdmissionReview.
pub fn admission_request(document: &Value) -> Result<&Value> {
    let request = document.get("request").unwrap_or(document);
    if !request.is_object() {
        bail!("expected an AdmissionRequest or an AdmissionReview object");
    }
    Ok(request)
}

/// The AdmissionResponse the policy-server sends back (and `kwctl run` prints): the mutated
/// object becomes a base64 JSONPatch of the request's object, and an empty diff no patch.
pub fn admission_response(request: &Value, response: &ValidationResponse) -> Value {
    let mut answer = json!({
        "uid": request.get("uid").cloned().unwrap_or(Value::String(String::new())),
        "allowed": response.accepted,
    });
    if let (Some(mutated), Some(object)) = (&response.mutated_object, request.get("object")) {
        let patch = json_patch::diff(object, mutated);
        if !patch.0.is_empty() {
            let text = serde_json::to_vec(&patch).unwrap_or_default();
            answer["patchType"] = json!("JSONPatch");
            answer["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    if !response.accepted {
        let mut status = json!({"message": response.message.clone().unwrap_or_default()});
        if let Some(code) = response.code {
            status["code"] = json!(code);
        }
        answer["status"] = status;
    }
    if let Some(warnings) = response.warnings.as_ref().filter(|w| !w.is_empty()) {
        answer["warnings"] = json!(warnings);
    }
    answer
}

/// Decodes the JSONPatch of an AdmissionResponse, if any.
pub fn decode_patch(answer: &Value) -> Result<Option<json_patch::Patch>> {
    let Some(text) = answer.get("patch").and_then(Value::as_str) else {
        return Ok(None);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .context("the patch is not base64")?;
    Ok(Some(
        serde_json::from_slice(&bytes).context("the patch is not a JSONPatch")?,
    ))
}
