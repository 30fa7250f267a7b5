//! The concurrent soak's guest (WASI 0.3): ONE mongo-wasi client (the async core,
//! feature `p3`, linked in: not the driver-async component's WIT skin) under N
//! workers whose operations are all in flight at once in one task, through the
//! failpoint proxy's replica set, while the native launcher
//! (host-tests/src/bin/p3soak) injects faults into the proxy.
//!
//! ```text
//! p3_soak.wasm PROXY_URI DIRECT_URI DB CONCURRENCY OPS SECONDS SEED
//! ```
//!
//! Each worker draws its operations from its own seeded PRNG: insertOne,
//! updateOne ($push of its op id), deleteOne, find drained through getMore,
//! find dropped after its first batch, findOne (sometimes on an explicit
//! session), count, aggregate, and a transaction (two inserts, then commit, or
//! abort); timeoutMS log-uniform in 50..=2000 ms or none; and sometimes a
//! cancellation (the operation's future dropped at its n-th pending). After
//! the workers: no connection checked out (`pool_status`), no server session
//! checked out (`sessions_in_use`), then, read directly from the backend (not
//! through the proxy), every acknowledged write exactly once
//! (host-tests/src/bin/soak/ledger.rs, shared with the 0.2 soak). One line
//! `P3SOAK {json}` carries the figures; the launcher judges them.
//!
//! Diagnosis aids (environment): `P3SOAK_ONLY=findOne,count` runs only those
//! operations (their `Op::name`s), `P3SOAK_NO_CANCEL=1` cancels nothing,
//! `P3SOAK_ONE_TASK=1` polls the workers in one task instead of one task each.
//! Run it straight against nx-27017 by giving the direct URI twice.

use bson::{rawdoc, RawDocumentBuf};
use mongo_wasi::cmap::PoolEventKind;
use mongo_wasi::runtime::p3 as rt;
use mongo_wasi::{
    Client, ClientOptions, Collection, ErrorKind, FindOptions, OpOptions, TransactionOptions,
    UpdateSpec,
};
use p3_util::{cancel_at, join_all};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::Duration;

#[allow(dead_code)]
#[path = "../../src/bin/soak/ledger.rs"]
mod ledger;
#[allow(dead_code)]
#[path = "../../src/bin/soak/plan.rs"]
mod plan;

use ledger::Ledger;
use plan::Rng;

const BASE_DOCS: i32 = 200;
const COLL: &str = "ops";
/// An operation without timeoutMS that takes this long is a hang.
const HANG_MS: f64 = 15_000.0;
/// How long the end waits for detached clean-ups (cursor kills) to give back
/// their connections and sessions.
const SETTLE_MS: u64 = 5_000;

struct Soak;

wasip3::cli::command::export!(Soak);

impl wasip3::exports::cli::run::Guest for Soak {
    async fn run() -> std::result::Result<(), ()> {
        let args: Vec<String> = std::env::args().collect();
        let cli = match Cli::parse(&args) {
            Ok(c) => c,
            Err(e) => {
                println!("P3SOAK-ERROR {e}");
                return Err(());
            }
        };
        match soak(&cli).await {
            Ok(json) => {
                println!("P3SOAK {json}");
                Ok(())
            }
            Err(e) => {
                println!("P3SOAK-ERROR {e}");
                Err(())
            }
        }
    }
}

struct Cli {
    proxy_uri: String,
    direct_uri: String,
    db: String,
    concurrency: usize,
    ops: u64,
    seconds: u64,
    seed: u64,
}

impl Cli {
    fn parse(args: &[String]) -> Result<Cli, String> {
        let usage = "p3_soak.wasm PROXY_URI DIRECT_URI DB CONCURRENCY OPS SECONDS SEED";
        if args.len() != 8 {
            return Err(format!("{} arguments; usage: {usage}", args.len()));
        }
        let n = |i: usize| {
            args[i]
                .parse::<u64>()
                .map_err(|e| format!("argument {i} {}: {e}", args[i]))
        };
        Ok(Cli {
            proxy_uri: args[1].clone(),
            direct_uri: args[2].clone(),
            db: args[3].clone(),
            concurrency: n(4)?.clamp(1, 256) as usize,
            ops: n(5)?,
            seconds: n(6)?,
            seed: n(7)?,
        })
    }
}

fn ms_since(t: mongo_wasi::deadline::Instant) -> f64 {
    rt::now().since(t).as_secs_f64() * 1000.0
}

async fn sleep_ms(ms: u64) {
    rt::sleep_until(mongo_wasi::deadline::Deadline::after(
        rt::now(),
        Duration::from_millis(ms),
    ))
    .await
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    InsertOne,
    UpdateOne,
    DeleteOne,
    /// find, drained through getMore.
    Find,
    /// find, its first batch read, then the cursor dropped (killCursors, detached).
    FindDropped,
    FindOne,
    Count,
    Aggregate,
    /// Two inserts in a transaction, then commitTransaction.
    TxnCommit,
    /// Two inserts in a transaction, then abortTransaction.
    TxnAbort,
}

impl Op {
    const ALL: [Op; 10] = [
        Op::InsertOne,
        Op::UpdateOne,
        Op::DeleteOne,
        Op::Find,
        Op::FindDropped,
        Op::FindOne,
        Op::Count,
        Op::Aggregate,
        Op::TxnCommit,
        Op::TxnAbort,
    ];
    const WEIGHTS: [u32; 10] = [18, 12, 8, 12, 5, 12, 8, 8, 12, 5];

    fn name(self) -> &'static str {
        match self {
            Op::InsertOne => "insertOne",
            Op::UpdateOne => "updateOne",
            Op::DeleteOne => "deleteOne",
            Op::Find => "find+getMore",
            Op::FindDropped => "find+drop",
            Op::FindOne => "findOne",
            Op::Count => "count",
            Op::Aggregate => "aggregate+getMore",
            Op::TxnCommit => "transaction+commit",
            Op::TxnAbort => "transaction+abort",
        }
    }

    fn is_txn(self) -> bool {
        matches!(self, Op::TxnCommit | Op::TxnAbort)
    }
}

/// How an operation ended.
fn end_name(r: &Result<(), mongo_wasi::Error>) -> &'static str {
    match r {
        Ok(()) => "ok",
        Err(e) => match e.kind {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Server | ErrorKind::DuplicateKey | ErrorKind::WriteConcern => "server",
            ErrorKind::Network | ErrorKind::Closed => "network",
            ErrorKind::ServerSelection => "selection",
            _ => "other",
        },
    }
}

#[derive(Default)]
struct Figures {
    ops: u64,
    /// op name → end → count.
    ends: BTreeMap<&'static str, BTreeMap<&'static str, u64>>,
    cancelled: u64,
    /// Operations in flight at once, at most (sampled at each start).
    in_flight: u64,
    max_in_flight: u64,
    /// ms past timeoutMS, of every timed operation that ended (not cancelled).
    overshoot: Vec<f64>,
    /// ms past timeoutMS, of those that ended in a timeout error.
    overshoot_timeouts: Vec<f64>,
    worst: String,
    worst_ms: f64,
    untimed: u64,
    slowest_untimed_ms: f64,
    hung: u64,
    wrong_results: u64,
    /// Transactions whose abort was acknowledged, yet a write of theirs is there.
    aborted_visible: u64,
    connections_created: u64,
    connections_closed: u64,
    pool_cleared: u64,
    checkout_failed: u64,
    incidents: Vec<String>,
    /// Cursors the server ended early (id 0 and an empty last batch).
    cursors_ended_by_server: u64,
    /// getMores of an open cursor that brought nothing.
    empty_batches: u64,
    /// The first few errors of each end but "ok" (what they said).
    error_examples: BTreeMap<&'static str, Vec<String>>,
}

impl Figures {
    fn incident(&mut self, line: String) {
        if self.incidents.len() < 200 {
            self.incidents.push(line);
        }
    }
}

struct Shared {
    client: Client,
    coll: Collection,
    ledger: RefCell<Ledger>,
    figures: RefCell<Figures>,
    /// Transactions aborted with acknowledgement: their two op ids.
    aborted: RefCell<Vec<(i64, i64)>>,
    next_op: std::cell::Cell<i64>,
    /// The latest command events (for the story of a wrong cursor).
    events: RefCell<std::collections::VecDeque<mongo_wasi::monitoring::CommandEvent>>,
    /// The last drain ended on an empty batch with cursor id 0.
    ended_empty: std::cell::Cell<bool>,
    /// Cursors that ended short: their ids.
    short_cursors: RefCell<Vec<i64>>,
    /// A transaction is running or waiting to run alone. nx-27017 keeps a
    /// transaction as a SQLite savepoint on its one database: concurrent
    /// transactions fail ("no such savepoint") and an abort rolls back every
    /// write made since its start, other sessions' acknowledged writes
    /// included. So a transaction runs with no other operation in flight,
    /// and is never cancelled (an abandoned one is rolled back later).
    txn_busy: std::cell::Cell<bool>,
    ops_limit: u64,
    started: mongo_wasi::deadline::Instant,
    seconds: u64,
}

impl Shared {
    fn op_id(&self) -> i64 {
        let id = self.next_op.get() + 1;
        self.next_op.set(id);
        id
    }

    /// Claims the next operation, or None when the run is over.
    fn claim(&self) -> bool {
        let mut f = self.figures.borrow_mut();
        let over = f.ops >= self.ops_limit
            || (self.seconds > 0 && ms_since(self.started) >= self.seconds as f64 * 1000.0);
        if over {
            return false;
        }
        f.ops += 1;
        f.in_flight += 1;
        f.max_in_flight = f.max_in_flight.max(f.in_flight);
        true
    }

    /// Drains the client's pool events into the counters (command events are
    /// recorded too, as monitoring is on: dropped here).
    fn drain_events(&self) {
        let mut kept = self.events.borrow_mut();
        kept.extend(self.client.take_command_events());
        while kept.len() > 30_000 {
            kept.pop_front();
        }
        drop(kept);
        let events = self.client.take_pool_events();
        let mut f = self.figures.borrow_mut();
        for e in events {
            match e.kind {
                PoolEventKind::ConnectionCreated => f.connections_created += 1,
                PoolEventKind::ConnectionClosed => f.connections_closed += 1,
                PoolEventKind::PoolCleared => f.pool_cleared += 1,
                PoolEventKind::ConnectionCheckOutFailed => f.checkout_failed += 1,
                _ => {}
            }
        }
    }
}

fn timeout(rng: &mut Rng) -> Option<u64> {
    plan::timeout(rng)
}

fn int(v: bson::RawBsonRef) -> Option<i64> {
    match v {
        bson::RawBsonRef::Int32(i) => Some(i64::from(i)),
        bson::RawBsonRef::Int64(i) => Some(i),
        bson::RawBsonRef::Double(d) if d.fract() == 0.0 => Some(d as i64),
        _ => None,
    }
}

/// What one operation did, beyond its result.
#[derive(Default)]
struct Outcome {
    wrong: Option<String>,
}

async fn worker(s: Rc<Shared>, seed: u64) {
    let mut rng = Rng::new(seed);
    // P3SOAK_ONLY=findOne,count: only those (a diagnosis aid).
    let only = std::env::var("P3SOAK_ONLY").ok();
    while s.claim() {
        let mut op = Op::ALL[rng.weighted(&Op::WEIGHTS)];
        while only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|n| n == op.name()))
        {
            op = Op::ALL[rng.weighted(&Op::WEIGHTS)];
        }
        let t = timeout(&mut rng);
        // 8%: dropped at its 0th..=7th pending.
        let cancel = rng.chance(0.08).then(|| rng.range(0, 7) as usize);
        let cancel = cancel.filter(|_| std::env::var_os("P3SOAK_NO_CANCEL").is_none());
        let a = rng.range(0, BASE_DOCS as u64 - 1) as i32;
        let b = rng.range(10, 60) as i32;
        let batch = rng.range(3, 15) as u32;
        let explicit = rng.chance(0.3);
        let pick = rng.next_u64();
        let ids = (s.op_id(), s.op_id());
        // No operation starts while a transaction runs or waits to run alone.
        {
            s.figures.borrow_mut().in_flight -= 1;
            while s.txn_busy.get() {
                sleep_ms(2).await;
            }
            s.figures.borrow_mut().in_flight += 1;
        }
        let cancel = cancel.filter(|_| !op.is_txn());
        let started = rt::now();
        let done = cancel_at(run_op(&s, op, t, a, b, batch, explicit, pick, ids), cancel).await;
        let ms = ms_since(started);
        let what = format!(
            "{} ops {}/{} timeoutMS {}",
            op.name(),
            ids.0,
            ids.1,
            t.map_or("none".into(), |t| t.to_string())
        );
        let mut f = s.figures.borrow_mut();
        f.in_flight -= 1;
        let Some((result, outcome)) = done else {
            f.cancelled += 1;
            *f.ends
                .entry(op.name())
                .or_default()
                .entry("cancelled")
                .or_default() += 1;
            drop(f);
            // A cancelled write may or may not have happened.
            record_writes(&s, op, ids, false, None);
            s.drain_events();
            continue;
        };
        let end = end_name(&result);
        if let Err(e) = &result {
            let ex = f.error_examples.entry(end).or_default();
            if ex.len() < 4 {
                ex.push(format!("{what} after {ms:.0} ms: {e}"));
            }
        }
        *f.ends.entry(op.name()).or_default().entry(end).or_default() += 1;
        match t {
            // A transaction is several operations, each with its own timeoutMS.
            Some(t) if !op.is_txn() => {
                let over = ms - t as f64;
                f.overshoot.push(over);
                if end == "timeout" {
                    f.overshoot_timeouts.push(over);
                }
                if over > f.worst_ms || f.worst.is_empty() {
                    f.worst_ms = over;
                    f.worst = format!("{what}: took {ms:.1} ms, {end}");
                }
            }
            Some(_) => {}
            None => {
                f.untimed += 1;
                f.slowest_untimed_ms = f.slowest_untimed_ms.max(ms);
                if ms > HANG_MS {
                    f.hung += 1;
                    f.incident(format!("HANG {what}: {ms:.0} ms"));
                }
            }
        }
        if let Some(wrong) = &outcome.wrong {
            f.wrong_results += 1;
            f.incident(format!("WRONG RESULT {what}: {wrong}"));
        }
        drop(f);
        record_writes(&s, op, ids, result.is_ok(), Some(pick));
        s.drain_events();
    }
}

/// The ledger's view of what `op` wrote (`acked`: its result was Ok).
fn record_writes(s: &Shared, op: Op, ids: (i64, i64), acked: bool, _pick: Option<u64>) {
    let mut l = s.ledger.borrow_mut();
    match op {
        Op::InsertOne => l.insert(ids.0, acked),
        Op::UpdateOne => l.push(ids.0, acked),
        Op::TxnCommit => {
            l.insert(ids.0, acked);
            l.insert(ids.1, acked);
        }
        Op::TxnAbort => {
            // Never acknowledged as written: either way is fine for the ledger;
            // an acknowledged abort is checked apart (`aborted`).
            l.insert(ids.0, false);
            l.insert(ids.1, false);
            if acked {
                s.aborted.borrow_mut().push(ids);
            }
        }
        // deleteOne records its target as it runs (run_op).
        _ => {}
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_op(
    s: &Shared,
    op: Op,
    t: Option<u64>,
    a: i32,
    b: i32,
    batch: u32,
    explicit: bool,
    pick: u64,
    ids: (i64, i64),
) -> (Result<(), mongo_wasi::Error>, Outcome) {
    let mut out = Outcome::default();
    let oo = OpOptions {
        timeout_ms: t,
        ..Default::default()
    };
    let expected = (a + b).min(BASE_DOCS) - a;
    let r: Result<(), mongo_wasi::Error> = match op {
        Op::InsertOne => {
            let pad = "x".repeat((pick % 200) as usize);
            let doc = rawdoc! { "op": ids.0, "kind": "ins", "pad": pad };
            s.coll.insert_one(&doc, &oo).await.map(drop)
        }
        Op::UpdateOne => {
            let filter = rawdoc! { "_id": format!("base-{a}") };
            let update = UpdateSpec::Document(rawdoc! { "$push": { "ops": ids.0 } });
            match s.coll.update_one(filter, update, &oo).await {
                Ok(u) => {
                    if u.matched != 1 {
                        out.wrong = Some(format!("updateOne of base-{a} matched {}", u.matched));
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        Op::DeleteOne => {
            let target = s.ledger.borrow_mut().take_deletable(pick);
            let filter = rawdoc! { "op": target.unwrap_or(-ids.0), "kind": "ins" };
            // Unacknowledged until it answers: a cancellation leaves it so.
            if let Some(target) = target {
                s.ledger.borrow_mut().delete(target, false);
            }
            let r = s.coll.delete_one(filter, &oo).await;
            if let Some(target) = target {
                s.ledger.borrow_mut().delete(target, r.is_ok());
                if let Ok(n) = &r {
                    if *n != 1 {
                        out.wrong = Some(format!("deleteOne of op {target} deleted {n}"));
                    }
                }
            }
            r.map(drop)
        }
        Op::FindOne => {
            let session = explicit.then(|| s.client.start_session(None));
            let fo = FindOptions {
                timeout_ms: t,
                session: session.as_ref(),
                ..Default::default()
            };
            let r = s
                .coll
                .find_one(rawdoc! { "_id": format!("base-{a}") }, &fo)
                .await;
            if let Some(session) = &session {
                session.end().await;
            }
            match r {
                Ok(doc) => {
                    let k = doc
                        .as_deref()
                        .and_then(|d| d.get("k").ok().flatten().and_then(int));
                    if k != Some(i64::from(a)) {
                        out.wrong = Some(format!("findOne base-{a} found k = {k:?}"));
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        Op::Count => match s
            .coll
            .count_documents(rawdoc! { "kind": "base", "k": { "$lt": a } }, &oo)
            .await
        {
            Ok(n) => {
                if n != i64::from(a) {
                    out.wrong = Some(format!("count k < {a} answered {n}"));
                }
                Ok(())
            }
            Err(e) => Err(e),
        },
        Op::Find | Op::FindDropped | Op::Aggregate => {
            let range = rawdoc! { "kind": "base", "k": { "$gte": a, "$lt": a + b } };
            let opened = match op {
                Op::Aggregate => {
                    let pipeline = [rawdoc! { "$match": range }, rawdoc! { "$sort": { "k": 1 } }];
                    s.coll.aggregate(&pipeline, Some(batch), &oo, None).await
                }
                _ => {
                    let fo = FindOptions {
                        timeout_ms: t,
                        batch_size: Some(batch),
                        ..Default::default()
                    };
                    s.coll.find(range, &fo).await
                }
            };
            match opened {
                Err(e) => Err(e),
                Ok(mut cursor) if op == Op::FindDropped => {
                    let r = cursor.next_batch().await.map(drop);
                    drop(cursor); // killCursors, detached, if still open
                    r
                }
                Ok(mut cursor) => match (cursor.id(), drain(&mut cursor, s).await) {
                    (_, Err(e)) => Err(e),
                    (id, Ok(docs)) => {
                        if (docs.len() as i32) < expected && s.ended_empty.get() {
                            // The server ended the cursor early: its last
                            // getMore answered cursor id 0 and no documents.
                            // nx-27017 does so when the connection that opened
                            // the cursor has closed (a timeout or cancellation
                            // elsewhere closed it); mongod answers
                            // CursorNotFound. Not the driver's: counted apart.
                            s.figures.borrow_mut().cursors_ended_by_server += 1;
                        } else if docs.len() as i32 != expected {
                            s.short_cursors.borrow_mut().push(id);
                            let ks: Vec<i64> = docs
                                .iter()
                                .filter_map(|d| d.get("k").ok().flatten().and_then(int))
                                .collect();
                            out.wrong = Some(format!(
                                "{} of k in [{a}, {}) batchSize {batch} answered {} documents, \
                                 not {expected}: k {ks:?}",
                                op.name(),
                                a + b,
                                docs.len()
                            ));
                        }
                        Ok(())
                    }
                },
            }
        }
        Op::TxnCommit | Op::TxnAbort => {
            // Alone: no other operation in flight (see `txn_busy`).
            while s.txn_busy.get() {
                sleep_ms(5).await;
            }
            s.txn_busy.set(true);
            let _turn = Turn(&s.txn_busy);
            while s.figures.borrow().in_flight > 1 {
                sleep_ms(2).await;
            }
            let session = s.client.start_session(None);
            let r = transaction(s, &session, op, t, ids).await;
            session.end().await;
            r
        }
    };
    (r, out)
}

/// Gives the transaction turn back however the transaction ends (a
/// cancellation included).
struct Turn<'a>(&'a std::cell::Cell<bool>);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Every document to the cursor's end: `collect` stops at a getMore that
/// brings nothing (it is for tailable cursors too), and nx-27017 sometimes
/// answers an open cursor's getMore with an empty batch; counted.
async fn drain(
    cursor: &mut mongo_wasi::Cursor,
    s: &Shared,
) -> Result<Vec<RawDocumentBuf>, mongo_wasi::Error> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        let batch = cursor.next_batch().await?;
        if batch.documents.is_empty() && !batch.exhausted {
            s.figures.borrow_mut().empty_batches += 1;
        }
        let ended_empty = batch.documents.is_empty() && batch.exhausted;
        out.extend(batch.documents);
        if batch.exhausted {
            s.ended_empty.set(ended_empty);
            return Ok(out);
        }
    }
    Err(mongo_wasi::Error::invalid_argument(
        "a cursor not exhausted after 1000 batches",
    ))
}

async fn transaction(
    s: &Shared,
    session: &mongo_wasi::Session,
    op: Op,
    t: Option<u64>,
    ids: (i64, i64),
) -> Result<(), mongo_wasi::Error> {
    session.start_transaction(TransactionOptions::default())?;
    let oo = OpOptions {
        timeout_ms: t,
        session: Some(session),
        ..Default::default()
    };
    for id in [ids.0, ids.1] {
        let doc = rawdoc! { "op": id, "kind": "ins", "txn": true };
        if let Err(e) = s.coll.insert_one(&doc, &oo).await {
            let _ = session.abort_transaction(t).await;
            return Err(e);
        }
    }
    match op {
        Op::TxnCommit => session.commit_transaction(t).await,
        _ => session.abort_transaction(t).await,
    }
}

async fn soak(cli: &Cli) -> Result<String, String> {
    seed_base(cli).await?;
    let client = Client::with_options(
        &cli.proxy_uri,
        ClientOptions {
            monitor_commands: true,
            ..Default::default()
        },
    )
    .map_err(|e| format!("client {}: {e}", cli.proxy_uri))?;
    let coll = client.database(&cli.db, None).collection(COLL, None);
    let shared = Rc::new(Shared {
        client: client.clone(),
        coll,
        ledger: RefCell::new(Ledger::default()),
        figures: RefCell::new(Figures::default()),
        aborted: RefCell::new(Vec::new()),
        next_op: std::cell::Cell::new(0),
        events: RefCell::new(std::collections::VecDeque::new()),
        ended_empty: std::cell::Cell::new(false),
        short_cursors: RefCell::new(Vec::new()),
        txn_busy: std::cell::Cell::new(false),
        ops_limit: cli.ops,
        started: rt::now(),
        seconds: cli.seconds,
    });
    let workers: Vec<_> = (0..cli.concurrency)
        .map(|w| {
            let seed = cli.seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            worker(shared.clone(), seed)
        })
        .collect();
    // Each worker a task of its own, as each call into a 0.3 component is
    // (wakes cross tasks); P3SOAK_ONE_TASK=1 polls them all in this one.
    if std::env::var_os("P3SOAK_ONE_TASK").is_some() {
        join_all(workers).await;
    } else {
        let tasks: Vec<_> = workers.into_iter().map(wasip3::spawn_local).collect();
        for t in tasks {
            t.await;
        }
    }
    let wall_ms = ms_since(shared.started);

    // The end: detached clean-ups (cursor kills) get SETTLE_MS to give back
    // what they hold; then whatever is still checked out is leaked.
    let settle = rt::now();
    let (mut in_use, mut sessions) = (usize::MAX, usize::MAX);
    while ms_since(settle) < SETTLE_MS as f64 {
        in_use = client.pool_status().iter().map(|p| p.in_use).sum();
        sessions = client.sessions_in_use();
        if in_use == 0 && sessions == 0 {
            break;
        }
        sleep_ms(20).await;
    }
    let pools: Vec<String> = client
        .pool_status()
        .iter()
        .map(|p| {
            format!(
                "{{\"address\":{},\"in_use\":{},\"idle\":{},\"pending\":{}}}",
                q(&p.address),
                p.in_use,
                p.idle,
                p.pending
            )
        })
        .collect();
    shared.drain_events();
    client.close().await;
    shared.drain_events();

    let (docs, pushed) = read_back(cli).await?;
    let verdict = shared.ledger.borrow().verify(&docs, &pushed);
    let acked = shared.ledger.borrow().acked_writes();
    let mut f = shared.figures.borrow_mut();
    let aborted = shared.aborted.borrow().clone();
    for (x, y) in aborted {
        for id in [x, y] {
            if docs.get(&id).copied().unwrap_or(0) > 0 {
                f.aborted_visible += 1;
                f.incident(format!(
                    "op {id}: its transaction's abort was acknowledged, yet it is there"
                ));
            }
        }
    }

    let mut j = String::from("{");
    let _ = write!(j, "\"ops\":{},\"wall_ms\":{wall_ms:.0}", f.ops);
    let _ = write!(j, ",\"concurrency\":{}", cli.concurrency);
    let _ = write!(j, ",\"max_in_flight\":{}", f.max_in_flight);
    let _ = write!(j, ",\"cancelled\":{}", f.cancelled);
    let _ = write!(j, ",\"acked_writes\":{acked}");
    let _ = write!(j, ",\"lost_writes\":{}", verdict.lost_writes);
    let _ = write!(j, ",\"lost_deletes\":{}", verdict.lost_deletes);
    let _ = write!(j, ",\"duplicate_writes\":{}", verdict.duplicate_writes);
    let _ = write!(j, ",\"phantom_writes\":{}", verdict.phantoms);
    let _ = write!(j, ",\"unacked_present\":{}", verdict.unacked_present);
    let _ = write!(j, ",\"unacked_absent\":{}", verdict.unacked_absent);
    let _ = write!(j, ",\"aborted_visible\":{}", f.aborted_visible);
    let _ = write!(j, ",\"leaked_connections\":{in_use}");
    let _ = write!(j, ",\"leaked_sessions\":{sessions}");
    let _ = write!(j, ",\"pools\":[{}]", pools.join(","));
    let _ = write!(j, ",\"wrong_results\":{}", f.wrong_results);
    let _ = write!(j, ",\"hung\":{}", f.hung);
    let _ = write!(j, ",\"empty_get_more_batches\":{}", f.empty_batches);
    let _ = write!(
        j,
        ",\"cursors_ended_by_server\":{}",
        f.cursors_ended_by_server
    );
    let _ = write!(j, ",\"untimed_ops\":{}", f.untimed);
    let _ = write!(j, ",\"slowest_untimed_ms\":{:.1}", f.slowest_untimed_ms);
    let _ = write!(j, ",\"timed_ops\":{}", f.overshoot.len());
    let _ = write!(j, ",\"overshoot_ms\":{}", percentiles(&mut f.overshoot));
    let _ = write!(
        j,
        ",\"overshoot_of_timeouts_ms\":{}",
        percentiles(&mut f.overshoot_timeouts)
    );
    let _ = write!(j, ",\"worst_overshoot\":{}", q(&f.worst));
    let _ = write!(j, ",\"connections_created\":{}", f.connections_created);
    let _ = write!(j, ",\"connections_closed\":{}", f.connections_closed);
    let _ = write!(j, ",\"pool_cleared\":{}", f.pool_cleared);
    let _ = write!(j, ",\"checkout_failed\":{}", f.checkout_failed);
    let per_1000 = f.connections_created as f64 * 1000.0 / f.ops.max(1) as f64;
    let _ = write!(j, ",\"connections_per_1000_ops\":{per_1000:.1}");
    let ends: Vec<String> = f
        .ends
        .iter()
        .map(|(op, ends)| {
            let e: Vec<String> = ends.iter().map(|(k, v)| format!("{}:{v}", q(k))).collect();
            format!("{}:{{{}}}", q(op), e.join(","))
        })
        .collect();
    let _ = write!(j, ",\"ends\":{{{}}}", ends.join(","));
    let examples: Vec<String> = f
        .error_examples
        .iter()
        .map(|(end, v)| {
            let v: Vec<String> = v.iter().map(|e| q(e)).collect();
            format!("{}:[{}]", q(end), v.join(","))
        })
        .collect();
    let _ = write!(j, ",\"error_examples\":{{{}}}", examples.join(","));
    // The story of the first short cursors: every event naming them.
    for &id in shared.short_cursors.borrow().iter().take(3) {
        let mut asked: Vec<i32> = Vec::new();
        let mut lsid_of: Option<String> = None;
        for e in shared.events.borrow().iter() {
            let names = |d: &RawDocumentBuf| {
                let cmd_id = d.get("getMore").ok().flatten().and_then(int);
                let killed = d
                    .get_array("cursors")
                    .ok()
                    .is_some_and(|a| a.into_iter().any(|v| v.ok().and_then(int) == Some(id)));
                let reply = d
                    .get_document("cursor")
                    .ok()
                    .map(|c| (c.get("id").ok().flatten().and_then(int), c));
                let in_reply = reply.as_ref().is_some_and(|(rid, _)| *rid == Some(id));
                (cmd_id == Some(id) || killed || in_reply).then(|| {
                    let batch = reply.and_then(|(rid, c)| {
                        let n = c
                            .get_array("nextBatch")
                            .or_else(|_| c.get_array("firstBatch"))
                            .map(|a| a.into_iter().count())
                            .ok()?;
                        Some(format!("reply id {rid:?} batch {n}"))
                    });
                    batch.unwrap_or_default()
                })
            };
            let mut hit = e
                .command
                .as_ref()
                .and_then(names)
                .or_else(|| e.reply.as_ref().and_then(names));
            let lsid = e
                .command
                .as_ref()
                .and_then(|c| c.get_document("lsid").ok())
                .map(|l| format!("{:?}", l.as_bytes()));
            if hit.is_some() && lsid.is_some() && lsid_of.is_none() {
                lsid_of = lsid.clone();
            }
            if hit.is_none() && lsid.is_some() && lsid == lsid_of {
                hit = Some("same lsid".into());
            }
            if hit.is_some() && e.command.is_some() {
                asked.push(e.request_id);
            } else if hit.is_none() && asked.contains(&e.request_id) {
                // The reply to one of its getMores, whatever cursor it names.
                hit = Some(format!(
                    "reply {:?}",
                    e.reply
                        .as_ref()
                        .map(|r| format!("{r:?}").chars().take(300).collect::<String>())
                ));
            }
            if let Some(detail) = hit {
                f.incident(format!(
                    "cursor {id}: {:?} {} conn {} req {} {detail} {}",
                    e.kind,
                    e.command_name,
                    e.connection_id,
                    e.request_id,
                    e.failure
                        .as_ref()
                        .map(|x| x.to_string())
                        .unwrap_or_default()
                ));
            }
        }
    }
    let mut examples = verdict.examples.clone();
    examples.extend(f.incidents.iter().cloned());
    let ex: Vec<String> = examples.iter().map(|e| q(e)).collect();
    let _ = write!(j, ",\"incidents\":[{}]", ex.join(","));
    j.push('}');
    Ok(j)
}

/// `{"n", "p50", "p99", "max"}` of `v` (ms).
fn percentiles(v: &mut [f64]) -> String {
    if v.is_empty() {
        return "{\"n\":0,\"p50\":null,\"p99\":null,\"max\":null}".into();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    format!(
        "{{\"n\":{},\"p50\":{:.1},\"p99\":{:.1},\"max\":{:.1}}}",
        v.len(),
        at(0.5),
        at(0.99),
        v[v.len() - 1]
    )
}

/// A JSON string.
fn q(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn direct(cli: &Cli) -> Result<Collection, String> {
    let client = Client::with_options(
        &cli.direct_uri,
        ClientOptions {
            timeout_ms: Some(30_000),
            ..Default::default()
        },
    )
    .map_err(|e| format!("client {}: {e}", cli.direct_uri))?;
    Ok(client.database(&cli.db, None).collection(COLL, None))
}

async fn seed_base(cli: &Cli) -> Result<(), String> {
    let coll = direct(cli)?;
    let _ = coll.drop(&OpOptions::default()).await;
    let docs: Vec<RawDocumentBuf> = (0..BASE_DOCS)
        .map(|k| {
            let ops: Vec<i64> = Vec::new();
            rawdoc! { "_id": format!("base-{k}"), "k": k, "kind": "base", "ops": bson::RawArrayBuf::from_iter(ops) }
        })
        .collect();
    coll.insert_many(&docs, &OpOptions::default())
        .await
        .map_err(|e| format!("inserting the base documents: {e}"))?;
    Ok(())
}

type Counts = BTreeMap<i64, u64>;

async fn read_back(cli: &Cli) -> Result<(Counts, Counts), String> {
    let coll = direct(cli)?;
    let all = |filter: RawDocumentBuf| {
        let coll = coll.clone();
        async move {
            let fo = FindOptions {
                batch_size: Some(1000),
                ..Default::default()
            };
            let mut cursor = coll
                .find(filter, &fo)
                .await
                .map_err(|e| format!("read-back find: {e}"))?;
            cursor
                .collect(u32::MAX)
                .await
                .map_err(|e| format!("read-back getMore: {e}"))
        }
    };
    let mut docs = BTreeMap::new();
    for d in all(rawdoc! { "kind": "ins" }).await? {
        let op = d.get("op").ok().flatten().and_then(int);
        *docs
            .entry(op.ok_or("an insert without an op id")?)
            .or_insert(0) += 1;
    }
    let mut pushed = BTreeMap::new();
    let base = all(rawdoc! { "kind": "base" }).await?;
    if base.len() != BASE_DOCS as usize {
        return Err(format!("{} base documents, not {BASE_DOCS}", base.len()));
    }
    for d in base {
        let ops = d
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
    Ok((docs, pushed))
}
