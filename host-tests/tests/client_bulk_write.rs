//! Client bulk write (Bulk Write spec) through the component against the
//! test server (nx-27017, which has the 8.0 `bulkWrite` command): mixed
//! models on two namespaces in one command, verbose results, and the error
//! of an ordered and an unordered write with a duplicate key; and against a
//! scripted loopback server, batches split by maxWriteBatchSize and a
//! results cursor read with getMore (nx-27017 answers in one batch).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, Bson, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::client::{
    ClientBulkWriteOptions, ClientWriteModel,
};
use host_tests::bindings::exports::mongo_wasi::driver::collection::{
    DeleteModel, UpdateModel, UpdateSpec, WriteModel,
};
use host_tests::bindings::exports::mongo_wasi::driver::types::{
    ClientBulkWriteError, ClientBulkWriteResult, CommandEventKind, ErrorKind,
};
use host_tests::guest::{no_options, unvalue, Client, Guest};

fn options(ordered: Option<bool>, verbose: bool) -> ClientBulkWriteOptions {
    ClientBulkWriteOptions {
        timeout_ms: Some(10_000),
        session: None,
        ordered,
        bypass_document_validation: None,
        comment: None,
        let_: None,
        write_concern: None,
        verbose_results: Some(verbose),
        extra: None,
    }
}

fn insert(ns: &str, doc: RawDocumentBuf) -> ClientWriteModel {
    ClientWriteModel {
        namespace: ns.into(),
        model: WriteModel::InsertOne(doc.into_bytes()),
        sort: None,
    }
}

fn bulk_write(
    g: &mut Guest,
    client: Client,
    models: &[ClientWriteModel],
    options: &ClientBulkWriteOptions,
) -> Result<ClientBulkWriteResult, ClientBulkWriteError> {
    g.driver
        .mongo_wasi_driver_client()
        .client()
        .call_bulk_write(&mut g.store, client.0, models, options)
        .unwrap()
}

fn setup(db_name: &str) -> (Guest, Client) {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g.connect(&uri, None, true).unwrap().expect("connect");
    let db = g.database(client, db_name, None).unwrap();
    g.run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    g.take_events(client).unwrap();
    (g, client)
}

#[test]
fn mixed_models_on_two_namespaces_go_in_one_command_with_verbose_results() {
    let (mut g, client) = setup("cbw_mixed");
    let (a, b) = ("cbw_mixed.a", "cbw_mixed.b");
    let models = vec![
        insert(a, rawdoc! { "_id": 1, "n": 1 }),
        insert(b, rawdoc! { "_id": 1, "n": 1 }),
        insert(a, rawdoc! { "_id": 2, "n": 2 }),
        ClientWriteModel {
            namespace: b.into(),
            model: WriteModel::UpdateOne(UpdateModel {
                filter: rawdoc! { "_id": 1 }.into_bytes(),
                update: UpdateSpec::Document(rawdoc! { "$set": { "n": 10 } }.into_bytes()),
                upsert: None,
                collation: None,
                hint: None,
                array_filters: None,
                sort: None,
            }),
            sort: None,
        },
        ClientWriteModel {
            namespace: a.into(),
            model: WriteModel::DeleteMany(DeleteModel {
                filter: rawdoc! { "n": { "$gte": 2 } }.into_bytes(),
                collation: None,
                hint: None,
            }),
            sort: None,
        },
    ];
    let r = bulk_write(&mut g, client, &models, &options(None, true)).expect("bulk write");
    assert!(r.acknowledged);
    assert_eq!(
        (
            r.inserted_count,
            r.matched_count,
            r.modified_count,
            r.deleted_count
        ),
        (3, 1, 1, 1)
    );
    let v = r.verbose_results.expect("verbose results were asked for");
    let inserted: Vec<(u32, Bson)> = v
        .insert_results
        .iter()
        .map(|i| (i.index, unvalue(&i.id)))
        .collect();
    assert_eq!(
        inserted,
        [
            (0, Bson::Int32(1)),
            (1, Bson::Int32(1)),
            (2, Bson::Int32(2))
        ]
    );
    assert_eq!(v.update_results.len(), 1);
    let u = &v.update_results[0];
    assert_eq!((u.index, u.matched_count, u.modified_count), (3, 1, 1));
    assert!(u.upserted_id.is_none());
    assert_eq!(v.delete_results.len(), 1);
    assert_eq!(
        (v.delete_results[0].index, v.delete_results[0].deleted_count),
        (4, 1)
    );

    let started: Vec<_> = g
        .take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == CommandEventKind::Started)
        .collect();
    assert_eq!(
        started.len(),
        1,
        "one bulkWrite command for all five models"
    );
    assert_eq!(
        (
            started[0].command_name.as_str(),
            started[0].database_name.as_str()
        ),
        ("bulkWrite", "admin")
    );
    let cmd = bson::Document::from_reader(started[0].command.as_deref().unwrap()).unwrap();
    assert!(!cmd.get_bool("errorsOnly").unwrap());
    assert!(cmd.get_bool("ordered").unwrap(), "ordered is always sent");
    let ns: Vec<&str> = cmd
        .get_array("nsInfo")
        .unwrap()
        .iter()
        .map(|d| d.as_document().unwrap().get_str("ns").unwrap())
        .collect();
    assert_eq!(ns, [a, b], "each namespace once");
    assert_eq!(cmd.get_array("ops").unwrap().len(), 5);

    // The writes really happened, where they were sent.
    let db = g.database(client, "cbw_mixed", None).unwrap();
    let coll_a = g.collection(db, "a", None).unwrap();
    let coll_b = g.collection(db, "b", None).unwrap();
    let count = |g: &mut Guest, c, f: RawDocumentBuf| {
        g.count_documents(c, &f, &no_options()).unwrap().unwrap()
    };
    assert_eq!(count(&mut g, coll_a, rawdoc! {}), 1, "_id 2 deleted");
    assert_eq!(count(&mut g, coll_b, rawdoc! { "n": 10 }), 1, "updated");
}

#[test]
fn write_errors_come_by_model_index_with_the_partial_result() {
    let (mut g, client) = setup("cbw_errors");
    let ns = "cbw_errors.c";
    let ids = |list: &[i32]| -> Vec<ClientWriteModel> {
        list.iter()
            .map(|id| insert(ns, rawdoc! { "_id": *id }))
            .collect()
    };
    bulk_write(&mut g, client, &ids(&[1]), &options(None, false)).expect("first insert");

    // Ordered: stops at the duplicate (model 1); model 0 was written.
    let err = bulk_write(&mut g, client, &ids(&[2, 1, 3]), &options(None, true))
        .expect_err("duplicate _id");
    assert_eq!(err.error.kind, ErrorKind::DuplicateKey, "{err:?}");
    assert_eq!(err.error.code, Some(11000));
    assert_eq!(err.write_errors.len(), 1, "{err:?}");
    assert_eq!(
        (err.write_errors[0].index, err.write_errors[0].code),
        (1, 11000)
    );
    let partial = err.partial_result.as_ref().expect("model 0 was written");
    assert_eq!(partial.inserted_count, 1);
    let v = partial.verbose_results.as_ref().unwrap();
    let written: Vec<(u32, Bson)> = v
        .insert_results
        .iter()
        .map(|i| (i.index, unvalue(&i.id)))
        .collect();
    assert_eq!(
        written,
        [(0, Bson::Int32(2))],
        "ordered: nothing after the failure"
    );

    // Unordered: goes past both duplicates and writes the rest.
    let err = bulk_write(
        &mut g,
        client,
        &ids(&[1, 4, 2, 5]),
        &options(Some(false), false),
    )
    .expect_err("duplicate _ids");
    let indexes: Vec<u32> = err.write_errors.iter().map(|w| w.index).collect();
    assert_eq!(indexes, [0, 2]);
    let partial = err.partial_result.as_ref().expect("two were written");
    assert_eq!(partial.inserted_count, 2);
    assert!(partial.verbose_results.is_none(), "summary results only");

    // Every model failed: no partial result (spec).
    let err =
        bulk_write(&mut g, client, &ids(&[1]), &options(None, false)).expect_err("duplicate _id");
    assert_eq!(err.write_errors.len(), 1);
    assert!(err.partial_result.is_none(), "{err:?}");

    // Refused before any I/O.
    let err = bulk_write(&mut g, client, &[], &options(None, false)).expect_err("no models");
    assert_eq!(err.error.kind, ErrorKind::InvalidArgument);
    let w0 = ClientBulkWriteOptions {
        write_concern: Some(
            host_tests::bindings::exports::mongo_wasi::driver::types::WriteConcern {
                w: Some(host_tests::bindings::exports::mongo_wasi::driver::types::Acknowledgement::Nodes(0)),
                journal: None,
                wtimeout_ms: None,
            },
        ),
        ..options(None, false)
    };
    let err = bulk_write(&mut g, client, &ids(&[9]), &w0).expect_err("w:0 and ordered");
    assert_eq!(err.error.kind, ErrorKind::InvalidArgument);
    assert!(
        err.error.message.contains("ordered"),
        "{}",
        err.error.message
    );
}

#[test]
fn batches_split_by_max_write_batch_size_and_results_cursors_are_read_to_the_end() {
    use host_tests::listeners::{Behaviour, Listener};
    let listener = Listener::start(Behaviour::BulkWriteBatches).unwrap();
    let mut g = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/", listener.addr);
    let client = g.connect(&uri, None, false).unwrap().unwrap();
    let models: Vec<ClientWriteModel> = (1..=3)
        .map(|id| insert("db.c", rawdoc! { "_id": id }))
        .collect();
    let err = bulk_write(&mut g, client, &models, &options(Some(false), true))
        .expect_err("the third insert fails");
    let sent: Vec<String> = listener
        .commands()
        .into_iter()
        .filter(|c| c == "bulkWrite" || c == "getMore")
        .collect();
    assert_eq!(
        sent,
        ["bulkWrite", "getMore", "bulkWrite"],
        "two models per command (maxWriteBatchSize 2), the first results cursor read with getMore"
    );
    assert_eq!(err.error.kind, ErrorKind::DuplicateKey, "{err:?}");
    let failed: Vec<(u32, i32)> = err.write_errors.iter().map(|w| (w.index, w.code)).collect();
    assert_eq!(
        failed,
        [(2, 11000)],
        "the second batch's index 0 is model 2"
    );
    let partial = err.partial_result.as_ref().expect("two were written");
    assert_eq!(partial.inserted_count, 2);
    let v = partial.verbose_results.as_ref().unwrap();
    let inserted: Vec<(u32, Bson)> = v
        .insert_results
        .iter()
        .map(|i| (i.index, unvalue(&i.id)))
        .collect();
    assert_eq!(
        inserted,
        [(0, Bson::Int32(1)), (1, Bson::Int32(2))],
        "one from the first batch, one from the getMore"
    );
}

#[test]
fn one_deadline_bounds_the_client_bulk_write() {
    use host_tests::listeners::{Behaviour, Listener};
    use std::time::{Duration, Instant};
    // The server answers the handshake, then nothing: the bulkWrite's reply never comes.
    let listener = Listener::start(Behaviour::HelloThenSilent).unwrap();
    let mut g = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/", listener.addr);
    let client = g.connect(&uri, None, false).unwrap().unwrap();
    let models = [insert("db.c", rawdoc! { "_id": 1 })];
    let opts = ClientBulkWriteOptions {
        timeout_ms: Some(500),
        ..options(None, false)
    };
    let started = Instant::now();
    let err = bulk_write(&mut g, client, &models, &opts).expect_err("no reply");
    let elapsed = started.elapsed();
    assert_eq!(err.error.kind, ErrorKind::Timeout, "{err:?}");
    // Slack for a loaded 2-core machine, not driver work.
    assert!(
        elapsed >= Duration::from_millis(495) && elapsed <= Duration::from_millis(2000),
        "returned after {elapsed:?} for a 500 ms deadline"
    );
    assert!(err.partial_result.is_none(), "nothing was observed");
}

#[test]
fn a_failed_get_more_ends_the_bulk_write_with_what_was_observed() {
    use host_tests::listeners::{Behaviour, Listener};
    let listener = Listener::start(Behaviour::BulkWriteGetMoreFails).unwrap();
    let mut g = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/", listener.addr);
    let client = g.connect(&uri, None, false).unwrap().unwrap();
    let models: Vec<ClientWriteModel> = (1..=3)
        .map(|id| insert("db.c", rawdoc! { "_id": id }))
        .collect();
    let err = bulk_write(&mut g, client, &models, &options(Some(false), true))
        .expect_err("the getMore fails");
    // The top-level error is the getMore's; nothing more is sent but the
    // killCursors of the results cursor (spec, "Top-Level Errors").
    assert_eq!(
        (err.error.kind, err.error.code),
        (ErrorKind::Server, Some(8)),
        "{err:?}"
    );
    let sent: Vec<String> = listener
        .commands()
        .into_iter()
        .filter(|c| matches!(c.as_str(), "bulkWrite" | "getMore" | "killCursors"))
        .collect();
    assert_eq!(sent, ["bulkWrite", "getMore", "killCursors"]);
    assert!(err.write_errors.is_empty());
    let partial = err
        .partial_result
        .as_ref()
        .expect("one insert was observed");
    let v = partial.verbose_results.as_ref().unwrap();
    let inserted: Vec<u32> = v.insert_results.iter().map(|i| i.index).collect();
    assert_eq!(inserted, [0]);
}
