//! The one error type. Mirrors the WIT `error` record so the export glue is a plain copy.

use bson::RawDocumentBuf;
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
}

#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub kind: ErrorKind,
    pub code: Option<i32>,
    pub code_name: Option<String>,
    pub labels: Vec<String>,
    pub message: String,
    /// The underlying cause (the CSOT spec requires a timeout to carry it).
    pub cause: Option<String>,
    /// Boxed: rarely set, and it keeps `Result<T>` small on the hot path.
    pub reply: Option<Box<RawDocumentBuf>>,
}

pub type Result<T> = std::result::Result<T, Error>;

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
        }
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

    pub fn with_cause(mut self, cause: impl fmt::Display) -> Self {
        self.cause = Some(cause.to_string());
        self
    }

    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
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

impl std::error::Error for Error {}

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
