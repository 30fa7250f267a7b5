//! What a user reads when something goes wrong: errors in words, not Rust
//! `Debug` text, saying why. Loopback listeners, through the component.

use host_tests::bindings::exports::mongo_wasi::driver::types::{Error, ErrorKind};
use host_tests::guest::Guest;
use host_tests::listeners::{Behaviour, Listener};

/// The error of a ping under `timeout_ms` through a fresh client of `uri`.
fn ping_error(listener: &Listener, uri: &str, timeout_ms: u64) -> Error {
    let mut guest = Guest::new(&[listener.addr]).unwrap();
    let client = guest.connect(uri, None, false).unwrap().unwrap();
    let db = guest.database(client, "admin", None).unwrap();
    guest
        .run_command(db, &bson::rawdoc! { "ping": 1 }, Some(timeout_ms))
        .unwrap()
        .expect_err("the ping fails")
}

/// `replicaSet=rs0` against a standalone: the seed is removed, and the
/// selection error says so, in words.
#[test]
fn an_emptied_topology_says_why() {
    let listener = Listener::start(Behaviour::HelloThenSilent).unwrap();
    let uri = format!("mongodb://{}/?replicaSet=rs0", listener.addr);
    let started = std::time::Instant::now();
    let err = ping_error(&listener, &uri, 300);
    eprintln!("failed after {:?}: {err:?}", started.elapsed());
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    let text = format!("{} {}", err.message, err.cause.clone().unwrap_or_default());
    assert!(text.contains("the topology is empty"), "{text}");
    assert!(
        text.contains(&format!(
            "{} was removed: it is a Standalone, not a member of replica set rs0",
            listener.addr
        )),
        "{text}"
    );
    assert!(text.contains("a read (read preference primary)"), "{text}");
    for debug in ["ReadPreference {", "tag_sets", "Read(", "None"] {
        assert!(!text.contains(debug), "Rust Debug text {debug:?} in {text}");
    }
}
