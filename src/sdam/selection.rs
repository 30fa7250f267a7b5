//! Server selection (Server Selection spec), sans I/O: which known servers
//! suit an operation, and the latency window among them.

use super::{ServerDescription, ServerType, TopologyDescription, TopologyType};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    Primary,
    PrimaryPreferred,
    Secondary,
    SecondaryPreferred,
    Nearest,
}

impl ReadMode {
    pub fn parse(s: &str) -> Option<ReadMode> {
        Some(match s.to_ascii_lowercase().as_str() {
            "primary" => ReadMode::Primary,
            "primarypreferred" => ReadMode::PrimaryPreferred,
            "secondary" => ReadMode::Secondary,
            "secondarypreferred" => ReadMode::SecondaryPreferred,
            "nearest" => ReadMode::Nearest,
            _ => return None,
        })
    }
}

impl ReadMode {
    /// The mode's name in a `$readPreference` document.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadMode::Primary => "primary",
            ReadMode::PrimaryPreferred => "primaryPreferred",
            ReadMode::Secondary => "secondary",
            ReadMode::SecondaryPreferred => "secondaryPreferred",
            ReadMode::Nearest => "nearest",
        }
    }
}

/// The `$readPreference` mode a read sends over OP_MSG (Server Selection
/// spec, "Passing read preference to mongod and mongos"): none for primary,
/// the server's default, nor in a Single topology (this driver's direct
/// connections read from the one server as it is); otherwise the mode, so
/// that a secondary serves it.
pub fn read_preference_mode(kind: TopologyType, criteria: Criteria) -> Option<&'static str> {
    match (kind, criteria) {
        (TopologyType::Single | TopologyType::Unknown, _) => None,
        (_, Criteria::Read(mode)) if mode != ReadMode::Primary => Some(mode.as_str()),
        _ => None,
    }
}

/// What an operation needs: a writable server, or a readable one by mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Criteria {
    Write,
    Read(ReadMode),
}

/// The servers suitable for `criteria`, narrowed to the latency window.
/// Deprioritized servers (where a retried operation just failed) are left
/// out unless no other server is suitable (Server Selection spec, "Find
/// suitable servers").
pub fn suitable<'a>(
    topology: &'a TopologyDescription,
    criteria: Criteria,
    local_threshold: Duration,
    deprioritized: &[&str],
) -> Vec<&'a ServerDescription> {
    let preferred: Vec<&ServerDescription> = topology
        .servers
        .iter()
        .filter(|s| !deprioritized.contains(&s.address.as_str()))
        .collect();
    let mut found = candidates(topology.kind, preferred, criteria);
    if found.is_empty() && !deprioritized.is_empty() {
        found = candidates(topology.kind, topology.servers.iter().collect(), criteria);
    }
    latency_window(found, local_threshold)
}

/// The candidates among `servers` by topology type and operation type.
fn candidates(
    kind: TopologyType,
    servers: Vec<&ServerDescription>,
    criteria: Criteria,
) -> Vec<&ServerDescription> {
    let known = |kinds: &[ServerType]| -> Vec<&ServerDescription> {
        servers
            .iter()
            .copied()
            .filter(|s| kinds.contains(&s.kind))
            .collect()
    };
    match kind {
        TopologyType::Unknown => Vec::new(),
        // Single: any known server; the user chose it (a direct connection).
        TopologyType::Single => servers
            .iter()
            .copied()
            .filter(|s| s.kind != ServerType::Unknown)
            .collect(),
        TopologyType::Sharded => known(&[ServerType::Mongos]),
        // Load Balancer spec: the load balancer, whatever the operation.
        TopologyType::LoadBalanced => known(&[ServerType::LoadBalancer]),
        TopologyType::ReplicaSetNoPrimary | TopologyType::ReplicaSetWithPrimary => {
            let primary = || known(&[ServerType::RsPrimary]);
            let secondaries = || known(&[ServerType::RsSecondary]);
            match criteria {
                Criteria::Write | Criteria::Read(ReadMode::Primary) => primary(),
                Criteria::Read(ReadMode::PrimaryPreferred) => {
                    let p = primary();
                    if p.is_empty() {
                        secondaries()
                    } else {
                        p
                    }
                }
                Criteria::Read(ReadMode::Secondary) => secondaries(),
                Criteria::Read(ReadMode::SecondaryPreferred) => {
                    let s = secondaries();
                    if s.is_empty() {
                        primary()
                    } else {
                        s
                    }
                }
                Criteria::Read(ReadMode::Nearest) => {
                    known(&[ServerType::RsPrimary, ServerType::RsSecondary])
                }
            }
        }
    }
}

fn latency_window(
    servers: Vec<&ServerDescription>,
    threshold: Duration,
) -> Vec<&ServerDescription> {
    let Some(fastest) = servers.iter().filter_map(|s| s.average_rtt).min() else {
        return servers;
    };
    servers
        .into_iter()
        .filter(|s| s.average_rtt.is_none_or(|rtt| rtt <= fastest + threshold))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::HelloReply;

    fn topo(members: &[(&str, ServerType, u64)], kind: TopologyType) -> TopologyDescription {
        TopologyDescription {
            kind,
            set_name: Some("rs0".into()),
            logical_session_timeout_minutes: None,
            servers: members
                .iter()
                .map(|(a, k, rtt)| ServerDescription {
                    address: a.to_string(),
                    kind: *k,
                    hello: Some(HelloReply::default()),
                    error: None,
                    average_rtt: Some(Duration::from_millis(*rtt)),
                })
                .collect(),
        }
    }

    fn addrs(v: Vec<&ServerDescription>) -> Vec<&str> {
        v.iter().map(|s| s.address.as_str()).collect()
    }

    const WINDOW: Duration = Duration::from_millis(15);

    #[test]
    fn read_preference_is_sent_when_not_primary_outside_single() {
        use TopologyType::*;
        let nearest = Criteria::Read(ReadMode::Nearest);
        let preferred = Criteria::Read(ReadMode::PrimaryPreferred);
        assert_eq!(
            read_preference_mode(ReplicaSetWithPrimary, nearest),
            Some("nearest")
        );
        assert_eq!(
            read_preference_mode(Sharded, preferred),
            Some("primaryPreferred")
        );
        assert_eq!(
            read_preference_mode(ReplicaSetNoPrimary, Criteria::Read(ReadMode::Primary)),
            None
        );
        assert_eq!(
            read_preference_mode(ReplicaSetWithPrimary, Criteria::Write),
            None
        );
        assert_eq!(read_preference_mode(Single, nearest), None);
        for s in [
            "primary",
            "primaryPreferred",
            "secondary",
            "secondaryPreferred",
            "nearest",
        ] {
            assert_eq!(ReadMode::parse(s).unwrap().as_str(), s);
        }
    }

    #[test]
    fn writes_go_to_the_primary() {
        let t = topo(
            &[
                ("p:1", ServerType::RsPrimary, 5),
                ("s:1", ServerType::RsSecondary, 1),
            ],
            TopologyType::ReplicaSetWithPrimary,
        );
        assert_eq!(addrs(suitable(&t, Criteria::Write, WINDOW, &[])), ["p:1"]);
        assert_eq!(
            addrs(suitable(
                &t,
                Criteria::Read(ReadMode::Secondary),
                WINDOW,
                &[]
            )),
            ["s:1"]
        );
    }

    #[test]
    fn preferred_modes_fall_back() {
        let t = topo(
            &[("s:1", ServerType::RsSecondary, 1)],
            TopologyType::ReplicaSetNoPrimary,
        );
        assert!(suitable(&t, Criteria::Write, WINDOW, &[]).is_empty());
        assert_eq!(
            addrs(suitable(
                &t,
                Criteria::Read(ReadMode::PrimaryPreferred),
                WINDOW,
                &[]
            )),
            ["s:1"]
        );
        let t = topo(
            &[("p:1", ServerType::RsPrimary, 1)],
            TopologyType::ReplicaSetWithPrimary,
        );
        assert_eq!(
            addrs(suitable(
                &t,
                Criteria::Read(ReadMode::SecondaryPreferred),
                WINDOW,
                &[]
            )),
            ["p:1"]
        );
    }

    #[test]
    fn latency_window_drops_slow_servers() {
        let t = topo(
            &[
                ("a:1", ServerType::RsSecondary, 5),
                ("b:1", ServerType::RsSecondary, 19),
                ("c:1", ServerType::RsSecondary, 30),
            ],
            TopologyType::ReplicaSetNoPrimary,
        );
        assert_eq!(
            addrs(suitable(&t, Criteria::Read(ReadMode::Nearest), WINDOW, &[])),
            ["a:1", "b:1"]
        );
    }

    #[test]
    fn unknown_topology_selects_nothing_and_single_selects_known() {
        let mut t = topo(&[("a:1", ServerType::Standalone, 1)], TopologyType::Unknown);
        assert!(suitable(&t, Criteria::Write, WINDOW, &[]).is_empty());
        t.kind = TopologyType::Single;
        assert_eq!(addrs(suitable(&t, Criteria::Write, WINDOW, &[])), ["a:1"]);
        t.servers[0].kind = ServerType::Unknown;
        assert!(suitable(&t, Criteria::Write, WINDOW, &[]).is_empty());
    }

    #[test]
    fn deprioritized_mongos_is_avoided_when_another_is_suitable() {
        let mut t = topo(
            &[
                ("m:1", ServerType::Mongos, 1),
                ("m:2", ServerType::Mongos, 1),
            ],
            TopologyType::Sharded,
        );
        let read = Criteria::Read(ReadMode::Primary);
        assert_eq!(addrs(suitable(&t, read, WINDOW, &["m:1"])), ["m:2"]);
        assert_eq!(
            addrs(suitable(&t, Criteria::Write, WINDOW, &["m:2"])),
            ["m:1"]
        );
        // The other mongos is down: the deprioritized one is still selected.
        t.servers[1].kind = ServerType::Unknown;
        assert_eq!(addrs(suitable(&t, read, WINDOW, &["m:1"])), ["m:1"]);
    }

    #[test]
    fn deprioritized_mongos_is_selected_when_alone() {
        let t = topo(&[("m:1", ServerType::Mongos, 1)], TopologyType::Sharded);
        assert_eq!(
            addrs(suitable(
                &t,
                Criteria::Read(ReadMode::Nearest),
                WINDOW,
                &["m:1"]
            )),
            ["m:1"]
        );
    }

    #[test]
    fn deprioritization_applies_before_the_latency_window() {
        // The fast mongos failed: the slow one is the only one left, so it is chosen
        // even though it lies outside the window the fast one anchored.
        let t = topo(
            &[
                ("fast:1", ServerType::Mongos, 1),
                ("slow:1", ServerType::Mongos, 100),
            ],
            TopologyType::Sharded,
        );
        assert_eq!(
            addrs(suitable(&t, Criteria::Write, WINDOW, &[])),
            ["fast:1"]
        );
        assert_eq!(
            addrs(suitable(&t, Criteria::Write, WINDOW, &["fast:1"])),
            ["slow:1"]
        );
    }

    #[test]
    fn preferred_modes_fall_back_past_deprioritized_members() {
        // primaryPreferred with the primary deprioritized: a secondary (spec note).
        let t = topo(
            &[
                ("p:1", ServerType::RsPrimary, 1),
                ("s:1", ServerType::RsSecondary, 1),
            ],
            TopologyType::ReplicaSetWithPrimary,
        );
        let pp = Criteria::Read(ReadMode::PrimaryPreferred);
        assert_eq!(addrs(suitable(&t, pp, WINDOW, &["p:1"])), ["s:1"]);
        // secondaryPreferred with every secondary deprioritized: the primary.
        let sp = Criteria::Read(ReadMode::SecondaryPreferred);
        assert_eq!(addrs(suitable(&t, sp, WINDOW, &["s:1"])), ["p:1"]);
        // primary mode: the deprioritized primary is still the only choice.
        assert_eq!(
            addrs(suitable(&t, Criteria::Write, WINDOW, &["p:1"])),
            ["p:1"]
        );
    }

    #[test]
    fn read_mode_parses_case_insensitively() {
        assert_eq!(
            ReadMode::parse("secondaryPreferred"),
            Some(ReadMode::SecondaryPreferred)
        );
        assert_eq!(ReadMode::parse("bogus"), None);
    }
}
