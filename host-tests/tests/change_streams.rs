//! Change streams through the component against nx-27017 (directly, and
//! through the failpoint proxy to show a resume after a dropped connection).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, RawDocument, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::collection::AggregateOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{CommandEventKind, ErrorKind};
use host_tests::guest::{no_options, Client, Collection, Guest};
use mongo_wasi_proxy::{Proxy, ProxyConfig};
use wasmtime::component::ResourceAny;

fn agg(extra: Option<RawDocumentBuf>) -> AggregateOptions {
    AggregateOptions {
        extra: extra.map(|d| d.into_bytes()),
        ..host_tests::guest::aggregate_options()
    }
}

fn setup(g: &mut Guest, uri: &str, test: &str) -> (Client, Collection) {
    let client = g.connect(uri, None, true).unwrap().unwrap();
    let db = g.database(client, &format!("cs_{test}"), None).unwrap();
    g.run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    (client, coll)
}

fn watch(
    g: &mut Guest,
    coll: Collection,
    extra: Option<RawDocumentBuf>,
) -> host_tests::guest::WitResult<ResourceAny> {
    g.driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_watch(&mut g.store, coll.0, &[], &agg(extra))
        .unwrap()
}

/// Iterates (bounded) until `n` changes have arrived.
fn changes(g: &mut Guest, stream: ResourceAny, n: usize) -> Vec<RawDocumentBuf> {
    let mut out = Vec::new();
    for _ in 0..20 {
        let batch = g
            .next_batch(host_tests::guest::Cursor(stream))
            .unwrap()
            .expect("next batch");
        out.extend(
            batch
                .documents
                .into_iter()
                .map(|d| RawDocumentBuf::from_bytes(d).unwrap()),
        );
        if out.len() >= n {
            break;
        }
    }
    out
}

#[test]
fn a_change_stream_sees_inserts_and_tracks_its_resume_token() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let (client, coll) = setup(&mut g, &uri, "basic");
    let stream = watch(&mut g, coll, Some(rawdoc! { "maxAwaitTimeMS": 100 })).expect("watch");
    for i in 0..2 {
        g.insert_one(coll, &rawdoc! { "i": i }, &no_options())
            .unwrap()
            .unwrap();
    }
    let got = changes(&mut g, stream, 2);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].get_str("operationType").unwrap(), "insert");
    let token = g
        .driver
        .mongo_wasi_driver_cursor()
        .cursor()
        .call_resume_token(&mut g.store, stream)
        .unwrap()
        .expect("a token");
    assert_eq!(
        RawDocument::from_bytes(&token).unwrap(),
        got[1].get_document("_id").unwrap(),
        "the last change's _id"
    );
    // The aggregate opened with $changeStream; getMore carried maxAwaitTimeMS.
    let events = g.take_events(client).unwrap();
    let started = |name: &str| -> Vec<RawDocumentBuf> {
        events
            .iter()
            .filter(|e| e.kind == CommandEventKind::Started && e.command_name == name)
            .map(|e| RawDocumentBuf::from_bytes(e.command.clone().unwrap()).unwrap())
            .collect()
    };
    let aggregate = &started("aggregate")[0];
    let first = aggregate
        .get_array("pipeline")
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert!(first
        .as_document()
        .unwrap()
        .get_document("$changeStream")
        .is_ok());
    assert!(started("getMore")
        .iter()
        .all(|c| c.get_i64("maxTimeMS").unwrap() == 100));
}

#[test]
fn max_await_time_must_be_below_timeout_ms() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let (_, coll) = setup(&mut g, &format!("{uri}?timeoutMS=100"), "maxawait");
    let err = watch(&mut g, coll, Some(rawdoc! { "maxAwaitTimeMS": 100 })).expect_err("invalid");
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
}

#[test]
fn a_dropped_connection_resumes_from_the_last_token() {
    let (_, backend) = host_tests::test_server();
    // A replica set: a standalone refuses $changeStream, as mongod does.
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let (client, coll) = setup(&mut g, &format!("mongodb://{addr}/"), "resume");
    let stream = watch(&mut g, coll, Some(rawdoc! { "maxAwaitTimeMS": 100 })).unwrap();
    g.insert_one(coll, &rawdoc! { "i": 0 }, &no_options())
        .unwrap()
        .unwrap();
    let first = changes(&mut g, stream, 1);
    assert_eq!(first.len(), 1);
    let token = first[0].get_document("_id").unwrap().to_owned();

    let admin = g.database(client, "admin", None).unwrap();
    let fp = rawdoc! { "configureFailPoint": "failCommand", "mode": { "times": 1 }, "data": { "failCommands": ["getMore"], "closeConnection": true } };
    g.run_command(admin, &fp, None).unwrap().unwrap();
    g.take_events(client).unwrap();
    g.insert_one(coll, &rawdoc! { "i": 1 }, &no_options())
        .unwrap()
        .unwrap();
    let next = changes(&mut g, stream, 1);
    assert_eq!(next.len(), 1, "the change after the resume point arrives");
    assert_eq!(
        next[0]
            .get_document("fullDocument")
            .unwrap()
            .get_i32("i")
            .unwrap(),
        1
    );
    let aggregates: Vec<RawDocumentBuf> = g
        .take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == CommandEventKind::Started && e.command_name == "aggregate")
        .map(|e| RawDocumentBuf::from_bytes(e.command.unwrap()).unwrap())
        .collect();
    assert_eq!(aggregates.len(), 1, "one resume");
    let stage = aggregates[0]
        .get_array("pipeline")
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    let stage = stage
        .as_document()
        .unwrap()
        .get_document("$changeStream")
        .unwrap();
    assert_eq!(stage.get_document("resumeAfter").unwrap(), &*token);
}
