//! `distinct` on `_id`, which nx-27017 cannot run (`nx-gaps.py`: distinct-id): the proxy
//! finds the matching documents' `_id`s on nx-27017 (in the command's session and
//! transaction, so that it reads what the distinct would) and answers mongod's reply, the
//! values sorted, each once (`bson_order.rs`).

use bson::{doc, Bson, Document};

use super::{cursor_id, is_ok, Action, Conn};
use crate::bson_order;
use crate::server::lock;

/// What of the distinct the find and its getMores carry: its session, transaction and
/// limits; the read concern only on the find.
const SESSION_FIELDS: &[&str] = &["lsid", "txnNumber", "autocommit"];
const FIND_FIELDS: &[&str] = &["startTransaction", "readConcern", "hint", "maxTimeMS"];

pub(super) fn applies(name: &str, body: &Document) -> bool {
    name == "distinct" && body.get_str("key").ok() == Some("_id")
}

impl Conn {
    pub(super) fn distinct_on_id(&mut self, db: &str, body: &Document) -> Action {
        match self.run_distinct_on_id(db, body) {
            Ok(reply) => {
                let reply = lock(&self.shared.started_transactions)
                    .after("distinct", body, &reply)
                    .unwrap_or(reply);
                Action::Reply(reply)
            }
            Err(e) => {
                self.shared.log(&format!("distinct on _id: {e}"));
                Action::Close
            }
        }
    }

    fn run_distinct_on_id(&mut self, db: &str, body: &Document) -> Result<Document, String> {
        let collection = body.get_str("distinct").unwrap_or_default();
        let collection = crate::names::encode(collection);
        let filter = body.get_document("query").cloned().unwrap_or_default();
        let mut session = Document::new();
        for key in SESSION_FIELDS {
            if let Some(v) = body.get(*key) {
                session.insert(*key, v.clone());
            }
        }
        let mut find = doc! { "find": collection.as_str(), "filter": filter,
        "projection": { "_id": 1 } };
        for key in FIND_FIELDS {
            if let Some(v) = body.get(*key) {
                find.insert(*key, v.clone());
            }
        }
        find.extend(session.clone());
        find.insert("$db", db);
        let find = crate::cluster_time::for_backend(&find).unwrap_or(find);
        let mut reply = self.backend_command(&find)?;
        let mut values = Vec::new();
        // Bounded by the collection: each turn takes one batch of a cursor nx-27017 ends.
        loop {
            if !is_ok(&reply) {
                return Ok(reply);
            }
            let cursor = reply.get_document("cursor").map_err(|e| e.to_string())?;
            let batch = cursor
                .get_array("firstBatch")
                .or_else(|_| cursor.get_array("nextBatch"))
                .map_err(|e| e.to_string())?;
            values.extend(
                batch
                    .iter()
                    .filter_map(Bson::as_document)
                    .filter_map(|d| d.get("_id").cloned()),
            );
            let id = cursor_id(cursor.get("id")).unwrap_or(0);
            if id == 0 {
                break;
            }
            let mut more = doc! { "getMore": id, "collection": collection.as_str() };
            more.extend(session.clone());
            more.insert("$db", db);
            reply = self.backend_command(&more)?;
        }
        Ok(doc! { "values": bson_order::distinct(values), "ok": 1.0 })
    }
}
