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
    }
}
