//! Logging spec through the component: a client with command logging on
//! records "Command started" / "Command succeeded" messages with the spec's
//! fields (against nx-27017), cuts long documents at maxDocumentLength, and
//! records nothing for components left off.

// Helpers return the WIT binding's error record as it is, large as it is.
#![allow(clippy::result_large_err)]

use bson::{rawdoc, Document};
use host_tests::bindings::exports::mongo_wasi::driver::client::ClientOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{
    LogComponent, LogLevel, LogMessage, LogOptions,
};
use host_tests::guest::{Client, Guest};

fn options(command: Option<LogLevel>, max: Option<u32>) -> ClientOptions {
    ClientOptions {
        timeout_ms: None,
        monitor_commands: false,
        server_api: None,
        tls_ca_pem: None,
        tls_certificate_key_pem: None,
        logging: Some(LogOptions {
            command,
            topology: None,
            server_selection: None,
            connection: None,
            max_document_length: max,
        }),
    }
}

fn data(m: &LogMessage) -> Document {
    Document::from_reader(&m.data[..]).expect("data is BSON")
}

fn connect(g: &mut Guest, uri: &str, opts: ClientOptions) -> Client {
    g.connect_with(uri, opts).unwrap().expect("connect")
}

#[test]
fn a_command_logs_started_and_succeeded_with_the_spec_fields() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let client = connect(&mut g, &uri, options(Some(LogLevel::Debug), None));
    let db = g.database(client, "logging_fields", None).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    let messages = g.take_log_messages(client).unwrap();
    let names: Vec<&str> = messages.iter().map(|m| m.message.as_str()).collect();
    assert_eq!(names, ["Command started", "Command succeeded"]);
    for m in &messages {
        assert_eq!(m.component, LogComponent::Command);
        assert_eq!(m.level, LogLevel::Debug);
    }
    let (started, succeeded) = (data(&messages[0]), data(&messages[1]));
    assert_eq!(started.get_str("message").unwrap(), "Command started");
    assert_eq!(started.get_str("commandName").unwrap(), "ping");
    assert_eq!(started.get_str("databaseName").unwrap(), "logging_fields");
    let command: serde_json::Value =
        serde_json::from_str(started.get_str("command").unwrap()).expect("extended JSON");
    assert_eq!(command["ping"], 1);
    assert_eq!(command["$db"], "logging_fields");
    assert_eq!(
        started.get_str("serverHost").unwrap(),
        addr.ip().to_string()
    );
    assert_eq!(
        started.get_i64("serverPort").unwrap(),
        i64::from(addr.port())
    );
    assert!(started.get_i64("driverConnectionId").unwrap() > 0);
    let request_id = started.get_i64("requestId").unwrap();
    assert_eq!(succeeded.get_i64("requestId").unwrap(), request_id);
    assert_eq!(
        succeeded.get_i64("operationId").unwrap(),
        started.get_i64("operationId").unwrap()
    );
    let reply: serde_json::Value =
        serde_json::from_str(succeeded.get_str("reply").unwrap()).expect("extended JSON");
    assert_eq!(reply["ok"].as_f64(), Some(1.0));
    assert!(succeeded.get_f64("durationMS").unwrap() >= 0.0);
    assert!(
        g.take_log_messages(client).unwrap().is_empty(),
        "taking drains"
    );
}

#[test]
fn long_documents_are_cut_at_max_document_length() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    // The default, 1000 bytes.
    let client = connect(&mut g, &uri, options(Some(LogLevel::Debug), None));
    let db = g.database(client, "logging_cut", None).unwrap();
    let coll = g.collection(db, "docs", None).unwrap();
    let docs: Vec<bson::RawDocumentBuf> = (0..100).map(|i| rawdoc! { "x": i }).collect();
    g.insert_many(coll, &docs, &host_tests::guest::no_options())
        .unwrap()
        .expect("insert");
    let messages = g.take_log_messages(client).unwrap();
    let started = data(&messages[0]);
    assert_eq!(started.get_str("commandName").unwrap(), "insert");
    let command = started.get_str("command").unwrap();
    assert_eq!(command.len(), 1000 + 3, "{command}");
    assert!(command.ends_with("..."));
    let reply = data(&messages[1]);
    let reply = reply.get_str("reply").unwrap();
    assert!(reply.len() <= 1000 + 3, "the reply is cut too: {reply}");

    // A small maximum cuts the reply too.
    let client = connect(&mut g, &uri, options(Some(LogLevel::Debug), Some(5)));
    let db = g.database(client, "logging_cut", None).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    let messages = g.take_log_messages(client).unwrap();
    assert_eq!(data(&messages[0]).get_str("command").unwrap(), "{\"pin...");
    assert_eq!(data(&messages[1]).get_str("reply").unwrap(), "{\"ok\"...");
}

#[test]
fn nothing_is_recorded_for_a_component_or_level_left_off() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    // Command messages are debug: a client logging commands at info records none.
    for level in [None, Some(LogLevel::Informational)] {
        let client = connect(&mut g, &uri, options(level, None));
        let db = g.database(client, "logging_off", None).unwrap();
        g.run_command(db, &rawdoc! { "ping": 1 }, None)
            .unwrap()
            .expect("ping");
        assert!(g.take_log_messages(client).unwrap().is_empty(), "{level:?}");
        assert!(
            g.take_events(client).unwrap().is_empty(),
            "no events either"
        );
    }
}

#[test]
fn topology_connection_and_selection_messages_share_one_ordered_queue() {
    let (uri, addr) = host_tests::test_server();
    let mut g = Guest::new(&[addr]).unwrap();
    let mut opts = options(None, None);
    if let Some(l) = opts.logging.as_mut() {
        l.topology = Some(LogLevel::Debug);
        l.connection = Some(LogLevel::Debug);
        l.server_selection = Some(LogLevel::Debug);
    }
    let client = connect(&mut g, &uri, opts);
    let db = g.database(client, "logging_order", None).unwrap();
    g.run_command(db, &rawdoc! { "ping": 1 }, None)
        .unwrap()
        .expect("ping");
    let messages = g.take_log_messages(client).unwrap();
    let names: Vec<&str> = messages.iter().map(|m| m.message.as_str()).collect();
    let at = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("{name} in {names:?}"))
    };
    assert_eq!(at("Starting topology monitoring"), 0, "{names:?}");
    assert!(at("Server selection started") < at("Server selection succeeded"));
    assert!(at("Server selection succeeded") < at("Connection checkout started"));
    assert!(at("Connection checkout started") < at("Connection checked out"));
    assert!(at("Connection checked out") < at("Connection checked in"));
    assert!(
        !names.iter().any(|n| n.starts_with("Command")),
        "command logging is off"
    );
    let selected = messages
        .iter()
        .find(|m| m.message == "Server selection succeeded")
        .unwrap();
    assert_eq!(selected.component, LogComponent::ServerSelection);
    let selected = data(selected);
    assert_eq!(selected.get_str("operation").unwrap(), "ping");
    assert_eq!(
        selected.get_i64("serverPort").unwrap(),
        i64::from(addr.port())
    );
    // The server was Unknown: selection waited (an info message) for its check.
    let waiting = messages
        .iter()
        .find(|m| m.message == "Waiting for suitable server to become available")
        .expect("a first selection waits for the first check");
    assert_eq!(waiting.level, LogLevel::Informational);
    assert!(
        g.take_events(client).unwrap().is_empty(),
        "logging is not monitoring"
    );
}
