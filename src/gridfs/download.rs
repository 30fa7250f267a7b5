//! A download stream: chunks come in order through a cursor; each is
//! checked (its `n`, its size) before its bytes are handed out. The chunks'
//! `find` waits for the first read (CSOT prose test 7: the read, not the
//! open, meets a slow `find`), within the budget fixed at the open.

use super::Bucket;
use crate::csot::OpTimeout;
use crate::cursor::Cursor;
use crate::error::{Error, Result};
use crate::operation::{CursorCommand, RunCommand};
use crate::session::Session;
use bson::{rawdoc, RawBson, RawDocumentBuf};
use std::collections::VecDeque;

struct ChunkQuery {
    bucket: Bucket,
    files_id: RawBson,
    session: Option<Session>,
}

pub struct DownloadStream {
    length: u64,
    chunk_size: u64,
    chunk_count: u64,
    next_n: u64,
    cursor: Option<Cursor>,
    /// What the chunks' `find` needs, until the first read sends it.
    query: Option<ChunkQuery>,
    pending: VecDeque<RawDocumentBuf>,
    /// Bytes of the current chunk not yet read.
    current: Vec<u8>,
    offset: usize,
    /// The stream's budget, fixed when it opened (GridFS streams, CSOT spec).
    budget: OpTimeout,
}

impl DownloadStream {
    pub(super) fn open(
        bucket: Bucket,
        file: RawDocumentBuf,
        budget: OpTimeout,
        session: Option<Session>,
    ) -> Result<DownloadStream> {
        let length = number(&file, "length")?;
        let chunk_size = number(&file, "chunkSize")?;
        if chunk_size == 0 && length > 0 {
            return Err(Error::protocol("files document has chunkSize 0"));
        }
        let chunk_count = if length == 0 {
            0
        } else {
            length.div_ceil(chunk_size)
        };
        let query = if chunk_count > 0 {
            let files_id = file
                .get("_id")?
                .map(RawBson::from)
                .ok_or_else(|| Error::protocol("files document has no _id"))?;
            Some(ChunkQuery {
                bucket,
                files_id,
                session,
            })
        } else {
            None
        };
        Ok(DownloadStream {
            length,
            chunk_size,
            chunk_count,
            next_n: 0,
            cursor: None,
            query,
            pending: VecDeque::new(),
            current: Vec::new(),
            offset: 0,
            budget,
        })
    }

    /// Sends the chunks' `find`, once.
    async fn open_cursor(&mut self) -> Result<()> {
        let Some(ChunkQuery {
            bucket,
            files_id,
            session,
        }) = self.query.take()
        else {
            return Ok(());
        };
        let body = rawdoc! { "find": bucket.chunks(), "filter": { "files_id": files_id }, "sort": { "n": 1 } };
        let session = bucket.client.session_for(session.as_ref());
        let mut op = CursorCommand(RunCommand::read(&bucket.db, body));
        let reply = bucket
            .client
            .execute_within(&mut op, &self.budget, Some(&session), None)
            .await?;
        // The stream's budget bounds its chunk reads (a lifetime cursor).
        self.cursor = Some(Cursor::new(
            bucket.client.clone(),
            &bucket.db,
            reply,
            Default::default(),
            self.budget,
            Some(session),
        )?);
        Ok(())
    }

    /// Up to `max` bytes; empty at the end of the file.
    pub async fn read(&mut self, max: usize) -> Result<Vec<u8>> {
        if self.offset == self.current.len() && !self.next_chunk().await? {
            return Ok(Vec::new());
        }
        let end = (self.offset + max.max(1)).min(self.current.len());
        let out = self.current[self.offset..end].to_vec();
        self.offset = end;
        Ok(out)
    }

    pub async fn read_to_end(&mut self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(usize::try_from(self.length).unwrap_or(0));
        while self.next_n < self.chunk_count || self.offset < self.current.len() {
            if self.offset == self.current.len() && !self.next_chunk().await? {
                break;
            }
            out.extend_from_slice(&self.current[self.offset..]);
            self.offset = self.current.len();
        }
        Ok(out)
    }

    /// Loads the next chunk into `current`; false at the end of the file.
    async fn next_chunk(&mut self) -> Result<bool> {
        if self.next_n == self.chunk_count {
            self.close(None).await;
            return Ok(false);
        }
        self.open_cursor().await?;
        // A batch may be empty while the cursor stays open: ask again (each
        // getMore is bounded by the stream's deadline).
        while self.pending.is_empty() {
            let Some(cursor) = self.cursor.as_mut() else {
                break;
            };
            let batch = cursor.next_batch().await?;
            self.pending = batch.documents.into();
            if batch.exhausted {
                break;
            }
        }
        let n = self.next_n;
        let chunk = self.pending.pop_front().ok_or_else(|| {
            Error::protocol(format!(
                "ChunkIsMissing: chunk {n} of {} is missing",
                self.chunk_count
            ))
        })?;
        if number(&chunk, "n").ok() != Some(n) {
            return Err(Error::protocol(format!(
                "ChunkIsMissing: expected chunk {n}, found another"
            )));
        }
        let data = chunk
            .get_binary("data")
            .map_err(|_| Error::protocol(format!("chunk {n} has no binary data")))?;
        let expected = if n + 1 == self.chunk_count {
            self.length - self.chunk_size * n
        } else {
            self.chunk_size
        };
        if data.bytes.len() as u64 != expected {
            return Err(Error::protocol(format!(
                "ChunkIsWrongSize: chunk {n} holds {} bytes, expected {expected}",
                data.bytes.len()
            )));
        }
        self.current = data.bytes.to_vec();
        self.offset = 0;
        self.next_n += 1;
        Ok(true)
    }

    /// Closes the chunk cursor within what is left of the stream's budget,
    /// or under a fresh `timeout_ms` when given.
    pub async fn close(&mut self, timeout_ms: Option<u64>) {
        if let Some(mut c) = self.cursor.take() {
            let _ = match timeout_ms {
                Some(_) => c.close(timeout_ms).await,
                None => c.close_within(&self.budget).await,
            };
        }
    }
}

impl Drop for DownloadStream {
    /// A stream dropped unclosed still closes within its own budget, not
    /// under the legacy timeouts its chunk cursor would fall back to.
    fn drop(&mut self) {
        // Drop cannot await: the close runs detached, owning the chunk cursor
        // and a copy of the budget (0.2 blocks here as it always did).
        if let Some(mut cursor) = self.cursor.take() {
            let budget = self.budget;
            crate::runtime::detach(async move {
                let _ = cursor.close_within(&budget).await;
            });
        }
    }
}

fn number(doc: &RawDocumentBuf, key: &str) -> Result<u64> {
    let v = crate::wire::raw::int_field(doc, key)
        .ok_or_else(|| Error::protocol(format!("GridFS document has no numeric {key}")))?;
    u64::try_from(v).map_err(|_| Error::protocol(format!("GridFS document has a negative {key}")))
}
