use super::face::collection::{
    self as wit_collection, AggregateOptions, FindOptions, GuestCollection, Hint, OpOptions,
    ReturnDocument, SearchIndexModel, UpdateSpec, WriteModel,
};
use super::face::cursor::{
    self as wit_cursor, Cursor as WitCursor, GuestCursor, PackedBatch, TimeoutMode,
};
use super::face::types::{
    Batch, BulkWriteError, BulkWriteResult, DeleteResult, InsertManyResult, InsertOneResult,
    UpdateResult,
};
use super::session::SessionRes;
use super::slot::{Lease, Slot};
use super::{
    doc, docs, opt_doc, read_concern, read_preference, to_value, value, wrap, write_concern,
    Component, WitResult,
};
use crate::error::Error;
use crate::operation::write::{checked_with_id, push_checked_with_id};
use crate::wire::Documents;
use crate::{Collection, Cursor};
use std::cell::{Cell, RefCell};

pub struct CollectionRes(pub Collection);

/// A cursor, and what `id` and `resume-token` answer while a call has it
/// out (WASI 0.3): their values when that call started.
pub struct CursorRes {
    cursor: Slot<Cursor>,
    id: Cell<i64>,
    resume_token: RefCell<Option<Vec<u8>>>,
}

impl CursorRes {
    pub fn wit(cursor: Cursor) -> WitCursor {
        WitCursor::new(CursorRes {
            id: Cell::new(cursor.id()),
            resume_token: RefCell::new(cursor.resume_token().map(|d| d.into_bytes())),
            cursor: Slot::new(cursor),
        })
    }

    /// The cursor for one call, its id and resume token noted first.
    fn lease(&self) -> WitResult<Lease<'_, Cursor>> {
        let cursor = self.cursor.lease("cursor")?;
        self.id.set(cursor.id());
        *self.resume_token.borrow_mut() = cursor.resume_token().map(|d| d.into_bytes());
        Ok(cursor)
    }
}

/// An open cursor's killCursors runs where a drop can do I/O (deferred.rs).
impl Drop for CursorRes {
    fn drop(&mut self) {
        if let Some(cursor) = self.cursor.take() {
            super::deferred::defer(move || drop(cursor));
        }
    }
}

impl wit_collection::Guest for Component {
    type Collection = CollectionRes;
}

impl wit_cursor::Guest for Component {
    type Cursor = CursorRes;
}

fn mode(m: Option<TimeoutMode>) -> Option<crate::TimeoutMode> {
    m.map(|m| match m {
        TimeoutMode::CursorLifetime => crate::TimeoutMode::CursorLifetime,
        TimeoutMode::Iteration => crate::TimeoutMode::Iteration,
    })
}

fn hint(h: Option<Hint>) -> WitResult<Option<crate::Hint>> {
    Ok(match h {
        None => None,
        Some(Hint::Name(n)) => Some(crate::Hint::Name(n)),
        Some(Hint::Keys(k)) => Some(crate::Hint::Keys(doc(k)?)),
    })
}

pub(super) fn opt_value(v: Option<Vec<u8>>) -> WitResult<Option<bson::RawBson>> {
    v.map(value).transpose()
}

/// The Rust options of a WIT op-options record.
pub fn op_options<'a>(o: &OpOptions<'a>) -> WitResult<crate::OpOptions<'a>> {
    Ok(crate::OpOptions {
        timeout_ms: o.timeout_ms,
        session: o.session.as_ref().map(|s| &s.get::<SessionRes>().0),
        extra: opt_doc(o.extra.clone())?,
        upsert: o.upsert,
        ordered: o.ordered,
        hint: hint(o.hint.clone())?,
        collation: opt_doc(o.collation.clone())?,
        comment: opt_value(o.comment.clone())?,
        let_vars: opt_doc(o.let_.clone())?,
        array_filters: o.array_filters.clone().map(docs).transpose()?,
        return_document: o.return_document.map(|r| match r {
            ReturnDocument::Before => crate::ReturnDocument::Before,
            ReturnDocument::After => crate::ReturnDocument::After,
        }),
        projection: opt_doc(o.projection.clone())?,
        sort: opt_doc(o.sort.clone())?,
        bypass_document_validation: o.bypass_document_validation,
        max_await_time_ms: None,
        read_concern: o.read_concern.clone().map(read_concern),
        write_concern: o.write_concern.clone().map(write_concern),
        read_preference: o
            .read_preference
            .as_ref()
            .map(read_preference)
            .transpose()?,
    })
}

/// The op-options part, batch size and timeout mode of an aggregate-options record.
pub fn aggregate_parts<'a>(
    o: &AggregateOptions<'a>,
) -> WitResult<(
    crate::OpOptions<'a>,
    Option<u32>,
    Option<crate::TimeoutMode>,
)> {
    let opts = crate::OpOptions {
        timeout_ms: o.timeout_ms,
        session: o.session.as_ref().map(|s| &s.get::<SessionRes>().0),
        extra: opt_doc(o.extra.clone())?,
        hint: hint(o.hint.clone())?,
        collation: opt_doc(o.collation.clone())?,
        comment: opt_value(o.comment.clone())?,
        let_vars: opt_doc(o.let_.clone())?,
        max_await_time_ms: o.max_await_time_ms,
        read_concern: o.read_concern.clone().map(read_concern),
        write_concern: o.write_concern.clone().map(write_concern),
        read_preference: o
            .read_preference
            .as_ref()
            .map(read_preference)
            .transpose()?,
        ..Default::default()
    };
    Ok((opts, o.batch_size, mode(o.timeout_mode)))
}

/// The Rust options of a WIT find-options record (`find-one` ignores the
/// cursor's fields).
fn find_options<'a>(o: &FindOptions<'a>, one: bool) -> WitResult<crate::FindOptions<'a>> {
    Ok(crate::FindOptions {
        timeout_ms: o.timeout_ms,
        session: o.session.as_ref().map(|s| &s.get::<SessionRes>().0),
        sort: opt_doc(o.sort.clone())?,
        projection: opt_doc(o.projection.clone())?,
        skip: o.skip,
        limit: if one { None } else { o.limit },
        batch_size: if one { None } else { o.batch_size },
        timeout_mode: if one { None } else { mode(o.timeout_mode) },
        extra: opt_doc(o.extra.clone())?,
        hint: hint(o.hint.clone())?,
        collation: opt_doc(o.collation.clone())?,
        comment: opt_value(o.comment.clone())?,
        let_vars: opt_doc(o.let_.clone())?,
        max_await_time_ms: o.max_await_time_ms,
        read_concern: o.read_concern.clone().map(read_concern),
        read_preference: o
            .read_preference
            .as_ref()
            .map(read_preference)
            .transpose()?,
    })
}

fn update_model(m: wit_collection::UpdateModel) -> WitResult<crate::UpdateModel> {
    Ok(crate::UpdateModel {
        filter: doc(m.filter)?,
        update: update_spec(m.update)?,
        upsert: m.upsert,
        collation: opt_doc(m.collation)?,
        hint: hint(m.hint)?,
        array_filters: m.array_filters.map(docs).transpose()?,
        sort: opt_doc(m.sort)?,
    })
}

fn delete_model(m: wit_collection::DeleteModel) -> WitResult<crate::DeleteModel> {
    Ok(crate::DeleteModel {
        filter: doc(m.filter)?,
        collation: opt_doc(m.collation)?,
        hint: hint(m.hint)?,
    })
}

pub(super) fn write_model(m: WriteModel) -> WitResult<crate::WriteModel> {
    Ok(match m {
        WriteModel::InsertOne(d) => crate::WriteModel::InsertOne(doc(d)?),
        WriteModel::UpdateOne(m) => crate::WriteModel::UpdateOne(update_model(m)?),
        WriteModel::UpdateMany(m) => crate::WriteModel::UpdateMany(update_model(m)?),
        WriteModel::ReplaceOne(m) => crate::WriteModel::ReplaceOne(update_model(m)?),
        WriteModel::DeleteOne(m) => crate::WriteModel::DeleteOne(delete_model(m)?),
        WriteModel::DeleteMany(m) => crate::WriteModel::DeleteMany(delete_model(m)?),
    })
}

fn update_spec(u: UpdateSpec) -> WitResult<crate::UpdateSpec> {
    Ok(match u {
        UpdateSpec::Document(d) => crate::UpdateSpec::Document(doc(d)?),
        UpdateSpec::Pipeline(p) => crate::UpdateSpec::Pipeline(docs(p)?),
    })
}

fn update_result(r: crate::UpdateResult) -> UpdateResult {
    UpdateResult {
        matched_count: r.matched,
        modified_count: r.modified,
        upserted_id: r.upserted_id.map(to_value),
    }
}

impl GuestCollection for CollectionRes {
    fn name(&self) -> String {
        self.0.name().to_string()
    }

    fn namespace(&self) -> String {
        self.0.namespace()
    }

    fn id_filter(id: Vec<u8>) -> WitResult<Vec<u8>> {
        Ok(crate::collection::Collection::id_filter(super::value(id)?).into_bytes())
    }

    io! {
        fn insert_one(
            &self,
            document: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<InsertOneResult> {
            // Checked, and its _id found, in one pass; not copied when it has one.
            let doc =
                checked_with_id(document, &crate::runtime::object_ids()).map_err(super::to_wit)?;
            let id = wrap(self.0.insert_one_with_id(doc, &op_options(&options)?).await)?;
            Ok(InsertOneResult {
                inserted_id: to_value(id),
            })
        }
    }

    io! {
        fn insert_many(
            &self,
            documents: Vec<Vec<u8>>,
            options: OpOptions<'_>,
        ) -> Result<InsertManyResult, BulkWriteError> {
            let oids = crate::runtime::object_ids();
            let docs = documents.into_iter().map(|d| checked_with_id(d, &oids));
            let docs = docs
                .collect::<crate::error::Result<_>>()
                .map_err(super::to_wit_bulk)?;
            let ids = self
                .0
                .insert_many_with_ids(docs, &op_options(&options)?)
                .await
                .map_err(super::to_wit_bulk)?;
            Ok(InsertManyResult {
                inserted_ids: ids.into_iter().map(to_value).collect(),
            })
        }
    }

    io! {
        fn insert_many_packed(
            &self,
            documents: Vec<u8>,
            options: OpOptions<'_>,
        ) -> Result<Vec<u8>, BulkWriteError> {
            let oids = crate::runtime::object_ids();
            // Laid out once, back to back, as the insert command carries them:
            // no buffer per document, and room for a new 17-byte `_id` element
            // in front of each.
            let count = crate::wire::raw::packed(&documents).count();
            let mut docs = Documents::with_capacity(documents.len() + 17 * count, count);
            let mut ids = Vec::with_capacity(count);
            for d in crate::wire::raw::packed(&documents) {
                let d = d.map_err(|e| {
                    Error::invalid_argument(format!("insert-many-packed's documents: {e}"))
                });
                let id = d.and_then(|d| push_checked_with_id(&mut docs, d, &oids));
                ids.push(id.map_err(super::to_wit_bulk)?);
            }
            drop(documents);
            let ids = self
                .0
                .insert_documents(docs, ids, &op_options(&options)?)
                .await
                .map_err(super::to_wit_bulk)?;
            let mut out = Vec::with_capacity(ids.len() * 20);
            for id in ids {
                match id {
                    bson::RawBson::ObjectId(id) => {
                        crate::wire::raw::push_value_doc(&mut out, 0x07, &id.bytes())
                    }
                    id => out.extend_from_slice(&to_value(id)),
                }
            }
            Ok(out)
        }
    }

    io! {
        fn find(&self, filter: Vec<u8>, options: FindOptions<'_>) -> WitResult<WitCursor> {
            let opts = find_options(&options, false)?;
            Ok(CursorRes::wit(wrap(
                self.0.find(doc(filter)?, &opts).await,
            )?))
        }
    }

    io! {
        fn find_one(
            &self,
            filter: Vec<u8>,
            options: FindOptions<'_>,
        ) -> WitResult<Option<Vec<u8>>> {
            let opts = find_options(&options, true)?;
            Ok(wrap(self.0.find_one(doc(filter)?, &opts).await)?.map(|d| d.into_bytes()))
        }
    }

    io! {
        fn update_one(
            &self,
            filter: Vec<u8>,
            update: UpdateSpec,
            options: OpOptions<'_>,
        ) -> WitResult<UpdateResult> {
            let r = self
                .0
                .update_one(doc(filter)?, update_spec(update)?, &op_options(&options)?)
                .await;
            wrap(r).map(update_result)
        }
    }

    io! {
        fn update_many(
            &self,
            filter: Vec<u8>,
            update: UpdateSpec,
            options: OpOptions<'_>,
        ) -> WitResult<UpdateResult> {
            let r = self
                .0
                .update_many(doc(filter)?, update_spec(update)?, &op_options(&options)?)
                .await;
            wrap(r).map(update_result)
        }
    }

    io! {
        fn replace_one(
            &self,
            filter: Vec<u8>,
            replacement: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<UpdateResult> {
            let r = self
                .0
                .replace_one(doc(filter)?, doc(replacement)?, &op_options(&options)?)
                .await;
            wrap(r).map(update_result)
        }
    }

    io! {
        fn delete_one(&self, filter: Vec<u8>, options: OpOptions<'_>) -> WitResult<DeleteResult> {
            let n = wrap(
                self.0
                    .delete_one(doc(filter)?, &op_options(&options)?)
                    .await,
            )?;
            Ok(DeleteResult { deleted_count: n })
        }
    }

    io! {
        fn delete_many(&self, filter: Vec<u8>, options: OpOptions<'_>) -> WitResult<DeleteResult> {
            let n = wrap(
                self.0
                    .delete_many(doc(filter)?, &op_options(&options)?)
                    .await,
            )?;
            Ok(DeleteResult { deleted_count: n })
        }
    }

    io! {
        fn find_one_and_delete(
            &self,
            filter: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<Option<Vec<u8>>> {
            let r = self
                .0
                .find_one_and_delete(doc(filter)?, &op_options(&options)?)
                .await;
            Ok(wrap(r)?.map(|d| d.into_bytes()))
        }
    }

    io! {
        fn find_one_and_update(
            &self,
            filter: Vec<u8>,
            update: UpdateSpec,
            options: OpOptions<'_>,
        ) -> WitResult<Option<Vec<u8>>> {
            let r = self
                .0
                .find_one_and_update(doc(filter)?, update_spec(update)?, &op_options(&options)?)
                .await;
            Ok(wrap(r)?.map(|d| d.into_bytes()))
        }
    }

    io! {
        fn find_one_and_replace(
            &self,
            filter: Vec<u8>,
            replacement: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<Option<Vec<u8>>> {
            let r = self
                .0
                .find_one_and_replace(doc(filter)?, doc(replacement)?, &op_options(&options)?)
                .await;
            Ok(wrap(r)?.map(|d| d.into_bytes()))
        }
    }

    io! {
        fn aggregate(
            &self,
            pipeline: Vec<Vec<u8>>,
            options: AggregateOptions<'_>,
        ) -> WitResult<WitCursor> {
            let (opts, batch_size, mode) = aggregate_parts(&options)?;
            Ok(CursorRes::wit(wrap(
                self.0
                    .aggregate(&docs(pipeline)?, batch_size, &opts, mode)
                    .await,
            )?))
        }
    }

    io! {
        fn count_documents(&self, filter: Vec<u8>, options: OpOptions<'_>) -> WitResult<i64> {
            wrap(
                self.0
                    .count_documents(doc(filter)?, &op_options(&options)?)
                    .await,
            )
        }
    }

    io! {
        fn estimated_document_count(&self, options: OpOptions<'_>) -> WitResult<i64> {
            wrap(
                self.0
                    .estimated_document_count(&op_options(&options)?)
                    .await,
            )
        }
    }

    io! {
        fn count(&self, filter: Vec<u8>, options: OpOptions<'_>) -> WitResult<i64> {
            wrap(self.0.count(doc(filter)?, &op_options(&options)?).await)
        }
    }

    io! {
        fn distinct(
            &self,
            field_name: String,
            filter: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<Vec<Vec<u8>>> {
            let values = wrap(
                self.0
                    .distinct(&field_name, doc(filter)?, &op_options(&options)?)
                    .await,
            )?;
            Ok(values.into_iter().map(to_value).collect())
        }
    }

    io! {
        fn map_reduce(
            &self,
            map_function: String,
            reduce_function: String,
            out: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<Vec<u8>> {
            let r = self
                .0
                .map_reduce(
                    &map_function,
                    &reduce_function,
                    doc(out)?,
                    &op_options(&options)?,
                )
                .await;
            Ok(wrap(r)?.into_bytes())
        }
    }

    io! {
        fn bulk_write(
            &self,
            models: Vec<WriteModel>,
            options: OpOptions<'_>,
        ) -> Result<BulkWriteResult, BulkWriteError> {
            let models = models
                .into_iter()
                .map(write_model)
                .collect::<WitResult<Vec<_>>>()?;
            let r = self.0.bulk_write(&models, &op_options(&options)?).await;
            Ok(super::bulk_write_result(r.map_err(super::to_wit_bulk)?))
        }
    }

    io! {
        fn create_index(&self, keys: Vec<u8>, options: OpOptions<'_>) -> WitResult<String> {
            wrap(
                self.0
                    .create_index(&doc(keys)?, &op_options(&options)?)
                    .await,
            )
        }
    }

    io! {
        fn create_indexes(
            &self,
            models: Vec<Vec<u8>>,
            options: OpOptions<'_>,
        ) -> WitResult<Vec<String>> {
            wrap(
                self.0
                    .create_indexes(&docs(models)?, &op_options(&options)?)
                    .await,
            )
        }
    }

    io! {
        fn list_indexes(&self, options: AggregateOptions<'_>) -> WitResult<WitCursor> {
            let (opts, batch_size, mode) = aggregate_parts(&options)?;
            Ok(CursorRes::wit(wrap(
                self.0.list_indexes(batch_size, &opts, mode).await,
            )?))
        }
    }

    io! {
        fn drop_index(&self, name: String, options: OpOptions<'_>) -> WitResult<()> {
            wrap(self.0.drop_index(&name, &op_options(&options)?).await)
        }
    }

    io! {
        fn drop_indexes(&self, options: OpOptions<'_>) -> WitResult<()> {
            wrap(self.0.drop_index("*", &op_options(&options)?).await)
        }
    }

    io! {
        fn create_search_index(
            &self,
            model: SearchIndexModel,
            options: OpOptions<'_>,
        ) -> WitResult<String> {
            let names = wrap(
                self.0
                    .create_search_indexes(&[search_model(model)?], &op_options(&options)?)
                    .await,
            )?;
            Ok(names.into_iter().next().unwrap_or_default())
        }
    }

    io! {
        fn create_search_indexes(
            &self,
            models: Vec<SearchIndexModel>,
            options: OpOptions<'_>,
        ) -> WitResult<Vec<String>> {
            let models = models
                .into_iter()
                .map(search_model)
                .collect::<WitResult<Vec<_>>>()?;
            wrap(
                self.0
                    .create_search_indexes(&models, &op_options(&options)?)
                    .await,
            )
        }
    }

    io! {
        fn list_search_indexes(
            &self,
            name: Option<String>,
            options: AggregateOptions<'_>,
        ) -> WitResult<WitCursor> {
            let (opts, batch_size, mode) = aggregate_parts(&options)?;
            Ok(CursorRes::wit(wrap(
                self.0
                    .list_search_indexes(name.as_deref(), batch_size, &opts, mode)
                    .await,
            )?))
        }
    }

    io! {
        fn update_search_index(
            &self,
            name: String,
            definition: Vec<u8>,
            options: OpOptions<'_>,
        ) -> WitResult<()> {
            let definition = doc(definition)?;
            wrap(
                self.0
                    .update_search_index(&name, &definition, &op_options(&options)?)
                    .await,
            )
        }
    }

    io! {
        fn drop_search_index(&self, name: String, options: OpOptions<'_>) -> WitResult<()> {
            wrap(
                self.0
                    .drop_search_index(&name, &op_options(&options)?)
                    .await,
            )
        }
    }

    io! {
        fn drop(&self, options: OpOptions<'_>) -> WitResult<()> {
            wrap(self.0.drop(&op_options(&options)?).await)
        }
    }

    io! {
        fn rename(&self, to_name: String, options: OpOptions<'_>) -> WitResult<()> {
            wrap(self.0.rename(&to_name, &op_options(&options)?).await)
        }
    }

    io! {
        fn watch(
            &self,
            pipeline: Vec<Vec<u8>>,
            options: AggregateOptions<'_>,
        ) -> WitResult<WitCursor> {
            let (opts, batch_size, mode) = aggregate_parts(&options)?;
            wrap(crate::change_stream::refuse_timeout_mode(mode))?;
            Ok(CursorRes::wit(wrap(
                self.0.watch(&docs(pipeline)?, batch_size, &opts).await,
            )?))
        }
    }
}

impl GuestCursor for CursorRes {
    io! {
        fn next_batch(&self) -> WitResult<Batch> {
            let batch = wrap(self.lease()?.next_batch().await)?;
            Ok(Batch {
                documents: batch
                    .documents
                    .into_iter()
                    .map(|d| d.into_bytes())
                    .collect(),
                exhausted: batch.exhausted,
            })
        }
    }

    io! {
        fn next_batch_packed(&self) -> WitResult<PackedBatch> {
            let batch = wrap(self.lease()?.next_batch_packed().await)?;
            Ok(PackedBatch {
                documents: batch.documents,
                // A reply holds at most 48 MB of documents of 5 bytes or more.
                count: u32::try_from(batch.count).unwrap_or(u32::MAX),
                exhausted: batch.exhausted,
            })
        }
    }

    fn id(&self) -> i64 {
        self.cursor.peek(Cursor::id).unwrap_or(self.id.get())
    }

    fn resume_token(&self) -> Option<Vec<u8>> {
        match self
            .cursor
            .peek(|c| c.resume_token().map(|d| d.into_bytes()))
        {
            Some(token) => token,
            None => self.resume_token.borrow().clone(),
        }
    }

    io! {
        fn close(&self, timeout_ms: Option<u64>) -> WitResult<()> {
            wrap(self.lease()?.close(timeout_ms).await)
        }
    }

    io! {
        fn next(&self) -> WitResult<Option<Vec<u8>>> {
            Ok(wrap(self.lease()?.next().await)?.map(|d| d.into_bytes()))
        }
    }

    io! {
        fn collect(&self, max: u32) -> WitResult<Vec<Vec<u8>>> {
            let docs = wrap(self.lease()?.collect(max).await)?;
            Ok(docs.into_iter().map(|d| d.into_bytes()).collect())
        }
    }
}

/// A WIT search index model as the driver's (its definition checked).
fn search_model(m: SearchIndexModel) -> WitResult<crate::SearchIndexModel> {
    Ok(crate::SearchIndexModel {
        definition: doc(m.definition)?,
        name: m.name,
        kind: m.kind,
    })
}
