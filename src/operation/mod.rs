//! Each command is a small type implementing [`Operation`]; the executor
//! applies selection, checkout, the deadline and monitoring to all of them.

pub mod bulk;
mod cursor_ops;
mod end_transaction;
mod find_and_modify;
mod run_command;
pub mod write;

pub use cursor_ops::{CursorReply, Find, GetMore, KillCursors, Packed};
pub use end_transaction::EndTransaction;
pub use find_and_modify::FindAndModify;
pub use run_command::{CursorCommand, RunCommand};

use crate::backpressure::Gate;
use crate::error::{Error, Result};
use crate::handshake::HelloReply;
use crate::retryable::Retryability;
use crate::sdam::selection::Criteria;
use bson::{RawArray, RawDocument, RawDocumentBuf};

#[derive(Debug)]
/// A command ready to send (without `$db`, `lsid`, `maxTimeMS`: the executor adds those).
pub struct Command {
    pub name: String,
    pub db: String,
    pub body: RawDocumentBuf,
    /// OP_MSG kind-1 sections, e.g. ("documents", [...]). Shared with the
    /// operation (a retry resends the same batch), never copied.
    pub sequences: Vec<(&'static bson::raw::CStr, crate::wire::Slice)>,
}

pub trait Operation {
    type Output;

    /// Builds the command for a connection to a server described by `hello`.
    fn build(&mut self, hello: &HelloReply) -> Result<Command>;

    /// Interprets an ok:1 reply from `address`.
    fn handle_reply(&mut self, reply: RawDocumentBuf, address: &str) -> Result<Self::Output>;

    fn criteria(&self) -> Criteria {
        Criteria::Write
    }

    /// The command's name before it is built (server selection log messages).
    fn name(&self) -> &str;

    /// Whether a failed attempt may be retried (Retryable Reads/Writes specs).
    fn retryability(&self) -> Retryability {
        Retryability::None
    }

    /// Which of retryReads/retryWrites allows overload retries (Client
    /// Backpressure spec): reads and writes by their kind, a user's
    /// command needs both.
    fn overload_gate(&self) -> Gate {
        match (self.retryability(), self.criteria()) {
            (Retryability::Read, _) => Gate::Read,
            (Retryability::Write, _)
            | (Retryability::None, Criteria::Write | Criteria::WriteStage(_)) => Gate::Write,
            (Retryability::None, Criteria::Read(_)) => Gate::Command,
        }
    }

    /// Before a retry after an overload error: the spec tests resend the
    /// command unchanged, so undo what `build` counts as a retry.
    fn before_overload_retry(&mut self) {}

    /// commitTransaction/abortTransaction: they carry the transaction's
    /// number but do not start it, and may be retried inside it.
    fn ends_transaction(&self) -> bool {
        false
    }

    /// Whether a causally consistent session may add `afterClusterTime` (not to
    /// a user's runCommand: Causal Consistency spec).
    fn causally_consistent(&self) -> bool {
        true
    }

    /// getMore and killCursors: the cursor they act on (behind a load
    /// balancer, its connection is pinned to it).
    fn cursor_id(&self) -> Option<i64> {
        None
    }

    /// Whether CSOT's `maxTimeMS` goes on this command (not on getMore,
    /// killCursors, or commands the caller already limited).
    fn sends_max_time(&self) -> bool {
        true
    }
}

/// Appends every field of `extra` that `body` does not already have.
pub fn merge_extra(body: &mut RawDocumentBuf, extra: Option<&RawDocument>) -> Result<()> {
    let Some(extra) = extra else { return Ok(()) };
    for item in extra {
        let (key, value) = item?;
        if !has(body, key.as_str())? {
            body.append(key, value);
        }
    }
    Ok(())
}

/// Whether the driver's own `body` has the top-level field `key`.
fn has(body: &RawDocument, key: &str) -> Result<bool> {
    crate::wire::raw::find(body.as_bytes(), key.as_bytes())
        .map(|f| f.is_some())
        .map_err(crate::wire::raw::error)
}

/// Copies each document of a raw array (a batch) out of a reply.
pub fn documents_of(array: &RawArray) -> Result<Vec<RawDocumentBuf>> {
    array
        .into_iter()
        .map(|v| {
            v?.as_document()
                .map(|d| d.to_owned())
                .ok_or_else(|| Error::protocol("batch holds a non-document"))
        })
        .collect()
}

/// `writeErrors` / `writeConcernError` in an ok:1 write reply become a server error.
pub fn check_write_errors(reply: &RawDocument) -> Result<()> {
    if let Ok(errors) = reply.get_array("writeErrors") {
        if let Some(first) = errors.into_iter().next() {
            let first = first?
                .as_document()
                .ok_or_else(|| Error::protocol("bad writeErrors"))?;
            let msg = first.get_str("errmsg").unwrap_or("write error");
            let mut e = crate::error::server_error(first, msg, Some(reply.to_owned()));
            e.message = format!("write error: {}", e.message);
            return Err(e);
        }
    }
    match write_concern_error(reply) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A reply's `writeConcernError` as a server error, with the reply's labels.
fn write_concern_error(reply: &RawDocument) -> Option<Error> {
    let wce = reply.get_document("writeConcernError").ok()?;
    let msg = wce.get_str("errmsg").unwrap_or("write concern error");
    let mut e = crate::error::server_error(wce, msg, Some(reply.to_owned()));
    if let Ok(labels) = reply.get_array("errorLabels") {
        for l in labels.into_iter().flatten().filter_map(|v| v.as_str()) {
            e.add_label(l);
        }
    }
    e.message = format!("write concern error: {}", e.message);
    Some(e)
}

/// A write concern error the server labelled `RetryableWriteError`: a
/// retryable write (a write command or findAndModify) retries it with the
/// same txnNumber, so it fails the attempt inside the retry loop rather
/// than being reported after it.
pub fn retryable_write_concern_error(reply: &RawDocument) -> Option<Error> {
    write_concern_error(reply).filter(|e| e.has_label("RetryableWriteError"))
}

/// `rawData` exists from server 8.2 (wire version 27): for an older server
/// it is left off the command, which that server would refuse (CRUD spec:
/// the option is ignored below 8.2).
pub fn strip_raw_data(body: RawDocumentBuf, max_wire_version: i32) -> Result<RawDocumentBuf> {
    if max_wire_version >= crate::handshake::RAW_DATA_MIN_WIRE_VERSION || !has(&body, "rawData")? {
        return Ok(body);
    }
    crate::concern::without(&body, "rawData")
}

/// CRUD spec: a `hint` on an unacknowledged write goes only to a server
/// that refuses what it cannot honour (update from 4.2, delete and
/// findAndModify from 4.4); an older one would ignore it silently, so the
/// driver refuses it before sending. `statements` are the command's
/// `updates`/`deletes`; findAndModify carries its hint in the body.
pub fn check_unacknowledged_hint(
    body: &RawDocument,
    statements: &crate::wire::Slice,
    max_wire_version: i32,
) -> Result<()> {
    let (command, since, version) = match body.iter().next() {
        Some(Ok((name, _))) => match name.as_str() {
            "update" => ("update", UPDATE_HINT_MIN_WIRE_VERSION, "4.2"),
            "delete" => ("delete", DELETE_HINT_MIN_WIRE_VERSION, "4.4"),
            "findAndModify" => ("findAndModify", DELETE_HINT_MIN_WIRE_VERSION, "4.4"),
            _ => return Ok(()),
        },
        _ => return Ok(()),
    };
    let hinted = |d: &RawDocument| d.get("hint").ok().flatten().is_some();
    if max_wire_version >= since
        || !crate::concern::sends_unacknowledged(body)
        || !(hinted(body) || statements.iter().any(hinted))
    {
        return Ok(());
    }
    Err(Error::invalid_argument(format!(
        "hint is not supported with an unacknowledged write concern for {command} on servers before MongoDB {version}"
    )))
}

/// MongoDB 4.2: update refuses a hint it cannot use.
const UPDATE_HINT_MIN_WIRE_VERSION: i32 = 8;
/// MongoDB 4.4: delete and findAndModify take a hint.
const DELETE_HINT_MIN_WIRE_VERSION: i32 = 9;

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn unacknowledged_hints_need_a_server_that_checks_them() {
        let w0 = rawdoc! { "w": 0 };
        let del = rawdoc! { "delete": "c", "writeConcern": w0.clone() };
        let hinted = vec![rawdoc! { "q": {}, "limit": 1, "hint": "_id_" }].into();
        let plain = vec![rawdoc! { "q": {}, "limit": 1 }].into();
        // 4.2 (wire 8) ignores a delete's hint under w:0: refused here.
        let e = check_unacknowledged_hint(&del, &hinted, 8).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::InvalidArgument);
        assert!(check_unacknowledged_hint(&del, &hinted, 9).is_ok());
        assert!(check_unacknowledged_hint(&del, &plain, 8).is_ok());
        let acked = rawdoc! { "delete": "c", "writeConcern": { "w": 1 } };
        assert!(check_unacknowledged_hint(&acked, &hinted, 8).is_ok());
        assert!(check_unacknowledged_hint(&rawdoc! { "delete": "c" }, &hinted, 8).is_ok());
        // findAndModify: the hint is in the body, 4.4 too.
        let fam =
            rawdoc! { "findAndModify": "c", "hint": { "_id": 1 }, "writeConcern": { "w": 0i64 } };
        assert!(check_unacknowledged_hint(&fam, &Default::default(), 8).is_err());
        assert!(check_unacknowledged_hint(&fam, &Default::default(), 9).is_ok());
        // update: from 4.2, the driver's oldest server.
        let upd = rawdoc! { "update": "c", "writeConcern": w0 };
        let stmt = vec![rawdoc! { "q": {}, "u": { "$set": { "x": 1 } }, "hint": "_id_" }].into();
        assert!(check_unacknowledged_hint(&upd, &stmt, 7).is_err());
        assert!(check_unacknowledged_hint(&upd, &stmt, 8).is_ok());
        let insert = rawdoc! { "insert": "c", "hint": "x", "writeConcern": { "w": 0 } };
        assert!(check_unacknowledged_hint(&insert, &Default::default(), 0).is_ok());
    }

    #[test]
    fn raw_data_goes_to_8_2_and_later_only() {
        let cmd = rawdoc! { "find": "c", "rawData": true, "filter": {} };
        assert_eq!(strip_raw_data(cmd.clone(), 27).unwrap(), cmd);
        assert_eq!(
            strip_raw_data(cmd, 25).unwrap(),
            rawdoc! { "find": "c", "filter": {} }
        );
        let plain = rawdoc! { "find": "c" };
        assert_eq!(strip_raw_data(plain.clone(), 8).unwrap(), plain);
    }

    #[test]
    fn merge_extra_keeps_existing_fields() {
        let mut body = rawdoc! { "find": "c", "limit": 1 };
        merge_extra(&mut body, Some(&rawdoc! { "limit": 5, "comment": "x" })).unwrap();
        assert_eq!(body, rawdoc! { "find": "c", "limit": 1, "comment": "x" });
    }

    #[test]
    fn write_errors_become_server_errors() {
        let reply = rawdoc! { "ok": 1, "n": 0, "writeErrors": [{ "index": 0, "code": 11000, "errmsg": "dup" }] };
        let e = check_write_errors(&reply).unwrap_err();
        assert_eq!(e.code, Some(11000));
        let reply = rawdoc! { "ok": 1, "n": 1, "writeConcernError": { "code": 64, "errmsg": "wc" }, "errorLabels": ["RetryableWriteError"] };
        let e = check_write_errors(&reply).unwrap_err();
        assert_eq!(e.code, Some(64));
        assert!(e.has_label("RetryableWriteError"));
        assert!(check_write_errors(&rawdoc! { "ok": 1, "n": 1 }).is_ok());
        assert_eq!(
            retryable_write_concern_error(&reply).unwrap().code,
            Some(64)
        );
        let unlabelled = rawdoc! { "ok": 1, "writeConcernError": { "code": 64, "errmsg": "wc" } };
        assert!(retryable_write_concern_error(&unlabelled).is_none());
        assert!(check_write_errors(&unlabelled).is_err());
    }

    #[test]
    fn documents_of_rejects_non_documents() {
        let doc = rawdoc! { "a": [{ "x": 1 }, 2] };
        assert!(documents_of(doc.get_array("a").unwrap()).is_err());
    }
}
