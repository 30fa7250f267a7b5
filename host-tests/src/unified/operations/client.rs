//! Client operations on the WIT `client`.

use super::collection::{aggregate_options, decode_all, op_options};
use super::cursor;
use super::{output, OpResult, Output};
use crate::unified::args::{bytes, Args};
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use bson::Bson;

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
                let r =
                    api.call_list_databases(s, client, &filter, &op_options(&mut args, session)?)?;
                output(r, |list| {
                    Ok(Output::Documents(decode_all(&list, "a database")?))
                })
            }
            "listDatabaseNames" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api.call_list_database_names(
                    s,
                    client,
                    &filter,
                    &op_options(&mut args, session)?,
                )?;
                output(r, |names| {
                    Ok(Output::Value(Bson::Array(
                        names.into_iter().map(Bson::String).collect(),
                    )))
                })
            }
            "createChangeStream" => {
                let pipeline: Step<Vec<Vec<u8>>> =
                    args.docs("pipeline")?.iter().map(bytes).collect();
                let r = api.call_watch(
                    s,
                    client,
                    &pipeline?,
                    &aggregate_options(&mut args, session)?,
                )?;
                cursor::entity(r)
            }
            "close" => {
                args.done()?;
                api.call_close(s, client)?;
                Ok(Ok(Output::None))
            }
            other => Err(Fail(format!("client.{other}: no WIT method for it"))),
        }
    }
}
