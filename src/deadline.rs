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

/// How long before an instant a timed wait asks the host's clock to wake it.
/// Host timers wake late (wasmtime's round up to the next millisecond tick,
/// then the thread wakes), so a wait that sleeps until the deadline ends 1-2 ms
/// past it. `runtime::wait` sleeps until `at - slack` and finishes on the
/// clock. The slack is learned from every timed wake: it rises at once to a
/// later wake (never past [`WakeSlack::MAX`], which bounds that finish) and
/// decays slowly while wakes are punctual, so a host with precise timers
/// soon finishes with almost no spin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeSlack(Duration);

impl WakeSlack {
    /// Before any timed wake has been seen: about a wasmtime timer's lateness.
    pub const INITIAL: WakeSlack = WakeSlack(Duration::from_micros(1_500));
    /// The longest finish on the clock: a wake later than this is the load's
    /// doing, and spinning longer would only add to it.
    pub const MAX: Duration = Duration::from_millis(2);
    /// Kept above the latest wake seen, for the jitter between wakes.
    pub const MARGIN: Duration = Duration::from_micros(150);

    pub fn get(self) -> Duration {
        self.0
    }

    /// When to ask the clock to wake a wait that must end at `at`.
    pub fn wake_at(self, at: Instant) -> Instant {
        Instant(at.0.saturating_sub(self.0.as_nanos() as u64))
    }

    /// A timer asked for `asked` woke the wait at `now`.
    pub fn woke(&mut self, asked: Instant, now: Instant) {
        let want = (now.since(asked) + Self::MARGIN).min(Self::MAX);
        self.0 = match want > self.0 {
            true => want,
            // Down by an eighth of the difference: one punctual wake among
            // late ones barely moves it.
            false => self.0 - (self.0 - want) / 8,
        };
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

    #[test]
    fn wake_slack_rises_at_once_decays_slowly_and_is_capped() {
        let at = T0.saturating_add(Duration::from_millis(50));
        let mut s = WakeSlack::INITIAL;
        assert_eq!(at.since(s.wake_at(at)), s.get());
        // A wake 1.8 ms late: the slack covers it (with the margin) at once.
        let asked = s.wake_at(at);
        s.woke(asked, asked.saturating_add(Duration::from_micros(1_800)));
        assert_eq!(s.get(), Duration::from_micros(1_950));
        // Far later (a loaded machine): capped, the finish stays short.
        s.woke(asked, asked.saturating_add(Duration::from_millis(30)));
        assert_eq!(s.get(), WakeSlack::MAX);
        // Punctual wakes: it decays, by an eighth of the gap each time.
        s.woke(asked, asked);
        let once = s.get();
        assert!(
            once < WakeSlack::MAX && once > Duration::from_micros(1_700),
            "{once:?}"
        );
        for _ in 0..100 {
            s.woke(asked, asked);
        }
        assert!(
            s.get() < WakeSlack::MARGIN + Duration::from_micros(5),
            "{:?}",
            s.get()
        );
        assert!(s.get() >= WakeSlack::MARGIN);
        // Near the clock's start, no underflow.
        assert_eq!(WakeSlack::INITIAL.wake_at(Instant(10)), Instant(0));
    }
}
