//! Collection operations (CRUD, indexes, change streams) on the WIT `collection`.

use super::cursor;
use super::{decode, output, unwrap_v, OpResult, Output};
use crate::bindings::exports::mongo_wasi::driver::collection::{
    AggregateOptions, DeleteModel, FindOptions, Hint, OpOptions, SearchIndexModel, UpdateModel,
    UpdateSpec, WriteModel,
};
use crate::bindings::exports::mongo_wasi::driver::cursor::TimeoutMode;
use crate::bindings::exports::mongo_wasi::driver::types::{BulkWriteResult, UpdateResult};
use crate::unified::args::{bytes, Args};
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use crate::Wait;
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
        ..crate::guest::no_options()
    })
}

/// `op_options` with the CRUD spec's everyday options in their typed fields
/// (as a WIT caller writes them since 0.2.0), so the spec suites exercise
/// them; what has no typed field still goes in `extra`.
pub(super) fn typed_options(args: &mut Args, session: Option<ResourceAny>) -> Step<OpOptions> {
    let upsert = args.bool("upsert")?;
    let ordered = args.bool("ordered")?;
    let bypass_document_validation = args.bool("bypassDocumentValidation")?;
    let hint = hint(args.take("hint"))?;
    let collation = args.doc("collation")?.map(|d| bytes(&d)).transpose()?;
    let comment = args
        .take("comment")
        .map(|c| bytes(&doc! { "v": c }))
        .transpose()?;
    let let_ = args.doc("let")?.map(|d| bytes(&d)).transpose()?;
    let array_filters = doc_list(args.take("arrayFilters"))?;
    let sort = args.doc("sort")?.map(|d| bytes(&d)).transpose()?;
    Ok(OpOptions {
        sort,
        upsert,
        ordered,
        bypass_document_validation,
        hint,
        collation,
        comment,
        let_,
        array_filters,
        ..op_options(args, session)?
    })
}

/// A list of documents, each encoded.
fn doc_list(v: Option<Bson>) -> Step<Option<Vec<Vec<u8>>>> {
    match v {
        None => Ok(None),
        Some(Bson::Array(a)) => a
            .iter()
            .map(|d| match d {
                Bson::Document(d) => bytes(d),
                other => Err(Fail(format!("{other} is not a document"))),
            })
            .collect::<Step<Vec<_>>>()
            .map(Some),
        Some(other) => Err(Fail(format!("{other} is not a list"))),
    }
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
        ..crate::guest::aggregate_options()
    })
}

pub(super) fn find_options(args: &mut Args, session: Option<ResourceAny>) -> Step<FindOptions> {
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
        ..crate::guest::find_options()
    })
}

pub(super) fn update_spec(args: &mut Args, key: &str) -> Step<UpdateSpec> {
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

fn hint(v: Option<Bson>) -> Step<Option<Hint>> {
    match v {
        None => Ok(None),
        Some(Bson::String(name)) => Ok(Some(Hint::Name(name))),
        Some(Bson::Document(keys)) => Ok(Some(Hint::Keys(bytes(&keys)?))),
        Some(other) => Err(Fail(format!("hint is neither a name nor keys: {other}"))),
    }
}

/// A unified-format model (`{updateOne: {filter, update, ...}}`) as a typed WIT model.
pub(super) fn write_model(model: &Document) -> Step<WriteModel> {
    let mut it = model.iter();
    let (Some((name, Bson::Document(args))), None) = (it.next(), it.next()) else {
        return Err(Fail(format!(
            "a write model is one named document: {model}"
        )));
    };
    let mut args = args.clone();
    let filter = |args: &mut Document| match args.remove("filter") {
        Some(Bson::Document(f)) => bytes(&f),
        other => Err(Fail(format!("{name} needs a filter, not {other:?}"))),
    };
    let upsert = |args: &mut Document| match args.remove("upsert") {
        None => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(b)),
        Some(other) => Err(Fail(format!("upsert is not a bool: {other}"))),
    };
    let document = |args: &mut Document, key: &str| match args.remove(key) {
        None => Ok(None),
        Some(Bson::Document(c)) => bytes(&c).map(Some),
        Some(other) => Err(Fail(format!("{key} is not a document: {other}"))),
    };
    let model = match name.as_str() {
        "insertOne" => match args.remove("document") {
            Some(Bson::Document(d)) => WriteModel::InsertOne(bytes(&d)?),
            other => return Err(Fail(format!("insertOne needs a document, not {other:?}"))),
        },
        "updateOne" | "updateMany" | "replaceOne" => {
            let update = match name.as_str() {
                "replaceOne" => match args.remove("replacement") {
                    Some(Bson::Document(d)) => UpdateSpec::Document(bytes(&d)?),
                    other => {
                        return Err(Fail(format!("replaceOne needs a replacement: {other:?}")))
                    }
                },
                _ => {
                    let mut a = Args::new("update", Some(&doc! { "u": args.remove("update") }));
                    update_spec(&mut a, "u")?
                }
            };
            let m = UpdateModel {
                filter: filter(&mut args)?,
                update,
                upsert: upsert(&mut args)?,
                collation: document(&mut args, "collation")?,
                hint: hint(args.remove("hint"))?,
                array_filters: doc_list(args.remove("arrayFilters"))?,
                sort: document(&mut args, "sort")?,
            };
            match name.as_str() {
                "updateOne" => WriteModel::UpdateOne(m),
                "updateMany" => WriteModel::UpdateMany(m),
                _ => WriteModel::ReplaceOne(m),
            }
        }
        "deleteOne" | "deleteMany" => {
            let m = DeleteModel {
                filter: filter(&mut args)?,
                collation: document(&mut args, "collation")?,
                hint: hint(args.remove("hint"))?,
            };
            match name.as_str() {
                "deleteOne" => WriteModel::DeleteOne(m),
                _ => WriteModel::DeleteMany(m),
            }
        }
        other => return Err(Fail(format!("unknown write model {other}"))),
    };
    match args.keys().next() {
        Some(k) => Err(Fail(format!(
            "{name}: the typed model has no field for {k}"
        ))),
        None => Ok(model),
    }
}

/// The CRUD spec's BulkWriteResult document from the WIT record.
pub fn bulk_result_document(r: &BulkWriteResult) -> Step<Document> {
    let ids = |list: &[crate::bindings::exports::mongo_wasi::driver::types::IndexedId]| {
        let mut d = Document::new();
        for i in list {
            d.insert(i.index.to_string(), unwrap_v(&i.id, "an id")?);
        }
        Ok::<_, Fail>(d)
    };
    Ok(doc! {
        "insertedCount": r.inserted_count,
        "matchedCount": r.matched_count,
        "modifiedCount": r.modified_count,
        "deletedCount": r.deleted_count,
        "upsertedCount": r.upserted_count,
        "insertedIds": ids(&r.inserted_ids)?,
        "upsertedIds": ids(&r.upserted_ids)?,
    })
}

pub(super) fn update_result(r: UpdateResult) -> Step<Output> {
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
                let r = api
                    .call_insert_one(s, coll, &d, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |r| {
                    Ok(Output::Value(
                        doc! { "insertedId": unwrap_v(&r.inserted_id, "inserted-id")? }.into(),
                    ))
                })
            }
            "insertMany" => {
                let docs: Step<Vec<Vec<u8>>> = args.docs("documents")?.iter().map(bytes).collect();
                let r = api
                    .call_insert_many(s, coll, &docs?, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |r| {
                    let mut ids = Document::new();
                    for (i, id) in r.inserted_ids.iter().enumerate() {
                        ids.insert(i.to_string(), unwrap_v(id, "an inserted id")?);
                    }
                    Ok(Output::Value(doc! { "insertedIds": ids }.into()))
                })
            }
            "find" | "createFindCursor" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api
                    .call_find(s, coll, &filter, &find_options(&mut args, session)?)
                    .w()?;
                match name {
                    "find" => cursor::documents(g, r),
                    _ => cursor::entity(r),
                }
            }
            "findOne" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api
                    .call_find_one(s, coll, &filter, &find_options(&mut args, session)?)
                    .w()?;
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
                            &typed_options(&mut args, session)?,
                        )
                        .w()?
                    }
                    "updateOne" => {
                        let update = update_spec(&mut args, "update")?;
                        api.call_update_one(
                            s,
                            coll,
                            &filter,
                            &update,
                            &typed_options(&mut args, session)?,
                        )
                        .w()?
                    }
                    _ => {
                        let update = update_spec(&mut args, "update")?;
                        api.call_update_many(
                            s,
                            coll,
                            &filter,
                            &update,
                            &typed_options(&mut args, session)?,
                        )
                        .w()?
                    }
                };
                output(r, update_result)
            }
            "deleteOne" | "deleteMany" => {
                let filter = bytes(&args.req_doc("filter")?)?;
                let o = typed_options(&mut args, session)?;
                let r = match name {
                    "deleteOne" => api.call_delete_one(s, coll, &filter, &o).w()?,
                    _ => api.call_delete_many(s, coll, &filter, &o).w()?,
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
                    "findOneAndDelete" => api
                        .call_find_one_and_delete(
                            s,
                            coll,
                            &filter,
                            &typed_options(&mut args, session)?,
                        )
                        .w()?,
                    "findOneAndUpdate" => {
                        let update = update_spec(&mut args, "update")?;
                        api.call_find_one_and_update(
                            s,
                            coll,
                            &filter,
                            &update,
                            &typed_options(&mut args, session)?,
                        )
                        .w()?
                    }
                    _ => {
                        let replacement = bytes(&args.req_doc("replacement")?)?;
                        api.call_find_one_and_replace(
                            s,
                            coll,
                            &filter,
                            &replacement,
                            &typed_options(&mut args, session)?,
                        )
                        .w()?
                    }
                };
                output(r, optional_doc)
            }
            "aggregate" => {
                let pipeline: Step<Vec<Vec<u8>>> =
                    args.docs("pipeline")?.iter().map(bytes).collect();
                let r = api
                    .call_aggregate(s, coll, &pipeline?, &aggregate_options(&mut args, session)?)
                    .w()?;
                cursor::documents(g, r)
            }
            "countDocuments" => {
                let filter = bytes(&args.req_doc("filter")?)?;
                let r = api
                    .call_count_documents(s, coll, &filter, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |n| Ok(Output::Value(Bson::Int64(n))))
            }
            "count" => {
                let filter = bytes(&args.req_doc("filter")?)?;
                let r = api
                    .call_count(s, coll, &filter, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |n| Ok(Output::Value(Bson::Int64(n))))
            }
            "estimatedDocumentCount" => {
                let r = api
                    .call_estimated_document_count(s, coll, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |n| Ok(Output::Value(Bson::Int64(n))))
            }
            "distinct" => {
                let field = args.req_string("fieldName")?;
                let filter = bytes(&args.req_doc("filter")?)?;
                let r = api
                    .call_distinct(
                        s,
                        coll,
                        &field,
                        &filter,
                        &typed_options(&mut args, session)?,
                    )
                    .w()?;
                output(r, |values| {
                    let values: Step<Vec<Bson>> = values
                        .iter()
                        .map(|v| unwrap_v(v, "a distinct value"))
                        .collect();
                    Ok(Output::Value(Bson::Array(values?)))
                })
            }
            "mapReduce" => {
                let code = |args: &mut Args, key: &str| match args.take(key) {
                    Some(Bson::JavaScriptCode(c) | Bson::String(c)) => Ok(c),
                    other => Err(Fail(format!("mapReduce's {key} is not code: {other:?}"))),
                };
                let (map, reduce) = (code(&mut args, "map")?, code(&mut args, "reduce")?);
                let out = bytes(&args.req_doc("out")?)?;
                let opts = typed_options(&mut args, session)?;
                let r = api
                    .call_map_reduce(s, coll, &map, &reduce, &out, &opts)
                    .w()?;
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
                let models: Step<Vec<WriteModel>> =
                    args.docs("requests")?.iter().map(write_model).collect();
                let r = api
                    .call_bulk_write(s, coll, &models?, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |r| Ok(Output::Value(bulk_result_document(&r)?.into())))
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
                let o = typed_options(&mut args, session)?;
                let r = api
                    .call_create_indexes(s, coll, &[bytes(&model)?], &o)
                    .w()?;
                output(r, |names| match names.into_iter().next() {
                    Some(n) => Ok(Output::Value(Bson::String(n))),
                    None => Err(Fail("create-indexes named no index".into())),
                })
            }
            "dropIndex" => {
                let index = args.req_string("name")?;
                let r = api
                    .call_drop_index(s, coll, &index, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "dropIndexes" => {
                let r = api
                    .call_drop_indexes(s, coll, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "listIndexes" | "listIndexNames" => {
                let r = api
                    .call_list_indexes(s, coll, &aggregate_options(&mut args, session)?)
                    .w()?;
                let docs = match cursor::documents(g, r)? {
                    Ok(Output::Documents(d)) if name == "listIndexNames" => d,
                    other => return Ok(other),
                };
                let names = docs
                    .iter()
                    .map(|d| d.get("name").cloned().unwrap_or(Bson::Null));
                Ok(Ok(Output::Value(Bson::Array(names.collect()))))
            }
            "createSearchIndex" => {
                let model = search_model(&args.req_doc("model")?)?;
                let r = api
                    .call_create_search_index(s, coll, &model, &op_options(&mut args, session)?)
                    .w()?;
                output(r, |n| Ok(Output::Value(Bson::String(n))))
            }
            "createSearchIndexes" => {
                let models: Step<Vec<SearchIndexModel>> =
                    args.docs("models")?.iter().map(search_model).collect();
                let r = api
                    .call_create_search_indexes(s, coll, &models?, &op_options(&mut args, session)?)
                    .w()?;
                output(r, |names| {
                    Ok(Output::Value(Bson::Array(
                        names.into_iter().map(Bson::String).collect(),
                    )))
                })
            }
            "listSearchIndexes" => {
                let name = args.string("name")?;
                // The spec's `aggregationOptions` are the aggregate's own.
                if let Some(agg) = args.doc("aggregationOptions")? {
                    for (k, v) in agg {
                        args.set(&k, v);
                    }
                }
                let o = aggregate_options(&mut args, session)?;
                let r = api
                    .call_list_search_indexes(s, coll, name.as_deref(), &o)
                    .w()?;
                cursor::documents(g, r)
            }
            "updateSearchIndex" => {
                let name = args.req_string("name")?;
                let definition = bytes(&args.req_doc("definition")?)?;
                let r = api
                    .call_update_search_index(
                        s,
                        coll,
                        &name,
                        &definition,
                        &op_options(&mut args, session)?,
                    )
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "dropSearchIndex" => {
                let name = args.req_string("name")?;
                let r = api
                    .call_drop_search_index(s, coll, &name, &op_options(&mut args, session)?)
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "drop" => {
                let r = api
                    .call_drop(s, coll, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "rename" => {
                let to = args.req_string("to")?;
                let r = api
                    .call_rename(s, coll, &to, &typed_options(&mut args, session)?)
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "createChangeStream" => {
                let pipeline: Step<Vec<Vec<u8>>> =
                    args.docs("pipeline")?.iter().map(bytes).collect();
                let r = api
                    .call_watch(s, coll, &pipeline?, &aggregate_options(&mut args, session)?)
                    .w()?;
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

/// A unified test's `{definition, name?, type?}` as the WIT record.
fn search_model(d: &Document) -> Step<SearchIndexModel> {
    let mut d = d.clone();
    let definition = match d.remove("definition") {
        Some(Bson::Document(def)) => bytes(&def)?,
        _ => {
            return Err(Fail(
                "a search index model needs a definition document".into(),
            ))
        }
    };
    let text = |v: Option<Bson>, what: &str| match v {
        None => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s)),
        Some(other) => Err(Fail(format!("search index model {what}: {other}"))),
    };
    let name = text(d.remove("name"), "name")?;
    let kind = text(d.remove("type"), "type")?;
    if let Some(k) = d.keys().next() {
        return Err(Fail(format!("search index model: unknown field {k}")));
    }
    Ok(SearchIndexModel {
        definition,
        name,
        kind,
    })
}
