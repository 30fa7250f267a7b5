//! Client bulk write (CRUD "Bulk Write" spec, `crud/bulk-write.md`;
//! MongoDB 8.0+): mixed writes on any namespaces as `bulkWrite` commands on
//! admin. Sans I/O here: the models become `ops` entries, batches split to
//! the server's limits with their own `nsInfo`, each batch's reply and
//! results cursor fold into one result with indexes of the caller's list,
//! and the outcome becomes the result or the error. `Client::bulk_write`
//! drives it (bulkWrite, then getMore until the cursor is exhausted) under
//! one deadline.

use crate::collection::WriteModel;
use crate::concern::WriteConcern;
use crate::error::server_error;
use crate::error::{Error, ErrorKind, Result, WriteConcernError, WriteError, WriteFailure};
use crate::handshake::HelloReply;
use crate::object_id::ObjectIds;
use crate::operation::{Command, CursorReply, Operation};
use crate::retryable::Retryability;
use crate::session::Session;
use crate::wire::raw::int_field;
use crate::wire::Slice;
use crate::write_result::{ClientBulkWriteResult, UpdateResult, VerboseResults};
use bson::raw::CStr;
use bson::{cstr, RawBson, RawBsonRef, RawDocument, RawDocumentBuf};

/// Room the spec leaves in a message for its header and the fields the
/// executor adds (`lsid`, `txnNumber`, `$clusterTime`...).
const MESSAGE_OVERHEAD: usize = 1000;
/// What a command document (not a stored document) may exceed
/// `maxBsonObjectSize` by.
const COMMAND_SLACK: usize = 16 * 1024;

/// One write of a client bulk write and the namespace it applies to.
pub struct ClientWriteModel {
    /// "database.collection".
    pub namespace: String,
    pub model: WriteModel,
    /// update-one and replace-one only: which document, when several match
    /// (MongoDB 8.0+).
    pub sort: Option<RawDocumentBuf>,
}

/// Options of a client bulk write (the spec's BulkWriteOptions).
#[derive(Default, Clone)]
pub struct ClientBulkWriteOptions<'a> {
    pub timeout_ms: Option<u64>,
    pub session: Option<&'a Session>,
    /// Stop at the first write error (default true).
    pub ordered: Option<bool>,
    pub bypass_document_validation: Option<bool>,
    pub comment: Option<RawBson>,
    /// The spec's `let`.
    pub let_vars: Option<RawDocumentBuf>,
    /// Else the client's; never sent inside a transaction.
    pub write_concern: Option<WriteConcern>,
    /// Per-model results (sent as `errorsOnly: false`); default false.
    pub verbose_results: Option<bool>,
    /// Further `bulkWrite` fields by their server names.
    pub extra: Option<RawDocumentBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Insert,
    Update,
    Delete,
}

/// A model ready to send: its `ops` entry without the leading
/// `{<kind>: <nsInfo index>}`, which depends on the batch.
#[derive(Debug)]
pub struct Prepared {
    namespace: String,
    kind: Kind,
    /// The entry's other fields, as a document.
    fields: RawDocumentBuf,
    multi: bool,
    /// An insert's `_id` (generated when the document had none).
    inserted_id: Option<RawBson>,
    /// The size that matters to an unacknowledged write's checks: the
    /// inserted document or the replacement.
    stored_len: usize,
}

impl Prepared {
    fn key(&self) -> &'static CStr {
        match self.kind {
            Kind::Insert => cstr!("insert"),
            Kind::Update => cstr!("update"),
            Kind::Delete => cstr!("delete"),
        }
    }

    /// The `ops` entry's size once `{<kind>: <int32>}` leads it.
    fn entry_len(&self) -> usize {
        self.fields.as_bytes().len() + 1 + self.key().as_str().len() + 1 + 4
    }

    fn entry(&self, ns_index: i32) -> RawDocumentBuf {
        let mut d = RawDocumentBuf::new();
        d.append(self.key(), ns_index);
        for (k, v) in self.fields.iter().flatten() {
            d.append(k, v);
        }
        d
    }
}

/// The models as `ops` entries; validation per the spec (an empty list, an
/// update without operators, a replacement with them are errors).
pub fn prepare(models: &[ClientWriteModel]) -> Result<Vec<Prepared>> {
    if models.is_empty() {
        return Err(Error::invalid_argument(
            "client bulk-write needs at least one model",
        ));
    }
    let oids = crate::runtime::object_ids();
    models
        .iter()
        .enumerate()
        .map(|(i, m)| prepare_one(m, &oids).map_err(|e| at(i, e)))
        .collect()
}

fn at(index: usize, mut e: Error) -> Error {
    e.message = format!("write model {index}: {}", e.message);
    e
}

fn prepare_one(m: &ClientWriteModel, oids: &ObjectIds) -> Result<Prepared> {
    if !m.namespace.contains('.') || m.namespace.starts_with('.') {
        return Err(Error::invalid_argument(format!(
            "namespace {:?} is not \"database.collection\"",
            m.namespace
        )));
    }
    let planner = m.model.to_document()?;
    let (name, args) = match planner.iter().next() {
        Some(Ok((name, RawBsonRef::Document(args)))) => (name.as_str().to_string(), args),
        _ => return Err(Error::invalid_argument("malformed write model")),
    };
    let sorted = matches!(name.as_str(), "updateOne" | "replaceOne");
    if m.sort.is_some() && !sorted {
        return Err(Error::invalid_argument(
            "sort applies to update-one and replace-one only",
        ));
    }
    let mut fields = RawDocumentBuf::new();
    let mut stored_len = 0;
    let mut inserted_id = None;
    let (kind, multi) = match name.as_str() {
        "insertOne" => {
            let doc = args
                .get_document("document")
                .map_err(|_| Error::invalid_argument("insert-one needs a document"))?;
            let (doc, id) = crate::operation::write::with_id(doc, oids)?;
            stored_len = doc.as_bytes().len();
            fields.append(cstr!("document"), doc);
            inserted_id = Some(id);
            (Kind::Insert, false)
        }
        "updateOne" | "updateMany" | "replaceOne" => {
            let filter = args
                .get_document("filter")
                .map_err(|_| Error::invalid_argument("a filter is required"))?;
            fields.append(cstr!("filter"), filter.to_owned());
            let mods = match name.as_str() {
                "replaceOne" => {
                    let r = args
                        .get_document("replacement")
                        .map_err(|_| Error::invalid_argument("replace-one needs a replacement"))?;
                    if first_key_is_operator(r) == Some(true) {
                        return Err(Error::invalid_argument(
                            "replacement document must not contain update operators",
                        ));
                    }
                    stored_len = r.as_bytes().len();
                    RawBsonRef::Document(r)
                }
                _ => {
                    let u = args
                        .get("update")?
                        .ok_or_else(|| Error::invalid_argument("an update is required"))?;
                    if let RawBsonRef::Document(d) = u {
                        if first_key_is_operator(d) != Some(true) {
                            return Err(Error::invalid_argument(
                                "update document must contain only update operators",
                            ));
                        }
                    }
                    u
                }
            };
            fields.append(cstr!("updateMods"), mods);
            let multi = name == "updateMany";
            fields.append(cstr!("multi"), multi);
            for key in [
                cstr!("upsert"),
                cstr!("arrayFilters"),
                cstr!("collation"),
                cstr!("hint"),
            ] {
                if let Some(v) = args.get(key.as_str())? {
                    fields.append(key, v);
                }
            }
            // The client model's sort, else the update model's own.
            match (&m.sort, args.get("sort")?) {
                (Some(sort), _) => fields.append(cstr!("sort"), sort.clone()),
                (None, Some(sort)) => fields.append(cstr!("sort"), sort),
                (None, None) => {}
            }
            (Kind::Update, multi)
        }
        "deleteOne" | "deleteMany" => {
            let filter = args
                .get_document("filter")
                .map_err(|_| Error::invalid_argument("a filter is required"))?;
            fields.append(cstr!("filter"), filter.to_owned());
            let multi = name == "deleteMany";
            fields.append(cstr!("multi"), multi);
            for key in [cstr!("collation"), cstr!("hint")] {
                if let Some(v) = args.get(key.as_str())? {
                    fields.append(key, v);
                }
            }
            (Kind::Delete, multi)
        }
        other => {
            return Err(Error::invalid_argument(format!(
                "unknown write model {other}"
            )))
        }
    };
    Ok(Prepared {
        namespace: m.namespace.clone(),
        kind,
        fields,
        multi,
        inserted_id,
        stored_len,
    })
}

/// Whether a document's first key starts with `$` (None: it is empty).
fn first_key_is_operator(d: &RawDocument) -> Option<bool> {
    match d.iter().next() {
        Some(Ok((k, _))) => Some(k.as_str().starts_with('$')),
        _ => None,
    }
}

/// One `bulkWrite` command's models: `models[start..end]`.
#[derive(Debug, Clone)]
pub struct Batch {
    pub start: usize,
    pub end: usize,
    pub ops: Slice,
    pub ns_info: Slice,
    /// No multi-document model: the command is a retryable write.
    pub retryable: bool,
}

/// The next batch from `start`: as many models as fit `maxWriteBatchSize`
/// and `maxMessageSizeBytes` less the command body and the overhead, each
/// namespace once in `nsInfo` (spec, "Command Batching").
/// `unacknowledged`: the size checks the server cannot make for a w:0 write.
pub fn next_batch(
    models: &[Prepared],
    start: usize,
    hello: &HelloReply,
    command_len: usize,
    unacknowledged: bool,
) -> Result<Batch> {
    let budget = hello
        .max_message_size_bytes
        .saturating_sub(MESSAGE_OVERHEAD + command_len);
    let mut ops = Vec::new();
    let mut namespaces: Vec<&str> = Vec::new();
    let mut ns_info = Vec::new();
    let mut bytes = 0usize;
    let mut retryable = true;
    let mut end = start;
    for m in &models[start..] {
        if ops.len() >= hello.max_write_batch_size.max(1) {
            break;
        }
        if unacknowledged {
            check_unacknowledged_sizes(m, end, hello)?;
        }
        let known = namespaces.iter().position(|n| *n == m.namespace);
        let ns_doc = match known {
            Some(_) => None,
            None => {
                let mut d = RawDocumentBuf::new();
                d.append(cstr!("ns"), m.namespace.as_str());
                Some(d)
            }
        };
        let added = m.entry_len() + ns_doc.as_ref().map_or(0, |d| d.as_bytes().len());
        if bytes + added > budget {
            break;
        }
        bytes += added;
        let index = match (known, ns_doc) {
            (Some(i), _) => i,
            (None, Some(d)) => {
                namespaces.push(&m.namespace);
                ns_info.push(d);
                namespaces.len() - 1
            }
            (None, None) => unreachable!("a new namespace has its nsInfo entry"),
        };
        let index = i32::try_from(index)
            .map_err(|_| Error::invalid_argument("too many namespaces in one batch"))?;
        ops.push(m.entry(index));
        retryable &= !m.multi;
        end += 1;
    }
    if ops.is_empty() && start < models.len() {
        return Err(Error::invalid_argument(format!(
            "write model {start} does not fit in a message of maxMessageSizeBytes {}",
            hello.max_message_size_bytes
        )));
    }
    Ok(Batch {
        start,
        end,
        ops: ops.into(),
        ns_info: ns_info.into(),
        retryable,
    })
}

/// A w:0 write gets no server check back: the driver makes the spec's.
fn check_unacknowledged_sizes(m: &Prepared, index: usize, hello: &HelloReply) -> Result<()> {
    let max = hello.max_bson_object_size;
    if m.stored_len > max {
        return Err(Error::invalid_argument(format!(
            "write model {index}: document of {} bytes exceeds maxBsonObjectSize {max}",
            m.stored_len
        )));
    }
    if m.entry_len() > max + COMMAND_SLACK {
        return Err(Error::invalid_argument(format!(
            "write model {index}: operation of {} bytes exceeds maxBsonObjectSize + 16KiB",
            m.entry_len()
        )));
    }
    Ok(())
}

/// What one `bulkWrite` reply said: its counts and its results cursor.
#[derive(Debug)]
pub struct BatchReply {
    pub n_errors: i64,
    pub n_inserted: i64,
    pub n_upserted: i64,
    pub n_matched: i64,
    pub n_modified: i64,
    pub n_deleted: i64,
    /// None for an unacknowledged write.
    pub cursor: Option<CursorReply>,
    pub write_concern_error: Option<Error>,
}

impl BatchReply {
    pub fn parse(reply: &RawDocument, address: &str, acknowledged: bool) -> Result<BatchReply> {
        let n = |k: &str| int_field(reply, k).unwrap_or(0);
        let write_concern_error = reply.get_document("writeConcernError").ok().map(|wce| {
            let msg = wce.get_str("errmsg").unwrap_or("write concern error");
            let mut e = server_error(wce, msg, Some(reply.to_owned()));
            if let Ok(labels) = reply.get_array("errorLabels") {
                for l in labels.into_iter().flatten().filter_map(|v| v.as_str()) {
                    e.add_label(l);
                }
            }
            e
        });
        let cursor = match acknowledged {
            true => Some(CursorReply::parse(reply, address)?),
            false => None,
        };
        Ok(BatchReply {
            n_errors: n("nErrors"),
            n_inserted: n("nInserted"),
            n_upserted: n("nUpserted"),
            n_matched: n("nMatched"),
            n_modified: n("nModified"),
            n_deleted: n("nDeleted"),
            cursor,
            write_concern_error,
        })
    }
}

/// One `bulkWrite` command: the body is fixed, the batch taken at the first
/// `build` (its server's limits) and resent unchanged by a retry.
pub struct BulkWriteCommand<'m> {
    models: &'m [Prepared],
    start: usize,
    body: RawDocumentBuf,
    acknowledged: bool,
    /// Set at the first `build`; a retry resends it.
    pub batch: Option<Batch>,
}

impl<'m> BulkWriteCommand<'m> {
    pub fn new(
        models: &'m [Prepared],
        start: usize,
        body: RawDocumentBuf,
        acknowledged: bool,
    ) -> Self {
        BulkWriteCommand {
            models,
            start,
            body,
            acknowledged,
            batch: None,
        }
    }
}

impl Operation for BulkWriteCommand<'_> {
    type Output = BatchReply;

    fn name(&self) -> &str {
        "bulkWrite"
    }

    fn build(&mut self, hello: &HelloReply) -> Result<Command> {
        let batch = match &self.batch {
            Some(b) => b.clone(),
            None => {
                let b = next_batch(
                    self.models,
                    self.start,
                    hello,
                    self.body.as_bytes().len(),
                    !self.acknowledged,
                )?;
                self.batch.insert(b).clone()
            }
        };
        if !self.acknowledged
            && self.body.as_bytes().len() > hello.max_bson_object_size + COMMAND_SLACK
        {
            return Err(Error::invalid_argument(
                "bulkWrite command exceeds maxBsonObjectSize + 16KiB",
            ));
        }
        Ok(Command {
            name: "bulkWrite".into(),
            db: "admin".into(),
            body: self.body.clone(),
            sequences: vec![(cstr!("ops"), batch.ops), (cstr!("nsInfo"), batch.ns_info)],
        })
    }

    fn handle_reply(&mut self, reply: RawDocumentBuf, address: &str) -> Result<BatchReply> {
        // A write concern error the server labelled retryable is retried
        // (same batch, same txnNumber) when the batch is a retryable write,
        // as for the collection's writes; otherwise it is reported.
        if self.retryability() == Retryability::Write {
            if let Some(e) = crate::operation::retryable_write_concern_error(&reply) {
                return Err(e);
            }
        }
        BatchReply::parse(&reply, address, self.acknowledged)
    }

    fn retryability(&self) -> Retryability {
        // Decided before the batch exists (the executor asks first): a
        // multi-document model anywhere from `start` on makes it not
        // retryable, which is exact for a bulk write of one batch.
        let multi = match &self.batch {
            Some(b) => !b.retryable,
            None => self.models[self.start..].iter().any(|m| m.multi),
        };
        match multi {
            true => Retryability::None,
            false => Retryability::Write,
        }
    }
}

/// The `bulkWrite` command body (without the sequences): `errorsOnly` the
/// inverse of verboseResults, `ordered` always explicit (spec), then the
/// caller's fields (comment, let, bypassDocumentValidation, writeConcern).
pub fn command_body(
    ordered: bool,
    verbose: bool,
    extra: Option<&RawDocumentBuf>,
) -> Result<RawDocumentBuf> {
    let mut body = RawDocumentBuf::new();
    body.append(cstr!("bulkWrite"), 1);
    body.append(cstr!("errorsOnly"), !verbose);
    body.append(cstr!("ordered"), ordered);
    if let Some(extra) = extra {
        for item in extra {
            let (k, v) = item?;
            if !matches!(
                k.as_str(),
                "bulkWrite" | "errorsOnly" | "ordered" | "verboseResults"
            ) && body.get(k.as_str())?.is_none()
            {
                body.append(k, v);
            }
        }
    }
    Ok(body)
}

/// The results of every batch so far, with indexes of the caller's list.
#[derive(Debug, Default)]
pub struct Merged {
    pub result: ClientBulkWriteResult,
    pub write_errors: Vec<WriteError>,
    pub write_concern_errors: Vec<WriteConcernError>,
    /// Some write is known to have succeeded: the partial result is reported.
    pub any_success: bool,
    /// The labels of the replies with write concern errors.
    labels: Vec<String>,
}

impl Merged {
    pub fn new(verbose: bool) -> Merged {
        Merged {
            result: ClientBulkWriteResult {
                acknowledged: true,
                verbose: verbose.then(VerboseResults::default),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A batch's summary counts (spec, "Handling the bulkWrite Server
    /// Response"). Counts above 0 show a write succeeded; otherwise
    /// `batch_done` settles it once the cursor was read (an update that
    /// matched nothing succeeded too).
    pub fn add_counts(&mut self, reply: &BatchReply) {
        let r = &mut self.result;
        // Saturating: counts come from the server and must not overflow.
        r.inserted_count = r.inserted_count.saturating_add(reply.n_inserted);
        r.upserted_count = r.upserted_count.saturating_add(reply.n_upserted);
        r.matched_count = r.matched_count.saturating_add(reply.n_matched);
        r.modified_count = r.modified_count.saturating_add(reply.n_modified);
        r.deleted_count = r.deleted_count.saturating_add(reply.n_deleted);
        // A count above 0 is a write that succeeded, whatever comes next.
        let written = [
            reply.n_inserted,
            reply.n_upserted,
            reply.n_matched,
            reply.n_modified,
            reply.n_deleted,
        ];
        self.any_success |= written.iter().any(|n| *n > 0);
        if let Some(e) = &reply.write_concern_error {
            self.labels.extend(e.labels.iter().cloned());
            self.write_concern_errors.push(WriteConcernError {
                code: e.code.unwrap_or(0),
                code_name: e.code_name.clone(),
                message: e.message.clone(),
                details: e
                    .reply
                    .as_deref()
                    .and_then(|r| r.get_document("writeConcernError").ok())
                    .and_then(|w| w.get_document("errInfo").ok())
                    .map(|d| d.to_owned()),
            });
        }
    }

    /// Whether a batch of `size` models, `n_errors` of them failed, the
    /// first failure at batch index `first_error`, wrote anything (spec).
    pub fn batch_done(
        &mut self,
        ordered: bool,
        size: usize,
        n_errors: i64,
        first_error: Option<usize>,
    ) {
        let wrote = match ordered {
            true => n_errors == 0 || first_error.is_some_and(|i| i > 0),
            false => n_errors < size as i64,
        };
        self.any_success |= wrote;
    }

    /// One document of the results cursor, `batch` the models it belongs
    /// to. Returns the model index of a write error.
    pub fn fold(
        &mut self,
        doc: &RawDocument,
        models: &[Prepared],
        batch: &Batch,
    ) -> Result<Option<usize>> {
        let idx = int_field(doc, "idx")
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| batch.start + i < batch.end)
            .ok_or_else(|| {
                Error::protocol(format!(
                    "bulkWrite result index {:?} outside its batch of {}",
                    int_field(doc, "idx"),
                    batch.end - batch.start
                ))
            })?;
        let index = batch.start + idx;
        let index32 = u32::try_from(index).unwrap_or(u32::MAX);
        let ok = crate::error::is_ok(crate::wire::raw::get(doc, "ok"));
        if !ok {
            self.write_errors.push(WriteError {
                index: index32,
                code: int_field(doc, "code").map_or(0, |c| c as i32),
                code_name: doc.get_str("codeName").ok().map(str::to_string),
                message: doc.get_str("errmsg").unwrap_or("write error").to_string(),
                details: doc.get_document("errInfo").ok().map(|d| d.to_owned()),
            });
            return Ok(Some(index));
        }
        // A successful write observed (verbose results list them).
        self.any_success = true;
        let Some(verbose) = self.result.verbose.as_mut() else {
            return Ok(None);
        };
        let n = int_field(doc, "n").unwrap_or(0);
        let model = &models[index];
        match model.kind {
            Kind::Insert => {
                // Only an insert the server confirmed reports its `_id`.
                if let (1, Some(id)) = (n, &model.inserted_id) {
                    verbose.insert_results.push((index32, id.clone()));
                }
            }
            Kind::Update => {
                let upserted_id = doc
                    .get_document("upserted")
                    .ok()
                    .and_then(|u| u.get("_id").ok().flatten())
                    .map(RawBson::from);
                verbose.update_results.push((
                    index32,
                    UpdateResult {
                        matched: n,
                        modified: int_field(doc, "nModified").unwrap_or(0),
                        upserted_id,
                    },
                ));
            }
            Kind::Delete => verbose.delete_results.push((index32, n)),
        }
        Ok(None)
    }

    /// The outcome once every batch ran (or an ordered one stopped): the
    /// result, or the error carrying the write errors, write concern errors
    /// and (when some write succeeded) the partial result.
    pub fn finish(mut self) -> Result<ClientBulkWriteResult> {
        if self.write_errors.is_empty() && self.write_concern_errors.is_empty() {
            return Ok(self.result);
        }
        self.write_errors.sort_by_key(|w| w.index);
        let mut err = Error::new(ErrorKind::Server, "client bulk write failed");
        match (self.write_errors.first(), self.write_concern_errors.first()) {
            (Some(first), _) => {
                err.code = Some(first.code);
                err.code_name = first.code_name.clone();
                err.message = format!("client bulk write failed: {}", first.message);
                err = err.settled();
            }
            (None, Some(first)) => {
                err.kind = ErrorKind::WriteConcern;
                err.code = Some(first.code);
                err.code_name = first.code_name.clone();
                err.message = format!("client bulk write failed: {}", first.message);
            }
            (None, None) => unreachable!("checked above"),
        }
        Err(self.into_error(err))
    }

    /// `top` (a top-level error: a failed command, getMore, network...)
    /// with what was observed before it, when anything was (spec, "Top-Level
    /// Errors"); else `top` alone.
    pub fn top_level(self, top: Error) -> Error {
        let observed = self.any_success
            || !self.write_errors.is_empty()
            || !self.write_concern_errors.is_empty();
        match observed {
            true => self.into_error(top),
            false => top,
        }
    }

    fn into_error(self, mut err: Error) -> Error {
        for l in &self.labels {
            err.add_label(l);
        }
        let partial = self.any_success.then_some(self.result);
        err.write_failure = Some(Box::new(WriteFailure {
            write_errors: self.write_errors,
            write_concern_errors: self.write_concern_errors,
            partial_result: None,
            client_partial_result: partial,
        }));
        err
    }
}

impl crate::client::Client {
    /// Runs `models` (any namespaces) as `bulkWrite` commands on admin
    /// (MongoDB 8.0+), split to the server's limits, every command and
    /// getMore of the results cursors under one deadline. Batches without
    /// multi-document models are retryable writes. Write errors and write
    /// concern errors fail it with `Error::write_failure` (the errors
    /// by model index and, when some write succeeded, the partial result);
    /// a top-level error (a failed command or getMore) ends it at once and
    /// carries what was observed before it the same way.
    pub async fn bulk_write(
        &self,
        models: &[ClientWriteModel],
        options: &ClientBulkWriteOptions<'_>,
    ) -> Result<ClientBulkWriteResult> {
        self.inner.check_open()?;
        let prepared = prepare(models)?;
        let session_opt = options.session;
        let callback = session_opt
            .map(|s| s.callback_timeout(options.timeout_ms))
            .transpose()?
            .flatten();
        let timeout_ms =
            crate::csot::resolve_timeout_ms(options.timeout_ms, callback, &[self.inner.timeout_ms]);
        let typed = crate::collection::OpOptions {
            timeout_ms: options.timeout_ms,
            session: options.session,
            extra: options.extra.clone(),
            ordered: options.ordered,
            bypass_document_validation: options.bypass_document_validation,
            comment: options.comment.clone(),
            let_vars: options.let_vars.clone(),
            write_concern: options.write_concern.clone(),
            ..Default::default()
        }
        .flattened()?;
        let mut extra = crate::csot::without_caller_max_time(typed.extra.as_ref(), timeout_ms)?;
        let in_transaction = session_opt.is_some_and(Session::in_transaction);
        let given_concern = extra.as_ref().is_some_and(|e| {
            e.get(crate::concern::WRITE.as_str())
                .ok()
                .flatten()
                .is_some()
        });
        if in_transaction && given_concern {
            // Transactions spec: the transaction's write concern applies.
            return Err(Error::invalid_argument(
                "Cannot set write concern after starting a transaction",
            ));
        }
        // The client's write concern, outside transactions (under CSOT
        // without wtimeout), as for the collection's writes.
        if !in_transaction {
            let concern = match &self.inner.write_concern {
                Some(c) if timeout_ms.is_some() => Some(crate::concern::without_wtimeout(c)?),
                other => other.clone(),
            };
            extra = crate::concern::with_default(
                extra.as_ref(),
                crate::concern::WRITE,
                concern.as_ref(),
            )?;
        }
        let ordered = options.ordered.unwrap_or(true);
        let verbose = options.verbose_results.unwrap_or(false);
        let unacknowledged = extra.as_ref().is_some_and(|e| {
            e.get_document(crate::concern::WRITE.as_str())
                .is_ok_and(crate::concern::is_unacknowledged)
        });
        if unacknowledged {
            check_unacknowledged(ordered, verbose)?;
        }
        let body = command_body(ordered, verbose, extra.as_ref())?;
        let budget = self.start_timeout(timeout_ms);
        // The getMores use the bulkWrite's session (spec).
        let session = self.session_for(session_opt);
        let mut merged = Merged::new(verbose);
        let mut start = 0;
        while start < prepared.len() {
            let mut op = BulkWriteCommand::new(&prepared, start, body.clone(), !unacknowledged);
            let reply = match self
                .execute_within(&mut op, &budget, Some(&session), None)
                .await
            {
                Ok(r) => r,
                Err(e) => return Err(merged.top_level(e)),
            };
            let batch = op
                .batch
                .ok_or_else(|| Error::protocol("bulkWrite ran without a batch"))?;
            start = batch.end;
            let Some(cursor) = reply.cursor.as_ref() else {
                continue;
            };
            merged.add_counts(&reply);
            let first_error = match self
                .read_results(
                    cursor,
                    &prepared,
                    &batch,
                    &mut merged,
                    ordered,
                    &budget,
                    &session,
                )
                .await
            {
                Ok(first) => first,
                Err(e) => return Err(merged.top_level(e)),
            };
            merged.batch_done(
                ordered,
                batch.end - batch.start,
                reply.n_errors,
                first_error.map(|i| i - batch.start),
            );
            if ordered && first_error.is_some() {
                break;
            }
        }
        if unacknowledged {
            return Ok(ClientBulkWriteResult::default());
        }
        merged.finish()
    }

    /// Folds a batch's results cursor, with getMore until it is exhausted
    /// (an ordered write stops at its write error and kills the cursor).
    /// Returns the model index of the batch's first write error.
    #[allow(clippy::too_many_arguments)]
    async fn read_results(
        &self,
        cursor: &CursorReply,
        models: &[Prepared],
        batch: &Batch,
        merged: &mut Merged,
        ordered: bool,
        budget: &crate::csot::OpTimeout,
        session: &Session,
    ) -> Result<Option<usize>> {
        let coll = cursor
            .ns
            .split_once('.')
            .map_or("$cmd.bulkWrite", |(_, c)| c)
            .to_string();
        let mut id = cursor.id;
        let mut first_error: Option<usize> = None;
        let mut docs = cursor.batch.clone();
        loop {
            for doc in docs.iter() {
                let failed = match merged.fold(doc, models, batch) {
                    Ok(failed) => failed,
                    Err(e) => {
                        self.kill_results(id, &coll, &cursor.address, budget, session)
                            .await;
                        return Err(e);
                    }
                };
                if let Some(i) = failed {
                    first_error = Some(first_error.map_or(i, |f| f.min(i)));
                }
            }
            if id == 0 || (ordered && first_error.is_some()) {
                self.kill_results(id, &coll, &cursor.address, budget, session)
                    .await;
                return Ok(first_error);
            }
            let mut more = crate::operation::GetMore {
                db: "admin".into(),
                coll: coll.clone(),
                id,
                batch_size: None,
                max_await_ms: None,
                comment: None,
                wire_version: None,
            };
            let next = self
                .execute_within(&mut more, budget, Some(session), Some(&cursor.address))
                .await;
            let next = match next {
                Ok(next) => next,
                Err(e) => {
                    if !e.is_network() {
                        self.kill_results(id, &coll, &cursor.address, budget, session)
                            .await;
                    }
                    return Err(e);
                }
            };
            id = next.id;
            docs = next.batch;
        }
    }

    /// Best effort: a results cursor left open is killed (spec); its
    /// outcome does not change the bulk write's.
    async fn kill_results(
        &self,
        id: i64,
        coll: &str,
        address: &str,
        budget: &crate::csot::OpTimeout,
        session: &Session,
    ) {
        if id == 0 {
            return;
        }
        let mut kill = crate::operation::KillCursors {
            db: "admin".into(),
            coll: coll.to_string(),
            ids: vec![id],
        };
        let _ = self
            .execute_within(&mut kill, budget, Some(session), Some(address))
            .await;
    }
}

/// The unacknowledged-write rules (spec and CRUD spec): w:0 cannot ask for
/// verbose results nor ordered writes.
pub fn check_unacknowledged(ordered: bool, verbose: bool) -> Result<()> {
    if verbose {
        return Err(Error::invalid_argument(
            "Cannot request unacknowledged write concern and verbose results",
        ));
    }
    if ordered {
        return Err(Error::invalid_argument(
            "Cannot request unacknowledged write concern and ordered writes",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(docs: &Slice) -> Vec<RawDocumentBuf> {
        docs.iter().map(|d| d.to_owned()).collect()
    }
    use crate::collection::{DeleteModel, UpdateModel, UpdateSpec};
    use bson::rawdoc;

    fn hello(batch: usize, message: usize) -> HelloReply {
        HelloReply {
            max_write_batch_size: batch,
            max_message_size_bytes: message,
            max_bson_object_size: 1 << 20,
            ..Default::default()
        }
    }

    fn insert(ns: &str, doc: RawDocumentBuf) -> ClientWriteModel {
        ClientWriteModel {
            namespace: ns.into(),
            model: WriteModel::InsertOne(doc),
            sort: None,
        }
    }

    fn update(ns: &str, many: bool, update: RawDocumentBuf) -> ClientWriteModel {
        let m = UpdateModel {
            filter: rawdoc! { "_id": 1 },
            update: UpdateSpec::Document(update),
            upsert: Some(true),
            collation: None,
            hint: None,
            array_filters: None,
            sort: None,
        };
        ClientWriteModel {
            namespace: ns.into(),
            model: match many {
                true => WriteModel::UpdateMany(m),
                false => WriteModel::UpdateOne(m),
            },
            sort: None,
        }
    }

    #[test]
    fn models_become_ops_entries() {
        let models = vec![
            insert("d.a", rawdoc! { "x": 1 }),
            update("d.b", false, rawdoc! { "$set": { "x": 1 } }),
            ClientWriteModel {
                namespace: "d.a".into(),
                model: WriteModel::DeleteMany(DeleteModel {
                    filter: rawdoc! {},
                    collation: None,
                    hint: None,
                }),
                sort: None,
            },
        ];
        let p = prepare(&models).unwrap();
        let b = next_batch(&p, 0, &hello(10, 1 << 20), 50, false).unwrap();
        assert_eq!((b.start, b.end), (0, 3));
        assert!(!b.retryable, "a delete-many is multi");
        assert_eq!(
            owned(&b.ns_info),
            [rawdoc! { "ns": "d.a" }, rawdoc! { "ns": "d.b" }]
        );
        let ops = owned(&b.ops);
        let first = &ops[0];
        assert_eq!(first.get_i32("insert").unwrap(), 0);
        assert!(first
            .get_document("document")
            .unwrap()
            .get_object_id("_id")
            .is_ok());
        assert_eq!(
            ops[1],
            rawdoc! { "update": 1, "filter": { "_id": 1 }, "updateMods": { "$set": { "x": 1 } }, "multi": false, "upsert": true }
        );
        assert_eq!(ops[2], rawdoc! { "delete": 0, "filter": {}, "multi": true });
        for (i, op) in b.ops.iter().enumerate() {
            assert_eq!(op.as_bytes().len(), p[i].entry_len(), "entry_len is exact");
        }
    }

    #[test]
    fn invalid_models_are_client_errors() {
        assert!(prepare(&[]).is_err());
        for bad in [
            update("d.a", false, rawdoc! { "x": 1 }),
            update("d.a", true, rawdoc! {}),
            insert("nodot", rawdoc! {}),
            ClientWriteModel {
                sort: Some(rawdoc! { "a": 1 }),
                ..update("d.a", true, rawdoc! { "$set": { "a": 1 } })
            },
        ] {
            let e = prepare(std::slice::from_ref(&bad)).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
        }
        let replace = ClientWriteModel {
            namespace: "d.a".into(),
            model: WriteModel::ReplaceOne(UpdateModel {
                filter: rawdoc! {},
                update: UpdateSpec::Document(rawdoc! { "$set": { "a": 1 } }),
                upsert: None,
                collation: None,
                hint: None,
                array_filters: None,
                sort: None,
            }),
            sort: Some(rawdoc! { "a": -1 }),
        };
        assert!(prepare(std::slice::from_ref(&replace)).is_err());
        let ok = ClientWriteModel {
            model: WriteModel::ReplaceOne(UpdateModel {
                filter: rawdoc! {},
                update: UpdateSpec::Document(rawdoc! { "a": 1 }),
                upsert: None,
                collation: None,
                hint: None,
                array_filters: None,
                sort: None,
            }),
            ..replace
        };
        let p = prepare(&[ok]).unwrap();
        assert_eq!(
            p[0].fields.get_document("sort").unwrap(),
            &*rawdoc! { "a": -1 }
        );
    }

    #[test]
    fn batches_split_by_count_and_message_size() {
        let models: Vec<ClientWriteModel> = (0..7)
            .map(|i| {
                insert(
                    &format!("d.c{}", i % 2),
                    rawdoc! { "_id": i, "pad": "x".repeat(100) },
                )
            })
            .collect();
        let p = prepare(&models).unwrap();
        let h = hello(3, 1 << 20);
        let mut ends = Vec::new();
        let mut start = 0;
        while start < p.len() {
            let b = next_batch(&p, start, &h, 40, false).unwrap();
            assert!(b.ns_info.len() <= 2);
            start = b.end;
            ends.push(b.end);
        }
        assert_eq!(ends, [3, 6, 7]);
        // Room for exactly two entries and the namespaces they bring.
        let room =
            p[0].entry_len() + p[1].entry_len() + 2 * rawdoc! { "ns": "d.c0" }.as_bytes().len();
        let b = next_batch(&p, 0, &hello(100, MESSAGE_OVERHEAD + 40 + room), 40, false).unwrap();
        assert_eq!(b.end, 2);
        let b = next_batch(
            &p,
            0,
            &hello(100, MESSAGE_OVERHEAD + 40 + room - 1),
            40,
            false,
        )
        .unwrap();
        assert_eq!(b.end, 1, "one byte less: one model");
        let e = next_batch(&p, 0, &hello(100, MESSAGE_OVERHEAD + 40 + 10), 40, false).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "no room for any model");
    }

    #[test]
    fn a_new_namespace_that_does_not_fit_starts_the_next_batch() {
        // Prose test 11's rule: the nsInfo entry a model brings counts too.
        let models = vec![
            insert("d.a", rawdoc! { "_id": 1 }),
            insert("d.a", rawdoc! { "_id": 2 }),
            insert(&format!("d.{}", "b".repeat(200)), rawdoc! { "_id": 2 }),
        ];
        let p = prepare(&models).unwrap();
        let ns_a = rawdoc! { "ns": "d.a" }.as_bytes().len();
        let ns_b = rawdoc! { "ns": models[2].namespace.as_str() }
            .as_bytes()
            .len();
        // One byte short of all three and both namespaces.
        let room = p[0].entry_len() + p[1].entry_len() + ns_a + p[2].entry_len() + ns_b - 1;
        let h = hello(100, MESSAGE_OVERHEAD + 40 + room);
        let b = next_batch(&p, 0, &h, 40, false).unwrap();
        assert_eq!(b.end, 2, "the third model fits, its namespace does not");
        assert_eq!(b.ns_info.len(), 1);
        let b = next_batch(&p, b.end, &h, 40, false).unwrap();
        assert_eq!((b.start, b.end, b.ns_info.len()), (2, 3, 1));
        assert_eq!(
            owned(&b.ops)[0].get_i32("insert").unwrap(),
            0,
            "indexes its own nsInfo"
        );
    }

    #[test]
    fn unacknowledged_writes_check_sizes_themselves() {
        let big = insert("d.c", rawdoc! { "pad": "x".repeat(2000) });
        let p = prepare(&[big]).unwrap();
        let h = HelloReply {
            max_bson_object_size: 1000,
            ..hello(10, 1 << 20)
        };
        assert!(next_batch(&p, 0, &h, 40, true).is_err());
        assert!(
            next_batch(&p, 0, &h, 40, false).is_ok(),
            "acknowledged: the server checks"
        );
        assert!(check_unacknowledged(false, false).is_ok());
        assert!(check_unacknowledged(true, false)
            .unwrap_err()
            .message
            .contains("ordered"));
        assert!(check_unacknowledged(false, true)
            .unwrap_err()
            .message
            .contains("verbose"));
    }

    #[test]
    fn the_body_says_errors_only_and_ordered_explicitly() {
        let b = command_body(
            true,
            false,
            Some(&rawdoc! { "comment": "c", "ordered": false }),
        )
        .unwrap();
        assert_eq!(
            b,
            rawdoc! { "bulkWrite": 1, "errorsOnly": true, "ordered": true, "comment": "c" }
        );
        let b = command_body(false, true, None).unwrap();
        assert_eq!(
            b,
            rawdoc! { "bulkWrite": 1, "errorsOnly": false, "ordered": false }
        );
    }

    #[test]
    fn results_merge_across_batches_with_offsets() {
        let models = vec![
            insert("d.a", rawdoc! { "_id": 1 }),
            update("d.a", false, rawdoc! { "$set": { "x": 1 } }),
            insert("d.a", rawdoc! { "_id": 2 }),
            insert("d.a", rawdoc! { "_id": 3 }),
        ];
        let p = prepare(&models).unwrap();
        let h = hello(2, 1 << 20);
        let mut m = Merged::new(true);
        let b1 = next_batch(&p, 0, &h, 40, false).unwrap();
        m.fold(&rawdoc! { "ok": 1, "idx": 0, "n": 1 }, &p, &b1)
            .unwrap();
        m.fold(
            &rawdoc! { "ok": 1.0, "idx": 1, "n": 1, "nModified": 0, "upserted": { "_id": 1 } },
            &p,
            &b1,
        )
        .unwrap();
        m.batch_done(false, 2, 0, None);
        let b2 = next_batch(&p, b1.end, &h, 40, false).unwrap();
        assert_eq!((b2.start, b2.end), (2, 4));
        let failed = m
            .fold(
                &rawdoc! { "ok": 0, "idx": 1, "code": 11000, "errmsg": "dup", "errInfo": { "a": 1 } },
                &p,
                &b2,
            )
            .unwrap();
        assert_eq!(failed, Some(3));
        m.fold(&rawdoc! { "ok": 1, "idx": 0, "n": 1 }, &p, &b2)
            .unwrap();
        assert!(
            m.fold(&rawdoc! { "ok": 1, "idx": 2, "n": 1 }, &p, &b2)
                .is_err(),
            "an index outside the batch is a protocol error"
        );
        assert!(m.fold(&rawdoc! { "ok": 1, "idx": -1 }, &p, &b2).is_err());
        let v = m.result.verbose.clone().unwrap();
        assert_eq!(
            v.insert_results,
            vec![(0, RawBson::Int32(1)), (2, RawBson::Int32(2))]
        );
        assert_eq!(v.update_results[0].0, 1);
        assert_eq!(v.update_results[0].1.upserted_id, Some(RawBson::Int32(1)));
        let e = m.finish().unwrap_err();
        assert_eq!(e.kind, ErrorKind::DuplicateKey);
        let f = e.write_failure.unwrap();
        assert_eq!(f.write_errors[0].index, 3);
        assert_eq!(f.write_errors[0].details, Some(rawdoc! { "a": 1 }));
        assert!(f.client_partial_result.is_some());
    }

    #[test]
    fn a_partial_result_only_when_something_was_written() {
        let mut m = Merged::new(false);
        m.batch_done(true, 3, 1, Some(0));
        m.write_errors.push(WriteError {
            index: 0,
            code: 2,
            code_name: None,
            message: "bad".into(),
            details: None,
        });
        let e = m.finish().unwrap_err();
        assert!(e.write_failure.unwrap().client_partial_result.is_none());
        let mut m = Merged::new(false);
        m.batch_done(true, 3, 1, Some(2));
        assert!(
            m.any_success,
            "ordered: models before the failure were written"
        );
        let mut m = Merged::new(false);
        m.batch_done(false, 3, 3, Some(0));
        assert!(!m.any_success, "unordered: every model failed");
        m.batch_done(false, 3, 2, Some(0));
        assert!(m.any_success);
    }

    #[test]
    fn top_level_errors_keep_what_was_observed() {
        let top = Error::new(ErrorKind::Network, "reset");
        let m = Merged::new(false);
        assert!(m.top_level(top.clone()).write_failure.is_none());
        let mut m = Merged::new(false);
        m.add_counts(&BatchReply {
            n_errors: 0,
            n_inserted: 2,
            n_upserted: 0,
            n_matched: 0,
            n_modified: 0,
            n_deleted: 0,
            cursor: None,
            write_concern_error: None,
        });
        m.batch_done(true, 2, 0, None);
        let e = m.top_level(top);
        assert_eq!(e.kind, ErrorKind::Network);
        let partial = e.write_failure.unwrap().client_partial_result.unwrap();
        assert_eq!(partial.inserted_count, 2);
        // A successful result read from the cursor is observed too, even
        // when the counts say nothing (an update that matched nothing).
        let p = prepare(&[update("d.a", false, rawdoc! { "$set": { "x": 1 } })]).unwrap();
        let b = next_batch(&p, 0, &hello(10, 1 << 20), 40, false).unwrap();
        let mut m = Merged::new(true);
        m.fold(
            &rawdoc! { "ok": 1, "idx": 0, "n": 0, "nModified": 0 },
            &p,
            &b,
        )
        .unwrap();
        let e = m.top_level(Error::new(ErrorKind::Network, "reset"));
        let partial = e.write_failure.unwrap().client_partial_result.unwrap();
        assert_eq!(partial.verbose.unwrap().update_results.len(), 1);
    }

    #[test]
    fn a_labelled_write_concern_error_is_retried_only_by_a_retryable_batch() {
        let reply = rawdoc! {
            "ok": 1, "nErrors": 0, "nDeleted": 1,
            "cursor": { "id": 0i64, "firstBatch": [], "ns": "admin.$cmd.bulkWrite" },
            "writeConcernError": { "code": 91, "errmsg": "x" },
            "errorLabels": ["RetryableWriteError"],
        };
        let delete = |many| ClientWriteModel {
            namespace: "d.c".into(),
            model: match many {
                true => WriteModel::DeleteMany(DeleteModel {
                    filter: rawdoc! {},
                    collation: None,
                    hint: None,
                }),
                false => WriteModel::DeleteOne(DeleteModel {
                    filter: rawdoc! {},
                    collation: None,
                    hint: None,
                }),
            },
            sort: None,
        };
        let body = command_body(true, false, None).unwrap();
        let single = prepare(&[delete(false)]).unwrap();
        let mut op = BulkWriteCommand::new(&single, 0, body.clone(), true);
        assert_eq!(op.retryability(), Retryability::Write);
        let cmd = op.build(&hello(10, 1 << 20)).unwrap();
        assert_eq!(cmd.db, "admin");
        let e = op.handle_reply(reply.clone(), "a:1").unwrap_err();
        assert!(
            e.has_label("RetryableWriteError"),
            "retried by the executor"
        );
        let multi = prepare(&[delete(true)]).unwrap();
        let mut op = BulkWriteCommand::new(&multi, 0, body, true);
        assert_eq!(op.retryability(), Retryability::None);
        op.build(&hello(10, 1 << 20)).unwrap();
        let r = op.handle_reply(reply, "a:1").unwrap();
        assert_eq!(r.write_concern_error.unwrap().code, Some(91), "reported");
    }

    #[test]
    fn write_concern_errors_alone_fail_as_write_concern() {
        let reply = rawdoc! {
            "ok": 1, "nErrors": 0, "nInserted": 1,
            "cursor": { "id": 0i64, "firstBatch": [], "ns": "admin.$cmd.bulkWrite" },
            "writeConcernError": { "code": 91, "errmsg": "shutting down", "errInfo": { "w": 2 } },
        };
        let r = BatchReply::parse(&reply, "a:1", true).unwrap();
        assert_eq!(r.cursor.as_ref().unwrap().id, 0);
        let mut m = Merged::new(false);
        m.add_counts(&r);
        m.batch_done(true, 1, r.n_errors, None);
        let e = m.finish().unwrap_err();
        assert_eq!(e.kind, ErrorKind::WriteConcern);
        assert_eq!(e.code, Some(91));
        let f = e.write_failure.unwrap();
        assert_eq!(f.write_concern_errors[0].details, Some(rawdoc! { "w": 2 }));
        assert_eq!(f.client_partial_result.unwrap().inserted_count, 1);
        assert!(BatchReply::parse(&rawdoc! { "ok": 1 }, "a:1", true).is_err());
        assert!(BatchReply::parse(&rawdoc! { "ok": 1 }, "a:1", false).is_ok());
    }
}
