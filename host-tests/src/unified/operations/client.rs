//! Client operations on the WIT `client`.

use super::collection::{aggregate_options, decode_all, op_options, write_model};
use super::cursor;
use super::{output, unwrap_v, OpResult, Output};
use crate::bindings::exports::mongo_wasi::driver::client::{
    ClientBulkWriteOptions, ClientWriteModel, DriverInfo,
};
use crate::bindings::exports::mongo_wasi::driver::types::ClientBulkWriteResult;
use crate::unified::args::{bytes, Args};
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use crate::Wait;
use bson::{doc, Bson, Document};

impl TestRun {
    pub(super) fn client_operation(
        &mut self,
        object: &str,
        name: &str,
        mut args: Args,
    ) -> Step<OpResult> {
        let client = self.entities.client(object)?.handle;
        let session = self.session_arg(&mut args)?;
        let g = &mut self.guest;
        let api = g.driver.mongo_wasi_driver_client().client();
        let s = &mut g.store;
        match name {
            "listDatabases" | "listDatabaseObjects" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api
                    .call_list_databases(s, client, &filter, &op_options(&mut args, session)?)
                    .w()?;
                output(r, |list| {
                    Ok(Output::Documents(decode_all(&list, "a database")?))
                })
            }
            "listDatabaseNames" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api
                    .call_list_database_names(s, client, &filter, &op_options(&mut args, session)?)
                    .w()?;
                output(r, |names| {
                    Ok(Output::Value(Bson::Array(
                        names.into_iter().map(Bson::String).collect(),
                    )))
                })
            }
            "createChangeStream" => {
                let pipeline: Step<Vec<Vec<u8>>> =
                    args.docs("pipeline")?.iter().map(bytes).collect();
                let r = api
                    .call_watch(
                        s,
                        client,
                        &pipeline?,
                        &aggregate_options(&mut args, session)?,
                    )
                    .w()?;
                cursor::entity(r)
            }
            "clientBulkWrite" => {
                let models: Step<Vec<ClientWriteModel>> = args
                    .docs("models")?
                    .iter()
                    .map(client_write_model)
                    .collect();
                let models = models?;
                let write_concern = args
                    .doc("writeConcern")?
                    .map(|d| crate::unified::entities::typed_write_concern(&d))
                    .transpose()?;
                let comment = args
                    .take("comment")
                    .map(|c| bytes(&doc! { "v": c }))
                    .transpose()?;
                let options = ClientBulkWriteOptions {
                    ordered: args.bool("ordered")?,
                    bypass_document_validation: args.bool("bypassDocumentValidation")?,
                    verbose_results: args.bool("verboseResults")?,
                    let_: args.doc("let")?.map(|d| bytes(&d)).transpose()?,
                    comment,
                    write_concern,
                    timeout_ms: args.timeout()?,
                    session,
                    extra: std::mem::replace(&mut args, Args::new("", None)).extra()?,
                };
                let r = api.call_bulk_write(s, client, &models, &options).w()?;
                output(r, |r| Ok(Output::Value(client_result_document(&r)?.into())))
            }
            "appendMetadata" => {
                let o = args.doc("driverInfoOptions")?.unwrap_or_default();
                args.done()?;
                let field = |k: &str| o.get_str(k).ok().map(str::to_string);
                let info = DriverInfo {
                    name: field("name"),
                    version: field("version"),
                    platform: field("platform"),
                };
                let r = api.call_append_metadata(s, client, &info).w()?;
                output(r, |()| Ok(Output::None))
            }
            "close" => {
                args.done()?;
                api.call_close(s, client).w()?;
                Ok(Ok(Output::None))
            }
            other => Err(Fail(format!("client.{other}: no WIT method for it"))),
        }
    }
}

/// A unified-format client write model: `{insertOne: {namespace, document}}`...
fn client_write_model(model: &Document) -> Step<ClientWriteModel> {
    let mut it = model.iter();
    let (Some((name, Bson::Document(args))), None) = (it.next(), it.next()) else {
        return Err(Fail(format!(
            "a write model is one named document: {model}"
        )));
    };
    let mut args = args.clone();
    let namespace = match args.remove("namespace") {
        Some(Bson::String(ns)) => ns,
        other => return Err(Fail(format!("{name} needs a namespace, not {other:?}"))),
    };
    let sort = match args.remove("sort") {
        None => None,
        Some(Bson::Document(d)) => Some(bytes(&d)?),
        Some(other) => return Err(Fail(format!("sort is not a document: {other}"))),
    };
    Ok(ClientWriteModel {
        namespace,
        model: write_model(&doc! { name: args })?,
        sort,
    })
}

/// The Bulk Write spec's BulkWriteResult as the unified format matches it:
/// the counts, and with verbose results the maps keyed by model index.
pub fn client_result_document(r: &ClientBulkWriteResult) -> Step<Document> {
    let mut d = doc! {
        "acknowledged": r.acknowledged,
        "insertedCount": r.inserted_count,
        "upsertedCount": r.upserted_count,
        "matchedCount": r.matched_count,
        "modifiedCount": r.modified_count,
        "deletedCount": r.deleted_count,
    };
    if let Some(v) = &r.verbose_results {
        let mut inserts = Document::new();
        for i in &v.insert_results {
            let id = unwrap_v(&i.id, "an inserted id")?;
            inserts.insert(i.index.to_string(), doc! { "insertedId": id });
        }
        let mut updates = Document::new();
        for u in &v.update_results {
            let mut e = doc! { "matchedCount": u.matched_count, "modifiedCount": u.modified_count };
            if let Some(id) = &u.upserted_id {
                e.insert("upsertedId", unwrap_v(id, "an upserted id")?);
            }
            updates.insert(u.index.to_string(), e);
        }
        let mut deletes = Document::new();
        for x in &v.delete_results {
            deletes.insert(
                x.index.to_string(),
                doc! { "deletedCount": x.deleted_count },
            );
        }
        d.insert("insertResults", inserts);
        d.insert("updateResults", updates);
        d.insert("deleteResults", deletes);
    }
    Ok(d)
}
