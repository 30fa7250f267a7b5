//! The examples that use the driver component from outside (issue 10):
//! `examples/consumer`, a wasi:cli command, and `examples/http-handler`, a
//! wasi:http handler. Each is built for wasm32-wasip2 on its own (it imports
//! the driver's WIT interfaces; it does not link the driver crate), then
//! composed with the driver component by `wasm-tools compose` into
//! `target/examples/<name>.wasm`. `examples/http-handler-p3`, the same
//! handler on WASI 0.3, links the driver crate (feature `p3`) instead: it is
//! built on its own (not a workspace member) and copied there as is.
//! `host-tests/tests/examples.rs` runs them with the wasmtime CLI.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::{exec, Ctx, Result, Run};
use crate::server::Server;
use crate::setup;
use crate::steps;

/// (cargo package, the component cargo builds, the composed file's name).
const EXAMPLES: [(&str, &str, &str); 2] = [
    ("consumer", "consumer.wasm", "consumer"),
    ("http-handler", "http_handler.wasm", "http-handler"),
];

pub const USAGE: &str = "\
usage: cargo xtask examples [--requests N]
  setup, build, then run the composed examples with the wasmtime CLI against a
  fresh nx-27017: the consumer command, and the wasi:http handlers under
  `wasmtime serve` (the JSON API of the 0.2 and the 0.3 one, then N requests
  (default 200) on the 0.2 one measured: requests/s, latency p50/p99, MongoDB
  connections and commands per request); then 400 requests, 16 in flight
  (MONGO_WASI_LOAD_REQUESTS sets how many), on the 0.3 handler with serve's
  defaults and on the 0.2 one with and without instance reuse: a table of
  requests/s, p50/p99, instances, connections and hellos per request";

pub fn dir(ctx: &Ctx) -> Result<PathBuf> {
    Ok(ctx.target_dir()?.join("examples"))
}

/// Builds both examples and composes each with the built driver component.
pub fn build(ctx: &Ctx, driver: &Path) -> Result<()> {
    let mut args = vec!["build", "--target", "wasm32-wasip2", "--release"];
    for (package, _, _) in EXAMPLES {
        args.extend(["-p", package]);
    }
    exec(&mut ctx.cargo(&args))?;
    let out = dir(ctx)?;
    fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    // wasm-tools names the instance after the file, which must be kebab-case.
    let plug = out.join("mongo-wasi.wasm");
    fs::copy(driver, &plug)
        .map_err(|e| format!("{} to {}: {e}", driver.display(), plug.display()))?;
    let built = ctx.target_dir()?.join("wasm32-wasip2/release");
    for (_, artifact, name) in EXAMPLES {
        let composed = out.join(format!("{name}.wasm"));
        let mut cmd = Command::new(ctx.venv_bin("wasm-tools"));
        cmd.arg("compose")
            .arg(built.join(artifact))
            .arg("-d")
            .arg(&plug)
            .arg("-o")
            .arg(&composed);
        exec(&mut cmd)?;
        let size = fs::metadata(&composed).map(|m| m.len()).unwrap_or(0);
        println!("  {}: {size} bytes", composed.display());
    }
    build_p3_handler(ctx, &out)
}

/// `examples/http-handler-p3` (its own workspace, its own release profile),
/// copied to `<out>/http-handler-p3.wasm`. It builds in the target directory
/// of the WASI 0.3 crates (p3-probe, async-smoke), never the driver's own:
/// there its `mongo-wasi` (feature p3) replaced the uplifted
/// `mongo_wasi.wasm` that the bench's component build then took as fresh.
fn build_p3_handler(ctx: &Ctx, out: &Path) -> Result<()> {
    let target = ctx.target_dir()?.join("p3-probe");
    let manifest = ctx.root.join("examples/http-handler-p3/Cargo.toml");
    let (manifest, target_dir) = (manifest.to_string_lossy(), target.to_string_lossy());
    exec(&mut ctx.cargo(&[
        "build",
        "--manifest-path",
        &manifest,
        "--target",
        "wasm32-wasip2",
        "--release",
        "--target-dir",
        &target_dir,
    ]))?;
    let built = target.join("wasm32-wasip2/release/http_handler_p3.wasm");
    let copied = out.join("http-handler-p3.wasm");
    fs::copy(&built, &copied)
        .map_err(|e| format!("{} to {}: {e}", built.display(), copied.display()))?;
    let size = fs::metadata(&copied).map(|m| m.len()).unwrap_or(0);
    println!("  {}: {size} bytes", copied.display());
    Ok(())
}

/// The tests of `host-tests/tests/examples.rs` against a fresh nx-27017,
/// one at a time (the measured ones must not share the machine with each other).
/// `compare`: the three-handler load table too (it includes the 0.3 load
/// test's assertions, so that test is skipped); else the 0.3 load test alone.
pub fn run_tests(ctx: &Ctx, requests: Option<u32>, compare: bool) -> Result<()> {
    let server = Server::start(ctx)?;
    let mut cmd = ctx.cargo(&["test", "-p", "host-tests", "--test", "examples", "--"]);
    cmd.args(["--ignored", "--nocapture", "--test-threads", "1", "--skip"])
        .arg(if compare {
            "http_handler_p3_shares_its_pool_under_load"
        } else {
            "http_handlers_under_load_compared"
        })
        .env("MONGO_WASI_URI", server.uri())
        .env("MONGO_WASI_EXAMPLES", dir(ctx)?)
        .env("MONGO_WASI_WASMTIME", setup::wasmtime(ctx)?);
    if let Some(n) = requests {
        cmd.env("MONGO_WASI_EXAMPLE_REQUESTS", n.to_string());
    }
    let result = exec(&mut cmd);
    result.and(server.stop())
}

/// `cargo xtask examples [--requests N]`.
pub fn examples(ctx: &Ctx, args: &[&str]) -> Result<()> {
    let requests = match args {
        [] => None,
        ["--requests", n] => Some(n.parse().map_err(|e| format!("--requests {n}: {e}"))?),
        ["--help" | "-h"] => {
            println!("{USAGE}");
            return Ok(());
        }
        _ => return Err(format!("unknown arguments {}\n\n{USAGE}", args.join(" "))),
    };
    let mut run = Run::new("examples");
    let _ = setup::steps(&mut run, ctx)
        .and_then(|()| steps::build_steps(&mut run, ctx))
        .and_then(|()| {
            run.step(
                "examples: consumer and wasi:http handler through wasmtime",
                || run_tests(ctx, requests, true),
            )
        });
    run.finish()
}
