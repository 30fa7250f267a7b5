//! Writes on a collection (CRUD spec): insert, update, replace, delete and
//! bulk writes share one path (`WriteCommand`, batched to the server's
//! limits, retryable when single-document); findAndModify is its own command.

use super::{array, Collection, Hint, OpOptions, UpdateSpec};
use crate::csot::OpTimeout;
use crate::error::{Error, ErrorKind, Result, WriteConcernError, WriteError, WriteFailure};
use crate::operation::bulk;
use crate::operation::check_write_errors;
use crate::operation::write::{with_id, WriteCommand, WriteKind, WriteResult};
use crate::operation::{FindAndModify, RunCommand};
use crate::retryable::Retryability;
use crate::sdam::selection::Criteria;
use crate::write_result::{BulkWriteResult, UpdateResult};
use bson::raw::CString;
use bson::{cstr, rawdoc, RawArrayBuf, RawBson, RawDocument, RawDocumentBuf};

/// Per-statement options a caller passes in `extra` (CRUD spec names).
const STATEMENT_OPTIONS: &[&str] = &["upsert", "collation", "hint", "arrayFilters"];
/// updateOne and replaceOne also take the `sort` that picks their document (8.0+).
const SINGLE_STATEMENT_OPTIONS: &[&str] = &["upsert", "collation", "hint", "arrayFilters", "sort"];

/// The filter, change and statement options of an update or replace model.
pub struct UpdateModel {
    pub filter: RawDocumentBuf,
    /// The update, or (replace-one) the replacement as `UpdateSpec::Document`.
    pub update: UpdateSpec,
    pub upsert: Option<bool>,
    pub collation: Option<RawDocumentBuf>,
    pub hint: Option<Hint>,
    pub array_filters: Option<Vec<RawDocumentBuf>>,
    /// Update-one and replace-one: which document when several match (8.0+).
    pub sort: Option<RawDocumentBuf>,
}

/// The filter and statement options of a delete model.
pub struct DeleteModel {
    pub filter: RawDocumentBuf,
    pub collation: Option<RawDocumentBuf>,
    pub hint: Option<Hint>,
}

/// One write of a bulk write (CRUD spec, WriteModel).
pub enum WriteModel {
    InsertOne(RawDocumentBuf),
    UpdateOne(UpdateModel),
    UpdateMany(UpdateModel),
    ReplaceOne(UpdateModel),
    DeleteOne(DeleteModel),
    DeleteMany(DeleteModel),
}

impl WriteModel {
    /// The model in the planner's shape (`{updateOne: {filter, update, ...}}`).
    pub(crate) fn to_document(&self) -> Result<RawDocumentBuf> {
        let statement_options =
            |d: &mut RawDocumentBuf, collation: &Option<RawDocumentBuf>, hint: &Option<Hint>| {
                if let Some(c) = collation {
                    d.append(cstr!("collation"), c.clone());
                }
                match hint {
                    Some(Hint::Name(n)) => d.append(cstr!("hint"), n.as_str()),
                    Some(Hint::Keys(k)) => d.append(cstr!("hint"), k.clone()),
                    None => {}
                }
            };
        let update = |name: &str, m: &UpdateModel| -> Result<RawDocumentBuf> {
            let mut d = rawdoc! { "filter": m.filter.clone() };
            match (&m.update, name) {
                (UpdateSpec::Document(r), "replaceOne") => {
                    d.append(cstr!("replacement"), r.clone())
                }
                (UpdateSpec::Pipeline(_), "replaceOne") => {
                    return Err(Error::invalid_argument(
                        "replace-one needs a replacement document, not a pipeline",
                    ))
                }
                (UpdateSpec::Document(u), _) => d.append(cstr!("update"), u.clone()),
                (UpdateSpec::Pipeline(p), _) => d.append(cstr!("update"), array(p)),
            }
            if let Some(u) = m.upsert {
                d.append(cstr!("upsert"), u);
            }
            if let Some(f) = &m.array_filters {
                d.append(cstr!("arrayFilters"), array(f));
            }
            match (&m.sort, name) {
                (Some(_), "updateMany") => {
                    return Err(Error::invalid_argument(
                        "update-many takes no sort: it changes every match",
                    ))
                }
                (Some(s), _) => d.append(cstr!("sort"), s.clone()),
                (None, _) => {}
            }
            statement_options(&mut d, &m.collation, &m.hint);
            let mut model = RawDocumentBuf::new();
            model.append(key(name)?, d);
            Ok(model)
        };
        let delete = |name: &str, m: &DeleteModel| -> Result<RawDocumentBuf> {
            let mut d = rawdoc! { "filter": m.filter.clone() };
            statement_options(&mut d, &m.collation, &m.hint);
            let mut model = RawDocumentBuf::new();
            model.append(key(name)?, d);
            Ok(model)
        };
        match self {
            WriteModel::InsertOne(doc) => Ok(rawdoc! { "insertOne": { "document": doc.clone() } }),
            WriteModel::UpdateOne(m) => update("updateOne", m),
            WriteModel::UpdateMany(m) => update("updateMany", m),
            WriteModel::ReplaceOne(m) => update("replaceOne", m),
            WriteModel::DeleteOne(m) => delete("deleteOne", m),
            WriteModel::DeleteMany(m) => delete("deleteMany", m),
        }
    }
}

impl Collection {
    /// Inserts one document; returns its `_id`.
    pub async fn insert_one(&self, doc: &RawDocument, options: &OpOptions<'_>) -> Result<RawBson> {
        self.insert_one_with_id(with_id(doc, &crate::runtime::object_ids())?, options)
            .await
    }

    /// `insert_one` of a document `with_id` (or `checked_with_id`) prepared.
    pub(crate) async fn insert_one_with_id(
        &self,
        (doc, id): (RawDocumentBuf, RawBson),
        options: &OpOptions<'_>,
    ) -> Result<RawBson> {
        let options = &options.flattened()?;
        let op = self.write_op(WriteKind::Insert, vec![doc], 0);
        raise(&self.write(op, options).await?)?;
        Ok(id)
    }

    /// Inserts many documents in as few `insert` commands as the server's
    /// limits allow, all under one deadline; returns the `_id`s in order.
    /// A write error fails it with the errors and the ids inserted
    /// (`Error::write_failure`, CRUD spec BulkWriteException).
    pub async fn insert_many(
        &self,
        docs: &[RawDocumentBuf],
        options: &OpOptions<'_>,
    ) -> Result<Vec<RawBson>> {
        // One clock read for the batch's generated ids.
        let oids = crate::runtime::object_ids();
        let docs = docs.iter().map(|d| with_id(d, &oids));
        self.insert_many_with_ids(docs.collect::<Result<_>>()?, options)
            .await
    }

    /// `insert_many` of documents `with_id` (or `checked_with_id`) prepared.
    pub(crate) async fn insert_many_with_ids(
        &self,
        docs: Vec<(RawDocumentBuf, RawBson)>,
        options: &OpOptions<'_>,
    ) -> Result<Vec<RawBson>> {
        let (docs, ids): (Vec<_>, Vec<_>) = docs.into_iter().unzip();
        self.insert_documents(docs.into(), ids, options).await
    }

    /// [`Collection::insert_many_with_ids`] with the documents already laid
    /// out back to back (`ids[i]` is the `_id` of document `i`).
    pub(crate) async fn insert_documents(
        &self,
        docs: crate::wire::Documents,
        ids: Vec<RawBson>,
        options: &OpOptions<'_>,
    ) -> Result<Vec<RawBson>> {
        let options = &options.flattened()?;
        if docs.is_empty() {
            return Err(Error::invalid_argument(
                "insert-many needs at least one document",
            ));
        }
        let op = self.write_op(WriteKind::Insert, docs, 0);
        let r = self.write(op, options).await?;
        if r.write_errors.is_empty() && r.write_concern_errors.is_empty() {
            return Ok(ids);
        }
        let ids: Vec<(usize, RawBson)> = ids.into_iter().enumerate().collect();
        let mut total = Totals::default();
        total.add(WriteKind::Insert, r);
        total.finish(&ids, ordered(options)).map(|_| Vec::new())
    }

    pub async fn update_one(
        &self,
        filter: RawDocumentBuf,
        update: UpdateSpec,
        options: &OpOptions<'_>,
    ) -> Result<UpdateResult> {
        self.update(filter, update_value(update)?, false, options)
            .await
    }

    pub async fn update_many(
        &self,
        filter: RawDocumentBuf,
        update: UpdateSpec,
        options: &OpOptions<'_>,
    ) -> Result<UpdateResult> {
        self.update(filter, update_value(update)?, true, options)
            .await
    }

    pub async fn replace_one(
        &self,
        filter: RawDocumentBuf,
        replacement: RawDocumentBuf,
        options: &OpOptions<'_>,
    ) -> Result<UpdateResult> {
        check_replacement(&replacement)?;
        self.update(filter, RawBson::Document(replacement), false, options)
            .await
    }

    pub async fn delete_one(&self, filter: RawDocumentBuf, options: &OpOptions<'_>) -> Result<i64> {
        self.delete(filter, false, options).await
    }

    pub async fn delete_many(
        &self,
        filter: RawDocumentBuf,
        options: &OpOptions<'_>,
    ) -> Result<i64> {
        self.delete(filter, true, options).await
    }

    async fn update(
        &self,
        filter: RawDocumentBuf,
        u: RawBson,
        multi: bool,
        options: &OpOptions<'_>,
    ) -> Result<UpdateResult> {
        let options = &options.flattened()?;
        let mut stmt = rawdoc! { "q": filter, "u": u };
        if multi {
            stmt.append(cstr!("multi"), true);
        }
        let fields = match multi {
            true => STATEMENT_OPTIONS,
            false => SINGLE_STATEMENT_OPTIONS,
        };
        move_fields(&mut stmt, options, fields)?;
        let mut op = self.write_op(WriteKind::Update, vec![stmt], 0);
        // Only single-document writes are retryable (Retryable Writes spec).
        op.retryable = !multi;
        let r = self.write(op, &strip(options, fields)?).await?;
        update_result(&r)
    }

    async fn delete(
        &self,
        filter: RawDocumentBuf,
        many: bool,
        options: &OpOptions<'_>,
    ) -> Result<i64> {
        let options = &options.flattened()?;
        let mut stmt = rawdoc! { "q": filter, "limit": if many { 0 } else { 1 } };
        move_fields(&mut stmt, options, &["collation", "hint"])?;
        let mut op = self.write_op(WriteKind::Delete, vec![stmt], 0);
        op.retryable = !many;
        let r = self
            .write(op, &strip(options, &["collation", "hint"])?)
            .await?;
        raise(&r)?;
        Ok(r.n)
    }

    /// Runs each model in order, one write command per run of one kind;
    /// returns the CRUD spec's BulkWriteResult. Write errors fail it with
    /// `Error::write_failure` (the errors and the partial result), the same
    /// in the error's reply as `writeErrors`, `writeConcernErrors` and
    /// `partialResult`.
    pub async fn bulk_write(
        &self,
        models: &[WriteModel],
        options: &OpOptions<'_>,
    ) -> Result<BulkWriteResult> {
        let options = &options.flattened()?;
        let models: Vec<RawDocumentBuf> = models
            .iter()
            .map(WriteModel::to_document)
            .collect::<Result<_>>()?;
        let bulk::Plan { runs, inserted } = bulk::plan(&models)?;
        let ordered = ordered(options);
        let mut total = Totals::default();
        // One deadline bounds the whole bulk write, every run of it.
        let budget = self
            .db
            .client
            .start_timeout(self.resolve(options.timeout_ms, options.session)?);
        for run in runs {
            let first = run.first_index;
            let mut op = self.write_op(run.kind, run.statements, first);
            op.ordered = ordered;
            op.retryable = run.retryable;
            let r = match self.write_within(op, options, &budget).await {
                Ok(r) => r,
                Err(e) => return Err(total.stopped(e, &inserted, ordered, first)),
            };
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
    async fn find_and_modify(
        &self,
        filter: RawDocumentBuf,
        change: Option<RawBson>,
        options: &OpOptions<'_>,
    ) -> Result<Option<RawDocumentBuf>> {
        let options = &options.flattened()?;
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
        let opts = self.writing(&opts)?;
        crate::operation::merge_extra(&mut body, opts.extra.as_deref())?;
        let mut op = FindAndModify(RunCommand {
            retryability: Retryability::Write,
            ..RunCommand::new(&self.db.name, body, Criteria::Write)
        });
        let timeout = self.resolve(opts.timeout_ms, opts.session)?;
        match self
            .db
            .client
            .execute(&mut op, timeout, opts.session)
            .await?
        {
            Some(reply) => find_and_modify_value(&reply),
            None => Ok(None),
        }
    }

    pub async fn find_one_and_delete(
        &self,
        filter: RawDocumentBuf,
        options: &OpOptions<'_>,
    ) -> Result<Option<RawDocumentBuf>> {
        self.find_and_modify(filter, None, options).await
    }

    pub async fn find_one_and_update(
        &self,
        filter: RawDocumentBuf,
        update: UpdateSpec,
        options: &OpOptions<'_>,
    ) -> Result<Option<RawDocumentBuf>> {
        self.find_and_modify(filter, Some(update_value(update)?), options)
            .await
    }

    pub async fn find_one_and_replace(
        &self,
        filter: RawDocumentBuf,
        replacement: RawDocumentBuf,
        options: &OpOptions<'_>,
    ) -> Result<Option<RawDocumentBuf>> {
        check_replacement(&replacement)?;
        self.find_and_modify(filter, Some(RawBson::Document(replacement)), options)
            .await
    }

    fn write_op(
        &self,
        kind: WriteKind,
        statements: impl Into<crate::wire::Documents>,
        first_index: usize,
    ) -> WriteCommand {
        WriteCommand::new(&self.db.name, &self.name, kind, statements, first_index)
    }

    /// Runs every batch of `op` under one deadline. Write errors come back in
    /// the result; a command that fails outright ends the write.
    async fn write(&self, op: WriteCommand, options: &OpOptions<'_>) -> Result<WriteResult> {
        let budget = self
            .db
            .client
            .start_timeout(self.resolve(options.timeout_ms, options.session)?);
        self.write_within(op, options, &budget).await
    }

    /// Runs every batch of `op` under `budget`.
    async fn write_within(
        &self,
        mut op: WriteCommand,
        options: &OpOptions<'_>,
        budget: &OpTimeout,
    ) -> Result<WriteResult> {
        let options = &self.writing(options)?;
        op.ordered = ordered(options);
        op.extra = Some(strip(options, &["ordered"])?.extra.unwrap_or_default());
        while op.remaining() > 0 {
            let r = self
                .db
                .client
                .execute_within(&mut op, budget, options.session, None)
                .await;
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
    let upserted_id = r.upserted.first().map(|(_, id)| id.clone());
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

/// The first write error, else the first write concern error, as the error
/// (of its settled kind: `DuplicateKey`, `WriteConcern`...).
pub(crate) fn raise(r: &WriteResult) -> Result<()> {
    if let Some((_, e)) = r.write_errors.first() {
        let mut e = e.clone();
        e.message = format!("write error: {}", e.message);
        return Err(e.settled());
    }
    if let Some(e) = r.write_concern_errors.first() {
        let mut e = e.clone();
        e.message = format!("write concern error: {}", e.message);
        // Under CSOT a MaxTimeMSExpired one was made a timeout (csot.rs): it stays one.
        if e.kind == ErrorKind::Server {
            e.kind = ErrorKind::WriteConcern;
        }
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

    /// A bulk write stopped by a command error at its model `stopped_at`:
    /// the error carries what was written before it (CRUD spec, the
    /// BulkWriteException's partial result), and any earlier write errors.
    pub(crate) fn stopped(
        self,
        mut err: Error,
        inserted: &[(usize, RawBson)],
        ordered: bool,
        stopped_at: usize,
    ) -> Error {
        let partial_result = self.result(inserted, ordered, Some(stopped_at));
        let (write_errors, write_concern_errors) = self.failures();
        err.write_failure = Some(Box::new(WriteFailure {
            write_errors,
            write_concern_errors,
            partial_result: Some(partial_result),
            client_partial_result: None,
        }));
        err
    }

    /// The result so far; inserts at or after `stopped_at` were not sent.
    fn result(
        &self,
        inserted: &[(usize, RawBson)],
        ordered: bool,
        stopped_at: Option<usize>,
    ) -> BulkWriteResult {
        let failed = |i: usize| self.write_errors.iter().any(|(at, _)| *at == i);
        let first_failure = self.write_errors.iter().map(|(at, _)| *at).min();
        let inserted_ids = inserted
            .iter()
            .filter(|(i, _)| {
                let sent = (!ordered || first_failure.is_none_or(|f| *i < f))
                    && stopped_at.is_none_or(|s| *i < s);
                sent && !failed(*i)
            })
            .map(|(i, id)| (index(*i), id.clone()))
            .collect();
        BulkWriteResult {
            inserted_count: self.inserted,
            matched_count: self.matched,
            modified_count: self.modified,
            deleted_count: self.deleted,
            upserted_count: self.upserted.len() as i64,
            inserted_ids,
            upserted_ids: self
                .upserted
                .iter()
                .map(|(i, id)| (index(*i), id.clone()))
                .collect(),
        }
    }

    /// The write errors and write concern errors as the CRUD spec reports them.
    fn failures(&self) -> (Vec<WriteError>, Vec<WriteConcernError>) {
        let write_errors = self
            .write_errors
            .iter()
            .map(|(i, e)| WriteError {
                index: index(*i),
                code: e.code.unwrap_or(0),
                code_name: e.code_name.clone(),
                message: e.message.clone(),
                details: err_info(e),
            })
            .collect();
        let write_concern_errors = self
            .write_concern_errors
            .iter()
            .map(|e| WriteConcernError {
                code: e.code.unwrap_or(0),
                code_name: e.code_name.clone(),
                message: e.message.clone(),
                details: err_info(e),
            })
            .collect();
        (write_errors, write_concern_errors)
    }

    pub(crate) fn finish(
        self,
        inserted: &[(usize, RawBson)],
        ordered: bool,
    ) -> Result<BulkWriteResult> {
        let result = self.result(inserted, ordered, None);
        if self.write_errors.is_empty() && self.write_concern_errors.is_empty() {
            return Ok(result);
        }
        // The first write error decides the kind (a duplicate key...); with
        // only write concern errors it is `WriteConcern`.
        let mut err = Error::new(ErrorKind::Server, "bulk write failed");
        match self.write_errors.first() {
            Some((_, first)) => {
                err.code = first.code;
                err.code_name = first.code_name.clone();
                err.message = format!("bulk write failed: {}", first.message);
                err = err.settled();
            }
            None => {
                err.kind = ErrorKind::WriteConcern;
                if let Some(first) = self.write_concern_errors.first() {
                    err.code = first.code;
                    err.code_name = first.code_name.clone();
                    err.message = format!("bulk write failed: {}", first.message);
                    // A transformed MaxTimeMSExpired (CSOT spec) stays a timeout.
                    if first.is_timeout() {
                        err.kind = ErrorKind::Timeout;
                    }
                }
            }
        }
        for e in &self.write_concern_errors {
            for l in &e.labels {
                err.add_label(l);
            }
        }
        let (write_errors, write_concern_errors) = self.failures();
        let mut errors_doc = RawArrayBuf::new();
        for e in &write_errors {
            let mut d =
                rawdoc! { "index": e.index as i32, "code": e.code, "errmsg": e.message.as_str() };
            if let Some(name) = &e.code_name {
                d.append(cstr!("codeName"), name.as_str());
            }
            errors_doc.push(d);
        }
        let mut wces = RawArrayBuf::new();
        for e in &write_concern_errors {
            wces.push(rawdoc! { "code": e.code, "errmsg": e.message.as_str() });
        }
        err.reply = Some(Box::new(rawdoc! {
            "writeErrors": errors_doc,
            "writeConcernErrors": wces,
            "partialResult": result_document(&result)?,
        }));
        err.write_failure = Some(Box::new(WriteFailure {
            write_errors,
            write_concern_errors,
            partial_result: Some(result),
            client_partial_result: None,
        }));
        Err(err)
    }
}

/// A model's index as the CRUD spec's results carry it.
fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// A write error's `errInfo`, when its reply kept one.
fn err_info(e: &Error) -> Option<RawDocumentBuf> {
    let reply = e.reply.as_deref()?;
    let info = reply.get_document("errInfo").or_else(|_| {
        reply
            .get_document("writeConcernError")
            .and_then(|w| w.get_document("errInfo"))
    });
    info.ok().map(|d| d.to_owned())
}

/// The CRUD spec's BulkWriteResult as a document (the error reply's
/// `partialResult`): counts, and ids keyed by their model's index.
pub fn result_document(r: &BulkWriteResult) -> Result<RawDocumentBuf> {
    let ids = |list: &[(u32, RawBson)]| -> Result<RawDocumentBuf> {
        let mut d = RawDocumentBuf::new();
        for (i, id) in list {
            d.append(key(&i.to_string())?, id.clone());
        }
        Ok(d)
    };
    Ok(rawdoc! {
        "insertedCount": r.inserted_count,
        "matchedCount": r.matched_count,
        "modifiedCount": r.modified_count,
        "deletedCount": r.deleted_count,
        "upsertedCount": r.upserted_count,
        "insertedIds": ids(&r.inserted_ids)?,
        "upsertedIds": ids(&r.upserted_ids)?,
    })
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
    fn typed_models_take_the_planner_shape() {
        let m = WriteModel::UpdateMany(UpdateModel {
            filter: rawdoc! { "a": 1 },
            update: UpdateSpec::Document(rawdoc! { "$set": { "b": 1 } }),
            upsert: Some(true),
            collation: None,
            hint: Some(Hint::Name("a_1".into())),
            array_filters: Some(vec![rawdoc! { "x": 1 }]),
            sort: None,
        });
        assert_eq!(
            m.to_document().unwrap(),
            rawdoc! { "updateMany": { "filter": { "a": 1 }, "update": { "$set": { "b": 1 } }, "upsert": true, "arrayFilters": [{ "x": 1 }], "hint": "a_1" } }
        );
        let r = WriteModel::ReplaceOne(UpdateModel {
            filter: rawdoc! {},
            update: UpdateSpec::Pipeline(vec![]),
            upsert: None,
            collation: None,
            hint: None,
            array_filters: None,
            sort: None,
        });
        assert!(r.to_document().is_err(), "a replacement is a document");
        let d = WriteModel::DeleteOne(DeleteModel {
            filter: rawdoc! { "a": 1 },
            collation: Some(rawdoc! { "locale": "fr" }),
            hint: None,
        });
        assert_eq!(
            d.to_document().unwrap(),
            rawdoc! { "deleteOne": { "filter": { "a": 1 }, "collation": { "locale": "fr" } } }
        );
        let plan = bulk::plan(&[m.to_document().unwrap(), d.to_document().unwrap()]).unwrap();
        assert_eq!(plan.runs.len(), 2);
    }

    #[test]
    fn a_single_update_model_carries_its_sort_to_the_statement() {
        let model = |sort| UpdateModel {
            filter: rawdoc! {},
            update: UpdateSpec::Document(rawdoc! { "$inc": { "x": 1 } }),
            upsert: None,
            collation: None,
            hint: None,
            array_filters: None,
            sort,
        };
        let one = WriteModel::UpdateOne(model(Some(rawdoc! { "_id": -1 })));
        let plan = bulk::plan(&[one.to_document().unwrap()]).unwrap();
        let stmt = &plan.runs[0].statements[0];
        assert_eq!(stmt.get_document("sort").unwrap(), &*rawdoc! { "_id": -1 });
        let many = WriteModel::UpdateMany(model(Some(rawdoc! { "_id": -1 })));
        let e = many.to_document().unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::InvalidArgument, "{e}");
    }

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
        assert_eq!(err.kind, ErrorKind::DuplicateKey);
        let failure = err.write_failure.as_ref().unwrap();
        assert_eq!(failure.write_errors[0].index, 1);
        assert_eq!(
            failure.partial_result.as_ref().unwrap().inserted_ids,
            vec![(0, RawBson::Int32(1))]
        );
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
    fn a_command_error_carries_what_was_written_before_it() {
        let mut t = Totals::default();
        t.add(
            WriteKind::Insert,
            WriteResult {
                n: 1,
                ..Default::default()
            },
        );
        let ids = [(0, RawBson::Int32(1)), (2, RawBson::Int32(3))];
        // Model 1's command failed: model 2's insert was never sent.
        let e = t.stopped(Error::new(ErrorKind::Server, "failed"), &ids, true, 1);
        assert_eq!(e.kind, ErrorKind::Server);
        let failure = e.write_failure.unwrap();
        assert!(failure.write_errors.is_empty());
        let partial = failure.partial_result.unwrap();
        assert_eq!(partial.inserted_count, 1);
        assert_eq!(partial.inserted_ids, vec![(0, RawBson::Int32(1))]);
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
        assert_eq!(r.matched_count, 2);
        assert_eq!(r.modified_count, 2);
        assert_eq!(r.deleted_count, 5);
        assert_eq!(r.upserted_count, 1);
        assert_eq!(r.upserted_ids, vec![(4, RawBson::Int32(9))]);
        let d = result_document(&r).unwrap();
        assert_eq!(d.get_document("upsertedIds").unwrap(), &*rawdoc! { "4": 9 });
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
        assert_eq!(r.modified_count, i64::MAX);
    }
}
