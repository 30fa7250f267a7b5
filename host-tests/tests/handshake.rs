//! The handshake's client metadata through the component: what
//! `append-metadata` adds reaches the hellos of connections made after it,
//! and only those (seen by a loopback server that records what it receives).

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, RawDocumentBuf};
use host_tests::bindings::exports::mongo_wasi::driver::client::DriverInfo;
use host_tests::bindings::exports::mongo_wasi::driver::types::ErrorKind;
use host_tests::guest::{Client, Guest};
use host_tests::recorder::Recorder;

fn info(name: &str, version: &str, platform: &str) -> DriverInfo {
    DriverInfo {
        name: Some(name.into()),
        version: Some(version.into()),
        platform: Some(platform.into()),
    }
}

/// The `client` document of each handshake hello the server received.
fn handshakes(server: &Recorder) -> Vec<RawDocumentBuf> {
    server
        .received()
        .into_iter()
        .filter_map(|(_, cmd)| cmd.get_document("client").ok().map(|c| c.to_owned()))
        .collect()
}

/// A client of a fresh recording server, on its own guest.
fn recorded_client() -> (Recorder, Guest, Client) {
    let server = Recorder::start(false);
    let uri = format!("mongodb://{}/", server.addr);
    let mut g = Guest::new(&[server.addr]).unwrap();
    let client = g.connect(&uri, None, false).unwrap().expect("connect");
    (server, g, client)
}

fn driver_field(client: &RawDocumentBuf, key: &str) -> String {
    let driver = client.get_document("driver").unwrap();
    driver.get_str(key).unwrap().to_string()
}

#[test]
fn appended_metadata_leaves_open_connections_alone() {
    let (server, mut g, client) = recorded_client();
    let db = g.database(client, "admin", None).unwrap();
    let ping = |g: &mut Guest| {
        g.run_command(db, &rawdoc! { "ping": 1 }, None)
            .unwrap()
            .expect("ping")
    };
    ping(&mut g);
    let before = handshakes(&server);
    assert_eq!(before.len(), 1, "one connection");
    assert_eq!(driver_field(&before[0], "name"), "mongo-wasi");

    let framework = info("framework", "2.0", "Framework Platform");
    g.append_metadata(client, &framework)
        .unwrap()
        .expect("append");
    ping(&mut g);
    assert_eq!(handshakes(&server).len(), 1, "no connection opened for it");
    assert_eq!(
        server.received().len(),
        3,
        "hello, ping, ping: no hello sent for it"
    );
}

#[test]
fn appended_metadata_reaches_the_connections_made_after_it() {
    let (server, mut g, client) = recorded_client();
    let framework = info("framework", "2.0", "Framework Platform");
    g.append_metadata(client, &framework)
        .unwrap()
        .expect("append");
    // The same info again is appended once; another library's follows it.
    g.append_metadata(client, &framework)
        .unwrap()
        .expect("append again");
    let bare = DriverInfo {
        name: Some("lib".into()),
        version: None,
        platform: None,
    };
    g.append_metadata(client, &bare)
        .unwrap()
        .expect("append a bare name");
    let db = g.database(client, "admin", None).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    let all = handshakes(&server);
    assert_eq!(all.len(), 1);
    assert_eq!(driver_field(&all[0], "name"), "mongo-wasi|framework|lib");
    // One version entry per library, empty for the one that gave none.
    let version = driver_field(&all[0], "version");
    assert!(version.ends_with("|2.0|"), "{version}");
    let platform = all[0].get_str("platform").unwrap();
    assert!(platform.ends_with("|Framework Platform"), "{platform}");
}

#[test]
fn driver_info_holding_the_delimiter_is_an_invalid_argument() {
    let (server, mut g, client) = recorded_client();
    let e = g
        .append_metadata(client, &info("a|b", "1", ""))
        .unwrap()
        .expect_err("a name holding '|'");
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(server.received().is_empty(), "no I/O for it");
}
