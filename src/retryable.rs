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
/// A socket timeout is a network error; under CSOT, `may_retry` still stops
/// once the deadline has passed.
pub fn is_retryable_read_error(e: &Error) -> bool {
    if e.is_network() {
        return true;
    }
    match e.kind {
        ErrorKind::Server | ErrorKind::Timeout => e
            .code
            .is_some_and(|c| RETRYABLE_CODES.contains(&c) || c == READ_ONLY_RETRYABLE),
        _ => false,
    }
}

/// Writes are retried on network errors (a socket timeout is one) and on
/// errors the server labelled `RetryableWriteError` (4.4+ servers label them).
pub fn is_retryable_write_error(e: &Error) -> bool {
    e.is_network() || e.has_label("RetryableWriteError")
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

/// One failed attempt, as the retry loop saw it.
pub struct Failure {
    pub err: Error,
    /// The error of the attempt before, if this was a retry.
    pub previous: Option<Error>,
    /// Attempts made so far, this one included.
    pub attempts: u32,
    pub csot: bool,
    /// The operation's deadline has passed.
    pub expired: bool,
}

/// What the retry loop does next.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Try again; the error is kept as the retry's `previous`.
    Retry(Error),
    Fail(Error),
}

/// The retry loop's decision after a failed attempt, and the error it
/// reports. A failed selection is not retried; a retry that could not even
/// reach a server reports the error that made it retry (the caller can tell
/// an attempt was made), and under CSOT a retry that ran out of time is a
/// timeout error caused by it (CSOT spec, "Errors").
pub fn after_failure(kind: Retryability, f: Failure) -> Next {
    let Failure {
        err,
        previous,
        attempts,
        csot,
        expired,
    } = f;
    if err.is_selection_failure() {
        return Next::Fail(match previous {
            Some(prev) if err.is_timeout() => err.caused_by(prev),
            Some(prev) => prev,
            None => err,
        });
    }
    match previous {
        Some(prev) if expired && err.is_timeout() && err.code.is_none() => {
            Next::Fail(err.caused_by(prev))
        }
        _ if may_retry(kind, &err, attempts, csot, expired) => Next::Retry(err),
        _ => Next::Fail(err),
    }
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

    fn failure(err: Error, previous: Option<Error>, attempts: u32, expired: bool) -> Failure {
        Failure {
            err,
            previous,
            attempts,
            csot: true,
            expired,
        }
    }

    #[test]
    fn a_retry_out_of_time_is_a_timeout_caused_by_the_last_real_error() {
        let prev = server(91);
        let timed_out = Error::timeout("socket read");
        let f = failure(timed_out.clone(), Some(prev.clone()), 3, true);
        match after_failure(Retryability::Read, f) {
            Next::Fail(e) => {
                assert!(e.is_timeout());
                assert_eq!(e.cause_error(), Some(&prev));
            }
            other => panic!("{other:?}"),
        }
        // Time left: a socket timeout (legacy-style) is retried.
        let f = failure(timed_out, Some(prev), 3, false);
        assert!(matches!(
            after_failure(Retryability::Read, f),
            Next::Retry(_)
        ));
    }

    #[test]
    fn a_failed_selection_ends_the_loop() {
        let prev = Error::network("reset");
        let legacy = Error::new(ErrorKind::ServerSelection, "none");
        let f = Failure {
            csot: false,
            ..failure(legacy.clone(), Some(prev.clone()), 2, false)
        };
        assert_eq!(
            after_failure(Retryability::Read, f),
            Next::Fail(prev.clone())
        );
        let csot = Error::timeout("server selection").caused_by(legacy.clone());
        match after_failure(
            Retryability::Read,
            failure(csot, Some(prev.clone()), 2, false),
        ) {
            Next::Fail(e) => assert_eq!((e.is_timeout(), e.cause_error()), (true, Some(&prev))),
            other => panic!("{other:?}"),
        }
        let first = failure(legacy.clone(), None, 1, false);
        assert_eq!(after_failure(Retryability::Read, first), Next::Fail(legacy));
    }

    #[test]
    fn once_without_csot_until_the_deadline_with_it() {
        let e = server(91);
        assert!(may_retry(Retryability::Read, &e, 1, false, false));
        assert!(!may_retry(Retryability::Read, &e, 2, false, false));
        assert!(may_retry(Retryability::Read, &e, 7, true, false));
        assert!(!may_retry(Retryability::Read, &e, 7, true, true));
        assert!(!may_retry(Retryability::None, &e, 1, false, false));
        // timeoutMS=0: CSOT without a deadline retries until success.
        assert!(may_retry(Retryability::Read, &e, 100, true, false));
        assert!(may_retry(
            Retryability::Write,
            &Error::network("reset"),
            100,
            true,
            false
        ));
    }
}
