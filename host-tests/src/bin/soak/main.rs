//! The soak: the driver component, in the wasmtime host, through the failpoint proxy
//! (a replica set of three in front of nx-27017), with random faults and random
//! timeoutMS, for N operations or S seconds.
//!
//! ```text
//! soak --backend 127.0.0.1:PORT [--ops N] [--seconds S] [--seed N] [--json PATH]
//!      [--tolerance-ms MS] [--guest-memory-cap-mb MB] [--verbose]
//! ```
//!
//! Before each operation a seeded PRNG may inject one fault into it: a blocked command
//! shorter or longer than its timeoutMS (the code-50 reply sometimes late), a retryable
//! or a non-retryable error code, a closed connection, or a step-down of the primary.
//! After each: it returned within timeoutMS plus the tolerance (else an overshoot
//! violation), it did not trap (a trap is counted, the instance is made again), its
//! result was right (reads of the unchanging base documents), and the guest's memory
//! and the process' RSS are sampled. Afterwards, read directly from nx-27017 (not
//! through the proxy): every acknowledged write is there exactly once.
//!
//! Exit status: 0 pass, 1 fail (trap, lost or duplicate write, overshoot beyond the
//! tolerance, a hang, a wrong result, guest memory growing), 2 the run could not start.

mod instance;
mod ledger;
mod plan;
mod report;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bson::{rawdoc, RawDocument, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::types::{
    CommandEventKind, Error, ErrorKind, PoolEventKind,
};
use mongo_wasi_proxy::failpoint::{Mode, FAIL_COMMAND};
use mongo_wasi_proxy::{Proxy, ProxyConfig};

use instance::{Instance, WitResult};
use ledger::Ledger;
use plan::{Fault, OpKind, Rng, Step};
use report::{End, Figures, Sample, Worst};

const USAGE: &str = "usage: soak --backend 127.0.0.1:PORT [--ops N] [--seconds S] [--seed N] \
[--json PATH] [--tolerance-ms MS] [--guest-memory-cap-mb MB] [--verbose]";

/// Base documents `{_id: "base-k", k, kind: "base", ops: []}`: the reads' data, which
/// never changes but for updateOne's `$push` of op ids into `ops`.
const BASE_DOCS: u64 = 200;
const MEMBERS: usize = 3;
const SET_NAME: &str = "soak";
const COLL: &str = "ops";
/// An operation without timeoutMS has no deadline to check; this long is a hang
/// (its blocks are at most 500 ms, server selection gives up after 5 s).
const HANG_MS: f64 = 15_000.0;

struct Cli {
    backend: SocketAddr,
    ops: Option<u64>,
    seconds: Option<u64>,
    seed: u64,
    json: Option<PathBuf>,
    tolerance_ms: u64,
    memory_cap: usize,
    verbose: bool,
}

fn parse(args: &[String]) -> Result<Cli, String> {
    let mut backend = None;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 % 1_000_000_000)
        .unwrap_or(1);
    let mut cli = Cli {
        backend: SocketAddr::from(([127, 0, 0, 1], 0)),
        ops: None,
        seconds: None,
        seed,
        json: None,
        tolerance_ms: 100,
        memory_cap: 256 << 20,
        verbose: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--backend" => backend = Some(host_tests::loopback_backend(&value()?)?),
            "--ops" => cli.ops = Some(number(value()?)?),
            "--seconds" => cli.seconds = Some(number(value()?)?),
            "--seed" => cli.seed = number(value()?)?,
            "--json" => cli.json = Some(value()?.into()),
            "--tolerance-ms" => cli.tolerance_ms = number(value()?)?,
            "--guest-memory-cap-mb" => cli.memory_cap = (number(value()?)? as usize) << 20,
            "--verbose" => cli.verbose = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    cli.backend = backend.ok_or(format!("--backend is required\n{USAGE}"))?;
    if cli.ops.is_none() && cli.seconds.is_none() {
        cli.ops = Some(1000);
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
        Ok(figures) => {
            figures.print();
            if let Some(path) = &cli.json {
                let text = serde_json::to_string_pretty(&figures.json()).expect("JSON");
                if let Err(e) = std::fs::write(path, text + "\n") {
                    eprintln!("soak: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
                println!("soak: figures written to {}", path.display());
            }
            match figures.failures().is_empty() {
                true => ExitCode::SUCCESS,
                false => ExitCode::from(1),
            }
        }
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::from(2)
        }
    }
}

/// One connected instance and what reaches it.
struct Soak {
    inst: Option<Instance>,
    allowed: Vec<SocketAddr>,
    uri: String,
    db: String,
    cap: usize,
    /// Print a line per operation.
    verbose: bool,
}

impl Soak {
    fn inst(&mut self) -> &mut Instance {
        self.inst.as_mut().expect("connected")
    }

    fn connect(&self) -> Result<Instance, String> {
        match Instance::connect(&self.allowed, &self.uri, &self.db, COLL, self.cap) {
            Ok(Ok(i)) => Ok(i),
            Ok(Err(e)) => Err(format!("connect {}: {}", self.uri, e.message)),
            Err(trap) => Err(format!("connect {}: trap: {trap:?}", self.uri)),
        }
    }
}

fn run(cli: &Cli) -> Result<Figures, String> {
    println!(
        "soak: seed {} (replay with --seed {}), backend nx-27017 at {}",
        cli.seed, cli.seed, cli.backend
    );
    let db = format!("soak_{}", cli.seed);
    seed_base_documents(cli, &db)?;

    let config = ProxyConfig::replica_set(cli.backend, SET_NAME, MEMBERS);
    let proxy = Proxy::start(config).map_err(|e| format!("failpoint proxy: {e}"))?;
    let members = proxy.addresses();
    let hosts: Vec<String> = members.iter().map(SocketAddr::to_string).collect();
    let uri = format!(
        "mongodb://{}/?replicaSet={SET_NAME}&serverSelectionTimeoutMS=5000",
        hosts.join(",")
    );
    println!("soak: through the failpoint proxy, {uri}");
    let mut soak = Soak {
        inst: None,
        allowed: members.clone(),
        uri,
        db: db.clone(),
        cap: cli.memory_cap,
        verbose: cli.verbose,
    };
    soak.inst = Some(soak.connect()?);
    proxy.reset_stats();

    let mut rng = Rng::new(cli.seed);
    let mut ledger = Ledger::default();
    let mut f = Figures {
        seed: cli.seed,
        tolerance_ms: cli.tolerance_ms,
        ..Figures::default()
    };
    let started = Instant::now();
    let limit = cli.seconds.map(Duration::from_secs);
    let mut op_id: i64 = 0;
    while cli.ops.is_none_or(|n| f.ops < n) && limit.is_none_or(|l| started.elapsed() < l) {
        op_id += 1;
        let step = plan::step(&mut rng, BASE_DOCS);
        one_op(
            &mut soak,
            &proxy,
            &mut ledger,
            &mut f,
            &mut rng,
            &step,
            op_id,
        )?;
        if f.ops.is_multiple_of(500) {
            println!(
                "soak: {} ops, {:.0} s, {} traps, {} violations, worst overshoot {:.1} ms",
                f.ops,
                started.elapsed().as_secs_f64(),
                f.traps,
                f.violations,
                f.worst.as_ref().map_or(0.0, |w| w.overshoot_ms)
            );
        }
    }
    f.wall = started.elapsed();

    // Afterwards, with fail points off: close the client, then read what is there.
    clear_fail_points(&proxy);
    let stats = proxy.stats();
    f.connections_opened = stats.connections_opened;
    f.connections_closed = stats.connections_closed;
    if let Err(trap) = soak.inst.take().expect("connected").close() {
        f.traps += 1;
        f.incident(format!("trap closing the client: {trap:?}"));
    }
    drop(proxy);
    std::thread::sleep(Duration::from_millis(300));
    let (docs, pushed) = read_back(cli, &db)?;
    f.verdict = ledger.verify(&docs, &pushed);
    f.acked_writes = ledger.acked_writes();
    f.vm_hwm_kb = report::rss_kb().1;
    Ok(f)
}

/// A direct (proxy-less, fault-free) instance on the backend.
fn direct(cli: &Cli, db: &str) -> Result<Instance, String> {
    let uri = format!("mongodb://{}/?directConnection=true", cli.backend);
    match Instance::connect(&[cli.backend], &uri, db, COLL, cli.memory_cap) {
        Ok(Ok(i)) => Ok(i),
        Ok(Err(e)) => Err(format!("connect {uri}: {}", e.message)),
        Err(trap) => Err(format!("connect {uri}: trap: {trap:?}")),
    }
}

fn seed_base_documents(cli: &Cli, db: &str) -> Result<(), String> {
    let mut inst = direct(cli, db)?;
    let trap = |t: wasmtime::Error| format!("setup trapped: {t:?}");
    let _ = inst.drop_collection().map_err(trap)?;
    let docs: Vec<Vec<u8>> = (0..BASE_DOCS as i32)
        .map(|k| {
            let id = format!("base-{k}");
            let ops: Vec<i64> = Vec::new();
            let d = rawdoc! { "_id": id, "k": k, "kind": "base", "ops": bson::RawArrayBuf::from_iter(ops) };
            d.into_bytes()
        })
        .collect();
    inst.insert_many(&docs)
        .map_err(trap)?
        .map_err(|e| format!("inserting the base documents: {}", e.message))?;
    inst.close().map_err(trap)
}

/// Every `{kind: "ins"}` document's op id, and every op id in the base documents' `ops`.
/// How many times each op id was found.
type Counts = BTreeMap<i64, u64>;

fn read_back(cli: &Cli, db: &str) -> Result<(Counts, Counts), String> {
    let mut inst = direct(cli, db)?;
    let mut all = |filter: RawDocumentBuf| -> Result<Vec<Vec<u8>>, String> {
        let trap = |t: wasmtime::Error| format!("read-back trapped: {t:?}");
        let cursor = inst
            .find(filter.as_bytes(), Some(1000), None)
            .map_err(trap)?
            .map_err(|e| format!("read-back find: {}", e.message))?;
        let docs = inst
            .drain(cursor)
            .map_err(trap)?
            .map_err(|e| format!("read-back getMore: {}", e.message))?;
        inst.drop_cursor(cursor).map_err(trap)?;
        Ok(docs)
    };
    let mut docs = BTreeMap::new();
    for d in all(rawdoc! { "kind": "ins" })? {
        let op = raw(&d)?.get("op").ok().flatten().and_then(int);
        *docs
            .entry(op.ok_or("an insert without an op id")?)
            .or_insert(0) += 1;
    }
    let mut pushed = BTreeMap::new();
    let base = all(rawdoc! { "kind": "base" })?;
    if base.len() as u64 != BASE_DOCS {
        return Err(format!("{} base documents, not {BASE_DOCS}", base.len()));
    }
    for d in base {
        let ops = raw(&d)?
            .get_array("ops")
            .map_err(|e| format!("a base document's ops: {e}"))?;
        for op in ops {
            let op = op
                .ok()
                .and_then(int)
                .ok_or("a pushed op id that is not a number")?;
            *pushed.entry(op).or_insert(0) += 1;
        }
    }
    inst.close()
        .map_err(|t| format!("read-back trapped: {t:?}"))?;
    Ok((docs, pushed))
}

fn raw(bytes: &[u8]) -> Result<&RawDocument, String> {
    RawDocument::from_bytes(bytes).map_err(|e| format!("a document that is not BSON: {e}"))
}

/// nx-27017 answers small integers as int32 whatever was stored.
fn int(v: bson::RawBsonRef) -> Option<i64> {
    match v {
        bson::RawBsonRef::Int32(i) => Some(i64::from(i)),
        bson::RawBsonRef::Int64(i) => Some(i),
        bson::RawBsonRef::Double(d) if d.fract() == 0.0 => Some(d as i64),
        _ => None,
    }
}

fn clear_fail_points(proxy: &Proxy) {
    for member in 0..MEMBERS {
        proxy.configure_fail_point(member, FAIL_COMMAND, Mode::Off, bson::Document::new());
    }
}

fn inject(proxy: &Proxy, fault: &Fault) -> Result<(), String> {
    use bson::doc;
    let (times, data) = match fault {
        Fault::None => return Ok(()),
        Fault::StepDown => return proxy.step_down(None).map(|_| ()),
        Fault::BlockUnder { command, ms } => (
            1,
            doc! { "failCommands": [*command], "blockConnection": true, "blockTimeMS": *ms as i64 },
        ),
        Fault::BlockOver {
            command,
            ms,
            late_ms,
        } => (
            1,
            doc! {
                "failCommands": [*command], "blockConnection": true, "blockTimeMS": *ms as i64,
                "proxyReplyDelayMS": *late_ms as i64,
            },
        ),
        Fault::Retryable {
            command,
            code,
            times,
        } => (
            *times,
            doc! { "failCommands": [*command], "errorCode": *code },
        ),
        Fault::NonRetryable { command, code } => {
            (1, doc! { "failCommands": [*command], "errorCode": *code })
        }
        Fault::CloseConnection { command, times } => (
            *times,
            doc! { "failCommands": [*command], "closeConnection": true },
        ),
    };
    // The fault goes where the driver sends its commands: the primary.
    let primary = proxy.primary().unwrap_or(0);
    proxy
        .configure_fail_point(primary, FAIL_COMMAND, Mode::Times(times), data)
        .map(|_| ())
        .ok_or_else(|| "failCommand refused".to_string())
}

/// What an operation returned, once the guest is done with it.
struct Done {
    end: End,
    /// The driver's error, for the incident lines.
    error: Option<String>,
    /// A read whose result is not what the base documents hold.
    wrong: Option<String>,
    /// A cursor to drop once the fault is off (outside the timed section).
    cursor: Option<wasmtime::component::ResourceAny>,
}

fn end_of(e: &Error) -> End {
    match e.kind {
        ErrorKind::Timeout => End::Timeout,
        // A failpoint's 11000 is a duplicate key since WIT 0.2.0.
        ErrorKind::Server | ErrorKind::DuplicateKey | ErrorKind::WriteConcern => End::Server,
        ErrorKind::Network | ErrorKind::Closed => End::Network,
        ErrorKind::ServerSelection => End::ServerSelection,
        _ => End::Other,
    }
}

fn describe(e: &Error) -> String {
    let code = e.code.map(|c| format!(" code {c}")).unwrap_or_default();
    format!("{:?}{code}: {}", e.kind, e.message)
}

impl Done {
    fn of<T>(r: &WitResult<T>) -> Done {
        Done {
            end: match r {
                Ok(_) => End::Ok,
                Err(e) => end_of(e),
            },
            error: r.as_ref().err().map(describe),
            wrong: None,
            cursor: None,
        }
    }
}

/// Runs `step` (the guest call and nothing else is timed); `Err` for a trap.
fn execute(
    inst: &mut Instance,
    ledger: &mut Ledger,
    rng: &mut Rng,
    step: &Step,
    op_id: i64,
) -> wasmtime::Result<Done> {
    let t = step.timeout_ms;
    let (a, b) = (step.a as i32, step.b as i32);
    let expected_range = (a + b).min(BASE_DOCS as i32) - a;
    Ok(match step.op {
        OpKind::InsertOne => {
            let pad = "x".repeat(rng.range(0, 200) as usize);
            let doc = rawdoc! { "op": op_id, "kind": "ins", "pad": pad };
            let r = inst.insert_one(doc.as_bytes(), t)?;
            ledger.insert(op_id, r.is_ok());
            Done::of(&r)
        }
        OpKind::UpdateOne => {
            let filter = rawdoc! { "_id": format!("base-{a}") };
            let update = rawdoc! { "$push": { "ops": op_id } };
            let r = inst.update_one(filter.as_bytes(), update.as_bytes(), t)?;
            ledger.push(op_id, r.is_ok());
            let mut done = Done::of(&r);
            if let Ok(n) = r {
                if n != 1 {
                    done.wrong = Some(format!("updateOne of base-{a} matched {n}"));
                }
            }
            done
        }
        OpKind::DeleteOne => {
            let target = ledger.take_deletable(rng.next_u64());
            // Nothing to delete yet: a deleteOne that matches nothing.
            let filter = rawdoc! { "op": target.unwrap_or(-op_id), "kind": "ins" };
            let r = inst.delete_one(filter.as_bytes(), t)?;
            let mut done = Done::of(&r);
            if let Some(target) = target {
                ledger.delete(target, r.is_ok());
                if let Ok(n) = r {
                    if n != 1 {
                        done.wrong = Some(format!("deleteOne of op {target} deleted {n}"));
                    }
                }
            }
            done
        }
        OpKind::FindOne => {
            let filter = rawdoc! { "_id": format!("base-{a}") };
            let r = inst.find_one(filter.as_bytes(), t)?;
            let mut done = Done::of(&r);
            if let Ok(doc) = &r {
                let k = doc
                    .as_deref()
                    .and_then(|d| RawDocument::from_bytes(d).ok())
                    .and_then(|d| d.get("k").ok().flatten().and_then(int));
                if k != Some(i64::from(a)) {
                    done.wrong = Some(format!("findOne base-{a} found k = {k:?}"));
                }
            }
            done
        }
        OpKind::Count => {
            let filter = rawdoc! { "kind": "base", "k": { "$lt": a } };
            let r = inst.count(filter.as_bytes(), t)?;
            let mut done = Done::of(&r);
            if let Ok(n) = r {
                if n != i64::from(a) {
                    done.wrong = Some(format!("count k < {a} answered {n}"));
                }
            }
            done
        }
        OpKind::Find | OpKind::Aggregate => {
            let range = rawdoc! { "kind": "base", "k": { "$gte": a, "$lt": a + b } };
            let opened = match step.op {
                OpKind::Find => inst.find(range.as_bytes(), Some(step.batch), t)?,
                _ => {
                    let pipeline = vec![
                        rawdoc! { "$match": range }.into_bytes(),
                        rawdoc! { "$sort": { "k": 1 } }.into_bytes(),
                    ];
                    inst.aggregate(&pipeline, step.batch, t)?
                }
            };
            let cursor = match opened {
                Ok(c) => c,
                Err(e) => return Ok(Done::of::<()>(&Err(e))),
            };
            let r = inst.drain(cursor)?;
            let mut done = Done::of(&r);
            done.cursor = Some(cursor);
            if let Ok(docs) = &r {
                if docs.len() as i32 != expected_range {
                    done.wrong = Some(format!(
                        "{} of k in [{a}, {}) answered {} documents, not {expected_range}",
                        step.op.name(),
                        a + b,
                        docs.len()
                    ));
                }
            }
            done
        }
    })
}

fn one_op(
    soak: &mut Soak,
    proxy: &Proxy,
    ledger: &mut Ledger,
    f: &mut Figures,
    rng: &mut Rng,
    step: &Step,
    op_id: i64,
) -> Result<(), String> {
    let opened_before = proxy.stats().connections_opened;
    inject(proxy, &step.fault)?;
    let started = Instant::now();
    let result = execute(soak.inst(), ledger, rng, step, op_id);
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    clear_fail_points(proxy);
    let what = || {
        format!(
            "op {op_id} {} timeoutMS {} fault [{}]",
            step.op.name(),
            step.timeout_ms.map_or("none".into(), |t| t.to_string()),
            step.fault.describe()
        )
    };
    let done = match result {
        Ok(done) => done,
        Err(trap) => {
            f.traps += 1;
            f.incident(format!("TRAP at {}: {trap:?}", what()));
            // An interrupted write may or may not have happened.
            match step.op {
                OpKind::InsertOne => ledger.insert(op_id, false),
                OpKind::UpdateOne => ledger.push(op_id, false),
                _ => {}
            }
            f.record(step.op, &step.fault, End::Trap, ms);
            soak.inst = Some(soak.connect()?);
            return Ok(());
        }
    };
    f.record(step.op, &step.fault, done.end, ms);
    if soak.verbose {
        let error = done.error.as_deref().unwrap_or("");
        println!("{}: {ms:.1} ms, {} {error}", what(), done.end.name());
    }
    match step.timeout_ms {
        Some(t) => {
            f.timed_ops += 1;
            let over = ms - t as f64;
            if f.worst.as_ref().is_none_or(|w| over > w.overshoot_ms) {
                f.worst = Some(Worst {
                    overshoot_ms: over,
                    what: format!("{}, took {ms:.1} ms, {}", what(), done.end.name()),
                });
            }
            if over > f.tolerance_ms as f64 {
                f.violations += 1;
                let error = done.error.clone().unwrap_or_default();
                f.incident(format!(
                    "OVERSHOOT {over:.1} ms at {}: took {ms:.1} ms, {} {error}",
                    what(),
                    done.end.name()
                ));
            }
        }
        None => {
            f.untimed_ops += 1;
            f.slowest_untimed_ms = f.slowest_untimed_ms.max(ms);
            if ms > HANG_MS {
                f.hung += 1;
                f.incident(format!("HANG at {}: took {ms:.1} ms", what()));
            }
        }
    }
    if let Some(wrong) = &done.wrong {
        f.wrong_results += 1;
        f.incident(format!("WRONG RESULT at {}: {wrong}", what()));
    }
    // Untimed clean-up: the cursor (its killCursors, if still open), then the events.
    let cleanup = done
        .cursor
        .map_or(Ok(()), |c| soak.inst().drop_cursor(c))
        .and_then(|()| soak.inst().take_events());
    match cleanup {
        Ok((commands, pool)) => {
            // Each attempt sends the operation's first command once (getMores are
            // never retried); the driver numbers each attempt as an operation.
            let first = step.op.commands()[0];
            let attempts = commands
                .iter()
                .filter(|e| e.kind == CommandEventKind::Started && e.command_name == first)
                .count() as u64;
            f.retries += attempts.saturating_sub(1);
            for e in &pool {
                match e.kind {
                    PoolEventKind::PendingResponseSucceeded => f.drained += 1,
                    PoolEventKind::PendingResponseFailed => f.drain_failed += 1,
                    _ => {} // started, and the CMAP life-cycle events
                }
            }
        }
        Err(trap) => {
            f.traps += 1;
            f.incident(format!("TRAP in the clean-up after {}: {trap:?}", what()));
            soak.inst = Some(soak.connect()?);
        }
    }
    let opened = proxy.stats().connections_opened - opened_before;
    *f.opened_by_fault.entry(step.fault.kind()).or_default() += opened;
    let memory = soak.inst().memory();
    f.guest_peak_bytes = f.guest_peak_bytes.max(memory.bytes);
    // Per instance, and an instance refused memory traps soon after.
    f.guest_cap_denied = f.guest_cap_denied.max(memory.denied);
    let (rss_kb, _) = report::rss_kb();
    f.samples.push(Sample {
        guest_bytes: memory.bytes,
        rss_kb,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let cli = parse(&args("--backend 127.0.0.1:1 --seconds 60 --seed 5")).unwrap();
        assert_eq!((cli.ops, cli.seconds, cli.seed), (None, Some(60), 5));
        let cli = parse(&args("--backend 127.0.0.1:1")).unwrap();
        assert_eq!(cli.ops, Some(1000), "a default length");
        assert!(parse(&args("--backend 10.0.0.1:1")).is_err());
        assert!(parse(&args("--ops 5")).is_err());
        assert!(parse(&args("--backend 127.0.0.1:1 --bogus")).is_err());
    }
}
