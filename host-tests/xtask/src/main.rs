//! `cargo xtask <command>`: set up, build and test mongo-wasi with one command.
//!
//! std only, so that it compiles in seconds on a fresh machine.

mod bench;
mod cmap;
mod component;
mod examples;
mod imports;
mod layers;
mod node;
mod pbkdf2;
mod run;
mod server;
mod setup;
mod soak;
mod spec;
mod steps;
mod witasync;
mod witcheck;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

pub use run::{Ctx, Result};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  setup               install what the build needs (wasm32-wasip2 target, clang,
                      .work/venv with nx-27017, wasm-tools, pymongo); idempotent
  build               setup, then build the component, the notes example and the
                      host tests, check the component exports the driver, and
                      write the WIT as a binary package (target/mongo-wasi-driver.wasm);
                      check the component imports only allowed WASI interfaces; build
                      examples/consumer and examples/http-handler and compose each with
                      the component, and examples/http-handler-p3 (target/examples/*.wasm)
  demo                setup, build, then run examples/notes against a local nx-27017
  wit-check           count the WIT items without a doc comment (fails listing
                      them), have wasm-tools parse wit/, check both worlds (driver,
                      driver-async) and that wit/driver-async.wit is current
  wit-async           write wit/driver-async.wit, the async (WASI 0.3) twin of the
                      WIT interfaces, from the other files of wit/
  layers              check the layering rule of src/ (README, Layout): each import
                      reads top to bottom (component, API objects, engine, runtime,
                      sans-I/O core); fails naming each import that does not
  test                setup, then the WIT check, the layering rule, unit/spec tests, build, host tests against nx-27017,
                      proxy tests, the JavaScript host (examples/node), the composed
                      examples, a short soak, the WASI 0.3 probe and the CMAP format
                      tests (cmap), the unified spec suites (fails if a test on
                      host-tests/spec/expected-pass.txt does not pass), then bench --quick
  fuzz [--seconds N] [--target T]... [--seed S] [--execs N] [--repro FILE] [--list]
                      the in-repo fuzzer of the driver's parsers (wire frames, hello,
                      command replies, URI, SCRAM, DNS): N seconds per target
                      (default 60); fails on a finding (saved under
                      target/fuzz-findings with a command that reproduces it)
  node                setup, build, then examples/node: npm ci, transpile the component
                      with jco, and its tests in Node.js against nx-27017 and a silent
                      server (Node.js 20+ and npm must be installed)
  server start        start nx-27017 on a free 127.0.0.1 port and print its URI
  server stop [PORT]  stop that server, or every server started from .work
  bench [--quick] [--json PATH] [--svg PATH] [--no-native] [--no-nx] [--only S,..]
                      setup, build, then the driver benchmark (host-tests/src/bin/bench):
                      mongo-wasi vs the mongodb crate, PyMongo and a raw OP_MSG floor on
                      a fast in-memory server, pinned to one core; a table on stdout,
                      JSON (default target/bench/bench.json) and an SVG chart;
                      --only runs some sections: work, cold, deadline, churn, nx, footprint;
                      --only pbkdf2 (never by default) times SCRAM's PBKDF2 natively and in
                      wasm32-wasip2 (as shipped, +simd128, opt-level 3) under wasmtime
  spec SUITE... | --all [--json PATH] [--filter S] [--verbose] [--update-expected]
                      setup, build, then the unified-format spec tests through
                      spec-runner against a fresh nx-27017
  cmap [--filter S] [--json PATH]
                      the CMAP spec's cmap-format tests (33 files) through the WASI 0.3
                      face (host-tests/p3-cmap: the pool test face, threads as tasks)
                      against the failpoint proxy in front of nx-27017; per-file results,
                      JSON report (default target/cmap-report.json); fails on a failure
  examples [--requests N]
                      setup, build, then the composed examples through the wasmtime CLI:
                      the consumer command, and the wasi:http handlers under wasmtime serve
                      (their JSON API; requests/s, latency p50/p99, MongoDB connections and
                      commands per request, with and without instance reuse; a table of
                      400 requests 16 in flight on the 0.3 handler and on the 0.2 one)
  soak [--ops N] [--seconds S] [--seed N] [--json PATH] [--tolerance-ms MS]
                      setup, build, then the component through the failpoint proxy with
                      random faults and timeoutMS; fails on a trap, a lost or duplicate
                      write, or an overshoot beyond the tolerance";

/// Set by SIGINT/SIGTERM: the running child gets the signal too and exits, then the
/// remaining steps are skipped and servers are stopped on the way out.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

#[cfg(unix)]
fn catch_interrupts() {
    use std::os::raw::c_int;
    extern "C" fn on_signal(_: c_int) {
        INTERRUPTED.store(true, Ordering::SeqCst);
    }
    extern "C" {
        fn signal(signum: c_int, handler: extern "C" fn(c_int)) -> usize;
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe. A caught
    // signal is reset to its default on exec, so children still die on Ctrl-C.
    unsafe {
        signal(2, on_signal); // SIGINT
        signal(15, on_signal); // SIGTERM
    }
}

#[cfg(not(unix))]
fn catch_interrupts() {}

fn main() -> ExitCode {
    catch_interrupts();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ctx = Ctx::locate();
    let result = match args.as_slice() {
        ["setup"] => steps::setup(&ctx),
        ["build"] => steps::build(&ctx),
        ["demo"] => steps::demo(&ctx),
        ["test"] => steps::test(&ctx),
        ["wit-check"] => steps::wit_check(&ctx),
        ["wit-async"] => witasync::write(&ctx.root.join("wit")),
        ["layers"] => steps::layers(&ctx),
        ["node"] => node::node(&ctx),
        ["server", "start"] => server::start_detached(&ctx),
        ["server", "stop"] => server::stop_all(&ctx),
        ["server", "stop", port] => match port.parse() {
            Ok(port) => server::stop_port(&ctx, port),
            Err(_) => Err(format!("not a port: {port}")),
        },
        ["bench", rest @ ..] => bench::bench(&ctx, rest),
        ["spec", rest @ ..] => spec::spec(&ctx, rest),
        ["cmap", rest @ ..] => cmap::cmap(&ctx, rest),
        ["fuzz", rest @ ..] => steps::fuzz(&ctx, rest),
        ["soak", rest @ ..] => soak::soak(&ctx, rest),
        ["examples", rest @ ..] => examples::examples(&ctx, rest),
        [] | ["help" | "-h" | "--help"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("unknown command: {}\n\n{USAGE}", args.join(" "));
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) if !interrupted() => ExitCode::SUCCESS,
        Ok(()) => ExitCode::from(130),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(if interrupted() { 130 } else { 1 })
        }
    }
}
