//! CMAP monitoring events (`take-pool-events`) as a real server and a
//! failing handshake produce them: the order the CMAP spec gives, the
//! connection ids, durations and reasons.

use bson::rawdoc;
use host_tests::bindings::exports::mongo_wasi::driver::types::{
    ErrorKind, PoolEvent, PoolEventKind,
};
use host_tests::guest::{Client, Guest};
use host_tests::listeners::{Behaviour, Listener};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, User};
use PoolEventKind::*;

fn ping(guest: &mut Guest, client: Client, timeout_ms: u64) -> Result<(), ErrorKind> {
    let db = guest.database(client, "admin", None).unwrap();
    guest
        .run_command(db, &rawdoc! { "ping": 1 }, Some(timeout_ms))
        .unwrap()
        .map(|_| ())
        .map_err(|e| e.kind)
}

fn kinds(events: &[PoolEvent]) -> Vec<PoolEventKind> {
    events.iter().map(|e| e.kind).collect()
}

#[test]
fn an_operation_checks_a_connection_out_and_in_in_the_spec_order() {
    let (_, addr) = host_tests::test_server();
    let mut guest = Guest::new(&[addr]).unwrap();
    let client = guest
        .connect(&format!("mongodb://{addr}/"), None, true)
        .unwrap()
        .unwrap();
    assert_eq!(ping(&mut guest, client, 5_000), Ok(()));
    let events = guest.take_pool_events(client).unwrap();
    assert_eq!(
        kinds(&events),
        [
            PoolCreated,
            PoolReady,
            ConnectionCheckOutStarted,
            ConnectionCreated,
            ConnectionReady,
            ConnectionCheckedOut,
            ConnectionCheckedIn
        ]
    );
    let id = events[3].connection_id;
    assert!(id > 0);
    for e in &events[3..] {
        assert_eq!(e.connection_id, id, "{:?}", e.kind);
        assert_eq!(e.server_address, addr.to_string());
    }
    assert!(events[4].duration_micros.is_some(), "ready has a duration");
    assert!(events[5].duration_micros.is_some(), "checked out has one");

    // The connection is reused: no new one is created.
    assert_eq!(ping(&mut guest, client, 5_000), Ok(()));
    let events = guest.take_pool_events(client).unwrap();
    assert_eq!(
        kinds(&events),
        [
            ConnectionCheckOutStarted,
            ConnectionCheckedOut,
            ConnectionCheckedIn
        ]
    );
    assert!(events.iter().skip(1).all(|e| e.connection_id == id));

    // Closing the client closes its idle connection, then the pool.
    guest.close(client).unwrap();
    let events = guest.take_pool_events(client).unwrap();
    let closing: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.kind, ConnectionClosed | PoolClosed))
        .map(|e| (e.kind, e.reason.as_deref()))
        .collect();
    assert_eq!(
        closing,
        [(ConnectionClosed, Some("poolClosed")), (PoolClosed, None)]
    );
}

#[test]
fn without_monitoring_nothing_is_recorded() {
    let (_, addr) = host_tests::test_server();
    let mut guest = Guest::new(&[addr]).unwrap();
    let client = guest
        .connect(&format!("mongodb://{addr}/"), None, false)
        .unwrap()
        .unwrap();
    assert_eq!(ping(&mut guest, client, 5_000), Ok(()));
    assert!(guest.take_pool_events(client).unwrap().is_empty());
}

/// A network error on the command: the pool is cleared, and the connection
/// is checked in and closed with reason `error`.
#[test]
fn a_network_error_clears_the_pool_and_closes_the_connection() {
    let listener = Listener::start(Behaviour::CloseOnCommand).unwrap();
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let uri = format!("mongodb://{}/", listener.addr);
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    assert_eq!(ping(&mut guest, client, 2_000), Err(ErrorKind::Network));
    let events = guest.take_pool_events(client).unwrap();
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.kind, e.reason.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (PoolCreated, None),
            (PoolReady, None),
            (ConnectionCheckOutStarted, None),
            (ConnectionCreated, None),
            (ConnectionReady, None),
            (ConnectionCheckedOut, None),
            (PoolCleared, None),
            (ConnectionCheckedIn, None),
            (ConnectionClosed, Some("error")),
        ]
    );
}

/// A failed handshake (a refused password: authentication runs at the
/// connection's first checkout) clears the pool, closes the connection with
/// reason `error` and fails the checkout with `connectionError`; a right
/// password gives the usual sequence through the same proxy.
#[test]
fn a_handshake_failure_closes_the_connection_and_fails_the_checkout() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig {
        auth: AuthConfig {
            enabled: true,
            users: vec![User::new("u", "admin", "right-pw")],
            ..AuthConfig::default()
        },
        ..ProxyConfig::new(backend)
    })
    .unwrap();
    let addr = proxy.addresses()[0];
    let mut guest = Guest::new(&[addr]).unwrap();

    let uri = format!("mongodb://u:wrong-pw@{addr}/");
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    assert_eq!(
        ping(&mut guest, client, 5_000),
        Err(ErrorKind::Authentication)
    );
    let events = guest.take_pool_events(client).unwrap();
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.kind, e.reason.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (PoolCreated, None),
            (PoolReady, None),
            (ConnectionCheckOutStarted, None),
            (ConnectionCreated, None),
            (PoolCleared, None),
            (ConnectionClosed, Some("error")),
            (ConnectionCheckOutFailed, Some("connectionError")),
        ]
    );
    assert_eq!(events[3].connection_id, events[5].connection_id);
    assert!(events[6].duration_micros.is_some());

    let uri = format!("mongodb://u:right-pw@{addr}/");
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    assert_eq!(ping(&mut guest, client, 5_000), Ok(()));
    let events = guest.take_pool_events(client).unwrap();
    assert_eq!(
        kinds(&events),
        [
            PoolCreated,
            PoolReady,
            ConnectionCheckOutStarted,
            ConnectionCreated,
            ConnectionReady,
            ConnectionCheckedOut,
            ConnectionCheckedIn
        ]
    );
}

/// A due heartbeat checks the server on an idle pooled connection: no new
/// connection per check (the proxy counts them), and so no CMAP connection
/// events besides the operations' checkouts.
#[test]
fn a_heartbeat_checks_on_a_pooled_connection_without_opening_one() {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::new(backend)).unwrap();
    let addr = proxy.addresses()[0];
    let mut guest = Guest::new(&[addr]).unwrap();
    let uri = format!("mongodb://{addr}/?heartbeatFrequencyMS=500");
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    assert_eq!(ping(&mut guest, client, 5_000), Ok(()));
    guest.take_pool_events(client).unwrap();
    proxy.reset_stats();
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert_eq!(ping(&mut guest, client, 5_000), Ok(()));
    }
    let stats = proxy.stats();
    assert_eq!(stats.connections_opened, 0, "{stats:?}");
    let hellos = stats.commands.get("hello").copied().unwrap_or(0);
    assert_eq!(hellos, 3, "one heartbeat before each ping: {stats:?}");
    let events = guest.take_pool_events(client).unwrap();
    let expected = [
        ConnectionCheckOutStarted,
        ConnectionCheckedOut,
        ConnectionCheckedIn,
    ]
    .repeat(3);
    assert_eq!(kinds(&events), expected);
}
