//! What a mongos adds to what the backend answered: a transaction's
//! `recoveryToken` (the shard that can tell its outcome), which drivers keep
//! and send with `commitTransaction`/`abortTransaction` (Transactions spec);
//! and what each mongos knows of transactions: only those started through it,
//! except that any mongos can learn that one committed (from the shard the
//! recovery token names).

use std::collections::HashSet;

use bson::{doc, Document};

use crate::codes::{self, error_doc, with_labels};

/// Transactions remembered before the sets are cleared (a long run's memory bound).
const MAX_TRACKED: usize = 100_000;

/// An lsid (as text) and txnNumber.
type TxnKey = (Vec<u8>, i64);

#[derive(Default)]
pub(crate) struct Transactions {
    /// (mongos, transaction) pairs: the mongos ran its first command.
    started: HashSet<(usize, TxnKey)>,
    /// Commits that reached the shard, whichever mongos sent them.
    committed: HashSet<TxnKey>,
}

impl Transactions {
    /// A command of a transaction (`autocommit: false`) about to run on mongos
    /// `member`: `Some(reply)` when that mongos answers itself, NoSuchTransaction
    /// for a transaction it never saw, or ok for a commit the shard already
    /// recorded (recovered through the recovery token, as a real mongos does).
    pub(crate) fn before_forward(
        &mut self,
        member: usize,
        name: &str,
        body: &Document,
    ) -> Option<Document> {
        if body.get_bool("autocommit").unwrap_or(true) {
            return None;
        }
        let lsid = body.get_document("lsid").ok()?.to_string().into_bytes();
        let key = (lsid, body.get_i64("txnNumber").ok()?);
        if self.started.len() + self.committed.len() > MAX_TRACKED {
            self.started.clear();
            self.committed.clear();
        }
        if body.get_bool("startTransaction").unwrap_or(false) {
            self.started.insert((member, key));
            return None;
        }
        if self.started.contains(&(member, key.clone())) {
            if name == "commitTransaction" {
                self.committed.insert(key);
            }
            return None;
        }
        if name == "commitTransaction" && self.committed.contains(&key) {
            return Some(doc! { "ok": 1.0 });
        }
        // Any mongos can have the shard abort it (the recovery token names the shard).
        if name == "abortTransaction" {
            return None;
        }
        let code = codes::NO_SUCH_TRANSACTION;
        let msg = format!(
            "Transaction with txnNumber {} has not been started here",
            key.1
        );
        let labels = vec!["TransientTransactionError".to_string()];
        Some(with_labels(error_doc(code, &msg), labels))
    }
}

/// The one shard behind every mongos of the proxy.
pub const SHARD: &str = "shard0";

/// `reply` with a `recoveryToken` when `body` ran in a transaction (`autocommit: false`).
pub(crate) fn with_recovery_token(body: &Document, reply: &Document) -> Option<Document> {
    if body.get_bool("autocommit").unwrap_or(true) || reply.contains_key("recoveryToken") {
        return None;
    }
    let mut out = reply.clone();
    out.insert("recoveryToken", doc! { "recoveryShardId": SHARD });
    Some(out)
}

/// Commands only a mongos has, which the backend lacks.
pub(crate) fn is_router_command(name: &str) -> bool {
    name == "checkMetadataConsistency"
}

/// A router command's answer: one shard whose metadata is consistent, so no
/// inconsistency to list (an exhausted cursor).
pub(crate) fn router_command(name: &str, db: &str) -> Document {
    let ns = format!("{db}.$cmd.{name}");
    doc! { "cursor": { "id": 0i64, "ns": ns, "firstBatch": [] }, "ok": 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mongos_knows_only_its_own_transactions_and_recorded_commits() {
        let mut t = Transactions::default();
        let lsid = doc! { "id": 1 };
        let cmd = |name: &str, start: bool| {
            let mut d = doc! { name: 1, "lsid": lsid.clone(), "txnNumber": 5i64,
            "autocommit": false };
            if start {
                d.insert("startTransaction", true);
            }
            d
        };
        assert!(t
            .before_forward(0, "insert", &cmd("insert", true))
            .is_none());
        assert!(t
            .before_forward(0, "insert", &cmd("insert", false))
            .is_none());
        let elsewhere = t
            .before_forward(1, "insert", &cmd("insert", false))
            .unwrap();
        assert_eq!(
            elsewhere.get_i32("code").ok(),
            Some(codes::NO_SUCH_TRANSACTION)
        );
        let refused = t.before_forward(1, "commitTransaction", &cmd("commitTransaction", false));
        assert!(refused.is_some_and(|r| r.contains_key("errorLabels")));
        assert!(t
            .before_forward(0, "commitTransaction", &cmd("commitTransaction", false))
            .is_none());
        let recovered = t.before_forward(1, "commitTransaction", &cmd("commitTransaction", false));
        assert_eq!(recovered, Some(doc! { "ok": 1.0 }));
        assert!(t.before_forward(1, "find", &doc! { "find": "c" }).is_none());
        let abort = cmd("abortTransaction", false);
        assert!(t.before_forward(1, "abortTransaction", &abort).is_none());
    }

    #[test]
    fn only_transaction_commands_get_a_token() {
        let reply = doc! { "ok": 1.0 };
        let txn = doc! { "insert": "c", "autocommit": false };
        let token = with_recovery_token(&txn, &reply).unwrap();
        assert_eq!(
            token.get_document("recoveryToken").unwrap(),
            &doc! { "recoveryShardId": SHARD }
        );
        assert!(with_recovery_token(&doc! { "insert": "c" }, &reply).is_none());
    }
}
