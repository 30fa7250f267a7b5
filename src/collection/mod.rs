//! CRUD on one collection (CRUD spec). Documents stay raw BSON throughout.

mod indexes;
mod map_reduce;
mod options;
mod search_indexes;
pub(crate) mod writes;

pub use crate::sdam::selection::ReadMode;
pub use options::{Hint, ReturnDocument};
pub use search_indexes::SearchIndexModel;
pub use writes::{DeleteModel, UpdateModel, WriteModel};

use crate::concern::{ReadConcern, WriteConcern};
use crate::csot::{cursor_timeout, resolve_timeout_ms, without_caller_max_time, CursorShape};
use crate::cursor::{Cursor, CursorSettings, TimeoutMode};
use crate::database::Database;
use crate::error::{Error, Result};
use crate::operation::{CursorCommand, Find, RunCommand};
use crate::retryable::Retryability;
use crate::sdam::selection::{Criteria, ReadPreference};
use crate::session::Session;
use crate::wire::raw::take_field;
use bson::cstr;
use bson::{rawdoc, RawArrayBuf, RawBson, RawDocument, RawDocumentBuf};

#[derive(Clone)]
pub struct Collection {
    db: Database,
    name: String,
    timeout_ms: Option<u64>,
    read_concern: Option<RawDocumentBuf>,
    write_concern: Option<RawDocumentBuf>,
    /// The default for its may-use-secondary reads (the database's, unless set).
    read_preference: Option<ReadPreference>,
    config_error: Option<Error>,
}

/// Options every operation takes (WIT `op-options`): the CRUD spec's
/// everyday options typed, and `extra` for further command fields by their
/// server names. A typed field replaces the same field in `extra`.
#[derive(Default, Clone)]
pub struct OpOptions<'a> {
    pub timeout_ms: Option<u64>,
    pub session: Option<&'a Session>,
    pub extra: Option<RawDocumentBuf>,
    pub upsert: Option<bool>,
    pub ordered: Option<bool>,
    pub hint: Option<Hint>,
    pub collation: Option<RawDocumentBuf>,
    pub comment: Option<RawBson>,
    /// The CRUD spec's `let`.
    pub let_vars: Option<RawDocumentBuf>,
    pub array_filters: Option<Vec<RawDocumentBuf>>,
    pub return_document: Option<ReturnDocument>,
    pub projection: Option<RawDocumentBuf>,
    pub sort: Option<RawDocumentBuf>,
    pub bypass_document_validation: Option<bool>,
    /// For the cursor operations that take aggregate options (WIT
    /// `aggregate-options`), which the Rust API passes as op options.
    pub max_await_time_ms: Option<u64>,
    pub read_concern: Option<ReadConcern>,
    pub write_concern: Option<WriteConcern>,
    /// For the reads that may use a secondary (find, aggregate without
    /// $out/$merge, count, count-documents, estimated-document-count,
    /// distinct, inline map-reduce); unset: the collection's default.
    /// Other operations ignore it.
    pub read_preference: Option<ReadPreference>,
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
    pub hint: Option<Hint>,
    pub collation: Option<RawDocumentBuf>,
    pub comment: Option<RawBson>,
    /// The CRUD spec's `let`.
    pub let_vars: Option<RawDocumentBuf>,
    pub max_await_time_ms: Option<u64>,
    pub read_concern: Option<ReadConcern>,
    /// Where the find may run; unset: the collection's default.
    pub read_preference: Option<ReadPreference>,
}

/// An update document, or a pipeline.
pub enum UpdateSpec {
    Document(RawDocumentBuf),
    Pipeline(Vec<RawDocumentBuf>),
}

impl Collection {
    /// The filter `{_id: id}`, for the common "insert, then find, update or
    /// delete that document": `coll.find_one(Collection::id_filter(id), ...)`
    /// with the id `insert_one` returned.
    pub fn id_filter(id: impl Into<RawBson>) -> RawDocumentBuf {
        let mut filter = RawDocumentBuf::new();
        filter.append(cstr!("_id"), id.into());
        filter
    }

    pub(crate) fn new(db: Database, name: &str, timeout_ms: Option<u64>) -> Collection {
        let (read_concern, write_concern) = (db.read_concern.clone(), db.write_concern.clone());
        let read_preference = db.read_preference.clone();
        Collection {
            db,
            name: name.to_string(),
            timeout_ms,
            read_concern,
            write_concern,
            read_preference,
            config_error: None,
        }
    }

    /// This handle with its own default read preference (unset: inherited).
    pub fn with_read_preference(mut self, read_preference: Option<ReadPreference>) -> Collection {
        self.read_preference = read_preference.or(self.read_preference);
        self
    }

    /// The read preference of a may-use-secondary read: the operation's,
    /// else this handle's, else primary. Inside a transaction the
    /// transaction's replaces the handle's (Transactions spec).
    pub(crate) fn read_preference(
        &self,
        given: Option<&ReadPreference>,
        session: Option<&Session>,
    ) -> ReadPreference {
        if let Some(p) = session.and_then(|s| s.transaction_read_preference(given)) {
            return p;
        }
        given
            .or(self.read_preference.as_ref())
            .cloned()
            .unwrap_or_default()
    }

    /// This handle with its own read/write concern (unset: inherited).
    pub fn with_concerns(
        mut self,
        read: Option<RawDocumentBuf>,
        write: Option<RawDocumentBuf>,
    ) -> Collection {
        self.read_concern = read.or(self.read_concern);
        self.write_concern = write.or(self.write_concern);
        self
    }

    /// `options` with this collection's read concern, outside transactions.
    pub(crate) fn reading<'a>(&self, options: &OpOptions<'a>) -> Result<OpOptions<'a>> {
        self.with_concern(options, crate::concern::READ, self.read_concern.as_ref())
    }

    /// `options` with this collection's write concern, outside transactions.
    pub(crate) fn writing<'a>(&self, options: &OpOptions<'a>) -> Result<OpOptions<'a>> {
        self.with_concern(options, crate::concern::WRITE, self.write_concern.as_ref())
    }

    fn with_concern<'a>(
        &self,
        options: &OpOptions<'a>,
        key: &bson::raw::CStr,
        concern: Option<&RawDocumentBuf>,
    ) -> Result<OpOptions<'a>> {
        let timeout_ms = self.resolve(options.timeout_ms, options.session)?;
        let options = &OpOptions {
            extra: without_caller_max_time(options.extra.as_ref(), timeout_ms)?,
            ..options.clone()
        };
        if options.session.is_some_and(Session::in_transaction) {
            return Ok(options.clone());
        }
        let csot = timeout_ms.is_some();
        let concern = match concern {
            Some(c) if csot && key == crate::concern::WRITE => {
                Some(crate::concern::without_wtimeout(c)?)
            }
            other => other.cloned(),
        };
        let extra = crate::concern::with_default(options.extra.as_ref(), key, concern.as_ref())?;
        Ok(OpOptions {
            extra,
            ..options.clone()
        })
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

    /// The operation's timeoutMS (operation, else collection), or the error
    /// this handle was built with. A session's defaultTimeoutMS is not
    /// consulted: it is for the session's own operations (CSOT spec); a
    /// running withTransaction body's deadline is.
    fn resolve(&self, op_timeout: Option<u64>, session: Option<&Session>) -> Result<Option<u64>> {
        if let Some(e) = self.db.config_error.as_ref().or(self.config_error.as_ref()) {
            return Err(e.clone());
        }
        // Inside a withTransaction body under CSOT the call's deadline rules.
        let callback = session
            .map(|s| s.callback_timeout(op_timeout))
            .transpose()?
            .flatten();
        Ok(resolve_timeout_ms(op_timeout, callback, &[self.timeout_ms]))
    }

    /// A handle whose options were invalid: every operation returns `error`.
    // Called by the WIT glue, which only wasm32 builds compile.
    #[cfg_attr(
        not(all(feature = "component", target_arch = "wasm32")),
        allow(dead_code)
    )]
    pub(crate) fn poisoned(mut self, error: Option<Error>) -> Collection {
        self.config_error = self.config_error.or(error);
        self
    }

    pub async fn find(&self, filter: RawDocumentBuf, options: &FindOptions<'_>) -> Result<Cursor> {
        let typed = options::Typed {
            hint: options.hint.as_ref(),
            collation: options.collation.as_ref(),
            comment: options.comment.as_ref(),
            let_vars: options.let_vars.as_ref(),
            max_await_time_ms: options.max_await_time_ms,
            read_concern: options.read_concern.as_ref(),
            ..Default::default()
        };
        let options = &FindOptions {
            extra: typed.merged_into(options.extra.as_ref())?,
            ..options.clone()
        };
        let timeout_ms = self.resolve(options.timeout_ms, options.session)?;
        let flag = |name: &str| {
            options
                .extra
                .as_ref()
                .is_some_and(|e| e.get_bool(name).unwrap_or(false))
        };
        let (tailable, await_data) = (flag("tailable"), flag("awaitData"));
        let comment = comment_of(options.extra.as_deref());
        // maxAwaitTimeMS is for getMore, not for find itself.
        let (max_await, extra) = max_await_time(options.extra.as_ref(), timeout_ms)?;
        let extra = without_caller_max_time(extra.as_ref(), timeout_ms)?;
        let shape = CursorShape {
            tailable,
            await_data,
            writes: false,
        };
        let (mode, max_time) = cursor_timeout(options.timeout_mode, timeout_ms, shape)?;
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
            extra: match options.session.is_some_and(Session::in_transaction) {
                true => extra,
                false => crate::concern::with_default(
                    extra.as_ref(),
                    crate::concern::READ,
                    self.read_concern.as_ref(),
                )?,
            },
            max_time,
            read_preference: self
                .read_preference(options.read_preference.as_ref(), options.session),
        };
        let reply = self
            .db
            .client
            .execute_within(&mut op, &budget, Some(&session), None)
            .await?;
        let settings = CursorSettings {
            batch_size: options.batch_size,
            limit: options
                .limit
                .and_then(|l| u64::try_from(l).ok())
                .filter(|&l| l > 0),
            comment,
            mode,
            timeout_ms,
            max_await_ms: max_await.filter(|_| await_data),
        };
        Cursor::new(
            self.db.client.clone(),
            &self.db.name,
            reply,
            settings,
            budget,
            Some(session),
        )
    }

    pub async fn find_one(
        &self,
        filter: RawDocumentBuf,
        options: &FindOptions<'_>,
    ) -> Result<Option<RawDocumentBuf>> {
        let options = FindOptions {
            limit: Some(-1),
            batch_size: None,
            ..options.clone()
        };
        let mut cursor = self.find(filter, &options).await?;
        Ok(cursor.next_batch().await?.documents.into_iter().next())
    }

    pub async fn aggregate(
        &self,
        pipeline: &[RawDocumentBuf],
        batch_size: Option<u32>,
        options: &OpOptions<'_>,
        timeout_mode: Option<TimeoutMode>,
    ) -> Result<Cursor> {
        let options = &options.flattened()?;
        let body = aggregate_command(self.name.as_str().into(), pipeline, batch_size);
        // $out/$merge write: not retried as a read, and the write concern applies.
        let writes = pipeline_writes(pipeline);
        let (retry, options) = if writes {
            (Retryability::None, self.writing(&self.reading(options)?)?)
        } else {
            (Retryability::Read, self.reading(options)?)
        };
        self.cursor_command(body, batch_size, &options, timeout_mode, retry, writes)
            .await
    }

    async fn cursor_command(
        &self,
        mut body: RawDocumentBuf,
        batch_size: Option<u32>,
        options: &OpOptions<'_>,
        timeout_mode: Option<TimeoutMode>,
        retry: Retryability,
        writes: bool,
    ) -> Result<Cursor> {
        let options = &options.flattened()?;
        let timeout_ms = self.resolve(options.timeout_ms, options.session)?;
        // maxAwaitTimeMS is for getMore, not for the command itself.
        let (max_await, extra) = max_await_time(options.extra.as_ref(), timeout_ms)?;
        let shape = CursorShape {
            tailable: false,
            await_data: max_await.is_some(),
            writes,
        };
        let (mode, max_time) = cursor_timeout(timeout_mode, timeout_ms, shape)?;
        let extra = without_caller_max_time(extra.as_ref(), timeout_ms)?;
        crate::operation::merge_extra(&mut body, extra.as_deref())?;
        let comment = comment_of(Some(&body));
        let budget = self.db.client.start_timeout(timeout_ms);
        // The cursor keeps the session (implicit or not) for its getMores.
        let session = self.db.client.session_for(options.session);
        let pref = self.read_preference(options.read_preference.as_ref(), options.session);
        let mut op = CursorCommand(RunCommand {
            max_time,
            ..command_op(&self.db.name, body, retry, pref.clone())
        });
        // $out/$merge: a write that reads by preference on 5.0+ (CRUD spec).
        if writes {
            op.0.criteria = Criteria::WriteStage(pref);
        }
        let reply = self
            .db
            .client
            .execute_within(&mut op, &budget, Some(&session), None)
            .await?;
        let settings = CursorSettings {
            batch_size,
            comment,
            mode,
            timeout_ms,
            max_await_ms: max_await,
            ..Default::default()
        };
        Cursor::new(
            self.db.client.clone(),
            &self.db.name,
            reply,
            settings,
            budget,
            Some(session),
        )
    }

    /// Runs one hand-built command for this collection: a read, a
    /// retryable write, or a write sent once.
    async fn command(
        &self,
        body: RawDocumentBuf,
        options: &OpOptions<'_>,
        retry: Retryability,
    ) -> Result<RawDocumentBuf> {
        let options = &options.flattened()?;
        let options = match retry {
            Retryability::Read => self.reading(options)?,
            _ => self.writing(options)?,
        };
        self.command_as_given(body, &options, retry).await
    }

    /// `command` without the handles' read and write concerns: what the
    /// caller's options hold is sent, nothing more.
    async fn command_as_given(
        &self,
        mut body: RawDocumentBuf,
        options: &OpOptions<'_>,
        retry: Retryability,
    ) -> Result<RawDocumentBuf> {
        let options = &options.flattened()?;
        crate::operation::merge_extra(&mut body, options.extra.as_deref())?;
        let pref = self.read_preference(options.read_preference.as_ref(), options.session);
        let mut op = command_op(&self.db.name, body, retry, pref);
        let timeout = self.resolve(options.timeout_ms, options.session)?;
        self.db
            .client
            .execute(&mut op, timeout, options.session)
            .await
    }

    /// A change stream on this collection (options by server names in `extra`).
    pub async fn watch(
        &self,
        pipeline: &[RawDocumentBuf],
        batch_size: Option<u32>,
        options: &OpOptions<'_>,
    ) -> Result<Cursor> {
        let options = &options.flattened()?;
        let timeout_ms = self.resolve(options.timeout_ms, options.session)?;
        let target = RawBson::String(self.name.clone());
        crate::change_stream::open(
            &self.db.client,
            &self.db.name,
            target,
            pipeline,
            options,
            batch_size,
            timeout_ms,
        )
        .await
    }

    /// Renames this collection within its database (`renameCollection` on admin).
    pub async fn rename(&self, to: &str, options: &OpOptions<'_>) -> Result<()> {
        let options = &options.flattened()?;
        let mut body = rawdoc! { "renameCollection": self.namespace(), "to": format!("{}.{to}", self.db.name) };
        crate::operation::merge_extra(&mut body, self.writing(options)?.extra.as_deref())?;
        let mut op = RunCommand::new("admin", body, Criteria::Write);
        let timeout = self.resolve(options.timeout_ms, options.session)?;
        self.db
            .client
            .execute(&mut op, timeout, options.session)
            .await
            .map(|_| ())
    }

    pub async fn count_documents(
        &self,
        filter: RawDocumentBuf,
        options: &OpOptions<'_>,
    ) -> Result<i64> {
        let options = &options.flattened()?;
        let mut pipeline = vec![rawdoc! { "$match": filter }];
        let extra = options.extra.as_ref();
        if let Some(skip) = extra.and_then(|e| e.get("skip").ok().flatten()) {
            pipeline.push(rawdoc! { "$skip": skip });
        }
        if let Some(limit) = extra.and_then(|e| e.get("limit").ok().flatten()) {
            pipeline.push(rawdoc! { "$limit": limit });
        }
        pipeline.push(rawdoc! { "$group": { "_id": 1, "n": { "$sum": 1 } } });
        let opts = writes::strip(options, &["skip", "limit"])?;
        let mut cursor = self.aggregate(&pipeline, None, &opts, None).await?;
        let batch = cursor.next_batch().await?;
        match batch.documents.first() {
            None => Ok(0),
            Some(d) => number(d, "n"),
        }
    }

    /// The deprecated `count` command with a filter (CRUD spec).
    pub async fn count(&self, filter: RawDocumentBuf, options: &OpOptions<'_>) -> Result<i64> {
        let body = rawdoc! { "count": self.name.as_str(), "query": filter };
        let reply = self.command(body, options, Retryability::Read).await?;
        number(&reply, "n")
    }

    pub async fn estimated_document_count(&self, options: &OpOptions<'_>) -> Result<i64> {
        let reply = self
            .command(
                rawdoc! { "count": self.name.as_str() },
                options,
                Retryability::Read,
            )
            .await?;
        number(&reply, "n")
    }

    /// The distinct values, in the server's order.
    pub async fn distinct(
        &self,
        field: &str,
        filter: RawDocumentBuf,
        options: &OpOptions<'_>,
    ) -> Result<Vec<RawBson>> {
        let body = rawdoc! { "distinct": self.name.as_str(), "key": field, "query": filter };
        let reply = self.command(body, options, Retryability::Read).await?;
        distinct_values(&reply)
    }

    pub async fn drop(&self, options: &OpOptions<'_>) -> Result<()> {
        match self
            .command(
                rawdoc! { "drop": self.name.as_str() },
                options,
                Retryability::None,
            )
            .await
        {
            // Dropping a missing collection is not an error (NamespaceNotFound).
            Err(e) if e.code == Some(26) || e.message.contains("ns not found") => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// `maxAwaitTimeMS` taken out of `extra`: it is for getMore, not for the
/// command that opens the cursor.
fn max_await_time(
    extra: Option<&RawDocumentBuf>,
    timeout_ms: Option<u64>,
) -> Result<(Option<u64>, Option<RawDocumentBuf>)> {
    let (value, rest) = take_field(extra, "maxAwaitTimeMS")?;
    let ms = crate::csot::max_await_ms(value.as_ref().map(|v| v.as_raw_bson_ref()), timeout_ms)?;
    Ok((ms, rest))
}

/// Reads go to a server `read_preference` allows and may be retried;
/// everything else is a write.
fn command_op(
    db: &str,
    body: RawDocumentBuf,
    retry: Retryability,
    read_preference: ReadPreference,
) -> RunCommand {
    match retry {
        Retryability::Read => RunCommand {
            criteria: Criteria::Read(read_preference),
            ..RunCommand::read(db, body)
        },
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
    // A batch of 0 would ask the server to return nothing while $out or
    // $merge write: such a pipeline leaves it out (CRUD spec).
    let batch_size = batch_size.filter(|&b| b != 0 || !pipeline_writes(pipeline));
    if let Some(b) = batch_size {
        cursor_opts.append(cstr!("batchSize"), i64::from(b));
    }
    rawdoc! { "aggregate": target, "pipeline": array(pipeline), "cursor": cursor_opts }
}

/// A command's `comment`, which its cursor's getMores carry too.
pub(crate) fn comment_of(command: Option<&bson::RawDocument>) -> Option<RawBson> {
    command?.get("comment").ok().flatten().map(RawBson::from)
}

/// `$out` and `$merge` make an aggregate a write: not retried as a read.
pub(crate) fn pipeline_writes(pipeline: &[RawDocumentBuf]) -> bool {
    pipeline.last().and_then(|stage| stage.iter().next()).is_some_and(|first| {
        matches!(first, Ok((name, _)) if name.as_str() == "$out" || name.as_str() == "$merge")
    })
}

fn array(docs: &[RawDocumentBuf]) -> RawArrayBuf {
    let mut arr = RawArrayBuf::new();
    for d in docs {
        arr.push(d.clone());
    }
    arr
}

/// The distinct values of a reply.
pub(crate) fn distinct_values(reply: &RawDocument) -> Result<Vec<RawBson>> {
    let values = reply
        .get_array("values")
        .map_err(|_| Error::protocol("distinct reply has no values"))?;
    values.into_iter().map(|v| Ok(RawBson::from(v?))).collect()
}

pub(crate) fn number(doc: &RawDocument, key: &str) -> Result<i64> {
    crate::wire::raw::int_field(doc, key)
        .ok_or_else(|| Error::protocol(format!("reply has no numeric {key}")))
}

#[cfg(test)]
mod tests {
    use crate::sdam::selection::{ReadMode, ReadPreference};
    use crate::Client;

    #[test]
    fn reads_take_the_operations_read_preference_else_the_handles_else_the_uris() {
        let uri = "mongodb://a/?readPreference=secondary&readPreferenceTags=dc:ny&maxStalenessSeconds=120";
        let client = Client::connect(uri).unwrap();
        let coll = client.database("d", None).collection("c", None);
        let from_uri = coll.read_preference(None, None);
        assert_eq!(from_uri.mode, ReadMode::Secondary);
        assert_eq!(from_uri.tag_sets.len(), 1);
        assert_eq!(from_uri.max_staleness_seconds, Some(120));
        let nearest = ReadPreference::from(ReadMode::Nearest);
        let coll = coll.with_read_preference(Some(nearest.clone()));
        assert_eq!(coll.read_preference(None, None), nearest);
        let given = ReadPreference::from(ReadMode::PrimaryPreferred);
        assert_eq!(coll.read_preference(Some(&given), None), given);
        // Without any: primary.
        let plain = Client::connect("mongodb://a/").unwrap();
        let coll = plain.database("d", None).collection("c", None);
        assert_eq!(coll.read_preference(None, None), ReadPreference::primary());
    }

    #[test]
    fn a_writing_pipeline_leaves_out_a_batch_size_of_0() {
        use bson::rawdoc;
        let cursor = |pipeline: &[bson::RawDocumentBuf], b| {
            let cmd = super::aggregate_command("c".into(), pipeline, b);
            cmd.get_document("cursor").unwrap().to_owned()
        };
        let merge = [
            rawdoc! { "$match": {} },
            rawdoc! { "$merge": { "into": "o" } },
        ];
        let read = [rawdoc! { "$match": {} }];
        assert_eq!(cursor(&merge, Some(0)), rawdoc! {});
        assert_eq!(cursor(&merge, Some(2)), rawdoc! { "batchSize": 2_i64 });
        assert_eq!(cursor(&read, Some(0)), rawdoc! { "batchSize": 0_i64 });
        assert_eq!(cursor(&read, None), rawdoc! {});
    }

    #[test]
    fn the_comment_is_taken_from_the_command() {
        use bson::{rawdoc, RawBson};
        let cmd = rawdoc! { "find": "c", "comment": { "k": 1 } };
        assert_eq!(
            super::comment_of(Some(&cmd)),
            Some(RawBson::Document(rawdoc! { "k": 1 }))
        );
        assert_eq!(super::comment_of(Some(&rawdoc! { "find": "c" })), None);
    }
}
