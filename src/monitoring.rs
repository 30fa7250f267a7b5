//! Command Logging and Monitoring: started/succeeded/failed events,
//! recorded only when the client asked for them.

use crate::error::Error;
use bson::RawDocumentBuf;
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
    let lower = name.to_ascii_lowercase();
    SENSITIVE.contains(&lower.as_str())
        || (matches!(lower.as_str(), "hello" | "ismaster")
            && body.get("speculativeAuthenticate").ok().flatten().is_some())
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

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

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
        let server = crate::conn::check_ok(
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
