//! mongod's `{$where: "sleep(N) || true"}`, emulated by the proxy (`src/conn/where_sleep.rs`):
//! the command is held N ms, then forwarded without that `$where`. Against the fake backend:
//! the timing, maxTimeMS, and a client hanging up mid-sleep. Against nx-27017 (with
//! `MONGO_WASI_URI`): the documents come back, and any other `$where` is still refused.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use common::*;
use mongo_wasi_proxy::{Proxy, ProxyConfig};

const SLEEP: &str = "sleep(300) || true";
/// Generous: the machine running the tests is loaded.
const SLACK: Duration = Duration::from_secs(3);

fn held(start: Instant) -> Duration {
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(300), "held only {took:?}");
    assert!(took < Duration::from_millis(300) + SLACK, "held {took:?}");
    took
}

#[test]
fn find_and_update_are_held_then_forwarded() {
    let s = Setup::standalone();
    let mut c = s.client();
    let start = Instant::now();
    let r = c.run("test", doc! { "find": "c", "filter": { "$where": SLEEP } });
    held(start);
    assert_eq!(r.get_str("echo").unwrap(), "find", "{r}");
    let update = doc! { "update": "c", "updates": [{ "q": { "$where": SLEEP }, "u": { "$set": { "a": 1 } } }] };
    let start = Instant::now();
    let r = c.run("test", update);
    held(start);
    assert_eq!(r.get_i32("n").unwrap(), 1, "{r}");
    assert_eq!(s.backend.count("find") + s.backend.count("update"), 2);
}

#[test]
fn other_where_is_not_held() {
    let s = Setup::standalone();
    let mut c = s.client();
    let start = Instant::now();
    let r = c.run(
        "test",
        doc! { "find": "c", "filter": { "$where": "sleep(300) || false" } },
    );
    assert!(start.elapsed() < Duration::from_millis(300), "held");
    assert_ok(&r);
}

#[test]
fn max_time_ms_shorter_than_the_sleep_expires() {
    let s = Setup::standalone();
    let mut c = s.client();
    let start = Instant::now();
    let r = c.run(
        "test",
        doc! { "find": "c", "filter": { "$where": "sleep(5000) || true" }, "maxTimeMS": 200 },
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(200) + SLACK,
        "{took:?}"
    );
    assert_error(&r, 50, "MaxTimeMSExpired");
    assert_eq!(s.backend.count("find"), 0, "mongod never ran it");
    // The connection goes on.
    assert_ok(&c.run("test", doc! { "ping": 1 }));
}

#[test]
fn a_client_hanging_up_mid_sleep_frees_its_thread() {
    let s = Setup::standalone();
    let mut gone = s.client();
    assert_ok(&gone.run("test", doc! { "ping": 1 }));
    let update = doc! { "update": "c", "updates": [{ "q": { "$where": "sleep(60000) || true" }, "u": { "$set": { "a": 1 } } }] };
    gone.send("test", update, 0);
    thread::sleep(Duration::from_millis(100));
    gone.stream.shutdown(std::net::Shutdown::Both).unwrap();
    drop(gone);
    let start = Instant::now();
    while s.proxy.stats().connections_current > 0 {
        assert!(
            start.elapsed() < SLACK,
            "the sleeping thread kept its connection"
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        s.backend.count("update"),
        0,
        "mongod interrupts it (ClientDisconnect)"
    );
    // A later connection is served.
    let mut c = s.client();
    assert_ok(&c.run("test", doc! { "ping": 1 }));
}

#[test]
fn shutdown_ends_a_sleep_promptly() {
    let s = Setup::standalone();
    let mut proxy = s.proxy;
    let mut c = Client::connect(proxy.addresses()[0]);
    c.send(
        "test",
        doc! { "find": "c", "filter": { "$where": "sleep(60000) || true" } },
        0,
    );
    thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    proxy.shutdown();
    assert!(
        start.elapsed() < SLACK,
        "shutdown took {:?}",
        start.elapsed()
    );
    assert!(c.is_closed());
}

// ---- against nx-27017 ----

fn nx_proxy() -> Option<Proxy> {
    let uri = match std::env::var("MONGO_WASI_URI") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            println!("skipped: MONGO_WASI_URI not set");
            return None;
        }
    };
    Some(Proxy::start(ProxyConfig::new(backend_addr(&uri))).expect("start the proxy"))
}

fn first_batch(reply: &Document) -> Vec<Document> {
    reply
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .unwrap_or_else(|_| panic!("no cursor: {reply}"))
        .iter()
        .filter_map(|d| d.as_document().cloned())
        .collect()
}

#[test]
fn nx_returns_every_document_and_updates_them() {
    let Some(proxy) = nx_proxy() else { return };
    let mut c = Client::connect(proxy.addresses()[0]);
    let coll = "where_sleep_rs";
    assert_ok(&c.run(
        "test",
        doc! { "delete": coll, "deletes": [{ "q": {}, "limit": 0 }] },
    ));
    let docs: Vec<Bson> = (1..=3).map(|i| doc! { "_id": i }.into()).collect();
    assert_ok(&c.run("test", doc! { "insert": coll, "documents": docs }));

    let start = Instant::now();
    let r = c.run("test", doc! { "find": coll, "filter": { "$where": SLEEP } });
    let took = held(start);
    let ids: Vec<i32> = first_batch(&r)
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 3], "{r}");
    // With another condition beside it.
    let filter = doc! { "$where": SLEEP, "_id": { "$gt": 1 } };
    let r = c.run("test", doc! { "find": coll, "filter": filter });
    assert_eq!(first_batch(&r).len(), 2, "{r}");

    let start = Instant::now();
    let update = doc! { "update": coll, "updates": [{ "q": { "$where": SLEEP }, "u": { "$set": { "a": "bar" } }, "multi": true }] };
    let r = c.run("test", update);
    held(start);
    assert_eq!(r.get_i32("n").unwrap(), 3, "{r}");
    assert_eq!(r.get_i32("nModified").unwrap(), 3, "{r}");
    println!("find held {took:?}");

    // Any other $where reaches nx-27017, which refuses it as before.
    let r = c.run(
        "test",
        doc! { "find": coll, "filter": { "$where": "this._id == 1" } },
    );
    assert!(!ok(&r), "nx-27017 took another $where: {r}");
    assert_ok(&c.run("test", doc! { "drop": coll }));
}
