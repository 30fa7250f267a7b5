//! Transactions through the failpoint proxy presenting a replica set in
//! front of nx-27017 (which commits and aborts, though it does not isolate).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, RawDocument};
use host_tests::bindings::exports::mongo_wasi::driver::client::SessionOptions;
use host_tests::bindings::exports::mongo_wasi::driver::collection::OpOptions;
use host_tests::bindings::exports::mongo_wasi::driver::session::{
    RunnerStep, TransactionOptions, WithTransactionOptions,
};
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
        snapshot_time: None,
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

fn with_transaction(g: &mut Guest, s: ResourceAny, timeout_ms: Option<u64>) -> ResourceAny {
    let opts = WithTransactionOptions {
        transaction: txn_options(),
        timeout_ms,
    };
    g.driver
        .mongo_wasi_driver_session()
        .session()
        .call_with_transaction(&mut g.store, s, &opts)
        .unwrap()
}

fn step(g: &mut Guest, r: ResourceAny) -> host_tests::guest::WitResult<RunnerStep> {
    g.driver
        .mongo_wasi_driver_session()
        .transaction_runner()
        .call_step(&mut g.store, r)
        .unwrap()
}

fn report(g: &mut Guest, r: ResourceAny, outcome: host_tests::guest::WitResult<()>) {
    g.driver
        .mongo_wasi_driver_session()
        .transaction_runner()
        .call_report(&mut g.store, r, outcome.as_ref().map(|_| ()))
        .unwrap()
        .expect("a body attempt is running");
}

#[test]
fn with_transaction_runs_the_body_again_after_a_transient_error() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{addr}/?replicaSet=rs0"), None, true)
        .unwrap()
        .unwrap();
    let db = g.database(client, "txn_runner", None).unwrap();
    g.run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    let session = start_session(&mut g, client);
    // The body's first insert loses its connection: TransientTransactionError.
    let admin = g.database(client, "admin", None).unwrap();
    let fp = rawdoc! { "configureFailPoint": "failCommand", "mode": { "times": 1 }, "data": { "failCommands": ["insert"], "closeConnection": true } };
    g.run_command(admin, &fp, None).unwrap().unwrap();
    g.take_events(client).unwrap();

    let runner = with_transaction(&mut g, session, None);
    let mut bodies = 0;
    while step(&mut g, runner).expect("the loop ends in a commit") == RunnerStep::RunBody {
        bodies += 1;
        assert!(bodies <= 2, "one retry is enough");
        assert!(in_txn(&mut g, session), "step started a transaction");
        let o = OpOptions {
            session: Some(session),
            ..no_options()
        };
        let outcome = g.insert_one(coll, &rawdoc! { "_id": 1 }, &o).unwrap();
        if bodies == 1 {
            let e = outcome.as_ref().expect_err("the failpoint closes it");
            assert!(e.labels.iter().any(|l| l == "TransientTransactionError"));
        }
        report(&mut g, runner, outcome.map(|_| ()));
    }
    assert_eq!(bodies, 2, "the body ran again");
    assert!(!in_txn(&mut g, session));
    assert_eq!(
        step(&mut g, runner).unwrap(),
        RunnerStep::Done,
        "done stays done"
    );
    runner.resource_drop(&mut g.store).unwrap();

    let events = g.take_events(client).unwrap();
    assert_eq!(
        started(&events, "abortTransaction").len(),
        1,
        "the failed attempt aborted"
    );
    let commits = started(&events, "commitTransaction");
    assert_eq!(commits.len(), 1);
    let inserts = started(&events, "insert");
    assert_eq!(inserts.len(), 2);
    let (n1, n2) = (
        inserts[0].get_i64("txnNumber").unwrap(),
        inserts[1].get_i64("txnNumber").unwrap(),
    );
    assert!(n2 > n1, "the retry is a new transaction");
    assert_eq!(commits[0].get_i64("txnNumber").unwrap(), n2);
    assert_eq!(
        g.count_documents(coll, &rawdoc! {}, &no_options())
            .unwrap()
            .unwrap(),
        1
    );
}

#[test]
fn with_transaction_ends_with_a_timeout_once_its_deadline_passes() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{addr}/?replicaSet=rs0"), None, true)
        .unwrap()
        .unwrap();
    let db = g.database(client, "txn_runner_deadline", None).unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    let session = start_session(&mut g, client);
    // Every insert fails with a transient error: only the deadline ends the loop.
    let admin = g.database(client, "admin", None).unwrap();
    let fp = rawdoc! { "configureFailPoint": "failCommand", "mode": "alwaysOn", "data": { "failCommands": ["insert"], "errorCode": 24, "errorLabels": ["TransientTransactionError"] } };
    g.run_command(admin, &fp, None).unwrap().unwrap();

    let started_at = std::time::Instant::now();
    let runner = with_transaction(&mut g, session, Some(1000));
    let mut bodies = 0;
    let err = loop {
        match step(&mut g, runner) {
            Err(e) => break e,
            Ok(RunnerStep::Done) => panic!("every body fails"),
            Ok(RunnerStep::RunBody) => {
                bodies += 1;
                let o = OpOptions {
                    session: Some(session),
                    ..no_options()
                };
                let outcome = g.insert_one(coll, &rawdoc! { "_id": 1 }, &o).unwrap();
                report(&mut g, runner, outcome.map(|_| ()));
            }
        }
    };
    let elapsed = started_at.elapsed();
    let off = rawdoc! { "configureFailPoint": "failCommand", "mode": "off" };
    g.run_command(admin, &off, None).unwrap().unwrap();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(
        err.labels.iter().any(|l| l == "TransientTransactionError"),
        "the last transient error's labels: {err:?}"
    );
    assert!(err.cause.is_some(), "the last error is the cause");
    assert!(bodies >= 2, "retried until the deadline: {bodies}");
    // A retry whose backoff (at most 500 ms) would end past the deadline is
    // not started, so the loop ends at most 500 ms early.
    assert!(
        elapsed >= std::time::Duration::from_millis(490),
        "not long before the deadline: {elapsed:?}"
    );
    assert!(
        elapsed < std::time::Duration::from_secs(5),
        "bounded by timeoutMS (plus one abort): {elapsed:?}"
    );
    assert!(!in_txn(&mut g, session), "the last attempt was aborted");
    // Over: the same outcome again.
    assert_eq!(step(&mut g, runner).unwrap_err().kind, ErrorKind::Timeout);
}

#[test]
fn with_transaction_waits_a_backoff_between_attempts() {
    // Retry Backoff is Enforced (Convenient API prose test): 30 transient
    // failures, then success. The backoffs alone average about 5 s; the spec
    // asks for more than 1.25 s in all.
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{addr}/?replicaSet=rs0"), None, true)
        .unwrap()
        .unwrap();
    let db = g.database(client, "txn_runner_backoff", None).unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    let session = start_session(&mut g, client);
    let admin = g.database(client, "admin", None).unwrap();
    let fp = rawdoc! { "configureFailPoint": "failCommand", "mode": { "times": 30 }, "data": { "failCommands": ["insert"], "errorCode": 24, "errorLabels": ["TransientTransactionError"] } };
    g.run_command(admin, &fp, None).unwrap().unwrap();

    let started_at = std::time::Instant::now();
    let runner = with_transaction(&mut g, session, None);
    let mut bodies = 0;
    while step(&mut g, runner).expect("commits after the failures") == RunnerStep::RunBody {
        bodies += 1;
        let o = OpOptions {
            session: Some(session),
            ..no_options()
        };
        let outcome = g.insert_one(coll, &rawdoc! { "x": 1 }, &o).unwrap();
        report(&mut g, runner, outcome.map(|_| ()));
    }
    let elapsed = started_at.elapsed();
    assert_eq!(bodies, 31);
    assert!(
        elapsed > std::time::Duration::from_millis(1250),
        "retries waited: {elapsed:?}"
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
        snapshot_time: None,
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
