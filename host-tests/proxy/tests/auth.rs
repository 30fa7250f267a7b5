//! Authentication through the proxy against a fake backend: what an unauthenticated
//! connection may run, PLAIN, user commands, the localhost exception, fail points on the SASL
//! commands. SCRAM end to end is proven with PyMongo (pymongo_auth.rs).

mod common;

use std::time::Instant;

use bson::{doc, spec::BinarySubtype, Binary, Document};
use common::*;
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, User};

fn start(auth: AuthConfig) -> (FakeBackend, Proxy) {
    let backend = FakeBackend::start();
    let config = ProxyConfig {
        auth,
        ..ProxyConfig::new(backend.addr)
    };
    let proxy = Proxy::start(config).unwrap();
    (backend, proxy)
}

fn plain(user: &str, password: &str) -> Document {
    let bytes = format!("\0{user}\0{password}").into_bytes();
    doc! {
        "saslStart": 1,
        "mechanism": "PLAIN",
        "payload": Binary { subtype: BinarySubtype::Generic, bytes },
        "autoAuthorize": 1,
    }
}

#[test]
fn unauthenticated_connections_run_only_the_handshake_and_auth() {
    let (backend, proxy) = start(AuthConfig::with_users(vec![User::new(
        "ldap",
        "$external",
        "secret",
    )]));
    let mut c = Client::connect(proxy.addresses()[0]);
    assert_ok(&c.admin(doc! { "hello": 1 }));
    assert_ok(&c.admin(doc! { "ping": 1 }));
    assert_ok(&c.admin(doc! { "buildInfo": 1 }));
    assert_error(&c.find(), 13, "Unauthorized");
    assert_error(
        &c.admin(doc! { "configureFailPoint": "failCommand", "mode": "off" }),
        13,
        "Unauthorized",
    );
    assert_eq!(backend.count("find"), 0, "refused before the backend");
    // Unknown commands are looked up first, as mongod does.
    assert_error(&c.admin(doc! { "noSuchThing": 1 }), 59, "CommandNotFound");

    assert_error(
        &c.run("$external", plain("ldap", "wrong")),
        18,
        "AuthenticationFailed",
    );
    assert_error(&c.find(), 13, "Unauthorized");
    let done = c.run("$external", plain("ldap", "secret"));
    assert_ok(&done);
    assert!(done.get_bool("done").unwrap());
    assert_eq!(done.get_i32("conversationId").unwrap(), 1);
    assert_eq!(c.find().get_str("echo").unwrap(), "find");
    let status = c.admin(doc! { "connectionStatus": 1 });
    let users = status
        .get_document("authInfo")
        .unwrap()
        .get_array("authenticatedUsers")
        .unwrap();
    assert_eq!(
        users[0].as_document().unwrap(),
        &doc! { "user": "ldap", "db": "$external" }
    );
    let stats = proxy.stats();
    assert_eq!((stats.auth_succeeded, stats.auth_failed), (1, 1));

    assert_ok(&c.admin(doc! { "logout": 1 }));
    assert_error(&c.find(), 13, "Unauthorized");
}

#[test]
fn users_made_through_the_proxy_and_the_localhost_exception() {
    let (_backend, proxy) = start(AuthConfig::with_users(Vec::new()));
    let mut c = Client::connect(proxy.addresses()[0]);
    // No user yet: the first may be created without authenticating, in admin only.
    let make = |name: &str| doc! { "createUser": name, "pwd": "pw", "roles": ["root"] };
    assert_error(&c.run("test", make("x")), 13, "Unauthorized");
    assert_ok(&c.admin(make("first")));
    assert_error(&c.admin(make("second")), 13, "Unauthorized");

    // Off: the same commands need no authentication and the users are the proxy's.
    let (backend, proxy) = start(AuthConfig::default());
    let mut c = Client::connect(proxy.addresses()[0]);
    assert_ok(&c.run("db1", make("bob")));
    assert_error(&c.run("db1", make("bob")), 51003, "Location51003");
    let info = c.run("db1", doc! { "usersInfo": { "user": "bob", "db": "db1" } });
    let users = info.get_array("users").unwrap();
    assert_eq!(users.len(), 1);
    let bob = users[0].as_document().unwrap();
    assert_eq!(bob.get_str("_id").unwrap(), "db1.bob");
    let hello = c.admin(doc! { "hello": 1, "saslSupportedMechs": "db1.bob" });
    assert_eq!(
        hello.get_array("saslSupportedMechs").unwrap(),
        &vec!["SCRAM-SHA-1".into(), "SCRAM-SHA-256".into()] as &Vec<bson::Bson>
    );
    assert_ok(&c.run("db1", doc! { "dropUser": "bob" }));
    assert_error(
        &c.run("db1", doc! { "dropUser": "bob" }),
        11,
        "UserNotFound",
    );
    let hello = c.admin(doc! { "hello": 1, "saslSupportedMechs": "db1.bob" });
    assert!(!hello.contains_key("saslSupportedMechs"));
    // The only command the backend may see is the proxy's warm-up ping, sent
    // while the client's handshake runs (as mongod sets up then).
    let seen = backend.seen();
    assert!(
        seen.iter().all(|n| n == "ping"),
        "users never reach the backend: {seen:?}"
    );
}

#[test]
fn fail_points_apply_to_the_sasl_commands() {
    let (_backend, proxy) = start(AuthConfig::with_users(vec![
        User::new("root", "admin", "pw"),
        User::new("ldap", "$external", "secret"),
    ]));
    let addr = proxy.addresses()[0];
    let mut admin = Client::connect(addr);
    assert_ok(&admin.run("$external", plain("ldap", "secret")));
    fail_point(
        &mut admin,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["saslStart"], "blockConnection": true, "blockTimeMS": 300,
        "appName": "slowAuth" },
    );
    let mut c = Client::with_app_name(addr, "slowAuth");
    let started = Instant::now();
    assert_ok(&c.run("$external", plain("ldap", "secret")));
    let took = elapsed_ms(started);
    assert!(took >= 290, "blocked {took} ms, wanted >= 300");

    fail_point(
        &mut admin,
        doc! { "times": 1 }.into(),
        doc! { "failCommands": ["saslStart"], "closeConnection": true },
    );
    let mut c = Client::connect(addr);
    assert!(c.try_run("$external", plain("ldap", "secret")).is_none());
}
