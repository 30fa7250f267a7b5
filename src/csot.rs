//! Client Side Operations Timeout, sans I/O: from one operation's settings
//! to the deadline of each blocking section and the `maxTimeMS` sent.
//!
//! With `timeoutMS` set (CSOT mode) one deadline bounds everything: server
//! selection (capped by serverSelectionTimeoutMS), connection establishment
//! (capped by connectTimeoutMS), every write and read, and the server's own
//! `maxTimeMS`. Without it the legacy per-section timeouts apply.

use crate::deadline::{Deadline, Instant};
use crate::error::{Error, ErrorKind, Result};
use bson::RawDocument;
use std::time::Duration;

/// The legacy timeouts of a client (URI options), in milliseconds; 0 = none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyTimeouts {
    pub server_selection_ms: u64,
    pub connect_ms: u64,
    pub socket_ms: u64,
}

impl Default for LegacyTimeouts {
    fn default() -> Self {
        // The URI options spec's defaults.
        LegacyTimeouts {
            server_selection_ms: 30_000,
            connect_ms: 10_000,
            socket_ms: 0,
        }
    }
}

/// The time budget of one operation, fixed when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpTimeout {
    /// `Some` in CSOT mode (timeoutMS set; `Deadline::Infinite` for timeoutMS=0).
    pub csot: Option<Deadline>,
    pub legacy: LegacyTimeouts,
}

impl OpTimeout {
    /// `timeout_ms` is the resolved timeoutMS (operation, else collection,
    /// database, client): `None` when set nowhere.
    pub fn start(now: Instant, timeout_ms: Option<u64>, legacy: LegacyTimeouts) -> OpTimeout {
        OpTimeout {
            csot: timeout_ms.map(|ms| Deadline::from_ms(now, Some(ms))),
            legacy,
        }
    }

    /// The whole operation's deadline (infinite in legacy mode).
    pub fn deadline(&self) -> Deadline {
        self.csot.unwrap_or(Deadline::Infinite)
    }

    pub fn selection_deadline(&self, now: Instant) -> Deadline {
        self.deadline()
            .cap_ms(now, Some(self.legacy.server_selection_ms))
    }

    pub fn connect_deadline(&self, now: Instant) -> Deadline {
        self.deadline().cap_ms(now, Some(self.legacy.connect_ms))
    }

    /// Every socket read and write of one round trip shares this deadline.
    pub fn io_deadline(&self, now: Instant) -> Deadline {
        match self.csot {
            Some(deadline) => deadline,
            None => Deadline::from_ms(now, Some(self.legacy.socket_ms)),
        }
    }

    /// Whether an expired selection deadline is the operation's (a timeout
    /// error) or serverSelectionTimeoutMS's (a server selection error).
    pub fn selection_error(&self, now: Instant, message: String) -> Error {
        match self.csot {
            Some(Deadline::At(at)) if now >= at => {
                Error::timeout("server selection").with_cause(message)
            }
            _ => Error::new(ErrorKind::ServerSelection, message),
        }
    }

    /// The `maxTimeMS` to send: what is left minus the server's minimum RTT.
    /// Fails without sending when nothing would be left (CSOT spec).
    pub fn max_time_ms(&self, now: Instant, min_rtt: Duration) -> Result<Option<u64>> {
        let Some(Deadline::At(at)) = self.csot else {
            return Ok(None);
        };
        let remaining = at.since(now);
        match remaining.checked_sub(min_rtt) {
            Some(left) if left.as_millis() > 0 => Ok(Some(left.as_millis() as u64)),
            _ => Err(Error::timeout("command preparation").with_cause(format!(
                "{} ms left of timeoutMS is not more than the server's minimum round trip time of {} ms",
                remaining.as_millis(),
                min_rtt.as_millis()
            ))),
        }
    }
}

impl OpTimeout {
    /// The check just before any command is sent (CSOT spec, "Command
    /// Execution"): under a finite timeoutMS every command is refused when no
    /// more than the server's minimum RTT is left, whether or not it carries
    /// a `maxTimeMS` (getMore, killCursors, a caller's own maxTimeMS). Returns
    /// the `maxTimeMS` to append when `sends_max_time`. A refusal sent nothing:
    /// the caller returns the connection to its pool, and no retry can find
    /// more time, so the error is final.
    pub fn before_send(
        &self,
        now: Instant,
        min_rtt: Duration,
        sends_max_time: bool,
    ) -> Result<Option<u64>> {
        Ok(self.max_time_ms(now, min_rtt)?.filter(|_| sends_max_time))
    }
}

/// CSOT: does timeoutMS bound a cursor's whole life, or each batch?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeoutMode {
    #[default]
    CursorLifetime,
    Iteration,
}

/// What kind of cursor an operation opens, for the CSOT cursor rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CursorShape {
    pub tailable: bool,
    pub await_data: bool,
    /// An aggregate with `$out`/`$merge`.
    pub writes: bool,
}

impl CursorShape {
    /// The shape a command declares with its own `tailable` and `awaitData`
    /// fields, or `options` with the same fields (the run-command spec's
    /// `cursorType`): what run-cursor-command knows of the cursor it opens.
    pub fn of_command(command: &RawDocument, options: Option<&RawDocument>) -> CursorShape {
        let flag = |name: &str| {
            std::iter::once(command)
                .chain(options)
                .any(|d| d.get_bool(name).unwrap_or(false))
        };
        CursorShape {
            tailable: flag("tailable"),
            await_data: flag("awaitData"),
            writes: false,
        }
    }
}

/// How a cursor's operation is timed (CSOT spec, "Cursors"): the mode, and
/// whether the initial command may carry a derived `maxTimeMS`.
pub fn cursor_timeout(
    mode: Option<TimeoutMode>,
    timeout_ms: Option<u64>,
    shape: CursorShape,
    max_await_ms: Option<u64>,
) -> Result<(TimeoutMode, bool)> {
    let invalid = |m: &str| Err(Error::invalid_argument(m.to_string()));
    if mode.is_some() && timeout_ms.is_none() {
        return invalid("timeoutMode requires timeoutMS");
    }
    if let (Some(wait), Some(t)) = (max_await_ms, timeout_ms) {
        if t > 0 && wait >= t {
            return invalid("maxAwaitTimeMS must be less than timeoutMS");
        }
    }
    if shape.tailable {
        if mode == Some(TimeoutMode::CursorLifetime) {
            return invalid("tailable cursors only support timeoutMode iteration");
        }
        return Ok((TimeoutMode::Iteration, shape.await_data));
    }
    match mode.unwrap_or_default() {
        TimeoutMode::Iteration if shape.writes => {
            invalid("timeoutMode iteration cannot apply to $out or $merge")
        }
        TimeoutMode::Iteration => Ok((TimeoutMode::Iteration, false)),
        TimeoutMode::CursorLifetime => Ok((TimeoutMode::CursorLifetime, true)),
    }
}

/// The deadline for best-effort cleanup with no operation of its own
/// (killCursors from a dropped cursor): the client's timeoutMS when set,
/// else this bound, so a drop never blocks indefinitely.
pub const CLEANUP_TIMEOUT_MS: u64 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant(1_000_000_000);
    fn at(ms: u64) -> Instant {
        T0.saturating_add(Duration::from_millis(ms))
    }

    #[test]
    fn legacy_mode_uses_per_section_timeouts() {
        let t = OpTimeout::start(T0, None, LegacyTimeouts::default());
        assert_eq!(t.deadline(), Deadline::Infinite);
        assert_eq!(t.selection_deadline(T0), Deadline::At(at(30_000)));
        assert_eq!(t.connect_deadline(T0), Deadline::At(at(10_000)));
        assert_eq!(
            t.io_deadline(T0),
            Deadline::Infinite,
            "socketTimeoutMS 0 = no limit"
        );
        assert_eq!(t.max_time_ms(T0, Duration::ZERO).unwrap(), None);
        let t = OpTimeout::start(
            T0,
            None,
            LegacyTimeouts {
                socket_ms: 250,
                ..Default::default()
            },
        );
        assert_eq!(
            t.io_deadline(at(5)),
            Deadline::At(at(255)),
            "per round trip"
        );
    }

    #[test]
    fn csot_caps_every_section_by_one_deadline() {
        let t = OpTimeout::start(T0, Some(100), LegacyTimeouts::default());
        assert_eq!(t.selection_deadline(T0), Deadline::At(at(100)));
        assert_eq!(t.connect_deadline(T0), Deadline::At(at(100)));
        assert_eq!(t.io_deadline(at(50)), Deadline::At(at(100)));
        let short_sst = LegacyTimeouts {
            server_selection_ms: 20,
            ..Default::default()
        };
        let t = OpTimeout::start(T0, Some(100), short_sst);
        assert_eq!(t.selection_deadline(T0), Deadline::At(at(20)));
    }

    #[test]
    fn timeout_zero_is_csot_without_limit() {
        let t = OpTimeout::start(
            T0,
            Some(0),
            LegacyTimeouts {
                socket_ms: 5,
                ..Default::default()
            },
        );
        assert_eq!(t.csot, Some(Deadline::Infinite));
        assert_eq!(
            t.io_deadline(T0),
            Deadline::Infinite,
            "socketTimeoutMS is ignored under CSOT"
        );
        assert_eq!(t.max_time_ms(T0, Duration::from_millis(3)).unwrap(), None);
    }

    #[test]
    fn max_time_ms_subtracts_min_rtt_and_refuses_when_none_left() {
        let t = OpTimeout::start(T0, Some(100), LegacyTimeouts::default());
        assert_eq!(
            t.max_time_ms(at(30), Duration::from_millis(10)).unwrap(),
            Some(60)
        );
        let err = t
            .max_time_ms(at(95), Duration::from_millis(10))
            .unwrap_err();
        assert!(err.is_timeout());
        assert!(err.cause.unwrap().contains("round trip"));
        assert!(t.max_time_ms(at(200), Duration::ZERO).is_err());
    }

    #[test]
    fn every_command_is_refused_before_sending_once_the_deadline_is_spent() {
        let t = OpTimeout::start(T0, Some(100), LegacyTimeouts::default());
        let rtt = Duration::from_millis(10);
        // A getMore carries no maxTimeMS, but is still checked.
        assert_eq!(t.before_send(at(30), rtt, false).unwrap(), None);
        assert_eq!(t.before_send(at(30), rtt, true).unwrap(), Some(60));
        for sends in [false, true] {
            assert!(t.before_send(at(95), rtt, sends).unwrap_err().is_timeout());
            assert!(t.before_send(at(150), Duration::ZERO, sends).is_err());
        }
        // Without a finite deadline nothing is refused.
        for ms in [None, Some(0)] {
            let t = OpTimeout::start(T0, ms, LegacyTimeouts::default());
            assert_eq!(t.before_send(at(1_000_000), rtt, true).unwrap(), None);
        }
    }

    #[test]
    fn cursor_rules() {
        let plain = CursorShape::default();
        let tailable = CursorShape {
            tailable: true,
            ..plain
        };
        let awaiting = CursorShape {
            tailable: true,
            await_data: true,
            ..plain
        };
        let it = Some(TimeoutMode::Iteration);
        let life = Some(TimeoutMode::CursorLifetime);
        assert_eq!(
            cursor_timeout(None, Some(100), plain, None).unwrap(),
            (TimeoutMode::CursorLifetime, true)
        );
        assert_eq!(
            cursor_timeout(it, Some(100), plain, None).unwrap(),
            (TimeoutMode::Iteration, false)
        );
        assert!(
            cursor_timeout(it, None, plain, None).is_err(),
            "mode without timeoutMS"
        );
        assert!(cursor_timeout(
            it,
            Some(100),
            CursorShape {
                writes: true,
                ..plain
            },
            None
        )
        .is_err());
        assert_eq!(
            cursor_timeout(None, Some(100), tailable, None).unwrap(),
            (TimeoutMode::Iteration, false)
        );
        assert!(cursor_timeout(life, Some(100), tailable, None).is_err());
        assert_eq!(
            cursor_timeout(None, Some(100), awaiting, Some(50)).unwrap(),
            (TimeoutMode::Iteration, true)
        );
        assert!(cursor_timeout(None, Some(100), awaiting, Some(100)).is_err());
        assert!(
            cursor_timeout(None, Some(0), awaiting, Some(100)).is_ok(),
            "timeoutMS 0: no limit to exceed"
        );
    }

    #[test]
    fn run_cursor_command_shapes_come_from_the_command_or_its_options() {
        let plain = CursorShape::of_command(&bson::rawdoc! { "find": "c" }, None);
        assert_eq!(plain, CursorShape::default());
        let tailable =
            CursorShape::of_command(&bson::rawdoc! { "find": "c", "tailable": true }, None);
        assert!(tailable.tailable && !tailable.await_data);
        let opts = bson::rawdoc! { "tailable": true, "awaitData": true };
        let awaiting = CursorShape::of_command(&bson::rawdoc! { "find": "c" }, Some(&opts));
        assert!(awaiting.tailable && awaiting.await_data);
        let off = CursorShape::of_command(&bson::rawdoc! { "find": "c", "tailable": false }, None);
        assert!(!off.tailable);
        // A tailable command: iteration mode, no derived maxTimeMS.
        assert_eq!(
            cursor_timeout(None, Some(100), tailable, None).unwrap(),
            (TimeoutMode::Iteration, false)
        );
        assert!(
            cursor_timeout(Some(TimeoutMode::CursorLifetime), Some(100), awaiting, None).is_err()
        );
    }

    #[test]
    fn selection_error_kind_depends_on_which_limit_expired() {
        let t = OpTimeout::start(
            T0,
            Some(100),
            LegacyTimeouts {
                server_selection_ms: 20,
                ..Default::default()
            },
        );
        assert_eq!(
            t.selection_error(at(25), "x".into()).kind,
            ErrorKind::ServerSelection
        );
        assert_eq!(
            t.selection_error(at(100), "x".into()).kind,
            ErrorKind::Timeout
        );
        let legacy = OpTimeout::start(T0, None, LegacyTimeouts::default());
        assert_eq!(
            legacy.selection_error(at(30_000), "x".into()).kind,
            ErrorKind::ServerSelection
        );
    }
}
