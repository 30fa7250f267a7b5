//! Collection operations (CRUD, indexes, change streams) on the WIT `collection`.

use super::cursor;
use super::{decode, output, unwrap_v, OpResult, Output};
use crate::bindings::exports::mongo_wasi::driver::collection::{
    AggregateOptions, FindOptions, OpOptions, UpdateSpec,
};
use crate::bindings::exports::mongo_wasi::driver::cursor::TimeoutMode;
use crate::bindings::exports::mongo_wasi::driver::types::UpdateResult;
use crate::unified::args::{bytes, Args};
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use bson::{doc, Bson, Document};
use wasmtime::component::ResourceAny;

/// `timeoutMS`, `session` and what the record has no field for (`extra`).
pub fn op_options(args: &mut Args, session: Option<ResourceAny>) -> Step<OpOptions> {
    let timeout_ms = args.timeout()?;
    let rest = std::mem::replace(args, Args::new("", None));
    Ok(OpOptions {
        timeout_ms,
        session,
        extra: rest.extra()?,
    })
}

pub fn timeout_mode(args: &mut Args) -> Step<Option<TimeoutMode>> {
    match args.string("timeoutMode")?.as_deref() {
        None => Ok(None),
        Some("cursorLifetime") => Ok(Some(TimeoutMode::CursorLifetime)),
        Some("iteration") => Ok(Some(TimeoutMode::Iteration)),
        Some(other) => Err(Fail(format!("unknown timeoutMode {other:?}"))),
    }
}

/// `cursorType` as the find command's own fields.
pub fn cursor_type(args: &mut Args) -> Step<()> {
    match args.string("cursorType")?.as_deref() {
        None | Some("nonTailable") => {}
        Some("tailable") => args.set("tailable", true),
        Some("tailableAwait") => {
            args.set("tailable", true);
            args.set("awaitData", true);
        }
        Some(other) => return Err(Fail(format!("unknown cursorType {other:?}"))),
    }
    Ok(())
}

pub fn aggregate_options(args: &mut Args, session: Option<ResourceAny>) -> Step<AggregateOptions> {
    let batch_size = args.u32("batchSize")?;
    let timeout_mode = timeout_mode(args)?;
    cursor_type(args)?;
    let o = op_options(args, session)?;
    Ok(AggregateOptions {
        timeout_ms: o.timeout_ms,
        session: o.session,
        batch_size,
        timeout_mode,
        extra: o.extra,
    })
}

fn find_options(args: &mut Args, session: Option<ResourceAny>) -> Step<FindOptions> {
    let sort = args.doc("sort")?.map(|d| bytes(&d)).transpose()?;
    let projection = args.doc("projection")?.map(|d| bytes(&d)).transpose()?;
    let skip = args.int("skip")?;
    let limit = args.int("limit")?;
    let a = aggregate_options(args, session)?;
    Ok(FindOptions {
        timeout_ms: a.timeout_ms,
        session: a.session,
        sort,
        projection,
        skip,
        limit,
        batch_size: a.batch_size,
        timeout_mode: a.timeout_mode,
        extra: a.extra,
    })
}

fn update_spec(args: &mut Args, key: &str) -> Step<UpdateSpec> {
    match args.take(key) {
        Some(Bson::Document(d)) => Ok(UpdateSpec::Document(bytes(&d)?)),
        Some(Bson::Array(stages)) => {
            let stages: Step<Vec<Vec<u8>>> = stages
                .iter()
                .map(|s| match s {
                    Bson::Document(d) => bytes(d),
                    other => Err(Fail(format!("{key}: a pipeline stage is {other}"))),
                })
                .collect();
            Ok(UpdateSpec::Pipeline(stages?))
        }
        other => Err(Fail(format!(
            "{key} should be a document or a pipeline, not {other:?}"
        ))),
    }
}

fn update_result(r: UpdateResult) -> Step<Output> {
    let mut d = doc! {
        "matchedCount": r.matched_count,
        "modifiedCount": r.modified_count,
        "upsertedCount": i64::from(r.upserted_id.is_some()),
    };
    if let Some(id) = r.upserted_id {
        d.insert("upsertedId", unwrap_v(&id, "upserted-id")?);
    }
    Ok(Output::Value(d.into()))
}

fn optional_doc(d: Option<Vec<u8>>) -> Step<Output> {
    Ok(Output::Value(match d {
        Some(d) => decode(&d, "the result")?.into(),
        None => Bson::Null,
    }))
}

/// The Index Management spec's index options (they go in the index model).
const INDEX_OPTIONS: &[&str] = &[
    "name",
    "unique",
    "background",
    "sparse",
    "expireAfterSeconds",
    "hidden",
    "partialFilterExpression",
    "storageEngine",
    "weights",
    "default_language",
    "language_override",
    "textIndexVersion",
    "2dsphereIndexVersion",
    "bits",
    "min",
    "max",
    "bucketSize",
    "collation",
    "wildcardProjection",
    "version",
];

/// findAndModify's names: `fields` for projection, `new` for returnDocument.
fn find_and_modify_names(args: &mut Args) -> Step<()> {
    args.rename("projection", "fields");
    if let Some(r) = args.string("returnDocument")? {
        match r.to_ascii_lowercase().as_str() {
            "after" => args.set("new", true),
            "before" => args.set("new", false),
            _ => {
                return Err(Fail(format!(
                    "returnDocument {r:?} is neither Before nor After"
                )))
            }
        }
    }
    Ok(())
}

impl TestRun {
    pub(super) fn collection_operation(
        &mut self,
        object: &str,
        name: &str,
        mut args: Args,
    ) -> Step<OpResult> {
        let coll = self.entities.collection(object)?.handle;
        let session = self.session_arg(&mut args)?;
        let g = &mut self.guest;
        let api = g.driver.mongo_wasi_driver_collection().collection();
        let s = &mut g.store;
        match name {
            "insertOne" => {
                let d = bytes(&args.req_doc("document")?)?;
                let r = api.call_insert_one(s, coll, &d, &op_options(&mut args, session)?)?;
                output(r, |r| {
                    Ok(Output::Value(
                        doc! { "insertedId": unwrap_v(&r.inserted_id, "inserted-id")? }.into(),
                    ))
                })
            }
            "insertMany" => {
                let docs: Step<Vec<Vec<u8>>> = args.docs("documents")?.iter().map(bytes).collect();
                let r = api.call_insert_many(s, coll, &docs?, &op_options(&mut args, session)?)?;
                output(r, |r| {
                    Ok(Output::Value(
                        doc! { "insertedIds": decode(&r.inserted_ids, "inserted-ids")? }.into(),
                    ))
                })
            }
            "find" | "createFindCursor" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api.call_find(s, coll, &filter, &find_options(&mut args, session)?)?;
                match name {
                    "find" => cursor::documents(g, r),
                    _ => cursor::entity(r),
                }
            }
            "findOne" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api.call_find_one(s, coll, &filter, &find_options(&mut args, session)?)?;
                output(r, optional_doc)
            }
            "updateOne" | "updateMany" | "replaceOne" => {
                let filter = bytes(&args.req_doc("filter")?)?;
                let r = match name {
                    "replaceOne" => {
                        let replacement = bytes(&args.req_doc("replacement")?)?;
                        api.call_replace_one(
                            s,
                            coll,
                            &filter,
                            &replacement,
                            &op_options(&mut args, session)?,
                        )?
                    }
                    "updateOne" => {
                        let update = update_spec(&mut args, "update")?;
                        api.call_update_one(
                            s,
                            coll,
                            &filter,
                            &update,
                            &op_options(&mut args, session)?,
                        )?
                    }
                    _ => {
                        let update = update_spec(&mut args, "update")?;
                        api.call_update_many(
                            s,
                            coll,
                            &filter,
                            &update,
                            &op_options(&mut args, session)?,
                        )?
                    }
                };
                output(r, update_result)
            }
            "deleteOne" | "deleteMany" => {
                let filter = bytes(&args.req_doc("filter")?)?;
                let o = op_options(&mut args, session)?;
                let r = match name {
                    "deleteOne" => api.call_delete_one(s, coll, &filter, &o)?,
                    _ => api.call_delete_many(s, coll, &filter, &o)?,
                };
                output(r, |r| {
                    Ok(Output::Value(
                        doc! { "deletedCount": r.deleted_count }.into(),
                    ))
                })
            }
            "findOneAndDelete" | "findOneAndUpdate" | "findOneAndReplace" => {
                let filter = bytes(&args.req_doc("filter")?)?;
                find_and_modify_names(&mut args)?;
                let r = match name {
                    "findOneAndDelete" => api.call_find_one_and_delete(
                        s,
                        coll,
                        &filter,
                        &op_options(&mut args, session)?,
                    )?,
                    "findOneAndUpdate" => {
                        let update = update_spec(&mut args, "update")?;
                        api.call_find_one_and_update(
                            s,
                            coll,
                            &filter,
                            &update,
                            &op_options(&mut args, session)?,
                        )?
                    }
                    _ => {
                        let replacement = bytes(&args.req_doc("replacement")?)?;
                        api.call_find_one_and_replace(
                            s,
                            coll,
                            &filter,
                            &replacement,
                            &op_options(&mut args, session)?,
                        )?
                    }
                };
                output(r, optional_doc)
            }
            "aggregate" => {
                let pipeline: Step<Vec<Vec<u8>>> =
                    args.docs("pipeline")?.iter().map(bytes).collect();
                let r = api.call_aggregate(
                    s,
                    coll,
                    &pipeline?,
                    &aggregate_options(&mut args, session)?,
                )?;
                cursor::documents(g, r)
            }
            "countDocuments" => {
                let filter = bytes(&args.req_doc("filter")?)?;
                let r =
                    api.call_count_documents(s, coll, &filter, &op_options(&mut args, session)?)?;
                output(r, |n| Ok(Output::Value(Bson::Int64(n))))
            }
            "count" => {
                let filter = bytes(&args.req_doc("filter")?)?;
                let r = api.call_count(s, coll, &filter, &op_options(&mut args, session)?)?;
                output(r, |n| Ok(Output::Value(Bson::Int64(n))))
            }
            "estimatedDocumentCount" => {
                let r =
                    api.call_estimated_document_count(s, coll, &op_options(&mut args, session)?)?;
                output(r, |n| Ok(Output::Value(Bson::Int64(n))))
            }
            "distinct" => {
                let field = args.req_string("fieldName")?;
                let filter = bytes(&args.req_doc("filter")?)?;
                let r =
                    api.call_distinct(s, coll, &field, &filter, &op_options(&mut args, session)?)?;
                output(r, |d| {
                    let mut d = decode(&d, "distinct's result")?;
                    let values = d
                        .remove("values")
                        .ok_or_else(|| Fail("distinct's result has no values".into()))?;
                    Ok(Output::Value(values))
                })
            }
            "mapReduce" => {
                let code = |args: &mut Args, key: &str| match args.take(key) {
                    Some(Bson::JavaScriptCode(c) | Bson::String(c)) => Ok(c),
                    other => Err(Fail(format!("mapReduce's {key} is not code: {other:?}"))),
                };
                let (map, reduce) = (code(&mut args, "map")?, code(&mut args, "reduce")?);
                let out = bytes(&args.req_doc("out")?)?;
                let opts = op_options(&mut args, session)?;
                let r = api.call_map_reduce(s, coll, &map, &reduce, &out, &opts)?;
                output(r, |d| {
                    let mut d = decode(&d, "mapReduce's result")?;
                    // Inline output is `results`; output to a collection names it in `result`.
                    let results = d
                        .remove("results")
                        .or_else(|| d.remove("result"))
                        .ok_or_else(|| Fail("mapReduce's result has no results".into()))?;
                    Ok(Output::Value(results))
                })
            }
            "bulkWrite" => {
                let models: Step<Vec<Vec<u8>>> = args.docs("requests")?.iter().map(bytes).collect();
                let r = api.call_bulk_write(s, coll, &models?, &op_options(&mut args, session)?)?;
                output(r, |d| {
                    Ok(Output::Value(decode(&d, "the bulk write result")?.into()))
                })
            }
            // Index options belong in the index model, not on the command: create-indexes
            // with one model says so, where create-index's `extra` would not.
            "createIndex" => {
                let mut model = doc! { "key": args.req_doc("keys")? };
                for key in INDEX_OPTIONS {
                    if let Some(v) = args.take(key) {
                        // The spec's `version` is the server's `v`.
                        model.insert(if *key == "version" { "v" } else { *key }, v);
                    }
                }
                let o = op_options(&mut args, session)?;
                let r = api.call_create_indexes(s, coll, &[bytes(&model)?], &o)?;
                output(r, |names| match names.into_iter().next() {
                    Some(n) => Ok(Output::Value(Bson::String(n))),
                    None => Err(Fail("create-indexes named no index".into())),
                })
            }
            "dropIndex" => {
                let index = args.req_string("name")?;
                let r = api.call_drop_index(s, coll, &index, &op_options(&mut args, session)?)?;
                output(r, |()| Ok(Output::None))
            }
            "dropIndexes" => {
                let r = api.call_drop_indexes(s, coll, &op_options(&mut args, session)?)?;
                output(r, |()| Ok(Output::None))
            }
            "listIndexes" | "listIndexNames" => {
                let r = api.call_list_indexes(s, coll, &aggregate_options(&mut args, session)?)?;
                let docs = match cursor::documents(g, r)? {
                    Ok(Output::Documents(d)) if name == "listIndexNames" => d,
                    other => return Ok(other),
                };
                let names = docs
                    .iter()
                    .map(|d| d.get("name").cloned().unwrap_or(Bson::Null));
                Ok(Ok(Output::Value(Bson::Array(names.collect()))))
            }
            "drop" => {
                let r = api.call_drop(s, coll, &op_options(&mut args, session)?)?;
                output(r, |()| Ok(Output::None))
            }
            "rename" => {
                let to = args.req_string("to")?;
                let r = api.call_rename(s, coll, &to, &op_options(&mut args, session)?)?;
                output(r, |()| Ok(Output::None))
            }
            "createChangeStream" => {
                let pipeline: Step<Vec<Vec<u8>>> =
                    args.docs("pipeline")?.iter().map(bytes).collect();
                let r =
                    api.call_watch(s, coll, &pipeline?, &aggregate_options(&mut args, session)?)?;
                cursor::entity(r)
            }
            other => Err(Fail(format!("collection.{other}: no WIT method for it"))),
        }
    }
}

/// A WIT list of documents, decoded.
pub fn decode_all(list: &[Vec<u8>], what: &str) -> Step<Vec<Document>> {
    list.iter().map(|d| decode(d, what)).collect()
}
