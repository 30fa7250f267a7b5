//! Retryable Reads through the failpoint proxy in front of nx-27017: a read
//! that fails with a retryable error is retried once without timeoutMS, and
//! as often as its deadline allows with it.

use bson::rawdoc;
use host_tests::bindings::exports::mongo_wasi::driver::types::{CommandEventKind, ErrorKind};
use host_tests::guest::{find_options, Client, Collection, Guest};
use mongo_wasi_proxy::{Proxy, ProxyConfig};

struct Setup {
    guest: Guest,
    client: Client,
    coll: Collection,
    _proxy: Proxy,
}

fn setup(test: &str, uri_options: &str) -> Setup {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::new(backend)).unwrap();
    let addr = proxy.addresses()[0];
    let mut guest = Guest::new(&[addr]).unwrap();
    let client = guest
        .connect(&format!("mongodb://{addr}/{uri_options}"), None, true)
        .unwrap()
        .unwrap();
    let db = guest
        .database(client, &format!("retry_{test}"), None)
        .unwrap();
    guest
        .run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    let coll = guest.collection(db, "c", None).unwrap();
    guest
        .insert_one(coll, &rawdoc! { "x": 1 }, &host_tests::guest::no_options())
        .unwrap()
        .unwrap();
    Setup {
        guest,
        client,
        coll,
        _proxy: proxy,
    }
}

fn fail_finds(s: &mut Setup, times: i32, code: i32) {
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": times },
        "data": { "failCommands": ["find"], "errorCode": code },
    };
    s.guest
        .run_command(admin, &fp, None)
        .unwrap()
        .expect("configureFailPoint");
    s.guest.take_events(s.client).unwrap();
}

fn find_events(s: &mut Setup) -> Vec<CommandEventKind> {
    let events = s.guest.take_events(s.client).unwrap();
    events
        .into_iter()
        .filter(|e| e.command_name == "find")
        .map(|e| e.kind)
        .collect()
}

#[test]
fn a_retryable_error_is_retried_once() {
    let mut s = setup("once", "");
    fail_finds(&mut s, 1, 7); // HostNotFound: retryable
    let cursor = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .expect("the retry succeeds");
    assert_eq!(
        s.guest.next_batch(cursor).unwrap().unwrap().documents.len(),
        1
    );
    use CommandEventKind::*;
    assert_eq!(find_events(&mut s), [Started, Failed, Started, Succeeded]);
}

#[test]
fn without_timeout_ms_a_second_failure_is_returned() {
    let mut s = setup("twice", "");
    fail_finds(&mut s, 2, 7);
    let err = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("two failures");
    assert_eq!((err.kind, err.code), (ErrorKind::Server, Some(7)));
    use CommandEventKind::*;
    assert_eq!(find_events(&mut s), [Started, Failed, Started, Failed]);
}

#[test]
fn with_timeout_ms_retries_continue_until_success() {
    let mut s = setup("csot", "?timeoutMS=10000");
    fail_finds(&mut s, 3, 7);
    let cursor = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .expect("the fourth attempt succeeds");
    assert_eq!(
        s.guest.next_batch(cursor).unwrap().unwrap().documents.len(),
        1
    );
    let kinds = find_events(&mut s);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == CommandEventKind::Failed)
            .count(),
        3,
        "{kinds:?}"
    );
}

#[test]
fn non_retryable_errors_are_not_retried() {
    let mut s = setup("fatal", "?timeoutMS=10000");
    fail_finds(&mut s, 1, 2); // BadValue
    let err = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("BadValue");
    assert_eq!(err.code, Some(2));
    assert_eq!(
        find_events(&mut s).len(),
        2,
        "one attempt: started and failed"
    );
}

#[test]
fn retry_reads_false_turns_retries_off() {
    let mut s = setup("off", "?retryReads=false");
    fail_finds(&mut s, 1, 7);
    let err = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("no retry");
    assert_eq!(err.code, Some(7));
}

#[test]
fn a_dropped_connection_is_retried_on_a_new_one() {
    let mut s = setup("network", "");
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": { "failCommands": ["find"], "closeConnection": true },
    };
    s.guest.run_command(admin, &fp, None).unwrap().unwrap();
    s.guest.take_events(s.client).unwrap();
    let cursor = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .expect("retried after the network error");
    assert_eq!(
        s.guest.next_batch(cursor).unwrap().unwrap().documents.len(),
        1
    );
    let events = s.guest.take_events(s.client).unwrap();
    let finds: Vec<_> = events.iter().filter(|e| e.command_name == "find").collect();
    assert_eq!(finds.len(), 4, "failed then succeeded");
    assert_eq!(
        finds[1].failure.as_ref().map(|f| f.kind),
        Some(ErrorKind::Network)
    );
    assert_ne!(
        finds[0].connection_id, finds[2].connection_id,
        "the retry used a new connection"
    );
}

#[test]
fn a_retry_that_runs_out_of_time_is_a_timeout_caused_by_a_typed_server_error() {
    let mut s = setup("out_of_time", "?timeoutMS=400");
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 100 },
        "data": {
            "failCommands": ["find"], "errorCode": 7,
            "blockConnection": true, "blockTimeMS": 150,
        },
    };
    s.guest.run_command(admin, &fp, None).unwrap().unwrap();
    let err = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("every attempt fails until the deadline");
    // CSOT spec, "Retryability" and "Errors": a timeout error whose cause is
    // the last error a server gave, with its kind and code: the retried
    // HostNotFound (7), or the MaxTimeMSExpired (50) the proxy answers, as
    // mongod does, once the derived maxTimeMS is shorter than the block.
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    let cause = err.cause.as_deref().unwrap_or("");
    assert!(
        cause.starts_with("Server: ") && (cause.contains("(code 7") || cause.contains("(code 50")),
        "{err:?}"
    );
}
