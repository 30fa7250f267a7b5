//! The Stable API through the component: the declared version's fields on
//! every command (seen through command monitoring against nx-27017), on the
//! handshake, and no legacy `isMaster` fallback (seen by a loopback server
//! that records what it receives).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::client::{ClientOptions, ServerApi};
use host_tests::bindings::exports::mongo_wasi::driver::collection::FindOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{CommandEventKind, ErrorKind};
use host_tests::guest::{find_options, no_options, Client, Guest};
use host_tests::recorder::{Recorder, OP_MSG, OP_QUERY};
use std::net::SocketAddr;

fn api(version: &str, strict: Option<bool>, deprecation_errors: Option<bool>) -> ClientOptions {
    ClientOptions {
        timeout_ms: None,
        monitor_commands: true,
        server_api: Some(ServerApi {
            version: version.to_string(),
            strict,
            deprecation_errors,
        }),
        tls_ca_pem: None,
        tls_certificate_key_pem: None,
        logging: None,
    }
}

fn connect(g: &mut Guest, uri: &str, opts: ClientOptions) -> Client {
    g.connect_with(uri, opts).unwrap().expect("connect")
}

/// A started command's name and its `apiVersion`, `apiStrict`, `apiDeprecationErrors`.
type Sent = (String, Option<String>, Option<bool>, Option<bool>);

fn api_fields(g: &mut Guest, client: Client) -> Vec<Sent> {
    g.take_events(client)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == CommandEventKind::Started)
        .map(|e| {
            let cmd =
                RawDocumentBuf::from_bytes(e.command.expect("started events carry the command"))
                    .unwrap();
            (
                e.command_name,
                cmd.get_str("apiVersion").ok().map(str::to_string),
                cmd.get_bool("apiStrict").ok(),
                cmd.get_bool("apiDeprecationErrors").ok(),
            )
        })
        .collect()
}

#[test]
fn every_command_of_a_client_with_a_declared_api_carries_its_fields() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let client = connect(&mut g, &uri, api("1", None, Some(true)));
    let db = g.database(client, "stable_api_fields", None).unwrap();
    g.run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    let coll = g.collection(db, "docs", None).unwrap();
    let docs: Vec<RawDocumentBuf> = (0..5).map(|i| rawdoc! { "n": i }).collect();
    g.insert_many(coll, &docs, &no_options())
        .unwrap()
        .expect("insert");
    let opts = FindOptions {
        batch_size: Some(2),
        ..find_options()
    };
    let cursor = g.find(coll, &rawdoc! {}, &opts).unwrap().expect("find");
    g.next_batch(cursor).unwrap().expect("first batch");
    g.next_batch(cursor).unwrap().expect("getMore");
    g.close_cursor(cursor, None).unwrap().expect("killCursors");
    g.drop_resource(cursor.0).unwrap();

    let seen = api_fields(&mut g, client);
    let names: Vec<&str> = seen.iter().map(|(n, ..)| n.as_str()).collect();
    for wanted in ["dropDatabase", "insert", "find", "getMore", "killCursors"] {
        assert!(names.contains(&wanted), "{wanted} was sent: {names:?}");
    }
    for (name, version, strict, deprecation_errors) in &seen {
        assert_eq!(version.as_deref(), Some("1"), "{name} carries apiVersion");
        assert_eq!(*strict, None, "{name}: apiStrict was not declared");
        assert_eq!(
            *deprecation_errors,
            Some(true),
            "{name} carries apiDeprecationErrors"
        );
    }
}

#[test]
fn a_client_without_a_declared_api_sends_no_api_fields() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let client = g.connect(&uri, None, true).unwrap().expect("connect");
    let db = g.database(client, "stable_api_none", None).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    let seen = api_fields(&mut g, client);
    assert_eq!(seen, vec![("ping".to_string(), None, None, None)]);
}

#[test]
fn an_unknown_api_version_is_an_invalid_argument() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let e = g
        .connect_with(&uri, api("2", None, None))
        .unwrap()
        .expect_err("refused");
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("\"2\""), "{}", e.message);
}

#[test]
fn run_command_adds_the_fields_without_inspecting_the_command() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let client = connect(&mut g, &uri, api("1", Some(false), None));
    let db = g.database(client, "stable_api_run", None).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    let seen = api_fields(&mut g, client);
    assert_eq!(
        seen,
        vec![("ping".to_string(), Some("1".to_string()), Some(false), None)],
        "apiStrict is sent when set, even to the server's default"
    );
}

fn ping(uri: &str, addr: SocketAddr, opts: ClientOptions) -> Result<(), ErrorKind> {
    let mut g = Guest::new(&[addr]).unwrap();
    let client = connect(&mut g, uri, opts);
    let db = g.database(client, "admin", None).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .map(|_| ())
        .map_err(|e| e.kind)
}

#[test]
fn the_handshake_is_an_op_msg_hello_with_the_declared_api() {
    let server = Recorder::start(false);
    let uri = format!("mongodb://{}/", server.addr);
    ping(&uri, server.addr, api("1", Some(true), None)).expect("ping");
    let received = server.received();
    let (op, hello) = &received[0];
    assert_eq!(*op, OP_MSG);
    assert!(hello.get("hello").unwrap().is_some(), "{hello:?}");
    assert_eq!(hello.get_str("apiVersion").unwrap(), "1");
    assert!(hello.get_bool("apiStrict").unwrap());
    assert!(hello.get("apiDeprecationErrors").unwrap().is_none());
    let (_, ping) = &received[1];
    assert_eq!(ping.get_str("apiVersion").unwrap(), "1");
}

#[test]
fn without_hello_a_declared_api_never_falls_back_to_legacy_is_master() {
    // The control: without a declared API, the driver falls back to OP_QUERY isMaster.
    let server = Recorder::start(true);
    let uri = format!("mongodb://{}/", server.addr);
    let mut plain = api("1", None, None);
    plain.server_api = None;
    ping(&uri, server.addr, plain).expect("the legacy fallback connects");
    assert!(server.received().iter().any(|(op, _)| *op == OP_QUERY));

    let server = Recorder::start(true);
    let uri = format!("mongodb://{}/?serverSelectionTimeoutMS=300", server.addr);
    let kind = ping(&uri, server.addr, api("1", None, None)).expect_err("no server with hello");
    assert_eq!(kind, ErrorKind::ServerSelection);
    let received = server.received();
    assert!(!received.is_empty(), "the driver tried the handshake");
    for (op, doc) in &received {
        assert_eq!(*op, OP_MSG, "only OP_MSG, never OP_QUERY");
        assert!(doc.get("hello").unwrap().is_some(), "only hello: {doc:?}");
    }
}
