//! mongod's retryable-write record: a write sent again with the same session (`lsid`) and
//! `txnNumber` is answered from the record of its first execution, not run twice.
//! nx-27017 keeps no such record (nx-gaps.py retry-dedup), so the proxy keeps it: every
//! successful reply to a retryable write (txnNumber, no autocommit) is stored, and a retry
//! gets it back. This is what makes a write that was applied and then lost its reply
//! (`onPrimaryTransactionalWrite`, a `writeConcernError`) succeed exactly once on retry.
//! Likewise a transaction's `commitTransaction` sent again after it committed (nx-27017
//! answers "No session specified": nx-gaps.py recommit).

use std::collections::HashMap;

use bson::{Bson, Document};

use crate::commands;

/// Enough for any test's sessions; past it the record starts afresh.
const MAX_RECORDS: usize = 10_000;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    db: String,
    lsid: Vec<u8>,
    txn_number: i64,
}

/// The record key of a retryable write, None for anything else.
pub fn key(name: &str, db: &str, body: &Document) -> Option<Key> {
    // A transaction's commit is recorded too: mongod answers a commit sent again (a retry,
    // or the application committing twice) with the recorded outcome.
    let commit = name == "commitTransaction" && body.get_bool("autocommit").ok() == Some(false);
    if !commit && (body.contains_key("autocommit") || !commands::is_write(name, body)) {
        return None;
    }
    let txn_number = match body.get("txnNumber")? {
        Bson::Int64(n) => *n,
        Bson::Int32(n) => i64::from(*n),
        _ => return None,
    };
    let lsid = body.get_document("lsid").ok()?.to_vec().ok()?;
    Some(Key {
        db: db.to_string(),
        lsid,
        txn_number,
    })
}

#[derive(Default)]
pub struct RetryRecords {
    replies: HashMap<Key, Document>,
}

impl RetryRecords {
    /// Stores the reply to the first execution if it succeeded (`ok: 1`).
    pub fn record(&mut self, key: Key, reply: &Document) {
        let ok = reply.get("ok").and_then(crate::failpoint::as_number) == Some(1.0);
        if !ok {
            return;
        }
        if self.replies.len() >= MAX_RECORDS {
            self.replies.clear();
        }
        self.replies.entry(key).or_insert_with(|| reply.clone());
    }

    pub fn get(&self, key: &Key) -> Option<Document> {
        self.replies.get(key).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn retryable_writes_are_answered_from_the_record() {
        let lsid = doc! { "id": 1 };
        let insert = doc! { "insert": "c", "documents": [{ "_id": 1 }], "lsid": lsid.clone(), "txnNumber": 1i64 };
        let k = key("insert", "d", &insert).unwrap();
        let mut records = RetryRecords::default();
        assert_eq!(records.get(&k), None);
        records.record(k.clone(), &doc! { "ok": 0.0, "code": 91 });
        assert_eq!(records.get(&k), None, "a failed write is not recorded");
        records.record(k.clone(), &doc! { "n": 1, "ok": 1.0 });
        records.record(k.clone(), &doc! { "n": 7, "ok": 1.0 });
        assert_eq!(
            records.get(&k),
            Some(doc! { "n": 1, "ok": 1.0 }),
            "the first execution's"
        );
        let next = doc! { "insert": "c", "lsid": lsid.clone(), "txnNumber": 2i64 };
        assert_ne!(key("insert", "d", &next), Some(k.clone()));
        // Not retryable writes: transactions, reads, no txnNumber.
        let txn =
            doc! { "insert": "c", "lsid": lsid.clone(), "txnNumber": 1i64, "autocommit": false };
        assert!(key("insert", "d", &txn).is_none());
        assert!(key(
            "find",
            "d",
            &doc! { "find": "c", "lsid": lsid, "txnNumber": 1i64 }
        )
        .is_none());
        assert!(key("insert", "d", &doc! { "insert": "c" }).is_none());
        let commit = doc! { "commitTransaction": 1, "lsid": { "id": 1 }, "txnNumber": 1i64, "autocommit": false };
        let c = key("commitTransaction", "admin", &commit).unwrap();
        assert_ne!(c, k);
        let abort = doc! { "abortTransaction": 1, "lsid": { "id": 1 }, "txnNumber": 1i64, "autocommit": false };
        assert!(key("abortTransaction", "admin", &abort).is_none());
    }
}
