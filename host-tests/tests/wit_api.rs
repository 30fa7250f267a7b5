//! The WIT 0.2.0 surface through the component against nx-27017: typed
//! options reach the commands (and `extra` stays the escape hatch), one
//! `value` shape, insert-many's ids as a list and what a failed one wrote
//! (and the same through insert-many-packed),
//! the duplicate-key kind, cursor `next`/`collect`, and the client's
//! lifecycle (closed stays closed; a dropped client ends its sessions).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{doc, rawdoc, Bson, Document, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::collection::{
    FindOptions, Hint, OpOptions, ReturnDocument, UpdateSpec,
};
use host_tests::bindings::exports::mongo_wasi::driver::types::{
    Acknowledgement, BulkWriteError, CommandEvent, CommandEventKind, ErrorKind, ReadMode,
    ReadPreference, WriteConcern,
};
use host_tests::guest::{
    find_options, no_options, unvalue, value, Client, Collection, Cursor, Database, Guest,
};
use mongo_wasi_proxy::{Proxy, ProxyConfig};
use std::time::{Duration, Instant};

/// A guest with monitoring on, and a fresh database unique to the test.
fn setup(test: &str) -> (Guest, Client, Database, Collection) {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g.connect(&uri, None, true).unwrap().expect("connect");
    let db = g
        .database(client, &format!("wit_api_{test}"), None)
        .unwrap();
    g.run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    let coll = g.collection(db, "c", None).unwrap();
    (g, client, db, coll)
}

/// The commands named `name` that started since the last take.
fn started(g: &mut Guest, client: Client, name: &str) -> Vec<Document> {
    started_events(g, client, name)
        .iter()
        .map(|e| Document::from_reader(e.command.as_deref().unwrap()).unwrap())
        .collect()
}

fn started_events(g: &mut Guest, client: Client, name: &str) -> Vec<CommandEvent> {
    g.take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == CommandEventKind::Started && e.command_name == name)
        .collect()
}

fn ints(n: std::ops::Range<i32>) -> Vec<RawDocumentBuf> {
    n.map(|i| rawdoc! { "_id": i, "n": i }).collect()
}

#[test]
fn typed_write_options_reach_the_commands_and_win_over_extra() {
    let (mut g, client, _db, coll) = setup("typed_writes");
    g.take_events(client).unwrap();
    let opts = OpOptions {
        upsert: Some(true),
        comment: Some(value("typed")),
        // The same field in `extra` loses to the typed one.
        extra: Some(rawdoc! { "comment": "extra", "upsert": false }.into_bytes()),
        write_concern: Some(WriteConcern {
            w: Some(Acknowledgement::Nodes(1)),
            journal: None,
            wtimeout_ms: None,
        }),
        ..no_options()
    };
    let r = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_update_one(
            &mut g.store,
            coll.0,
            &rawdoc! { "_id": 7 }.into_bytes(),
            &UpdateSpec::Document(rawdoc! { "$set": { "n": 7 } }.into_bytes()),
            &opts,
        )
        .unwrap()
        .expect("upsert");
    assert_eq!(r.matched_count, 0);
    assert_eq!(r.upserted_id.as_deref().map(unvalue), Some(Bson::Int32(7)));
    let update = &started(&mut g, client, "update")[0];
    assert_eq!(update.get_str("comment").unwrap(), "typed", "{update}");
    assert_eq!(
        update.get_document("writeConcern").unwrap(),
        &doc! { "w": 1 }
    );
    let statement = update.get_array("updates").unwrap()[0]
        .as_document()
        .unwrap();
    assert!(statement.get_bool("upsert").unwrap(), "{statement}");
    assert!(
        !update.contains_key("upsert"),
        "a statement field: {update}"
    );

    // Array filters go in the statement too.
    let opts = OpOptions {
        array_filters: Some(vec![rawdoc! { "e": { "$gte": 2 } }.into_bytes()]),
        hint: Some(Hint::Keys(rawdoc! { "_id": 1 }.into_bytes())),
        ..no_options()
    };
    let _ = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_update_many(
            &mut g.store,
            coll.0,
            &rawdoc! {}.into_bytes(),
            &UpdateSpec::Document(rawdoc! { "$set": { "a.$[e]": 0 } }.into_bytes()),
            &opts,
        )
        .unwrap();
    let update = &started(&mut g, client, "update")[0];
    let statement = update.get_array("updates").unwrap()[0]
        .as_document()
        .unwrap();
    assert_eq!(
        statement.get_array("arrayFilters").unwrap(),
        &vec![Bson::Document(doc! { "e": { "$gte": 2 } })]
    );
    assert_eq!(statement.get_document("hint").unwrap(), &doc! { "_id": 1 });
}

#[test]
fn find_one_and_update_returns_the_typed_shape_of_the_document() {
    let (mut g, client, _db, coll) = setup("typed_fam");
    g.insert_many(coll, &ints(0..5), &no_options())
        .unwrap()
        .unwrap();
    g.take_events(client).unwrap();
    // No `sort`: nx-27017 changes another document than the one it returns
    // when findAndModify carries one (PyMongo shows the same).
    let opts = OpOptions {
        projection: Some(rawdoc! { "_id": 0, "n": 1 }.into_bytes()),
        return_document: Some(ReturnDocument::After),
        ..no_options()
    };
    let after = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_find_one_and_update(
            &mut g.store,
            coll.0,
            &rawdoc! { "_id": 4 }.into_bytes(),
            &UpdateSpec::Document(rawdoc! { "$inc": { "n": 10 } }.into_bytes()),
            &opts,
        )
        .unwrap()
        .expect("findAndModify")
        .expect("a document");
    // After the change, only its n.
    assert_eq!(
        Document::from_reader(after.as_slice()).unwrap(),
        doc! { "n": 14 }
    );
    let cmd = &started(&mut g, client, "findAndModify")[0];
    assert!(cmd.get_bool("new").unwrap(), "{cmd}");
    assert_eq!(
        cmd.get_document("fields").unwrap(),
        &doc! { "_id": 0, "n": 1 }
    );
    assert!(!cmd.contains_key("returnDocument") && !cmd.contains_key("projection"));
}

#[test]
fn typed_find_options_reach_the_find() {
    let (mut g, client, _db, coll) = setup("typed_find");
    g.insert_many(coll, &ints(0..3), &no_options())
        .unwrap()
        .unwrap();
    g.take_events(client).unwrap();
    let opts = FindOptions {
        hint: Some(Hint::Keys(rawdoc! { "_id": 1 }.into_bytes())),
        comment: Some(value(42)),
        ..find_options()
    };
    let cursor = g.find(coll, &rawdoc! {}, &opts).unwrap().expect("find");
    let docs = g.collect(cursor, 10).unwrap().expect("collect");
    assert_eq!(docs.len(), 3);
    let find = &started(&mut g, client, "find")[0];
    assert_eq!(find.get_document("hint").unwrap(), &doc! { "_id": 1 });
    assert_eq!(find.get("comment"), Some(&Bson::Int32(42)));

    // A `value` that is not `{v: ...}` is the caller's mistake.
    let bad = FindOptions {
        comment: Some(rawdoc! { "x": 1 }.into_bytes()),
        ..find_options()
    };
    let err = g.find(coll, &rawdoc! {}, &bad).unwrap().err().unwrap();
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err:?}");
}

#[test]
fn reads_honour_the_read_preference_given() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 3)).unwrap();
    let members = proxy.addresses();
    let hosts: Vec<String> = members.iter().map(|a| a.to_string()).collect();
    let mut g = Guest::new(&members).unwrap();
    let uri = format!("mongodb://{}/?replicaSet=rs0", hosts.join(","));
    let client = g.connect(&uri, None, true).unwrap().unwrap();
    let db = g.database(client, "wit_api_readpref", None).unwrap();
    g.run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    let coll = g.collection(db, "c", None).unwrap();
    g.insert_one(coll, &rawdoc! { "_id": 1 }, &no_options())
        .unwrap()
        .unwrap();
    let primary = members[proxy.primary().unwrap()].to_string();
    g.take_events(client).unwrap();

    let secondary = Some(ReadPreference {
        mode: ReadMode::Secondary,
        tag_sets: Vec::new(),
        max_staleness_seconds: None,
    });
    let opts = FindOptions {
        read_preference: secondary.clone(),
        ..find_options()
    };
    let cursor = g.find(coll, &rawdoc! {}, &opts).unwrap().expect("find");
    assert_eq!(g.collect(cursor, 10).unwrap().unwrap().len(), 1);
    let find = &started_events(&mut g, client, "find")[0];
    assert_ne!(find.server_address, primary, "a secondary answered");
    let cmd = Document::from_reader(find.command.as_deref().unwrap()).unwrap();
    assert_eq!(
        cmd.get_document("$readPreference").unwrap(),
        &doc! { "mode": "secondary" }
    );

    let opts = OpOptions {
        read_preference: secondary,
        ..no_options()
    };
    let n = g
        .count_documents(coll, &rawdoc! {}, &opts)
        .unwrap()
        .unwrap();
    assert_eq!(n, 1);
    let aggregate = &started_events(&mut g, client, "aggregate")[0];
    assert_ne!(aggregate.server_address, primary);

    // Unset: the primary, with no $readPreference.
    let n = g
        .count_documents(coll, &rawdoc! {}, &no_options())
        .unwrap()
        .unwrap();
    assert_eq!(n, 1);
    let aggregate = &started_events(&mut g, client, "aggregate")[0];
    assert_eq!(aggregate.server_address, primary);

    // Tag sets in order (no member has dc: nowhere; `{}` takes any) and a
    // max staleness reach the server as given.
    let tagged = Some(ReadPreference {
        mode: ReadMode::SecondaryPreferred,
        tag_sets: vec![
            rawdoc! { "dc": "nowhere" }.into_bytes(),
            rawdoc! {}.into_bytes(),
        ],
        max_staleness_seconds: Some(120),
    });
    let opts = FindOptions {
        read_preference: tagged,
        ..find_options()
    };
    let cursor = g.find(coll, &rawdoc! {}, &opts).unwrap().expect("find");
    assert_eq!(g.collect(cursor, 10).unwrap().unwrap().len(), 1);
    let find = &started_events(&mut g, client, "find")[0];
    assert_ne!(find.server_address, primary, "a secondary answered");
    let cmd = Document::from_reader(find.command.as_deref().unwrap()).unwrap();
    assert_eq!(
        cmd.get_document("$readPreference").unwrap(),
        &doc! { "mode": "secondaryPreferred", "tags": [{ "dc": "nowhere" }, {}], "maxStalenessSeconds": 120 }
    );

    // A tag value that is not a string, and tags with mode primary, are refused.
    for (mode, set) in [
        (ReadMode::Secondary, rawdoc! { "dc": 1 }),
        (ReadMode::Primary, rawdoc! { "dc": "east" }),
    ] {
        let opts = FindOptions {
            read_preference: Some(ReadPreference {
                mode,
                tag_sets: vec![set.into_bytes()],
                max_staleness_seconds: None,
            }),
            ..find_options()
        };
        let err = match g.find(coll, &rawdoc! {}, &opts).unwrap() {
            Err(e) => e,
            Ok(c) => g.next_batch(c).unwrap().expect_err("refused"),
        };
        assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err:?}");
    }
}

#[test]
fn insert_many_returns_ids_and_a_failed_one_reports_what_it_wrote() {
    let (mut g, client, _db, coll) = setup("insert_many");
    let ids = g
        .insert_many(
            coll,
            &[rawdoc! { "_id": 1 }, rawdoc! { "x": 2 }],
            &no_options(),
        )
        .unwrap()
        .expect("insert-many");
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], Bson::Int32(1));
    assert!(
        matches!(ids[1], Bson::ObjectId(_)),
        "a generated id: {ids:?}"
    );

    g.take_events(client).unwrap();
    let (docs, unordered) = a_duplicate_between_two();
    let err = g
        .insert_many(coll, &docs, &unordered)
        .unwrap()
        .expect_err("a duplicate _id");
    assert_eq!(err.error.kind, ErrorKind::DuplicateKey, "{err:?}");
    assert_eq!(err.error.code, Some(11000));
    assert_eq!(err.write_errors.len(), 1);
    assert_eq!(
        (err.write_errors[0].index, err.write_errors[0].code),
        (1, 11000)
    );
    assert_eq!(written(&err), [(0, Bson::Int32(3)), (2, Bson::Int32(4))]);
    let insert = &started(&mut g, client, "insert")[0];
    assert!(!insert.get_bool("ordered").unwrap(), "{insert}");
    assert_eq!(
        g.count_documents(coll, &rawdoc! {}, &no_options())
            .unwrap()
            .unwrap(),
        4
    );
}

#[test]
fn insert_many_packed_is_insert_many_in_one_buffer() {
    let (mut g, client, _db, coll) = setup("insert_many_packed");
    let packed = |docs: &[RawDocumentBuf]| -> Vec<u8> {
        docs.iter().flat_map(|d| d.as_bytes().to_vec()).collect()
    };
    let docs = [
        rawdoc! { "_id": 1, "s": "x" },
        rawdoc! { "x": 2 },
        rawdoc! { "y": { "z": [1, 2] } },
    ];
    let ids = g
        .insert_many_packed(coll, &packed(&docs), &no_options())
        .unwrap()
        .expect("insert-many-packed");
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], Bson::Int32(1));
    assert!(matches!(ids[1], Bson::ObjectId(_)), "{ids:?}");
    assert!(matches!(ids[2], Bson::ObjectId(_)) && ids[1] != ids[2]);
    let insert = &started(&mut g, client, "insert")[0];
    assert_eq!(
        insert.get_array("documents").unwrap().len(),
        3,
        "one command"
    );
    for (id, want) in ids.iter().zip([
        rawdoc! { "s": "x" },
        rawdoc! { "x": 2 },
        rawdoc! { "y": { "z": [1, 2] } },
    ]) {
        let cursor = g
            .find(
                coll,
                &RawDocumentBuf::try_from(&doc! { "_id": id.clone() }).unwrap(),
                &find_options(),
            )
            .unwrap()
            .unwrap();
        let found = g.next(cursor).unwrap().unwrap().expect("inserted");
        let (k, v) = want.iter().next().unwrap().unwrap();
        assert_eq!(found.get(k).unwrap(), Some(v), "{found:?}");
    }

    // Bytes that do not split into documents, or none, or a malformed
    // document: invalid-argument, and nothing is sent.
    let mut cut = packed(&docs);
    cut.pop();
    let mut bad_inner = rawdoc! { "_id": 9, "y": { "s": "xy" } }.into_bytes();
    let at = bad_inner.len() - 9;
    bad_inner[at] = 0x7f;
    for bad in [cut, Vec::new(), bad_inner, vec![4, 0, 0, 0]] {
        let err = g
            .insert_many_packed(coll, &bad, &no_options())
            .unwrap()
            .expect_err("refused");
        assert_eq!(err.error.kind, ErrorKind::InvalidArgument, "{err:?}");
    }
    assert!(started(&mut g, client, "insert").is_empty(), "nothing sent");

    // A write error reports what was written, as insert-many does.
    let (docs, unordered) = a_duplicate_between_two();
    let err = g
        .insert_many_packed(coll, &packed(&docs), &unordered)
        .unwrap()
        .expect_err("a duplicate _id");
    assert_eq!(err.error.kind, ErrorKind::DuplicateKey, "{err:?}");
    assert_eq!(err.write_errors[0].index, 1);
    assert_eq!(written(&err), [(0, Bson::Int32(3)), (2, Bson::Int32(4))]);
}

/// Three documents for a collection that holds `_id` 1, the second a
/// duplicate, and `ordered: false` to write the third anyway.
fn a_duplicate_between_two() -> ([RawDocumentBuf; 3], OpOptions) {
    let docs = [
        rawdoc! { "_id": 3 },
        rawdoc! { "_id": 1 },
        rawdoc! { "_id": 4 },
    ];
    let unordered = OpOptions {
        ordered: Some(false),
        ..no_options()
    };
    (docs, unordered)
}

/// What a failed insert-many wrote: (index, `_id`), from its partial result.
fn written(err: &BulkWriteError) -> Vec<(u32, Bson)> {
    let partial = err.partial_result.as_ref().expect("what was written");
    assert_eq!(partial.inserted_count as usize, partial.inserted_ids.len());
    partial
        .inserted_ids
        .iter()
        .map(|i| (i.index, unvalue(&i.id)))
        .collect()
}

#[test]
fn distinct_answers_a_list_of_values() {
    let (mut g, _client, _db, coll) = setup("distinct");
    let docs = [
        rawdoc! { "k": "a" },
        rawdoc! { "k": "b" },
        rawdoc! { "k": "a" },
    ];
    g.insert_many(coll, &docs, &no_options()).unwrap().unwrap();
    let values = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_distinct(
            &mut g.store,
            coll.0,
            "k",
            &rawdoc! {}.into_bytes(),
            &no_options(),
        )
        .unwrap()
        .expect("distinct");
    let mut values: Vec<String> = values
        .iter()
        .map(|v| unvalue(v).as_str().unwrap().to_string())
        .collect();
    values.sort();
    assert_eq!(values, ["a", "b"]);
}

#[test]
fn cursor_next_and_collect_share_one_buffer() {
    let (mut g, client, _db, coll) = setup("cursor");
    g.insert_many(coll, &ints(0..10), &no_options())
        .unwrap()
        .unwrap();
    let opts = FindOptions {
        batch_size: Some(3),
        // nx-27017 sorts `_id` as strings; `n` sorts as numbers.
        sort: Some(rawdoc! { "n": 1 }.into_bytes()),
        ..find_options()
    };
    let cursor = g.find(coll, &rawdoc! {}, &opts).unwrap().unwrap();
    let n = |d: &RawDocumentBuf| d.get_i32("_id").unwrap();
    g.take_events(client).unwrap();
    let first = g.next(cursor).unwrap().unwrap().expect("a document");
    assert_eq!(n(&first), 0);
    assert!(
        started(&mut g, client, "getMore").is_empty(),
        "from the find's batch"
    );
    let four: Vec<i32> = g
        .collect(cursor, 4)
        .unwrap()
        .unwrap()
        .iter()
        .map(n)
        .collect();
    assert_eq!(four, [1, 2, 3, 4]);
    assert_eq!(started(&mut g, client, "getMore").len(), 1);
    // What collect fetched beyond its max comes first.
    let batch = g.next_batch(cursor).unwrap().unwrap();
    let rest: Vec<i32> = batch
        .documents
        .iter()
        .map(|d| n(&RawDocumentBuf::from_bytes(d.clone()).unwrap()))
        .collect();
    assert_eq!(rest, [5]);
    assert!(!batch.exhausted);
    let all: Vec<i32> = g
        .collect(cursor, 100)
        .unwrap()
        .unwrap()
        .iter()
        .map(n)
        .collect();
    assert_eq!(all, [6, 7, 8, 9]);
    assert_eq!(g.next(cursor).unwrap().unwrap(), None);
    assert_eq!(g.cursor_id(cursor).unwrap(), 0);
    let err = g.collect(cursor, 0).unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument);
}

/// From an insert to a read of that document in one call: `id-filter` turns
/// the `value` insert-one returned into `{_id: <id>}` (no decode, `.get("v")`
/// and encode in the caller).
#[test]
fn an_inserted_id_becomes_a_filter_in_one_call() {
    let (mut g, client, _db, coll) = setup("id_filter");
    let id = g
        .insert_one(coll, &rawdoc! { "x": 7 }, &no_options())
        .unwrap()
        .unwrap();
    let value = bson::doc! { "v": id.clone() }.to_vec().unwrap();
    let filter = g.id_filter(&value).unwrap().unwrap();
    assert_eq!(
        bson::Document::try_from(filter.as_ref()).unwrap(),
        bson::doc! { "_id": id }
    );
    let cursor = g.find(coll, &filter, &find_options()).unwrap().unwrap();
    let found = g
        .next(cursor)
        .unwrap()
        .unwrap()
        .expect("the inserted document");
    assert_eq!(found.get_i32("x").unwrap(), 7);
    let err = g
        .id_filter(&rawdoc! { "w": 1 }.into_bytes())
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err:?}");
    g.close(client).unwrap();
}

/// Five documents inserted, and a find of them in batches of two.
fn five_in_batches_of_two(g: &mut Guest, coll: Collection) -> Cursor {
    g.insert_many(coll, &ints(0..5), &no_options())
        .unwrap()
        .unwrap();
    let opts = FindOptions {
        batch_size: Some(2),
        ..find_options()
    };
    g.find(coll, &rawdoc! {}, &opts).unwrap().unwrap()
}

/// A cursor the caller closed answers `closed` to every read, as the README
/// and the WIT say, even with documents still buffered.
#[test]
fn a_closed_cursor_answers_closed() {
    let (mut g, client, _db, coll) = setup("closed_cursor");
    let cursor = five_in_batches_of_two(&mut g, coll);
    assert!(
        g.next(cursor).unwrap().unwrap().is_some(),
        "one buffered stays"
    );
    g.close_cursor(cursor, None).unwrap().unwrap();
    let err = g.next_batch(cursor).unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Closed, "{err:?}");
    let err = g.next_batch_packed(cursor).unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Closed, "{err:?}");
    assert_eq!(g.next(cursor).unwrap().unwrap_err().kind, ErrorKind::Closed);
    assert_eq!(
        g.collect(cursor, 3).unwrap().unwrap_err().kind,
        ErrorKind::Closed
    );
    // A second close does nothing.
    g.close_cursor(cursor, None).unwrap().unwrap();
    g.close(client).unwrap();
}

#[test]
fn a_closed_client_answers_closed() {
    let (mut g, client, db, coll) = setup("closed");
    let cursor = five_in_batches_of_two(&mut g, coll);
    g.next_batch(cursor).unwrap().unwrap();
    g.close(client).unwrap();
    let err = g
        .insert_one(coll, &rawdoc! { "x": 1 }, &no_options())
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Closed, "{err:?}");
    let err = g.next_batch(cursor).unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Closed, "the getMore: {err:?}");
    let err = g
        .run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Closed);
    g.close(client).unwrap();
}

/// A client through the failpoint proxy that ran one insert (its implicit
/// session is pooled), the proxy, and the client's admin database.
fn proxied() -> (Guest, Client, Database, Proxy) {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::new(backend)).unwrap();
    let addr = proxy.addresses()[0];
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{addr}/"), None, false)
        .unwrap()
        .unwrap();
    let db = g.database(client, "wit_api_drop", None).unwrap();
    let coll = g.collection(db, "c", None).unwrap();
    g.insert_one(coll, &rawdoc! { "x": 1 }, &no_options())
        .unwrap()
        .unwrap();
    g.drop_resource(coll.0).unwrap();
    g.drop_resource(db.0).unwrap();
    let admin = g.database(client, "admin", None).unwrap();
    (g, client, admin, proxy)
}

fn end_sessions(proxy: &Proxy) -> u64 {
    proxy
        .stats()
        .commands
        .get("endSessions")
        .copied()
        .unwrap_or(0)
}

#[test]
fn dropping_the_client_ends_its_sessions_once_and_briefly() {
    let (mut g, client, admin, proxy) = proxied();
    g.drop_resource(admin.0).unwrap();
    assert_eq!(end_sessions(&proxy), 0);
    g.drop_resource(client.0).unwrap();
    assert_eq!(end_sessions(&proxy), 1, "{:?}", proxy.stats());

    // Closed first: the drop sends nothing more.
    let (mut g, client, admin, proxy) = proxied();
    g.drop_resource(admin.0).unwrap();
    g.close(client).unwrap();
    assert_eq!(end_sessions(&proxy), 1);
    g.drop_resource(client.0).unwrap();
    assert_eq!(end_sessions(&proxy), 1, "close already ended them");

    // A server that sits on endSessions delays the drop by about 1 s, not more.
    let (mut g, client, admin, proxy) = proxied();
    let block = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": { "failCommands": ["endSessions"], "blockConnection": true, "blockTimeMS": 5000 },
    };
    g.run_command(admin, &block, None).unwrap().unwrap();
    g.drop_resource(admin.0).unwrap();
    let started = Instant::now();
    g.drop_resource(client.0).unwrap();
    let took = started.elapsed();
    assert_eq!(end_sessions(&proxy), 1);
    assert!(took >= Duration::from_millis(900), "it did wait: {took:?}");
    assert!(took < Duration::from_millis(2_500), "bounded: {took:?}");
}

#[test]
fn a_write_concern_error_is_its_own_kind() {
    let mut s = host_tests::guest::proxied_collection("wit_api_wce", "");
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fail = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": {
            "failCommands": ["insert"],
            "writeConcernError": { "code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out" },
        },
    };
    s.guest.run_command(admin, &fail, None).unwrap().unwrap();
    let err = s
        .guest
        .insert_one(s.coll, &rawdoc! { "x": 2 }, &no_options())
        .unwrap()
        .expect_err("the write concern error");
    assert_eq!(err.kind, ErrorKind::WriteConcern, "{err:?}");
    assert_eq!(err.code, Some(64));
    // The write itself was applied (the concern was not met).
    let n = s
        .guest
        .count_documents(s.coll, &rawdoc! { "x": 2 }, &no_options())
        .unwrap()
        .unwrap();
    assert_eq!(n, 1);
}
