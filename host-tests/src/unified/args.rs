//! An operation's `arguments`, taken field by field: what a WIT record has a
//! place for is taken out, and what is left goes to `extra` by its server name,
//! if the WIT documents that name for the operation ([`extra_names`]); any other
//! argument fails the test instead of reaching the server as a stray field.

use super::{Fail, Step};
use bson::{Bson, Document};

pub struct Args {
    op: String,
    doc: Document,
}

/// A document's BSON bytes, as the WIT `document` type wants them.
pub fn bytes(doc: &Document) -> Step<Vec<u8>> {
    doc.to_vec()
        .map_err(|e| Fail(format!("cannot encode a document: {e}")))
}

impl Args {
    pub fn new(op: &str, doc: Option<&Document>) -> Args {
        Args {
            op: op.to_string(),
            doc: doc.cloned().unwrap_or_default(),
        }
    }

    fn bad(&self, key: &str, want: &str, got: &Bson) -> Fail {
        Fail(format!(
            "{}: argument {key} should be {want}, not {got}",
            self.op
        ))
    }

    pub fn take(&mut self, key: &str) -> Option<Bson> {
        self.doc.remove(key)
    }

    pub fn has(&self, key: &str) -> bool {
        self.doc.contains_key(key)
    }

    pub fn doc(&mut self, key: &str) -> Step<Option<Document>> {
        match self.take(key) {
            None => Ok(None),
            Some(Bson::Document(d)) => Ok(Some(d)),
            Some(other) => Err(self.bad(key, "a document", &other)),
        }
    }

    pub fn req_doc(&mut self, key: &str) -> Step<Document> {
        self.doc(key)?.ok_or_else(|| self.missing(key))
    }

    fn missing(&self, key: &str) -> Fail {
        Fail(format!("{}: missing argument {key}", self.op))
    }

    pub fn string(&mut self, key: &str) -> Step<Option<String>> {
        match self.take(key) {
            None => Ok(None),
            Some(Bson::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.bad(key, "a string", &other)),
        }
    }

    pub fn req_string(&mut self, key: &str) -> Step<String> {
        self.string(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn bool(&mut self, key: &str) -> Step<Option<bool>> {
        match self.take(key) {
            None => Ok(None),
            Some(Bson::Boolean(b)) => Ok(Some(b)),
            Some(other) => Err(self.bad(key, "a bool", &other)),
        }
    }

    /// An integer, written as int32, int64 or an integral double.
    pub fn int(&mut self, key: &str) -> Step<Option<i64>> {
        match self.take(key) {
            None => Ok(None),
            Some(Bson::Int32(i)) => Ok(Some(i.into())),
            Some(Bson::Int64(i)) => Ok(Some(i)),
            Some(Bson::Double(d)) if d.fract() == 0.0 && d.abs() < 9.0e15 => Ok(Some(d as i64)),
            Some(other) => Err(self.bad(key, "an integer", &other)),
        }
    }

    pub fn u64(&mut self, key: &str) -> Step<Option<u64>> {
        match self.int(key)? {
            None => Ok(None),
            Some(i) => u64::try_from(i).map(Some).map_err(|_| {
                Fail(format!(
                    "{}: {key} {i} cannot be passed (the WIT field is unsigned)",
                    self.op
                ))
            }),
        }
    }

    pub fn u32(&mut self, key: &str) -> Step<Option<u32>> {
        match self.int(key)? {
            None => Ok(None),
            Some(i) => u32::try_from(i)
                .map(Some)
                .map_err(|_| Fail(format!("{}: {key} {i} does not fit the WIT's u32", self.op))),
        }
    }

    pub fn timeout(&mut self) -> Step<Option<u64>> {
        self.u64("timeoutMS")
    }

    /// An array of documents.
    pub fn docs(&mut self, key: &str) -> Step<Vec<Document>> {
        match self.take(key) {
            None => Err(self.missing(key)),
            Some(Bson::Array(items)) => items
                .into_iter()
                .map(|v| match v {
                    Bson::Document(d) => Ok(d),
                    other => Err(self.bad(key, "an array of documents", &other)),
                })
                .collect(),
            Some(other) => Err(self.bad(key, "an array", &other)),
        }
    }

    /// Renames a field to the server's name for it (e.g. `projection` to `fields`).
    pub fn rename(&mut self, from: &str, to: &str) {
        if let Some(v) = self.take(from) {
            self.doc.insert(to, v);
        }
    }

    /// Sets a field of `extra` the runner computed.
    pub fn set(&mut self, key: &str, value: impl Into<Bson>) {
        self.doc.insert(key, value);
    }

    /// The arguments not taken, for `extra`: each must be one [`extra_names`] lists for
    /// this operation.
    pub fn extra(self) -> Step<Option<Vec<u8>>> {
        let allowed = extra_names(&self.op);
        let unknown: Vec<&str> = self
            .doc
            .keys()
            .map(String::as_str)
            .filter(|k| !allowed.contains(k))
            .collect();
        if !unknown.is_empty() {
            return Err(Fail(format!(
                "{}: the runner does not support argument(s) {} (neither a WIT field nor a \
                 documented `extra` name of this operation)",
                self.op,
                unknown.join(", ")
            )));
        }
        if self.doc.is_empty() {
            Ok(None)
        } else {
            bytes(&self.doc).map(Some)
        }
    }

    /// For WIT calls without `extra`: an argument left over cannot be passed.
    pub fn done(self) -> Step<()> {
        match self.doc.keys().next() {
            None => Ok(()),
            Some(_) => {
                let keys: Vec<&str> = self.doc.keys().map(String::as_str).collect();
                Err(Fail(format!(
                    "{}: no WIT parameter for argument(s) {}",
                    self.op,
                    keys.join(", ")
                )))
            }
        }
    }
}

const WRITE: &[&str] = &["comment", "let", "bypassDocumentValidation", "rawData"];
const FIND: &[&str] = &[
    "allowDiskUse",
    "collation",
    "comment",
    "hint",
    "let",
    "max",
    "min",
    "maxTimeMS",
    "returnKey",
    "showRecordId",
    "noCursorTimeout",
    "rawData",
    "maxAwaitTimeMS",
    "tailable",
    "awaitData",
];
const AGGREGATE: &[&str] = &[
    "allowDiskUse",
    "bypassDocumentValidation",
    "collation",
    "comment",
    "hint",
    "let",
    "maxTimeMS",
    "rawData",
    "maxAwaitTimeMS",
];
const FIND_AND_MODIFY: &[&str] = &[
    "sort",
    "fields",
    "new",
    "upsert",
    "arrayFilters",
    "collation",
    "hint",
    "comment",
    "let",
    "bypassDocumentValidation",
    "maxTimeMS",
    "rawData",
];

/// The arguments an operation may pass in `extra` under their own names: what the WIT
/// documents for it (server field names the driver sends as they are, or routes: update
/// and delete statement options into each statement, `$changeStream` options into the
/// stage, `maxAwaitTimeMS` to getMore, countDocuments' `skip`/`limit` into its pipeline,
/// run-cursor-command's cursor options), and the names the runner maps arguments to
/// (`fields`, `new`, `tailable`, `awaitData`).
pub fn extra_names(op: &str) -> &'static [&'static str] {
    match op {
        "insertOne" => WRITE,
        // Typed in client-bulk-write-options but for the server's rawData.
        "clientBulkWrite" => &["rawData"],
        "insertMany" | "bulkWrite" => &[
            "ordered",
            "comment",
            "let",
            "bypassDocumentValidation",
            "rawData",
        ],
        "updateOne" => &[
            "upsert",
            "collation",
            "hint",
            "arrayFilters",
            "sort",
            "comment",
            "let",
            "bypassDocumentValidation",
            "rawData",
        ],
        "updateMany" => &[
            "upsert",
            "collation",
            "hint",
            "arrayFilters",
            "comment",
            "let",
            "bypassDocumentValidation",
            "rawData",
        ],
        "replaceOne" => &[
            "upsert",
            "collation",
            "hint",
            "sort",
            "comment",
            "let",
            "bypassDocumentValidation",
            "rawData",
        ],
        "deleteOne" | "deleteMany" => &["collation", "hint", "comment", "let", "rawData"],
        "findOneAndDelete" | "findOneAndUpdate" | "findOneAndReplace" => FIND_AND_MODIFY,
        "find" | "findOne" | "createFindCursor" => FIND,
        "aggregate" => AGGREGATE,
        "createChangeStream" => &[
            "fullDocument",
            "fullDocumentBeforeChange",
            "showExpandedEvents",
            "resumeAfter",
            "startAfter",
            "startAtOperationTime",
            "collation",
            "comment",
            "maxAwaitTimeMS",
        ],
        "countDocuments" | "count" => &[
            "skip",
            "limit",
            "collation",
            "hint",
            "comment",
            "maxTimeMS",
            "rawData",
        ],
        "estimatedDocumentCount" => &["comment", "maxTimeMS", "rawData"],
        "distinct" => &["collation", "hint", "comment", "maxTimeMS", "rawData"],
        "createIndex" => &["commitQuorum", "comment", "maxTimeMS", "rawData"],
        "dropIndex" | "dropIndexes" | "listIndexes" | "listIndexNames" => {
            &["comment", "maxTimeMS", "rawData"]
        }
        "drop" | "dropCollection" => &["comment"],
        "createSearchIndex"
        | "createSearchIndexes"
        | "listSearchIndexes"
        | "updateSearchIndex"
        | "dropSearchIndex" => &["comment"],
        "rename" => &["dropTarget", "comment"],
        "runCursorCommand" | "createCommandCursor" => {
            &["tailable", "awaitData", "maxTimeMS", "comment"]
        }
        "listCollections" | "listCollectionObjects" | "listCollectionNames" => {
            &["nameOnly", "authorizedCollections", "comment", "rawData"]
        }
        "listDatabases" | "listDatabaseObjects" | "listDatabaseNames" => {
            &["nameOnly", "authorizedDatabases", "comment"]
        }
        // The create command's own options, as the CRUD spec names them.
        "createCollection" => &[
            "capped",
            "size",
            "max",
            "viewOn",
            "pipeline",
            "collation",
            "changeStreamPreAndPostImages",
            "clusteredIndex",
            "expireAfterSeconds",
            "timeseries",
            "validator",
            "validationLevel",
            "validationAction",
            "storageEngine",
            "indexOptionDefaults",
            "encryptedFields",
            "comment",
        ],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn typed_fields_come_out_and_the_rest_is_extra() {
        let spec = doc! { "filter": {"a": 1}, "batchSize": 2.0, "hint": "a_1", "timeoutMS": 5 };
        let mut args = Args::new("find", Some(&spec));
        assert_eq!(args.req_doc("filter").unwrap(), doc! {"a": 1});
        assert_eq!(args.u32("batchSize").unwrap(), Some(2));
        assert_eq!(args.timeout().unwrap(), Some(5));
        assert_eq!(args.doc("sort").unwrap(), None);
        let extra = args.extra().unwrap().unwrap();
        assert_eq!(
            Document::from_reader(extra.as_slice()).unwrap(),
            doc! {"hint": "a_1"}
        );
    }

    #[test]
    fn an_argument_the_operation_does_not_document_is_a_failure() {
        let spec = doc! { "filter": {}, "maxAwaitTimeMS": 5, "batchSize": 2, "noSuchOption": 1 };
        let mut args = Args::new("find", Some(&spec));
        args.req_doc("filter").unwrap();
        args.u32("batchSize").unwrap();
        let err = args.extra().unwrap_err().0;
        assert!(
            err.contains("noSuchOption") && !err.contains("maxAwaitTimeMS"),
            "{err}"
        );
        // A server name of one operation is not one of another's.
        let args = Args::new("insertOne", Some(&doc! { "upsert": true }));
        assert!(args.extra().unwrap_err().0.contains("upsert"));
        let args = Args::new("updateOne", Some(&doc! { "upsert": true, "hint": "a_1" }));
        assert!(args.extra().unwrap().is_some());
    }

    #[test]
    fn wrong_types_and_leftovers_are_failures() {
        let spec = doc! { "filter": 1, "timeoutMS": -1, "x": true };
        let mut args = Args::new("find", Some(&spec));
        assert!(args
            .req_doc("filter")
            .unwrap_err()
            .0
            .contains("should be a document"));
        assert!(args.timeout().unwrap_err().0.contains("unsigned"));
        assert!(args.done().unwrap_err().0.contains("argument(s) x"));
        let mut renamed = Args::new("findOneAndUpdate", Some(&doc! {"projection": {"a": 1}}));
        renamed.rename("projection", "fields");
        assert!(renamed.has("fields") && !renamed.has("projection"));
    }
}
