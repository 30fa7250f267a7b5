//! The benchmark harness behind `cargo xtask bench`: mongo-wasi (through its
//! WIT exports under wasmtime), the `mongodb` crate on tokio, PyMongo and the
//! floor (a raw OP_MSG round trip) interleaved against one fast in-memory
//! server (`host_tests::bench_server`), plus cold start, deadline accuracy,
//! connection churn and footprint. Prints a table; writes JSON and an SVG chart.
//!
//! Timing belongs here, not in a test: nothing here asserts a threshold.

mod calls;
mod concurrent;
mod contenders;
mod distant;
mod report;
mod workload;

use contenders::{Cmd, Contender, External, Floor, Wasi, WasiAsync, WasmFloor};
use host_tests::bench_server::{self, BenchServer};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workload::{Data, Sample, Workload};

const USAGE: &str = "usage: bench --data DIR [--quick] [--json PATH] [--svg PATH] \
[--native BIN] [--python PY --pyscript PATH] [--nx URI] [--pinned TEXT] \
[--only SECTION,..] (sections: work, cold, deadline, churn, concurrent, nx, footprint, distant) \
[--p3-bench WASM --wasmtime BIN] [--workloads W,...] \
[--rounds N] [--contenders NAME,...] [--count-calls] [--call-cost]";

#[derive(Default)]
struct Args {
    quick: bool,
    data: PathBuf,
    json: Option<PathBuf>,
    svg: Option<PathBuf>,
    native: Option<PathBuf>,
    python: Option<(PathBuf, PathBuf)>,
    nx: Option<String>,
    pinned: Option<String>,
    /// Only run the in-memory server (for debugging a contender against it).
    serve: bool,
    /// Only these workloads of the `work` section (a narrow before/after
    /// comparison while optimising).
    workloads: Option<Vec<String>>,
    rounds: Option<usize>,
    /// Only these contenders (profiling one alone; all when absent).
    contenders: Option<Vec<String>>,
    /// Count mongo-wasi's WASI calls per operation instead of timing (calls.rs).
    count_calls: bool,
    /// Time one export call and one WASI call of each kind (the wasm floor's
    /// `calls` export), under the sync and the async host.
    call_cost: bool,
    /// Only these sections (all when empty).
    only: Vec<String>,
    /// The concurrency section's WASI 0.3 guest (host-tests/p3-bench) and
    /// the wasmtime CLI that runs it; the section is skipped without them.
    p3_bench: Option<PathBuf>,
    wasmtime: Option<PathBuf>,
}

impl Args {
    fn runs(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args::default();
    let mut python = None;
    let mut pyscript = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--call-cost" => a.call_cost = true,
            "--serve" => a.serve = true,
            "--data" => a.data = val()?.into(),
            "--json" => a.json = Some(val()?.into()),
            "--svg" => a.svg = Some(val()?.into()),
            "--native" => a.native = Some(val()?.into()),
            "--python" => python = Some(PathBuf::from(val()?)),
            "--pyscript" => pyscript = Some(PathBuf::from(val()?)),
            "--nx" => a.nx = Some(val()?),
            "--pinned" => a.pinned = Some(val()?),
            "--workloads" => a.workloads = Some(val()?.split(',').map(str::to_string).collect()),
            "--rounds" => a.rounds = Some(val()?.parse()?),
            "--contenders" => a.contenders = Some(val()?.split(',').map(str::to_string).collect()),
            "--count-calls" => a.count_calls = true,
            "--only" => a.only = val()?.split(',').map(str::to_string).collect(),
            "--p3-bench" => a.p3_bench = Some(val()?.into()),
            "--wasmtime" => a.wasmtime = Some(val()?.into()),
            _ => anyhow::bail!("unknown argument {arg}\n{USAGE}"),
        }
    }
    if let (Some(p), Some(s)) = (python, pyscript) {
        a.python = Some((p, s));
    }
    anyhow::ensure!(
        !a.data.as_os_str().is_empty(),
        "--data is required\n{USAGE}"
    );
    Ok(a)
}

/// Everything measured, keyed for the report.
#[derive(Default)]
pub struct Results {
    pub quick: bool,
    pub pinned: Option<String>,
    /// workload -> contender -> samples (one per iteration).
    pub work: BTreeMap<String, BTreeMap<String, Vec<Sample>>>,
    /// The same, against nx-27017.
    pub nx: BTreeMap<String, BTreeMap<String, Vec<Sample>>>,
    pub bytes_per_iter: BTreeMap<String, f64>,
    /// contender -> cold start seconds, one per try.
    pub cold: BTreeMap<String, Vec<f64>>,
    /// mongo-wasi's cold start phases (instantiate, connect, first findOne), us, per try.
    pub cold_phases: Vec<Vec<f64>>,
    /// contender -> handshake round trips before the first command, per new connection.
    pub round_trips: BTreeMap<String, Vec<u32>>,
    /// contender -> timeoutMS -> elapsed ms per operation.
    pub deadline: BTreeMap<String, BTreeMap<u64, Vec<f64>>>,
    /// contender -> (ops, new connections, seconds).
    pub churn: BTreeMap<String, (usize, u64, f64)>,
    pub component_bytes: u64,
    /// instances -> host RSS growth per instance, bytes.
    pub memory_per_instance: BTreeMap<usize, f64>,
    /// The concurrency section (concurrent.rs).
    pub concurrent: concurrent::Figures,
    /// The distant section (distant.rs), and how long it took.
    pub distant: distant::Figures,
    /// The distant section's bandwidth-limited case.
    pub bandwidth: distant::Bandwidth,
    pub distant_seconds: f64,
    pub errors: Vec<String>,
}

fn externals(a: &Args, uri: &str) -> Vec<Box<dyn Contender>> {
    let mut out: Vec<Box<dyn Contender>> = Vec::new();
    if let Some(bin) = &a.native {
        let mut c = Command::new(bin);
        c.arg(uri).arg(&a.data);
        match External::start("mongodb-rust", c) {
            Ok(c) => out.push(Box::new(c)),
            Err(e) => eprintln!("bench: skipping the mongodb crate: {e}"),
        }
    }
    if let Some((py, script)) = &a.python {
        let mut c = Command::new(py);
        c.arg(script).arg(uri).arg(&a.data);
        match External::start("pymongo", c) {
            Ok(c) => out.push(Box::new(c)),
            Err(e) => eprintln!("bench: skipping PyMongo: {e}"),
        }
    }
    out
}

/// Runs `cmds` on every contender, `rounds` times, rotating the order each round
/// so no contender always goes first (interleaved: a noisy second hits all alike).
fn interleave(
    contenders: &mut [Box<dyn Contender + '_>],
    cmds: &[(String, Cmd)],
    rounds: usize,
    into: &mut BTreeMap<String, BTreeMap<String, Vec<Sample>>>,
    errors: &mut Vec<String>,
) {
    let n = contenders.len();
    for round in 0..rounds {
        for (key, cmd) in cmds {
            for k in 0..n {
                let c = &mut contenders[(k + round) % n];
                match c.run(*cmd) {
                    Ok(Some(s)) => into
                        .entry(key.clone())
                        .or_default()
                        .entry(c.name().to_string())
                        .or_default()
                        .push(s),
                    Ok(None) => {}
                    Err(e) => {
                        let msg = format!("{} {key}: {e:#}", c.name());
                        eprintln!("bench: {msg}");
                        errors.push(msg);
                    }
                }
            }
        }
        eprintln!("bench: round {}/{rounds} done", round + 1);
    }
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    let data = Data::load(&a.data)?;
    let mut r = Results {
        quick: a.quick,
        pinned: a.pinned.clone(),
        ..Results::default()
    };
    let started = Instant::now();
    let corpus = bench_server::corpus(&data.tweet, 10_000);
    let server = BenchServer::start(bench_server::Config {
        corpus: Arc::new(corpus),
        slow: Duration::from_millis(1_000),
        late: Duration::from_millis(5),
    })?;
    let uri = format!("mongodb://{}/", server.addr);
    eprintln!("bench: in-memory server at {uri}");
    if a.serve {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }

    // Load (and compile, if not cached) the component before anything is timed.
    let _ = host_tests::driver_pre();
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 10 });
    let wanted = |key: &str| {
        a.workloads
            .as_ref()
            .is_none_or(|o| o.iter().any(|w| w == key))
    };
    if a.count_calls {
        return count_calls(server.addr, &data, &wanted);
    }
    if a.call_cost {
        return call_cost(server.addr);
    }

    // ---- the workloads, interleaved
    {
        let mut cs: Vec<Box<dyn Contender + '_>> = vec![
            Box::new(Wasi::new(server.addr, &data)?),
            Box::new(WasiAsync::new(server.addr, &data)?),
            Box::new(Floor::new(server.addr, &data)?),
        ];
        for async_host in [false, true] {
            match WasmFloor::new(server.addr, async_host) {
                Ok(f) => cs.push(Box::new(f)),
                Err(e) => r.errors.push(format!(
                    "no wasm-floor contender ({e:#}); build it with \
                     `cargo build --target wasm32-wasip2 --release -p wasm-floor`"
                )),
            }
        }
        cs.extend(externals(&a, &uri));
        if let Some(names) = &a.contenders {
            cs.retain(|c| names.iter().any(|n| n == c.name()));
        }
        let mut cmds: Vec<(String, Cmd)> = Vec::new();
        for w in workload::ALL.into_iter().filter(|w| wanted(w.name())) {
            let ops = w.ops(a.quick);
            if a.quick && matches!(w, Workload::GridfsUpload | Workload::GridfsDownload) {
                // 50 MB each way: a single round in --quick.
            }
            cmds.push((w.name().to_string(), Cmd::Work(w, ops)));
            r.bytes_per_iter
                .insert(w.name().to_string(), w.unit_bytes() * ops as f64);
        }
        for set in ["flat", "deep", "full"] {
            let size = data
                .bson_sets
                .iter()
                .find(|(n, _, _)| *n == set)
                .map(|x| x.2)
                .unwrap_or(0);
            for op in ["encode", "decode"] {
                let ops = if a.quick { 1_000 } else { 10_000 };
                let what: &'static str = Box::leak(format!("{op}_{set}").into_boxed_str());
                let key = format!("bson_{what}");
                if !wanted(&key) {
                    continue;
                }
                r.bytes_per_iter.insert(key.clone(), (size * ops) as f64);
                cmds.push((key, Cmd::Bson(what, ops)));
            }
        }
        // Warm up once (connections, caches, the Python imports), untimed.
        let mut warm = BTreeMap::new();
        let warm_cmds: Vec<(String, Cmd)> = cmds
            .iter()
            .filter(|(_, c)| matches!(c, Cmd::Work(w, _) if w.per_op()))
            .map(|(k, c)| match c {
                Cmd::Work(w, ops) => (k.clone(), Cmd::Work(*w, (*ops / 10).max(1))),
                c => (k.clone(), *c),
            })
            .collect();
        if a.runs("work") {
            interleave(&mut cs, &warm_cmds, 1, &mut warm, &mut r.errors);
            interleave(&mut cs, &cmds, rounds, &mut r.work, &mut r.errors);
        }

        // ---- cold start
        let tries = match (a.runs("cold"), a.quick) {
            (false, _) => 0,
            (true, true) => 5,
            (true, false) => 20,
        };
        for _ in 0..tries {
            for c in cs.iter_mut() {
                server.take_round_trips_before_first();
                match c.run(Cmd::Cold) {
                    Ok(Some(s)) => {
                        r.cold.entry(c.name().into()).or_default().push(s.total_s);
                        if c.name() == report::WASI && s.per_op_us.len() == 3 {
                            r.cold_phases.push(s.per_op_us);
                        }
                        r.round_trips
                            .entry(c.name().into())
                            .or_default()
                            .extend(server.take_round_trips_before_first());
                    }
                    Ok(None) => {}
                    Err(e) => r.errors.push(format!("{} cold: {e:#}", c.name())),
                }
            }
        }

        // ---- deadline accuracy: a server that ignores maxTimeMS
        let ops = if a.quick { 20 } else { 200 };
        for t in [20u64, 50, 100, 250] {
            if !a.runs("deadline") {
                break;
            }
            for c in cs.iter_mut() {
                match c.run(Cmd::Deadline(ops, t)) {
                    Ok(Some(s)) => {
                        let ms = s.per_op_us.iter().map(|us| us / 1000.0).collect();
                        r.deadline.entry(c.name().into()).or_default().insert(t, ms);
                    }
                    Ok(None) => {}
                    Err(e) => r.errors.push(format!("{} deadline {t}: {e:#}", c.name())),
                }
            }
            eprintln!("bench: deadline accuracy at timeoutMS={t} done");
        }

        // ---- churn: a server that honours maxTimeMS, its reply 5 ms after it
        let ops = if a.quick { 100 } else { 1_000 };
        for c in cs.iter_mut().filter(|_| a.runs("churn")) {
            // One operation first, not counted: a connection the deadline
            // section left with a reply still due (the server that ignores
            // maxTimeMS) may be replaced here, which is not churn.
            if let Err(e) = c.run(Cmd::Churn(1, 20)) {
                r.errors.push(format!("{} churn warm-up: {e:#}", c.name()));
            }
            let before = server.accepted();
            match c.run(Cmd::Churn(ops, 20)) {
                Ok(Some(s)) => {
                    let opened = server.accepted() - before;
                    r.churn.insert(c.name().into(), (ops, opened, s.total_s));
                }
                Ok(None) => {}
                Err(e) => r.errors.push(format!("{} churn: {e:#}", c.name())),
            }
        }
        eprintln!("bench: churn done");
    }

    // ---- concurrency: one client under 16 operations at once (WASI 0.3)
    if a.runs("concurrent") {
        match (&a.p3_bench, &a.wasmtime) {
            (Some(guest), Some(wasmtime)) => {
                let setup = concurrent::Setup {
                    wasmtime,
                    guest,
                    native: a.native.as_deref(),
                    data_dir: &a.data,
                    quick: a.quick,
                    iterations: rounds,
                };
                if let Err(e) = concurrent::run(&setup, &server, &data, &mut r) {
                    r.errors.push(format!("concurrent: {e:#}"));
                }
            }
            _ => r.errors.push(
                "concurrent: skipped (needs --p3-bench WASM and --wasmtime BIN; \
                 `cargo xtask bench` passes them)"
                    .into(),
            ),
        }
    }

    // ---- a distant server: cold requests through a delaying relay. Not in
    // --quick unless asked for by name (CI's smoke run stays short).
    if a.only.iter().any(|s| s == "distant") || (a.only.is_empty() && !a.quick) {
        let setup = distant::Setup {
            native: a.native.as_deref(),
            python: a.python.as_ref().map(|(p, s)| (p.as_path(), s.as_path())),
            data_dir: &a.data,
            tweet: &data.tweet,
            runs: a.rounds.unwrap_or(if a.quick { 3 } else { 5 }),
            p3: a
                .p3_bench
                .as_deref()
                .zip(a.wasmtime.as_deref())
                .map(|(g, w)| (w, g)),
        };
        if let Err(e) = distant::run(&setup, &server, &mut r) {
            r.errors.push(format!("distant: {e:#}"));
        }
    }

    // ---- the latency set against nx-27017, for reference
    if let (Some(nx), true) = (&a.nx, a.runs("nx")) {
        match nx_reference(nx, &a, &data, rounds.min(3), &mut r) {
            Ok(()) => {}
            Err(e) => r.errors.push(format!("nx-27017 reference: {e:#}")),
        }
    }

    // ---- footprint
    r.component_bytes = std::fs::metadata(host_tests::component_path())
        .map(|m| m.len())
        .unwrap_or(0);
    for n in [1usize, 50].into_iter().filter(|_| a.runs("footprint")) {
        match footprint(server.addr, n) {
            Ok(per) => {
                r.memory_per_instance.insert(n, per);
            }
            Err(e) => r.errors.push(format!("footprint {n}: {e:#}")),
        }
    }

    report::print(&r);
    let json = report::json(&r);
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")?;
        eprintln!("bench: wrote {}", path.display());
    }
    if let Some(path) = &a.svg {
        std::fs::write(path, report::svg(&json))?;
        eprintln!("bench: wrote {}", path.display());
    }
    eprintln!(
        "bench: finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    drop(server);
    Ok(())
}

fn nx_reference(
    uri: &str,
    a: &Args,
    data: &Data,
    rounds: usize,
    r: &mut Results,
) -> anyhow::Result<()> {
    let addr: std::net::SocketAddr = uri
        .trim_start_matches("mongodb://")
        .split(['/', '?'])
        .next()
        .unwrap_or_default()
        .parse()?;
    // nx-27017 needs the corpus: the floor inserts it (10,000 tweets, _id 1..).
    let mut floor = Floor::new(addr, data)?;
    floor.preload(&data.tweet, 10_000)?;
    let mut cs: Vec<Box<dyn Contender + '_>> =
        vec![Box::new(Wasi::new(addr, data)?), Box::new(floor)];
    cs.extend(externals(a, uri));
    let cmds: Vec<(String, Cmd)> = workload::LATENCY
        .iter()
        .map(|w| {
            (
                w.name().to_string(),
                Cmd::Work(*w, if a.quick { 200 } else { 1_000 }),
            )
        })
        .collect();
    interleave(&mut cs, &cmds, rounds, &mut r.nx, &mut r.errors);
    Ok(())
}

/// `--count-calls`: each wanted workload once (after a warm-up), with its
/// WASI calls per operation (per iteration for whole-iteration workloads).
fn count_calls(
    addr: std::net::SocketAddr,
    data: &Data,
    wanted: &dyn Fn(&str) -> bool,
) -> anyhow::Result<()> {
    calls::install()?;
    let mut wasi = Wasi::new(addr, data)?;
    for w in workload::ALL.into_iter().filter(|w| wanted(w.name())) {
        let ops = if w.per_op() {
            100.min(w.ops(false))
        } else {
            w.ops(false)
        };
        wasi.run(Cmd::Work(w, ops))?;
        calls::take();
        wasi.run(Cmd::Work(w, ops))?;
        let counts = calls::take();
        let per = if w.per_op() { ops as f64 } else { 1.0 };
        let total: u64 = counts.values().sum();
        println!(
            "{:<18} {:>8.1} WASI calls per {}",
            w.name(),
            total as f64 / per,
            if w.per_op() { "operation" } else { "iteration" }
        );
        for (name, n) in &counts {
            println!("    {:>8.2}  {name}", *n as f64 / per);
        }
    }
    Ok(())
}

/// `--call-cost`: what an export call costs, and a WASI call of each kind
/// made from inside one, in ns (medians of 11 timings of 20,000).
fn call_cost(addr: std::net::SocketAddr) -> anyhow::Result<()> {
    const N: u32 = 20_000;
    for async_host in [false, true] {
        let mut f = WasmFloor::new(addr, async_host)?;
        let mut time = |which: &str, n: u32, calls: u32| -> anyhow::Result<f64> {
            let mut v = Vec::new();
            for _ in 0..11 {
                let t = Instant::now();
                for _ in 0..calls {
                    f.calls(which, n)?;
                }
                v.push(t.elapsed().as_secs_f64() * 1e9);
            }
            Ok(report::quantile(&v, 0.5))
        };
        let export = time("clock", 0, N)? / N as f64;
        let clock = time("clock", N, 1)? / N as f64;
        let read = time("read", N, 1)? / N as f64;
        println!(
            "{:<16} export call {export:.0} ns; inside one: monotonic-clock.now {clock:.0} ns, \
             an empty input-stream.read {read:.0} ns",
            if async_host {
                "async host"
            } else {
                "sync host"
            }
        );
    }
    Ok(())
}

/// Host RSS growth per instance with a connected client (one ping done).
fn footprint(addr: std::net::SocketAddr, n: usize) -> anyhow::Result<f64> {
    let before = rss_bytes();
    let mut keep = Vec::with_capacity(n);
    for _ in 0..n {
        let mut g = host_tests::guest::Guest::new(&[addr])?;
        let client = g
            .connect(&format!("mongodb://{addr}/"), None, false)?
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let db = g.database(client, "admin", None)?;
        g.run_command(db, &bson::rawdoc! { "ping": 1 }, None)?
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        keep.push(g);
    }
    let after = rss_bytes();
    drop(keep);
    Ok(after.saturating_sub(before) as f64 / n as f64)
}
