//! `runOnRequirements` against what the test deployment is: server version,
//! topology, parameters, authentication (on with `--auth`), and the features it does not
//! have (CSFLE, serverless).

use super::matching::number;
use bson::{Bson, Document};
use std::fmt;

/// The topologies spec-runner can present (all through the failpoint proxy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topology {
    ReplicaSet,
    Single,
    /// Two mongoses, each with fail points of its own.
    Sharded,
    /// A load balancer in front of a mongos; clients say `loadBalanced=true`.
    LoadBalanced,
}

impl Topology {
    /// The order tests are placed in: most tests need, or at least allow, a replica
    /// set; a cluster gets only the tests that need one.
    pub const PREFERENCE: [Topology; 4] = [
        Topology::ReplicaSet,
        Topology::Single,
        Topology::Sharded,
        Topology::LoadBalanced,
    ];

    /// The unified format's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Topology::ReplicaSet => "replicaset",
            Topology::Single => "single",
            Topology::Sharded => "sharded",
            Topology::LoadBalanced => "load-balanced",
        }
    }

    /// Whether a `topologies` entry names it. The cluster's mongoses front the
    /// same backend as the replica set presentation, which accepts transactions
    /// and retryable writes like a replica-set shard: it is `sharded-replicaset` too.
    fn named(self, name: &str) -> bool {
        name == self.name() || (self == Topology::Sharded && name == "sharded-replicaset")
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the requirements are evaluated against.
#[derive(Clone, Debug)]
pub struct Deployment {
    /// `buildInfo.versionArray`'s first three elements.
    pub version: [u64; 3],
    /// `{getParameter: "*"}`'s reply.
    pub parameters: Document,
    /// The proxies run with auth on and every client authenticates (`--auth`).
    pub auth: bool,
}

/// A `major[.minor[.patch]]` version; anything past the patch is dropped.
pub fn parse_version(text: &str) -> Result<[u64; 3], String> {
    let mut out = [0u64; 3];
    let parts: Vec<&str> = text.split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(format!("bad version string {text:?}"));
    }
    for (slot, part) in out.iter_mut().zip(&parts) {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        *slot = digits
            .parse()
            .map_err(|_| format!("bad version string {text:?}"))?;
    }
    Ok(out)
}

fn show_version(v: [u64; 3]) -> String {
    format!("{}.{}.{}", v[0], v[1], v[2])
}

/// Whether any one of `reqs` (a runOnRequirements array) holds; `Err` says why none does.
/// An absent or empty array always holds.
pub fn satisfied(reqs: Option<&Bson>, topology: Topology, d: &Deployment) -> Result<(), String> {
    let Some(reqs) = reqs else { return Ok(()) };
    let Bson::Array(reqs) = reqs else {
        return Err("runOnRequirements is not an array".into());
    };
    if reqs.is_empty() {
        return Ok(());
    }
    let mut why = Vec::new();
    for req in reqs {
        match req {
            Bson::Document(req) => match one(req, topology, d) {
                Ok(()) => return Ok(()),
                Err(e) => why.push(e),
            },
            other => why.push(format!("malformed requirement {other}")),
        }
    }
    why.dedup();
    Err(why.join(" or "))
}

fn one(req: &Document, topology: Topology, d: &Deployment) -> Result<(), String> {
    for (key, value) in req {
        match key.as_str() {
            "minServerVersion" | "maxServerVersion" => {
                let text = value.as_str().ok_or(format!("{key} is not a string"))?;
                let bound = parse_version(text)?;
                let (ok, rel) = match key.as_str() {
                    "minServerVersion" => (d.version >= bound, ">="),
                    _ => (d.version <= bound, "<="),
                };
                if !ok {
                    return Err(format!(
                        "needs server {rel} {text} (the proxy reports {})",
                        show_version(d.version)
                    ));
                }
            }
            "topologies" => {
                let list = value.as_array().ok_or("topologies is not an array")?;
                let names: Vec<&str> = list.iter().filter_map(Bson::as_str).collect();
                if !names.iter().any(|n| topology.named(n)) {
                    return Err(format!("needs topology {}", names.join("|")));
                }
            }
            "serverless" => match value.as_str() {
                Some("require") => return Err("needs Atlas Serverless".into()),
                Some("forbid" | "allow") => {}
                _ => return Err(format!("bad serverless value {value}")),
            },
            "auth" => match (value.as_bool(), d.auth) {
                (Some(true), false) => return Err(NEEDS_AUTH.into()),
                (Some(false), true) => {
                    return Err("refuses authentication (spec-runner runs with --auth)".into())
                }
                (Some(_), _) => {}
                (None, _) => return Err(format!("bad auth value {value}")),
            },
            // The unified format: the mechanism must be one of the server's
            // `authenticationMechanisms`, compared case-insensitively.
            "authMechanism" => {
                let want = value.as_str().ok_or("authMechanism is not a string")?;
                let offered = d
                    .parameters
                    .get_array("authenticationMechanisms")
                    .map(|list| list.iter().filter_map(Bson::as_str).collect::<Vec<_>>())
                    .unwrap_or_default();
                if !offered.iter().any(|m| m.eq_ignore_ascii_case(want)) {
                    return Err(format!(
                        "needs auth mechanism {want} (the server offers {})",
                        offered.join("|")
                    ));
                }
            }
            "csfle" => {
                if value.as_bool() == Some(true) {
                    return Err("needs client-side field level encryption".into());
                }
            }
            "serverParameters" => {
                let wanted = value
                    .as_document()
                    .ok_or("serverParameters is not a document")?;
                for (name, want) in wanted {
                    let have = d.parameters.get(name);
                    if !have.is_some_and(|h| parameter_eq(want, h)) {
                        return Err(format!(
                            "needs server parameter {name}={want} (have {})",
                            have.map_or("none".to_string(), ToString::to_string)
                        ));
                    }
                }
            }
            other => return Err(format!("unknown requirement {other:?}")),
        }
    }
    Ok(())
}

/// Numbers compare by value (getParameter answers ints where tests write doubles).
fn parameter_eq(want: &Bson, have: &Bson) -> bool {
    match (number(want), number(have)) {
        (Some(w), Some(h)) => w == h,
        _ => want == have,
    }
}

/// How the reason of a test skipped by its `runOnRequirements` begins.
pub const UNMET: &str = "runOnRequirements not met";

/// A requirement's `auth: true` against a deployment without auth. A run without
/// `--auth` places such a test on its auth+TLS deployment (`deployment::place`).
pub const NEEDS_AUTH: &str = "needs authentication";

/// The first topology (in preference order) that the file's and the test's
/// requirements both allow; `Err` says why none does (it begins with [`UNMET`]).
pub fn choose(
    file_reqs: Option<&Bson>,
    test_reqs: Option<&Bson>,
    d: &Deployment,
) -> Result<Topology, String> {
    let mut reasons = Vec::new();
    for t in Topology::PREFERENCE {
        let both = satisfied(file_reqs, t, d).and_then(|()| satisfied(test_reqs, t, d));
        match both {
            Ok(()) => return Ok(t),
            Err(e) => reasons.push(e),
        }
    }
    // The reason for the preferred topology says the most (version limits come first).
    reasons.dedup();
    Err(format!("{UNMET}: {}", reasons.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn deployment() -> Deployment {
        Deployment {
            version: [7, 0, 0],
            parameters: doc! {
                "enableTestCommands": true,
                "transactionLifetimeLimitSeconds": 60,
                "authenticationMechanisms": ["MONGODB-X509", "PLAIN", "SCRAM-SHA-1", "SCRAM-SHA-256"],
            },
            auth: false,
        }
    }

    fn with_auth() -> Deployment {
        Deployment {
            auth: true,
            ..deployment()
        }
    }

    fn check(reqs: Bson, t: Topology) -> Result<(), String> {
        satisfied(Some(&reqs), t, &deployment())
    }

    #[test]
    fn versions_compare_numerically_and_drop_suffixes() {
        assert_eq!(parse_version("4.0.10").unwrap(), [4, 0, 10]);
        assert_eq!(
            parse_version("4.9.0-alpha4-271-g7d5cf02").unwrap(),
            [4, 9, 0]
        );
        assert_eq!(parse_version("5").unwrap(), [5, 0, 0]);
        assert!(parse_version("x.y").is_err());
        assert!(parse_version("4.0.10") > parse_version("4.0.9"));
        check(bson!([{"minServerVersion": "4.4"}]), Topology::Single).unwrap();
        check(bson!([{"maxServerVersion": "7.0"}]), Topology::Single).unwrap();
        let err = check(bson!([{"minServerVersion": "8.0"}]), Topology::Single).unwrap_err();
        assert!(err.contains(">= 8.0") && err.contains("7.0.0"), "{err}");
        assert!(check(bson!([{"maxServerVersion": "4.2.99"}]), Topology::Single).is_err());
    }

    #[test]
    fn any_one_requirement_suffices() {
        let reqs = bson!([{"topologies": ["sharded"]}, {"topologies": ["replicaset"]}]);
        check(reqs.clone(), Topology::ReplicaSet).unwrap();
        let err = check(reqs, Topology::Single).unwrap_err();
        assert_eq!(err, "needs topology sharded or needs topology replicaset");
        check(bson!([]), Topology::Single).unwrap();
        satisfied(None, Topology::Single, &deployment()).unwrap();
    }

    #[test]
    fn features_the_deployment_lacks() {
        assert!(check(bson!([{"serverless": "require"}]), Topology::Single).is_err());
        check(bson!([{"serverless": "forbid"}]), Topology::Single).unwrap();
        assert!(check(bson!([{"csfle": true}]), Topology::Single).is_err());
        check(bson!([{"csfle": false}]), Topology::Single).unwrap();
        assert!(check(bson!([{"bogus": 1}]), Topology::Single)
            .unwrap_err()
            .contains("unknown requirement"));
    }

    #[test]
    fn auth_follows_the_runs_auth_flag() {
        let without = deployment();
        let with = with_auth();
        let run = |reqs: Bson, d: &Deployment| satisfied(Some(&reqs), Topology::Single, d);
        let err = run(bson!([{"auth": true}]), &without).unwrap_err();
        assert_eq!(err, NEEDS_AUTH);
        run(bson!([{"auth": true}]), &with).unwrap();
        run(bson!([{"auth": false}]), &without).unwrap();
        let err = run(bson!([{"auth": false}]), &with).unwrap_err();
        assert!(err.contains("refuses authentication"), "{err}");
        assert!(run(bson!([{"auth": "yes"}]), &with).is_err());
        // No requirement: runs either way.
        run(bson!([{"minServerVersion": "4.4"}]), &with).unwrap();
        // The SDAM auth-error files: auth, a version and topologies together.
        let sdam = bson!([{"minServerVersion": "4.4", "auth": true, "serverless": "forbid",
            "topologies": ["single", "replicaset", "sharded"]}]);
        assert_eq!(
            choose(Some(&sdam), None, &with).unwrap(),
            Topology::ReplicaSet
        );
        assert!(choose(Some(&sdam), None, &without)
            .unwrap_err()
            .contains(NEEDS_AUTH));
    }

    #[test]
    fn auth_mechanism_must_be_offered_by_the_server() {
        let d = with_auth();
        let run = |reqs: Bson| satisfied(Some(&reqs), Topology::Single, &d);
        run(bson!([{"authMechanism": "SCRAM-SHA-256"}])).unwrap();
        run(bson!([{"authMechanism": "scram-sha-1"}])).unwrap();
        run(bson!([{"auth": true, "authMechanism": "PLAIN"}])).unwrap();
        let oidc = run(bson!([{"minServerVersion": "7.0", "auth": true,
            "authMechanism": "MONGODB-OIDC", "serverless": "forbid"}]))
        .unwrap_err();
        assert!(
            oidc.contains("MONGODB-OIDC") && oidc.contains("SCRAM-SHA-256"),
            "{oidc}"
        );
        let none = Deployment {
            parameters: doc! {},
            ..with_auth()
        };
        assert!(satisfied(
            Some(&bson!([{"authMechanism": "SCRAM-SHA-1"}])),
            Topology::Single,
            &none
        )
        .is_err());
        assert!(run(bson!([{"authMechanism": 1}])).is_err());
    }

    #[test]
    fn server_parameters_compare_numbers_by_value() {
        let ok = bson!([{"serverParameters": {"transactionLifetimeLimitSeconds": 60.0}}]);
        check(ok, Topology::Single).unwrap();
        let missing = bson!([{"serverParameters": {"nope": true}}]);
        assert!(check(missing, Topology::Single)
            .unwrap_err()
            .contains("have none"));
    }

    #[test]
    fn choose_prefers_a_replica_set_and_explains_a_skip() {
        let d = deployment();
        let any = choose(None, None, &d).unwrap();
        assert_eq!(any, Topology::ReplicaSet);
        let single = bson!([{"topologies": ["single"]}]);
        assert_eq!(choose(None, Some(&single), &d).unwrap(), Topology::Single);
        let sharded =
            bson!([{"minServerVersion": "4.1.8", "topologies": ["sharded", "load-balanced"]}]);
        assert_eq!(choose(Some(&sharded), None, &d).unwrap(), Topology::Sharded);
        let sharded_rs = bson!([{"topologies": ["sharded-replicaset"]}]);
        assert_eq!(
            choose(Some(&sharded_rs), None, &d).unwrap(),
            Topology::Sharded
        );
        let lb = bson!([{"topologies": ["load-balanced"]}]);
        assert_eq!(choose(Some(&lb), None, &d).unwrap(), Topology::LoadBalanced);
        let serverless = bson!([{"topologies": ["load-balanced"], "serverless": "require"}]);
        assert!(choose(Some(&serverless), None, &d).is_err());
        let file = bson!([{"topologies": ["replicaset"]}]);
        let test = bson!([{"topologies": ["single"]}]);
        assert!(choose(Some(&file), Some(&test), &d).is_err());
    }
}
