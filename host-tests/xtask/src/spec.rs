//! `cargo xtask spec`: the unified-format spec tests through `spec-runner`, against a
//! throw-away nx-27017; and the spec step of `cargo xtask test`.

use std::path::PathBuf;

use crate::run::{exec, Ctx, Result, Run};
use crate::server::Server;
use crate::setup;
use crate::steps;

/// The checked-in list of tests that must keep passing, relative to the repo root.
const EXPECTED: &str = "host-tests/spec/expected-pass.txt";
/// Tests that only an authenticated deployment can pass (their `runOnRequirements`
/// need authentication, e.g. handshake errors): a run without `--auth` runs them on
/// its auth+TLS deployment. Both runs of `cargo xtask test` check them with the plain list.
const EXPECTED_AUTH_TLS: &str = "host-tests/spec/expected-pass-auth-tls.txt";
/// Tests that pass through the WASI 0.3 face only (runOnThread), added to the
/// lists when a step runs that face.
const EXPECTED_ASYNC: &str = "host-tests/spec/expected-pass-async.txt";

/// The expected-pass lists a step through `face` checks, as one text.
fn expected_text(ctx: &Ctx, face: Face) -> Result<String> {
    let read = |p: &str| std::fs::read_to_string(ctx.root.join(p)).map_err(|e| format!("{p}: {e}"));
    let mut text = read(EXPECTED)? + "\n" + &read(EXPECTED_AUTH_TLS)?;
    if face == Face::Async {
        text = text + "\n" + &read(EXPECTED_ASYNC)?;
    }
    Ok(text)
}

pub const USAGE: &str = "\
usage: cargo xtask spec (<suite-dir>... | --all) [--json PATH] [--filter SUBSTR] [--verbose]
                        [--update-expected] [--auth] [--tls] [--compressors LIST]
                        [--async-face]
  Without --auth, the tests whose runOnRequirements need authentication run on a second
  set of proxies with auth and TLS: each test runs once, on a deployment that meets them.
  <suite-dir>          a directory under the spec tests (e.g. crud/tests/unified), or absolute
  --all                every unified-format suite
  --update-expected    rewrite host-tests/spec/expected-pass.txt from this run's passes (and
                       expected-pass-auth-tls.txt from those of the tests that need auth)
  --auth               proxies with auth on; every client authenticates as a root user
  --tls                the proxies terminate TLS; every client uses tls=true and trusts their CA
  --async-face         through the WASI 0.3 component (mongo-wasi-async.wasm, async exports)
                       instead of the WASI 0.2 one: spec-runner built with feature async-face

  --compressors LIST   every client offers wire compression (e.g. zstd,snappy,zlib), the list
                       rotated by one per client; the proxies compress as mongod does";

#[derive(Debug, Default, PartialEq)]
pub struct Args {
    suites: Vec<String>,
    all: bool,
    json: Option<String>,
    filter: Option<String>,
    verbose: bool,
    update_expected: bool,
    auth: bool,
    tls: bool,
    face: Face,
    compressors: Option<String>,
}

/// Which component spec-runner drives: each face has its own runner build.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Face {
    /// WASI 0.2, world `driver` (sync exports).
    #[default]
    Sync,
    /// WASI 0.3, world `driver-async` (async exports).
    Async,
}

impl Face {
    /// The runner's executable in the target dir.
    fn runner(self) -> &'static str {
        match self {
            Face::Sync => "debug/spec-runner",
            Face::Async => ASYNC_RUNNER,
        }
    }
}

/// spec-runner built with feature async-face, linked here from cargo's deps dir so
/// that it and the sync build (at debug/spec-runner) share one target dir.
const ASYNC_RUNNER: &str = "debug/spec-runner-async";

impl Args {
    pub fn parse(args: &[&str]) -> Result<Args> {
        let mut out = Args::default();
        let mut it = args.iter();
        while let Some(&arg) = it.next() {
            let mut value = || {
                it.next()
                    .map(|v| v.to_string())
                    .ok_or(format!("{arg} needs a value\n\n{USAGE}"))
            };
            match arg {
                "--all" => out.all = true,
                "--json" => out.json = Some(value()?),
                "--filter" => out.filter = Some(value()?),
                "--verbose" => out.verbose = true,
                "--update-expected" => out.update_expected = true,
                "--auth" => out.auth = true,
                "--tls" => out.tls = true,
                "--async-face" => out.face = Face::Async,
                "--compressors" => out.compressors = Some(value()?),
                flag if flag.starts_with("--") => {
                    return Err(format!("unknown option {flag}\n\n{USAGE}"))
                }
                suite => out.suites.push(suite.to_string()),
            }
        }
        if out.suites.is_empty() && !out.all {
            return Err(format!("name a suite directory, or --all\n\n{USAGE}"));
        }
        // The expected-pass list describes plain runs (auth: false tests skip with --auth,
        // and `cargo xtask test` checks the --auth --tls run against the same list).
        if (out.auth || out.tls || out.compressors.is_some()) && out.update_expected {
            return Err(format!(
                "--update-expected describes runs without --auth and --tls; drop one\n\n{USAGE}"
            ));
        }
        Ok(out)
    }

    /// spec-runner's arguments, after `--backend`.
    fn runner_args(&self, ctx: &Ctx) -> Vec<String> {
        let mut v = Vec::new();
        if self.all {
            v.push("--all".to_string());
        }
        for s in &self.suites {
            v.extend(["--suite".to_string(), s.clone()]);
        }
        for (flag, value) in [("--json", &self.json), ("--filter", &self.filter)] {
            if let Some(value) = value {
                v.extend([flag.to_string(), value.clone()]);
            }
        }
        if self.verbose {
            v.push("--verbose".into());
        }
        if self.auth {
            v.push("--auth".into());
        }
        if self.tls {
            v.push("--tls".into());
        }
        if let Some(list) = &self.compressors {
            v.extend(["--compressors".to_string(), list.clone()]);
        }
        if self.update_expected {
            for (flag, list) in [
                ("--update-expected", EXPECTED),
                ("--update-expected-auth-tls", EXPECTED_AUTH_TLS),
            ] {
                v.extend([flag.into(), ctx.root.join(list).display().to_string()]);
            }
        }
        v
    }
}

pub fn spec(ctx: &Ctx, args: &[&str]) -> Result<()> {
    if args.iter().any(|a| matches!(*a, "--help" | "-h")) {
        println!("{USAGE}");
        return Ok(());
    }
    let args = Args::parse(args)?;
    let mut run = Run::new("spec");
    let _ = setup::steps(&mut run, ctx)
        .and_then(|()| steps::build_steps(&mut run, ctx))
        .and_then(|()| {
            run.step("spec: unified-format tests against nx-27017", || {
                run_spec_runner(ctx, args.face, &args.runner_args(ctx))
            })
        });
    run.finish()
}

/// The spec steps of `cargo xtask test`: every suite, failing only when a test on the
/// expected-pass lists does not pass (spec-runner prints the new passes too). Run once
/// plain (the tests that need auth on its auth+TLS deployment) and once with `--auth
/// --tls`, as the drivers' CI does; there a listed test its `runOnRequirements` rule
/// out (`auth: false`) is skipped, while one that fails still fails the step.
pub fn expected_pass_step(ctx: &Ctx, secure: bool, face: Face) -> Result<()> {
    let report = match (secure, face) {
        (false, Face::Sync) => "spec-report.json",
        (true, Face::Sync) => "spec-report-auth-tls.json",
        (false, Face::Async) => "spec-report-async.json",
        (true, Face::Async) => "spec-report-async-auth-tls.json",
    };
    // One list for the runner: the plain one, then the auth-only one.
    let expected = ctx.work.join("expected-pass-with-auth-tls.txt");
    let text = expected_text(ctx, face)?;
    std::fs::write(&expected, text).map_err(|e| format!("{}: {e}", expected.display()))?;
    let mut args = vec![
        "--all".to_string(),
        "--expected".to_string(),
        expected.display().to_string(),
        "--json".to_string(),
        ctx.work.join(report).display().to_string(),
    ];
    // The second run checks the list only: its other tests (a third of the time,
    // failures waiting out deadlines) would tell nothing the plain run does not.
    if secure {
        args.extend(["--auth", "--tls", "--only-expected"].map(String::from));
    }
    run_spec_runner(ctx, face, &args)
}

pub const ASYNC_RUNNER_STEP: &str =
    "build: spec-runner for the WASI 0.3 face (feature async-face, target/debug/spec-runner-async)";

/// Builds spec-runner with feature async-face and links it at [`ASYNC_RUNNER`].
/// Cargo puts both builds at debug/spec-runner: the async one is linked away from
/// there, and the sync build (fresh, so a link only) put back.
pub fn build_async_runner(ctx: &Ctx) -> Result<()> {
    let args = [
        "build",
        "-p",
        "host-tests",
        "--features",
        "async-face",
        "--bin",
        "spec-runner",
        "--message-format",
        "json-render-diagnostics",
    ];
    println!("  $ cargo {}", args.join(" "));
    let json = crate::run::output(&mut ctx.cargo(&args))?;
    let built = json
        .lines()
        .filter(|l| l.contains("\"compiler-artifact\"") && l.contains("\"spec-runner\""))
        .find_map(|l| crate::run::json_str(l, "executable"))
        .ok_or("cargo named no spec-runner executable")?;
    let dest = ctx.target_dir()?.join(ASYNC_RUNNER);
    let _ = std::fs::remove_file(&dest);
    std::fs::hard_link(&built, &dest)
        .or_else(|_| std::fs::copy(&built, &dest).map(|_| ()))
        .map_err(|e| format!("{built} -> {}: {e}", dest.display()))?;
    exec(&mut ctx.cargo(&["build", "-p", "host-tests", "--bin", "spec-runner"]))
}

/// The third spec step of `cargo xtask test`: the expected-pass lists (only those
/// tests) through the WASI 0.3 face, with every client offering zstd, snappy and
/// zlib, rotated so that each is negotiated by a third of the clients (the Wire
/// Compression spec asks for the test suite run compressed). One run for both, to
/// stay within CI's time: compression lives in the core both faces share. Plain, as
/// the first run: the tests that need auth run on its auth+TLS deployment,
/// compressed too.
pub fn compressed_step(ctx: &Ctx, face: Face) -> Result<()> {
    let expected = ctx.work.join("expected-pass-compressed.txt");
    let text = expected_text(ctx, face)?;
    std::fs::write(&expected, text).map_err(|e| format!("{}: {e}", expected.display()))?;
    let args = [
        "--all",
        "--expected",
        &expected.display().to_string(),
        "--only-expected",
        "--compressors",
        "zstd,snappy,zlib",
        "--json",
        &ctx.work
            .join(match face {
                Face::Sync => "spec-report-compressed.json",
                Face::Async => "spec-report-async-compressed.json",
            })
            .display()
            .to_string(),
    ]
    .map(String::from);
    run_spec_runner(ctx, face, &args)
}

fn run_spec_runner(ctx: &Ctx, face: Face, args: &[String]) -> Result<()> {
    let runner: PathBuf = ctx.target_dir()?.join(face.runner());
    let server = Server::start(ctx)?;
    let mut cmd = crate::server::favoured(runner);
    cmd.arg("--backend").arg(server.addr()).args(args);
    let result = exec(&mut cmd);
    result.and(server.stop())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_and_flags() {
        let a = Args::parse(&["crud/tests/unified", "--json", "r.json", "--verbose"]).unwrap();
        assert_eq!(a.suites, ["crud/tests/unified"]);
        assert_eq!(a.json.as_deref(), Some("r.json"));
        assert!(a.verbose && !a.all);
        let ctx = Ctx::locate();
        let args = a.runner_args(&ctx);
        assert_eq!(
            args,
            [
                "--suite",
                "crud/tests/unified",
                "--json",
                "r.json",
                "--verbose"
            ]
        );
        let auth = Args::parse(&["auth/tests/unified", "--auth"]).unwrap();
        assert_eq!(
            auth.runner_args(&ctx),
            ["--suite", "auth/tests/unified", "--auth"]
        );
        let all = Args::parse(&["--all", "--update-expected"]).unwrap();
        let args = all.runner_args(&ctx);
        assert_eq!(args[0], "--all");
        assert_eq!(args[1], "--update-expected");
        assert!(args[2].ends_with("host-tests/spec/expected-pass.txt"));
        assert_eq!(args[3], "--update-expected-auth-tls");
        assert!(args[4].ends_with("host-tests/spec/expected-pass-auth-tls.txt"));
        assert_eq!(args.len(), 5);
        let tls = Args::parse(&["crud/tests/unified", "--tls"]).unwrap();
        assert_eq!(
            tls.runner_args(&ctx),
            ["--suite", "crud/tests/unified", "--tls"]
        );
    }

    #[test]
    fn refuses_nothing_to_run_and_unknown_options() {
        assert!(Args::parse(&[]).unwrap_err().contains("name a suite"));
        assert!(Args::parse(&["--bogus"])
            .unwrap_err()
            .contains("unknown option"));
        assert!(Args::parse(&["--json"])
            .unwrap_err()
            .contains("needs a value"));
        assert!(Args::parse(&["--all", "--auth", "--update-expected"])
            .unwrap_err()
            .contains("without --auth"));
        assert!(Args::parse(&["--all", "--tls", "--update-expected"])
            .unwrap_err()
            .contains("without --auth and --tls"));
        assert!(
            Args::parse(&["--all", "--compressors", "zlib", "--update-expected"])
                .unwrap_err()
                .contains("without --auth")
        );
        let zipped = Args::parse(&["--all", "--compressors", "zstd,zlib"]).unwrap();
        assert_eq!(
            zipped.runner_args(&Ctx::locate()),
            ["--all", "--compressors", "zstd,zlib"]
        );
        let both = Args::parse(&["--all", "--auth", "--tls"]).unwrap();
        assert_eq!(
            both.runner_args(&Ctx::locate()),
            ["--all", "--auth", "--tls"]
        );
    }
}
