//! nx-27017 cannot match an ObjectId-valued field other than `_id` by equality
//! (`{files_id: ObjectId(..)}` finds nothing; TEST-SERVER.md, nx-gaps.py objectid-field) but
//! does match `{files_id: {$in: [ObjectId(..)]}}`, which means the same to mongod. The proxy
//! rewrites such equalities in the filters of find, update, delete, findAndModify, count and
//! distinct, so that a GridFS download (chunks found by `files_id`) works.

use bson::{doc, Bson, Document};

/// `{field: oid}` and `{field: {$eq: oid}}` become `{field: {$in: [oid]}}`, in `$and`, `$or`
/// and `$nor` too. Answers whether anything changed.
fn rewrite_filter(filter: &mut Document) -> bool {
    let mut changed = false;
    for (key, value) in filter.iter_mut() {
        match (key.as_str(), value) {
            ("$and" | "$or" | "$nor", Bson::Array(parts)) => {
                for part in parts {
                    if let Bson::Document(d) = part {
                        changed |= rewrite_filter(d);
                    }
                }
            }
            ("_id", _) => {}
            (k, _) if k.starts_with('$') => {}
            (_, v @ Bson::ObjectId(_)) => {
                let oid = v.clone();
                *v = Bson::Document(doc! { "$in": [oid] });
                changed = true;
            }
            (_, Bson::Document(ops)) => {
                if let Some(oid @ Bson::ObjectId(_)) = ops.get("$eq").cloned() {
                    ops.remove("$eq");
                    ops.insert("$in", vec![oid]);
                    changed = true;
                }
            }
            _ => {}
        }
    }
    changed
}

fn rewrite_field(doc: &mut Document, key: &str) -> bool {
    match doc.get_mut(key) {
        Some(Bson::Document(filter)) => rewrite_filter(filter),
        _ => false,
    }
}

/// The command with its filters rewritten (None: unchanged).
pub fn rewrite(name: &str, body: &Document) -> Option<Document> {
    let mut out = body.clone();
    let changed = match name {
        "find" => rewrite_field(&mut out, "filter"),
        "count" | "distinct" | "findAndModify" | "findandmodify" => {
            rewrite_field(&mut out, "query")
        }
        "update" | "delete" => {
            let list = if name == "update" {
                "updates"
            } else {
                "deletes"
            };
            let mut any = false;
            if let Ok(statements) = out.get_array_mut(list) {
                for s in statements {
                    if let Bson::Document(s) = s {
                        any |= rewrite_field(s, "q");
                    }
                }
            }
            any
        }
        _ => false,
    };
    changed.then_some(out)
}

/// A statement of an `updates`/`deletes` kind-1 section with its filter rewritten.
pub fn rewrite_statement(identifier: &str, doc: &Document) -> Option<Document> {
    if identifier != "updates" && identifier != "deletes" {
        return None;
    }
    let mut out = doc.clone();
    rewrite_field(&mut out, "q").then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::oid::ObjectId;

    #[test]
    fn object_id_equalities_become_in() {
        let oid = ObjectId::from_bytes([1; 12]);
        let find = doc! { "find": "c", "filter": {
            "_id": oid, "files_id": oid, "n": 1, "a.b": { "$eq": oid, "$exists": true },
            "$or": [{ "x": oid }, { "y": 2 }],
        } };
        let out = rewrite("find", &find).unwrap();
        let f = out.get_document("filter").unwrap();
        assert_eq!(
            f.get("_id"),
            Some(&Bson::ObjectId(oid)),
            "_id matches already"
        );
        assert_eq!(f.get_document("files_id").unwrap(), &doc! { "$in": [oid] });
        assert_eq!(f.get_i32("n").unwrap(), 1);
        assert_eq!(
            f.get_document("a.b").unwrap(),
            &doc! { "$exists": true, "$in": [oid] }
        );
        let or = f.get_array("$or").unwrap();
        assert_eq!(
            or[0].as_document().unwrap(),
            &doc! { "x": { "$in": [oid] } }
        );
        assert!(rewrite("find", &doc! { "find": "c", "filter": { "n": 1 } }).is_none());

        let delete = doc! { "delete": "c", "deletes": [{ "q": { "files_id": oid }, "limit": 0 }] };
        let out = rewrite("delete", &delete).unwrap();
        let q = out.get_array("deletes").unwrap()[0].as_document().unwrap();
        assert_eq!(
            q.get_document("q").unwrap(),
            &doc! { "files_id": { "$in": [oid] } }
        );
        let seq = rewrite_statement("updates", &doc! { "q": { "f": oid }, "u": {} }).unwrap();
        assert_eq!(
            seq.get_document("q").unwrap(),
            &doc! { "f": { "$in": [oid] } }
        );
        assert!(rewrite_statement("documents", &doc! { "q": { "f": oid } }).is_none());
        // Not a filter: an update's new values stay.
        assert!(rewrite(
            "insert",
            &doc! { "insert": "c", "documents": [{ "f": oid }] }
        )
        .is_none());
    }
}
