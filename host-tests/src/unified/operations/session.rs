//! Session operations on the WIT `session`.

use super::{output, OpResult, Output};
use crate::unified::args::Args;
use crate::unified::entities::transaction_options;
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};

impl TestRun {
    pub(super) fn session_operation(
        &mut self,
        object: &str,
        name: &str,
        mut args: Args,
    ) -> Step<OpResult> {
        let session = self.entities.session(object)?.handle;
        let g = &mut self.guest;
        let api = g.driver.mongo_wasi_driver_session().session();
        let s = &mut g.store;
        match name {
            "startTransaction" => {
                let mut opts = bson::Document::new();
                for key in [
                    "readConcern",
                    "writeConcern",
                    "readPreference",
                    "maxCommitTimeMS",
                ] {
                    if let Some(v) = args.take(key) {
                        opts.insert(key, v);
                    }
                }
                args.done()?;
                let r = api.call_start_transaction(s, session, &transaction_options(&opts)?)?;
                output(r, |()| Ok(Output::None))
            }
            "commitTransaction" | "abortTransaction" => {
                let timeout = args.timeout()?;
                args.done()?;
                let r = match name {
                    "commitTransaction" => api.call_commit_transaction(s, session, timeout)?,
                    _ => api.call_abort_transaction(s, session, timeout)?,
                };
                output(r, |()| Ok(Output::None))
            }
            "endSession" => {
                args.done()?;
                api.call_end(s, session)?;
                Ok(Ok(Output::None))
            }
            other => Err(Fail(format!("session.{other}: no WIT method for it"))),
        }
    }
}
