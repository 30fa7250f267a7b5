//! `cargo xtask soak`: the soak binary (host-tests/src/bin/soak) against a throw-away
//! nx-27017; and its short form, a step of `cargo xtask test`.

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
a wrong read result or guest memory that keeps growing.";

/// The short form `cargo xtask test` runs: 300 operations or 60 s, whichever first.
const SHORT: [&str; 4] = ["--ops", "300", "--seconds", "60"];

/// Checks the options (so a typo fails before the build) and answers them unchanged.
pub fn parse(args: &[&str]) -> Result<Vec<String>> {
    let mut it = args.iter();
    while let Some(&arg) = it.next() {
        match arg {
            "--verbose" => {}
            "--ops" | "--seconds" | "--seed" | "--tolerance-ms" | "--guest-memory-cap-mb" => {
                let v = it.next().ok_or(format!("{arg} needs a value\n\n{USAGE}"))?;
                v.parse::<u64>()
                    .map_err(|e| format!("{arg} {v}: {e}\n\n{USAGE}"))?;
            }
            "--json" => {
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
    run_soak(ctx, &args)
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
    }
}
