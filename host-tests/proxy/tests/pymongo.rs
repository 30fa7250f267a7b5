//! Runs `pymongo_failpoints.py` and `pymongo_tls.py` through the proxy in front of a running
//! nx-27017.
//! Needs `MONGO_WASI_VENV` (a venv with pymongo) and `MONGO_WASI_URI` (the nx-27017 to front,
//! `mongodb://127.0.0.1:PORT/`); without them it prints `skipped: ...` and passes.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use mongo_wasi_proxy::testcerts::{ClientAuth, TestCerts};
use mongo_wasi_proxy::{Proxy, ProxyConfig};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// The first host of a `mongodb://` URI, resolved (IPv4 preferred: the proxy dials loopback).
fn backend_addr(uri: &str) -> SocketAddr {
    let rest = uri
        .strip_prefix("mongodb://")
        .expect("MONGO_WASI_URI must start with mongodb://");
    let hosts = rest.split(['/', '?']).next().unwrap_or(rest);
    let host = hosts
        .rsplit('@')
        .next()
        .unwrap_or(hosts)
        .split(',')
        .next()
        .unwrap_or(hosts);
    let host = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:27017")
    };
    let addrs: Vec<SocketAddr> = host
        .to_socket_addrs()
        .expect("resolve MONGO_WASI_URI host")
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .expect("MONGO_WASI_URI resolves to nothing")
}

/// `(venv, uri)` from the environment, or why the test is skipped.
fn environment() -> Result<(String, String), &'static str> {
    match (
        std::env::var("MONGO_WASI_VENV"),
        std::env::var("MONGO_WASI_URI"),
    ) {
        (Ok(v), Ok(u)) if !v.is_empty() && !u.is_empty() => Ok((v, u)),
        (_, Err(_)) => Err("skipped: MONGO_WASI_URI not set"),
        _ => Err("skipped: MONGO_WASI_VENV not set"),
    }
}

/// Runs `tests/<script>` with the venv's python and `env`; panics unless it exits 0.
fn run_script(venv: &str, script: &str, env: &[(&str, String)]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let python = Path::new(venv).join("bin/python");
    let mut cmd = Command::new(&python);
    cmd.arg(&path).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", python.display()));
    let deadline = Instant::now() + SCRIPT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the script") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{script} did not finish within {SCRIPT_TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "{script} reported mismatches ({status}); see its output above"
    );
}

#[test]
fn pymongo_sees_mongod_fail_points() {
    let (venv, uri) = match environment() {
        Ok(e) => e,
        Err(why) => return println!("{why}"),
    };
    let backend = backend_addr(&uri);
    let standalone = Proxy::start(ProxyConfig::new(backend)).expect("start standalone proxy");
    let replica_set =
        Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).expect("start replica-set proxy");
    let direct = |p: &Proxy| format!("mongodb://{}/?directConnection=true", p.addresses()[0]);
    run_script(
        &venv,
        "pymongo_failpoints.py",
        &[
            ("PROXY_URI", direct(&standalone)),
            ("PROXY_RS_URI", direct(&replica_set)),
        ],
    );
}

/// PyMongo (OpenSSL) verifies the proxy's generated certificates: it connects
/// with the CA, refuses the server without it, and presents a client certificate
/// to a proxy that requires one; fail points still work over TLS.
#[test]
fn pymongo_verifies_the_tls_proxy() {
    let (venv, uri) = match environment() {
        Ok(e) => e,
        Err(why) => return println!("{why}"),
    };
    let backend = backend_addr(&uri);
    let certs = TestCerts::generate();
    let dir = certs.write_dir().expect("write the PEM files");
    let start = |auth| {
        let config = ProxyConfig {
            tls: Some(certs.server_config(&certs.server, auth)),
            ..ProxyConfig::new(backend)
        };
        Proxy::start(config).expect("start the TLS proxy")
    };
    let tls = start(ClientAuth::None);
    let mutual = start(ClientAuth::Required);
    let uri = |p: &Proxy| {
        format!(
            "mongodb://localhost:{}/?tls=true&directConnection=true",
            p.addresses()[0].port()
        )
    };
    let file = |name: &str| dir.file(name).display().to_string();
    run_script(
        &venv,
        "pymongo_tls.py",
        &[
            ("PROXY_URI", uri(&tls)),
            ("PROXY_MTLS_URI", uri(&mutual)),
            ("CA_FILE", file("ca.pem")),
            ("UNTRUSTED_CA_FILE", file("untrusted-ca.pem")),
            ("CLIENT_FILE", file("client.pem")),
        ],
    );
}
