//! One client connection: read a message, decide (failpoints, topology, allow-list), then
//! answer it here or forward it to this connection's own backend connection.

mod awaitable;
mod dispatch;
mod distinct_id;
mod out_stage;
mod sessions;
mod where_sleep;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{Bson, Document};

use crate::auth;
use crate::cluster_time;
use crate::codes::{self, error_doc, with_labels};
use crate::commands::{self, canonical};
use crate::compression::{self, OP_COMPRESSED};
use crate::failpoint::{self as fp, CmdInfo};
use crate::frame::{self, FrameError, Message, FLAG_MORE_TO_COME, OP_MSG, OP_QUERY};
use crate::names;
use crate::retry_record;
use crate::server::{lock, Shared};
use crate::tls::ClientStream;
use crate::topology::Role;

/// A message that has started must be complete within this time.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
const BACKEND_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Fire-and-forget requests remembered so that a backend that answers them anyway
/// (nx-27017 does) does not desynchronise the stream.
const MAX_UNACKED: usize = 64;
const MAX_TRACKED_CHANGE_STREAMS: usize = 10_000;

enum Action {
    Reply(Document),
    /// `close_after`: run it, then hang up without replying (onPrimaryTransactionalWrite).
    Forward {
        supports_wc: bool,
        close_after: bool,
    },
    Close,
}

pub(crate) fn serve(shared: Arc<Shared>, member: usize, client: TcpStream, id: u64) {
    let _ = client.set_nodelay(true);
    let _ = client.set_write_timeout(Some(WRITE_TIMEOUT));
    let (client, peer_subject) = match &shared.tls {
        None => (ClientStream::Plain(client), None),
        Some(config) => match ClientStream::accept(client, config.clone(), BODY_TIMEOUT) {
            Ok(accepted) => accepted,
            Err(e) => {
                shared.log(&format!("connection {id}: TLS handshake failed: {e}"));
                shared.untrack(id);
                lock(&shared.stats).closed();
                return;
            }
        },
    };
    let mut conn = Conn {
        shared,
        member,
        id,
        client,
        peer_subject,
        backend: None,
        app_name: None,
        internal_client: false,
        handshake_done: false,
        unacked: VecDeque::new(),
        drop_after_reply: Vec::new(),
        auth: auth::Session::default(),
        compressors: Vec::new(),
        reply_compressor: None,
    };
    if let Err(why) = conn.run() {
        conn.shared.log(&format!("connection {id} dropped: {why}"));
    }
}

struct Conn {
    shared: Arc<Shared>,
    member: usize,
    id: u64,
    client: ClientStream,
    backend: Option<TcpStream>,
    app_name: Option<String>,
    internal_client: bool,
    handshake_done: bool,
    unacked: VecDeque<i32>,
    /// The verified client certificate's subject (RFC 2253), set by TLS termination; None
    /// without TLS. MONGODB-X509 authenticates as this user.
    peer_subject: Option<String>,
    /// Who this connection authenticated as, and a SASL conversation in progress.
    auth: auth::Session,
    /// `$listLocalSessions` collections done with, dropped once the reply is sent so that
    /// the drop is not charged to the command (`conn/sessions.rs`).
    drop_after_reply: Vec<String>,
    /// The compressor ids this connection's hello negotiated (`compression.rs`).
    compressors: Vec<u8>,
    /// The compressor of the request being answered: its replies go back in it.
    reply_compressor: Option<u8>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.client.socket().shutdown(Shutdown::Both);
        if let Some(b) = &self.backend {
            let _ = b.shutdown(Shutdown::Both);
        }
        self.shared.untrack(self.id);
        lock(&self.shared.stats).closed();
    }
}

impl Conn {
    fn run(&mut self) -> Result<(), String> {
        // Ends when the client leaves, on the first protocol error, or when the proxy stops.
        while !self.shared.is_stopped() {
            let msg = match frame::read_message(&mut self.client, BODY_TIMEOUT) {
                Ok(m) => m,
                Err(FrameError::Closed) => return Ok(()),
                Err(FrameError::Invalid(m)) => return Err(self.protocol_error(m)),
                Err(FrameError::Io(e)) => return Err(format!("client: {e}")),
            };
            lock(&self.shared.stats).bytes_received += msg.bytes.len() as u64;
            let msg = self.decompress(msg)?;
            let keep = match msg.op_code {
                OP_MSG => self.on_op_msg(&msg)?,
                OP_QUERY => self.on_op_query(&msg)?,
                op => return Err(self.protocol_error(format!("unsupported opcode {op}"))),
            };
            if !keep {
                return Ok(());
            }
        }
        Ok(())
    }

    /// A compressed request unwrapped (its compressor noted for the reply);
    /// anything else as it is.
    fn decompress(&mut self, msg: Message) -> Result<Message, String> {
        self.reply_compressor = None;
        if msg.op_code != OP_COMPRESSED {
            return Ok(msg);
        }
        let (plain, id) =
            compression::unwrap_message(&msg).map_err(|e| self.protocol_error(e.to_string()))?;
        if id != 0 && !self.compressors.contains(&id) {
            let why = format!("{} was not negotiated", compression::name_of(id));
            return Err(self.protocol_error(why));
        }
        let name = match plain.op_code {
            OP_MSG => frame::parse_op_msg(&plain)
                .ok()
                .and_then(|m| m.body.keys().next().cloned()),
            OP_QUERY => frame::parse_op_query(&plain).ok().and_then(|q| {
                let cmd = q.query.get_document("$query").unwrap_or(&q.query);
                cmd.keys().next().cloned()
            }),
            _ => None,
        }
        .unwrap_or_default();
        if compression::never_compressed(&name) {
            let why = format!("{name} must never be compressed (Wire Compression spec)");
            return Err(self.protocol_error(why));
        }
        let mut stats = lock(&self.shared.stats);
        *stats
            .compressed_received
            .entry(compression::name_of(id).to_string())
            .or_insert(0) += 1;
        drop(stats);
        self.reply_compressor = Some(id);
        Ok(plain)
    }

    /// A hello's reply gets the compressors both sides have, when it offered any.
    fn negotiate_compression(&mut self, name: &str, body: &Document, action: &mut Action) {
        let Action::Reply(reply) = action else {
            return;
        };
        if !commands::is_hello(name) || !is_ok(reply) {
            return;
        }
        if let Some((ids, names)) = compression::negotiate(body) {
            self.compressors = ids;
            if !names.is_empty() {
                reply.insert("compression", names);
            }
        }
    }

    fn protocol_error(&self, why: String) -> String {
        lock(&self.shared.stats).protocol_errors += 1;
        why
    }

    fn on_op_msg(&mut self, msg: &Message) -> Result<bool, String> {
        let received = Instant::now();
        let parsed = frame::parse_op_msg(msg).map_err(|e| self.protocol_error(e.to_string()))?;
        let more_to_come = parsed.flags & FLAG_MORE_TO_COME != 0;
        let body = parsed.body;
        let Some(name) = body.keys().next().cloned() else {
            return Err(self.protocol_error("empty command document".into()));
        };
        let mut action = match body.get_str("$db") {
            Ok(db) => self.dispatch(&name, db, &body, &parsed.sequences, received),
            Err(_) => Action::Reply(error_doc(
                codes::OP_MSG_NO_DB,
                "OP_MSG requests require a $db argument",
            )),
        };
        self.negotiate_compression(&name, &body, &mut action);
        match action {
            Action::Reply(_) if more_to_come => Ok(true),
            Action::Reply(reply) if commands::is_hello(&name) => {
                let open =
                    self.reply_to_hello(msg.request_id, parsed.flags, &name, &body, reply)?;
                self.drop_done_collections();
                Ok(open)
            }
            Action::Reply(mut reply) => {
                if self.reports_cluster_time() {
                    cluster_time::stamp(&mut reply, self.shared.clock.tick());
                }
                self.send(&frame::op_msg(
                    self.shared.request_id(),
                    msg.request_id,
                    0,
                    &reply,
                ))?;
                self.drop_done_collections();
                Ok(true)
            }
            Action::Close => {
                self.drop_done_collections();
                Ok(false)
            }
            Action::Forward {
                supports_wc,
                close_after,
            } => {
                // mongod's `$where: "sleep(N) || true"`, which nx-27017 refuses (where_sleep.rs).
                let held = self.where_sleep(msg, &name, &body, &parsed.sequences, received)?;
                let edited;
                let (msg, body) = match held {
                    None => (msg, &body),
                    Some(where_sleep::Outcome::Forward(msg, body)) => {
                        edited = (msg, body);
                        (&edited.0, &edited.1)
                    }
                    Some(where_sleep::Outcome::Done(Action::Reply(mut reply))) => {
                        if self.reports_cluster_time() {
                            cluster_time::stamp(&mut reply, self.shared.clock.tick());
                        }
                        let id = self.shared.request_id();
                        self.send(&frame::op_msg(id, msg.request_id, 0, &reply))?;
                        return Ok(true);
                    }
                    Some(where_sleep::Outcome::Done(_)) => return Ok(false),
                };
                if close_after {
                    self.forward_and_drop_reply(msg, &name, body)?;
                    return Ok(false);
                }
                self.forward(msg, more_to_come, &name, body, supports_wc)?;
                Ok(true)
            }
        }
    }

    /// Only the legacy handshake survives in OP_QUERY (mongod 5.1+); anything else gets
    /// UnsupportedOpQueryCommand.
    fn on_op_query(&mut self, msg: &Message) -> Result<bool, String> {
        let received = Instant::now();
        let q = frame::parse_op_query(msg).map_err(|e| self.protocol_error(e.to_string()))?;
        let cmd = match q.query.get_document("$query") {
            Ok(inner) => inner.clone(),
            Err(_) => q.query,
        };
        let name = cmd.keys().next().cloned().unwrap_or_default();
        let mut action = match q.collection.strip_suffix(".$cmd") {
            Some(db) if commands::is_hello(&name) => self.dispatch(&name, db, &cmd, &[], received),
            _ => Action::Forward {
                supports_wc: false,
                close_after: false,
            },
        };
        self.negotiate_compression(&name, &cmd, &mut action);
        let reply = match action {
            Action::Close => return Ok(false),
            Action::Reply(reply) => reply,
            Action::Forward { .. } => {
                lock(&self.shared.stats).command(&name);
                let msg = format!(
                    "Unsupported OP_QUERY command: {name}. The client driver may require an upgrade. \
                     For more details see https://dochub.mongodb.org/core/legacy-opcode-removal"
                );
                error_doc(codes::UNSUPPORTED_OP_QUERY_COMMAND, &msg)
            }
        };
        self.send(&frame::op_reply(
            self.shared.request_id(),
            msg.request_id,
            &reply,
        ))?;
        Ok(true)
    }

    fn send(&mut self, bytes: &std::io::Result<Vec<u8>>) -> Result<(), String> {
        let bytes = bytes.as_ref().map_err(|e| format!("encode reply: {e}"))?;
        self.send_bytes(bytes)
    }

    /// Writes one reply to the client, compressed as its request was.
    fn send_bytes(&mut self, bytes: &[u8]) -> Result<(), String> {
        let compressed;
        let bytes = match self.reply_compressor {
            Some(id) => {
                compressed = compression::wrap(bytes, id);
                *lock(&self.shared.stats)
                    .compressed_sent
                    .entry(compression::name_of(id).to_string())
                    .or_insert(0) += 1;
                &compressed[..]
            }
            None => bytes,
        };
        lock(&self.shared.stats).bytes_sent += bytes.len() as u64;
        frame::write_all(&mut self.client, bytes).map_err(|e| format!("client write: {e}"))
    }

    fn info<'a>(&'a self, name: &'a str, db: &'a str, body: &'a Document) -> CmdInfo<'a> {
        CmdInfo {
            name,
            db,
            body,
            app_name: self.app_name.as_deref(),
            internal_client: self.internal_client,
            max_wire: self.shared.version.get().max_wire,
        }
    }

    /// This member's fail points (each mongod has its own).
    fn failpoints(&self) -> std::sync::MutexGuard<'_, fp::FailPoints> {
        self.shared.failpoints(self.member)
    }

    fn role(&self) -> Role {
        lock(&self.shared.topology).role(self.member)
    }

    fn is_change_stream(&self, name: &str, body: &Document) -> bool {
        if commands::is_change_stream_aggregate(name, body) {
            return true;
        }
        match (name, body.get("getMore")) {
            ("getMore", Some(id)) => cursor_id(Some(id))
                .is_some_and(|id| lock(&self.shared.change_streams).contains(&id)),
            _ => false,
        }
    }

    /// Remembers change-stream and awaitData cursor ids from replies, forgets exhausted ones.
    fn note_cursor(&self, name: &str, body: &Document, reply: &Document) {
        // A reply without a cursor (an error) says nothing about the cursor.
        let Some(id) = cursor_id(reply.get_document("cursor").ok().and_then(|c| c.get("id")))
        else {
            return;
        };
        let change_stream = commands::is_change_stream_aggregate(name, body);
        let await_data = change_stream || commands::is_await_data_find(name, body);
        for (set, opened) in [
            (&self.shared.change_streams, change_stream),
            (&self.shared.await_data, await_data),
        ] {
            let mut ids = lock(set);
            if opened && id != 0 {
                if ids.len() >= MAX_TRACKED_CHANGE_STREAMS {
                    ids.clear();
                }
                ids.insert(id);
            } else if name == "getMore" && id == 0 {
                if let Some(old) = cursor_id(body.get("getMore")) {
                    ids.remove(&old);
                }
            }
        }
    }

    fn backend(&mut self) -> Result<&mut TcpStream, String> {
        if self.backend.is_none() {
            let stream = TcpStream::connect_timeout(&self.shared.backend, BACKEND_CONNECT_TIMEOUT)
                .map_err(|e| format!("backend connect: {e}"))?;
            let _ = stream.set_nodelay(true);
            let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
            if !self.shared.track(self.id, &stream) {
                return Err("proxy stopping".into());
            }
            self.backend = Some(stream);
        }
        Ok(self.backend.as_mut().expect("connected above"))
    }

    /// Opens the backend connection and runs one `ping` on it (its reply dropped), so that
    /// the backend's own per-connection setup is done within this connection's handshake,
    /// as mongod's is, and not charged to the client's first command and its socket timeout.
    fn warm_backend(&mut self) -> Result<(), String> {
        if self.backend.is_some() {
            return Ok(());
        }
        let ping = bson::doc! { "ping": 1, "$db": "admin" };
        let bytes = frame::op_msg(0, 0, 0, &ping).map_err(|e| format!("warm-up: {e}"))?;
        let backend = self.backend()?;
        frame::write_all(backend, &bytes).map_err(|e| format!("backend write: {e}"))?;
        frame::read_message(backend, BODY_TIMEOUT).map_err(|e| format!("backend: {e}"))?;
        Ok(())
    }

    /// Replica-set members and mongoses report cluster times; a standalone does not.
    fn reports_cluster_time(&self) -> bool {
        self.role() != Role::Standalone
    }

    /// The bytes to send nx-27017 for `msg`: without what only mongod understands of a
    /// read concern (`cluster_time.rs`), and with the collection names nx accepts
    /// (`names.rs`); unchanged when neither applies.
    fn backend_bytes<'m>(
        &self,
        msg: &'m Message,
        name: &str,
        body: &Document,
    ) -> Result<Cow<'m, [u8]>, String> {
        let edited = cluster_time::for_backend(body);
        let edited = crate::insert::for_backend(edited.as_ref().unwrap_or(body)).or(edited);
        let (bytes, body): (Cow<'m, [u8]>, Cow<'_, Document>) = match edited {
            None => (Cow::Borrowed(&msg.bytes), Cow::Borrowed(body)),
            Some(edited) => {
                let bytes = frame::replace_body(msg, &edited)
                    .map_err(|e| format!("re-encoding the command: {e}"))?;
                (Cow::Owned(bytes), Cow::Owned(edited))
            }
        };
        Ok(match names::encode_message(&bytes, name, &body) {
            Some(renamed) => Cow::Owned(renamed),
            None => bytes,
        })
    }

    /// Aborts, on the backend, the transaction `body` (a command of it) belongs to;
    /// the reply is dropped.
    fn abort_backend_transaction(&mut self, body: &Document) -> Result<(), String> {
        let lsid = body.get_document("lsid").map_err(|e| e.to_string())?;
        let txn = body.get_i64("txnNumber").map_err(|e| e.to_string())?;
        let abort = bson::doc! { "abortTransaction": 1, "lsid": lsid.clone(), "txnNumber": txn,
        "autocommit": false, "$db": "admin" };
        let bytes = frame::op_msg(self.shared.request_id(), 0, 0, &abort)
            .map_err(|e| format!("abort: {e}"))?;
        let backend = self.backend()?;
        frame::write_all(backend, &bytes).map_err(|e| format!("backend write: {e}"))?;
        frame::read_message(backend, BODY_TIMEOUT).map_err(|e| format!("backend: {e}"))?;
        Ok(())
    }

    /// Runs the command on the backend and waits for its reply, which the client never gets.
    fn forward_and_drop_reply(
        &mut self,
        msg: &Message,
        name: &str,
        body: &Document,
    ) -> Result<(), String> {
        let bytes = self.backend_bytes(msg, name, body)?;
        let backend = self.backend()?;
        frame::write_all(backend, &bytes).map_err(|e| format!("backend write: {e}"))?;
        loop {
            let backend = self.backend()?;
            let reply =
                frame::read_message(backend, BODY_TIMEOUT).map_err(|e| format!("backend: {e}"))?;
            if let Some(i) = self.unacked.iter().position(|&id| id == reply.response_to) {
                self.unacked.remove(i);
                continue;
            }
            // The write was applied: its retry is answered from the record.
            if let (Some(key), Ok(parsed)) =
                (self.retry_key(name, body), frame::parse_op_msg(&reply))
            {
                let decoded = names::decode_reply(&parsed.body);
                let doc = decoded.as_ref().unwrap_or(&parsed.body);
                lock(&self.shared.retries).record(key, doc);
            }
            return Ok(());
        }
    }

    fn retry_key(&self, name: &str, body: &Document) -> Option<retry_record::Key> {
        retry_record::key(name, body.get_str("$db").unwrap_or(""), body)
    }

    /// Sends the client's bytes unchanged and relays the reply (several, for exhaust).
    fn forward(
        &mut self,
        msg: &Message,
        more_to_come: bool,
        name: &str,
        body: &Document,
        supports_wc: bool,
    ) -> Result<(), String> {
        let retry_key = self.retry_key(name, body).filter(|_| !more_to_come);
        if let Some(recorded) = retry_key
            .as_ref()
            .and_then(|k| lock(&self.shared.retries).get(k))
        {
            let edited = match supports_wc {
                true => self.write_concern_error(name, body, &recorded),
                false => None,
            };
            let mut reply = edited.unwrap_or(recorded);
            if self.reports_cluster_time() {
                cluster_time::stamp(&mut reply, self.shared.clock.tick());
            }
            return self.send(&frame::op_msg(
                self.shared.request_id(),
                msg.request_id,
                0,
                &reply,
            ));
        }
        let bytes = self.backend_bytes(msg, name, body)?;
        let backend = self.backend()?;
        frame::write_all(backend, &bytes).map_err(|e| format!("backend write: {e}"))?;
        if more_to_come {
            if self.unacked.len() >= MAX_UNACKED {
                self.unacked.pop_front();
            }
            self.unacked.push_back(msg.request_id);
            return Ok(());
        }
        // Bounded: each turn consumes one backend message; stops at the final reply.
        loop {
            let backend = self.backend()?;
            let reply = match frame::read_message(backend, BODY_TIMEOUT) {
                Ok(r) => r,
                Err(FrameError::Closed) => return Err("backend closed the connection".into()),
                Err(e) => return Err(format!("backend: {e}")),
            };
            if let Some(i) = self.unacked.iter().position(|&id| id == reply.response_to) {
                self.unacked.remove(i);
                continue;
            }
            if reply.op_code != OP_MSG {
                return Err(format!("backend answered opcode {}", reply.op_code));
            }
            let parsed = frame::parse_op_msg(&reply).map_err(|e| format!("backend reply: {e}"))?;
            let exhaust = parsed.flags & FLAG_MORE_TO_COME != 0;
            self.note_cursor(name, body, &parsed.body);
            let decoded = names::decode_reply(&parsed.body);
            let decoded = match canonical(name) == "insert" && !exhaust {
                true => {
                    let reply = decoded.as_ref().unwrap_or(&parsed.body);
                    insert_reply(msg, body, reply).or(decoded)
                }
                false => decoded,
            };
            // A transaction nx-27017 never opened commits and aborts as on mongod.
            let decoded = match exhaust {
                false => {
                    let reply = decoded.as_ref().unwrap_or(&parsed.body);
                    lock(&self.shared.started_transactions)
                        .after(canonical(name), body, reply)
                        .or(decoded)
                }
                true => decoded,
            };
            let reply_doc = decoded.as_ref().unwrap_or(&parsed.body);
            if let Some(key) = retry_key.clone() {
                lock(&self.shared.retries).record(key, reply_doc);
            }
            let edited = match supports_wc && !exhaust {
                true => self.write_concern_error(name, body, reply_doc),
                false => None,
            };
            let edited = edited.or(decoded);
            // mongod answers distinct values sorted (bson_order.rs); nx-27017 does not.
            let edited = match exhaust {
                false => {
                    let reply = edited.as_ref().unwrap_or(&parsed.body);
                    crate::bson_order::sorted_distinct(canonical(name), reply).or(edited)
                }
                true => edited,
            };
            let mut edited = match self.role() == Role::Mongos && !exhaust {
                true => {
                    let reply = edited.as_ref().unwrap_or(&parsed.body);
                    crate::mongos::with_recovery_token(body, reply).or(edited)
                }
                false => edited,
            };
            if self.reports_cluster_time() {
                let doc = edited.get_or_insert_with(|| parsed.body.clone());
                let now = self.shared.clock.tick();
                cluster_time::stamp(doc, now);
                if cluster_time::is_snapshot_read(body) {
                    cluster_time::stamp_snapshot(body, doc, now);
                }
            }
            match edited {
                Some(doc) => self.send(&frame::op_msg(
                    self.shared.request_id(),
                    reply.response_to,
                    parsed.flags & FLAG_MORE_TO_COME,
                    &doc,
                ))?,
                None => self.send_bytes(&reply.bytes)?,
            }
            if !exhaust {
                return Ok(());
            }
        }
    }

    /// failCommand's `writeConcernError`, applied after the command ran, whether it succeeded
    /// or failed: mongod waits for write concern on both paths (`_checkWriteConcern` and
    /// `_handleError` in service_entry_point_common.cpp).
    fn write_concern_error(
        &self,
        name: &str,
        body: &Document,
        reply: &Document,
    ) -> Option<Document> {
        let db = body.get_str("$db").unwrap_or("");
        let info = self.info(name, db, body);
        let data = self.failpoints().check(fp::FAIL_COMMAND, |d| {
            fp::should_activate(d, &info) && d.contains_key("writeConcernError")
        })?;
        let code = match is_ok(reply) {
            true => None,
            false => reply.get("code").and_then(|c| c.as_i32()),
        };
        let wce = data.get("writeConcernError")?.clone();
        let wc_code = wce
            .as_document()
            .and_then(|w| fp::number(w, "code"))
            .map(|c| c as i32);
        let labels = fp::labels_override(&data)
            .unwrap_or_else(|| fp::error_labels(&info, code, wc_code, false));
        let mut out = reply.clone();
        out.insert("writeConcernError", wce);
        Some(with_labels(out, labels))
    }
}

/// An insert's reply with mongod's wording of a duplicate `_id` (`insert.rs`); the inserted
/// documents come from the body or from the request's `documents` sequence.
fn insert_reply(msg: &Message, body: &Document, reply: &Document) -> Option<Document> {
    reply.get_array("writeErrors").ok()?;
    let db = body.get_str("$db").unwrap_or("");
    let in_body: Option<Vec<Document>> = body.get_array("documents").ok().map(|docs| {
        docs.iter()
            .filter_map(|d| d.as_document().cloned())
            .collect()
    });
    let documents = match in_body {
        Some(docs) => docs,
        None => frame::parse_op_msg(msg)
            .ok()?
            .sequences
            .into_iter()
            .find(|(id, _)| id == "documents")
            .map(|(_, docs)| docs)?,
    };
    crate::insert::mongod_duplicate_key(db, body, &documents, reply)
}

/// A cursor id: mongod's are int64, nx-27017 answers small ones as int32.
pub(crate) fn cursor_id(v: Option<&Bson>) -> Option<i64> {
    match v? {
        Bson::Int64(id) => Some(*id),
        Bson::Int32(id) => Some(i64::from(*id)),
        _ => None,
    }
}

fn is_ok(reply: &Document) -> bool {
    match reply.get("ok") {
        Some(Bson::Double(d)) => *d == 1.0,
        Some(Bson::Int32(i)) => *i == 1,
        Some(Bson::Int64(i)) => *i == 1,
        Some(Bson::Boolean(b)) => *b,
        _ => false,
    }
}
