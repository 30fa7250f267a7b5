//! Session operations on the WIT `session`; `withTransaction` runs its
//! callback's operations between the steps of the WIT `transaction-runner`.

use super::{output, OpResult, Output};
use crate::bindings::exports::mongo_wasi::driver::session::{RunnerStep, WithTransactionOptions};
use crate::bindings::exports::mongo_wasi::driver::types::Error as WitError;
use crate::unified::args::Args;
use crate::unified::entities::transaction_options;
use crate::unified::errors;
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use crate::Wait;
use bson::{Bson, Document};
use wasmtime::component::ResourceAny;

const TRANSACTION_OPTIONS: [&str; 4] = [
    "readConcern",
    "writeConcern",
    "readPreference",
    "maxCommitTimeMS",
];

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
                for key in TRANSACTION_OPTIONS {
                    if let Some(v) = args.take(key) {
                        opts.insert(key, v);
                    }
                }
                args.done()?;
                let r = api
                    .call_start_transaction(s, session, &transaction_options(&opts)?)
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "commitTransaction" | "abortTransaction" => {
                let timeout = args.timeout()?;
                args.done()?;
                let r = match name {
                    "commitTransaction" => api.call_commit_transaction(s, session, timeout).w()?,
                    _ => api.call_abort_transaction(s, session, timeout).w()?,
                };
                output(r, |()| Ok(Output::None))
            }
            "getSnapshotTime" => {
                args.done()?;
                let t = api.call_snapshot_time(s, session).w()?;
                let t = t
                    .and_then(|d| bson::Document::from_reader(d.as_slice()).ok())
                    .and_then(|d| d.get("t").cloned())
                    .ok_or_else(|| Fail("getSnapshotTime: the session has none".into()))?;
                Ok(Ok(Output::Value(t)))
            }
            "endSession" => {
                args.done()?;
                api.call_end(s, session).w()?;
                Ok(Ok(Output::None))
            }
            "withTransaction" => {
                let callback = match args.take("callback") {
                    Some(Bson::Array(ops)) => ops
                        .into_iter()
                        .map(|op| match op {
                            Bson::Document(d) => Ok(d),
                            _ => Err(Fail(
                                "withTransaction: a callback entry is not a document".into(),
                            )),
                        })
                        .collect::<Step<Vec<_>>>()?,
                    _ => return Err(Fail("withTransaction: callback is not an array".into())),
                };
                let timeout_ms = args.timeout()?;
                let mut opts = bson::Document::new();
                for key in TRANSACTION_OPTIONS {
                    if let Some(v) = args.take(key) {
                        opts.insert(key, v);
                    }
                }
                args.done()?;
                let options = WithTransactionOptions {
                    transaction: transaction_options(&opts)?,
                    timeout_ms,
                };
                let runner = api.call_with_transaction(s, session, &options).w()?;
                let result = self.with_transaction(runner, &callback);
                // Dropped whatever happened (a trap leaves the store unusable anyway).
                let _ = crate::drop_resource(runner, &mut self.guest.store);
                result
            }
            other => Err(Fail(format!("session.{other}: no WIT method for it"))),
        }
    }

    /// The loop a caller of the WIT writes: step, run the callback, report.
    fn with_transaction(&mut self, runner: ResourceAny, callback: &[Document]) -> Step<OpResult> {
        loop {
            let api = self.guest.driver.mongo_wasi_driver_session();
            let step = api
                .transaction_runner()
                .call_step(&mut self.guest.store, runner)
                .w()?;
            match step {
                Err(e) => return Ok(Err(e.into())),
                Ok(RunnerStep::Done) => return Ok(Ok(Output::None)),
                Ok(RunnerStep::RunBody) => {
                    let outcome = self.callback(callback)?;
                    let api = self.guest.driver.mongo_wasi_driver_session();
                    api.transaction_runner()
                        .call_report(&mut self.guest.store, runner, outcome.as_ref().map(|_| ()))
                        .w()?
                        .map_err(|e| Fail(format!("report: {}", errors::describe(&e))))?;
                }
            }
        }
    }

    /// One run of the callback: its operations in order, each with its own
    /// assertions; the first error (expected or not) is the callback's.
    fn callback(&mut self, ops: &[Document]) -> Step<Result<(), WitError>> {
        for op in ops {
            if let Some(e) = self.callback_operation(op)? {
                return Ok(Err(e));
            }
        }
        Ok(Ok(()))
    }
}
