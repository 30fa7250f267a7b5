//! Runs PyMongo scripts through the proxy in front of a running nx-27017:
//! `pymongo_failpoints.py` (mongod's fail points), `pymongo_tls.py` (the
//! proxy's TLS termination, verified by OpenSSL, and MONGODB-X509), `pymongo_names.py`
//! (collection names nx-27017 refuses, GridFS), `pymongo_versions.py` (what an older
//! presented server version refuses), `pymongo_emulations.py` (what the proxy emulates
//! of mongod where nx-27017 answers otherwise), `pymongo_compression.py` (OP_COMPRESSED) and
//! `pymongo_streaming.py` (the streaming monitoring protocol).
//! Needs `MONGO_WASI_VENV` (a venv with pymongo) and `MONGO_WASI_URI` (the nx-27017 to front,
//! `mongodb://127.0.0.1:PORT/`); without them it prints `skipped: ...` and passes.

mod common;

use std::time::Duration;

use common::{backend_addr, run_python, venv_and_uri};
use mongo_wasi_proxy::testcerts::{ClientAuth, TestCerts, CLIENT_SUBJECT};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, User};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

#[test]
fn pymongo_sees_mongod_fail_points() {
    let Some((venv, uri)) = venv_and_uri() else {
        return;
    };
    let backend = backend_addr(&uri);
    let standalone = Proxy::start(ProxyConfig::new(backend)).expect("start standalone proxy");
    let replica_set =
        Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).expect("start replica-set proxy");
    let direct = |p: &Proxy| format!("mongodb://{}/?directConnection=true", p.addresses()[0]);
    run_python(
        &venv,
        "pymongo_failpoints.py",
        &[
            ("PROXY_URI", direct(&standalone)),
            ("PROXY_RS_URI", direct(&replica_set)),
        ],
        SCRIPT_TIMEOUT,
    );
}

/// PyMongo compresses with zlib (and snappy and zstd when the venv has their
/// modules) through the proxy, which answers in kind (`pymongo_compression.py`).
#[test]
fn pymongo_compresses_through_the_proxy() {
    let Some((venv, uri)) = venv_and_uri() else {
        return;
    };
    let proxy = Proxy::start(ProxyConfig::new(backend_addr(&uri))).expect("start the proxy");
    run_python(
        &venv,
        "pymongo_compression.py",
        &[(
            "PROXY_URI",
            format!("mongodb://{}/?directConnection=true", proxy.addresses()[0]),
        )],
        SCRIPT_TIMEOUT,
    );
}

/// PyMongo (OpenSSL) verifies the proxy's generated certificates: it connects
/// with the CA, refuses the server without it, and presents a client certificate
/// to a proxy that requires one; fail points still work over TLS. With auth on, it
/// authenticates with MONGODB-X509 as the certificate's subject, speculatively, and
/// is refused (18) with a certificate whose subject has no user or with none.
#[test]
fn pymongo_verifies_the_tls_proxy() {
    let Some((venv, uri)) = venv_and_uri() else {
        return;
    };
    let backend = backend_addr(&uri);
    let certs = TestCerts::generate();
    let dir = certs.write_dir().expect("write the PEM files");
    let start = |client_auth, auth| {
        let config = ProxyConfig {
            tls: Some(certs.server_config(&certs.server, client_auth)),
            auth,
            ..ProxyConfig::new(backend)
        };
        Proxy::start(config).expect("start the TLS proxy")
    };
    let tls = start(ClientAuth::None, AuthConfig::default());
    let mutual = start(ClientAuth::Required, AuthConfig::default());
    let x509 = start(
        ClientAuth::Optional,
        AuthConfig::with_users(vec![User::x509(CLIENT_SUBJECT)]),
    );
    let uri = |p: &Proxy| {
        format!(
            "mongodb://localhost:{}/?tls=true&directConnection=true",
            p.addresses()[0].port()
        )
    };
    let file = |name: &str| dir.file(name).display().to_string();
    run_python(
        &venv,
        "pymongo_tls.py",
        &[
            ("PROXY_URI", uri(&tls)),
            ("PROXY_MTLS_URI", uri(&mutual)),
            ("PROXY_X509_URI", uri(&x509)),
            ("CLIENT_SUBJECT", CLIENT_SUBJECT.to_string()),
            ("CA_FILE", file("ca.pem")),
            ("UNTRUSTED_CA_FILE", file("untrusted-ca.pem")),
            ("CLIENT_FILE", file("client.pem")),
            ("STRANGER_FILE", file("stranger.pem")),
        ],
        SCRIPT_TIMEOUT,
    );
}

/// Collection names nx-27017 refuses (`fs.files`, dashes, SQL keywords) work through the
/// proxy with PyMongo's GridFS and plain commands, and every reply shows the real names.
#[test]
fn pymongo_uses_names_the_backend_refuses() {
    let Some((venv, uri)) = venv_and_uri() else {
        return;
    };
    let backend = backend_addr(&uri);
    let proxy = Proxy::start(ProxyConfig::new(backend)).expect("start the proxy");
    run_python(
        &venv,
        "pymongo_names.py",
        &[
            (
                "PROXY_URI",
                format!("mongodb://{}/?directConnection=true", proxy.addresses()[0]),
            ),
            (
                "BACKEND_URI",
                format!("mongodb://{backend}/?directConnection=true"),
            ),
        ],
        SCRIPT_TIMEOUT,
    );
}

/// The refusals of an older presented version (version_behaviour.rs), as PyMongo meets
/// them: mongod 4.4.7's codes through a proxy presenting 4.4.7 (PyMongo 4.20 talks to no
/// older server) for what 4.4.14 and 5.0 added, success there for what 4.4.0 took, and
/// success through a proxy at the default version, both in front of the same nx-27017.
#[test]
fn pymongo_meets_the_refusals_of_the_presented_version_only() {
    let Some((venv, uri)) = venv_and_uri() else {
        return;
    };
    let backend = backend_addr(&uri);
    let default = Proxy::start(ProxyConfig::new(backend)).expect("start the proxy");
    let old = Proxy::start(ProxyConfig {
        build_version: "4.4.7".into(),
        ..ProxyConfig::new(backend)
    })
    .expect("start the 4.4.7 proxy");
    let direct = |p: &Proxy| format!("mongodb://{}/?directConnection=true", p.addresses()[0]);
    run_python(
        &venv,
        "pymongo_versions.py",
        &[
            ("PROXY_URI", direct(&default)),
            ("PROXY_OLD_URI", direct(&old)),
        ],
        SCRIPT_TIMEOUT,
    );
}

/// Atlas Search index management through the proxy, as PyMongo meets it: every helper
/// gets mongod's SearchNotEnabled (31082), and a plain aggregate still reaches nx-27017.
#[test]
fn pymongo_meets_search_not_enabled() {
    let Some((venv, uri)) = venv_and_uri() else {
        return;
    };
    let proxy = Proxy::start(ProxyConfig::new(backend_addr(&uri))).expect("start the proxy");
    let direct = format!("mongodb://{}/?directConnection=true", proxy.addresses()[0]);
    run_python(
        &venv,
        "pymongo_search_indexes.py",
        &[("PROXY_URI", direct)],
        SCRIPT_TIMEOUT,
    );
}

/// What the proxy emulates of mongod where nx-27017 falls short, as PyMongo meets it:
/// distinct values in BSON order (`bson_order.rs`) and a database-level aggregate starting
/// with `$listLocalSessions` (`local_sessions.rs`), its cursor on `<db>.$cmd.aggregate`;
/// an insert's comment and transaction read concern kept from nx-27017, mongod's
/// duplicate-key wording (`insert.rs`); `$out` (`conn/out_stage.rs`).
#[test]
fn pymongo_sees_mongod_distinct_order_and_local_sessions() {
    let Some((venv, uri)) = venv_and_uri() else {
        return;
    };
    let backend = backend_addr(&uri);
    let proxy = Proxy::start(ProxyConfig::new(backend)).expect("start the proxy");
    let replica_set =
        Proxy::start(ProxyConfig::replica_set(backend, "rs0", 3)).expect("start replica-set proxy");
    let direct = |p: &Proxy| format!("mongodb://{}/?directConnection=true", p.addresses()[0]);
    let secondary = format!(
        "mongodb://{}/?directConnection=true&readPreference=secondaryPreferred",
        replica_set.addresses()[1]
    );
    run_python(
        &venv,
        "pymongo_emulations.py",
        &[
            ("PROXY_URI", direct(&proxy)),
            ("PROXY_RS_URI", direct(&replica_set)),
            ("PROXY_RS_SECONDARY_URI", secondary),
            (
                "BACKEND_URI",
                format!("mongodb://{backend}/?directConnection=true"),
            ),
        ],
        SCRIPT_TIMEOUT,
    );
}

/// mongod 4.4+'s streaming monitoring protocol as PyMongo's monitors use it
/// (`pymongo_streaming.py`): awaited heartbeats from a standalone and from each member of a
/// two-member set, a fail point on the monitor's hello, and a step-down PyMongo sees within
/// seconds with heartbeatFrequencyMS=60000.
#[test]
fn pymongo_streams_heartbeats_through_the_proxy() {
    let Some((venv, uri)) = venv_and_uri() else {
        return;
    };
    let backend = backend_addr(&uri);
    let standalone = Proxy::start(ProxyConfig::new(backend)).expect("start the proxy");
    let replica_set =
        Proxy::start(ProxyConfig::replica_set(backend, "rs0", 2)).expect("start replica-set proxy");
    let members = replica_set.addresses();
    run_python(
        &venv,
        "pymongo_streaming.py",
        &[
            (
                "PROXY_URI",
                format!(
                    "mongodb://{}/?directConnection=true",
                    standalone.addresses()[0]
                ),
            ),
            ("PROXY_RS_SEED", members[0].to_string()),
            ("PROXY_RS_SECONDARY", members[1].to_string()),
        ],
        SCRIPT_TIMEOUT,
    );
}
