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
//! The same steps build the WASI 0.3 face, `target/component/mongo-wasi-async.wasm`
//! (world `driver-async`, feature `component-async`), in a target directory of
//! its own (`target/component-async-build`): both faces' cdylibs have one file
//! name, so in one target directory each build would overwrite the other's.
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

/// One face of the driver component.
pub struct Face {
    /// Its file in `target/component/` (kebab-case, as composition tools want it).
    pub file: &'static str,
    /// Cargo's feature flags for it.
    features: &'static [&'static str],
    /// Its own target directory under `target/`, if not the default one.
    target_subdir: Option<&'static str>,
    /// The prefix of its cached intermediate files in `target/component/`.
    cache_prefix: &'static str,
}

/// WASI 0.2, world `driver`: sync exports.
pub const SYNC: Face = Face {
    file: "mongo-wasi.wasm",
    features: &[],
    target_subdir: None,
    cache_prefix: "",
};

/// WASI 0.3, world `driver-async`: `async func` exports.
pub const ASYNC: Face = Face {
    file: "mongo-wasi-async.wasm",
    features: &["--no-default-features", "--features", "component-async"],
    target_subdir: Some("component-async-build"),
    cache_prefix: "async-",
};

/// The shipped (WASI 0.2) component.
pub fn path(ctx: &Ctx) -> Result<PathBuf> {
    path_of(ctx, &SYNC)
}

/// Where a face's component is written.
pub fn path_of(ctx: &Ctx, face: &Face) -> Result<PathBuf> {
    Ok(ctx.target_dir()?.join("component").join(face.file))
}

/// The target directory a face builds in.
fn build_dir(ctx: &Ctx, face: &Face) -> Result<PathBuf> {
    let dir = ctx.target_dir()?;
    Ok(match face.target_subdir {
        Some(sub) => dir.join(sub),
        None => dir.to_path_buf(),
    })
}

/// Where `cargo rustc` leaves the core module.
fn core_path(ctx: &Ctx, face: &Face) -> Result<PathBuf> {
    Ok(build_dir(ctx, face)?.join("wasm32-wasip2/release/mongo_wasi.wasm"))
}

/// Builds the shipped (WASI 0.2) component.
pub fn build(ctx: &Ctx) -> Result<()> {
    build_face(ctx, &SYNC)
}

pub fn build_face(ctx: &Ctx, face: &Face) -> Result<()> {
    let target_dir = build_dir(ctx, face)?;
    let target_dir = target_dir.to_string_lossy();
    let mut args = vec![
        "rustc",
        "-p",
        "mongo-wasi",
        "--lib",
        "--release",
        "--target",
        "wasm32-wasip2",
        "--crate-type",
        "cdylib",
    ];
    args.extend_from_slice(face.features);
    if face.target_subdir.is_some() {
        args.extend_from_slice(&["--target-dir", &target_dir]);
    }
    args.extend_from_slice(&["--", "-C", "link-arg=--skip-wit-component"]);
    exec(&mut ctx.cargo(&args))?;
    let core_module = core_path(ctx, face)?;
    let core = read(&core_module)?;
    let out = path_of(ctx, face)?;
    let cache = ctx.target_dir()?.join("component");
    fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let name = |n: &str| cache.join(format!("{}{n}", face.cache_prefix));
    let (cached_core, cached) = (name("core.wasm"), name("cached-component.wasm"));
    if cached.exists() && fs::read(&cached_core).ok().as_deref() == Some(&core[..]) {
        println!("  core module unchanged: the optimised component is reused");
    } else {
        let optimised = name("core-opt.wasm");
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
