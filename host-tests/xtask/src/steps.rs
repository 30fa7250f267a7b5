//! The subcommands, each a list of steps on one `Run`.
//!
//! To add a step, add a `run.step(...)` line: use `?` after it if later steps need it,
//! `let _ =` if the run should go on (the summary still reports it as failed).

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::run::{exec, output, Ctx, Result, Run};
use crate::server::Server;
use crate::setup;
use crate::soak;
use crate::spec;
use crate::witcheck;

/// What the component must export, all from `mongo-wasi:driver`.
const INTERFACES: [&str; 7] = [
    "client",
    "database",
    "collection",
    "cursor",
    "session",
    "gridfs",
    "types",
];

pub fn setup(ctx: &Ctx) -> Result<()> {
    let mut run = Run::new("setup");
    let _ = setup::steps(&mut run, ctx);
    run.finish()
}

pub fn build(ctx: &Ctx) -> Result<()> {
    let mut run = Run::new("build");
    // Setup is quick once done, and a fresh machine cannot build without it.
    let _ = setup::steps(&mut run, ctx).and_then(|()| build_steps(&mut run, ctx));
    run.finish()
}

pub fn demo(ctx: &Ctx) -> Result<()> {
    let mut run = Run::new("demo");
    let _ = demo_steps(&mut run, ctx);
    run.finish()
}

pub fn test(ctx: &Ctx) -> Result<()> {
    let mut run = Run::new("test");
    let _ = test_steps(&mut run, ctx);
    run.finish()
}

pub fn wit_check(ctx: &Ctx) -> Result<()> {
    let mut run = Run::new("wit-check");
    let _ = setup::steps(&mut run, ctx).and_then(|()| {
        run.step("wit-check: doc comments, wasm-tools parse", || {
            witcheck::check(ctx)
        })
    });
    run.finish()
}

pub fn layers(ctx: &Ctx) -> Result<()> {
    let mut run = Run::new("layers");
    let _ = run.step("layers: the imports of src/ read top to bottom", || {
        crate::layers::check(ctx)
    });
    run.finish()
}

pub(crate) fn build_steps(run: &mut Run, ctx: &Ctx) -> Result<()> {
    let wasm = ["build", "--target", "wasm32-wasip2", "--release"];
    // Two invocations: built together, cargo would unify mongo-wasi's features and give
    // the notes guest the component glue it links without. The guest's build also
    // emits mongo-wasi's cdylib without the glue, at cargo's own path; the component
    // is made from the cdylib built right before it and shipped at its own path
    // (component.rs).
    run.step("build: example guest (notes.wasm)", || {
        exec(&mut ctx.cargo(&[&wasm[..], &["-p", "notes"]].concat()))
    })?;
    run.step(
        "build: component (target/component/mongo-wasi.wasm: cdylib, wasm-opt -Oz)",
        || crate::component::build(ctx),
    )?;
    run.step("build: host tests and run-guest (native)", || {
        exec(&mut ctx.cargo(&["build", "-p", "host-tests", "--bins", "--tests"]))
    })?;
    run.step("build: check the component's WIT exports", || {
        check_component(ctx, &crate::component::SYNC)
    })?;
    run.step("build: WIT binary package (mongo-wasi-driver.wasm)", || {
        wit_package(ctx)
    })?;
    run.step(
        "build: the component imports only allowed WASI interfaces",
        || crate::imports::check(ctx, &component_path(ctx)?),
    )?;
    run.step(
        "build: examples consumer and http-handler, composed with the component; http-handler-p3",
        || crate::examples::build(ctx, &component_path(ctx)?),
    )?;
    // Nothing after needs the WASI 0.3 face: a failure is reported, the run goes on.
    let _ = run
        .step(
            "build: WASI 0.3 component (target/component/mongo-wasi-async.wasm: world driver-async)",
            || crate::component::build_face(ctx, &crate::component::ASYNC),
        )
        .and_then(|()| {
            run.step("build: check the WASI 0.3 component's WIT exports (async func)", || {
                check_component(ctx, &crate::component::ASYNC)
            })
        })
        .and_then(|()| {
            run.step(spec::ASYNC_RUNNER_STEP, || spec::build_async_runner(ctx))
        });
    Ok(())
}

fn test_steps(run: &mut Run, ctx: &Ctx) -> Result<()> {
    setup::steps(run, ctx)?;
    let _ = run.step("test: WIT doc comments (wit-check)", || {
        witcheck::check(ctx)
    });
    let _ = run.step(
        "test: the layering rule of src/ (layers), and the unit tests of xtask and p3-util",
        || {
            crate::layers::check(ctx)?;
            exec(&mut ctx.cargo(&["test", "--quiet", "-p", "xtask"]))?;
            // The WASI 0.3 guests' shared helpers (their own workspace; std only).
            let util = ctx.root.join("host-tests/p3-util/Cargo.toml");
            let target = ctx.target_dir()?.join("p3-util");
            let mut cmd = ctx.cargo(&["test", "--quiet", "--manifest-path"]);
            cmd.arg(&util).arg("--target-dir").arg(&target);
            exec(&mut cmd)
        },
    );
    let _ = run.step(
        "test: unit tests and JSON spec suites (mongo-wasi, native)",
        || {
            exec(&mut ctx.cargo(&["test", "--no-fail-fast", "-p", "mongo-wasi"]))?;
            // The WASI 0.3 face's unit tests (its runtime's natively testable parts).
            exec(&mut ctx.cargo(&[
                "test",
                "--no-fail-fast",
                "-p",
                "mongo-wasi",
                "--lib",
                "--no-default-features",
                "--features",
                "p3",
            ]))
        },
    );
    let _ = run.step(
        "test: the fuzzer's oracles and saved findings, then every target for 3 s",
        || {
            exec(&mut ctx.cargo(&["test", "--no-fail-fast", "-p", "mongo-wasi-fuzz"]))?;
            fuzz(ctx, &["--seconds", "3"])
        },
    );
    build_steps(run, ctx)?; // the host tests need the component
    let _ = run.step("test: host tests and proxy tests against nx-27017", || {
        host_tests(ctx)
    });
    let _ = run.step(crate::node::STEP, || crate::node::test_step(ctx));
    let _ = run.step(
        "test: the WASI 0.3 face (p3-probe: its runtime, then one client under 16 concurrent \
         operations with a silent server's deadline beside them, every cancellation point of \
         find, insert, commit and a GridFS upload; async-smoke: a 0.3 command composed with \
         the driver-async component)",
        || p3_probe(ctx).and_then(|()| async_smoke(ctx)),
    );
    let _ = run.step(crate::cmap::STEP, || crate::cmap::step(ctx));
    let _ = run.step(
        "test: the examples through the wasmtime CLI (consumer, wasi:http handlers 0.2 and 0.3)",
        || crate::examples::run_tests(ctx, None, false),
    );
    let _ = run.step(
        "test: soak through the failpoint proxy (300 operations or 60 s)",
        || soak::short_step(ctx),
    );
    let _ = run.step(
        "test: unified spec suites against nx-27017 (expected-pass list)",
        || spec::expected_pass_step(ctx, false, spec::Face::Sync),
    );
    let _ = run.step(
        "test: unified spec suites again with --auth --tls (expected-pass list)",
        || spec::expected_pass_step(ctx, true, spec::Face::Sync),
    );
    // The second face and wire compression in one run (CI's time): the same list
    // through the WASI 0.3 component, every client compressing. The --auth --tls run
    // checks what the faces share (auth, TLS), on the 0.2 one.
    let _ = run.step(
        "test: unified spec suites through the WASI 0.3 face with wire compression \
         (zstd, snappy, zlib; expected-pass list)",
        || spec::compressed_step(ctx, spec::Face::Async),
    );
    // The benchmark's smoke test (issue: `--quick` runs in CI): every contender
    // and measurement runs once; no thresholds, timing belongs in the benchmark.
    crate::bench::steps(run, ctx, &crate::bench::parse(&["--quick"])?)
}

fn demo_steps(run: &mut Run, ctx: &Ctx) -> Result<()> {
    setup::steps(run, ctx)?;
    build_steps(run, ctx)?;
    run.step("demo: examples/notes against nx-27017", || {
        let target = ctx.target_dir()?;
        let server = Server::start(ctx)?;
        let mut cmd = Command::new(target.join("debug/run-guest"));
        cmd.arg("--allow")
            .arg(server.addr())
            .arg(target.join("wasm32-wasip2/release/notes.wasm"))
            .arg("--")
            .arg(server.uri());
        let result = exec(&mut cmd);
        result.and(server.stop())
    })
}

/// `cargo xtask fuzz [--seconds N] [--target T] [--seed S] [--repro FILE]`: the
/// in-repo fuzzer (stable Rust). Findings are saved under target/fuzz-findings.
pub fn fuzz(ctx: &Ctx, args: &[&str]) -> Result<()> {
    let findings = ctx.target_dir()?.join("fuzz-findings");
    let findings = findings.to_string_lossy();
    let mut cmd = ctx.cargo(&["run", "--quiet", "-p", "mongo-wasi-fuzz", "--"]);
    cmd.args(["--findings", &findings]).args(args);
    exec(&mut cmd)
}

/// The component's integration tests and the failpoint proxy's tests (whose
/// pymongo check runs through the proxy in front of the same server).
fn host_tests(ctx: &Ctx) -> Result<()> {
    let component = component_path(ctx)?;
    let server = Server::start(ctx)?;
    let run = |package: &str| {
        let mut cmd = ctx.cargo(&["test", "--no-fail-fast", "-p", package]);
        cmd.env("MONGO_WASI_URI", server.uri())
            .env("MONGO_WASI_COMPONENT", &component)
            .env("MONGO_WASI_VENV", &ctx.venv);
        exec(&mut cmd)
    };
    let host = run("host-tests");
    let proxy = run("mongo-wasi-proxy");
    host.and(proxy).and(server.stop())
}

/// host-tests/p3-probe/run.sh on free loopback ports: it builds the probe
/// (the driver with feature p3), starts nx-27017, a silent and a trickling
/// listener, a DNS responder, a TLS relay, a slow relay, the failpoint proxy and a
/// lying SCRAM server, runs its sections (the runtime, the driver, TLS,
/// cancellation, CMAP, PBKDF2 under a deadline), and stops them by PID.
/// The probe fails (non-zero exit) on any check that does not hold.
fn p3_probe(ctx: &Ctx) -> Result<()> {
    let mut cmd = Command::new("bash");
    cmd.arg(ctx.root.join("host-tests/p3-probe/run.sh"))
        .env("VENV", ctx.venv.join("bin"))
        .env("CARGO_TARGET_DIR", ctx.target_dir()?.join("p3-probe"));
    let vars = [
        "NX_PORT",
        "SILENT_PORT",
        "TRICKLE_PORT",
        "DNS_PORT",
        "TLS_PORT",
        "SLOW_PORT",
        "PROXY_PORT",
        "SCRAM_PORT",
    ];
    for (var, port) in vars.iter().zip(crate::server::free_ports(vars.len())?) {
        cmd.env(var, port.to_string());
    }
    exec(&mut cmd)
}

/// host-tests/async-smoke/run.sh: builds a WASI 0.3 command, composes it with
/// target/component/mongo-wasi-async.wasm and runs it against its own
/// nx-27017 (insert, find, 16 concurrent finds, cursors, dropped cursors).
fn async_smoke(ctx: &Ctx) -> Result<()> {
    let mut cmd = Command::new("bash");
    cmd.arg(ctx.root.join("host-tests/async-smoke/run.sh"))
        .env("VENV", ctx.venv.join("bin"))
        .env("CARGO_TARGET_DIR", ctx.target_dir()?.join("p3-probe"))
        .env("NX_PORT", crate::server::free_port()?.to_string());
    exec(&mut cmd)
}

fn component_path(ctx: &Ctx) -> Result<PathBuf> {
    crate::component::path(ctx)
}

/// The WIT package `wit/` as a binary package, for consumers that fetch or
/// vendor one file (`wasm-tools component wit <it>` prints the WIT again).
fn wit_package(ctx: &Ctx) -> Result<()> {
    let out = ctx.target_dir()?.join("mongo-wasi-driver.wasm");
    let mut cmd = Command::new(ctx.venv_bin("wasm-tools"));
    cmd.args(["component", "wit", "--wasm"])
        .arg(ctx.root.join("wit"))
        .arg("-o")
        .arg(&out);
    exec(&mut cmd)?;
    let size = fs::metadata(&out)
        .map_err(|e| format!("{}: {e}", out.display()))?
        .len();
    println!(
        "  {}: {size} bytes, package mongo-wasi:driver@0.2.0",
        out.display()
    );
    Ok(())
}

/// Reads the component's WIT back with wasm-tools: proves it is a component exporting
/// the whole driver, not a core module or a build without the `component` feature.
/// The WASI 0.3 face exports `types` and the `-async` twins of the others, and
/// its I/O methods must read back as `async func`.
fn check_component(ctx: &Ctx, face: &crate::component::Face) -> Result<()> {
    let wasm = crate::component::path_of(ctx, face)?;
    let is_async = face.file == crate::component::ASYNC.file;
    let interfaces: Vec<String> = INTERFACES
        .iter()
        .map(|i| match (is_async, *i) {
            (true, i) if i != "types" => format!("{i}-async"),
            (_, i) => i.to_string(),
        })
        .collect();
    let bytes = fs::read(&wasm).map_err(|e| format!("{}: {e}", wasm.display()))?;
    // `component wit` also decodes the WIT embedded in a core module: check the header.
    if !bytes.starts_with(b"\0asm\x0d\0\x01\0") {
        return Err(format!("{} is not a wasm component", wasm.display()));
    }
    let mut cmd = Command::new(ctx.venv_bin("wasm-tools"));
    cmd.args(["component", "wit"]).arg(&wasm);
    let wit = output(&mut cmd)?;
    // The world lists `export mongo-wasi:driver/client@0.1.0;` (imports would not do).
    let exported = |name: &str| {
        let export = format!("export mongo-wasi:driver/{name}");
        wit.lines().map(str::trim).any(|l| {
            l.strip_prefix(&export)
                .is_some_and(|rest| rest.starts_with(['@', ';']))
        })
    };
    let missing: Vec<&str> = interfaces
        .iter()
        .map(String::as_str)
        .filter(|i| !exported(i))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} lacks mongo-wasi:driver interfaces: {}",
            wasm.display(),
            missing.join(", ")
        ));
    }
    // `component wit` prints each package the component uses in a block of
    // its own (`package mongo-wasi:driver@0.2.0 { ... }`): count the driver's
    // async funcs, not those of the WASI 0.3 interfaces it imports.
    let driver = wit
        .split("\npackage ")
        .find(|p| p.starts_with("mongo-wasi:driver@"))
        .unwrap_or("");
    let asyncs = driver.matches(": async func(").count();
    if is_async && asyncs == 0 {
        return Err(format!("{} exports no async func", wasm.display()));
    }
    if !is_async && asyncs != 0 {
        return Err(format!("{} exports {asyncs} async funcs", wasm.display()));
    }
    let size = bytes.len();
    println!(
        "  {}: {size} bytes ({:.1} KB), exports mongo-wasi:driver/{{{}}}; {asyncs} async funcs",
        wasm.display(),
        size as f64 / 1024.0,
        interfaces.join(", ")
    );
    Ok(())
}
