//! Writes on a collection (CRUD spec): insert, update, replace, delete and
//! bulk writes share one path (`WriteCommand`, batched to the server's
//! limits, retryable when single-document); findAndModify is its own command.

use super::{array, Collection, OpOptions, UpdateResult, UpdateSpec};
use crate::csot::OpTimeout;
use crate::error::{Error, ErrorKind, Result};
use crate::operation::bulk;
use crate::operation::check_write_errors;
use crate::operation::write::{with_id, WriteCommand, WriteKind, WriteResult};
use crate::retryable::Retryability;
use bson::raw::CString;
use bson::{cstr, rawdoc, RawArrayBuf, RawBson, RawDocument, RawDocumentBuf};

/// Per-statement options a caller passes in `extra` (CRUD spec names).
const STATEMENT_OPTIONS: &[&str] = &["upsert", "collation", "hint", "arrayFilters"];

impl Collection {
    /// Inserts one document; returns its `_id` as `{v: <id>}`.
    pub fn insert_one(&self, doc: &RawDocument, options: &OpOptions) -> Result<RawDocumentBuf> {
        let (doc, id) = with_id(doc)?;
        let op = self.write_op(WriteKind::Insert, vec![doc], 0);
        raise(&self.write(op, options)?)?;
        Ok(rawdoc! { "v": id })
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
        let mut prepared = Vec::with_capacity(docs.len());
        for (i, doc) in docs.iter().enumerate() {
            let (doc, id) = with_id(doc)?;
            ids.append(key(&i.to_string())?, id);
            prepared.push(doc);
        }
        let op = self.write_op(WriteKind::Insert, prepared, 0);
        raise(&self.write(op, options)?)?;
        Ok(ids)
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

    pub fn delete_one(&self, filter: RawDocumentBuf, options: &OpOptions) -> Result<i64> {
        self.delete(filter, false, options)
    }

    pub fn delete_many(&self, filter: RawDocumentBuf, options: &OpOptions) -> Result<i64> {
        self.delete(filter, true, options)
    }

    fn update(
        &self,
        filter: RawDocumentBuf,
        u: RawBson,
        multi: bool,
        options: &OpOptions,
    ) -> Result<UpdateResult> {
        let mut stmt = rawdoc! { "q": filter, "u": u };
        if multi {
            stmt.append(cstr!("multi"), true);
        }
        move_fields(&mut stmt, options, STATEMENT_OPTIONS)?;
        let mut op = self.write_op(WriteKind::Update, vec![stmt], 0);
        // Only single-document writes are retryable (Retryable Writes spec).
        op.retryable = !multi;
        let r = self.write(op, &strip(options, STATEMENT_OPTIONS)?)?;
        update_result(&r)
    }

    fn delete(&self, filter: RawDocumentBuf, many: bool, options: &OpOptions) -> Result<i64> {
        let mut stmt = rawdoc! { "q": filter, "limit": if many { 0 } else { 1 } };
        move_fields(&mut stmt, options, &["collation", "hint"])?;
        let mut op = self.write_op(WriteKind::Delete, vec![stmt], 0);
        op.retryable = !many;
        let r = self.write(op, &strip(options, &["collation", "hint"])?)?;
        raise(&r)?;
        Ok(r.n)
    }

    /// Runs each model (`{insertOne: {...}}`, `{updateMany: {...}}`...) in
    /// order, one write command per run of one kind; returns the CRUD spec's
    /// BulkWriteResult as a document. Write errors fail it with the partial
    /// result, `writeErrors` and `writeConcernErrors` in the error's reply.
    pub fn bulk_write(
        &self,
        models: &[RawDocumentBuf],
        options: &OpOptions,
    ) -> Result<RawDocumentBuf> {
        let bulk::Plan { runs, inserted } = bulk::plan(models)?;
        let ordered = ordered(options);
        let mut total = Totals::default();
        // One deadline bounds the whole bulk write, every run of it.
        let budget = self
            .db
            .client
            .start_timeout(self.resolve(options.timeout_ms, options.session)?);
        for run in runs {
            let mut op = self.write_op(run.kind, run.statements, run.first_index);
            op.ordered = ordered;
            op.retryable = run.retryable;
            let r = self.write_within(op, options, &budget)?;
            let stop = ordered && !r.write_errors.is_empty();
            total.add(run.kind, r);
            if stop {
                break;
            }
        }
        total.finish(&inserted, ordered)
    }

    /// `findAndModify`: removes, updates or replaces one document and
    /// returns it (before the change, or after with `returnDocument: "After"`
    /// in `extra`; `projection` is sent as `fields`).
    fn find_and_modify(
        &self,
        filter: RawDocumentBuf,
        change: Option<RawBson>,
        options: &OpOptions,
    ) -> Result<Option<RawDocumentBuf>> {
        let mut body = rawdoc! { "findAndModify": self.name.as_str(), "query": filter };
        match change {
            None => body.append(cstr!("remove"), true),
            Some(u) => body.append(cstr!("update"), u),
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
        find_and_modify_value(&reply)
    }

    pub fn find_one_and_delete(
        &self,
        filter: RawDocumentBuf,
        options: &OpOptions,
    ) -> Result<Option<RawDocumentBuf>> {
        self.find_and_modify(filter, None, options)
    }

    pub fn find_one_and_update(
        &self,
        filter: RawDocumentBuf,
        update: UpdateSpec,
        options: &OpOptions,
    ) -> Result<Option<RawDocumentBuf>> {
        self.find_and_modify(filter, Some(update_value(update)?), options)
    }

    pub fn find_one_and_replace(
        &self,
        filter: RawDocumentBuf,
        replacement: RawDocumentBuf,
        options: &OpOptions,
    ) -> Result<Option<RawDocumentBuf>> {
        check_replacement(&replacement)?;
        self.find_and_modify(filter, Some(RawBson::Document(replacement)), options)
    }

    fn write_op(
        &self,
        kind: WriteKind,
        statements: Vec<RawDocumentBuf>,
        first_index: usize,
    ) -> WriteCommand {
        WriteCommand::new(&self.db.name, &self.name, kind, statements, first_index)
    }

    /// Runs every batch of `op` under one deadline. Write errors come back in
    /// the result; a command that fails outright ends the write.
    fn write(&self, op: WriteCommand, options: &OpOptions) -> Result<WriteResult> {
        let budget = self
            .db
            .client
            .start_timeout(self.resolve(options.timeout_ms, options.session)?);
        self.write_within(op, options, &budget)
    }

    /// Runs every batch of `op` under `budget`.
    fn write_within(
        &self,
        mut op: WriteCommand,
        options: &OpOptions,
        budget: &OpTimeout,
    ) -> Result<WriteResult> {
        let options = &self.writing(options)?;
        op.ordered = ordered(options);
        op.extra = Some(strip(options, &["ordered"])?.extra.unwrap_or_default());
        while op.remaining() > 0 {
            let r = self
                .db
                .client
                .execute_within(&mut op, budget, options.session, None);
            op.finish_batch();
            r?;
        }
        // Folded write errors are transformed like any other (CSOT spec).
        let mut result = op.result;
        for (_, e) in &mut result.write_errors {
            *e = budget.transform(e.clone());
        }
        for e in &mut result.write_concern_errors {
            *e = budget.transform(e.clone());
        }
        Ok(result)
    }
}

/// `ordered` from `extra`, true by default (CRUD spec).
fn ordered(options: &OpOptions) -> bool {
    options
        .extra
        .as_ref()
        .and_then(|e| e.get_bool("ordered").ok())
        .unwrap_or(true)
}

/// An update's result from what the server reported.
pub(crate) fn update_result(r: &WriteResult) -> Result<UpdateResult> {
    raise(r)?;
    let upserted_id = r
        .upserted
        .first()
        .map(|(_, id)| rawdoc! { "v": id.clone() });
    Ok(UpdateResult {
        matched: r.n.saturating_sub(r.upserted.len() as i64),
        modified: r.n_modified,
        upserted_id,
    })
}

/// findAndModify's document from its reply (none when `value` is null).
pub(crate) fn find_and_modify_value(reply: &RawDocument) -> Result<Option<RawDocumentBuf>> {
    check_write_errors(reply)?;
    match reply.get("value")? {
        Some(bson::RawBsonRef::Document(d)) => Ok(Some(d.to_owned())),
        _ => Ok(None),
    }
}

/// The first write error, else the first write concern error, as the error.
pub(crate) fn raise(r: &WriteResult) -> Result<()> {
    if let Some((_, e)) = r.write_errors.first() {
        let mut e = e.clone();
        e.message = format!("write error: {}", e.message);
        return Err(e);
    }
    if let Some(e) = r.write_concern_errors.first() {
        let mut e = e.clone();
        e.message = format!("write concern error: {}", e.message);
        return Err(e);
    }
    Ok(())
}

/// A bulk write's running totals.
#[derive(Default)]
pub(crate) struct Totals {
    inserted: i64,
    matched: i64,
    modified: i64,
    deleted: i64,
    upserted: Vec<(usize, RawBson)>,
    write_errors: Vec<(usize, Error)>,
    write_concern_errors: Vec<Error>,
}

impl Totals {
    pub(crate) fn add(&mut self, kind: WriteKind, r: WriteResult) {
        // Saturating: counts come from the server and must not overflow.
        match kind {
            WriteKind::Insert => self.inserted = self.inserted.saturating_add(r.n),
            WriteKind::Update => {
                let matched = r.n.saturating_sub(r.upserted.len() as i64);
                self.matched = self.matched.saturating_add(matched);
                self.modified = self.modified.saturating_add(r.n_modified);
            }
            WriteKind::Delete => self.deleted = self.deleted.saturating_add(r.n),
        }
        self.upserted.extend(r.upserted);
        self.write_errors.extend(r.write_errors);
        self.write_concern_errors.extend(r.write_concern_errors);
    }

    pub(crate) fn finish(
        self,
        inserted: &[(usize, RawBson)],
        ordered: bool,
    ) -> Result<RawDocumentBuf> {
        let failed = |i: usize| self.write_errors.iter().any(|(at, _)| *at == i);
        let first_failure = self.write_errors.iter().map(|(at, _)| *at).min();
        let mut inserted_ids = RawDocumentBuf::new();
        for (i, id) in inserted {
            let sent = !ordered || first_failure.is_none_or(|f| *i < f);
            if sent && !failed(*i) {
                inserted_ids.append(key(&i.to_string())?, id.clone());
            }
        }
        let mut upserted_ids = RawDocumentBuf::new();
        for (i, id) in &self.upserted {
            upserted_ids.append(key(&i.to_string())?, id.clone());
        }
        let result = rawdoc! {
            "insertedCount": self.inserted,
            "matchedCount": self.matched,
            "modifiedCount": self.modified,
            "deletedCount": self.deleted,
            "upsertedCount": self.upserted.len() as i64,
            "insertedIds": inserted_ids,
            "upsertedIds": upserted_ids,
        };
        if self.write_errors.is_empty() && self.write_concern_errors.is_empty() {
            return Ok(result);
        }
        let first = self
            .write_errors
            .first()
            .map(|(_, e)| e)
            .or(self.write_concern_errors.first());
        let mut err = Error::new(ErrorKind::Server, "bulk write failed");
        if let Some(first) = first {
            err.code = first.code;
            err.code_name = first.code_name.clone();
            err.message = format!("bulk write failed: {}", first.message);
        }
        for e in &self.write_concern_errors {
            for l in &e.labels {
                err.add_label(l);
            }
        }
        let mut write_errors = RawArrayBuf::new();
        for (i, e) in &self.write_errors {
            let mut d = rawdoc! { "index": *i as i32, "errmsg": e.message.as_str() };
            if let Some(code) = e.code {
                d.append(cstr!("code"), code);
            }
            write_errors.push(d);
        }
        let mut wces = RawArrayBuf::new();
        for e in &self.write_concern_errors {
            wces.push(rawdoc! { "code": e.code.unwrap_or(0), "errmsg": e.message.as_str() });
        }
        err.reply = Some(Box::new(rawdoc! {
            "writeErrors": write_errors,
            "writeConcernErrors": wces,
            "partialResult": result,
        }));
        Err(err)
    }
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

fn update_value(update: UpdateSpec) -> Result<RawBson> {
    match update {
        UpdateSpec::Document(d) => match d.iter().next() {
            Some(Ok((key, _))) if key.as_str().starts_with('$') => Ok(RawBson::Document(d)),
            _ => Err(Error::invalid_argument(
                "update document must contain only update operators",
            )),
        },
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
pub(super) fn strip<'a>(options: &OpOptions<'a>, names: &[&str]) -> Result<OpOptions<'a>> {
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
fn key(name: &str) -> Result<CString> {
    CString::try_from(name)
        .map_err(|_| Error::invalid_argument(format!("invalid field name {name:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_documents_must_use_operators() {
        assert!(update_value(UpdateSpec::Document(rawdoc! { "x": 1 })).is_err());
        assert!(update_value(UpdateSpec::Document(rawdoc! { "$set": { "x": 1 } })).is_ok());
        assert!(matches!(
            update_value(UpdateSpec::Pipeline(vec![])).unwrap(),
            RawBson::Array(_)
        ));
        assert!(check_replacement(&rawdoc! { "$set": {} }).is_err());
        assert!(check_replacement(&rawdoc! { "x": 1 }).is_ok());
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

    #[test]
    fn bulk_totals_and_partial_results() {
        let mut t = Totals::default();
        t.add(
            WriteKind::Insert,
            WriteResult {
                n: 1,
                ..Default::default()
            },
        );
        let dup = Error {
            code: Some(11000),
            ..Error::new(ErrorKind::Server, "dup")
        };
        t.add(
            WriteKind::Insert,
            WriteResult {
                n: 0,
                write_errors: vec![(1, dup)],
                ..Default::default()
            },
        );
        let ids = [
            (0, RawBson::Int32(1)),
            (1, RawBson::Int32(1)),
            (2, RawBson::Int32(3)),
        ];
        let err = t.finish(&ids, true).unwrap_err();
        assert_eq!(err.code, Some(11000));
        let reply = err.reply.unwrap();
        let partial = reply.get_document("partialResult").unwrap();
        assert_eq!(partial.get_i64("insertedCount").unwrap(), 1);
        assert_eq!(
            partial.get_document("insertedIds").unwrap(),
            &*rawdoc! { "0": 1 },
            "ordered: nothing after the failure"
        );
        let first = reply
            .get_array("writeErrors")
            .unwrap()
            .into_iter()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(first.as_document().unwrap().get_i32("index").unwrap(), 1);
    }

    #[test]
    fn bulk_totals_count_upserts_apart_from_matches() {
        let mut t = Totals::default();
        t.add(
            WriteKind::Update,
            WriteResult {
                n: 3,
                n_modified: 2,
                upserted: vec![(4, RawBson::Int32(9))],
                ..Default::default()
            },
        );
        t.add(
            WriteKind::Delete,
            WriteResult {
                n: 5,
                ..Default::default()
            },
        );
        let r = t.finish(&[], true).unwrap();
        assert_eq!(r.get_i64("matchedCount").unwrap(), 2);
        assert_eq!(r.get_i64("modifiedCount").unwrap(), 2);
        assert_eq!(r.get_i64("deletedCount").unwrap(), 5);
        assert_eq!(r.get_i64("upsertedCount").unwrap(), 1);
        assert_eq!(r.get_document("upsertedIds").unwrap(), &*rawdoc! { "4": 9 });
    }

    #[test]
    fn lying_counts_saturate_in_totals_and_update_results() {
        // Found by `cargo xtask fuzz --target write`: `n - upserted` and the
        // running totals overflowed on counts near i64::MIN/MAX.
        let lying = WriteResult {
            n: i64::MIN,
            n_modified: i64::MAX,
            upserted: vec![(0, RawBson::Int32(1))],
            ..Default::default()
        };
        assert_eq!(update_result(&lying).unwrap().matched, i64::MIN);
        let mut t = Totals::default();
        for kind in [WriteKind::Insert, WriteKind::Update, WriteKind::Delete] {
            t.add(kind, lying.clone());
            t.add(
                kind,
                WriteResult {
                    n: i64::MAX,
                    n_modified: i64::MAX,
                    ..Default::default()
                },
            );
        }
        let r = t.finish(&[], true).unwrap();
        assert_eq!(r.get_i64("modifiedCount").unwrap(), i64::MAX);
    }
}
