//! Server Discovery and Monitoring, sans I/O: server and topology
//! descriptions updated from hello replies and application errors (the
//! SDAM spec's "updating the TopologyDescription" and "error handling").
//! The client runs it single-threaded: servers are checked when selection
//! needs them. The official JSON suites run natively (`tests/sdam_spec.rs`).

pub mod monitoring;
pub mod rtt;
pub mod selection;

use crate::error::StateChange;
use crate::handshake::{HelloReply, MAX_WIRE_VERSION, MIN_WIRE_VERSION};
use crate::uri::HostAddress;
use bson::oid::ObjectId;
use bson::RawDocument;
use monitoring::{SdamEvent, SdamEvents};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerType {
    Unknown,
    Standalone,
    Mongos,
    /// Not checked yet, but a secondary named it primary: a single-threaded
    /// scan checks it first. Otherwise it is Unknown.
    PossiblePrimary,
    RsPrimary,
    RsSecondary,
    RsArbiter,
    RsOther,
    RsGhost,
    /// The one server of a load-balanced topology (Load Balancer spec).
    LoadBalancer,
}

impl ServerType {
    /// The type a successful hello reply describes (SDAM "parsing a hello
    /// response"; the order is PyMongo's reference one).
    pub fn from_hello(h: &HelloReply, is_replica_set_ghost: bool) -> ServerType {
        if is_replica_set_ghost || h.is_replica_set {
            ServerType::RsGhost
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
        } else if h.is_mongos {
            ServerType::Mongos
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
                | ServerType::LoadBalancer
        )
    }

    /// Whether a check has told what the server is.
    pub fn is_known(self) -> bool {
        !matches!(self, ServerType::Unknown | ServerType::PossiblePrimary)
    }

    /// The spec's name (as in the JSON tests and error messages).
    pub fn as_str(self) -> &'static str {
        match self {
            ServerType::Unknown => "Unknown",
            ServerType::Standalone => "Standalone",
            ServerType::Mongos => "Mongos",
            ServerType::PossiblePrimary => "PossiblePrimary",
            ServerType::RsPrimary => "RSPrimary",
            ServerType::RsSecondary => "RSSecondary",
            ServerType::RsArbiter => "RSArbiter",
            ServerType::RsOther => "RSOther",
            ServerType::RsGhost => "RSGhost",
            ServerType::LoadBalancer => "LoadBalancer",
        }
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

impl TopologyType {
    pub fn as_str(self) -> &'static str {
        match self {
            TopologyType::Single => "Single",
            TopologyType::Unknown => "Unknown",
            TopologyType::Sharded => "Sharded",
            TopologyType::ReplicaSetNoPrimary => "ReplicaSetNoPrimary",
            TopologyType::ReplicaSetWithPrimary => "ReplicaSetWithPrimary",
            TopologyType::LoadBalanced => "LoadBalanced",
        }
    }

    pub fn is_replica_set(self) -> bool {
        matches!(
            self,
            TopologyType::ReplicaSetNoPrimary | TopologyType::ReplicaSetWithPrimary
        )
    }
}

/// A server's `topologyVersion` (MongoDB 4.4+): orders what a hello reply or
/// a state change error says about one server process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyVersion {
    pub process_id: ObjectId,
    pub counter: i64,
}

impl TopologyVersion {
    /// The `topologyVersion` field of a hello reply or an error reply.
    pub fn from_reply(doc: &RawDocument) -> Option<TopologyVersion> {
        let tv = doc.get_document("topologyVersion").ok()?;
        Some(TopologyVersion {
            process_id: tv.get_object_id("processId").ok()?,
            counter: crate::wire::raw::int_field(tv, "counter")?,
        })
    }

    /// The spec's compareTopologyVersion: unknown on either side, or another
    /// process, counts as `current` being older.
    pub fn compare(current: Option<&Self>, new: Option<&Self>) -> Ordering {
        match (current, new) {
            (Some(a), Some(b)) if a.process_id == b.process_id => a.counter.cmp(&b.counter),
            _ => Ordering::Less,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ServerDescription {
    /// "host:port", lower-cased host.
    pub address: String,
    pub kind: ServerType,
    pub hello: Option<HelloReply>,
    pub error: Option<String>,
    pub average_rtt: Option<Duration>,
    /// The hello's, or the state change error's that made it Unknown.
    pub topology_version: Option<TopologyVersion>,
    /// When it was last checked, in ms on the client's monotonic clock
    /// (max staleness compares it with `lastWriteDate`).
    pub last_update_ms: Option<i64>,
}

impl ServerDescription {
    pub fn unknown(address: String) -> Self {
        ServerDescription {
            address,
            kind: ServerType::Unknown,
            hello: None,
            error: None,
            average_rtt: None,
            topology_version: None,
            last_update_ms: None,
        }
    }

    /// An Unknown description that says why.
    pub fn failed(address: String, error: impl Into<String>) -> Self {
        ServerDescription {
            error: Some(error.into()),
            ..ServerDescription::unknown(address)
        }
    }

    /// The description a successful check gives.
    pub fn checked(
        address: String,
        hello: HelloReply,
        average_rtt: Option<Duration>,
        at_ms: Option<i64>,
    ) -> Self {
        ServerDescription {
            address,
            kind: ServerType::from_hello(&hello, false),
            topology_version: hello.topology_version,
            hello: Some(hello),
            error: None,
            average_rtt,
            last_update_ms: at_ms,
        }
    }

    pub fn set_name(&self) -> Option<&str> {
        self.hello.as_ref()?.set_name.as_deref()
    }

    /// SDAM's Server Description Equality: the fields it marks compared, so
    /// not the RTT nor when it was checked (events are published only for a
    /// change).
    pub fn same_as(&self, other: &ServerDescription) -> bool {
        let hellos_same = match (&self.hello, &other.hello) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                (a.min_wire_version, a.max_wire_version, &a.me)
                    == (b.min_wire_version, b.max_wire_version, &b.me)
                    && (&a.hosts, &a.passives, &a.arbiters, &a.tags)
                        == (&b.hosts, &b.passives, &b.arbiters, &b.tags)
                    && (&a.set_name, a.set_version, a.election_id, &a.primary)
                        == (&b.set_name, b.set_version, b.election_id, &b.primary)
                    && a.logical_session_timeout_minutes == b.logical_session_timeout_minutes
            }
            _ => false,
        };
        (&self.address, self.kind, &self.error, self.topology_version)
            == (
                &other.address,
                other.kind,
                &other.error,
                other.topology_version,
            )
            && hellos_same
    }

    pub fn tags(&self) -> Option<&std::collections::BTreeMap<String, String>> {
        self.hello.as_ref().map(|h| &h.tags)
    }

    pub fn last_write_date(&self) -> Option<i64> {
        self.hello.as_ref()?.last_write_date
    }

    /// The hello's `me`, lower-cased.
    fn me(&self) -> Option<String> {
        self.hello.as_ref()?.me.as_deref().map(normalize_host)
    }

    /// The members this server lists (hosts, passives, arbiters), lower-cased.
    fn members(&self) -> Vec<String> {
        let Some(h) = &self.hello else {
            return Vec::new();
        };
        h.hosts
            .iter()
            .chain(&h.passives)
            .chain(&h.arbiters)
            .map(|m| normalize_host(m))
            .collect()
    }

    /// The spec's compatibility check: `None`, or why this driver cannot use it.
    pub fn incompatibility(&self) -> Option<String> {
        let h = self.hello.as_ref().filter(|_| self.kind.is_known())?;
        if h.min_wire_version > MAX_WIRE_VERSION {
            Some(format!(
                "Server at {} requires wire version {}, but this version of {} only supports up to {MAX_WIRE_VERSION}.",
                self.address,
                h.min_wire_version,
                crate::handshake::DRIVER_NAME
            ))
        } else if h.max_wire_version < MIN_WIRE_VERSION {
            Some(format!(
                "Server at {} reports wire version {}, but this version of {} requires at least {MIN_WIRE_VERSION} (MongoDB 4.2).",
                self.address,
                h.max_wire_version,
                crate::handshake::DRIVER_NAME
            ))
        } else {
            None
        }
    }
}

#[derive(Debug, Clone)]
pub struct TopologyDescription {
    pub kind: TopologyType,
    pub set_name: Option<String>,
    pub servers: Vec<ServerDescription>,
    pub logical_session_timeout_minutes: Option<i64>,
    /// The greatest (electionId, setVersion) a primary reported: older
    /// primaries are stale (updateRSFromPrimary).
    pub max_election_id: Option<ObjectId>,
    pub max_set_version: Option<i64>,
    /// Set when a server's wire versions do not overlap this driver's:
    /// selection then fails with it.
    pub compatibility_error: Option<String>,
    /// How many seeds the client was given (updateUnknownWithStandalone).
    pub seed_count: usize,
    /// Why servers were removed, the last few (for a selection error that
    /// finds the topology empty); not part of the description's equality.
    pub removed: Vec<String>,
    /// SDAM events, recorded once `monitor` turned them on (a copy records none).
    events: SdamEvents,
    /// Whether an unchecked member another names primary becomes
    /// PossiblePrimary: the single-threaded scanning order's hint. Monitor
    /// tasks check every member anyway, and the hint would flap a failed
    /// primary between Unknown and PossiblePrimary at each heartbeat of
    /// the others (`multi_threaded`).
    possible_primary: bool,
}

/// How many removal reasons a description keeps (`TopologyDescription::removed`).
const MAX_REMOVALS_KEPT: usize = 4;

/// What the SDAM error handling rules make of an application error.
#[derive(Debug, Clone, PartialEq)]
pub enum AppError {
    /// A network error other than a timeout.
    Network(String),
    /// A network timeout.
    Timeout(String),
    /// A command error reply (or a write concern error).
    Command(CommandError),
}

/// SDAM error handling for a pool's connection that failed to establish:
/// whether the server is marked Unknown and its pool cleared (behind a load
/// balancer, after the hello: its service's connections cleared, the server
/// left as it is). Not for an
/// overload (CMAP backpressure labels a network error or timeout before
/// authentication: the server shedding load), nor when the operation's
/// timeoutMS ran out (its budget, not the server). Any other error counts,
/// a network timeout during authentication included (SDAM: a timeout while
/// connecting marks the server Unknown, unlike one while reading or writing).
pub fn establishment_marks_unknown(e: &crate::error::Error, operation_expired: bool) -> bool {
    let out_of_budget = e.is_timeout() && operation_expired;
    !(crate::backpressure::is_overload(e) || out_of_budget)
}

/// The parts of a command error SDAM looks at.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandError {
    pub code: Option<i32>,
    pub message: String,
    pub topology_version: Option<TopologyVersion>,
}

impl CommandError {
    /// The error an ok:0 reply carries, else its write concern error's
    /// (never a writeErrors entry's); `None` for a reply without either.
    pub fn from_reply(reply: &RawDocument) -> Option<CommandError> {
        let doc = match crate::error::is_ok(reply.get("ok").ok().flatten()) {
            false => reply,
            true => reply.get_document("writeConcernError").ok()?,
        };
        Some(CommandError {
            code: crate::wire::raw::int_field(doc, "code").map(|c| c as i32),
            message: doc.get_str("errmsg").unwrap_or_default().to_string(),
            topology_version: TopologyVersion::from_reply(reply)
                .or_else(|| TopologyVersion::from_reply(doc)),
        })
    }

    pub fn from_error(e: &crate::error::Error) -> CommandError {
        CommandError {
            code: e.code,
            message: e.message.clone(),
            topology_version: e
                .reply
                .as_deref()
                .and_then(|r| TopologyVersion::from_reply(r)),
        }
    }
}

/// What the caller must do after `handle_application_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorOutcome {
    /// The server was marked Unknown.
    pub marked_unknown: bool,
    /// Clear the server's connection pool (a new generation).
    pub clear_pool: bool,
}

/// The host part lower-cased (SDAM: hostnames are normalized to lower-case).
fn normalize_host(address: &str) -> String {
    address.to_ascii_lowercase()
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

/// MongoDB 4.2's wire version: state change errors from older servers clear the pool.
const WIRE_VERSION_4_2: i32 = 8;
/// MongoDB 6.0's: from it on electionId orders primaries before setVersion.
const WIRE_VERSION_6_0: i32 = 17;

impl TopologyDescription {
    /// `direct`: the directConnection option. Unset is false (SDAM spec,
    /// initial TopologyType: "newly developed drivers"), so one seed is
    /// discovered too: Unknown, then Single if it is a standalone
    /// (updateUnknownWithStandalone), or the replica set it belongs to.
    pub fn new(seeds: &[String], direct: Option<bool>, set_name: Option<String>) -> Self {
        let kind = if direct == Some(true) {
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
            max_election_id: None,
            max_set_version: None,
            compatibility_error: None,
            seed_count: seeds.len(),
            removed: Vec::new(),
            events: SdamEvents::default(),
            possible_primary: true,
        }
    }

    /// Monitored by a task per server (WASI 0.3): no PossiblePrimary.
    pub fn multi_threaded(&mut self) {
        self.possible_primary = false;
    }

    /// Turns SDAM events on and publishes the opening ones (the client does
    /// it when it monitors, as it creates its topology).
    pub fn monitor(&mut self) {
        self.observe(true, &crate::logging::Logger::default());
    }

    /// Keeps SDAM events when `events`, logs them when `log` logs the
    /// topology component; either way the opening ones are published now.
    pub fn observe(&mut self, events: bool, log: &crate::logging::Logger) {
        self.events = SdamEvents::new(events, log.clone());
        if !self.events.enabled() {
            return;
        }
        for event in monitoring::opening(self) {
            self.events.emit(|| event);
        }
    }

    /// Records a monitor's event (the heartbeats), when monitoring is on.
    pub fn emit(&mut self, make: impl FnOnce() -> SdamEvent) {
        self.events.emit(make)
    }

    /// Drains the recorded SDAM events.
    pub fn take_events(&mut self) -> Vec<SdamEvent> {
        self.events.take()
    }

    /// Starts over from `new` (seedlist discovery found the seeds), keeping
    /// the recorder: servers added and removed, and the change, are published.
    pub fn restart(&mut self, mut new: TopologyDescription) {
        new.events = std::mem::take(&mut self.events);
        new.possible_primary = self.possible_primary;
        let before = std::mem::replace(self, new);
        self.publish(&before, None);
    }

    /// The topology is closed: its description becomes Unknown without
    /// servers (SDAM monitoring: each server closed, the change, then TopologyClosed).
    pub fn close(&mut self) {
        let before = self.events.enabled().then(|| self.clone());
        self.kind = TopologyType::Unknown;
        self.servers.clear();
        self.refresh_session_timeout();
        self.refresh_compatibility();
        if let Some(before) = before {
            self.publish(&before, None);
        }
        self.events.emit(|| SdamEvent::TopologyClosed);
    }

    /// The one place a change is published: the events `monitoring::changes`
    /// finds from `before` to now.
    fn publish(&mut self, before: &TopologyDescription, checked: Option<&ServerDescription>) {
        for event in monitoring::changes(before, self, checked) {
            self.events.emit(|| event);
        }
    }

    /// Equality for TopologyDescriptionChanged: what describes the topology,
    /// its servers compared by Server Description Equality.
    pub fn same_as(&self, other: &TopologyDescription) -> bool {
        let (a, b) = (self, other);
        (a.kind, &a.set_name, a.logical_session_timeout_minutes)
            == (b.kind, &b.set_name, b.logical_session_timeout_minutes)
            && (a.max_election_id, a.max_set_version, &a.compatibility_error)
                == (b.max_election_id, b.max_set_version, &b.compatibility_error)
            && a.servers.len() == b.servers.len()
            && {
                let theirs = other.by_address();
                self.servers
                    .iter()
                    .all(|s| theirs.get(s.address.as_str()).is_some_and(|o| s.same_as(o)))
            }
    }

    /// `loadBalanced=true` (Load Balancer spec): the seed is a load balancer
    /// from the start, and no check or error ever changes that.
    pub fn load_balanced(seed: &str) -> Self {
        let mut t = TopologyDescription::new(&[seed.to_string()], Some(false), None);
        t.kind = TopologyType::LoadBalanced;
        t.servers[0].kind = ServerType::LoadBalancer;
        t
    }

    /// The servers by address, for lookups of many (one `server` call each
    /// would be quadratic in a long member list).
    pub fn by_address(&self) -> HashMap<&str, &ServerDescription> {
        self.servers
            .iter()
            .map(|s| (s.address.as_str(), s))
            .collect()
    }

    pub fn server(&self, address: &str) -> Option<&ServerDescription> {
        self.servers.iter().find(|s| s.address == address)
    }

    fn position(&self, address: &str) -> Option<usize> {
        self.servers.iter().position(|s| s.address == address)
    }

    pub fn has_primary(&self) -> bool {
        self.servers.iter().any(|s| s.kind == ServerType::RsPrimary)
    }

    /// Applies a check's outcome: a reply (with the average RTT) or an error.
    pub fn update(
        &mut self,
        address: &str,
        outcome: Result<(HelloReply, Option<Duration>), String>,
    ) {
        let new = match outcome {
            Ok((hello, rtt)) => ServerDescription::checked(address.to_string(), hello, rtt, None),
            Err(error) => ServerDescription::failed(address.to_string(), error),
        };
        self.apply(new);
    }

    /// The spec's onServerDescriptionChanged: replaces the server's
    /// description (unless its topologyVersion is older than the current
    /// one's) and runs the TopologyType table's action. Every change of a
    /// server's description comes here, so here its events are published.
    pub fn apply(&mut self, new: ServerDescription) {
        let Some(before) = self.events.enabled().then(|| self.clone()) else {
            return self.apply_change(new);
        };
        let checked = new.clone();
        self.apply_change(new);
        self.publish(&before, Some(&checked));
    }

    fn apply_change(&mut self, new: ServerDescription) {
        // Outcomes from servers no longer in the topology are ignored.
        let Some(idx) = self.position(&new.address) else {
            return;
        };
        let current = self.servers[idx].topology_version.as_ref();
        if TopologyVersion::compare(current, new.topology_version.as_ref()) == Ordering::Greater {
            return;
        }
        if self.kind == TopologyType::LoadBalanced {
            // Not monitored: a connection's hello only tells the session timeout.
            if new.kind.is_known() {
                self.servers[idx].hello = new.hello;
                self.refresh_session_timeout();
            }
            return;
        }
        let address = new.address.clone();
        let kind = new.kind;
        self.servers[idx] = new;
        use ServerType as S;
        use TopologyType as T;
        match (self.kind, kind) {
            (T::Single, _) => self.verify_single_set_name(idx),
            (T::LoadBalanced, _) => {} // returned above
            (T::Unknown, S::Standalone) => {
                // updateUnknownWithStandalone.
                if self.seed_count == 1 {
                    self.kind = T::Single;
                } else {
                    let why = "it is a standalone, and a standalone cannot be one of several seeds";
                    self.remove(&address, why.into());
                }
            }
            (T::Unknown, S::Mongos) => self.kind = T::Sharded,
            (T::Unknown | T::ReplicaSetNoPrimary, S::RsPrimary) => {
                self.kind = T::ReplicaSetWithPrimary;
                self.update_rs_from_primary(&address);
            }
            (T::Unknown, S::RsSecondary | S::RsArbiter | S::RsOther) => {
                self.kind = T::ReplicaSetNoPrimary;
                self.update_rs_without_primary(&address);
            }
            (T::Unknown, _) => {}
            (T::Sharded, S::Unknown | S::Mongos) => {}
            (T::Sharded, _) => {
                let why = format!(
                    "it is a {}, not a mongos of the sharded cluster",
                    kind.as_str()
                );
                self.remove(&address, why)
            }
            (T::ReplicaSetNoPrimary, S::Standalone | S::Mongos) => {
                let why = self.not_in_set(&self.servers[idx]);
                self.remove(&address, why)
            }
            (T::ReplicaSetNoPrimary, S::RsSecondary | S::RsArbiter | S::RsOther) => {
                self.update_rs_without_primary(&address)
            }
            (T::ReplicaSetNoPrimary, _) => {}
            (T::ReplicaSetWithPrimary, S::Standalone | S::Mongos) => {
                let why = self.not_in_set(&self.servers[idx]);
                self.remove(&address, why);
                self.check_if_has_primary();
            }
            (T::ReplicaSetWithPrimary, S::RsPrimary) => self.update_rs_from_primary(&address),
            (T::ReplicaSetWithPrimary, S::RsSecondary | S::RsArbiter | S::RsOther) => {
                self.update_rs_with_primary_from_member(&address)
            }
            (T::ReplicaSetWithPrimary, _) => self.check_if_has_primary(),
        }
        self.refresh_session_timeout();
        self.refresh_compatibility();
    }

    /// SDAM error handling for an error an application operation met on
    /// `address`, on a connection of pool generation `generation` (the
    /// pool's is `pool_generation`), to a server of `max_wire_version`.
    /// Marks the server Unknown when the rules say so; the caller clears
    /// the pool when the outcome says so.
    pub fn handle_application_error(
        &mut self,
        address: &str,
        generation: u64,
        pool_generation: u64,
        max_wire_version: i32,
        error: &AppError,
    ) -> ErrorOutcome {
        let Some(idx) = self.position(address) else {
            return ErrorOutcome::default();
        };
        // An error on a connection from before the last clear is stale.
        if generation < pool_generation {
            return ErrorOutcome::default();
        }
        let lb = self.kind == TopologyType::LoadBalanced;
        match error {
            // A timeout may be a slow operation, not an unavailable server
            // (before the handshake completes too: Client Backpressure).
            AppError::Timeout(_) => ErrorOutcome::default(),
            AppError::Network(message) => {
                if !lb {
                    self.apply(ServerDescription::failed(
                        address.to_string(),
                        message.clone(),
                    ));
                }
                ErrorOutcome {
                    marked_unknown: !lb,
                    clear_pool: true,
                }
            }
            AppError::Command(e) => {
                let Some(change) = StateChange::of(e.code, &e.message) else {
                    return ErrorOutcome::default();
                };
                // Stale unless the error's topologyVersion is newer than the server's.
                let current = self.servers[idx].topology_version.as_ref();
                if TopologyVersion::compare(current, e.topology_version.as_ref()) != Ordering::Less
                {
                    return ErrorOutcome::default();
                }
                if !lb {
                    self.apply(ServerDescription {
                        topology_version: e.topology_version,
                        ..ServerDescription::failed(address.to_string(), e.message.clone())
                    });
                }
                let shutdown = matches!(change, StateChange::Recovering { shutdown: true });
                ErrorOutcome {
                    marked_unknown: !lb,
                    clear_pool: shutdown || max_wire_version < WIRE_VERSION_4_2,
                }
            }
        }
    }

    /// A direct connection given a replica set name: a server without it is Unknown.
    fn verify_single_set_name(&mut self, idx: usize) {
        let Some(want) = &self.set_name else { return };
        let s = &self.servers[idx];
        if s.kind.is_known() && s.set_name() != Some(want.as_str()) {
            let error = format!(
                "replica set name {:?} is not the expected {want:?}",
                s.set_name()
            );
            self.servers[idx] = ServerDescription::failed(s.address.clone(), error);
        }
    }

    /// Removes `address`, noting `why` (the last few reasons are kept).
    fn remove(&mut self, address: &str, why: String) {
        self.servers.retain(|s| s.address != address);
        if self.removed.len() == MAX_REMOVALS_KEPT {
            self.removed.remove(0);
        }
        self.removed.push(format!("{address} was removed: {why}"));
    }

    /// Why `sd` is not in this replica set: another set name, or none.
    fn not_in_set(&self, sd: &ServerDescription) -> String {
        let want = self.set_name.as_deref().unwrap_or("?");
        match sd.set_name() {
            Some(theirs) => format!("it is a member of replica set {theirs}, not of {want}"),
            None => format!(
                "it is a {}, not a member of replica set {want}",
                sd.kind.as_str()
            ),
        }
    }

    /// Adds the members not described yet. In time linear in the list, as
    /// everything done with a server's reply: a `hosts` list of 100,000
    /// names costs milliseconds, not minutes.
    fn add_members(&mut self, members: &[String]) {
        let mut known: HashSet<String> = self.servers.iter().map(|s| s.address.clone()).collect();
        for m in members {
            if known.insert(m.clone()) {
                self.servers.push(ServerDescription::unknown(m.clone()));
            }
        }
    }

    /// A member named primary by another that has not been checked yet.
    fn mark_possible_primary(&mut self, primary: Option<String>) {
        let Some(primary) = primary.filter(|_| self.possible_primary) else {
            return;
        };
        if let Some(s) = self.servers.iter_mut().find(|s| s.address == primary) {
            if s.kind == ServerType::Unknown {
                s.kind = ServerType::PossiblePrimary;
            }
        }
    }

    fn update_rs_without_primary(&mut self, address: &str) {
        let Some(sd) = self.server(address).cloned() else {
            return;
        };
        match &self.set_name {
            None => self.set_name = sd.set_name().map(str::to_string),
            Some(name) if sd.set_name() != Some(name.as_str()) => {
                self.remove(address, self.not_in_set(&sd));
                return;
            }
            Some(_) => {}
        }
        self.add_members(&sd.members());
        let primary = sd.hello.as_ref().and_then(|h| h.primary.as_deref());
        self.mark_possible_primary(primary.map(normalize_host));
        if let Some(me) = sd.me().filter(|me| me != address) {
            self.remove(address, format!("it calls itself {me}"));
        }
    }

    fn update_rs_with_primary_from_member(&mut self, address: &str) {
        let Some(sd) = self.server(address).cloned() else {
            return;
        };
        let wrong_set = self.set_name.as_deref() != sd.set_name();
        if wrong_set || sd.me().is_some_and(|me| me != address) {
            let why = match sd.me() {
                Some(me) if !wrong_set => format!("it calls itself {me}"),
                _ => self.not_in_set(&sd),
            };
            self.remove(address, why);
            self.check_if_has_primary();
            return;
        }
        // Had this member been the primary?
        if !self.has_primary() {
            self.kind = TopologyType::ReplicaSetNoPrimary;
            let primary = sd.hello.as_ref().and_then(|h| h.primary.as_deref());
            self.mark_possible_primary(primary.map(normalize_host));
        }
    }

    fn update_rs_from_primary(&mut self, address: &str) {
        let Some(sd) = self.server(address).cloned() else {
            return;
        };
        match &self.set_name {
            None => self.set_name = sd.set_name().map(str::to_string),
            Some(name) if sd.set_name() != Some(name.as_str()) => {
                // A primary of another replica set.
                self.remove(address, self.not_in_set(&sd));
                self.check_if_has_primary();
                return;
            }
            Some(_) => {}
        }
        let Some(hello) = sd.hello.as_ref() else {
            return;
        };
        if self.is_stale_primary(hello) {
            let stale = ServerDescription::failed(
                address.to_string(),
                "primary marked stale due to electionId/setVersion mismatch",
            );
            if let Some(idx) = self.position(address) {
                self.servers[idx] = stale;
            }
            self.check_if_has_primary();
            return;
        }
        // Any other primary is an old one.
        for s in &mut self.servers {
            if s.address != address && s.kind == ServerType::RsPrimary {
                *s = ServerDescription::failed(
                    s.address.clone(),
                    "primary marked stale due to discovery of newer primary",
                );
            }
        }
        let members = sd.members();
        self.add_members(&members);
        let members: HashSet<&str> = members.iter().map(String::as_str).collect();
        self.servers
            .retain(|s| members.contains(s.address.as_str()));
        self.check_if_has_primary();
    }

    /// updateRSFromPrimary's electionId/setVersion rules; records the new
    /// maxima when the primary is not stale.
    fn is_stale_primary(&mut self, hello: &HelloReply) -> bool {
        let (election_id, set_version) = (hello.election_id, hello.set_version);
        let key = |e: Option<ObjectId>| e.map(|e| e.bytes());
        if hello.max_wire_version >= WIRE_VERSION_6_0 {
            // (electionId, setVersion) ordered as a tuple, null the least.
            let new = (key(election_id), set_version);
            let max = (key(self.max_election_id), self.max_set_version);
            if new < max {
                return true;
            }
            self.max_election_id = election_id;
            self.max_set_version = set_version;
            return false;
        }
        // Before 6.0: setVersion first, then electionId.
        if let (Some(e), Some(v)) = (election_id, set_version) {
            if let (Some(max_e), Some(max_v)) = (self.max_election_id, self.max_set_version) {
                if max_v > v || (max_v == v && max_e.bytes() > e.bytes()) {
                    return true;
                }
            }
            self.max_election_id = Some(e);
        }
        if let Some(v) = set_version {
            if self.max_set_version.is_none_or(|max| v > max) {
                self.max_set_version = Some(v);
            }
        }
        false
    }

    fn check_if_has_primary(&mut self) {
        if self.kind.is_replica_set() {
            self.kind = if self.has_primary() {
                TopologyType::ReplicaSetWithPrimary
            } else {
                TopologyType::ReplicaSetNoPrimary
            };
        }
    }

    /// The least logicalSessionTimeoutMinutes of the data-bearing servers;
    /// none if any of them has none (or there are none).
    fn refresh_session_timeout(&mut self) {
        let mut data_bearing = self
            .servers
            .iter()
            .filter(|s| s.kind.is_data_bearing())
            .map(|s| {
                s.hello
                    .as_ref()
                    .and_then(|h| h.logical_session_timeout_minutes)
            })
            .peekable();
        self.logical_session_timeout_minutes = match data_bearing.peek() {
            None => None,
            Some(_) => data_bearing.try_fold(i64::MAX, |least, m| Some(least.min(m?))),
        };
    }

    fn refresh_compatibility(&mut self) {
        self.compatibility_error = self
            .servers
            .iter()
            .find_map(ServerDescription::incompatibility);
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
    fn establishment_errors_mark_unknown_unless_shed_load_or_out_of_budget() {
        use crate::error::{Error, ErrorKind};
        let shed = crate::cmap::label_establishment_error(Error::timeout("hello"));
        assert!(!establishment_marks_unknown(&shed, false));
        let closed = crate::cmap::label_establishment_error(Error::network("reset"));
        assert!(!establishment_marks_unknown(&closed, false));
        // A timeout during authentication: the server is Unknown...
        assert!(establishment_marks_unknown(
            &Error::timeout("saslContinue"),
            false
        ));
        // ...unless the operation's timeoutMS is what ran out.
        assert!(!establishment_marks_unknown(
            &Error::timeout("saslContinue"),
            true
        ));
        let denied = Error::new(ErrorKind::Authentication, "bad password");
        assert!(establishment_marks_unknown(&denied, true));
    }

    /// PossiblePrimary is the single-threaded scan's hint only: with a
    /// monitor per server the unchecked member stays Unknown.
    #[test]
    fn monitor_tasks_leave_an_unchecked_primary_unknown() {
        let seeds = ["a:1".to_string(), "b:1".to_string()];
        for (multi, expected) in [
            (false, ServerType::PossiblePrimary),
            (true, ServerType::Unknown),
        ] {
            let mut t = TopologyDescription::new(&seeds, None, Some("rs0".into()));
            if multi {
                t.multi_threaded();
            }
            let secondary = HelloReply {
                primary: Some("a:1".into()),
                ..rs_member(false, &["a:1", "b:1"])
            };
            t.update("b:1", Ok((secondary, None)));
            assert_eq!(t.server("a:1").unwrap().kind, expected, "multi {multi}");
        }
    }

    /// Everything a server's reply sets off is linear in its size: a
    /// primary listing 100,000 members, then a secondary listing them again,
    /// then the primary again with half of them, with events on.
    #[test]
    fn a_long_member_list_is_applied_in_linear_time() {
        let names: Vec<String> = (0..100_000)
            .map(|i| format!("h{i}.example:27017"))
            .collect();
        let all: Vec<&str> = std::iter::once("a:1")
            .chain(names.iter().map(String::as_str))
            .collect();
        let started = std::time::Instant::now();
        let mut t = TopologyDescription::new(&["a:1".into()], None, None);
        t.observe(true, &crate::logging::Logger::default());
        t.update("a:1", Ok((rs_member(true, &all), None)));
        assert_eq!(t.servers.len(), 100_001);
        assert_eq!(t.kind, TopologyType::ReplicaSetWithPrimary);
        t.update("h7.example:27017", Ok((rs_member(false, &all), None)));
        t.update("a:1", Ok((rs_member(true, &all[..50_001]), None)));
        assert_eq!(t.servers.len(), 50_001);
        // The recorder keeps the newest events: 50,000 closed, then the change.
        let events = t.take_events();
        assert!(matches!(
            events.last(),
            Some(SdamEvent::TopologyDescriptionChanged { .. })
        ));
        assert!(events
            .iter()
            .any(|e| matches!(e, SdamEvent::ServerClosed { .. })));
        // Quadratic, this took 44 s in a debug build; linear, well under one
        // on an idle machine and 3-5 s on one with a load of 10 on 2 cores.
        let took = started.elapsed();
        assert!(took < Duration::from_secs(15), "took {took:?}");
    }

    /// A topology emptied by its checks keeps why (replicaSet=rs0 against
    /// a standalone), for the selection error to say.
    #[test]
    fn removals_say_why() {
        let mut t = TopologyDescription::new(&["a:1".into()], None, Some("rs0".into()));
        let standalone = HelloReply {
            is_writable_primary: true,
            max_wire_version: 21,
            ..Default::default()
        };
        t.update("a:1", Ok((standalone, None)));
        assert!(t.servers.is_empty());
        assert_eq!(
            t.removed,
            ["a:1 was removed: it is a Standalone, not a member of replica set rs0"]
        );
        let mut t = TopologyDescription::new(&["a:1".into()], None, Some("rs0".into()));
        let other = HelloReply {
            set_name: Some("rs1".into()),
            ..rs_member(false, &["a:1"])
        };
        t.update("a:1", Ok((other, None)));
        assert_eq!(
            t.removed,
            ["a:1 was removed: it is a member of replica set rs1, not of rs0"]
        );
    }

    #[test]
    fn a_single_seed_is_discovered_standalone_becomes_single() {
        let mut t = TopologyDescription::new(&["a:1".into()], None, None);
        assert_eq!(t.kind, TopologyType::Unknown);
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
        assert_eq!(t.kind, TopologyType::Single);
        // Only directConnection=true starts Single.
        let t = TopologyDescription::new(&["a:1".into()], Some(true), None);
        assert_eq!(t.kind, TopologyType::Single);
    }

    #[test]
    fn a_single_seed_that_is_a_secondary_discovers_its_set() {
        let mut t = TopologyDescription::new(&["a:1".into()], None, None);
        let hello = HelloReply {
            secondary: true,
            set_name: Some("rs0".into()),
            hosts: vec!["a:1".into(), "b:1".into()],
            me: Some("a:1".into()),
            max_wire_version: 21,
            ..Default::default()
        };
        t.update("a:1", Ok((hello, None)));
        assert_eq!(t.kind, TopologyType::ReplicaSetNoPrimary);
        assert_eq!(t.servers.len(), 2, "b:1 is discovered");
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
    fn addresses_normalize() {
        assert_eq!(normalize_address("LocalHost", 1), "localhost:1");
        assert_eq!(normalize_address("::1", 27017), "[::1]:27017");
    }
}
