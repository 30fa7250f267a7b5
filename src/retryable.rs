//! Retryable Reads and Retryable Writes, sans I/O: which errors may be
//! retried, and whether another attempt is allowed. Without timeoutMS an
//! operation retries once; under CSOT it retries until a non-retryable error
//! or the deadline (CSOT spec, "Retryability").

use crate::error::{Error, ErrorKind};
use crate::sdam::TopologyType;
use bson::{cstr, RawArrayBuf, RawDocumentBuf};

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

/// Whether a retry deprioritizes the server the failed attempt went to
/// (Server Selection's deprioritized servers): in a sharded cluster always
/// (Retryable Reads/Writes specs, "Selecting the server for retry");
/// elsewhere only after a retryable overload error, and only with
/// `enableOverloadRetargeting` (Client Backpressure, "Overload retry policy"
/// step 4), since a retry may otherwise go back to the same member.
pub fn deprioritizes(kind: TopologyType, err: &Error, overload_retargeting: bool) -> bool {
    kind == TopologyType::Sharded
        || (overload_retargeting && crate::backpressure::is_retryable_overload(err))
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

/// Servers before 4.4 (wire version 9) do not label retryable write errors
/// themselves: the driver labels their replies (Retryable Writes spec,
/// "RetryableWriteError Labels"), by the top-level `code` from any server
/// and by `writeConcernError.code` from a mongod only (a mongos < 4.4 has
/// retried internally already). Never by `writeErrors`. Returns the reply
/// with `RetryableWriteError` added to its `errorLabels` when it qualifies.
pub fn label_legacy_reply(
    reply: RawDocumentBuf,
    max_wire_version: i32,
    is_mongos: bool,
) -> crate::error::Result<RawDocumentBuf> {
    if max_wire_version >= SERVER_LABELS_WIRE_VERSION {
        return Ok(reply);
    }
    let retryable = |code: Option<i64>| {
        code.is_some_and(|c| RETRYABLE_CODES.iter().any(|r| i64::from(*r) == c))
    };
    let failed = !crate::error::is_ok(crate::wire::raw::get(&reply, "ok"));
    let by_code = failed && retryable(crate::wire::raw::int_field(&reply, "code"));
    let by_wce = !is_mongos
        && reply
            .get_document("writeConcernError")
            .is_ok_and(|w| retryable(crate::wire::raw::int_field(w, "code")));
    let mut labels = RawArrayBuf::new();
    if let Ok(existing) = reply.get_array("errorLabels") {
        for l in existing.into_iter().flatten() {
            if l.as_str() == Some("RetryableWriteError") {
                return Ok(reply);
            }
            labels.push(l);
        }
    }
    if !(by_code || by_wce) {
        return Ok(reply);
    }
    labels.push("RetryableWriteError");
    let mut out = crate::concern::without(&reply, "errorLabels")?;
    out.append(cstr!("errorLabels"), labels);
    Ok(out)
}

/// MongoDB 4.4: servers label retryable write errors themselves.
const SERVER_LABELS_WIRE_VERSION: i32 = 9;

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

/// The label a server puts on an error of an attempt that wrote nothing.
pub const NO_WRITES_PERFORMED: &str = "NoWritesPerformed";

/// One failed attempt, as the retry loop saw it.
pub struct Failure<'a> {
    pub err: &'a Error,
    /// The error the loop reports if it stops now (previous attempts'), if
    /// this was a retry: what [`after_failure`] last answered.
    pub previous: Option<Error>,
    /// Attempts made so far, this one included.
    pub attempts: u32,
    pub csot: bool,
    /// The operation's deadline has passed.
    pub expired: bool,
    /// The command was refused before it was sent (csot.rs): nothing reached
    /// a server, and no retry finds more time.
    pub unsent: bool,
}

/// The retry loop's verdict on a failed attempt.
#[derive(Debug, PartialEq)]
pub struct Verdict {
    /// The Retryable Reads/Writes rules allow another attempt.
    pub retry: bool,
    /// The error the operation reports if it stops here; the next
    /// attempt's `previous` if it goes on.
    pub report: Error,
}

/// The retry loop's decision after a failed attempt, and the error it
/// reports: one rule for reads, writes and runCommand (Client Backpressure,
/// step 6). An attempt that reached no server (a failed selection, a command
/// refused before sending) is not retried and reports the error that made
/// the loop retry (the caller can tell an attempt was made); under CSOT a
/// retry that ran out of time is a timeout error caused by it (CSOT spec,
/// "Errors"). An error labelled `NoWritesPerformed` reports the previous
/// attempt's error instead, so the latest error without that label wins, or
/// the first error when every one has it (Retryable Writes spec).
pub fn after_failure(kind: Retryability, f: Failure) -> Verdict {
    let Failure {
        err,
        previous,
        attempts,
        csot,
        expired,
        unsent,
    } = f;
    let stop = |report| Verdict {
        retry: false,
        report,
    };
    if err.is_selection_failure() {
        return stop(match previous {
            Some(prev) if err.is_timeout() => err.clone().caused_by(prev),
            Some(prev) => prev,
            None => err.clone(),
        });
    }
    if unsent {
        return stop(match previous {
            Some(prev) if err.is_timeout() => err.clone().caused_by(prev),
            _ => err.clone(),
        });
    }
    let report = match previous {
        Some(prev) if expired && err.is_timeout() && err.code.is_none() => {
            return stop(err.clone().caused_by(prev))
        }
        Some(prev) if err.has_label(NO_WRITES_PERFORMED) => prev,
        _ => err.clone(),
    };
    Verdict {
        retry: may_retry(kind, err, attempts, csot, expired),
        report,
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
    fn replies_of_servers_before_4_4_are_labelled_by_the_driver() {
        use bson::rawdoc;
        let labelled = |r: &RawDocumentBuf| {
            crate::error::check_ok(r).map_or_else(
                |e| e.has_label("RetryableWriteError"),
                |_| {
                    r.get_array("errorLabels").is_ok_and(|a| {
                        a.into_iter()
                            .flatten()
                            .any(|l| l.as_str() == Some("RetryableWriteError"))
                    })
                },
            )
        };
        let failed = rawdoc! { "ok": 0, "code": 91, "errmsg": "shutdown" };
        let wce = rawdoc! { "ok": 1, "n": 1, "writeConcernError": { "code": 91, "errmsg": "x" } };
        // 4.2 mongod: by the code, and by the write concern error's code.
        assert!(labelled(
            &label_legacy_reply(failed.clone(), 8, false).unwrap()
        ));
        assert!(labelled(
            &label_legacy_reply(wce.clone(), 8, false).unwrap()
        ));
        // 4.2 mongos: by the code only.
        assert!(labelled(
            &label_legacy_reply(failed.clone(), 8, true).unwrap()
        ));
        assert!(!labelled(
            &label_legacy_reply(wce.clone(), 8, true).unwrap()
        ));
        // 4.4+: the server's labels stand.
        assert_eq!(
            label_legacy_reply(failed.clone(), 9, false).unwrap(),
            failed
        );
        // Not by other codes, nor by write errors.
        let other = rawdoc! { "ok": 0, "code": 11000, "errmsg": "dup" };
        assert!(!labelled(&label_legacy_reply(other, 8, false).unwrap()));
        let write_error =
            rawdoc! { "ok": 1, "writeErrors": [{ "index": 0, "code": 91, "errmsg": "x" }] };
        assert!(!labelled(
            &label_legacy_reply(write_error, 8, false).unwrap()
        ));
        // Other labels are kept, and the label is not added twice.
        let transient =
            rawdoc! { "ok": 0, "code": 91, "errorLabels": ["TransientTransactionError"] };
        let out = label_legacy_reply(transient, 8, false).unwrap();
        assert_eq!(out.get_array("errorLabels").unwrap().into_iter().count(), 2);
        let again = label_legacy_reply(out.clone(), 8, false).unwrap();
        assert_eq!(again, out);
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

    fn failure(err: &Error, previous: Option<Error>, attempts: u32, expired: bool) -> Failure<'_> {
        Failure {
            err,
            previous,
            attempts,
            csot: true,
            expired,
            unsent: false,
        }
    }

    fn stop(report: Error) -> Verdict {
        Verdict {
            retry: false,
            report,
        }
    }

    #[test]
    fn a_retry_out_of_time_is_a_timeout_caused_by_the_last_real_error() {
        let prev = server(91);
        let timed_out = Error::timeout("socket read");
        let f = failure(&timed_out, Some(prev.clone()), 3, true);
        let v = after_failure(Retryability::Read, f);
        assert!(!v.retry && v.report.is_timeout());
        assert_eq!(v.report.cause_error(), Some(&prev));
        // Time left: a socket timeout (legacy-style) is retried.
        let f = failure(&timed_out, Some(prev), 3, false);
        assert!(after_failure(Retryability::Read, f).retry);
    }

    #[test]
    fn a_failed_selection_ends_the_loop() {
        let prev = Error::network("reset");
        let legacy = Error::new(ErrorKind::ServerSelection, "none");
        let f = Failure {
            csot: false,
            ..failure(&legacy, Some(prev.clone()), 2, false)
        };
        assert_eq!(after_failure(Retryability::Read, f), stop(prev.clone()));
        let csot = Error::timeout("server selection").caused_by(legacy.clone());
        let v = after_failure(
            Retryability::Read,
            failure(&csot, Some(prev.clone()), 2, false),
        );
        assert!(!v.retry);
        assert_eq!(
            (v.report.is_timeout(), v.report.cause_error()),
            (true, Some(&prev))
        );
        let first = failure(&legacy, None, 1, false);
        assert_eq!(after_failure(Retryability::Read, first), stop(legacy));
    }

    #[test]
    fn a_retry_refused_before_sending_is_a_timeout_caused_by_the_previous_error() {
        let prev = server(91);
        let refused = Error::timeout("command preparation");
        let f = Failure {
            unsent: true,
            ..failure(&refused, Some(prev.clone()), 2, false)
        };
        let v = after_failure(Retryability::Read, f);
        assert!(!v.retry && v.report.is_timeout());
        assert_eq!(v.report.cause_error(), Some(&prev));
        let first = Failure {
            unsent: true,
            ..failure(&refused, None, 1, false)
        };
        assert_eq!(after_failure(Retryability::Read, first), stop(refused));
    }

    fn labelled(code: i32, labels: &[&str]) -> Error {
        let mut e = server(code);
        for l in labels {
            e.add_label(l);
        }
        e
    }

    /// Runs the loop's error rule over the errors of successive attempts (no
    /// CSOT: only the first retry is allowed by this spec, so the count
    /// stays at 1 as it would under Client Backpressure's longer cap).
    fn reported(errors: &[Error]) -> Error {
        let mut previous = None;
        for e in errors {
            let v = after_failure(Retryability::Write, failure(e, previous.take(), 1, false));
            previous = Some(v.report);
        }
        previous.expect("at least one error")
    }

    const OVERLOAD: [&str; 3] = [
        "RetryableWriteError",
        "RetryableError",
        "SystemOverloadedError",
    ];

    #[test]
    fn without_no_writes_performed_the_latest_error_is_reported() {
        // Retryable Writes prose test 6, case 1: 91, then 10107 twice.
        let errors = [
            labelled(91, &OVERLOAD),
            labelled(10107, &OVERLOAD),
            labelled(10107, &OVERLOAD),
        ];
        assert_eq!(reported(&errors).code, Some(10107));
    }

    #[test]
    fn when_every_error_has_no_writes_performed_the_first_is_reported() {
        // Prose test 6, case 2.
        let nwp = [OVERLOAD.as_slice(), &[NO_WRITES_PERFORMED]].concat();
        let errors = [
            labelled(91, &nwp),
            labelled(10107, &nwp),
            labelled(10107, &nwp),
        ];
        let e = reported(&errors);
        assert_eq!(e.code, Some(91));
        assert!(e.has_label(NO_WRITES_PERFORMED));
        // The insertOne-noWritesPerformedError spec test: two attempts.
        assert_eq!(reported(&errors[..2]).code, Some(91));
    }

    #[test]
    fn a_later_no_writes_performed_error_keeps_the_earlier_error() {
        // Prose test 6, case 3: 91 without the label, then 91 with it twice.
        let nwp = [OVERLOAD.as_slice(), &[NO_WRITES_PERFORMED]].concat();
        let errors = [
            labelled(91, &OVERLOAD),
            labelled(91, &nwp),
            labelled(91, &nwp),
        ];
        let e = reported(&errors);
        assert_eq!(e.code, Some(91));
        assert!(!e.has_label(NO_WRITES_PERFORMED));
        // Prose test 3: a write concern error, then 10107 with the label.
        let wce = labelled(91, &["RetryableWriteError"]);
        let nwp_10107 = labelled(10107, &["RetryableWriteError", NO_WRITES_PERFORMED]);
        assert_eq!(reported(&[wce.clone(), nwp_10107.clone()]), wce);
        // A labelled error after one without, then another without: the latest.
        let last = labelled(11600, &["RetryableWriteError"]);
        assert_eq!(reported(&[wce, nwp_10107, last.clone()]), last);
    }

    #[test]
    fn a_no_writes_performed_error_is_still_retried_on_its_own_merits() {
        let first = labelled(91, &["RetryableWriteError"]);
        let nwp = labelled(10107, &["RetryableWriteError", NO_WRITES_PERFORMED]);
        let f = Failure {
            csot: true,
            ..failure(&nwp, Some(first.clone()), 2, false)
        };
        assert_eq!(
            after_failure(Retryability::Write, f),
            Verdict {
                retry: true,
                report: first
            }
        );
        let alone = after_failure(Retryability::Write, failure(&nwp, None, 1, false));
        assert_eq!(
            alone,
            Verdict {
                retry: true,
                report: nwp
            }
        );
    }

    #[test]
    fn overload_retargeting_and_sharded_clusters_deprioritize() {
        let overload = labelled(462, &["RetryableError", "SystemOverloadedError"]);
        let mut not_retryable = server(462);
        not_retryable.add_label("SystemOverloadedError");
        let plain = Error::network("reset");
        use TopologyType::*;
        for kind in [ReplicaSetWithPrimary, ReplicaSetNoPrimary, Single, Unknown] {
            assert!(deprioritizes(kind, &overload, true), "{kind:?}");
            assert!(!deprioritizes(kind, &overload, false), "off by default");
            assert!(!deprioritizes(kind, &plain, true), "only overload errors");
            assert!(!deprioritizes(kind, &not_retryable, true));
        }
        for retarget in [false, true] {
            assert!(deprioritizes(Sharded, &plain, retarget));
            assert!(deprioritizes(Sharded, &overload, retarget));
        }
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
