//! The concurrency section (`--only concurrent`): WIDTH findOnes, then WIDTH
//! small insertOnes, at once on ONE client, round after round.
//!
//! mongo-wasi's side is a WASI 0.3 command (host-tests/p3-bench: the driver
//! with feature p3, one client, WIDTH spawned tasks in one instance) run by
//! the wasmtime CLI as a child process, so it inherits this process's core
//! (`taskset -c 0`) and times itself with the guest's monotonic clock; it is
//! precompiled once (`wasmtime compile`) and each iteration is one process
//! (connect, warm up untimed, then the timed rounds). The `mongodb` crate's
//! side is bench-native's `concurrent_*` command: WIDTH `tokio::spawn`ed
//! tasks on its current-thread runtime. Both pools have maxPoolSize=WIDTH.

use crate::contenders::{Cmd, Contender, External};
use crate::workload::{parse_reply, Data, Sample, Workload};
use crate::Results;
use host_tests::bench_server::BenchServer;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Operations at once.
pub const WIDTH: usize = 16;
/// mongo-wasi on WASI 0.3 (the wasmtime CLI), in the report.
pub const P3: &str = "mongo-wasi-p3";
pub const NATIVE: &str = "mongodb-rust";
/// The workloads, in the order the guest runs them.
pub const WORKLOADS: [Workload; 2] = [Workload::FindOne, Workload::InsertOneSmall];
/// Untimed rounds of each workload before the timed ones (both sides).
const WARM_ROUNDS: usize = 8;
/// How long one guest process may take before it is killed.
const GUEST_LIMIT: Duration = Duration::from_secs(120);

pub struct Setup<'a> {
    pub wasmtime: &'a Path,
    pub guest: &'a Path,
    pub native: Option<&'a Path>,
    /// The data directory (bench-native loads the small document from it).
    pub data_dir: &'a Path,
    pub quick: bool,
    /// Iterations, interleaved between the two sides.
    pub iterations: usize,
}

/// The WASI 0.3 guest, precompiled.
struct Guest {
    wasmtime: PathBuf,
    cwasm: PathBuf,
    uri: String,
    small_hex: String,
}

/// `wasmtime run` with what the WASI 0.3 guest needs (the CLI world,
/// sockets), for its precompiled form.
pub const RUN: [&str; 6] = [
    "run",
    "--allow-precompiled",
    "-S",
    "cli",
    "-S",
    "inherit-network",
];

/// Precompiles `guest` (`wasmtime compile`) beside it: the `.cwasm` path.
pub fn compile(wasmtime: &Path, guest: &Path) -> anyhow::Result<PathBuf> {
    let cwasm = guest.with_extension("cwasm");
    let out = Command::new(wasmtime)
        .arg("compile")
        .arg("-o")
        .arg(&cwasm)
        .arg(guest)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "wasmtime compile {}: {}",
        guest.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(cwasm)
}

impl Guest {
    fn new(s: &Setup, uri: &str, data: &Data) -> anyhow::Result<Guest> {
        let cwasm = compile(s.wasmtime, s.guest)?;
        let small_hex = data
            .small
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Guest {
            wasmtime: s.wasmtime.to_path_buf(),
            cwasm,
            uri: uri.to_string(),
            small_hex,
        })
    }

    /// One process: `rounds` timed rounds of each workload; a sample per workload.
    fn run(&self, rounds: usize) -> anyhow::Result<Vec<(String, Sample)>> {
        let mut child = Command::new(&self.wasmtime)
            .args(RUN)
            .arg(&self.cwasm)
            .arg(&self.uri)
            .arg(rounds.to_string())
            .arg(WIDTH.to_string())
            .arg(&self.small_hex)
            .arg("spawn")
            .arg(WARM_ROUNDS.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut stdout = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let started = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if started.elapsed() > GUEST_LIMIT {
                // This child only, by its PID.
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("the p3 guest took over {GUEST_LIMIT:?}; killed");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let out = reader.join().unwrap_or_default();
        let mut samples = Vec::new();
        for line in out.lines().filter(|l| l.starts_with('{')) {
            let v: serde_json::Value = serde_json::from_str(line)?;
            let name = v["workload"].as_str().unwrap_or_default().to_string();
            if let Some(s) = parse_reply(line)? {
                samples.push((name, s));
            }
        }
        anyhow::ensure!(
            status.success() && samples.len() == WORKLOADS.len(),
            "the p3 guest exited {status} with {} samples: {out}",
            samples.len()
        );
        Ok(samples)
    }
}

/// Runs the section into `r.concurrent`.
pub fn run(s: &Setup, server: &BenchServer, data: &Data, r: &mut Results) -> anyhow::Result<()> {
    let started = Instant::now();
    let uri = format!("mongodb://{}/", server.addr);
    let rounds = if s.quick { 16 } else { 64 };
    let ops = rounds * WIDTH;
    r.concurrent.width = WIDTH;
    r.concurrent.ops_per_iteration = ops;
    let version = Command::new(s.wasmtime)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    r.concurrent.p3_host = Some(format!(
        "{P3}: the driver with feature p3 in a WASI 0.3 command under the wasmtime CLI \
         ({version}, a child process on the same core), not the in-process wasmtime 48 host"
    ));
    let guest = Guest::new(s, &format!("{uri}?maxPoolSize={WIDTH}"), data)?;
    let mut native = match s.native {
        Some(bin) => {
            let mut c = Command::new(bin);
            c.arg(&uri).arg(s.data_dir);
            Some(External::start(NATIVE, c)?)
        }
        None => None,
    };
    // The native side warms up as the guest does (untimed, same rounds).
    if let Some(n) = native.as_mut() {
        let before = server.accepted();
        for w in WORKLOADS {
            n.run(Cmd::Concurrent(w, WARM_ROUNDS * WIDTH, WIDTH))?;
        }
        r.concurrent.native_warm_up_connections = Some(server.accepted() - before);
    }
    for it in 0..s.iterations {
        // Alternate who goes first.
        for side in [it % 2, (it + 1) % 2] {
            let before = server.accepted();
            if side == 0 {
                let Some(n) = native.as_mut() else { continue };
                for w in WORKLOADS {
                    match n.run(Cmd::Concurrent(w, ops, WIDTH)) {
                        Ok(Some(sample)) => r.concurrent.push(w.name(), NATIVE, sample),
                        Ok(None) => {}
                        Err(e) => r
                            .errors
                            .push(format!("{NATIVE} concurrent {}: {e:#}", w.name())),
                    }
                }
                let opened = server.accepted() - before;
                r.concurrent
                    .connections
                    .entry(NATIVE.into())
                    .or_default()
                    .push(opened);
            } else {
                match guest.run(rounds) {
                    Ok(samples) => {
                        for (w, sample) in samples {
                            r.concurrent.push(&w, P3, sample);
                        }
                    }
                    Err(e) => r.errors.push(format!("{P3} concurrent: {e:#}")),
                }
                let opened = server.accepted() - before;
                r.concurrent
                    .connections
                    .entry(P3.into())
                    .or_default()
                    .push(opened);
            }
        }
        eprintln!(
            "bench: concurrent iteration {}/{} done",
            it + 1,
            s.iterations
        );
    }
    r.concurrent.seconds = started.elapsed().as_secs_f64();
    Ok(())
}

/// What the section measured (`Results::concurrent`).
#[derive(Default)]
pub struct Figures {
    pub width: usize,
    pub ops_per_iteration: usize,
    /// Where the p3 figures come from, for the report.
    pub p3_host: Option<String>,
    /// workload -> contender -> one sample per iteration.
    pub samples: BTreeMap<String, BTreeMap<String, Vec<Sample>>>,
    /// contender -> connections the server accepted per iteration (the
    /// guest's include its warm-up: a new process, a new pool, each time).
    pub connections: BTreeMap<String, Vec<u64>>,
    /// What the native side's pool opened while warming up (its process,
    /// and so its pool, lives through the section).
    pub native_warm_up_connections: Option<u64>,
    pub seconds: f64,
}

impl Figures {
    fn push(&mut self, workload: &str, contender: &str, s: Sample) {
        self.samples
            .entry(workload.to_string())
            .or_default()
            .entry(contender.to_string())
            .or_default()
            .push(s);
    }
}
