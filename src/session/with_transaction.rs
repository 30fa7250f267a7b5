//! The loop of `withTransaction` (Convenient API for Transactions spec,
//! with the CSOT spec's "Convenient Transactions API" rules), sans I/O: the
//! driver feeds in instants and outcomes, the machine says what comes next.
//!
//! start → body → commit; the whole body again on `TransientTransactionError`
//! (from the body or from commit), only the commit again on
//! `UnknownTransactionCommitResult` unless the error is MaxTimeMSExpired
//! (code 50, top-level or in a writeConcernError); any other error ends the
//! loop. Every retry is bounded by the time limit measured from the start:
//! timeoutMS under CSOT, else 120 s. Before each new body attempt the driver
//! waits a jittered exponential backoff (5 ms × 1.5^(attempt-1), at most
//! 500 ms); a backoff that would end past the limit ends the loop instead.

use crate::deadline::{Deadline, Instant};
use crate::error::{Error, ErrorKind};
use std::time::Duration;

/// The retry limit without timeoutMS (spec: twice transactionLifetimeLimitSeconds).
pub const RETRY_LIMIT: Duration = Duration::from_secs(120);
const BACKOFF_INITIAL_MS: f64 = 5.0;
const BACKOFF_MAX_MS: f64 = 500.0;
const BACKOFF_GROWTH: f64 = 1.5;

/// What the driver does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Call `begin`, then start a transaction and run the body.
    RunBody,
    /// Send `commitTransaction` (again).
    Commit,
    /// The loop ended: committed, or the body ended the transaction itself.
    Done,
    /// The loop ended with this error.
    Failed(Error),
}

#[derive(Debug, Clone)]
pub struct WithTransaction {
    start: Instant,
    /// TIMEOUT_MS of the spec: timeoutMS, else 120 s.
    limit: Duration,
    /// timeoutMS was set (0 included): ops run under CSOT and an expiry is a CSOT timeout.
    csot: bool,
    /// The deadline of the body's operations and the commit (CSOT only).
    deadline: Option<Deadline>,
    /// Body attempts started (`transactionAttempt`).
    attempts: u32,
    last_error: Option<Error>,
}

impl WithTransaction {
    /// `timeout_ms` is the resolved timeoutMS of the call (the call's, else
    /// the session's defaultTimeoutMS, else the client's). timeoutMS=0 puts
    /// no deadline on the operations; the 120 s retry limit still bounds retries.
    pub fn new(start: Instant, timeout_ms: Option<u64>) -> WithTransaction {
        let limit = match timeout_ms {
            Some(ms) if ms > 0 => Duration::from_millis(ms),
            _ => RETRY_LIMIT,
        };
        WithTransaction {
            start,
            limit,
            csot: timeout_ms.is_some(),
            deadline: timeout_ms.map(|ms| Deadline::from_ms(start, Some(ms))),
            attempts: 0,
            last_error: None,
        }
    }

    /// The deadline every operation of the body and the commit must meet
    /// (`None` without timeoutMS).
    pub fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    #[cfg(test)]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    fn expired(&self, now: Instant, extra: Duration) -> bool {
        now.since(self.start) + extra >= self.limit
    }

    /// Before a body attempt (spec steps 2-3): how long to wait first, or the
    /// timeout error when the wait would end past the limit. `jitter` is a
    /// random number in [0, 1).
    pub fn begin(&mut self, now: Instant, jitter: f64) -> Result<Duration, Error> {
        let backoff = if self.attempts == 0 {
            Duration::ZERO
        } else {
            let exp = BACKOFF_GROWTH.powi(self.attempts as i32 - 1);
            let ms = jitter.clamp(0.0, 1.0) * (BACKOFF_INITIAL_MS * exp).min(BACKOFF_MAX_MS);
            let backoff = Duration::from_secs_f64(ms / 1000.0);
            if self.expired(now, backoff) {
                return Err(self.timeout_error(self.last_error.clone()));
            }
            backoff
        };
        self.attempts += 1;
        Ok(backoff)
    }

    /// The body returned normally (step 8): commit, unless it ended the
    /// transaction itself (`transaction_active` false).
    pub fn body_succeeded(&mut self, transaction_active: bool) -> Next {
        if transaction_active {
            Next::Commit
        } else {
            Next::Done
        }
    }

    /// The body failed (step 7), after the driver aborted the transaction if
    /// it was still active.
    pub fn body_failed(&mut self, now: Instant, error: Error) -> Next {
        if error.has_label(TRANSIENT) {
            if self.expired(now, Duration::ZERO) {
                return Next::Failed(self.timeout_error(Some(error)));
            }
            self.last_error = Some(error);
            return Next::RunBody;
        }
        // UnknownTransactionCommitResult from the body: it committed by hand.
        Next::Failed(error)
    }

    /// `commitTransaction` failed (step 10).
    pub fn commit_failed(&mut self, now: Instant, error: Error) -> Next {
        if self.expired(now, Duration::ZERO) {
            return Next::Failed(self.timeout_error(Some(error)));
        }
        if error.has_label(UNKNOWN_COMMIT) && !is_max_time_ms_expired(&error) {
            self.last_error = Some(error);
            return Next::Commit;
        }
        if error.has_label(TRANSIENT) {
            self.last_error = Some(error);
            return Next::RunBody;
        }
        Next::Failed(error)
    }

    /// The error when the limit is reached (spec Note 1): a timeout that
    /// carries the last retried error as its cause, with its labels.
    fn timeout_error(&self, cause: Option<Error>) -> Error {
        let what = if self.csot {
            "withTransaction's timeoutMS expired"
        } else {
            "withTransaction's 120 s retry limit passed"
        };
        let mut e = Error::new(ErrorKind::Timeout, what);
        if let Some(cause) = cause {
            e.labels = cause.labels.clone();
            e.code = cause.code;
            e.code_name = cause.code_name.clone();
            e = e.caused_by(cause);
        }
        e
    }
}

const TRANSIENT: &str = "TransientTransactionError";
const UNKNOWN_COMMIT: &str = "UnknownTransactionCommitResult";

/// MaxTimeMSExpired, as a top-level error or in a writeConcernError: the
/// code alone decides (CSOT spec, "Error Transformations").
fn is_max_time_ms_expired(e: &Error) -> bool {
    e.code == Some(50)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant(5_000_000_000);

    fn at(ms: u64) -> Instant {
        T0.saturating_add(Duration::from_millis(ms))
    }

    fn labelled(label: &str, code: Option<i32>) -> Error {
        let mut e = Error::new(ErrorKind::Server, "boom");
        e.code = code;
        e.add_label(label);
        e
    }

    #[test]
    fn a_clean_run_starts_once_and_commits() {
        let mut w = WithTransaction::new(T0, None);
        assert_eq!(
            w.begin(T0, 0.9).unwrap(),
            Duration::ZERO,
            "no wait at first"
        );
        assert_eq!(w.body_succeeded(true), Next::Commit);
        assert_eq!(w.attempts(), 1);
        assert_eq!(w.deadline(), None, "no CSOT without timeoutMS");
    }

    #[test]
    fn a_body_that_ended_the_transaction_is_done() {
        let mut w = WithTransaction::new(T0, None);
        w.begin(T0, 0.0).unwrap();
        assert_eq!(w.body_succeeded(false), Next::Done);
    }

    #[test]
    fn a_transient_body_error_runs_the_body_again() {
        let mut w = WithTransaction::new(T0, None);
        w.begin(T0, 0.5).unwrap();
        let next = w.body_failed(at(10), labelled(TRANSIENT, Some(112)));
        assert_eq!(next, Next::RunBody);
        assert!(w.begin(at(10), 0.5).is_ok());
        assert_eq!(w.attempts(), 2);
    }

    #[test]
    fn other_body_errors_end_the_loop_unchanged() {
        for e in [
            labelled("SomethingElse", Some(11000)),
            labelled(UNKNOWN_COMMIT, Some(91)),
            Error::invalid_argument("custom"),
        ] {
            let mut w = WithTransaction::new(T0, None);
            w.begin(T0, 0.0).unwrap();
            assert_eq!(w.body_failed(at(1), e.clone()), Next::Failed(e));
        }
    }

    #[test]
    fn unknown_commit_result_retries_only_the_commit() {
        let mut w = WithTransaction::new(T0, None);
        w.begin(T0, 0.0).unwrap();
        let e = labelled(UNKNOWN_COMMIT, Some(91));
        assert_eq!(w.commit_failed(at(5), e), Next::Commit);
        assert_eq!(w.attempts(), 1, "the body is not run again");
    }

    #[test]
    fn max_time_ms_expired_is_not_retried_as_a_commit() {
        // Code 50 top-level or in a writeConcernError: both carry code 50 here.
        let mut w = WithTransaction::new(T0, None);
        w.begin(T0, 0.0).unwrap();
        let e = labelled(UNKNOWN_COMMIT, Some(50));
        assert_eq!(w.commit_failed(at(5), e.clone()), Next::Failed(e));
    }

    #[test]
    fn a_transient_commit_error_runs_the_body_again() {
        let mut w = WithTransaction::new(T0, None);
        w.begin(T0, 0.0).unwrap();
        let e = labelled(TRANSIENT, Some(251));
        assert_eq!(w.commit_failed(at(5), e), Next::RunBody);
        // A commit error with neither label ends the loop.
        let e = labelled("Other", Some(79));
        assert_eq!(w.commit_failed(at(6), e.clone()), Next::Failed(e));
    }

    #[test]
    fn the_120_second_limit_ends_retries_with_a_timeout_carrying_the_cause() {
        let mut w = WithTransaction::new(T0, None);
        w.begin(T0, 0.0).unwrap();
        let e = labelled(TRANSIENT, Some(112));
        assert_eq!(w.body_failed(at(119_999), e.clone()), Next::RunBody);
        let Next::Failed(t) = w.body_failed(at(120_000), e) else {
            panic!("expected the limit to end the loop")
        };
        assert_eq!(t.kind, ErrorKind::Timeout);
        assert!(t.has_label(TRANSIENT), "the transient error's labels stay");
        assert!(t.cause.as_ref().unwrap().to_string().contains("boom"));
        assert!(t.message.contains("120 s"));

        // The same for a commit error, whatever its labels.
        let mut w = WithTransaction::new(T0, None);
        w.begin(T0, 0.0).unwrap();
        let Next::Failed(t) = w.commit_failed(at(120_001), labelled(UNKNOWN_COMMIT, Some(91)))
        else {
            panic!("expected a failure")
        };
        assert_eq!(t.kind, ErrorKind::Timeout);
        assert!(t.has_label(UNKNOWN_COMMIT));

        // A transient commit error (NoSuchTransaction after a failover) too.
        let mut w = WithTransaction::new(T0, None);
        w.begin(T0, 0.0).unwrap();
        let Next::Failed(t) = w.commit_failed(at(120_000), labelled(TRANSIENT, Some(251))) else {
            panic!("expected a failure")
        };
        assert_eq!((t.kind, t.code), (ErrorKind::Timeout, Some(251)));
        assert!(t.has_label(TRANSIENT));
    }

    #[test]
    fn timeout_ms_replaces_the_120_seconds_and_sets_the_deadline() {
        let mut w = WithTransaction::new(T0, Some(500));
        assert_eq!(w.deadline(), Some(Deadline::At(at(500))));
        w.begin(T0, 0.0).unwrap();
        assert_eq!(
            w.body_failed(at(499), labelled(TRANSIENT, None)),
            Next::RunBody
        );
        let Next::Failed(t) = w.body_failed(at(500), labelled(TRANSIENT, Some(24))) else {
            panic!("expected a timeout")
        };
        assert_eq!(t.kind, ErrorKind::Timeout);
        assert!(t.message.contains("timeoutMS"));
        assert_eq!(t.code, Some(24));
    }

    #[test]
    fn timeout_ms_zero_means_no_deadline_but_still_the_retry_limit() {
        let mut w = WithTransaction::new(T0, Some(0));
        assert_eq!(w.deadline(), Some(Deadline::Infinite));
        w.begin(T0, 0.0).unwrap();
        assert!(matches!(
            w.body_failed(at(120_000), labelled(TRANSIENT, None)),
            Next::Failed(e) if e.kind == ErrorKind::Timeout
        ));
    }

    #[test]
    fn backoff_grows_by_half_up_to_500_ms_with_jitter() {
        let mut w = WithTransaction::new(T0, None);
        assert_eq!(w.begin(T0, 0.99).unwrap(), Duration::ZERO);
        let mut waits = Vec::new();
        for _ in 0..14 {
            waits.push(w.begin(T0, 1.0 - f64::EPSILON).unwrap().as_secs_f64() * 1000.0);
        }
        // attempt n waits jitter × min(5 × 1.5^(n-1), 500) ms.
        let expect = [5.0, 7.5, 11.25, 16.875];
        for (got, want) in waits.iter().zip(expect) {
            assert!((got - want).abs() < 0.01, "{got} vs {want}");
        }
        assert!((waits[13] - 500.0).abs() < 0.01, "capped: {}", waits[13]);
        assert_eq!(w.begin(T0, 0.0).unwrap(), Duration::ZERO, "jitter 0");
        let half = w.begin(T0, 0.5).unwrap().as_secs_f64() * 1000.0;
        assert!((half - 250.0).abs() < 0.01);
    }

    #[test]
    fn a_backoff_that_would_pass_the_limit_ends_the_loop() {
        let mut w = WithTransaction::new(T0, Some(1000));
        w.begin(T0, 0.0).unwrap();
        let e = labelled(TRANSIENT, Some(112));
        assert_eq!(w.body_failed(at(996), e.clone()), Next::RunBody);
        // 996 ms elapsed + 5 ms × 0.99 backoff > 1000 ms.
        let t = w.begin(at(996), 0.99).unwrap_err();
        assert_eq!(t.kind, ErrorKind::Timeout);
        assert!(t.has_label(TRANSIENT), "wraps the last transient error");
        assert_eq!(w.attempts(), 1, "no new attempt started");
        // With a small enough jitter it still fits.
        assert!(w.begin(at(996), 0.1).is_ok());
    }
}
