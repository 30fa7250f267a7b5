//! Runs `pymongo_failpoints.py` through the proxy in front of a running nx-27017.
//! Needs `MONGO_WASI_VENV` (a venv with pymongo) and `MONGO_WASI_URI` (the nx-27017 to front,
//! `mongodb://127.0.0.1:PORT/`); without them it prints `skipped: ...` and passes.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

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

#[test]
fn pymongo_sees_mongod_fail_points() {
    let (venv, uri) = match (
        std::env::var("MONGO_WASI_VENV"),
        std::env::var("MONGO_WASI_URI"),
    ) {
        (Ok(v), Ok(u)) if !v.is_empty() && !u.is_empty() => (v, u),
        (_, Err(_)) => return println!("skipped: MONGO_WASI_URI not set"),
        _ => return println!("skipped: MONGO_WASI_VENV not set"),
    };
    let backend = backend_addr(&uri);
    let standalone = Proxy::start(ProxyConfig::new(backend)).expect("start standalone proxy");
    let replica_set =
        Proxy::start(ProxyConfig::replica_set(backend, "rs0", 1)).expect("start replica-set proxy");
    let direct = |p: &Proxy| format!("mongodb://{}/?directConnection=true", p.addresses()[0]);

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pymongo_failpoints.py");
    let python = Path::new(&venv).join("bin/python");
    let mut child = Command::new(&python)
        .arg(&script)
        .env("PROXY_URI", direct(&standalone))
        .env("PROXY_RS_URI", direct(&replica_set))
        .stdin(Stdio::null())
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
            panic!("pymongo_failpoints.py did not finish within {SCRIPT_TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "pymongo_failpoints.py reported mismatches ({status}); see its output above"
    );
}
