//! `cargo xtask cmap`: the CMAP spec's cmap-format tests through the WASI 0.3
//! face (host-tests/p3-cmap, a 0.3 command whose tasks are the tests'
//! threads), against the failpoint proxy in front of a throw-away nx-27017;
//! and the step of `cargo xtask test`.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::run::{exec, Ctx, Result, Run};
use crate::server::{favoured, free_port, Server};

pub const STEP: &str = "test: the CMAP spec's cmap-format tests through the WASI 0.3 face \
     (p3-cmap: pool test face, threads as tasks, fail points through the proxy)";

pub const USAGE: &str = "usage: cargo xtask cmap [--filter SUBSTR] [--json PATH]";

/// The spec tests' directory: `MONGO_WASI_SPEC_TESTS`, else `<repo>/../shared/spec-tests`.
fn tests_dir(ctx: &Ctx) -> Result<PathBuf> {
    let root = match std::env::var_os("MONGO_WASI_SPEC_TESTS") {
        Some(dir) => PathBuf::from(dir),
        None => ctx.root.join("../shared/spec-tests"),
    };
    let dir = root.join("connection-monitoring-and-pooling/tests/cmap-format");
    match dir.is_dir() {
        true => Ok(dir),
        false => Err(format!(
            "no CMAP spec tests at {}: point MONGO_WASI_SPEC_TESTS at the specifications \
             repository's source/",
            dir.display()
        )),
    }
}

pub fn cmap(ctx: &Ctx, args: &[&str]) -> Result<()> {
    let (mut filter, mut json) = (String::new(), None);
    let mut it = args.iter();
    while let Some(&arg) = it.next() {
        let mut value = || {
            it.next()
                .map(|v| v.to_string())
                .ok_or(format!("{arg} needs a value\n{USAGE}"))
        };
        match arg {
            "--filter" => filter = value()?,
            "--json" => json = Some(PathBuf::from(value()?)),
            _ => return Err(format!("unknown option {arg}\n{USAGE}")),
        }
    }
    let mut run = Run::new("cmap");
    let _ = run.step(STEP, || run_tests(ctx, &filter, json));
    run.finish()
}

/// The step of `cargo xtask test`: every file, the report at target/cmap-report.json.
pub fn step(ctx: &Ctx) -> Result<()> {
    run_tests(ctx, "", None)
}

/// Kills the proxy (by its PID) however the run ends.
struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_tests(ctx: &Ctx, filter: &str, json: Option<PathBuf>) -> Result<()> {
    let dir = tests_dir(ctx)?;
    let target = ctx.target_dir()?.to_path_buf();
    let wasm = ctx.build_p3_guest("host-tests/p3-cmap", "p3_cmap.wasm")?;
    exec(&mut ctx.cargo(&[
        "build",
        "-p",
        "mongo-wasi-proxy",
        "--bin",
        "failpoint-proxy",
    ]))?;

    let server = Server::start(ctx)?;
    let port = free_port()?;
    let log = ctx.work.join(format!("cmap-proxy-{port}.log"));
    let log_file = fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = favoured(target.join("debug/failpoint-proxy"));
    cmd.arg("--backend")
        .arg(server.addr())
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
        .stderr(log_file);
    let proxy = Proxy(cmd.spawn().map_err(|e| format!("failpoint-proxy: {e}"))?);
    let ready = wait_listening(port);

    let started = Instant::now();
    let result = ready.and_then(|()| {
        let mut cmd = favoured(ctx.venv_bin("wasmtime"));
        cmd.args(["run", "-S", "cli", "-S", "inherit-network", "--dir"])
            .arg(format!("{}::/tests", dir.display()))
            .arg(&wasm)
            .args([&port.to_string(), "/tests", filter])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        println!("  $ {}", crate::run::show(&cmd));
        cmd.output()
            .map_err(|e| format!("wasmtime: {e}"))
            .map(|out| {
                (
                    out.status,
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                )
            })
    });
    drop(proxy);
    let stopped = server.stop();
    let (status, stdout) = result?;
    stopped?;
    let seconds = started.elapsed().as_secs_f64();

    let results: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .collect();
    for line in stdout.lines().filter(|l| !l.starts_with("RESULT ")) {
        println!("  {line}");
    }
    let field = |r: &str, key: &str| crate::run::json_str(r, key).unwrap_or_default();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for r in &results {
        let outcome = field(r, "outcome");
        match outcome.as_str() {
            "pass" => passed += 1,
            "skip" => skipped += 1,
            _ => failed += 1,
        }
        let reason = match outcome.as_str() {
            "pass" => String::new(),
            _ => format!(": {}", field(r, "reason")),
        };
        println!("  {outcome:<4} {}{reason}", field(r, "file"));
    }
    println!(
        "  cmap-format: {passed} passed, {failed} failed, {skipped} skipped in {seconds:.1} s"
    );
    let report = json.unwrap_or_else(|| target.join("cmap-report.json"));
    let body = format!(
        "{{\"face\":\"wasi-0.3\",\"passed\":{passed},\"failed\":{failed},\"skipped\":{skipped},\
         \"seconds\":{seconds:.1},\"tests\":[\n{}\n]}}\n",
        results.join(",\n")
    );
    fs::write(&report, body).map_err(|e| format!("{}: {e}", report.display()))?;
    println!("  report: {}", report.display());
    if results.is_empty() {
        return Err("the runner reported no test".into());
    }
    if failed > 0 || !status.success() {
        return Err(format!("{failed} CMAP test(s) failed (runner: {status})"));
    }
    Ok(())
}

/// Waits (at most 10 s) until the proxy accepts connections.
fn wait_listening(port: u16) -> Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "failpoint-proxy not listening on {addr} after 10 s"
    ))
}
