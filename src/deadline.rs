//! The one deadline type. Every blocking wait takes a `Deadline`; nobody
//! computes a timeout ad hoc. Pure arithmetic over monotonic instants, so it
//! unit-tests natively; `runtime::clock::now` supplies the instant.

use crate::error::{Error, Result};
use std::time::Duration;

/// A reading of the monotonic clock, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant(pub u64);

impl Instant {
    pub fn saturating_add(self, d: Duration) -> Instant {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ns))
    }

    pub fn since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// No limit (timeoutMS=0, or no timeout configured for this section).
    Infinite,
    At(Instant),
}

impl Deadline {
    pub fn after(now: Instant, d: Duration) -> Deadline {
        Deadline::At(now.saturating_add(d))
    }

    /// `timeout_ms` of `None` or `Some(0)` means no limit, as for every MongoDB timeout option.
    pub fn from_ms(now: Instant, timeout_ms: Option<u64>) -> Deadline {
        match timeout_ms {
            None | Some(0) => Deadline::Infinite,
            Some(ms) => Deadline::after(now, Duration::from_millis(ms)),
        }
    }

    /// The earlier of the two.
    pub fn min(self, other: Deadline) -> Deadline {
        match (self, other) {
            (Deadline::Infinite, d) | (d, Deadline::Infinite) => d,
            (Deadline::At(a), Deadline::At(b)) => Deadline::At(a.min(b)),
        }
    }

    /// This deadline, capped by a per-section limit such as connectTimeoutMS.
    pub fn cap_ms(self, now: Instant, limit_ms: Option<u64>) -> Deadline {
        self.min(Deadline::from_ms(now, limit_ms))
    }

    /// Time left; `None` when infinite.
    pub fn remaining(self, now: Instant) -> Option<Duration> {
        match self {
            Deadline::Infinite => None,
            Deadline::At(at) => Some(at.since(now)),
        }
    }

    pub fn is_expired(self, now: Instant) -> bool {
        matches!(self, Deadline::At(at) if now >= at)
    }

    pub fn is_infinite(self) -> bool {
        self == Deadline::Infinite
    }

    /// A timeout error naming `section` once the deadline has passed. I/O
    /// loops call it on every pass, data or not, so a server that keeps
    /// sending (or a `ready()` that keeps answering true) cannot outlast it.
    pub fn check(self, now: Instant, section: &str) -> Result<()> {
        match self.is_expired(now) {
            true => Err(Error::timeout(section)),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant(1_000_000_000);

    #[test]
    fn zero_and_unset_are_infinite() {
        assert_eq!(Deadline::from_ms(T0, None), Deadline::Infinite);
        assert_eq!(Deadline::from_ms(T0, Some(0)), Deadline::Infinite);
        assert!(!Deadline::Infinite.is_expired(Instant(u64::MAX)));
        assert_eq!(Deadline::Infinite.remaining(T0), None);
    }

    #[test]
    fn remaining_counts_down_and_saturates() {
        let d = Deadline::from_ms(T0, Some(100));
        assert_eq!(d.remaining(T0), Some(Duration::from_millis(100)));
        let later = T0.saturating_add(Duration::from_millis(40));
        assert_eq!(d.remaining(later), Some(Duration::from_millis(60)));
        let past = T0.saturating_add(Duration::from_millis(500));
        assert_eq!(d.remaining(past), Some(Duration::ZERO));
        assert!(d.is_expired(past));
        assert!(!d.is_expired(later));
    }

    #[test]
    fn min_and_cap_pick_the_earlier() {
        let long = Deadline::from_ms(T0, Some(1000));
        let short = Deadline::from_ms(T0, Some(10));
        assert_eq!(long.min(short), short);
        assert_eq!(short.min(Deadline::Infinite), short);
        assert_eq!(Deadline::Infinite.cap_ms(T0, Some(10)), short);
        assert_eq!(short.cap_ms(T0, Some(1000)), short);
        assert_eq!(long.cap_ms(T0, None), long);
    }

    #[test]
    fn check_fails_from_the_deadline_on_and_names_the_section() {
        let d = Deadline::from_ms(T0, Some(100));
        assert!(d.check(T0, "socket read").is_ok());
        assert!(d
            .check(T0.saturating_add(Duration::from_millis(99)), "x")
            .is_ok());
        let err = d
            .check(T0.saturating_add(Duration::from_millis(100)), "socket read")
            .unwrap_err();
        assert!(err.is_timeout());
        assert!(err.message.contains("socket read"), "{err}");
        assert!(Deadline::Infinite.check(Instant(u64::MAX), "x").is_ok());
    }

    #[test]
    fn huge_values_do_not_overflow() {
        let d = Deadline::from_ms(Instant(u64::MAX - 5), Some(u64::MAX));
        assert_eq!(d, Deadline::At(Instant(u64::MAX)));
    }
}
