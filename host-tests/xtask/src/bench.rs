//! `cargo xtask bench [--quick] [--json PATH] [--svg PATH] [--no-native] [--no-nx]
//! [--only SECTION,..]`:
//! builds the component, the harness (host-tests/src/bin/bench) and the
//! `mongodb` crate contender (host-tests/bench-native, its own workspace and
//! Cargo.lock, built only here), then runs them all pinned to one core.
//! The concurrency section also builds its WASI 0.3 guest (host-tests/p3-bench,
//! run by the wasmtime CLI), only when that section runs.
//!
//! `--quick` (the CI smoke test) builds the harness in the dev profile, which
//! the tests already built; a full run builds it optimised (wasmtime's host
//! side at opt-level 0 would be measured, not mongo-wasi).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::run::{exec, on_path, Ctx, Result, Run};
use crate::server::Server;
use crate::setup;

#[derive(Default)]
pub(crate) struct Args {
    quick: bool,
    json: Option<PathBuf>,
    svg: Option<PathBuf>,
    native: bool,
    nx: bool,
    /// Passed to the harness: only these sections (work, cold, deadline, churn,
    /// concurrent, nx, footprint, distant). `distant` runs in a full run or
    /// when named, never in a plain `--quick` (CI's); `pbkdf2` runs here, only when named.
    only: Option<String>,
}

impl Args {
    fn runs(&self, section: &str) -> bool {
        self.only
            .as_deref()
            .is_none_or(|o| o.split(',').any(|s| s == section))
    }
}

pub(crate) fn parse(args: &[&str]) -> Result<Args> {
    let mut a = Args {
        native: true,
        nx: true,
        ..Args::default()
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match *arg {
            "--quick" => a.quick = true,
            "--no-native" => a.native = false,
            "--no-nx" => a.nx = false,
            "--json" => a.json = Some(it.next().ok_or("--json needs a path")?.into()),
            "--svg" => a.svg = Some(it.next().ok_or("--svg needs a path")?.into()),
            "--only" => a.only = Some(it.next().ok_or("--only needs sections")?.to_string()),
            other => return Err(format!("unknown bench argument {other}")),
        }
    }
    Ok(a)
}

pub fn bench(ctx: &Ctx, args: &[&str]) -> Result<()> {
    let a = parse(args)?;
    let mut run = Run::new("bench");
    let _ = steps(&mut run, ctx, &a);
    run.finish()
}

/// The release profile of the workspace is the component's (opt-level "s",
/// fat LTO, one codegen unit): far too slow to build wasmtime with, and a
/// size-optimised wasmtime costs mongo-wasi about a quarter of its findOne
/// (105 against 80 us here), so the harness gets the opt-level a production
/// host is built with, without LTO.
const FAST_RELEASE: [&str; 7] = [
    "--release",
    "--config",
    "profile.release.lto=false",
    "--config",
    "profile.release.codegen-units=16",
    "--config",
    "profile.release.opt-level=3",
];

pub(crate) fn steps(run: &mut Run, ctx: &Ctx, a: &Args) -> Result<()> {
    // PBKDF2 only when asked for by name (its own builds; crate::pbkdf2).
    let only = a.only.as_deref().unwrap_or_default();
    if only.split(',').any(|s| s == "pbkdf2") {
        crate::pbkdf2::steps(run, ctx)?;
        if only.split(',').all(|s| s == "pbkdf2") {
            return Ok(());
        }
    }
    setup::steps(run, ctx)?;
    let target = ctx.target_dir()?.to_path_buf();
    run.step("bench: build the component (mongo_wasi.wasm)", || {
        crate::component::build(ctx)
    })?;
    // The floor under wasmtime: a minimal component making the floor's round
    // trip, so the driver's own cost shows apart from the platform's.
    run.step("bench: build the wasm floor (wasm_floor.wasm)", || {
        exec(&mut ctx.cargo(&[
            "build",
            "--target",
            "wasm32-wasip2",
            "--release",
            "-p",
            "wasm-floor",
        ]))
    })?;
    let profile = if a.quick { "debug" } else { "release" };
    run.step(&format!("bench: build the harness ({profile})"), || {
        let mut args = vec!["build", "-p", "host-tests", "--bin", "bench"];
        if !a.quick {
            args.extend(FAST_RELEASE);
        }
        exec(&mut ctx.cargo(&args))
    })?;
    let native_target = target.join("bench-native");
    // --quick (CI's smoke test, whose figures are not quoted) builds the
    // contender in the dev profile too: minutes less on a 2-core machine.
    let native_bin = native_target.join(profile).join("bench-native");
    if a.native {
        let _ = run.step(
            &format!("bench: build the mongodb crate contender ({profile}, own Cargo.lock)"),
            || {
                let t = Instant::now();
                let manifest = ctx.root.join("host-tests/bench-native/Cargo.toml");
                let mut args = vec!["build", "--locked", "--manifest-path"];
                if !a.quick {
                    args.insert(1, "--release");
                }
                let mut cmd = ctx.cargo(&args);
                cmd.arg(&manifest).arg("--target-dir").arg(&native_target);
                let r = exec(&mut cmd);
                println!("  bench-native build: {:.0} s", t.elapsed().as_secs_f64());
                r
            },
        );
    }
    // The concurrency section's WASI 0.3 guest: the driver with feature p3
    // (its own workspace and Cargo.lock). Release, the component's profile,
    // for figures; the dev profile for --quick (minutes less; not quoted).
    let p3_target = target.join("p3-bench");
    let p3_wasm = p3_target
        .join("wasm32-wasip2")
        .join(profile)
        .join("p3_bench.wasm");
    // The distant section runs it too (its mongo-wasi-p3 rows), when named
    // or in a full run.
    let p3_guest = a.runs("concurrent") || (a.runs("distant") && (!a.quick || a.only.is_some()));
    if p3_guest {
        let _ = run.step(
            &format!("bench: build the WASI 0.3 guest (p3-bench, {profile})"),
            || {
                let manifest = ctx.root.join("host-tests/p3-bench/Cargo.toml");
                let mut args = vec!["build", "--locked", "--target", "wasm32-wasip2"];
                if !a.quick {
                    args.push("--release");
                }
                args.push("--manifest-path");
                let mut cmd = ctx.cargo(&args);
                cmd.arg(&manifest).arg("--target-dir").arg(&p3_target);
                exec(&mut cmd)
            },
        );
    }
    let data = target.join("bench-data");
    run.step("bench: unpack the benchmark data", || unpack(ctx, &data))?;
    let out = target.join("bench");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    run.step("bench: run", || {
        // nx-27017 only when its section runs.
        let nx = if a.nx && a.runs("nx") {
            Some(Server::start(ctx)?)
        } else {
            None
        };
        let harness = target.join(profile).join("bench");
        // One core for client, server and contenders: on these VMs a cross-core
        // loopback wake-up costs ~30 us each way.
        let pinned = on_path("taskset");
        let mut cmd = if pinned {
            let mut c = Command::new("taskset");
            c.args(["-c", "0"]).arg(&harness);
            c
        } else {
            println!("  taskset not found: not pinned");
            Command::new(&harness)
        };
        let json = a.json.clone().unwrap_or_else(|| out.join("bench.json"));
        let svg = a.svg.clone().unwrap_or_else(|| out.join("ratios.svg"));
        cmd.arg("--data")
            .arg(&data)
            .arg("--json")
            .arg(&json)
            .arg("--svg")
            .arg(&svg)
            .arg("--python")
            .arg(ctx.venv_bin("python"))
            .arg("--pyscript")
            .arg(ctx.root.join("host-tests/bench/pymongo_bench.py"))
            .env("MONGO_WASI_COMPONENT", crate::component::path(ctx)?)
            .env(
                "MONGO_WASI_FLOOR_COMPONENT",
                target.join("wasm32-wasip2/release/wasm_floor.wasm"),
            );
        if pinned {
            cmd.args(["--pinned", "taskset -c 0 (harness, server, all contenders)"]);
        }
        if a.quick {
            cmd.arg("--quick");
        }
        if let Some(only) = &a.only {
            cmd.arg("--only").arg(only);
        }
        if a.native && native_bin.exists() {
            cmd.arg("--native").arg(&native_bin);
        }
        if let Some(s) = &nx {
            cmd.arg("--nx").arg(s.uri());
        }
        if p3_guest && p3_wasm.exists() {
            cmd.arg("--p3-bench")
                .arg(&p3_wasm)
                .arg("--wasmtime")
                .arg(setup::wasmtime(ctx)?);
        }
        let r = exec(&mut cmd);
        match nx {
            Some(s) => r.and(s.stop()),
            None => r,
        }
    })
}

/// The spec's data sets from ../shared/bench-data (or MONGO_WASI_BENCH_DATA), once.
fn unpack(ctx: &Ctx, into: &Path) -> Result<()> {
    let src = std::env::var_os("MONGO_WASI_BENCH_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| ctx.root.join("../shared/bench-data"));
    std::fs::create_dir_all(into).map_err(|e| format!("{}: {e}", into.display()))?;
    for (archive, marker) in [
        (
            "single_and_multi_document.tgz",
            "single_and_multi_document/tweet.json",
        ),
        ("extended_bson.tgz", "extended_bson/full_bson.json"),
    ] {
        if into.join(marker).exists() {
            continue;
        }
        let mut cmd = Command::new("tar");
        cmd.arg("xzf").arg(src.join(archive)).arg("-C").arg(into);
        exec(&mut cmd)?;
    }
    Ok(())
}
