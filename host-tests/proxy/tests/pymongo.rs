//! Runs `pymongo_failpoints.py` through the proxy in front of a running nx-27017.
//! Needs `MONGO_WASI_VENV` (a venv with pymongo) and `MONGO_WASI_URI` (the nx-27017 to front,
//! `mongodb://127.0.0.1:PORT/`); without them it prints `skipped: ...` and passes.

mod common;

use std::time::Duration;

use common::{backend_addr, run_python, venv_and_uri};
use mongo_wasi_proxy::{Proxy, ProxyConfig};

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
