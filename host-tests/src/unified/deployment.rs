//! The test deployment: five failpoint proxies in front of one nx-27017 (a
//! standalone, a replica set of [`RS_MEMBERS`], a sharded cluster of [`MONGOSES`]
//! mongoses, a load balancer in front of one mongos and one in front of
//! [`MONGOSES`]), and an admin instance of the
//! component on this thread for probing and for cleaning up after abandoned tests.
//! With auth on, the proxies require authentication and know one root user, whose
//! credentials every URI carries. A run without `--auth` keeps a second deployment
//! beside its own, with auth and TLS, for the tests whose `runOnRequirements` need
//! authentication ([`Deployments`], [`place`]).

use super::engine;
use super::internal;
use super::requirements::{self, parse_version, Topology, NEEDS_AUTH, UNMET};
use super::server_version;
use crate::guest::Guest;
use bson::{doc, Bson, Document};
use mongo_wasi_proxy::failpoint::Mode;
use mongo_wasi_proxy::testcerts::{ClientAuth, TestCerts};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, User};
use std::net::SocketAddr;
use std::sync::OnceLock;

pub const SET_NAME: &str = "rs0";
/// Mongoses of the sharded cluster: `useMultipleMongoses` needs more than one.
pub const MONGOSES: usize = 2;
/// Data-bearing members of the replica set: a primary and two secondaries, as
/// the spec tests' own CI deploys (SDAM tests count each member's events).
pub const RS_MEMBERS: usize = 3;
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
    /// A load balancer in front of [`MONGOSES`] mongoses (`useMultipleMongoses` in
    /// load-balanced mode: the spec's `MULTI_MONGOS_LB_URI`).
    pub multi_lb_uri: String,
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
            let certs = certs();
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
        let rs = start(ProxyConfig::replica_set(backend, SET_NAME, RS_MEMBERS))?;
        let sharded = start(ProxyConfig::sharded(backend, MONGOSES))?;
        let lb = start(ProxyConfig::load_balanced(backend))?;
        let multi_lb = start(ProxyConfig::load_balanced_multi(backend, MONGOSES))?;
        let lb_addr = lb.addresses()[0];
        let multi_lb_addr = multi_lb.addresses()[0];
        let single_addr = single.addresses()[0];
        let members = rs.addresses();
        let mongoses = sharded.addresses();
        let user = credentials(auth);
        let tls_option = if tls { "tls=true" } else { "" };
        // A client URI naming `hosts`, with `option` (if any) and TLS's.
        let uri = |hosts: &[SocketAddr], option: &str| {
            let hosts: Vec<String> = hosts.iter().map(SocketAddr::to_string).collect();
            let options: Vec<&str> = [option, tls_option]
                .into_iter()
                .filter(|o| !o.is_empty())
                .collect();
            format!("mongodb://{user}{}/?{}", hosts.join(","), options.join("&"))
                .trim_end_matches('?')
                .to_string()
        };
        let multi_mongos_uri = uri(&mongoses, "");
        let balanced = "loadBalanced=true";
        let uris = vec![
            (Topology::Single, uri(&[single_addr], "")),
            (
                Topology::ReplicaSet,
                uri(&members[..1], &format!("replicaSet={SET_NAME}")),
            ),
            (Topology::Sharded, uri(&mongoses[..1], "")),
            (Topology::LoadBalanced, uri(&[lb_addr], balanced)),
        ];
        let mut allowed = vec![single_addr, lb_addr, multi_lb_addr];
        allowed.extend(&members);
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
                (Topology::LoadBalanced, multi_lb),
            ],
            uris,
            multi_mongos_uri,
            multi_lb_uri: uri(&[multi_lb_addr], balanced),
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

    /// Switches fail points off on every member (every mongos) of `t`'s proxies, after a
    /// test that could not clean up itself, or that may have targeted one mongos.
    pub fn failpoints_off(&mut self, t: Topology, names: &[String]) {
        for (_, proxy) in self.proxies.iter().filter(|(u, _)| *u == t) {
            for member in 0..proxy.addresses().len() {
                for name in names {
                    proxy.configure_fail_point(member, name, Mode::Off, Document::new());
                }
            }
        }
    }
}

/// The run's certificates: one CA for every TLS deployment of the run, since the
/// CA clients trust is process-wide (`tls::set_ca`) and a `--tls` run has two.
fn certs() -> &'static TestCerts {
    static CERTS: OnceLock<TestCerts> = OnceLock::new();
    CERTS.get_or_init(TestCerts::generate)
}

/// Which of a run's [`Deployments`] a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// The one the run's flags describe.
    Main,
    /// The auth+TLS one a run without `--auth` keeps for tests that need authentication.
    AuthTls,
}

/// The deployments of a run: the one its flags describe and, in a run without `--auth`,
/// one with auth and TLS (the shape of a production deployment, as `--auth --tls`), so
/// that every test runs on a deployment that meets its `runOnRequirements`.
pub struct Deployments {
    pub main: Deployment,
    pub auth_tls: Option<Deployment>,
}

impl Deployments {
    pub fn start(backend: SocketAddr, auth: bool, tls: bool) -> Result<Deployments, String> {
        let main = Deployment::start(backend, auth, tls)?;
        let auth_tls = match auth {
            true => None,
            false => Some(Deployment::start(backend, true, true)?),
        };
        Ok(Deployments { main, auth_tls })
    }

    /// Where a test with these requirements runs ([`place`]).
    pub fn place(
        &self,
        file_reqs: Option<&Bson>,
        test_reqs: Option<&Bson>,
    ) -> Result<(Which, Topology, [u64; 3]), String> {
        let auth_tls = self.auth_tls.as_ref().map(|d| &d.info);
        place(file_reqs, test_reqs, &self.main.info, auth_tls)
    }

    pub fn get(&mut self, which: Which) -> &mut Deployment {
        match (which, &mut self.auth_tls) {
            (Which::AuthTls, Some(d)) => d,
            _ => &mut self.main,
        }
    }
}

/// The one rule of where a test runs: on the main deployment when its requirements
/// allow (with the topology and version [`server_version::choose`] gives), else on the
/// auth+TLS one when they allow that. `Err` says why neither does: the main
/// deployment's reason, or when that names authentication, the auth+TLS one's.
pub fn place(
    file_reqs: Option<&Bson>,
    test_reqs: Option<&Bson>,
    main: &requirements::Deployment,
    auth_tls: Option<&requirements::Deployment>,
) -> Result<(Which, Topology, [u64; 3]), String> {
    let why = match server_version::choose(file_reqs, test_reqs, main) {
        Ok((t, v)) => return Ok((Which::Main, t, v)),
        Err(why) => why,
    };
    let Some(auth_tls) = auth_tls else {
        return Err(why);
    };
    match server_version::choose(file_reqs, test_reqs, auth_tls) {
        Ok((t, v)) => Ok((Which::AuthTls, t, v)),
        Err(also) if why.contains(NEEDS_AUTH) => {
            let rest = also.strip_prefix(UNMET).unwrap_or(&also);
            Err(format!("{UNMET} with auth and TLS either{rest}"))
        }
        Err(_) => Err(why),
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
    fn a_test_goes_to_the_auth_tls_deployment_only_when_it_needs_auth() {
        use bson::bson;
        let main = requirements::Deployment {
            version: [7, 0, 0],
            parameters: doc! { "authenticationMechanisms": ["SCRAM-SHA-1", "SCRAM-SHA-256"] },
            auth: false,
        };
        let secure = requirements::Deployment {
            auth: true,
            ..main.clone()
        };
        let at = |file: Bson, test: Option<Bson>, with: Option<&requirements::Deployment>| {
            place(Some(&file), test.as_ref(), &main, with)
        };
        // Met without auth: the main deployment, even when the other could run it.
        let any = at(bson!([{"minServerVersion": "4.4"}]), None, Some(&secure));
        assert_eq!(any.unwrap(), (Which::Main, Topology::ReplicaSet, [8, 2, 1]));
        let off = at(bson!([{"auth": false}]), None, Some(&secure)).unwrap();
        assert_eq!(off.0, Which::Main);
        // Needs auth: the auth+TLS deployment, same topology and version rules.
        let handshake = bson!([{"minServerVersion": "4.2", "auth": true,
            "topologies": ["single", "replicaset", "sharded"]}]);
        assert_eq!(
            at(handshake.clone(), None, Some(&secure)).unwrap(),
            (Which::AuthTls, Topology::ReplicaSet, [8, 2, 1])
        );
        let single = bson!([{"topologies": ["single"]}]);
        assert_eq!(
            at(bson!([{"auth": true}]), Some(single), Some(&secure)).unwrap(),
            (Which::AuthTls, Topology::Single, [8, 2, 1])
        );
        // Without one (an --auth run), the main deployment's reason.
        let none = at(handshake, None, None).unwrap_err();
        assert!(
            none.starts_with(UNMET) && none.contains(NEEDS_AUTH),
            "{none}"
        );
        // Met by neither: the reason names what the auth+TLS deployment lacks too.
        let oidc = bson!([{"auth": true, "authMechanism": "MONGODB-OIDC"}]);
        let why = at(oidc, None, Some(&secure)).unwrap_err();
        assert!(why.starts_with(UNMET), "{why}");
        assert!(
            why.contains("with auth and TLS either: needs auth mechanism MONGODB-OIDC"),
            "{why}"
        );
        assert!(!why.contains(NEEDS_AUTH), "{why}");
        // Not met for another reason: the main deployment's reason, unchanged.
        let future = bson!([{"minServerVersion": "9.0"}]);
        let why = at(future.clone(), None, Some(&secure)).unwrap_err();
        assert_eq!(why, at(future, None, None).unwrap_err());
        assert!(!why.contains("auth"), "{why}");
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
