//! Client sessions (Driver Sessions spec): an explicit session attaches its
//! `lsid` to each command it is passed to. Transactions come later.

use crate::error::{Error, Result};
use bson::cstr;
use bson::{spec::BinarySubtype, Binary, RawDocumentBuf};
use std::cell::RefCell;
use std::rc::Rc;

#[derive(Debug)]
struct State {
    lsid: RawDocumentBuf,
    ended: bool,
    cluster_time: Option<RawDocumentBuf>,
    operation_time: Option<bson::Timestamp>,
}

/// Cheap to clone; clones share the session.
#[derive(Debug, Clone)]
pub struct Session {
    state: Rc<RefCell<State>>,
    pub default_timeout_ms: Option<u64>,
}

impl Session {
    pub(crate) fn new(default_timeout_ms: Option<u64>) -> Session {
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
        Session {
            state: Rc::new(RefCell::new(State {
                lsid,
                ended: false,
                cluster_time: None,
                operation_time: None,
            })),
            default_timeout_ms,
        }
    }

    /// `{id: <uuid>}`.
    pub fn id(&self) -> RawDocumentBuf {
        self.state.borrow().lsid.clone()
    }

    pub fn end(&self) {
        self.state.borrow_mut().ended = true;
    }

    pub fn is_ended(&self) -> bool {
        self.state.borrow().ended
    }

    pub fn cluster_time(&self) -> Option<RawDocumentBuf> {
        self.state.borrow().cluster_time.clone()
    }

    pub fn operation_time(&self) -> Option<bson::Timestamp> {
        self.state.borrow().operation_time
    }

    pub fn advance_cluster_time(&self, cluster_time: RawDocumentBuf) {
        self.state.borrow_mut().cluster_time = Some(cluster_time);
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

    pub(crate) fn apply_to(&self, body: &mut RawDocumentBuf) -> Result<()> {
        let s = self.state.borrow();
        if s.ended {
            return Err(Error::closed("session"));
        }
        body.append(cstr!("lsid"), s.lsid.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsid_is_a_uuid_and_end_is_enforced() {
        let s = Session::new(None);
        let id = s.id();
        let bin = id.get_binary("id").unwrap();
        assert_eq!(bin.subtype, BinarySubtype::Uuid);
        assert_eq!(bin.bytes.len(), 16);
        assert_eq!(bin.bytes[6] >> 4, 4);
        let mut body = RawDocumentBuf::new();
        s.apply_to(&mut body).unwrap();
        assert_eq!(body.get_document("lsid").unwrap(), &*id);
        s.end();
        assert!(s.apply_to(&mut RawDocumentBuf::new()).is_err());
    }

    #[test]
    fn operation_time_only_advances() {
        let s = Session::new(None);
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
