//! Database operations on the WIT `database`.

use super::collection::{aggregate_options, op_options};
use super::cursor;
use super::{decode, output, OpResult, Output};
use crate::bindings::exports::mongo_wasi::driver::database::{
    CollectionOptions, RunCommandOptions,
};
use crate::unified::args::{bytes, Args};
use crate::unified::entities::{CollectionEntity, Entity};
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use crate::Wait;
use bson::Bson;
use wasmtime::component::ResourceAny;

fn pipeline(args: &mut Args) -> Step<Vec<Vec<u8>>> {
    args.docs("pipeline")?.iter().map(bytes).collect()
}

/// runCommand's command document and options; nothing else may be left.
pub(super) fn run_command_args(
    mut args: Args,
    session: Option<ResourceAny>,
) -> Step<(Vec<u8>, RunCommandOptions)> {
    let command = bytes(&args.req_doc("command")?)?;
    // The command document keeps its key order, so commandName is not needed.
    args.take("commandName");
    let read_preference = args
        .doc("readPreference")?
        .map(|d| crate::unified::entities::typed_read_preference(&d))
        .transpose()?;
    let opts = RunCommandOptions {
        timeout_ms: args.timeout()?,
        session,
        read_preference,
    };
    args.done()?;
    Ok((command, opts))
}

/// runCommand's reply as the operation's result.
pub(super) fn command_reply(d: Vec<u8>) -> Step<Output> {
    Ok(Output::Value(decode(&d, "the command reply")?.into()))
}

impl TestRun {
    pub(super) fn database_operation(
        &mut self,
        object: &str,
        name: &str,
        mut args: Args,
    ) -> Step<OpResult> {
        let (db, db_name) = {
            let d = self.entities.database(object)?;
            (d.handle, d.name.clone())
        };
        let session = self.session_arg(&mut args)?;
        let g = &mut self.guest;
        let api = g.driver.mongo_wasi_driver_database().database();
        let s = &mut g.store;
        match name {
            "runCommand" => {
                let (command, opts) = run_command_args(args, session)?;
                let r = api.call_run_command(s, db, &command, &opts).w()?;
                output(r, command_reply)
            }
            "runCursorCommand" | "createCommandCursor" => {
                let command = bytes(&args.req_doc("command")?)?;
                args.take("commandName");
                let r = api
                    .call_run_cursor_command(
                        s,
                        db,
                        &command,
                        &aggregate_options(&mut args, session)?,
                    )
                    .w()?;
                match name {
                    "runCursorCommand" => cursor::documents(g, r),
                    _ => cursor::entity(r),
                }
            }
            "aggregate" => {
                let p = pipeline(&mut args)?;
                let r = api
                    .call_aggregate(s, db, &p, &aggregate_options(&mut args, session)?)
                    .w()?;
                cursor::documents(g, r)
            }
            "listCollections" | "listCollectionObjects" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api
                    .call_list_collections(s, db, &filter, &aggregate_options(&mut args, session)?)
                    .w()?;
                cursor::documents(g, r)
            }
            "listCollectionNames" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api
                    .call_list_collection_names(s, db, &filter, &op_options(&mut args, session)?)
                    .w()?;
                output(r, |names| {
                    Ok(Output::Value(Bson::Array(
                        names.into_iter().map(Bson::String).collect(),
                    )))
                })
            }
            "createCollection" => {
                let coll = args.req_string("collection")?;
                let r = api
                    .call_create_collection(s, db, &coll, &op_options(&mut args, session)?)
                    .w()?;
                output(r, |handle| {
                    Ok(Output::Entity(Entity::Collection(CollectionEntity {
                        handle,
                        database: db_name,
                        name: coll,
                    })))
                })
            }
            "dropCollection" => {
                let coll = args.req_string("collection")?;
                let opts = CollectionOptions {
                    timeout_ms: None,
                    read_concern: None,
                    write_concern: None,
                    read_preference: None,
                };
                let handle = api.call_collection(&mut *s, db, &coll, &opts).w()?;
                let r = g
                    .driver
                    .mongo_wasi_driver_collection()
                    .collection()
                    .call_drop(&mut g.store, handle, &op_options(&mut args, session)?)
                    .w()?;
                crate::drop_resource(handle, &mut g.store)?;
                output(r, |()| Ok(Output::None))
            }
            // No driver helper (the spec has none): collMod through runCommand,
            // as other drivers' runners do.
            "modifyCollection" => {
                let coll = args.req_string("collection")?;
                let mut command = bson::doc! { "collMod": coll };
                for key in [
                    "index",
                    "validator",
                    "validationLevel",
                    "validationAction",
                    "changeStreamPreAndPostImages",
                    "expireAfterSeconds",
                    "comment",
                ] {
                    if let Some(v) = args.take(key) {
                        command.insert(key, v);
                    }
                }
                let opts = RunCommandOptions {
                    timeout_ms: args.timeout()?,
                    session,
                    read_preference: None,
                };
                args.done()?;
                let r = api.call_run_command(s, db, &bytes(&command)?, &opts).w()?;
                output(r, |_| Ok(Output::None))
            }
            "createChangeStream" => {
                let p = pipeline(&mut args)?;
                let r = api
                    .call_watch(s, db, &p, &aggregate_options(&mut args, session)?)
                    .w()?;
                cursor::entity(r)
            }
            other => Err(Fail(format!("database.{other}: no WIT method for it"))),
        }
    }
}
