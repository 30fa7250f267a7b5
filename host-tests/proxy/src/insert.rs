//! Where nx-27017's `insert` differs from mongod's, made good here:
//!
//! - nx-27017 stores a document-valued `comment` (`nx-gaps.py`: insert-comment) or
//!   `readConcern` (the first command of a transaction; `nx-gaps.py`: insert-read-concern) as
//!   one more inserted document. mongod only logs a comment, and takes a transaction's read
//!   concern for its snapshot, which nx-27017 has none of: both go no further than the proxy
//!   ([`for_backend`]).
//! - nx-27017 words a duplicate `_id` as SQLite does (`UNIQUE constraint failed: c._id`;
//!   `nx-gaps.py`: dup-key-message); mongod as `E11000 duplicate key error collection: <ns>
//!   index: _id_ dup key: { _id: <value> }`, with `keyPattern` and `keyValue`
//!   ([`mongod_duplicate_key`]). A duplicate in another unique index keeps nx-27017's wording:
//!   its message names no key.
//! - nx-27017 stores a document whose `_id` holds a `$`-prefixed field name (`nx-gaps.py`:
//!   dollar-id); mongod refuses it as a write error ([`dollar_id_errors`]).

use bson::{doc, Bson, Document};

const DUPLICATE_KEY: i32 = 11000;

/// The insert as nx-27017 gets it: without `comment`, and without the `readConcern` of a
/// transaction's first command; `None` when there is nothing to take out.
pub fn for_backend(body: &Document) -> Option<Document> {
    if body.keys().next().map(String::as_str) != Some("insert") {
        return None;
    }
    let starts_transaction = matches!(body.get("startTransaction"), Some(Bson::Boolean(true)));
    let read_concern = starts_transaction && body.contains_key("readConcern");
    if !body.contains_key("comment") && !read_concern {
        return None;
    }
    let mut out = body.clone();
    out.remove("comment");
    if read_concern {
        out.remove("readConcern");
    }
    Some(out)
}

const DOLLAR_PREFIXED_FIELD_NAME: i32 = 52;

/// The first `$`-prefixed field name in `v` (a document's or an array's, at any depth).
fn dollar_name(v: &Bson) -> Option<&str> {
    match v {
        Bson::Document(d) => d.iter().find_map(|(k, v)| match k.starts_with('$') {
            true => Some(k.as_str()),
            false => dollar_name(v),
        }),
        Bson::Array(items) => items.iter().find_map(dollar_name),
        _ => None,
    }
}

/// mongod's write errors for inserted documents whose `_id` holds a `$`-prefixed field name
/// (`fixDocumentForInsert`), by statement index; `None` when there are none.
pub fn dollar_id_errors(
    body: &Document,
    sequences: &[(String, Vec<Document>)],
) -> Option<Vec<(usize, Document)>> {
    if body.keys().next().map(String::as_str) != Some("insert") {
        return None;
    }
    let errors: Vec<(usize, Document)> =
        crate::version_behaviour::statements(body, sequences, "documents")
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                let name = dollar_name(d.get("_id")?)?;
                let msg = format!(
            "_id fields may not contain '$'-prefixed fields: {name} is not valid for storage."
        );
                Some((
                    i,
                    doc! { "code": DOLLAR_PREFIXED_FIELD_NAME, "errmsg": msg },
                ))
            })
            .collect();
    (!errors.is_empty()).then_some(errors)
}

/// A value as mongod's error messages show it (`BSONObj::toString`).
fn shell_form(v: &Bson) -> String {
    match v {
        Bson::String(s) => format!("{s:?}"),
        Bson::ObjectId(o) => format!("ObjectId('{o}')"),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Double(d) => d.to_string(),
        Bson::Boolean(b) => b.to_string(),
        Bson::Null => "null".into(),
        Bson::Document(d) => {
            let fields: Vec<String> = d
                .iter()
                .map(|(k, v)| format!("{k}: {}", shell_form(v)))
                .collect();
            match fields.is_empty() {
                true => "{}".into(),
                false => format!("{{ {} }}", fields.join(", ")),
            }
        }
        other => other.to_string(),
    }
}

/// An insert's reply with mongod's duplicate-`_id` write errors, or `None` when it has none
/// in nx-27017's wording. `documents` are the inserted documents (body or sequence).
pub fn mongod_duplicate_key(
    db: &str,
    body: &Document,
    documents: &[Document],
    reply: &Document,
) -> Option<Document> {
    let collection = body.get_str("insert").ok()?;
    let nx_message = |e: &Document| {
        e.get_i32("code").ok() == Some(DUPLICATE_KEY)
            && e.get_str("errmsg")
                .is_ok_and(|m| m.starts_with("UNIQUE constraint failed: ") && m.ends_with("._id"))
    };
    let errors = reply.get_array("writeErrors").ok()?;
    if !errors
        .iter()
        .any(|e| e.as_document().is_some_and(nx_message))
    {
        return None;
    }
    let errors: Vec<Bson> = errors
        .iter()
        .map(|e| match e.as_document() {
            Some(e) if nx_message(e) => {
                let id = usize::try_from(e.get_i32("index").unwrap_or(-1))
                    .ok()
                    .and_then(|i| documents.get(i))
                    .and_then(|d| d.get("_id"));
                let Some(id) = id else {
                    return Bson::Document(e.clone());
                };
                let key = doc! { "_id": id.clone() };
                let msg = format!(
                    "E11000 duplicate key error collection: {db}.{collection} index: _id_ dup key: {}",
                    shell_form(&Bson::Document(key.clone()))
                );
                let mut out = e.clone();
                out.insert("errmsg", msg);
                out.insert("keyPattern", doc! { "_id": 1 });
                out.insert("keyValue", key);
                Bson::Document(out)
            }
            _ => e.clone(),
        })
        .collect();
    let mut out = reply.clone();
    out.insert("writeErrors", errors);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::oid::ObjectId;

    #[test]
    fn comment_and_a_transactions_read_concern_stay_here() {
        let body = doc! { "insert": "c", "comment": { "k": "v" }, "$db": "d" };
        assert_eq!(for_backend(&body), Some(doc! { "insert": "c", "$db": "d" }));
        let txn = doc! { "insert": "c", "readConcern": { "level": "snapshot" },
        "startTransaction": true, "autocommit": false };
        assert_eq!(
            for_backend(&txn),
            Some(doc! { "insert": "c", "startTransaction": true, "autocommit": false })
        );
        // Nothing to take out, or not an insert.
        assert_eq!(for_backend(&doc! { "insert": "c", "ordered": true }), None);
        assert_eq!(
            for_backend(&doc! { "find": "c", "comment": { "k": 1 } }),
            None
        );
        let outside = doc! { "insert": "c", "readConcern": { "level": "local" } };
        assert_eq!(for_backend(&outside), None);
    }

    #[test]
    fn a_dollar_prefixed_name_in_id_is_a_write_error() {
        let body = doc! { "insert": "c", "documents": [{ "_id": 1 }, { "_id": { "a": [{ "$b": 1 }] } },
        { "_id": "$x" }, { "_id": 2, "x": { "$y": 1 } }] };
        let errors = dollar_id_errors(&body, &[]).unwrap();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, 1);
        assert_eq!(errors[0].1.get_i32("code").unwrap(), 52);
        assert_eq!(
            errors[0].1.get_str("errmsg").unwrap(),
            "_id fields may not contain '$'-prefixed fields: $b is not valid for storage."
        );
        let seq = vec![("documents".to_string(), vec![doc! { "_id": { "$a": 1 } }])];
        let errors = dollar_id_errors(&doc! { "insert": "c" }, &seq).unwrap();
        assert_eq!(errors[0].0, 0);
        assert_eq!(
            dollar_id_errors(&doc! { "insert": "c", "documents": [{ "_id": 1 }] }, &[]),
            None
        );
        assert_eq!(dollar_id_errors(&doc! { "update": "c" }, &seq), None);
    }

    #[test]
    fn a_duplicate_id_is_worded_as_mongod_words_it() {
        let body = doc! { "insert": "test", "$db": "db" };
        let oid = ObjectId::from_bytes([1; 12]);
        let docs = [doc! { "_id": 1 }, doc! { "_id": "a" }, doc! { "_id": oid }];
        let nx = |i: i32| doc! { "index": i, "code": 11000, "errmsg": "UNIQUE constraint failed: test._id" };
        let reply = doc! { "ok": 1, "n": 0, "writeErrors": [nx(0), nx(1), nx(2)] };
        let out = mongod_duplicate_key("db", &body, &docs, &reply).unwrap();
        let errors = out.get_array("writeErrors").unwrap();
        let msg = |i: usize| {
            errors[i]
                .as_document()
                .unwrap()
                .get_str("errmsg")
                .unwrap()
                .to_string()
        };
        assert_eq!(
            msg(0),
            "E11000 duplicate key error collection: db.test index: _id_ dup key: { _id: 1 }"
        );
        assert!(msg(1).ends_with("dup key: { _id: \"a\" }"), "{}", msg(1));
        assert!(
            msg(2).ends_with("dup key: { _id: ObjectId('010101010101010101010101') }"),
            "{}",
            msg(2)
        );
        let first = errors[0].as_document().unwrap();
        assert_eq!(
            first.get_document("keyPattern").unwrap(),
            &doc! { "_id": 1 }
        );
        assert_eq!(first.get_document("keyValue").unwrap(), &doc! { "_id": 1 });
        // Another index, another code, or no error: unchanged.
        let other = doc! { "writeErrors": [{ "index": 0, "code": 11000,
        "errmsg": "UNIQUE constraint failed: index 'idx_test_x'" }] };
        assert_eq!(mongod_duplicate_key("db", &body, &docs, &other), None);
        assert_eq!(
            mongod_duplicate_key("db", &body, &docs, &doc! { "ok": 1, "n": 1 }),
            None
        );
    }
}
