//! `withTransaction` without a closure: a `TransactionRunner` drives the
//! sans-I/O loop of `with_transaction.rs` over the session's own start,
//! commit and abort, and hands the body back to the caller at each attempt.
//! The WIT `transaction-runner` resource and `Session::with_transaction`
//! (the closure form) are both thin loops over it.

use super::with_transaction::{Next, WithTransaction};
use super::{Session, TransactionOptions};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::runtime;

/// Options of one `withTransaction` call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WithTransactionOptions {
    /// For each `startTransaction`; unset fields come from the session's defaults.
    pub transaction: TransactionOptions,
    /// Bounds the whole call (CSOT); `None` inherits the session's
    /// defaultTimeoutMS, then the client's timeoutMS.
    pub timeout_ms: Option<u64>,
}

/// What the caller does after `step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerStep {
    /// A transaction is started: run the body with the session, then `report`.
    RunBody,
    /// Finished: the transaction committed, or the body ended it itself.
    Done,
}

#[derive(Debug)]
enum Phase {
    /// The loop's next move, not yet taken.
    Next(Next),
    /// The body is running; `report` is due.
    Body,
    Reported(Result<()>),
    Ended(Result<()>),
}

#[derive(Debug)]
pub struct TransactionRunner {
    session: Session,
    options: TransactionOptions,
    /// The resolved timeoutMS, which each abort gets afresh (CSOT spec).
    timeout_ms: Option<u64>,
    machine: WithTransaction,
    phase: Phase,
}

impl TransactionRunner {
    pub(crate) fn new(session: &Session, options: WithTransactionOptions) -> TransactionRunner {
        let timeout_ms = session.resolve_timeout(options.timeout_ms);
        TransactionRunner {
            session: session.clone(),
            options: options.transaction,
            timeout_ms,
            machine: WithTransaction::new(runtime::now(), timeout_ms),
            phase: Phase::Next(Next::RunBody),
        }
    }

    /// A runner whose first step returns `error` (bad options from the WIT).
    #[cfg_attr(
        not(all(feature = "component", target_arch = "wasm32")),
        allow(dead_code)
    )]
    pub(crate) fn failed(session: &Session, error: Error) -> TransactionRunner {
        let mut r = TransactionRunner::new(session, WithTransactionOptions::default());
        r.phase = Phase::Ended(Err(error));
        r
    }

    /// Runs the loop up to the next body attempt (waiting its backoff and
    /// starting its transaction) or to its end (committing, retrying the
    /// commit as the spec allows). After the end it repeats the outcome.
    pub async fn step(&mut self) -> Result<RunnerStep> {
        loop {
            match std::mem::replace(&mut self.phase, Phase::Body) {
                Phase::Ended(r) => {
                    self.phase = Phase::Ended(r.clone());
                    return r.map(|()| RunnerStep::Done);
                }
                Phase::Body => {
                    return Err(Error::invalid_argument(
                        "report the body's outcome before the next step",
                    ))
                }
                Phase::Reported(Ok(())) => {
                    let active = self.session.in_transaction();
                    self.phase = Phase::Next(self.machine.body_succeeded(active));
                }
                Phase::Reported(Err(e)) => {
                    if self.session.in_transaction() {
                        self.abort().await;
                    }
                    let next = self.machine.body_failed(runtime::now(), e);
                    self.phase = Phase::Next(next);
                }
                Phase::Next(Next::RunBody) => {
                    if let Err(e) = self.start_attempt().await {
                        self.end(Err(e));
                        continue;
                    }
                    self.phase = Phase::Body;
                    return Ok(RunnerStep::RunBody);
                }
                Phase::Next(Next::Commit) => {
                    let next = match self.commit().await {
                        Ok(()) => Next::Done,
                        Err(e) => self.machine.commit_failed(runtime::now(), e),
                    };
                    self.phase = Phase::Next(next);
                }
                Phase::Next(Next::Done) => self.end(Ok(())),
                Phase::Next(Next::Failed(e)) => self.end(Err(e)),
            }
        }
    }

    /// The body's outcome for the attempt `step` started: `Ok` when it
    /// returned normally, else the error it met (its labels decide a retry).
    pub fn report(&mut self, outcome: Result<()>) -> Result<()> {
        match self.phase {
            Phase::Body => {
                self.phase = Phase::Reported(outcome);
                Ok(())
            }
            _ => Err(Error::invalid_argument(
                "no body attempt is running: call step first",
            )),
        }
    }

    /// Backoff, then startTransaction; the body's operations then run
    /// under the call's deadline (CSOT).
    async fn start_attempt(&mut self) -> Result<()> {
        let now = runtime::now();
        let backoff = self.machine.begin(now, runtime::jitter())?;
        if !backoff.is_zero() {
            runtime::sleep_until(Deadline::after(now, backoff)).await;
        }
        self.session.start_transaction(self.options.clone())?;
        self.session.set_callback_deadline(self.machine.deadline());
        Ok(())
    }

    /// Commit under what is left of the call's deadline (the session still
    /// carries it, see `Session::callback_timeout`).
    async fn commit(&mut self) -> Result<()> {
        self.session.commit_transaction(None).await
    }

    /// Abort with a fresh timeoutMS (CSOT spec: "withTransaction refreshes
    /// the timeout for abortTransaction"); its errors are ignored.
    async fn abort(&mut self) {
        self.session.set_callback_deadline(None);
        let _ = self.session.abort_transaction(self.timeout_ms).await;
    }

    fn end(&mut self, outcome: Result<()>) {
        self.session.set_callback_deadline(None);
        self.phase = Phase::Ended(outcome);
    }
}

impl Drop for TransactionRunner {
    /// A runner dropped mid-body leaves its transaction to the caller (or to
    /// the session's end), but no longer bounds the session's operations.
    fn drop(&mut self) {
        if !matches!(self.phase, Phase::Ended(_)) {
            self.session.set_callback_deadline(None);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The runner's phases on transactions that never reach the server: a
    //! transaction with no command commits and aborts without I/O.
    use super::*;
    use crate::error::ErrorKind;
    use crate::runtime::block_on;
    use crate::Client;

    fn session() -> Session {
        let client = Client::connect("mongodb://127.0.0.1:1/?replicaSet=rs0").unwrap();
        client.start_session(None)
    }

    #[test]
    fn an_empty_body_commits_and_done_stays_done() {
        let s = session();
        let mut r = s.transaction_runner(WithTransactionOptions::default());
        assert_eq!(block_on(r.step()).unwrap(), RunnerStep::RunBody);
        assert!(s.in_transaction(), "step started the transaction");
        r.report(Ok(())).unwrap();
        assert_eq!(block_on(r.step()).unwrap(), RunnerStep::Done);
        assert!(!s.in_transaction());
        assert_eq!(block_on(r.step()).unwrap(), RunnerStep::Done);
    }

    #[test]
    fn steps_and_reports_must_alternate() {
        let s = session();
        let mut r = s.transaction_runner(WithTransactionOptions::default());
        assert_eq!(
            r.report(Ok(())).unwrap_err().kind,
            ErrorKind::InvalidArgument,
            "no body is running yet"
        );
        block_on(r.step()).unwrap();
        assert_eq!(
            block_on(r.step()).unwrap_err().kind,
            ErrorKind::InvalidArgument,
            "a report is due"
        );
        r.report(Ok(())).unwrap();
        assert!(r.report(Ok(())).is_err(), "one report per body");
    }

    #[test]
    fn a_non_transient_body_error_aborts_and_ends_the_loop() {
        let s = session();
        let mut r = s.transaction_runner(WithTransactionOptions::default());
        block_on(r.step()).unwrap();
        let mine = Error::invalid_argument("the caller's own error");
        r.report(Err(mine.clone())).unwrap();
        assert_eq!(block_on(r.step()).unwrap_err(), mine);
        assert!(!s.in_transaction(), "aborted");
        assert_eq!(
            block_on(r.step()).unwrap_err(),
            mine,
            "the same outcome again"
        );
    }

    #[test]
    fn a_body_that_ends_the_transaction_itself_is_done_without_a_commit() {
        let s = session();
        let mut r = s.transaction_runner(WithTransactionOptions::default());
        block_on(r.step()).unwrap();
        block_on(s.abort_transaction(None)).unwrap();
        r.report(Ok(())).unwrap();
        assert_eq!(block_on(r.step()).unwrap(), RunnerStep::Done);
    }

    #[test]
    fn start_errors_end_the_loop() {
        let s = session();
        s.start_transaction(TransactionOptions::default()).unwrap();
        let mut r = s.transaction_runner(WithTransactionOptions::default());
        assert_eq!(
            block_on(r.step()).unwrap_err().kind,
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn under_timeout_ms_the_body_shares_the_deadline_and_may_not_override_it() {
        let s = session();
        let mut r = s.transaction_runner(WithTransactionOptions {
            timeout_ms: Some(60_000),
            ..Default::default()
        });
        assert_eq!(s.callback_timeout(None).unwrap(), None, "not started yet");
        block_on(r.step()).unwrap();
        let left = s.callback_timeout(None).unwrap().unwrap();
        assert!(left > 0 && left <= 60_000, "{left}");
        assert_eq!(
            s.callback_timeout(Some(5)).unwrap_err().kind,
            ErrorKind::InvalidArgument,
            "an operation's own timeoutMS inside the body"
        );
        r.report(Ok(())).unwrap();
        assert_eq!(block_on(r.step()).unwrap(), RunnerStep::Done);
        assert_eq!(s.callback_timeout(Some(5)).unwrap(), None, "over");
    }

    #[test]
    fn the_closure_returns_the_body_value_and_its_errors() {
        let s = session();
        let mut runs = 0;
        let v = s.with_transaction(Default::default(), |_| {
            runs += 1;
            Ok(42)
        });
        let v = block_on(v).unwrap();
        assert_eq!((v, runs), (42, 1));
        let e = s.with_transaction(Default::default(), |_| -> Result<()> {
            Err(Error::invalid_argument("no"))
        });
        let e = block_on(e).unwrap_err();
        assert_eq!(e.message, "no");
        assert!(!s.in_transaction());
    }
}
