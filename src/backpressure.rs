//! Client Backpressure, sans I/O: retries of errors a server labels
//! `SystemOverloadedError` + `RetryableError`, for every command, with an
//! exponential backoff and jitter. Once any attempt of an operation is
//! overloaded, every retry policy is capped at `maxAdaptiveRetries` retries;
//! under CSOT a backoff that would end past the deadline is not taken. The
//! spec's phase 1 has no token bucket. The executor asks [`Policy::next`]
//! once per failed attempt; it sleeps and draws the jitter itself.

use crate::deadline::{Deadline, Instant};
use crate::error::Error;
use std::time::Duration;

/// `maxAdaptiveRetries`' default (the spec's `MAX_RETRIES`).
pub const MAX_RETRIES: u32 = 2;
const BASE_BACKOFF_MS: f64 = 100.0;
const MAX_BACKOFF_MS: f64 = 10_000.0;

/// Which retry option gates an operation's overload retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// A read: `retryReads`.
    Read,
    /// A write: `retryWrites`.
    Write,
    /// A command the driver cannot classify (runCommand): both.
    Command,
}

impl Gate {
    pub fn open(self, retry_reads: bool, retry_writes: bool) -> bool {
        match self {
            Gate::Read => retry_reads,
            Gate::Write => retry_writes,
            Gate::Command => retry_reads && retry_writes,
        }
    }
}

/// The label of an overload error.
pub const OVERLOADED: &str = "SystemOverloadedError";

/// The server is overloaded: a retry of this error waits a backoff first.
pub fn is_overload(e: &Error) -> bool {
    e.has_label(OVERLOADED)
}

/// An overload error that any command may retry.
pub fn is_retryable_overload(e: &Error) -> bool {
    is_overload(e) && e.has_label("RetryableError")
}

/// The wait before retry number `retry` (1 for the first retry):
/// `jitter × min(MAX_BACKOFF, base × 2^retry)`, `base` the error's positive
/// `baseBackoffMS` or 100 ms, `jitter` in [0, 1].
pub fn backoff(retry: u32, jitter: f64, base_ms: Option<f64>) -> Duration {
    let base = base_ms
        .filter(|b| b.is_finite() && *b > 0.0)
        .unwrap_or(BASE_BACKOFF_MS);
    // 2^retry saturates well before it could overflow an f64.
    let grown = base * 2f64.powi(retry.min(64) as i32);
    let ms = jitter.clamp(0.0, 1.0) * grown.min(MAX_BACKOFF_MS);
    Duration::from_secs_f64(ms / 1000.0)
}

/// The server's `baseBackoffMS` on an error reply, if any.
fn base_backoff_ms(e: &Error) -> Option<f64> {
    let reply = e.reply.as_ref()?;
    match reply.get("baseBackoffMS").ok().flatten()? {
        bson::RawBsonRef::Int32(v) => Some(v.into()),
        bson::RawBsonRef::Int64(v) => Some(v as f64),
        bson::RawBsonRef::Double(v) => Some(v),
        _ => None,
    }
}

/// What the executor knows about a failed attempt besides the error.
pub struct Failed<'a> {
    pub error: &'a Error,
    /// Attempts made so far, the failed one included.
    pub attempts: u32,
    /// The Retryable Reads/Writes policy would retry it, counting attempts as it does.
    pub retry_policy_allows: bool,
    /// That policy classes the error as retryable (its attempt limit aside).
    pub retry_policy_retryable: bool,
    /// The operation's gate (`retryReads`/`retryWrites`) is open.
    pub gate_open: bool,
    pub now: Instant,
    pub deadline: Deadline,
    /// A random number in [0, 1) for the backoff.
    pub jitter: f64,
}

/// One operation's overload state, across its attempts.
#[derive(Debug, Clone)]
pub struct Policy {
    max_retries: u32,
    /// An attempt of this operation met an overload error.
    overloaded: bool,
}

impl Policy {
    pub fn new(max_retries: u32) -> Policy {
        Policy {
            max_retries,
            overloaded: false,
        }
    }

    /// `None`: stop and return the error. `Some(wait)`: retry after `wait`
    /// (zero unless the error is an overload error).
    pub fn next(&mut self, f: &Failed) -> Option<Duration> {
        let overload = is_overload(f.error);
        self.overloaded |= overload;
        if !self.overloaded {
            // No overload seen: the other retry policies decide alone.
            return f.retry_policy_allows.then_some(Duration::ZERO);
        }
        let retryable = f.retry_policy_retryable || (f.gate_open && is_retryable_overload(f.error));
        // Once overloaded, every policy's retries are capped (spec, "Interaction
        // with Other Retry Policies").
        if !retryable || f.attempts > self.max_retries || f.deadline.is_expired(f.now) {
            return None;
        }
        if !overload {
            return Some(Duration::ZERO);
        }
        let wait = backoff(f.attempts, f.jitter, base_backoff_ms(f.error));
        // A backoff that would end past the deadline is not taken.
        match f.deadline {
            Deadline::At(at) if f.now.saturating_add(wait) > at => None,
            _ => Some(wait),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const T0: Instant = Instant(1_000_000_000);

    fn overload() -> Error {
        let mut e = Error::new(ErrorKind::Server, "rate exceeded");
        e.code = Some(462);
        e.add_label("SystemOverloadedError");
        e.add_label("RetryableError");
        e
    }

    fn failed(error: &Error, attempts: u32) -> Failed<'_> {
        Failed {
            error,
            attempts,
            retry_policy_allows: false,
            retry_policy_retryable: false,
            gate_open: true,
            now: T0,
            deadline: Deadline::Infinite,
            jitter: 1.0,
        }
    }

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn backoff_doubles_from_200_ms_up_to_10_s_times_jitter() {
        assert_eq!(ms(backoff(1, 1.0, None)), 200);
        assert_eq!(ms(backoff(2, 1.0, None)), 400);
        assert_eq!(ms(backoff(6, 1.0, None)), 6400);
        assert_eq!(ms(backoff(7, 1.0, None)), 10_000, "capped");
        assert_eq!(ms(backoff(1000, 1.0, None)), 10_000, "no overflow");
        assert_eq!(ms(backoff(2, 0.5, None)), 200);
        assert_eq!(backoff(2, 0.0, None), Duration::ZERO, "jitter 0");
        assert_eq!(ms(backoff(1, 7.0, None)), 200, "jitter clamped");
    }

    #[test]
    fn base_backoff_ms_from_the_server_replaces_100_ms() {
        assert_eq!(ms(backoff(1, 1.0, Some(50.0))), 100);
        assert_eq!(ms(backoff(1, 1.0, Some(0.0))), 200, "not positive");
        assert_eq!(ms(backoff(1, 1.0, Some(-5.0))), 200, "not positive");
        let mut e = overload();
        e.reply = Some(Box::new(bson::rawdoc! { "ok": 0, "baseBackoffMS": 30 }));
        let mut p = Policy::new(MAX_RETRIES);
        assert_eq!(p.next(&failed(&e, 1)).map(ms), Some(60));
    }

    #[test]
    fn labels() {
        let e = overload();
        assert!(is_overload(&e) && is_retryable_overload(&e));
        let mut only = Error::new(ErrorKind::Server, "x");
        only.add_label("SystemOverloadedError");
        assert!(is_overload(&only) && !is_retryable_overload(&only));
        let mut p = Policy::new(MAX_RETRIES);
        assert_eq!(p.next(&failed(&only, 1)), None, "overloaded, not retryable");
    }

    #[test]
    fn retries_max_retries_times_with_growing_backoff() {
        let e = overload();
        let mut p = Policy::new(MAX_RETRIES);
        assert_eq!(p.next(&failed(&e, 1)).map(ms), Some(200));
        assert_eq!(p.next(&failed(&e, 2)).map(ms), Some(400));
        assert_eq!(p.next(&failed(&e, 3)), None);
        let mut once = Policy::new(1);
        assert!(once.next(&failed(&e, 1)).is_some());
        assert_eq!(once.next(&failed(&e, 2)), None);
        let mut never = Policy::new(0);
        assert_eq!(never.next(&failed(&e, 1)), None, "maxAdaptiveRetries=0");
    }

    #[test]
    fn the_gate_closes_overload_retries() {
        let e = overload();
        let mut p = Policy::new(MAX_RETRIES);
        let f = Failed {
            gate_open: false,
            ..failed(&e, 1)
        };
        assert_eq!(p.next(&f), None);
    }

    #[test]
    fn without_overload_the_other_policies_decide() {
        let e = Error::network("reset");
        let mut p = Policy::new(MAX_RETRIES);
        let allowed = Failed {
            retry_policy_allows: true,
            retry_policy_retryable: true,
            ..failed(&e, 5)
        };
        assert_eq!(p.next(&allowed), Some(Duration::ZERO), "CSOT: unlimited");
        let refused = Failed {
            retry_policy_retryable: true,
            ..failed(&e, 2)
        };
        assert_eq!(p.next(&refused), None);
    }

    #[test]
    fn after_an_overload_other_errors_retry_without_backoff_up_to_the_cap() {
        let mut p = Policy::new(MAX_RETRIES);
        assert!(p.next(&failed(&overload(), 1)).is_some());
        let net = Error::network("reset");
        // Retryable Reads alone would stop after one retry; the cap is now 2.
        let second = Failed {
            retry_policy_retryable: true,
            ..failed(&net, 2)
        };
        assert_eq!(p.next(&second), Some(Duration::ZERO), "no backoff");
        let third = Failed {
            retry_policy_allows: true,
            retry_policy_retryable: true,
            ..failed(&net, 3)
        };
        assert_eq!(p.next(&third), None, "CSOT's unlimited retries are capped");
    }

    #[test]
    fn a_backoff_past_the_deadline_is_not_taken() {
        let e = overload();
        let mut p = Policy::new(MAX_RETRIES);
        let at = |ms: u64| Deadline::At(Instant(T0.0 + ms * 1_000_000));
        let fits = Failed {
            deadline: at(250),
            ..failed(&e, 1)
        };
        assert_eq!(p.next(&fits).map(ms), Some(200));
        let past = Failed {
            deadline: at(150),
            ..failed(&e, 1)
        };
        assert_eq!(p.next(&past), None);
        let small_jitter = Failed {
            jitter: 0.5,
            ..past
        };
        assert_eq!(p.next(&small_jitter).map(ms), Some(100));
        let expired = Failed {
            deadline: Deadline::At(T0),
            jitter: 0.0,
            ..failed(&e, 1)
        };
        assert_eq!(p.next(&expired), None);
    }
}
