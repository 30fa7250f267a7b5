//! `$out`, which nx-27017 lacks (nx-gaps.py: out-stage): the proxy runs the pipeline
//! before the stage on nx-27017, reads all of its results, then makes them the target
//! collection's documents, as mongod's `$out` does (the target created if missing, its
//! indexes kept, untouched when the pipeline fails), and answers mongod's reply: an
//! empty, exhausted cursor. Checked with PyMongo in `tests/pymongo_emulations.py`.

use bson::{doc, Bson, Document};

use super::{is_ok, Action, Conn};
use crate::codes::{self, error_doc};
use crate::names;

/// nx-27017's answer to `create` of a collection that exists.
const NAMESPACE_EXISTS: i32 = 48;

/// Documents per insert into the target: far below maxWriteBatchSize and, for the small
/// documents tests write, below 16 MB.
const INSERT_BATCH: usize = 1000;

/// What of the client's aggregate nx-27017 is not given: the write's options.
const WRITE_FIELDS: &[&str] = &[
    "writeConcern",
    "bypassDocumentValidation",
    "$readPreference",
];

/// Whether the proxy runs this command's `$out`: an aggregate (not an explain) whose last
/// stage is `$out` into a plain collection (a time-series target goes to nx-27017 as it is).
pub(super) fn applies(name: &str, body: &Document) -> bool {
    name == "aggregate"
        && !body.get_bool("explain").unwrap_or(false)
        && body
            .get_array("pipeline")
            .ok()
            .is_some_and(|p| target(p, "").is_some())
}

/// `(db, collection)` of a pipeline's last stage `$out`: `"coll"` or `{db, coll}`, the
/// database defaulting to the command's.
fn target(pipeline: &[Bson], db: &str) -> Option<(String, String)> {
    let stage = pipeline.last()?.as_document()?;
    if stage.len() != 1 {
        return None;
    }
    match stage.get("$out")? {
        Bson::String(coll) => Some((db.to_string(), coll.clone())),
        Bson::Document(d) if !d.contains_key("timeseries") => Some((
            d.get_str("db").unwrap_or(db).to_string(),
            d.get_str("coll").ok()?.to_string(),
        )),
        _ => None,
    }
}

/// The aggregate nx-27017 runs for `cmd` (an aggregate as nx-27017 is to get it) when its
/// last stage is `$out`: the pipeline before the stage, read with a default cursor.
/// Returns it with the stage's target, as `cmd` names it; None when there is no `$out`.
pub(super) fn split(cmd: &Document) -> Option<(Document, (String, String))> {
    let db = cmd.get_str("$db").ok()?;
    let mut pipeline = cmd.get_array("pipeline").ok()?.clone();
    let target = target(&pipeline, db)?;
    pipeline.pop();
    let mut read = cmd.clone();
    read.insert("pipeline", pipeline);
    read.insert("cursor", Document::new());
    for key in WRITE_FIELDS {
        read.remove(*key);
    }
    Some((read, target))
}

/// mongod refuses a write stage under a linearizable read concern.
fn linearizable(cmd: &Document) -> bool {
    cmd.get_document("readConcern")
        .and_then(|rc| rc.get_str("level"))
        .is_ok_and(|level| level == "linearizable")
}

/// mongod's reply to an aggregate ending in `$out`, over namespace `ns`.
pub(super) fn reply(ns: &str) -> Document {
    doc! { "cursor": { "firstBatch": [], "id": 0i64, "ns": ns }, "ok": 1.0 }
}

/// The namespace of the client's aggregate: `<db>.<coll>`, or `<db>.$cmd.aggregate` for a
/// database-level one.
fn client_ns(db: &str, body: &Document) -> String {
    match body.get_str("aggregate") {
        Ok(coll) => format!("{db}.{coll}"),
        Err(_) => format!("{db}.$cmd.aggregate"),
    }
}

impl Conn {
    /// An aggregate whose last stage is `$out`, from the client.
    pub(super) fn aggregate_with_out(&mut self, db: &str, body: &Document) -> Action {
        let cmd = crate::cluster_time::for_backend(body);
        let result = match split(cmd.as_ref().unwrap_or(body)) {
            Some((read, target)) => self.run_out(&read, &target),
            None => Err("no $out stage after encoding".to_string()),
        };
        match result {
            Ok(None) => {
                let done = reply(&client_ns(db, body));
                let edited = self.write_concern_error("aggregate", body, &done);
                Action::Reply(edited.unwrap_or(done))
            }
            Ok(Some(refusal)) => Action::Reply(refusal),
            Err(e) => {
                self.shared.log(&format!("aggregate with $out: {e}"));
                Action::Close
            }
        }
    }

    /// Runs `read` (the pipeline before `$out`) on nx-27017 and replaces the documents of
    /// `target` with its results (both with the client's names, `names.rs` encodes them).
    /// `Some` is nx-27017's failure, for the client; `Err` a broken backend.
    pub(super) fn run_out(
        &mut self,
        read: &Document,
        (db, coll): &(String, String),
    ) -> Result<Option<Document>, String> {
        if linearizable(read) {
            let msg = "$out cannot be used with a 'linearizable' read concern level";
            return Ok(Some(error_doc(codes::INVALID_OPTIONS, msg)));
        }
        let failed = |reply: Document| Ok(Some(names::decode_reply(&reply).unwrap_or(reply)));
        let read = names::encode_command("aggregate", read).unwrap_or_else(|| read.clone());
        let read = &read;
        let coll = &names::encode(coll);
        // A database-level aggregate (`aggregate: 1`) has no collection; nx-27017 runs none.
        let collection = read.get_str("aggregate").unwrap_or_default();
        let mut fields = Document::new();
        for key in ["lsid", "$db"] {
            if let Some(v) = read.get(key) {
                fields.insert(key, v.clone());
            }
        }
        let first = self.backend_command(read)?;
        let results = match self.backend_cursor(first, collection, &fields)? {
            Ok(docs) => docs,
            Err(reply) => return failed(reply),
        };
        let on_target = |conn: &mut Conn, mut cmd: Document| {
            cmd.insert("$db", db.as_str());
            conn.backend_command(&cmd)
        };
        let created = on_target(self, doc! { "create": coll.as_str() })?;
        let exists = created.get_i32("code").ok() == Some(NAMESPACE_EXISTS);
        if !is_ok(&created) && !exists {
            return failed(created);
        }
        let emptied = on_target(
            self,
            doc! { "delete": coll.as_str(), "deletes": [{ "q": {}, "limit": 0 }] },
        )?;
        if !is_ok(&emptied) {
            return failed(emptied);
        }
        for chunk in results.chunks(INSERT_BATCH) {
            let insert = doc! { "insert": coll.as_str(), "documents": chunk.to_vec(),
            "ordered": true };
            let inserted = on_target(self, insert)?;
            if !is_ok(&inserted) {
                return failed(inserted);
            }
            // mongod fails the aggregate with the write's error (a duplicate key, say).
            if let Some(first) = inserted
                .get_array("writeErrors")
                .ok()
                .and_then(|e| e.first())
                .and_then(Bson::as_document)
            {
                let code = first.get_i32("code").unwrap_or(1);
                let msg = first.get_str("errmsg").unwrap_or("$out failed");
                return failed(error_doc(code, msg));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_last_out_stage_into_a_plain_collection_applies() {
        let agg = |pipeline: Vec<Bson>| doc! { "aggregate": "c", "pipeline": pipeline };
        assert!(applies(
            "aggregate",
            &agg(vec![doc! { "$out": "o" }.into()])
        ));
        assert!(applies(
            "aggregate",
            &agg(vec![
                doc! { "$match": {} }.into(),
                doc! { "$out": { "db": "x", "coll": "o" } }.into()
            ])
        ));
        assert!(!applies(
            "aggregate",
            &agg(vec![doc! { "$merge": "o" }.into()])
        ));
        assert!(!applies("aggregate", &agg(vec![])));
        let timeseries =
            doc! { "$out": { "db": "x", "coll": "o", "timeseries": { "timeField": "t" } } };
        assert!(!applies("aggregate", &agg(vec![timeseries.into()])));
        let mut explain = agg(vec![doc! { "$out": "o" }.into()]);
        explain.insert("explain", true);
        assert!(!applies("aggregate", &explain));
        assert!(!applies("find", &agg(vec![doc! { "$out": "o" }.into()])));
    }

    #[test]
    fn the_read_leaves_out_the_stage_and_the_write_options() {
        let cmd = doc! {
            "aggregate": "c", "pipeline": [{ "$match": { "x": 1 } }, { "$out": "o" }],
            "cursor": { "batchSize": 0 }, "writeConcern": { "w": 1 }, "readConcern": { "level": "local" },
            "bypassDocumentValidation": false, "lsid": { "id": 1 }, "$db": "d",
        };
        let (read, target) = split(&cmd).unwrap();
        assert_eq!(target, ("d".to_string(), "o".to_string()));
        assert_eq!(
            read,
            doc! {
                "aggregate": "c", "pipeline": [{ "$match": { "x": 1 } }],
                "cursor": {}, "readConcern": { "level": "local" }, "lsid": { "id": 1 }, "$db": "d",
            }
        );
        let other_db = doc! { "aggregate": 1, "pipeline": [{ "$out": { "db": "x", "coll": "o" } }], "$db": "d" };
        assert_eq!(
            split(&other_db).unwrap().1,
            ("x".to_string(), "o".to_string())
        );
    }

    #[test]
    fn the_reply_is_an_exhausted_cursor_on_the_clients_namespace() {
        assert_eq!(client_ns("d", &doc! { "aggregate": "c" }), "d.c");
        assert_eq!(client_ns("d", &doc! { "aggregate": 1 }), "d.$cmd.aggregate");
        let r = reply("d.c");
        assert!(linearizable(
            &doc! { "readConcern": { "level": "linearizable" } }
        ));
        assert!(!linearizable(
            &doc! { "readConcern": { "level": "majority" } }
        ));
        assert_eq!(r.get_document("cursor").unwrap().get_i64("id").unwrap(), 0);
    }
}
