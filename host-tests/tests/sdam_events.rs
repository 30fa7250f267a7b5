//! SDAM monitoring events (`take-sdam-events`) as a real server and a
//! silent one produce them, and `check-servers`, which runs the due server
//! checks without an operation.

use host_tests::bindings::exports::mongo_wasi::driver::types::{
    ErrorKind, SdamEvent, SdamEventKind, ServerType, TopologyType,
};
use host_tests::guest::Guest;
use host_tests::listeners::{Behaviour, Listener};
use SdamEventKind::*;

fn kinds(events: &[SdamEvent]) -> Vec<SdamEventKind> {
    events.iter().map(|e| e.kind).collect()
}

#[test]
fn a_check_without_an_operation_publishes_the_topology_life() {
    let (_, addr) = host_tests::test_server();
    let mut guest = Guest::new(&[addr]).unwrap();
    let client = guest
        .connect(&format!("mongodb://{addr}/"), None, true)
        .unwrap()
        .unwrap();
    let opening = guest.take_sdam_events(client).unwrap();
    assert_eq!(
        kinds(&opening),
        [TopologyOpening, TopologyDescriptionChanged, ServerOpening]
    );
    assert_eq!(opening[2].server_address, addr.to_string());

    guest.check_servers(client).unwrap().unwrap();
    let checked = guest.take_sdam_events(client).unwrap();
    assert_eq!(
        kinds(&checked),
        [
            ServerHeartbeatStarted,
            ServerHeartbeatSucceeded,
            ServerDescriptionChanged,
            TopologyDescriptionChanged
        ]
    );
    let (started, succeeded) = (&checked[0], &checked[1]);
    assert!(started.connection_id > 0 && !started.awaited);
    assert_eq!(succeeded.connection_id, started.connection_id);
    assert!(succeeded.duration_micros.is_some());
    let sdc = &checked[2];
    let types = |e: &SdamEvent| {
        let p = e.previous_server.as_ref().map(|s| s.server_type);
        let n = e.new_server.as_ref().map(|s| s.server_type);
        (p, n)
    };
    assert_eq!(
        types(sdc),
        (Some(ServerType::Unknown), Some(ServerType::Standalone))
    );
    assert!(sdc.new_server.as_ref().unwrap().max_wire_version > 0);

    // Nothing is due again yet: no check, no event.
    guest.check_servers(client).unwrap().unwrap();
    assert!(guest.take_sdam_events(client).unwrap().is_empty());

    guest.close(client).unwrap();
    let closing = guest.take_sdam_events(client).unwrap();
    assert_eq!(
        kinds(&closing),
        [ServerClosed, TopologyDescriptionChanged, TopologyClosed]
    );
    let unknown = closing[1].new_topology.as_ref().unwrap();
    assert_eq!(unknown.topology_type, TopologyType::Unknown);
    assert!(unknown.servers.is_empty());
    let closed = guest.check_servers(client).unwrap().unwrap_err();
    assert_eq!(closed.kind, ErrorKind::Closed);
}

#[test]
fn a_failed_check_is_a_failed_heartbeat_and_an_unknown_server_with_its_error() {
    let listener = Listener::start(Behaviour::Silent).unwrap();
    let addr = listener.addr;
    let mut guest = Guest::new(&[addr]).unwrap();
    let uri = format!("mongodb://{addr}/?connectTimeoutMS=200&serverSelectionTimeoutMS=2000");
    let client = guest.connect(&uri, None, true).unwrap().unwrap();
    guest.take_sdam_events(client).unwrap();
    let _ = guest.check_servers(client).unwrap();
    let events = guest.take_sdam_events(client).unwrap();
    assert_eq!(
        kinds(&events)[..2],
        [ServerHeartbeatStarted, ServerHeartbeatFailed]
    );
    assert!(events[1].failure.is_some());
    // Unknown before and after, but now with the check's error: a change.
    let sdc = events
        .iter()
        .find(|e| e.kind == ServerDescriptionChanged)
        .expect("the error changes the description");
    let new = sdc.new_server.as_ref().unwrap();
    assert_eq!(new.server_type, ServerType::Unknown);
    assert!(new.error.is_some());
}

#[test]
fn nothing_is_recorded_without_monitoring() {
    let (_, addr) = host_tests::test_server();
    let mut guest = Guest::new(&[addr]).unwrap();
    let client = guest
        .connect(&format!("mongodb://{addr}/"), None, false)
        .unwrap()
        .unwrap();
    guest.check_servers(client).unwrap().unwrap();
    assert!(guest.take_sdam_events(client).unwrap().is_empty());
}
