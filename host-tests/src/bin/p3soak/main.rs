//! The concurrent soak's launcher: the failpoint proxy (a replica set of three in
//! front of nx-27017) in this process, the WASI 0.3 guest (host-tests/p3-soak: ONE
//! mongo-wasi client, N operations in flight at once) under the wasmtime CLI, and a
//! thread that injects faults into the proxy while the guest runs.
//!
//! ```text
//! p3soak --backend 127.0.0.1:PORT --wasm p3_soak.wasm --wasmtime PATH
//!        [--concurrency N] [--ops N] [--seconds S] [--seed N] [--json PATH]
//!        [--tolerance-ms MS]
//! ```
//!
//! Faults, every 50..=250 ms (seeded; `--fault-every-ms LO-HI`, `--no-faults`), on the primary: a blocked command shorter or
//! longer than most timeoutMS (the code-50 reply sometimes late), a blackholed reply
//! (blocked 4 s, the code-50 reply 30 s after maxTimeMS: never within a deadline),
//! retryable and non-retryable error codes, a closed connection, a retryable write
//! applied whose reply is lost (`onPrimaryTransactionalWrite`), and a step-down. With
//! 16 operations in flight a fault hits whichever matching command comes next.
//!
//! The guest checks what it alone can see (the ledger against the backend read
//! directly, the pool and the session pool after the workers); this launcher adds
//! traps and hangs of the guest, the faults and the proxy's connection counts, judges,
//! prints and writes the JSON. Exit status: 0 pass, 1 fail, 2 the run could not start.

#[allow(dead_code)]
#[path = "../soak/plan.rs"]
mod plan;

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::doc;
use mongo_wasi_proxy::failpoint::{Mode, FAIL_COMMAND, ON_PRIMARY_TRANSACTIONAL_WRITE};
use mongo_wasi_proxy::{Proxy, ProxyConfig};
use plan::{Rng, NON_RETRYABLE_WRITE_CODES, RETRYABLE_CODES};
use serde_json::{json, Value};

const USAGE: &str = "usage: p3soak --backend 127.0.0.1:PORT --wasm P3_SOAK_WASM --wasmtime PATH \
[--concurrency N] [--ops N] [--seconds S] [--seed N] [--json PATH] [--tolerance-ms MS] \
[--fault-every-ms LO-HI | --no-faults] [--only OP,OP..]";
const MEMBERS: usize = 3;
const SET_NAME: &str = "soak";
/// Commands a fault may target (count is an aggregate).
const COMMANDS: [&str; 8] = [
    "insert",
    "update",
    "delete",
    "find",
    "getMore",
    "aggregate",
    "commitTransaction",
    "abortTransaction",
];

struct Cli {
    backend: SocketAddr,
    wasm: PathBuf,
    wasmtime: PathBuf,
    concurrency: u64,
    ops: u64,
    seconds: u64,
    seed: u64,
    json: Option<PathBuf>,
    tolerance_ms: f64,
    /// Faults every LO..=HI ms; None: none at all (a baseline).
    fault_every_ms: Option<(u64, u64)>,
    /// Only these operations (the guest's names, comma-separated).
    only: Option<String>,
}

fn parse(args: &[String]) -> Result<Cli, String> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 % 1_000_000_000)
        .unwrap_or(1);
    let (mut backend, mut wasm, mut wasmtime) = (None, None, None);
    let mut cli = Cli {
        backend: SocketAddr::from(([127, 0, 0, 1], 0)),
        wasm: PathBuf::new(),
        wasmtime: PathBuf::new(),
        concurrency: 16,
        ops: 0,
        seconds: 0,
        seed,
        json: None,
        tolerance_ms: 250.0,
        fault_every_ms: Some((50, 250)),
        only: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--backend" => backend = Some(host_tests::loopback_backend(&value()?)?),
            "--wasm" => wasm = Some(PathBuf::from(value()?)),
            "--wasmtime" => wasmtime = Some(PathBuf::from(value()?)),
            "--concurrency" => cli.concurrency = number(value()?)?.clamp(1, 256),
            "--ops" => cli.ops = number(value()?)?,
            "--seconds" => cli.seconds = number(value()?)?,
            "--seed" => cli.seed = number(value()?)?,
            "--json" => cli.json = Some(value()?.into()),
            "--tolerance-ms" => cli.tolerance_ms = number(value()?)? as f64,
            "--fault-every-ms" => {
                let v = value()?;
                let (lo, hi) = v
                    .split_once('-')
                    .ok_or(format!("--fault-every-ms {v}: LO-HI"))?;
                let (lo, hi) = (number(lo.into())?, number(hi.into())?);
                if lo == 0 || hi < lo {
                    return Err(format!("--fault-every-ms {v}: 0 < LO <= HI"));
                }
                cli.fault_every_ms = Some((lo, hi));
            }
            "--no-faults" => cli.fault_every_ms = None,
            "--only" => cli.only = Some(value()?),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    cli.backend = backend.ok_or(format!("--backend is required\n{USAGE}"))?;
    cli.wasm = wasm.ok_or(format!("--wasm is required\n{USAGE}"))?;
    cli.wasmtime = wasmtime.ok_or(format!("--wasmtime is required\n{USAGE}"))?;
    if cli.ops == 0 && cli.seconds == 0 {
        cli.ops = 2000;
    }
    if cli.ops == 0 {
        cli.ops = u64::MAX / 2;
    }
    Ok(cli)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cli = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&cli) {
        Ok(report) => {
            let failures = report["failures"].as_array().map_or(0, Vec::len);
            if let Some(path) = &cli.json {
                let text = serde_json::to_string_pretty(&report).expect("JSON");
                if let Err(e) = std::fs::write(path, text + "\n") {
                    eprintln!("p3soak: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
                println!("p3soak: figures written to {}", path.display());
            }
            match failures {
                0 => {
                    println!("p3soak: PASS (seed {})", cli.seed);
                    ExitCode::SUCCESS
                }
                _ => {
                    println!(
                        "p3soak: FAIL (replay with --seed {}): {}",
                        cli.seed, report["failures"]
                    );
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            eprintln!("p3soak: {e}");
            ExitCode::from(2)
        }
    }
}

/// One fault, drawn from `rng`, injected into the proxy; answers its kind.
fn inject(proxy: &Proxy, rng: &mut Rng) -> &'static str {
    let primary = proxy.primary().unwrap_or(0);
    let command = rng.pick(&COMMANDS);
    // block under, block over, blackhole, retryable, non-retryable, close,
    // reply lost, step-down
    let which = rng.weighted(&[16, 14, 6, 22, 10, 14, 10, 8]);
    let (kind, name, times, data) = match which {
        0 => (
            "block_short",
            FAIL_COMMAND,
            rng.range(1, 3) as i64,
            doc! { "failCommands": [command], "blockConnection": true,
            "blockTimeMS": rng.range(5, 120) as i64 },
        ),
        1 => {
            let late = match rng.chance(0.5) {
                true => rng.range(1, 200) as i64,
                false => 0,
            };
            (
                "block_long",
                FAIL_COMMAND,
                1,
                doc! { "failCommands": [command], "blockConnection": true,
                "blockTimeMS": rng.range(300, 3000) as i64, "proxyReplyDelayMS": late },
            )
        }
        2 => (
            "blackholed_reply",
            FAIL_COMMAND,
            1,
            doc! { "failCommands": [command], "blockConnection": true,
            "blockTimeMS": 4000i64, "proxyReplyDelayMS": 30_000i64 },
        ),
        3 => (
            "retryable_error",
            FAIL_COMMAND,
            rng.range(1, 2) as i64,
            doc! { "failCommands": [command], "errorCode": rng.pick(&RETRYABLE_CODES) },
        ),
        4 => (
            "non_retryable_error",
            FAIL_COMMAND,
            1,
            doc! { "failCommands": [command], "errorCode": rng.pick(&NON_RETRYABLE_WRITE_CODES) },
        ),
        5 => (
            "close_connection",
            FAIL_COMMAND,
            rng.range(1, 2) as i64,
            doc! { "failCommands": [command], "closeConnection": true },
        ),
        6 => (
            "write_applied_reply_lost",
            ON_PRIMARY_TRANSACTIONAL_WRITE,
            1,
            doc! { "closeConnection": true },
        ),
        _ => {
            let _ = proxy.step_down(None);
            return "step_down";
        }
    };
    proxy.configure_fail_point(primary, name, Mode::Times(times), data);
    kind
}

fn clear_fail_points(proxy: &Proxy) {
    for member in 0..MEMBERS {
        for name in [FAIL_COMMAND, ON_PRIMARY_TRANSACTIONAL_WRITE] {
            proxy.configure_fail_point(member, name, Mode::Off, bson::Document::new());
        }
    }
}

fn run(cli: &Cli) -> Result<Value, String> {
    println!(
        "p3soak: seed {} (replay with --seed {}), concurrency {}, backend nx-27017 at {}",
        cli.seed, cli.seed, cli.concurrency, cli.backend
    );
    let config = ProxyConfig::replica_set(cli.backend, SET_NAME, MEMBERS);
    let proxy = Arc::new(Proxy::start(config).map_err(|e| format!("failpoint proxy: {e}"))?);
    let hosts: Vec<String> = proxy.addresses().iter().map(|a| a.to_string()).collect();
    let uri = format!(
        "mongodb://{}/?replicaSet={SET_NAME}&serverSelectionTimeoutMS=5000",
        hosts.join(",")
    );
    let direct = format!("mongodb://{}/?directConnection=true", cli.backend);
    let db = format!("p3soak_{}", cli.seed);
    println!("p3soak: one client, through the failpoint proxy: {uri}");

    let mut child = Command::new(&cli.wasmtime);
    child.args(["run", "-S", "cli", "-S", "inherit-network"]);
    if let Some(only) = &cli.only {
        child.arg("--env").arg(format!("P3SOAK_ONLY={only}"));
    }
    let mut child = child
        .arg(&cli.wasm)
        .args([&uri, &direct, &db])
        .arg(cli.concurrency.to_string())
        .arg(cli.ops.to_string())
        .arg(cli.seconds.to_string())
        .arg(cli.seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", cli.wasmtime.display()))?;
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = pipe(Box::new(child.stdout.take().expect("piped")));
    let err = pipe(Box::new(child.stderr.take().expect("piped")));

    // The faults, while the guest runs.
    let stop = Arc::new(AtomicBool::new(false));
    let faults = Arc::new(Mutex::new(BTreeMap::<&'static str, u64>::new()));
    let injector = {
        let (proxy, stop, faults) = (proxy.clone(), stop.clone(), faults.clone());
        let mut rng = Rng::new(cli.seed ^ 0x5eed);
        let every = cli.fault_every_ms;
        std::thread::spawn(move || {
            let Some((lo, hi)) = every else { return };
            // Let the guest seed its base documents (straight to nx-27017) first.
            std::thread::sleep(Duration::from_millis(300));
            while !stop.load(Ordering::Relaxed) {
                let kind = inject(&proxy, &mut rng);
                *faults.lock().expect("faults").entry(kind).or_default() += 1;
                std::thread::sleep(Duration::from_millis(rng.range(lo, hi)));
            }
        })
    };

    // Bounded: the run's length, plus time for the end's checks; else a hang.
    let bound = Duration::from_secs(if cli.seconds > 0 {
        cli.seconds + 180
    } else {
        (cli.ops / 2).clamp(120, 3600)
    });
    let started = Instant::now();
    let mut guest_hung = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() > bound => {
                guest_hung = true;
                let _ = child.kill(); // this child, by its handle
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("waiting for wasmtime: {e}")),
        }
    };
    stop.store(true, Ordering::Relaxed);
    let _ = injector.join();
    clear_fail_points(&proxy);
    let stats = proxy.stats();
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    drop(proxy);

    let mut traps = 0;
    if stderr.contains("wasm trap") || stderr.contains("panicked") {
        traps = 1;
        eprintln!("p3soak: the guest trapped:\n{stderr}");
    } else if !stderr.trim().is_empty() {
        eprintln!("p3soak: guest stderr:\n{}", tail(&stderr, 40));
    }
    for line in stdout.lines().filter(|l| l.starts_with("P3SOAK-ERROR")) {
        eprintln!("p3soak: {line}");
    }
    let guest: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("P3SOAK "))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or(Value::Null);

    let faults = faults.lock().expect("faults").clone();
    let mut report = json!({
        "seed": cli.seed,
        "face": "WASI 0.3 async core (feature p3, linked into a 0.3 guest), one client",
        "concurrency": cli.concurrency,
        "tolerance_ms": cli.tolerance_ms,
        "traps": traps,
        "guest_hung": guest_hung,
        "guest_exit": status.and_then(|s| s.code()),
        "faults_injected": faults,
        "proxy_connections_opened": stats.connections_opened,
        "proxy_connections_closed": stats.connections_closed,
    });
    let mut failures: Vec<String> = Vec::new();
    if traps > 0 {
        failures.push("the guest trapped".into());
    }
    if guest_hung {
        failures.push(format!("the guest did not finish within {bound:?}"));
    }
    if guest.is_null() {
        failures.push("the guest reported no figures".into());
        if traps == 0 {
            eprintln!("p3soak: guest stdout:\n{}", tail(&stdout, 40));
        }
    } else {
        let ops = guest["ops"].as_u64().unwrap_or(0).max(1) as f64;
        report["proxy_connections_per_1000_ops"] =
            json!((stats.connections_opened as f64 * 1000.0 / ops * 10.0).round() / 10.0);
        for zero in [
            "lost_writes",
            "lost_deletes",
            "duplicate_writes",
            "phantom_writes",
            "aborted_visible",
            "leaked_connections",
            "leaked_sessions",
            "wrong_results",
            "hung",
        ] {
            let n = guest[zero].as_u64();
            if n != Some(0) {
                failures.push(format!("{zero}: {}", guest[zero]));
            }
        }
        let max = guest["overshoot_ms"]["max"].as_f64().unwrap_or(0.0);
        if max > cli.tolerance_ms {
            failures.push(format!(
                "overshoot {max:.1} ms past timeoutMS (tolerance {} ms): {}",
                cli.tolerance_ms, guest["worst_overshoot"]
            ));
        }
        if guest["max_in_flight"].as_u64().unwrap_or(0) < cli.concurrency.min(2) {
            failures.push("the operations never overlapped".into());
        }
        if let (Value::Object(r), Value::Object(g)) = (&mut report, guest) {
            for (k, v) in g {
                r.insert(k, v);
            }
        }
    }
    report["failures"] = json!(failures);
    print_summary(&report);
    Ok(report)
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn print_summary(r: &Value) {
    println!(
        "p3soak: {} ops in {} ms, {} in flight at most, {} cancelled; faults {}",
        r["ops"], r["wall_ms"], r["max_in_flight"], r["cancelled"], r["faults_injected"]
    );
    println!(
        "p3soak: acknowledged writes {}: lost {}, lost deletes {}, duplicate {}, phantom {}; \
         aborted but visible {}",
        r["acked_writes"],
        r["lost_writes"],
        r["lost_deletes"],
        r["duplicate_writes"],
        r["phantom_writes"],
        r["aborted_visible"]
    );
    println!(
        "p3soak: leaked connections {}, leaked sessions {}, traps {}, wrong results {}, hung {}",
        r["leaked_connections"], r["leaked_sessions"], r["traps"], r["wrong_results"], r["hung"]
    );
    println!(
        "p3soak: overshoot past timeoutMS (ms) all timed ops {}, those that timed out {}; \
         worst: {}",
        r["overshoot_ms"], r["overshoot_of_timeouts_ms"], r["worst_overshoot"]
    );
    println!(
        "p3soak: connections created {} ({} per 1,000 ops; proxy accepted {}, {} per 1,000), \
         pool cleared {}",
        r["connections_created"],
        r["connections_per_1000_ops"],
        r["proxy_connections_opened"],
        r["proxy_connections_per_1000_ops"],
        r["pool_cleared"]
    );
    println!("p3soak: ends by op {}", r["ends"]);
    if let Some(incidents) = r["incidents"].as_array() {
        for i in incidents.iter().take(20) {
            println!("p3soak: incident: {i}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let cli = parse(&args(
            "--backend 127.0.0.1:1 --wasm w --wasmtime t --seconds 60 --seed 5",
        ))
        .unwrap();
        assert_eq!((cli.seconds, cli.seed, cli.concurrency), (60, 5, 16));
        assert!(parse(&args("--backend 10.0.0.1:1 --wasm w --wasmtime t")).is_err());
        assert!(parse(&args("--backend 127.0.0.1:1")).is_err());
        assert!(parse(&args("--backend 127.0.0.1:1 --wasm w --wasmtime t --bogus")).is_err());
    }
}
