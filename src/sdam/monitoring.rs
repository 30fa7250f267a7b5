//! SDAM Logging and Monitoring, sans I/O: the events a topology publishes
//! (opening and closing, description changes, the monitor's heartbeats),
//! recorded only when the client monitors. Which description events a change
//! publishes is decided in one place, `changes`, from the descriptions
//! before and after it (Server Description Equality: nothing for what is equal).

use super::{ServerDescription, TopologyDescription};
use crate::logging::{Component, Context, Fields, LogMessage, Loggable, Logger};
use crate::monitoring::Recorder;
use bson::cstr;
use std::time::Duration;

/// One SDAM event. There is no topology id: a client has one topology, and
/// its events are taken from that client.
#[derive(Debug, Clone)]
pub enum SdamEvent {
    /// The topology was created: always the first event.
    TopologyOpening,
    /// The description changed (the first one from an empty Unknown description).
    TopologyDescriptionChanged {
        previous: Box<TopologyDescription>,
        new: Box<TopologyDescription>,
    },
    /// The topology was closed: always the last event.
    TopologyClosed,
    /// A server joined the topology (a seed, or a member a replica set named).
    ServerOpening {
        address: String,
    },
    /// A server's description changed (RTT aside).
    ServerDescriptionChanged {
        address: String,
        previous: Box<ServerDescription>,
        new: Box<ServerDescription>,
    },
    /// A server left the topology (or the topology was closed).
    ServerClosed {
        address: String,
    },
    ServerHeartbeatStarted(Heartbeat),
    ServerHeartbeatSucceeded(Heartbeat),
    ServerHeartbeatFailed(Heartbeat),
}

/// What a heartbeat event tells: a server check's hello.
#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    pub address: String,
    /// The driver's id of the check's connection (for a new connection, the
    /// id it gets: started is published before its socket is opened).
    pub connection_id: u64,
    /// The streaming protocol's awaited hello (WASI 0.3's monitor); false for
    /// a check that asked for an answer at once.
    pub awaited: bool,
    /// Succeeded: the round trip (the RTT sample); failed: until the failure.
    pub duration: Option<Duration>,
    /// Failed: why.
    pub failure: Option<String>,
    /// Succeeded: the server's id for the connection (hello's `connectionId`).
    pub server_connection_id: Option<i64>,
    /// Succeeded: the hello's reply.
    pub reply: Option<bson::RawDocumentBuf>,
}

impl SdamEvent {
    /// A heartbeat event of the streaming protocol (`awaited`); other events pass unchanged.
    pub fn awaited(mut self) -> SdamEvent {
        if let SdamEvent::ServerHeartbeatStarted(h)
        | SdamEvent::ServerHeartbeatSucceeded(h)
        | SdamEvent::ServerHeartbeatFailed(h) = &mut self
        {
            h.awaited = true;
        }
        self
    }
}

impl Heartbeat {
    fn new(address: &str, connection_id: u64) -> Heartbeat {
        Heartbeat {
            address: address.to_string(),
            connection_id,
            awaited: false,
            duration: None,
            failure: None,
            server_connection_id: None,
            reply: None,
        }
    }

    pub fn started(address: &str, connection_id: u64) -> SdamEvent {
        SdamEvent::ServerHeartbeatStarted(Heartbeat::new(address, connection_id))
    }

    pub fn succeeded(
        address: &str,
        connection_id: u64,
        duration: Duration,
        server_connection_id: Option<i64>,
        reply: bson::RawDocumentBuf,
    ) -> SdamEvent {
        SdamEvent::ServerHeartbeatSucceeded(Heartbeat {
            duration: Some(duration),
            server_connection_id,
            reply: Some(without_auth_fields(reply)),
            ..Heartbeat::new(address, connection_id)
        })
    }

    pub fn failed(
        address: &str,
        connection_id: u64,
        duration: Duration,
        failure: String,
    ) -> SdamEvent {
        SdamEvent::ServerHeartbeatFailed(Heartbeat {
            duration: Some(duration),
            failure: Some(failure),
            ..Heartbeat::new(address, connection_id)
        })
    }
}

/// The recorder a topology description carries. A copy of a description (a
/// snapshot: the previous description, an event's) records nothing.
#[derive(Debug, Default)]
pub struct SdamEvents(Recorder<SdamEvent>);

impl Clone for SdamEvents {
    fn clone(&self) -> Self {
        SdamEvents::default()
    }
}

impl SdamEvents {
    /// Events kept when `enabled`; logged when `log`'s topology component is on.
    pub fn new(enabled: bool, log: Logger) -> SdamEvents {
        SdamEvents(Recorder::new(enabled).logging(log))
    }

    pub fn enabled(&self) -> bool {
        self.0.enabled()
    }

    pub fn emit(&mut self, make: impl FnOnce() -> SdamEvent) {
        self.0.emit(make)
    }

    pub fn take(&mut self) -> Vec<SdamEvent> {
        self.0.take()
    }
}

/// A description as the "Topology description changed" message shows it:
/// the type, set name and each server's address and type.
pub fn summary(t: &TopologyDescription) -> String {
    let servers: Vec<String> = t
        .servers
        .iter()
        .map(|s| format!("{{address: {}, type: {}}}", s.address, s.kind.as_str()))
        .collect();
    let set = t
        .set_name
        .as_deref()
        .map(|n| format!(", setName: {n}"))
        .unwrap_or_default();
    format!(
        "{{type: {}{set}, servers: [{}]}}",
        t.kind.as_str(),
        servers.join(", ")
    )
}

/// The SDAM Logging and Monitoring spec's messages. A server's description
/// change has none (the topology's change tells it).
impl Loggable for SdamEvent {
    const COMPONENT: Component = Component::Topology;

    fn log_message(&self, cx: &Context) -> Option<LogMessage> {
        let topology = |message| {
            Fields::new(cx, Component::Topology, message).int(cstr!("topologyId"), cx.topology_id)
        };
        let f = match self {
            SdamEvent::TopologyOpening => topology("Starting topology monitoring"),
            SdamEvent::TopologyClosed => topology("Stopped topology monitoring"),
            SdamEvent::ServerOpening { address } => {
                topology("Starting server monitoring").server(address)
            }
            SdamEvent::ServerClosed { address } => {
                topology("Stopped server monitoring").server(address)
            }
            SdamEvent::TopologyDescriptionChanged { previous, new } => {
                topology("Topology description changed")
                    .text(cstr!("previousDescription"), &summary(previous))
                    .text(cstr!("newDescription"), &summary(new))
            }
            SdamEvent::ServerDescriptionChanged { .. } => return None,
            SdamEvent::ServerHeartbeatStarted(h)
            | SdamEvent::ServerHeartbeatSucceeded(h)
            | SdamEvent::ServerHeartbeatFailed(h) => {
                let message = match self {
                    SdamEvent::ServerHeartbeatStarted(_) => "Server heartbeat started",
                    SdamEvent::ServerHeartbeatSucceeded(_) => "Server heartbeat succeeded",
                    _ => "Server heartbeat failed",
                };
                let mut f = topology(message)
                    .server(&h.address)
                    .int(cstr!("driverConnectionId"), h.connection_id as i64)
                    .bool(cstr!("awaited"), h.awaited);
                if let Some(id) = h.server_connection_id {
                    f = f.int(cstr!("serverConnectionId"), id);
                }
                if let Some(d) = h.duration {
                    f = f.duration(d);
                }
                if let Some(reply) = &h.reply {
                    // Without the authentication fields (`without_auth_fields`).
                    f = f.document(cstr!("reply"), reply);
                }
                if let Some(failure) = &h.failure {
                    f = f.text(cstr!("failure"), failure);
                }
                f
            }
        };
        f.finish()
    }
}

/// The events of one change from `before` to `after`, in the order the spec's
/// tests expect: ServerDescriptionChanged for `checked` (the server whose new
/// description was applied; the description it has now, or the one applied
/// if that removed it), ServerOpening for each server added, ServerClosed for
/// each removed, TopologyDescriptionChanged last. Equal descriptions publish
/// nothing.
pub fn changes(
    before: &TopologyDescription,
    after: &TopologyDescription,
    checked: Option<&ServerDescription>,
) -> Vec<SdamEvent> {
    let mut events = Vec::new();
    if let Some(checked) = checked {
        let address = &checked.address;
        if let Some(previous) = before.server(address) {
            let new = after.server(address).unwrap_or(checked);
            if !previous.same_as(new) {
                events.push(SdamEvent::ServerDescriptionChanged {
                    address: address.clone(),
                    previous: Box::new(previous.clone()),
                    new: Box::new(new.clone()),
                });
            }
        }
    }
    let (was, is) = (before.by_address(), after.by_address());
    for s in &after.servers {
        if !was.contains_key(s.address.as_str()) {
            let address = s.address.clone();
            events.push(SdamEvent::ServerOpening { address });
        }
    }
    for s in &before.servers {
        if !is.contains_key(s.address.as_str()) {
            let address = s.address.clone();
            events.push(SdamEvent::ServerClosed { address });
        }
    }
    if !before.same_as(after) {
        events.push(SdamEvent::TopologyDescriptionChanged {
            previous: Box::new(before.clone()),
            new: Box::new(after.clone()),
        });
    }
    events
}

/// The events of a topology opening on `initial`: TopologyOpening, the first
/// TopologyDescriptionChanged (from an empty Unknown description to `initial`
/// with every server Unknown), ServerOpening for each server; then what
/// `initial` already knows (a load balancer's type) as a change.
pub fn opening(initial: &TopologyDescription) -> Vec<SdamEvent> {
    let mut seeded = initial.clone();
    for s in &mut seeded.servers {
        *s = ServerDescription::unknown(s.address.clone());
    }
    let empty = TopologyDescription::new(&[], None, None);
    let mut events = vec![
        SdamEvent::TopologyOpening,
        SdamEvent::TopologyDescriptionChanged {
            previous: Box::new(empty),
            new: Box::new(seeded.clone()),
        },
    ];
    for s in &seeded.servers {
        let address = s.address.clone();
        events.push(SdamEvent::ServerOpening { address });
    }
    for s in &initial.servers {
        events.extend(
            changes(&seeded, initial, Some(s))
                .into_iter()
                .filter(|e| matches!(e, SdamEvent::ServerDescriptionChanged { .. })),
        );
    }
    if !seeded.same_as(initial) {
        events.push(SdamEvent::TopologyDescriptionChanged {
            previous: Box::new(seeded),
            new: Box::new(initial.clone()),
        });
    }
    events
}

/// The hello fields of a connection's authentication, not of monitoring:
/// mechanism negotiation and the server's half of speculative authentication.
const AUTH_FIELDS: [&str; 2] = ["saslSupportedMechs", "speculativeAuthenticate"];

/// A heartbeat's reply without [`AUTH_FIELDS`]. A single-threaded client's
/// check is the connection's handshake, which authenticates; a monitor's
/// would not, so the rest of the reply is what the SDAM spec reports, and the
/// credential exchange is not.
fn without_auth_fields(reply: bson::RawDocumentBuf) -> bson::RawDocumentBuf {
    let has = |key: &str| reply.get(key).ok().flatten().is_some();
    if !AUTH_FIELDS.iter().any(|k| has(k)) {
        return reply;
    }
    let mut kept = bson::RawDocumentBuf::new();
    for (key, value) in reply.iter().flatten() {
        if !AUTH_FIELDS.contains(&key.as_str()) {
            kept.append(key, bson::RawBson::from(value));
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::HelloReply;

    #[test]
    fn sdam_messages_name_the_topology_and_leave_out_authentication() {
        let cx = Context {
            max_document_length: 1000,
            pool_options: bson::RawDocumentBuf::new(),
            topology_id: 9,
        };
        let log = |e: &SdamEvent| e.log_message(&cx).map(|m| m.data);
        let opening = log(&SdamEvent::TopologyOpening).unwrap();
        assert_eq!(
            opening.get_str("message").unwrap(),
            "Starting topology monitoring"
        );
        assert_eq!(opening.get_i64("topologyId").unwrap(), 9);
        let changed = SdamEvent::ServerDescriptionChanged {
            address: "a:1".into(),
            previous: Box::new(ServerDescription::unknown("a:1".into())),
            new: Box::new(ServerDescription::unknown("a:1".into())),
        };
        assert!(log(&changed).is_none(), "the topology's change tells it");
        let hello = bson::rawdoc! { "ok": 1, "isWritablePrimary": true };
        let ok = Heartbeat::succeeded("a:1", 2, Duration::from_millis(1), Some(40), hello);
        let ok = log(&ok).unwrap();
        assert_eq!(
            ok.get_str("reply").unwrap(),
            r#"{"ok":1,"isWritablePrimary":true}"#
        );
        assert_eq!(ok.get_i64("serverConnectionId").unwrap(), 40);
        assert!(!ok.get_bool("awaited").unwrap());
        // The handshake's authentication exchange is left out; the rest shows.
        let secret = bson::rawdoc! { "ok": 1, "saslSupportedMechs": ["SCRAM-SHA-256"],
        "speculativeAuthenticate": { "payload": "salt" } };
        let secret = Heartbeat::succeeded("a:1", 2, Duration::from_millis(1), None, secret);
        assert_eq!(
            log(&secret).unwrap().get_str("reply").unwrap(),
            r#"{"ok":1}"#
        );
        let mut t = TopologyDescription::new(&["a:1".into()], None, None);
        t.update(
            "a:1",
            Ok((
                HelloReply {
                    is_writable_primary: true,
                    max_wire_version: 21,
                    ..Default::default()
                },
                None,
            )),
        );
        let shown = summary(&t);
        assert!(
            shown.contains("a:1") && shown.contains("Standalone"),
            "{shown}"
        );
    }

    fn names(events: &[SdamEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                SdamEvent::TopologyOpening => "TopologyOpening".into(),
                SdamEvent::TopologyClosed => "TopologyClosed".into(),
                SdamEvent::TopologyDescriptionChanged { previous, new } => {
                    format!("TDC {}->{}", previous.kind.as_str(), new.kind.as_str())
                }
                SdamEvent::ServerOpening { address } => format!("ServerOpening {address}"),
                SdamEvent::ServerClosed { address } => format!("ServerClosed {address}"),
                SdamEvent::ServerDescriptionChanged {
                    address,
                    previous,
                    new,
                } => format!(
                    "SDC {address} {}->{}",
                    previous.kind.as_str(),
                    new.kind.as_str()
                ),
                SdamEvent::ServerHeartbeatStarted(_) => "HeartbeatStarted".into(),
                SdamEvent::ServerHeartbeatSucceeded(_) => "HeartbeatSucceeded".into(),
                SdamEvent::ServerHeartbeatFailed(_) => "HeartbeatFailed".into(),
            })
            .collect()
    }

    fn standalone() -> HelloReply {
        HelloReply {
            is_writable_primary: true,
            max_wire_version: 21,
            ..Default::default()
        }
    }

    #[test]
    fn a_topology_publishes_its_life_and_nothing_for_equal_descriptions() {
        let mut t = TopologyDescription::new(&["a:1".into()], Some(true), None);
        t.monitor();
        t.update("a:1", Ok((standalone(), None)));
        // Only the RTT differs: nothing to publish.
        let rtt = Some(Duration::from_millis(3));
        t.update("a:1", Ok((standalone(), rtt)));
        t.close();
        assert_eq!(
            names(&t.take_events()),
            [
                "TopologyOpening",
                "TDC Unknown->Single",
                "ServerOpening a:1",
                "SDC a:1 Unknown->Standalone",
                "TDC Single->Single",
                "ServerClosed a:1",
                "TDC Single->Unknown",
                "TopologyClosed"
            ]
        );
        assert!(t.take_events().is_empty(), "taking drains");
    }

    #[test]
    fn nothing_is_recorded_without_monitoring() {
        let mut t = TopologyDescription::new(&["a:1".into()], Some(true), None);
        t.update("a:1", Ok((standalone(), None)));
        t.emit(|| unreachable!("not built when monitoring is off"));
        t.close();
        assert!(t.take_events().is_empty());
        // A copy never records either.
        let mut m = TopologyDescription::new(&["a:1".into()], Some(true), None);
        m.monitor();
        let mut copy = m.clone();
        copy.update("a:1", Ok((standalone(), None)));
        assert!(copy.take_events().is_empty());
    }

    #[test]
    fn a_load_balancer_opens_unknown_then_changes() {
        let mut t = TopologyDescription::load_balanced("lb:1");
        t.monitor();
        assert_eq!(
            names(&t.take_events()),
            [
                "TopologyOpening",
                "TDC Unknown->LoadBalanced",
                "ServerOpening lb:1",
                "SDC lb:1 Unknown->LoadBalancer",
                "TDC LoadBalanced->LoadBalanced"
            ]
        );
    }

    #[test]
    fn heartbeats_carry_the_connection_and_outcome() {
        let SdamEvent::ServerHeartbeatFailed(h) =
            Heartbeat::failed("a:1", 4, Duration::from_millis(2), "refused".into())
        else {
            panic!("a failed heartbeat")
        };
        assert_eq!((h.connection_id, h.awaited), (4, false));
        assert_eq!(h.failure.as_deref(), Some("refused"));
        assert_eq!(h.duration, Some(Duration::from_millis(2)));
    }
}
