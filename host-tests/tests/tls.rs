//! TLS through the component: the failpoint proxy terminates TLS (certificates
//! generated per run by `mongo_wasi_proxy::testcerts`) in front of nx-27017
//! (MONGO_WASI_URI), and a loopback listener that accepts TCP and never
//! answers stalls the TLS handshake. With auth on as well: MONGODB-X509 (the
//! client certificate's subject is the user) and SCRAM-SHA-256 over TLS, the
//! shape of an Atlas connection.

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::rawdoc;
use host_tests::bindings::exports::mongo_wasi::driver::client::ClientOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{Error, ErrorKind, PoolEventKind};
use host_tests::guest::{no_options, Guest, WitResult};
use host_tests::listeners::{Behaviour, Listener};
use host_tests::relay::{Config as RelayConfig, Relay};
use mongo_wasi_proxy::testcerts::{ClientAuth, Identity, TestCerts, CLIENT_SUBJECT};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, Stats, User};
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
    auth_tls_proxy(identity, auth, AuthConfig::default())
}

fn auth_tls_proxy(identity: &Identity, client_auth: ClientAuth, auth: AuthConfig) -> Proxy {
    let (_, backend) = host_tests::test_server();
    let config = ProxyConfig {
        tls: Some(certs().server_config(identity, client_auth)),
        auth,
        ..ProxyConfig::new(backend)
    };
    Proxy::start(config).expect("start the TLS proxy")
}

/// Auth on: the client certificate's subject as an X.509 user on `$external`,
/// and a password user in `admin`.
fn users() -> AuthConfig {
    AuthConfig::with_users(vec![
        User::x509(CLIENT_SUBJECT),
        User::new("both", "admin", "both-pw"),
    ])
}

fn options(ca: Option<&str>, client: Option<&Identity>) -> ClientOptions {
    ClientOptions {
        timeout_ms: None,
        monitor_commands: false,
        server_api: None,
        tls_ca_pem: ca.map(|pem| pem.as_bytes().to_vec()),
        tls_certificate_key_pem: client.map(|id| id.bundle().into_bytes()),
        logging: None,
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
    let mut guest = Guest::with_name_lookup(&[addr]).unwrap();
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
    let mut guest = Guest::with_name_lookup(&[addr]).unwrap();
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
    let mut guest = Guest::in_sandbox(&host_tests::Sandbox {
        tcp: &[addr],
        dir: Some(dir.path()),
        name_lookup: true,
        ..Default::default()
    })
    .unwrap();
    ping_in(&mut guest, &uri, options(None, None)).expect("ping with tlsCAFile");

    // Without the preopen the file is out of reach: a clear error at connect.
    let mut guest = Guest::with_name_lookup(&[addr]).unwrap();
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
    let mut guest = Guest::with_name_lookup(&[listener.addr]).unwrap();
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
    let mut guest = Guest::with_name_lookup(&[listener.addr]).unwrap();
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

fn commands(stats: &Stats, name: &str) -> u64 {
    stats.commands.get(name).copied().unwrap_or(0)
}

/// Connects, counts a collection (refused with 13 Unauthorized unless the
/// connection authenticated) and answers `connectionStatus`'s authenticated users.
fn authenticated_users(
    guest: &mut Guest,
    uri: &str,
    opts: ClientOptions,
) -> WitResult<Vec<(String, String)>> {
    let client = guest.connect_with(uri, opts).unwrap()?;
    let db = guest.database(client, "x509_tests", None).unwrap();
    let coll = guest.collection(db, "c", None).unwrap();
    guest
        .count_documents(coll, &rawdoc! {}, &no_options())
        .unwrap()?;
    let admin = guest.database(client, "admin", None).unwrap();
    let status = guest
        .run_command(admin, &rawdoc! { "connectionStatus": 1 }, None)
        .unwrap()?;
    let users = status
        .get_document("authInfo")
        .and_then(|i| i.get_array("authenticatedUsers"))
        .expect("authInfo.authenticatedUsers");
    Ok(users
        .into_iter()
        .map(|u| {
            let u = u.unwrap();
            let u = u.as_document().unwrap();
            let field = |k| u.get_str(k).unwrap().to_string();
            (field("user"), field("db"))
        })
        .collect())
}

const X509: &str = "&authMechanism=MONGODB-X509";

fn assert_auth_failed(e: &Error) {
    assert_eq!(e.kind, ErrorKind::Authentication, "{e:?}");
    assert_eq!(e.code, Some(18), "{e:?}");
    assert!(e.message.contains("MONGODB-X509"), "{e:?}");
}

#[test]
fn x509_authenticates_as_the_certificate_subject_in_the_hello() {
    let proxy = auth_tls_proxy(&certs().server, ClientAuth::Required, users());
    let addr = proxy.addresses()[0];
    let mut guest = Guest::with_name_lookup(&[addr]).unwrap();
    proxy.reset_stats();
    let who = authenticated_users(
        &mut guest,
        &uri(addr, X509),
        options(Some(&certs().ca), Some(&certs().client)),
    )
    .expect("MONGODB-X509 with the client certificate");
    assert_eq!(who, [(CLIENT_SUBJECT.to_string(), "$external".to_string())]);
    // Speculative: the hello carried `authenticate` and the server answered it there.
    let s = proxy.stats();
    assert_eq!(s.auth_succeeded, 1, "{s:?}");
    assert_eq!(s.speculative_auth_succeeded, 1, "{s:?}");
    assert_eq!(commands(&s, "authenticate"), 0, "{s:?}");
    assert_eq!(commands(&s, "hello"), 1, "{s:?}");

    // The user named in the URI (percent-encoded RFC 2253) is sent, and must match.
    let named = format!(
        "mongodb://{}@localhost:{}/?tls=true&serverSelectionTimeoutMS=1000{X509}",
        CLIENT_SUBJECT.replace('=', "%3D").replace(',', "%2C"),
        addr.port()
    );
    let who = authenticated_users(
        &mut guest,
        &named,
        options(Some(&certs().ca), Some(&certs().client)),
    )
    .expect("MONGODB-X509 with the subject as the user name");
    assert_eq!(who[0].0, CLIENT_SUBJECT);
    let wrong = named.replace("CN%3Dclient", "CN%3Dsomeone");
    let e = authenticated_users(
        &mut guest,
        &wrong,
        options(Some(&certs().ca), Some(&certs().client)),
    )
    .expect_err("a user name that is not the certificate's subject");
    assert_auth_failed(&e);
}

#[test]
fn x509_without_speculation_sends_authenticate() {
    let auth = AuthConfig {
        speculative: false,
        ..users()
    };
    let proxy = auth_tls_proxy(&certs().server, ClientAuth::Required, auth);
    let addr = proxy.addresses()[0];
    let mut guest = Guest::with_name_lookup(&[addr]).unwrap();
    proxy.reset_stats();
    let who = authenticated_users(
        &mut guest,
        &uri(addr, X509),
        options(Some(&certs().ca), Some(&certs().client)),
    )
    .expect("MONGODB-X509 by the authenticate command");
    assert_eq!(who[0].0, CLIENT_SUBJECT);
    let s = proxy.stats();
    assert_eq!(s.speculative_auth_succeeded, 0, "{s:?}");
    assert_eq!(commands(&s, "authenticate"), 1, "{s:?}");
    assert_eq!(s.auth_succeeded, 1, "{s:?}");
}

#[test]
fn x509_refuses_a_subject_without_a_user_and_a_missing_certificate() {
    // Optional: the proxy also accepts TLS clients without a certificate.
    let proxy = auth_tls_proxy(&certs().server, ClientAuth::Optional, users());
    let addr = proxy.addresses()[0];
    let mut guest = Guest::with_name_lookup(&[addr]).unwrap();
    for (what, client) in [
        (
            "a certificate whose subject has no user",
            Some(&certs().stranger),
        ),
        ("no client certificate", None),
    ] {
        proxy.reset_stats();
        let started = Instant::now();
        let e = authenticated_users(
            &mut guest,
            &uri(addr, X509),
            options(Some(&certs().ca), client),
        )
        .expect_err(what);
        assert_auth_failed(&e);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: failed at once"
        );
        // The speculative attempt and the authenticate command both refused.
        let s = proxy.stats();
        assert_eq!(s.auth_succeeded, 0, "{what}: {s:?}");
        assert_eq!(commands(&s, "authenticate"), 1, "{what}: {s:?}");
    }
}

#[test]
fn scram_sha_256_over_tls_speculates_in_the_hello() {
    let proxy = auth_tls_proxy(&certs().server, ClientAuth::None, users());
    let addr = proxy.addresses()[0];
    let mut guest = Guest::with_name_lookup(&[addr]).unwrap();
    proxy.reset_stats();
    let uri = format!(
        "mongodb://both:both-pw@localhost:{}/?tls=true&serverSelectionTimeoutMS=1000&authMechanism=SCRAM-SHA-256",
        addr.port()
    );
    let who = authenticated_users(&mut guest, &uri, options(Some(&certs().ca), None))
        .expect("SCRAM-SHA-256 over TLS");
    assert_eq!(who, [("both".to_string(), "admin".to_string())]);
    let s = proxy.stats();
    assert_eq!(s.speculative_auth_succeeded, 1, "{s:?}");
    assert_eq!(commands(&s, "saslStart"), 0, "{s:?}");
    assert_eq!(commands(&s, "saslContinue"), 1, "{s:?}");
    // A wrong password over TLS is the same refusal as without.
    let e = authenticated_users(
        &mut guest,
        &uri.replace("both-pw", "not-the-pw"),
        options(Some(&certs().ca), None),
    )
    .expect_err("a wrong password");
    assert_eq!(e.kind, ErrorKind::Authentication, "{e:?}");
    assert_eq!(e.code, Some(18), "{e:?}");
}

/// A cold request over TLS with SCRAM-SHA-256, through a relay 30 ms away
/// that counts the round trips: TCP, TLS 1.3, the hello (carrying saslStart),
/// one saslContinue, the command, all on one connection (the server check's
/// connection serves the operation too). A user's command (here a ping), like
/// a write, waits for the proof's answer; a read does not (next test).
/// docs/driver.md, "Round trips of a cold request".
#[test]
fn a_cold_scram_request_over_tls_makes_five_round_trips() {
    let proxy = auth_tls_proxy(&certs().server, ClientAuth::Optional, users());
    let rtt = Duration::from_millis(30);
    let relay = Relay::tcp(proxy.addresses()[0], RelayConfig::rtt(rtt)).unwrap();
    let addr = relay.addr();
    let uri = format!(
        "mongodb://both:both-pw@127.0.0.1:{}/?tls=true&authMechanism=SCRAM-SHA-256",
        addr.port()
    );
    let mut guest = Guest::new(&[addr]).unwrap();
    let started = Instant::now();
    ping_in(&mut guest, &uri, options(Some(&certs().ca), None)).expect("ping");
    let took = started.elapsed();
    let f = relay.take();
    assert_eq!(f.connections(), 1, "{f:?}");
    assert_eq!(f.answered(), 5, "{f:?}");
    assert_eq!(f.serial(), 5, "{f:?}");
    assert!(took >= rtt * 5, "{took:?}");
}

/// A new instance's client of `uri` (trusting the test CA, recording
/// command events) and its collection behind_proof.c.
fn behind_proof_collection(
    addr: SocketAddr,
    uri: &str,
) -> (
    Guest,
    host_tests::guest::Client,
    host_tests::guest::Collection,
) {
    let mut guest = Guest::with_name_lookup(&[addr]).unwrap();
    let opts = ClientOptions {
        monitor_commands: true,
        ..options(Some(&certs().ca), None)
    };
    let client = guest.connect_with(uri, opts).unwrap().expect("connect");
    let db = guest.database(client, "behind_proof", None).unwrap();
    let coll = guest.collection(db, "c", None).unwrap();
    (guest, client, coll)
}

/// A cold read over TLS with SCRAM-SHA-256 makes four round trips: its
/// command goes in the write of SCRAM's proof (`auth::command_may_follow_proof`):
/// TCP, TLS 1.3, the hello (carrying saslStart), then saslContinue and the
/// count together. The count runs authenticated (the proxy refuses it with
/// 13 Unauthorized otherwise), and the CMAP and command events come in the
/// order of a checkout whose handshake ended before its command.
#[test]
fn a_cold_scram_read_over_tls_follows_the_proof_in_four_round_trips() {
    let proxy = auth_tls_proxy(&certs().server, ClientAuth::Optional, users());
    let rtt = Duration::from_millis(30);
    let relay = Relay::tcp(proxy.addresses()[0], RelayConfig::rtt(rtt)).unwrap();
    let port = relay.addr().port();
    let read = |extra: &str| {
        let uri = format!(
            "mongodb://both:both-pw@localhost:{port}/?tls=true&authMechanism=SCRAM-SHA-256{extra}"
        );
        let (mut guest, client, coll) = behind_proof_collection(relay.addr(), &uri);
        let started = Instant::now();
        let count = guest.count_documents(coll, &rawdoc! {}, &no_options());
        let took = started.elapsed();
        count.unwrap().expect("an authenticated count");
        let pool: Vec<_> = guest
            .take_pool_events(client)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        let commands: Vec<_> = guest
            .take_events(client)
            .unwrap()
            .into_iter()
            .map(|e| (e.command_name, e.kind))
            .collect();
        (relay.take(), took, pool, commands)
    };

    let (f, took, pool, commands) = read("");
    assert_eq!(f.connections(), 1, "{f:?}");
    assert_eq!(f.answered(), 4, "{f:?}");
    assert_eq!(f.serial(), 4, "{f:?}");
    assert!(took >= rtt * 4, "{took:?}");
    use host_tests::bindings::exports::mongo_wasi::driver::types::CommandEventKind;
    use PoolEventKind::*;
    assert_eq!(
        pool,
        [
            PoolCreated,
            PoolReady,
            ConnectionCheckOutStarted,
            ConnectionCreated,
            ConnectionReady,
            ConnectionCheckedOut,
            ConnectionCheckedIn
        ],
        "{pool:?}"
    );
    let aggregate = |kind| ("aggregate".to_string(), kind);
    assert_eq!(
        commands,
        [
            aggregate(CommandEventKind::Started),
            aggregate(CommandEventKind::Succeeded)
        ]
    );

    // tlsAllowInvalidHostnames: TLS did not check whom it reached, so the
    // proof goes alone and the read waits for the server's signature.
    let (f, _, _, _) = read("&tlsAllowInvalidHostnames=true");
    assert_eq!((f.answered(), f.serial()), (5, 5), "{f:?}");
}

/// A refused proof fails the checkout, as when the proof goes alone: the
/// read that followed it is never announced or answered, and the error is
/// the authentication's. Also against a server that does not enforce
/// authentication, which runs the read anyway: a read changes nothing.
/// The same events and error when the proof goes alone (tlsAllowInvalidHostnames).
#[test]
fn a_refused_proof_fails_the_checkout_of_the_read_behind_it() {
    let cases = [true, false]
        .map(|enforced| ["", "&tlsAllowInvalidHostnames=true"].map(|extra| (enforced, extra)));
    for (enforced, extra) in cases.into_iter().flatten() {
        let proxy = auth_tls_proxy(
            &certs().server,
            ClientAuth::Optional,
            AuthConfig {
                enabled: enforced,
                ..users()
            },
        );
        let addr = proxy.addresses()[0];
        let uri = format!(
            "mongodb://both:not-the-pw@localhost:{}/?tls=true&authMechanism=SCRAM-SHA-256&retryReads=false{extra}",
            addr.port()
        );
        let (mut guest, client, coll) = behind_proof_collection(addr, &uri);
        let e = guest
            .count_documents(coll, &rawdoc! {}, &no_options())
            .unwrap()
            .expect_err("a wrong password");
        assert_eq!(e.kind, ErrorKind::Authentication, "{e:?}");
        assert_eq!(e.code, Some(18), "{e:?}");
        assert!(e.message.contains("SCRAM-SHA-256"), "{e:?}");
        assert_eq!(commands(&proxy.stats(), "saslContinue"), 1);
        assert!(
            guest.take_events(client).unwrap().is_empty(),
            "no command was announced"
        );
        let pool: Vec<_> = guest
            .take_pool_events(client)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .filter(|k| !matches!(k, PoolEventKind::PoolCreated | PoolEventKind::PoolReady))
            .collect();
        use PoolEventKind::*;
        assert_eq!(
            pool,
            [
                ConnectionCheckOutStarted,
                ConnectionCreated,
                PoolCleared,
                ConnectionClosed,
                ConnectionCheckOutFailed
            ],
            "enforced: {enforced}{extra}"
        );
    }
}

/// Not a check: prints the cost of a cold connection over TLS (TCP connect, TLS
/// handshake, hello, authentication, then one count) in round trips and
/// milliseconds, with and without speculative authentication (the proxy's
/// `AuthConfig::speculative` off plays a server that does not answer it).
/// `cargo test -p host-tests --test tls -- --ignored --nocapture cold_tls_connection_cost`
#[test]
#[ignore]
fn cold_tls_connection_cost() {
    const RUNS: usize = 30;
    let plain = {
        let (_, backend) = host_tests::test_server();
        Proxy::start(ProxyConfig::new(backend)).unwrap()
    };
    let tls = tls_proxy(&certs().server, ClientAuth::Optional);
    let speculative = auth_tls_proxy(&certs().server, ClientAuth::Optional, users());
    let not_speculative = auth_tls_proxy(
        &certs().server,
        ClientAuth::Optional,
        AuthConfig {
            speculative: false,
            ..users()
        },
    );
    let scram = "both:both-pw@";
    let sha256 = "&authMechanism=SCRAM-SHA-256";
    let cases: [(&str, &Proxy, bool, &str, &str, bool); 7] = [
        ("no TLS, no auth (baseline)", &plain, false, "", "", false),
        ("TLS, no auth", &tls, true, "", "", false),
        (
            "TLS + SCRAM-SHA-256, speculative",
            &speculative,
            true,
            scram,
            sha256,
            false,
        ),
        (
            "TLS + SCRAM-SHA-256, not speculative",
            &not_speculative,
            true,
            scram,
            sha256,
            false,
        ),
        (
            "TLS + SCRAM negotiated, speculative",
            &speculative,
            true,
            scram,
            "",
            false,
        ),
        (
            "TLS + MONGODB-X509, speculative",
            &speculative,
            true,
            "",
            X509,
            true,
        ),
        (
            "TLS + MONGODB-X509, not speculative",
            &not_speculative,
            true,
            "",
            X509,
            true,
        ),
    ];
    println!("{RUNS} cold connections each (new instance and client: no pool, no SCRAM key cache); mongod's iteration counts");
    for (name, proxy, with_tls, userinfo, query, cert) in cases {
        let addr = proxy.addresses()[0];
        let uri = match with_tls {
            true => format!(
                "mongodb://{userinfo}localhost:{}/?tls=true{query}",
                addr.port()
            ),
            false => format!("mongodb://{userinfo}{addr}/"),
        };
        let opts = || options(Some(&certs().ca), cert.then(|| &certs().client));
        let mut times = Vec::new();
        proxy.reset_stats();
        for _ in 0..RUNS {
            let mut guest = Guest::with_name_lookup(&[addr]).unwrap();
            let started = Instant::now();
            let client = guest.connect_with(&uri, opts()).unwrap().unwrap();
            let db = guest.database(client, "tls_cost", None).unwrap();
            let coll = guest.collection(db, "c", None).unwrap();
            guest
                .count_documents(coll, &rawdoc! {}, &no_options())
                .unwrap()
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            times.push(started.elapsed());
        }
        times.sort();
        let s = proxy.stats();
        assert_eq!(
            s.connections_opened as usize, RUNS,
            "{name}: one connection each"
        );
        let per = |c: &str| commands(&s, c) as f64 / RUNS as f64;
        let sent: f64 = s.commands.values().sum::<u64>() as f64 / RUNS as f64;
        // TCP's handshake, TLS 1.3's one round trip (the client's Finished
        // travels with the hello), then one per command.
        let round_trips = 1.0 + with_tls as u8 as f64 + sent;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "  {name}: {round_trips} round trips (TCP 1, TLS {}, commands {sent}: hello {}, saslStart {}, saslContinue {}, authenticate {}); median {:.2} ms, min {:.2} ms, p90 {:.2} ms",
            with_tls as u8,
            per("hello"),
            per("saslStart"),
            per("saslContinue"),
            per("authenticate"),
            ms(times[RUNS / 2]),
            ms(times[0]),
            ms(times[RUNS * 9 / 10]),
        );
    }
}
