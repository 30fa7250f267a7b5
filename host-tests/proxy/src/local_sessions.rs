//! mongod's logical session cache and the `$listLocalSessions` stage, which nx-27017 lacks
//! (it runs no database-level aggregate: `nx-gaps.py`: database-aggregate).
//!
//! Each mongod (here: each member, as for fail points) remembers the sessions its commands
//! named (`LogicalSessionCache::vivify`): the lsid's `id`, the `uid` (SHA-256 of the
//! authenticated `user@db`, or of nothing without auth) and the time of last use.
//! `{aggregate: 1, pipeline: [{$listLocalSessions: <spec>}, <rest>...]}` answers those
//! records (`{_id: {id, uid}, lastUse, user?: {name}}`) as its first stage would: the proxy
//! stores them in a collection of its own on nx-27017 ([`DB`]), runs `<rest>` there, and
//! answers with mongod's cursor namespace `<db>.$cmd.aggregate`; the cursor's getMore and
//! killCursors are mapped to that collection ([`Cursors`]).

use std::collections::HashMap;

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, DateTime, Document};
use sha2::{Digest, Sha256};

use crate::codes::{self, error_doc};

/// The database on nx-27017 holding the materialized session records.
pub const DB: &str = "proxy_local_sessions";
/// The collection part of a database-level aggregate's cursor namespace.
pub const CMD_AGGREGATE: &str = "$cmd.aggregate";
/// A bound on what the cache remembers (a test run names far fewer sessions).
const MAX_SESSIONS: usize = 100_000;
const MAX_CURSORS: usize = 10_000;
const STAGE: &str = "$listLocalSessions";

/// mongod's `getLogicalSessionUserDigestFor`: SHA-256 of `user@db`, of nothing without a user.
pub fn uid(user: Option<(&str, &str)>) -> Vec<u8> {
    let mut h = Sha256::new();
    if let Some((name, db)) = user {
        h.update(name.as_bytes());
        h.update(b"@");
        h.update(db.as_bytes());
    }
    h.finalize().to_vec()
}

struct Record {
    last_use: DateTime,
    /// Orders uses within one millisecond: the newest use is listed first.
    seq: u64,
    user: Option<String>,
}

/// One mongod's sessions, keyed by `(id, uid)`.
#[derive(Default)]
pub struct SessionCache {
    records: HashMap<(Vec<u8>, Vec<u8>), Record>,
    uses: u64,
}

impl SessionCache {
    /// Remembers the session a command names (its `lsid`), used now by `user`.
    pub fn vivify(&mut self, body: &Document, user: Option<(&str, &str)>, now: DateTime) {
        let Ok(lsid) = body.get_document("lsid") else {
            return;
        };
        let Some(Bson::Binary(id)) = lsid.get("id") else {
            return;
        };
        if self.records.len() >= MAX_SESSIONS {
            self.records.clear();
        }
        self.uses += 1;
        let record = Record {
            last_use: now,
            seq: self.uses,
            user: user.map(|(name, db)| format!("{name}@{db}")),
        };
        self.records.insert((id.bytes.clone(), uid(user)), record);
    }

    /// The records the stage lists, as mongod's `LogicalSessionRecord` documents.
    fn list(&self, users: &Option<Vec<Vec<u8>>>) -> Vec<Document> {
        let mut listed: Vec<_> = self
            .records
            .iter()
            .filter(|((_, uid), _)| users.as_ref().is_none_or(|u| u.contains(uid)))
            .collect();
        listed.sort_by_key(|(_, r)| std::cmp::Reverse((r.last_use, r.seq)));
        listed
            .into_iter()
            .map(|((id, uid), record)| {
                let mut d = doc! {
                    "_id": {
                        "id": Binary { subtype: BinarySubtype::Uuid, bytes: id.clone() },
                        "uid": Binary { subtype: BinarySubtype::Generic, bytes: uid.clone() },
                    },
                    "lastUse": record.last_use,
                };
                if let Some(name) = &record.user {
                    d.insert("user", doc! { "name": name.as_str() });
                }
                d
            })
            .collect()
    }
}

/// A database-level aggregate whose first stage is `$listLocalSessions`.
pub struct Plan {
    /// The records to materialize.
    pub records: Vec<Document>,
    /// The pipeline after the stage.
    pub rest: Vec<Bson>,
}

fn is_database_aggregate(name: &str, body: &Document) -> bool {
    let one = match body.get("aggregate") {
        Some(Bson::Int32(1) | Bson::Int64(1)) => true,
        Some(Bson::Double(d)) => *d == 1.0,
        _ => false,
    };
    name == "aggregate" && one
}

/// Whether `body` is a database-level aggregate starting with `$listLocalSessions`.
pub fn applies(name: &str, body: &Document) -> bool {
    is_database_aggregate(name, body)
        && body
            .get_array("pipeline")
            .ok()
            .and_then(|p| p.first())
            .and_then(Bson::as_document)
            .is_some_and(|s| s.contains_key(STAGE))
}

/// The stage's spec (`listSessionsParseSpec`): `{}` lists the caller's own sessions,
/// `{allUsers: true}` everyone's, `{users: [{user, db}, ...]}` those users'.
pub fn plan(
    cache: &SessionCache,
    body: &Document,
    caller: Option<(&str, &str)>,
) -> Result<Plan, Document> {
    // mongod checks each stage against the declared API version when it parses the
    // pipeline (`assertPermittedInAPIVersion`); this one is outside version 1.
    if matches!(body.get("apiStrict"), Some(Bson::Boolean(true))) {
        let version = body.get_str("apiVersion").unwrap_or("1");
        let msg = format!("{STAGE} is not allowed with 'apiStrict: true' in API Version {version}");
        return Err(error_doc(codes::API_STRICT_ERROR, &msg));
    }
    let pipeline = body.get_array("pipeline").cloned().unwrap_or_default();
    let spec = match pipeline
        .first()
        .and_then(Bson::as_document)
        .and_then(|s| s.get(STAGE))
    {
        Some(Bson::Document(spec)) => spec.clone(),
        _ => {
            let msg = format!("{STAGE} options must be specified in an object, but found: ");
            return Err(error_doc(codes::TYPE_MISMATCH, &msg));
        }
    };
    let later = |s: &Bson| s.as_document().is_some_and(|s| s.contains_key(STAGE));
    if pipeline.iter().skip(1).any(later) {
        let msg = format!("{STAGE} can only be the first stage in the pipeline");
        return Err(error_doc(codes::LOCATION_40602, &msg));
    }
    let mut all_users = false;
    let mut users = None;
    for (key, value) in &spec {
        match (key.as_str(), value) {
            ("allUsers", Bson::Boolean(b)) => all_users = *b,
            ("users", Bson::Array(list)) => {
                let mut digests = Vec::new();
                for u in list {
                    let u = u.as_document();
                    match u.and_then(|u| Some((u.get_str("user").ok()?, u.get_str("db").ok()?))) {
                        Some(pair) => digests.push(uid(Some(pair))),
                        None => {
                            let msg = format!("{STAGE}.users must be {{user, db}} documents");
                            return Err(error_doc(codes::TYPE_MISMATCH, &msg));
                        }
                    }
                }
                users = Some(digests);
            }
            ("allUsers" | "users", _) => {
                let msg = format!("BSON field '{STAGE}.{key}' is the wrong type");
                return Err(error_doc(codes::TYPE_MISMATCH, &msg));
            }
            _ => {
                let msg = format!("BSON field '{STAGE}.{key}' is an unknown field.");
                return Err(error_doc(codes::IDL_UNKNOWN_FIELD, &msg));
            }
        }
    }
    if all_users && users.is_some() {
        let msg = "Can not specify both 'allUsers' and 'users'";
        return Err(error_doc(codes::BAD_VALUE, msg));
    }
    let filter = match all_users {
        true => None,
        false => Some(users.unwrap_or_else(|| vec![uid(caller)])),
    };
    let rest: Vec<Bson> = pipeline.into_iter().skip(1).collect();
    let mut records = cache.list(&filter);
    // The stage's order is unspecified, so a `$limit` right after it may as well take the
    // most recent records: only those are stored (a run's cache holds thousands, and
    // storing them all would cost each listing far more than mongod's does).
    if let Some(n) = rest.first().and_then(limit) {
        records.truncate(n);
    }
    Ok(Plan { records, rest })
}

/// A `$merge` or `$out` stage writing to the client's database `db`, where mongod writes
/// it, rather than to [`DB`], where the pipeline runs here.
fn into_client_db(stage: Bson, db: &str) -> Bson {
    let Bson::Document(mut stage) = stage else {
        return stage;
    };
    let target = |into: &Bson| match into {
        Bson::String(coll) => Some(doc! { "db": db, "coll": coll.as_str() }),
        Bson::Document(d) if !d.contains_key("db") => {
            let mut d = d.clone();
            d.insert("db", db);
            Some(d)
        }
        _ => None,
    };
    if let Some(out) = stage.get("$out").and_then(target) {
        stage.insert("$out", out);
    }
    let merge = match stage.get("$merge") {
        Some(Bson::String(_)) => Some(doc! { "into": stage.get("$merge").cloned() }),
        Some(Bson::Document(m)) => Some(m.clone()),
        _ => None,
    };
    if let Some(mut merge) = merge {
        if let Some(into) = merge.get("into").and_then(target) {
            merge.insert("into", into);
        }
        stage.insert("$merge", merge);
    }
    Bson::Document(stage)
}

/// `{$limit: n}`'s n.
fn limit(stage: &Bson) -> Option<usize> {
    let n = match stage.as_document()?.get("$limit")? {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(d) if d.fract() == 0.0 => *d as i64,
        _ => return None,
    };
    usize::try_from(n).ok()
}

/// The aggregate nx-27017 runs over `collection` in [`DB`] for a client of database `db`:
/// the rest of the pipeline and the options that shape its cursor; nothing of the session
/// or the deployment.
pub fn backend_aggregate(body: &Document, db: &str, collection: &str, rest: Vec<Bson>) -> Document {
    let rest: Vec<Bson> = rest.into_iter().map(|s| into_client_db(s, db)).collect();
    let mut cmd = doc! { "aggregate": collection, "pipeline": rest };
    for key in [
        "cursor",
        "allowDiskUse",
        "maxTimeMS",
        "comment",
        "let",
        "hint",
    ] {
        if let Some(v) = body.get(key) {
            cmd.insert(key, v.clone());
        }
    }
    if !cmd.contains_key("cursor") {
        cmd.insert("cursor", Document::new());
    }
    cmd.insert("$db", DB);
    cmd
}

/// The backend's cursor reply as mongod gives it: namespace `<db>.$cmd.aggregate`.
pub fn client_reply(mut reply: Document, db: &str) -> Document {
    if let Ok(cursor) = reply.get_document_mut("cursor") {
        if cursor.contains_key("ns") {
            cursor.insert("ns", format!("{db}.{CMD_AGGREGATE}"));
        }
    }
    reply
}

/// Open cursors over materialized records: cursor id -> (backend collection, client db).
#[derive(Default)]
pub struct Cursors {
    open: HashMap<i64, (String, String)>,
}

impl Cursors {
    pub fn open(&mut self, id: i64, collection: &str, db: &str) {
        if self.open.len() >= MAX_CURSORS {
            self.open.clear();
        }
        self.open
            .insert(id, (collection.to_string(), db.to_string()));
    }

    /// The backend collection of `id` when the client names it as `<db>.$cmd.aggregate`.
    pub fn get(&self, id: i64, db: &str) -> Option<String> {
        self.open
            .get(&id)
            .filter(|(_, d)| d == db)
            .map(|(c, _)| c.clone())
    }

    pub fn close(&mut self, id: i64) -> Option<String> {
        self.open.remove(&id).map(|(c, _)| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lsid(byte: u8) -> Document {
        let id = Binary {
            subtype: BinarySubtype::Uuid,
            bytes: vec![byte; 16],
        };
        doc! { "find": "c", "lsid": { "id": id }, "$db": "test" }
    }

    fn ids(plan: &Plan) -> Vec<u8> {
        plan.records
            .iter()
            .map(|r| match r.get_document("_id").unwrap().get("id") {
                Some(Bson::Binary(b)) => b.bytes[0],
                _ => panic!("no id in {r}"),
            })
            .collect()
    }

    fn agg(spec: Document) -> Document {
        doc! { "aggregate": 1, "pipeline": [{ "$listLocalSessions": spec }, { "$skip": 0 }],
        "cursor": {}, "lsid": { "id": 1 }, "$db": "admin" }
    }

    #[test]
    fn uid_is_sha256_of_user_at_db() {
        // SHA-256 of the empty string: mongod's kNoAuthDigest.
        assert_eq!(
            uid(None)[..4],
            [0xe3, 0xb0, 0xc4, 0x42],
            "digest of nothing"
        );
        assert_eq!(uid(Some(("a", "b"))), Sha256::digest(b"a@b").to_vec());
    }

    #[test]
    fn lists_the_callers_sessions_unless_told_otherwise() {
        let mut cache = SessionCache::default();
        cache.vivify(&lsid(1), None, DateTime::from_millis(1));
        cache.vivify(&lsid(2), Some(("root", "admin")), DateTime::from_millis(2));
        cache.vivify(&lsid(3), None, DateTime::from_millis(3));
        cache.vivify(&doc! { "ping": 1 }, None, DateTime::from_millis(4));
        // Used again: one record, a later lastUse.
        cache.vivify(&lsid(1), None, DateTime::from_millis(5));

        let mine = plan(&cache, &agg(doc! {}), None).unwrap();
        assert_eq!(ids(&mine), [1, 3]);
        assert_eq!(mine.rest, vec![Bson::from(doc! { "$skip": 0 })]);
        let first = &mine.records[0];
        assert_eq!(first.get_datetime("lastUse").unwrap().timestamp_millis(), 5);
        assert!(!first.contains_key("user"));
        match first.get_document("_id").unwrap().get("uid") {
            Some(Bson::Binary(b)) => assert_eq!(b.bytes, uid(None)),
            other => panic!("uid {other:?}"),
        }

        let root = plan(&cache, &agg(doc! {}), Some(("root", "admin"))).unwrap();
        assert_eq!(ids(&root), [2]);
        assert_eq!(
            root.records[0].get_document("user").unwrap(),
            &doc! { "name": "root@admin" }
        );
        // A $limit right after the stage: the most recent records only.
        let limited = doc! { "aggregate": 1, "pipeline": [{ "$listLocalSessions": {} },
        { "$limit": 1 }, { "$limit": 5 }] };
        assert_eq!(ids(&plan(&cache, &limited, None).unwrap()), [1]);
        let unlimited = doc! { "aggregate": 1, "pipeline": [{ "$listLocalSessions": {} },
        { "$skip": 0 }, { "$limit": 1 }] };
        assert_eq!(ids(&plan(&cache, &unlimited, None).unwrap()), [1, 3]);
        let all = plan(&cache, &agg(doc! { "allUsers": true }), None).unwrap();
        assert_eq!(ids(&all), [1, 3, 2]);
        let named = doc! { "users": [{ "user": "root", "db": "admin" }] };
        assert_eq!(ids(&plan(&cache, &agg(named), None).unwrap()), [2]);
    }

    #[test]
    fn uses_within_one_millisecond_list_the_newest_first() {
        let mut cache = SessionCache::default();
        let now = DateTime::from_millis(7);
        for n in [4, 9, 2, 6] {
            cache.vivify(&lsid(n), None, now);
        }
        let limited = doc! { "aggregate": 1, "pipeline": [{ "$listLocalSessions": {} },
        { "$limit": 1 }] };
        assert_eq!(ids(&plan(&cache, &limited, None).unwrap()), [6]);
        assert_eq!(
            ids(&plan(&cache, &agg(doc! {}), None).unwrap()),
            [6, 2, 9, 4]
        );
    }

    #[test]
    fn refuses_what_mongod_refuses() {
        let cache = SessionCache::default();
        let code = |body: &Document| {
            plan(&cache, body, None)
                .err()
                .and_then(|e| e.get_i32("code").ok())
        };
        assert_eq!(
            code(&agg(doc! { "bogus": 1 })),
            Some(codes::IDL_UNKNOWN_FIELD)
        );
        assert_eq!(
            code(&agg(doc! { "allUsers": true, "users": [] })),
            Some(codes::BAD_VALUE)
        );
        let twice = doc! { "aggregate": 1, "pipeline": [{ "$listLocalSessions": {} },
        { "$listLocalSessions": {} }], "$db": "admin" };
        assert_eq!(code(&twice), Some(codes::LOCATION_40602));
        let mut strict = agg(doc! {});
        strict.insert("apiVersion", "1");
        strict.insert("apiStrict", true);
        assert_eq!(code(&strict), Some(codes::API_STRICT_ERROR));
        strict.insert("apiStrict", false);
        assert_eq!(code(&strict), None);
    }

    #[test]
    fn only_database_aggregates_starting_with_the_stage() {
        assert!(applies("aggregate", &agg(doc! {})));
        let on_collection = doc! { "aggregate": "c", "pipeline": [{ "$listLocalSessions": {} }] };
        assert!(!applies("aggregate", &on_collection));
        let other = doc! { "aggregate": 1, "pipeline": [{ "$currentOp": {} }] };
        assert!(!applies("aggregate", &other));
    }

    #[test]
    fn the_backend_runs_the_rest_and_the_client_sees_cmd_aggregate() {
        let mut body = agg(doc! {});
        body.insert("maxTimeMS", 5);
        body.insert("apiVersion", "1");
        let cmd = backend_aggregate(&body, "admin", "s1", vec![doc! { "$limit": 1 }.into()]);
        assert_eq!(
            cmd,
            doc! { "aggregate": "s1", "pipeline": [{ "$limit": 1 }], "cursor": {},
            "maxTimeMS": 5, "$db": DB }
        );
        // $merge and $out write where mongod would: the client's database.
        let rest = vec![
            doc! { "$out": "c" }.into(),
            doc! { "$merge": "c" }.into(),
            doc! { "$merge": { "into": { "coll": "c" }, "whenMatched": "fail" } }.into(),
            doc! { "$merge": { "into": { "db": "x", "coll": "c" } } }.into(),
        ];
        let cmd = backend_aggregate(&body, "db0", "s1", rest);
        assert_eq!(
            cmd.get_array("pipeline").unwrap(),
            &vec![
                Bson::from(doc! { "$out": { "db": "db0", "coll": "c" } }),
                doc! { "$merge": { "into": { "db": "db0", "coll": "c" } } }.into(),
                doc! { "$merge": { "into": { "coll": "c", "db": "db0" }, "whenMatched": "fail" } }
                    .into(),
                doc! { "$merge": { "into": { "db": "x", "coll": "c" } } }.into(),
            ]
        );
        let reply = doc! { "cursor": { "id": 0i64, "ns": "proxy_local_sessions.s1",
        "firstBatch": [] }, "ok": 1.0 };
        let out = client_reply(reply, "admin");
        assert_eq!(
            out.get_document("cursor").unwrap().get_str("ns").unwrap(),
            "admin.$cmd.aggregate"
        );
        let mut cursors = Cursors::default();
        cursors.open(7, "s1", "admin");
        assert_eq!(cursors.get(7, "test"), None);
        assert_eq!(cursors.get(7, "admin").as_deref(), Some("s1"));
        assert_eq!(cursors.close(7).as_deref(), Some("s1"));
        assert_eq!(cursors.get(7, "admin"), None);
    }
}
