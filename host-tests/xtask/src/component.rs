//! Builds the shipped component, `target/component/mongo-wasi.wasm`, a path
//! only this step writes (cargo writes its core module, and any other build of
//! the crate its own cdylib, at `target/wasm32-wasip2/release/mongo_wasi.wasm`):
//!
//! 1. the driver's core module alone: `cargo rustc --crate-type cdylib`, linked
//!    with `--skip-wit-component`. Built together with the rlib (as `cargo
//!    build` does, from `crate-type = ["cdylib", "rlib"]`) the cdylib came out
//!    7% larger and slower;
//! 2. binaryen's `wasm-opt -Oz` over it (Node.js runs binaryen's wasm build,
//!    pinned in `host-tests/wasm-opt`): 12% smaller and faster again;
//! 3. `wasm-tools component new` with the driver's own preview1 adapter, as
//!    wasm-component-ld would have done.
//!
//! Without npm and Node.js 20 or newer (what the JavaScript host needs),
//! step 2 is left out, and this is printed.
//! Optimising takes half a minute, so the output is reused while the core
//! module is unchanged. The finished component is written under a temporary
//! name beside its place and renamed into it: a reader of the shipped path
//! sees the old component or the new one, never a part or a core module.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::{exec, Ctx, Result};

/// binaryen cannot read the features from the module (the release build
/// strips `target_features`): these are the ones rustc's wasm32-wasip2 emits.
const FEATURES: [&str; 8] = [
    "--enable-bulk-memory",
    "--enable-bulk-memory-opt",
    "--enable-call-indirect-overlong",
    "--enable-multivalue",
    "--enable-mutable-globals",
    "--enable-nontrapping-float-to-int",
    "--enable-reference-types",
    "--enable-sign-ext",
];

const ADAPTER: &str = "src/component/adapter/wasi_snapshot_preview1.wasm";

/// The shipped component (kebab-case, as composition tools want it).
pub fn path(ctx: &Ctx) -> Result<PathBuf> {
    Ok(ctx.target_dir()?.join("component/mongo-wasi.wasm"))
}

/// Where `cargo rustc` leaves the core module.
fn core_path(ctx: &Ctx) -> Result<PathBuf> {
    Ok(ctx
        .target_dir()?
        .join("wasm32-wasip2/release/mongo_wasi.wasm"))
}

pub fn build(ctx: &Ctx) -> Result<()> {
    exec(&mut ctx.cargo(&[
        "rustc",
        "-p",
        "mongo-wasi",
        "--lib",
        "--release",
        "--target",
        "wasm32-wasip2",
        "--crate-type",
        "cdylib",
        "--",
        "-C",
        "link-arg=--skip-wit-component",
    ]))?;
    let core_module = core_path(ctx)?;
    let core = read(&core_module)?;
    let out = path(ctx)?;
    let cache = ctx.target_dir()?.join("component");
    fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let (cached_core, cached) = (cache.join("core.wasm"), cache.join("cached-component.wasm"));
    if cached.exists() && fs::read(&cached_core).ok().as_deref() == Some(&core[..]) {
        println!("  core module unchanged: the optimised component is reused");
    } else {
        let optimised = cache.join("core-opt.wasm");
        let opt = wasm_opt(ctx, &core_module, &optimised)?;
        let input = if opt { &optimised } else { &core_module };
        let mut cmd = Command::new(ctx.venv_bin("wasm-tools"));
        cmd.args(["component", "new"])
            .arg(input)
            .arg("--adapt")
            .arg(format!(
                "wasi_snapshot_preview1={}",
                ctx.root.join(ADAPTER).display()
            ))
            .arg("-o")
            .arg(&cached);
        exec(&mut cmd)?;
        // Only an optimised component is reused: one made without wasm-opt
        // is made again, and optimised once Node.js is there.
        match opt {
            true => write(&cached_core, &core)?,
            false => {
                let _ = fs::remove_file(&cached_core);
            }
        }
    }
    // Into place by a rename, from a temporary name in the same directory.
    let tmp = out.with_extension("wasm.tmp");
    fs::copy(&cached, &tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    fs::rename(&tmp, &out).map_err(|e| format!("{}: {e}", out.display()))?;
    let size = fs::metadata(&out)
        .map_err(|e| format!("{}: {e}", out.display()))?
        .len();
    println!(
        "  core module {} bytes; component {size} bytes: {}",
        core.len(),
        out.display()
    );
    Ok(())
}

/// `wasm-opt -Oz` from `core` into `into`; false when Node.js (the version
/// the JavaScript host needs) or npm is missing.
fn wasm_opt(ctx: &Ctx, core: &Path, into: &Path) -> Result<bool> {
    if let Err(e) = crate::node::check_node() {
        println!("  {e}\n  wasm-opt left out: the component is some 12% larger");
        return Ok(false);
    }
    let dir = ctx.root.join("host-tests/wasm-opt");
    let bin = dir.join("node_modules/binaryen/bin/wasm-opt");
    if !bin.exists() {
        let mut npm = Command::new("npm");
        npm.args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir);
        exec(&mut npm)?;
    }
    let mut cmd = Command::new("node");
    cmd.arg(&bin)
        .arg("-Oz")
        .args(FEATURES)
        .arg(core)
        .arg("-o")
        .arg(into);
    exec(&mut cmd)?;
    Ok(true)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
