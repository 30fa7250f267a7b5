//! `cargo xtask soak`: the soak binary (host-tests/src/bin/soak) against a throw-away
//! nx-27017; and its short form, a step of `cargo xtask test`. With `--concurrency N`:
//! the concurrent soak instead (host-tests/src/bin/p3soak launching the WASI 0.3 guest
//! host-tests/p3-soak: one client, N operations in flight), whose short form runs in
//! the same step.

use crate::run::{exec, Ctx, Result, Run};
use crate::server::{favoured, Server};
use crate::setup;
use crate::steps;

pub const USAGE: &str = "\
usage: cargo xtask soak [--ops N] [--seconds S] [--seed N] [--json PATH] [--tolerance-ms MS]
                        [--guest-memory-cap-mb MB] [--verbose]
  --ops N              stop after N operations (default 1000 when --seconds is not given)
  --seconds S          stop after S seconds (with --ops: whichever comes first)
  --seed N             the PRNG seed (printed; a failing run names it)
  --json PATH          write the figures as JSON
  --tolerance-ms MS    how far past its timeoutMS an operation may return (default 100)
Fails on a trap, a lost or duplicate write, an overshoot beyond the tolerance, a hang,
a wrong read result or guest memory that keeps growing.

usage: cargo xtask soak --concurrency N [--ops N] [--seconds S] [--seed N] [--json PATH]
                        [--tolerance-ms MS] [--fault-every-ms LO-HI | --no-faults]
                        [--only OP,OP..]
  the concurrent soak: one WASI 0.3 client (the async core) with N operations in flight
  (reads, writes, transactions, cursors, cancellations) while faults hit the proxy
  (default 2000 operations; --tolerance-ms default 250). Fails on a trap, a lost,
  duplicate or phantom write, a leaked connection or session, a wrong read, a hang or
  an overshoot beyond the tolerance. JSON: .work/p3-soak-report.json unless --json.";

/// The short form `cargo xtask test` runs: 300 operations or 60 s, whichever first.
const SHORT: [&str; 4] = ["--ops", "300", "--seconds", "60"];
/// The concurrent soak's short form in the same step: 16 in flight, 600 operations or
/// 30 s of them, whichever first. Without transactions: under faults nx-27017 rolls
/// back an abandoned transaction's savepoint with every write made since, other
/// sessions' acknowledged ones included (gap "interleaved-transactions" of
/// host-tests/spec/nx-gaps.py reproduces it with PyMongo; host-tests/p3-soak/src/lib.rs,
/// `txn_busy`).
const SHORT_CONCURRENT: [&str; 8] = [
    "--concurrency",
    "16",
    "--ops",
    "600",
    "--seconds",
    "30",
    "--only",
    "insertOne,updateOne,deleteOne,find+getMore,find+drop,findOne,count,aggregate+getMore",
];

/// Checks the options (so a typo fails before the build) and answers them unchanged.
pub fn parse(args: &[&str]) -> Result<Vec<String>> {
    let mut it = args.iter();
    while let Some(&arg) = it.next() {
        match arg {
            "--verbose" | "--no-faults" => {}
            "--ops"
            | "--seconds"
            | "--seed"
            | "--tolerance-ms"
            | "--guest-memory-cap-mb"
            | "--concurrency" => {
                let v = it.next().ok_or(format!("{arg} needs a value\n\n{USAGE}"))?;
                v.parse::<u64>()
                    .map_err(|e| format!("{arg} {v}: {e}\n\n{USAGE}"))?;
            }
            "--json" | "--only" | "--fault-every-ms" => {
                it.next().ok_or(format!("{arg} needs a value\n\n{USAGE}"))?;
            }
            other => return Err(format!("unknown option {other}\n\n{USAGE}")),
        }
    }
    Ok(args.iter().map(|a| a.to_string()).collect())
}

pub fn soak(ctx: &Ctx, args: &[&str]) -> Result<()> {
    if args.iter().any(|a| matches!(*a, "--help" | "-h")) {
        println!("{USAGE}");
        return Ok(());
    }
    let args = parse(args)?;
    let mut run = Run::new("soak");
    if args.iter().any(|a| a == "--concurrency") {
        let _ = setup::steps(&mut run, ctx).and_then(|()| {
            run.step(
                "soak: one WASI 0.3 client, concurrent operations through the failpoint proxy",
                || run_concurrent(ctx, &args),
            )
        });
        return run.finish();
    }
    let _ = setup::steps(&mut run, ctx)
        .and_then(|()| steps::build_steps(&mut run, ctx))
        .and_then(|()| {
            run.step("soak: the component through the failpoint proxy", || {
                run_soak(ctx, &args)
            })
        });
    run.finish()
}

/// The step of `cargo xtask test`.
pub fn short_step(ctx: &Ctx) -> Result<()> {
    let mut args: Vec<String> = SHORT.iter().map(|a| a.to_string()).collect();
    let json = ctx.work.join("soak-report.json");
    args.extend(["--json".to_string(), json.display().to_string()]);
    let sequential = run_soak(ctx, &args);
    let mut args: Vec<String> = SHORT_CONCURRENT.iter().map(|a| a.to_string()).collect();
    let json = ctx.work.join("p3-soak-report.json");
    args.extend(["--json".to_string(), json.display().to_string()]);
    sequential.and(run_concurrent(ctx, &args))
}

/// Builds the guest (host-tests/p3-soak) and the launcher, then runs them.
fn run_concurrent(ctx: &Ctx, args: &[String]) -> Result<()> {
    let target = ctx.target_dir()?;
    let wasm = ctx.build_p3_guest("host-tests/p3-soak", "p3_soak.wasm")?;
    exec(&mut ctx.cargo(&["build", "-p", "host-tests", "--bin", "p3soak"]))?;
    let mut args = args.to_vec();
    if !args.iter().any(|a| a == "--json") {
        let json = ctx.work.join("p3-soak-report.json");
        args.extend(["--json".to_string(), json.display().to_string()]);
    }
    let server = Server::start(ctx)?;
    let mut cmd = favoured(target.join("debug/p3soak"));
    cmd.arg("--backend")
        .arg(server.addr())
        .arg("--wasm")
        .arg(&wasm)
        .arg("--wasmtime")
        .arg(ctx.venv_bin("wasmtime"))
        .args(args.iter().filter(|a| *a != "--verbose"));
    let result = exec(&mut cmd);
    result.and(server.stop())
}

fn run_soak(ctx: &Ctx, args: &[String]) -> Result<()> {
    let soak = ctx.target_dir()?.join("debug/soak");
    let server = Server::start(ctx)?;
    let mut cmd = favoured(soak);
    cmd.arg("--backend").arg(server.addr()).args(args);
    let result = exec(&mut cmd);
    result.and(server.stop())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_and_passed_on() {
        let args = ["--ops", "10", "--json", "r.json", "--seed", "7"];
        assert_eq!(parse(&args).unwrap(), args);
        assert!(parse(&["--ops"]).unwrap_err().contains("needs a value"));
        assert!(parse(&["--ops", "many"]).is_err());
        assert!(parse(&["--bogus"]).unwrap_err().contains("unknown option"));
        assert!(parse(&[]).unwrap().is_empty());
        assert!(parse(&["--concurrency", "16", "--seconds", "5"]).is_ok());
        assert!(parse(&["--concurrency"])
            .unwrap_err()
            .contains("needs a value"));
    }
}
