//! `mongodb+srv://` through the component: seedlist discovery against a DNS
//! responder on loopback (UDP, TCP for truncated answers), then the driver
//! connects to what the records name. Needs nx-27017 (MONGO_WASI_URI).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::rawdoc;
use host_tests::bindings::exports::mongo_wasi::driver::types::{CommandEventKind, ErrorKind};
use host_tests::dns_responder::{DnsResponder, Mode, Records};
use host_tests::guest::{Guest, WitResult};
use host_tests::relay::{Config, Kind, Relay};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, User};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const SRV_HOST: &str = "test1.test.build.10gen.cc";
const SRV_NAME: &str = "_mongodb._tcp.test1.test.build.10gen.cc";
const TARGET: &str = "localhost.test.build.10gen.cc";

/// test1's SRV record pointing at `port`, and the target's A record.
fn records(port: u16) -> Records {
    Records::default()
        .srv(SRV_NAME, port, TARGET)
        .a(TARGET, Ipv4Addr::LOCALHOST)
}

/// Connects and pings; the ping's server address on success.
fn ping(guest: &mut Guest, uri: &str, timeout_ms: Option<u64>) -> WitResult<String> {
    let client = guest.connect(uri, timeout_ms, true).unwrap()?;
    let db = guest.database(client, "admin", None).unwrap();
    guest
        .run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()?;
    let events = guest.take_events(client).unwrap();
    let ping = events
        .iter()
        .find(|e| e.command_name == "ping" && e.kind == CommandEventKind::Succeeded)
        .expect("a succeeded ping event");
    Ok(ping.server_address.clone())
}

#[test]
fn srv_resolves_through_the_dns_server_then_connects_to_the_target() {
    let (_, server) = host_tests::test_server();
    let dns = DnsResponder::start(records(server.port()), Mode::Answer).unwrap();
    let mut g = Guest::with_dns(&[server], dns.addr()).unwrap();
    let uri = format!("mongodb+srv://{SRV_HOST}/?tls=false");
    let client = g.connect(&uri, None, false).unwrap().expect("connect");
    assert_eq!(dns.udp_queries(), 0, "client construction does no I/O");
    let db = g.database(client, "admin", None).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    let log = dns.log();
    for q in [
        format!("udp {SRV_NAME} SRV"),
        format!("udp {SRV_HOST} TXT"),
        format!("udp {TARGET} A"),
    ] {
        assert!(log.contains(&q), "{q} missing from {log:?}");
    }
    assert_eq!(dns.tcp_queries(), 0);
    // A second operation does not look the records up again.
    let before = log.iter().filter(|q| q.ends_with("SRV")).count();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    let after = dns.log().iter().filter(|q| q.ends_with("SRV")).count();
    assert_eq!(before, after);

    let mut g = Guest::with_dns(&[server], dns.addr()).unwrap();
    assert_eq!(
        ping(&mut g, &uri, None).expect("ping"),
        format!("{TARGET}:{}", server.port()),
        "commands go to the SRV target, by its name"
    );
}

/// Through a relay 100 ms away: SRV and TXT go out together, then A and
/// AAAA together, so discovery and the target's address cost two round trips.
#[test]
fn queries_that_can_go_together_cost_one_round_trip() {
    let (_, server) = host_tests::test_server();
    let records = records(server.port()).txt(SRV_HOST, &["authSource=admin"]);
    let dns = DnsResponder::start(records, Mode::Answer).unwrap();
    let rtt = Duration::from_millis(100);
    let relay = Relay::start(
        "127.0.0.1:0".parse().unwrap(),
        dns.addr(),
        Config::rtt(rtt),
        true,
    )
    .unwrap();
    let mut g = Guest::with_dns(&[server], relay.addr()).unwrap();
    let started = Instant::now();
    ping(
        &mut g,
        &format!("mongodb+srv://{SRV_HOST}/?tls=false"),
        None,
    )
    .expect("ping");
    let took = started.elapsed();
    let f = relay.take();
    assert_eq!(f.count(Kind::Udp), 4, "SRV, TXT, A, AAAA: {f:?}");
    assert_eq!(f.serial(), 2, "SRV with TXT, then A with AAAA: {f:?}");
    assert!(took >= rtt * 2, "{took:?}");
}

#[test]
fn truncated_answers_are_asked_again_over_tcp() {
    let (_, server) = host_tests::test_server();
    let records = records(server.port()).txt(SRV_HOST, &["authSource=", "thisDB"]);
    let dns = DnsResponder::start(records, Mode::TruncateUdp).unwrap();
    let mut g = Guest::with_dns(&[server], dns.addr()).unwrap();
    ping(
        &mut g,
        &format!("mongodb+srv://{SRV_HOST}/?tls=false"),
        None,
    )
    .expect("ping");
    let log = dns.log();
    assert!(log.contains(&format!("udp {SRV_NAME} SRV")), "{log:?}");
    assert!(log.contains(&format!("tcp {SRV_NAME} SRV")), "{log:?}");
    assert!(log.contains(&format!("tcp {SRV_HOST} TXT")), "{log:?}");
}

#[test]
fn datagrams_that_are_not_the_reply_are_ignored() {
    let (_, server) = host_tests::test_server();
    let dns = DnsResponder::start(records(server.port()), Mode::StrayFirst).unwrap();
    let mut g = Guest::with_dns(&[server], dns.addr()).unwrap();
    ping(
        &mut g,
        &format!("mongodb+srv://{SRV_HOST}/?tls=false"),
        None,
    )
    .expect("ping");
    // SRV, TXT, A and AAAA, each sent once: the stray datagrams did not end a wait.
    assert_eq!(dns.udp_queries(), 4, "{:?}", dns.log());
}

#[test]
fn a_dns_server_that_never_answers_times_out_within_the_deadline() {
    let dns = DnsResponder::start(Records::default(), Mode::Silent).unwrap();
    let mut g = Guest::with_dns(&[], dns.addr()).unwrap();
    let started = Instant::now();
    let err = ping(
        &mut g,
        &format!("mongodb+srv://{SRV_HOST}/?tls=false"),
        Some(1500),
    )
    .expect_err("no DNS answer");
    let took = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    let text = format!("{} {:?}", err.message, err.cause);
    assert!(
        text.contains("DNS") && text.contains(&dns.addr().to_string()),
        "{text}"
    );
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_millis(4000),
        "timed out after {took:?}"
    );
    // Retransmitted within the deadline (the first wait is 1 s).
    assert!(dns.udp_queries() >= 2, "{} queries", dns.udp_queries());
}

#[test]
fn nxdomain_is_a_clear_error() {
    let dns = DnsResponder::start(Records::default(), Mode::Answer).unwrap();
    let mut g = Guest::with_dns(&[], dns.addr()).unwrap();
    let started = Instant::now();
    let err = ping(
        &mut g,
        "mongodb+srv://test4.test.build.10gen.cc/?tls=false",
        Some(5000),
    )
    .expect_err("no such name");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(err.kind, ErrorKind::ServerSelection, "{err:?}");
    assert!(
        err.message
            .contains("_mongodb._tcp.test4.test.build.10gen.cc")
            && err.message.contains("NXDOMAIN"),
        "{}",
        err.message
    );
}

#[test]
fn a_malformed_answer_is_a_clear_error() {
    let (_, server) = host_tests::test_server();
    let dns = DnsResponder::start(records(server.port()), Mode::Malformed).unwrap();
    let mut g = Guest::with_dns(&[server], dns.addr()).unwrap();
    let err = ping(
        &mut g,
        &format!("mongodb+srv://{SRV_HOST}/?tls=false"),
        Some(5000),
    )
    .expect_err("malformed");
    assert_eq!(err.kind, ErrorKind::ServerSelection, "{err:?}");
    assert!(
        err.message.contains("malformed DNS reply"),
        "{}",
        err.message
    );
}

#[test]
fn without_a_configured_resolver_the_error_says_how_to_configure_one() {
    let mut g = Guest::new(&[]).unwrap();
    let err = ping(
        &mut g,
        &format!("mongodb+srv://{SRV_HOST}/?tls=false"),
        Some(2000),
    )
    .expect_err("no resolver");
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err:?}");
    assert!(
        err.message.contains("MONGO_WASI_DNS_SERVER"),
        "{}",
        err.message
    );
}

#[test]
fn a_preopened_resolv_conf_names_the_dns_server() {
    let dir = std::env::temp_dir().join(format!("mongo-wasi-etc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("resolv.conf"),
        "search example\nnameserver 127.0.0.1\n",
    )
    .unwrap();
    // UDP is not allowed: the error shows which server the driver tried.
    let mut g = Guest::in_sandbox(&host_tests::Sandbox {
        etc: Some(&dir),
        ..Default::default()
    })
    .unwrap();
    let err = ping(
        &mut g,
        &format!("mongodb+srv://{SRV_HOST}/?tls=false"),
        Some(3000),
    )
    .expect_err("UDP denied");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(err.kind, ErrorKind::AccessDenied, "{err:?}");
    assert!(err.message.contains("127.0.0.1:53"), "{}", err.message);
}

#[test]
fn srv_targets_outside_the_parent_domain_are_refused_before_connecting() {
    let (_, server) = host_tests::test_server();
    let records = Records::default()
        .srv(SRV_NAME, server.port(), "localhost.evil.build.10gen.cc")
        .a("localhost.evil.build.10gen.cc", Ipv4Addr::LOCALHOST);
    let dns = DnsResponder::start(records, Mode::Answer).unwrap();
    let mut g = Guest::with_dns(&[server], dns.addr()).unwrap();
    let err = ping(
        &mut g,
        &format!("mongodb+srv://{SRV_HOST}/?tls=false"),
        Some(5000),
    )
    .expect_err("evil target");
    assert_eq!(err.kind, ErrorKind::InvalidArgument, "{err:?}");
    assert!(err.message.contains("parent domain"), "{}", err.message);
    assert!(
        !dns.log().iter().any(|q| q.ends_with(" A")),
        "{:?}",
        dns.log()
    );
}

/// The seedlist suite's replica-set cases against a three-member proxy
/// replica set named repl0: the records' ports 27017-27019 become the
/// members' ports. The users of the cases with userinfo exist on the proxy,
/// so those clients really authenticate with the credentials the URI carried.
#[test]
fn seedlist_spec_replica_set_cases() {
    let (_, backend) = host_tests::test_server();
    let users = vec![
        User::new("b*b@f3tt=", "mydb?", "$4to@L8=MC"),
        User::new("auser", "admin", "apass"),
    ];
    let config = ProxyConfig {
        auth: AuthConfig::with_users(users),
        ..ProxyConfig::replica_set(backend, "repl0", 3)
    };
    let proxy = Proxy::start(config).unwrap();
    let members = proxy.addresses();
    let port = |p: u16| match p {
        27017..=27019 => members[usize::from(p - 27017)].port(),
        other => other,
    };
    let dns = DnsResponder::start(Records::seedlist_spec(port), Mode::Answer).unwrap();
    let member_addrs: BTreeSet<String> = members.iter().map(|a| a.to_string()).collect();

    let specs = std::env::var_os("MONGO_WASI_SPEC_TESTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| host_tests::repo_root().join("../shared/spec-tests"));
    let dir = specs.join("initial-dns-seedlist-discovery/tests/replica-set");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("spec suite")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let (mut passed, mut authenticated, mut failures) = (0, 0, Vec::new());
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let case: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let uri = case["uri"].as_str().unwrap();
        let sep = if uri.contains('?') {
            "&"
        } else if uri.ends_with('/') {
            "?"
        } else {
            "/?"
        };
        let uri = format!("{uri}{sep}tls=false&serverSelectionTimeoutMS=5000");
        let error = case["error"].as_bool().unwrap_or(false);
        let mut g = Guest::with_dns(&members, dns.addr()).unwrap();
        let outcome = ping(&mut g, &uri, None);
        match (outcome, error) {
            // The spec's errors: the URI, the records, or what they make of it.
            (Err(e), true) if e.kind == ErrorKind::InvalidArgument => passed += 1,
            (Err(e), true) if e.message.contains("cannot find the hosts") => passed += 1,
            (Ok(addr), false) if member_addrs.contains(&addr) => {
                passed += 1;
                authenticated += usize::from(uri.contains('@'));
            }
            (Ok(addr), false) => failures.push(format!("{name}: ping went to {addr}")),
            (Ok(addr), true) => failures.push(format!("{name}: expected an error, pinged {addr}")),
            (Err(e), _) => failures.push(format!("{name}: {:?}: {}", e.kind, e.message)),
        }
    }
    println!(
        "initial-dns-seedlist-discovery/replica-set through the component: {} cases, \
         {passed} passed ({authenticated} of them authenticated), {} failed",
        files.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(passed >= 30, "{passed} passed");
    assert_eq!(authenticated, 2, "both cases with userinfo authenticate");
}

/// What the DNS responder was asked, by record type ("SRV", "TXT", "A").
fn asked(dns: &DnsResponder, rtype: &str) -> usize {
    dns.log()
        .iter()
        .filter(|q| q.ends_with(&format!(" {rtype}")))
        .count()
}

/// Pings with `uri` after adopting `blob` (if any) in `guest`: what the
/// adoption took, the client's PBKDF2 runs and its warm state after.
fn ping_warm(guest: &mut Guest, uri: &str, blob: Option<&[u8]>) -> (u32, u64, Vec<u8>) {
    let client = guest.connect(uri, None, false).unwrap().expect("connect");
    let taken = blob.map_or(0, |b| {
        guest
            .adopt_warm_state(client, b)
            .unwrap()
            .expect("a warm state")
    });
    let db = guest.database(client, "admin", None).unwrap();
    guest
        .run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    let derivations = guest.scram_derivations(client).unwrap();
    (taken, derivations, guest.warm_state(client).unwrap())
}

/// Warm state (issue 28): a `mongodb+srv` client with SCRAM in a new
/// instance, given the first instance's blob, looks up neither SRV nor TXT
/// nor the target's address (the answers' 60 s TTL has not run out) and
/// runs no PBKDF2; the server still gets its handshake. The same blob with
/// its expiries in the past is looked up again; another SRV name in the URI
/// ignores the SRV answers.
#[test]
fn a_warm_state_skips_the_srv_lookup_and_pbkdf2_in_a_new_instance() {
    let (_, backend) = host_tests::test_server();
    let config = ProxyConfig {
        auth: AuthConfig::with_users(vec![User::new("warm", "admin", "warm-pw")]),
        ..ProxyConfig::new(backend)
    };
    let proxy = Proxy::start(config).unwrap();
    let server = proxy.addresses()[0];
    const OTHER: &str = "test2.test.build.10gen.cc";
    let records = records(server.port())
        .srv(
            "_mongodb._tcp.test2.test.build.10gen.cc",
            server.port(),
            TARGET,
        )
        .txt(SRV_HOST, &["authSource=admin"]);
    let dns = DnsResponder::start(records, Mode::Answer).unwrap();
    let uri = format!("mongodb+srv://warm:warm-pw@{SRV_HOST}/?tls=false");

    let mut first = Guest::with_dns(&[server], dns.addr()).unwrap();
    let (_, derivations, blob) = ping_warm(&mut first, &uri, None);
    let cold = (asked(&dns, "SRV"), asked(&dns, "TXT"), asked(&dns, "A"));
    println!("first instance: PBKDF2 {derivations}, DNS SRV/TXT/A {cold:?}");
    assert_eq!(derivations, 1);
    assert_eq!((cold.0, cold.1), (1, 1), "{:?}", dns.log());
    assert!(
        !blob.windows(b"warm-pw".len()).any(|w| w == b"warm-pw"),
        "the password is not in the blob"
    );

    let mut second = Guest::with_dns(&[server], dns.addr()).unwrap();
    let (taken, derivations, again) = ping_warm(&mut second, &uri, Some(&blob));
    let warm = (asked(&dns, "SRV"), asked(&dns, "TXT"), asked(&dns, "A"));
    let second_figures = (warm.0 - cold.0, warm.1 - cold.1, warm.2 - cold.2);
    println!("second instance: PBKDF2 {derivations}, DNS SRV/TXT/A {second_figures:?}");
    assert_eq!(
        taken, 3,
        "the SCRAM keys, the SRV answers, the target's address"
    );
    assert_eq!(derivations, 0, "no PBKDF2");
    assert_eq!(
        second_figures,
        (0, 0, 0),
        "no SRV, TXT or A lookup: {:?}",
        dns.log()
    );
    // The second instance hands the same answers on.
    assert_eq!(again.len(), blob.len());

    // The same blob with every expiry in the past: looked up again.
    let mut doc = bson::Document::from_reader(&mut blob.as_slice()).unwrap();
    doc.get_document_mut("srv").unwrap().insert("exp", 1_i64);
    for entry in doc.get_array_mut("addr").unwrap() {
        if let bson::Bson::Document(d) = entry {
            d.insert("exp", 1_i64);
        }
    }
    let mut expired = Vec::new();
    doc.to_writer(&mut expired).unwrap();
    let before = (asked(&dns, "SRV"), asked(&dns, "TXT"), asked(&dns, "A"));
    let mut late = Guest::with_dns(&[server], dns.addr()).unwrap();
    let (taken, derivations, _) = ping_warm(&mut late, &uri, Some(&expired));
    assert_eq!((taken, derivations), (3, 0), "the keys do not expire");
    let after = (asked(&dns, "SRV"), asked(&dns, "TXT"), asked(&dns, "A"));
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (1, 1, 1),
        "expired answers are looked up again: {:?}",
        dns.log()
    );

    // Another SRV name: the answers are not its own, DNS is asked.
    let other = format!("mongodb+srv://warm:warm-pw@{OTHER}/?tls=false");
    let mut third = Guest::with_dns(&[server], dns.addr()).unwrap();
    let (taken, derivations, _) = ping_warm(&mut third, &other, Some(&blob));
    assert_eq!(taken, 3);
    assert_eq!(
        derivations, 0,
        "the same user and password: the keys still fit"
    );
    assert_eq!(asked(&dns, "SRV"), after.0 + 1, "{:?}", dns.log());
    // Its target is the same name: its fresh address is still taken.
    assert_eq!(asked(&dns, "A"), after.2, "{:?}", dns.log());
}

/// An instance asks for a host's addresses once per TTL, as a caching
/// resolver does: a second client of the same instance (as each new
/// connection of one client: a monitor's, a pool's) takes the fresh answer
/// (the responder's TTL is 60 s).
#[test]
fn a_fresh_address_answer_is_reused_within_an_instance() {
    let (_, server) = host_tests::test_server();
    let dns = DnsResponder::start(records(server.port()), Mode::Answer).unwrap();
    let mut g = Guest::with_dns(&[server], dns.addr()).unwrap();
    let uri = format!("mongodb+srv://{SRV_HOST}/?tls=false");
    ping(&mut g, &uri, None).expect("first client");
    assert_eq!(asked(&dns, "A"), 1, "{:?}", dns.log());
    ping(&mut g, &uri, None).expect("second client");
    assert_eq!(asked(&dns, "A"), 1, "no second A query: {:?}", dns.log());
    assert_eq!(asked(&dns, "AAAA"), 1, "{:?}", dns.log());
}
