//! The concurrency section of `cargo xtask bench` (`--only concurrent`), the
//! WASI 0.3 side: ONE mongo-wasi client (feature p3) shared by WIDTH
//! operations at a time, in one instance, run by the wasmtime CLI.
//!
//! Arguments: `URI ROUNDS WIDTH SMALL_DOC_HEX [spawn|join] [WARM_ROUNDS]`.
//! Connects, warms up untimed (WARM_ROUNDS rounds of each workload: the pool
//! fills as the operations need it), then times ROUNDS rounds of WIDTH
//! concurrent findOnes, then ROUNDS rounds of WIDTH concurrent insertOnes of
//! the small document. A round starts its WIDTH operations together and
//! ends when the last is done. `spawn` (default) makes each operation a task
//! (`wasip3::spawn_local`, as tokio::spawn on the native side); `join` polls
//! the WIDTH futures from this one task.
//!
//! Prints one JSON line per workload, the wire protocol of the harness
//! (host-tests/src/bin/bench/workload.rs), with its name:
//! `{"workload": "find_one", "total_s": t, "per_op_us": [...]}`; or
//! `{"error": "..."}`. Times come from the monotonic clock inside the guest.
//!
//! `cold URI` (the distant section, `--only distant`): one cold request in a
//! new instance, as a WASI 0.3 host's instance pays after idling out: a new
//! client, then one findOne of `{_id: 1}` in perftest.corpus. Prints
//! `{"t0_ns": .., "t1_ns": .., "total_s": .., "found": ..}`: the wall clock
//! (ns since the epoch) around the request, which the harness matches with
//! the relay's flights, and the monotonic time it took.

use bson::{rawdoc, RawDocumentBuf};
use mongo_wasi::runtime::p3 as rt;
use mongo_wasi::{Client, ClientOptions, Collection, FindOptions, OpOptions};
use p3_util::join_all;
use std::fmt::Write;
use std::rc::Rc;

struct Bench;

wasip3::cli::command::export!(Bench);

impl wasip3::exports::cli::run::Guest for Bench {
    async fn run() -> Result<(), ()> {
        let done = match std::env::args().nth(1).as_deref() {
            Some("cold") => cold().await,
            _ => bench().await,
        };
        match done {
            Ok(()) => Ok(()),
            Err(e) => {
                println!("{{\"error\": {:?}}}", e);
                Err(())
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Spawn,
    Join,
}

#[derive(Clone, Copy)]
enum Op {
    FindOne,
    InsertOne,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::FindOne => "find_one",
            Op::InsertOne => "insert_one_small",
        }
    }
}

fn hex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("odd hex length".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("hex: {e}")))
        .collect()
}

/// Microseconds since `t` on the monotonic clock.
fn us_since(t: mongo_wasi::deadline::Instant) -> f64 {
    rt::now().since(t).as_secs_f64() * 1e6
}

/// One operation, timed from its first poll to its end.
async fn one(coll: Collection, op: Op, i: usize, doc: Rc<RawDocumentBuf>) -> Result<f64, String> {
    let t = rt::now();
    match op {
        Op::FindOne => {
            let filter = rawdoc! { "_id": (i % 10_000 + 1) as i32 };
            let d = coll
                .find_one(filter, &FindOptions::default())
                .await
                .map_err(|e| format!("findOne: {e}"))?;
            if d.is_none() {
                return Err("findOne found nothing".into());
            }
        }
        Op::InsertOne => {
            coll.insert_one(&doc, &OpOptions::default())
                .await
                .map_err(|e| format!("insertOne: {e}"))?;
        }
    }
    Ok(us_since(t))
}

/// One round: `width` operations at once; their latencies (us).
async fn round(
    coll: &Collection,
    op: Op,
    mode: Mode,
    first: usize,
    width: usize,
    doc: &Rc<RawDocumentBuf>,
) -> Result<Vec<f64>, String> {
    let futs = (first..first + width).map(|i| one(coll.clone(), op, i, doc.clone()));
    let results = match mode {
        Mode::Join => join_all(futs.collect()).await,
        Mode::Spawn => {
            let handles: Vec<_> = futs.map(wasip3::spawn_local).collect();
            let mut out = Vec::with_capacity(width);
            for h in handles {
                out.push(h.await.unwrap_or_else(|| Err("task cancelled".into())));
            }
            out
        }
    };
    results.into_iter().collect()
}

async fn cold() -> Result<(), String> {
    let uri = std::env::args().nth(2).ok_or("usage: p3-bench cold URI")?;
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    let (t0, started) = (wall(), rt::now());
    let client = Client::with_options(&uri, ClientOptions::default()).map_err(|e| e.to_string())?;
    let corpus = client.database("perftest", None).collection("corpus", None);
    let found = corpus
        .find_one(rawdoc! { "_id": 1 }, &FindOptions::default())
        .await
        .map_err(|e| format!("findOne: {e}"))?
        .is_some();
    let total_s = rt::now().since(started).as_secs_f64();
    let t1 = wall();
    client.close().await;
    println!("{{\"t0_ns\": {t0}, \"t1_ns\": {t1}, \"total_s\": {total_s}, \"found\": {found}}}");
    Ok(())
}

async fn bench() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: p3-bench URI ROUNDS WIDTH SMALL_DOC_HEX [spawn|join] [WARM_ROUNDS]";
    let (uri, rounds, width, small) = match args.get(1..5) {
        Some([u, r, w, h]) => (
            u.clone(),
            r.parse::<usize>().map_err(|e| format!("ROUNDS: {e}"))?,
            w.parse::<usize>().map_err(|e| format!("WIDTH: {e}"))?,
            hex(h)?,
        ),
        _ => return Err(usage.into()),
    };
    let mode = match args.get(5).map(String::as_str) {
        None | Some("spawn") => Mode::Spawn,
        Some("join") => Mode::Join,
        Some(m) => return Err(format!("unknown mode {m}; {usage}")),
    };
    let warm: usize = match args.get(6) {
        Some(w) => w.parse().map_err(|e| format!("WARM_ROUNDS: {e}"))?,
        None => 8,
    };
    let doc = Rc::new(RawDocumentBuf::from_bytes(small).map_err(|e| format!("document: {e}"))?);
    let client = Client::with_options(&uri, ClientOptions::default()).map_err(|e| e.to_string())?;
    let db = client.database("perftest", None);
    let (corpus, scratch) = (
        db.collection("corpus", None),
        db.collection("scratch", None),
    );

    for op in [Op::FindOne, Op::InsertOne] {
        let coll = match op {
            Op::FindOne => &corpus,
            Op::InsertOne => &scratch,
        };
        for r in 0..warm {
            round(coll, op, mode, r * width, width, &doc).await?;
        }
    }
    for op in [Op::FindOne, Op::InsertOne] {
        let coll = match op {
            Op::FindOne => &corpus,
            Op::InsertOne => &scratch,
        };
        let mut per_op_us = Vec::with_capacity(rounds * width);
        let all = rt::now();
        for r in 0..rounds {
            per_op_us.extend(round(coll, op, mode, r * width, width, &doc).await?);
        }
        let total_s = rt::now().since(all).as_secs_f64();
        let mut line = format!(
            "{{\"workload\": \"{}\", \"total_s\": {total_s}, \"per_op_us\": [",
            op.name()
        );
        for (k, us) in per_op_us.iter().enumerate() {
            let _ = write!(line, "{}{us:.3}", if k == 0 { "" } else { "," });
        }
        line.push_str("]}");
        println!("{line}");
    }
    client.close().await;
    Ok(())
}
