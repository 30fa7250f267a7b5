//! The I/O of `$listLocalSessions` (`local_sessions.rs`): the session cache is fed by every
//! command, the stage's records are stored on nx-27017 and the rest of the pipeline runs
//! there, over this connection's backend connection.

use bson::{doc, Bson, Document};

use super::{cursor_id, is_ok, Action, Conn, BODY_TIMEOUT};
use crate::frame::{self, FrameError, OP_MSG};
use crate::local_sessions::{self as ls, CMD_AGGREGATE, DB};
use crate::server::lock;

impl Conn {
    fn caller(&self) -> Option<(&str, &str)> {
        self.auth
            .user
            .as_ref()
            .map(|(u, d)| (u.as_str(), d.as_str()))
    }

    /// mongod's `vivify`: the session a command names is in the cache from then on.
    pub(super) fn vivify_session(&self, body: &Document) {
        if body.contains_key("lsid") {
            let now = bson::DateTime::now();
            let caller = self.caller();
            self.shared.sessions(self.member).vivify(body, caller, now);
        }
    }

    /// Runs one command of the proxy's own on the backend and answers its reply.
    pub(super) fn backend_command(&mut self, cmd: &Document) -> Result<Document, String> {
        let bytes = frame::op_msg(self.shared.request_id(), 0, 0, cmd)
            .map_err(|e| format!("encode: {e}"))?;
        let backend = self.backend()?;
        frame::write_all(backend, &bytes).map_err(|e| format!("backend write: {e}"))?;
        // Bounded: each turn consumes one backend message.
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
            return Ok(parsed.body);
        }
    }

    /// Every document of the cursor a backend `reply` opened on `collection`, its getMores
    /// carrying `fields` (`$db`, the session). `Ok(Err(reply))` is nx-27017's failure.
    pub(super) fn backend_cursor(
        &mut self,
        mut reply: Document,
        collection: &str,
        fields: &Document,
    ) -> Result<Result<Vec<Document>, Document>, String> {
        let mut docs = Vec::new();
        // Bounded by the collection: each turn takes one batch of a cursor nx-27017 ends.
        loop {
            if !is_ok(&reply) {
                return Ok(Err(reply));
            }
            let cursor = reply.get_document("cursor").map_err(|e| e.to_string())?;
            let batch = cursor
                .get_array("firstBatch")
                .or_else(|_| cursor.get_array("nextBatch"))
                .map_err(|e| e.to_string())?;
            docs.extend(batch.iter().filter_map(Bson::as_document).cloned());
            let id = cursor_id(cursor.get("id")).unwrap_or(0);
            if id == 0 {
                return Ok(Ok(docs));
            }
            let mut more = doc! { "getMore": id, "collection": collection };
            more.extend(fields.clone());
            reply = self.backend_command(&more)?;
        }
    }

    fn drop_sessions_collection(&mut self, collection: &str) {
        self.drop_after_reply.push(collection.to_string());
    }

    /// Drops the `$listLocalSessions` collections the last command was done with.
    pub(super) fn drop_done_collections(&mut self) {
        for collection in std::mem::take(&mut self.drop_after_reply) {
            let drop = doc! { "drop": collection.as_str(), "$db": DB };
            if let Err(e) = self.backend_command(&drop) {
                self.shared.log(&format!("dropping {DB}.{collection}: {e}"));
            }
        }
    }

    /// `{aggregate: 1, pipeline: [{$listLocalSessions: ...}, ...]}`, fail points already
    /// applied: the records go to a collection of their own, the rest runs on nx-27017.
    pub(super) fn list_local_sessions(&mut self, db: &str, body: &Document) -> Action {
        let plan = {
            let cache = self.shared.sessions(self.member);
            ls::plan(&cache, body, self.caller())
        };
        let plan = match plan {
            Ok(plan) => plan,
            Err(refusal) => return Action::Reply(refusal),
        };
        let n = self
            .shared
            .next_sessions_collection
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let collection = format!("s{n}");
        match self.run_list_local_sessions(db, body, &collection, plan) {
            Ok(reply) => Action::Reply(reply),
            Err(e) => {
                self.shared.log(&format!("$listLocalSessions: {e}"));
                Action::Close
            }
        }
    }

    fn run_list_local_sessions(
        &mut self,
        db: &str,
        body: &Document,
        collection: &str,
        plan: ls::Plan,
    ) -> Result<Document, String> {
        if !plan.records.is_empty() {
            let insert = doc! { "insert": collection, "documents": plan.records, "$db": DB };
            let inserted = self.backend_command(&insert)?;
            if !is_ok(&inserted) || inserted.contains_key("writeErrors") {
                self.drop_sessions_collection(collection);
                return Err(format!("storing the session records: {inserted}"));
            }
        }
        let cmd = ls::backend_aggregate(body, db, collection, plan.rest);
        if let Some((read, target)) = super::out_stage::split(&cmd) {
            let outcome = self.run_out(&read, &target);
            self.drop_sessions_collection(collection);
            return Ok(match outcome? {
                None => super::out_stage::reply(&format!("{db}.{CMD_AGGREGATE}")),
                Some(refusal) => refusal,
            });
        }
        let reply = self.backend_command(&cmd)?;
        let id = cursor_id(reply.get_document("cursor").ok().and_then(|c| c.get("id")));
        match id {
            Some(id) if id != 0 => lock(&self.shared.session_cursors).open(id, collection, db),
            _ => self.drop_sessions_collection(collection),
        }
        Ok(ls::client_reply(reply, db))
    }

    /// getMore and killCursors on a `<db>.$cmd.aggregate` cursor the proxy opened; None for
    /// any other command or cursor.
    pub(super) fn local_sessions_cursor(
        &mut self,
        name: &str,
        db: &str,
        body: &Document,
    ) -> Option<Action> {
        let (ids, mut cmd) = match name {
            "getMore" if body.get_str("collection").ok() == Some(CMD_AGGREGATE) => {
                let id = cursor_id(body.get("getMore"))?;
                let mut cmd = doc! { "getMore": id };
                for key in ["batchSize", "maxTimeMS", "comment"] {
                    if let Some(v) = body.get(key) {
                        cmd.insert(key, v.clone());
                    }
                }
                (vec![id], cmd)
            }
            "killCursors" if body.get_str("killCursors").ok() == Some(CMD_AGGREGATE) => {
                let ids: Vec<i64> = body
                    .get_array("cursors")
                    .ok()?
                    .iter()
                    .map(|v| cursor_id(Some(v)))
                    .collect::<Option<_>>()?;
                let cmd = doc! { "killCursors": "", "cursors": ids.clone() };
                (ids, cmd)
            }
            _ => return None,
        };
        let collection = {
            let cursors = lock(&self.shared.session_cursors);
            let mut found = ids.iter().map(|id| cursors.get(*id, db));
            let first = found.next()??;
            // One stored collection per cursor: a kill naming several goes as it is.
            if found.any(|c| c.as_deref() != Some(first.as_str())) {
                return None;
            }
            first
        };
        match name {
            "getMore" => cmd.insert("collection", collection.as_str()),
            _ => cmd.insert("killCursors", collection.as_str()),
        };
        cmd.insert("$db", DB);
        let reply = match self.backend_command(&cmd) {
            Ok(reply) => reply,
            Err(e) => {
                self.shared
                    .log(&format!("{name} on $listLocalSessions records: {e}"));
                return Some(Action::Close);
            }
        };
        let done = match name {
            "getMore" => {
                let id = cursor_id(reply.get_document("cursor").ok().and_then(|c| c.get("id")));
                !is_ok(&reply) || id == Some(0)
            }
            _ => true,
        };
        if done {
            let mut cursors = lock(&self.shared.session_cursors);
            for id in &ids {
                cursors.close(*id);
            }
            drop(cursors);
            self.drop_sessions_collection(&collection);
        }
        let reply = match reply.get("cursor") {
            Some(Bson::Document(_)) => ls::client_reply(reply, db),
            _ => reply,
        };
        Some(Action::Reply(reply))
    }
}
