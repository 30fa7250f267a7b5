//! Client sessions (Driver Sessions spec). A `Session` holds a server
//! session from the client's pool; when its last clone drops (or it ends),
//! the server session goes back. Operations without an explicit session get
//! an implicit one, which a cursor keeps until it is done. Transactions come later.

pub mod cluster_time;
mod pool;

pub use pool::SessionPool;

use crate::error::{Error, Result};
use crate::runtime;
use bson::{cstr, RawDocumentBuf};
use pool::ServerSession;
use std::cell::RefCell;
use std::rc::{Rc, Weak};

#[derive(Debug)]
struct State {
    server: Option<ServerSession>,
    pool: Weak<SessionPool>,
    timeout_minutes: Option<i64>,
    implicit: bool,
    cluster_time: Option<RawDocumentBuf>,
    operation_time: Option<bson::Timestamp>,
}

impl Drop for State {
    fn drop(&mut self) {
        self.release();
    }
}

impl State {
    fn release(&mut self) {
        if let (Some(s), Some(pool)) = (self.server.take(), self.pool.upgrade()) {
            pool.checkin(s, runtime::now(), self.timeout_minutes);
        }
    }
}

/// Cheap to clone; clones share the session.
#[derive(Debug, Clone)]
pub struct Session {
    state: Rc<RefCell<State>>,
    pub default_timeout_ms: Option<u64>,
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
        };
        Session {
            state: Rc::new(RefCell::new(state)),
            default_timeout_ms,
        }
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

    /// Ends the session: its server session returns to the pool.
    pub fn end(&self) {
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

    pub fn start_transaction(&self) -> Result<()> {
        Err(Error::not_implemented("transactions"))
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
        if let Some(server) = self.state.borrow_mut().server.as_mut() {
            server.dirty = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Rc<SessionPool> {
        Rc::new(SessionPool::default())
    }

    #[test]
    fn lsid_is_attached_until_the_session_ends() {
        let pool = pool();
        let s = Session::new(&pool, Some(30), false, None);
        let mut body = RawDocumentBuf::new();
        s.apply_to(&mut body).unwrap();
        assert_eq!(body.get_document("lsid").unwrap(), &*s.id());
        s.end();
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
