//! What a mongos adds to what the backend answered: a transaction's
//! `recoveryToken` (the shard that can tell its outcome), which drivers keep
//! and send with `commitTransaction`/`abortTransaction` (Transactions spec).

use bson::{doc, Document};

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

#[cfg(test)]
mod tests {
    use super::*;

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
