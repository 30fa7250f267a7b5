//! Client sessions (Driver Sessions spec). A `Session` holds a server
//! session from the client's pool; when its last clone drops (or it ends),
//! the server session goes back. Operations without an explicit session get
//! an implicit one, which a cursor keeps until it is done. An explicit
//! session runs transactions (`transaction.rs` holds their state machine).

pub mod cluster_time;
mod pool;
mod runner;
pub mod transaction;
pub mod with_transaction;

pub use pool::SessionPool;
pub use runner::{RunnerStep, TransactionRunner, WithTransactionOptions};
pub use transaction::{State as TransactionState, TransactionOptions};

use crate::client::inner::ClientInner;
use crate::conn::Connection;
use crate::csot::OpTimeout;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::operation::EndTransaction;
use crate::runtime;
use bson::{cstr, RawDocumentBuf};
use pool::ServerSession;
use std::cell::RefCell;
use std::rc::{Rc, Weak};
use transaction::{EndAction, Transaction, TxnFields};

/// Snapshot Reads spec: a snapshot session's read concern goes on every command
/// it runs but those that continue a cursor.
pub(crate) fn reads_at_snapshot(command: &str) -> bool {
    !matches!(command, "getMore" | "killCursors")
}

#[derive(Debug)]
struct State {
    server: Option<ServerSession>,
    pool: Weak<SessionPool>,
    timeout_minutes: Option<i64>,
    implicit: bool,
    cluster_time: Option<RawDocumentBuf>,
    operation_time: Option<bson::Timestamp>,
    /// Causal Consistency spec: explicit sessions default to on, implicit ones are off.
    causal_consistency: bool,
    /// Snapshot Reads spec: every command reads at one cluster time, taken from
    /// the first reply (`snapshot_time`).
    snapshot: bool,
    snapshot_time: Option<bson::Timestamp>,
    txn: Transaction,
    /// Set while a `withTransaction` body runs under CSOT: every operation
    /// on this session must end by it (CSOT spec, Convenient Transactions API).
    callback_deadline: Option<Deadline>,
    /// The mongos (or load balancer) this session's transaction is pinned to
    /// (Transactions spec, "Mongos Pinning").
    pinned: Option<String>,
    /// The transaction's `recoveryToken` (from a mongos), sent with commit and abort.
    recovery_token: Option<RawDocumentBuf>,
    /// Behind a load balancer: the pinned transaction's connection, kept
    /// checked out between its commands (Load Balancer spec).
    connection: Option<HeldConnection>,
}

/// A checked-out connection a session holds (no Debug on connections).
struct HeldConnection(Connection);

impl std::fmt::Debug for HeldConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeldConnection({})", self.0.id)
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.release();
    }
}

impl State {
    fn release(&mut self) {
        // Ending a session aborts its transaction on the server by itself
        // (endSessions); here only the local state is dropped.
        self.txn = Transaction::default();
        self.callback_deadline = None;
        self.pinned = None;
        if let (Some(s), Some(pool)) = (self.server.take(), self.pool.upgrade()) {
            pool.checkin(s, runtime::now(), self.timeout_minutes);
        }
    }
}

/// Cheap to clone; clones share the session.
#[derive(Clone)]
pub struct Session {
    state: Rc<RefCell<State>>,
    pub default_timeout_ms: Option<u64>,
    /// Explicit sessions run commit and abort through their client.
    client: Option<Rc<ClientInner>>,
    default_transaction: TransactionOptions,
}

impl Session {
    pub(crate) fn new(
        pool: &Rc<SessionPool>,
        timeout_minutes: Option<i64>,
        implicit: bool,
        default_timeout_ms: Option<u64>,
    ) -> Session {
        let server = pool.checkout(runtime::now(), timeout_minutes);
        let state = State {
            server: Some(server),
            pool: Rc::downgrade(pool),
            timeout_minutes,
            implicit,
            cluster_time: None,
            operation_time: None,
            causal_consistency: !implicit,
            snapshot: false,
            snapshot_time: None,
            txn: Transaction::default(),
            callback_deadline: None,
            pinned: None,
            recovery_token: None,
            connection: None,
        };
        Session {
            state: Rc::new(RefCell::new(state)),
            default_timeout_ms,
            client: None,
            default_transaction: TransactionOptions::default(),
        }
    }

    /// An explicit session of `client`, which runs its commit and abort.
    pub(crate) fn explicit(
        client: &Rc<ClientInner>,
        pool: &Rc<SessionPool>,
        timeout_minutes: Option<i64>,
        default_timeout_ms: Option<u64>,
        default_transaction: TransactionOptions,
    ) -> Session {
        let mut s = Session::new(pool, timeout_minutes, false, default_timeout_ms);
        s.client = Some(client.clone());
        s.default_transaction = default_transaction;
        s
    }

    /// `{id: <uuid>}` (empty once ended).
    pub fn id(&self) -> RawDocumentBuf {
        self.state
            .borrow()
            .server
            .as_ref()
            .map(|s| s.lsid.clone())
            .unwrap_or_default()
    }

    pub fn is_implicit(&self) -> bool {
        self.state.borrow().implicit
    }

    /// Ends the session: an open transaction is aborted (best effort), and
    /// the server session returns to the pool.
    pub async fn end(&self) {
        if self.in_transaction() {
            let _ = self.abort_transaction(None).await;
        }
        // A committed transaction's connection goes back to the pool.
        self.unpin();
        self.state.borrow_mut().release();
    }

    pub fn is_ended(&self) -> bool {
        self.state.borrow().server.is_none()
    }

    pub fn cluster_time(&self) -> Option<RawDocumentBuf> {
        self.state.borrow().cluster_time.clone()
    }

    pub fn operation_time(&self) -> Option<bson::Timestamp> {
        self.state.borrow().operation_time
    }

    /// The session option `causalConsistency` (on by default for explicit sessions).
    pub fn set_causal_consistency(&self, on: bool) {
        let mut s = self.state.borrow_mut();
        s.causal_consistency = on && !s.implicit;
    }

    /// Makes this a snapshot session (Snapshot Reads spec): it is then not causally
    /// consistent, and runs no transactions.
    pub fn set_snapshot(&self) {
        let mut s = self.state.borrow_mut();
        s.snapshot = true;
        s.causal_consistency = false;
    }

    pub fn is_snapshot(&self) -> bool {
        self.state.borrow().snapshot
    }

    /// The snapshot's time: given at start, or from the first reply.
    pub fn snapshot_time(&self) -> Option<bson::Timestamp> {
        self.state.borrow().snapshot_time
    }

    /// Starts a snapshot session at `t` (Snapshot Reads spec's `snapshotTime`).
    pub fn set_snapshot_time(&self, t: bson::Timestamp) {
        self.state.borrow_mut().snapshot_time = Some(t);
    }

    /// The Transactions spec's state of this session's transaction.
    pub fn transaction_state(&self) -> transaction::State {
        self.state.borrow().txn.state
    }

    /// Whether a network error marked the server session dirty.
    pub fn is_dirty(&self) -> bool {
        self.state.borrow().server.as_ref().is_some_and(|s| s.dirty)
    }

    /// A snapshot session's read concern: `{level: "snapshot"}`, with the
    /// snapshot's `atClusterTime` once a reply has given it.
    pub(crate) fn snapshot_read_concern(&self) -> Option<RawDocumentBuf> {
        let s = self.state.borrow();
        if !s.snapshot {
            return None;
        }
        let mut rc = bson::rawdoc! { "level": "snapshot" };
        if let Some(t) = s.snapshot_time {
            rc.append(cstr!("atClusterTime"), t);
        }
        Some(rc)
    }

    /// The first reply of a snapshot session fixes its snapshot: the
    /// `atClusterTime` of a cursor (find, aggregate) or of the reply (distinct).
    pub(crate) fn note_snapshot_time(&self, reply: &bson::RawDocument) {
        let mut s = self.state.borrow_mut();
        if !s.snapshot || s.snapshot_time.is_some() {
            return;
        }
        let in_cursor = reply
            .get_document("cursor")
            .ok()
            .and_then(|c| c.get_timestamp("atClusterTime").ok());
        s.snapshot_time = in_cursor.or_else(|| reply.get_timestamp("atClusterTime").ok());
    }

    pub fn is_causally_consistent(&self) -> bool {
        self.state.borrow().causal_consistency
    }

    /// What a causally consistent command sends as `afterClusterTime`: the
    /// last `operationTime` seen, once there is one (none against a standalone).
    pub(crate) fn after_cluster_time(&self) -> Option<bson::Timestamp> {
        let s = self.state.borrow();
        s.operation_time.filter(|_| s.causal_consistency)
    }

    /// Keeps the greater of the current and the given `$clusterTime`.
    pub fn advance_cluster_time(&self, cluster_time: RawDocumentBuf) {
        let mut s = self.state.borrow_mut();
        cluster_time::advance(&mut s.cluster_time, cluster_time);
    }

    pub fn advance_operation_time(&self, t: bson::Timestamp) {
        let mut s = self.state.borrow_mut();
        if s.operation_time.is_none_or(|cur| t > cur) {
            s.operation_time = Some(t);
        }
    }

    pub fn in_transaction(&self) -> bool {
        self.state.borrow().txn.is_active()
    }

    /// Inside a transaction, the read preference of a read (the
    /// operation's, else the transaction's); `None` outside one.
    pub fn transaction_read_preference(
        &self,
        given: Option<&crate::sdam::selection::ReadPreference>,
    ) -> Option<crate::sdam::selection::ReadPreference> {
        self.state.borrow().txn.read_preference(given)
    }

    /// Starts a transaction; unset options come from the session's defaults.
    pub fn start_transaction(&self, options: TransactionOptions) -> Result<()> {
        if self.client.is_none() {
            return Err(Error::invalid_argument(
                "transactions need an explicit session",
            ));
        }
        if self.is_snapshot() {
            return Err(Error::invalid_argument(
                "Transactions are not supported in snapshot sessions",
            ));
        }
        let d = &self.default_transaction;
        let options = TransactionOptions {
            read_concern: options.read_concern.or_else(|| d.read_concern.clone()),
            write_concern: options.write_concern.or_else(|| d.write_concern.clone()),
            read_preference: options
                .read_preference
                .or_else(|| d.read_preference.clone()),
            max_commit_time_ms: options.max_commit_time_ms.or(d.max_commit_time_ms),
        };
        let mut s = self.state.borrow_mut();
        if s.txn.is_active() {
            return Err(Error::invalid_argument("transaction already in progress"));
        }
        let server = s.server.as_mut().ok_or_else(|| Error::closed("session"))?;
        server.txn_number += 1;
        let n = server.txn_number;
        s.txn.start(options, n)?;
        s.recovery_token = None;
        drop(s);
        // A new transaction may run on any mongos (or connection).
        self.unpin();
        Ok(())
    }

    /// Commits; nothing is sent if the transaction ran no command. Errors
    /// that leave the outcome unknown carry `UnknownTransactionCommitResult`.
    pub async fn commit_transaction(&self, timeout_ms: Option<u64>) -> Result<()> {
        let (action, options) = {
            let mut s = self.state.borrow_mut();
            (s.txn.commit()?, s.txn.options.clone())
        };
        if action == EndAction::Nothing {
            return Ok(());
        }
        let mut op = match action {
            EndAction::Resend => {
                EndTransaction::recommit(options.write_concern, options.max_commit_time_ms)
            }
            _ => EndTransaction::commit(options.write_concern, options.max_commit_time_ms),
        };
        self.run_end(&mut op, timeout_ms).await.map_err(|mut e| {
            if unknown_commit_result(&e) {
                e.add_label("UnknownTransactionCommitResult");
            }
            // Whether it committed is unknown, or the transaction may be
            // retried: the next attempt may go to another mongos.
            if e.has_label("UnknownTransactionCommitResult")
                || e.has_label("TransientTransactionError")
            {
                self.unpin();
            }
            e
        })
    }

    /// Aborts; errors from the server are ignored, as the spec requires.
    pub async fn abort_transaction(&self, timeout_ms: Option<u64>) -> Result<()> {
        let (action, options) = {
            let mut s = self.state.borrow_mut();
            (s.txn.abort()?, s.txn.options.clone())
        };
        if action == EndAction::Send {
            let mut op = EndTransaction::abort(options.write_concern);
            let _ = self.run_end(&mut op, timeout_ms).await;
        }
        // Unpinned whatever the abort's outcome (Transactions spec).
        self.unpin();
        Ok(())
    }

    async fn run_end(&self, op: &mut EndTransaction, timeout_ms: Option<u64>) -> Result<()> {
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| Error::invalid_argument("transactions need an explicit session"))?;
        // Inside a withTransaction body (or its commit) the call's deadline rules.
        let timeout = match self.callback_timeout(timeout_ms)? {
            Some(left) => Some(left),
            None => self.resolve_timeout(timeout_ms),
        };
        if timeout.is_some() {
            op.under_csot()?;
        }
        client.execute(op, timeout, Some(self)).await
    }

    /// The timeoutMS of commit, abort and withTransaction: the call's, else
    /// the session's default, else the client's (`csot::resolve_timeout_ms`).
    pub(crate) fn resolve_timeout(&self, timeout_ms: Option<u64>) -> Option<u64> {
        crate::csot::resolve_timeout_ms(
            timeout_ms,
            self.default_timeout_ms,
            &[self.client.as_ref().and_then(|c| c.timeout_ms)],
        )
    }

    /// The convenient transaction API without a closure (Convenient API for
    /// Transactions spec): `step` starts each body attempt and ends with the
    /// commit; the caller runs the body and `report`s its outcome.
    pub fn transaction_runner(&self, options: WithTransactionOptions) -> TransactionRunner {
        TransactionRunner::new(self, options)
    }

    /// `withTransaction`: runs `body` in a transaction and commits, retrying
    /// the body on `TransientTransactionError` and the commit on
    /// `UnknownTransactionCommitResult`, within timeoutMS or 120 s.
    ///
    /// `body` may run several times, so it should be idempotent, and it must
    /// return the errors of its operations rather than swallow them (a
    /// swallowed error that aborted the transaction makes the commit fail
    /// with NoSuchTransaction, which is retried until the time limit). Under
    /// timeoutMS the body's operations on this session share the call's
    /// deadline and must not set their own `timeout_ms` (an
    /// `invalid-argument` error); operations without the session do not get it.
    pub async fn with_transaction<T>(
        &self,
        options: WithTransactionOptions,
        mut body: impl FnMut(&Session) -> Result<T>,
    ) -> Result<T> {
        let mut runner = self.transaction_runner(options);
        let mut value = None;
        loop {
            match runner.step().await? {
                RunnerStep::RunBody => {
                    let outcome = body(self).map(|v| value = Some(v));
                    runner.report(outcome)?;
                }
                RunnerStep::Done => {
                    return value
                        .ok_or_else(|| Error::protocol("withTransaction ended without a body"))
                }
            }
        }
    }

    pub(crate) fn set_callback_deadline(&self, deadline: Option<Deadline>) {
        self.state.borrow_mut().callback_deadline = deadline;
    }

    /// The timeoutMS an operation on this session runs with while a
    /// `withTransaction` body runs under CSOT: what is left of the call's
    /// (at least 1 ms, since 0 would mean no limit). `None` otherwise. An
    /// operation that sets its own timeoutMS then is a client error.
    pub(crate) fn callback_timeout(&self, op_timeout_ms: Option<u64>) -> Result<Option<u64>> {
        let Some(deadline) = self.state.borrow().callback_deadline else {
            return Ok(None);
        };
        if op_timeout_ms.is_some() {
            return Err(Error::invalid_argument(
                "timeoutMS cannot be set on an operation inside withTransaction with a timeout",
            ));
        }
        Ok(Some(match deadline.remaining(runtime::now()) {
            None => 0,
            Some(left) => (left.as_millis() as u64).max(1),
        }))
    }

    /// An operation's budget, bounded by a running `withTransaction`'s deadline.
    pub(crate) fn bound(&self, timeout: OpTimeout) -> OpTimeout {
        match self.state.borrow().callback_deadline {
            None => timeout,
            Some(d) => OpTimeout {
                csot: Some(timeout.csot.map_or(d, |c| c.min(d))),
                ..timeout
            },
        }
    }

    /// For a command about to be sent: the transaction fields it carries
    /// (moving a starting transaction to in progress).
    pub(crate) fn txn_fields(&self, ends_transaction: bool) -> Option<TxnFields> {
        let mut s = self.state.borrow_mut();
        if ends_transaction {
            let n = s.txn.txn_number;
            return Some(TxnFields {
                txn_number: n,
                start: false,
                read_concern: None,
            });
        }
        s.txn.on_command()
    }

    /// The mongos or load balancer this session's transaction is pinned to.
    pub fn pinned_server(&self) -> Option<String> {
        self.state.borrow().pinned.clone()
    }

    /// Pins the transaction to `address` (its first command's server).
    pub(crate) fn pin(&self, address: &str) {
        self.state.borrow_mut().pinned = Some(address.to_string());
    }

    /// Unpins; a connection held for the transaction goes back to its pool.
    pub(crate) fn unpin(&self) {
        let held = {
            let mut s = self.state.borrow_mut();
            s.pinned = None;
            s.connection.take()
        };
        if let (Some(HeldConnection(conn)), Some(client)) = (held, &self.client) {
            client.topology.borrow_mut().checkin(conn);
        }
    }

    /// The connection held for the pinned transaction, if any (taken for a command).
    pub(crate) fn take_connection(&self) -> Option<Connection> {
        self.state.borrow_mut().connection.take().map(|h| h.0)
    }

    /// Keeps `conn` checked out for the pinned transaction's next command.
    pub(crate) fn hold_connection(&self, conn: Connection) {
        if let Some(lease) = &conn.lease {
            lease.set_purpose(crate::cmap::Purpose::Transaction);
        }
        self.state.borrow_mut().connection = Some(HeldConnection(conn));
    }

    /// Keeps the `recoveryToken` a mongos sent for the transaction.
    pub(crate) fn set_recovery_token(&self, token: RawDocumentBuf) {
        self.state.borrow_mut().recovery_token = Some(token);
    }

    pub(crate) fn recovery_token(&self) -> Option<RawDocumentBuf> {
        self.state.borrow().recovery_token.clone()
    }

    /// See `Transaction::restart_after_overload`.
    pub(crate) fn restart_transaction_after_overload(&self) {
        self.state.borrow_mut().txn.restart_after_overload();
    }

    /// Appends `lsid` (and marks the server session used).
    pub(crate) fn apply_to(&self, body: &mut RawDocumentBuf) -> Result<()> {
        let mut s = self.state.borrow_mut();
        let server = s.server.as_mut().ok_or_else(|| Error::closed("session"))?;
        server.last_use = runtime::now();
        body.append(cstr!("lsid"), server.lsid.clone());
        Ok(())
    }

    /// The next transaction number, for a retryable write's `txnNumber`.
    pub(crate) fn next_txn_number(&self) -> Result<i64> {
        let mut s = self.state.borrow_mut();
        let server = s.server.as_mut().ok_or_else(|| Error::closed("session"))?;
        server.txn_number += 1;
        Ok(server.txn_number)
    }

    /// After a network error: the server session must not be reused.
    pub(crate) fn mark_dirty(&self) {
        // `try_`: also called from a dropped operation's guard (executor.rs).
        if let Ok(mut state) = self.state.try_borrow_mut() {
            if let Some(server) = state.server.as_mut() {
                server.dirty = true;
            }
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Errors after which a commit may or may not have happened (Transactions spec).
fn unknown_commit_result(e: &Error) -> bool {
    const WRITE_CONCERN_CODES: &[i32] = &[
        64, 50, 91, 189, 6, 7, 89, 9001, 10107, 11600, 11602, 13435, 13436, 262,
    ];
    e.is_network()
        || e.is_selection_failure()
        || e.code.is_some_and(|c| WRITE_CONCERN_CODES.contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Rc<SessionPool> {
        Rc::new(SessionPool::default())
    }

    #[test]
    fn selection_failures_leave_a_commit_unknown_in_both_modes() {
        use crate::error::ErrorKind;
        let selection = Error::new(ErrorKind::ServerSelection, "no server");
        assert!(unknown_commit_result(&selection));
        let csot = Error::timeout("server selection").caused_by(selection);
        assert!(unknown_commit_result(&csot));
        assert!(!unknown_commit_result(&Error::invalid_argument("x")));
    }

    #[test]
    fn a_pin_lasts_until_a_new_transaction_or_the_end() {
        let pool = pool();
        let s = Session::new(&pool, Some(30), false, None);
        assert_eq!(s.pinned_server(), None);
        s.pin("m:1");
        s.set_recovery_token(bson::rawdoc! { "recoveryShardId": "s" });
        assert_eq!(s.pinned_server().as_deref(), Some("m:1"));
        assert!(s.recovery_token().is_some());
        s.unpin();
        assert_eq!(s.pinned_server(), None);
        s.pin("m:2");
        crate::runtime::block_on(s.end());
        assert_eq!(s.pinned_server(), None, "ending a session unpins it");
    }

    #[test]
    fn lsid_is_attached_until_the_session_ends() {
        let pool = pool();
        let s = Session::new(&pool, Some(30), false, None);
        let mut body = RawDocumentBuf::new();
        s.apply_to(&mut body).unwrap();
        assert_eq!(body.get_document("lsid").unwrap(), &*s.id());
        crate::runtime::block_on(s.end());
        assert!(s.is_ended());
        assert!(s.apply_to(&mut RawDocumentBuf::new()).is_err());
        assert_eq!(pool.drain().len(), 1, "ending returned the server session");
    }

    #[test]
    fn the_last_clone_returns_the_server_session() {
        let pool = pool();
        let s = Session::new(&pool, Some(30), true, None);
        let id = s.id();
        let clone = s.clone();
        drop(s);
        assert!(pool.drain().is_empty(), "a clone still holds it");
        drop(clone);
        let again = Session::new(&pool, Some(30), true, None);
        assert_eq!(again.id(), id, "reused from the pool");
    }

    #[test]
    fn dirty_sessions_are_discarded_and_txn_numbers_increase() {
        let pool = pool();
        let s = Session::new(&pool, Some(30), true, None);
        assert_eq!(s.next_txn_number().unwrap(), 1);
        assert_eq!(s.next_txn_number().unwrap(), 2);
        s.mark_dirty();
        drop(s);
        assert!(pool.drain().is_empty());
    }

    #[test]
    fn operation_time_only_advances() {
        let s = Session::new(&pool(), None, false, None);
        s.advance_operation_time(bson::Timestamp {
            time: 5,
            increment: 1,
        });
        s.advance_operation_time(bson::Timestamp {
            time: 4,
            increment: 9,
        });
        assert_eq!(
            s.operation_time(),
            Some(bson::Timestamp {
                time: 5,
                increment: 1
            })
        );
    }
}
