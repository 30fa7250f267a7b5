use super::{check_write_errors, Command, Operation};
use crate::error::{Error, Result};
use crate::handshake::HelloReply;
use crate::retryable::Retryability;
use bson::cstr;
use bson::{RawDocument, RawDocumentBuf};
use std::collections::VecDeque;

/// Room left in a message for the command body and framing.
const MESSAGE_OVERHEAD: usize = 16 * 1024;

/// `insert` commands for documents already carrying `_id`. Each `build`
/// takes the next batch that fits the server's limits; the caller runs it
/// until `remaining()` is 0.
pub struct Insert {
    pub db: String,
    pub coll: String,
    pub documents: VecDeque<RawDocumentBuf>,
    pub ordered: bool,
    pub extra: Option<RawDocumentBuf>,
    /// The batch being sent: a retry sends the same documents again.
    pub in_flight: Vec<RawDocumentBuf>,
}

impl Insert {
    pub fn new(
        db: &str,
        coll: &str,
        documents: VecDeque<RawDocumentBuf>,
        ordered: bool,
        extra: Option<RawDocumentBuf>,
    ) -> Insert {
        Insert {
            db: db.to_string(),
            coll: coll.to_string(),
            documents,
            ordered,
            extra,
            in_flight: Vec::new(),
        }
    }

    /// Documents not yet sent or still in flight.
    pub fn remaining(&self) -> usize {
        self.documents.len() + self.in_flight.len()
    }

    /// Done with the current batch (it succeeded, or its error was final).
    pub fn finish_batch(&mut self) {
        self.in_flight.clear();
    }
}

impl Operation for Insert {
    type Output = i64;

    fn build(&mut self, hello: &HelloReply) -> Result<Command> {
        let mut body = RawDocumentBuf::new();
        body.append(cstr!("insert"), self.coll.as_str());
        body.append(cstr!("ordered"), self.ordered);
        super::merge_extra(&mut body, self.extra.as_deref())?;
        if !self.in_flight.is_empty() {
            return Ok(Command {
                name: "insert".into(),
                db: self.db.clone(),
                body,
                sequences: vec![(cstr!("documents"), self.in_flight.clone())],
            });
        }
        let budget = hello
            .max_message_size_bytes
            .saturating_sub(MESSAGE_OVERHEAD + body.as_bytes().len());
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(doc) = self.documents.front() {
            let len = doc.as_bytes().len();
            if len > hello.max_bson_object_size {
                return Err(Error::invalid_argument(format!(
                    "document of {len} bytes exceeds maxBsonObjectSize {}",
                    hello.max_bson_object_size
                )));
            }
            if !batch.is_empty()
                && (bytes + len > budget || batch.len() >= hello.max_write_batch_size)
            {
                break;
            }
            bytes += len;
            batch.extend(self.documents.pop_front());
        }
        self.in_flight = batch.clone();
        Ok(Command {
            name: "insert".into(),
            db: self.db.clone(),
            body,
            sequences: vec![(cstr!("documents"), batch)],
        })
    }

    fn handle_reply(&mut self, reply: RawDocumentBuf, _: &str) -> Result<i64> {
        check_write_errors(&reply)?;
        Ok(reply.get_i32("n").map(i64::from).unwrap_or(0))
    }

    fn retryability(&self) -> Retryability {
        Retryability::Write
    }
}

/// Ensures `_id` comes first, generating an ObjectId when absent (CRUD spec).
/// Returns the document and its `_id` value as `{v: <id>}`.
pub fn with_id(doc: &RawDocument) -> Result<(RawDocumentBuf, RawDocumentBuf)> {
    let mut id_doc = RawDocumentBuf::new();
    if let Some(id) = doc.get("_id")? {
        id_doc.append(cstr!("v"), id);
        return Ok((doc.to_owned(), id_doc));
    }
    let id = bson::oid::ObjectId::new();
    id_doc.append(cstr!("v"), id);
    let mut out = RawDocumentBuf::new();
    out.append(cstr!("_id"), id);
    for item in doc {
        let (k, v) = item?;
        out.append(k, v);
    }
    Ok((out, id_doc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn insert(n: usize) -> Insert {
        let documents = (0..n)
            .map(|i| rawdoc! { "_id": i as i32, "pad": "x".repeat(100) })
            .collect();
        Insert::new("d", "c", documents, true, None)
    }

    #[test]
    fn batches_split_by_count_and_size() {
        let hello = HelloReply {
            max_write_batch_size: 3,
            max_message_size_bytes: 1 << 20,
            max_bson_object_size: 1 << 20,
            ..Default::default()
        };
        let mut op = insert(7);
        let sizes: Vec<usize> = std::iter::from_fn(|| {
            (op.remaining() > 0).then(|| {
                let n = op.build(&hello).unwrap().sequences[0].1.len();
                op.finish_batch();
                n
            })
        })
        .collect();
        assert_eq!(sizes, [3, 3, 1]);
        let doc_len = insert(1).documents[0].as_bytes().len();
        let hello = HelloReply {
            max_write_batch_size: 100,
            max_message_size_bytes: MESSAGE_OVERHEAD + 100 + 2 * doc_len,
            max_bson_object_size: 1 << 20,
            ..Default::default()
        };
        let mut op = insert(5);
        assert_eq!(op.build(&hello).unwrap().sequences[0].1.len(), 2);
    }

    #[test]
    fn a_retry_resends_the_same_batch() {
        let hello = HelloReply {
            max_write_batch_size: 2,
            max_message_size_bytes: 1 << 20,
            max_bson_object_size: 1 << 20,
            ..Default::default()
        };
        let mut op = insert(3);
        let first = op.build(&hello).unwrap().sequences[0].1.clone();
        let retry = op.build(&hello).unwrap().sequences[0].1.clone();
        assert_eq!(first, retry);
        op.finish_batch();
        assert_eq!(
            op.build(&hello).unwrap().sequences[0].1.len(),
            1,
            "then the rest"
        );
    }

    #[test]
    fn oversized_document_is_rejected() {
        let hello = HelloReply {
            max_write_batch_size: 3,
            max_message_size_bytes: 1 << 20,
            max_bson_object_size: 50,
            ..Default::default()
        };
        assert_eq!(
            insert(1).build(&hello).unwrap_err().kind,
            crate::ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn id_is_kept_or_generated_first() {
        let (doc, id) = with_id(&rawdoc! { "_id": 7, "x": 1 }).unwrap();
        assert_eq!(doc, rawdoc! { "_id": 7, "x": 1 });
        assert_eq!(id.get_i32("v").unwrap(), 7);
        let (doc, id) = with_id(&rawdoc! { "x": 1 }).unwrap();
        let first = doc.iter().next().unwrap().unwrap();
        assert_eq!(first.0, "_id");
        assert_eq!(
            doc.get_object_id("_id").unwrap(),
            id.get_object_id("v").unwrap()
        );
        assert_eq!(doc.get_i32("x").unwrap(), 1);
    }
}
