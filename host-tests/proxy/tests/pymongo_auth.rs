//! Runs `pymongo_auth.py` through a proxy with auth on in front of a running nx-27017: PyMongo
//! authenticates with SCRAM-SHA-256, SCRAM-SHA-1 (given and negotiated, speculative or not),
//! PLAIN, and as a user made with createUser through the proxy. Needs `MONGO_WASI_VENV` and
//! `MONGO_WASI_URI` as pymongo.rs does; without them it prints `skipped: ...` and passes.

mod common;

use std::time::Duration;

use common::{backend_addr, run_python, venv_and_uri};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, User};

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

#[test]
fn pymongo_authenticates_through_the_proxy() {
    let Some((venv, uri)) = venv_and_uri() else {
        return;
    };
    let auth = AuthConfig::with_users(vec![
        User::new("root", "admin", "rootpw"),
        User::new("sha1only", "admin", "pw1").with_mechanisms(&["SCRAM-SHA-1"]),
        User::new("sha256only", "admin", "pw256").with_mechanisms(&["SCRAM-SHA-256"]),
        User::new("ldap", "$external", "secret"),
    ]);
    let config = ProxyConfig {
        auth,
        ..ProxyConfig::new(backend_addr(&uri))
    };
    let proxy = Proxy::start(config).expect("start the proxy");
    let uri = format!("mongodb://{}/?directConnection=true", proxy.addresses()[0]);
    run_python(
        &venv,
        "pymongo_auth.py",
        &[("PROXY_URI", uri)],
        SCRIPT_TIMEOUT,
    );
}
