//! Command Logging and Monitoring: started/succeeded/failed events and
//! their log messages, recorded only when the client asked for them; and
//! `Recorder`, the one bounded queue pool (CMAP) and SDAM events wait in
//! until they are taken (and which logs them as they come).

use crate::error::Error;
use crate::logging::{Component, Context, Fields, LogMessage, Loggable, Logger};
use bson::{cstr, RawDocumentBuf};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Started,
    Succeeded,
    Failed,
}

#[derive(Debug, Clone)]
pub struct CommandEvent {
    pub kind: EventKind,
    pub command_name: String,
    pub database_name: String,
    pub request_id: i32,
    pub operation_id: i64,
    pub connection_id: u64,
    pub server_connection_id: Option<i64>,
    pub server_address: String,
    /// Behind a load balancer: the service the connection reached (hello's `serviceId`).
    pub service_id: Option<bson::oid::ObjectId>,
    pub duration: Option<Duration>,
    pub command: Option<RawDocumentBuf>,
    pub reply: Option<RawDocumentBuf>,
    pub failure: Option<Error>,
}

/// Commands whose bodies and replies must never be published.
const SENSITIVE: &[&str] = &[
    "authenticate",
    "saslstart",
    "saslcontinue",
    "getnonce",
    "createuser",
    "updateuser",
    "copydbgetnonce",
    "copydbsaslstart",
    "copydb",
];

/// Whether `name` (with its body) must be redacted: the list above, and a
/// hello that carries speculativeAuthenticate.
pub fn is_sensitive(name: &str, body: &bson::RawDocument) -> bool {
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    SENSITIVE.iter().any(|n| is(n))
        || ((is("hello") || is("ismaster"))
            && crate::wire::raw::find(body.as_bytes(), b"speculativeAuthenticate")
                .is_ok_and(|f| f.is_some()))
}

/// A sensitive command's failure as events may show it: a server's error
/// keeps its kind, code, codeName and labels but not its message or reply;
/// a network error or timeout is the driver's own and shown as is.
pub fn redact_failure(e: &Error) -> Error {
    if e.reply.is_none() && e.code.is_none() {
        return e.clone();
    }
    Error {
        message: "the server's error for a sensitive command (redacted)".into(),
        cause: None,
        reply: None,
        ..e.clone()
    }
}

/// At most this many pool or SDAM events wait to be taken; past it the
/// oldest are dropped (a client that monitors but never takes them stays bounded).
pub const MAX_EVENTS: usize = 10_000;

/// Recorded events of one kind: the one place they are kept, and only when
/// the client monitors; each is also logged when its component logs.
#[derive(Debug)]
pub struct Recorder<E> {
    /// `None` unless monitoring is on.
    events: Option<std::collections::VecDeque<E>>,
    log: Logger,
}

impl<E> Default for Recorder<E> {
    fn default() -> Self {
        Recorder {
            events: None,
            log: Logger::default(),
        }
    }
}

impl<E: Loggable> Recorder<E> {
    pub fn new(enabled: bool) -> Recorder<E> {
        Recorder {
            events: enabled.then(std::collections::VecDeque::new),
            log: Logger::default(),
        }
    }

    /// Also logs each event (when the logger's component is on).
    pub fn logging(self, log: Logger) -> Recorder<E> {
        Recorder { log, ..self }
    }

    /// Whether events are kept or logged.
    pub fn enabled(&self) -> bool {
        self.events.is_some() || self.logs()
    }

    fn logs(&self) -> bool {
        self.log.enabled(E::COMPONENT, crate::logging::Level::Debug)
    }

    /// Records and logs the event `make` builds (not even built when
    /// neither monitoring nor logging is on).
    pub fn emit(&mut self, make: impl FnOnce() -> E) {
        let logs = self.logs();
        if self.events.is_none() && !logs {
            return;
        }
        let event = make();
        if logs {
            self.log.event(&event);
        }
        if let Some(events) = self.events.as_mut() {
            if events.len() >= MAX_EVENTS {
                events.pop_front();
            }
            events.push_back(event);
        }
    }

    pub fn take(&mut self) -> Vec<E> {
        self.events
            .as_mut()
            .map(|e| e.drain(..).collect())
            .unwrap_or_default()
    }
}

/// "Command started/succeeded/failed" (Command Logging and Monitoring,
/// "Log Messages"): the event's fields, the command or reply as extended
/// JSON (an empty document when redacted, as in the event).
impl Loggable for CommandEvent {
    const COMPONENT: Component = Component::Command;

    fn log_message(&self, cx: &Context) -> Option<LogMessage> {
        let message = match self.kind {
            EventKind::Started => "Command started",
            EventKind::Succeeded => "Command succeeded",
            EventKind::Failed => "Command failed",
        };
        let mut f = Fields::new(cx, Component::Command, message);
        if let Some(command) = &self.command {
            f = f.document(cstr!("command"), command);
        }
        f = f
            .str(cstr!("databaseName"), &self.database_name)
            .str(cstr!("commandName"), &self.command_name)
            .int(cstr!("requestId"), i64::from(self.request_id))
            .int(cstr!("operationId"), self.operation_id)
            .int(cstr!("driverConnectionId"), self.connection_id as i64);
        if let Some(id) = self.server_connection_id {
            f = f.int(cstr!("serverConnectionId"), id);
        }
        f = f.server(&self.server_address);
        if let Some(id) = self.service_id {
            f = f.str(cstr!("serviceId"), &id.to_hex());
        }
        if let Some(d) = self.duration {
            f = f.duration(d);
        }
        match self.kind {
            EventKind::Succeeded => {
                let empty = RawDocumentBuf::new();
                f = f.document(cstr!("reply"), self.reply.as_ref().unwrap_or(&empty));
            }
            EventKind::Failed => {
                let failure = self.failure.as_ref().map(|e| e.to_string());
                f = f.text(cstr!("failure"), failure.as_deref().unwrap_or("unknown"));
            }
            EventKind::Started => {}
        }
        f.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    impl Loggable for u64 {
        const COMPONENT: Component = Component::Command;
        fn log_message(&self, cx: &Context) -> Option<LogMessage> {
            Fields::new(cx, Component::Command, "n")
                .int(cstr!("n"), *self as i64)
                .finish()
        }
    }

    #[test]
    fn events_are_recorded_only_when_monitoring_and_bounded() {
        let mut off = Recorder::<u64>::new(false);
        off.emit(|| unreachable!("not built when monitoring is off"));
        assert!(off.take().is_empty() && !off.enabled());
        let mut on = Recorder::new(true);
        for id in 0..MAX_EVENTS as u64 + 2 {
            on.emit(|| id);
        }
        let got = on.take();
        assert_eq!(got.len(), MAX_EVENTS);
        assert_eq!(got[0], 2, "the oldest are dropped");
        assert!(on.take().is_empty(), "taking drains");
    }

    #[test]
    fn redaction_rules() {
        assert!(is_sensitive("saslStart", &rawdoc! {}));
        assert!(!is_sensitive("find", &rawdoc! {}));
        assert!(!is_sensitive("hello", &rawdoc! {}));
        assert!(is_sensitive(
            "hello",
            &rawdoc! { "speculativeAuthenticate": {} }
        ));
        for name in ["authenticate", "saslContinue", "isMaster", "ismaster"] {
            let body = rawdoc! { "speculativeAuthenticate": { "saslStart": 1 } };
            assert!(is_sensitive(name, &body), "{name}");
        }
        assert!(!is_sensitive("isMaster", &rawdoc! {}));
        assert!(!is_sensitive(
            "find",
            &rawdoc! { "speculativeAuthenticate": {} }
        ));
    }

    #[test]
    fn a_sensitive_failure_keeps_the_code_not_the_server_text() {
        let server = crate::error::check_ok(
            &rawdoc! { "ok": 0, "errmsg": "user alice", "code": 18, "codeName": "AuthenticationFailed" },
        )
        .unwrap_err();
        let shown = redact_failure(&server);
        assert_eq!(shown.code, Some(18));
        assert_eq!(shown.code_name.as_deref(), Some("AuthenticationFailed"));
        assert!(shown.reply.is_none() && !shown.message.contains("alice"));
        let net = crate::Error::network("connection closed by the server");
        assert_eq!(redact_failure(&net), net, "a network error is not redacted");
    }
}
