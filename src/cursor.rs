//! A server cursor. It hands over whole batches; getMore goes to the server
//! that owns the cursor, under the cursor's CSOT timeout mode.

use crate::change_stream::{self, StreamState};
use crate::client::Client;
use crate::csot::{resolve_timeout_ms, OpTimeout};
use crate::error::{Error, Result};
use crate::operation::{CursorCommand, CursorReply, GetMore, KillCursors, Packed, RunCommand};
use crate::session::Session;
use bson::RawDocumentBuf;
use std::collections::VecDeque;

pub use crate::csot::TimeoutMode;

/// How a cursor iterates, fixed when its operation ran.
#[derive(Debug, Clone, Default)]
pub struct CursorSettings {
    pub batch_size: Option<u32>,
    /// A find's positive limit: no getMore asks for more than what is left of it.
    pub limit: Option<u64>,
    /// Sent on each getMore (4.4+): the opening command's comment, or
    /// run-cursor-command's own.
    pub comment: Option<bson::RawBson>,
    /// Already checked by `csot::cursor_timeout`.
    pub mode: TimeoutMode,
    pub timeout_ms: Option<u64>,
    /// Sent as getMore's maxTimeMS (tailable awaitData cursors, run-cursor-command's option).
    pub max_await_ms: Option<u64>,
}

pub struct Batch {
    pub documents: Vec<RawDocumentBuf>,
    /// The server has no more (the cursor id is 0).
    pub exhausted: bool,
}

/// A batch as one buffer: its documents back to back.
pub struct PackedBatch {
    pub documents: Vec<u8>,
    pub count: usize,
    /// The server has no more (the cursor id is 0).
    pub exhausted: bool,
}

pub struct Cursor {
    client: Client,
    db: String,
    coll: String,
    id: i64,
    /// The id the server gave the cursor (`id` drops to 0 when it is lost):
    /// behind a load balancer its connection is pinned under it.
    server_id: i64,
    address: String,
    pending: Packed,
    settings: CursorSettings,
    /// The budget started by the command that opened the cursor.
    lifetime: OpTimeout,
    session: Option<Session>,
    resume_token: Option<RawDocumentBuf>,
    /// Set for change streams: how to open the stream again.
    stream: Option<Box<StreamState>>,
    /// An iteration timed out: the next call resumes (CSOT spec).
    resume_next: bool,
    /// The server's postBatchResumeToken for `pending`: the resume token
    /// once that batch is handed out.
    batch_token: Option<RawDocumentBuf>,
    /// Documents fetched for `next`/`collect` and not handed out yet; every
    /// way of reading hands these out first.
    ready: VecDeque<RawDocumentBuf>,
    /// How many documents the server has sent (for the limit).
    received: u64,
    /// The caller closed it: every later read is `Closed`.
    closed: bool,
}

impl Cursor {
    pub(crate) fn new(
        client: Client,
        db: &str,
        reply: CursorReply,
        settings: CursorSettings,
        lifetime: OpTimeout,
        session: Option<Session>,
    ) -> Result<Cursor> {
        let coll = match reply.ns.split_once('.') {
            Some((_, coll)) => coll.to_string(),
            None if reply.id == 0 => String::new(),
            None => {
                return Err(Error::protocol(format!(
                    "cursor namespace {:?} has no collection",
                    reply.ns
                )))
            }
        };
        let received = reply.batch.len() as u64;
        Ok(Cursor {
            client,
            db: db.to_string(),
            coll,
            id: reply.id,
            server_id: reply.id,
            address: reply.address,
            pending: reply.batch,
            settings,
            lifetime,
            session,
            resume_token: reply.post_batch_resume_token,
            stream: None,
            resume_next: false,
            batch_token: None,
            ready: VecDeque::new(),
            received,
            closed: false,
        })
    }

    /// Makes this cursor (opened by `state.command`) a change stream.
    pub(crate) fn into_change_stream(mut self, state: StreamState) -> Cursor {
        // Nothing handed out yet: the reply's token belongs to its batch.
        self.batch_token = self.resume_token.take();
        self.stream = Some(Box::new(state));
        self
    }

    pub fn id(&self) -> i64 {
        self.id
    }

    pub fn resume_token(&self) -> Option<RawDocumentBuf> {
        self.resume_token.clone()
    }

    /// The buffered batch, else the next one from the server: one getMore
    /// per call, so the batch may be empty while the cursor stays open (a
    /// tailable cursor, a change stream, a server that answers nothing yet).
    /// The caller decides whether to ask again; one call never loops.
    pub async fn next_batch(&mut self) -> Result<Batch> {
        self.check_open()?;
        if !self.ready.is_empty() {
            return Ok(Batch {
                documents: self.ready.drain(..).collect(),
                exhausted: self.id == 0 && self.pending.is_empty(),
            });
        }
        self.fetch_batch().await
    }

    /// The next document: the first one buffered, else from at most one
    /// getMore (one call never loops). None when that brought nothing: the
    /// cursor is exhausted (`id` 0), or a tailable cursor or change stream
    /// has nothing yet.
    #[allow(clippy::should_implement_trait)] // fallible: not an Iterator
    pub async fn next(&mut self) -> Result<Option<RawDocumentBuf>> {
        self.check_open()?;
        if self.ready.is_empty() {
            let batch = self.fetch_batch().await?;
            self.ready.extend(batch.documents);
        }
        Ok(self.ready.pop_front())
    }

    /// Up to `max` documents (0 is invalid), fetching until it has them, the
    /// cursor is exhausted or a getMore brings nothing; documents beyond
    /// `max` stay buffered. On an error the documents gathered stay
    /// buffered too, for the next call.
    pub async fn collect(&mut self, max: u32) -> Result<Vec<RawDocumentBuf>> {
        self.check_open()?;
        if max == 0 {
            return Err(Error::invalid_argument("collect needs a max above 0"));
        }
        let max = max as usize;
        let mut out = Vec::new();
        loop {
            while out.len() < max {
                match self.ready.pop_front() {
                    Some(d) => out.push(d),
                    None => break,
                }
            }
            if out.len() == max {
                return Ok(out);
            }
            match self.fetch_batch().await {
                Ok(batch) if batch.documents.is_empty() => return Ok(out),
                Ok(batch) => self.ready.extend(batch.documents),
                Err(e) => {
                    for d in out.into_iter().rev() {
                        self.ready.push_front(d);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// The pending batch, else one from the server (one getMore at most).
    async fn fetch_batch(&mut self) -> Result<Batch> {
        if self.stream.is_some() {
            return self.next_changes().await;
        }
        let documents = self.next_packed().await?.into_documents();
        Ok(Batch {
            documents,
            exhausted: self.id == 0,
        })
    }

    /// As `next_batch`, the documents back to back in one buffer (one
    /// allocation per batch, not per document).
    pub async fn next_batch_packed(&mut self) -> Result<PackedBatch> {
        self.check_open()?;
        let packed = if self.stream.is_some() {
            let batch = self.next_changes().await?;
            let mut bytes = Vec::new();
            for d in &batch.documents {
                bytes.extend_from_slice(d.as_bytes());
            }
            (bytes, batch.documents.len())
        } else {
            self.next_packed().await?.into_bytes()
        };
        Ok(PackedBatch {
            documents: packed.0,
            count: packed.1,
            exhausted: self.id == 0,
        })
    }

    /// The buffered documents, else one getMore's (not for change streams).
    async fn next_packed(&mut self) -> Result<Packed> {
        if self.pending.is_empty() && self.id != 0 {
            let s = &self.settings;
            let Some(batch_size) = get_more_batch_size(s.batch_size, s.limit, self.received) else {
                // The limit is reached and the server kept the cursor: close it.
                self.kill(None).await?;
                return Ok(Packed::default());
            };
            let budget = match self.settings.mode {
                TimeoutMode::CursorLifetime => self.lifetime,
                TimeoutMode::Iteration => self.client.start_timeout(self.settings.timeout_ms),
            };
            let mut op = GetMore {
                db: self.db.clone(),
                coll: self.coll.clone(),
                id: self.id,
                batch_size,
                max_await_ms: self.settings.max_await_ms,
                comment: self.settings.comment.clone(),
                wire_version: None,
            };
            let reply = self
                .client
                .execute_within(&mut op, &budget, self.session.as_ref(), Some(&self.address))
                .await
                .inspect_err(|e| {
                    // A network error loses the cursor with its connection.
                    if e.kind == crate::error::ErrorKind::Network {
                        self.id = 0;
                    }
                })?;
            self.id = reply.id;
            self.received += reply.batch.len() as u64;
            self.pending = reply.batch;
            if reply.post_batch_resume_token.is_some() {
                self.resume_token = reply.post_batch_resume_token;
            }
        }
        Ok(std::mem::take(&mut self.pending))
    }

    /// A change stream's next batch: each call has its own budget; a
    /// resumable error opens the stream again from the last token, once.
    /// The first call hands over the aggregate's batch, even an empty one,
    /// as a cursor does: a getMore waits for the next call.
    async fn next_changes(&mut self) -> Result<Batch> {
        let budget = self.client.start_timeout(self.settings.timeout_ms);
        let initial = self
            .stream
            .as_mut()
            .is_some_and(|s| !std::mem::replace(&mut s.initial_returned, true));
        if self.resume_next {
            // Resuming after a timeout: this call also reads, within the
            // same budget (CSOT spec, "Cursors").
            self.resume(&budget).await?;
            if self.pending.is_empty() && self.id != 0 {
                self.get_more_changes(&budget).await.map_err(|(e, _)| {
                    self.resume_next = e.is_timeout();
                    e
                })?;
            }
        } else if !initial && self.pending.is_empty() && self.id != 0 {
            match self.get_more_changes(&budget).await {
                Ok(()) => {}
                Err((e, wire)) if change_stream::is_resumable(&e, wire) => {
                    self.resume(&budget).await?
                }
                Err((e, _)) => {
                    // A timed-out getMore left the server cursor behind: the
                    // next call resumes.
                    self.resume_next = e.is_timeout();
                    return Err(e);
                }
            }
        }
        let documents = std::mem::take(&mut self.pending).into_documents();
        let batch_token = self.batch_token.take();
        if let Some(token) = change_stream::token_after(&documents, batch_token.as_ref())? {
            self.resume_token = Some(token);
        }
        if let Some(stream) = self.stream.as_mut() {
            stream.returned_any |= !documents.is_empty();
        }
        Ok(Batch {
            documents,
            exhausted: self.id == 0,
        })
    }

    /// A failure comes with the wire version of the connection it ran on.
    async fn get_more_changes(
        &mut self,
        budget: &OpTimeout,
    ) -> std::result::Result<(), (crate::error::Error, Option<i32>)> {
        let max_await_ms = self.stream.as_ref().and_then(|s| s.options.max_await_ms);
        let mut op = GetMore {
            db: self.db.clone(),
            coll: self.coll.clone(),
            id: self.id,
            batch_size: self.settings.batch_size,
            max_await_ms,
            comment: self.stream.as_ref().and_then(|s| s.comment()),
            wire_version: None,
        };
        let reply = self
            .client
            .execute_within(&mut op, budget, self.session.as_ref(), Some(&self.address))
            .await
            .map_err(|e| (e, op.wire_version))?;
        self.id = reply.id;
        self.pending = reply.batch;
        self.batch_token = reply.post_batch_resume_token;
        Ok(())
    }

    /// Opens the change stream again from the last resume token.
    async fn resume(&mut self, budget: &OpTimeout) -> Result<()> {
        let Some(state) = self.stream.clone() else {
            return Ok(());
        };
        // Until a new cursor is open, every call tries again (a failed
        // resume must not leave a stream that reads as exhausted).
        self.resume_next = true;
        // The old cursor's killCursors shares the resume's budget (CSOT spec).
        let _ = self.close_within(budget).await;
        let command = state.command(self.resume_token.as_ref())?;
        let mut op = CursorCommand(RunCommand::read(&self.db, command));
        let reply = self
            .client
            .execute_within(&mut op, budget, self.session.as_ref(), None)
            .await?;
        self.id = reply.id;
        self.server_id = reply.id;
        self.address = reply.address;
        self.pending = reply.batch;
        self.batch_token = reply.post_batch_resume_token;
        self.resume_next = false;
        Ok(())
    }

    /// Kills the server cursor if it is still open. `timeout_ms` overrides
    /// the cursor's timeoutMS; either is refreshed for the killCursors, even
    /// when the cursor's own budget is spent (CSOT spec, "Cursors"). Without
    /// timeoutMS the legacy socket timeouts apply.
    /// Closes the cursor for the caller: the server cursor is killed if it
    /// is still open, and every later read is `Closed` (README, Errors).
    pub async fn close(&mut self, timeout_ms: Option<u64>) -> Result<()> {
        self.closed = true;
        self.ready.clear();
        self.kill(timeout_ms).await
    }

    fn check_open(&self) -> Result<()> {
        match self.closed {
            true => Err(Error::closed("cursor")),
            false => Ok(()),
        }
    }

    /// Kills the server cursor if it is still open (not a caller's close:
    /// a limit reached, or a drop).
    async fn kill(&mut self, timeout_ms: Option<u64>) -> Result<()> {
        match self.take_kill(timeout_ms) {
            Some((kill, budget)) => kill.run(&budget).await,
            None => Ok(()),
        }
    }

    /// The killCursors still owed, owned, with its budget (a `Drop` detaches
    /// it); None when there is no server cursor (no deadline to start: a
    /// findOne's cursor ends here).
    fn take_kill(&mut self, timeout_ms: Option<u64>) -> Option<(Kill, OpTimeout)> {
        let timeout_ms = resolve_timeout_ms(timeout_ms, None, &[self.settings.timeout_ms]);
        let kill = self.take_kill_op()?;
        Some((kill, self.client.start_timeout(timeout_ms)))
    }

    /// Kills the server cursor under `budget` (a GridFS stream's lifetime).
    pub(crate) async fn close_within(&mut self, budget: &OpTimeout) -> Result<()> {
        match self.take_kill_op() {
            Some(kill) => kill.run(budget).await,
            None => Ok(()),
        }
    }

    /// Forgets the server cursor, returning what killing it takes. Lost or
    /// exhausted (id 0): a connection still pinned to it (a getMore's network
    /// error keeps it, Load Balancer spec) goes back to its pool now.
    fn take_kill_op(&mut self) -> Option<Kill> {
        self.pending = Packed::default();
        if self.id == 0 {
            self.client.release_cursor_connection(self.server_id);
            return None;
        }
        let op = KillCursors {
            db: self.db.clone(),
            coll: self.coll.clone(),
            ids: vec![std::mem::take(&mut self.id)],
        };
        Some(Kill {
            client: self.client.clone(),
            op,
            session: self.session.clone(),
            address: self.address.clone(),
        })
    }
}

/// A killCursors with all it needs, owned: it can outlive its cursor.
struct Kill {
    client: Client,
    op: KillCursors,
    /// The cursor's session: it stays checked out until the kill is done.
    session: Option<Session>,
    address: String,
}

impl Kill {
    async fn run(mut self, budget: &OpTimeout) -> Result<()> {
        self.client
            .execute_within(
                &mut self.op,
                budget,
                self.session.as_ref(),
                Some(&self.address),
            )
            .await
    }
}

/// A getMore's batchSize: the cursor's, but never more than what is left
/// of a limit (None: the limit is reached, no getMore).
fn get_more_batch_size(
    batch_size: Option<u32>,
    limit: Option<u64>,
    received: u64,
) -> Option<Option<u32>> {
    let Some(limit) = limit else {
        return Some(batch_size);
    };
    let left = limit.saturating_sub(received);
    if left == 0 {
        return None;
    }
    let cap = u64::from(batch_size.unwrap_or(u32::MAX));
    Some(Some(left.min(cap) as u32))
}

impl Drop for Cursor {
    /// Drop cannot await: the kill runs detached (0.2 blocks here as it
    /// always did; 0.3 runs it as a task of its own).
    fn drop(&mut self) {
        if let Some((kill, budget)) = self.take_kill(None) {
            crate::runtime::detach(async move {
                let _ = kill.run(&budget).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::get_more_batch_size as size;

    #[test]
    fn a_get_more_asks_for_no_more_than_the_limit_leaves() {
        assert_eq!(size(Some(3), None, 3), Some(Some(3)));
        assert_eq!(size(None, None, 3), Some(None));
        // batchSize 3, limit 4, 3 received: one more.
        assert_eq!(size(Some(3), Some(4), 3), Some(Some(1)));
        assert_eq!(size(Some(3), Some(10), 3), Some(Some(3)));
        assert_eq!(size(None, Some(10), 3), Some(Some(7)));
        assert_eq!(size(Some(3), Some(4), 4), None);
        assert_eq!(size(Some(3), Some(4), 9), None);
    }
}
