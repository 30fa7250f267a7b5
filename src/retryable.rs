//! Retryable Reads and Retryable Writes, sans I/O: which errors may be
//! retried, and whether another attempt is allowed. Without timeoutMS an
//! operation retries once; under CSOT it retries until a non-retryable error
//! or the deadline (CSOT spec, "Retryability").

use crate::error::{Error, ErrorKind};
use crate::sdam::TopologyType;

/// Server codes after which an operation may be retried (both specs).
const RETRYABLE_CODES: &[i32] = &[
    262,   // ExceededTimeLimit
    11600, // InterruptedAtShutdown
    11602, // InterruptedDueToReplStateChange
    10107, // NotWritablePrimary
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
    189,   // PrimarySteppedDown
    91,    // ShutdownInProgress
    7,     // HostNotFound
    6,     // HostUnreachable
    89,    // NetworkTimeout
    9001,  // SocketException
];

/// ReadConcernMajorityNotAvailableYet: retryable for reads only.
const READ_ONLY_RETRYABLE: i32 = 134;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retryability {
    None,
    Read,
    Write,
}

/// Whether a retry deprioritizes the server the previous attempt failed on:
/// in a sharded cluster it does (Retryable Reads/Writes specs, "Selecting the
/// server for retry"); in a replica set a retry may go back to the same member
/// (only overload errors retarget there, which this driver does not implement).
pub fn deprioritizes(kind: TopologyType) -> bool {
    kind == TopologyType::Sharded
}

/// A network error, or a server error the specs list as retryable.
pub fn is_retryable_read_error(e: &Error) -> bool {
    match e.kind {
        ErrorKind::Network => true,
        // A socket timeout without a server code is a network error; under
        // CSOT, `may_retry` still stops once the deadline has passed.
        ErrorKind::Timeout if e.code.is_none() => true,
        ErrorKind::Server | ErrorKind::Timeout => e
            .code
            .is_some_and(|c| RETRYABLE_CODES.contains(&c) || c == READ_ONLY_RETRYABLE),
        _ => false,
    }
}

/// Writes are retried on network errors (a socket timeout is one) and on
/// errors the server labelled `RetryableWriteError` (4.4+ servers label them).
pub fn is_retryable_write_error(e: &Error) -> bool {
    e.kind == ErrorKind::Network
        || (e.kind == ErrorKind::Timeout && e.code.is_none())
        || e.has_label("RetryableWriteError")
}

/// Whether attempt `attempts + 1` may run after `err`.
pub fn may_retry(
    kind: Retryability,
    err: &Error,
    attempts: u32,
    csot: bool,
    deadline_expired: bool,
) -> bool {
    let retryable = match kind {
        Retryability::None => false,
        Retryability::Read => is_retryable_read_error(err),
        Retryability::Write => is_retryable_write_error(err),
    };
    retryable && !deadline_expired && (csot || attempts < 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: i32) -> Error {
        let mut e = Error::new(ErrorKind::Server, "x");
        e.code = Some(code);
        e
    }

    #[test]
    fn read_errors() {
        assert!(is_retryable_read_error(&Error::network("reset")));
        assert!(is_retryable_read_error(&server(91)));
        assert!(is_retryable_read_error(&server(134)));
        assert!(!is_retryable_read_error(&server(11000)));
        assert!(
            is_retryable_read_error(&Error::timeout("socket read")),
            "a socket timeout"
        );
        let mut max_time = Error::timeout("server");
        max_time.code = Some(50);
        assert!(
            !is_retryable_read_error(&max_time),
            "MaxTimeMSExpired is not"
        );
        assert!(!is_retryable_read_error(&Error::invalid_argument("x")));
    }

    #[test]
    fn write_errors_need_the_label() {
        assert!(is_retryable_write_error(&Error::network("reset")));
        assert!(!is_retryable_write_error(&server(91)));
        let mut e = server(91);
        e.add_label("RetryableWriteError");
        assert!(is_retryable_write_error(&e));
        assert!(
            !is_retryable_write_error(&server(134)),
            "134 is a read-only retryable code"
        );
        assert!(
            is_retryable_write_error(&Error::timeout("socket read")),
            "a socket timeout"
        );
    }

    #[test]
    fn once_without_csot_until_the_deadline_with_it() {
        let e = server(91);
        assert!(may_retry(Retryability::Read, &e, 1, false, false));
        assert!(!may_retry(Retryability::Read, &e, 2, false, false));
        assert!(may_retry(Retryability::Read, &e, 7, true, false));
        assert!(!may_retry(Retryability::Read, &e, 7, true, true));
        assert!(!may_retry(Retryability::None, &e, 1, false, false));
    }
}
