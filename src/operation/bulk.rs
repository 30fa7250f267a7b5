//! Collection bulk writes (CRUD spec), sans I/O: models in the unified-test
//! shape (`{insertOne: {document}}`, `{updateMany: {filter, update, ...}}`)
//! become runs of statements, one write command per run of the same kind.
//! Runs keep the models' order, so indexes map back directly; an unordered
//! bulk write simply does not stop at the first error.

use super::write::{with_id, WriteKind};
use crate::error::{Error, Result};
use bson::{cstr, RawBson, RawDocument, RawDocumentBuf};

/// Consecutive models of one kind: one write command.
#[derive(Debug)]
pub struct Run {
    pub kind: WriteKind,
    pub statements: Vec<RawDocumentBuf>,
    /// Index of the first statement among all models.
    pub first_index: usize,
    /// False when any statement touches many documents.
    pub retryable: bool,
}

/// How a bulk write will run.
#[derive(Debug)]
pub struct Plan {
    pub runs: Vec<Run>,
    /// (model index, `_id`) of each insert, generated when absent.
    pub inserted: Vec<(usize, RawBson)>,
}

pub fn plan(models: &[RawDocumentBuf]) -> Result<Plan> {
    if models.is_empty() {
        return Err(Error::invalid_argument(
            "bulk-write needs at least one model",
        ));
    }
    let mut runs: Vec<Run> = Vec::new();
    let mut inserted = Vec::new();
    // One clock read for the generated ids of the whole bulk write.
    let oids = crate::runtime::object_ids();
    for (index, model) in models.iter().enumerate() {
        let (name, args) = single_field(model)?;
        let (kind, statement, multi) = match name {
            "insertOne" => {
                let doc = args
                    .get_document("document")
                    .map_err(|_| bad(index, "insertOne needs a document"))?;
                let (doc, id) = with_id(doc, &oids)?;
                inserted.push((index, id));
                (WriteKind::Insert, doc, false)
            }
            "updateOne" | "updateMany" => {
                let update = args
                    .get("update")?
                    .ok_or_else(|| bad(index, "update needs an update"))?;
                if let bson::RawBsonRef::Document(d) = update {
                    if !starts_with_operator(d) {
                        return Err(bad(
                            index,
                            "update document must contain only update operators",
                        ));
                    }
                }
                let stmt = statement(args, "update", "u", name == "updateMany", index)?;
                (WriteKind::Update, stmt, name == "updateMany")
            }
            "replaceOne" => {
                let replacement = args
                    .get_document("replacement")
                    .map_err(|_| bad(index, "replaceOne needs a replacement"))?;
                if starts_with_operator(replacement) {
                    return Err(bad(
                        index,
                        "replacement document must not contain update operators",
                    ));
                }
                (
                    WriteKind::Update,
                    statement(args, "replacement", "u", false, index)?,
                    false,
                )
            }
            "deleteOne" | "deleteMany" => {
                let mut stmt = statement(args, "", "", false, index)?;
                stmt.append(cstr!("limit"), if name == "deleteOne" { 1 } else { 0 });
                (WriteKind::Delete, stmt, name == "deleteMany")
            }
            other => return Err(bad(index, &format!("unknown write model {other}"))),
        };
        match runs.last_mut() {
            Some(run) if run.kind == kind => {
                run.statements.push(statement);
                run.retryable &= !multi;
            }
            _ => runs.push(Run {
                kind,
                statements: vec![statement],
                first_index: index,
                retryable: !multi,
            }),
        }
    }
    Ok(Plan { runs, inserted })
}

/// An update or delete statement: `q` from `filter`, `u` from `field`,
/// and the per-statement options carried over by their server names.
fn statement(
    args: &RawDocument,
    field: &str,
    as_name: &str,
    multi: bool,
    index: usize,
) -> Result<RawDocumentBuf> {
    let filter = args
        .get_document("filter")
        .map_err(|_| bad(index, "a filter is required"))?;
    let mut stmt = RawDocumentBuf::new();
    stmt.append(cstr!("q"), filter.to_owned());
    if !field.is_empty() {
        let u = args
            .get(field)?
            .ok_or_else(|| bad(index, &format!("{field} is required")))?;
        let key = bson::raw::CString::try_from(as_name).map_err(|_| bad(index, "bad field"))?;
        stmt.append(key, u);
    }
    if multi {
        stmt.append(cstr!("multi"), true);
    }
    for (name, key) in [
        ("upsert", cstr!("upsert")),
        ("arrayFilters", cstr!("arrayFilters")),
        ("collation", cstr!("collation")),
        ("hint", cstr!("hint")),
        ("sort", cstr!("sort")),
    ] {
        if let Some(v) = args.get(name)? {
            stmt.append(key, v);
        }
    }
    Ok(stmt)
}

fn single_field(model: &RawDocument) -> Result<(&str, &RawDocument)> {
    let mut iter = model.iter();
    let (name, value) = iter
        .next()
        .ok_or_else(|| Error::invalid_argument("empty write model"))??;
    let args = value
        .as_document()
        .ok_or_else(|| Error::invalid_argument(format!("{} needs a document", name.as_str())))?;
    if iter.next().is_some() {
        return Err(Error::invalid_argument(
            "a write model has exactly one field",
        ));
    }
    Ok((name.as_str(), args))
}

fn starts_with_operator(doc: &RawDocument) -> bool {
    matches!(doc.iter().next(), Some(Ok((k, _))) if k.as_str().starts_with('$'))
}

fn bad(index: usize, what: &str) -> Error {
    Error::invalid_argument(format!("write model {index}: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn consecutive_models_of_a_kind_share_a_command() {
        let models = vec![
            rawdoc! { "insertOne": { "document": { "_id": 1 } } },
            rawdoc! { "insertOne": { "document": { "x": 2 } } },
            rawdoc! { "updateOne": { "filter": { "_id": 1 }, "update": { "$set": { "x": 1 } }, "upsert": true } },
            rawdoc! { "deleteMany": { "filter": {} } },
            rawdoc! { "deleteOne": { "filter": { "_id": 2 } } },
        ];
        let Plan { runs, inserted } = plan(&models).unwrap();
        let shape: Vec<(WriteKind, usize, usize, bool)> = runs
            .iter()
            .map(|r| (r.kind, r.first_index, r.statements.len(), r.retryable))
            .collect();
        assert_eq!(
            shape,
            [
                (WriteKind::Insert, 0, 2, true),
                (WriteKind::Update, 2, 1, true),
                (WriteKind::Delete, 3, 2, false)
            ]
        );
        assert_eq!(inserted.len(), 2);
        assert_eq!(inserted[0], (0, RawBson::Int32(1)));
        assert!(
            matches!(inserted[1].1, RawBson::ObjectId(_)),
            "generated _id"
        );
        assert_eq!(
            runs[1].statements[0],
            rawdoc! { "q": { "_id": 1 }, "u": { "$set": { "x": 1 } }, "upsert": true }
        );
        assert_eq!(runs[2].statements[0], rawdoc! { "q": {}, "limit": 0 });
        assert_eq!(
            runs[2].statements[1],
            rawdoc! { "q": { "_id": 2 }, "limit": 1 }
        );
    }

    #[test]
    fn update_many_is_multi_and_pipelines_pass() {
        let models =
            vec![rawdoc! { "updateMany": { "filter": {}, "update": [{ "$set": { "a": 1 } }] } }];
        let runs = plan(&models).unwrap().runs;
        assert!(!runs[0].retryable);
        assert!(runs[0].statements[0].get_bool("multi").unwrap());
    }

    #[test]
    fn malformed_models_are_errors() {
        for bad in [
            rawdoc! { "insertOne": {} },
            rawdoc! { "updateOne": { "filter": {}, "update": { "x": 1 } } },
            rawdoc! { "replaceOne": { "filter": {}, "replacement": { "$set": { "x": 1 } } } },
            rawdoc! { "frobnicate": {} },
            rawdoc! { "insertOne": { "document": {} }, "deleteOne": { "filter": {} } },
            rawdoc! {},
        ] {
            assert!(plan(std::slice::from_ref(&bad)).is_err(), "{bad:?}");
        }
        assert!(plan(&[]).is_err());
    }
}
