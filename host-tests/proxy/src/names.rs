//! Collection names nx-27017 cannot store: it keeps each collection in an SQL table named
//! after it, so a name must be an SQL identifier (`[A-Za-z_][A-Za-z0-9_]*`, not a keyword):
//! `fs.files`, `coll-default` and `default` are refused, and dotted `*.files`/`*.chunks` go
//! to a fixed-schema GridFS emulation. The proxy stores such a collection under an encoded
//! name ([`encode`]) and decodes every reply the client sees ([`decode_reply`]: cursor `ns`,
//! listCollections names, index `ns`, error messages, change events' `ns`), so the client
//! sends and receives the real names.
//!
//! The encoding is reversible and never applied twice: [`PREFIX`], then each ASCII letter or
//! digit as itself and every other byte as `_` and two upper-case hex digits. Names that nx
//! accepts pass unchanged, except those starting with [`PREFIX`], which are encoded too.

use bson::{Bson, Document};

pub const PREFIX: &str = "nxname_";

/// SQLite's keywords: nx-27017 uses collection names unquoted in SQL.
const SQL_KEYWORDS: &[&str] = &[
    "abort",
    "action",
    "add",
    "after",
    "all",
    "alter",
    "always",
    "analyze",
    "and",
    "as",
    "asc",
    "attach",
    "autoincrement",
    "before",
    "begin",
    "between",
    "by",
    "cascade",
    "case",
    "cast",
    "check",
    "collate",
    "column",
    "commit",
    "conflict",
    "constraint",
    "create",
    "cross",
    "current",
    "current_date",
    "current_time",
    "current_timestamp",
    "database",
    "default",
    "deferrable",
    "deferred",
    "delete",
    "desc",
    "detach",
    "distinct",
    "do",
    "drop",
    "each",
    "else",
    "end",
    "escape",
    "except",
    "exclude",
    "exclusive",
    "exists",
    "explain",
    "fail",
    "filter",
    "first",
    "following",
    "for",
    "foreign",
    "from",
    "full",
    "generated",
    "glob",
    "group",
    "groups",
    "having",
    "if",
    "ignore",
    "immediate",
    "in",
    "index",
    "indexed",
    "initially",
    "inner",
    "insert",
    "instead",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "key",
    "last",
    "left",
    "like",
    "limit",
    "match",
    "materialized",
    "natural",
    "no",
    "not",
    "nothing",
    "notnull",
    "null",
    "nulls",
    "of",
    "offset",
    "on",
    "or",
    "order",
    "others",
    "outer",
    "over",
    "partition",
    "plan",
    "pragma",
    "preceding",
    "primary",
    "query",
    "raise",
    "range",
    "recursive",
    "references",
    "regexp",
    "reindex",
    "release",
    "rename",
    "replace",
    "restrict",
    "returning",
    "right",
    "rollback",
    "row",
    "rows",
    "savepoint",
    "select",
    "set",
    "table",
    "temp",
    "temporary",
    "then",
    "ties",
    "to",
    "transaction",
    "trigger",
    "unbounded",
    "union",
    "unique",
    "update",
    "using",
    "vacuum",
    "values",
    "view",
    "virtual",
    "when",
    "where",
    "window",
    "with",
    "without",
];

/// Whether nx-27017 takes `name` as a collection name: an SQL identifier, not a keyword.
fn nx_accepts(name: &str) -> bool {
    let mut chars = name.chars();
    let identifier = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    identifier && !SQL_KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(name))
}

/// Names nx-27017 refuses, and those that would read as encoded ones.
fn needs_encoding(name: &str) -> bool {
    !nx_accepts(name) || name.starts_with(PREFIX)
}

/// The name nx-27017 stores collection `name` under.
pub fn encode(name: &str) -> String {
    if !needs_encoding(name) {
        return name.to_string();
    }
    let mut out = String::with_capacity(PREFIX.len() + name.len() * 2);
    out.push_str(PREFIX);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02X}"));
        }
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes the encoded name at the start of `s` (just after [`PREFIX`]): the name and how
/// many bytes of `s` it took. It ends at the first byte that is not part of the encoding
/// (nx-27017 appends `_<field>` to index names).
fn decode_at(s: &[u8]) -> Option<(String, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            c if c.is_ascii_alphanumeric() => {
                out.push(c);
                i += 1;
            }
            b'_' => match (
                s.get(i + 1).and_then(|&c| hex(c)),
                s.get(i + 2).and_then(|&c| hex(c)),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                }
                _ => break,
            },
            _ => break,
        }
    }
    let name = String::from_utf8(out).ok()?;
    (!name.is_empty()).then_some((name, i))
}

/// `text` with every encoded name in it decoded (None: nothing to decode).
pub fn decode_text(text: &str) -> Option<String> {
    if !text.contains(PREFIX) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + PREFIX.len()..];
        match decode_at(after.as_bytes()) {
            Some((name, used)) => {
                out.push_str(&name);
                rest = &after[used..];
            }
            None => {
                out.push_str(PREFIX);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Some(out)
}

/// `db.coll` with the collection part encoded.
fn encode_namespace(ns: &str) -> String {
    match ns.split_once('.') {
        Some((db, coll)) => format!("{db}.{}", encode(coll)),
        None => ns.to_string(),
    }
}

/// Commands whose first value is a collection name.
const COLLECTION_COMMANDS: &[&str] = &[
    "find",
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
    "aggregate",
    "count",
    "distinct",
    "create",
    "drop",
    "createIndexes",
    "dropIndexes",
    "deleteIndexes",
    "listIndexes",
    "collMod",
    "collStats",
    "collstats",
    "validate",
    "compact",
    "reIndex",
    "killCursors",
    "mapReduce",
    "listSearchIndexes",
    "createSearchIndexes",
    "dropSearchIndex",
    "updateSearchIndex",
];

fn set_str(doc: &mut Document, key: &str, f: impl Fn(&str) -> String) -> bool {
    let Ok(old) = doc.get_str(key) else {
        return false;
    };
    let new = f(old);
    if new == old {
        return false;
    }
    doc.insert(key, new);
    true
}

/// `{db, coll}` (or a bare collection name) as `$out` and `$merge.into` take it.
fn encode_target(value: &mut Bson) -> bool {
    match value {
        Bson::String(s) => {
            let new = encode(s);
            let changed = new != *s;
            *s = new;
            changed
        }
        Bson::Document(d) => set_str(d, "coll", encode),
        _ => false,
    }
}

/// Collection names inside an aggregation pipeline (`$lookup`, `$graphLookup`,
/// `$unionWith`, `$out`, `$merge`, and the pipelines nested in `$lookup`, `$unionWith`,
/// `$facet`).
fn encode_pipeline(stages: &mut [Bson]) -> bool {
    let mut changed = false;
    for stage in stages {
        let Bson::Document(stage) = stage else {
            continue;
        };
        for (op, spec) in stage.iter_mut() {
            changed |= match (op.as_str(), spec) {
                ("$lookup" | "$graphLookup", Bson::Document(d)) => {
                    let from = set_str(d, "from", encode);
                    let nested = match d.get_mut("pipeline") {
                        Some(Bson::Array(p)) => encode_pipeline(p),
                        _ => false,
                    };
                    from | nested
                }
                ("$unionWith", Bson::Document(d)) => {
                    let coll = set_str(d, "coll", encode);
                    let nested = match d.get_mut("pipeline") {
                        Some(Bson::Array(p)) => encode_pipeline(p),
                        _ => false,
                    };
                    coll | nested
                }
                ("$unionWith" | "$out", v) => encode_target(v),
                ("$merge", Bson::Document(d)) => d.get_mut("into").is_some_and(encode_target),
                ("$merge", v) => encode_target(v),
                ("$facet", Bson::Document(d)) => {
                    let mut any = false;
                    for (_, p) in d.iter_mut() {
                        if let Bson::Array(p) = p {
                            any |= encode_pipeline(p);
                        }
                    }
                    any
                }
                _ => false,
            };
        }
    }
    changed
}

/// The command as nx-27017 must get it (None: unchanged). `name` is its first key.
pub fn encode_command(name: &str, body: &Document) -> Option<Document> {
    let mut out = body.clone();
    let mut changed = false;
    if COLLECTION_COMMANDS.contains(&name) {
        changed |= set_str(&mut out, name, encode);
    }
    match name {
        "getMore" => changed |= set_str(&mut out, "collection", encode),
        "create" => changed |= set_str(&mut out, "viewOn", encode),
        "renameCollection" => {
            changed |= set_str(&mut out, "renameCollection", encode_namespace);
            changed |= set_str(&mut out, "to", encode_namespace);
        }
        "explain" => {
            if let Ok(inner) = body.get_document("explain") {
                let inner_name = inner.keys().next().map(String::as_str).unwrap_or("");
                if let Some(new) = encode_command(inner_name, inner) {
                    out.insert("explain", new);
                    changed = true;
                }
            }
        }
        "listCollections" => {
            if let Ok(filter) = out.get_document_mut("filter") {
                changed |= set_str(filter, "name", encode);
            }
        }
        "bulkWrite" => {
            if let Ok(ns_info) = out.get_array_mut("nsInfo") {
                for entry in ns_info.iter_mut() {
                    if let Bson::Document(d) = entry {
                        changed |= set_str(d, "ns", encode_namespace);
                    }
                }
            }
        }
        _ => {}
    }
    if let Ok(pipeline) = out.get_array_mut("pipeline") {
        changed |= encode_pipeline(pipeline);
    }
    changed.then_some(out)
}

/// A document of a kind-1 section (`nsInfo` of bulkWrite) as nx-27017 must get it.
pub fn encode_sequence_doc(identifier: &str, doc: &Document) -> Option<Document> {
    if identifier != "nsInfo" {
        return None;
    }
    let mut out = doc.clone();
    set_str(&mut out, "ns", encode_namespace).then_some(out)
}

/// An OP_MSG request (already validated by `frame::parse_op_msg`) re-encoded with the names
/// nx-27017 must get (and the filters of `objectid_filter`), or None when nothing changes. A checksum is dropped rather than
/// recomputed (it is optional).
pub fn encode_message(bytes: &[u8], name: &str, body: &Document) -> Option<Vec<u8>> {
    use crate::frame::{FLAG_CHECKSUM, HEADER_LEN};
    let le = |at: usize| -> Option<usize> {
        let b = bytes.get(at..at + 4)?;
        usize::try_from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok()
    };
    let mut new_body = encode_command(name, body);
    if let Some(b) = crate::objectid_filter::rewrite(name, new_body.as_ref().unwrap_or(body)) {
        new_body = Some(b);
    }
    let sequences = matches!(name, "bulkWrite" | "update" | "delete");
    if new_body.is_none() && !sequences {
        return None;
    }
    let flags = u32::from_le_bytes(bytes.get(HEADER_LEN..HEADER_LEN + 4)?.try_into().ok()?);
    let end = bytes.len() - if flags & FLAG_CHECKSUM != 0 { 4 } else { 0 };
    let mut out = bytes[..HEADER_LEN].to_vec();
    out.extend_from_slice(&(flags & !FLAG_CHECKSUM).to_le_bytes());
    let mut changed = new_body.is_some();
    let mut at = HEADER_LEN + 4;
    while at < end {
        let kind = bytes[at];
        let len = le(at + 1)?;
        let section = bytes.get(at + 1..at + 1 + len)?;
        out.push(kind);
        match (kind, &new_body) {
            (0, Some(doc)) => out.extend_from_slice(&doc.to_vec().ok()?),
            (1, _) => {
                let nul = section[4..].iter().position(|&c| c == 0)?;
                let identifier = std::str::from_utf8(&section[4..4 + nul]).ok()?;
                let mut docs = Vec::new();
                let mut p = 4 + nul + 1;
                while p < section.len() {
                    let doc_len = usize::try_from(i32::from_le_bytes(
                        section.get(p..p + 4)?.try_into().ok()?,
                    ))
                    .ok()?;
                    let raw = section.get(p..p + doc_len)?;
                    match Document::from_reader(raw).ok().and_then(|d| {
                        encode_sequence_doc(identifier, &d)
                            .or_else(|| crate::objectid_filter::rewrite_statement(identifier, &d))
                    }) {
                        Some(d) => {
                            docs.extend_from_slice(&d.to_vec().ok()?);
                            changed = true;
                        }
                        None => docs.extend_from_slice(raw),
                    }
                    p += doc_len;
                }
                let size = 4 + nul + 1 + docs.len();
                out.extend_from_slice(&i32::try_from(size).ok()?.to_le_bytes());
                out.extend_from_slice(&section[4..4 + nul + 1]);
                out.extend_from_slice(&docs);
            }
            _ => out.extend_from_slice(section),
        }
        at += 1 + len;
    }
    if !changed {
        return None;
    }
    let total = i32::try_from(out.len()).ok()?;
    out[..4].copy_from_slice(&total.to_le_bytes());
    Some(out)
}

/// Resume tokens are opaque to the client and go back to nx-27017 as they came.
fn is_resume_token(key: &str, value: &Bson) -> bool {
    key == "postBatchResumeToken"
        || key == "resumeToken"
        || (key == "_id" && matches!(value, Bson::Document(d) if d.contains_key("_data")))
}

fn decode_value(value: &mut Bson) -> bool {
    match value {
        Bson::String(s) => match decode_text(s) {
            Some(new) => {
                *s = new;
                true
            }
            None => false,
        },
        Bson::Document(d) => decode_doc(d),
        Bson::Array(a) => a.iter_mut().fold(false, |c, v| decode_value(v) | c),
        _ => false,
    }
}

fn decode_doc(doc: &mut Document) -> bool {
    let mut changed = false;
    for (key, value) in doc.iter_mut() {
        if !is_resume_token(key, value) {
            changed |= decode_value(value);
        }
    }
    changed
}

/// A backend reply as the client must see it (None: unchanged).
pub fn decode_reply(reply: &Document) -> Option<Document> {
    // Most replies carry no encoded name: look before copying.
    fn mentions(v: &Bson) -> bool {
        match v {
            Bson::String(s) => s.contains(PREFIX),
            Bson::Document(d) => d.values().any(mentions),
            Bson::Array(a) => a.iter().any(mentions),
            _ => false,
        }
    }
    if !reply.values().any(mentions) {
        return None;
    }
    let mut out = reply.clone();
    decode_doc(&mut out).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn names_nx_accepts_pass_unchanged() {
        for name in ["coll", "test", "_x", "a_b1", "fs_files"] {
            assert_eq!(encode(name), name);
            assert_eq!(decode_text(name), None);
        }
    }

    #[test]
    fn rejected_names_round_trip() {
        for name in [
            "fs.files",
            "fs.chunks",
            "coll-default",
            "default",
            "Order",
            "1abc",
            "a_b.c",
            "nxname_x",
            "é-ü",
            "system.views",
        ] {
            let stored = encode(name);
            assert!(nx_accepts(&stored), "{name} -> {stored}");
            assert!(stored.starts_with(PREFIX), "{stored}");
            assert_eq!(decode_text(&stored).as_deref(), Some(name), "{stored}");
        }
        assert_eq!(encode("fs.files"), "nxname_fs_2Efiles");
        // Not a GridFS name to nx-27017 (which looks for `_files`/`_chunks` endings).
        assert!(!encode("fs.chunks").ends_with("_chunks"));
        assert!(!encode("a_chunks.x").contains("_chunks"));
    }

    #[test]
    fn names_inside_text_are_decoded() {
        let text = "no such table: nxname_fs_2Echunks; ns db.nxname_coll_2Ddefault.";
        assert_eq!(
            decode_text(text).unwrap(),
            "no such table: fs.chunks; ns db.coll-default."
        );
        // nx-27017's index names: idx_<collection>_<field>.
        assert_eq!(
            decode_text("idx_nxname_fs_2Echunks_files_id").unwrap(),
            "idx_fs.chunks_files_id"
        );
        assert_eq!(decode_text("nxname_").unwrap(), "nxname_");
    }

    #[test]
    fn commands_get_encoded_names() {
        let find = doc! { "find": "fs.files", "filter": { "x": "fs.files" }, "$db": "d" };
        let out = encode_command("find", &find).unwrap();
        assert_eq!(out.get_str("find").unwrap(), "nxname_fs_2Efiles");
        // Data is not a name.
        assert_eq!(
            out.get_document("filter").unwrap().get_str("x").unwrap(),
            "fs.files"
        );
        assert!(encode_command("find", &doc! { "find": "coll" }).is_none());
        assert!(encode_command("ping", &doc! { "ping": 1 }).is_none());

        let more = doc! { "getMore": 5i64, "collection": "coll-x" };
        let out = encode_command("getMore", &more).unwrap();
        assert_eq!(out.get_str("collection").unwrap(), "nxname_coll_2Dx");

        let rename = doc! { "renameCollection": "d.a-b", "to": "d.c", "dropTarget": true };
        let out = encode_command("renameCollection", &rename).unwrap();
        assert_eq!(out.get_str("renameCollection").unwrap(), "d.nxname_a_2Db");
        assert_eq!(out.get_str("to").unwrap(), "d.c");

        let agg = doc! { "aggregate": "c", "pipeline": [
            { "$lookup": { "from": "x-y", "as": "z", "pipeline": [{ "$unionWith": "u.v" }] } },
            { "$merge": { "into": { "db": "d", "coll": "m-n" } } },
        ] };
        let out = encode_command("aggregate", &agg).unwrap();
        let stages = out.get_array("pipeline").unwrap();
        let lookup = stages[0]
            .as_document()
            .unwrap()
            .get_document("$lookup")
            .unwrap();
        assert_eq!(lookup.get_str("from").unwrap(), "nxname_x_2Dy");
        let nested = lookup.get_array("pipeline").unwrap()[0]
            .as_document()
            .unwrap();
        assert_eq!(nested.get_str("$unionWith").unwrap(), "nxname_u_2Ev");
        let merge = stages[1]
            .as_document()
            .unwrap()
            .get_document("$merge")
            .unwrap();
        assert_eq!(
            merge.get_document("into").unwrap().get_str("coll").unwrap(),
            "nxname_m_2Dn"
        );

        let explain = doc! { "explain": { "count": "default" }, "verbosity": "queryPlanner" };
        let out = encode_command("explain", &explain).unwrap();
        assert_eq!(
            out.get_document("explain")
                .unwrap()
                .get_str("count")
                .unwrap(),
            "nxname_default"
        );

        let bulk = doc! { "bulkWrite": 1, "nsInfo": [{ "ns": "d.fs.files" }] };
        let out = encode_command("bulkWrite", &bulk).unwrap();
        assert_eq!(
            out.get_array("nsInfo").unwrap()[0]
                .as_document()
                .unwrap()
                .get_str("ns")
                .unwrap(),
            "d.nxname_fs_2Efiles"
        );
        let seq = encode_sequence_doc("nsInfo", &doc! { "ns": "d.a-b" }).unwrap();
        assert_eq!(seq.get_str("ns").unwrap(), "d.nxname_a_2Db");
        assert!(encode_sequence_doc("documents", &doc! { "ns": "d.a-b" }).is_none());
    }

    #[test]
    fn replies_show_the_real_names() {
        let reply = doc! {
            "cursor": {
                "id": 0i64,
                "ns": "db.nxname_fs_2Efiles",
                "firstBatch": [
                    { "name": "nxname_coll_2Ddefault", "type": "collection" },
                    { "_id": { "_data": "nxname_keep" }, "ns": { "db": "db", "coll": "nxname_fs_2Echunks" } },
                ],
                "postBatchResumeToken": { "_data": "nxname_keep" },
            },
            "ok": 1.0,
        };
        let out = decode_reply(&reply).unwrap();
        let cursor = out.get_document("cursor").unwrap();
        assert_eq!(cursor.get_str("ns").unwrap(), "db.fs.files");
        let batch = cursor.get_array("firstBatch").unwrap();
        let first = batch[0].as_document().unwrap();
        assert_eq!(first.get_str("name").unwrap(), "coll-default");
        let event = batch[1].as_document().unwrap();
        assert_eq!(
            event.get_document("ns").unwrap().get_str("coll").unwrap(),
            "fs.chunks"
        );
        assert_eq!(
            event.get_document("_id").unwrap().get_str("_data").unwrap(),
            "nxname_keep"
        );
        let token = cursor.get_document("postBatchResumeToken").unwrap();
        assert_eq!(token.get_str("_data").unwrap(), "nxname_keep");

        let err = doc! { "ok": 0.0, "errmsg": "no such table: nxname_fs_2Echunks", "code": 26 };
        assert_eq!(
            decode_reply(&err).unwrap().get_str("errmsg").unwrap(),
            "no such table: fs.chunks"
        );
        assert!(decode_reply(&doc! { "ok": 1.0, "n": 1 }).is_none());
    }

    fn op_msg_with_sequence(
        body: &Document,
        id: &str,
        docs: &[Document],
        checksum: bool,
    ) -> Vec<u8> {
        let mut out = vec![0u8; 4];
        out.extend_from_slice(&7i32.to_le_bytes());
        out.extend_from_slice(&0i32.to_le_bytes());
        out.extend_from_slice(&crate::frame::OP_MSG.to_le_bytes());
        let flags = if checksum {
            crate::frame::FLAG_CHECKSUM
        } else {
            0
        };
        out.extend_from_slice(&flags.to_le_bytes());
        out.push(0);
        out.extend_from_slice(&body.to_vec().unwrap());
        out.push(1);
        let mut seq = Vec::new();
        for d in docs {
            seq.extend_from_slice(&d.to_vec().unwrap());
        }
        let size = 4 + id.len() + 1 + seq.len();
        out.extend_from_slice(&(size as i32).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
        out.push(0);
        out.extend_from_slice(&seq);
        let len = out.len() as i32 + if checksum { 4 } else { 0 };
        out[..4].copy_from_slice(&len.to_le_bytes());
        if checksum {
            let crc = crate::frame::crc32c(&out);
            out.extend_from_slice(&crc.to_le_bytes());
        }
        out
    }

    fn reparse(bytes: Vec<u8>) -> crate::frame::OpMsg {
        let msg = crate::frame::Message {
            request_id: 7,
            response_to: 0,
            op_code: crate::frame::OP_MSG,
            bytes,
        };
        crate::frame::parse_op_msg(&msg).unwrap()
    }

    #[test]
    fn messages_are_re_encoded_with_their_sequences() {
        let body = doc! { "insert": "fs.chunks", "$db": "d" };
        let docs = [doc! { "_id": 1, "ns": "d.a-b" }, doc! { "_id": 2 }];
        let bytes = op_msg_with_sequence(&body, "documents", &docs, true);
        let out = encode_message(&bytes, "insert", &body).unwrap();
        assert_eq!(&out[4..16], &bytes[4..16], "ids and opcode kept");
        let parsed = reparse(out.clone());
        assert_eq!(parsed.flags, 0, "checksum dropped");
        assert_eq!(parsed.body.get_str("insert").unwrap(), "nxname_fs_2Echunks");
        // The documents are data: the sequence is copied as it was.
        let data = docs[0].to_vec().unwrap();
        assert!(out.windows(data.len()).any(|w| w == data.as_slice()));
        assert!(encode_message(&bytes, "insert", &doc! { "insert": "c" }).is_none());

        let bulk = doc! { "bulkWrite": 1, "$db": "admin" };
        let ns_info = [doc! { "ns": "d.fs.files" }, doc! { "ns": "d.c" }];
        let bytes = op_msg_with_sequence(&bulk, "nsInfo", &ns_info, false);
        let out = encode_message(&bytes, "bulkWrite", &bulk).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("d.nxname_fs_2Efiles") && !text.contains("d.fs.files"));
        reparse(out);
        let plain = op_msg_with_sequence(&bulk, "nsInfo", &ns_info[1..], false);
        assert!(encode_message(&plain, "bulkWrite", &bulk).is_none());
    }
}
