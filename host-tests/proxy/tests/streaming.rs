//! mongod 4.4+'s streaming monitoring protocol through the proxy: `topologyVersion` in every
//! hello, the awaitable hello, its exhaust stream, fail points on each streamed reply, and
//! `replSetFreeze`/`replSetStepDown` as the SDAM spec tests run them.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use bson::{doc, oid::ObjectId, Bson, Document};
use common::*;
use mongo_wasi_proxy::{Proxy, ProxyConfig};

const MORE_TO_COME: u32 = 1 << 1;
const EXHAUST_ALLOWED: u32 = 1 << 16;

fn topology_version(h: &Document) -> (ObjectId, i64) {
    let tv = h
        .get_document("topologyVersion")
        .unwrap_or_else(|_| panic!("no topologyVersion in {h}"));
    assert_eq!(tv.len(), 2, "{tv}");
    (
        tv.get_object_id("processId").unwrap(),
        tv.get_i64("counter").unwrap(),
    )
}

fn tv_doc(process_id: ObjectId, counter: i64) -> Document {
    doc! { "processId": process_id, "counter": counter }
}

fn awaitable(tv: (ObjectId, i64), max_await_ms: i64) -> Document {
    doc! { "hello": 1, "topologyVersion": tv_doc(tv.0, tv.1), "maxAwaitTimeMS": max_await_ms }
}

/// One reply: (requestID, responseTo, flags, body); None when the proxy closed.
fn read_reply(c: &mut Client) -> Option<(i32, i32, u32, Document)> {
    let (id, to, op, payload) = read_msg(&mut c.stream)?;
    assert_eq!(op, 2013);
    let flags = u32::from_le_bytes(payload[..4].try_into().unwrap());
    Some((id, to, flags, body_of(&payload)))
}

#[test]
fn every_hello_carries_a_stable_topology_version() {
    let s = Setup::standalone();
    let mut a = s.client();
    let mut b = s.client();
    let first = topology_version(&a.admin(doc! { "hello": 1 }));
    assert_eq!(first.1, 0, "the counter starts at 0");
    assert_eq!(topology_version(&a.admin(doc! { "isMaster": 1 })), first);
    assert_eq!(topology_version(&b.admin(doc! { "ismaster": 1 })), first);
    let legacy = b.op_query("admin.$cmd", doc! { "isMaster": 1 }).unwrap();
    assert_eq!(topology_version(&legacy), first);

    // Each member of a set is a mongod of its own.
    let rs = Setup::replica_set(3, 1);
    let ids: Vec<_> = rs
        .proxy
        .addresses()
        .iter()
        .map(|a| topology_version(&Client::connect(*a).admin(doc! { "hello": 1 })))
        .collect();
    assert!(ids.iter().all(|(_, counter)| *counter == 0), "{ids:?}");
    for (i, x) in ids.iter().enumerate() {
        assert!(ids[i + 1..].iter().all(|y| y.0 != x.0), "{ids:?}");
    }

    // Mongoses too; an older presented server (4.2) has none.
    let backend = FakeBackend::start();
    let sharded = Proxy::start(ProxyConfig::sharded(backend.addr, 2)).unwrap();
    let mut m = Client::connect(sharded.addresses()[1]);
    let h = m.admin(doc! { "hello": 1 });
    assert_eq!(h.get_str("msg").unwrap(), "isdbgrid");
    topology_version(&h);
    sharded.set_version("4.2.0").unwrap();
    assert!(!m.admin(doc! { "hello": 1 }).contains_key("topologyVersion"));
}

#[test]
fn an_awaited_hello_waits_for_max_await_time_ms_then_answers() {
    let s = Setup::standalone();
    let mut c = s.client();
    let tv = topology_version(&c.admin(doc! { "hello": 1 }));
    let start = Instant::now();
    let h = c.admin(awaitable(tv, 600));
    let waited = elapsed_ms(start);
    assert_ok(&h);
    assert!(h.get_bool("isWritablePrimary").unwrap());
    assert_eq!(topology_version(&h), tv);
    assert!(
        (550..5000).contains(&waited),
        "waited {waited} ms for maxAwaitTimeMS 600"
    );
    // maxAwaitTimeMS 0: at once.
    assert_ok(&c.admin(awaitable(tv, 0)));
    // The legacy OP_QUERY isMaster waits too.
    let start = Instant::now();
    let legacy = c
        .op_query(
            "admin.$cmd",
            doc! { "isMaster": 1, "topologyVersion": tv_doc(tv.0, tv.1), "maxAwaitTimeMS": 300i64 },
        )
        .unwrap();
    assert_eq!(topology_version(&legacy), tv);
    assert!(elapsed_ms(start) >= 250, "OP_QUERY isMaster did not wait");
}

#[test]
fn an_older_counter_or_another_process_answers_at_once() {
    let s = Setup::replica_set(2, 0);
    let mut c = s.client();
    let tv = topology_version(&c.admin(doc! { "hello": 1 }));
    s.proxy.step_down(Some(0)).unwrap(); // a new term: member 0's hello changed
    let start = Instant::now();
    let h = c.admin(awaitable(tv, 20_000));
    assert!(elapsed_ms(start) < 5000, "an old counter waited");
    assert_eq!(topology_version(&h), (tv.0, tv.1 + 1));
    let start = Instant::now();
    assert_ok(&c.admin(awaitable((ObjectId::new(), tv.1 + 5), 20_000)));
    assert!(elapsed_ms(start) < 5000, "another process id waited");
}

#[test]
fn malformed_awaitable_hellos_get_mongods_errors() {
    let s = Setup::standalone();
    let mut c = s.client();
    let tv = topology_version(&c.admin(doc! { "hello": 1 }));
    let half = c.admin(doc! { "hello": 1, "maxAwaitTimeMS": 100 });
    assert_error(&half, 31368, "Location31368");
    assert!(half
        .get_str("errmsg")
        .unwrap()
        .contains("must include a 'topologyVersion'"));
    let other_half = c.admin(doc! { "hello": 1, "topologyVersion": tv_doc(tv.0, tv.1) });
    assert_error(&other_half, 31368, "Location31368");
    let ahead = c.admin(awaitable((tv.0, tv.1 + 1), 0));
    assert_eq!(code(&ahead), Some(31382), "{ahead}");
    let int_counter = c.admin(doc! { "hello": 1, "maxAwaitTimeMS": 0,
    "topologyVersion": { "processId": tv.0, "counter": 0 } });
    assert_error(&int_counter, 14, "TypeMismatch");
    assert_eq!(
        code(&c.admin(awaitable(tv, -1))),
        Some(51024),
        "negative maxAwaitTimeMS"
    );
    // Exhaust needs maxAwaitTimeMS.
    let id = c.send("admin", doc! { "hello": 1 }, EXHAUST_ALLOWED);
    let (_, to, flags, reply) = read_reply(&mut c).unwrap();
    assert_eq!((to, flags & MORE_TO_COME), (id, 0));
    assert_eq!(code(&reply), Some(51756), "{reply}");
    assert_ok(&c.admin(doc! { "ping": 1 }));
}

#[test]
fn a_step_down_wakes_awaiting_hellos_on_both_members() {
    let s = Setup::replica_set(2, 0);
    let [primary, secondary] = [s.proxy.addresses()[0], s.proxy.addresses()[1]];
    let mut admin = Client::connect(primary);
    let mut frozen = Client::connect(secondary);
    // What the SDAM spec test rediscover-quickly-after-step-down runs.
    let unfrozen = frozen.admin(doc! { "replSetFreeze": 0 });
    assert_ok(&unfrozen);
    assert_eq!(unfrozen.get_str("info").unwrap(), "unfreezing");
    let waiters: Vec<_> = [primary, secondary]
        .into_iter()
        .map(|addr| {
            thread::spawn(move || {
                let mut c = Client::connect(addr);
                c.stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                let tv = topology_version(&c.admin(doc! { "hello": 1 }));
                let start = Instant::now();
                let h = c.admin(awaitable(tv, 10_000));
                (tv, h, start.elapsed())
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(500));
    let step_down =
        doc! { "replSetStepDown": 30, "secondaryCatchUpPeriodSecs": 30, "force": false };
    assert_ok(&admin.admin(step_down));
    let results: Vec<_> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    for (i, (tv, h, took)) in results.iter().enumerate() {
        assert!(
            *took < Duration::from_secs(5),
            "member {i} answered after {took:?}"
        );
        assert_eq!(topology_version(h), (tv.0, tv.1 + 1), "member {i}");
        assert_eq!(h.get_str("primary").unwrap(), secondary.to_string());
    }
    assert!(!results[0].1.get_bool("isWritablePrimary").unwrap());
    assert!(results[1].1.get_bool("isWritablePrimary").unwrap());
    // A primary refuses to freeze; the new secondary's not-primary errors carry its version.
    let mut new_primary = Client::connect(secondary);
    assert_error(
        &new_primary.admin(doc! { "replSetFreeze": 10 }),
        95,
        "NotSecondary",
    );
    let refused = admin.run("test", doc! { "insert": "c", "documents": [{}] });
    assert_eq!(code(&refused), Some(10107));
    assert_eq!(topology_version(&refused).1, 1);
    let bad = admin.admin(doc! { "replSetStepDown": 5, "secondaryCatchUpPeriodSecs": 10 });
    assert_error(&bad, 2, "BadValue");
}

#[test]
fn replset_freeze_keeps_a_member_from_being_elected() {
    let s = Setup::replica_set(3, 0);
    let addrs = s.proxy.addresses();
    assert_ok(&Client::connect(addrs[1]).admin(doc! { "replSetFreeze": 60 }));
    assert_ok(&Client::connect(addrs[0]).admin(doc! { "replSetStepDown": 60 }));
    assert_eq!(s.proxy.primary(), Some(2), "member 1 is frozen");
    assert_ok(&Client::connect(addrs[1]).admin(doc! { "replSetFreeze": 0 }));
    assert_ok(&Client::connect(addrs[2]).admin(doc! { "replSetStepDown": 60 }));
    assert_eq!(s.proxy.primary(), Some(0));
    let standalone = Setup::standalone();
    assert_error(
        &standalone.client().admin(doc! { "replSetFreeze": 0 }),
        76,
        "NoReplicationEnabled",
    );
}

#[test]
fn an_exhaust_hello_streams_replies_chained_by_response_to() {
    let s = Setup::replica_set(2, 0);
    let mut c = Client::connect(s.proxy.addresses()[1]);
    let tv = topology_version(&c.admin(doc! { "hello": 1 }));
    let request = c.send("admin", awaitable(tv, 300), EXHAUST_ALLOWED);
    let mut previous = request;
    for turn in 0..3 {
        let start = Instant::now();
        let (id, to, flags, h) = read_reply(&mut c).expect("a streamed reply");
        assert_eq!(to, previous, "turn {turn}: responseTo");
        assert_ne!(flags & MORE_TO_COME, 0, "turn {turn}: moreToCome");
        assert_ok(&h);
        assert_eq!(topology_version(&h), tv);
        assert!(elapsed_ms(start) >= 250, "turn {turn} did not wait");
        previous = id;
    }
    // A step-down: the next reply comes early, with the new counter and role.
    let stepper = thread::spawn({
        let primary = s.proxy.addresses()[0];
        move || {
            thread::sleep(Duration::from_millis(50));
            Client::connect(primary).admin(doc! { "replSetStepDown": 10 })
        }
    });
    let mut seen = tv;
    for _ in 0..5 {
        let (id, to, flags, h) = read_reply(&mut c).expect("a streamed reply");
        assert_eq!(to, previous);
        assert_ne!(flags & MORE_TO_COME, 0);
        previous = id;
        seen = topology_version(&h);
        if seen.1 > tv.1 {
            assert!(h.get_bool("isWritablePrimary").unwrap());
            break;
        }
    }
    assert_ok(&stepper.join().unwrap());
    assert_eq!(seen, (tv.0, tv.1 + 1));
    // The client hangs up: the proxy's thread leaves the wait.
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.proxy.stats().connections_current > 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.proxy.stats().connections_current, 0);
}

#[test]
fn fail_points_apply_to_each_streamed_reply() {
    let s = Setup::standalone();
    let mut c = Client::with_app_name(s.addr(), "streamer");
    let mut admin = s.client();
    let tv = topology_version(&c.admin(doc! { "hello": 1 }));
    c.send("admin", awaitable(tv, 200), EXHAUST_ALLOWED);
    let (_, _, flags, _) = read_reply(&mut c).unwrap();
    assert_ne!(flags & MORE_TO_COME, 0);
    // Another app's fail point does not touch the stream; an error ends it.
    fail_point(
        &mut admin,
        "alwaysOn".into(),
        doc! { "failCommands": ["hello"], "appName": "other", "closeConnection": true },
    );
    for _ in 0..2 {
        let (_, _, flags, h) = read_reply(&mut c).expect("a reply");
        assert_ok(&h);
        assert_ne!(flags & MORE_TO_COME, 0);
    }
    fail_point(
        &mut admin,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["hello"], "appName": "streamer", "errorCode": 91 },
    );
    let mut ended = None;
    for _ in 0..10 {
        let (_, _, flags, h) = read_reply(&mut c).expect("a reply");
        if !ok(&h) {
            ended = Some((flags, h));
            break;
        }
        assert_ne!(flags & MORE_TO_COME, 0);
    }
    let (flags, error) = ended.expect("the error reply");
    assert_eq!(flags & MORE_TO_COME, 0, "an error ends the stream");
    assert_error(&error, 91, "ShutdownInProgress");
    assert_ok(&c.admin(doc! { "ping": 1 }));

    // blockConnection delays a streamed reply; closeConnection ends the stream.
    c.send("admin", awaitable(tv, 100), EXHAUST_ALLOWED);
    read_reply(&mut c).unwrap();
    fail_point(
        &mut admin,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["hello"], "appName": "streamer", "blockConnection": true,
        "blockTimeMS": 700 },
    );
    let mut slowest = 0;
    for _ in 0..6 {
        let start = Instant::now();
        let (_, _, flags, h) = read_reply(&mut c).unwrap();
        assert_ok(&h);
        assert_ne!(flags & MORE_TO_COME, 0);
        slowest = slowest.max(elapsed_ms(start));
    }
    assert!(slowest >= 700, "no reply was blocked: slowest {slowest} ms");
    fail_point(
        &mut admin,
        "alwaysOn".into(),
        doc! { "failCommands": ["hello"], "appName": "streamer", "closeConnection": true },
    );
    let start = Instant::now();
    let mut closed = false;
    for _ in 0..20 {
        if read_reply(&mut c).is_none() {
            closed = true;
            break;
        }
    }
    assert!(closed, "closeConnection did not end the stream");
    assert!(elapsed_ms(start) < 5000);
    fail_point(&mut admin, "off".into(), doc! {});
    let entered = admin.admin(doc! { "proxyStats": 1 });
    let fc = entered.get_document("failPoints").unwrap();
    assert!(!fc.contains_key("failCommand"), "{fc}");
    assert!(s.proxy.stats().commands["hello"] >= 8);
}

#[test]
fn shutdown_does_not_wait_for_an_awaiting_hello() {
    let mut s = Setup::standalone();
    let addr = s.addr();
    let waiter = thread::spawn(move || {
        let mut c = Client::connect(addr);
        c.stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let tv = topology_version(&c.admin(doc! { "hello": 1 }));
        c.send("admin", awaitable(tv, 60_000), EXHAUST_ALLOWED);
        read_reply(&mut c).map(|r| r.3)
    });
    let mut c = s.client();
    let tv = topology_version(&c.admin(doc! { "hello": 1 }));
    c.send("admin", awaitable(tv, 60_000), 0);
    thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    s.proxy.shutdown();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        start.elapsed()
    );
    assert!(c.is_closed());
    assert!(waiter.join().unwrap().is_none(), "closed without a reply");
}

#[test]
fn a_new_presented_version_wakes_awaiting_hellos() {
    let s = Setup::standalone();
    let mut c = s.client();
    let tv = topology_version(&c.admin(doc! { "hello": 1 }));
    let proxy_addr = s.addr();
    let setter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        Client::connect(proxy_addr).admin(doc! { "proxySetVersion": "8.0.0" })
    });
    let start = Instant::now();
    let h = c.admin(awaitable(tv, 10_000));
    assert!(elapsed_ms(start) < 5000);
    assert_ok(&setter.join().unwrap());
    assert_eq!(h.get_i32("maxWireVersion").unwrap(), 25);
    assert_eq!(topology_version(&h), (tv.0, 1));
    assert!(matches!(h.get("topologyVersion"), Some(Bson::Document(_))));
}
