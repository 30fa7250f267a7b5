//! Retryable Writes through the failpoint proxy presenting a replica set in
//! front of nx-27017: a single-document write failing with a retryable error
//! is retried with the same lsid and txnNumber; multi-document writes and
//! writes to a standalone are not.

use bson::{rawdoc, RawDocument};
use host_tests::bindings::exports::mongo_wasi::driver::collection::UpdateSpec;
use host_tests::bindings::exports::mongo_wasi::driver::types::{CommandEvent, CommandEventKind};
use host_tests::guest::{no_options, Client, Collection, Guest};
use mongo_wasi_proxy::{Proxy, ProxyConfig};

struct Setup {
    guest: Guest,
    client: Client,
    coll: Collection,
    _proxy: Proxy,
}

fn setup(test: &str, replica_set: bool, uri_options: &str) -> Setup {
    let (_, backend) = host_tests::test_server();
    let config = if replica_set {
        ProxyConfig::replica_set(backend, "rs0", 1)
    } else {
        ProxyConfig::new(backend)
    };
    let proxy = Proxy::start(config).unwrap();
    let addr = proxy.addresses()[0];
    let mut guest = Guest::new(&[addr]).unwrap();
    let uri = format!("mongodb://{addr}/{uri_options}");
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    let db = guest.database(client, &format!("rw_{test}"), None).unwrap();
    guest
        .run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    let coll = guest.collection(db, "c", None).unwrap();
    Setup {
        guest,
        client,
        coll,
        _proxy: proxy,
    }
}

fn fail_once(s: &mut Setup, command: &str, code: i32) {
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": { "failCommands": [command], "errorCode": code },
    };
    s.guest
        .run_command(admin, &fp, None)
        .unwrap()
        .expect("configureFailPoint");
    s.guest.take_events(s.client).unwrap();
}

fn started(s: &mut Setup, name: &str) -> Vec<CommandEvent> {
    let events = s.guest.take_events(s.client).unwrap();
    events
        .into_iter()
        .filter(|e| e.command_name == name && e.kind == CommandEventKind::Started)
        .collect()
}

fn command(e: &CommandEvent) -> &RawDocument {
    RawDocument::from_bytes(e.command.as_deref().unwrap()).unwrap()
}

fn count(s: &mut Setup) -> i64 {
    s.guest
        .count_documents(s.coll, &rawdoc! {}, &no_options())
        .unwrap()
        .unwrap()
}

#[test]
fn insert_is_retried_with_the_same_lsid_and_txn_number() {
    let mut s = setup("insert", true, "?replicaSet=rs0");
    fail_once(&mut s, "insert", 91); // ShutdownInProgress, labelled RetryableWriteError
    s.guest
        .insert_one(s.coll, &rawdoc! { "_id": 1 }, &no_options())
        .unwrap()
        .expect("the retry succeeds");
    let inserts = started(&mut s, "insert");
    assert_eq!(inserts.len(), 2, "the first attempt and the retry");
    let (a, b) = (command(&inserts[0]), command(&inserts[1]));
    assert!(
        a.get_i64("txnNumber").is_ok(),
        "retryable writes carry a txnNumber"
    );
    assert_eq!(
        a.get_i64("txnNumber").unwrap(),
        b.get_i64("txnNumber").unwrap()
    );
    assert_eq!(
        a.get_document("lsid").unwrap(),
        b.get_document("lsid").unwrap()
    );
    assert_eq!(count(&mut s), 1, "written exactly once");
}

#[test]
fn each_write_gets_a_new_txn_number() {
    let mut s = setup("txn", true, "?replicaSet=rs0");
    s.guest.take_events(s.client).unwrap();
    for i in 0..2 {
        s.guest
            .insert_one(s.coll, &rawdoc! { "_id": i }, &no_options())
            .unwrap()
            .unwrap();
    }
    let inserts = started(&mut s, "insert");
    let numbers: Vec<i64> = inserts
        .iter()
        .map(|e| command(e).get_i64("txnNumber").unwrap())
        .collect();
    assert_eq!(numbers.len(), 2);
    assert!(numbers[1] > numbers[0], "{numbers:?}");
}

#[test]
fn update_one_is_retried_but_update_many_is_not() {
    let mut s = setup("update", true, "?replicaSet=rs0");
    s.guest
        .insert_one(s.coll, &rawdoc! { "_id": 1, "n": 0 }, &no_options())
        .unwrap()
        .unwrap();
    let coll = s.coll;
    let inc = UpdateSpec::Document(rawdoc! { "$inc": { "n": 1 } }.into_bytes());
    fail_once(&mut s, "update", 91);
    let r = s
        .guest
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_update_one(
            &mut s.guest.store,
            coll.0,
            &rawdoc! { "_id": 1 }.into_bytes(),
            &inc,
            &no_options(),
        )
        .unwrap();
    assert_eq!(r.expect("retried").modified_count, 1);
    assert_eq!(started(&mut s, "update").len(), 2);

    fail_once(&mut s, "update", 91);
    let r = s
        .guest
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_update_many(
            &mut s.guest.store,
            coll.0,
            &rawdoc! {}.into_bytes(),
            &inc,
            &no_options(),
        )
        .unwrap();
    assert_eq!(
        r.expect_err("multi-document writes are not retried").code,
        Some(91)
    );
    let updates = started(&mut s, "update");
    assert_eq!(updates.len(), 1);
    assert!(command(&updates[0]).get("txnNumber").unwrap().is_none());
}

#[test]
fn retry_writes_false_turns_retries_off() {
    let mut s = setup("off", true, "?replicaSet=rs0&retryWrites=false");
    fail_once(&mut s, "insert", 91);
    let err = s
        .guest
        .insert_one(s.coll, &rawdoc! { "_id": 1 }, &no_options())
        .unwrap()
        .expect_err("no retry");
    assert_eq!(err.code, Some(91));
}

#[test]
fn a_standalone_cannot_retry_writes() {
    let mut s = setup("standalone", false, "");
    fail_once(&mut s, "insert", 91);
    let err = s
        .guest
        .insert_one(s.coll, &rawdoc! { "_id": 1 }, &no_options())
        .unwrap()
        .expect_err("no retry");
    assert_eq!(err.code, Some(91));
    let inserts = started(&mut s, "insert");
    assert_eq!(inserts.len(), 1);
    assert!(command(&inserts[0]).get("txnNumber").unwrap().is_none());
}

/// Retryable Writes prose test 4.1, repeated: in a sharded cluster (the proxy's
/// mongoses, fail points per mongos) a retried write goes to the other mongos,
/// the failed one being deprioritized; with only one, it goes back to it (4.2).
#[test]
fn sharded_write_retries_deprioritize_the_failed_mongos() {
    let (_, backend) = host_tests::test_server();
    for n in [2usize, 1] {
        let proxy = Proxy::start(ProxyConfig::sharded(backend, n)).unwrap();
        let addrs = proxy.addresses();
        let mut guest = Guest::new(&addrs).unwrap();
        let hosts: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        let uri = format!("mongodb://{}/?directConnection=false", hosts.join(","));
        let client = guest.connect(&uri, None, true).unwrap().unwrap();
        let direct: Vec<Client> = hosts
            .iter()
            .map(|h| {
                let uri = format!("mongodb://{h}/?directConnection=true");
                guest.connect(&uri, None, false).unwrap().unwrap()
            })
            .collect();
        let db = guest.database(client, "rw_sharded", None).unwrap();
        let coll = guest.collection(db, "c", None).unwrap();
        for round in 0..6 {
            for &d in &direct {
                let admin = guest.database(d, "admin", None).unwrap();
                let fp = rawdoc! {
                    "configureFailPoint": "failCommand",
                    "mode": { "times": 1 },
                    "data": { "failCommands": ["insert"], "errorCode": 6,
                              "errorLabels": ["RetryableWriteError"] },
                };
                guest.run_command(admin, &fp, None).unwrap().unwrap();
            }
            guest.take_events(client).unwrap();
            let r = guest.insert_one(coll, &rawdoc! { "round": round }, &no_options());
            let events = guest.take_events(client).unwrap();
            let done: Vec<(CommandEventKind, String)> = events
                .into_iter()
                .filter(|e| e.command_name == "insert" && e.kind != CommandEventKind::Started)
                .map(|e| (e.kind, e.server_address))
                .collect();
            assert_eq!(done.len(), 2, "{n} mongoses, round {round}: {done:?}");
            if n == 2 {
                assert!(r.unwrap().is_err(), "both mongoses fail once");
                assert_ne!(done[0].1, done[1].1, "round {round}: same mongos twice");
            } else {
                assert!(r.unwrap().is_ok(), "the retry on the lone mongos succeeds");
                assert_eq!(done[0].1, done[1].1);
                assert_eq!(done[1].0, CommandEventKind::Succeeded);
            }
        }
    }
}

// Prose tests 3 and 6: which error a retried write reports when the server
// labels some of them NoWritesPerformed. The tests reconfigure the fail point
// from a command-failed listener between the attempts; the proxy's
// `proxyThen` does the same from inside (a guest cannot act mid-operation).

/// Fails `insert` once with `first`, then with `then` in mode `then_mode`.
fn fail_inserts(
    s: &mut Setup,
    first: bson::RawDocumentBuf,
    then_mode: bson::RawBson,
    then: bson::RawDocumentBuf,
) {
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let mut data = first;
    data.append(bson::cstr!("failCommands"), bson::rawbson!(["insert"]));
    let mut then = then;
    then.append(bson::cstr!("failCommands"), bson::rawbson!(["insert"]));
    data.append(
        bson::cstr!("proxyThen"),
        rawdoc! { "mode": then_mode, "data": then },
    );
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": data,
    };
    s.guest
        .run_command(admin, &fp, None)
        .unwrap()
        .expect("configureFailPoint");
    s.guest.take_events(s.client).unwrap();
}

/// The error of an insert whose attempts all fail, and how many attempts it made.
fn failed_insert(
    s: &mut Setup,
) -> (
    host_tests::bindings::exports::mongo_wasi::driver::types::Error,
    usize,
) {
    let err = s
        .guest
        .insert_one(s.coll, &rawdoc! { "x": 1 }, &no_options())
        .unwrap()
        .expect_err("every attempt fails");
    let attempts = started(s, "insert").len();
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let off = rawdoc! { "configureFailPoint": "failCommand", "mode": "off" };
    s.guest.run_command(admin, &off, None).unwrap().unwrap();
    (err, attempts)
}

const NWP: &str = "NoWritesPerformed";

#[test]
fn prose_3_a_no_writes_performed_retry_reports_the_write_concern_error() {
    let mut s = setup("nwp_wce", true, "?replicaSet=rs0");
    fail_inserts(
        &mut s,
        rawdoc! { "errorLabels": ["RetryableWriteError"], "writeConcernError": { "code": 91, "errmsg": "shutdown" } },
        bson::rawbson!({ "times": 1 }),
        rawdoc! { "errorCode": 10107, "errorLabels": ["RetryableWriteError", NWP] },
    );
    let (err, attempts) = failed_insert(&mut s);
    assert_eq!(err.code, Some(91), "{err:?}");
    assert_eq!(attempts, 2);
}

/// Prose test 6's overload labels, with `NoWritesPerformed` when `nwp`.
fn overload(code: i32, nwp: bool) -> bson::RawDocumentBuf {
    let mut labels = bson::RawArrayBuf::new();
    for l in ["RetryableError", "SystemOverloadedError"]
        .into_iter()
        .chain(nwp.then_some(NWP))
    {
        labels.push(l);
    }
    rawdoc! { "errorCode": code, "errorLabels": labels }
}

#[test]
fn prose_6_case_1_without_no_writes_performed_the_last_error_is_reported() {
    let mut s = setup("nwp_none", true, "?replicaSet=rs0");
    fail_inserts(
        &mut s,
        overload(91, false),
        bson::rawbson!("alwaysOn"),
        overload(10107, false),
    );
    let (err, attempts) = failed_insert(&mut s);
    assert_eq!(err.code, Some(10107), "{err:?}");
    assert_eq!(attempts, 3, "maxAdaptiveRetries (2) retries");
}

#[test]
fn prose_6_case_2_when_every_error_has_no_writes_performed_the_first_is_reported() {
    let mut s = setup("nwp_all", true, "?replicaSet=rs0");
    fail_inserts(
        &mut s,
        overload(91, true),
        bson::rawbson!("alwaysOn"),
        overload(10107, true),
    );
    let (err, attempts) = failed_insert(&mut s);
    assert_eq!(err.code, Some(91), "{err:?}");
    assert!(err.labels.iter().any(|l| l == NWP), "{err:?}");
    assert_eq!(attempts, 3);
}

#[test]
fn prose_6_case_3_a_later_no_writes_performed_error_keeps_the_earlier_one() {
    let mut s = setup("nwp_some", true, "?replicaSet=rs0");
    fail_inserts(
        &mut s,
        overload(91, false),
        bson::rawbson!("alwaysOn"),
        overload(91, true),
    );
    let (err, attempts) = failed_insert(&mut s);
    assert_eq!(err.code, Some(91), "{err:?}");
    assert!(!err.labels.iter().any(|l| l == NWP), "{err:?}");
    assert_eq!(attempts, 3);
}
