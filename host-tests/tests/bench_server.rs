//! The benchmark's in-memory server answers the driver as a real server
//! would for what the benchmark does (so `cargo xtask bench` measures real
//! work): findOne by _id, a find over many batches, inserts, GridFS both
//! ways, and the two fault collections.

use bson::{rawdoc, RawDocument};
use host_tests::bench_server::{corpus, BenchServer, Config};
use host_tests::bindings::exports::mongo_wasi::driver::gridfs::{
    BucketOptions, GridfsOptions, UploadOptions,
};
use host_tests::bindings::exports::mongo_wasi::driver::types::ErrorKind;
use host_tests::guest::{find_options, no_options, Guest};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn server(n: usize) -> BenchServer {
    let tweet = rawdoc! { "text": "hello", "n": 1 };
    BenchServer::start(Config {
        corpus: Arc::new(corpus(&tweet, n)),
        slow: Duration::from_millis(500),
        late: Duration::from_millis(5),
    })
    .unwrap()
}

#[test]
fn finds_inserts_and_gridfs_round_trip_through_the_driver() {
    let s = server(250);
    let mut g = Guest::new(&[s.addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{}/", s.addr), None, false)
        .unwrap()
        .unwrap();
    let db = g.database(client, "perftest", None).unwrap();
    let corpus = g.collection(db, "corpus", None).unwrap();

    let one = g
        .driver
        .mongo_wasi_driver_collection()
        .collection()
        .call_find_one(
            &mut g.store,
            corpus.0,
            &rawdoc! { "_id": 7 }.into_bytes(),
            &find_options(),
        )
        .unwrap()
        .unwrap()
        .expect("document 7");
    let one = RawDocument::from_bytes(&one).unwrap();
    assert_eq!(one.get_i32("_id").unwrap(), 7);
    assert_eq!(one.get_str("text").unwrap(), "hello");

    // 250 documents: a first batch of 101, then getMores.
    let cursor = g
        .find(corpus, &rawdoc! {}, &find_options())
        .unwrap()
        .unwrap();
    let mut ids = Vec::new();
    loop {
        let b = g.next_batch(cursor).unwrap().unwrap();
        for d in &b.documents {
            ids.push(RawDocument::from_bytes(d).unwrap().get_i32("_id").unwrap());
        }
        if b.exhausted {
            break;
        }
    }
    assert_eq!(ids, (1..=250).collect::<Vec<i32>>());

    let scratch = g.collection(db, "scratch", None).unwrap();
    g.insert_one(scratch, &rawdoc! { "x": 1 }, &no_options())
        .unwrap()
        .unwrap();

    let bucket = g
        .driver
        .mongo_wasi_driver_database()
        .database()
        .call_gridfs_bucket(
            &mut g.store,
            db.0,
            &BucketOptions {
                bucket_name: None,
                chunk_size_bytes: Some(1000),
                write_concern: None,
                read_concern: None,
                read_preference: None,
                timeout_ms: None,
            },
        )
        .unwrap();
    let data: Vec<u8> = (0..10_500u32).map(|i| (i % 251) as u8).collect();
    let uopts = UploadOptions {
        id: None,
        chunk_size_bytes: None,
        metadata: None,
        timeout_ms: None,
        session: None,
    };
    let id = g
        .driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_upload_from_bytes(&mut g.store, bucket, "f", &data, &uopts)
        .unwrap()
        .unwrap();
    let back = g
        .driver
        .mongo_wasi_driver_gridfs()
        .bucket()
        .call_download_to_bytes(
            &mut g.store,
            bucket,
            &id,
            GridfsOptions {
                timeout_ms: None,
                session: None,
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(back, data);
    // One connection did it all, after one handshake round trip.
    assert_eq!(s.take_round_trips_before_first(), [1]);
}

#[test]
fn the_fault_collections_outlast_the_deadline() {
    let s = server(1);
    let mut g = Guest::new(&[s.addr]).unwrap();
    let client = g
        .connect(&format!("mongodb://{}/", s.addr), None, false)
        .unwrap()
        .unwrap();
    let db = g.database(client, "perftest", None).unwrap();
    for (coll, timeout) in [("slow", 50u64), ("honour", 50)] {
        let started = Instant::now();
        let r = g
            .run_command(db, &rawdoc! { "find": coll }, Some(timeout))
            .unwrap();
        assert_eq!(
            r.map(|_| ()).map_err(|e| e.kind),
            Err(ErrorKind::Timeout),
            "{coll}"
        );
        // The driver gave up at its deadline, not the server's (500 ms for `slow`).
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{coll}: {:?}",
            started.elapsed()
        );
    }
}
