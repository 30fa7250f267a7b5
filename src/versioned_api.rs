//! The Stable API (the Versioned API spec), sans I/O: the declared API
//! version and the command fields it becomes. The executor and the
//! handshake both call `append_to`, so every command a client sends
//! (getMore, killCursors, transaction commands and `hello` included)
//! carries the same fields.

use crate::error::{Error, Result};
use bson::{cstr, RawDocumentBuf};

/// The API versions this driver knows. New versions are added as new
/// variants, so matches outside this crate need a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerApiVersion {
    V1,
}

impl ServerApiVersion {
    /// The spec's identifier, sent as `apiVersion`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerApiVersion::V1 => "1",
        }
    }

    /// Only known versions are accepted: a driver cannot promise the
    /// behaviour of a version it has not been written for.
    pub fn parse(version: &str) -> Result<ServerApiVersion> {
        match version {
            "1" => Ok(ServerApiVersion::V1),
            other => Err(Error::invalid_argument(format!(
                "unknown server API version {other:?} (known: \"1\")"
            ))),
        }
    }
}

/// A declared API version, fixed for the client's lifetime. `strict` and
/// `deprecation_errors` are sent only when set, even when set to the
/// server's default (`false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerApi {
    pub version: ServerApiVersion,
    pub strict: Option<bool>,
    pub deprecation_errors: Option<bool>,
}

impl ServerApi {
    pub fn new(version: ServerApiVersion) -> ServerApi {
        ServerApi {
            version,
            strict: None,
            deprecation_errors: None,
        }
    }

    /// Appends `apiVersion`, and `apiStrict`/`apiDeprecationErrors` when
    /// set. The command is not inspected: a command that already has these
    /// fields (through run-command) gets them twice, which the spec leaves
    /// undefined.
    pub fn append_to(&self, body: &mut RawDocumentBuf) {
        body.append(cstr!("apiVersion"), self.version.as_str());
        if let Some(strict) = self.strict {
            body.append(cstr!("apiStrict"), strict);
        }
        if let Some(errors) = self.deprecation_errors {
            body.append(cstr!("apiDeprecationErrors"), errors);
        }
    }
}

/// Appends the declared API's fields, if the client declared one.
pub fn apply(api: Option<&ServerApi>, body: &mut RawDocumentBuf) {
    if let Some(api) = api {
        api.append_to(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn only_version_one_is_known() {
        assert_eq!(ServerApiVersion::parse("1").unwrap(), ServerApiVersion::V1);
        for bad in ["2", "", "1.0", " 1", "v1"] {
            let e = ServerApiVersion::parse(bad).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::InvalidArgument, "{bad:?}");
        }
    }

    #[test]
    fn version_alone_adds_only_api_version() {
        let mut body = rawdoc! { "ping": 1 };
        apply(Some(&ServerApi::new(ServerApiVersion::V1)), &mut body);
        assert_eq!(body, rawdoc! { "ping": 1, "apiVersion": "1" });
    }

    #[test]
    fn flags_are_sent_when_set_even_to_the_default() {
        let api = ServerApi {
            version: ServerApiVersion::V1,
            strict: Some(false),
            deprecation_errors: Some(true),
        };
        let mut body = rawdoc! { "find": "c" };
        apply(Some(&api), &mut body);
        assert_eq!(
            body,
            rawdoc! { "find": "c", "apiVersion": "1", "apiStrict": false, "apiDeprecationErrors": true }
        );
    }

    #[test]
    fn nothing_is_added_without_a_declared_version() {
        let mut body = rawdoc! { "ping": 1, "apiStrict": true };
        apply(None, &mut body);
        assert_eq!(body, rawdoc! { "ping": 1, "apiStrict": true });
    }
}
