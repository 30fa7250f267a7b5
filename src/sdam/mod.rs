//! Server Discovery and Monitoring, sans I/O: server and topology
//! descriptions updated from hello replies. The client runs it
//! single-threaded: servers are checked when selection needs them.

pub mod rtt;
pub mod selection;

use crate::handshake::HelloReply;
use crate::uri::HostAddress;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerType {
    Unknown,
    Standalone,
    Mongos,
    RsPrimary,
    RsSecondary,
    RsArbiter,
    RsOther,
    RsGhost,
    /// The one server of a load-balanced topology (Load Balancer spec).
    LoadBalancer,
}

impl ServerType {
    pub fn from_hello(h: &HelloReply, is_replica_set_ghost: bool) -> ServerType {
        if is_replica_set_ghost {
            ServerType::RsGhost
        } else if h.is_mongos {
            ServerType::Mongos
        } else if h.set_name.is_some() {
            if h.hidden {
                ServerType::RsOther
            } else if h.is_writable_primary {
                ServerType::RsPrimary
            } else if h.secondary {
                ServerType::RsSecondary
            } else if h.arbiter_only {
                ServerType::RsArbiter
            } else {
                ServerType::RsOther
            }
        } else {
            ServerType::Standalone
        }
    }

    pub fn is_data_bearing(self) -> bool {
        matches!(
            self,
            ServerType::Standalone
                | ServerType::Mongos
                | ServerType::RsPrimary
                | ServerType::RsSecondary
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyType {
    Single,
    Unknown,
    Sharded,
    ReplicaSetNoPrimary,
    ReplicaSetWithPrimary,
    /// `loadBalanced=true`: one load balancer, never monitored.
    LoadBalanced,
}

#[derive(Debug, Clone)]
pub struct ServerDescription {
    /// "host:port", lower-cased host.
    pub address: String,
    pub kind: ServerType,
    pub hello: Option<HelloReply>,
    pub error: Option<String>,
    pub average_rtt: Option<std::time::Duration>,
}

impl ServerDescription {
    pub fn unknown(address: String) -> Self {
        ServerDescription {
            address,
            kind: ServerType::Unknown,
            hello: None,
            error: None,
            average_rtt: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TopologyDescription {
    pub kind: TopologyType,
    pub set_name: Option<String>,
    pub servers: Vec<ServerDescription>,
    pub logical_session_timeout_minutes: Option<i64>,
}

/// SDAM error handling: a "not writable primary" or "node is recovering"
/// error marks the server Unknown. Returns whether the pool must be cleared
/// too (shutdown errors), or `None` when the error says nothing about state.
pub fn state_change_error(code: i32) -> Option<bool> {
    const NOT_PRIMARY: &[i32] = &[10107, 13435, 10058];
    const RECOVERING: &[i32] = &[11602, 13436, 189];
    const SHUTDOWN: &[i32] = &[11600, 91];
    if SHUTDOWN.contains(&code) {
        Some(true)
    } else if NOT_PRIMARY.contains(&code) || RECOVERING.contains(&code) {
        Some(false)
    } else {
        None
    }
}

pub fn normalize_address(host: &str, port: u16) -> String {
    let host = host.to_ascii_lowercase();
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

pub fn address_of(h: &HostAddress) -> String {
    match h {
        HostAddress::Tcp { host, port } => normalize_address(host, port.unwrap_or(27017)),
        HostAddress::Unix { path } => path.clone(),
    }
}

impl TopologyDescription {
    /// `direct`: the directConnection option. Unset, one seed without a
    /// replica set name is a direct connection; explicitly false, it is discovered.
    pub fn new(seeds: &[String], direct: Option<bool>, set_name: Option<String>) -> Self {
        let single_seed = seeds.len() == 1 && set_name.is_none() && direct.is_none();
        let kind = if direct == Some(true) || single_seed {
            TopologyType::Single
        } else if set_name.is_some() {
            TopologyType::ReplicaSetNoPrimary
        } else {
            TopologyType::Unknown
        };
        TopologyDescription {
            kind,
            set_name,
            servers: seeds
                .iter()
                .cloned()
                .map(ServerDescription::unknown)
                .collect(),
            logical_session_timeout_minutes: None,
        }
    }

    /// `loadBalanced=true` (Load Balancer spec): the seed is a load balancer
    /// from the start, and no check or error ever changes that.
    pub fn load_balanced(seed: &str) -> Self {
        TopologyDescription {
            kind: TopologyType::LoadBalanced,
            set_name: None,
            servers: vec![ServerDescription {
                kind: ServerType::LoadBalancer,
                ..ServerDescription::unknown(seed.to_string())
            }],
            logical_session_timeout_minutes: None,
        }
    }

    pub fn server(&self, address: &str) -> Option<&ServerDescription> {
        self.servers.iter().find(|s| s.address == address)
    }

    /// Applies a check's outcome (the SDAM spec's transitions, without the
    /// staleness rules for electionId/setVersion ordering).
    pub fn update(
        &mut self,
        address: &str,
        outcome: Result<(HelloReply, Option<std::time::Duration>), String>,
    ) {
        let Some(idx) = self.servers.iter().position(|s| s.address == address) else {
            return;
        };
        if self.kind == TopologyType::LoadBalanced {
            // Not monitored: a connection's hello only tells the session timeout.
            if let Ok((hello, _)) = outcome {
                self.logical_session_timeout_minutes = hello.logical_session_timeout_minutes;
                self.servers[idx].hello = Some(hello);
            }
            return;
        }
        let (hello, rtt) = match outcome {
            Err(error) => {
                self.servers[idx] = ServerDescription {
                    error: Some(error),
                    ..ServerDescription::unknown(address.to_string())
                };
                self.refresh_replica_set_kind();
                return;
            }
            Ok(pair) => pair,
        };
        let kind = ServerType::from_hello(&hello, false);
        self.servers[idx] = ServerDescription {
            address: address.to_string(),
            kind,
            hello: Some(hello.clone()),
            error: None,
            average_rtt: rtt,
        };
        match self.kind {
            TopologyType::Single => {}
            TopologyType::Unknown => match kind {
                // SDAM's updateUnknownWithStandalone: a single seed (e.g. one
                // SRV record) becomes Single; among several, a standalone is dropped.
                ServerType::Standalone if self.servers.len() == 1 => {
                    self.kind = TopologyType::Single
                }
                ServerType::Standalone => self.servers.retain(|s| s.address != address),
                ServerType::Mongos => self.kind = TopologyType::Sharded,
                ServerType::RsPrimary
                | ServerType::RsSecondary
                | ServerType::RsArbiter
                | ServerType::RsOther => {
                    self.set_name = hello.set_name.clone();
                    self.kind = TopologyType::ReplicaSetNoPrimary;
                    self.update_replica_set(address, kind, &hello);
                }
                _ => {}
            },
            TopologyType::Sharded => {
                if !matches!(kind, ServerType::Mongos | ServerType::Unknown) {
                    self.servers.retain(|s| s.address != address);
                }
            }
            TopologyType::LoadBalanced => {}
            TopologyType::ReplicaSetNoPrimary | TopologyType::ReplicaSetWithPrimary => {
                if matches!(kind, ServerType::Standalone | ServerType::Mongos) {
                    self.servers.retain(|s| s.address != address);
                } else {
                    self.update_replica_set(address, kind, &hello);
                }
            }
        }
        if let Some(minutes) = self
            .servers
            .iter()
            .filter(|s| s.kind.is_data_bearing())
            .map(|s| {
                s.hello
                    .as_ref()
                    .and_then(|h| h.logical_session_timeout_minutes)
            })
            .min()
        {
            self.logical_session_timeout_minutes = minutes;
        }
        self.refresh_replica_set_kind();
    }

    fn update_replica_set(&mut self, address: &str, kind: ServerType, hello: &HelloReply) {
        if self.set_name.is_none() {
            self.set_name = hello.set_name.clone();
        }
        if self.set_name != hello.set_name {
            self.servers.retain(|s| s.address != address);
            return;
        }
        if kind == ServerType::RsPrimary {
            // A new primary: any other claimed primary is stale.
            for s in self
                .servers
                .iter_mut()
                .filter(|s| s.address != address && s.kind == ServerType::RsPrimary)
            {
                *s = ServerDescription::unknown(s.address.clone());
            }
            let members: Vec<String> = hello
                .hosts
                .iter()
                .chain(&hello.passives)
                .chain(&hello.arbiters)
                .map(|h| h.to_ascii_lowercase())
                .collect();
            self.servers.retain(|s| members.contains(&s.address));
            for m in members {
                if self.server(&m).is_none() {
                    self.servers.push(ServerDescription::unknown(m));
                }
            }
        } else {
            for m in hello
                .hosts
                .iter()
                .chain(&hello.passives)
                .chain(&hello.arbiters)
            {
                let m = m.to_ascii_lowercase();
                if self.server(&m).is_none() {
                    self.servers.push(ServerDescription::unknown(m));
                }
            }
        }
    }

    fn refresh_replica_set_kind(&mut self) {
        if matches!(
            self.kind,
            TopologyType::ReplicaSetNoPrimary | TopologyType::ReplicaSetWithPrimary
        ) {
            self.kind = if self.servers.iter().any(|s| s.kind == ServerType::RsPrimary) {
                TopologyType::ReplicaSetWithPrimary
            } else {
                TopologyType::ReplicaSetNoPrimary
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs_member(primary: bool, hosts: &[&str]) -> HelloReply {
        HelloReply {
            is_writable_primary: primary,
            secondary: !primary,
            set_name: Some("rs0".into()),
            hosts: hosts.iter().map(|s| s.to_string()).collect(),
            max_wire_version: 21,
            logical_session_timeout_minutes: Some(30),
            ..Default::default()
        }
    }

    #[test]
    fn single_seed_is_single() {
        let mut t = TopologyDescription::new(&["a:1".into()], None, None);
        assert_eq!(t.kind, TopologyType::Single);
        t.update(
            "a:1",
            Ok((
                HelloReply {
                    is_writable_primary: true,
                    ..Default::default()
                },
                None,
            )),
        );
        assert_eq!(t.servers[0].kind, ServerType::Standalone);
    }

    #[test]
    fn a_load_balancer_stays_one_whatever_happens() {
        let mut t = TopologyDescription::load_balanced("lb:1");
        assert_eq!(t.kind, TopologyType::LoadBalanced);
        assert_eq!(t.servers[0].kind, ServerType::LoadBalancer);
        t.update("lb:1", Err("connection reset".into()));
        assert_eq!(t.servers[0].kind, ServerType::LoadBalancer);
        let hello = HelloReply {
            is_mongos: true,
            logical_session_timeout_minutes: Some(30),
            ..Default::default()
        };
        t.update("lb:1", Ok((hello, None)));
        assert_eq!(
            (t.kind, t.servers[0].kind),
            (TopologyType::LoadBalanced, ServerType::LoadBalancer)
        );
        assert_eq!(t.logical_session_timeout_minutes, Some(30));
    }

    #[test]
    fn direct_connection_false_discovers_a_lone_seed() {
        let mongos = HelloReply {
            is_writable_primary: true,
            is_mongos: true,
            ..Default::default()
        };
        let mut t = TopologyDescription::new(&["a:1".into()], Some(false), None);
        assert_eq!(t.kind, TopologyType::Unknown);
        t.update("a:1", Ok((mongos, None)));
        assert_eq!(t.kind, TopologyType::Sharded);
        let mut t = TopologyDescription::new(&["a:1".into()], Some(false), None);
        let standalone = HelloReply {
            is_writable_primary: true,
            ..Default::default()
        };
        t.update("a:1", Ok((standalone.clone(), None)));
        assert_eq!(t.kind, TopologyType::Single);
        // Among several seeds a standalone is removed.
        let mut t = TopologyDescription::new(&["a:1".into(), "b:2".into()], None, None);
        t.update("a:1", Ok((standalone, None)));
        assert_eq!(t.kind, TopologyType::Unknown);
        assert!(t.server("a:1").is_none());
    }

    #[test]
    fn replica_set_discovery_adds_members_and_finds_primary() {
        let mut t = TopologyDescription::new(&["a:1".into(), "b:2".into()], None, None);
        assert_eq!(t.kind, TopologyType::Unknown);
        t.update("a:1", Ok((rs_member(true, &["a:1", "b:2", "c:3"]), None)));
        assert_eq!(t.kind, TopologyType::ReplicaSetWithPrimary);
        assert_eq!(t.set_name.as_deref(), Some("rs0"));
        assert_eq!(t.servers.len(), 3);
        assert_eq!(t.logical_session_timeout_minutes, Some(30));
        t.update("a:1", Err("connection refused".into()));
        assert_eq!(t.kind, TopologyType::ReplicaSetNoPrimary);
    }

    #[test]
    fn new_primary_demotes_the_old_one() {
        let mut t =
            TopologyDescription::new(&["a:1".into(), "b:2".into()], None, Some("rs0".into()));
        t.update("a:1", Ok((rs_member(true, &["a:1", "b:2"]), None)));
        t.update("b:2", Ok((rs_member(true, &["a:1", "b:2"]), None)));
        assert_eq!(t.server("a:1").unwrap().kind, ServerType::Unknown);
        assert_eq!(t.server("b:2").unwrap().kind, ServerType::RsPrimary);
    }

    #[test]
    fn wrong_set_name_is_removed() {
        let mut t =
            TopologyDescription::new(&["a:1".into(), "b:2".into()], None, Some("other".into()));
        t.update("a:1", Ok((rs_member(true, &["a:1"]), None)));
        assert!(t.server("a:1").is_none());
    }

    #[test]
    fn standalone_among_many_seeds_is_removed_from_replica_set() {
        let mut t =
            TopologyDescription::new(&["a:1".into(), "b:2".into()], None, Some("rs0".into()));
        t.update(
            "b:2",
            Ok((
                HelloReply {
                    is_writable_primary: true,
                    ..Default::default()
                },
                None,
            )),
        );
        assert!(t.server("b:2").is_none());
    }

    #[test]
    fn state_change_errors() {
        assert_eq!(state_change_error(10107), Some(false));
        assert_eq!(state_change_error(91), Some(true));
        assert_eq!(state_change_error(11000), None);
    }

    #[test]
    fn addresses_normalize() {
        assert_eq!(normalize_address("LocalHost", 1), "localhost:1");
        assert_eq!(normalize_address("::1", 27017), "[::1]:27017");
    }
}
