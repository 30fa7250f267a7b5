//! The proxy against a fake backend: fail points, topology, counters, bad input, shutdown.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use bson::{doc, oid::ObjectId, Bson, Document};
use common::*;
use mongo_wasi_proxy::{Proxy, ProxyConfig};

fn lsid() -> Document {
    doc! { "id": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![7; 16] } }
}

fn retryable_insert() -> Document {
    doc! { "insert": "c", "documents": [{ "x": 1 }], "lsid": lsid(), "txnNumber": 1i64 }
}

// ---- fail point modes ----

#[test]
fn times_fails_n_matching_commands_then_turns_off() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        doc! { "times": 2 }.into(),
        doc! { "failCommands": ["find"], "errorCode": 2 },
    );
    assert_error(&c.find(), 2, "BadValue");
    assert_ok(&c.run("test", doc! { "ping": 1 })); // not matching: does not count
    assert_error(&c.find(), 2, "BadValue");
    assert_eq!(c.find().get_str("echo").unwrap(), "find");
    assert_eq!(
        s.backend.count("find"),
        1,
        "failed commands never reach the backend"
    );
}

#[test]
fn skip_lets_n_matching_commands_through_first() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        doc! { "skip": 2 }.into(),
        doc! { "failCommands": ["find"], "errorCode": 8 },
    );
    assert_ok(&c.run("test", doc! { "ping": 1 }));
    assert_ok(&c.find());
    assert_ok(&c.find());
    assert_error(&c.find(), 8, "UnknownError");
    assert_error(&c.find(), 8, "UnknownError");
}

#[test]
fn always_on_until_off() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        "alwaysOn".into(),
        doc! { "failCommands": ["find"], "errorCode": 13436 },
    );
    for _ in 0..3 {
        assert_error(&c.find(), 13436, "NotPrimaryOrSecondary");
    }
    let off = c.admin(doc! { "configureFailPoint": "failCommand", "mode": "off" });
    assert_ok(&off);
    assert_eq!(
        off.get_i64("count").unwrap(),
        3,
        "count: times entered, as mongod answers"
    );
    assert_ok(&c.find());
}

#[test]
fn activation_probability_zero_and_one() {
    let s = Setup::standalone();
    let mut c = s.client();
    let data = doc! { "failCommands": ["find"], "errorCode": 2 };
    fail_point(
        &mut c,
        doc! { "activationProbability": 0.0 }.into(),
        data.clone(),
    );
    for _ in 0..20 {
        assert_ok(&c.find());
    }
    fail_point(&mut c, doc! { "activationProbability": 1 }.into(), data);
    for _ in 0..20 {
        assert_error(&c.find(), 2, "BadValue");
    }
}

#[test]
fn new_configuration_replaces_the_old_one() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        "alwaysOn".into(),
        doc! { "failCommands": ["find"], "errorCode": 2 },
    );
    fail_point(
        &mut c,
        "alwaysOn".into(),
        doc! { "failCommands": ["insert"], "errorCode": 8 },
    );
    assert_ok(&c.find());
    assert_error(
        &c.run("test", doc! { "insert": "c", "documents": [{}] }),
        8,
        "UnknownError",
    );
}

#[test]
fn invalid_modes_and_wrong_database_are_refused() {
    let s = Setup::standalone();
    let mut c = s.client();
    let r = c.admin(doc! { "configureFailPoint": "failCommand", "mode": "sometimes" });
    assert_error(&r, 2, "BadValue");
    let r = c.admin(doc! { "configureFailPoint": "failCommand", "mode": { "times": -1 } });
    assert_error(&r, 2, "BadValue");
    let r = c.run(
        "test",
        doc! { "configureFailPoint": "failCommand", "mode": "off" },
    );
    assert_error(&r, 13, "Unauthorized");
}

#[test]
fn fail_commands_matches_only_listed_names_and_aliases() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        "alwaysOn".into(),
        doc! { "failCommands": ["insert", "isMaster"], "errorCode": 2 },
    );
    assert_ok(&c.find());
    assert_error(
        &c.run("test", doc! { "insert": "c", "documents": [{}] }),
        2,
        "BadValue",
    );
    // hello, isMaster and ismaster are one command on mongod.
    assert_error(&c.admin(doc! { "hello": 1 }), 2, "BadValue");
    assert_error(&c.admin(doc! { "ismaster": 1 }), 2, "BadValue");
    assert_ok(&c.admin(doc! { "configureFailPoint": "failCommand", "mode": "off" }));
}

#[test]
fn no_effect_without_close_block_error_or_write_concern_error() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["find"] },
    );
    assert_ok(&c.find());
    let r = c.admin(doc! { "configureFailPoint": "failCommand", "mode": "off" });
    assert_eq!(r.get_i64("count").unwrap(), 0);
}

// ---- fail point actions ----

#[test]
fn close_connection_hangs_up_and_other_connections_work() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["find"], "closeConnection": true },
    );
    let mut victim = s.client();
    assert!(
        victim.try_run("test", doc! { "find": "c" }).is_none(),
        "no reply, just a close"
    );
    assert!(victim.is_closed());
    assert_ok(&c.find());
    assert_ok(&s.client().find());
    assert_eq!(s.backend.count("find"), 2);
}

#[test]
fn error_code_reply_has_mongod_shape() {
    let s = Setup::standalone();
    let mut c = s.client();
    for (code, name) in [
        (91, "ShutdownInProgress"),
        (10107, "NotWritablePrimary"),
        (262, "ExceededTimeLimit"),
        (12345, "Location12345"),
    ] {
        fail_point(
            &mut c,
            doc! { "times": 1 }.into(),
            doc! { "failCommands": ["find"], "errorCode": code },
        );
        let r = c.find();
        assert_error(&r, code, name);
        assert_eq!(
            r.get_str("errmsg").unwrap(),
            "Failing command via 'failCommand' failpoint"
        );
        assert!(
            r.get_f64("ok").is_ok(),
            "ok is a double, as mongod sends it"
        );
        assert!(labels(&r).is_empty(), "no labels on a plain find: {r}");
    }
}

#[test]
fn explicit_error_labels_replace_automatic_ones() {
    let s = Setup::replica_set(1, 0);
    let mut c = s.client();
    let data = doc! { "failCommands": ["insert"], "errorCode": 91, "errorLabels": ["Foo", "Bar"] };
    fail_point(&mut c, doc! { "times": 1 }.into(), data);
    assert_eq!(labels(&c.run("test", retryable_insert())), ["Foo", "Bar"]);
    let data = doc! { "failCommands": ["insert"], "errorCode": 91, "errorLabels": [] };
    fail_point(&mut c, doc! { "times": 1 }.into(), data);
    let r = c.run("test", retryable_insert());
    assert_error(&r, 91, "ShutdownInProgress");
    assert!(
        !r.contains_key("errorLabels"),
        "empty errorLabels suppress the label: {r}"
    );
}

#[test]
fn retryable_write_error_label_only_for_retryable_codes_on_retryable_writes() {
    let s = Setup::replica_set(1, 0);
    let mut c = s.client();
    let fp = |c: &mut Client, code: i32, cmd: &str| {
        fail_point(
            c,
            doc! { "times": 1 }.into(),
            doc! { "failCommands": [cmd], "errorCode": code },
        )
    };
    fp(&mut c, 91, "insert");
    assert_eq!(
        labels(&c.run("test", retryable_insert())),
        ["RetryableWriteError"]
    );
    fp(&mut c, 2, "insert");
    assert!(labels(&c.run("test", retryable_insert())).is_empty());
    fp(&mut c, 91, "insert");
    let plain = c.run("test", doc! { "insert": "c", "documents": [{}] });
    assert!(
        labels(&plain).is_empty(),
        "no txnNumber, not a retryable write"
    );
    fp(&mut c, 91, "find");
    assert!(labels(&c.find()).is_empty());
    // Inside a transaction: TransientTransactionError instead.
    fp(&mut c, 112, "insert");
    let mut in_txn = retryable_insert();
    in_txn.insert("autocommit", false);
    assert_eq!(
        labels(&c.run("test", in_txn)),
        ["TransientTransactionError"]
    );
    // commitTransaction with a retryable code: RetryableWriteError.
    fp(&mut c, 189, "commitTransaction");
    let commit =
        doc! { "commitTransaction": 1, "lsid": lsid(), "txnNumber": 1i64, "autocommit": false };
    assert_eq!(labels(&c.admin(commit)), ["RetryableWriteError"]);
}

#[test]
fn write_concern_error_is_added_to_a_successful_write() {
    let s = Setup::replica_set(1, 0);
    let mut c = s.client();
    let wce = doc! { "code": 91, "errmsg": "Replication is being shut down" };
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["insert", "find"], "writeConcernError": wce.clone() },
    );
    assert_ok(&c.find()); // not a write: untouched and not counted
    let r = c.run("test", retryable_insert());
    assert_ok(&r);
    assert_eq!(
        r.get_str("echo").unwrap(),
        "insert",
        "the write was forwarded first"
    );
    assert_eq!(r.get_i32("n").unwrap(), 1);
    assert_eq!(r.get_document("writeConcernError").unwrap(), &wce);
    assert_eq!(labels(&r), ["RetryableWriteError"]);
    let r = c.run("test", retryable_insert());
    assert!(!r.contains_key("writeConcernError"), "times: 1 used up");
}

#[test]
fn write_concern_error_is_added_to_a_failed_write() {
    let s = Setup::replica_set(1, 0);
    let mut c = s.client();
    let wce = doc! { "code": 91, "errmsg": "Replication is being shut down" };
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["insert"], "writeConcernError": wce.clone() },
    );
    let mut insert = retryable_insert();
    insert.insert("fail", 11000);
    let r = c.run("test", insert);
    assert!(!ok(&r) && code(&r) == Some(11000), "{r}");
    assert_eq!(r.get_str("echo").unwrap(), "insert", "the write ran first");
    assert_eq!(r.get_document("writeConcernError").unwrap(), &wce);
    assert_eq!(labels(&r), ["RetryableWriteError"]);
}

#[test]
fn error_code_wins_over_write_concern_error() {
    let s = Setup::standalone();
    let mut c = s.client();
    let data = doc! { "failCommands": ["insert"], "errorCode": 2, "writeConcernError": { "code": 64, "errmsg": "x" } };
    fail_point(&mut c, doc! { "times": 1 }.into(), data);
    let r = c.run("test", doc! { "insert": "c", "documents": [{}] });
    assert_error(&r, 2, "BadValue");
    assert!(!r.contains_key("writeConcernError"));
}

#[test]
fn a_blocked_command_whose_client_hung_up_never_runs() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["insert"], "blockConnection": true, "blockTimeMS": 300 },
    );
    let mut gone = s.client();
    gone.send("test", doc! { "insert": "c", "documents": [{}] }, 0);
    thread::sleep(Duration::from_millis(50));
    gone.stream.shutdown(std::net::Shutdown::Both).unwrap();
    drop(gone);
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        s.backend.count("insert"),
        0,
        "mongod interrupts it (ClientDisconnect)"
    );
    assert_ok(&c.run("test", doc! { "insert": "c", "documents": [{}] }));
    assert_eq!(s.backend.count("insert"), 1);
}

#[test]
fn on_primary_transactional_write_before_or_after_the_commit() {
    let s = Setup::replica_set(1, 0);
    let mut c = s.client();
    let set = |c: &mut Client, data: Document| {
        let cfg = doc! { "configureFailPoint": "onPrimaryTransactionalWrite", "mode": { "times": 1 }, "data": data };
        assert_ok(&c.admin(cfg));
    };
    set(&mut c, doc! { "failBeforeCommitExceptionCode": 1 });
    let mut w = s.client();
    assert!(w.try_run("test", retryable_insert()).is_none(), "hung up");
    assert_eq!(s.backend.count("insert"), 0, "not committed");
    // Only retryable writes enter it.
    set(
        &mut c,
        doc! { "closeConnection": false, "failBeforeCommitExceptionCode": 11601 },
    );
    assert_ok(&c.run("test", doc! { "insert": "c", "documents": [{}] }));
    let r = c.run("test", retryable_insert());
    assert_error(&r, 11601, "Interrupted");
    assert_eq!(s.backend.count("insert"), 1);
    set(&mut c, doc! {});
    let mut w = s.client();
    assert!(
        w.try_run("test", retryable_insert()).is_none(),
        "hung up after the commit"
    );
    assert_eq!(s.backend.count("insert"), 2, "committed");
}

#[test]
fn block_connection_delays_the_command() {
    let s = Setup::standalone();
    let mut c = s.client();
    let data = doc! { "failCommands": ["ping"], "blockConnection": true, "blockTimeMS": 300 };
    fail_point(&mut c, doc! { "times": 1 }.into(), data);
    let start = Instant::now();
    assert_eq!(
        c.run("test", doc! { "ping": 1 }).get_str("echo").unwrap(),
        "ping"
    );
    assert!(
        elapsed_ms(start) >= 290,
        "blocked only {} ms",
        elapsed_ms(start)
    );
}

#[test]
fn block_with_error_code_blocks_then_fails() {
    let s = Setup::standalone();
    let mut c = s.client();
    let data = doc! { "failCommands": ["find"], "blockConnection": true, "blockTimeMS": 200, "errorCode": 91 };
    fail_point(&mut c, doc! { "times": 1 }.into(), data);
    let start = Instant::now();
    assert_error(&c.find(), 91, "ShutdownInProgress");
    assert!(elapsed_ms(start) >= 190);
}

#[test]
fn block_is_interrupted_by_max_time_ms() {
    let s = Setup::standalone();
    let mut c = s.client();
    let data = doc! { "failCommands": ["find"], "blockConnection": true, "blockTimeMS": 2000 };
    fail_point(&mut c, doc! { "times": 1 }.into(), data);
    let start = Instant::now();
    let r = c.run("test", doc! { "find": "c", "maxTimeMS": 150 });
    let took = elapsed_ms(start);
    assert_error(&r, 50, "MaxTimeMSExpired");
    assert!((140..1500).contains(&took), "answered after {took} ms");
    assert_eq!(s.backend.count("find"), 0);
    assert_ok(&c.run("test", doc! { "ping": 1 })); // the connection stays usable
    assert_ok(&c.find());
}

#[test]
fn absurd_times_are_capped_not_fatal() {
    let s = Setup::standalone();
    let mut c = s.client();
    let data = doc! { "failCommands": ["find"], "blockConnection": true, "blockTimeMS": 1e300 };
    fail_point(&mut c, doc! { "times": 1 }.into(), data);
    assert_error(
        &c.run("test", doc! { "find": "c", "maxTimeMS": 100 }),
        50,
        "MaxTimeMSExpired",
    );
    assert_ok(&c.run("test", doc! { "find": "c", "maxTimeMS": i64::MAX }));
    assert_ok(&c.run("test", doc! { "find": "c", "maxTimeMS": -5 }));
    assert_ok(&c.run("test", doc! { "find": "c", "maxTimeMS": f64::NAN }));
}

#[test]
fn change_stream_errors_get_change_stream_labels() {
    let s = Setup::standalone();
    let mut c = s.client();
    let watch = doc! { "aggregate": "c", "pipeline": [{ "$changeStream": {} }], "cursor": {} };
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["aggregate"], "errorCode": 6 },
    );
    assert_eq!(
        labels(&c.run("test", watch.clone())),
        ["ResumableChangeStreamError"]
    );
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["aggregate"], "errorCode": 280 },
    );
    assert_eq!(
        labels(&c.run("test", watch.clone())),
        ["NonResumableChangeStreamError"]
    );
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["aggregate"], "errorCode": 6 },
    );
    let plain = doc! { "aggregate": "c", "pipeline": [], "cursor": {} };
    assert!(labels(&c.run("test", plain)).is_empty());
    // With no fail point, a standalone has no oplog to watch (mongod's 40573).
    assert_error(&c.run("test", watch), 40573, "Location40573");
}

#[test]
fn block_connection_without_block_time_is_invalid() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["find"], "blockConnection": true },
    );
    assert_error(&c.find(), 72, "InvalidOptions");
}

#[test]
fn app_name_limits_the_fail_point_to_matching_connections() {
    let s = Setup::standalone();
    let mut admin = s.client();
    let data = doc! { "failCommands": ["find"], "errorCode": 2, "appName": "victim" };
    fail_point(&mut admin, doc! { "times": 1 }.into(), data);
    let mut other = Client::with_app_name(s.addr(), "bystander");
    assert_ok(&other.find());
    assert_ok(&admin.find()); // no app name at all
    let mut victim = Client::with_app_name(s.addr(), "victim");
    assert_error(&victim.find(), 2, "BadValue");
    assert_ok(&victim.find());
}

#[test]
fn hello_can_fail_over_op_msg_and_op_query() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        doc! { "times": 2 }.into(),
        doc! { "failCommands": ["hello"], "errorCode": 91 },
    );
    assert_error(&c.admin(doc! { "hello": 1 }), 91, "ShutdownInProgress");
    let legacy = c
        .op_query("admin.$cmd", doc! { "isMaster": 1, "helloOk": true })
        .unwrap();
    assert_error(&legacy, 91, "ShutdownInProgress");
    assert_ok(&c.op_query("admin.$cmd", doc! { "isMaster": 1 }).unwrap());
}

#[test]
fn hello_close_connection_with_app_name() {
    let s = Setup::standalone();
    let mut c = s.client();
    let data =
        doc! { "failCommands": ["hello", "isMaster"], "closeConnection": true, "appName": "x" };
    fail_point(&mut c, "alwaysOn".into(), data);
    let mut victim = Client::connect(s.addr());
    let hello = doc! { "isMaster": 1, "client": { "application": { "name": "x" } } };
    assert!(victim.op_query("admin.$cmd", hello).is_none());
    assert_ok(&c.admin(doc! { "hello": 1 }));
}

#[test]
fn sasl_continue_can_fail() {
    let s = Setup::standalone();
    let mut c = s.client();
    fail_point(
        &mut c,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["saslContinue"], "errorCode": 18 },
    );
    assert_error(
        &c.admin(doc! { "saslContinue": 1, "conversationId": 1 }),
        18,
        "AuthenticationFailed",
    );
}

#[test]
fn max_time_always_time_out() {
    let s = Setup::standalone();
    let mut c = s.client();
    assert_ok(&c.admin(doc! { "configureFailPoint": "maxTimeAlwaysTimeOut", "mode": "alwaysOn" }));
    assert_error(
        &c.run("test", doc! { "find": "c", "maxTimeMS": 5000 }),
        50,
        "MaxTimeMSExpired",
    );
    assert_ok(&c.find());
    assert_ok(&c.admin(doc! { "configureFailPoint": "maxTimeAlwaysTimeOut", "mode": "off" }));
    assert_ok(&c.run("test", doc! { "find": "c", "maxTimeMS": 5000 }));
}

#[test]
fn unknown_fail_points_are_refused_and_get_more_can_fail() {
    let s = Setup::standalone();
    let mut c = s.client();
    let r = c.admin(doc! { "configureFailPoint": "someServerFailPoint", "mode": "alwaysOn" });
    assert_error(&r, 266, "FailPointSetFailed");
    assert_eq!(
        r.get_str("errmsg").unwrap(),
        "someServerFailPoint not found"
    );
    let cfg = doc! { "configureFailPoint": "failGetMoreAfterCursorCheckout", "mode": { "times": 1 }, "data": { "errorCode": 6 } };
    assert_ok(&c.admin(cfg));
    assert_error(
        &c.run("test", doc! { "getMore": 5i64, "collection": "c" }),
        6,
        "HostUnreachable",
    );
    assert_ok(&c.run("test", doc! { "getMore": 5i64, "collection": "c" }));
    let stats = c.admin(doc! { "proxyStats": 1 });
    assert!(!stats
        .get_document("failPoints")
        .unwrap()
        .contains_key("someServerFailPoint"));
}

#[test]
fn fail_points_belong_to_one_member() {
    let s = Setup::replica_set(2, 0);
    let addrs = s.proxy.addresses();
    let mut first = Client::connect(addrs[0]);
    let mut second = Client::connect(addrs[1]);
    fail_point(
        &mut first,
        "alwaysOn".into(),
        doc! { "failCommands": ["ping"], "errorCode": 2 },
    );
    assert_ok(&second.run("test", doc! { "ping": 1 }));
    assert_error(&first.run("test", doc! { "ping": 1 }), 2, "BadValue");
    let stats = second.admin(doc! { "proxyStats": 1 });
    assert!(stats.get_document("failPoints").unwrap().is_empty());
    let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
    assert_eq!(second.admin(off.clone()).get_i64("count").unwrap(), 0);
    assert_eq!(first.admin(off).get_i64("count").unwrap(), 1);
}

#[test]
fn wait_for_fail_point_waits_for_the_total_entries() {
    let s = Setup::standalone();
    let mut c = s.client();
    let cfg = doc! { "configureFailPoint": "failCommand", "mode": { "times": 1 },
    "data": { "failCommands": ["ping"], "errorCode": 2 } };
    assert_eq!(c.admin(cfg.clone()).get_i64("count").unwrap(), 0);
    assert_error(&c.run("test", doc! { "ping": 1 }), 2, "BadValue");
    // The count goes on across configurations, as mongod's timesEntered does.
    let count = c.admin(cfg).get_i64("count").unwrap();
    assert_eq!(count, 1);
    let addr = s.addr();
    let pinger = thread::spawn(move || {
        thread::sleep(Duration::from_millis(150));
        Client::connect(addr).run("test", doc! { "ping": 1 })
    });
    let start = Instant::now();
    let wait =
        doc! { "waitForFailPoint": "failCommand", "timesEntered": count + 1, "maxTimeMS": 10_000 };
    assert_ok(&c.admin(wait));
    assert!(
        elapsed_ms(start) >= 140,
        "returned before the fail point fired"
    );
    assert_error(&pinger.join().unwrap(), 2, "BadValue");

    let start = Instant::now();
    let never =
        doc! { "waitForFailPoint": "failCommand", "timesEntered": count + 2, "maxTimeMS": 100 };
    assert_error(&c.admin(never), 50, "MaxTimeMSExpired");
    let took = elapsed_ms(start);
    assert!((90..5000).contains(&took), "took {took} ms");
    let no_limit = doc! { "waitForFailPoint": "failCommand", "timesEntered": 1 };
    assert_error(&c.admin(no_limit), 9, "FailedToParse");
    let unknown =
        doc! { "waitForFailPoint": "noSuchFailPoint", "timesEntered": 1, "maxTimeMS": 10 };
    assert_error(&c.admin(unknown), 266, "FailPointSetFailed");
}

#[test]
fn get_more_max_time_ms_only_on_await_data_cursors() {
    let s = Setup::standalone();
    let mut c = s.client();
    assert_ok(&c.run("test", doc! { "find": "c", "cursorId": 11i64 }));
    // nx-27017 answers cursor ids as int32; mongod's drivers send them back as int64.
    let tailable = doc! { "find": "c", "tailable": true, "awaitData": true, "cursorId32": 12 };
    assert_ok(&c.run("test", tailable));
    let get_more = |id: i64, max: Option<i32>| {
        let mut cmd = doc! { "getMore": id, "collection": "c" };
        if let Some(ms) = max {
            cmd.insert("maxTimeMS", ms);
        }
        cmd
    };
    for ms in [10, 0] {
        let r = c.run("test", get_more(11, Some(ms)));
        assert_error(&r, 2, "BadValue");
        assert_eq!(
            r.get_str("errmsg").unwrap(),
            "cannot set maxTimeMS on getMore command for a non-awaitData cursor"
        );
    }
    assert_ok(&c.run("test", get_more(11, None)));
    assert_ok(&c.run("test", get_more(12, Some(10))));
    assert_eq!(
        s.backend.count("getMore"),
        2,
        "refused getMores are not forwarded"
    );
}

#[test]
fn slow_command_emulates_server_execution_time() {
    let s = Setup::standalone();
    let mut c = s.client();
    let cfg = doc! { "configureFailPoint": "proxySlowCommand", "mode": "alwaysOn",
    "data": { "failCommands": ["find"], "executionTimeMS": 300 } };
    assert_ok(&c.admin(cfg));
    let start = Instant::now();
    assert_error(
        &c.run("test", doc! { "find": "c", "maxTimeMS": 100 }),
        50,
        "MaxTimeMSExpired",
    );
    let took = elapsed_ms(start);
    assert!((95..290).contains(&took), "expired after {took} ms");
    let start = Instant::now();
    assert_eq!(
        c.run("test", doc! { "find": "c", "maxTimeMS": 5000 })
            .get_str("echo")
            .unwrap(),
        "find"
    );
    assert!(elapsed_ms(start) >= 290);
    assert_ok(&c.run("test", doc! { "ping": 1 }));
    assert_eq!(s.backend.count("find"), 1);
}

// ---- commands the proxy answers ----

#[test]
fn unknown_commands_get_command_not_found() {
    let s = Setup::standalone();
    let mut c = s.client();
    let r = c.run("test", doc! { "frobnicate": 1 });
    assert_error(&r, 59, "CommandNotFound");
    assert_eq!(
        r.get_str("errmsg").unwrap(),
        "no such command: 'frobnicate'"
    );
    assert_error(
        &c.run("test", doc! { "bulkWrite": 1 }),
        59,
        "CommandNotFound",
    ); // 8.0+ only
    assert!(s.backend.seen().is_empty());
}

#[test]
fn api_parameters_are_checked_as_mongod_does() {
    let s = Setup::standalone();
    let mut c = s.client();
    let strict = doc! { "distinct": "c", "key": "x", "apiVersion": "1", "apiStrict": true };
    assert_error(&c.run("test", strict), 323, "APIStrictError");
    assert_error(
        &c.run("test", doc! { "ping": 1, "apiVersion": "0" }),
        322,
        "APIVersionError",
    );
    assert_error(
        &c.run("test", doc! { "ping": 1, "apiStrict": true }),
        4886600,
        "Location4886600",
    );
    assert!(s.backend.seen().is_empty(), "refused before the backend");
    let test_command = doc! { "testVersion2": 1, "apiVersion": "2", "apiStrict": true };
    assert_ok(&c.run("test", test_command));
    assert_ok(&c.run(
        "test",
        doc! { "ping": 1, "apiVersion": "1", "apiStrict": true },
    ));
    assert_eq!(
        s.backend.count("ping"),
        1,
        "a valid declaration is forwarded"
    );
}

#[test]
fn build_info_cmd_line_opts_and_get_parameter() {
    let s = Setup::standalone();
    let mut c = s.client();
    for name in ["buildInfo", "buildinfo"] {
        let r = c.admin(doc! { name: 1 });
        assert_eq!(r.get_str("version").unwrap(), "7.0.0");
        assert_eq!(
            r.get_array("versionArray").unwrap(),
            &vec![Bson::Int32(7), 0.into(), 0.into(), 0.into()]
        );
    }
    let opts = c.admin(doc! { "getCmdLineOpts": 1 });
    assert!(
        opts.get_array("argv").is_ok() && opts.get_document("parsed").is_ok(),
        "{opts}"
    );
    let all = c.admin(doc! { "getParameter": "*" });
    assert!(all.get_bool("enableTestCommands").unwrap());
    let one = c.admin(doc! { "getParameter": 1, "enableTestCommands": 1 });
    assert_eq!(one.len(), 2, "just the parameter and ok: {one}");
    assert_error(
        &c.admin(doc! { "getParameter": 1, "nope": 1 }),
        72,
        "InvalidOptions",
    );
    assert_error(
        &c.run("test", doc! { "getCmdLineOpts": 1 }),
        13,
        "Unauthorized",
    );
}

#[test]
fn configurable_build_version() {
    let backend = FakeBackend::start();
    let mut config = ProxyConfig::new(backend.addr);
    config.build_version = "8.0.4".into();
    let proxy = Proxy::start(config).unwrap();
    let mut c = Client::connect(proxy.addresses()[0]);
    assert_eq!(
        c.admin(doc! { "hello": 1 })
            .get_i32("maxWireVersion")
            .unwrap(),
        25
    );
    let info = c.admin(doc! { "buildInfo": 1 });
    assert_eq!(info.get_array("versionArray").unwrap()[2], Bson::Int32(4));
    assert_eq!(
        c.run("test", doc! { "bulkWrite": 1 })
            .get_str("echo")
            .unwrap(),
        "bulkWrite"
    );
}

/// version_behaviour.rs: what mongod 4.2 refuses is refused once the proxy presents 4.2.0,
/// and never reaches the backend; the default version (7.0.0) forwards it.
#[test]
fn an_older_presented_version_refuses_what_that_mongod_refused() {
    let s = Setup::standalone();
    let comment = doc! { "insert": "c", "documents": [{ "_id": 1 }], "comment": "c" };
    let dollar = doc! { "insert": "c", "documents": [{ "_id": 2, "$a": 1 }] };
    let mut c = s.client();
    for cmd in [&comment, &dollar] {
        assert_eq!(
            c.run("test", cmd.clone()).get_str("echo").unwrap(),
            "insert"
        );
    }
    assert_eq!(s.backend.count("insert"), 2);

    s.proxy.set_version("4.2.0").unwrap();
    let mut old = s.client();
    let r = old.run("test", comment);
    assert_error(&r, 40415, "Location40415");
    assert_eq!(
        r.get_str("errmsg").unwrap(),
        "BSON field 'insert.comment' is an unknown field."
    );
    let r = old.run("test", dollar);
    assert_ok(&r);
    assert_eq!(r.get_i32("n").unwrap(), 0);
    let e = r.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap();
    assert_eq!(
        (e.get_i32("index").unwrap(), e.get_i32("code").unwrap()),
        (0, 2)
    );
    assert_eq!(
        s.backend.count("insert"),
        2,
        "refused commands never reach the backend"
    );
}

#[test]
fn missing_db_is_an_error() {
    let s = Setup::standalone();
    let mut c = s.client();
    let id = 99;
    c.stream
        .write_all(&encode_msg(id, 0, 0, &doc! { "ping": 1 }))
        .unwrap();
    let (_, to, _, payload) = read_msg(&mut c.stream).unwrap();
    assert_eq!(to, id);
    assert_eq!(code(&body_of(&payload)), Some(40571));
}

// ---- topology ----

#[test]
fn standalone_hello() {
    let s = Setup::standalone();
    let mut a = s.client();
    let mut b = s.client();
    let h = a.admin(doc! { "hello": 1, "helloOk": true });
    assert!(h.get_bool("isWritablePrimary").unwrap());
    assert!(h.get_bool("helloOk").unwrap());
    for absent in ["setName", "hosts", "secondary", "ismaster"] {
        assert!(!h.contains_key(absent), "{absent} in {h}");
    }
    // mongod 4.4+: every hello has a topologyVersion (streaming.rs tests it further).
    let tv = h.get_document("topologyVersion").unwrap();
    assert!(tv.get_object_id("processId").is_ok() && tv.get_i64("counter").ok() == Some(0));
    assert_eq!(h.get_i32("maxWireVersion").unwrap(), 21);
    assert_eq!(h.get_i32("minWireVersion").unwrap(), 0);
    assert_eq!(h.get_i32("maxBsonObjectSize").unwrap(), 16_777_216);
    assert_eq!(h.get_i32("maxMessageSizeBytes").unwrap(), 48_000_000);
    assert_eq!(h.get_i32("maxWriteBatchSize").unwrap(), 100_000);
    assert_eq!(h.get_i32("logicalSessionTimeoutMinutes").unwrap(), 30);
    assert!(h.get_datetime("localTime").is_ok());
    assert!(!a.admin(doc! { "hello": 1 }).contains_key("helloOk"));
    let other = b.admin(doc! { "hello": 1 });
    assert_ne!(
        h.get_i32("connectionId").unwrap(),
        other.get_i32("connectionId").unwrap()
    );
    let legacy = a
        .op_query("admin.$cmd", doc! { "isMaster": 1, "helloOk": true })
        .unwrap();
    assert!(legacy.get_bool("ismaster").unwrap());
    assert!(!legacy.contains_key("isWritablePrimary"));
    let unsupported = a.op_query("test.$cmd", doc! { "find": "c" }).unwrap();
    assert_error(&unsupported, 352, "UnsupportedOpQueryCommand");
}

#[test]
fn standalone_rejects_transaction_numbers() {
    let s = Setup::standalone();
    let mut c = s.client();
    assert_error(&c.run("test", retryable_insert()), 20, "IllegalOperation");
    assert_error(
        &c.admin(doc! { "replSetGetStatus": 1 }),
        76,
        "NoReplicationEnabled",
    );
}

#[test]
fn single_node_replica_set_hello() {
    let s = Setup::replica_set(1, 0);
    let mut c = s.client();
    let me = s.addr().to_string();
    let h = c.admin(doc! { "hello": 1 });
    assert_eq!(h.get_str("setName").unwrap(), "rs0");
    assert_eq!(
        h.get_array("hosts").unwrap(),
        &vec![Bson::String(me.clone())]
    );
    assert_eq!(h.get_str("primary").unwrap(), me);
    assert_eq!(h.get_str("me").unwrap(), me);
    assert!(h.get_bool("isWritablePrimary").unwrap());
    assert!(!h.get_bool("secondary").unwrap());
    assert!(h.get_i32("setVersion").is_ok());
    assert!(h.get_object_id("electionId").is_ok());
    assert_eq!(h.get_i32("logicalSessionTimeoutMinutes").unwrap(), 30);
    assert!(h.get_document("topologyVersion").is_ok());
    // Replica sets take transaction numbers (retryable writes).
    assert_ok(&c.run("test", retryable_insert()));
    // A lone member cannot step down.
    assert_error(
        &c.admin(doc! { "replSetStepDown": 60 }),
        262,
        "ExceededTimeLimit",
    );
}

#[test]
fn multi_member_set_with_secondary_and_arbiter() {
    let s = Setup::replica_set(2, 1);
    let addrs = s.proxy.addresses();
    assert_eq!(addrs.len(), 3);
    let hosts: Vec<Bson> = addrs[..2].iter().map(|a| a.to_string().into()).collect();
    let hello = |i: usize| Client::connect(addrs[i]).admin(doc! { "hello": 1 });
    let (p, sec, arb) = (hello(0), hello(1), hello(2));
    for h in [&p, &sec, &arb] {
        assert_eq!(h.get_array("hosts").unwrap(), &hosts);
        assert_eq!(
            h.get_array("arbiters").unwrap(),
            &vec![Bson::String(addrs[2].to_string())]
        );
        assert_eq!(h.get_str("primary").unwrap(), addrs[0].to_string());
    }
    assert!(p.get_bool("isWritablePrimary").unwrap() && !p.get_bool("secondary").unwrap());
    assert!(!sec.get_bool("isWritablePrimary").unwrap() && sec.get_bool("secondary").unwrap());
    assert_eq!(sec.get_str("me").unwrap(), addrs[1].to_string());
    assert!(!sec.contains_key("electionId"));
    assert!(arb.get_bool("arbiterOnly").unwrap() && !arb.get_bool("secondary").unwrap());

    let mut on_secondary = Client::connect(addrs[1]);
    let write = on_secondary.run("test", retryable_insert());
    assert_error(&write, 10107, "NotWritablePrimary");
    assert_eq!(labels(&write), ["RetryableWriteError"]);
    assert_error(&on_secondary.find(), 13435, "NotPrimaryNoSecondaryOk");
    let read = doc! { "find": "c", "$readPreference": { "mode": "secondaryPreferred" } };
    assert_eq!(
        on_secondary.run("test", read).get_str("echo").unwrap(),
        "find"
    );
    assert_ok(&on_secondary.run("test", doc! { "ping": 1 }));
    assert_eq!(s.backend.count("insert"), 0);
}

#[test]
fn step_down_elects_another_primary() {
    let s = Setup::replica_set(2, 0);
    let addrs = s.proxy.addresses();
    let mut first = Client::connect(addrs[0]);
    let mut second = Client::connect(addrs[1]);
    let before = first
        .admin(doc! { "hello": 1 })
        .get_object_id("electionId")
        .unwrap();
    assert_error(
        &second.admin(doc! { "replSetStepDown": 60 }),
        10107,
        "NotWritablePrimary",
    );

    assert_ok(&first.admin(doc! { "replSetStepDown": 60 }));
    let old = first.admin(doc! { "hello": 1 });
    assert!(old.get_bool("secondary").unwrap() && !old.get_bool("isWritablePrimary").unwrap());
    assert_eq!(old.get_str("primary").unwrap(), addrs[1].to_string());
    let new = second.admin(doc! { "hello": 1 });
    assert!(new.get_bool("isWritablePrimary").unwrap());
    let after: ObjectId = new.get_object_id("electionId").unwrap();
    assert!(after > before, "a newer election id");
    assert_error(
        &first.run("test", doc! { "insert": "c", "documents": [{}] }),
        10107,
        "NotWritablePrimary",
    );
    assert_ok(&second.run("test", doc! { "insert": "c", "documents": [{}] }));

    let r = second.admin(doc! { "proxyStepDown": 1 });
    assert_eq!(r.get_str("primary").unwrap(), addrs[0].to_string());
    assert_eq!(s.proxy.primary(), Some(0));
    assert_eq!(s.proxy.step_down(Some(1)), Ok(1));
    assert!(second
        .admin(doc! { "hello": 1 })
        .get_bool("isWritablePrimary")
        .unwrap());
}

// ---- counters ----

/// Polls `cond` for up to 5 s (bounded), failing the test if it never holds.
fn wait_until(cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not reached in 5 s");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn counters_track_connections_and_commands() {
    let s = Setup::standalone();
    {
        let mut a = s.client();
        a.find();
        a.find();
        a.run("test", doc! { "ping": 1 });
    }
    let mut c = s.client();
    // Accepting and closing happen on the proxy's threads: wait for them.
    wait_until(|| {
        let st = s.proxy.stats();
        st.connections_opened == 2 && st.connections_closed == 1
    });
    let stats = s.proxy.stats();
    assert_eq!(
        (
            stats.connections_opened,
            stats.connections_closed,
            stats.connections_current
        ),
        (2, 1, 1)
    );
    assert_eq!(stats.commands.get("find"), Some(&2));
    assert_eq!(stats.commands.get("ping"), Some(&1));
    let doc = c.admin(doc! { "proxyStats": 1 });
    assert_eq!(
        doc.get_document("connections")
            .unwrap()
            .get_i64("current")
            .unwrap(),
        1
    );
    assert_eq!(
        doc.get_document("commands")
            .unwrap()
            .get_i64("find")
            .unwrap(),
        2
    );
    assert_ok(&c.admin(doc! { "proxyResetStats": 1 }));
    let stats = s.proxy.stats();
    assert!(
        stats.commands.is_empty(),
        "proxy admin commands are not counted"
    );
    assert_eq!(
        (stats.connections_opened, stats.connections_current),
        (0, 1)
    );
}

// ---- bad input ----

fn assert_dropped_and_still_serving(s: &Setup, bytes: &[u8]) {
    let mut bad = s.client();
    bad.stream.write_all(bytes).unwrap();
    assert!(
        bad.is_closed(),
        "the proxy must drop a connection sending {:?}",
        &bytes[..bytes.len().min(16)]
    );
    assert_ok(&s.client().run("test", doc! { "ping": 1 }));
}

#[test]
fn garbage_bytes_drop_the_connection_only() {
    let s = Setup::standalone();
    let mut garbage = vec![0x41u8; 64];
    garbage[..4].copy_from_slice(&64i32.to_le_bytes());
    assert_dropped_and_still_serving(&s, &garbage);
    assert!(s.proxy.stats().protocol_errors >= 1);
}

#[test]
fn huge_and_negative_lengths_drop_the_connection() {
    let s = Setup::standalone();
    assert_dropped_and_still_serving(&s, &i32::MAX.to_le_bytes());
    assert_dropped_and_still_serving(&s, &(-5i32).to_le_bytes());
    assert_dropped_and_still_serving(&s, &3i32.to_le_bytes());
}

#[test]
fn unknown_opcode_and_bad_bson_drop_the_connection() {
    let s = Setup::standalone();
    let mut msg = encode_msg(1, 0, 0, &doc! { "ping": 1, "$db": "test" });
    msg[12..16].copy_from_slice(&2002i32.to_le_bytes()); // OP_INSERT, removed
    assert_dropped_and_still_serving(&s, &msg);
    let mut msg = encode_msg(1, 0, 0, &doc! { "ping": 1, "$db": "test" });
    let last = msg.len() - 1;
    msg[last] = 7; // document not NUL-terminated
    assert_dropped_and_still_serving(&s, &msg);
    let msg = encode_msg(1, 0, 1 << 5, &doc! { "ping": 1, "$db": "test" }); // unknown required flag
    assert_dropped_and_still_serving(&s, &msg);
}

#[test]
fn client_vanishing_mid_message_does_not_hurt_others() {
    let s = Setup::standalone();
    {
        let mut half = TcpStream::connect(s.addr()).unwrap();
        let msg = encode_msg(1, 0, 0, &doc! { "ping": 1, "$db": "test" });
        half.write_all(&msg[..msg.len() / 2]).unwrap();
    }
    assert_ok(&s.client().run("test", doc! { "ping": 1 }));
    wait_until(|| s.proxy.stats().connections_closed >= 1);
}

#[test]
fn backend_closing_closes_the_client() {
    let s = Setup::standalone();
    let mut c = s.client();
    assert_ok(&c.find());
    assert!(c.try_run("test", doc! { "ping": 1, "die": true }).is_none());
    assert!(c.is_closed());
    assert_ok(&s.client().find());
}

#[test]
fn unreachable_backend_closes_the_client() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let proxy = Proxy::start(ProxyConfig::new(addr)).unwrap();
    let mut c = Client::connect(proxy.addresses()[0]);
    assert_ok(&c.admin(doc! { "hello": 1 })); // answered by the proxy itself
    assert!(c.try_run("test", doc! { "ping": 1 }).is_none());
}

#[test]
fn more_to_come_requests_get_no_reply_and_do_not_desynchronise() {
    let s = Setup::standalone();
    let mut c = s.client();
    c.send(
        "test",
        doc! { "insert": "c", "documents": [{}], "writeConcern": { "w": 0 } },
        1 << 1,
    );
    let r = c.find(); // the fake backend answered the insert too; the proxy drops that reply
    assert_eq!(r.get_str("echo").unwrap(), "find");
    assert_eq!(s.backend.seen(), ["insert", "find"]);
}

#[test]
fn checksummed_messages_are_verified() {
    let s = Setup::standalone();
    let mut c = s.client();
    let mut msg = encode_msg(5, 0, 1, &doc! { "ping": 1, "$db": "test" });
    let new_len = (msg.len() + 4) as i32;
    msg[..4].copy_from_slice(&new_len.to_le_bytes());
    let crc = crc32c(&msg);
    msg.extend(crc.to_le_bytes());
    c.stream.write_all(&msg).unwrap();
    let (_, to, _, payload) = read_msg(&mut c.stream).unwrap();
    assert_eq!(
        (to, body_of(&payload).get_str("echo").unwrap()),
        (5, "ping")
    );
    let last = msg.len() - 1;
    msg[last] ^= 0xff;
    assert_dropped_and_still_serving(&s, &msg);
}

fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                0x82f6_3b78 ^ (crc >> 1)
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

// ---- shutdown ----

#[test]
fn shutdown_closes_connections_and_joins_threads_promptly() {
    let s = Setup::standalone();
    let mut proxy = s.proxy;
    let addr = proxy.addresses()[0];
    let mut idle = Client::connect(addr);
    assert_ok(&idle.run("test", doc! { "ping": 1 }));
    let mut blocked = Client::connect(addr);
    let data = doc! { "failCommands": ["find"], "blockConnection": true, "blockTimeMS": 60_000 };
    fail_point(&mut idle, "alwaysOn".into(), data);
    blocked.send("test", doc! { "find": "c" }, 0);
    thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    proxy.shutdown();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        start.elapsed()
    );
    assert!(idle.is_closed());
    assert!(blocked.is_closed());
    assert!(TcpStream::connect(addr).is_err() || Client::connect(addr).is_closed());
    drop(proxy); // a second shutdown is a no-op
}

#[test]
fn only_loopback_listen_addresses() {
    let backend = FakeBackend::start();
    let mut config = ProxyConfig::new(backend.addr);
    config.listen = vec!["0.0.0.0:0".parse().unwrap()];
    assert!(Proxy::start(config).is_err());
}

// ---- sharded presentation ----

#[test]
fn mongoses_answer_isdbgrid_and_keep_their_own_fail_points() {
    let backend = FakeBackend::start();
    let proxy = Proxy::start(ProxyConfig::sharded(backend.addr, 2)).unwrap();
    let addrs = proxy.addresses();
    let (mut m0, mut m1) = (Client::connect(addrs[0]), Client::connect(addrs[1]));
    for c in [&mut m0, &mut m1] {
        let hello = c.admin(doc! { "hello": 1 });
        assert_eq!(hello.get_str("msg").unwrap(), "isdbgrid");
        assert!(hello.get_bool("isWritablePrimary").unwrap());
        assert!(!hello.contains_key("setName"));
    }
    fail_point(
        &mut m0,
        Bson::String("alwaysOn".into()),
        doc! { "failCommands": ["find"], "errorCode": 6 },
    );
    assert_error(&m0.find(), 6, "HostUnreachable");
    assert_ok(&m1.find());
    // A retryable write's txnNumber is accepted by a mongos.
    assert_ok(&m1.run("test", retryable_insert()));
    fail_point(&mut m0, Bson::String("off".into()), doc! {});
    assert_ok(&m0.find());
    assert!(Proxy::start(ProxyConfig::sharded(backend.addr, 0)).is_err());
}
