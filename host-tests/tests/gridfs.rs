//! GridFS through the component against nx-27017: upload, download (whole
//! and streamed), revisions by name, rename, delete, and chunk validation.

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, RawDocument};
use host_tests::bindings::exports::mongo_wasi::driver::database::CollectionOptions;
use host_tests::bindings::exports::mongo_wasi::driver::gridfs::{
    BucketOptions, DownloadByNameOptions, GridfsOptions, UploadOptions,
};
use host_tests::bindings::exports::mongo_wasi::driver::types::ErrorKind;
use host_tests::guest::{find_options, no_options, Guest};
use wasmtime::component::ResourceAny;

fn gopts() -> GridfsOptions {
    GridfsOptions {
        timeout_ms: None,
        session: None,
    }
}

fn uopts() -> UploadOptions {
    UploadOptions {
        id: None,
        chunk_size_bytes: None,
        metadata: None,
        timeout_ms: None,
        session: None,
    }
}

fn setup(test: &str) -> (Guest, host_tests::guest::Database, ResourceAny) {
    let (g, _, db, bucket) = setup_monitored(test);
    (g, db, bucket)
}

fn setup_monitored(
    test: &str,
) -> (
    Guest,
    host_tests::guest::Client,
    host_tests::guest::Database,
    ResourceAny,
) {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g.connect(&uri, None, true).unwrap().unwrap();
    let db = g.database(client, &format!("gridfs_{test}"), None).unwrap();
    g.run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .unwrap();
    let opts = BucketOptions {
        bucket_name: None,
        chunk_size_bytes: Some(4),
        write_concern: None,
        read_concern: None,
        read_preference: None,
        timeout_ms: None,
    };
    let bucket = g
        .driver
        .mongo_wasi_driver_database()
        .database()
        .call_gridfs_bucket(&mut g.store, db.0, &opts)
        .unwrap();
    (g, client, db, bucket)
}

fn upload(g: &mut Guest, bucket: ResourceAny, name: &str, data: &[u8]) -> Vec<u8> {
    g.driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_upload_from_bytes(&mut g.store, bucket, name, data, &uopts())
        .unwrap()
        .expect("upload")
}

fn download(
    g: &mut Guest,
    bucket: ResourceAny,
    id: &[u8],
) -> host_tests::guest::WitResult<Vec<u8>> {
    g.driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_download_to_bytes(&mut g.store, bucket, &id.to_vec(), gopts())
        .unwrap()
}

#[test]
fn upload_then_download_across_chunk_boundaries() {
    let (mut g, db, bucket) = setup("roundtrip");
    for len in [0usize, 1, 3, 4, 5, 8, 1000] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let id = upload(&mut g, bucket, &format!("f{len}"), &data);
        assert_eq!(download(&mut g, bucket, &id).unwrap(), data, "length {len}");
    }
    // The chunks and files documents are as the spec lays them out.
    let copts = CollectionOptions {
        timeout_ms: None,
        read_concern: None,
        write_concern: None,
        read_preference: None,
    };
    let files = g
        .driver
        .mongo_wasi_driver_database()
        .database()
        .call_collection(&mut g.store, db.0, "fs.files", &copts)
        .unwrap();
    let file = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_find_one(
            &mut g.store,
            files,
            &rawdoc! { "filename": "f5" }.into_bytes(),
            &find_options(),
        )
        .unwrap()
        .unwrap()
        .unwrap();
    let file = RawDocument::from_bytes(&file).unwrap();
    // nx-27017 hands numbers back as int32 where they fit; any integer type will do.
    let length = file
        .get("length")
        .unwrap()
        .and_then(|v| v.as_i64().or(v.as_i32().map(i64::from)));
    assert_eq!((length, file.get_i32("chunkSize").unwrap()), (Some(5), 4));
    // nx-27017 keeps fs.files in a table of its own and returns uploadDate as
    // a string; what the driver wrote is checked on the command (below).
    assert!(file.get("uploadDate").unwrap().is_some());
    let chunks = g
        .collection(host_tests::guest::Database(db.0), "fs.chunks", None)
        .unwrap();
    // find, not count: nx-27017 fails aggregates on its fs.chunks table.
    let filter = rawdoc! { "files_id": bson::RawBson::from(file.get("_id").unwrap().unwrap()) };
    let cursor = g.find(chunks, &filter, &find_options()).unwrap().unwrap();
    let batch = g.next_batch(cursor).unwrap().unwrap();
    assert_eq!(batch.documents.len(), 2, "5 bytes in chunks of 4");
}

#[test]
fn streams_write_and_read_in_pieces() {
    let (mut g, _db, bucket) = setup("streams");
    let up = g
        .driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_open_upload_stream(&mut g.store, bucket, "streamed", &uopts())
        .unwrap()
        .unwrap();
    // Chunks of 4: pieces that top up a partly filled chunk, end inside one,
    // and (the last) fill several whole chunks after a top-up.
    for piece in [&b"hello "[..], b"grid", b"fs!", b" in chunks"] {
        g.driver
            .mongo_wasi_driver_gridfs()
            .upload_stream()
            .call_write(&mut g.store, up, piece)
            .unwrap()
            .unwrap();
    }
    g.driver
        .mongo_wasi_driver_gridfs()
        .upload_stream()
        .call_close(&mut g.store, up)
        .unwrap()
        .unwrap();
    let id = g
        .driver
        .mongo_wasi_driver_gridfs()
        .upload_stream()
        .call_id(&mut g.store, up)
        .unwrap();
    let err = g
        .driver
        .mongo_wasi_driver_gridfs()
        .upload_stream()
        .call_write(&mut g.store, up, b"x".as_ref())
        .unwrap()
        .expect_err("closed");
    assert_eq!(err.kind, ErrorKind::Closed);

    let down = g
        .driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_open_download_stream(&mut g.store, bucket, &id, gopts())
        .unwrap()
        .unwrap();
    let mut out = Vec::new();
    for _ in 0..100 {
        let piece = g
            .driver
            .mongo_wasi_driver_gridfs()
            .download_stream()
            .call_read(&mut g.store, down, 3)
            .unwrap()
            .unwrap();
        if piece.is_empty() {
            break;
        }
        assert!(piece.len() <= 3);
        out.extend(piece);
    }
    assert_eq!(out, b"hello gridfs! in chunks");
}

#[test]
fn revisions_rename_delete_and_missing_files() {
    let (mut g, client, _db, bucket) = setup_monitored("revisions");
    for content in [b"one", b"two", b"thr"] {
        upload(&mut g, bucket, "doc", content);
        std::thread::sleep(std::time::Duration::from_millis(5)); // distinct uploadDates
    }
    let by_name = |g: &mut Guest, revision: Option<i32>| {
        let o = DownloadByNameOptions {
            revision,
            timeout_ms: None,
            session: None,
        };
        g.driver
            .mongo_wasi_driver_gridfs()
            .bucket()
            .call_download_by_name(&mut g.store, bucket, "doc", o)
            .unwrap()
    };
    assert_eq!(by_name(&mut g, None).unwrap(), b"thr", "newest by default");
    assert_eq!(by_name(&mut g, Some(0)).unwrap(), b"one");
    // Revision -2 is "newest first, skip 1". nx-27017 applies skip before
    // sort (reproduced with pymongo), so check the command, not its answer.
    g.take_events(client).unwrap();
    let _ = by_name(&mut g, Some(-2));
    let finds: Vec<bson::RawDocumentBuf> = g
        .take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.command_name == "find" && e.command.is_some())
        .map(|e| bson::RawDocumentBuf::from_bytes(e.command.unwrap()).unwrap())
        .collect();
    assert_eq!(
        finds[0].get_document("sort").unwrap(),
        &*rawdoc! { "uploadDate": -1 }
    );
    assert_eq!(finds[0].get_i64("skip").unwrap(), 1);
    assert_eq!(
        by_name(&mut g, Some(5)).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );

    let id = upload(&mut g, bucket, "old", b"data");
    g.driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_rename(&mut g.store, bucket, &id, "new", gopts())
        .unwrap()
        .expect("rename");
    let o = DownloadByNameOptions {
        revision: None,
        timeout_ms: None,
        session: None,
    };
    assert_eq!(
        g.driver
            .mongo_wasi_driver_gridfs()
            .bucket()
            .call_download_by_name(&mut g.store, bucket, "new", o)
            .unwrap()
            .unwrap(),
        b"data"
    );
    g.driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_delete(&mut g.store, bucket, &id, gopts())
        .unwrap()
        .expect("delete");
    let err = download(&mut g, bucket, &id).unwrap_err();
    assert!(err.message.contains("FileNotFound"), "{err:?}");
    let err = g
        .driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_delete(&mut g.store, bucket, &id, gopts())
        .unwrap()
        .unwrap_err();
    // nx-27017 answers a delete of a missing fs.files entry with its own
    // ok:0 "... not found" before the driver can report FileNotFound.
    assert!(
        err.message.contains("FileNotFound") || err.message.contains("not found"),
        "{err:?}"
    );
    g.driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_drop(&mut g.store, bucket, gopts())
        .unwrap()
        .expect("drop");
}

#[test]
fn a_missing_chunk_is_detected() {
    let (mut g, db, bucket) = setup("corrupt");
    let id = upload(&mut g, bucket, "f", b"0123456789");
    let chunks = g.collection(db, "fs.chunks", None).unwrap();
    let file_id = bson::RawBson::from(
        RawDocument::from_bytes(&id)
            .unwrap()
            .get("v")
            .unwrap()
            .unwrap(),
    );
    g.driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_delete_one(
            &mut g.store,
            chunks.0,
            &rawdoc! { "files_id": file_id, "n": 1 }.into_bytes(),
            &no_options(),
        )
        .unwrap()
        .unwrap();
    let err = download(&mut g, bucket, &id).unwrap_err();
    assert!(err.message.contains("ChunkIsMissing"), "{err:?}");
}

#[test]
fn the_files_document_is_written_as_the_spec_says() {
    let (mut g, client, _db, bucket) = setup_monitored("filesdoc");
    g.take_events(client).unwrap();
    upload(&mut g, bucket, "f", b"12345");
    let inserts: Vec<bson::RawDocumentBuf> = g
        .take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.command_name == "insert" && e.command.is_some())
        .map(|e| bson::RawDocumentBuf::from_bytes(e.command.unwrap()).unwrap())
        .collect();
    let files = inserts
        .iter()
        .find(|c| c.get_str("insert").unwrap() == "fs.files")
        .expect("files insert");
    let doc = files
        .get_array("documents")
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    let doc = doc.as_document().unwrap();
    assert_eq!(doc.get_i64("length").unwrap(), 5);
    assert_eq!(doc.get_i32("chunkSize").unwrap(), 4);
    assert!(doc.get_datetime("uploadDate").is_ok());
    assert_eq!(doc.get_str("filename").unwrap(), "f");
    // The full chunk goes in as it fills, the short last one at close.
    let chunk_docs: usize = inserts
        .iter()
        .filter(|c| c.get_str("insert").unwrap() == "fs.chunks")
        .map(|c| c.get_array("documents").unwrap().into_iter().count())
        .sum();
    assert_eq!(chunk_docs, 2);
}
