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

    /// CSOT mode: timeoutMS is set, 0 (no deadline) included.
    pub fn is_csot(&self) -> bool {
        self.csot.is_some()
    }

    /// The whole operation's deadline (infinite in legacy mode).
    pub fn deadline(&self) -> Deadline {
        self.csot.unwrap_or(Deadline::Infinite)
    }

    pub fn selection_deadline(&self, now: Instant) -> Deadline {
        self.deadline()
            .cap_ms(now, Some(self.legacy.server_selection_ms))
    }

    /// Deadlines for a new connection, given the selection deadline
    /// (computedServerSelectionTimeout) fixed when selection began: the TCP
    /// connect within connectTimeoutMS and what is left of it, the handshake
    /// within what is left of it (CSOT spec, "Server Selection"). Without
    /// timeoutMS, connectTimeoutMS bounds both, from now.
    pub fn establish_deadlines(&self, selection: Deadline, now: Instant) -> (Deadline, Deadline) {
        match self.csot {
            Some(_) => (
                selection.cap_ms(now, Some(self.legacy.connect_ms)),
                selection,
            ),
            None => {
                let connect = Deadline::from_ms(now, Some(self.legacy.connect_ms));
                (connect, connect)
            }
        }
    }

    /// Every socket read and write of one round trip shares this deadline.
    pub fn io_deadline(&self, now: Instant) -> Deadline {
        match self.csot {
            Some(deadline) => deadline,
            None => Deadline::from_ms(now, Some(self.legacy.socket_ms)),
        }
    }

    /// The error of an expired server selection: a timeout under CSOT (its
    /// cause the selection failure), else the legacy server selection error.
    pub fn selection_error(&self, _now: Instant, message: String) -> Error {
        match self.csot {
            // Under CSOT the selection's limit is computedServerSelectionTimeout,
            // whichever of its two parts expired: a timeout error (CSOT spec).
            Some(_) => Error::timeout("server selection")
                .caused_by(Error::new(ErrorKind::ServerSelection, message)),
            None => Error::new(ErrorKind::ServerSelection, message),
        }
    }

    /// Error transformation (CSOT spec): under CSOT a server's
    /// MaxTimeMSExpired (code 50 only, whatever its name or message) is a
    /// timeout error; without timeoutMS it stays the server error it was.
    pub fn transform(&self, e: Error) -> Error {
        if !self.is_csot() || e.code != Some(50) || e.is_timeout() {
            return e;
        }
        let mut t = Error::timeout("the server's maxTimeMS");
        t.code = e.code;
        t.code_name = e.code_name.clone();
        t.labels = e.labels.clone();
        t.reply = e.reply.clone();
        t.message = format!("operation timed out on the server: {}", e.message);
        t.caused_by(e)
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

/// The one rule for which timeoutMS an operation runs under (CSOT spec,
/// "Validation and Overrides" and "Sessions"): the operation's own, else the
/// session's defaultTimeoutMS, else the first handle level that sets it, most
/// specific first (collection or bucket, database, client).
///
/// `session` counts only for the session's own operations (commit, abort,
/// endSession, withTransaction), and for the operations of a running
/// withTransaction body under CSOT (what is left of the call's deadline,
/// `Session::callback_timeout`); every other caller passes `None`. 0 is a
/// value (no deadline, still CSOT), not "unset".
/// Whether taking apart a reply of `len` bytes is checked against the
/// deadline: decoding is linear in a reply's size (47 MB of tiny documents
/// take a tenth of a second or more), but one under a mebibyte decodes in
/// well under a millisecond, and sparing it the clock read keeps the hot
/// path as it was.
pub fn decoding_is_checked(len: usize) -> bool {
    len >= 1 << 20
}

pub fn resolve_timeout_ms(
    operation: Option<u64>,
    session: Option<u64>,
    handles: &[Option<u64>],
) -> Option<u64> {
    operation
        .or(session)
        .or_else(|| handles.iter().find_map(|t| *t))
}

/// Under CSOT a `maxTimeMS` the caller put in an operation's options is
/// ignored: the one derived from the deadline is sent instead (CSOT spec,
/// "timeoutMS overrides deprecated timeout options"). runCommand does not
/// ask: its command is sent as given.
pub fn without_caller_max_time(
    extra: Option<&bson::RawDocumentBuf>,
    timeout_ms: Option<u64>,
) -> Result<Option<bson::RawDocumentBuf>> {
    match timeout_ms {
        Some(_) => Ok(crate::wire::raw::take_field(extra, "maxTimeMS")?.1),
        None => Ok(extra.cloned()),
    }
}

/// The maxAwaitTimeMS rules (CSOT spec, "Tailable awaitData Cursors" and
/// "Change Streams"): a non-negative integer, and less than a non-zero
/// timeoutMS.
pub fn max_await_ms(
    value: Option<bson::RawBsonRef>,
    timeout_ms: Option<u64>,
) -> Result<Option<u64>> {
    let Some(v) = value else { return Ok(None) };
    let ms = match v.as_i64().or(v.as_i32().map(i64::from)) {
        Some(ms) if ms >= 0 => ms as u64,
        _ => {
            return Err(Error::invalid_argument(
                "maxAwaitTimeMS must be a non-negative integer",
            ))
        }
    };
    match timeout_ms {
        Some(t) if t > 0 && ms >= t => Err(Error::invalid_argument(format!(
            "maxAwaitTimeMS ({ms}) must be less than timeoutMS ({t})"
        ))),
        _ => Ok(Some(ms)),
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
/// `maxAwaitTimeMS` is checked by `max_await_ms`.
pub fn cursor_timeout(
    mode: Option<TimeoutMode>,
    timeout_ms: Option<u64>,
    shape: CursorShape,
) -> Result<(TimeoutMode, bool)> {
    let invalid = |m: &str| Err(Error::invalid_argument(m.to_string()));
    if mode.is_some() && timeout_ms.is_none() {
        return invalid("timeoutMode requires timeoutMS");
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
        let selection = t.selection_deadline(T0);
        assert_eq!(
            t.establish_deadlines(selection, at(5)),
            (Deadline::At(at(10_005)), Deadline::At(at(10_005)))
        );
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
        let selection = t.selection_deadline(T0);
        assert_eq!(
            t.establish_deadlines(selection, at(10)),
            (Deadline::At(at(100)), Deadline::At(at(100)))
        );
        assert_eq!(t.io_deadline(at(50)), Deadline::At(at(100)));
        let short_sst = LegacyTimeouts {
            server_selection_ms: 20,
            ..Default::default()
        };
        let t = OpTimeout::start(T0, Some(100), short_sst);
        assert_eq!(t.selection_deadline(T0), Deadline::At(at(20)));
        // Checkout, connect and handshake get what selection left of its 20 ms.
        assert_eq!(
            t.establish_deadlines(t.selection_deadline(T0), at(15)),
            (Deadline::At(at(20)), Deadline::At(at(20)))
        );
        let short_connect = LegacyTimeouts {
            connect_ms: 3,
            ..Default::default()
        };
        let t = OpTimeout::start(T0, Some(0), short_connect);
        assert_eq!(
            t.establish_deadlines(t.selection_deadline(T0), at(10)),
            (Deadline::At(at(13)), Deadline::At(at(30_000))),
            "timeoutMS=0: connectTimeoutMS, then serverSelectionTimeoutMS's rest"
        );
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
        assert!(
            t.is_csot(),
            "retries until success, like any CSOT operation"
        );
        assert!(!OpTimeout::start(T0, None, LegacyTimeouts::default()).is_csot());
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
        assert!(err.cause.unwrap().to_string().contains("round trip"));
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
            cursor_timeout(None, Some(100), plain).unwrap(),
            (TimeoutMode::CursorLifetime, true)
        );
        assert_eq!(
            cursor_timeout(it, Some(100), plain).unwrap(),
            (TimeoutMode::Iteration, false)
        );
        assert!(
            cursor_timeout(it, None, plain).is_err(),
            "mode without timeoutMS"
        );
        assert!(cursor_timeout(
            it,
            Some(100),
            CursorShape {
                writes: true,
                ..plain
            }
        )
        .is_err());
        assert_eq!(
            cursor_timeout(None, Some(100), tailable).unwrap(),
            (TimeoutMode::Iteration, false)
        );
        assert!(cursor_timeout(life, Some(100), tailable).is_err());
        assert_eq!(
            cursor_timeout(None, Some(100), awaiting).unwrap(),
            (TimeoutMode::Iteration, true)
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
            cursor_timeout(None, Some(100), tailable).unwrap(),
            (TimeoutMode::Iteration, false)
        );
        assert!(cursor_timeout(Some(TimeoutMode::CursorLifetime), Some(100), awaiting).is_err());
    }

    #[test]
    fn max_await_must_be_less_than_a_nonzero_timeout() {
        let v = |ms: i64| Some(bson::RawBsonRef::Int64(ms));
        assert_eq!(max_await_ms(v(50), Some(100)).unwrap(), Some(50));
        assert!(max_await_ms(v(100), Some(100)).is_err());
        assert_eq!(
            max_await_ms(v(100), Some(0)).unwrap(),
            Some(100),
            "timeoutMS 0: no limit to exceed"
        );
        assert_eq!(max_await_ms(v(100), None).unwrap(), Some(100));
        assert_eq!(max_await_ms(None, Some(10)).unwrap(), None);
        assert!(max_await_ms(v(-1), None).is_err());
        assert!(max_await_ms(Some(bson::RawBsonRef::String("1")), None).is_err());
    }

    #[test]
    fn caller_max_time_is_ignored_only_under_csot() {
        let extra = bson::rawdoc! { "maxTimeMS": 5, "comment": "c" };
        assert_eq!(
            without_caller_max_time(Some(&extra), Some(0)).unwrap(),
            Some(bson::rawdoc! { "comment": "c" })
        );
        assert_eq!(
            without_caller_max_time(Some(&extra), None).unwrap(),
            Some(extra.clone())
        );
        assert_eq!(without_caller_max_time(None, Some(9)).unwrap(), None);
    }

    #[test]
    fn timeout_resolves_most_specific_first() {
        assert_eq!(resolve_timeout_ms(None, None, &[None, None, None]), None);
        assert_eq!(
            resolve_timeout_ms(None, None, &[None, Some(7), Some(9)]),
            Some(7)
        );
        assert_eq!(
            resolve_timeout_ms(None, None, &[Some(0), Some(7)]),
            Some(0),
            "0 overrides: no deadline, still CSOT"
        );
        assert_eq!(resolve_timeout_ms(None, Some(5), &[Some(7)]), Some(5));
        assert_eq!(resolve_timeout_ms(Some(3), Some(5), &[Some(7)]), Some(3));
        assert_eq!(resolve_timeout_ms(Some(0), Some(5), &[Some(7)]), Some(0));
    }

    #[test]
    fn code_50_is_a_timeout_only_under_csot() {
        let mut e = Error::new(ErrorKind::Server, "operation exceeded time limit");
        e.code = Some(50);
        e.add_label("X");
        let legacy = OpTimeout::start(T0, None, LegacyTimeouts::default());
        assert_eq!(legacy.transform(e.clone()).kind, ErrorKind::Server);
        for ms in [0, 100] {
            let t = OpTimeout::start(T0, Some(ms), LegacyTimeouts::default()).transform(e.clone());
            assert!(t.is_timeout(), "timeoutMS={ms}");
            assert_eq!((t.code, t.has_label("X")), (Some(50), true));
            assert!(t.to_string().contains("operation exceeded time limit"));
            assert_eq!(t.cause_error().unwrap().kind, ErrorKind::Server);
        }
        let mut other = e.clone();
        other.code = Some(11000);
        let csot = OpTimeout::start(T0, Some(100), LegacyTimeouts::default());
        assert_eq!(csot.transform(other).kind, ErrorKind::Server);
    }

    #[test]
    fn selection_error_kind_depends_on_the_mode() {
        let t = OpTimeout::start(
            T0,
            Some(100),
            LegacyTimeouts {
                server_selection_ms: 20,
                ..Default::default()
            },
        );
        let e = t.selection_error(at(25), "x".into());
        assert_eq!(
            e.kind,
            ErrorKind::Timeout,
            "serverSelectionTimeoutMS expired first"
        );
        assert_eq!(e.cause_error().unwrap().kind, ErrorKind::ServerSelection);
        let zero = OpTimeout::start(T0, Some(0), LegacyTimeouts::default());
        assert_eq!(
            zero.selection_error(at(30_000), "x".into()).kind,
            ErrorKind::Timeout
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
