//! Commands that open or drive a server cursor.

use super::{Command, Operation};
use crate::error::{Error, Result};
use crate::handshake::HelloReply;
use crate::retryable::Retryability;
use crate::sdam::selection::{Criteria, ReadMode, ReadPreference};
use crate::wire::raw::{self, ARRAY, DOCUMENT};
use bson::cstr;
use bson::{RawBson, RawDocument, RawDocumentBuf};

/// What a cursor-returning reply holds.
#[derive(Debug)]
pub struct CursorReply {
    pub id: i64,
    pub ns: String,
    pub batch: Packed,
    pub post_batch_resume_token: Option<RawDocumentBuf>,
    /// The server that owns the cursor: getMore must go there.
    pub address: String,
}

impl CursorReply {
    pub fn parse(reply: &RawDocument, address: &str) -> Result<CursorReply> {
        let cursor = raw::get(reply, "cursor")
            .and_then(|c| c.as_document())
            .ok_or_else(|| Error::protocol("reply has no cursor document"))?;
        // mongod sends an int64; nx-27017 an int32 for change streams. Either is an id.
        let id = match raw::get(cursor, "id") {
            Some(bson::RawBsonRef::Int64(id)) => id,
            Some(bson::RawBsonRef::Int32(id)) => i64::from(id),
            _ => return Err(Error::protocol("cursor has no integer id")),
        };
        let array = |key: &str| match raw::find(cursor.as_bytes(), key.as_bytes()) {
            Ok(Some((ARRAY, bytes))) => Some(bytes),
            _ => None,
        };
        let batch = array("firstBatch")
            .or_else(|| array("nextBatch"))
            .ok_or_else(|| Error::protocol("cursor has no batch"))?;
        Ok(CursorReply {
            id,
            ns: raw::get(cursor, "ns")
                .and_then(|ns| ns.as_str())
                .unwrap_or_default()
                .to_string(),
            batch: Packed::of(batch)?,
            post_batch_resume_token: raw::get(cursor, "postBatchResumeToken")
                .and_then(|t| t.as_document())
                .map(|d| d.to_owned()),
            address: address.to_string(),
        })
    }
}

/// A batch's documents back to back in one buffer, as the reply that
/// brought them was checked (`wire::check_reply`): one allocation per
/// batch, not per document, and handed out whole (`into_bytes`) or split.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Packed {
    bytes: Vec<u8>,
    count: usize,
}

impl Packed {
    /// The documents of a reply's batch array (its bytes); a non-document
    /// is a protocol error.
    pub fn of(array: &[u8]) -> Result<Packed> {
        let mut packed = Packed {
            bytes: Vec::with_capacity(array.len()),
            count: 0,
        };
        for element in raw::elements(array) {
            let (kind, _, doc) = element.map_err(raw::error)?;
            if kind != DOCUMENT {
                return Err(Error::protocol("batch holds a non-document"));
            }
            packed.bytes.extend_from_slice(doc);
            packed.count += 1;
        }
        Ok(packed)
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn len(&self) -> usize {
        self.count
    }

    /// The documents in order, borrowed.
    pub fn iter(&self) -> impl Iterator<Item = &RawDocument> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let len = self.bytes.get(at..at + 4)?;
            let len = i32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            // Each was a whole document of the checked reply.
            let doc = RawDocument::from_bytes(&self.bytes[at..at + len]).ok()?;
            at += len;
            Some(doc)
        })
    }

    /// One owned document each.
    pub fn into_documents(self) -> Vec<RawDocumentBuf> {
        self.iter().map(RawDocument::to_owned).collect()
    }

    /// The documents back to back, and how many there are.
    pub fn into_bytes(self) -> (Vec<u8>, usize) {
        (self.bytes, self.count)
    }
}

/// `find`, with the CRUD spec's options; anything else rides in `extra`.
pub struct Find {
    pub db: String,
    pub coll: String,
    pub filter: RawDocumentBuf,
    pub sort: Option<RawDocumentBuf>,
    pub projection: Option<RawDocumentBuf>,
    pub skip: Option<i64>,
    pub limit: Option<i64>,
    pub batch_size: Option<u32>,
    pub extra: Option<RawDocumentBuf>,
    /// Whether a derived maxTimeMS may go on it (CSOT cursor rules).
    pub max_time: bool,
    /// Which servers may serve it (a may-use-secondary read).
    pub read_preference: ReadPreference,
}

impl Operation for Find {
    fn name(&self) -> &str {
        "find"
    }

    type Output = CursorReply;

    fn build(&mut self, _: &HelloReply) -> Result<Command> {
        let mut body = RawDocumentBuf::new();
        body.append(cstr!("find"), self.coll.as_str());
        body.append(cstr!("filter"), self.filter.clone());
        if let Some(sort) = &self.sort {
            body.append(cstr!("sort"), sort.clone());
        }
        if let Some(p) = &self.projection {
            body.append(cstr!("projection"), p.clone());
        }
        if let Some(skip) = self.skip.filter(|s| *s != 0) {
            body.append(cstr!("skip"), skip);
        }
        match self.limit {
            // A negative limit means one batch of that size, then close (CRUD spec).
            Some(l) if l < 0 => {
                body.append(cstr!("limit"), -l);
                body.append(cstr!("singleBatch"), true);
            }
            Some(l) if l > 0 => body.append(cstr!("limit"), l),
            _ => {}
        }
        if let Some(b) = self.batch_size {
            // batchSize equal to limit would leave an open cursor with nothing in it.
            let b = match self.limit {
                Some(l) if l > 0 && l == i64::from(b) => b + 1,
                _ => b,
            };
            body.append(cstr!("batchSize"), i64::from(b));
        }
        super::merge_extra(&mut body, self.extra.as_deref())?;
        Ok(Command {
            name: "find".into(),
            db: self.db.clone(),
            body,
            sequences: Vec::new(),
        })
    }

    fn handle_reply(&mut self, reply: RawDocumentBuf, address: &str) -> Result<CursorReply> {
        CursorReply::parse(&reply, address)
    }

    fn criteria(&self) -> Criteria {
        Criteria::Read(self.read_preference.clone())
    }

    fn retryability(&self) -> Retryability {
        Retryability::Read
    }

    fn sends_max_time(&self) -> bool {
        self.max_time
    }
}

/// getMore takes a comment from 4.4 (wire version 9).
const COMMENT_MIN_WIRE_VERSION: i32 = 9;

pub struct GetMore {
    pub db: String,
    pub coll: String,
    pub id: i64,
    pub batch_size: Option<u32>,
    /// An awaiting (change stream) cursor's maxAwaitTimeMS, sent as maxTimeMS.
    pub max_await_ms: Option<u64>,
    /// The opening command's comment: servers before 4.4 refuse it on getMore.
    pub comment: Option<RawBson>,
    /// The wire version of the connection it was sent on (a change stream's
    /// resumability depends on it).
    pub wire_version: Option<i32>,
}

impl Operation for GetMore {
    fn name(&self) -> &str {
        "getMore"
    }

    type Output = CursorReply;

    fn build(&mut self, hello: &HelloReply) -> Result<Command> {
        self.wire_version = Some(hello.max_wire_version);
        let mut body = RawDocumentBuf::new();
        body.append(cstr!("getMore"), self.id);
        body.append(cstr!("collection"), self.coll.as_str());
        if let Some(b) = self.batch_size {
            body.append(cstr!("batchSize"), i64::from(b));
        }
        if let Some(ms) = self.max_await_ms {
            body.append(cstr!("maxTimeMS"), ms as i64);
        }
        match &self.comment {
            Some(c) if hello.max_wire_version >= COMMENT_MIN_WIRE_VERSION => {
                body.append(cstr!("comment"), c.clone())
            }
            _ => {}
        }
        Ok(Command {
            name: "getMore".into(),
            db: self.db.clone(),
            body,
            sequences: Vec::new(),
        })
    }

    fn handle_reply(&mut self, reply: RawDocumentBuf, address: &str) -> Result<CursorReply> {
        CursorReply::parse(&reply, address)
    }

    fn criteria(&self) -> Criteria {
        Criteria::read(ReadMode::Primary)
    }

    fn overload_gate(&self) -> crate::backpressure::Gate {
        crate::backpressure::Gate::Read
    }

    fn sends_max_time(&self) -> bool {
        // CSOT: getMore on a non-tailable cursor carries no maxTimeMS.
        false
    }

    fn cursor_id(&self) -> Option<i64> {
        Some(self.id)
    }
}

pub struct KillCursors {
    pub db: String,
    pub coll: String,
    pub ids: Vec<i64>,
}

impl Operation for KillCursors {
    fn name(&self) -> &str {
        "killCursors"
    }

    type Output = ();

    fn build(&mut self, _: &HelloReply) -> Result<Command> {
        let mut body = RawDocumentBuf::new();
        body.append(cstr!("killCursors"), self.coll.as_str());
        let mut ids = bson::RawArrayBuf::new();
        for id in &self.ids {
            ids.push(*id);
        }
        body.append(cstr!("cursors"), ids);
        Ok(Command {
            name: "killCursors".into(),
            db: self.db.clone(),
            body,
            sequences: Vec::new(),
        })
    }

    fn handle_reply(&mut self, _: RawDocumentBuf, _: &str) -> Result<()> {
        Ok(())
    }

    fn cursor_id(&self) -> Option<i64> {
        self.ids.first().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn find() -> Find {
        Find {
            db: "d".into(),
            coll: "c".into(),
            filter: rawdoc! { "x": 1 },
            sort: None,
            projection: None,
            skip: None,
            limit: None,
            batch_size: None,
            extra: None,
            max_time: true,
            read_preference: ReadPreference::primary(),
        }
    }

    #[test]
    fn find_builds_options() {
        let mut f = Find {
            sort: Some(rawdoc! { "a": 1 }),
            skip: Some(2),
            limit: Some(5),
            batch_size: Some(3),
            ..find()
        };
        let cmd = f.build(&HelloReply::default()).unwrap();
        assert_eq!(
            cmd.body,
            rawdoc! { "find": "c", "filter": { "x": 1 }, "sort": { "a": 1 }, "skip": 2i64, "limit": 5i64, "batchSize": 3i64 }
        );
    }

    #[test]
    fn negative_limit_is_a_single_batch() {
        let mut f = Find {
            limit: Some(-3),
            ..find()
        };
        let body = f.build(&HelloReply::default()).unwrap().body;
        assert_eq!(body.get_i64("limit").unwrap(), 3);
        assert!(body.get_bool("singleBatch").unwrap());
    }

    #[test]
    fn a_packed_batch_holds_its_documents_back_to_back() {
        let r = rawdoc! { "b": [{ "a": 1 }, {}, { "s": "x", "n": { "m": [1] } }] };
        let p = Packed::of(r.get_array("b").unwrap().as_bytes()).unwrap();
        assert_eq!(p.iter().count(), 3);
        let docs = [
            rawdoc! { "a": 1 },
            rawdoc! {},
            rawdoc! { "s": "x", "n": { "m": [1] } },
        ];
        assert!(p.iter().eq(docs.iter().map(|d| &**d)));
        assert_eq!(p.clone().into_documents(), docs);
        let (bytes, count) = p.into_bytes();
        assert_eq!(count, 3);
        assert_eq!(
            bytes,
            docs.iter()
                .flat_map(|d| d.as_bytes().to_vec())
                .collect::<Vec<_>>()
        );
        let bad = rawdoc! { "b": [{ "a": 1 }, 2] };
        assert!(Packed::of(bad.get_array("b").unwrap().as_bytes()).is_err());
        assert!(Packed::default().is_empty());
    }

    #[test]
    fn cursor_reply_parses_first_and_next_batch() {
        let r =
            rawdoc! { "cursor": { "id": 5i64, "ns": "d.c", "firstBatch": [{ "a": 1 }] }, "ok": 1 };
        let c = CursorReply::parse(&r, "h:1").unwrap();
        assert_eq!((c.id, c.ns.as_str(), c.batch.iter().count()), (5, "d.c", 1));
        assert_eq!(c.batch.into_documents(), vec![rawdoc! { "a": 1 }]);
        let r = rawdoc! { "cursor": { "id": 0i64, "nextBatch": [] }, "ok": 1 };
        assert_eq!(CursorReply::parse(&r, "h:1").unwrap().id, 0);
        assert!(CursorReply::parse(&rawdoc! { "ok": 1 }, "h:1").is_err());
        assert!(
            CursorReply::parse(&rawdoc! { "cursor": { "id": 1 } }, "h:1").is_err(),
            "no batch"
        );
        let r = rawdoc! { "cursor": { "id": 7, "nextBatch": [] } };
        assert_eq!(
            CursorReply::parse(&r, "h:1").unwrap().id,
            7,
            "an int32 id is an id"
        );
        let r = rawdoc! { "cursor": { "id": "7", "nextBatch": [] } };
        assert!(CursorReply::parse(&r, "h:1").is_err(), "a string is not");
    }

    #[test]
    fn kill_cursors_lists_ids() {
        let mut k = KillCursors {
            db: "d".into(),
            coll: "c".into(),
            ids: vec![9],
        };
        let body = k.build(&HelloReply::default()).unwrap().body;
        assert_eq!(body, rawdoc! { "killCursors": "c", "cursors": [9i64] });
    }

    #[test]
    fn get_more_comment_from_4_4() {
        let mut g = GetMore {
            db: "d".into(),
            coll: "c".into(),
            id: 7,
            batch_size: None,
            max_await_ms: None,
            comment: Some(RawBson::String("hi".into())),
            wire_version: None,
        };
        let mut hello = HelloReply {
            max_wire_version: 8,
            ..Default::default()
        };
        let body = g.build(&hello).unwrap().body;
        assert_eq!(body.get("comment").unwrap(), None);
        assert_eq!(g.wire_version, Some(8));
        hello.max_wire_version = 9;
        let body = g.build(&hello).unwrap().body;
        assert_eq!(body.get_str("comment").unwrap(), "hi");
    }
}
