//! End to end through the component against the real server (nx-27017,
//! started by `cargo xtask test`, which sets MONGO_WASI_URI).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::collection::{
    DeleteModel, UpdateModel, UpdateSpec, WriteModel,
};
use host_tests::bindings::exports::mongo_wasi::driver::types::{CommandEventKind, ErrorKind};
use host_tests::guest::{find_options, no_options, unvalue, Client, Database, Guest};
use std::collections::BTreeSet;
use std::net::SocketAddr;

fn server() -> (String, SocketAddr) {
    host_tests::test_server()
}

/// A guest connected with monitoring on, and a database unique to the test.
fn setup(test: &str) -> (Guest, Client, Database) {
    let (uri, addr) = server();
    let mut guest = Guest::new(&[addr]).unwrap();
    let client = guest.connect(&uri, None, true).unwrap().expect("connect");
    let db = guest
        .database(client, &format!("e2e_{test}"), None)
        .unwrap();
    guest
        .run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    (guest, client, db)
}

fn events_named(
    guest: &mut Guest,
    client: Client,
    name: &str,
) -> Vec<host_tests::bindings::exports::mongo_wasi::driver::types::CommandEvent> {
    guest
        .take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.command_name == name)
        .collect()
}

fn thousand_docs() -> Vec<RawDocumentBuf> {
    (0..1000)
        .map(|i| rawdoc! { "n": i, "name": format!("doc {i}") })
        .collect()
}

#[test]
fn insert_a_thousand_then_iterate_them_all_with_get_more() {
    let (mut g, client, db) = setup("iterate");
    let coll = g.collection(db, "docs", None).unwrap();
    let ids = g
        .insert_many(coll, &thousand_docs(), &no_options())
        .unwrap()
        .expect("insert_many");
    assert_eq!(ids.len(), 1000, "one generated _id per document");
    assert_eq!(
        g.count_documents(coll, &rawdoc! {}, &no_options())
            .unwrap()
            .unwrap(),
        1000
    );
    g.take_events(client).unwrap();

    let opts = host_tests::bindings::exports::mongo_wasi::driver::collection::FindOptions {
        batch_size: Some(10),
        ..find_options()
    };
    let cursor = g.find(coll, &rawdoc! {}, &opts).unwrap().expect("find");
    let mut seen = BTreeSet::new();
    let mut batches = 0;
    loop {
        let batch = g.next_batch(cursor).unwrap().expect("next_batch");
        assert!(
            batch.documents.len() <= 10,
            "a batch holds at most batchSize documents"
        );
        for bytes in &batch.documents {
            let doc = bson::RawDocument::from_bytes(bytes).unwrap();
            assert!(seen.insert(doc.get_i32("n").unwrap()), "no document twice");
        }
        batches += 1;
        if batch.exhausted {
            break;
        }
        assert!(batches < 200, "bounded: 1000 documents in batches of 10");
    }
    assert_eq!(
        seen,
        (0..1000).collect::<BTreeSet<i32>>(),
        "every document, exactly once"
    );
    assert_eq!(g.cursor_id(cursor).unwrap(), 0, "exhausted");
    let get_mores = events_named(&mut g, client, "getMore");
    let succeeded = get_mores
        .iter()
        .filter(|e| e.kind == CommandEventKind::Succeeded)
        .count();
    assert!(
        succeeded >= 99,
        "1000 documents in batches of 10 need at least 99 getMores, saw {succeeded}"
    );
    g.drop_resource(cursor.0).unwrap();
}

#[test]
fn closing_a_cursor_early_sends_kill_cursors() {
    let (mut g, client, db) = setup("kill");
    let coll = g.collection(db, "docs", None).unwrap();
    g.insert_many(coll, &thousand_docs(), &no_options())
        .unwrap()
        .unwrap();
    let opts = host_tests::bindings::exports::mongo_wasi::driver::collection::FindOptions {
        batch_size: Some(10),
        ..find_options()
    };
    let cursor = g.find(coll, &rawdoc! {}, &opts).unwrap().unwrap();
    let first = g.next_batch(cursor).unwrap().unwrap();
    assert_eq!(first.documents.len(), 10);
    assert!(!first.exhausted);
    let id = g.cursor_id(cursor).unwrap();
    assert_ne!(id, 0, "the server still holds the cursor");
    g.take_events(client).unwrap();

    g.close_cursor(cursor, None).unwrap().expect("close");
    let kills = events_named(&mut g, client, "killCursors");
    let started = kills
        .iter()
        .find(|e| e.kind == CommandEventKind::Started)
        .expect("killCursors was sent");
    let cmd = bson::RawDocument::from_bytes(started.command.as_deref().unwrap()).unwrap();
    let ids: Vec<i64> = cmd
        .get_array("cursors")
        .unwrap()
        .into_iter()
        .map(|v| v.unwrap().as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![id]);
    assert!(kills.iter().any(|e| e.kind == CommandEventKind::Succeeded));
    assert_eq!(g.cursor_id(cursor).unwrap(), 0);
    let after = g.next_batch(cursor).unwrap().unwrap_err();
    assert_eq!(
        after.kind,
        ErrorKind::Closed,
        "a closed cursor answers closed"
    );
}

#[test]
fn dropping_an_open_cursor_kills_it_too() {
    let (mut g, client, db) = setup("dropkill");
    let coll = g.collection(db, "docs", None).unwrap();
    g.insert_many(coll, &thousand_docs(), &no_options())
        .unwrap()
        .unwrap();
    let opts = host_tests::bindings::exports::mongo_wasi::driver::collection::FindOptions {
        batch_size: Some(5),
        ..find_options()
    };
    let cursor = g.find(coll, &rawdoc! {}, &opts).unwrap().unwrap();
    g.take_events(client).unwrap();
    g.drop_resource(cursor.0).unwrap();
    assert!(events_named(&mut g, client, "killCursors")
        .iter()
        .any(|e| e.kind == CommandEventKind::Succeeded));
}

#[test]
fn duplicate_key_is_its_own_kind_with_its_code() {
    let (mut g, _client, db) = setup("dupkey");
    let coll = g.collection(db, "docs", None).unwrap();
    g.insert_one(coll, &rawdoc! { "_id": 1 }, &no_options())
        .unwrap()
        .expect("first insert");
    let err = g
        .insert_one(coll, &rawdoc! { "_id": 1 }, &no_options())
        .unwrap()
        .expect_err("duplicate _id");
    assert_eq!(err.kind, ErrorKind::DuplicateKey, "{err:?}");
    assert_eq!(err.code, Some(11000), "{err:?}");
}

#[test]
fn command_error_carries_code_and_name() {
    // nx-27017 answers command errors without codes, so mongod's failCommand
    // comes from the failpoint proxy in front of it.
    let (uri, backend) = server();
    let proxy =
        mongo_wasi_proxy::Proxy::start(mongo_wasi_proxy::ProxyConfig::new(backend)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let proxied = uri.replace(&backend.to_string(), &addr.to_string());
    let client = g.connect(&proxied, None, true).unwrap().unwrap();
    let admin = g.database(client, "admin", None).unwrap();
    let fail = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": { "failCommands": ["find"], "errorCode": 2, "errorLabels": ["SomeLabel"] },
    };
    g.run_command(admin, &fail, None)
        .unwrap()
        .expect("configureFailPoint");
    let db = g.database(client, "e2e_cmderr", None).unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    g.take_events(client).unwrap();
    let err = match g.find(coll, &rawdoc! {}, &find_options()).unwrap() {
        Err(e) => e,
        Ok(_) => panic!("the failpoint fails the find"),
    };
    assert_eq!(err.kind, ErrorKind::Server, "{err:?}");
    assert_eq!(err.code, Some(2));
    assert_eq!(err.code_name.as_deref(), Some("BadValue"));
    assert!(err.labels.iter().any(|l| l == "SomeLabel"), "{err:?}");
    assert!(err.reply.is_some(), "the raw reply comes along");
    let failed = events_named(&mut g, client, "find");
    assert!(failed.iter().any(|e| e.kind == CommandEventKind::Failed
        && e.failure.as_ref().and_then(|f| f.code) == Some(2)));
    // `times: 1`: the next find succeeds.
    assert!(g.find(coll, &rawdoc! {}, &find_options()).unwrap().is_ok());
}

#[test]
fn server_error_without_a_code_keeps_its_message() {
    let (mut g, _client, db) = setup("nocode");
    let coll = g.collection(db, "c", None).unwrap();
    // nx-27017 evaluates the operator only against a document.
    g.insert_one(coll, &rawdoc! { "a": 1 }, &no_options())
        .unwrap()
        .unwrap();
    let err = match g
        .find(coll, &rawdoc! { "a": { "$bogus": 1 } }, &find_options())
        .unwrap()
    {
        Err(e) => e,
        Ok(_) => panic!("an unknown query operator fails"),
    };
    assert_eq!(err.kind, ErrorKind::Server, "{err:?}");
    assert!(err.message.contains("$bogus"), "{err:?}");
}

#[test]
fn monitoring_events_describe_the_command() {
    let (mut g, client, db) = setup("events");
    g.take_events(client).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .unwrap();
    let events = g.take_events(client).unwrap();
    assert_eq!(events.len(), 2, "started and succeeded: {events:?}");
    let (started, succeeded) = (&events[0], &events[1]);
    assert_eq!(started.kind, CommandEventKind::Started);
    assert_eq!(succeeded.kind, CommandEventKind::Succeeded);
    assert_eq!(started.command_name, "ping");
    assert_eq!(started.database_name, "e2e_events");
    assert_eq!(started.request_id, succeeded.request_id);
    assert_eq!(started.connection_id, succeeded.connection_id);
    assert_eq!(started.server_address, server().1.to_string());
    assert!(succeeded.duration_micros.is_some());
    let cmd = bson::RawDocument::from_bytes(started.command.as_deref().unwrap()).unwrap();
    assert_eq!(cmd.get_str("$db").unwrap(), "e2e_events");
    let reply = bson::RawDocument::from_bytes(succeeded.reply.as_deref().unwrap()).unwrap();
    assert!(reply.get("ok").unwrap().is_some());
}

#[test]
fn bad_input_gets_clear_errors_not_traps() {
    let (uri, addr) = server();
    let mut g = Guest::new(&[addr]).unwrap();
    for bad in [
        "mongodb://",
        "http://x",
        "mongodb://h:99999/",
        "mongodb://h/?timeoutMS=-1",
        "mongodb://%2Ftmp%2Fm.sock",
    ] {
        let err = g.connect(bad, None, false).unwrap().expect_err(bad);
        assert_eq!(err.kind, ErrorKind::InvalidArgument, "{bad}: {err:?}");
    }
    let client = g.connect(&uri, None, false).unwrap().unwrap();
    let db = g.database(client, "admin", None).unwrap();
    // Malformed BSON from the caller.
    let opts = host_tests::bindings::exports::mongo_wasi::driver::database::RunCommandOptions {
        timeout_ms: None,
        session: None,
        read_preference: None,
    };
    let err = g
        .driver
        .mongo_wasi_driver_database()
        .database()
        .call_run_command(&mut g.store, db.0, &vec![7, 0, 0, 0, 1, 2, 3], &opts)
        .unwrap()
        .expect_err("garbage is not a document");
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
    // The instance is still healthy afterwards.
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping after bad input");
}

#[test]
fn timeout_ms_attaches_max_time_ms() {
    let (mut g, client, db) = setup("maxtime");
    g.take_events(client).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, Some(5000))
        .unwrap()
        .unwrap();
    let started = g
        .take_events(client)
        .unwrap()
        .into_iter()
        .find(|e| e.kind == CommandEventKind::Started)
        .unwrap();
    let cmd = bson::RawDocument::from_bytes(started.command.as_deref().unwrap()).unwrap();
    let max = cmd
        .get_i64("maxTimeMS")
        .expect("maxTimeMS sent under timeoutMS");
    assert!(
        max > 0 && max <= 5000,
        "maxTimeMS {max} is what remains of 5000"
    );
    // Without timeoutMS there is none.
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .unwrap();
    let started = g
        .take_events(client)
        .unwrap()
        .into_iter()
        .find(|e| e.kind == CommandEventKind::Started)
        .unwrap();
    let cmd = bson::RawDocument::from_bytes(started.command.as_deref().unwrap()).unwrap();
    assert!(cmd.get("maxTimeMS").unwrap().is_none());
}

#[test]
fn host_names_resolve_through_wasi_name_lookup() {
    // `localhost` goes through wasi:sockets/ip-name-lookup; only its IPv4
    // address is allowed, so the driver must fall through to it if ::1 comes first.
    let (_, addr) = server();
    let mut g = Guest::with_name_lookup(&[addr]).unwrap();
    let client = g
        .connect(
            &format!("mongodb://localhost:{}/", addr.port()),
            None,
            false,
        )
        .unwrap()
        .unwrap();
    let db = g.database(client, "admin", None).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, Some(5000))
        .unwrap()
        .expect("ping via localhost");
}

#[test]
fn bulk_write_runs_mixed_models_and_reports_partial_results() {
    let (mut g, client, db) = setup("bulk");
    let coll = g.collection(db, "c", None).unwrap();
    let update = |filter: RawDocumentBuf, set: RawDocumentBuf, upsert| UpdateModel {
        filter: filter.into_bytes(),
        update: UpdateSpec::Document(rawdoc! { "$set": set }.into_bytes()),
        upsert,
        collation: None,
        hint: None,
        array_filters: None,
        sort: None,
    };
    let models = vec![
        WriteModel::InsertOne(rawdoc! { "_id": 1, "n": 1 }.into_bytes()),
        WriteModel::InsertOne(rawdoc! { "_id": 2, "n": 2 }.into_bytes()),
        WriteModel::UpdateOne(update(rawdoc! { "_id": 1 }, rawdoc! { "n": 10 }, None)),
        WriteModel::UpdateOne(update(rawdoc! { "_id": 3 }, rawdoc! { "n": 3 }, Some(true))),
        WriteModel::DeleteOne(DeleteModel {
            filter: rawdoc! { "_id": 2 }.into_bytes(),
            collation: None,
            hint: None,
        }),
    ];
    g.take_events(client).unwrap();
    let r = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_bulk_write(&mut g.store, coll.0, &models, &no_options())
        .unwrap()
        .expect("bulk write");
    assert_eq!(r.inserted_count, 2);
    assert_eq!(r.matched_count, 1);
    assert_eq!(r.modified_count, 1);
    assert_eq!(r.upserted_count, 1);
    assert_eq!(r.deleted_count, 1);
    let ids: Vec<(u32, bson::Bson)> = r
        .inserted_ids
        .iter()
        .map(|i| (i.index, unvalue(&i.id)))
        .collect();
    assert_eq!(ids, [(0, bson::Bson::Int32(1)), (1, bson::Bson::Int32(2))]);
    assert_eq!(r.upserted_ids.len(), 1);
    assert_eq!(
        (r.upserted_ids[0].index, unvalue(&r.upserted_ids[0].id)),
        (3, bson::Bson::Int32(3))
    );
    let names: Vec<String> = g
        .take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == CommandEventKind::Started)
        .map(|e| e.command_name)
        .collect();
    assert_eq!(
        names,
        ["insert", "update", "delete"],
        "one command per run of a kind"
    );

    // An ordered bulk write stops at a duplicate key and reports what it did.
    let models: Vec<WriteModel> = [4, 1, 5]
        .into_iter()
        .map(|id| WriteModel::InsertOne(rawdoc! { "_id": id }.into_bytes()))
        .collect();
    let err = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_bulk_write(&mut g.store, coll.0, &models, &no_options())
        .unwrap()
        .expect_err("duplicate _id");
    assert_eq!(err.error.code, Some(11000));
    assert_eq!(err.error.kind, ErrorKind::DuplicateKey, "{err:?}");
    assert_eq!(err.write_errors.len(), 1, "{err:?}");
    assert_eq!(
        (err.write_errors[0].index, err.write_errors[0].code),
        (1, 11000)
    );
    let partial = err.partial_result.as_ref().expect("what was written");
    assert_eq!(partial.inserted_count, 1);
    let written: Vec<(u32, bson::Bson)> = partial
        .inserted_ids
        .iter()
        .map(|i| (i.index, unvalue(&i.id)))
        .collect();
    assert_eq!(
        written,
        [(0, bson::Bson::Int32(4))],
        "ordered: nothing after the failure"
    );
    let reply = bson::RawDocument::from_bytes(err.error.reply.as_deref().unwrap()).unwrap();
    let partial = reply.get_document("partialResult").unwrap();
    assert_eq!(partial.get_i64("insertedCount").unwrap(), 1);
    let first = reply
        .get_array("writeErrors")
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(first.as_document().unwrap().get_i32("index").unwrap(), 1);
    assert_eq!(
        g.count_documents(coll, &rawdoc! {}, &no_options())
            .unwrap()
            .unwrap(),
        3,
        "_id 1, 3 and 4; not 5"
    );
}

#[test]
fn collection_concerns_ride_on_its_commands_and_bad_ones_fail_clearly() {
    use host_tests::bindings::exports::mongo_wasi::driver::database::CollectionOptions;
    let (mut g, client, db) = setup("concerns");
    let opts = CollectionOptions {
        timeout_ms: None,
        read_concern: Some(rawdoc! { "level": "local" }.into_bytes()),
        write_concern: Some(rawdoc! { "w": 1 }.into_bytes()),
        read_preference: None,
    };
    let coll = g
        .driver
        .mongo_wasi_driver_database()
        .database()
        .call_collection(&mut g.store, db.0, "c", &opts)
        .unwrap();
    let coll = host_tests::guest::Collection(coll);
    g.take_events(client).unwrap();
    g.insert_one(coll, &rawdoc! { "x": 1 }, &no_options())
        .unwrap()
        .unwrap();
    let cursor = g.find(coll, &rawdoc! {}, &find_options()).unwrap().unwrap();
    g.drop_resource(cursor.0).unwrap();
    let started: Vec<RawDocumentBuf> = g
        .take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == CommandEventKind::Started)
        .map(|e| RawDocumentBuf::from_bytes(e.command.unwrap()).unwrap())
        .collect();
    let insert = started
        .iter()
        .find(|c| c.get("insert").unwrap().is_some())
        .unwrap();
    assert_eq!(
        insert.get_document("writeConcern").unwrap(),
        &*rawdoc! { "w": 1 }
    );
    let find = started
        .iter()
        .find(|c| c.get("find").unwrap().is_some())
        .unwrap();
    assert_eq!(
        find.get_document("readConcern").unwrap(),
        &*rawdoc! { "level": "local" }
    );

    let bad = CollectionOptions {
        write_concern: Some(vec![9, 0, 0, 0, 42, 42, 42, 42, 0]),
        ..opts
    };
    let coll = g
        .driver
        .mongo_wasi_driver_database()
        .database()
        .call_collection(&mut g.store, db.0, "c", &bad)
        .unwrap();
    let err = g
        .insert_one(
            host_tests::guest::Collection(coll),
            &rawdoc! { "x": 1 },
            &no_options(),
        )
        .unwrap()
        .expect_err("malformed concern");
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
    assert!(err.message.contains("concern"), "{err:?}");
}
