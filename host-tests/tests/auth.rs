//! Authentication through the component, against the failpoint proxy with
//! auth on (users live in the proxy; nx-27017 behind it has none): SCRAM-SHA-256
//! and SCRAM-SHA-1 given and negotiated, refusals as `authentication` errors
//! with code 18 and without the password, speculative authentication saving
//! the saslStart round trip (the proxy counts commands), and a stalled SASL
//! conversation timing out within the operation's deadline.

use bson::rawdoc;
use host_tests::bindings::exports::mongo_wasi::driver::types::{Error, ErrorKind, PoolEventKind};
use host_tests::guest::{no_options, Guest};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, Stats, User};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const SHA1: &str = "SCRAM-SHA-1";
const SHA256: &str = "SCRAM-SHA-256";

fn proxy() -> Proxy {
    proxy_with(AuthConfig::default())
}

/// The test users, with `base`'s iteration counts.
fn proxy_with(base: AuthConfig) -> Proxy {
    proxy_as(base, ProxyConfig::new)
}

/// The test users on a proxy of `topology` (a standalone, a load balancer...).
fn proxy_as(base: AuthConfig, topology: fn(SocketAddr) -> ProxyConfig) -> Proxy {
    let (_, backend) = host_tests::test_server();
    let users = vec![
        User::new("both", "admin", "both-pw"),
        User::new("sha1", "admin", "sha1-pw").with_mechanisms(&[SHA1]),
        User::new("sha256", "admin", "sha256-pw").with_mechanisms(&[SHA256]),
        User::new("app", "appdb", "app-pw"),
        // On $external: the proxy's stand-in for an LDAP directory (PLAIN).
        User::new("ldap", "$external", "ldap-pw"),
    ];
    Proxy::start(ProxyConfig {
        auth: AuthConfig {
            enabled: true,
            users,
            ..base
        },
        ..topology(backend)
    })
    .unwrap()
}

fn addr(p: &Proxy) -> SocketAddr {
    p.addresses()[0]
}

fn uri(p: &Proxy, userinfo: &str, path_and_query: &str) -> String {
    format!("mongodb://{userinfo}@{}/{path_and_query}", addr(p))
}

/// Connects with `uri` and runs one command that needs an authenticated
/// connection (the proxy answers 13 Unauthorized otherwise).
#[allow(clippy::result_large_err)] // the WIT error as the component returns it
fn first_command(guest: &mut Guest, uri: &str) -> Result<i64, Error> {
    let client = guest.connect(uri, None, false).unwrap()?;
    let db = guest.database(client, "auth_tests", None).unwrap();
    let coll = guest.collection(db, "c", None).unwrap();
    guest
        .count_documents(coll, &rawdoc! {}, &no_options())
        .unwrap()
}

fn commands(stats: &Stats, name: &str) -> u64 {
    stats.commands.get(name).copied().unwrap_or(0)
}

#[test]
fn right_credentials_authenticate_with_each_mechanism() {
    let p = proxy();
    let mut guest = Guest::new(&[addr(&p)]).unwrap();
    for (user, pw, query) in [
        ("both", "both-pw", ""),
        ("both", "both-pw", "?authMechanism=SCRAM-SHA-256"),
        ("both", "both-pw", "?authMechanism=SCRAM-SHA-1"),
        // Negotiation must pick SCRAM-SHA-256 for this user to succeed...
        ("sha256", "sha256-pw", ""),
        // ...and fall back to SCRAM-SHA-1 for this one.
        ("sha1", "sha1-pw", ""),
        ("sha1", "sha1-pw", "?authMechanism=SCRAM-SHA-1"),
        ("app", "app-pw", "appdb"),
        ("app", "app-pw", "?authSource=appdb"),
        ("ldap", "ldap-pw", "?authMechanism=PLAIN"),
    ] {
        let uri = uri(&p, &format!("{user}:{pw}"), query);
        let n = first_command(&mut guest, &uri);
        assert!(n.is_ok(), "{uri}: {n:?}");
    }
    let stats = p.stats();
    assert_eq!(stats.auth_succeeded, 9, "{stats:?}");
    // The one failure is the speculative SCRAM-SHA-256 start of the user without it.
    assert_eq!(stats.auth_failed, 1, "{stats:?}");
}

fn assert_refused(e: &Error, password: &str) {
    assert_eq!(e.kind, ErrorKind::Authentication, "{e:?}");
    assert_eq!(e.code, Some(18), "{e:?}");
    assert_eq!(
        e.code_name.as_deref(),
        Some("AuthenticationFailed"),
        "{e:?}"
    );
    let shown = format!("{e:?}");
    assert!(!shown.contains(password), "the password leaked: {shown}");
}

#[test]
fn wrong_credentials_fail_with_an_authentication_error_and_code_18() {
    let p = proxy();
    let mut guest = Guest::new(&[addr(&p)]).unwrap();
    for (userinfo, query, password) in [
        ("both:WrongSecret1", "", "WrongSecret1"),
        (
            "both:WrongSecret2",
            "?authMechanism=SCRAM-SHA-1",
            "WrongSecret2",
        ),
        (
            "both:WrongSecret3",
            "?authMechanism=SCRAM-SHA-256",
            "WrongSecret3",
        ),
        // A user without SCRAM-SHA-256 credentials asking for them.
        ("sha1:sha1-pw", "?authMechanism=SCRAM-SHA-256", "sha1-pw"),
        // The auth spec: an unknown user fails like a wrong password.
        ("nobody:NobodySecret", "", "NobodySecret"),
        (
            "ldap:WrongLdapSecret",
            "?authMechanism=PLAIN",
            "WrongLdapSecret",
        ),
    ] {
        let uri = uri(&p, userinfo, query);
        let started = Instant::now();
        let e = first_command(&mut guest, &uri).expect_err(&uri);
        assert_refused(&e, password);
        assert!(e.message.contains("authentication"), "{uri}: {}", e.message);
        // Failed at once: not left to wait out server selection (30 s).
        assert!(started.elapsed() < Duration::from_secs(5), "{uri}");
    }
}

#[test]
fn a_refusal_is_not_retried() {
    let p = proxy();
    let mut guest = Guest::new(&[addr(&p)]).unwrap();
    p.reset_stats();
    // count-documents is a retryable read: an auth error must not make it retry.
    let e = first_command(&mut guest, &uri(&p, "both:nope-nope", "")).unwrap_err();
    assert_refused(&e, "nope-nope");
    let stats = p.stats();
    assert_eq!(stats.auth_failed, 1, "{stats:?}");
    assert_eq!(commands(&stats, "hello"), 1, "one handshake: {stats:?}");
    assert_eq!(stats.connections_opened, 1, "{stats:?}");
}

#[test]
fn speculative_authentication_saves_the_sasl_start_round_trip() {
    let p = proxy();
    let mut guest = Guest::new(&[addr(&p)]).unwrap();

    // SCRAM-SHA-256 negotiated: the hello carries saslStart, and answers it.
    p.reset_stats();
    first_command(&mut guest, &uri(&p, "both:both-pw", "")).unwrap();
    let s = p.stats();
    assert_eq!(s.speculative_auth_succeeded, 1, "{s:?}");
    assert_eq!(commands(&s, "hello"), 1, "{s:?}");
    assert_eq!(commands(&s, "saslStart"), 0, "{s:?}");
    assert_eq!(commands(&s, "saslContinue"), 1, "{s:?}");

    // A user without SCRAM-SHA-256: the speculative start is not answered
    // and the negotiated SCRAM-SHA-1 runs the whole conversation.
    p.reset_stats();
    first_command(&mut guest, &uri(&p, "sha1:sha1-pw", "")).unwrap();
    let s = p.stats();
    assert_eq!(s.speculative_auth_succeeded, 0, "{s:?}");
    assert_eq!(s.auth_succeeded, 1, "{s:?}");
    assert_eq!(commands(&s, "hello"), 1, "{s:?}");
    assert_eq!(commands(&s, "saslStart"), 1, "{s:?}");
    assert_eq!(commands(&s, "saslContinue"), 1, "{s:?}");
}

/// Sets a fail point (`times` 1) through an authenticated client of its own.
fn fail_point(guest: &mut Guest, p: &Proxy, data: bson::RawDocumentBuf) {
    fail_point_times(guest, p, 1, data)
}

fn fail_point_times(guest: &mut Guest, p: &Proxy, times: i32, data: bson::RawDocumentBuf) {
    let client = guest
        .connect(&uri(p, "both:both-pw", ""), None, false)
        .unwrap()
        .unwrap();
    let admin = guest.database(client, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": times },
        "data": data,
    };
    guest
        .run_command(admin, &fp, None)
        .unwrap()
        .expect("configureFailPoint");
}

#[test]
fn the_legacy_is_master_fallback_carries_the_speculative_start() {
    let p = proxy();
    let mut guest = Guest::new(&[addr(&p)]).unwrap();
    fail_point(
        &mut guest,
        &p,
        rawdoc! { "failCommands": ["hello"], "errorCode": 59, "appName": "legacy" },
    );
    p.reset_stats();
    first_command(&mut guest, &uri(&p, "both:both-pw", "?appName=legacy")).unwrap();
    let s = p.stats();
    assert_eq!(commands(&s, "hello"), 1, "{s:?}");
    assert_eq!(commands(&s, "isMaster"), 1, "{s:?}");
    assert_eq!(s.speculative_auth_succeeded, 1, "{s:?}");
    assert_eq!(commands(&s, "saslStart"), 0, "{s:?}");
}

#[test]
fn a_stalled_sasl_conversation_times_out_within_the_deadline() {
    let p = proxy();
    let mut guest = Guest::new(&[addr(&p)]).unwrap();
    fail_point(
        &mut guest,
        &p,
        rawdoc! {
            "failCommands": ["saslContinue"],
            "blockConnection": true,
            "blockTimeMS": 5000,
            "appName": "stalled",
        },
    );

    let stalled = uri(&p, "both:both-pw", "?appName=stalled&timeoutMS=500");
    let started = Instant::now();
    let e = first_command(&mut guest, &stalled).unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e:?}");
    assert!(e.message.contains("authentication"), "{e:?}");
    assert!(
        took >= Duration::from_millis(490),
        "returned early: {took:?}"
    );
    assert!(
        took < Duration::from_millis(2500),
        "the 500 ms deadline was not kept: {took:?}"
    );
}

#[test]
fn without_timeout_ms_connect_timeout_ms_bounds_each_auth_attempt() {
    let p = proxy();
    let mut guest = Guest::new(&[addr(&p)]).unwrap();
    fail_point_times(
        &mut guest,
        &p,
        10,
        rawdoc! {
            "failCommands": ["saslContinue"],
            "blockConnection": true,
            "blockTimeMS": 5000,
            "appName": "slowauth",
        },
    );
    // A check runs the hello only; the connection authenticates at its
    // checkout (where CMAP and the retryable specs see handshake errors),
    // and that attempt times out after connectTimeoutMS.
    p.reset_stats();
    let slow = uri(
        &p,
        "both:both-pw",
        "?appName=slowauth&connectTimeoutMS=300&serverSelectionTimeoutMS=1000",
    );
    let started = Instant::now();
    let e = first_command(&mut guest, &slow).unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e:?}");
    assert!(
        e.message.contains("timed out during authentication"),
        "{e:?}"
    );
    assert!(
        took >= Duration::from_millis(290),
        "returned early: {took:?}"
    );
    // Not the 5 s block, nor serverSelectionTimeoutMS of waiting: a retry at most.
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    // The conversation reached the blocked saslContinue (no attempt waited
    // out its 5 s: see the upper bound).
    let s = p.stats();
    assert!(commands(&s, "saslContinue") >= 1, "{s:?}");
}

#[test]
fn behind_a_load_balancer_an_auth_timeout_clears_only_its_services_connections() {
    let p = proxy_as(AuthConfig::default(), ProxyConfig::load_balanced);
    let mut guest = Guest::new(&[addr(&p)]).unwrap();
    let lb = |app: &str| {
        uri(
            &p,
            "both:both-pw",
            &format!("?loadBalanced=true&appName={app}"),
        )
    };
    // The fail point's own client is a load-balanced one too (the proxy
    // refuses others), with another appName.
    let setup = guest.connect(&lb("setup"), None, false).unwrap().unwrap();
    let admin = guest.database(setup, "admin", None).unwrap();
    let fp = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": {
            "failCommands": ["saslContinue"],
            "blockConnection": true,
            "blockTimeMS": 2000,
            "appName": "lbauth",
        },
    };
    guest
        .run_command(admin, &fp, None)
        .unwrap()
        .expect("configureFailPoint");

    // connectTimeoutMS, not the operation's timeoutMS, ends the attempt: a
    // network timeout during authentication, which SDAM error handling
    // answers by clearing the service's pool (Load Balancer spec).
    let client = guest
        .connect(
            &format!("{}&connectTimeoutMS=300&retryReads=false", lb("lbauth")),
            None,
            true,
        )
        .unwrap()
        .unwrap();
    let db = guest.database(client, "auth_tests", None).unwrap();
    let coll = guest.collection(db, "c", None).unwrap();
    let e = guest
        .count_documents(coll, &rawdoc! {}, &no_options())
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e:?}");
    let events = guest.take_pool_events(client).unwrap();
    let cleared: Vec<_> = events
        .iter()
        .filter(|ev| ev.kind == PoolEventKind::PoolCleared)
        .collect();
    assert_eq!(cleared.len(), 1, "{events:?}");
    let service = cleared[0].service_id.as_deref().unwrap_or_default();
    assert_eq!(
        service.len(),
        24,
        "a serviceId, as 24 hex digits: {events:?}"
    );
}

/// Not a check: prints the cold connection cost (connect + hello + auth +
/// one count) with and without speculative authentication, with mongod's
/// iteration counts and with the minimum (4096), where PBKDF2 weighs less.
/// `cargo test -p host-tests --test auth -- --ignored --nocapture cold_connection_cost`
#[test]
#[ignore]
fn cold_connection_cost() {
    for iterations in [None, Some(4096)] {
        let base = match iterations {
            None => AuthConfig::default(),
            Some(i) => AuthConfig {
                sha1_iterations: i,
                sha256_iterations: i,
                ..AuthConfig::default()
            },
        };
        println!(
            "iterations: {}",
            iterations.map_or("mongod's (SHA-1 10000, SHA-256 15000)".into(), |i| i
                .to_string())
        );
        cost(&proxy_with(base), 40);
    }
}

fn cost(p: &Proxy, runs: usize) {
    let cases = [
        ("no auth (baseline, count refused)", "", ""),
        ("SCRAM-SHA-256, speculative", "both:both-pw@", ""),
        // The same SHA-1-only user both ways: given, its speculative start is
        // answered; negotiated, the speculative SHA-256 start is not.
        (
            "SCRAM-SHA-1 given, speculative",
            "sha1:sha1-pw@",
            "?authMechanism=SCRAM-SHA-1",
        ),
        (
            "SCRAM-SHA-1 negotiated, not speculative",
            "sha1:sha1-pw@",
            "",
        ),
    ];
    for (name, userinfo, query) in cases {
        let mut times = Vec::new();
        p.reset_stats();
        for _ in 0..runs {
            // A new instance and client each time: no pooled connection, no key cache.
            let mut guest = Guest::new(&[addr(p)]).unwrap();
            let uri = format!("mongodb://{userinfo}{}/{query}", addr(p));
            let started = Instant::now();
            let _ = first_command(&mut guest, &uri);
            times.push(started.elapsed());
        }
        times.sort();
        let s = p.stats();
        let mean = times.iter().sum::<Duration>().as_secs_f64() * 1e3 / runs as f64;
        let per = |c: &str| commands(&s, c) as f64 / runs as f64;
        println!(
            "  {name}: median {:.2} ms, mean {mean:.2} ms, min {:.2} ms; per connection: hello {}, saslStart {}, saslContinue {}",
            times[runs / 2].as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
            per("hello"),
            per("saslStart"),
            per("saslContinue"),
        );
    }
}

/// Warm state (issue 28): a client in a new instance that adopts the first
/// instance's blob authenticates without PBKDF2 (`scram-derivations` stays
/// 0); a server whose user has another salt (the users created again) makes
/// it derive again; keys for another password are left out; a blob that is
/// not one is invalid-argument. The blob never holds the password.
#[test]
fn a_warm_state_skips_pbkdf2_in_a_new_instance_until_the_salt_changes() {
    let p = proxy();
    let sha256 = uri(&p, "both:both-pw", "?authMechanism=SCRAM-SHA-256");
    let mut first = Guest::new(&[addr(&p)]).unwrap();
    let client = first.connect(&sha256, None, false).unwrap().unwrap();
    let db = first.database(client, "auth_tests", None).unwrap();
    let coll = first.collection(db, "c", None).unwrap();
    first
        .count_documents(coll, &rawdoc! {}, &no_options())
        .unwrap()
        .unwrap();
    assert_eq!(first.scram_derivations(client).unwrap(), 1);
    let blob = first.warm_state(client).unwrap();
    assert!(
        !blob.windows(b"both-pw".len()).any(|w| w == b"both-pw"),
        "the password is not in the blob"
    );

    // A new instance, the same user and password, the blob adopted: no PBKDF2.
    let mut second = Guest::new(&[addr(&p)]).unwrap();
    let client = second.connect(&sha256, None, false).unwrap().unwrap();
    assert_eq!(second.adopt_warm_state(client, &blob).unwrap().unwrap(), 1);
    let db = second.database(client, "auth_tests", None).unwrap();
    let coll = second.collection(db, "c", None).unwrap();
    second
        .count_documents(coll, &rawdoc! {}, &no_options())
        .unwrap()
        .expect("authenticated with the adopted keys");
    assert_eq!(second.scram_derivations(client).unwrap(), 0, "no PBKDF2");

    // Another password: its keys are not taken (and it is refused as before).
    let mut other = Guest::new(&[addr(&p)]).unwrap();
    let wrong = uri(&p, "both:wrong-pw", "?authMechanism=SCRAM-SHA-256");
    let client = other.connect(&wrong, None, false).unwrap().unwrap();
    assert_eq!(other.adopt_warm_state(client, &blob).unwrap().unwrap(), 0);
    let e = first_command(&mut other, &wrong).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Authentication, "{e:?}");

    // The users created again (new salts): the adopted keys no longer
    // match, PBKDF2 runs and authentication succeeds.
    let p2 = proxy();
    let sha256 = uri(&p2, "both:both-pw", "?authMechanism=SCRAM-SHA-256");
    let mut third = Guest::new(&[addr(&p2)]).unwrap();
    let client = third.connect(&sha256, None, false).unwrap().unwrap();
    assert_eq!(third.adopt_warm_state(client, &blob).unwrap().unwrap(), 1);
    let db = third.database(client, "auth_tests", None).unwrap();
    let coll = third.collection(db, "c", None).unwrap();
    third
        .count_documents(coll, &rawdoc! {}, &no_options())
        .unwrap()
        .expect("derived again for the new salt");
    assert_eq!(third.scram_derivations(client).unwrap(), 1, "derived again");

    // Not a warm state: a clear error, no panic.
    for garbage in [&b""[..], b"not bson at all", &[0xff; 100_000]] {
        let e = third
            .adopt_warm_state(client, garbage)
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e:?}");
    }
}
