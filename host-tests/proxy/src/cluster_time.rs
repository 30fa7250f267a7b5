//! Cluster times as a replica-set member or mongos reports them (Causal Consistency
//! and Driver Sessions specs): every reply carries `operationTime` and `$clusterTime`,
//! a standalone's none. nx-27017 reports neither, so the proxy keeps one cluster clock.
//!
//! A command's `readConcern.afterClusterTime` is satisfied here and taken off before the
//! command reaches nx-27017: the proxy's backend is one node, whose data always includes
//! every operation the clock has stamped, which is what mongod checks. (nx-27017 also
//! mishandles a read concern on `insert`: it inserts a second, broken document.)
//!
//! Snapshot reads outside transactions (mongod 5.0+: find, aggregate, distinct) are
//! answered with an `atClusterTime`, but nx-27017 has no snapshots: it reads its latest
//! data. Tests that check a snapshot's data are in the skip list for that.

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document, Timestamp};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Default)]
pub(crate) struct Clock {
    last: Mutex<Option<Timestamp>>,
}

impl Clock {
    /// A cluster time greater than every one handed out before.
    pub fn tick(&self) -> Timestamp {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()) as u32;
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let next = match *last {
            Some(t) if t.time >= now => Timestamp {
                time: t.time,
                increment: t.increment + 1,
            },
            _ => Timestamp {
                time: now,
                increment: 1,
            },
        };
        *last = Some(next);
        next
    }
}

/// Adds `operationTime` and `$clusterTime` (with a dummy signature, as a deployment
/// without keys would) unless the reply has them.
pub(crate) fn stamp(reply: &mut Document, t: Timestamp) {
    if !reply.contains_key("operationTime") {
        reply.insert("operationTime", t);
    }
    if !reply.contains_key("$clusterTime") {
        let hash = Binary {
            subtype: BinarySubtype::Generic,
            bytes: vec![0; 20],
        };
        let signature = doc! { "hash": hash, "keyId": 0_i64 };
        reply.insert(
            "$clusterTime",
            doc! { "clusterTime": t, "signature": signature },
        );
    }
}

/// The commands mongod reads at a snapshot outside a transaction.
const SNAPSHOT_COMMANDS: [&str; 3] = ["find", "aggregate", "distinct"];

/// A read concern `{level: "snapshot"}` outside a transaction.
pub(crate) fn is_snapshot_read(body: &Document) -> bool {
    !body.contains_key("autocommit")
        && body
            .get_document("readConcern")
            .and_then(|rc| rc.get_str("level"))
            .is_ok_and(|l| l == "snapshot")
}

/// mongod's refusal of a snapshot read it cannot run, if this is one.
pub(crate) fn snapshot_refusal(standalone: bool, name: &str, body: &Document) -> Option<Document> {
    if !is_snapshot_read(body) {
        return None;
    }
    if standalone {
        let msg = "readConcern level 'snapshot' needs a replica set or sharded cluster";
        return Some(crate::codes::error_doc(
            crate::codes::NO_REPLICATION_ENABLED,
            msg,
        ));
    }
    if !SNAPSHOT_COMMANDS.contains(&name) {
        let msg = format!("Command {name} does not support readConcern level 'snapshot'");
        return Some(crate::codes::error_doc(crate::codes::INVALID_OPTIONS, &msg));
    }
    None
}

/// A snapshot read's reply: `atClusterTime` in its cursor (find, aggregate) or at the
/// top (distinct): the one asked for, else `now`.
pub(crate) fn stamp_snapshot(body: &Document, reply: &mut Document, now: Timestamp) {
    let t = body
        .get_document("readConcern")
        .and_then(|rc| rc.get_timestamp("atClusterTime"))
        .unwrap_or(now);
    match reply.get_document_mut("cursor") {
        Ok(cursor) => {
            cursor.insert("atClusterTime", t);
        }
        Err(_) => {
            reply.insert("atClusterTime", t);
        }
    }
}

/// The command as nx-27017 gets it: without `readConcern.afterClusterTime` and a
/// snapshot read's level and `atClusterTime` (and without a read concern left empty by
/// that), or `None` when it is unchanged.
pub(crate) fn for_backend(body: &Document) -> Option<Document> {
    let rc = body.get_document("readConcern").ok()?;
    let snapshot = is_snapshot_read(body);
    if !rc.contains_key("afterClusterTime") && !snapshot {
        return None;
    }
    let mut rc = rc.clone();
    rc.remove("afterClusterTime");
    if snapshot {
        rc.remove("level");
        rc.remove("atClusterTime");
    }
    let mut out = body.clone();
    match rc.is_empty() {
        true => out.remove("readConcern"),
        false => out.insert("readConcern", Bson::Document(rc)),
    };
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_only_advance() {
        let c = Clock::default();
        let a = c.tick();
        let b = c.tick();
        assert!(b > a, "{a:?} {b:?}");
    }

    #[test]
    fn stamps_what_is_missing_only() {
        let t = Timestamp {
            time: 5,
            increment: 1,
        };
        let mut r = doc! { "ok": 1 };
        stamp(&mut r, t);
        assert_eq!(r.get_timestamp("operationTime").unwrap(), t);
        let ct = r.get_document("$clusterTime").unwrap();
        assert_eq!(ct.get_timestamp("clusterTime").unwrap(), t);
        let mut kept = doc! { "ok": 1, "operationTime": Timestamp { time: 1, increment: 1 } };
        stamp(&mut kept, t);
        assert_eq!(kept.get_timestamp("operationTime").unwrap().time, 1);
    }

    #[test]
    fn takes_off_after_cluster_time() {
        let t = Timestamp {
            time: 5,
            increment: 1,
        };
        let only = doc! { "find": "c", "readConcern": { "afterClusterTime": t } };
        assert_eq!(for_backend(&only).unwrap(), doc! { "find": "c" });
        let level =
            doc! { "find": "c", "readConcern": { "level": "majority", "afterClusterTime": t } };
        assert_eq!(
            for_backend(&level).unwrap(),
            doc! { "find": "c", "readConcern": { "level": "majority" } }
        );
        assert!(for_backend(&doc! { "find": "c" }).is_none());
        let snap = doc! { "find": "c", "readConcern": { "level": "snapshot", "atClusterTime": t } };
        assert_eq!(for_backend(&snap).unwrap(), doc! { "find": "c" });
        let in_txn =
            doc! { "find": "c", "readConcern": { "level": "snapshot" }, "autocommit": false };
        assert!(for_backend(&in_txn).is_none());
    }

    #[test]
    fn refuses_snapshot_reads_mongod_refuses() {
        let snap = |name: &str| doc! { name: "c", "readConcern": { "level": "snapshot" } };
        assert!(snapshot_refusal(false, "find", &snap("find")).is_none());
        assert!(snapshot_refusal(true, "find", &snap("find")).is_some());
        assert!(snapshot_refusal(false, "insert", &snap("insert")).is_some());
        assert!(snapshot_refusal(false, "insert", &doc! { "insert": "c" }).is_none());
    }

    #[test]
    fn snapshot_replies_carry_the_snapshot_time() {
        let now = Timestamp {
            time: 9,
            increment: 1,
        };
        let asked = Timestamp {
            time: 5,
            increment: 2,
        };
        let body =
            doc! { "find": "c", "readConcern": { "level": "snapshot", "atClusterTime": asked } };
        let mut reply = doc! { "cursor": { "id": 0_i64 }, "ok": 1 };
        stamp_snapshot(&body, &mut reply, now);
        assert_eq!(
            reply
                .get_document("cursor")
                .unwrap()
                .get_timestamp("atClusterTime")
                .unwrap(),
            asked
        );
        let mut distinct = doc! { "values": [], "ok": 1 };
        stamp_snapshot(&doc! { "distinct": "c" }, &mut distinct, now);
        assert_eq!(distinct.get_timestamp("atClusterTime").unwrap(), now);
    }
}
