//! Connection Monitoring and Pooling, sans I/O: the "pending response" state
//! of the CMAP proposal (DRIVERS-2884, "Awaiting Pending Read"). A command
//! sent with `maxTimeMS` whose read timed out after the request was fully
//! written will still be answered (the server gives up at `maxTimeMS`), so its
//! connection goes back to the pool *pending* instead of being closed; the
//! next checkout reads and discards that reply first, within a bounded window.
//! This module decides the window and every transition; `conn.rs` does the
//! reads and `topology.rs` the checkout.

use crate::csot::OpTimeout;
use crate::deadline::{Deadline, Instant};
use crate::error::{Error, ErrorKind};
use std::time::Duration;

/// How long a pending reply is waited for, counted from the timeout (or from
/// the last aliveness check that found bytes). Past it the reply is presumed lost.
pub const PENDING_RESPONSE_WINDOW: Duration = Duration::from_secs(3);

/// The aliveness check of a connection pending longer than the window: a read
/// of whatever is already buffered, given this long (it never waits for the server).
pub const ALIVENESS_PROBE: Duration = Duration::from_millis(1);

/// What a pending connection still expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingResponse {
    /// The request whose reply is outstanding: the reply's `responseTo`.
    pub request_id: i32,
    /// When the read timed out, or when an aliveness check last found bytes.
    pub since: Instant,
    /// Bytes of the reply frame read before the timeout (kept in the
    /// connection's buffer; the drain resumes after them).
    pub read: usize,
}

/// The first step of a checkout that finds a pending connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStep {
    /// Pending longer than the window: probe for buffered bytes; none means
    /// the connection is closed, some restart the window.
    AlivenessCheck,
    /// Read the rest of the reply by this deadline.
    Drain(Deadline),
}

/// What becomes of a pending connection whose drain did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDrain {
    /// The operation's own deadline ran out inside the window: the connection
    /// returns to the pool still pending, and the operation fails with a timeout.
    KeepPending,
    /// The window ran out, or the drain failed (a protocol or network error):
    /// the connection is closed and the operation checks out another one.
    Close,
}

impl PendingResponse {
    /// A read for `request_id` timed out at `now` with `read` bytes of its reply in hand.
    pub fn timed_out(request_id: i32, read: usize, now: Instant) -> PendingResponse {
        PendingResponse {
            request_id,
            since: now,
            read,
        }
    }

    fn window_end(&self) -> Deadline {
        Deadline::after(self.since, PENDING_RESPONSE_WINDOW)
    }

    pub fn window_elapsed(&self, now: Instant) -> bool {
        self.window_end().is_expired(now)
    }

    /// What a checkout at `now`, for an operation with budget `op`, does first.
    pub fn step(&self, now: Instant, op: &OpTimeout) -> DrainStep {
        if self.window_elapsed(now) {
            DrainStep::AlivenessCheck
        } else {
            DrainStep::Drain(self.drain_deadline(now, op))
        }
    }

    /// The drain's deadline: the earlier of the window's end and the new
    /// operation's budget (its timeoutMS deadline; without one, what
    /// serverSelectionTimeoutMS leaves, as the proposal says for drivers
    /// without waitQueueTimeoutMS).
    pub fn drain_deadline(&self, now: Instant, op: &OpTimeout) -> Deadline {
        let op_budget = match op.csot {
            Some(deadline) => deadline,
            None => op.selection_deadline(now),
        };
        self.window_end().min(op_budget)
    }

    /// The aliveness check found bytes at `now`: the window starts again.
    pub fn alive(&mut self, now: Instant, read: usize) {
        self.since = now;
        self.read = read;
    }

    /// The drain failed with `err` at `now`.
    pub fn after_failure(&self, err: &Error, now: Instant) -> AfterDrain {
        if err.kind == ErrorKind::Timeout && !self.window_elapsed(now) {
            AfterDrain::KeepPending
        } else {
            AfterDrain::Close
        }
    }
}

/// Only a command that carried `maxTimeMS` is sure to be answered soon, so
/// only its timed-out connection is kept pending (the proposal's condition);
/// any other timeout closes the connection as before.
pub fn keeps_pending(sent_max_time: bool) -> bool {
    sent_max_time
}

/// The pool events of the pending-response proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolEventKind {
    PendingResponseStarted,
    PendingResponseSucceeded,
    PendingResponseFailed,
}

/// One pool event (recorded when the client monitors commands).
#[derive(Debug, Clone)]
pub struct PoolEvent {
    pub kind: PoolEventKind,
    pub connection_id: u64,
    pub server_address: String,
    /// The request whose reply was drained.
    pub request_id: i32,
    /// On succeeded and failed events: how long the drain took.
    pub duration: Option<Duration>,
    /// On failed events: why, and whether the connection was closed.
    pub reason: Option<String>,
    pub closed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csot::LegacyTimeouts;

    const MS: u64 = 1_000_000;

    fn csot(now: Instant, ms: u64) -> OpTimeout {
        OpTimeout::start(now, Some(ms), LegacyTimeouts::default())
    }

    #[test]
    fn the_drain_is_bounded_by_the_window_and_the_new_operation() {
        let p = PendingResponse::timed_out(7, 3, Instant(1_000 * MS));
        // A short operation: its own deadline.
        let now = Instant(1_100 * MS);
        assert_eq!(
            p.step(now, &csot(now, 200)),
            DrainStep::Drain(Deadline::At(Instant(1_300 * MS)))
        );
        // A long one: the window's end (3 s after the timeout).
        assert_eq!(
            p.step(now, &csot(now, 60_000)),
            DrainStep::Drain(Deadline::At(Instant(4_000 * MS)))
        );
        // timeoutMS=0: the window alone.
        let unlimited = OpTimeout::start(now, Some(0), LegacyTimeouts::default());
        assert_eq!(
            p.drain_deadline(now, &unlimited),
            Deadline::At(Instant(4_000 * MS))
        );
        // No timeoutMS: serverSelectionTimeoutMS caps it.
        let legacy = OpTimeout::start(
            now,
            None,
            LegacyTimeouts {
                server_selection_ms: 500,
                ..LegacyTimeouts::default()
            },
        );
        assert_eq!(
            p.drain_deadline(now, &legacy),
            Deadline::At(Instant(1_600 * MS))
        );
    }

    #[test]
    fn past_the_window_an_aliveness_check_comes_first_and_restarts_it() {
        let mut p = PendingResponse::timed_out(7, 0, Instant(0));
        let later = Instant(3_000 * MS);
        assert_eq!(p.step(later, &csot(later, 100)), DrainStep::AlivenessCheck);
        p.alive(later, 1);
        assert_eq!((p.since, p.read), (later, 1));
        assert_eq!(
            p.step(later, &csot(later, 100)),
            DrainStep::Drain(Deadline::At(Instant(3_100 * MS)))
        );
    }

    #[test]
    fn a_timeout_inside_the_window_keeps_the_connection_anything_else_closes_it() {
        let p = PendingResponse::timed_out(7, 0, Instant(0));
        let timeout = Error::timeout("socket read");
        let inside = Instant(2_000 * MS);
        let outside = Instant(3_000 * MS);
        assert_eq!(p.after_failure(&timeout, inside), AfterDrain::KeepPending);
        assert_eq!(p.after_failure(&timeout, outside), AfterDrain::Close);
        let protocol = Error::protocol("reply answers request 8 but 7 was sent");
        assert_eq!(p.after_failure(&protocol, inside), AfterDrain::Close);
        let network = Error::network("connection closed by the server");
        assert_eq!(p.after_failure(&network, inside), AfterDrain::Close);
    }

    #[test]
    fn only_commands_with_max_time_ms_leave_a_pending_connection() {
        assert!(keeps_pending(true));
        assert!(!keeps_pending(false));
    }
}
