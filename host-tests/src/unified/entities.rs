//! The entity map and `createEntities`: each client entity is one `connect` on
//! the component with command monitoring on; databases, collections, sessions and
//! buckets are the WIT resources made from it.

use super::args::bytes;
use super::events::EventLog;
use super::matching::Lookup;
use super::{Fail, Step};
use crate::bindings::exports::mongo_wasi::driver::client::{
    ClientOptions, ServerApi, SessionOptions,
};
use crate::bindings::exports::mongo_wasi::driver::database::CollectionOptions;
use crate::bindings::exports::mongo_wasi::driver::gridfs::BucketOptions;
use crate::bindings::exports::mongo_wasi::driver::session::TransactionOptions;
use crate::bindings::exports::mongo_wasi::driver::types::{
    Acknowledgement, ReadConcern, ReadMode, ReadPreference, WriteConcern,
};
use crate::guest::Guest;
use crate::Wait;
use bson::{Bson, Document};
use std::collections::{HashMap, VecDeque};
use wasmtime::component::ResourceAny;

pub struct ClientEntity {
    pub handle: ResourceAny,
    pub log: EventLog,
}

pub struct DatabaseEntity {
    pub handle: ResourceAny,
    pub name: String,
}

pub struct CollectionEntity {
    pub handle: ResourceAny,
    pub database: String,
    pub name: String,
}

pub struct SessionEntity {
    pub handle: ResourceAny,
    /// Read once at creation: `$$sessionLsid` must work after the session ended.
    pub lsid: Document,
    pub client: String,
}

/// A find, command or change-stream cursor. The WIT hands over whole batches; the
/// runner hands them out one document at a time.
pub struct CursorEntity {
    pub handle: ResourceAny,
    pub buffer: VecDeque<Document>,
    /// `next-batch` calls so far: the first one returns the initial batch without a round trip.
    pub batches: usize,
    pub exhausted: bool,
}

pub enum Entity {
    Client(ClientEntity),
    Database(DatabaseEntity),
    Collection(CollectionEntity),
    Session(SessionEntity),
    Bucket(ResourceAny),
    Cursor(CursorEntity),
    /// A saved result, an iteration count, an error list...
    Value(Bson),
    /// A thread (0.3 face): its operations are `TestRun::threads`'.
    Thread,
}

impl Entity {
    fn kind(&self) -> &'static str {
        match self {
            Entity::Client(_) => "client",
            Entity::Database(_) => "database",
            Entity::Collection(_) => "collection",
            Entity::Session(_) => "session",
            Entity::Bucket(_) => "bucket",
            Entity::Cursor(_) => "cursor",
            Entity::Value(_) => "BSON value",
            Entity::Thread => "thread",
        }
    }
}

#[derive(Default)]
pub struct Entities {
    map: HashMap<String, Entity>,
    /// In a sharded cluster: the URI naming every mongos, for clients with
    /// `useMultipleMongoses: true` (the topology's URI names one).
    pub multi_mongos_uri: Option<String>,
}

macro_rules! getter {
    ($get:ident, $get_mut:ident, $variant:ident, $ty:ty) => {
        pub fn $get(&self, name: &str) -> Step<&$ty> {
            match self.map.get(name) {
                Some(Entity::$variant(e)) => Ok(e),
                other => Err(Self::wrong(name, stringify!($get), other)),
            }
        }
        #[allow(dead_code)]
        pub fn $get_mut(&mut self, name: &str) -> Step<&mut $ty> {
            match self.map.get_mut(name) {
                Some(Entity::$variant(e)) => Ok(e),
                other => Err(Self::wrong(name, stringify!($get), other.map(|e| &*e))),
            }
        }
    };
}

impl Entities {
    fn wrong(name: &str, want: &str, got: Option<&Entity>) -> Fail {
        match got {
            None => Fail(format!("no entity named {name:?}")),
            Some(e) => Fail(format!("entity {name:?} is a {}, not a {want}", e.kind())),
        }
    }

    getter!(client, client_mut, Client, ClientEntity);
    getter!(database, database_mut, Database, DatabaseEntity);
    getter!(collection, collection_mut, Collection, CollectionEntity);
    getter!(session, session_mut, Session, SessionEntity);
    getter!(bucket, bucket_mut, Bucket, ResourceAny);
    getter!(cursor, cursor_mut, Cursor, CursorEntity);
    getter!(value, value_mut, Value, Bson);

    pub fn get(&self, name: &str) -> Option<&Entity> {
        self.map.get(name)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut Entity> {
        self.map.get_mut(name)
    }

    pub fn insert(&mut self, name: &str, entity: Entity) -> Step<()> {
        if self.map.contains_key(name) {
            return Err(Fail(format!("an entity named {name:?} already exists")));
        }
        self.map.insert(name.to_string(), entity);
        Ok(())
    }

    pub fn names(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    pub fn clients_mut(&mut self) -> impl Iterator<Item = &mut ClientEntity> {
        self.map.values_mut().filter_map(|e| match e {
            Entity::Client(c) => Some(c),
            _ => None,
        })
    }

    pub fn remove(&mut self, name: &str) -> Option<Entity> {
        self.map.remove(name)
    }

    /// Creates one `{<type>: {id, ...}}` entity; `base_uri` is the topology's.
    pub fn create(&mut self, guest: &mut Guest, spec: &Document, base_uri: &str) -> Step<()> {
        let mut it = spec.iter();
        let (Some((kind, Bson::Document(fields))), None) = (it.next(), it.next()) else {
            return Err(Fail(
                "an entity needs exactly one key, with a document".into(),
            ));
        };
        let id = fields
            .get_str("id")
            .map_err(|_| Fail(format!("{kind} entity without an id")))?;
        let entity = match kind.as_str() {
            "client" => {
                let multi = fields.get_bool("useMultipleMongoses").unwrap_or(false);
                let base = match (multi, &self.multi_mongos_uri) {
                    (true, Some(all)) => all.as_str(),
                    _ => base_uri,
                };
                Entity::Client(client(guest, fields, base)?)
            }
            "database" => {
                let client = self.client(str_field(fields, "client")?)?.handle;
                let name = str_field(fields, "databaseName")?;
                let opts = options(fields.get("databaseOptions"))?;
                let handle = guest
                    .driver
                    .mongo_wasi_driver_client()
                    .client()
                    .call_database(&mut guest.store, client, name, &opts)
                    .w()?;
                Entity::Database(DatabaseEntity {
                    handle,
                    name: name.to_string(),
                })
            }
            "collection" => {
                let db = self.database(str_field(fields, "database")?)?;
                let (db_handle, db_name) = (db.handle, db.name.clone());
                let name = str_field(fields, "collectionName")?;
                let opts = options(fields.get("collectionOptions"))?;
                let handle = guest
                    .driver
                    .mongo_wasi_driver_database()
                    .database()
                    .call_collection(&mut guest.store, db_handle, name, &opts)
                    .w()?;
                Entity::Collection(CollectionEntity {
                    handle,
                    database: db_name,
                    name: name.to_string(),
                })
            }
            "session" => {
                let client_id = str_field(fields, "client")?;
                let client = self.client(client_id)?.handle;
                let opts = session_options(fields.get("sessionOptions"), self)?;
                let api = guest.driver.mongo_wasi_driver_client().client();
                let handle = api
                    .call_start_session(&mut guest.store, client, &opts)
                    .w()?
                    .map_err(|e| Fail(format!("startSession: {}", super::errors::describe(&e))))?;
                let lsid = guest
                    .driver
                    .mongo_wasi_driver_session()
                    .session()
                    .call_id(&mut guest.store, handle)
                    .w()?;
                let lsid = Document::from_reader(lsid.as_slice())
                    .map_err(|e| Fail(format!("session id is not BSON: {e}")))?;
                Entity::Session(SessionEntity {
                    handle,
                    lsid,
                    client: client_id.to_string(),
                })
            }
            "bucket" => {
                let db = self.database(str_field(fields, "database")?)?.handle;
                let opts = bucket_options(fields.get("bucketOptions"))?;
                let handle = guest
                    .driver
                    .mongo_wasi_driver_database()
                    .database()
                    .call_gridfs_bucket(&mut guest.store, db, &opts)
                    .w()?;
                Entity::Bucket(handle)
            }
            // On the 0.3 face the runner runs a thread's operations concurrently
            // (`operations::threads`); it creates the thread's task.
            "thread" if cfg!(feature = "async-face") => Entity::Thread,
            "thread" => {
                return Err(Fail(
                    "thread entities need concurrency; a component instance is single-threaded"
                        .into(),
                ))
            }
            other => return Err(Fail(format!("unsupported entity type {other:?}"))),
        };
        self.insert(id, entity)
    }
}

impl Lookup for Entities {
    fn bson_entity(&self, name: &str) -> Option<Bson> {
        match self.map.get(name)? {
            Entity::Value(v) => Some(v.clone()),
            _ => None,
        }
    }

    fn session_lsid(&self, name: &str) -> Option<Document> {
        match self.map.get(name)? {
            Entity::Session(s) => Some(s.lsid.clone()),
            _ => None,
        }
    }
}

fn str_field<'a>(d: &'a Document, key: &str) -> Step<&'a str> {
    d.get_str(key)
        .map_err(|_| Fail(format!("entity field {key} is missing or not a string")))
}

fn client(guest: &mut Guest, fields: &Document, base_uri: &str) -> Step<ClientEntity> {
    for key in fields.keys() {
        match key.as_str() {
            "id"
            | "uriOptions"
            | "observeEvents"
            | "ignoreCommandMonitoringEvents"
            | "observeSensitiveCommands"
            | "observeLogMessages"
            | "serverApi" => {}
            // Chosen in `Entities::create`: the base URI names one mongos or all.
            "useMultipleMongoses" => {}
            // minPoolSize still goes to the driver in the URI; the runner does not wait
            // for the pool to fill (the 0.2 face fills none in the background).
            "awaitMinPoolSizeMS" => {}
            other => return Err(Fail(format!("unsupported client entity option {other}"))),
        }
    }
    let mut uri_options = match fields.get("uriOptions") {
        None => Document::new(),
        Some(Bson::Document(d)) => d.clone(),
        Some(_) => return Err(Fail("uriOptions is not a document".into())),
    };
    // On the 0.3 face a monitor streams from each server: a fail point's
    // state change error marks the server Unknown while the server's
    // topology is unchanged, so the retry's selection waits for the next
    // awaited reply (a check requested during one is ignored: server-
    // monitoring spec), up to heartbeatFrequencyMS (10 s). Clients that set
    // no heartbeatFrequencyMS get the least one, 500 ms, to keep runs short.
    if cfg!(feature = "async-face")
        && !uri_options
            .keys()
            .any(|k| k.eq_ignore_ascii_case("heartbeatFrequencyMS"))
    {
        uri_options.insert("heartbeatFrequencyMS", 500);
    }
    let uri = super::uri::client_uri(base_uri, &uri_options).map_err(Fail)?;
    let log = EventLog::from_spec(fields).map_err(Fail)?;
    let opts = ClientOptions {
        timeout_ms: None,
        monitor_commands: true,
        server_api: server_api(fields.get("serverApi"))?,
        tls_ca_pem: super::tls::ca_pem(),
        tls_certificate_key_pem: None,
        logging: super::logs::options(fields).map_err(Fail)?,
    };
    let handle = guest
        .driver
        .mongo_wasi_driver_client()
        .client()
        .call_connect(&mut guest.store, &uri, &opts)
        .w()?
        .map_err(|e| Fail(format!("connect {uri}: {}", super::errors::describe(&e))))?;
    Ok(ClientEntity { handle, log })
}

/// A client entity's `serverApi` (version, strict, deprecationErrors), as
/// given: the driver validates the version.
fn server_api(spec: Option<&Bson>) -> Step<Option<ServerApi>> {
    let Some(spec) = spec else { return Ok(None) };
    let d = sub_doc(Some(spec))?;
    only(&d, "serverApi", &["version", "strict", "deprecationErrors"])?;
    let flag = |key: &str| match d.get(key) {
        None => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(other) => Err(Fail(format!(
            "serverApi.{key} should be a boolean, not {other}"
        ))),
    };
    Ok(Some(ServerApi {
        version: str_field(&d, "version")?.to_string(),
        strict: flag("strict")?,
        deprecation_errors: flag("deprecationErrors")?,
    }))
}

fn doc_field(d: &Document, key: &str) -> Step<Option<Vec<u8>>> {
    match d.get(key) {
        None => Ok(None),
        Some(Bson::Document(v)) => bytes(v).map(Some),
        Some(other) => Err(Fail(format!("{key} should be a document, not {other}"))),
    }
}

/// The unified format writes a write concern as the API does (`journal`,
/// `wtimeoutMS`); the WIT takes the server's document (`j`, `wtimeout`).
fn write_concern_field(d: &Document) -> Step<Option<Vec<u8>>> {
    match d.get("writeConcern") {
        None => Ok(None),
        Some(Bson::Document(wc)) => {
            let server: Document = wc
                .iter()
                .map(|(k, v)| match k.as_str() {
                    "journal" => ("j".to_string(), v.clone()),
                    "wtimeoutMS" => ("wtimeout".to_string(), v.clone()),
                    _ => (k.clone(), v.clone()),
                })
                .collect();
            bytes(&server).map(Some)
        }
        Some(other) => Err(Fail(format!(
            "writeConcern should be a document, not {other}"
        ))),
    }
}

fn u64_field(d: &Document, key: &str) -> Step<Option<u64>> {
    match d.get(key) {
        None => Ok(None),
        Some(v) => match super::matching::number(v) {
            Some(n) if n >= 0.0 && n.fract() == 0.0 => Ok(Some(n as u64)),
            _ => Err(Fail(format!(
                "{key} should be a non-negative integer, not {v}"
            ))),
        },
    }
}

fn only(d: &Document, what: &str, known: &[&str]) -> Step<()> {
    match d.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(Fail(format!("{what}: no WIT field for {k}"))),
    }
}

fn sub_doc(spec: Option<&Bson>) -> Step<Document> {
    match spec {
        None => Ok(Document::new()),
        Some(Bson::Document(d)) => Ok(d.clone()),
        Some(other) => Err(Fail(format!(
            "entity options should be a document, not {other}"
        ))),
    }
}

/// collectionOrDatabaseOptions (plus timeoutMS).
fn options(spec: Option<&Bson>) -> Step<CollectionOptions> {
    let d = sub_doc(spec)?;
    only(
        &d,
        "collection/database options",
        &["readConcern", "writeConcern", "readPreference", "timeoutMS"],
    )?;
    Ok(CollectionOptions {
        timeout_ms: u64_field(&d, "timeoutMS")?,
        read_concern: doc_field(&d, "readConcern")?,
        write_concern: write_concern_field(&d)?,
        read_preference: doc_field(&d, "readPreference")?,
    })
}

pub fn transaction_options(d: &Document) -> Step<TransactionOptions> {
    only(
        d,
        "transaction options",
        &[
            "readConcern",
            "writeConcern",
            "readPreference",
            "maxCommitTimeMS",
        ],
    )?;
    Ok(TransactionOptions {
        read_concern: typed_field(d, "readConcern", typed_read_concern)?,
        write_concern: typed_field(d, "writeConcern", typed_write_concern)?,
        read_preference: typed_field(d, "readPreference", typed_read_preference)?,
        max_commit_time_ms: u64_field(d, "maxCommitTimeMS")?,
    })
}

/// The document field `key` of `d`, if any, as `typed` makes it.
fn typed_field<T>(d: &Document, key: &str, typed: fn(&Document) -> Step<T>) -> Step<Option<T>> {
    match d.get(key) {
        None => Ok(None),
        Some(Bson::Document(v)) => typed(v).map(Some),
        Some(other) => Err(Fail(format!("{key} should be a document, not {other}"))),
    }
}

/// A unified-format `readConcern` as the WIT record.
pub fn typed_read_concern(d: &Document) -> Step<ReadConcern> {
    match d.get_str("level") {
        Ok(level) if d.len() == 1 => Ok(ReadConcern {
            level: level.to_string(),
        }),
        _ => Err(Fail(format!("readConcern {d} is not {{level: <string>}}"))),
    }
}

/// A unified-format `writeConcern` (`w`, `journal`, `wtimeoutMS`) as the WIT record.
pub fn typed_write_concern(d: &Document) -> Step<WriteConcern> {
    let mut wc = WriteConcern {
        w: None,
        journal: None,
        wtimeout_ms: None,
    };
    for (k, v) in d {
        match (k.as_str(), v) {
            ("w", Bson::String(s)) if s == "majority" => wc.w = Some(Acknowledgement::Majority),
            ("w", Bson::String(s)) => wc.w = Some(Acknowledgement::Tag(s.clone())),
            ("w", v) => match super::matching::number(v) {
                Some(n) if n >= 0.0 => wc.w = Some(Acknowledgement::Nodes(n as u32)),
                _ => return Err(Fail(format!("writeConcern.w {v} is not a count"))),
            },
            ("j" | "journal", Bson::Boolean(b)) => wc.journal = Some(*b),
            ("wtimeout" | "wtimeoutMS", v) => {
                wc.wtimeout_ms = super::matching::number(v).map(|n| n as u64)
            }
            (other, _) => return Err(Fail(format!("unknown writeConcern field {other}"))),
        }
    }
    Ok(wc)
}

/// A unified-format `readPreference` (`mode`, `tagSets`, `maxStalenessSeconds`)
/// as the WIT record.
pub fn typed_read_preference(d: &Document) -> Step<ReadPreference> {
    let mode = match d.get_str("mode").map(str::to_ascii_lowercase).as_deref() {
        Ok("primary") => ReadMode::Primary,
        Ok("primarypreferred") => ReadMode::PrimaryPreferred,
        Ok("secondary") => ReadMode::Secondary,
        Ok("secondarypreferred") => ReadMode::SecondaryPreferred,
        Ok("nearest") => ReadMode::Nearest,
        _ => return Err(Fail(format!("readPreference {d} has no known mode"))),
    };
    let mut tag_sets = Vec::new();
    if let Ok(sets) = d.get_array("tagSets").or_else(|_| d.get_array("tags")) {
        for set in sets {
            match set {
                Bson::Document(set) => tag_sets.push(bytes(set)?),
                other => return Err(Fail(format!("a tag set is not a document: {other}"))),
            }
        }
    }
    let max_staleness_seconds = match d.get("maxStalenessSeconds") {
        None => None,
        Some(v) => match super::matching::number(v) {
            Some(n) if n >= 0.0 => Some(n as u32),
            // -1: no maximum.
            Some(_) => None,
            None => return Err(Fail(format!("maxStalenessSeconds {v} is not a number"))),
        },
    };
    Ok(ReadPreference {
        mode,
        tag_sets,
        max_staleness_seconds,
    })
}

fn session_options(spec: Option<&Bson>, entities: &dyn Lookup) -> Step<SessionOptions> {
    let d = sub_doc(spec)?;
    only(
        &d,
        "sessionOptions",
        &[
            "causalConsistency",
            "snapshot",
            "defaultTimeoutMS",
            "defaultTransactionOptions",
            "snapshotTime",
        ],
    )?;
    // A saved entity's name (getSnapshotTime), crossing as `{t: <timestamp>}`.
    let snapshot_time = match d.get("snapshotTime") {
        None => None,
        Some(Bson::String(name)) => {
            let t = entities
                .bson_entity(name)
                .ok_or_else(|| Fail(format!("snapshotTime: no entity {name}")))?;
            Some(bytes(&bson::doc! { "t": t })?)
        }
        Some(other) => return Err(Fail(format!("snapshotTime: {other}"))),
    };
    let txn = match d.get("defaultTransactionOptions") {
        None => None,
        Some(Bson::Document(t)) => Some(transaction_options(t)?),
        Some(other) => return Err(Fail(format!("defaultTransactionOptions: {other}"))),
    };
    Ok(SessionOptions {
        causal_consistency: d.get_bool("causalConsistency").ok(),
        snapshot: d.get_bool("snapshot").ok(),
        default_timeout_ms: u64_field(&d, "defaultTimeoutMS")?,
        default_transaction_options: txn,
        snapshot_time,
    })
}

fn bucket_options(spec: Option<&Bson>) -> Step<BucketOptions> {
    let d = sub_doc(spec)?;
    only(
        &d,
        "bucketOptions",
        &[
            "bucketName",
            "chunkSizeBytes",
            "writeConcern",
            "readConcern",
            "readPreference",
            "timeoutMS",
        ],
    )?;
    let chunk = u64_field(&d, "chunkSizeBytes")?
        .map(|n| u32::try_from(n).map_err(|_| Fail(format!("chunkSizeBytes {n} does not fit u32"))))
        .transpose()?;
    Ok(BucketOptions {
        bucket_name: d.get_str("bucketName").ok().map(String::from),
        chunk_size_bytes: chunk,
        write_concern: write_concern_field(&d)?,
        read_concern: doc_field(&d, "readConcern")?,
        read_preference: doc_field(&d, "readPreference")?,
        timeout_ms: u64_field(&d, "timeoutMS")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn options_refuse_what_the_wit_cannot_carry() {
        let o = options(Some(&Bson::Document(
            doc! { "timeoutMS": 5, "readConcern": { "level": "local" } },
        )))
        .unwrap();
        assert_eq!(o.timeout_ms, Some(5));
        assert!(o.read_concern.is_some() && o.write_concern.is_none());
        let err = options(Some(&Bson::Document(doc! { "bogus": 1 })))
            .err()
            .unwrap();
        assert!(err.0.contains("bogus"));
        let s = session_options(
            Some(&Bson::Document(doc! {
                "defaultTransactionOptions": { "maxCommitTimeMS": 10 }, "causalConsistency": false,
            })),
            &Entities::default(),
        )
        .unwrap();
        assert_eq!(
            s.default_transaction_options.unwrap().max_commit_time_ms,
            Some(10)
        );
        assert_eq!(s.causal_consistency, Some(false));
    }

    #[test]
    fn server_api_passes_through_as_given() {
        assert!(server_api(None).unwrap().is_none());
        let api = server_api(Some(&Bson::Document(
            doc! { "version": "1", "strict": true },
        )))
        .unwrap()
        .unwrap();
        assert_eq!(api.version, "1");
        assert_eq!((api.strict, api.deprecation_errors), (Some(true), None));
        for bad in [
            doc! { "strict": true },
            doc! { "version": "1", "strict": 1 },
            doc! { "version": "1", "bogus": true },
        ] {
            assert!(
                server_api(Some(&Bson::Document(bad.clone()))).is_err(),
                "{bad}"
            );
        }
    }
}
