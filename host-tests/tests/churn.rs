//! Zero connection churn under CSOT (the CMAP "pending response" proposal,
//! DRIVERS-2884): when the server's MaxTimeMSExpired reply comes after the
//! client's own deadline, the connection is not closed; the next checkout
//! drains the late reply. The failpoint proxy blocks `find` past `maxTimeMS`
//! and sends the code-50 reply `proxyReplyDelayMS` after it; the proxy counts
//! the connections the driver opens.

use bson::rawdoc;
use host_tests::bindings::exports::mongo_wasi::driver::types::{
    ErrorKind, PoolEvent, PoolEventKind,
};
use host_tests::guest::{Client, Database, Guest};
use host_tests::listeners::{Behaviour, Listener, LATE_REPLY};
use mongo_wasi_proxy::{Proxy, ProxyConfig};
use std::time::{Duration, Instant};

struct Setup {
    guest: Guest,
    client: Client,
    db: Database,
    proxy: Proxy,
}

/// One pooled connection (churn would show at once) and no heartbeat
/// during the test (a heartbeat check opens a connection of its own).
fn setup(test: &str) -> Setup {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::new(backend)).unwrap();
    let addr = proxy.addresses()[0];
    let mut guest = Guest::new(&[addr]).unwrap();
    let uri = format!("mongodb://{addr}/?maxPoolSize=1&heartbeatFrequencyMS=3600000");
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    let db = guest
        .database(client, &format!("churn_{test}"), None)
        .unwrap();
    guest
        .run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    Setup {
        guest,
        client,
        db,
        proxy,
    }
}

/// `find` blocks far past any maxTimeMS; the code-50 reply comes `late_ms` after it.
fn block_finds(s: &mut Setup, mode: bson::RawBson, late_ms: i32) {
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": mode,
        "data": {
            "failCommands": ["find"],
            "blockConnection": true,
            "blockTimeMS": 60_000,
            "proxyReplyDelayMS": late_ms,
        },
    };
    s.guest
        .run_command(admin, &fp, None)
        .unwrap()
        .expect("configureFailPoint");
}

fn find(s: &mut Setup, timeout_ms: u64) -> Result<(), ErrorKind> {
    s.guest
        .run_command(s.db, &rawdoc! { "find": "c" }, Some(timeout_ms))
        .unwrap()
        .map(|_| ())
        .map_err(|e| e.kind)
}

/// The pending-response events taken (the CMAP ones are checked in cmap_events.rs).
fn pending_events(guest: &mut Guest, client: Client) -> Vec<PoolEvent> {
    use PoolEventKind::*;
    let all = guest.take_pool_events(client).unwrap();
    all.into_iter()
        .filter(|e| {
            matches!(
                e.kind,
                PendingResponseStarted | PendingResponseSucceeded | PendingResponseFailed
            )
        })
        .collect()
}

#[derive(Debug, Default)]
struct Figures {
    ops: usize,
    opened: u64,
    closed: u64,
    drained: usize,
    drain_failed: usize,
    drain_closed: usize,
    /// Wall time of the operations.
    took: Duration,
}

/// `ops` finds, each timing out with its reply `late_ms` after its maxTimeMS.
fn run_delay(late_ms: u64, timeout_ms: u64, ops: usize) -> Figures {
    let mut s = setup(&format!("late{late_ms}"));
    block_finds(&mut s, "alwaysOn".into(), late_ms as i32);
    s.guest.take_pool_events(s.client).unwrap();
    s.proxy.reset_stats();
    let all = Instant::now();
    for i in 0..ops {
        let started = Instant::now();
        let r = find(&mut s, timeout_ms);
        assert_eq!(r, Err(ErrorKind::Timeout), "op {i} at {late_ms} ms late");
        // Bounded: the drain and the op together stay within timeoutMS (plus slack).
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(timeout_ms + 250),
            "op {i} took {took:?} with timeoutMS={timeout_ms}"
        );
    }
    let took = all.elapsed();
    let stats = s.proxy.stats();
    let events = pending_events(&mut s.guest, s.client);
    let count = |k: PoolEventKind| events.iter().filter(|e| e.kind == k).count();
    Figures {
        ops,
        opened: stats.connections_opened,
        closed: stats.connections_closed,
        drained: count(PoolEventKind::PendingResponseSucceeded),
        drain_failed: count(PoolEventKind::PendingResponseFailed),
        drain_closed: events.iter().filter(|e| e.closed).count(),
        took,
    }
}

/// The churn figure: new connections per delay of the code-50 reply after
/// maxTimeMS. timeoutMS is the delay plus 40 ms: the next operation first
/// drains the late reply (about `late` ms, as the previous one timed out
/// when maxTimeMS expired), then still has ~40 ms for its own round trip
/// and maxTimeMS. A smaller budget would spend it all on the drain, and the
/// connection would (rightly) stay pending rather than be reused.
#[test]
fn late_max_time_ms_replies_open_no_new_connections() {
    // (delay after maxTimeMS, operations): about 8 s of operations each
    // (each lasts its whole timeoutMS), to keep the test near 40 s.
    for (late, ops) in [(0u64, 200usize), (5, 180), (20, 130), (100, 55)] {
        let timeout = late + 40;
        let f = run_delay(late, timeout, ops);
        println!(
            "churn: reply {late:>3} ms after maxTimeMS, timeoutMS={timeout}: {} ops, {} new connections \
             ({} closed), {} replies drained, {} drains failed, {:?}",
            f.ops, f.opened, f.closed, f.drained, f.drain_failed, f.took
        );
        assert_eq!(f.opened, 0, "new connections at {late} ms late: {f:?}");
        assert_eq!(f.closed, 0, "closed connections at {late} ms late: {f:?}");
        assert_eq!(f.drain_closed, 0, "{f:?}");
        if late >= 5 {
            // The client timed out first every time, so every later operation
            // met a pending connection; nearly all drained it (on a loaded
            // machine a drain may outlast an operation's budget: the
            // connection then stays pending for the next one, still no churn).
            assert!(f.drained + f.drain_failed >= f.ops - 1, "{f:?}");
            assert!(f.drained * 10 >= f.ops * 8, "{f:?}");
        }
    }
}

/// A reply that does not come within the 3 s window: an operation that runs
/// out of time while draining leaves the connection pending (no churn); past
/// the window the aliveness check finds nothing, the connection is closed and
/// the operation goes on with a new one.
#[test]
fn a_reply_lost_past_the_window_closes_the_connection_and_the_operation_goes_on() {
    let mut s = setup("lost");
    block_finds(&mut s, rawdoc! { "times": 1 }.into(), 5_000);
    assert_eq!(find(&mut s, 100), Err(ErrorKind::Timeout));
    s.proxy.reset_stats();
    s.guest.take_pool_events(s.client).unwrap();

    // Inside the window, out of time: still pending, nothing opened.
    let started = Instant::now();
    assert_eq!(find(&mut s, 100), Err(ErrorKind::Timeout));
    assert!(started.elapsed() < Duration::from_millis(600));
    let events = pending_events(&mut s.guest, s.client);
    let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.closed)).collect();
    use PoolEventKind::*;
    assert_eq!(
        kinds,
        [
            (PendingResponseStarted, false),
            (PendingResponseFailed, false)
        ]
    );
    assert_eq!(s.proxy.stats().connections_opened, 0);

    // Past the window: closed, and a new connection serves the find.
    std::thread::sleep(Duration::from_millis(3_100));
    let started = Instant::now();
    assert_eq!(find(&mut s, 2_000), Ok(()));
    assert!(started.elapsed() < Duration::from_millis(1_500));
    let events = pending_events(&mut s.guest, s.client);
    let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.closed)).collect();
    assert_eq!(
        kinds,
        [
            (PendingResponseStarted, false),
            (PendingResponseFailed, true)
        ]
    );
    assert_eq!(s.proxy.stats().connections_opened, 1);
}

/// A drained reply must answer the request that timed out: one whose
/// `responseTo` names another closes the connection, and a new one is opened.
#[test]
fn a_drained_reply_for_another_request_closes_the_connection() {
    let listener = Listener::start(Behaviour::LateWrongReply).unwrap();
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/?timeoutMS=100", listener.addr);
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    let db = guest.database(client, "admin", None).unwrap();
    let ping = |guest: &mut Guest, ms| {
        guest
            .run_command(db, &rawdoc! { "ping": 1 }, Some(ms))
            .unwrap()
            .map(|_| ())
            .map_err(|e| e.kind)
    };
    // Connect and handshake first (the server check's connection joins the
    // pool), so the 100 ms ping times out waiting for its reply, not in a
    // handshake slowed by a loaded machine (which would close the connection).
    guest.check_servers(client).unwrap().expect("check");
    guest.take_pool_events(client).unwrap();
    assert_eq!(ping(&mut guest, 100), Err(ErrorKind::Timeout));
    assert_eq!(listener.accepted(), 1);
    // The wrong reply is in the socket by now.
    std::thread::sleep(LATE_REPLY);
    // The new connection's ping meets the same server: a protocol error.
    assert_eq!(ping(&mut guest, 2_000), Err(ErrorKind::Protocol));
    assert_eq!(listener.accepted(), 2);
    let events = pending_events(&mut guest, client);
    let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.closed)).collect();
    use PoolEventKind::*;
    assert_eq!(
        kinds,
        [
            (PendingResponseStarted, false),
            (PendingResponseFailed, true)
        ]
    );
    let reason = events[1].reason.as_deref().unwrap_or_default();
    assert!(reason.contains("drained reply answers request"), "{reason}");
}
