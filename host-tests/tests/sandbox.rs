//! What the host denies fails fast: a connect to an address outside the allow
//! list, or a name lookup the host does not allow, is `access-denied` at once
//! (naming the address), not a server-selection timeout after retrying it.
//! Loopback listeners; the tests of what a host grants (localhost, a DNS
//! server) ping nx-27017 (MONGO_WASI_URI).

use host_tests::bindings::exports::mongo_wasi::driver::types::{Error, ErrorKind};
use host_tests::guest::{Guest, WitResult};
use host_tests::listeners::{Behaviour, Listener};
use std::time::{Duration, Instant};

/// Far below the 10 s selection timeout the URIs ask for; slack for a loaded machine.
const FAST: Duration = Duration::from_secs(2);

/// Connects (no I/O) and pings twice: each operation's error and duration.
fn ping_twice(guest: &mut Guest, uri: &str) -> Vec<(Duration, WitResult<bson::RawDocumentBuf>)> {
    let client = guest.connect(uri, None, false).unwrap().expect("valid URI");
    let db = guest.database(client, "admin", None).unwrap();
    (0..2)
        .map(|_| {
            let started = Instant::now();
            let r = guest
                .run_command(db, &bson::rawdoc! { "ping": 1 }, None)
                .unwrap();
            (started.elapsed(), r)
        })
        .collect()
}

fn assert_denied_fast(results: Vec<(Duration, WitResult<bson::RawDocumentBuf>)>, names: &str) {
    for (elapsed, r) in results {
        let err: Error = r.expect_err("the host denies it");
        assert_eq!(err.kind, ErrorKind::AccessDenied, "{err:?}");
        assert!(err.message.contains(names), "names {names}: {err:?}");
        // It says what to grant, and where to read more.
        assert!(err.message.contains("grant it in the host"), "{err:?}");
        assert!(
            err.message.contains("Security: what a host must allow"),
            "{err:?}"
        );
        assert!(elapsed < FAST, "took {elapsed:?}: {err:?}");
    }
}

#[test]
fn a_denied_address_fails_at_once_with_access_denied() {
    // A real listener: were the connect allowed, it would hang in the handshake.
    let listener = Listener::start(Behaviour::Silent).unwrap();
    let mut guest = Guest::new(&[]).unwrap();
    let uri = format!(
        "mongodb://{}/?serverSelectionTimeoutMS=10000",
        listener.addr
    );
    assert_denied_fast(ping_twice(&mut guest, &uri), &listener.addr.to_string());
    // Under CSOT too.
    let uri = format!("mongodb://{}/?timeoutMS=10000", listener.addr);
    assert_denied_fast(ping_twice(&mut guest, &uri), &listener.addr.to_string());
}

#[test]
fn with_name_lookup_denied_a_host_name_fails_at_once() {
    let listener = Listener::start(Behaviour::Silent).unwrap();
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let uri = format!(
        "mongodb://db.example:{}/?serverSelectionTimeoutMS=10000",
        listener.addr.port()
    );
    let address = format!("db.example:{}", listener.addr.port());
    assert_denied_fast(ping_twice(&mut guest, &uri), &address);
}

/// `localhost` needs no name lookup (RFC 6761): it reaches the server where
/// the host denies lookups (Spin denies every one).
#[test]
fn localhost_needs_no_name_lookup() {
    let (_, server) = host_tests::test_server();
    let mut guest = Guest::new(&[server]).unwrap();
    let uri = format!("mongodb://localhost:{}/?timeoutMS=10000", server.port());
    for (_, r) in ping_twice(&mut guest, &uri) {
        r.expect("localhost is 127.0.0.1 without a lookup");
    }
}

/// Where the host denies name lookup but grants UDP to a DNS server (as Spin
/// can), host names resolve over the driver's own DNS client: a plain URI's
/// host, and replica set members a hello announces by name.
#[test]
fn with_a_dns_server_host_names_resolve_without_name_lookup() {
    use host_tests::dns_responder::{DnsResponder, Mode, Records};
    use host_tests::listeners::NAMED_MEMBER;
    use std::net::Ipv4Addr;
    let (_, server) = host_tests::test_server();
    let member = Listener::start(Behaviour::NamedMember).unwrap();
    let records = Records::default()
        .a("db.test.build.10gen.cc", Ipv4Addr::LOCALHOST)
        .a(NAMED_MEMBER, Ipv4Addr::LOCALHOST);
    let dns = DnsResponder::start(records, Mode::Answer).unwrap();
    let mut guest = Guest::with_dns(&[server, member.addr], dns.addr()).unwrap();
    let uri = format!(
        "mongodb://db.test.build.10gen.cc:{}/?timeoutMS=10000",
        server.port()
    );
    for (_, r) in ping_twice(&mut guest, &uri) {
        r.expect("the plain URI's host name, resolved by the DNS server");
    }
    assert!(
        dns.log()
            .contains(&"udp db.test.build.10gen.cc A".to_string()),
        "{:?}",
        dns.log()
    );
    // Seeded by address, the member says its name is NAMED_MEMBER: SDAM
    // replaces the seed with it, which only DNS can resolve here.
    let uri = format!("mongodb://{}/?replicaSet=rs0&timeoutMS=10000", member.addr);
    for (_, r) in ping_twice(&mut guest, &uri) {
        r.expect("the member announced by name");
    }
    assert!(
        dns.log().contains(&format!("udp {NAMED_MEMBER} A")),
        "{:?}",
        dns.log()
    );
    assert!(member.count("ping") >= 2, "{:?}", member.commands());
}

#[test]
fn one_denied_seed_does_not_fail_the_topology_at_once() {
    // Only one of two seeds is denied: selection goes on checking the other
    // (silent here) until its own timeout.
    let allowed = Listener::start(Behaviour::Silent).unwrap();
    let denied = Listener::start(Behaviour::Silent).unwrap();
    let mut guest = Guest::new(&[allowed.addr]).unwrap();
    let uri = format!(
        "mongodb://{},{}/?serverSelectionTimeoutMS=700&connectTimeoutMS=200",
        denied.addr, allowed.addr
    );
    let (elapsed, r) = ping_twice(&mut guest, &uri).remove(0);
    let err = r.expect_err("no server answers");
    assert_eq!(err.kind, ErrorKind::ServerSelection, "{err:?}");
    assert!(
        elapsed >= Duration::from_millis(650),
        "{elapsed:?}: {err:?}"
    );
}
