//! Compiled modules kept on disk, so that a second `jumppod eval` or `--policy FILE` on the same
//! module deserializes it (milliseconds) instead of compiling it with cranelift (seconds).
//!
//! An entry is keyed by the module's sha256 and by the engine's compatibility hash (wasmtime's
//! version, the compiler's target and flags, the tunables: what `Module::deserialize` needs to
//! match). `Module::deserialize` trusts its input (it is `unsafe`: the bytes become machine
//! code), so each entry carries the sha256 of the serialized module in front of it and is
//! deserialized only when they match: a truncated, cut or altered entry is compiled again and
//! replaced, with a warning. Entries are written to a temporary file and renamed into place, so
//! a reader sees a whole entry or none. The digest guards against a damaged entry, not against
//! someone who can write the user's cache directory (they can write the digest too, and the
//! user's shell profile).

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime_provider::wasmtime::{Engine, Module};

/// Where a module came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Compiled (and written to the cache when there is one and it can be written: a warning
    /// says why not).
    Compiled,
    /// Deserialized from a cache entry whose digest matched.
    Cached,
    /// The entry was unusable (`why`): compiled again and replaced.
    Recompiled { why: String },
}

/// A directory of compiled modules.
#[derive(Clone, Debug)]
pub struct ModuleCache {
    dir: PathBuf,
}

const DIGEST: usize = 32;

impl ModuleCache {
    pub fn new(dir: impl Into<PathBuf>) -> ModuleCache {
        ModuleCache { dir: dir.into() }
    }

    /// The user's cache: `$XDG_CACHE_HOME/jumppod`, else `$HOME/.cache/jumppod` (the XDG base
    /// directory defaults); None when neither is set.
    pub fn user() -> Option<ModuleCache> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".cache"))
            })?;
        Some(ModuleCache::new(base.join("jumppod")))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry of `wasm` for `engine`.
    pub fn entry(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let mut key = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut key);
        let engine_key = hex(&key.0.finalize()[..8]);
        let module_key = hex(&Sha256::digest(wasm));
        self.dir.join(format!("{module_key}-{engine_key}.cwasm"))
    }

    /// The module, from its entry when the entry is whole, else compiled (`precompile` gives
    /// its serialized form) and written to the entry.
    pub(crate) fn module(
        &self,
        engine: &Engine,
        wasm: &[u8],
        precompile: impl FnOnce() -> wasmtime_provider::wasmtime::Result<Vec<u8>>,
    ) -> wasmtime_provider::wasmtime::Result<(Module, Origin)> {
        let path = self.entry(engine, wasm);
        let why = match std::fs::read(&path) {
            Ok(bytes) => match checked(&bytes) {
                // SAFETY: the bytes are what `precompile` wrote for an engine of the same
                // compatibility hash (the entry's name), as their digest proves.
                Ok(serialized) => match unsafe { Module::deserialize(engine, serialized) } {
                    Ok(module) => {
                        tracing::debug!(entry = %path.display(), "module loaded from the cache");
                        return Ok((module, Origin::Cached));
                    }
                    Err(e) => Some(format!("wasmtime cannot load it: {e}")),
                },
                Err(why) => Some(why),
            },
            // No entry yet, or no directory where the cache should be (the write says so).
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                None
            }
            Err(e) => Some(format!("cannot read it: {e}")),
        };
        if let Some(why) = &why {
            tracing::warn!(entry = %path.display(), problem = %why, "a compiled-module cache entry is unusable: compiling the module again");
        }
        let serialized = precompile()?;
        match self.write(&path, &serialized) {
            Ok(()) => tracing::debug!(entry = %path.display(), "module compiled and cached"),
            Err(e) => {
                tracing::warn!(entry = %path.display(), problem = %e, "cannot write the compiled module to the cache")
            }
        }
        // SAFETY: compiled just now by `precompile`, for this engine's configuration.
        let module = unsafe { Module::deserialize(engine, &serialized) }?;
        let origin = match why {
            Some(why) => Origin::Recompiled { why },
            None => Origin::Compiled,
        };
        Ok((module, origin))
    }

    /// Writes an entry whole or not at all: a temporary file beside it, renamed over it.
    fn write(&self, path: &Path, serialized: &[u8]) -> std::io::Result<()> {
        create_private_dir(&self.dir)?;
        let temporary = self.dir.join(format!(
            ".{}.{}.tmp",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
            std::process::id()
        ));
        let result = (|| {
            use std::io::Write as _;
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&Sha256::digest(serialized))?;
            file.write_all(serialized)?;
            file.sync_all()?;
            std::fs::rename(&temporary, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        result
    }
}

/// The serialized module of an entry, if its digest is right.
fn checked(entry: &[u8]) -> Result<&[u8], String> {
    if entry.len() <= DIGEST {
        return Err(format!("it is cut short ({} bytes)", entry.len()));
    }
    let (digest, serialized) = entry.split_at(DIGEST);
    if Sha256::digest(serialized).as_slice() != digest {
        return Err("its digest does not match its content (cut or altered)".into());
    }
    Ok(serialized)
}

/// The cache directory, readable only by its user (the entries become machine code).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The engine's compatibility hash fed to sha256: the same on every run and build, unlike
/// std's `DefaultHasher`, whose algorithm may change between Rust releases.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// A module of its own: a function that adds.
    const WAT: &str = r#"(module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))"#;

    fn scratch() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("jumppod-wasm-cache-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn load(cache: &ModuleCache, engine: &Engine) -> (Module, Origin) {
        cache
            .module(engine, WAT.as_bytes(), || {
                engine.precompile_module(WAT.as_bytes())
            })
            .expect("the module loads")
    }

    fn adds(engine: &Engine, module: &Module) -> i32 {
        let mut store = wasmtime_provider::wasmtime::Store::new(engine, ());
        let instance = wasmtime_provider::wasmtime::Instance::new(&mut store, module, &[]).unwrap();
        let add = instance
            .get_typed_func::<(i32, i32), i32>(&mut store, "add")
            .unwrap();
        add.call(&mut store, (2, 3)).unwrap()
    }

    #[test]
    fn a_second_load_comes_from_the_cache() {
        let dir = scratch();
        let (cache, engine) = (ModuleCache::new(&dir), Engine::default());
        assert_eq!(load(&cache, &engine).1, Origin::Compiled);
        let (module, origin) = load(&cache, &engine);
        assert_eq!(origin, Origin::Cached);
        assert_eq!(adds(&engine, &module), 5);
        // No temporary file is left beside the entry.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].ends_with(".cwasm"), "{names:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A damaged entry is never handed to `Module::deserialize`: it is compiled again and
    /// replaced, and the next load comes from the cache.
    #[rstest]
    #[case::cut_in_half(|entry: &mut Vec<u8>| entry.truncate(entry.len() / 2), "digest does not match")]
    #[case::cut_to_nothing(|entry: &mut Vec<u8>| entry.clear(), "cut short (0 bytes)")]
    #[case::one_byte_of_the_code_flipped(|entry: &mut Vec<u8>| { let at = entry.len() / 2; entry[at] ^= 0x01; }, "digest does not match")]
    #[case::one_byte_of_the_digest_flipped(|entry: &mut Vec<u8>| entry[0] ^= 0x80, "digest does not match")]
    fn a_damaged_entry_is_compiled_again_and_replaced(
        #[case] damage: fn(&mut Vec<u8>),
        #[case] says: &str,
    ) {
        let dir = scratch();
        let (cache, engine) = (ModuleCache::new(&dir), Engine::default());
        load(&cache, &engine);
        let entry = cache.entry(&engine, WAT.as_bytes());
        let mut bytes = std::fs::read(&entry).unwrap();
        damage(&mut bytes);
        std::fs::write(&entry, &bytes).unwrap();

        let (module, origin) = load(&cache, &engine);
        match origin {
            Origin::Recompiled { why } => assert!(why.contains(says), "{why}"),
            other => panic!("expected a recompilation, got {other:?}"),
        }
        assert_eq!(adds(&engine, &module), 5);
        assert_eq!(load(&cache, &engine).1, Origin::Cached);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn another_module_or_another_engine_configuration_is_another_entry() {
        let cache = ModuleCache::new("/nonexistent");
        let engine = Engine::default();
        let mut config = wasmtime_provider::wasmtime::Config::new();
        config.epoch_interruption(true);
        let interrupted = Engine::new(&config).unwrap();
        let entry = cache.entry(&engine, WAT.as_bytes());
        assert_ne!(entry, cache.entry(&engine, b"(module)"));
        assert_ne!(entry, cache.entry(&interrupted, WAT.as_bytes()));
        assert_eq!(entry, cache.entry(&Engine::default(), WAT.as_bytes()));
    }

    #[test]
    fn an_unwritable_cache_still_loads_the_module() {
        let dir = scratch();
        std::fs::write(&dir, b"a file where the directory should be").unwrap();
        let (cache, engine) = (ModuleCache::new(&dir), Engine::default());
        let (module, origin) = load(&cache, &engine);
        assert_eq!(origin, Origin::Compiled);
        assert_eq!(adds(&engine, &module), 5);
        std::fs::remove_file(dir).unwrap();
    }
}
