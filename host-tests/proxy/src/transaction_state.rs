//! Transactions nx-27017 never opened: it opens one on a write or a find, not on an aggregate,
//! a count or a createIndexes, and then answers the transaction's `commitTransaction` or
//! `abortTransaction` with `No session specified` (`nx-gaps.py`: read-only-commit). mongod
//! commits or aborts a transaction that only read like any other. The proxy remembers which
//! transactions it saw start (a command with `startTransaction: true` that succeeded) and
//! answers `{ok: 1}` for their first commit or abort when nx-27017 knows none of them.

use std::collections::HashMap;

use bson::{doc, Bson, Document};

/// Enough for any test's sessions; past it the memory starts afresh.
const MAX_SESSIONS: usize = 10_000;
/// nx-27017's answer to a transaction command for a transaction it does not have.
const NX_NO_TRANSACTION: &str = "No session specified";

fn key(body: &Document) -> Option<(Vec<u8>, i64)> {
    let lsid = body.get_document("lsid").ok()?.to_vec().ok()?;
    let txn = match body.get("txnNumber")? {
        Bson::Int64(n) => *n,
        Bson::Int32(n) => i64::from(*n),
        _ => return None,
    };
    Some((lsid, txn))
}

fn is_ok(reply: &Document) -> bool {
    reply.get("ok").and_then(crate::failpoint::as_number) == Some(1.0)
}

/// Per session: the transaction that started and has not ended yet.
#[derive(Default)]
pub struct Started {
    open: HashMap<Vec<u8>, i64>,
}

impl Started {
    /// Looks at a command and its reply from nx-27017; answers the reply mongod would give
    /// instead, when they differ.
    pub fn after(&mut self, name: &str, body: &Document, reply: &Document) -> Option<Document> {
        let (lsid, txn) = key(body)?;
        if matches!(body.get("startTransaction"), Some(Bson::Boolean(true))) && is_ok(reply) {
            if self.open.len() >= MAX_SESSIONS {
                self.open.clear();
            }
            self.open.insert(lsid, txn);
            return None;
        }
        if !matches!(name, "commitTransaction" | "abortTransaction") {
            return None;
        }
        // The transaction ends here whatever nx-27017 answers.
        let started = self.open.get(&lsid) == Some(&txn);
        if started {
            self.open.remove(&lsid);
        }
        let no_transaction =
            !is_ok(reply) && reply.get_str("errmsg").ok() == Some(NX_NO_TRANSACTION);
        (started && no_transaction).then(|| doc! { "ok": 1.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(name: &str, txn: i64, start: bool) -> Document {
        let mut d = doc! { name: 1, "lsid": { "id": 7 }, "txnNumber": txn, "autocommit": false };
        if start {
            d.insert("startTransaction", true);
        }
        d
    }

    #[test]
    fn a_started_transaction_nx_never_opened_commits_and_aborts() {
        let nx = doc! { "ok": 0, "errmsg": NX_NO_TRANSACTION };
        let mut s = Started::default();
        assert_eq!(
            s.after("aggregate", &cmd("aggregate", 1, true), &doc! { "ok": 1 }),
            None
        );
        assert_eq!(
            s.after(
                "commitTransaction",
                &cmd("commitTransaction", 1, false),
                &nx
            ),
            Some(doc! { "ok": 1.0 })
        );
        // Once only: a transaction that ended is nx-27017's answer to give again.
        assert_eq!(
            s.after(
                "commitTransaction",
                &cmd("commitTransaction", 1, false),
                &nx
            ),
            None
        );
        s.after("count", &cmd("count", 2, true), &doc! { "ok": 1 });
        assert_eq!(
            s.after("abortTransaction", &cmd("abortTransaction", 2, false), &nx),
            Some(doc! { "ok": 1.0 })
        );
    }

    #[test]
    fn anything_else_keeps_nx_answer() {
        let nx = doc! { "ok": 0, "errmsg": NX_NO_TRANSACTION };
        let mut s = Started::default();
        // Never started, or another transaction number, or a start that failed.
        assert_eq!(
            s.after(
                "commitTransaction",
                &cmd("commitTransaction", 1, false),
                &nx
            ),
            None
        );
        s.after("insert", &cmd("insert", 1, true), &doc! { "ok": 1 });
        assert_eq!(
            s.after(
                "commitTransaction",
                &cmd("commitTransaction", 2, false),
                &nx
            ),
            None
        );
        s.after("find", &cmd("find", 3, true), &doc! { "ok": 0, "code": 2 });
        assert_eq!(
            s.after(
                "commitTransaction",
                &cmd("commitTransaction", 3, false),
                &nx
            ),
            None
        );
        // Another error of nx-27017's, or a commit that worked.
        s.after("find", &cmd("find", 4, true), &doc! { "ok": 1 });
        let other = doc! { "ok": 0, "errmsg": "something else", "code": 8 };
        assert_eq!(
            s.after(
                "commitTransaction",
                &cmd("commitTransaction", 4, false),
                &other
            ),
            None
        );
        s.after("find", &cmd("find", 5, true), &doc! { "ok": 1 });
        assert_eq!(
            s.after(
                "commitTransaction",
                &cmd("commitTransaction", 5, false),
                &doc! { "ok": 1 }
            ),
            None
        );
    }
}
