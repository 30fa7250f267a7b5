//! Command monitoring, CMAP and SDAM events as a client entity observes them, and `expectEvents`.
//!
//! The driver exposes command events (`take-command-events`), pool events
//! (`take-pool-events`) and SDAM events (`take-sdam-events`); log-message
//! expectations fail with that reason.

use super::matching::{self, Lookup};
use crate::bindings::exports::mongo_wasi::driver::types::{
    CommandEvent, CommandEventKind, LogMessage, PoolEvent, PoolEventKind, SdamEvent, SdamEventKind,
    ServerType, TopologyType,
};
use bson::{Bson, Document};

/// Commands whose events are hidden unless `observeSensitiveCommands` (Command
/// Logging and Monitoring, "Security").
const SENSITIVE: &[&str] = &[
    "authenticate",
    "saslStart",
    "saslContinue",
    "getnonce",
    "createUser",
    "updateUser",
    "copydbgetnonce",
    "copydbsaslstart",
    "copydb",
];

#[derive(Clone, Debug)]
pub struct Observed {
    pub kind: CommandEventKind,
    pub command_name: String,
    pub database_name: String,
    pub command: Option<Document>,
    pub reply: Option<Document>,
    pub server_connection_id: Option<i64>,
    pub service_id: Option<String>,
    request_id: i32,
}

fn decode(bytes: Option<&Vec<u8>>) -> Option<Document> {
    bytes.and_then(|b| Document::from_reader(b.as_slice()).ok())
}

impl Observed {
    pub fn from_wit(e: &CommandEvent) -> Observed {
        Observed {
            kind: e.kind,
            command_name: e.command_name.clone(),
            database_name: e.database_name.clone(),
            command: decode(e.command.as_ref()),
            reply: decode(e.reply.as_ref()),
            server_connection_id: e.server_connection_id,
            service_id: e.service_id.clone(),
            request_id: e.request_id,
        }
    }

    fn key(&self) -> &'static str {
        match self.kind {
            CommandEventKind::Started => "commandStartedEvent",
            CommandEventKind::Succeeded => "commandSucceededEvent",
            CommandEventKind::Failed => "commandFailedEvent",
        }
    }

    /// Sensitive by name, or a hello that carries `speculativeAuthenticate`; the
    /// driver redacts those, so an empty hello command or reply counts too.
    fn is_sensitive(&self) -> bool {
        let name = self.command_name.as_str();
        let hello = matches!(name, "hello" | "isMaster" | "ismaster");
        let redacted = |d: &Option<Document>| {
            d.as_ref()
                .is_some_and(|d| d.is_empty() || d.contains_key("speculativeAuthenticate"))
        };
        SENSITIVE.iter().any(|s| s.eq_ignore_ascii_case(name))
            || hello && (redacted(&self.command) || redacted(&self.reply))
    }
}

/// The unified format's name of a CMAP event; `None` for the pending-response
/// events, which no spec test observes.
pub fn cmap_name(kind: PoolEventKind) -> Option<&'static str> {
    use PoolEventKind as K;
    Some(match kind {
        K::PendingResponseStarted | K::PendingResponseSucceeded | K::PendingResponseFailed => {
            return None
        }
        K::PoolCreated => "poolCreatedEvent",
        K::PoolReady => "poolReadyEvent",
        K::PoolCleared => "poolClearedEvent",
        K::PoolClosed => "poolClosedEvent",
        K::ConnectionCreated => "connectionCreatedEvent",
        K::ConnectionReady => "connectionReadyEvent",
        K::ConnectionClosed => "connectionClosedEvent",
        K::ConnectionCheckOutStarted => "connectionCheckOutStartedEvent",
        K::ConnectionCheckOutFailed => "connectionCheckOutFailedEvent",
        K::ConnectionCheckedOut => "connectionCheckedOutEvent",
        K::ConnectionCheckedIn => "connectionCheckedInEvent",
    })
}

/// Every CMAP event name of the unified format.
const CMAP_EVENTS: &[&str] = &[
    "poolCreatedEvent",
    "poolReadyEvent",
    "poolClearedEvent",
    "poolClosedEvent",
    "connectionCreatedEvent",
    "connectionReadyEvent",
    "connectionClosedEvent",
    "connectionCheckOutStartedEvent",
    "connectionCheckOutFailedEvent",
    "connectionCheckedOutEvent",
    "connectionCheckedInEvent",
];

/// The unified format's name of an SDAM event.
pub fn sdam_name(kind: SdamEventKind) -> &'static str {
    use SdamEventKind as K;
    match kind {
        K::TopologyOpening => "topologyOpeningEvent",
        K::TopologyDescriptionChanged => "topologyDescriptionChangedEvent",
        K::TopologyClosed => "topologyClosedEvent",
        K::ServerOpening => "serverOpeningEvent",
        K::ServerDescriptionChanged => "serverDescriptionChangedEvent",
        K::ServerClosed => "serverClosedEvent",
        K::ServerHeartbeatStarted => "serverHeartbeatStartedEvent",
        K::ServerHeartbeatSucceeded => "serverHeartbeatSucceededEvent",
        K::ServerHeartbeatFailed => "serverHeartbeatFailedEvent",
    }
}

/// Every SDAM event name of the unified format.
const SDAM_EVENTS: &[&str] = &[
    "topologyOpeningEvent",
    "topologyDescriptionChangedEvent",
    "topologyClosedEvent",
    "serverOpeningEvent",
    "serverDescriptionChangedEvent",
    "serverClosedEvent",
    "serverHeartbeatStartedEvent",
    "serverHeartbeatSucceededEvent",
    "serverHeartbeatFailedEvent",
];

pub fn is_cmap_event(name: &str) -> bool {
    CMAP_EVENTS.contains(&name)
}

pub fn is_sdam_event(name: &str) -> bool {
    SDAM_EVENTS.contains(&name)
}

/// The SDAM spec's name of a server type (as `type` in expected descriptions).
fn server_type_name(t: ServerType) -> &'static str {
    use ServerType as T;
    match t {
        T::Unknown => "Unknown",
        T::Standalone => "Standalone",
        T::Mongos => "Mongos",
        T::PossiblePrimary => "PossiblePrimary",
        T::RsPrimary => "RSPrimary",
        T::RsSecondary => "RSSecondary",
        T::RsArbiter => "RSArbiter",
        T::RsOther => "RSOther",
        T::RsGhost => "RSGhost",
        T::LoadBalancer => "LoadBalancer",
    }
}

fn topology_type_name(t: TopologyType) -> &'static str {
    use TopologyType as T;
    match t {
        T::Single => "Single",
        T::Unknown => "Unknown",
        T::Sharded => "Sharded",
        T::ReplicaSetNoPrimary => "ReplicaSetNoPrimary",
        T::ReplicaSetWithPrimary => "ReplicaSetWithPrimary",
        T::LoadBalanced => "LoadBalanced",
    }
}

/// One observed SDAM event: its name, and what expectations can look at.
#[derive(Clone, Debug)]
pub struct SdamObserved {
    pub name: &'static str,
    /// The previous and new descriptions' `type` (server or topology).
    pub previous_type: Option<&'static str>,
    pub new_type: Option<&'static str>,
    pub awaited: bool,
}

impl SdamObserved {
    pub fn from_wit(e: &SdamEvent) -> SdamObserved {
        let server = |s: &Option<_>| {
            s.as_ref().map(
                |d: &crate::bindings::exports::mongo_wasi::driver::types::ServerDescription| {
                    server_type_name(d.server_type)
                },
            )
        };
        let topology = |t: &Option<_>| {
            t.as_ref().map(
                |d: &crate::bindings::exports::mongo_wasi::driver::types::TopologyDescription| {
                    topology_type_name(d.topology_type)
                },
            )
        };
        SdamObserved {
            name: sdam_name(e.kind),
            previous_type: server(&e.previous_server).or(topology(&e.previous_topology)),
            new_type: server(&e.new_server).or(topology(&e.new_topology)),
            awaited: e.awaited,
        }
    }
}

/// What the runner knows of a client's topology: the new description of
/// its last topologyDescriptionChangedEvent (`recordTopologyDescription`).
#[derive(Clone, Debug, PartialEq)]
pub struct TopologySeen {
    pub kind: &'static str,
    /// The address of its RSPrimary, if it has one.
    pub primary: Option<String>,
}

impl Default for TopologySeen {
    fn default() -> Self {
        TopologySeen {
            kind: "Unknown",
            primary: None,
        }
    }
}

/// One observed CMAP event.
#[derive(Clone, Debug)]
pub struct CmapObserved {
    pub name: &'static str,
    pub reason: Option<String>,
    pub connection_id: u64,
    pub service_id: Option<String>,
    pub interrupt_in_use_connections: bool,
}

/// What one client entity records, per its `observeEvents` and friends.
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    observe: Vec<&'static str>,
    /// The CMAP events observed, by name.
    observe_cmap: Vec<&'static str>,
    /// CMAP events in the order the driver emitted them.
    pub cmap: Vec<CmapObserved>,
    /// The SDAM events observed, by name.
    observe_sdam: Vec<&'static str>,
    /// SDAM events in the order the driver emitted them.
    pub sdam: Vec<SdamObserved>,
    /// Connections checked out and not checked in yet (all pool events
    /// count, observed or not): `assertNumberConnectionsCheckedOut`.
    pub checked_out: i64,
    ignore: Vec<String>,
    sensitive: bool,
    /// Request ids of sensitive started events: their replies are hidden too.
    hidden: Vec<i32>,
    pub events: Vec<Observed>,
    /// The log messages (`observeLogMessages`), in the order the driver produced them.
    pub messages: Vec<super::logs::LogObserved>,
    /// The topology as its last description change left it (observed or not).
    pub topology: TopologySeen,
}

impl EventLog {
    pub fn from_spec(client: &Document) -> Result<EventLog, String> {
        let mut log = EventLog::default();
        if let Ok(kinds) = client.get_array("observeEvents") {
            for kind in kinds.iter().filter_map(Bson::as_str) {
                match kind {
                    "commandStartedEvent" => log.observe.push("commandStartedEvent"),
                    "commandSucceededEvent" => log.observe.push("commandSucceededEvent"),
                    "commandFailedEvent" => log.observe.push("commandFailedEvent"),
                    k if is_cmap_event(k) => {
                        let name = CMAP_EVENTS.iter().find(|n| **n == k).copied();
                        log.observe_cmap.extend(name);
                    }
                    k if is_sdam_event(k) => {
                        let name = SDAM_EVENTS.iter().find(|n| **n == k).copied();
                        log.observe_sdam.extend(name);
                    }
                    other => return Err(format!("observeEvents: unknown event {other:?}")),
                }
            }
        }
        if let Ok(names) = client.get_array("ignoreCommandMonitoringEvents") {
            log.ignore = names
                .iter()
                .filter_map(Bson::as_str)
                .map(String::from)
                .collect();
        }
        log.sensitive = client.get_bool("observeSensitiveCommands").unwrap_or(false);
        Ok(log)
    }

    /// Keeps what this client observes: not configureFailPoint (the runner's own),
    /// not ignored names, not sensitive commands unless asked for.
    pub fn record(&mut self, events: &[CommandEvent]) {
        for e in events {
            let o = Observed::from_wit(e);
            let sensitive = if o.kind == CommandEventKind::Started {
                let s = o.is_sensitive();
                if s {
                    self.hidden.push(o.request_id);
                }
                s
            } else {
                o.is_sensitive() || self.hidden.contains(&o.request_id)
            };
            let wanted = self.observe.contains(&o.key())
                && o.command_name != "configureFailPoint"
                && !self.ignore.contains(&o.command_name)
                && (self.sensitive || !sensitive);
            if wanted {
                self.events.push(o);
            }
        }
    }

    /// Keeps the CMAP events this client observes, in order.
    pub fn record_pool(&mut self, events: &[PoolEvent]) {
        for e in events {
            match e.kind {
                PoolEventKind::ConnectionCheckedOut => self.checked_out += 1,
                PoolEventKind::ConnectionCheckedIn => self.checked_out -= 1,
                _ => {}
            }
            let Some(name) = cmap_name(e.kind) else {
                continue;
            };
            if self.observe_cmap.contains(&name) {
                self.cmap.push(CmapObserved {
                    name,
                    reason: e.reason.clone(),
                    connection_id: e.connection_id,
                    service_id: e.service_id.clone(),
                    interrupt_in_use_connections: e.interrupt_in_use_connections,
                });
            }
        }
    }

    /// Keeps the SDAM events this client observes, in order.
    pub fn record_sdam(&mut self, events: &[SdamEvent]) {
        for e in events {
            if let Some(t) = &e.new_topology {
                self.topology = TopologySeen {
                    kind: topology_type_name(t.topology_type),
                    primary: t
                        .servers
                        .iter()
                        .find(|s| server_type_name(s.server_type) == "RSPrimary")
                        .map(|s| s.address.clone()),
                };
            }
            if self.observe_sdam.contains(&sdam_name(e.kind)) {
                self.sdam.push(SdamObserved::from_wit(e));
            }
        }
    }

    /// Keeps the client's log messages (it records only what it observes).
    pub fn record_logs(&mut self, messages: &[LogMessage]) -> Result<(), String> {
        for m in messages {
            self.messages.push(super::logs::LogObserved::from_wit(m)?);
        }
        Ok(())
    }

    /// The command documents of the started events, newest last.
    pub fn started_commands(&self) -> Vec<&Document> {
        self.events
            .iter()
            .filter(|e| e.kind == CommandEventKind::Started)
            .filter_map(|e| e.command.as_ref())
            .collect()
    }
}

/// One `expectedEventsForClient` against what the client recorded.
pub fn check(expected: &Document, log: &EventLog, lookup: &dyn Lookup) -> Result<(), String> {
    let kind = expected.get_str("eventType").unwrap_or("command");
    let want = expected
        .get_array("events")
        .map_err(|_| "expectEvents entry without an events array".to_string())?;
    let ignore_extra = expected.get_bool("ignoreExtraEvents").unwrap_or(false);
    match kind {
        "command" => {}
        "cmap" => return check_cmap(want, ignore_extra, &log.cmap),
        "sdam" => return check_sdam(want, ignore_extra, &log.sdam),
        other => return Err(format!("unknown eventType {other:?}")),
    }
    let got = &log.events;
    for (i, e) in want.iter().enumerate() {
        let e = e
            .as_document()
            .ok_or("an expected event is not a document")?;
        let Some(actual) = got.get(i) else {
            return Err(format!(
                "expected {} events, observed {}: {}",
                want.len(),
                got.len(),
                summary(got)
            ));
        };
        event_matches(e, actual, lookup)
            .map_err(|m| format!("event {i}: {m} (observed: {})", summary(got)))?;
    }
    if !ignore_extra && got.len() > want.len() {
        return Err(format!(
            "expected {} events, observed {}: {}",
            want.len(),
            got.len(),
            summary(got)
        ));
    }
    Ok(())
}

/// `expectEvents` of `eventType: cmap`: the same order, no extra events
/// unless `ignoreExtraEvents`.
fn check_cmap(want: &[Bson], ignore_extra: bool, got: &[CmapObserved]) -> Result<(), String> {
    let seen = || cmap_summary(got);
    for (i, e) in want.iter().enumerate() {
        let e = e
            .as_document()
            .ok_or("an expected event is not a document")?;
        let Some(actual) = got.get(i) else {
            return Err(format!(
                "expected {} CMAP events, observed {}: {}",
                want.len(),
                got.len(),
                seen()
            ));
        };
        cmap_matches(e, actual).map_err(|m| format!("event {i}: {m} (observed: {})", seen()))?;
    }
    if !ignore_extra && got.len() > want.len() {
        return Err(format!(
            "expected {} CMAP events, observed {}: {}",
            want.len(),
            got.len(),
            seen()
        ));
    }
    Ok(())
}

/// One `expectedCmapEvent` (`{connectionClosedEvent: {reason: "error"}}` and the like).
pub fn cmap_matches(expected: &Document, actual: &CmapObserved) -> Result<(), String> {
    let (key, fields) = expected.iter().next().ok_or("an expected event is empty")?;
    if expected.len() != 1 {
        return Err("an expected event needs exactly one key".into());
    }
    if !is_cmap_event(key) {
        return Err(format!("unknown CMAP event {key}"));
    }
    if key != actual.name {
        return Err(format!("expected {key}, observed {}", actual.name));
    }
    let fields = fields
        .as_document()
        .ok_or("expected event fields are not a document")?;
    for (field, want) in fields {
        let result = match (key.as_str(), field.as_str()) {
            ("connectionClosedEvent" | "connectionCheckOutFailedEvent", "reason") => {
                same_str(want, actual.reason.as_deref().unwrap_or(""), "reason")
            }
            ("poolClearedEvent", "hasServiceId") => match want.as_bool() {
                Some(w) if w == actual.service_id.is_some() => Ok(()),
                Some(w) => Err(format!("hasServiceId: expected {w}")),
                None => Err("hasServiceId needs a bool".into()),
            },
            ("poolClearedEvent", "interruptInUseConnections") => match want.as_bool() {
                Some(w) if w == actual.interrupt_in_use_connections => Ok(()),
                Some(w) => Err(format!("{field}: expected {w}")),
                None => Err(format!("{field} needs a bool")),
            },
            (_, other) => Err(format!("unknown field {other:?} in {key}")),
        };
        result.map_err(|m| format!("{key}: {m}"))?;
    }
    Ok(())
}

/// `expectEvents` of `eventType: sdam`: the same order, no extra events
/// unless `ignoreExtraEvents`.
fn check_sdam(want: &[Bson], ignore_extra: bool, got: &[SdamObserved]) -> Result<(), String> {
    let seen = || sdam_summary(got);
    for (i, e) in want.iter().enumerate() {
        let e = e
            .as_document()
            .ok_or("an expected event is not a document")?;
        let Some(actual) = got.get(i) else {
            return Err(format!(
                "expected {} SDAM events, observed {}: {}",
                want.len(),
                got.len(),
                seen()
            ));
        };
        SdamExpectation::parse(e)
            .and_then(|want| want.matches(actual))
            .map_err(|m| format!("event {i}: {m} (observed: {})", seen()))?;
    }
    if !ignore_extra && got.len() > want.len() {
        return Err(format!(
            "expected {} SDAM events, observed {}: {}",
            want.len(),
            got.len(),
            seen()
        ));
    }
    Ok(())
}

/// One `expectedSdamEvent` (`{serverDescriptionChangedEvent: {newDescription:
/// {type: "Unknown"}}}` and the like), checked for shape before any matching:
/// an unknown event or field fails the test instead of matching nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SdamExpectation {
    name: String,
    previous_type: Option<String>,
    new_type: Option<String>,
    awaited: Option<bool>,
}

impl SdamExpectation {
    pub fn parse(expected: &Document) -> Result<SdamExpectation, String> {
        let (key, fields) = expected.iter().next().ok_or("an expected event is empty")?;
        if expected.len() != 1 {
            return Err("an expected event needs exactly one key".into());
        }
        if !is_sdam_event(key) {
            return Err(format!("unknown SDAM event {key}"));
        }
        let fields = fields
            .as_document()
            .ok_or("expected event fields are not a document")?;
        let described = matches!(
            key.as_str(),
            "serverDescriptionChangedEvent" | "topologyDescriptionChangedEvent"
        );
        let heartbeat = key.starts_with("serverHeartbeat");
        let mut want = SdamExpectation {
            name: key.clone(),
            ..SdamExpectation::default()
        };
        for (field, value) in fields {
            let bad = |m: &str| format!("{key}: {m}");
            match field.as_str() {
                "previousDescription" if described => {
                    want.previous_type = description_type(value).map_err(|m| bad(&m))?
                }
                "newDescription" if described => {
                    want.new_type = description_type(value).map_err(|m| bad(&m))?
                }
                "awaited" if heartbeat => {
                    want.awaited = Some(value.as_bool().ok_or_else(|| bad("awaited needs a bool"))?)
                }
                other => return Err(bad(&format!("unknown field {other:?}"))),
            }
        }
        Ok(want)
    }

    pub fn matches(&self, actual: &SdamObserved) -> Result<(), String> {
        let key = &self.name;
        if key != actual.name {
            return Err(format!("expected {key}, observed {}", actual.name));
        }
        let types = [
            (
                "previousDescription",
                &self.previous_type,
                actual.previous_type,
            ),
            ("newDescription", &self.new_type, actual.new_type),
        ];
        for (what, want, got) in types {
            if let Some(want) = want {
                if Some(want.as_str()) != got {
                    return Err(format!(
                        "{key}: {what} type: expected {want}, observed {got:?}"
                    ));
                }
            }
        }
        match self.awaited {
            Some(w) if w != actual.awaited => Err(format!(
                "{key}: awaited: expected {w}, observed {}",
                actual.awaited
            )),
            _ => Ok(()),
        }
    }
}

/// An expected description's `type`: the only field the format gives it.
fn description_type(want: &Bson) -> Result<Option<String>, String> {
    let want = want
        .as_document()
        .ok_or("a description is not a document")?;
    let mut kind = None;
    for (field, value) in want {
        match field.as_str() {
            "type" => kind = Some(value.as_str().ok_or("type needs a string")?.to_string()),
            other => return Err(format!("unknown description field {other:?}")),
        }
    }
    Ok(kind)
}

fn sdam_summary(events: &[SdamObserved]) -> String {
    if events.is_empty() {
        return "none".into();
    }
    let parts: Vec<String> = events
        .iter()
        .map(|e| match (e.previous_type, e.new_type) {
            (Some(p), Some(n)) => format!("{}({p}->{n})", e.name),
            _ => e.name.to_string(),
        })
        .collect();
    parts.join(", ")
}

fn cmap_summary(events: &[CmapObserved]) -> String {
    if events.is_empty() {
        return "none".into();
    }
    let parts: Vec<String> = events
        .iter()
        .map(|e| match &e.reason {
            Some(r) => format!("{}({r})", e.name),
            None => e.name.to_string(),
        })
        .collect();
    parts.join(", ")
}

/// One `expectedCommandEvent` (`{commandStartedEvent: {...}}` and the like).
pub fn event_matches(
    expected: &Document,
    actual: &Observed,
    lookup: &dyn Lookup,
) -> Result<(), String> {
    let (key, fields) = expected.iter().next().ok_or("an expected event is empty")?;
    if expected.len() != 1 {
        return Err("an expected event needs exactly one key".into());
    }
    if key != actual.key() {
        return Err(format!(
            "expected {key}, observed {} for {}",
            actual.key(),
            actual.command_name
        ));
    }
    let fields = fields
        .as_document()
        .ok_or("expected event fields are not a document")?;
    for (field, want) in fields {
        let result = match field.as_str() {
            "commandName" => same_str(want, &actual.command_name, "commandName"),
            "databaseName" => same_str(want, &actual.database_name, "databaseName"),
            "command" => document(want, actual.command.as_ref(), "command", lookup),
            "reply" => document(want, actual.reply.as_ref(), "reply", lookup),
            "hasServiceId" => match want.as_bool() {
                Some(w) if w == actual.service_id.is_some() => Ok(()),
                Some(w) => Err(format!("hasServiceId: expected {w}")),
                None => Err("hasServiceId needs a bool".into()),
            },
            "hasServerConnectionId" => {
                let has = actual.server_connection_id.is_some_and(|id| id > 0);
                match want.as_bool() {
                    Some(w) if w == has => Ok(()),
                    Some(w) => Err(format!(
                        "hasServerConnectionId: expected {w}, the event has {:?}",
                        actual.server_connection_id
                    )),
                    None => Err("hasServerConnectionId needs a bool".into()),
                }
            }
            other => Err(format!("unknown field {other:?} in {key}")),
        };
        result.map_err(|m| format!("{key} {}: {m}", actual.command_name))?;
    }
    Ok(())
}

fn same_str(want: &Bson, got: &str, what: &str) -> Result<(), String> {
    match want.as_str() {
        Some(w) if w == got => Ok(()),
        Some(w) => Err(format!("{what}: expected {w:?}, got {got:?}")),
        None => Err(format!("{what} needs a string")),
    }
}

fn document(
    want: &Bson,
    got: Option<&Document>,
    what: &str,
    lookup: &dyn Lookup,
) -> Result<(), String> {
    let got = got.map(|d| Bson::Document(d.clone()));
    matching::matches(want, got.as_ref(), true, lookup).map_err(|m| format!("{what}: {m}"))
}

/// `find(started), find(succeeded), ...` for failure messages.
fn summary(events: &[Observed]) -> String {
    let parts: Vec<String> = events
        .iter()
        .map(|e| {
            let kind = match e.kind {
                CommandEventKind::Started => "started",
                CommandEventKind::Succeeded => "succeeded",
                CommandEventKind::Failed => "failed",
            };
            format!("{}({kind})", e.command_name)
        })
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unified::matching::NoEntities;
    use bson::doc;

    fn event(kind: CommandEventKind, name: &str, command: Option<Document>) -> CommandEvent {
        // Started and finished events of one command share a request id.
        let request_id = name.len() as i32;
        CommandEvent {
            kind,
            command_name: name.into(),
            database_name: "db".into(),
            request_id,
            operation_id: 1,
            connection_id: 1,
            server_connection_id: Some(7),
            server_address: "127.0.0.1:1".into(),
            duration_micros: None,
            command: command.map(|c| c.to_vec().unwrap()),
            reply: None,
            failure: None,
            service_id: None,
        }
    }

    fn log(spec: Document, events: &[CommandEvent]) -> EventLog {
        let mut log = EventLog::from_spec(&spec).unwrap();
        log.record(events);
        log
    }

    #[test]
    fn records_what_the_client_observes_only() {
        let events = [
            event(CommandEventKind::Started, "find", Some(doc! {"find": "c"})),
            event(CommandEventKind::Succeeded, "find", None),
            event(
                CommandEventKind::Started,
                "configureFailPoint",
                Some(doc! {}),
            ),
            event(CommandEventKind::Started, "killCursors", Some(doc! {})),
            event(CommandEventKind::Started, "saslStart", Some(doc! {})),
            event(
                CommandEventKind::Started,
                "hello",
                Some(doc! {"hello": 1, "speculativeAuthenticate": {}}),
            ),
            event(CommandEventKind::Started, "hello", Some(doc! {})),
        ];
        let spec = doc! {
            "observeEvents": ["commandStartedEvent"],
            "ignoreCommandMonitoringEvents": ["killCursors"],
        };
        let names: Vec<String> = log(spec, &events)
            .events
            .iter()
            .map(|e| e.command_name.clone())
            .collect();
        assert_eq!(names, ["find"]);
        let all =
            doc! { "observeEvents": ["commandStartedEvent"], "observeSensitiveCommands": true };
        assert_eq!(log(all, &events).events.len(), 5);
        assert!(log(doc! {}, &events).events.is_empty());
    }

    #[test]
    fn a_redacted_hello_hides_its_reply_too() {
        let mut reply = event(CommandEventKind::Succeeded, "hello", None);
        reply.reply = Some(doc! { "ok": 1 }.to_vec().unwrap());
        let events = [
            event(CommandEventKind::Started, "hello", Some(doc! {})),
            reply,
        ];
        let spec = doc! { "observeEvents": ["commandStartedEvent", "commandSucceededEvent"] };
        assert!(log(spec, &events).events.is_empty());
    }

    #[test]
    fn expected_events_in_order_with_root_command_matching() {
        let events = [
            event(
                CommandEventKind::Started,
                "insert",
                Some(doc! {"insert": "c", "ordered": true, "lsid": {"id": 1}}),
            ),
            event(CommandEventKind::Succeeded, "insert", None),
        ];
        let spec = doc! { "observeEvents": ["commandStartedEvent", "commandSucceededEvent"] };
        let log = log(spec, &events);
        let expected = doc! { "client": "c0", "events": [
            { "commandStartedEvent": { "command": { "insert": "c" }, "commandName": "insert", "databaseName": "db", "hasServerConnectionId": true } },
            { "commandSucceededEvent": { "commandName": "insert" } },
        ]};
        check(&expected, &log, &NoEntities).unwrap();
        let short = doc! { "events": [ { "commandStartedEvent": { "commandName": "insert" } } ] };
        assert!(check(&short, &log, &NoEntities)
            .unwrap_err()
            .contains("expected 1 events, observed 2"));
        let lenient =
            doc! { "ignoreExtraEvents": true, "events": [ { "commandStartedEvent": {} } ] };
        check(&lenient, &log, &NoEntities).unwrap();
        let wrong =
            doc! { "events": [ { "commandFailedEvent": {} }, { "commandSucceededEvent": {} } ] };
        assert!(check(&wrong, &log, &NoEntities)
            .unwrap_err()
            .contains("expected commandFailedEvent"));
        let logs = doc! { "eventType": "log", "events": [] };
        assert!(check(&logs, &log, &NoEntities)
            .unwrap_err()
            .contains("unknown eventType"));
    }

    fn pool(kind: PoolEventKind, reason: Option<&str>) -> PoolEvent {
        PoolEvent {
            kind,
            connection_id: 1,
            server_address: "127.0.0.1:1".into(),
            request_id: 0,
            duration_micros: None,
            reason: reason.map(String::from),
            closed: false,
            service_id: None,
            interrupt_in_use_connections: false,
        }
    }

    #[test]
    fn cmap_events_are_observed_by_name_and_matched_in_order() {
        use PoolEventKind as K;
        let spec = doc! { "observeEvents": [
            "connectionCheckOutStartedEvent", "connectionClosedEvent",
            "connectionCheckOutFailedEvent", "poolClearedEvent",
        ] };
        let mut log = EventLog::from_spec(&spec).unwrap();
        log.record_pool(&[
            pool(K::PoolCreated, None),
            pool(K::ConnectionCheckOutStarted, None),
            pool(K::ConnectionCreated, None),
            pool(K::PoolCleared, None),
            pool(K::ConnectionClosed, Some("error")),
            pool(K::ConnectionCheckOutFailed, Some("connectionError")),
            pool(K::PendingResponseStarted, None),
        ]);
        let names: Vec<&str> = log.cmap.iter().map(|e| e.name).collect();
        assert_eq!(
            names,
            [
                "connectionCheckOutStartedEvent",
                "poolClearedEvent",
                "connectionClosedEvent",
                "connectionCheckOutFailedEvent"
            ]
        );
        let exact = doc! { "eventType": "cmap", "events": [
            { "connectionCheckOutStartedEvent": {} },
            { "poolClearedEvent": { "hasServiceId": false } },
            { "connectionClosedEvent": { "reason": "error" } },
            { "connectionCheckOutFailedEvent": { "reason": "connectionError" } },
        ] };
        check(&exact, &log, &NoEntities).unwrap();
        let wrong_reason = doc! { "eventType": "cmap", "ignoreExtraEvents": true, "events": [
            { "connectionCheckOutStartedEvent": {} },
            { "poolClearedEvent": {} },
            { "connectionClosedEvent": { "reason": "stale" } },
        ] };
        assert!(check(&wrong_reason, &log, &NoEntities)
            .unwrap_err()
            .contains("reason"));
        let fewer =
            doc! { "eventType": "cmap", "events": [ { "connectionCheckOutStartedEvent": {} } ] };
        assert!(check(&fewer, &log, &NoEntities)
            .unwrap_err()
            .contains("expected 1 CMAP events, observed 4"));
        let lenient = doc! { "eventType": "cmap", "ignoreExtraEvents": true,
        "events": [ { "connectionCheckOutStartedEvent": {} } ] };
        check(&lenient, &log, &NoEntities).unwrap();
        let interrupt = doc! { "eventType": "cmap", "ignoreExtraEvents": true, "events": [
            { "connectionCheckOutStartedEvent": {} },
            { "poolClearedEvent": { "interruptInUseConnections": true } },
        ] };
        assert!(check(&interrupt, &log, &NoEntities).is_err());
        let unknown = doc! { "eventType": "cmap", "ignoreExtraEvents": true,
        "events": [ { "connectionCheckOutStartedEvnt": {} } ] };
        assert!(check(&unknown, &log, &NoEntities)
            .unwrap_err()
            .contains("unknown CMAP event"));
        let bad_field = doc! { "eventType": "cmap", "ignoreExtraEvents": true,
        "events": [ { "connectionCheckOutStartedEvent": { "reason": "x" } } ] };
        assert!(check(&bad_field, &log, &NoEntities).is_err());
    }

    #[test]
    fn an_unknown_observed_event_name_fails() {
        let spec = doc! { "observeEvents": ["connectionCheckedOutEvnt"] };
        assert!(EventLog::from_spec(&spec)
            .unwrap_err()
            .contains("unknown event"));
        let sdam = doc! { "observeEvents": ["topologyDescriptionChangedEvent"] };
        assert!(EventLog::from_spec(&sdam).is_ok());
    }

    fn sdam(kind: SdamEventKind, types: Option<(ServerType, ServerType)>) -> SdamEvent {
        use crate::bindings::exports::mongo_wasi::driver::types::ServerDescription;
        let server = |t| ServerDescription {
            address: "a:1".into(),
            server_type: t,
            error: None,
            average_rtt_micros: None,
            set_name: None,
            primary: None,
            hosts: Vec::new(),
            passives: Vec::new(),
            arbiters: Vec::new(),
            min_wire_version: 0,
            max_wire_version: 0,
        };
        SdamEvent {
            kind,
            server_address: "a:1".into(),
            previous_server: types.map(|(p, _)| server(p)),
            new_server: types.map(|(_, n)| server(n)),
            previous_topology: None,
            new_topology: None,
            connection_id: 0,
            awaited: false,
            duration_micros: None,
            failure: None,
        }
    }

    #[test]
    fn sdam_events_are_observed_by_name_and_matched_by_type() {
        use SdamEventKind as K;
        let spec = doc! { "observeEvents": ["serverDescriptionChangedEvent", "serverHeartbeatStartedEvent"] };
        let mut log = EventLog::from_spec(&spec).unwrap();
        log.record_sdam(&[
            sdam(K::TopologyOpening, None),
            sdam(K::ServerHeartbeatStarted, None),
            sdam(
                K::ServerDescriptionChanged,
                Some((ServerType::Unknown, ServerType::Standalone)),
            ),
            sdam(
                K::ServerDescriptionChanged,
                Some((ServerType::Standalone, ServerType::Unknown)),
            ),
        ]);
        assert_eq!(log.sdam.len(), 3, "topologyOpeningEvent is not observed");
        let exact = doc! { "eventType": "sdam", "events": [
            { "serverHeartbeatStartedEvent": { "awaited": false } },
            { "serverDescriptionChangedEvent": { "newDescription": { "type": "Standalone" } } },
            { "serverDescriptionChangedEvent": {
                "previousDescription": { "type": "Standalone" },
                "newDescription": { "type": "Unknown" } } },
        ] };
        check(&exact, &log, &NoEntities).unwrap();
        let wrong_type = doc! { "eventType": "sdam", "ignoreExtraEvents": true, "events": [
            { "serverHeartbeatStartedEvent": {} },
            { "serverDescriptionChangedEvent": { "newDescription": { "type": "RSPrimary" } } },
        ] };
        assert!(check(&wrong_type, &log, &NoEntities)
            .unwrap_err()
            .contains("type"));
        let awaited = doc! { "eventType": "sdam", "ignoreExtraEvents": true,
        "events": [ { "serverHeartbeatStartedEvent": { "awaited": true } } ] };
        assert!(check(&awaited, &log, &NoEntities).is_err());
        let unknown = doc! { "eventType": "sdam", "ignoreExtraEvents": true,
        "events": [ { "serverHeartbeatStartedEvnt": {} } ] };
        assert!(check(&unknown, &log, &NoEntities)
            .unwrap_err()
            .contains("unknown SDAM event"));
        let bad_field =
            doc! { "serverDescriptionChangedEvent": { "newDescription": { "tyep": "Unknown" } } };
        assert!(SdamExpectation::parse(&bad_field)
            .unwrap_err()
            .contains("unknown description field"));
        let no_awaited = doc! { "topologyOpeningEvent": { "awaited": false } };
        assert!(SdamExpectation::parse(&no_awaited).is_err());
        let fewer =
            doc! { "eventType": "sdam", "events": [ { "serverHeartbeatStartedEvent": {} } ] };
        assert!(check(&fewer, &log, &NoEntities)
            .unwrap_err()
            .contains("expected 1 SDAM events, observed 3"));
    }

    #[test]
    fn checked_out_connections_are_counted_whether_observed_or_not() {
        use PoolEventKind as K;
        let mut log = EventLog::from_spec(&doc! {}).unwrap();
        log.record_pool(&[
            pool(K::ConnectionCheckedOut, None),
            pool(K::ConnectionCheckedOut, None),
            pool(K::ConnectionCheckedIn, None),
        ]);
        assert_eq!(log.checked_out, 1);
        assert!(log.cmap.is_empty());
    }
}
