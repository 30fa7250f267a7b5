use crate::client::Client;
use crate::collection::Collection;
use crate::collection::OpOptions;
use crate::cursor::{Cursor, TimeoutMode};
use crate::error::{Error, Result};
use crate::operation::{CursorCommand, RunCommand};
use crate::sdam::selection::{Criteria, ReadMode, ReadPreference};
use crate::session::Session;
use bson::{rawdoc, RawBson, RawDocumentBuf};

#[derive(Clone)]
pub struct Database {
    pub(crate) client: Client,
    pub(crate) name: String,
    /// Already resolved against the client's.
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) read_concern: Option<RawDocumentBuf>,
    pub(crate) write_concern: Option<RawDocumentBuf>,
    /// The default for its collections' reads (the client's, unless set).
    pub(crate) read_preference: Option<ReadPreference>,
    /// Set when the handle's options were invalid: every operation returns it.
    pub(crate) config_error: Option<crate::error::Error>,
}

/// Options for a command the caller writes by hand.
#[derive(Default, Clone)]
pub struct RunCommandOptions<'a> {
    pub timeout_ms: Option<u64>,
    pub session: Option<&'a Session>,
    /// Where the command may run (primary if unset; never a handle's default).
    pub read_preference: Option<ReadPreference>,
}

impl Database {
    pub(crate) fn new(client: Client, name: &str, timeout_ms: Option<u64>) -> Database {
        let read_concern = client.inner.read_concern.clone();
        let write_concern = client.inner.write_concern.clone();
        let read_preference = client.inner.read_preference.clone();
        Database {
            client,
            name: name.to_string(),
            timeout_ms,
            read_concern,
            write_concern,
            read_preference,
            config_error: None,
        }
    }

    /// A handle whose options were invalid: every operation returns `error`.
    // Called by the WIT glue, which only wasm32 builds compile.
    #[cfg_attr(
        not(all(feature = "component", target_arch = "wasm32")),
        allow(dead_code)
    )]
    pub(crate) fn poisoned(mut self, error: Option<crate::error::Error>) -> Database {
        self.config_error = self.config_error.or(error);
        self
    }

    fn check(&self) -> Result<()> {
        match &self.config_error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// This handle with its own read/write concern (unset: inherited).
    pub fn with_concerns(
        mut self,
        read: Option<RawDocumentBuf>,
        write: Option<RawDocumentBuf>,
    ) -> Database {
        self.read_concern = read.or(self.read_concern);
        self.write_concern = write.or(self.write_concern);
        self
    }

    /// This handle with its own default read preference (unset: inherited).
    pub fn with_read_preference(mut self, read_preference: Option<ReadPreference>) -> Database {
        self.read_preference = read_preference.or(self.read_preference);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeout_ms(&self) -> Option<u64> {
        self.timeout_ms
    }

    /// A collection handle; `timeout_ms` `None` inherits the database's.
    pub fn collection(&self, name: &str, timeout_ms: Option<u64>) -> Collection {
        Collection::new(
            self.clone(),
            name,
            crate::csot::resolve_timeout_ms(None, None, &[timeout_ms, self.timeout_ms]),
        )
    }

    /// Runs `command` as given; returns the reply (an ok:0 reply is an error).
    pub async fn run_command(
        &self,
        command: RawDocumentBuf,
        options: &RunCommandOptions<'_>,
    ) -> Result<RawDocumentBuf> {
        self.check()?;
        // The generic command method ignores the handles' defaults (Server
        // Selection spec), not a transaction's (Transactions spec).
        let given = options.read_preference.as_ref();
        let criteria = Criteria::Read(
            options
                .session
                .and_then(|s| s.transaction_read_preference(given))
                .or_else(|| given.cloned())
                .unwrap_or_default(),
        );
        let mut op = RunCommand::new(&self.name, command, criteria);
        let callback = match options.session {
            Some(s) => s.callback_timeout(options.timeout_ms)?,
            None => None,
        };
        let timeout =
            crate::csot::resolve_timeout_ms(options.timeout_ms, callback, &[self.timeout_ms]);
        self.client.execute(&mut op, timeout, options.session).await
    }

    /// Runs a command whose reply is a cursor and returns that cursor. As a
    /// command the caller wrote, it is not retried. `options.extra` holds the
    /// cursor's options, not sent with the command (run-command spec):
    /// `tailable`/`awaitData` (its `cursorType`; the command's own fields
    /// count too) and `maxTimeMS` for each getMore.
    pub async fn run_cursor_command(
        &self,
        command: RawDocumentBuf,
        batch_size: Option<u32>,
        options: &OpOptions<'_>,
        mode: Option<TimeoutMode>,
    ) -> Result<Cursor> {
        let extra = options.extra.as_deref();
        let shape = crate::csot::CursorShape::of_command(&command, extra);
        let get_more_max_time = match extra.and_then(|e| e.get("maxTimeMS").ok().flatten()) {
            None => None,
            Some(_) => match extra.and_then(|e| crate::wire::raw::int_field(e, "maxTimeMS")) {
                Some(ms) if ms >= 0 => Some(ms as u64),
                _ => {
                    return Err(Error::invalid_argument(
                        "maxTimeMS must be a non-negative integer",
                    ))
                }
            },
        };
        let criteria = Criteria::read(ReadMode::Primary);
        let op = RunCommand::new(&self.name, command, criteria);
        // run-command spec: the option's comment is for getMore; the
        // command carries its own.
        let get_more_comment = match &options.comment {
            Some(c) => Some(c.clone()),
            None => crate::collection::comment_of(extra),
        };
        let cursor = CursorOptions {
            shape,
            get_more_max_time,
            get_more_comment,
        };
        self.cursor_command(
            op,
            options.timeout_ms,
            mode,
            batch_size,
            options.session,
            cursor,
        )
        .await
    }

    /// `listCollections` (a retryable read), as a cursor.
    pub async fn list_collections(
        &self,
        filter: RawDocumentBuf,
        batch_size: Option<u32>,
        options: &OpOptions<'_>,
        mode: Option<TimeoutMode>,
    ) -> Result<Cursor> {
        let options = &options.flattened()?;
        let mut cursor_opts = RawDocumentBuf::new();
        if let Some(b) = batch_size {
            cursor_opts.append(bson::cstr!("batchSize"), i64::from(b));
        }
        let mut command = rawdoc! { "listCollections": 1, "filter": filter, "cursor": cursor_opts };
        self.merge_options(&mut command, options)?;
        let op = RunCommand {
            criteria: Criteria::Read(options.read_preference_or_primary()),
            ..RunCommand::read(&self.name, command)
        };
        self.cursor_command(
            op,
            options.timeout_ms,
            mode,
            batch_size,
            options.session,
            CursorOptions::default(),
        )
        .await
    }

    /// A database-level `aggregate: 1`; retried unless the pipeline writes.
    pub async fn aggregate(
        &self,
        pipeline: &[RawDocumentBuf],
        batch_size: Option<u32>,
        options: &OpOptions<'_>,
        mode: Option<TimeoutMode>,
    ) -> Result<Cursor> {
        let options = &options.flattened()?;
        // The handle's defaults (read preference, read and write concern) apply as
        // they do to a collection's aggregate (CRUD spec).
        let defaults = self.collection("$cmd.aggregate", None);
        let writes = crate::collection::pipeline_writes(pipeline);
        let options = &match writes {
            true => defaults.writing(&defaults.reading(options)?)?,
            false => defaults.reading(options)?,
        };
        let pref = defaults.read_preference(options.read_preference.as_ref(), options.session);
        let mut command = crate::collection::aggregate_command(1.into(), pipeline, batch_size);
        self.merge_options(&mut command, options)?;
        let op = match writes {
            true => RunCommand::new(&self.name, command, Criteria::WriteStage(pref)),
            false => RunCommand {
                criteria: Criteria::Read(pref),
                ..RunCommand::read(&self.name, command)
            },
        };
        self.cursor_command(
            op,
            options.timeout_ms,
            mode,
            batch_size,
            options.session,
            CursorOptions::default(),
        )
        .await
    }

    /// `options.extra` into `command`, without a maxTimeMS under CSOT.
    fn merge_options(&self, command: &mut RawDocumentBuf, options: &OpOptions) -> Result<()> {
        let timeout_ms =
            crate::csot::resolve_timeout_ms(options.timeout_ms, None, &[self.timeout_ms]);
        let extra = crate::csot::without_caller_max_time(options.extra.as_ref(), timeout_ms)?;
        crate::operation::merge_extra(command, extra.as_deref())
    }

    async fn cursor_command(
        &self,
        op: RunCommand,
        timeout_ms: Option<u64>,
        mode: Option<TimeoutMode>,
        batch_size: Option<u32>,
        session: Option<&Session>,
        cursor: CursorOptions,
    ) -> Result<Cursor> {
        self.check()?;
        let callback = session
            .map(|s| s.callback_timeout(timeout_ms))
            .transpose()?
            .flatten();
        let timeout_ms = crate::csot::resolve_timeout_ms(timeout_ms, callback, &[self.timeout_ms]);
        let writes = matches!(op.criteria, Criteria::Write | Criteria::WriteStage(_));
        let shape = crate::csot::CursorShape {
            writes,
            ..cursor.shape
        };
        if let Some(ms) = cursor.get_more_max_time {
            // A getMore's maxTimeMS follows the maxAwaitTimeMS rules.
            crate::csot::max_await_ms(Some(bson::RawBsonRef::Int64(ms as i64)), timeout_ms)?;
        }
        let (mode, max_time) = crate::csot::cursor_timeout(mode, timeout_ms, shape)?;
        let budget = self.client.start_timeout(timeout_ms);
        let mut op = CursorCommand(RunCommand { max_time, ..op });
        // The cursor keeps the session (implicit or not) for its getMores.
        let session = self.client.session_for(session);
        let parsed = self
            .client
            .execute_within(&mut op, &budget, Some(&session), None)
            .await?;
        let settings = crate::cursor::CursorSettings {
            batch_size,
            comment: cursor.get_more_comment,
            mode,
            timeout_ms,
            max_await_ms: cursor.get_more_max_time,
            ..Default::default()
        };
        Cursor::new(
            self.client.clone(),
            &self.name,
            parsed,
            settings,
            budget,
            Some(session),
        )
    }

    /// The names from a `listCollections` cursor (a retryable read), every batch.
    pub async fn list_collection_names(
        &self,
        filter: RawDocumentBuf,
        options: &OpOptions<'_>,
    ) -> Result<Vec<String>> {
        let mut extra = rawdoc! { "nameOnly": true };
        crate::operation::merge_extra(&mut extra, options.extra.as_deref())?;
        let opts = OpOptions {
            extra: Some(extra),
            ..options.clone()
        };
        let mut cursor = self.list_collections(filter, None, &opts, None).await?;
        let mut names = Vec::new();
        loop {
            let batch = cursor.next_batch().await?;
            names.extend(
                batch
                    .documents
                    .iter()
                    .filter_map(|d| d.get_str("name").ok().map(str::to_string)),
            );
            if batch.exhausted {
                return Ok(names);
            }
        }
    }

    /// A change stream on every collection of this database.
    pub async fn watch(
        &self,
        pipeline: &[RawDocumentBuf],
        batch_size: Option<u32>,
        options: &OpOptions<'_>,
    ) -> Result<Cursor> {
        self.check()?;
        let options = &options.flattened()?;
        let timeout_ms =
            crate::csot::resolve_timeout_ms(options.timeout_ms, None, &[self.timeout_ms]);
        crate::change_stream::open(
            &self.client,
            &self.name,
            RawBson::Int32(1),
            pipeline,
            options,
            batch_size,
            timeout_ms,
        )
        .await
    }

    /// A GridFS bucket in this database.
    pub fn gridfs_bucket(&self, options: crate::gridfs::BucketOptions) -> crate::gridfs::Bucket {
        crate::gridfs::Bucket::new(self, options)
    }

    pub async fn drop(&self, timeout_ms: Option<u64>, session: Option<&Session>) -> Result<()> {
        self.check()?;
        let opts = RunCommandOptions {
            timeout_ms,
            session,
            read_preference: None,
        };
        self.run_command(rawdoc! { "dropDatabase": 1 }, &opts)
            .await
            .map(|_| ())
    }
}

/// What run-cursor-command knows of the cursor beyond the command itself.
#[derive(Default)]
struct CursorOptions {
    shape: crate::csot::CursorShape,
    /// Sent as each getMore's maxTimeMS.
    get_more_max_time: Option<u64>,
    /// Sent as each getMore's comment.
    get_more_comment: Option<bson::RawBson>,
}
