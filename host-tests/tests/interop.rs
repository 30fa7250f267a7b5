//! Interoperability with PyMongo against the same nx-27017: documents of
//! every BSON type the server stores unchanged, GridFS files and indexes
//! written through the component are read back by PyMongo (`interop.py
//! check`), and the other way round (`interop.py write`, then read here).
//!
//! The all-types document is built here and in interop.py separately and
//! compared as bytes: what one driver encodes, the other reads back exactly.
//! nx-27017 changes or refuses the remaining types (reproduced with PyMongo,
//! so they are the server's, not a driver's): binary subtypes other than 0
//! come back as 0, JavaScript code and symbols as strings, undefined as null;
//! regular expressions, timestamps, Decimal128, MinKey, MaxKey, DBPointer,
//! NaN and infinities are refused on insert.
//!
//! Needs `MONGO_WASI_URI` and the venv with pymongo (`MONGO_WASI_VENV`, else
//! `.work/venv`), as `cargo xtask test` provides.

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bson::spec::BinarySubtype;
use bson::{rawdoc, Binary, DateTime, RawDocument, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::collection::OpOptions;
use host_tests::bindings::exports::mongo_wasi::driver::gridfs::{
    BucketOptions, DownloadByNameOptions, GridfsOptions, UploadOptions,
};
use host_tests::bindings::exports::mongo_wasi::driver::types::ErrorKind;
use host_tests::guest::{find_options, no_options, Database, Guest};
use wasmtime::component::ResourceAny;

const CHUNK_SIZE: u32 = 64;
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// The document of interop.py's `all_types()`, field for field.
fn all_types() -> RawDocumentBuf {
    let oid = |hex: &str| bson::oid::ObjectId::parse_str(hex).unwrap();
    rawdoc! {
        "_id": oid("65a1b2c3d4e5f60718293a4b"),
        "double": 1.5,
        "double_negative_zero": -0.0,
        "double_whole": 2.0,
        "double_huge": 1e300,
        "double_tiny": 5e-324,
        "string": "h\u{e9}llo \u{2603} \u{4e16}\u{754c}",
        "empty_string": "",
        "\u{43a}\u{43b}\u{44e}\u{447}": "\u{437}\u{43d}\u{430}\u{447}\u{435}\u{43d}\u{438}\u{435}",
        "long_string": "x".repeat(20000),
        "document": { "a": 1, "nested": { "b": "c", "deeper": { "d": [1, { "e": [2] }] } } },
        "empty_document": {},
        "array": [1, "two", 3.5, [4], { "five": 5 }, null, true],
        "empty_array": [],
        "binary": Binary { subtype: BinarySubtype::Generic, bytes: vec![0, 1, 2, 255] },
        "object_id": oid("65a1b2c3d4e5f60718293a4c"),
        "true": true,
        "false": false,
        "datetime": DateTime::from_millis(1_795_395_723_456), // 2026-11-23T01:02:03.456Z
        "datetime_1900": DateTime::from_millis(-2_208_988_800_000),
        "datetime_9999": DateTime::from_millis(253_402_300_799_999),
        "null": null,
        "int32": 42,
        "int32_min": i32::MIN,
        "int32_max": i32::MAX,
        "int64": 1i64 << 40,
        "int64_min": i64::MIN,
        "int64_max": i64::MAX,
    }
}

/// interop.py's `file_content()`: 1000 bytes, 16 chunks of 64.
fn file_content() -> Vec<u8> {
    (0..1000u32).map(|i| ((i * 7 + 3) % 256) as u8).collect()
}

/// Runs `interop.py <mode>` on database `db` and fails the test if it reports a mismatch.
fn pymongo(mode: &str, uri: &str, db: &str) {
    let venv = std::env::var_os("MONGO_WASI_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| host_tests::repo_root().join(".work/venv"));
    let python = venv.join("bin/python");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(mode)
        .env("MONGO_URI", uri)
        .env("DB", db)
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("run {} (cargo xtask setup makes it): {e}", python.display()));
    let deadline = Instant::now() + SCRIPT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for interop.py") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("interop.py {mode} did not finish within {SCRIPT_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "interop.py {mode} reported mismatches ({status}); see its output above"
    );
}

/// A guest connected to the test server, and a fresh database `name`.
fn setup(name: &str) -> (Guest, String, Database) {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g.connect(&uri, None, false).unwrap().expect("connect");
    let db = g.database(client, name, None).unwrap();
    g.run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    (g, uri, db)
}

fn bucket(g: &mut Guest, db: Database, name: &str) -> ResourceAny {
    let opts = BucketOptions {
        bucket_name: Some(name.into()),
        chunk_size_bytes: Some(CHUNK_SIZE),
        write_concern: None,
        read_concern: None,
        read_preference: None,
        timeout_ms: None,
    };
    g.driver
        .mongo_wasi_driver_database()
        .database()
        .call_gridfs_bucket(&mut g.store, db.0, &opts)
        .unwrap()
}

fn gridfs_options() -> GridfsOptions {
    GridfsOptions {
        timeout_ms: None,
        session: None,
    }
}

fn extra(doc: RawDocumentBuf) -> OpOptions {
    OpOptions {
        extra: Some(doc.into_bytes()),
        ..no_options()
    }
}

/// Every document of a cursor.
fn drain(g: &mut Guest, cursor: ResourceAny) -> Vec<RawDocumentBuf> {
    let cursor = host_tests::guest::Cursor(cursor);
    let mut docs = Vec::new();
    loop {
        let batch = g.next_batch(cursor).unwrap().expect("next_batch");
        docs.extend(
            batch
                .documents
                .into_iter()
                .map(|d| RawDocumentBuf::from_bytes(d).unwrap()),
        );
        if batch.exhausted {
            return docs;
        }
    }
}

/// An integer field, whichever integer (or whole double) type the server chose.
fn integer(doc: &RawDocument, key: &str) -> Option<i64> {
    match doc.get(key).ok()?? {
        bson::RawBsonRef::Int32(v) => Some(v.into()),
        bson::RawBsonRef::Int64(v) => Some(v),
        bson::RawBsonRef::Double(v) if v.fract() == 0.0 => Some(v as i64),
        _ => None,
    }
}

/// The differing fields of two documents, for a readable failure.
fn diff(got: &RawDocument, want: &RawDocument) -> String {
    let mut out = Vec::new();
    for entry in want {
        let (key, value) = entry.unwrap();
        match got.get(key).unwrap() {
            Some(v) if v == value => {}
            other => out.push(format!("{key}: want {value:?}, got {other:?}")),
        }
    }
    for entry in got {
        let (key, _) = entry.unwrap();
        if want.get(key).unwrap().is_none() {
            out.push(format!("{key}: not expected"));
        }
    }
    if out.is_empty() {
        "same fields, different bytes (key order?)".into()
    } else {
        out.join("\n")
    }
}

#[test]
fn pymongo_reads_what_the_component_wrote() {
    let (mut g, uri, db) = setup("interop_to_pymongo");
    let types = g.collection(db, "types", None).unwrap();
    g.insert_one(types, &all_types(), &no_options())
        .unwrap()
        .expect("insert the all-types document");

    let b = bucket(&mut g, db, "wasi");
    let upload = UploadOptions {
        id: None,
        chunk_size_bytes: None,
        metadata: Some(rawdoc! { "from": "mongo-wasi" }.into_bytes()),
        timeout_ms: None,
        session: None,
    };
    g.driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_upload_from_bytes(&mut g.store, b, "wasi.bin", &file_content(), &upload)
        .unwrap()
        .expect("upload");

    let indexed = g.collection(db, "indexed", None).unwrap();
    g.driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_create_index(
            &mut g.store,
            indexed.0,
            &rawdoc! { "n": 1 }.into_bytes(),
            &extra(rawdoc! { "unique": true }),
        )
        .unwrap()
        .expect("create the unique index");
    let models = vec![
        rawdoc! { "key": { "a": 1, "b": 1 } }.into_bytes(),
        rawdoc! { "key": { "t": 1 }, "expireAfterSeconds": 3600 }.into_bytes(),
    ];
    let names = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_create_indexes(&mut g.store, indexed.0, &models, &no_options())
        .unwrap()
        .expect("create two indexes");
    assert_eq!(names.len(), 2, "{names:?}");
    g.insert_one(indexed, &rawdoc! { "n": 1 }, &no_options())
        .unwrap()
        .expect("insert n: 1");

    pymongo("check", &uri, "interop_to_pymongo");
}

#[test]
fn the_component_reads_what_pymongo_wrote() {
    let (mut g, uri, db) = setup("interop_from_pymongo");
    pymongo("write", &uri, "interop_from_pymongo");

    // The document, byte for byte as this side encodes it.
    let types = g.collection(db, "types", None).unwrap();
    let want = all_types();
    let filter = rawdoc! { "_id": bson::RawBson::from(want.get("_id").unwrap().unwrap()) };
    let got = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_find_one(&mut g.store, types.0, &filter.into_bytes(), &find_options())
        .unwrap()
        .expect("find_one")
        .expect("PyMongo's document is there");
    let got = RawDocumentBuf::from_bytes(got).unwrap();
    assert!(
        got.as_bytes() == want.as_bytes(),
        "PyMongo's all-types document differs:\n{}",
        diff(&got, &want)
    );

    // The GridFS file, by name and by id, and its files document.
    let b = bucket(&mut g, db, "py");
    let by_name = DownloadByNameOptions {
        revision: None,
        timeout_ms: None,
        session: None,
    };
    let data = g
        .driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_download_by_name(&mut g.store, b, "py.bin", by_name)
        .unwrap()
        .expect("download py.bin by name");
    assert!(
        data == file_content(),
        "content differs ({} bytes)",
        data.len()
    );
    let cursor = g
        .driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_find(
            &mut g.store,
            b,
            &rawdoc! { "filename": "py.bin" }.into_bytes(),
            gridfs_options(),
        )
        .unwrap()
        .expect("find the files document");
    let files = drain(&mut g, cursor);
    assert_eq!(files.len(), 1, "{files:?}");
    let file = &files[0];
    assert_eq!(integer(file, "length"), Some(1000), "{file:?}");
    assert_eq!(
        integer(file, "chunkSize"),
        Some(CHUNK_SIZE.into()),
        "{file:?}"
    );
    assert_eq!(
        file.get_document("metadata").unwrap(),
        &*rawdoc! { "from": "pymongo" }
    );
    let id = rawdoc! { "v": bson::RawBson::from(file.get("_id").unwrap().unwrap()) };
    let by_id = g
        .driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_download_to_bytes(&mut g.store, b, &id.into_bytes(), gridfs_options())
        .unwrap()
        .expect("download py.bin by id");
    assert!(by_id == file_content(), "content by id differs");

    // The indexes, and the unique one enforced against the component's insert.
    let indexed = g.collection(db, "indexed", None).unwrap();
    let opts = host_tests::guest::aggregate_options();
    let cursor = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_list_indexes(&mut g.store, indexed.0, &opts)
        .unwrap()
        .expect("list_indexes");
    let indexes = drain(&mut g, cursor);
    let with_key = |key: RawDocumentBuf| {
        indexes
            .iter()
            .find(|i| i.get_document("key").ok() == Some(&*key))
            .unwrap_or_else(|| panic!("no index on {key:?} in {indexes:?}"))
    };
    assert_eq!(
        with_key(rawdoc! { "n": 1 }).get_bool("unique").ok(),
        Some(true)
    );
    with_key(rawdoc! { "a": 1, "b": 1 });
    assert_eq!(
        integer(with_key(rawdoc! { "t": 1 }), "expireAfterSeconds"),
        Some(3600)
    );
    let dup = g
        .insert_one(indexed, &rawdoc! { "n": 1 }, &no_options())
        .unwrap()
        .expect_err("PyMongo's unique index refuses a second n: 1");
    assert_eq!(
        (dup.kind, dup.code),
        (ErrorKind::DuplicateKey, Some(11000)),
        "{dup:?}"
    );
}
