//! Transactions through the failpoint proxy presenting a replica set in
//! front of nx-27017 (which commits and aborts, though it does not isolate).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, RawDocument};
use host_tests::bindings::exports::mongo_wasi::driver::client::SessionOptions;
use host_tests::bindings::exports::mongo_wasi::driver::collection::OpOptions;
use host_tests::bindings::exports::mongo_wasi::driver::session::TransactionOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{
    CommandEvent, CommandEventKind, ErrorKind,
};
use host_tests::guest::{no_options, Guest};
use mongo_wasi_proxy::{Proxy, ProxyConfig};
use wasmtime::component::ResourceAny;

fn txn_options() -> TransactionOptions {
    TransactionOptions {
        read_concern: None,
        write_concern: None,
        read_preference: None,
        max_commit_time_ms: None,
    }
}

fn start_session(g: &mut Guest, client: host_tests::guest::Client) -> ResourceAny {
    let opts = SessionOptions {
        causal_consistency: None,
        snapshot: None,
        default_timeout_ms: None,
        default_transaction_options: None,
    };
    g.driver
        .mongo_wasi_driver_client()
        .client()
        .call_start_session(&mut g.store, client.0, &opts)
        .unwrap()
        .unwrap()
}

fn start(g: &mut Guest, s: ResourceAny) {
    g.driver
        .mongo_wasi_driver_session()
        .session()
        .call_start_transaction(&mut g.store, s, &txn_options())
        .unwrap()
        .unwrap()
}

fn commit(g: &mut Guest, s: ResourceAny) -> host_tests::guest::WitResult<()> {
    g.driver
        .mongo_wasi_driver_session()
        .session()
        .call_commit_transaction(&mut g.store, s, None)
        .unwrap()
}

fn abort(g: &mut Guest, s: ResourceAny) -> host_tests::guest::WitResult<()> {
    g.driver
        .mongo_wasi_driver_session()
        .session()
        .call_abort_transaction(&mut g.store, s, None)
        .unwrap()
}

fn in_txn(g: &mut Guest, s: ResourceAny) -> bool {
    g.driver
        .mongo_wasi_driver_session()
        .session()
        .call_in_transaction(&mut g.store, s)
        .unwrap()
}

fn started(events: &[CommandEvent], name: &str) -> Vec<bson::RawDocumentBuf> {
    events
        .iter()
        .filter(|e| e.kind == CommandEventKind::Started && e.command_name == name)
        .map(|e| bson::RawDocumentBuf::from_bytes(e.command.clone().unwrap()).unwrap())
        .collect()
}

#[test]
fn a_transaction_marks_its_commands_and_commits() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{addr}/?replicaSet=rs0"), None, true)
        .unwrap()
        .unwrap();
    let db = g.database(client, "txn_commit", None).unwrap();
    g.run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    let session = start_session(&mut g, client);
    start(&mut g, session);
    assert!(in_txn(&mut g, session));
    g.take_events(client).unwrap();
    for i in 0..2 {
        let o = OpOptions {
            session: Some(session),
            ..no_options()
        };
        g.insert_one(coll, &rawdoc! { "_id": i }, &o)
            .unwrap()
            .expect("insert in the transaction");
    }
    commit(&mut g, session).expect("commit");
    assert!(!in_txn(&mut g, session));

    let events = g.take_events(client).unwrap();
    let inserts = started(&events, "insert");
    assert_eq!(inserts.len(), 2);
    let first: &RawDocument = &inserts[0];
    assert!(
        first.get_bool("startTransaction").unwrap(),
        "the first command starts it"
    );
    assert!(!first.get_bool("autocommit").unwrap());
    assert!(
        inserts[1].get("startTransaction").unwrap().is_none(),
        "later commands do not"
    );
    let n = first.get_i64("txnNumber").unwrap();
    assert_eq!(inserts[1].get_i64("txnNumber").unwrap(), n);
    let commits = started(&events, "commitTransaction");
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0].get_i64("txnNumber").unwrap(), n);
    assert_eq!(commits[0].get_str("$db").unwrap(), "admin");
    assert_eq!(
        commits[0].get_document("lsid").unwrap(),
        first.get_document("lsid").unwrap()
    );
    assert_eq!(
        g.count_documents(coll, &rawdoc! {}, &no_options())
            .unwrap()
            .unwrap(),
        2
    );

    // A transaction that ran nothing commits without a command; misuse is an error.
    start(&mut g, session);
    commit(&mut g, session).unwrap();
    assert!(started(&g.take_events(client).unwrap(), "commitTransaction").is_empty());
    let err = abort(&mut g, session).expect_err("abort after commit");
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
}

#[test]
fn abort_sends_abort_and_a_network_error_is_transient() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{addr}/?replicaSet=rs0"), None, true)
        .unwrap()
        .unwrap();
    let db = g.database(client, "txn_abort", None).unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    let session = start_session(&mut g, client);
    start(&mut g, session);
    let admin = g.database(client, "admin", None).unwrap();
    let fp = rawdoc! { "configureFailPoint": "failCommand", "mode": { "times": 1 }, "data": { "failCommands": ["insert"], "closeConnection": true } };
    g.run_command(admin, &fp, None).unwrap().unwrap();
    let o = OpOptions {
        session: Some(session),
        ..no_options()
    };
    let err = g
        .insert_one(coll, &rawdoc! { "_id": 1 }, &o)
        .unwrap()
        .expect_err("the connection closes");
    assert_eq!(err.kind, ErrorKind::Network);
    assert!(
        err.labels.iter().any(|l| l == "TransientTransactionError"),
        "{err:?}"
    );
    g.take_events(client).unwrap();
    abort(&mut g, session).expect("abort");
    assert_eq!(
        started(&g.take_events(client).unwrap(), "abortTransaction").len(),
        1
    );
}

#[test]
fn ending_a_session_aborts_its_open_transaction() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{addr}/?replicaSet=rs0"), None, true)
        .unwrap()
        .unwrap();
    let db = g.database(client, "txn_end", None).unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    let session = start_session(&mut g, client);
    start(&mut g, session);
    let o = OpOptions {
        session: Some(session),
        ..no_options()
    };
    g.insert_one(coll, &rawdoc! { "x": 1 }, &o)
        .unwrap()
        .unwrap();
    g.take_events(client).unwrap();
    g.driver
        .mongo_wasi_driver_session()
        .session()
        .call_end(&mut g.store, session)
        .unwrap();
    assert_eq!(
        started(&g.take_events(client).unwrap(), "abortTransaction").len(),
        1
    );
}

#[test]
fn a_session_default_timeout_bounds_commit_not_the_operations_run_with_it() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{addr}/?replicaSet=rs0"), None, true)
        .unwrap()
        .unwrap();
    let db = g.database(client, "txn_default_timeout", None).unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    let opts = SessionOptions {
        causal_consistency: None,
        snapshot: None,
        default_timeout_ms: Some(60_000),
        default_transaction_options: None,
    };
    let session = g
        .driver
        .mongo_wasi_driver_client()
        .client()
        .call_start_session(&mut g.store, client.0, &opts)
        .unwrap()
        .unwrap();
    start(&mut g, session);
    g.take_events(client).unwrap();
    let o = OpOptions {
        session: Some(session),
        ..no_options()
    };
    g.insert_one(coll, &rawdoc! { "x": 1 }, &o)
        .unwrap()
        .expect("insert in the transaction");
    commit(&mut g, session).expect("commit");
    let events = g.take_events(client).unwrap();
    // defaultTimeoutMS is for commit, abort, endSession and withTransaction
    // (CSOT spec, "Sessions"): the insert runs without timeoutMS.
    let insert = &started(&events, "insert")[0];
    assert!(insert.get("maxTimeMS").unwrap().is_none(), "{insert:?}");
    let commit = &started(&events, "commitTransaction")[0];
    assert!(commit.get("maxTimeMS").unwrap().is_some(), "{commit:?}");
}
