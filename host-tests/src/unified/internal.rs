//! The internal MongoClient: a client of the same component instance, without
//! monitoring, for setup (dropping, initialData), outcome checks and the
//! assertions that must not go through a test's own clients.

use super::args::bytes;
use super::errors::describe;
use super::operations::cursor;
use super::testcase::TestRun;
use super::{Fail, Step};
use crate::bindings::exports::mongo_wasi::driver::client::ClientOptions;
use crate::bindings::exports::mongo_wasi::driver::collection::{FindOptions, OpOptions};
use crate::bindings::exports::mongo_wasi::driver::database::{
    CollectionOptions, RunCommandOptions,
};
use crate::bindings::exports::mongo_wasi::driver::types::Error as WitError;
use crate::guest::Guest;
use crate::Wait;
use bson::{doc, Bson, Document};
use wasmtime::component::ResourceAny;

fn no_options() -> CollectionOptions {
    CollectionOptions {
        timeout_ms: None,
        read_concern: None,
        write_concern: None,
        read_preference: None,
    }
}

fn op(extra: Option<Document>) -> Step<OpOptions> {
    Ok(OpOptions {
        extra: extra.as_ref().map(bytes).transpose()?,
        ..crate::guest::no_options()
    })
}

/// `what: <driver error>` as a failure.
fn failed(what: &str, e: WitError) -> Fail {
    Fail(format!("{what}: {}", describe(&e)))
}

pub fn connect(guest: &mut Guest, uri: &str) -> Step<ResourceAny> {
    let opts = ClientOptions {
        timeout_ms: None,
        monitor_commands: false,
        server_api: None,
        tls_ca_pem: super::tls::ca_pem(),
        tls_certificate_key_pem: None,
        logging: None,
    };
    guest
        .driver
        .mongo_wasi_driver_client()
        .client()
        .call_connect(&mut guest.store, uri, &opts)
        .w()?
        .map_err(|e| failed(&format!("internal client {uri}"), e))
}

/// Runs a command on `db` through `client`; the error is the driver's.
pub fn command(
    guest: &mut Guest,
    client: ResourceAny,
    db: &str,
    cmd: &Document,
) -> Step<Result<Document, WitError>> {
    let database = guest
        .driver
        .mongo_wasi_driver_client()
        .client()
        .call_database(&mut guest.store, client, db, &no_options())
        .w()?;
    let opts = RunCommandOptions {
        timeout_ms: None,
        session: None,
        read_preference: None,
    };
    let r = guest
        .driver
        .mongo_wasi_driver_database()
        .database()
        .call_run_command(&mut guest.store, database, &bytes(cmd)?, &opts)
        .w()?;
    crate::drop_resource(database, &mut guest.store)?;
    Ok(match r {
        Ok(reply) => Ok(super::operations::decode(&reply, "a command reply")?),
        Err(e) => Err(e),
    })
}

impl TestRun {
    fn internal_collection(&mut self, db: &str, coll: &str) -> Step<ResourceAny> {
        let g = &mut self.guest;
        let database = g
            .driver
            .mongo_wasi_driver_client()
            .client()
            .call_database(&mut g.store, self.internal, db, &no_options())
            .w()?;
        let c = g
            .driver
            .mongo_wasi_driver_database()
            .database()
            .call_collection(&mut g.store, database, coll, &no_options())
            .w()?;
        crate::drop_resource(database, &mut g.store)?;
        Ok(c)
    }

    pub fn internal_command(&mut self, db: &str, cmd: &Document) -> Step<Document> {
        let name = cmd.keys().next().cloned().unwrap_or_default();
        command(&mut self.guest, self.internal, db, cmd)?.map_err(|e| failed(&name, e))
    }

    pub fn drop_database(&mut self, db: &str) -> Step<()> {
        self.internal_command(db, &doc! { "dropDatabase": 1 })
            .map(drop)
    }

    /// One `collectionData` of initialData: create (with its options) and insert.
    /// The spec's "drop the collection first" is done by dropping its whole database
    /// at the start of the test (`databases_used`): nx-27017 cannot insert into a
    /// dotted collection such as `fs.chunks` once it was dropped (TEST-SERVER.md).
    pub fn set_up_collection(&mut self, data: &Document) -> Step<()> {
        let db = data
            .get_str("databaseName")
            .map_err(|_| Fail("initialData without databaseName".into()))?;
        let name = data
            .get_str("collectionName")
            .map_err(|_| Fail("initialData without collectionName".into()))?;
        let docs = data
            .get_array("documents")
            .map_err(|_| Fail("initialData without documents".into()))?;
        let what = format!("initialData {db}.{name}");
        let coll = self.internal_collection(db, name)?;
        let g = &mut self.guest;
        let api = g.driver.mongo_wasi_driver_collection().collection();
        let create = data.get_document("createOptions").ok().cloned();
        if create.is_some() || docs.is_empty() {
            let mut extra = create.unwrap_or_default();
            extra.insert("writeConcern", doc! { "w": "majority" });
            let database = g
                .driver
                .mongo_wasi_driver_client()
                .client()
                .call_database(&mut g.store, self.internal, db, &no_options())
                .w()?;
            let created = g
                .driver
                .mongo_wasi_driver_database()
                .database()
                .call_create_collection(&mut g.store, database, name, &op(Some(extra))?)
                .w()?
                .map_err(|e| failed(&format!("{what}: create"), e))?;
            crate::drop_resource(created, &mut g.store)?;
            crate::drop_resource(database, &mut g.store)?;
        }
        if !docs.is_empty() {
            let encoded: Step<Vec<Vec<u8>>> = docs
                .iter()
                .map(|d| match d {
                    Bson::Document(d) => bytes(d),
                    other => Err(Fail(format!("{what}: a document is {other}"))),
                })
                .collect();
            let majority = op(Some(doc! { "writeConcern": { "w": "majority" } }))?;
            api.call_insert_many(&mut g.store, coll, &encoded?, &majority)
                .w()?
                .map_err(|e| failed(&format!("{what}: insert"), e.error))?;
        }
        crate::drop_resource(coll, &mut g.store)?;
        Ok(())
    }

    /// The collection's documents, by `_id` as mongod would sort them.
    pub fn collection_documents(&mut self, db: &str, name: &str) -> Step<Vec<Document>> {
        let coll = self.internal_collection(db, name)?;
        let g = &mut self.guest;
        let opts = FindOptions {
            sort: Some(bytes(&doc! { "_id": 1 })?),
            extra: Some(bytes(&doc! { "readConcern": { "level": "local" } })?),
            ..crate::guest::find_options()
        };
        let found = g
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_find(&mut g.store, coll, &bytes(&Document::new())?, &opts)
            .w()?;
        crate::drop_resource(coll, &mut g.store)?;
        let cursor = found.map_err(|e| failed(&format!("outcome {db}.{name}: find"), e))?;
        let mut docs =
            cursor::drain(g, cursor)?.map_err(|e| failed(&format!("outcome {db}.{name}"), e))?;
        // nx-27017 compares _id as strings (TEST-SERVER.md); order numbers numerically.
        docs.sort_by(|a, b| id_order(a.get("_id"), b.get("_id")));
        Ok(docs)
    }

    pub fn collection_names(&mut self, db: &str) -> Step<Vec<String>> {
        let reply = self.internal_command(db, &doc! { "listCollections": 1, "nameOnly": true })?;
        Ok(first_batch(&reply)
            .iter()
            .filter_map(|d| d.get_str("name").ok().map(String::from))
            .collect())
    }

    /// A collection that does not exist has no indexes (listIndexes fails on it).
    pub fn index_names(&mut self, db: &str, coll: &str) -> Step<Vec<String>> {
        let cmd = doc! { "listIndexes": coll };
        let Ok(reply) = command(&mut self.guest, self.internal, db, &cmd)? else {
            return Ok(Vec::new());
        };
        Ok(first_batch(&reply)
            .iter()
            .filter_map(|d| d.get_str("name").ok().map(String::from))
            .collect())
    }
}

/// A one-batch cursor reply's documents (listCollections, listIndexes).
fn first_batch(reply: &Document) -> Vec<Document> {
    reply
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .map(|b| b.iter().filter_map(Bson::as_document).cloned().collect())
        .unwrap_or_default()
}

/// Numbers by value first, then everything else by its text.
fn id_order(a: Option<&Bson>, b: Option<&Bson>) -> std::cmp::Ordering {
    let num = |v: Option<&Bson>| v.and_then(super::matching::number);
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => format!("{a:?}").cmp(&format!("{b:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::bson;

    #[test]
    fn ids_sort_numerically_not_as_strings() {
        let mut ids = vec![bson!(10), bson!(2), bson!(1_i64), bson!("a"), bson!(3.5)];
        ids.sort_by(|a, b| id_order(Some(a), Some(b)));
        assert_eq!(
            ids,
            vec![bson!(1_i64), bson!(2), bson!(3.5), bson!(10), bson!("a")]
        );
    }
}
