//! `distinct` on `_id`, which nx-27017 cannot run (`nx-gaps.py`: distinct-id): the proxy
//! finds the matching documents' `_id`s on nx-27017 (in the command's session and
//! transaction, so that it reads what the distinct would) and answers mongod's reply, the
//! values sorted, each once (`bson_order.rs`).

use bson::{doc, Document};

use super::{Action, Conn};
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
        let reply = self.backend_command(&find)?;
        session.insert("$db", db);
        let docs = match self.backend_cursor(reply, &collection, &session)? {
            Ok(docs) => docs,
            Err(failed) => return Ok(failed),
        };
        let values = docs.iter().filter_map(|d| d.get("_id").cloned()).collect();
        Ok(doc! { "values": bson_order::distinct(values), "ok": 1.0 })
    }
}
