use crate::client::{list_names, Client};
use crate::collection::Collection;
use crate::collection::OpOptions;
use crate::cursor::{Cursor, TimeoutMode};
use crate::error::Result;
use crate::operation::{CursorCommand, RunCommand};
use crate::sdam::selection::{Criteria, ReadMode};
use crate::session::Session;
use bson::{rawdoc, RawBson, RawDocumentBuf};

#[derive(Clone)]
pub struct Database {
    pub(crate) client: Client,
    pub(crate) name: String,
    /// Already resolved against the client's.
    pub(crate) timeout_ms: Option<u64>,
}

/// Options for a command the caller writes by hand.
#[derive(Default, Clone)]
pub struct RunCommandOptions<'a> {
    pub timeout_ms: Option<u64>,
    pub session: Option<&'a Session>,
    pub read_preference: Option<ReadMode>,
}

impl Database {
    pub(crate) fn new(client: Client, name: &str, timeout_ms: Option<u64>) -> Database {
        Database {
            client,
            name: name.to_string(),
            timeout_ms,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeout_ms(&self) -> Option<u64> {
        self.timeout_ms
    }

    /// A collection handle; `timeout_ms` `None` inherits the database's.
    pub fn collection(&self, name: &str, timeout_ms: Option<u64>) -> Collection {
        Collection::new(self.clone(), name, timeout_ms.or(self.timeout_ms))
    }

    /// Runs `command` as given; returns the reply (an ok:0 reply is an error).
    pub fn run_command(
        &self,
        command: RawDocumentBuf,
        options: &RunCommandOptions,
    ) -> Result<RawDocumentBuf> {
        let criteria = Criteria::Read(options.read_preference.unwrap_or(ReadMode::Primary));
        let mut op = RunCommand::new(&self.name, command, criteria);
        let timeout = options.timeout_ms.or(self.timeout_ms);
        self.client.execute(&mut op, timeout, options.session)
    }

    /// Runs a command whose reply is a cursor and returns that cursor. As a
    /// command the caller wrote, it is not retried.
    pub fn run_cursor_command(
        &self,
        command: RawDocumentBuf,
        timeout_ms: Option<u64>,
        mode: Option<TimeoutMode>,
        batch_size: Option<u32>,
        session: Option<&Session>,
    ) -> Result<Cursor> {
        let criteria = Criteria::Read(ReadMode::Primary);
        let op = RunCommand::new(&self.name, command, criteria);
        self.cursor_command(op, timeout_ms, mode, batch_size, session)
    }

    /// `listCollections` (a retryable read), as a cursor.
    pub fn list_collections(
        &self,
        filter: RawDocumentBuf,
        batch_size: Option<u32>,
        options: &OpOptions,
        mode: Option<TimeoutMode>,
    ) -> Result<Cursor> {
        let mut cursor_opts = RawDocumentBuf::new();
        if let Some(b) = batch_size {
            cursor_opts.append(bson::cstr!("batchSize"), i64::from(b));
        }
        let mut command = rawdoc! { "listCollections": 1, "filter": filter, "cursor": cursor_opts };
        crate::operation::merge_extra(&mut command, options.extra.as_deref())?;
        let op = RunCommand::read(&self.name, command);
        self.cursor_command(op, options.timeout_ms, mode, batch_size, options.session)
    }

    /// A database-level `aggregate: 1`; retried unless the pipeline writes.
    pub fn aggregate(
        &self,
        pipeline: &[RawDocumentBuf],
        batch_size: Option<u32>,
        options: &OpOptions,
        mode: Option<TimeoutMode>,
    ) -> Result<Cursor> {
        let mut command = crate::collection::aggregate_command(1.into(), pipeline, batch_size);
        crate::operation::merge_extra(&mut command, options.extra.as_deref())?;
        let op = if crate::collection::pipeline_writes(pipeline) {
            RunCommand::new(&self.name, command, Criteria::Write)
        } else {
            RunCommand::read(&self.name, command)
        };
        self.cursor_command(op, options.timeout_ms, mode, batch_size, options.session)
    }

    fn cursor_command(
        &self,
        op: RunCommand,
        timeout_ms: Option<u64>,
        mode: Option<TimeoutMode>,
        batch_size: Option<u32>,
        session: Option<&Session>,
    ) -> Result<Cursor> {
        let timeout_ms = timeout_ms.or(self.timeout_ms);
        let budget = self.client.start_timeout(timeout_ms);
        let mut op = CursorCommand(op);
        // The cursor keeps the session (implicit or not) for its getMores.
        let session = self.client.session_for(session);
        let parsed = self
            .client
            .execute_within(&mut op, &budget, Some(&session), None)?;
        Cursor::new(
            self.client.clone(),
            &self.name,
            parsed,
            batch_size,
            mode,
            timeout_ms,
            budget,
            Some(session),
        )
    }

    pub fn list_collection_names(
        &self,
        filter: RawDocumentBuf,
        timeout_ms: Option<u64>,
        session: Option<&Session>,
    ) -> Result<Vec<String>> {
        let opts = RunCommandOptions {
            timeout_ms,
            session,
            read_preference: None,
        };
        let cmd = rawdoc! { "listCollections": 1, "filter": filter, "nameOnly": true };
        let reply = self.run_command(cmd, &opts)?;
        let cursor = reply
            .get_document("cursor")
            .map_err(|_| crate::Error::protocol("listCollections reply has no cursor"))?;
        list_names(&cursor.to_owned(), "firstBatch")
    }

    /// A change stream on every collection of this database.
    pub fn watch(
        &self,
        pipeline: &[RawDocumentBuf],
        batch_size: Option<u32>,
        options: &OpOptions,
    ) -> Result<Cursor> {
        let timeout_ms = options.timeout_ms.or(self.timeout_ms);
        crate::change_stream::open(
            &self.client,
            &self.name,
            RawBson::Int32(1),
            pipeline,
            options,
            batch_size,
            timeout_ms,
        )
    }

    /// A GridFS bucket in this database.
    pub fn gridfs_bucket(&self, options: crate::gridfs::BucketOptions) -> crate::gridfs::Bucket {
        crate::gridfs::Bucket::new(self, options)
    }

    pub fn drop(&self, timeout_ms: Option<u64>, session: Option<&Session>) -> Result<()> {
        let opts = RunCommandOptions {
            timeout_ms,
            session,
            read_preference: None,
        };
        self.run_command(rawdoc! { "dropDatabase": 1 }, &opts)
            .map(|_| ())
    }
}
