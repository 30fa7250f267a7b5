//! The fuzz targets: an entry point of `mongo_wasi::fuzzing` each, with a
//! seed corpus of valid encodings (built here with the driver's own encoders
//! where it has them) and a dictionary of tokens its format cares about.

use bson::spec::BinarySubtype;
use bson::{rawdoc, Binary, RawDocumentBuf, Timestamp};
use mongo_wasi::fuzzing as f;
use mongo_wasi::wire;

pub struct Target {
    pub name: &'static str,
    pub about: &'static str,
    pub run: fn(&[u8]),
    pub seeds: fn() -> Vec<Vec<u8>>,
    pub dictionary: &'static [&'static [u8]],
    /// Applied to most mutants: makes a document's or a frame's length (and
    /// checksum) match, else nearly every mutant fails that first check.
    pub fixup: Option<fn(&mut [u8])>,
    pub max_len: usize,
}

pub const TARGETS: &[Target] = &[
    Target {
        name: "wire",
        about: "wire frames: OP_MSG (sections, checksum), OP_REPLY, OP_COMPRESSED",
        run: f::wire_frame,
        seeds: wire_seeds,
        dictionary: BSON_WORDS,
        fixup: Some(fix_frame),
        max_len: 8192,
    },
    Target {
        name: "hello",
        about: "hello replies: parse, wire versions, SDAM update, write batching limits",
        run: f::hello,
        seeds: hello_seeds,
        dictionary: BSON_WORDS,
        fixup: Some(fix_document),
        max_len: 4096,
    },
    Target {
        name: "hello-members",
        about: "hello replies with long member lists and lying wire versions: SDAM update and selection, linear in their size",
        run: f::hello_members,
        seeds: hello_members_seeds,
        dictionary: BSON_WORDS,
        fixup: Some(fix_document),
        max_len: 1 << 20,
    },
    Target {
        name: "cursor",
        about: "cursor replies of find/aggregate/getMore/listCollections/listIndexes",
        run: f::cursor_reply,
        seeds: cursor_seeds,
        dictionary: BSON_WORDS,
        fixup: Some(fix_document),
        max_len: 4096,
    },
    Target {
        name: "write",
        about: "insert/update/delete/bulk replies folded into bulk and update results",
        run: f::write_replies,
        seeds: write_seeds,
        dictionary: BSON_WORDS,
        fixup: None,
        max_len: 8192,
    },
    Target {
        name: "find-and-modify",
        about: "findAndModify replies",
        run: f::find_and_modify,
        seeds: find_and_modify_seeds,
        dictionary: BSON_WORDS,
        fixup: Some(fix_document),
        max_len: 4096,
    },
    Target {
        name: "count-distinct",
        about: "count and distinct replies",
        run: f::count_distinct,
        seeds: count_distinct_seeds,
        dictionary: BSON_WORDS,
        fixup: Some(fix_document),
        max_len: 4096,
    },
    Target {
        name: "end-transaction",
        about: "commitTransaction/abortTransaction replies",
        run: f::end_transaction,
        seeds: end_transaction_seeds,
        dictionary: BSON_WORDS,
        fixup: Some(fix_document),
        max_len: 4096,
    },
    Target {
        name: "error-reply",
        about: "error replies: code, codeName, labels, write concern errors, $clusterTime",
        run: f::error_reply,
        seeds: error_seeds,
        dictionary: BSON_WORDS,
        fixup: Some(fix_document),
        max_len: 4096,
    },
    Target {
        name: "uri",
        about: "connection strings and the seedlist rules of mongodb+srv",
        run: f::uri,
        seeds: uri_seeds,
        dictionary: URI_WORDS,
        fixup: None,
        max_len: 1024,
    },
    Target {
        name: "scram-first",
        about: "SCRAM server-first messages (SHA-1 and SHA-256)",
        run: f::scram_server_first,
        seeds: scram_first_seeds,
        dictionary: SCRAM_WORDS,
        fixup: None,
        max_len: 512,
    },
    Target {
        name: "scram-final",
        about: "SCRAM server-final messages",
        run: f::scram_server_final,
        seeds: scram_final_seeds,
        dictionary: SCRAM_WORDS,
        fixup: None,
        max_len: 512,
    },
    Target {
        name: "dns",
        about: "DNS replies to SRV and TXT questions, and the seedlist they make",
        run: f::dns_reply,
        seeds: dns_seeds,
        dictionary: DNS_WORDS,
        fixup: None,
        max_len: 1024,
    },
    Target {
        name: "warm",
        about: "warm state blobs (SCRAM keys, SRV answers, host addresses)",
        run: f::warm_state,
        seeds: warm_seeds,
        dictionary: WARM_WORDS,
        fixup: Some(fix_document),
        max_len: 4096,
    },
];

pub fn by_name(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

const BSON_WORDS: &[&[u8]] = &[
    b"ok\0",
    b"cursor\0",
    b"firstBatch\0",
    b"nextBatch\0",
    b"id\0",
    b"ns\0",
    b"n\0",
    b"nModified\0",
    b"upserted\0",
    b"index\0",
    b"_id\0",
    b"writeErrors\0",
    b"writeConcernError\0",
    b"errorLabels\0",
    b"code\0",
    b"codeName\0",
    b"errmsg\0",
    b"value\0",
    b"values\0",
    b"$clusterTime\0",
    b"clusterTime\0",
    b"operationTime\0",
    b"maxWireVersion\0",
    b"maxBsonObjectSize\0",
    b"maxMessageSizeBytes\0",
    b"maxWriteBatchSize\0",
    b"hosts\0",
    b"setName\0",
    b"saslSupportedMechs\0",
    b"postBatchResumeToken\0",
    b"\x10n\0",
    b"\x12id\0",
    b"\x04errorLabels\0",
    b"\x03cursor\0",
];

const URI_WORDS: &[&[u8]] = &[
    b"mongodb://",
    b"mongodb+srv://",
    b"@",
    b":",
    b"/",
    b"?",
    b"&",
    b"=",
    b",",
    b"[",
    b"]",
    b"%",
    b"%2F",
    b"%zz",
    b"%E2%82",
    b"::1",
    b":65536",
    b":0",
    b".sock",
    b"authMechanism=",
    b"authMechanismProperties=",
    b"SERVICE_NAME:",
    b"authSource=",
    b"readPreferenceTags=",
    b"replicaSet=",
    b"tls=true",
    b"tlsInsecure=true",
    b"w=majority",
    b"wtimeoutMS=",
    b"timeoutMS=",
    b"maxStalenessSeconds=",
    b"srvMaxHosts=",
    b"compressors=",
    b"directConnection=true",
    b"loadBalanced=true",
    b"SCRAM-SHA-256",
    b"MONGODB-X509",
    b"PLAIN",
    b"-1",
    b"2147483648",
    b"18446744073709551616",
];

const SCRAM_WORDS: &[&[u8]] = &[
    b"r=",
    b"s=",
    b"i=",
    b"v=",
    b"e=",
    b"m=",
    b",",
    b"=",
    b"==",
    b"4096",
    b"10000001",
    b"-1",
    b"0",
    b"rOprNGfwEbeRWgbNEkqO",
    b"\xff",
    b"\xc3\xa9",
];

const WARM_WORDS: &[&[u8]] = &[
    b"v\0",
    b"scram\0",
    b"srv\0",
    b"addr\0",
    b"name\0",
    b"exp\0",
    b"targets\0",
    b"txt\0",
    b"ips\0",
    b"SCRAM-SHA-256\0",
    b"SCRAM-SHA-1\0",
    b"127.0.0.1\0",
    b"::1\0",
];

/// Blobs as the driver writes them: keys, SRV answers, addresses.
fn warm_seeds() -> Vec<Vec<u8>> {
    use mongo_wasi::warm::{HostAddresses, ScramKeys, SrvAnswers, WarmState};
    let keys = |m: &str, len: usize| ScramKeys {
        mechanism: m.into(),
        salt: b"salt".to_vec(),
        iterations: 15_000,
        client_key: vec![1; len],
        server_key: vec![2; len],
        check: vec![3; 32],
    };
    let full = WarmState {
        scram: vec![keys("SCRAM-SHA-256", 32), keys("SCRAM-SHA-1", 20)],
        srv: Some(SrvAnswers {
            name: f::DNS_NAME.into(),
            targets: vec![("localhost.test.build.10gen.cc".into(), 27017)],
            txt: vec![b"replicaSet=repl0".to_vec()],
            expires: 1_000_060,
        }),
        addresses: vec![HostAddresses {
            host: "localhost.test.build.10gen.cc".into(),
            ips: vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
            expires: 1_000_060,
        }],
    };
    vec![full.encode(), WarmState::default().encode()]
}

const DNS_WORDS: &[&[u8]] = &[
    b"\xc0\x0c",
    b"\xc0\x00",
    b"\xc0\xff",
    b"\x00\x21\x00\x01",
    b"\x00\x10\x00\x01",
    b"\x00\x05\x00\x01",
    b"\x3f",
    b"\x40",
    b"\x00",
    b"\x07mongodb",
];

const CHECKSUM_PRESENT: u32 = 1;
const MORE_TO_COME: u32 = 2;

/// Makes a wire frame's length, and its OP_MSG checksum if flagged, match its bytes.
pub fn fix_frame(frame: &mut [u8]) {
    crate::mutate::fix_outer_length(frame);
    let is_msg = frame.get(12..16) == Some(&wire::OP_MSG.to_le_bytes()[..]);
    if is_msg && frame.len() >= 24 && frame[16] & CHECKSUM_PRESENT as u8 != 0 {
        let end = frame.len() - 4;
        let crc = crc32c(&frame[..end]);
        frame[end..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// CRC-32C (Castagnoli), bitwise: the harness's own, to check the driver's.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Makes a document's length match and its last byte the terminating 0.
pub fn fix_document(doc: &mut [u8]) {
    crate::mutate::fix_outer_length(doc);
    if doc.len() >= 5 {
        doc[doc.len() - 1] = 0;
    }
}

fn bytes(d: RawDocumentBuf) -> Vec<u8> {
    d.into_bytes()
}

fn op_msg(body: &RawDocumentBuf, seqs: &[(&str, &[RawDocumentBuf])], flags: u32) -> Vec<u8> {
    // A sequence goes in as its documents' bytes, back to back.
    let bytes: Vec<(&str, Vec<u8>)> = seqs
        .iter()
        .map(|(id, docs)| {
            (
                *id,
                docs.iter().flat_map(|d| d.as_bytes().to_vec()).collect(),
            )
        })
        .collect();
    let seqs: Vec<(&str, &[u8])> = bytes.iter().map(|(id, b)| (*id, &b[..])).collect();
    let mut out = Vec::new();
    wire::encode_op_msg(&mut out, 7, flags, body, &seqs, 1 << 20).expect("a small message");
    // A reply answers request 7.
    out[8..12].copy_from_slice(&7i32.to_le_bytes());
    out
}

fn op_reply(docs: &[RawDocumentBuf], op_code: i32) -> Vec<u8> {
    let mut out = vec![0u8; 16];
    out.extend_from_slice(&8i32.to_le_bytes()); // flags: AwaitCapable
    out.extend_from_slice(&0i64.to_le_bytes()); // cursorId
    out.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
    out.extend_from_slice(&(docs.len() as i32).to_le_bytes());
    for d in docs {
        out.extend_from_slice(d.as_bytes());
    }
    let len = out.len() as i32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out[8..12].copy_from_slice(&7i32.to_le_bytes());
    out[12..16].copy_from_slice(&op_code.to_le_bytes());
    out
}

fn wire_seeds() -> Vec<Vec<u8>> {
    let body = rawdoc! { "ok": 1, "n": 2 };
    let docs = vec![rawdoc! { "_id": 1 }, rawdoc! { "_id": 2, "x": "y" }];
    let mut checksummed = op_msg(&body, &[], 0);
    checksummed[16] |= CHECKSUM_PRESENT as u8;
    checksummed.extend_from_slice(&[0, 0, 0, 0]);
    fix_frame(&mut checksummed);
    let mut compressed = op_reply(std::slice::from_ref(&body), wire::OP_COMPRESSED);
    compressed.truncate(16);
    compressed.extend_from_slice(&2013i32.to_le_bytes());
    compressed.extend_from_slice(&100i32.to_le_bytes());
    compressed.push(1); // snappy
    compressed.extend_from_slice(&[0x11; 16]);
    fix_frame(&mut compressed);
    // Real OP_COMPRESSED frames of an OP_MSG reply, one per compressor.
    let plain = op_msg(&body, &[("documents", &docs)], 0);
    let real = wire::Compressor::ALL.map(|c| {
        let mut out = Vec::new();
        wire::compression::compress(&plain, c, None, 1 << 20, &mut out).unwrap();
        out
    });
    let mut seeds = vec![
        op_msg(&body, &[], 0),
        op_msg(&body, &[("documents", &docs)], 0),
        op_msg(&body, &[("documents", &docs), ("updates", &docs[..1])], 0),
        op_msg(&body, &[], MORE_TO_COME),
        checksummed,
        op_reply(&[rawdoc! { "ismaster": true, "ok": 1 }], wire::OP_REPLY),
        op_reply(&docs, wire::OP_REPLY),
        compressed,
    ];
    seeds.extend(real);
    seeds
}

fn hello_seeds() -> Vec<Vec<u8>> {
    vec![
        bytes(rawdoc! {
            "isWritablePrimary": true, "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": 48000000,
            "maxWriteBatchSize": 100000, "localTime": bson::DateTime::from_millis(0),
            "logicalSessionTimeoutMinutes": 30, "connectionId": 4, "minWireVersion": 0,
            "maxWireVersion": 21, "readOnly": false, "ok": 1.0,
        }),
        bytes(rawdoc! {
            "isWritablePrimary": true, "secondary": false, "setName": "rs0", "setVersion": 1i64,
            "electionId": bson::oid::ObjectId::from_bytes([0x7f; 12]),
            "hosts": ["a:27017", "b:27017"], "passives": ["c:27017"], "arbiters": ["d:27017"],
            "primary": "a:27017", "me": "a:27017", "maxWireVersion": 25, "minWireVersion": 8,
            "saslSupportedMechs": ["SCRAM-SHA-1", "SCRAM-SHA-256"], "helloOk": true, "ok": 1,
        }),
        bytes(rawdoc! { "ismaster": true, "msg": "isdbgrid", "maxWireVersion": 17, "ok": 1 }),
        bytes(
            rawdoc! { "secondary": true, "setName": "rs0", "hidden": true, "arbiterOnly": true,
            "maxWriteBatchSize": 1, "maxMessageSizeBytes": 1, "maxBsonObjectSize": 1, "ok": 1 },
        ),
        bytes(rawdoc! { "ok": 0, "errmsg": "no such command: 'hello'", "code": 59 }),
    ]
}

/// Members in the long seeds of `hello-members`: quadratic work on them
/// takes seconds (a slow finding), linear work milliseconds.
const MANY_MEMBERS: usize = 25_000;

fn hello_members_seeds() -> Vec<Vec<u8>> {
    let names = |prefix: &str, n: usize| -> bson::RawArrayBuf {
        let mut a = bson::RawArrayBuf::new();
        a.push("a:27017");
        for i in 1..n {
            a.push(format!("{prefix}{i}.example:27017"));
        }
        a
    };
    let mut same = bson::RawArrayBuf::new();
    for _ in 0..MANY_MEMBERS {
        same.push("a:27017");
    }
    vec![
        bytes(rawdoc! {
            "isWritablePrimary": true, "setName": "rs0", "hosts": names("m", MANY_MEMBERS),
            "setVersion": 1i64, "electionId": bson::oid::ObjectId::from_bytes([0x7f; 12]),
            "maxWireVersion": 21, "minWireVersion": 0, "ok": 1,
        }),
        bytes(rawdoc! {
            "secondary": true, "setName": "rs0", "hosts": names("m", MANY_MEMBERS / 2),
            "passives": names("p", MANY_MEMBERS / 2), "arbiters": ["z:1"], "primary": "m7.example:27017",
            "maxWireVersion": 0, "minWireVersion": 0, "ok": 1,
        }),
        bytes(rawdoc! {
            "isWritablePrimary": true, "setName": "rs0", "hosts": same, "me": "a:27017",
            "maxWireVersion": 100, "minWireVersion": 99, "ok": 1,
        }),
        bytes(rawdoc! {
            "isWritablePrimary": true, "hosts": names("s", 1000), "maxWireVersion": -1,
            "minWireVersion": 2147483647, "ok": 1,
        }),
    ]
}

fn cursor_seeds() -> Vec<Vec<u8>> {
    vec![
        bytes(
            rawdoc! { "cursor": { "firstBatch": [{ "_id": 1, "x": 1 }, { "_id": 2 }], "id": 0i64, "ns": "db.c" }, "ok": 1 },
        ),
        bytes(
            rawdoc! { "cursor": { "nextBatch": [{ "_id": 3 }], "id": 123456789i64, "ns": "db.c" }, "ok": 1.0 },
        ),
        bytes(
            rawdoc! { "cursor": { "firstBatch": [{ "name": "c", "type": "collection", "options": {}, "info": { "readOnly": false } }], "id": 0i64, "ns": "db.$cmd.listCollections" }, "ok": 1 },
        ),
        bytes(
            rawdoc! { "cursor": { "firstBatch": [{ "v": 2, "key": { "_id": 1 }, "name": "_id_" }], "id": 0i64, "ns": "db.c" }, "ok": 1 },
        ),
        bytes(
            rawdoc! { "cursor": { "firstBatch": [], "id": 5, "ns": "db.c", "postBatchResumeToken": { "_data": "8263" } }, "ok": 1,
            "$clusterTime": { "clusterTime": Timestamp { time: 1, increment: 2 } } },
        ),
    ]
}

fn write_seeds() -> Vec<Vec<u8>> {
    let ok = |d: RawDocumentBuf| d.into_bytes();
    let cat = |docs: &[Vec<u8>]| docs.concat();
    let insert = ok(rawdoc! { "n": 3, "ok": 1 });
    let update =
        ok(rawdoc! { "n": 2, "nModified": 1, "upserted": [{ "index": 1, "_id": 9 }], "ok": 1 });
    let delete = ok(rawdoc! { "n": 1, "ok": 1.0 });
    let write_errors = ok(
        rawdoc! { "n": 1, "writeErrors": [{ "index": 1, "code": 11000, "errmsg": "E11000 duplicate key" }], "ok": 1 },
    );
    let wce = ok(
        rawdoc! { "n": 1, "writeConcernError": { "code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out", "errInfo": { "wtimeout": true } }, "ok": 1 },
    );
    let labelled = ok(
        rawdoc! { "n": 1, "writeConcernError": { "code": 91, "errmsg": "shutting down" }, "errorLabels": ["RetryableWriteError"], "ok": 1 },
    );
    let failed = ok(
        rawdoc! { "ok": 0, "code": 10107, "codeName": "NotWritablePrimary", "errmsg": "not primary", "errorLabels": ["RetryableWriteError"] },
    );
    vec![
        cat(&[insert.clone(), update.clone(), delete.clone()]),
        cat(&[write_errors.clone(), update.clone(), delete.clone()]),
        cat(&[insert.clone(), wce, write_errors]),
        cat(&[labelled, insert.clone(), update, delete]),
        cat(&[failed, insert]),
    ]
}

fn find_and_modify_seeds() -> Vec<Vec<u8>> {
    vec![
        bytes(
            rawdoc! { "lastErrorObject": { "n": 1, "updatedExisting": true }, "value": { "_id": 1, "x": 2 }, "ok": 1 },
        ),
        bytes(
            rawdoc! { "lastErrorObject": { "n": 0, "updatedExisting": false }, "value": null, "ok": 1 },
        ),
        bytes(
            rawdoc! { "lastErrorObject": { "n": 1, "upserted": 5 }, "value": { "_id": 5 }, "writeConcernError": { "code": 64, "errmsg": "wc" }, "ok": 1 },
        ),
    ]
}

fn count_distinct_seeds() -> Vec<Vec<u8>> {
    vec![
        bytes(rawdoc! { "n": 5, "ok": 1 }),
        bytes(rawdoc! { "n": 5i64, "ok": 1.0 }),
        bytes(rawdoc! { "n": 5.0, "ok": 1 }),
        bytes(rawdoc! { "values": [1, "a", { "b": 2 }, [3], null], "ok": 1 }),
    ]
}

fn end_transaction_seeds() -> Vec<Vec<u8>> {
    vec![
        bytes(rawdoc! { "ok": 1 }),
        bytes(
            rawdoc! { "ok": 1, "writeConcernError": { "code": 79, "codeName": "UnknownReplWriteConcern", "errmsg": "no such tag" }, "errorLabels": ["UnknownTransactionCommitResult"] },
        ),
        bytes(
            rawdoc! { "ok": 0, "code": 251, "codeName": "NoSuchTransaction", "errmsg": "txn", "errorLabels": ["TransientTransactionError"] },
        ),
    ]
}

fn error_seeds() -> Vec<Vec<u8>> {
    let cluster_time = rawdoc! {
        "clusterTime": Timestamp { time: 1_700_000_000, increment: 3 },
        "signature": { "hash": Binary { subtype: BinarySubtype::Generic, bytes: vec![0; 20] }, "keyId": 7i64 },
    };
    vec![
        bytes(
            rawdoc! { "ok": 0, "errmsg": "not primary", "code": 10107, "codeName": "NotWritablePrimary", "errorLabels": ["RetryableWriteError", "SystemOverloadedError"], "$clusterTime": cluster_time.clone(), "operationTime": Timestamp { time: 1, increment: 1 } },
        ),
        bytes(
            rawdoc! { "ok": 0.0, "errmsg": "operation exceeded time limit", "code": 50, "codeName": "MaxTimeMSExpired" },
        ),
        bytes(
            rawdoc! { "ok": 1, "n": 0, "writeErrors": [{ "index": 0, "code": 121, "errmsg": "failed validation", "errInfo": {} }], "$clusterTime": cluster_time },
        ),
        bytes(
            rawdoc! { "ok": 1, "writeConcernError": { "code": 91, "errmsg": "shutdown", "errorLabels": ["RetryableWriteError"] } },
        ),
        bytes(
            rawdoc! { "ok": 0, "code": 136, "errmsg": "CappedPositionLost", "errorLabels": ["ResumableChangeStreamError"] },
        ),
    ]
}

fn uri_seeds() -> Vec<Vec<u8>> {
    [
        "mongodb://localhost",
        "mongodb://127.0.0.1:27017,[::1]:27018/db?replicaSet=rs0&readPreference=secondaryPreferred&readPreferenceTags=dc:ny,rack:1&readPreferenceTags=&maxStalenessSeconds=120",
        "mongodb://user%40x:p%3Ass@h1,h2:27019/admin?authSource=admin&authMechanism=SCRAM-SHA-256&w=majority&wtimeoutMS=100&journal=true",
        "mongodb://%2Ftmp%2Fmongodb-27017.sock/?tls=true&tlsCAFile=ca.pem&tlsAllowInvalidHostnames=true&appName=app",
        "mongodb+srv://test1.test.build.10gen.cc/?srvMaxHosts=2&srvServiceName=customname&timeoutMS=1000",
        "mongodb+srv://user:pass@test22.test.build.10gen.cc/?loadBalanced=true&authMechanism=PLAIN",
        "mongodb://h/?authMechanism=MONGODB-X509&tls=true&directConnection=true&serverSelectionTimeoutMS=5&connectTimeoutMS=0&heartbeatFrequencyMS=500&maxPoolSize=3&minPoolSize=1&maxIdleTimeMS=1&waitQueueTimeoutMS=1&localThresholdMS=1&retryWrites=false&retryReads=true&compressors=zstd,snappy&zlibCompressionLevel=9&readConcernLevel=local&serverMonitoringMode=poll&socketTimeoutMS=7",
        "mongodb://u@h/?authMechanism=GSSAPI&authMechanismProperties=SERVICE_NAME:other,CANONICALIZE_HOST_NAME:true",
        "mongodb://h:0/?w=2&uuidRepresentation=standard",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn scram_first_seeds() -> Vec<Vec<u8>> {
    [
        f::SCRAM_SERVER_FIRST,
        "r=rOprNGfwEbeRWgbNEkqOfyko+d2lbbFgONRv9qkxdawL,s=QSXCR+Q6sek8bf92,i=4096",
        "r=rOprNGfwEbeRWgbNEkqOabc,s=c2FsdA==,i=10000,x=ext",
        "r=rOprNGfwEbeRWgbNEkqOabc,s=c2FsdA==,i=1000",
        "m=mandatory,r=rOprNGfwEbeRWgbNEkqOabc,s=c2FsdA==,i=4096",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn scram_final_seeds() -> Vec<Vec<u8>> {
    [
        // RFC 7677's server signature: the target's conversation is RFC 7677's.
        "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
        "v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=,x=y",
        "e=invalid-proof",
        "e=other-error",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn dns_name(m: &mut Vec<u8>, name: &str) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
}

fn dns_reply(flags: u16, rtype: u16, answers: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&f::DNS_ID.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&(answers.len() as u16).to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0]);
    dns_name(&mut m, f::DNS_NAME);
    m.extend_from_slice(&rtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    for (kind, rdata) in answers {
        m.extend_from_slice(&[0xC0, 12]);
        m.extend_from_slice(&kind.to_be_bytes());
        m.extend_from_slice(&[0, 1, 0, 0, 0x0E, 0x10]);
        m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(rdata);
    }
    m
}

fn srv(port: u16, target: &str) -> (u16, Vec<u8>) {
    let mut r = vec![0, 0, 0, 0];
    r.extend_from_slice(&port.to_be_bytes());
    dns_name(&mut r, target);
    (33, r)
}

fn dns_seeds() -> Vec<Vec<u8>> {
    let mut compressed = srv(27017, "");
    // A target that points back into the question (a compression pointer).
    compressed.1.truncate(6);
    compressed
        .1
        .extend_from_slice(&[4, b'h', b'o', b's', b't', 0xC0, 12 + 23]);
    let txt = |parts: &[&str]| {
        let mut r = Vec::new();
        for p in parts {
            r.push(p.len() as u8);
            r.extend_from_slice(p.as_bytes());
        }
        (16u16, r)
    };
    vec![
        dns_reply(
            0x8180,
            33,
            &[
                srv(27017, "localhost.test.build.10gen.cc"),
                srv(27018, "localhost.test.build.10gen.cc."),
                (5, vec![0xC0, 12]),
            ],
        ),
        dns_reply(0x8180, 33, &[compressed]),
        dns_reply(
            0x8180,
            16,
            &[txt(&["replicaSet=repl0&", "authSource=thisDB"])],
        ),
        dns_reply(0x8180, 16, &[txt(&["loadBalanced=true"]), txt(&["x=y"])]),
        dns_reply(0x8380, 33, &[]),
        dns_reply(0x8183, 33, &[]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_target_has_seeds() {
        for (i, t) in TARGETS.iter().enumerate() {
            assert!(TARGETS[..i].iter().all(|o| o.name != t.name), "{}", t.name);
            assert!(!(t.seeds)().is_empty(), "{}", t.name);
        }
    }
}
