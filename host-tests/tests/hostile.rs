//! The deadline holds against servers that misbehave while answering: a
//! reply trickled or flooded past the deadline, a cursor that answers empty
//! batches forever, a cursor whose deadline passed before its getMore.
//! Loopback listeners from `host_tests::listeners`, through the component.

use host_tests::bindings::exports::mongo_wasi::driver::collection::AggregateOptions;
use host_tests::bindings::exports::mongo_wasi::driver::cursor::TimeoutMode;
use host_tests::bindings::exports::mongo_wasi::driver::types::{CommandEventKind, ErrorKind};
use host_tests::guest::{find_options, Guest};
use host_tests::listeners::{Behaviour, Listener};
use std::time::{Duration, Instant};

/// Slack above the deadline: scheduling on a busy 2-core machine, not driver work.
const TOLERANCE: Duration = Duration::from_millis(1500);

fn assert_within(elapsed: Duration, deadline: Duration) {
    assert!(
        elapsed + Duration::from_millis(5) >= deadline,
        "returned after {elapsed:?}, before the {deadline:?} deadline"
    );
    assert!(
        elapsed <= deadline + TOLERANCE,
        "returned after {elapsed:?}, long past the {deadline:?} deadline"
    );
}

/// A ping with `timeout_ms` against a fresh client: how long it took, and its result.
fn timed_ping(
    behaviour: Behaviour,
    timeout_ms: u64,
) -> (Duration, host_tests::guest::WitResult<bson::RawDocumentBuf>) {
    let listener = Listener::start(behaviour).unwrap();
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/", listener.addr);
    let client = guest.connect(&uri, None, false).unwrap().unwrap();
    let db = guest.database(client, "admin", None).unwrap();
    let started = Instant::now();
    let r = guest
        .run_command(db, &bson::rawdoc! { "ping": 1 }, Some(timeout_ms))
        .unwrap();
    (started.elapsed(), r)
}

#[test]
fn a_trickled_reply_times_out_at_the_deadline() {
    // The listener takes some 4 s to send its reply, a few bytes at a time.
    let (elapsed, r) = timed_ping(Behaviour::Trickle, 500);
    let err = r.expect_err("the reply cannot arrive within 500 ms");
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(err.message.contains("socket read"), "{err:?}");
    assert_within(elapsed, Duration::from_millis(500));
}

#[test]
fn a_flooded_reply_times_out_near_the_deadline() {
    // 200 MB as fast as loopback takes it: data is ready on every read.
    let (elapsed, r) = timed_ping(Behaviour::Flood, 300);
    let err = r.expect_err("200 MB cannot be read within 300 ms");
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(err.message.contains("socket read"), "{err:?}");
    assert_within(elapsed, Duration::from_millis(300));
}

#[test]
fn a_write_to_a_slow_reader_times_out_at_the_deadline() {
    let listener = Listener::start(Behaviour::SlowReader).unwrap();
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/", listener.addr);
    let client = guest.connect(&uri, None, false).unwrap().unwrap();
    let db = guest.database(client, "db", None).unwrap();
    let coll = guest.collection(db, "coll", None).unwrap();
    // 10 MB taken at some 50 KB/s: minutes, against a 500 ms deadline.
    let doc = bson::rawdoc! { "_id": 1, "pad": "x".repeat(10 << 20) };
    let opts = host_tests::bindings::exports::mongo_wasi::driver::collection::OpOptions {
        timeout_ms: Some(500),
        ..host_tests::guest::no_options()
    };
    let started = Instant::now();
    let err = guest.insert_one(coll, &doc, &opts).unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(err.message.contains("socket write"), "{err:?}");
    assert_within(started.elapsed(), Duration::from_millis(500));
}

/// A client on an `EmptyBatches` listener, its `db` database and its `coll` collection.
struct CursorServer {
    listener: Listener,
    guest: Guest,
    client: host_tests::guest::Client,
    db: host_tests::guest::Database,
    coll: host_tests::guest::Collection,
}

fn cursor_server(monitor: bool) -> CursorServer {
    let listener = Listener::start(Behaviour::EmptyBatches).unwrap();
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/", listener.addr);
    let client = guest.connect(&uri, None, monitor).unwrap().unwrap();
    let db = guest.database(client, "db", None).unwrap();
    let coll = guest.collection(db, "coll", None).unwrap();
    CursorServer {
        listener,
        guest,
        client,
        db,
        coll,
    }
}

#[test]
fn endless_empty_batches_come_back_one_getmore_per_call() {
    let mut s = cursor_server(false);
    let opts = find_options();
    let opts = host_tests::bindings::exports::mongo_wasi::driver::collection::FindOptions {
        timeout_ms: Some(5_000),
        ..opts
    };
    let cursor = s
        .guest
        .find(s.coll, &bson::rawdoc! {}, &opts)
        .unwrap()
        .unwrap();
    let first = s.guest.next_batch(cursor).unwrap().unwrap();
    assert_eq!(first.documents.len(), 1, "the find's own batch");
    assert_eq!(s.listener.count("getMore"), 0);
    for call in 1..=3 {
        let started = Instant::now();
        let batch = s.guest.next_batch(cursor).unwrap().unwrap();
        assert!(batch.documents.is_empty());
        assert!(!batch.exhausted, "the cursor stays open");
        assert_eq!(s.listener.count("getMore"), call, "one getMore per call");
        assert!(started.elapsed() < TOLERANCE, "{:?}", started.elapsed());
    }
}

#[test]
fn a_cursor_past_its_deadline_sends_no_getmore_and_keeps_its_connection() {
    let mut s = cursor_server(false);
    let opts = host_tests::bindings::exports::mongo_wasi::driver::collection::FindOptions {
        timeout_ms: Some(800),
        ..find_options()
    };
    let cursor = s
        .guest
        .find(s.coll, &bson::rawdoc! {}, &opts)
        .unwrap()
        .unwrap();
    let first = s.guest.next_batch(cursor).unwrap().unwrap();
    assert_eq!(first.documents.len(), 1);
    std::thread::sleep(Duration::from_millis(900));
    let err = s.guest.next_batch(cursor).unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    // The unused connection went back to the pool: the next command reuses it.
    s.guest
        .run_command(s.db, &bson::rawdoc! { "ping": 1 }, Some(5_000))
        .unwrap()
        .unwrap();
    assert_eq!(s.listener.accepted(), 1, "no new connection");
    // Time for a getMore sent on another connection to be logged too.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        s.listener.commands(),
        ["hello", "find", "ping"],
        "no getMore was sent"
    );
}

fn aggregate_options(
    timeout_ms: Option<u64>,
    extra: Option<bson::RawDocumentBuf>,
) -> AggregateOptions {
    AggregateOptions {
        timeout_ms,
        session: None,
        batch_size: None,
        timeout_mode: None,
        extra: extra.map(|d| d.into_bytes()),
    }
}

/// The started events' commands named `name`.
fn started(
    guest: &mut Guest,
    client: host_tests::guest::Client,
    name: &str,
) -> Vec<bson::RawDocumentBuf> {
    guest
        .take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == CommandEventKind::Started && e.command_name == name)
        .map(|e| bson::RawDocumentBuf::from_bytes(e.command.unwrap()).unwrap())
        .collect()
}

#[test]
fn a_tailable_run_cursor_command_iterates_without_max_time_ms() {
    let mut s = cursor_server(true);
    let command = bson::rawdoc! { "find": "coll", "tailable": true };
    let opts = aggregate_options(Some(1_000), None);
    let cursor = s
        .guest
        .run_cursor_command(s.db, &command, &opts)
        .unwrap()
        .unwrap();
    let finds = started(&mut s.guest, s.client, "find");
    assert_eq!(finds.len(), 1);
    assert!(
        finds[0].get("maxTimeMS").unwrap().is_none(),
        "tailable non-awaitData: no maxTimeMS on any command: {:?}",
        finds[0]
    );
    s.guest.next_batch(cursor).unwrap().unwrap();
    for call in 1..=2 {
        let batch = s.guest.next_batch(cursor).unwrap().unwrap();
        assert!(batch.documents.is_empty() && !batch.exhausted);
        assert_eq!(s.listener.count("getMore"), call, "one getMore per call");
    }
    let get_mores = started(&mut s.guest, s.client, "getMore");
    assert_eq!(get_mores.len(), 2);
    for g in &get_mores {
        assert!(g.get("maxTimeMS").unwrap().is_none(), "{g:?}");
    }
}

#[test]
fn a_tailable_await_run_cursor_command_sends_its_get_more_max_time() {
    let mut s = cursor_server(true);
    let command = bson::rawdoc! { "find": "coll", "tailable": true, "awaitData": true };
    let opts = aggregate_options(Some(1_000), Some(bson::rawdoc! { "maxTimeMS": 50 }));
    let cursor = s
        .guest
        .run_cursor_command(s.db, &command, &opts)
        .unwrap()
        .unwrap();
    s.guest.next_batch(cursor).unwrap().unwrap();
    s.guest.next_batch(cursor).unwrap().unwrap();
    let get_mores = started(&mut s.guest, s.client, "getMore");
    assert_eq!(get_mores.len(), 1);
    assert_eq!(get_mores[0].get_i64("maxTimeMS").unwrap(), 50);
    // maxTimeMS for getMore must stay below timeoutMS (CSOT spec).
    let opts = aggregate_options(Some(1_000), Some(bson::rawdoc! { "maxTimeMS": 1_000 }));
    let err = s
        .guest
        .run_cursor_command(s.db, &command, &opts)
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err:?}");
}

#[test]
fn a_tailable_run_cursor_command_refuses_cursor_lifetime() {
    let mut s = cursor_server(false);
    let command = bson::rawdoc! { "find": "coll", "tailable": true };
    let opts = AggregateOptions {
        timeout_mode: Some(TimeoutMode::CursorLifetime),
        ..aggregate_options(Some(1_000), None)
    };
    let err = s
        .guest
        .run_cursor_command(s.db, &command, &opts)
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err:?}");
    assert_eq!(
        s.listener.count("find"),
        0,
        "refused before anything is sent"
    );
}
