//! The Stable API through the component: the declared version's fields on
//! every command (seen through command monitoring against nx-27017), on the
//! handshake, and no legacy `isMaster` fallback (seen by a loopback server
//! that records what it receives).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, RawDocument, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::client::{ClientOptions, ServerApi};
use host_tests::bindings::exports::mongo_wasi::driver::collection::FindOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{CommandEventKind, ErrorKind};
use host_tests::guest::{find_options, no_options, Client, Guest};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// What a recording server received: (opCode, command document).
type Received = Arc<Mutex<Vec<(i32, RawDocumentBuf)>>>;

/// A loopback server that records every request and answers OP_MSG `hello`
/// with CommandNotFound (a server without `hello`) when `reject_hello`, or as
/// a standalone otherwise; legacy OP_QUERY `isMaster` and other commands get
/// `ok: 1` replies.
struct Recorder {
    addr: SocketAddr,
    received: Received,
}

const OP_REPLY: i32 = 1;
const OP_QUERY: i32 = 2004;
const OP_MSG: i32 = 2013;

impl Recorder {
    fn start(reject_hello: bool) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Received = Arc::default();
        let log = received.clone();
        std::thread::spawn(move || {
            // Bounded: a few connections, each served until the client closes it.
            for stream in listener.incoming().take(8).flatten() {
                let log = log.clone();
                std::thread::spawn(move || serve(stream, reject_hello, &log));
            }
        });
        Recorder { addr, received }
    }

    fn received(&self) -> Vec<(i32, RawDocumentBuf)> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(mut s: TcpStream, reject_hello: bool, log: &Mutex<Vec<(i32, RawDocumentBuf)>>) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    loop {
        let mut head = [0u8; 16];
        if s.read_exact(&mut head).is_err() {
            return;
        }
        let int = |i: usize| i32::from_le_bytes(head[i..i + 4].try_into().unwrap());
        let (len, request_id, op) = (int(0), int(4), int(12));
        let mut rest = vec![0u8; (len as usize).clamp(16, 1 << 20) - 16];
        if s.read_exact(&mut rest).is_err() {
            return;
        }
        let doc = match op {
            // flags, section kind 0, the body.
            OP_MSG => body_at(&rest, 5),
            // flags, the collection name, skip and limit, the query.
            OP_QUERY => {
                let name_end = 4 + rest[4..].iter().position(|b| *b == 0).unwrap();
                body_at(&rest, name_end + 1 + 8)
            }
            _ => return,
        };
        let name = doc.iter().next().unwrap().unwrap().0.to_string();
        log.lock().unwrap().push((op, doc));
        let standalone = rawdoc! {
            "isWritablePrimary": true, "ismaster": true, "maxWireVersion": 21,
            "minWireVersion": 0, "maxBsonObjectSize": 16777216,
            "maxMessageSizeBytes": 48000000, "maxWriteBatchSize": 100000, "ok": 1.0,
        };
        let reply = match (op, name.as_str()) {
            (OP_MSG, "hello") if reject_hello => rawdoc! {
                "ok": 0.0, "errmsg": "no such command: 'hello'", "code": 59,
                "codeName": "CommandNotFound",
            },
            (_, "hello" | "isMaster") => standalone,
            _ => rawdoc! { "ok": 1.0 },
        };
        let mut out = Vec::new();
        let payload_len = if op == OP_MSG { 5 } else { 20 } + reply.as_bytes().len();
        out.extend_from_slice(&(16 + payload_len as i32).to_le_bytes());
        out.extend_from_slice(&1i32.to_le_bytes());
        out.extend_from_slice(&request_id.to_le_bytes());
        if op == OP_MSG {
            out.extend_from_slice(&OP_MSG.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.push(0);
        } else {
            out.extend_from_slice(&OP_REPLY.to_le_bytes());
            out.extend_from_slice(&0i32.to_le_bytes()); // responseFlags
            out.extend_from_slice(&0i64.to_le_bytes()); // cursorID
            out.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
            out.extend_from_slice(&1i32.to_le_bytes()); // numberReturned
        }
        out.extend_from_slice(reply.as_bytes());
        if s.write_all(&out).is_err() {
            return;
        }
    }
}

fn body_at(bytes: &[u8], at: usize) -> RawDocumentBuf {
    let len = i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    RawDocument::from_bytes(&bytes[at..at + len])
        .unwrap()
        .to_owned()
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
