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

/// What an operation needs: a writable server, or a readable one by mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Criteria {
    Write,
    Read(ReadMode),
}

/// The servers suitable for `criteria`, narrowed to the latency window.
pub fn suitable<'a>(
    topology: &'a TopologyDescription,
    criteria: Criteria,
    local_threshold: Duration,
) -> Vec<&'a ServerDescription> {
    let known = |kinds: &[ServerType]| -> Vec<&'a ServerDescription> {
        topology
            .servers
            .iter()
            .filter(|s| kinds.contains(&s.kind))
            .collect()
    };
    let candidates = match topology.kind {
        TopologyType::Unknown => Vec::new(),
        // Single: any known server; the user chose it (a direct connection).
        TopologyType::Single => topology
            .servers
            .iter()
            .filter(|s| s.kind != ServerType::Unknown)
            .collect(),
        TopologyType::Sharded => known(&[ServerType::Mongos]),
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
    };
    latency_window(candidates, local_threshold)
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
    fn writes_go_to_the_primary() {
        let t = topo(
            &[
                ("p:1", ServerType::RsPrimary, 5),
                ("s:1", ServerType::RsSecondary, 1),
            ],
            TopologyType::ReplicaSetWithPrimary,
        );
        assert_eq!(addrs(suitable(&t, Criteria::Write, WINDOW)), ["p:1"]);
        assert_eq!(
            addrs(suitable(&t, Criteria::Read(ReadMode::Secondary), WINDOW)),
            ["s:1"]
        );
    }

    #[test]
    fn preferred_modes_fall_back() {
        let t = topo(
            &[("s:1", ServerType::RsSecondary, 1)],
            TopologyType::ReplicaSetNoPrimary,
        );
        assert!(suitable(&t, Criteria::Write, WINDOW).is_empty());
        assert_eq!(
            addrs(suitable(
                &t,
                Criteria::Read(ReadMode::PrimaryPreferred),
                WINDOW
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
                WINDOW
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
            addrs(suitable(&t, Criteria::Read(ReadMode::Nearest), WINDOW)),
            ["a:1", "b:1"]
        );
    }

    #[test]
    fn unknown_topology_selects_nothing_and_single_selects_known() {
        let mut t = topo(&[("a:1", ServerType::Standalone, 1)], TopologyType::Unknown);
        assert!(suitable(&t, Criteria::Write, WINDOW).is_empty());
        t.kind = TopologyType::Single;
        assert_eq!(addrs(suitable(&t, Criteria::Write, WINDOW)), ["a:1"]);
        t.servers[0].kind = ServerType::Unknown;
        assert!(suitable(&t, Criteria::Write, WINDOW).is_empty());
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
