//! TLS through the component: the failpoint proxy terminates TLS (certificates
//! generated per run by `mongo_wasi_proxy::testcerts`) in front of nx-27017
//! (MONGO_WASI_URI), and a loopback listener that accepts TCP and never
//! answers stalls the TLS handshake.

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::rawdoc;
use host_tests::bindings::exports::mongo_wasi::driver::client::ClientOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{Error, ErrorKind};
use host_tests::guest::{no_options, Guest, WitResult};
use host_tests::listeners::{Behaviour, Listener};
use mongo_wasi_proxy::testcerts::{ClientAuth, Identity, TestCerts};
use mongo_wasi_proxy::{Proxy, ProxyConfig};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Slack above the deadline: scheduling on a busy 2-core machine, not driver work.
const TOLERANCE: Duration = Duration::from_millis(1500);

fn certs() -> &'static TestCerts {
    static CERTS: OnceLock<TestCerts> = OnceLock::new();
    CERTS.get_or_init(TestCerts::generate)
}

/// A standalone proxy in front of nx-27017 that speaks TLS only, presenting `identity`.
fn tls_proxy(identity: &Identity, auth: ClientAuth) -> Proxy {
    let (_, backend) = host_tests::test_server();
    let config = ProxyConfig {
        tls: Some(certs().server_config(identity, auth)),
        ..ProxyConfig::new(backend)
    };
    Proxy::start(config).expect("start the TLS proxy")
}

fn options(ca: Option<&str>, client: Option<&Identity>) -> ClientOptions {
    ClientOptions {
        timeout_ms: None,
        monitor_commands: false,
        server_api: None,
        tls_ca_pem: ca.map(|pem| pem.as_bytes().to_vec()),
        tls_certificate_key_pem: client.map(|id| id.bundle().into_bytes()),
    }
}

/// `mongodb://localhost:PORT/?tls=true&...`: selection gives up after a second.
fn uri(addr: SocketAddr, extra: &str) -> String {
    format!(
        "mongodb://localhost:{}/?tls=true&serverSelectionTimeoutMS=1000{extra}",
        addr.port()
    )
}

/// Connects and pings; `localhost` may resolve to ::1 first, which is not allowed.
fn ping_in(guest: &mut Guest, uri: &str, opts: ClientOptions) -> WitResult<()> {
    let client = guest.connect_with(uri, opts).unwrap()?;
    let db = guest.database(client, "admin", None).unwrap();
    guest
        .run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .map(|_| ())
}

fn ping(addr: SocketAddr, uri: &str, opts: ClientOptions) -> WitResult<()> {
    let mut guest = Guest::new(&[addr]).unwrap();
    ping_in(&mut guest, uri, opts)
}

fn assert_tls_failure(r: WitResult<()>, what: &str) -> Error {
    let err = r.expect_err("the handshake must fail");
    assert!(
        err.message.contains("TLS handshake with localhost:") && err.message.contains(what),
        "the error names the TLS failure ({what}): {err:?}"
    );
    err
}

#[test]
fn a_verified_chain_carries_commands_both_ways() {
    let proxy = tls_proxy(&certs().server, ClientAuth::None);
    let addr = proxy.addresses()[0];
    let mut guest = Guest::new(&[addr]).unwrap();
    let client = guest
        .connect_with(&uri(addr, ""), options(Some(&certs().ca), None))
        .unwrap()
        .expect("connect");
    let db = guest.database(client, "tls_e2e", None).unwrap();
    guest
        .run_command(db, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase over TLS");
    let coll = guest.collection(db, "docs", None).unwrap();
    // Replies larger than one TLS record (16 KiB) cross several.
    let docs: Vec<_> = (0..500)
        .map(|i| rawdoc! { "n": i, "pad": "x".repeat(100) })
        .collect();
    guest
        .insert_many(coll, &docs, &no_options())
        .unwrap()
        .expect("insert_many over TLS");
    let n = guest
        .count_documents(coll, &rawdoc! {}, &no_options())
        .unwrap()
        .expect("count over TLS");
    assert_eq!(n, 500);
    let cursor = guest
        .find(coll, &rawdoc! {}, &host_tests::guest::find_options())
        .unwrap()
        .expect("find");
    let mut seen = 0;
    loop {
        let batch = guest.next_batch(cursor).unwrap().expect("batch over TLS");
        seen += batch.documents.len();
        if batch.documents.is_empty() || guest.cursor_id(cursor).unwrap() == 0 {
            break;
        }
    }
    assert_eq!(seen, 500);
    assert!(
        proxy.stats().commands.contains_key("insert"),
        "the commands went through the TLS proxy"
    );
}

#[test]
fn tls_ca_file_is_read_from_a_preopened_directory() {
    let proxy = tls_proxy(&certs().server, ClientAuth::None);
    let addr = proxy.addresses()[0];
    let dir = certs().write_dir().unwrap();
    let ca_file = dir.file("ca.pem").display().to_string().replace('/', "%2F");
    let uri = uri(addr, &format!("&tlsCAFile={ca_file}"));
    let state = host_tests::wasi_state_with_dir(&[addr], &[], true, Some(dir.path()));
    let mut guest = Guest::with_state(state).unwrap();
    ping_in(&mut guest, &uri, options(None, None)).expect("ping with tlsCAFile");

    // Without the preopen the file is out of reach: a clear error at connect.
    let mut guest = Guest::new(&[addr]).unwrap();
    let err = guest
        .connect_with(&uri, options(None, None))
        .unwrap()
        .expect_err("no preopened directory");
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err:?}");
    assert!(
        err.message.contains("tlsCAFile") && err.message.contains("preopen"),
        "{err:?}"
    );
}

#[test]
fn an_untrusted_ca_is_refused() {
    let proxy = tls_proxy(&certs().untrusted_server, ClientAuth::None);
    let addr = proxy.addresses()[0];
    let r = ping(addr, &uri(addr, ""), options(Some(&certs().ca), None));
    assert_tls_failure(r, "invalid peer certificate: UnknownIssuer");
    // The bundled Mozilla roots do not know it either.
    let r = ping(addr, &uri(addr, ""), options(None, None));
    assert_tls_failure(r, "UnknownIssuer");
}

#[test]
fn a_wrong_hostname_is_refused_unless_allowed() {
    let proxy = tls_proxy(&certs().wrong_host, ClientAuth::None);
    let addr = proxy.addresses()[0];
    let ca = || options(Some(&certs().ca), None);
    assert_tls_failure(ping(addr, &uri(addr, ""), ca()), "not valid for name");
    ping(addr, &uri(addr, "&tlsAllowInvalidHostnames=true"), ca())
        .expect("tlsAllowInvalidHostnames=true accepts the name");
}

#[test]
fn insecure_options_accept_an_untrusted_server() {
    let proxy = tls_proxy(&certs().untrusted_server, ClientAuth::None);
    let addr = proxy.addresses()[0];
    for option in ["&tlsInsecure=true", "&tlsAllowInvalidCertificates=true"] {
        ping(addr, &uri(addr, option), options(Some(&certs().ca), None))
            .unwrap_or_else(|e| panic!("{option}: {e:?}"));
    }
}

#[test]
fn mutual_tls_sends_the_client_certificate_from_pem_bytes() {
    let proxy = tls_proxy(&certs().server, ClientAuth::Required);
    let addr = proxy.addresses()[0];
    ping(
        addr,
        &uri(addr, ""),
        options(Some(&certs().ca), Some(&certs().client)),
    )
    .expect("the proxy accepts the client certificate");
    let err = ping(addr, &uri(addr, ""), options(Some(&certs().ca), None))
        .expect_err("the proxy requires a client certificate");
    assert!(err.message.contains("CertificateRequired"), "{err:?}");
}

fn assert_within(elapsed: Duration, deadline: Duration) {
    assert!(
        elapsed + Duration::from_millis(5) >= deadline,
        "returned after {elapsed:?}, before the {deadline:?} deadline"
    );
    assert!(
        elapsed <= deadline + TOLERANCE,
        "returned after {elapsed:?}, long past the {deadline:?} deadline"
    );
}

#[test]
fn a_stalled_tls_handshake_times_out_within_timeout_ms() {
    let listener = Listener::start(Behaviour::Silent).unwrap();
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/?tls=true&timeoutMS=400", listener.addr);
    let started = Instant::now();
    let err = ping_in(&mut guest, &uri, options(Some(&certs().ca), None))
        .expect_err("the server never answers the ClientHello");
    let elapsed = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(
        err.message.contains("TLS handshake"),
        "the error names the section: {err:?}"
    );
    assert_within(elapsed, Duration::from_millis(400));
    assert!(listener.accepted() >= 1, "TCP was accepted");
}

#[test]
fn a_stalled_tls_handshake_is_bounded_by_connect_timeout_ms() {
    let listener = Listener::start(Behaviour::Silent).unwrap();
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let uri = format!(
        "mongodb://{}/?tls=true&connectTimeoutMS=200&serverSelectionTimeoutMS=700",
        listener.addr
    );
    let started = Instant::now();
    let err = ping_in(&mut guest, &uri, options(Some(&certs().ca), None))
        .expect_err("the server never answers the ClientHello");
    let elapsed = started.elapsed();
    assert_eq!(err.kind, ErrorKind::ServerSelection, "{err:?}");
    assert!(
        err.message.contains("TLS handshake"),
        "the last check's failure is reported: {err:?}"
    );
    assert_within(elapsed, Duration::from_millis(700));
}
