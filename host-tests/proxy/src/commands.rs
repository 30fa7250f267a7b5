//! Command names: aliases, what the backend (nx-27017) implements, and which commands write.

use bson::{Bson, Document};

/// mongod registers a few commands under several names; failpoints match any of them.
pub fn canonical(name: &str) -> &str {
    match name {
        "isMaster" | "ismaster" => "hello",
        "buildinfo" => "buildInfo",
        "findandmodify" => "findAndModify",
        "dbstats" => "dbStats",
        "collstats" => "collStats",
        other => other,
    }
}

pub fn same_command(a: &str, b: &str) -> bool {
    canonical(a) == canonical(b)
}

pub fn is_hello(name: &str) -> bool {
    canonical(name) == "hello"
}

/// Commands nx-27017 implements (see TEST-SERVER.md): forwarded. Everything else the proxy
/// does not answer itself gets CommandNotFound, as mongod does, instead of nx-27017's `ok: 1`.
const FORWARDED: &[&str] = &[
    "ping",
    "insert",
    "update",
    "delete",
    "find",
    "findAndModify",
    "getMore",
    "killCursors",
    "aggregate",
    "distinct",
    "count",
    "create",
    "drop",
    "dropDatabase",
    "createIndexes",
    "dropIndexes",
    "listIndexes",
    "listCollections",
    "listDatabases",
    "renameCollection",
    "collMod",
    "endSessions",
    "commitTransaction",
    "abortTransaction",
    "explain",
    "serverStatus",
    "dbStats",
    "collStats",
    "validate",
    "compact",
    "reIndex",
];

/// `bulkWrite` exists from server 8.0 (wire version 25).
pub fn is_forwarded(name: &str, max_wire: i32) -> bool {
    let name = canonical(name);
    FORWARDED.contains(&name) || (name == "bulkWrite" && max_wire >= 25)
}

fn has_write_stage(body: &Document) -> bool {
    body.get_array("pipeline").is_ok_and(|stages| {
        stages.iter().any(|s| {
            s.as_document()
                .is_some_and(|s| s.contains_key("$out") || s.contains_key("$merge"))
        })
    })
}

/// Commands a secondary refuses with NotWritablePrimary.
pub fn is_write(name: &str, body: &Document) -> bool {
    match canonical(name) {
        "insert" | "update" | "delete" | "findAndModify" | "create" | "drop" | "dropDatabase"
        | "createIndexes" | "dropIndexes" | "renameCollection" | "collMod" | "bulkWrite"
        | "compact" | "reIndex" => true,
        "aggregate" => has_write_stage(body),
        _ => false,
    }
}

/// Reads a secondary serves only with secondaryOk (a non-primary `$readPreference`).
pub fn is_read(name: &str) -> bool {
    matches!(
        canonical(name),
        "find"
            | "aggregate"
            | "count"
            | "distinct"
            | "listCollections"
            | "listIndexes"
            | "listDatabases"
            | "dbStats"
            | "collStats"
            | "explain"
    )
}

/// Commands that take a write concern, so a `writeConcernError` failpoint applies to them.
pub fn supports_write_concern(name: &str, body: &Document) -> bool {
    is_write(name, body) || matches!(name, "commitTransaction" | "abortTransaction")
}

/// OP_MSG has no secondaryOk bit: mongod derives it from a `$readPreference` other than primary.
pub fn secondary_ok(body: &Document) -> bool {
    body.get_document("$readPreference")
        .ok()
        .and_then(|rp| rp.get_str("mode").ok())
        .is_some_and(|mode| mode != "primary")
}

/// A positive `maxTimeMS` (mongod treats 0 as "no limit"). `getMore`'s maxTimeMS is an await
/// time for tailable cursors, not a deadline, so it is ignored here.
pub fn max_time_ms(name: &str, body: &Document) -> Option<u64> {
    if name == "getMore" {
        return None;
    }
    let ms = match body.get("maxTimeMS")? {
        Bson::Int32(i) => *i as f64,
        Bson::Int64(i) => *i as f64,
        Bson::Double(d) => *d,
        _ => return None,
    };
    (ms >= 1.0).then_some(ms as u64)
}

/// A `find` that opens a tailable awaitData cursor.
pub fn is_await_data_find(name: &str, body: &Document) -> bool {
    name == "find"
        && body.get_bool("tailable").unwrap_or(false)
        && body.get_bool("awaitData").unwrap_or(false)
}

/// Atlas Search index management: the three commands (from 7.0, wire
/// version 21) and an aggregate starting with `$listSearchIndexes`.
pub fn is_search_index_command(name: &str, body: &Document) -> bool {
    match name {
        "createSearchIndexes" | "updateSearchIndex" | "dropSearchIndex" => true,
        "aggregate" => body.get_array("pipeline").is_ok_and(|stages| {
            stages
                .first()
                .and_then(Bson::as_document)
                .is_some_and(|s| s.contains_key("$listSearchIndexes"))
        }),
        _ => false,
    }
}

pub fn is_change_stream_aggregate(name: &str, body: &Document) -> bool {
    name == "aggregate"
        && body.get_array("pipeline").is_ok_and(|stages| {
            stages
                .first()
                .and_then(Bson::as_document)
                .is_some_and(|s| s.contains_key("$changeStream"))
        })
}
