//! Runs the MongoDB unified-format spec tests against the mongo-wasi component.
//!
//! ```text
//! spec-runner --backend 127.0.0.1:PORT (--suite DIR ... | --all) [--json PATH]
//!             [--filter SUBSTR] [--verbose] [--skips PATH] [--expected PATH]
//!             [--update-expected PATH] [--update-expected-auth-tls PATH]
//!             [--test-timeout SECS] [--loop-ms MS] [--auth] [--tls] [--only-expected]
//!             [--compressors LIST]
//! ```
//!
//! `--backend` is nx-27017; spec-runner puts failpoint proxies in front of it (a
//! standalone, a single-member replica set, a sharded cluster of two mongoses and a
//! load balancer; a test runs on the first of these its `runOnRequirements`
//! allow). With `--auth` the proxies require
//! authentication, every client authenticates as the runner's root user (unless its
//! `uriOptions` name another mechanism), and `runOnRequirements`' `auth` follows. With
//! `--tls` they terminate TLS and every client connects with `tls=true`, trusting the
//! run's generated CA. Without `--auth`, a second set of proxies with auth and TLS
//! runs the tests whose `runOnRequirements` need authentication (each test runs
//! once, on the first deployment that meets them; `deployment::place`). A suite is
//! a directory under the spec tests' root (`MONGO_WASI_SPEC_TESTS`, else
//! `<repo>/../shared/spec-tests`) or an absolute path. Exit status: 0 when the run completed (failing tests are
//! reported, not fatal), 1 when a test on the `--expected` list did not pass, 2 when
//! the run could not start. The list describes runs without `--auth` and `--tls`: with
//! either, a listed test that the configuration's `runOnRequirements` rule out (`auth:
//! false`) is reported as not applicable; one that fails still fails the run.
//! `--only-expected` runs just the tests on the `--expected` list (a second
//! configuration's check, in less time). `--update-expected` rewrites a list from the
//! passes on the run's own deployment, `--update-expected-auth-tls` one from those on
//! the auth+TLS one. `--compressors zstd,snappy,zlib` makes every client offer wire
//! compression (the proxies speak it as mongod does), the list rotated by one per
//! client so that each compressor is negotiated by a third of them.

use host_tests::unified::deployment::Deployments;
use host_tests::unified::report::{Report, Status};
use host_tests::unified::runner::{self, Config, ALL_SUITES};
use host_tests::unified::server_version;
use host_tests::unified::skips::{self, SkipList};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str =
    "usage: spec-runner --backend 127.0.0.1:PORT (--suite DIR ... | --all) [--json PATH] \
[--filter SUBSTR] [--verbose] [--skips PATH] [--expected PATH] [--update-expected PATH] \
[--update-expected-auth-tls PATH] [--test-timeout SECS] [--loop-ms MS] [--auth] [--tls] \
[--only-expected] [--compressors LIST]";

struct Cli {
    backend: SocketAddr,
    suites: Vec<String>,
    json: Option<PathBuf>,
    filter: Option<String>,
    verbose: bool,
    skips: PathBuf,
    expected: Option<PathBuf>,
    update_expected: Option<PathBuf>,
    update_expected_auth_tls: Option<PathBuf>,
    cap: Duration,
    loop_budget: Duration,
    auth: bool,
    tls: bool,
    only_expected: bool,
    compressors: Option<String>,
}

fn parse(args: &[String]) -> Result<Cli, String> {
    let root = host_tests::repo_root();
    let mut backend = None;
    let mut cli = Cli {
        backend: SocketAddr::from(([127, 0, 0, 1], 0)),
        suites: Vec::new(),
        json: None,
        filter: None,
        verbose: false,
        skips: root.join("host-tests/spec/skips.txt"),
        expected: None,
        update_expected: None,
        update_expected_auth_tls: None,
        cap: Duration::from_secs(60),
        loop_budget: Duration::from_millis(1000),
        auth: false,
        tls: false,
        only_expected: false,
        compressors: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--backend" => {
                let v = value()?;
                backend = Some(
                    v.parse::<SocketAddr>()
                        .map_err(|e| format!("--backend {v}: {e}"))?,
                );
            }
            "--suite" => cli.suites.push(value()?),
            "--all" => cli.suites.extend(ALL_SUITES.iter().map(|s| s.to_string())),
            "--json" => cli.json = Some(value()?.into()),
            "--filter" => cli.filter = Some(value()?),
            "--verbose" => cli.verbose = true,
            "--tls" => cli.tls = true,
            "--skips" => cli.skips = value()?.into(),
            "--expected" => cli.expected = Some(value()?.into()),
            "--update-expected" => cli.update_expected = Some(value()?.into()),
            "--update-expected-auth-tls" => cli.update_expected_auth_tls = Some(value()?.into()),
            "--test-timeout" => cli.cap = Duration::from_secs(number(value()?)?.max(1)),
            "--loop-ms" => cli.loop_budget = Duration::from_millis(number(value()?)?),
            "--auth" => cli.auth = true,
            "--only-expected" => cli.only_expected = true,
            "--compressors" => cli.compressors = Some(value()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    cli.backend = backend.ok_or("--backend is required")?;
    if cli.suites.is_empty() {
        return Err("name at least one --suite, or --all".into());
    }
    if cli.only_expected && cli.expected.is_none() {
        return Err("--only-expected needs --expected".into());
    }
    if cli.auth && cli.update_expected_auth_tls.is_some() {
        return Err(
            "--update-expected-auth-tls lists the auth+TLS deployment of a run \
                    without --auth"
                .into(),
        );
    }
    Ok(cli)
}

/// `MONGO_WASI_SPEC_TESTS`, else `<repo>/../shared/spec-tests`.
fn spec_root() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("MONGO_WASI_SPEC_TESTS") {
        let dir = PathBuf::from(dir);
        return match dir.is_dir() {
            true => Ok(dir),
            false => Err(format!(
                "MONGO_WASI_SPEC_TESTS={} is not a directory",
                dir.display()
            )),
        };
    }
    let shared = host_tests::repo_root().join("../shared/spec-tests");
    match shared.is_dir() {
        true => Ok(shared),
        false => Err(format!(
            "no spec tests: MONGO_WASI_SPEC_TESTS is not set and {} does not exist; \
             point MONGO_WASI_SPEC_TESTS at a checkout of the specifications repository's source/",
            shared.display()
        )),
    }
}

fn read_skips(path: &Path) -> Result<SkipList, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => SkipList::parse(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn read_expected(path: &Path) -> Result<BTreeSet<(String, String)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    skips::parse_expected(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Replaces the entries of the files this run covered with this run's passes on the
/// auth+TLS deployment (`auth_tls`) or on its own.
fn update_expected(path: &Path, report: &Report, auth_tls: bool) -> Result<usize, String> {
    let mut list = if path.exists() {
        read_expected(path)?
    } else {
        BTreeSet::new()
    };
    let covered: BTreeSet<&str> = report.results.iter().map(|r| r.file.as_str()).collect();
    list.retain(|(file, _)| !covered.contains(file.as_str()));
    list.extend(report.passed_on(auth_tls));
    let header = match auth_tls {
        true => skips::EXPECTED_AUTH_TLS_HEADER,
        false => skips::EXPECTED_HEADER,
    };
    std::fs::write(path, skips::format_expected(header, &list))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(list.len())
}

fn run(cli: &Cli) -> Result<bool, String> {
    let spec_root = spec_root()?;
    let skips = read_skips(&cli.skips)?;
    let expected = cli.expected.as_deref().map(read_expected).transpose()?;
    if let Some(list) = &cli.compressors {
        host_tests::unified::uri::set_compressors(list);
    }
    let mut deployment = Deployments::start(cli.backend, cli.auth, cli.tls)?;
    let v = deployment.main.info.version;
    println!(
        "spec-runner: {}{}{} (proxies report {}.{}.{} between tests, and per test the newest of {} to {} its requirements allow{}), spec tests in {}, {} skip-list entries, {} s per test",
        cli.backend,
        if cli.tls { " over TLS" } else { "" },
        match &cli.compressors {
            Some(list) => format!(", clients compressing with {list} (rotated)"),
            None => String::new(),
        },
        v[0],
        v[1],
        v[2],
        server_version::text(server_version::CANDIDATES[server_version::CANDIDATES.len() - 1]),
        server_version::text(server_version::CANDIDATES[0]),
        match (cli.auth, deployment.auth_tls.is_some()) {
            (true, _) => ", auth on",
            (false, true) => "; a second set with auth and TLS runs the tests that need auth",
            (false, false) => "",
        },
        spec_root.display(),
        skips.len(),
        cli.cap.as_secs()
    );
    let config = Config {
        spec_root,
        filter: cli.filter.clone(),
        verbose: cli.verbose,
        cap: cli.cap,
        loop_budget: cli.loop_budget,
        skips,
        only: expected.clone().filter(|_| cli.only_expected),
    };
    let started = Instant::now();
    let mut report = Report::default();
    for suite in &cli.suites {
        println!("==> {suite}");
        runner::run_suite(&mut deployment, &config, suite, &mut report)?;
    }
    if let Some(expected) = &expected {
        rerun_listed_failures(&mut deployment, &config, cli, expected, &mut report)?;
    }
    if let Some(path) = &cli.json {
        report.write_json(path)?;
        println!("    JSON report: {}", path.display());
    }
    for (path, auth_tls) in [
        (&cli.update_expected, false),
        (&cli.update_expected_auth_tls, true),
    ] {
        if let Some(path) = path {
            let n = update_expected(path, &report, auth_tls)?;
            println!("    wrote {} ({n} tests)", path.display());
        }
    }
    let ok = match &expected {
        Some(expected) => check_expected(cli, expected, &report),
        None => true,
    };
    // Last, for the record: each test once, with its deployment's result.
    print!("{}", report.summary());
    println!("    took {:.1} s", started.elapsed().as_secs_f64());
    Ok(ok)
}

/// Compares the run with the `--expected` list and prints what differs; false when a
/// listed test did not pass.
fn check_expected(cli: &Cli, expected: &BTreeSet<(String, String)>, report: &Report) -> bool {
    // A partial run answers for the suites it ran; with --filter, for the tests it ran.
    let suites: Vec<String> = cli
        .suites
        .iter()
        .map(|s| format!("{}/", s.trim_end_matches('/')))
        .collect();
    let ran: BTreeSet<(&str, &str)> = report
        .results
        .iter()
        .map(|r| (r.file.as_str(), r.test.as_str()))
        .collect();
    let in_scope = |file: &str, test: &str| match cli.filter {
        Some(_) => ran.contains(&(file, test)),
        None => suites.iter().any(|s| file.starts_with(s.as_str())),
    };
    // The list describes runs without --auth and --tls: in those, a test whose
    // runOnRequirements rule the configuration out (auth: false) is skipped, not lost.
    let unmet_ok = cli.auth || cli.tls;
    let c = report.compare(expected, &in_scope, unmet_ok);
    if !c.new.is_empty() {
        println!(
            "==> {} tests pass that are not on the expected-pass list:",
            c.new.len()
        );
        for t in &c.new {
            println!("    {t}");
        }
    }
    if !c.unmet.is_empty() {
        println!(
            "==> {} tests of the expected-pass list are ruled out by their runOnRequirements here:",
            c.unmet.len()
        );
        for t in &c.unmet {
            println!("    {t}");
        }
    }
    if c.regressions.is_empty() {
        let checked = expected.iter().filter(|(f, t)| in_scope(f, t)).count();
        println!(
            "==> all {} tests of the expected-pass list in this run passed{}",
            checked - c.unmet.len(),
            match c.unmet.len() {
                0 => String::new(),
                n => format!(" ({n} more not applicable)"),
            }
        );
        return true;
    }
    println!(
        "==> {} tests on the expected-pass list did not pass:",
        c.regressions.len()
    );
    for t in &c.regressions {
        println!("    {t}");
    }
    false
}

/// How many more times a listed test that failed runs, alone, before it counts as lost.
const RERUNS: usize = 2;

/// A timing test can lose to a loaded machine (the spec's own margins are a few ms): a test
/// on the expected-pass list that failed runs again, alone, up to `RERUNS` times. One that
/// then passes is kept as passed and printed as flaky with its first failure, never hidden.
fn rerun_listed_failures(
    deployment: &mut Deployments,
    config: &Config,
    cli: &Cli,
    expected: &BTreeSet<(String, String)>,
    report: &mut Report,
) -> Result<(), String> {
    let mut flaky = Vec::new();
    for attempt in 1..=RERUNS {
        let failed: BTreeSet<(String, String)> = report
            .results
            .iter()
            .filter(|r| r.status == Status::Failed)
            .map(|r| (r.file.clone(), r.test.clone()))
            .filter(|k| expected.contains(k))
            .collect();
        if failed.is_empty() {
            break;
        }
        println!(
            "==> rerun {attempt} of {RERUNS}: {} failed tests of the expected-pass list, alone",
            failed.len()
        );
        let config = Config {
            only: Some(failed),
            ..config.clone()
        };
        let mut again = Report::default();
        for suite in &cli.suites {
            runner::run_suite(deployment, &config, suite, &mut again)?;
        }
        for r in again.results.iter().filter(|r| r.status == Status::Passed) {
            if let Some(first) = report
                .results
                .iter_mut()
                .find(|f| f.file == r.file && f.test == r.test)
            {
                flaky.push(format!(
                    "{}: {} (passed on rerun {attempt}; first: {})",
                    r.file, r.test, first.reason
                ));
                first.status = Status::Passed;
                first.reason = format!("flaky: passed on rerun {attempt}");
            }
        }
    }
    if !flaky.is_empty() {
        println!(
            "==> {} flaky tests (failed, then passed alone):",
            flaky.len()
        );
        for t in &flaky {
            println!("    {t}");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let cli = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("spec-runner: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("spec-runner: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn auth_is_off_unless_asked_for() {
        let base = ["--backend", "127.0.0.1:1", "--suite", "crud/tests/unified"];
        assert!(!parse(&args(&base)).unwrap().auth);
        let with = parse(&args(&[&base[..], &["--auth"]].concat())).unwrap();
        assert!(with.auth);
        assert_eq!(with.suites, ["crud/tests/unified"]);
    }

    #[test]
    fn each_list_gets_the_passes_of_its_deployment_for_the_files_run() {
        use host_tests::unified::report::TestResult;
        let dir = std::env::temp_dir().join(format!("spec-update-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (plain, auth) = (dir.join("plain.txt"), dir.join("auth.txt"));
        // Before: a stale entry of a file this run covers, and one of a file it does not.
        std::fs::write(&plain, "a.json: gone\nz.json: kept\n").unwrap();
        std::fs::write(&auth, "h.json: gone too\n").unwrap();
        let mut report = Report::default();
        for (file, test, status, auth_tls) in [
            ("a.json", "plain pass", Status::Passed, false),
            ("a.json", "plain failure", Status::Failed, false),
            ("h.json", "auth pass", Status::Passed, true),
            ("h.json", "auth failure", Status::Failed, true),
        ] {
            report.add(TestResult {
                suite: "s".into(),
                file: file.into(),
                test: test.into(),
                status,
                reason: String::new(),
                millis: 0,
                auth_tls,
            });
        }
        assert_eq!(update_expected(&plain, &report, false).unwrap(), 2);
        assert_eq!(update_expected(&auth, &report, true).unwrap(), 1);
        let read = |p: &Path| read_expected(p).unwrap().into_iter().collect::<Vec<_>>();
        let pair = |f: &str, t: &str| (f.to_string(), t.to_string());
        assert_eq!(
            read(&plain),
            [pair("a.json", "plain pass"), pair("z.json", "kept")]
        );
        assert_eq!(read(&auth), [pair("h.json", "auth pass")]);
        let text = std::fs::read_to_string(&auth).unwrap();
        assert!(text.starts_with(skips::EXPECTED_AUTH_TLS_HEADER), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_auth_tls_list_is_for_runs_without_auth() {
        let base = ["--backend", "127.0.0.1:1", "--all"];
        let with = parse(&args(
            &[&base[..], &["--update-expected-auth-tls", "a.txt"]].concat(),
        ))
        .unwrap();
        assert_eq!(
            with.update_expected_auth_tls.as_deref(),
            Some(Path::new("a.txt"))
        );
        let e = parse(&args(
            &[
                &base[..],
                &["--auth", "--update-expected-auth-tls", "a.txt"],
            ]
            .concat(),
        ))
        .err()
        .unwrap();
        assert!(e.contains("without --auth"), "{e}");
    }

    #[test]
    fn only_expected_needs_the_list() {
        let base = ["--backend", "127.0.0.1:1", "--all", "--only-expected"];
        let e = parse(&args(&base)).err().unwrap();
        assert!(e.contains("needs --expected"), "{e}");
        let with = parse(&args(&[&base[..], &["--expected", "x.txt"]].concat())).unwrap();
        assert!(with.only_expected);
    }
}
