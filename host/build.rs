//! Embeds the policy Wasm in the `jumppod` binary, so the host checks what it writes with the
//! very module the cluster runs. `make` builds the Wasm first; a build without it still works
//! and asks for `--policy` at run time.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=JUMPPOD_POLICY_WASM");
    let path = std::env::var_os("JUMPPOD_POLICY_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
            manifest.join("../target/wasm32-wasip1/release/jumppod_policy.wasm")
        });
    println!("cargo:rerun-if-changed={}", path.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("policy.wasm");
    let bytes = std::fs::read(&path).unwrap_or_default();
    if bytes.is_empty() {
        println!(
            "cargo:warning=no policy Wasm at {}: this jumppod binary will need --policy (run `make policy` first)",
            path.display()
        );
    }
    std::fs::write(out, bytes).expect("write OUT_DIR/policy.wasm");
}
