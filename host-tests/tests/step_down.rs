//! A step-down of the primary, through the failpoint proxy presenting a replica set of
//! three in front of nx-27017: the single-threaded client must find the new primary.
//! Every member is already known (the old primary is now a secondary, the new one is
//! still described as the secondary it was), so selection's scan has to check known
//! servers again, not only Unknown ones; and those checks' connections must not pile up
//! idle. Found by the soak (`cargo xtask soak`).

use bson::rawdoc;
use host_tests::bindings::exports::mongo_wasi::driver::collection::OpOptions;
use host_tests::guest::{find_options, Guest};
use mongo_wasi_proxy::{Proxy, ProxyConfig};
use std::time::{Duration, Instant};

fn timeout(ms: u64) -> OpOptions {
    OpOptions {
        timeout_ms: Some(ms),
        ..host_tests::guest::no_options()
    }
}

#[test]
fn writes_and_reads_find_the_new_primary_after_a_step_down() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 3)).unwrap();
    let members = proxy.addresses();
    let hosts: Vec<String> = members.iter().map(|a| a.to_string()).collect();
    let mut guest = Guest::new(&members).unwrap();
    let uri = format!("mongodb://{}/?replicaSet=rs0", hosts.join(","));
    let client = guest.connect(&uri, None, false).unwrap().unwrap();
    let db = guest.database(client, "step_down", None).unwrap();
    guest
        .run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    let coll = guest.collection(db, "c", None).unwrap();
    guest
        .insert_one(coll, &rawdoc! { "_id": 0 }, &timeout(5_000))
        .unwrap()
        .expect("insert before the step-down");
    // Let every member be checked once more (the scan only rechecks a server
    // minHeartbeatFrequencyMS, 500 ms, after its last check).
    std::thread::sleep(Duration::from_millis(600));

    for round in 1..=5 {
        let old = proxy.primary().unwrap();
        let new = proxy.step_down(None).unwrap();
        assert_ne!(old, new);
        let started = Instant::now();
        guest
            .insert_one(coll, &rawdoc! { "_id": round }, &timeout(5_000))
            .unwrap()
            .unwrap_or_else(|e| panic!("insert after step-down {round}: {e:?}"));
        // The NotWritablePrimary reply, a scan (at most minHeartbeatFrequencyMS
        // away) and the retry: well under the 5 s deadline.
        let took = started.elapsed();
        assert!(took < Duration::from_millis(2_500), "{took:?}");
        let mut opts = find_options();
        opts.timeout_ms = Some(5_000);
        let cursor = guest
            .find(coll, &rawdoc! { "_id": round }, &opts)
            .unwrap()
            .expect("find on the new primary");
        let batch = guest.next_batch(cursor).unwrap().unwrap();
        assert_eq!(batch.documents.len(), 1, "round {round}");
        guest.drop_resource(cursor.0).unwrap();
        std::thread::sleep(Duration::from_millis(600));
    }
    // Each step-down's scan checked all three members with a new connection; a
    // check's connection joins only an empty pool, so they do not pile up idle.
    let live = proxy.stats().connections_current;
    assert!(live <= 6, "{live} connections open after five scans");
}
