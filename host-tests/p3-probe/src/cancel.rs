//! Cancellation safety on WASI 0.3: a serverless host drops a call's future
//! at whatever await it stood when its HTTP client goes away. For find (a
//! cursor read to its end), insert, a transaction's commit and a GridFS
//! upload, each cancellation point is tried in turn: the operation is polled
//! until it has been pending `n` times, then dropped there; `n` goes up until
//! the operation finishes before it. After each drop:
//! - no connection is left checked out (`Client::pool_status`), and CMAP's
//!   events end every checkout and every connection created;
//! - a connection that had a request in flight is closed (CMAP closed event),
//!   never used again, and its session is not reused (implicit: the next
//!   operation's lsid differs; explicit: `is_dirty`);
//! - the next operation on the same client succeeds and reads its own write;
//! - a cancelled commit can be retried, and then its write is there;
//! - a cancelled upload leaves no files document (no half file is visible).
//!
//! Each point is tried on a fresh client (selection's check, the pool's
//! connection and its handshake are on the path) and on a warm one (a pooled
//! connection: only the send and the read).

use bson::{rawdoc, RawDocumentBuf};
use mongo_wasi::cmap::PoolEventKind;
use mongo_wasi::gridfs::{BucketOptions, GridfsOptions, UploadOptions};
use mongo_wasi::monitoring::{CommandEvent, EventKind};
use mongo_wasi::{Client, ClientOptions, Collection, FindOptions, OpOptions, TransactionOptions};
use p3_util::cancel_at;
use std::collections::HashSet;

/// Dropped at its `n+1`-th pending point.
fn cancel_at_point<F: Future>(fut: F, n: usize) -> p3_util::CancelAt<F> {
    cancel_at(fut, Some(n))
}
use std::future::Future;

type Outcome = std::result::Result<(), String>;

/// More cancellation points than any of these operations has.
const MAX_POINTS: usize = 200;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    Find,
    Insert,
    Commit,
    Upload,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Start {
    /// A new client: server check (its connection becomes the pool's), then the command.
    Cold,
    /// A client whose pool holds a connection already.
    Warm,
    /// A warm client whose idle connection is held elsewhere: the checkout
    /// establishes a new one (connect and handshake) before the command.
    Busy,
}

/// What the events say of requests left without their reply.
struct InFlight {
    connections: HashSet<u64>,
    lsids: HashSet<Vec<u8>>,
}

fn in_flight(events: &[CommandEvent]) -> InFlight {
    let ended: HashSet<i32> = events
        .iter()
        .filter(|e| e.kind != EventKind::Started)
        .map(|e| e.request_id)
        .collect();
    let mut out = InFlight {
        connections: HashSet::new(),
        lsids: HashSet::new(),
    };
    for e in events.iter().filter(|e| e.kind == EventKind::Started) {
        if ended.contains(&e.request_id) {
            continue;
        }
        out.connections.insert(e.connection_id);
        if let Some(lsid) = lsid(e) {
            out.lsids.insert(lsid);
        }
    }
    out
}

fn lsid(e: &CommandEvent) -> Option<Vec<u8>> {
    let cmd = e.command.as_ref()?;
    let lsid = cmd.get_document("lsid").ok()?;
    Some(lsid.as_bytes().to_vec())
}

fn client(nx: u16) -> std::result::Result<Client, String> {
    Client::with_options(
        &format!("mongodb://127.0.0.1:{nx}/"),
        ClientOptions {
            timeout_ms: Some(10_000),
            monitor_commands: true,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())
}

pub async fn cancel(nx: u16) -> Outcome {
    let run = mongo_wasi::runtime::unix_seconds() as i64 * 1000
        + (mongo_wasi::runtime::p3::now().0 % 1000) as i64;
    // The documents find reads: five, in batches of two (find, two getMores).
    let seed = client(nx)?;
    let coll = seed.database("p3cancel", None).collection("c", None);
    for i in 0..5 {
        coll.insert_one(&rawdoc! { "run": run, "seed": i }, &OpOptions::default())
            .await
            .map_err(|e| format!("seeding: {e}"))?;
    }
    seed.close().await;
    let mut total = 0;
    for op in [Op::Find, Op::Insert, Op::Commit, Op::Upload] {
        for start in [Start::Cold, Start::Warm, Start::Busy] {
            total += points(nx, run, op, start).await?;
        }
    }
    println!("cancel: {total} calls cancelled, every check held after each");
    Ok(())
}

/// Tries every cancellation point of `op`; returns how many calls it cancelled.
async fn points(nx: u16, run: i64, op: Op, start: Start) -> std::result::Result<usize, String> {
    let (mut in_flight_at, mut cancelled, mut finished_in_a_row) = (0, 0, 0);
    for n in 0..MAX_POINTS {
        let client = client(nx)?;
        let db = client.database("p3cancel", None);
        let coll = db.collection("c", None);
        if start != Start::Cold {
            coll.find_one(rawdoc! { "run": run }, &FindOptions::default())
                .await
                .map_err(|e| format!("{op:?} {start:?} warm-up: {e}"))?;
        }
        let address = format!("127.0.0.1:{nx}");
        let held = match start {
            Start::Busy => Some(
                client
                    .pool_check_out(&address)
                    .await
                    .map_err(|e| format!("{op:?} {start:?} holding the idle connection: {e}"))?,
            ),
            _ => None,
        };
        let session = client.start_session(None);
        if op == Op::Commit {
            session
                .start_transaction(TransactionOptions::default())
                .map_err(|e| e.to_string())?;
            let opts = OpOptions {
                session: Some(&session),
                ..Default::default()
            };
            coll.insert_one(
                &rawdoc! { "run": run, "txn": n as i64, "start": start_name(start) },
                &opts,
            )
            .await
            .map_err(|e| format!("{op:?} insert in the transaction: {e}"))?;
        }
        let _ = client.take_command_events();
        let _ = client.take_pool_events();
        let label = format!("{op:?} {start:?} point {n}");
        let filename = format!("cancel-{run}-{}-{n}", start_name(start));
        let finished = match op {
            Op::Find => cancel_at_point(find_all(&coll, run), n).await,
            Op::Insert => {
                let doc = rawdoc! { "run": run, "insert": n as i64 };
                cancel_at_point(insert(&coll, doc), n).await
            }
            Op::Commit => cancel_at_point(commit(&session), n).await,
            Op::Upload => cancel_at_point(upload(&client, &filename), n).await,
        };
        if let Some(conn) = held {
            client.pool_check_in(conn);
        }
        if let Some(result) = finished {
            result.map_err(|e| format!("{label}: not cancelled, but failed: {e}"))?;
            client.close().await;
            // Whether a connect or a read waits varies from run to run (one
            // that does not shifts the later points down by one): only three
            // runs in a row that finish end the search.
            finished_in_a_row += 1;
            if finished_in_a_row == 3 {
                println!(
                    "cancel {op:?} ({start:?}): {cancelled} calls cancelled at successive \
                     points, a request in flight at {in_flight_at} of them"
                );
                return Ok(cancelled);
            }
            continue;
        }
        finished_in_a_row = 0;
        cancelled += 1;
        // The checks of a cancelled call.
        let events = client.take_command_events();
        let pool_events = client.take_pool_events();
        let flying = in_flight(&events);
        if std::env::var_os("CANCEL_VERBOSE").is_some() {
            let names: Vec<String> = events
                .iter()
                .map(|e| format!("{:?} {}", e.kind, e.command_name))
                .collect();
            println!("  {label}: {names:?}");
        }
        if !flying.connections.is_empty() {
            in_flight_at += 1;
        }
        for p in client.pool_status() {
            if p.in_use != 0 {
                return Err(format!(
                    "{label}: {} connection(s) left checked out",
                    p.in_use
                ));
            }
        }
        // CMAP hears every checkout and every establishment end, however
        // the caller went away.
        let count = |k: PoolEventKind| pool_events.iter().filter(|e| e.kind == k).count();
        let started = count(PoolEventKind::ConnectionCheckOutStarted);
        let ended = count(PoolEventKind::ConnectionCheckedOut)
            + count(PoolEventKind::ConnectionCheckOutFailed);
        if started > ended {
            return Err(format!(
                "{label}: {started} checkouts started, {ended} ended (CMAP events)"
            ));
        }
        for created in pool_events
            .iter()
            .filter(|e| e.kind == PoolEventKind::ConnectionCreated)
        {
            let ended = pool_events.iter().any(|e| {
                e.connection_id == created.connection_id
                    && matches!(
                        e.kind,
                        PoolEventKind::ConnectionReady | PoolEventKind::ConnectionClosed
                    )
            });
            if !ended {
                return Err(format!(
                    "{label}: connection {} was created and neither ready nor closed",
                    created.connection_id
                ));
            }
        }
        for id in &flying.connections {
            let closed = pool_events
                .iter()
                .any(|e| e.kind == PoolEventKind::ConnectionClosed && e.connection_id == *id);
            if !closed {
                return Err(format!(
                    "{label}: connection {id} had a request in flight and was not closed"
                ));
            }
        }
        if op == Op::Commit && !flying.connections.is_empty() && !session.is_dirty() {
            return Err(format!(
                "{label}: the session's commit was in flight, yet it is not dirty"
            ));
        }
        // The next operation on the same client reads its own write, on
        // neither the abandoned connection nor session.
        let mark = rawdoc! { "run": run, "after": format!("{label}") };
        insert(&coll, mark.clone())
            .await
            .map_err(|e| format!("{label}: the next insert failed: {e}"))?;
        let found = coll
            .find_one(mark, &FindOptions::default())
            .await
            .map_err(|e| format!("{label}: the next find failed: {e}"))?;
        if found.is_none() {
            return Err(format!("{label}: the next insert's document is not found"));
        }
        for e in client.take_command_events() {
            if flying.connections.contains(&e.connection_id) {
                return Err(format!(
                    "{label}: the abandoned connection {} was used again",
                    e.connection_id
                ));
            }
            // killCursors of the dropped cursor names the cursor's own session.
            let cleanup = e.command_name == "killCursors";
            if !cleanup && lsid(&e).is_some_and(|l| flying.lsids.contains(&l)) {
                return Err(format!(
                    "{label}: the abandoned session was reused by {}",
                    e.command_name
                ));
            }
        }
        match op {
            // A commit may be retried: then the transaction's write is there.
            // nx-27017 refuses to commit a committed transaction again (gap
            // "recommit" of host-tests/spec/nx-gaps.py): then the first commit
            // reached it, and the write must be there all the same.
            Op::Commit => {
                match commit(&session).await {
                    Ok(()) => {}
                    Err(e) if e.to_string().contains("No session specified") => {}
                    Err(e) => return Err(format!("{label}: retrying the commit failed: {e}")),
                }
                let doc = rawdoc! { "run": run, "txn": n as i64, "start": start_name(start) };
                let found = coll
                    .find_one(doc, &FindOptions::default())
                    .await
                    .map_err(|e| format!("{label}: reading the committed write: {e}"))?;
                if found.is_none() {
                    return Err(format!("{label}: the retried commit's write is missing"));
                }
            }
            // No half file is visible: the files document comes last.
            Op::Upload => {
                let files = db.collection("fs.files", None);
                let file = files
                    .find_one(
                        rawdoc! { "filename": filename.as_str() },
                        &FindOptions::default(),
                    )
                    .await
                    .map_err(|e| format!("{label}: reading fs.files: {e}"))?;
                if let Some(f) = file {
                    // Only a whole upload writes it: its chunks must all be there.
                    let bucket = db.gridfs_bucket(BucketOptions::default());
                    let id = f.get("_id").ok().flatten().map(bson::RawBson::from);
                    let bytes = match id {
                        Some(id) => bucket
                            .download_to_bytes(&id, &GridfsOptions::default())
                            .await
                            .map_err(|e| format!("{label}: downloading the file: {e}"))?,
                        None => return Err(format!("{label}: a files document without _id")),
                    };
                    if bytes != upload_bytes() {
                        return Err(format!("{label}: a visible file has {} bytes", bytes.len()));
                    }
                }
            }
            Op::Find | Op::Insert => {}
        }
        session.end().await;
        client.close().await;
    }
    Err(format!(
        "{op:?} {start:?}: still pending after {MAX_POINTS} cancellation points"
    ))
}

fn start_name(start: Start) -> &'static str {
    match start {
        Start::Cold => "cold",
        Start::Warm => "warm",
        Start::Busy => "busy",
    }
}

async fn find_all(coll: &Collection, run: i64) -> mongo_wasi::Result<()> {
    let opts = FindOptions {
        batch_size: Some(2),
        ..Default::default()
    };
    let mut cursor = coll
        .find(rawdoc! { "run": run, "seed": { "$exists": true } }, &opts)
        .await?;
    let docs = cursor.collect(100).await?;
    match docs.len() {
        5 => Ok(()),
        n => Err(mongo_wasi::Error::invalid_argument(format!(
            "find read {n} of 5 documents"
        ))),
    }
}

async fn insert(coll: &Collection, doc: RawDocumentBuf) -> mongo_wasi::Result<()> {
    coll.insert_one(&doc, &OpOptions::default())
        .await
        .map(|_| ())
}

async fn commit(session: &mongo_wasi::Session) -> mongo_wasi::Result<()> {
    session.commit_transaction(None).await
}

/// Three chunks of 1 KiB and a short one: four chunk inserts, then the files document.
fn upload_bytes() -> Vec<u8> {
    (0..3500u32).map(|i| (i % 251) as u8).collect()
}

async fn upload(client: &Client, filename: &str) -> mongo_wasi::Result<()> {
    let bucket = client
        .database("p3cancel", None)
        .gridfs_bucket(BucketOptions {
            chunk_size_bytes: Some(1024),
            ..Default::default()
        });
    let options = UploadOptions {
        id: None,
        chunk_size_bytes: None,
        metadata: None,
        timeout_ms: None,
        session: None,
    };
    bucket
        .upload_from_bytes(filename, &upload_bytes(), options)
        .await
        .map(|_| ())
}
