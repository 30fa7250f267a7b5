//! The test deployment: four failpoint proxies in front of one nx-27017 (a
//! standalone, a single-member replica set, a sharded cluster of [`MONGOSES`]
//! mongoses and a load balancer), and an admin instance of the
//! component on this thread for probing and for cleaning up after abandoned tests.
//! With auth on, the proxies require authentication and know one root user, whose
//! credentials every URI carries.

use super::engine;
use super::internal;
use super::requirements::{self, parse_version, Topology};
use crate::guest::Guest;
use bson::{doc, Bson, Document};
use mongo_wasi_proxy::failpoint::Mode;
use mongo_wasi_proxy::testcerts::{ClientAuth, TestCerts};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, User};
use std::net::SocketAddr;

pub const SET_NAME: &str = "rs0";
/// Mongoses of the sharded cluster: `useMultipleMongoses` needs more than one.
pub const MONGOSES: usize = 2;
/// The root-like user of `--auth` runs (in `admin`, SCRAM-SHA-1 and SCRAM-SHA-256).
pub const AUTH_USER: &str = "spec-runner";
pub const AUTH_PASSWORD: &str = "spec-runner-pw";
/// The SCRAM iteration count of `--auth` runs: mongod's lowest allowed
/// `scramIterationCount` and `scramSHA256IterationCount`. With its defaults
/// (10000, 15000) PBKDF2 in the component takes 30-60 ms per new client on a
/// loaded machine, inside the operation's timeoutMS (connection establishment
/// counts, per CSOT), which overruns the tightest budgets of the CSOT suite
/// (75 ms against a 100 ms block): they would test this machine's speed.
pub const AUTH_ITERATIONS: u32 = 5000;

pub struct Deployment {
    /// Kept alive for the run; dropping them stops the proxies.
    proxies: Vec<(Topology, Proxy)>,
    uris: Vec<(Topology, String)>,
    /// The sharded cluster's URI naming every mongos (`useMultipleMongoses`).
    pub multi_mongos_uri: String,
    pub allowed: Vec<SocketAddr>,
    pub info: requirements::Deployment,
    /// Probed the deployment; kept so its connections stay up for the run.
    _admin: Guest,
}

impl Deployment {
    /// `auth`: the proxies run with auth on, and every URI carries [`AUTH_USER`]'s credentials.
    /// `tls`: the proxies terminate TLS with certificates made for this run, and every
    /// client URI says `tls=true` and trusts their CA.
    pub fn start(backend: SocketAddr, auth: bool, tls: bool) -> Result<Deployment, String> {
        if !backend.ip().is_loopback() {
            return Err(format!(
                "--backend {backend}: only loopback addresses are used"
            ));
        }
        let auth_config = match auth {
            true => AuthConfig {
                sha1_iterations: AUTH_ITERATIONS,
                sha256_iterations: AUTH_ITERATIONS,
                ..AuthConfig::with_users(vec![User::new(AUTH_USER, "admin", AUTH_PASSWORD)])
            },
            false => AuthConfig::default(),
        };
        let server_tls = tls.then(|| {
            let certs = TestCerts::generate();
            super::tls::set_ca(certs.ca.as_bytes());
            certs.server_config(&certs.server, ClientAuth::None)
        });
        let start = |config: ProxyConfig| {
            let config = ProxyConfig {
                auth: auth_config.clone(),
                tls: server_tls.clone(),
                ..config
            };
            Proxy::start(config).map_err(|e| format!("starting a proxy: {e}"))
        };
        let single = start(ProxyConfig::new(backend))?;
        let rs = start(ProxyConfig::replica_set(backend, SET_NAME, 1))?;
        let sharded = start(ProxyConfig::sharded(backend, MONGOSES))?;
        let lb = start(ProxyConfig::load_balanced(backend))?;
        let lb_addr = lb.addresses()[0];
        let single_addr = single.addresses()[0];
        let rs_addr = rs.addresses()[0];
        let mongoses = sharded.addresses();
        let user = credentials(auth);
        let tls_option = if tls { "tls=true" } else { "" };
        let cluster = |hosts: &[SocketAddr]| {
            let hosts: Vec<String> = hosts.iter().map(SocketAddr::to_string).collect();
            format!("mongodb://{user}{}/?{tls_option}", hosts.join(","))
                .trim_end_matches('?')
                .to_string()
        };
        let multi_mongos_uri = cluster(&mongoses);
        let uris = vec![
            (
                Topology::Single,
                format!("mongodb://{user}{single_addr}/?{tls_option}")
                    .trim_end_matches('?')
                    .to_string(),
            ),
            (
                Topology::ReplicaSet,
                format!("mongodb://{user}{rs_addr}/?replicaSet={SET_NAME}&{tls_option}")
                    .trim_end_matches('&')
                    .to_string(),
            ),
            (Topology::Sharded, cluster(&mongoses[..1])),
            (
                Topology::LoadBalanced,
                format!("mongodb://{user}{lb_addr}/?loadBalanced=true&{tls_option}")
                    .trim_end_matches('&')
                    .to_string(),
            ),
        ];
        let mut allowed = vec![single_addr, rs_addr, lb_addr];
        allowed.extend(&mongoses);
        let mut admin = engine::instantiate(&allowed, None).map_err(|e| format!("{e:#}"))?;
        let single_client = internal::connect(&mut admin, &uris[0].1).map_err(|f| f.0)?;
        let mut run = |cmd: Document| -> Result<Document, String> {
            let name = cmd.keys().next().cloned().unwrap_or_default();
            internal::command(&mut admin, single_client, "admin", &cmd)
                .map_err(|f| f.0)?
                .map_err(|e| format!("{name} through the proxy: {}", super::errors::describe(&e)))
        };
        run(doc! { "ping": 1 })
            .map_err(|e| format!("nx-27017 at {backend} does not answer: {e}"))?;
        let build = run(doc! { "buildInfo": 1 })?;
        let parameters = run(doc! { "getParameter": "*" })?;
        let info = requirements::Deployment {
            version: version(&build)?,
            parameters,
            auth,
        };
        Ok(Deployment {
            proxies: vec![
                (Topology::Single, single),
                (Topology::ReplicaSet, rs),
                (Topology::Sharded, sharded),
                (Topology::LoadBalanced, lb),
            ],
            uris,
            multi_mongos_uri,
            allowed,
            info,
            _admin: admin,
        })
    }

    pub fn uri(&self, t: Topology) -> &str {
        self.uris
            .iter()
            .find(|(u, _)| *u == t)
            .map(|(_, uri)| uri.as_str())
            .unwrap_or_default()
    }

    /// Makes every proxy present server version `v` to the connections made from now on.
    pub fn present_version(&self, v: [u64; 3]) -> Result<(), String> {
        let text = super::server_version::text(v);
        for (_, proxy) in &self.proxies {
            proxy
                .set_version(&text)
                .map_err(|e| format!("presenting server {text}: {e}"))?;
        }
        Ok(())
    }

    /// Switches fail points off on every member (every mongos) of `t`'s proxy, after a
    /// test that could not clean up itself, or that may have targeted one mongos.
    pub fn failpoints_off(&mut self, t: Topology, names: &[String]) {
        let Some((_, proxy)) = self.proxies.iter().find(|(u, _)| *u == t) else {
            return;
        };
        for member in 0..proxy.addresses().len() {
            for name in names {
                proxy.configure_fail_point(member, name, Mode::Off, Document::new());
            }
        }
    }
}

/// The user info of every URI: `user:password@` with auth on, else nothing.
fn credentials(auth: bool) -> String {
    match auth {
        true => format!("{AUTH_USER}:{AUTH_PASSWORD}@"),
        false => String::new(),
    }
}

/// `buildInfo.versionArray` (or `version`) as `[major, minor, patch]`.
fn version(build: &Document) -> Result<[u64; 3], String> {
    if let Ok(array) = build.get_array("versionArray") {
        let mut v = [0u64; 3];
        for (slot, part) in v.iter_mut().zip(array) {
            *slot = match part {
                Bson::Int32(i) => u64::try_from(*i).unwrap_or(0),
                Bson::Int64(i) => u64::try_from(*i).unwrap_or(0),
                _ => 0,
            };
        }
        return Ok(v);
    }
    let text = build
        .get_str("version")
        .map_err(|_| "buildInfo has neither versionArray nor version".to_string())?;
    parse_version(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_only_with_auth() {
        assert_eq!(credentials(false), "");
        let info = credentials(true);
        assert_eq!(info, format!("{AUTH_USER}:{AUTH_PASSWORD}@"));
        // Nothing in them needs percent-encoding in a URI.
        assert!(info[..info.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:".contains(&b)));
    }

    #[test]
    fn version_prefers_the_array() {
        assert_eq!(
            version(&doc! { "versionArray": [7, 0, 2, 0], "version": "x" }).unwrap(),
            [7, 0, 2]
        );
        assert_eq!(
            version(&doc! { "version": "6.0.1-rc0" }).unwrap(),
            [6, 0, 1]
        );
        assert!(version(&doc! {}).is_err());
    }
}
