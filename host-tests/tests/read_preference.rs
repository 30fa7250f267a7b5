//! Read preferences end to end, through the failpoint proxy presenting a replica set
//! of three in front of nx-27017 (its secondaries serve reads only with a non-primary
//! `$readPreference`): a collection handle's read preference sends its reads to a
//! secondary with the whole `$readPreference` document, tag sets narrow or empty the
//! choice, and a handle without one reads from the primary without `$readPreference`.

use bson::{rawdoc, RawDocument};
use host_tests::bindings::exports::mongo_wasi::driver::database::CollectionOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::CommandEventKind;
use host_tests::guest::{find_options, Collection, Database, Guest};
use mongo_wasi_proxy::{Proxy, ProxyConfig};

fn collection(guest: &mut Guest, db: Database, pref: Option<&RawDocument>) -> Collection {
    let opts = CollectionOptions {
        timeout_ms: Some(5_000),
        read_concern: None,
        write_concern: None,
        read_preference: pref.map(|p| p.as_bytes().to_vec()),
    };
    let r = guest
        .driver
        .mongo_wasi_driver_database()
        .database()
        .call_collection(&mut guest.store, db.0, "c", &opts)
        .unwrap();
    Collection(r)
}

#[test]
fn a_handles_read_preference_selects_and_is_sent() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 3)).unwrap();
    let members = proxy.addresses();
    let hosts: Vec<String> = members.iter().map(|a| a.to_string()).collect();
    let primary = hosts[proxy.primary().unwrap()].clone();
    let mut guest = Guest::new(&members).unwrap();
    let uri = format!("mongodb://{}/?replicaSet=rs0", hosts.join(","));
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    let db = guest.database(client, "read_preference", None).unwrap();
    guest
        .run_command(db, &rawdoc! { "dropDatabase": 1 }, Some(5_000))
        .unwrap()
        .expect("dropDatabase");
    let plain = collection(&mut guest, db, None);
    guest
        .insert_one(
            plain,
            &rawdoc! { "_id": 1 },
            &host_tests::guest::no_options(),
        )
        .unwrap()
        .expect("insert");

    // (read preference, the find's expected server: primary or not; None: no server)
    let secondary = rawdoc! { "mode": "secondary", "tags": [{ "dc": "nowhere" }, {}], "maxStalenessSeconds": 120 };
    let cases = [
        (None, Some(true)),
        (Some(secondary.clone()), Some(false)),
        (
            Some(rawdoc! { "mode": "nearest", "tags": [{ "dc": "nowhere" }] }),
            None,
        ),
    ];
    for (pref, on_primary) in cases {
        let coll = collection(&mut guest, db, pref.as_deref());
        guest.take_events(client).unwrap();
        let mut opts = find_options();
        opts.timeout_ms = Some(1_500);
        let found = guest.find(coll, &rawdoc! {}, &opts).unwrap();
        let Some(on_primary) = on_primary else {
            // No member has the tag: selection times out.
            let e = found.expect_err("no member matches the tag set");
            assert!(format!("{e:?}").contains("selection"), "{e:?}");
            continue;
        };
        let cursor = found.unwrap_or_else(|e| panic!("find with {pref:?}: {e:?}"));
        let batch = guest.next_batch(cursor).unwrap().unwrap();
        assert_eq!(batch.documents.len(), 1, "{pref:?}");
        let started = guest
            .take_events(client)
            .unwrap()
            .into_iter()
            .find(|e| e.command_name == "find" && matches!(e.kind, CommandEventKind::Started))
            .expect("a find was sent");
        assert_eq!(started.server_address == primary, on_primary, "{pref:?}");
        let command = bson::RawDocumentBuf::from_bytes(started.command.unwrap()).unwrap();
        let sent = command
            .get_document("$readPreference")
            .ok()
            .map(|d| d.to_owned());
        match &pref {
            None => assert_eq!(sent, None),
            Some(p) => assert_eq!(sent.as_ref(), Some(p)),
        }
    }
    // A malformed read preference: every operation of the handle says so.
    let bad = collection(&mut guest, db, Some(&rawdoc! { "mode": "fastest" }));
    let e = guest.find(bad, &rawdoc! {}, &find_options()).unwrap().err();
    assert!(format!("{e:?}").contains("read preference"), "{e:?}");
}
