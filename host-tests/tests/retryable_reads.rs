//! Retryable Reads through the failpoint proxy in front of nx-27017: a read
//! that fails with a retryable error is retried once without timeoutMS, and
//! as often as its deadline allows with it.

use bson::{rawbson, rawdoc};
use host_tests::bindings::exports::mongo_wasi::driver::database::RunCommandOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{
    CommandEventKind, Error as DriverError, ErrorKind,
};
use host_tests::guest::{find_options, Client, Collection, Guest};
use host_tests::listeners::{Behaviour, Listener};
use mongo_wasi_proxy::{Proxy, ProxyConfig};

type Setup = host_tests::guest::ProxiedCollection;

fn setup(test: &str, uri_options: &str) -> Setup {
    host_tests::guest::proxied_collection(&format!("retry_{test}"), uri_options)
}

fn fail_finds(s: &mut Setup, times: i32, code: i32) {
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": times },
        "data": { "failCommands": ["find"], "errorCode": code },
    };
    s.guest
        .run_command(admin, &fp, None)
        .unwrap()
        .expect("configureFailPoint");
    s.guest.take_events(s.client).unwrap();
}

fn find_events(s: &mut Setup) -> Vec<CommandEventKind> {
    let events = s.guest.take_events(s.client).unwrap();
    events
        .into_iter()
        .filter(|e| e.command_name == "find")
        .map(|e| e.kind)
        .collect()
}

#[test]
fn a_retryable_error_is_retried_once() {
    let mut s = setup("once", "");
    fail_finds(&mut s, 1, 7); // HostNotFound: retryable
    let cursor = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .expect("the retry succeeds");
    assert_eq!(
        s.guest.next_batch(cursor).unwrap().unwrap().documents.len(),
        1
    );
    use CommandEventKind::*;
    assert_eq!(find_events(&mut s), [Started, Failed, Started, Succeeded]);
}

#[test]
fn without_timeout_ms_a_second_failure_is_returned() {
    let mut s = setup("twice", "");
    fail_finds(&mut s, 2, 7);
    let err = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("two failures");
    assert_eq!((err.kind, err.code), (ErrorKind::Server, Some(7)));
    use CommandEventKind::*;
    assert_eq!(find_events(&mut s), [Started, Failed, Started, Failed]);
}

#[test]
fn with_timeout_ms_retries_continue_until_success() {
    let mut s = setup("csot", "?timeoutMS=10000");
    fail_finds(&mut s, 3, 7);
    let cursor = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .expect("the fourth attempt succeeds");
    assert_eq!(
        s.guest.next_batch(cursor).unwrap().unwrap().documents.len(),
        1
    );
    let kinds = find_events(&mut s);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == CommandEventKind::Failed)
            .count(),
        3,
        "{kinds:?}"
    );
}

#[test]
fn non_retryable_errors_are_not_retried() {
    let mut s = setup("fatal", "?timeoutMS=10000");
    fail_finds(&mut s, 1, 2); // BadValue
    let err = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("BadValue");
    assert_eq!(err.code, Some(2));
    assert_eq!(
        find_events(&mut s).len(),
        2,
        "one attempt: started and failed"
    );
}

#[test]
fn retry_reads_false_turns_retries_off() {
    let mut s = setup("off", "?retryReads=false");
    fail_finds(&mut s, 1, 7);
    let err = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("no retry");
    assert_eq!(err.code, Some(7));
}

#[test]
fn a_dropped_connection_is_retried_on_a_new_one() {
    let mut s = setup("network", "");
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": { "failCommands": ["find"], "closeConnection": true },
    };
    s.guest.run_command(admin, &fp, None).unwrap().unwrap();
    s.guest.take_events(s.client).unwrap();
    let cursor = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .expect("retried after the network error");
    assert_eq!(
        s.guest.next_batch(cursor).unwrap().unwrap().documents.len(),
        1
    );
    let events = s.guest.take_events(s.client).unwrap();
    let finds: Vec<_> = events.iter().filter(|e| e.command_name == "find").collect();
    assert_eq!(finds.len(), 4, "failed then succeeded");
    assert_eq!(
        finds[1].failure.as_ref().map(|f| f.kind),
        Some(ErrorKind::Network)
    );
    assert_ne!(
        finds[0].connection_id, finds[2].connection_id,
        "the retry used a new connection"
    );
}

#[test]
fn a_retry_that_runs_out_of_time_is_a_timeout_caused_by_a_typed_server_error() {
    let mut s = setup("out_of_time", "?timeoutMS=400");
    let admin = s.guest.database(s.client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 100 },
        "data": {
            "failCommands": ["find"], "errorCode": 7,
            "blockConnection": true, "blockTimeMS": 150,
        },
    };
    s.guest.run_command(admin, &fp, None).unwrap().unwrap();
    let err = s
        .guest
        .find(s.coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("every attempt fails until the deadline");
    // CSOT spec, "Retryability" and "Errors": a timeout error whose cause is
    // the last error a server gave, with its kind and code: the retried
    // HostNotFound (7), or the MaxTimeMSExpired (50) the proxy answers, as
    // mongod does, once the derived maxTimeMS is shorter than the block.
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    let cause = err.cause.as_deref().unwrap_or("");
    assert!(
        cause.starts_with("Server: ") && (cause.contains("(code 7") || cause.contains("(code 50")),
        "{err:?}"
    );
}

/// mapReduce is never retried (Retryable Reads spec, "Unsupported Read
/// Operations"), even with inline output: against a server that drops every
/// command, a find is sent twice and a mapReduce once. The command carries map
/// and reduce as BSON code. (Not through the proxy: nx-27017 runs no mapReduce,
/// so the proxy answers CommandNotFound before any fail point.)
#[test]
fn map_reduce_is_not_retried() {
    let listener = Listener::start(Behaviour::CloseOnCommand).unwrap();
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/", listener.addr);
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    let db = guest.database(client, "db", None).unwrap();
    let coll = guest.collection(db, "c", None).unwrap();

    let err = guest
        .find(coll, &rawdoc! {}, &find_options())
        .unwrap()
        .map(|_| ())
        .expect_err("every attempt is dropped");
    assert_eq!(err.kind, ErrorKind::Network);
    assert_eq!(listener.count("find"), 2, "find is a retryable read");

    let (map, reduce) = (
        "function() { emit(0, this.x) }",
        "function(k, v) { return 1 }",
    );
    let no = host_tests::guest::no_options();
    for (i, out) in [rawdoc! { "inline": 1 }, rawdoc! { "replace": "mr_out" }]
        .into_iter()
        .enumerate()
    {
        guest.take_events(client).unwrap();
        let err = guest
            .map_reduce(coll, map, reduce, &out, &no)
            .unwrap()
            .expect_err("dropped");
        assert_eq!(err.kind, ErrorKind::Network);
        assert_eq!(listener.count("mapReduce"), i + 1, "not retried: {out:?}");
        let events = guest.take_events(client).unwrap();
        let started = events
            .iter()
            .find(|e| e.command_name == "mapReduce" && e.kind == CommandEventKind::Started)
            .expect("a started event");
        let cmd = bson::RawDocumentBuf::from_bytes(started.command.clone().unwrap()).unwrap();
        assert_eq!(cmd.get_str("mapReduce").unwrap(), "c");
        assert_eq!(cmd.get("map").unwrap().unwrap().as_javascript(), Some(map));
        assert_eq!(
            cmd.get("reduce").unwrap().unwrap().as_javascript(),
            Some(reduce)
        );
        assert_eq!(cmd.get_document("out").unwrap(), &*out);
    }
}

// Prose tests 2.x: retrying reads in a sharded cluster, through the proxy's sharded
// presentation (each listener a mongos with fail points of its own).

/// A cluster of `n` mongoses: the driver's client on all of them (`uri_options` added),
/// and one direct client per mongos to configure its fail points.
struct Cluster {
    guest: Guest,
    client: Client,
    coll: Collection,
    direct: Vec<Client>,
    mongoses: Vec<String>,
    _proxy: Proxy,
}

fn cluster(test: &str, n: usize, uri_options: &str) -> Cluster {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::sharded(backend, n)).unwrap();
    let addrs = proxy.addresses();
    let mut guest = Guest::new(&addrs).unwrap();
    let mongoses: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let uri = format!("mongodb://{}/?{uri_options}", mongoses.join(","));
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    let direct = mongoses
        .iter()
        .map(|m| {
            let uri = format!("mongodb://{m}/?directConnection=true");
            guest.connect(&uri, None, false).unwrap().unwrap()
        })
        .collect();
    let db = guest
        .database(client, &format!("retry_{test}"), None)
        .unwrap();
    guest
        .run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    let coll = guest.collection(db, "c", None).unwrap();
    guest
        .insert_one(coll, &rawdoc! { "x": 1 }, &host_tests::guest::no_options())
        .unwrap()
        .unwrap();
    Cluster {
        guest,
        client,
        coll,
        direct,
        mongoses,
        _proxy: proxy,
    }
}

impl Cluster {
    /// Configures failCommand for `find` on mongos `i` only.
    fn fail_finds_on(&mut self, i: usize, mode: bson::RawBson) {
        let admin = self.guest.database(self.direct[i], "admin", None).unwrap();
        let fp = rawdoc! {
            "configureFailPoint": "failCommand",
            "mode": mode,
            "data": { "failCommands": ["find"], "errorCode": 6 },
        };
        self.guest
            .run_command(admin, &fp, None)
            .unwrap()
            .expect("configureFailPoint");
    }

    /// The `find` events since the last call: (kind, server address).
    fn finds(&mut self) -> Vec<(CommandEventKind, String)> {
        let events = self.guest.take_events(self.client).unwrap();
        events
            .into_iter()
            .filter(|e| e.command_name == "find" && e.kind != CommandEventKind::Started)
            .map(|e| (e.kind, e.server_address))
            .collect()
    }

    /// The error of a `find`, if it failed.
    fn find_error(&mut self) -> Option<DriverError> {
        self.guest
            .find(self.coll, &rawdoc! {}, &find_options())
            .unwrap()
            .err()
    }
}

#[test]
fn sharded_retry_goes_to_a_different_mongos() {
    // Prose test 2.1, repeated: random selection alone would pick the same
    // mongos twice in a row half the time; deprioritization never does.
    let mut c = cluster("sharded_two", 2, "");
    for round in 0..8 {
        c.fail_finds_on(0, rawbson!({ "times": 1 }));
        c.fail_finds_on(1, rawbson!({ "times": 1 }));
        c.finds();
        let err = c.find_error().expect("both mongoses fail once");
        assert_eq!(err.code, Some(6));
        let finds = c.finds();
        assert_eq!(finds.len(), 2, "round {round}: {finds:?}");
        assert!(finds.iter().all(|(k, _)| *k == CommandEventKind::Failed));
        assert_ne!(
            finds[0].1, finds[1].1,
            "round {round}: retried on the same mongos"
        );
    }
}

#[test]
fn sharded_retry_avoids_a_failing_mongos() {
    // Mongos 0 fails every find: each find that starts there must be retried on
    // mongos 1 and succeed; one that starts on mongos 1 succeeds at once.
    let mut c = cluster("sharded_avoid", 2, "");
    c.fail_finds_on(0, rawbson!("alwaysOn"));
    c.finds();
    for _ in 0..12 {
        if let Some(e) = c.find_error() {
            panic!("the retry goes to the healthy mongos: {e:?}");
        }
    }
    let finds = c.finds();
    let (bad, good) = (c.mongoses[0].clone(), c.mongoses[1].clone());
    for (kind, addr) in &finds {
        match kind {
            CommandEventKind::Failed => assert_eq!(*addr, bad, "{finds:?}"),
            _ => assert_eq!(*addr, good, "{finds:?}"),
        }
    }
    assert!(
        finds.iter().any(|(k, _)| *k == CommandEventKind::Failed),
        "no find started on the failing mongos in 12 tries: {finds:?}"
    );
    c.fail_finds_on(0, rawbson!("off"));
}

#[test]
fn sharded_retry_with_one_mongos_goes_to_the_same_one() {
    // Prose test 2.2: directConnection=false, so the lone mongos is a Sharded
    // topology and the deprioritized server is selected again, as the only one.
    let mut c = cluster("sharded_one", 1, "directConnection=false");
    c.fail_finds_on(0, rawbson!({ "times": 1 }));
    c.finds();
    if let Some(e) = c.find_error() {
        panic!("the retry succeeds: {e:?}");
    }
    let finds = c.finds();
    let mongos = c.mongoses[0].clone();
    assert_eq!(
        finds,
        [
            (CommandEventKind::Failed, mongos.clone()),
            (CommandEventKind::Succeeded, mongos)
        ]
    );
}

// Prose tests 3.x: retrying reads in a replica set (a primary and a secondary,
// both the proxy's listeners), readPreference=primaryPreferred. This driver's
// collection reads go to the primary whatever the URI says (read preferences
// reach run-command only), so the overload cases read through run-command
// with primaryPreferred, which Client Backpressure retries when both
// retryReads and retryWrites are on; the non-overload case is a retryable
// `find`.

/// How the read that fails once on the primary is sent.
#[derive(Clone, Copy)]
enum Read {
    /// `{find: "c"}` through run-command, readPreference primaryPreferred.
    RunCommand,
    /// The collection's `find` (a retryable read).
    Find,
}

/// The `find` events of a read that fails once on the primary with `labels`.
fn replica_set_retry(
    test: &str,
    uri_options: &str,
    labels: &[&str],
    read: Read,
) -> Vec<(CommandEventKind, String)> {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::replica_set(backend, "rs0", 2)).unwrap();
    let addrs = proxy.addresses();
    let mut guest = Guest::new(&addrs).unwrap();
    let hosts: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let uri = format!(
        "mongodb://{}/?replicaSet=rs0&retryReads=true&readPreference=primaryPreferred{uri_options}",
        hosts.join(",")
    );
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    let db = guest
        .database(client, &format!("retry_{test}"), None)
        .unwrap();
    let coll = guest.collection(db, "c", None).unwrap();
    let admin = guest.database(client, "admin", None).unwrap();
    let mut label_array = bson::RawArrayBuf::new();
    for l in labels {
        label_array.push(*l);
    }
    // To the primary, as mongod's runCommand goes.
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": { "failCommands": ["find"], "errorCode": 6, "errorLabels": label_array },
    };
    guest
        .run_command(admin, &fp, None)
        .unwrap()
        .expect("configureFailPoint");
    guest.take_events(client).unwrap();
    let outcome = match read {
        Read::Find => guest
            .find(coll, &rawdoc! {}, &find_options())
            .unwrap()
            .map(|_| ()),
        Read::RunCommand => {
            let options = RunCommandOptions {
                timeout_ms: None,
                session: None,
                read_preference: Some(
                    host_tests::bindings::exports::mongo_wasi::driver::types::ReadPreference {
                        mode: host_tests::bindings::exports::mongo_wasi::driver::types::ReadMode::PrimaryPreferred,
                        tag_sets: Vec::new(),
                        max_staleness_seconds: None,
                    },
                ),
            };
            let cmd = rawdoc! { "find": "c" };
            guest
                .driver
                .mongo_wasi_driver_database()
                .database()
                .call_run_command(&mut guest.store, db.0, &cmd.as_bytes().to_vec(), &options)
                .unwrap()
                .map(|_| ())
        }
    };
    if let Err(e) = outcome {
        panic!("the retry succeeds: {e:?}");
    }
    let events = guest.take_events(client).unwrap();
    let finds: Vec<_> = events
        .into_iter()
        .filter(|e| e.command_name == "find" && e.kind != CommandEventKind::Started)
        .map(|e| (e.kind, e.server_address))
        .collect();
    let kinds: Vec<_> = finds.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        kinds,
        [CommandEventKind::Failed, CommandEventKind::Succeeded],
        "{finds:?}"
    );
    finds
}

const OVERLOAD: &[&str] = &["RetryableError", "SystemOverloadedError"];

#[test]
fn prose_3_1_overload_retargeting_retries_on_another_member() {
    for round in 0..4 {
        let finds = replica_set_retry(
            "rs_retarget",
            "&enableOverloadRetargeting=true",
            OVERLOAD,
            Read::RunCommand,
        );
        assert_ne!(finds[0].1, finds[1].1, "round {round}: {finds:?}");
    }
}

#[test]
fn prose_3_2_other_errors_retry_on_the_same_member() {
    let finds = replica_set_retry(
        "rs_plain",
        "&enableOverloadRetargeting=true",
        &["RetryableError"],
        Read::Find,
    );
    assert_eq!(finds[0].1, finds[1].1, "{finds:?}");
}

#[test]
fn prose_3_3_without_retargeting_overload_retries_on_the_same_member() {
    for options in ["", "&enableOverloadRetargeting=false"] {
        let finds = replica_set_retry("rs_off", options, OVERLOAD, Read::RunCommand);
        assert_eq!(finds[0].1, finds[1].1, "{options:?}: {finds:?}");
    }
}
