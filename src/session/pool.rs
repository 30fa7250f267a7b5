//! The server session pool (Driver Sessions spec): LIFO, so few lsids stay
//! in use; sessions about to expire on the server are discarded, not reused.

use crate::deadline::Instant;
use bson::{cstr, spec::BinarySubtype, Binary, RawDocumentBuf};
use std::cell::{Cell, RefCell};
use std::time::Duration;

#[derive(Debug)]
pub struct ServerSession {
    pub lsid: RawDocumentBuf,
    pub txn_number: i64,
    pub last_use: Instant,
    /// A network error hit a command using it: the server may still hold it.
    pub dirty: bool,
}

impl ServerSession {
    fn new(now: Instant) -> ServerSession {
        let mut bytes = crate::runtime::random_bytes(16);
        // A version-4 UUID, as the spec asks for lsid.id.
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let mut lsid = RawDocumentBuf::new();
        lsid.append(
            cstr!("id"),
            Binary {
                subtype: BinarySubtype::Uuid,
                bytes,
            },
        );
        ServerSession {
            lsid,
            txn_number: 0,
            last_use: now,
            dirty: false,
        }
    }

    /// Within a minute of the server's logicalSessionTimeoutMinutes.
    fn about_to_expire(&self, now: Instant, timeout_minutes: Option<i64>) -> bool {
        let Some(minutes) = timeout_minutes else {
            return false;
        };
        let limit = Duration::from_secs(60 * (minutes.max(1) as u64 - 1));
        now.since(self.last_use) >= limit
    }
}

#[derive(Debug, Default)]
pub struct SessionPool {
    idle: RefCell<Vec<ServerSession>>,
    /// Server sessions checked out and not yet checked in (kept or discarded):
    /// after every session handle is gone, anything but 0 is a leak.
    out: Cell<usize>,
}

impl SessionPool {
    pub fn checkout(&self, now: Instant, timeout_minutes: Option<i64>) -> ServerSession {
        self.out.set(self.out.get() + 1);
        let mut idle = self.idle.borrow_mut();
        while let Some(s) = idle.pop() {
            if !s.about_to_expire(now, timeout_minutes) {
                return s;
            }
        }
        ServerSession::new(now)
    }

    pub fn checkin(&self, s: ServerSession, now: Instant, timeout_minutes: Option<i64>) {
        self.out.set(self.out.get().saturating_sub(1));
        if !s.dirty && !s.about_to_expire(now, timeout_minutes) {
            self.idle.borrow_mut().push(s);
        }
    }

    /// Server sessions checked out now (by live session handles, implicit or explicit).
    pub fn checked_out(&self) -> usize {
        self.out.get()
    }

    /// Every pooled lsid, for `endSessions` when the client closes.
    pub fn drain(&self) -> Vec<RawDocumentBuf> {
        self.idle.borrow_mut().drain(..).map(|s| s.lsid).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant(1);

    #[test]
    fn lifo_reuse_and_distinct_ids() {
        let pool = SessionPool::default();
        let a = pool.checkout(T0, Some(30));
        let b = pool.checkout(T0, Some(30));
        assert_ne!(a.lsid, b.lsid);
        let (a_id, b_id) = (a.lsid.clone(), b.lsid.clone());
        assert_eq!(pool.checked_out(), 2);
        pool.checkin(a, T0, Some(30));
        pool.checkin(b, T0, Some(30));
        assert_eq!(pool.checked_out(), 0);
        assert_eq!(pool.checkout(T0, Some(30)).lsid, b_id, "last in, first out");
        assert_eq!(pool.checkout(T0, Some(30)).lsid, a_id);
    }

    #[test]
    fn dirty_and_expiring_sessions_are_not_reused() {
        let pool = SessionPool::default();
        let mut s = pool.checkout(T0, Some(30));
        s.dirty = true;
        pool.checkin(s, T0, Some(30));
        assert!(pool.drain().is_empty());
        let s = pool.checkout(T0, Some(30));
        let id = s.lsid.clone();
        pool.checkin(s, T0, Some(30));
        let later = T0.saturating_add(Duration::from_secs(29 * 60 + 1));
        assert_ne!(
            pool.checkout(later, Some(30)).lsid,
            id,
            "idle 29 of 30 minutes: discarded"
        );
    }

    #[test]
    fn uuid_v4_ids() {
        let s = ServerSession::new(T0);
        let bin = s.lsid.get_binary("id").unwrap();
        assert_eq!(
            (bin.subtype, bin.bytes.len(), bin.bytes[6] >> 4),
            (BinarySubtype::Uuid, 16, 4)
        );
    }
}
