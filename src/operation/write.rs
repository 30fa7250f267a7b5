//! `insert`, `update` and `delete` commands: statements sent in batches that
//! fit the server's limits, the replies folded into one result. Each `build`
//! takes the next batch (or, on a retry, the same one); the caller runs the
//! operation until `remaining()` is 0, calling `finish_batch` after each run.

use super::{Command, Operation};
use crate::error::server_error;
use crate::error::{Error, Result};
use crate::handshake::HelloReply;
use crate::retryable::Retryability;
use crate::wire::{Documents, Slice};
use bson::raw::CStr;
use bson::{cstr, RawBson, RawDocument, RawDocumentBuf};
use std::rc::Rc;

/// Room left in a message for the command body and framing.
const MESSAGE_OVERHEAD: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    Insert,
    Update,
    Delete,
}

impl WriteKind {
    fn command(self) -> &'static CStr {
        match self {
            WriteKind::Insert => cstr!("insert"),
            WriteKind::Update => cstr!("update"),
            WriteKind::Delete => cstr!("delete"),
        }
    }

    fn sequence(self) -> &'static CStr {
        match self {
            WriteKind::Insert => cstr!("documents"),
            WriteKind::Update => cstr!("updates"),
            WriteKind::Delete => cstr!("deletes"),
        }
    }
}

/// What the server reported for the statements sent so far.
#[derive(Debug, Default, Clone)]
pub struct WriteResult {
    pub n: i64,
    pub n_modified: i64,
    /// (statement index, `_id`) of each upsert.
    pub upserted: Vec<(usize, RawBson)>,
    /// (statement index, error) of each failed statement.
    pub write_errors: Vec<(usize, Error)>,
    pub write_concern_errors: Vec<Error>,
}

pub struct WriteCommand {
    pub db: String,
    pub coll: String,
    pub kind: WriteKind,
    /// Every statement, back to back; from `sent` on still to send.
    pending: Rc<Documents>,
    sent: usize,
    pub ordered: bool,
    pub extra: Option<RawDocumentBuf>,
    /// Multi-document statements make the whole command non-retryable.
    pub retryable: bool,
    /// The batch being sent: a retry sends exactly these again.
    in_flight: Slice,
    /// Index of `in_flight[0]` among all statements (`index_base` first).
    batch_start: usize,
    next_index: usize,
    pub result: WriteResult,
}

impl WriteCommand {
    /// `index_base` is the index of the first statement in the caller's list
    /// (a bulk write sends its models as several commands).
    pub fn new(
        db: &str,
        coll: &str,
        kind: WriteKind,
        statements: impl Into<Documents>,
        index_base: usize,
    ) -> WriteCommand {
        WriteCommand {
            db: db.to_string(),
            coll: coll.to_string(),
            kind,
            pending: Rc::new(statements.into()),
            sent: 0,
            ordered: true,
            extra: None,
            retryable: true,
            in_flight: Slice::default(),
            batch_start: index_base,
            next_index: index_base,
            result: WriteResult::default(),
        }
    }

    /// Statements not yet sent or still in flight.
    pub fn remaining(&self) -> usize {
        self.pending.len() - self.sent + self.in_flight.len()
    }

    /// Done with the current batch (it succeeded, or its error was final).
    /// An ordered write stops at its first write error.
    pub fn finish_batch(&mut self) {
        self.in_flight = Slice::default();
        if self.ordered && !self.result.write_errors.is_empty() {
            self.sent = self.pending.len();
        }
    }

    fn next_batch(&mut self, hello: &HelloReply, body_len: usize) -> Result<Slice> {
        let budget = hello
            .max_message_size_bytes
            .saturating_sub(MESSAGE_OVERHEAD + body_len);
        let (first, mut end) = (self.sent, self.sent);
        let mut bytes = 0;
        while let Some(doc) = self.pending.get(end) {
            let len = doc.len();
            if len > hello.max_bson_object_size {
                return Err(Error::invalid_argument(format!(
                    "document of {len} bytes exceeds maxBsonObjectSize {}",
                    hello.max_bson_object_size
                )));
            }
            if end > first && (bytes + len > budget || end - first >= hello.max_write_batch_size) {
                break;
            }
            bytes += len;
            end += 1;
        }
        // A window on the statements: no batch is ever copied.
        let batch = Slice::new(Rc::clone(&self.pending), first..end);
        self.sent = end;
        self.batch_start = self.next_index;
        self.next_index += batch.len();
        Ok(batch)
    }

    fn fold(&mut self, reply: &RawDocument) -> Result<()> {
        let (start, batch) = (self.batch_start, self.in_flight.len());
        let r = &mut self.result;
        // Saturating: a lying server's counts must not overflow (a panic in debug builds).
        r.n = r.n.saturating_add(number(reply, "n"));
        r.n_modified = r.n_modified.saturating_add(number(reply, "nModified"));
        if let Ok(upserted) = reply.get_array("upserted") {
            for item in upserted {
                let item = item?
                    .as_document()
                    .ok_or_else(|| Error::protocol("bad upserted entry"))?;
                let index = statement_index(item, start, batch)?;
                if let Some(id) = item.get("_id")? {
                    r.upserted.push((index, RawBson::from(id)));
                }
            }
        }
        if let Ok(errors) = reply.get_array("writeErrors") {
            for item in errors {
                let item = item?
                    .as_document()
                    .ok_or_else(|| Error::protocol("bad writeErrors entry"))?;
                let index = statement_index(item, start, batch)?;
                let msg = item.get_str("errmsg").unwrap_or("write error");
                r.write_errors.push((index, server_error(item, msg, None)));
            }
        }
        if let Ok(wce) = reply.get_document("writeConcernError") {
            let msg = wce.get_str("errmsg").unwrap_or("write concern error");
            r.write_concern_errors
                .push(server_error(wce, msg, Some(reply.to_owned())));
        }
        Ok(())
    }
}

impl Operation for WriteCommand {
    fn name(&self) -> &str {
        self.kind.command().as_str()
    }

    type Output = ();

    fn build(&mut self, hello: &HelloReply) -> Result<Command> {
        let mut body = RawDocumentBuf::new();
        body.append(self.kind.command(), self.coll.as_str());
        body.append(cstr!("ordered"), self.ordered);
        super::merge_extra(&mut body, self.extra.as_deref())?;
        if self.in_flight.is_empty() {
            self.in_flight = self.next_batch(hello, body.as_bytes().len())?;
        }
        super::check_unacknowledged_hint(&body, &self.in_flight, hello.max_wire_version)?;
        Ok(Command {
            name: self.kind.command().as_str().to_string(),
            db: self.db.clone(),
            body,
            sequences: vec![(self.kind.sequence(), self.in_flight.clone())],
        })
    }

    fn handle_reply(&mut self, reply: RawDocumentBuf, _: &str) -> Result<()> {
        // A write concern error the server labelled retryable is retried
        // (same batch, same txnNumber) rather than folded in.
        if let Some(e) = super::retryable_write_concern_error(&reply) {
            return Err(e);
        }
        self.fold(&reply)
    }

    fn retryability(&self) -> Retryability {
        if self.retryable {
            Retryability::Write
        } else {
            Retryability::None
        }
    }
}

/// The whole write's index of a statement the server names by its index in
/// the batch (`start` is the batch's first, `batch` its size); an index
/// outside the batch is a protocol error, not an overflow (found by fuzzing).
fn statement_index(item: &RawDocument, start: usize, batch: usize) -> Result<usize> {
    let index = number(item, "index");
    usize::try_from(index)
        .ok()
        .filter(|i| *i < batch)
        .map(|i| start + i)
        .ok_or_else(|| {
            Error::protocol(format!(
                "the server reported statement index {index} in a batch of {batch}"
            ))
        })
}

fn number(doc: &RawDocument, key: &str) -> i64 {
    crate::wire::raw::int_field(doc, key).unwrap_or(0)
}

/// Ensures `_id` comes first, generating an ObjectId when absent (CRUD spec).
/// Returns the document and its `_id` value. A new `_id` is spliced in front
/// of the document's bytes in one copy, however many fields it has.
pub fn with_id(
    doc: &RawDocument,
    ids: &crate::object_id::ObjectIds,
) -> Result<(RawDocumentBuf, RawBson)> {
    // Found by skipping elements by their sizes: a large document without
    // `_id` is not walked element by element through bson's iterators.
    let found = crate::wire::raw::find(doc.as_bytes(), b"_id")
        .map_err(|e| Error::invalid_argument(format!("malformed BSON document: {e}")))?;
    if found.is_some() {
        if let Some(id) = doc.get("_id")? {
            return Ok((doc.to_owned(), RawBson::from(id)));
        }
    }
    prepend_id(doc.as_bytes(), ids)
}

/// The caller's bytes as a document to insert, checked in full (as
/// `wire::raw::walk` checks a reply; malformed is `invalid-argument`), and
/// its `_id`, generated when absent. One pass checks it and finds `_id`;
/// a document with one is not copied.
// Called by the WIT glue, which only wasm32 builds compile (and by tests).
#[cfg_attr(
    not(all(feature = "component", target_arch = "wasm32")),
    allow(dead_code)
)]
pub fn checked_with_id(
    bytes: Vec<u8>,
    ids: &crate::object_id::ObjectIds,
) -> Result<(RawDocumentBuf, RawBson)> {
    match has_id(&bytes)? {
        true => kept_with_id(bytes),
        false => prepend_id(&bytes, ids),
    }
}

/// [`checked_with_id`] for a document inside a larger buffer (a packed
/// insert-many): checked in full, then laid out once at the end of `into`,
/// with a new ObjectId `_id` in front when it has none. Returns its `_id`.
#[cfg_attr(
    not(all(feature = "component", target_arch = "wasm32")),
    allow(dead_code)
)]
pub fn push_checked_with_id(
    into: &mut Documents,
    bytes: &[u8],
    ids: &crate::object_id::ObjectIds,
) -> Result<RawBson> {
    if has_id(bytes)? {
        let doc = RawDocument::from_bytes(bytes).map_err(|e| malformed(&e.to_string()))?;
        let id = doc.get("_id")?.map(RawBson::from);
        into.push(doc);
        return id.ok_or_else(|| malformed("unreadable _id"));
    }
    let id = ids.next();
    // Type 0x07 (ObjectId), "_id\0", its 12 bytes.
    let mut element = [0u8; 17];
    element[..5].copy_from_slice(b"\x07_id\0");
    element[5..].copy_from_slice(&id.bytes());
    into.push_prefixed(&element, bytes).ok_or_else(|| {
        Error::invalid_argument(format!("document of {} bytes is too large", bytes.len()))
    })?;
    Ok(RawBson::ObjectId(id))
}

fn malformed(what: &str) -> Error {
    Error::invalid_argument(format!("malformed BSON document: {what}"))
}

/// Checks the whole document; whether it has a top-level `_id`.
fn has_id(bytes: &[u8]) -> Result<bool> {
    let found = crate::wire::raw::walk_finding(bytes, b"_id").map_err(malformed)?;
    Ok(found.is_some())
}

/// A checked document that has an `_id`, and that `_id`.
fn kept_with_id(bytes: Vec<u8>) -> Result<(RawDocumentBuf, RawBson)> {
    let doc = RawDocumentBuf::from_bytes(bytes).map_err(|e| malformed(&e.to_string()))?;
    let id = doc.get("_id")?.map(RawBson::from);
    Ok((doc, id.ok_or_else(|| malformed("unreadable _id"))?))
}

/// `doc` (whole, its bytes) with a new ObjectId `_id` as its first field.
fn prepend_id(doc: &[u8], ids: &crate::object_id::ObjectIds) -> Result<(RawDocumentBuf, RawBson)> {
    let id = ids.next();
    let fields = &doc[4..];
    // length, type 0x07 (ObjectId), "_id\0", 12 bytes, then the fields and the terminator.
    let len = 4 + 1 + 4 + 12 + fields.len();
    let len32 = i32::try_from(len)
        .map_err(|_| Error::invalid_argument(format!("document of {len} bytes is too large")))?;
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(&len32.to_le_bytes());
    bytes.push(0x07);
    bytes.extend_from_slice(b"_id\0");
    bytes.extend_from_slice(&id.bytes());
    bytes.extend_from_slice(fields);
    Ok((RawDocumentBuf::from_bytes(bytes)?, RawBson::ObjectId(id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn hello(batch: usize, message: usize) -> HelloReply {
        HelloReply {
            max_write_batch_size: batch,
            max_message_size_bytes: message,
            max_bson_object_size: 1 << 20,
            ..Default::default()
        }
    }

    fn docs(n: usize) -> Vec<RawDocumentBuf> {
        (0..n)
            .map(|i| rawdoc! { "_id": i as i32, "pad": "x".repeat(100) })
            .collect()
    }

    fn sizes(op: &mut WriteCommand, hello: &HelloReply) -> Vec<usize> {
        std::iter::from_fn(|| {
            (op.remaining() > 0).then(|| {
                let n = op.build(hello).unwrap().sequences[0].1.len();
                op.finish_batch();
                n
            })
        })
        .collect()
    }

    #[test]
    fn batches_split_by_count_and_size() {
        let mut op = WriteCommand::new("d", "c", WriteKind::Insert, docs(7), 0);
        assert_eq!(sizes(&mut op, &hello(3, 1 << 20)), [3, 3, 1]);
        let doc_len = docs(1)[0].as_bytes().len();
        let mut op = WriteCommand::new("d", "c", WriteKind::Insert, docs(5), 0);
        let cmd = op
            .build(&hello(100, MESSAGE_OVERHEAD + 100 + 2 * doc_len))
            .unwrap();
        assert_eq!(cmd.sequences[0].1.len(), 2);
        assert_eq!(cmd.body.get_str("insert").unwrap(), "c");
    }

    #[test]
    fn a_retry_resends_the_same_batch() {
        let mut op = WriteCommand::new("d", "c", WriteKind::Delete, docs(3), 0);
        let first = op.build(&hello(2, 1 << 20)).unwrap();
        assert_eq!(first.sequences[0].0.as_str(), "deletes");
        let retry = op.build(&hello(2, 1 << 20)).unwrap();
        assert_eq!(first.sequences[0].1, retry.sequences[0].1);
        op.finish_batch();
        assert_eq!(
            op.build(&hello(2, 1 << 20)).unwrap().sequences[0].1.len(),
            1,
            "then the rest"
        );
    }

    #[test]
    fn oversized_document_is_rejected() {
        let h = HelloReply {
            max_bson_object_size: 50,
            ..hello(3, 1 << 20)
        };
        let mut op = WriteCommand::new("d", "c", WriteKind::Insert, docs(1), 0);
        assert_eq!(
            op.build(&h).unwrap_err().kind,
            crate::ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn replies_fold_with_indexes_relative_to_the_whole_write() {
        let mut op = WriteCommand::new("d", "c", WriteKind::Update, docs(4), 10);
        op.ordered = false;
        let h = hello(2, 1 << 20);
        op.build(&h).unwrap();
        op.handle_reply(
            rawdoc! { "ok": 1, "n": 2, "nModified": 1, "upserted": [{ "index": 1, "_id": 7 }] },
            "a",
        )
        .unwrap();
        op.finish_batch();
        op.build(&h).unwrap();
        op.handle_reply(rawdoc! { "ok": 1, "n": 1, "writeErrors": [{ "index": 1, "code": 11000, "errmsg": "dup" }] }, "a").unwrap();
        op.finish_batch();
        let r = &op.result;
        assert_eq!((r.n, r.n_modified), (3, 1));
        assert_eq!(r.upserted, vec![(11, RawBson::Int32(7))]);
        assert_eq!(r.write_errors.len(), 1);
        assert_eq!(
            (r.write_errors[0].0, r.write_errors[0].1.code),
            (13, Some(11000))
        );
    }

    #[test]
    fn ordered_writes_stop_at_the_first_write_error() {
        let mut op = WriteCommand::new("d", "c", WriteKind::Insert, docs(4), 0);
        let h = hello(2, 1 << 20);
        op.build(&h).unwrap();
        op.handle_reply(rawdoc! { "ok": 1, "n": 0, "writeErrors": [{ "index": 0, "code": 11000, "errmsg": "dup" }] }, "a").unwrap();
        op.finish_batch();
        assert_eq!(op.remaining(), 0);
    }

    #[test]
    fn a_labelled_write_concern_error_is_raised_for_retry() {
        let mut op = WriteCommand::new("d", "c", WriteKind::Insert, docs(1), 0);
        op.build(&hello(2, 1 << 20)).unwrap();
        let reply = rawdoc! { "ok": 1, "n": 1, "writeConcernError": { "code": 91, "errmsg": "x" }, "errorLabels": ["RetryableWriteError"] };
        let e = op.handle_reply(reply, "a").unwrap_err();
        assert!(e.has_label("RetryableWriteError"));
        assert_eq!(op.result.n, 0, "not folded: the retry will report it");
        let reply =
            rawdoc! { "ok": 1, "n": 1, "writeConcernError": { "code": 64, "errmsg": "wc" } };
        op.handle_reply(reply, "a").unwrap();
        assert_eq!(op.result.write_concern_errors[0].code, Some(64));
    }

    #[test]
    fn statement_indexes_outside_the_batch_are_protocol_errors() {
        // Found by `cargo xtask fuzz --target write`: a negative index
        // overflowed `batch_start + index`.
        for (field, index) in [
            ("upserted", -1i64),
            ("writeErrors", i64::MIN),
            ("upserted", 2),
        ] {
            let mut op = WriteCommand::new("d", "c", WriteKind::Update, docs(4), 3);
            op.build(&hello(2, 1 << 20)).unwrap();
            let entry = rawdoc! { "index": index, "_id": 1, "code": 11000 };
            let reply = if field == "upserted" {
                rawdoc! { "ok": 1, "n": 1, "upserted": [entry] }
            } else {
                rawdoc! { "ok": 1, "n": 1, "writeErrors": [entry] }
            };
            let e = op.handle_reply(reply, "a").unwrap_err();
            assert_eq!(e.kind, crate::error::ErrorKind::Protocol, "{field} {index}");
            assert!(e.message.contains("statement index"), "{e}");
        }
    }

    #[test]
    fn lying_counts_saturate() {
        let mut op = WriteCommand::new("d", "c", WriteKind::Update, docs(4), 0);
        let h = hello(2, 1 << 20);
        for _ in 0..2 {
            op.build(&h).unwrap();
            op.handle_reply(
                rawdoc! { "ok": 1, "n": i64::MAX, "nModified": i64::MAX },
                "a",
            )
            .unwrap();
            op.finish_batch();
        }
        assert_eq!((op.result.n, op.result.n_modified), (i64::MAX, i64::MAX));
    }

    #[test]
    fn checked_with_id_checks_finds_and_prepends_as_with_id_does() {
        let ids = crate::runtime::object_ids();
        let (doc, id) = checked_with_id(rawdoc! { "x": 1, "_id": 7 }.into_bytes(), &ids).unwrap();
        assert_eq!(id, RawBson::Int32(7));
        assert_eq!(doc, rawdoc! { "x": 1, "_id": 7 }, "kept as it was");
        let src = rawdoc! { "x": 1, "y": { "_id": 2 } };
        let (doc, id) = checked_with_id(src.clone().into_bytes(), &ids).unwrap();
        let (want, _) = with_id(&src, &ids).unwrap();
        assert_eq!(doc.as_bytes()[..4], want.as_bytes()[..4]);
        assert_eq!(doc.get("_id").unwrap(), Some(id.as_raw_bson_ref()));
        assert_eq!(doc.iter().count(), 3, "_id first, then x and y");
        // Malformed anywhere, nested too, is invalid-argument.
        let mut bad = rawdoc! { "_id": 1, "y": { "s": "xy" } }.into_bytes();
        let at = bad.len() - 9;
        bad[at] = 0x7f;
        let e = checked_with_id(bad.clone(), &ids).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::InvalidArgument);
        assert!(e.message.contains("malformed BSON"), "{}", e.message);
        let mut list = Documents::default();
        let e = push_checked_with_id(&mut list, &bad, &ids).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::InvalidArgument);
        assert!(list.is_empty(), "nothing laid out");
        // Laid out in a list, the same documents and ids.
        let src = rawdoc! { "x": 1, "_id": 7 };
        let id = push_checked_with_id(&mut list, src.as_bytes(), &ids).unwrap();
        assert_eq!(id, RawBson::Int32(7));
        let src = rawdoc! { "x": 1, "y": { "_id": 2 } };
        let id = push_checked_with_id(&mut list, src.as_bytes(), &ids).unwrap();
        let docs: Vec<_> = list.iter().collect();
        assert_eq!(docs[0], &*rawdoc! { "x": 1, "_id": 7 }, "kept as it was");
        assert_eq!(docs[1].get("_id").unwrap(), Some(id.as_raw_bson_ref()));
        assert_eq!(docs[1].iter().count(), 3, "_id first, then x and y");
        assert_eq!(docs[1].iter().next().unwrap().unwrap().0.as_str(), "_id");
    }

    #[test]
    fn id_is_kept_or_generated_first() {
        let (doc, id) =
            with_id(&rawdoc! { "_id": 7, "x": 1 }, &crate::runtime::object_ids()).unwrap();
        assert_eq!(doc, rawdoc! { "_id": 7, "x": 1 });
        assert_eq!(id, RawBson::Int32(7));
        let (doc, id) = with_id(&rawdoc! { "x": 1 }, &crate::runtime::object_ids()).unwrap();
        assert_eq!(doc.iter().next().unwrap().unwrap().0.as_str(), "_id");
        assert_eq!(RawBson::ObjectId(doc.get_object_id("_id").unwrap()), id);
    }

    #[test]
    fn a_spliced_id_makes_the_same_document_as_appending_its_fields() {
        for src in [
            rawdoc! {},
            rawdoc! { "x": 1, "s": "text", "n": { "a": [1, 2, { "b": null }] } },
        ] {
            let (doc, id) = with_id(&src, &crate::runtime::object_ids()).unwrap();
            let RawBson::ObjectId(oid) = id else {
                panic!("{id:?}")
            };
            let mut expected = rawdoc! { "_id": oid };
            for item in &src {
                let (k, v) = item.unwrap();
                expected.append(k, v);
            }
            assert_eq!(doc, expected);
            assert!(doc.iter().all(|e| e.is_ok()));
        }
    }
}
