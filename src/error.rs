//! The one error type. Mirrors the WIT `error` record so the export glue is a plain copy.

use bson::{RawDocument, RawDocumentBuf};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Timeout,
    Network,
    Server,
    ServerSelection,
    InvalidArgument,
    NotImplemented,
    Protocol,
    Closed,
    /// The server refused the credential, or the authentication conversation
    /// failed (a malformed or forged server message). Never retried.
    Authentication,
    /// The host refused a socket operation or a name lookup (wasi:sockets
    /// `access-denied`, `not-supported`, or the resolver failure a host answers
    /// when name lookup is not allowed): its policy, so never retried, and
    /// server selection fails at once. The message names the address.
    AccessDenied,
    /// A write would duplicate a unique index key (codes 11000, 11001, 12582).
    DuplicateKey,
    /// The write was applied but its write concern was not satisfied.
    WriteConcern,
}

/// The server codes of a duplicate key (DuplicateKey and its legacy forms).
const DUPLICATE_KEY_CODES: [i32; 3] = [11000, 11001, 12582];

/// One write error of a write command (CRUD spec, WriteError).
#[derive(Debug, Clone, PartialEq)]
pub struct WriteError {
    /// The position of the failed document or model in the caller's list.
    pub index: u32,
    pub code: i32,
    pub code_name: Option<String>,
    pub message: String,
    /// The server's `errInfo`.
    pub details: Option<RawDocumentBuf>,
}

/// A write concern error (CRUD spec, WriteConcernError).
#[derive(Debug, Clone, PartialEq)]
pub struct WriteConcernError {
    pub code: i32,
    pub code_name: Option<String>,
    pub message: String,
    /// The server's `errInfo`.
    pub details: Option<RawDocumentBuf>,
}

/// What a failed insert-many, bulk write or client bulk write reports
/// (CRUD spec and Bulk Write spec, BulkWriteException): its errors and what
/// it wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteFailure {
    pub write_errors: Vec<WriteError>,
    pub write_concern_errors: Vec<WriteConcernError>,
    /// Insert-many and a collection's bulk write: what they wrote.
    pub partial_result: Option<crate::write_result::BulkWriteResult>,
    /// A client bulk write: what it wrote, when some write is known to have
    /// succeeded.
    pub client_partial_result: Option<crate::write_result::ClientBulkWriteResult>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub kind: ErrorKind,
    pub code: Option<i32>,
    pub code_name: Option<String>,
    pub labels: Vec<String>,
    pub message: String,
    /// The underlying cause (the CSOT spec requires a timeout to carry it,
    /// and its text to include the cause's). Boxed: rarely set.
    pub cause: Option<Box<Cause>>,
    /// Boxed: rarely set, and it keeps `Result<T>` small on the hot path.
    pub reply: Option<Box<RawDocumentBuf>>,
    /// The write errors and partial result of a failed insert-many, bulk
    /// write or client bulk write. Boxed, as `reply`.
    pub write_failure: Option<Box<WriteFailure>>,
}

pub type Result<T> = std::result::Result<T, Error>;

/// What an error's cause is: another error, or only a text.
#[derive(Debug, Clone, PartialEq)]
pub enum Cause {
    Error(Error),
    Text(String),
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Error(e) => e.fmt(f),
            Cause::Text(t) => f.write_str(t),
        }
    }
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            code: None,
            code_name: None,
            labels: Vec::new(),
            message: message.into(),
            cause: None,
            reply: None,
            write_failure: None,
        }
    }

    /// The kind a caller branches on, decided once an error is final (after
    /// retries, which look at `Server` errors' codes): a server error with a
    /// duplicate key code is `DuplicateKey`; one made from a reply's
    /// `writeConcernError` (the reply carries it, with the error's code) is
    /// `WriteConcern`.
    pub fn settled(mut self) -> Error {
        if self.kind != ErrorKind::Server {
            return self;
        }
        if self.code.is_some_and(|c| DUPLICATE_KEY_CODES.contains(&c)) {
            self.kind = ErrorKind::DuplicateKey;
        } else if self.reply.as_ref().is_some_and(|r| {
            r.get_document("writeConcernError").is_ok_and(|w| {
                self.code.is_some()
                    && crate::wire::raw::int_field(w, "code").map(|c| c as i32) == self.code
            })
        }) {
            self.kind = ErrorKind::WriteConcern;
        }
        self
    }

    /// A deadline expired while `section` was waiting.
    pub fn timeout(section: &str) -> Self {
        Error::new(
            ErrorKind::Timeout,
            format!("operation timed out during {section}"),
        )
    }

    pub fn network(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Network, message)
    }

    pub fn protocol(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Protocol, message)
    }

    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub fn not_implemented(what: &str) -> Self {
        Error::new(
            ErrorKind::NotImplemented,
            format!("{what} is not implemented yet"),
        )
    }

    pub fn closed(what: &str) -> Self {
        Error::new(ErrorKind::Closed, format!("{what} is closed"))
    }

    /// A cause known only as text (a BSON decoding error, a computation).
    pub fn with_cause(mut self, cause: impl fmt::Display) -> Self {
        self.cause = Some(Box::new(Cause::Text(cause.to_string())));
        self
    }

    /// `cause` as this error's typed cause.
    pub fn caused_by(mut self, cause: Error) -> Self {
        self.cause = Some(Box::new(Cause::Error(cause)));
        self
    }

    /// The cause when it is an error (its kind, code and labels): the
    /// server error behind MaxTimeMSExpired, the error a timed-out retry
    /// began with, the selection failure behind a CSOT timeout.
    pub fn cause_error(&self) -> Option<&Error> {
        match self.cause.as_deref() {
            Some(Cause::Error(e)) => Some(e),
            _ => None,
        }
    }

    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// No server was selected in time: the legacy server selection error,
    /// or under CSOT a timeout caused by one.
    pub fn is_selection_failure(&self) -> bool {
        self.kind == ErrorKind::ServerSelection
            || self
                .cause_error()
                .is_some_and(|c| c.kind == ErrorKind::ServerSelection)
    }

    /// The one test for "a network error" (retries, transaction and
    /// retryable-write labels, change stream resumes): the socket failed, or
    /// a socket read or write timed out (a timeout with no server code).
    pub fn is_network(&self) -> bool {
        self.kind == ErrorKind::Network
            || (self.kind == ErrorKind::Timeout
                && self.code.is_none()
                && !self.is_selection_failure())
    }

    /// The one test for a failure to reach a server that retrying cannot
    /// mend: the host's policy (`AccessDenied`), an address no socket takes
    /// (`InvalidArgument`, e.g. an IPv4-mapped IPv6 address), or a peer that
    /// breaks the protocol (`Protocol`: not TLS, a fatal TLS alert, a
    /// rejected certificate, a hello that is not BSON). Server selection
    /// fails with it at once when every server's last check failed so.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::AccessDenied | ErrorKind::InvalidArgument | ErrorKind::Protocol
        )
    }

    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }

    pub fn add_label(&mut self, label: &str) {
        if !self.has_label(label) {
            self.labels.push(label.to_string());
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)?;
        if let Some(code) = self.code {
            write!(f, " (code {code}")?;
            if let Some(name) = &self.code_name {
                write!(f, " {name}")?;
            }
            write!(f, ")")?;
        }
        if let Some(cause) = &self.cause {
            write!(f, ": caused by {cause}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause_error()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<bson::error::Error> for Error {
    fn from(e: bson::error::Error) -> Self {
        Error::protocol("malformed BSON").with_cause(e)
    }
}

impl From<crate::uri::UriError> for Error {
    fn from(e: crate::uri::UriError) -> Self {
        Error::invalid_argument(format!("invalid connection string: {}", e.message))
    }
}

// Server replies: whether one is ok, the error an ok:0 reply or an error
// document is, and which codes are state changes. Auth, SDAM, the
// connection and the executor all judge replies here.

/// When a reply (or a bulk write's per-operation result) is ok: its `ok`
/// field is 1 (int32, int64 or double) or true. The one rule for it.
pub fn is_ok(ok: Option<bson::RawBsonRef>) -> bool {
    match ok {
        Some(bson::RawBsonRef::Double(v)) => v == 1.0,
        Some(bson::RawBsonRef::Int32(v)) => v == 1,
        Some(bson::RawBsonRef::Int64(v)) => v == 1,
        Some(bson::RawBsonRef::Boolean(v)) => v,
        _ => false,
    }
}

/// Turns an ok:0 reply into a server error carrying code, codeName, labels.
pub fn check_ok(reply: &RawDocument) -> Result<()> {
    check_ok_field(reply, crate::wire::raw::get(reply, "ok"))
}

/// [`check_ok`] with the reply's `ok` field already read.
pub fn check_ok_field(reply: &RawDocument, ok: Option<bson::RawBsonRef>) -> Result<()> {
    if is_ok(ok) {
        return Ok(());
    }
    Err(server_error(
        reply,
        reply.get_str("errmsg").unwrap_or("command failed"),
        Some(reply.to_owned()),
    ))
}

/// A server error from an error document (a reply, a writeError, a writeConcernError).
pub fn server_error(doc: &RawDocument, message: &str, reply: Option<RawDocumentBuf>) -> Error {
    let mut e = Error::new(ErrorKind::Server, message);
    e.code = doc.get_i32("code").ok();
    e.code_name = doc.get_str("codeName").ok().map(str::to_string);
    if let Ok(labels) = doc.get_array("errorLabels") {
        e.labels = labels
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
    }
    // Code 50 (MaxTimeMSExpired) becomes a timeout only under CSOT:
    // `OpTimeout::transform` decides.
    e.reply = reply.map(Box::new);
    e
}

/// The kinds of state change error (SDAM: "not writable primary" and "node
/// is recovering"); shutdown errors are recovering ones that also clear the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateChange {
    NotWritablePrimary,
    Recovering { shutdown: bool },
}

impl StateChange {
    /// By the code when there is one, else by the message, as the spec asks.
    pub fn of(code: Option<i32>, message: &str) -> Option<StateChange> {
        const NOT_PRIMARY: &[i32] = &[10107, 13435, 10058];
        const RECOVERING: &[i32] = &[11602, 13436, 189];
        const SHUTDOWN: &[i32] = &[11600, 91];
        match code {
            Some(c) if SHUTDOWN.contains(&c) => Some(StateChange::Recovering { shutdown: true }),
            Some(c) if RECOVERING.contains(&c) => Some(StateChange::Recovering { shutdown: false }),
            Some(c) if NOT_PRIMARY.contains(&c) => Some(StateChange::NotWritablePrimary),
            Some(_) => None,
            None if message.contains("node is recovering")
                || message.contains("not master or secondary") =>
            {
                Some(StateChange::Recovering { shutdown: false })
            }
            None if message.contains("not master") => Some(StateChange::NotWritablePrimary),
            None => None,
        }
    }
}

/// SDAM error handling: whether `code` is a state change error, and then
/// whether the pool must be cleared too (shutdown errors).
pub fn state_change_error(code: i32) -> Option<bool> {
    match StateChange::of(Some(code), "")? {
        StateChange::Recovering { shutdown } => Some(shutdown),
        StateChange::NotWritablePrimary => Some(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn a_typed_cause_keeps_kind_code_and_labels_and_shows_in_the_text() {
        let mut net = Error::network("connection reset");
        net.code = Some(9001);
        net.add_label("RetryableWriteError");
        let t = Error::timeout("retry").caused_by(net.clone());
        assert_eq!(t.cause_error(), Some(&net));
        assert!(t.to_string().contains("connection reset"));
        assert!(std::error::Error::source(&t).is_some());
        let text = t.clone().with_cause("text");
        assert!(text.cause_error().is_none());
        assert!(text.to_string().ends_with("caused by text"));
    }

    #[test]
    fn settled_kinds_name_duplicate_keys_and_write_concern_errors() {
        let mut dup = Error::new(ErrorKind::Server, "E11000");
        dup.code = Some(11000);
        assert_eq!(dup.clone().settled().kind, ErrorKind::DuplicateKey);
        let mut wce = Error::new(ErrorKind::Server, "waiting for replication timed out");
        wce.code = Some(64);
        assert_eq!(
            wce.clone().settled().kind,
            ErrorKind::Server,
            "no reply: a plain error"
        );
        wce.reply = Some(Box::new(
            bson::rawdoc! { "ok": 1, "writeConcernError": { "code": 64 } },
        ));
        assert_eq!(wce.clone().settled().kind, ErrorKind::WriteConcern);
        wce.code = Some(91);
        assert_eq!(
            wce.settled().kind,
            ErrorKind::Server,
            "another code: not the concern's"
        );
        let mut timeout = Error::timeout("x");
        timeout.code = Some(11000);
        assert_eq!(
            timeout.settled().kind,
            ErrorKind::Timeout,
            "only server errors"
        );
    }

    #[test]
    fn a_selection_timeout_is_not_a_network_error() {
        assert!(Error::timeout("socket read").is_network());
        assert!(Error::network("reset").is_network());
        let selection = Error::new(ErrorKind::ServerSelection, "no server");
        let t = Error::timeout("server selection").caused_by(selection.clone());
        assert!(t.is_selection_failure() && selection.is_selection_failure());
        assert!(
            !t.is_network(),
            "not retried, not a transient network error"
        );
        let mut code50 = Error::timeout("server");
        code50.code = Some(50);
        assert!(!code50.is_network());
    }

    #[test]
    fn ok_variants() {
        assert!(check_ok(&rawdoc! { "ok": 1.0 }).is_ok());
        assert!(check_ok(&rawdoc! { "ok": 1 }).is_ok());
        assert!(check_ok(&rawdoc! { "ok": 0 }).is_err());
        assert!(
            check_ok(&rawdoc! {}).is_err(),
            "a reply without ok is a failure"
        );
    }

    #[test]
    fn server_error_carries_code_name_and_labels() {
        let e = check_ok(&rawdoc! {
            "ok": 0, "errmsg": "not primary", "code": 10107, "codeName": "NotWritablePrimary",
            "errorLabels": ["RetryableWriteError"],
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Server);
        assert_eq!(e.code, Some(10107));
        assert_eq!(e.code_name.as_deref(), Some("NotWritablePrimary"));
        assert!(e.has_label("RetryableWriteError"));
        assert_eq!(e.message, "not primary");
        assert!(e.reply.is_some());
    }

    #[test]
    fn max_time_expired_keeps_its_server_kind_here() {
        let e =
            check_ok(&rawdoc! { "ok": 0, "errmsg": "operation exceeded time limit", "code": 50 })
                .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Server, "the operation's mode decides");
        assert_eq!(e.code, Some(50));
    }

    #[test]
    fn state_change_errors() {
        assert_eq!(state_change_error(10107), Some(false));
        assert_eq!(state_change_error(91), Some(true));
        assert_eq!(state_change_error(11000), None);
    }
}
