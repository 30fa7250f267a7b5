//! GridFS (GridFS spec): files as a `<bucket>.files` document plus
//! `<bucket>.chunks` of `chunkSizeBytes` each. Every command of one GridFS
//! operation, or of one stream from open to close, shares one CSOT budget.

mod download;
mod upload;

pub use download::DownloadStream;
pub use upload::UploadStream;

use crate::client::Client;
use crate::csot::OpTimeout;
use crate::cursor::Cursor;
use crate::database::Database;
use crate::error::{Error, Result};
use crate::operation::{CursorCommand, CursorReply, Find, Operation, RunCommand};
use crate::sdam::selection::Criteria;
use crate::session::Session;
use bson::{rawdoc, RawBson, RawDocument, RawDocumentBuf};
use std::cell::Cell;
use std::rc::Rc;

pub const DEFAULT_CHUNK_SIZE: u32 = 255 * 1024;

#[derive(Debug, Clone, Default)]
pub struct BucketOptions {
    pub bucket_name: Option<String>,
    pub chunk_size_bytes: Option<u32>,
    pub timeout_ms: Option<u64>,
}

/// Per-call options: a timeout and a session.
#[derive(Debug, Clone, Default)]
pub struct GridfsOptions<'a> {
    pub timeout_ms: Option<u64>,
    pub session: Option<&'a Session>,
}

#[derive(Clone)]
pub struct Bucket {
    client: Client,
    db: String,
    name: String,
    chunk_size: u32,
    timeout_ms: Option<u64>,
    /// The spec's index check runs once per bucket object, before its first upload.
    indexes_checked: Rc<Cell<bool>>,
}

/// What a GridFS call runs under: its budget and session.
pub(crate) struct Call<'a> {
    pub budget: OpTimeout,
    pub session: Option<&'a Session>,
}

impl Bucket {
    /// A bucket handle; no I/O until an operation runs. A zero chunk size
    /// is refused when an upload opens.
    pub fn new(db: &Database, options: BucketOptions) -> Bucket {
        Bucket {
            client: db.client.clone(),
            db: db.name.clone(),
            name: options.bucket_name.unwrap_or_else(|| "fs".to_string()),
            chunk_size: options.chunk_size_bytes.unwrap_or(DEFAULT_CHUNK_SIZE),
            timeout_ms: crate::csot::resolve_timeout_ms(
                None,
                None,
                &[options.timeout_ms, db.timeout_ms],
            ),
            indexes_checked: Rc::new(Cell::new(false)),
        }
    }

    fn files(&self) -> String {
        format!("{}.files", self.name)
    }

    fn chunks(&self) -> String {
        format!("{}.chunks", self.name)
    }

    pub(crate) fn call<'a>(&self, options: &GridfsOptions<'a>) -> Call<'a> {
        let timeout = crate::csot::resolve_timeout_ms(options.timeout_ms, None, &[self.timeout_ms]);
        Call {
            budget: self.client.start_timeout(timeout),
            session: options.session,
        }
    }

    pub(crate) async fn run<O: Operation>(&self, op: &mut O, call: &Call<'_>) -> Result<O::Output> {
        self.client
            .execute_within(op, &call.budget, call.session, None)
            .await
    }

    async fn command(&self, body: RawDocumentBuf, call: &Call<'_>) -> Result<RawDocumentBuf> {
        let mut op = RunCommand::new(&self.db, body, Criteria::Write);
        self.run(&mut op, call).await
    }

    /// The files document with this `_id`, or FileNotFound.
    async fn file_by_id(&self, id: &RawBson, call: &Call<'_>) -> Result<RawDocumentBuf> {
        self.find_file(rawdoc! { "_id": id.clone() }, None, 0, call)
            .await?
            .ok_or_else(|| Error::invalid_argument(format!("FileNotFound: no file with id {id:?}")))
    }

    async fn find_file(
        &self,
        filter: RawDocumentBuf,
        sort: Option<RawDocumentBuf>,
        skip: i64,
        call: &Call<'_>,
    ) -> Result<Option<RawDocumentBuf>> {
        let mut op = Find {
            db: self.db.clone(),
            coll: self.files(),
            filter,
            sort,
            projection: None,
            skip: Some(skip),
            limit: Some(-1),
            batch_size: None,
            extra: None,
            max_time: true,
            read_preference: crate::sdam::selection::ReadPreference::primary(),
        };
        let reply: CursorReply = self.run(&mut op, call).await?;
        let first = reply.batch.iter().next().map(RawDocument::to_owned);
        Ok(first)
    }

    pub async fn upload_from_bytes(
        &self,
        filename: &str,
        data: &[u8],
        options: UploadOptions<'_>,
    ) -> Result<RawBson> {
        let mut stream = self.open_upload_stream(filename, options).await?;
        stream.write(data).await?;
        stream.close().await?;
        Ok(stream.id().clone())
    }

    pub async fn open_upload_stream(
        &self,
        filename: &str,
        options: UploadOptions<'_>,
    ) -> Result<UploadStream> {
        let call = self.call(&GridfsOptions {
            timeout_ms: options.timeout_ms,
            session: options.session,
        });
        let budget = call.budget;
        let session = options.session.cloned();
        UploadStream::open(self.clone(), filename, options, budget, session).await
    }

    pub async fn open_download_stream(
        &self,
        id: &RawBson,
        options: &GridfsOptions<'_>,
    ) -> Result<DownloadStream> {
        let call = self.call(options);
        let file = self.file_by_id(id, &call).await?;
        DownloadStream::open(self.clone(), file, call.budget, options.session.cloned())
    }

    pub async fn download_to_bytes(
        &self,
        id: &RawBson,
        options: &GridfsOptions<'_>,
    ) -> Result<Vec<u8>> {
        self.open_download_stream(id, options)
            .await?
            .read_to_end()
            .await
    }

    /// `revision` 0 is the first upload, -1 (the default) the newest.
    pub async fn download_by_name(
        &self,
        filename: &str,
        revision: i32,
        options: &GridfsOptions<'_>,
    ) -> Result<Vec<u8>> {
        let call = self.call(options);
        let (direction, skip) = if revision >= 0 {
            (1, revision as i64)
        } else {
            (-1, -(revision as i64) - 1)
        };
        let sort = rawdoc! { "uploadDate": direction };
        let file = self
            .find_file(rawdoc! { "filename": filename }, Some(sort), skip, &call)
            .await?
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "FileNotFound: no file {filename:?} at revision {revision}"
                ))
            })?;
        DownloadStream::open(self.clone(), file, call.budget, options.session.cloned())?
            .read_to_end()
            .await
    }

    /// Deletes the files document, then its chunks (FileNotFound if there was none).
    pub async fn delete(&self, id: &RawBson, options: &GridfsOptions<'_>) -> Result<()> {
        let call = self.call(options);
        let deleted = self
            .delete_where(&self.files(), rawdoc! { "_id": id.clone() }, &call)
            .await?;
        self.delete_where(&self.chunks(), rawdoc! { "files_id": id.clone() }, &call)
            .await?;
        if deleted == 0 {
            return Err(Error::invalid_argument(format!(
                "FileNotFound: no file with id {id:?}"
            )));
        }
        Ok(())
    }

    async fn delete_where(
        &self,
        coll: &str,
        filter: RawDocumentBuf,
        call: &Call<'_>,
    ) -> Result<i64> {
        let body = rawdoc! { "delete": coll, "deletes": [{ "q": filter, "limit": 0 }] };
        let reply = self.command(body, call).await?;
        crate::operation::check_write_errors(&reply)?;
        Ok(reply.get_i32("n").map(i64::from).unwrap_or(0))
    }

    /// A cursor over the files collection.
    pub async fn find(
        &self,
        filter: RawDocumentBuf,
        options: &GridfsOptions<'_>,
    ) -> Result<Cursor> {
        let call = self.call(options);
        let body = rawdoc! { "find": self.files(), "filter": filter };
        let session = self.client.session_for(options.session);
        let mut op = CursorCommand(RunCommand::read(&self.db, body));
        let reply = self
            .client
            .execute_within(&mut op, &call.budget, Some(&session), None)
            .await?;
        let timeout_ms =
            crate::csot::resolve_timeout_ms(options.timeout_ms, None, &[self.timeout_ms]);
        let settings = crate::cursor::CursorSettings {
            timeout_ms,
            ..Default::default()
        };
        Cursor::new(
            self.client.clone(),
            &self.db,
            reply,
            settings,
            call.budget,
            Some(session),
        )
    }

    pub async fn rename(
        &self,
        id: &RawBson,
        new_filename: &str,
        options: &GridfsOptions<'_>,
    ) -> Result<()> {
        let call = self.call(options);
        if self
            .set_filename(rawdoc! { "_id": id.clone() }, false, new_filename, &call)
            .await?
            == 0
        {
            return Err(Error::invalid_argument(format!(
                "FileNotFound: no file with id {id:?}"
            )));
        }
        Ok(())
    }

    /// Sets the filename of the files documents `filter` matches (the first,
    /// or all when `multi`); how many matched.
    async fn set_filename(
        &self,
        filter: RawDocumentBuf,
        multi: bool,
        new_filename: &str,
        call: &Call<'_>,
    ) -> Result<i32> {
        let update = rawdoc! {
            "q": filter,
            "u": { "$set": { "filename": new_filename } },
            "multi": multi,
        };
        let reply = self
            .command(
                rawdoc! { "update": self.files(), "updates": [update] },
                call,
            )
            .await?;
        crate::operation::check_write_errors(&reply)?;
        Ok(reply.get_i32("n").unwrap_or(0))
    }

    /// Every revision named `filename`: finds their ids, deletes those files
    /// documents, then their chunks (GridFS spec: delete_by_name);
    /// FileNotFound when there is none. One budget for all of it.
    pub async fn delete_by_name(&self, filename: &str, options: &GridfsOptions<'_>) -> Result<()> {
        let call = self.call(options);
        let ids = self.ids_named(filename, &call).await?;
        if ids.is_empty() {
            return Err(Error::invalid_argument(format!(
                "FileNotFound: no file named {filename:?}"
            )));
        }
        let ids = RawBson::Array(ids);
        self.delete_where(
            &self.files(),
            rawdoc! { "_id": { "$in": ids.clone() } },
            &call,
        )
        .await?;
        self.delete_where(
            &self.chunks(),
            rawdoc! { "files_id": { "$in": ids } },
            &call,
        )
        .await?;
        Ok(())
    }

    /// The `_id` of every files document named `filename`, the cursor
    /// iterated to its end under the call's budget.
    async fn ids_named(&self, filename: &str, call: &Call<'_>) -> Result<bson::RawArrayBuf> {
        let mut op = Find {
            db: self.db.clone(),
            coll: self.files(),
            filter: rawdoc! { "filename": filename },
            sort: None,
            projection: Some(rawdoc! { "_id": 1 }),
            skip: None,
            limit: None,
            batch_size: None,
            extra: None,
            max_time: true,
            read_preference: crate::sdam::selection::ReadPreference::primary(),
        };
        // The cursor's getMores need the session its find ran under.
        let session = self.client.session_for(call.session);
        let reply: CursorReply = self
            .client
            .execute_within(&mut op, &call.budget, Some(&session), None)
            .await?;
        let settings = crate::cursor::CursorSettings::default();
        let mut cursor = Cursor::new(
            self.client.clone(),
            &self.db,
            reply,
            settings,
            call.budget,
            Some(session),
        )?;
        let mut ids = bson::RawArrayBuf::new();
        loop {
            let batch = cursor.next_batch().await?;
            for d in &batch.documents {
                let id = d
                    .get("_id")
                    .map_err(|e| Error::protocol(format!("files document: {e}")))?
                    .ok_or_else(|| Error::protocol("files document without _id"))?;
                ids.push(id.to_owned());
            }
            if batch.exhausted {
                return Ok(ids);
            }
        }
    }

    /// Sets the filename of every revision named `filename` (GridFS spec:
    /// rename_by_name, one update of them all); FileNotFound when none matched.
    pub async fn rename_by_name(
        &self,
        filename: &str,
        new_filename: &str,
        options: &GridfsOptions<'_>,
    ) -> Result<()> {
        let call = self.call(options);
        let filter = rawdoc! { "filename": filename };
        if self.set_filename(filter, true, new_filename, &call).await? == 0 {
            return Err(Error::invalid_argument(format!(
                "FileNotFound: no file named {filename:?}"
            )));
        }
        Ok(())
    }

    /// Drops both collections.
    pub async fn drop(&self, options: &GridfsOptions<'_>) -> Result<()> {
        let call = self.call(options);
        for coll in [self.files(), self.chunks()] {
            match self.command(rawdoc! { "drop": coll }, &call).await {
                Err(e) if e.code == Some(26) || e.message.contains("ns not found") => {}
                other => {
                    other?;
                }
            }
        }
        Ok(())
    }

    /// The spec's index check before the first upload: when the files
    /// collection is empty, create the two indexes it needs if missing.
    async fn ensure_indexes(&self, call: &Call<'_>) -> Result<()> {
        if self.indexes_checked.get() {
            return Ok(());
        }
        let mut probe = Find {
            db: self.db.clone(),
            coll: self.files(),
            filter: RawDocumentBuf::new(),
            sort: None,
            projection: Some(rawdoc! { "_id": 1 }),
            skip: None,
            limit: Some(-1),
            batch_size: None,
            extra: None,
            max_time: true,
            read_preference: crate::sdam::selection::ReadPreference::primary(),
        };
        if self.run(&mut probe, call).await?.batch.is_empty() {
            self.ensure_index(
                &self.files(),
                rawdoc! { "filename": 1, "uploadDate": 1 },
                false,
                call,
            )
            .await?;
            self.ensure_index(
                &self.chunks(),
                rawdoc! { "files_id": 1, "n": 1 },
                true,
                call,
            )
            .await?;
        }
        self.indexes_checked.set(true);
        Ok(())
    }

    async fn ensure_index(
        &self,
        coll: &str,
        key: RawDocumentBuf,
        unique: bool,
        call: &Call<'_>,
    ) -> Result<()> {
        let mut list = CursorCommand(RunCommand::read(
            &self.db,
            rawdoc! { "listIndexes": coll, "cursor": {} },
        ));
        let existing = match self.run(&mut list, call).await {
            Ok(reply) => reply.batch,
            // NamespaceNotFound: the collection does not exist yet.
            Err(e) if e.code == Some(26) => Default::default(),
            Err(e) => return Err(e),
        };
        if existing
            .iter()
            .any(|ix| ix.get_document("key").ok() == Some(&*key))
        {
            return Ok(());
        }
        let name: Vec<String> = key
            .iter()
            .flatten()
            .map(|(k, v)| format!("{}_{}", k.as_str(), v.as_i32().unwrap_or(1)))
            .collect();
        let mut index = rawdoc! { "key": key, "name": name.join("_") };
        if unique {
            index.append(bson::cstr!("unique"), true);
        }
        self.command(rawdoc! { "createIndexes": coll, "indexes": [index] }, call)
            .await
            .map(|_| ())
    }
}

#[derive(Debug, Clone, Default)]
pub struct UploadOptions<'a> {
    /// A custom file id (default: a new ObjectId).
    pub id: Option<RawBson>,
    pub chunk_size_bytes: Option<u32>,
    pub metadata: Option<RawDocumentBuf>,
    pub timeout_ms: Option<u64>,
    pub session: Option<&'a Session>,
}
