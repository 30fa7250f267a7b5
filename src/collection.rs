//! CRUD on one collection (CRUD spec). Documents stay raw BSON throughout.

use crate::cursor::{Cursor, TimeoutMode};
use crate::database::Database;
use crate::error::{Error, Result};
use crate::operation::{
    check_write_errors, insert::with_id, CursorCommand, Find, Insert, RunCommand,
};
use crate::retryable::Retryability;
use crate::sdam::selection::Criteria;
use crate::session::Session;
use bson::cstr;
use bson::{rawdoc, RawArrayBuf, RawBson, RawDocument, RawDocumentBuf};
use std::collections::VecDeque;

#[derive(Clone)]
pub struct Collection {
    db: Database,
    name: String,
    timeout_ms: Option<u64>,
}

/// Options every operation takes; `extra` holds further command fields by
/// their server names (hint, collation, comment, upsert, ordered...).
#[derive(Default, Clone)]
pub struct OpOptions<'a> {
    pub timeout_ms: Option<u64>,
    pub session: Option<&'a Session>,
    pub extra: Option<RawDocumentBuf>,
}

#[derive(Default, Clone)]
pub struct FindOptions<'a> {
    pub timeout_ms: Option<u64>,
    pub session: Option<&'a Session>,
    pub sort: Option<RawDocumentBuf>,
    pub projection: Option<RawDocumentBuf>,
    pub skip: Option<i64>,
    pub limit: Option<i64>,
    pub batch_size: Option<u32>,
    pub timeout_mode: Option<TimeoutMode>,
    pub extra: Option<RawDocumentBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpdateResult {
    pub matched: i64,
    pub modified: i64,
    /// `{v: <id>}` when the update upserted.
    pub upserted_id: Option<RawDocumentBuf>,
}

/// An update document, or a pipeline.
pub enum UpdateSpec {
    Document(RawDocumentBuf),
    Pipeline(Vec<RawDocumentBuf>),
}

impl Collection {
    pub(crate) fn new(db: Database, name: &str, timeout_ms: Option<u64>) -> Collection {
        Collection {
            db,
            name: name.to_string(),
            timeout_ms,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> String {
        format!("{}.{}", self.db.name, self.name)
    }

    pub fn timeout_ms(&self) -> Option<u64> {
        self.timeout_ms
    }

    fn resolve(&self, op_timeout: Option<u64>, session: Option<&Session>) -> Option<u64> {
        op_timeout
            .or(session.and_then(|s| s.default_timeout_ms))
            .or(self.timeout_ms)
    }

    /// Inserts one document; returns its `_id` as `{v: <id>}`.
    pub fn insert_one(&self, doc: &RawDocument, options: &OpOptions) -> Result<RawDocumentBuf> {
        let (doc, id) = with_id(doc)?;
        self.insert(VecDeque::from([doc]), true, options)?;
        Ok(id)
    }

    /// Inserts many documents in as few `insert` commands as the server's
    /// limits allow, all under one deadline; returns `{"0": id, "1": id, ...}`.
    pub fn insert_many(
        &self,
        docs: &[RawDocumentBuf],
        options: &OpOptions,
    ) -> Result<RawDocumentBuf> {
        if docs.is_empty() {
            return Err(Error::invalid_argument(
                "insert-many needs at least one document",
            ));
        }
        let mut ids = RawDocumentBuf::new();
        let mut prepared = VecDeque::with_capacity(docs.len());
        for (i, doc) in docs.iter().enumerate() {
            let (doc, id) = with_id(doc)?;
            if let Some(v) = id.get("v")? {
                ids.append(key(&i.to_string())?, v);
            }
            prepared.push_back(doc);
        }
        let ordered = match options.extra.as_ref().map(|e| e.get_bool("ordered")) {
            Some(Ok(o)) => o,
            _ => true,
        };
        self.insert(prepared, ordered, options)?;
        Ok(ids)
    }

    fn insert(
        &self,
        documents: VecDeque<RawDocumentBuf>,
        ordered: bool,
        options: &OpOptions,
    ) -> Result<()> {
        let mut extra = options.extra.clone();
        if let Some(e) = extra.as_mut() {
            // `ordered` is set from the argument; drop the duplicate.
            let mut clean = RawDocumentBuf::new();
            for item in e.iter() {
                let (k, v) = item?;
                if k.as_str() != "ordered" {
                    clean.append(k, v);
                }
            }
            *e = clean;
        }
        let mut op = Insert::new(&self.db.name, &self.name, documents, ordered, extra);
        let budget = self
            .db
            .client
            .start_timeout(self.resolve(options.timeout_ms, options.session));
        let mut first_error = None;
        while op.remaining() > 0 {
            let result = self
                .db
                .client
                .execute_within(&mut op, &budget, options.session, None);
            op.finish_batch();
            if let Err(e) = result {
                if ordered || e.is_timeout() || e.kind != crate::ErrorKind::Server {
                    return Err(e);
                }
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    pub fn find(&self, filter: RawDocumentBuf, options: &FindOptions) -> Result<Cursor> {
        let timeout_ms = self.resolve(options.timeout_ms, options.session);
        let budget = self.db.client.start_timeout(timeout_ms);
        // The cursor keeps the session (implicit or not) for its getMores.
        let session = self.db.client.session_for(options.session);
        let mut op = Find {
            db: self.db.name.clone(),
            coll: self.name.clone(),
            filter,
            sort: options.sort.clone(),
            projection: options.projection.clone(),
            skip: options.skip,
            limit: options.limit,
            batch_size: options.batch_size,
            extra: options.extra.clone(),
        };
        let reply = self
            .db
            .client
            .execute_within(&mut op, &budget, Some(&session), None)?;
        Cursor::new(
            self.db.client.clone(),
            &self.db.name,
            reply,
            options.batch_size,
            options.timeout_mode,
            timeout_ms,
            budget,
            Some(session),
        )
    }

    pub fn find_one(
        &self,
        filter: RawDocumentBuf,
        options: &FindOptions,
    ) -> Result<Option<RawDocumentBuf>> {
        let options = FindOptions {
            limit: Some(-1),
            batch_size: None,
            ..options.clone()
        };
        let mut cursor = self.find(filter, &options)?;
        Ok(cursor.next_batch()?.documents.into_iter().next())
    }

    pub fn aggregate(
        &self,
        pipeline: &[RawDocumentBuf],
        batch_size: Option<u32>,
        options: &OpOptions,
        timeout_mode: Option<TimeoutMode>,
    ) -> Result<Cursor> {
        let body = aggregate_command(self.name.as_str().into(), pipeline, batch_size);
        let retry = if pipeline_writes(pipeline) {
            Retryability::None
        } else {
            Retryability::Read
        };
        self.cursor_command(body, batch_size, options, timeout_mode, retry)
    }

    fn cursor_command(
        &self,
        mut body: RawDocumentBuf,
        batch_size: Option<u32>,
        options: &OpOptions,
        timeout_mode: Option<TimeoutMode>,
        retry: Retryability,
    ) -> Result<Cursor> {
        crate::operation::merge_extra(&mut body, options.extra.as_deref())?;
        let timeout_ms = self.resolve(options.timeout_ms, options.session);
        let budget = self.db.client.start_timeout(timeout_ms);
        // The cursor keeps the session (implicit or not) for its getMores.
        let session = self.db.client.session_for(options.session);
        let mut op = CursorCommand(command_op(&self.db.name, body, retry));
        let reply = self
            .db
            .client
            .execute_within(&mut op, &budget, Some(&session), None)?;
        let client = self.db.client.clone();
        Cursor::new(
            client,
            &self.db.name,
            reply,
            batch_size,
            timeout_mode,
            timeout_ms,
            budget,
            Some(session),
        )
    }

    /// Runs one hand-built command for this collection: a read, a
    /// retryable write, or a write sent once.
    fn command(
        &self,
        mut body: RawDocumentBuf,
        options: &OpOptions,
        retry: Retryability,
    ) -> Result<RawDocumentBuf> {
        crate::operation::merge_extra(&mut body, options.extra.as_deref())?;
        let mut op = command_op(&self.db.name, body, retry);
        let timeout = self.resolve(options.timeout_ms, options.session);
        self.db.client.execute(&mut op, timeout, options.session)
    }

    fn delete(&self, filter: RawDocumentBuf, limit: i32, options: &OpOptions) -> Result<i64> {
        let mut stmt = rawdoc! { "q": filter, "limit": limit };
        move_fields(&mut stmt, options, &["collation", "hint"])?;
        let body = rawdoc! { "delete": self.name.as_str(), "deletes": [stmt] };
        // Only single-document writes are retryable (Retryable Writes spec).
        let retry = if limit == 1 {
            Retryability::Write
        } else {
            Retryability::None
        };
        let reply = self.command(body, &strip(options, &["collation", "hint"])?, retry)?;
        check_write_errors(&reply)?;
        Ok(reply.get_i32("n").map(i64::from).unwrap_or(0))
    }

    pub fn delete_one(&self, filter: RawDocumentBuf, options: &OpOptions) -> Result<i64> {
        self.delete(filter, 1, options)
    }

    pub fn delete_many(&self, filter: RawDocumentBuf, options: &OpOptions) -> Result<i64> {
        self.delete(filter, 0, options)
    }

    fn update(
        &self,
        filter: RawDocumentBuf,
        update: RawBson,
        multi: bool,
        options: &OpOptions,
    ) -> Result<UpdateResult> {
        let mut stmt = rawdoc! { "q": filter, "u": update };
        if multi {
            stmt.append(cstr!("multi"), true);
        }
        const PER_STATEMENT: &[&str] = &["upsert", "collation", "hint", "arrayFilters"];
        move_fields(&mut stmt, options, PER_STATEMENT)?;
        let body = rawdoc! { "update": self.name.as_str(), "updates": [stmt] };
        let retry = if multi {
            Retryability::None
        } else {
            Retryability::Write
        };
        let reply = self.command(body, &strip(options, PER_STATEMENT)?, retry)?;
        check_write_errors(&reply)?;
        let n = reply.get_i32("n").map(i64::from).unwrap_or(0);
        let upserted_id = match reply
            .get_array("upserted")
            .ok()
            .and_then(|a| a.into_iter().next())
        {
            Some(first) => {
                let first = first?
                    .as_document()
                    .ok_or_else(|| Error::protocol("bad upserted entry"))?;
                let mut id = RawDocumentBuf::new();
                if let Some(v) = first.get("_id")? {
                    id.append(cstr!("v"), v);
                }
                Some(id)
            }
            None => None,
        };
        let matched = if upserted_id.is_some() { n - 1 } else { n };
        Ok(UpdateResult {
            matched,
            modified: reply.get_i32("nModified").map(i64::from).unwrap_or(0),
            upserted_id,
        })
    }

    pub fn update_one(
        &self,
        filter: RawDocumentBuf,
        update: UpdateSpec,
        options: &OpOptions,
    ) -> Result<UpdateResult> {
        self.update(filter, update_value(update)?, false, options)
    }

    pub fn update_many(
        &self,
        filter: RawDocumentBuf,
        update: UpdateSpec,
        options: &OpOptions,
    ) -> Result<UpdateResult> {
        self.update(filter, update_value(update)?, true, options)
    }

    pub fn replace_one(
        &self,
        filter: RawDocumentBuf,
        replacement: RawDocumentBuf,
        options: &OpOptions,
    ) -> Result<UpdateResult> {
        check_replacement(&replacement)?;
        self.update(filter, RawBson::Document(replacement), false, options)
    }

    /// `findAndModify`: removes, updates or replaces one document and
    /// returns it (before the change, or after with `returnDocument: "After"`
    /// in `extra`; `projection` is sent as `fields`).
    fn find_and_modify(
        &self,
        filter: RawDocumentBuf,
        change: Modify,
        options: &OpOptions,
    ) -> Result<Option<RawDocumentBuf>> {
        let mut body = rawdoc! { "findAndModify": self.name.as_str(), "query": filter };
        match change {
            Modify::Remove => body.append(cstr!("remove"), true),
            Modify::Update(u) => body.append(cstr!("update"), u),
        }
        let mut rest = RawDocumentBuf::new();
        if let Some(extra) = &options.extra {
            for item in extra {
                let (k, v) = item?;
                match k.as_str() {
                    "returnDocument" => {
                        let after = v.as_str().is_some_and(|s| s.eq_ignore_ascii_case("after"));
                        body.append(cstr!("new"), after);
                    }
                    "projection" => body.append(cstr!("fields"), v),
                    _ => rest.append(k, v),
                }
            }
        }
        let opts = OpOptions {
            extra: Some(rest),
            ..options.clone()
        };
        let reply = self.command(body, &opts, Retryability::Write)?;
        check_write_errors(&reply)?;
        match reply.get("value")? {
            Some(bson::RawBsonRef::Document(d)) => Ok(Some(d.to_owned())),
            _ => Ok(None),
        }
    }

    pub fn find_one_and_delete(
        &self,
        filter: RawDocumentBuf,
        options: &OpOptions,
    ) -> Result<Option<RawDocumentBuf>> {
        self.find_and_modify(filter, Modify::Remove, options)
    }

    pub fn find_one_and_update(
        &self,
        filter: RawDocumentBuf,
        update: UpdateSpec,
        options: &OpOptions,
    ) -> Result<Option<RawDocumentBuf>> {
        self.find_and_modify(filter, Modify::Update(update_value(update)?), options)
    }

    pub fn find_one_and_replace(
        &self,
        filter: RawDocumentBuf,
        replacement: RawDocumentBuf,
        options: &OpOptions,
    ) -> Result<Option<RawDocumentBuf>> {
        check_replacement(&replacement)?;
        self.find_and_modify(
            filter,
            Modify::Update(RawBson::Document(replacement)),
            options,
        )
    }

    /// Renames this collection within its database (`renameCollection` on admin).
    pub fn rename(&self, to: &str, options: &OpOptions) -> Result<()> {
        let mut body = rawdoc! { "renameCollection": self.namespace(), "to": format!("{}.{to}", self.db.name) };
        crate::operation::merge_extra(&mut body, options.extra.as_deref())?;
        let mut op = RunCommand::new("admin", body, Criteria::Write);
        let timeout = self.resolve(options.timeout_ms, options.session);
        self.db
            .client
            .execute(&mut op, timeout, options.session)
            .map(|_| ())
    }

    pub fn count_documents(&self, filter: RawDocumentBuf, options: &OpOptions) -> Result<i64> {
        let mut pipeline = vec![rawdoc! { "$match": filter }];
        let extra = options.extra.as_ref();
        if let Some(skip) = extra.and_then(|e| e.get("skip").ok().flatten()) {
            pipeline.push(rawdoc! { "$skip": skip });
        }
        if let Some(limit) = extra.and_then(|e| e.get("limit").ok().flatten()) {
            pipeline.push(rawdoc! { "$limit": limit });
        }
        pipeline.push(rawdoc! { "$group": { "_id": 1, "n": { "$sum": 1 } } });
        let opts = strip(options, &["skip", "limit"])?;
        let mut cursor = self.aggregate(&pipeline, None, &opts, None)?;
        let batch = cursor.next_batch()?;
        match batch.documents.first() {
            None => Ok(0),
            Some(d) => number(d, "n"),
        }
    }

    pub fn estimated_document_count(&self, options: &OpOptions) -> Result<i64> {
        let reply = self.command(
            rawdoc! { "count": self.name.as_str() },
            options,
            Retryability::Read,
        )?;
        number(&reply, "n")
    }

    /// The distinct values as `{values: [...]}`.
    pub fn distinct(
        &self,
        field: &str,
        filter: RawDocumentBuf,
        options: &OpOptions,
    ) -> Result<RawDocumentBuf> {
        let body = rawdoc! { "distinct": self.name.as_str(), "key": field, "query": filter };
        let reply = self.command(body, options, Retryability::Read)?;
        let values = reply
            .get_array("values")
            .map_err(|_| Error::protocol("distinct reply has no values"))?;
        Ok(rawdoc! { "values": values.to_owned() })
    }

    pub fn drop(&self, options: &OpOptions) -> Result<()> {
        match self.command(
            rawdoc! { "drop": self.name.as_str() },
            options,
            Retryability::None,
        ) {
            // Dropping a missing collection is not an error (NamespaceNotFound).
            Err(e) if e.code == Some(26) || e.message.contains("ns not found") => Ok(()),
            other => other.map(|_| ()),
        }
    }

    pub fn create_indexes(
        &self,
        models: &[RawDocumentBuf],
        options: &OpOptions,
    ) -> Result<Vec<String>> {
        let mut indexes = RawArrayBuf::new();
        let mut names = Vec::new();
        for model in models {
            let keys = model
                .get_document("key")
                .map_err(|_| Error::invalid_argument("index model needs a key document"))?;
            let name = match model.get_str("name") {
                Ok(n) => n.to_string(),
                Err(_) => default_index_name(keys)?,
            };
            let mut index = model.clone();
            if model.get("name")?.is_none() {
                index.append(cstr!("name"), name.as_str());
            }
            indexes.push(index);
            names.push(name);
        }
        let body = rawdoc! { "createIndexes": self.name.as_str(), "indexes": indexes };
        self.command(body, options, Retryability::None)?;
        Ok(names)
    }

    pub fn list_indexes(&self, batch_size: Option<u32>, options: &OpOptions) -> Result<Cursor> {
        let mut cursor_opts = RawDocumentBuf::new();
        if let Some(b) = batch_size {
            cursor_opts.append(cstr!("batchSize"), i64::from(b));
        }
        let body = rawdoc! { "listIndexes": self.name.as_str(), "cursor": cursor_opts };
        self.cursor_command(body, batch_size, options, None, Retryability::Read)
    }

    pub fn drop_index(&self, name: &str, options: &OpOptions) -> Result<()> {
        self.command(
            rawdoc! { "dropIndexes": self.name.as_str(), "index": name },
            options,
            Retryability::None,
        )
        .map(|_| ())
    }
}

enum Modify {
    Remove,
    Update(RawBson),
}

/// A replacement is a plain document: update operators there are a mistake (CRUD spec).
fn check_replacement(replacement: &RawDocument) -> Result<()> {
    match replacement.iter().next() {
        Some(Ok((key, _))) if key.as_str().starts_with('$') => Err(Error::invalid_argument(
            "replacement document must not contain update operators",
        )),
        _ => Ok(()),
    }
}

/// Reads go to a readable server and may be retried; everything else is a write.
fn command_op(db: &str, body: RawDocumentBuf, retry: Retryability) -> RunCommand {
    match retry {
        Retryability::Read => RunCommand::read(db, body),
        _ => RunCommand {
            retryability: retry,
            ..RunCommand::new(db, body, Criteria::Write)
        },
    }
}

/// `{aggregate: <target>, pipeline, cursor: {batchSize?}}`; the target is a
/// collection name, or 1 for a database-level aggregate.
pub(crate) fn aggregate_command(
    target: RawBson,
    pipeline: &[RawDocumentBuf],
    batch_size: Option<u32>,
) -> RawDocumentBuf {
    let mut cursor_opts = RawDocumentBuf::new();
    if let Some(b) = batch_size {
        cursor_opts.append(cstr!("batchSize"), i64::from(b));
    }
    rawdoc! { "aggregate": target, "pipeline": array(pipeline), "cursor": cursor_opts }
}

/// `$out` and `$merge` make an aggregate a write: not retried as a read.
pub(crate) fn pipeline_writes(pipeline: &[RawDocumentBuf]) -> bool {
    pipeline.last().and_then(|stage| stage.iter().next()).is_some_and(|first| {
        matches!(first, Ok((name, _)) if name.as_str() == "$out" || name.as_str() == "$merge")
    })
}

/// The spec's default index name: `field_dir` joined by `_`.
fn default_index_name(keys: &RawDocument) -> Result<String> {
    let mut parts = Vec::new();
    for item in keys {
        let (k, v) = item?;
        let dir = match v {
            bson::RawBsonRef::Int32(i) => i.to_string(),
            bson::RawBsonRef::Int64(i) => i.to_string(),
            bson::RawBsonRef::Double(d) => d.to_string(),
            bson::RawBsonRef::String(s) => s.to_string(),
            _ => {
                return Err(Error::invalid_argument(
                    "index key directions are numbers or strings",
                ))
            }
        };
        parts.push(format!("{k}_{dir}"));
    }
    Ok(parts.join("_"))
}

fn array(docs: &[RawDocumentBuf]) -> RawArrayBuf {
    let mut arr = RawArrayBuf::new();
    for d in docs {
        arr.push(d.clone());
    }
    arr
}

fn update_value(update: UpdateSpec) -> Result<RawBson> {
    match update {
        UpdateSpec::Document(d) => {
            match d.iter().next() {
                Some(Ok((key, _))) if key.as_str().starts_with('$') => {}
                _ => {
                    return Err(Error::invalid_argument(
                        "update document must contain only update operators",
                    ))
                }
            }
            Ok(RawBson::Document(d))
        }
        UpdateSpec::Pipeline(p) => Ok(RawBson::Array(array(&p))),
    }
}

/// Copies the named fields of `options.extra` into a statement document.
fn move_fields(stmt: &mut RawDocumentBuf, options: &OpOptions, names: &[&str]) -> Result<()> {
    if let Some(extra) = &options.extra {
        for name in names {
            if let Some(v) = extra.get(name)? {
                stmt.append(key(name)?, v);
            }
        }
    }
    Ok(())
}

/// `options` without the named extra fields (they went into a statement).
fn strip<'a>(options: &OpOptions<'a>, names: &[&str]) -> Result<OpOptions<'a>> {
    let Some(extra) = &options.extra else {
        return Ok(options.clone());
    };
    let mut kept = RawDocumentBuf::new();
    for item in extra {
        let (k, v) = item?;
        if !names.contains(&k.as_str()) {
            kept.append(k, v);
        }
    }
    Ok(OpOptions {
        extra: Some(kept),
        ..options.clone()
    })
}

/// A dynamic key; BSON keys cannot hold a NUL byte.
fn key(name: &str) -> Result<bson::raw::CString> {
    bson::raw::CString::try_from(name)
        .map_err(|_| Error::invalid_argument(format!("invalid field name {name:?}")))
}

fn number(doc: &RawDocument, key: &str) -> Result<i64> {
    match doc.get(key)? {
        Some(bson::RawBsonRef::Int32(v)) => Ok(v.into()),
        Some(bson::RawBsonRef::Int64(v)) => Ok(v),
        Some(bson::RawBsonRef::Double(v)) => Ok(v as i64),
        _ => Err(Error::protocol(format!("reply has no numeric {key}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_index_names() {
        assert_eq!(
            default_index_name(&rawdoc! { "a": 1, "b": -1 }).unwrap(),
            "a_1_b_-1"
        );
        assert_eq!(
            default_index_name(&rawdoc! { "t": "text" }).unwrap(),
            "t_text"
        );
        assert!(default_index_name(&rawdoc! { "a": true }).is_err());
    }

    #[test]
    fn update_documents_must_use_operators() {
        assert!(update_value(UpdateSpec::Document(rawdoc! { "x": 1 })).is_err());
        assert!(update_value(UpdateSpec::Document(rawdoc! { "$set": { "x": 1 } })).is_ok());
        assert!(matches!(
            update_value(UpdateSpec::Pipeline(vec![])).unwrap(),
            RawBson::Array(_)
        ));
    }

    #[test]
    fn strip_and_move_split_statement_fields() {
        let opts = OpOptions {
            extra: Some(rawdoc! { "upsert": true, "comment": "c" }),
            ..Default::default()
        };
        let mut stmt = rawdoc! { "q": {} };
        move_fields(&mut stmt, &opts, &["upsert"]).unwrap();
        assert_eq!(stmt, rawdoc! { "q": {}, "upsert": true });
        assert_eq!(
            strip(&opts, &["upsert"]).unwrap().extra.unwrap(),
            rawdoc! { "comment": "c" }
        );
    }
}
