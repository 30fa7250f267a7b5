//! Sans-I/O MongoDB connection string parser.
//!
//! Implements the Connection String spec (grammar, percent-decoding, hosts, auth database,
//! options), the URI Options spec (every option's type, range and cross-option rules) and the
//! auth spec's credential rules. `mongodb+srv` URIs are parsed and validated here; the caller
//! does the SRV/TXT lookups and [`seedlist::apply`] turns their records into the seed list.
//!
//! ```
//! let cs = mongo_wasi::uri::parse("mongodb://u:p@db1,db2:27018/app?replicaSet=rs&timeoutMS=500")
//!     .expect("valid URI");
//! assert_eq!(cs.hosts.len(), 2);
//! assert_eq!(cs.options.timeout_ms, Some(500));
//! assert_eq!(cs.credential.as_ref().map(|c| c.source.as_str()), Some("app"));
//! ```

mod auth;
mod decode;
mod document;
mod options;
mod parse;
pub mod seedlist;
mod validate;
mod values;

#[cfg(test)]
mod tests;

use std::fmt;

pub use auth::{AuthMechanism, Credential};
pub use options::{Compressor, ReadPreferenceMode, ServerMonitoringMode, TagSet, UriOptions, W};
pub use parse::MAX_URI_LEN;

/// The port used when a host gives none.
pub const DEFAULT_PORT: u16 = 27017;

/// Parses a `mongodb://` or `mongodb+srv://` connection string.
///
/// Errors are what the specs call errors; invalid option values and unknown options are
/// dropped and reported in [`ConnectionString::warnings`] instead.
pub fn parse(uri: &str) -> Result<ConnectionString, UriError> {
    parse::parse(uri)
}

/// A parsed and validated connection string. Its `Debug` output redacts secrets.
#[derive(Clone, PartialEq)]
pub struct ConnectionString {
    /// True for `mongodb+srv://`: `hosts` then holds the one SRV name (no port) to resolve,
    /// TLS defaults to on, and the caller must apply the SRV/TXT records before connecting.
    pub srv: bool,
    /// Seeds in the order given. Host names are ASCII-lowercased; socket paths are kept as is.
    pub hosts: Vec<HostAddress>,
    /// Percent-decoded user name; `Some("")` never occurs (an empty one is an error).
    pub username: Option<String>,
    /// Percent-decoded password; `Some("")` for `user:@host`.
    pub password: Option<String>,
    /// The percent-decoded path part (`/db`), if not empty.
    pub auth_database: Option<String>,
    /// Every recognised option that had a valid value.
    pub options: UriOptions,
    /// The credential the auth spec derives from userinfo, path and auth options, if any.
    pub credential: Option<Credential>,
    /// Non-fatal problems: unknown options, invalid values (ignored), repeated keys.
    pub warnings: Vec<String>,
    /// The warnings about invalid option values (a subset of `warnings`). The
    /// spec lets a driver ignore such options; a client refuses them instead,
    /// since a dropped `timeoutMS=-1` would silently mean "no deadline".
    pub invalid_values: Vec<String>,
}

impl ConnectionString {
    /// Whether connections use TLS: `tls`/`ssl` if given, else on for `mongodb+srv` only.
    /// Other `tls*` options alone do not turn TLS on.
    pub fn tls_enabled(&self) -> bool {
        self.options.tls.unwrap_or(self.srv)
    }

    /// The SRV service name to query (`_{name}._tcp.{host}`), defaulting to `mongodb`.
    pub fn srv_service_name(&self) -> &str {
        self.options
            .srv_service_name
            .as_deref()
            .unwrap_or("mongodb")
    }
}

impl fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionString")
            .field("srv", &self.srv)
            .field("hosts", &self.hosts)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("auth_database", &self.auth_database)
            .field("options", &self.options)
            .field("credential", &self.credential)
            .field("warnings", &self.warnings)
            .finish()
    }
}

impl std::str::FromStr for ConnectionString {
    type Err = UriError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

/// One seed address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostAddress {
    /// A host name, IPv4 address or IPv6 literal (stored without brackets).
    Tcp { host: String, port: Option<u16> },
    /// A UNIX domain socket path (given percent-encoded, always ending in `.sock`).
    Unix { path: String },
}

impl HostAddress {
    /// The port to connect to; 27017 when none was given (and for sockets, which have none).
    pub fn port_or_default(&self) -> u16 {
        match self {
            HostAddress::Tcp { port, .. } => port.unwrap_or(DEFAULT_PORT),
            HostAddress::Unix { .. } => DEFAULT_PORT,
        }
    }
}

impl fmt::Display for HostAddress {
    /// `host:port`, with IPv6 literals bracketed; a socket shows its path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostAddress::Tcp { host, .. } if host.contains(':') => {
                write!(f, "[{host}]:{}", self.port_or_default())
            }
            HostAddress::Tcp { host, .. } => write!(f, "{host}:{}", self.port_or_default()),
            HostAddress::Unix { path } => f.write_str(path),
        }
    }
}

/// Why a connection string was rejected. The message never contains the password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct UriError {
    pub message: String,
}

impl UriError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        UriError {
            message: message.into(),
        }
    }
}
