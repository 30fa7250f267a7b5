//! The component (wasm32-wasip2, feature `component`) links its own WASI
//! preview1 adapter, `src/component/adapter/wasi_snapshot_preview1.wasm`,
//! instead of the stock one: it answers ring's `random_get` from
//! wasi:random and imports nothing else (the stock one adds wasi:cli/stderr).

fn main() {
    const ADAPTER: &str = "src/component/adapter/wasi_snapshot_preview1.wasm";
    println!("cargo:rerun-if-changed={ADAPTER}");
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let wasip2 = env("CARGO_CFG_TARGET_OS") == "wasi" && env("CARGO_CFG_TARGET_ENV") == "p2";
    if wasip2 && std::env::var_os("CARGO_FEATURE_COMPONENT").is_some() {
        let path = std::path::Path::new(&env("CARGO_MANIFEST_DIR")).join(ADAPTER);
        println!(
            "cargo:rustc-link-arg-cdylib=--adapt=wasi_snapshot_preview1={}",
            path.display()
        );
    }
}
