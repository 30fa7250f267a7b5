//! Wire compression (OP_COMPRESSED) end to end: the component against the
//! failpoint proxy, which negotiates snappy, zstd and zlib as mongod does,
//! decompresses requests, compresses replies with the request's compressor,
//! and counts what crossed the wire. The proxy refuses (as a protocol error)
//! a compressed hello or authentication command and a compressor that was
//! not negotiated, so `protocol_errors == 0` checks the never-compress list.

use bson::{rawdoc, RawDocumentBuf};
use host_tests::guest::{find_options, no_options, Guest};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, Stats, User};

fn proxy(auth: bool) -> Proxy {
    let (_, backend) = host_tests::test_server();
    let auth = match auth {
        true => AuthConfig::with_users(vec![User::new("root", "admin", "pw")]),
        false => AuthConfig::default(),
    };
    Proxy::start(ProxyConfig {
        auth,
        ..ProxyConfig::new(backend)
    })
    .unwrap()
}

/// 300 documents of repetitive text (as real documents often are).
fn documents() -> Vec<RawDocumentBuf> {
    (0..300)
        .map(|i| {
            rawdoc! {
                "_id": i,
                "name": format!("customer number {i}"),
                "address": "1 Long Street, Some Town, Some County, Some Country",
                "tags": ["alpha", "beta", "gamma"],
            }
        })
        .collect()
}

/// Inserts the documents into a fresh collection and reads them back; returns
/// the proxy's counters for that work alone.
fn round_trip(p: &Proxy, uri: &str, coll_name: &str) -> Stats {
    let mut guest = Guest::new(&[p.addresses()[0]]).unwrap();
    let client = guest.connect(uri, None, false).unwrap().unwrap();
    let db = guest.database(client, "compression_tests", None).unwrap();
    let coll = guest.collection(db, coll_name, None).unwrap();
    guest
        .run_command(db, &rawdoc! { "drop": coll_name }, None)
        .unwrap()
        .ok();
    p.reset_stats();
    let docs = documents();
    let ids = guest
        .insert_many(coll, &docs, &no_options())
        .unwrap()
        .unwrap();
    assert_eq!(ids.len(), docs.len());
    let cursor = guest
        .find(coll, &rawdoc! {}, &find_options())
        .unwrap()
        .unwrap();
    let got = guest.collect(cursor, 1000).unwrap().unwrap();
    assert_eq!(got.len(), docs.len(), "{uri}");
    let by_id = |d: &RawDocumentBuf| d.get_i32("_id").unwrap();
    let mut got: Vec<_> = got.iter().map(|d| (by_id(d), d.clone())).collect();
    got.sort_by_key(|(id, _)| *id);
    for ((_, back), sent) in got.iter().zip(&docs) {
        assert_eq!(back.as_bytes(), sent.as_bytes(), "{uri}");
    }
    let stats = p.stats();
    guest.close(client).unwrap();
    stats
}

fn count(m: &std::collections::BTreeMap<String, u64>, k: &str) -> u64 {
    m.get(k).copied().unwrap_or(0)
}

#[test]
fn each_compressor_carries_requests_and_replies() {
    let p = proxy(false);
    let addr = p.addresses()[0];
    let plain = round_trip(&p, &format!("mongodb://{addr}/"), "plain");
    assert!(plain.compressed_received.is_empty() && plain.compressed_sent.is_empty());
    for c in ["snappy", "zlib", "zstd"] {
        let s = round_trip(&p, &format!("mongodb://{addr}/?compressors={c}"), c);
        assert_eq!(s.protocol_errors, 0, "{c}: {s:?}");
        // insert, find (and the drop before the reset is not counted).
        assert!(count(&s.compressed_received, c) >= 2, "{c}: {s:?}");
        assert!(count(&s.compressed_sent, c) >= 2, "{c}: {s:?}");
        assert_eq!(
            s.compressed_received.len(),
            1,
            "{c}: only {c} is used: {s:?}"
        );
        // The documents repeat: every compressor saves at least a third both ways.
        assert!(
            s.bytes_received * 3 < plain.bytes_received * 2,
            "{c}: {s:?} vs {plain:?}"
        );
        assert!(
            s.bytes_sent * 3 < plain.bytes_sent * 2,
            "{c}: {s:?} vs {plain:?}"
        );
        println!(
            "{c}: client -> proxy {} bytes (plain {}), proxy -> client {} bytes (plain {})",
            s.bytes_received, plain.bytes_received, s.bytes_sent, plain.bytes_sent
        );
    }
}

#[test]
fn the_first_of_the_clients_compressors_the_server_has_is_used() {
    let p = proxy(false);
    let addr = p.addresses()[0];
    // An unknown name is dropped with a warning; the order is the client's.
    for (list, used) in [
        ("zstd,snappy,zlib", "zstd"),
        ("zlib,zstd", "zlib"),
        ("bogus,snappy", "snappy"),
    ] {
        let s = round_trip(
            &p,
            &format!("mongodb://{addr}/?compressors={list}"),
            "order",
        );
        assert!(count(&s.compressed_received, used) >= 2, "{list}: {s:?}");
        assert_eq!(s.compressed_received.len(), 1, "{list}: {s:?}");
    }
    // Nothing known: no compression, and no error either.
    let s = round_trip(&p, &format!("mongodb://{addr}/?compressors=bogus"), "order");
    assert!(
        s.compressed_received.is_empty() && s.compressed_sent.is_empty(),
        "{s:?}"
    );
}

#[test]
fn zlib_compression_level_is_honoured() {
    let p = proxy(false);
    let addr = p.addresses()[0];
    let sent = |level: i32| {
        let uri = format!("mongodb://{addr}/?compressors=zlib&zlibCompressionLevel={level}");
        let s = round_trip(&p, &uri, "levels");
        assert!(count(&s.compressed_received, "zlib") >= 2, "{level}: {s:?}");
        s.bytes_received
    };
    let (stored, fast, best) = (sent(0), sent(1), sent(9));
    // Level 0 stores (a little larger than plain); 9 is no larger than 1.
    assert!(fast * 2 < stored, "level 1 {fast}, level 0 {stored}");
    assert!(best <= fast, "level 9 {best}, level 1 {fast}");
}

#[test]
fn authentication_is_never_compressed() {
    let p = proxy(true);
    let addr = p.addresses()[0];
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-1"] {
        let uri =
            format!("mongodb://root:pw@{addr}/?compressors=zstd,zlib&authMechanism={mechanism}");
        let s = round_trip(&p, &uri, "auth");
        assert_eq!(s.protocol_errors, 0, "{mechanism}: {s:?}");
        assert!(count(&s.compressed_received, "zstd") >= 2, "{s:?}");
    }
    let s = p.stats();
    assert_eq!(s.protocol_errors, 0, "{s:?}");
    // A user command, compressed, would be a protocol error at the proxy too.
    let mut guest = Guest::new(&[addr]).unwrap();
    let uri = format!("mongodb://root:pw@{addr}/?compressors=snappy");
    let client = guest.connect(&uri, None, false).unwrap().unwrap();
    let admin = guest.database(client, "admin", None).unwrap();
    let created = guest
        .run_command(
            admin,
            &rawdoc! { "createUser": "extra", "pwd": "x", "roles": [] },
            None,
        )
        .unwrap();
    let after = p.stats();
    assert_eq!(after.protocol_errors, 0, "{created:?} {after:?}");
    assert!(count(&after.commands, "createUser") >= 1, "{after:?}");
}
