//! Causal Consistency spec: a causally consistent session sends the
//! `operationTime` it last saw as `readConcern.afterClusterTime` on the
//! commands that take a read concern. Whether a session is causally
//! consistent is the session's (explicit: yes unless turned off; implicit: no);
//! which commands carry it, and how it merges with a read concern, is here.

use crate::error::Result;
use bson::{cstr, RawBsonRef, RawDocument, RawDocumentBuf, Timestamp};

/// The read commands that support a read concern (Read and Write Concern
/// spec) and the writes that accept `afterClusterTime` (Causal Consistency
/// spec). A user's runCommand never gets one (the executor asks the operation).
pub fn takes_after_cluster_time(command: &str) -> bool {
    matches!(
        command,
        "find"
            | "aggregate"
            | "count"
            | "distinct"
            | "mapReduce"
            | "insert"
            | "update"
            | "delete"
            | "findAndModify"
    )
}

/// The operation's read concern with `afterClusterTime: t` added (no `level`
/// when the operation had none).
pub fn merged(read_concern: Option<&RawDocument>, t: Timestamp) -> Result<RawDocumentBuf> {
    let mut out = match read_concern {
        Some(rc) => crate::concern::without(rc, "afterClusterTime")?,
        None => RawDocumentBuf::new(),
    };
    out.append(cstr!("afterClusterTime"), t);
    Ok(out)
}

/// Puts `afterClusterTime: t` into `body`'s read concern, adding one when the
/// command has none (the one case a default read concern is sent).
pub fn apply(body: &mut RawDocumentBuf, t: Timestamp) -> Result<()> {
    let rc = match body.get("readConcern")? {
        Some(RawBsonRef::Document(rc)) => merged(Some(rc), t)?,
        _ => merged(None, t)?,
    };
    crate::concern::set(body, crate::concern::READ, rc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    const T: Timestamp = Timestamp {
        time: 7,
        increment: 3,
    };

    #[test]
    fn adds_a_read_concern_without_level() {
        let mut body = rawdoc! { "find": "c", "filter": {} };
        apply(&mut body, T).unwrap();
        assert_eq!(
            body,
            rawdoc! { "find": "c", "filter": {}, "readConcern": { "afterClusterTime": T } }
        );
    }

    #[test]
    fn merges_with_the_operations_level_in_place() {
        let mut body = rawdoc! { "find": "c", "readConcern": { "level": "majority" }, "x": 1 };
        apply(&mut body, T).unwrap();
        assert_eq!(
            body,
            rawdoc! {
                "find": "c",
                "readConcern": { "level": "majority", "afterClusterTime": T },
                "x": 1
            }
        );
    }

    #[test]
    fn commands_that_take_it() {
        for c in [
            "find",
            "aggregate",
            "distinct",
            "count",
            "insert",
            "findAndModify",
        ] {
            assert!(takes_after_cluster_time(c), "{c}");
        }
        for c in [
            "getMore",
            "killCursors",
            "listCollections",
            "commitTransaction",
            "ping",
        ] {
            assert!(!takes_after_cluster_time(c), "{c}");
        }
    }
}
