//! One test from start to finish, on a fresh component instance: clean state,
//! initialData, entities, operations, then the event and outcome assertions.

use super::engine;
use super::entities::{Entities, Entity};
use super::events;
use super::internal;
use super::matching;
use super::{Fail, Step};
use crate::guest::Guest;
use crate::Wait;
use bson::{doc, Bson, Document};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::ResourceAny;

/// What a worker needs to run one test.
pub struct Job {
    pub file: Arc<Document>,
    pub test: usize,
    /// The topology's URI: client entities add their uriOptions to it.
    pub uri: String,
    /// A sharded cluster's URI naming every mongos (`useMultipleMongoses`).
    pub multi_mongos_uri: Option<String>,
    pub allowed: Vec<SocketAddr>,
    pub cap: Duration,
    /// When the runner asks `loop` operations to stop.
    pub loop_budget: Duration,
}

pub struct TestRun {
    pub guest: Guest,
    pub entities: Entities,
    /// The internal client (no monitoring), on the same topology.
    pub internal: ResourceAny,
    pub uri: String,
    /// Fail points configured by this test, switched off before the assertions.
    pub failpoints: Vec<String>,
    /// Fail points configured on one mongos (`targetedFailPoint`): name and address.
    pub targeted: Vec<(String, String)>,
    pub loop_budget: Duration,
    /// Topology descriptions recorded by `recordTopologyDescription`, by id.
    pub topologies: std::collections::HashMap<String, super::events::TopologySeen>,
    /// Thread entities' tasks (`runOnThread`, 0.3 face).
    #[cfg(feature = "async-face")]
    pub threads: super::operations::threads::Threads,
}

/// Runs one test; the failpoint cleanup runs whatever happened before it.
pub fn run(job: &Job) -> Step<()> {
    let test = job
        .file
        .get_array("tests")
        .ok()
        .and_then(|t| t.get(job.test))
        .and_then(Bson::as_document)
        .ok_or_else(|| Fail("no such test".into()))?;
    let mut guest = engine::instantiate(&job.allowed, Some(job.cap))?;
    let internal = internal::connect(&mut guest, &job.uri)?;
    let mut entities = Entities::default();
    entities.multi_mongos_uri = job.multi_mongos_uri.clone();
    let mut run = TestRun {
        guest,
        entities,
        internal,
        uri: job.uri.clone(),
        failpoints: Vec::new(),
        targeted: Vec::new(),
        loop_budget: job.loop_budget,
        topologies: Default::default(),
        #[cfg(feature = "async-face")]
        threads: Default::default(),
    };
    let result = run.body(&job.file, test);
    let cleanup = run.finish();
    result.and(cleanup)
}

/// Tests that need what one component instance cannot do: skipped, with why.
/// On the 0.3 face threads run as concurrent calls into the one instance
/// (`operations::threads`), so nothing is skipped there.
pub fn structural_skip(file: &Document, test: &Document) -> Option<String> {
    if cfg!(feature = "async-face") {
        return None;
    }
    let mut threads = false;
    visit(&Bson::Document(file.clone()), &mut |d| {
        threads |= d.contains_key("thread") && d.len() == 1;
    });
    visit(&Bson::Document(test.clone()), &mut |d| {
        let name = d.get_str("name").unwrap_or_default();
        threads |= matches!(name, "runOnThread" | "waitForThread") && d.contains_key("object");
        threads |= d.contains_key("thread") && d.len() == 1;
    });
    threads.then(|| {
        "needs concurrent threads (runOnThread): a component instance is single-threaded".into()
    })
}

/// Calls `f` on every document nested in `v`.
fn visit(v: &Bson, f: &mut dyn FnMut(&Document)) {
    match v {
        Bson::Document(d) => {
            f(d);
            d.values().for_each(|v| visit(v, f));
        }
        Bson::Array(a) => a.iter().for_each(|v| visit(v, f)),
        _ => {}
    }
}

/// Databases a test may write to: dropped first, so no earlier test's data leaks in.
pub fn databases_used(file: &Document, test: &Document) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut collect = |d: &Document| {
        if let Ok(name) = d.get_str("databaseName") {
            names.insert(name.to_string());
        }
    };
    for key in ["initialData", "createEntities"] {
        if let Some(v) = file.get(key) {
            visit(v, &mut collect);
        }
    }
    visit(&Bson::Document(test.clone()), &mut collect);
    for system in ["admin", "config", "local"] {
        names.remove(system);
    }
    names
}

impl TestRun {
    fn body(&mut self, file: &Document, test: &Document) -> Step<()> {
        for db in databases_used(file, test) {
            self.drop_database(&db)?;
        }
        for data in array(file, "initialData")? {
            let data = data
                .as_document()
                .ok_or_else(|| Fail("initialData entry is not a document".into()))?;
            self.set_up_collection(data)?;
        }
        for spec in array(file, "createEntities")? {
            let spec = spec
                .as_document()
                .ok_or_else(|| Fail("createEntities entry is not a document".into()))?;
            self.entities.create(&mut self.guest, spec, &self.uri)?;
        }
        let ops = test
            .get_array("operations")
            .map_err(|_| Fail("the test has no operations array".into()))?;
        for (i, op) in ops.iter().enumerate() {
            let op = op
                .as_document()
                .ok_or_else(|| Fail(format!("operation {i} is not a document")))?;
            self.operation(op)
                .map_err(|f| Fail(format!("op {i}: {}", f.0)))?;
        }
        self.disable_failpoints()?;
        for expected in array(test, "expectEvents")? {
            let expected = expected
                .as_document()
                .ok_or_else(|| Fail("expectEvents entry is not a document".into()))?;
            let client = expected
                .get_str("client")
                .map_err(|_| Fail("expectEvents entry without a client".into()))?;
            let log = &self.entities.client(client)?.log;
            events::check(expected, log, &self.entities)
                .map_err(|m| Fail(format!("expectEvents {client}: {m}")))?;
        }
        for expected in array(test, "expectLogMessages")? {
            let expected = expected
                .as_document()
                .ok_or_else(|| Fail("expectLogMessages entry is not a document".into()))?;
            let client = expected
                .get_str("client")
                .map_err(|_| Fail("expectLogMessages entry without a client".into()))?;
            let got = &self.entities.client(client)?.log.messages;
            super::logs::check(expected, got, &self.entities)
                .map_err(|m| Fail(format!("expectLogMessages {client}: {m}")))?;
        }
        for outcome in array(test, "outcome")? {
            let outcome = outcome
                .as_document()
                .ok_or_else(|| Fail("outcome entry is not a document".into()))?;
            self.check_outcome(outcome)?;
        }
        Ok(())
    }

    /// The collection holds exactly these documents (key order aside; see `matching::exactly`).
    fn check_outcome(&mut self, outcome: &Document) -> Step<()> {
        let db = outcome
            .get_str("databaseName")
            .map_err(|_| Fail("outcome without databaseName".into()))?;
        let coll = outcome
            .get_str("collectionName")
            .map_err(|_| Fail("outcome without collectionName".into()))?;
        let expected = outcome
            .get("documents")
            .ok_or_else(|| Fail("outcome without documents".into()))?;
        let actual = self.collection_documents(db, coll)?;
        let actual = Bson::Array(actual.into_iter().map(Bson::Document).collect());
        matching::exactly(expected, &actual, "$")
            .map_err(|m| Fail(format!("outcome {db}.{coll}: {m}")))
    }

    /// Moves every client's recorded command, pool and SDAM events into its log.
    pub fn drain_events(&mut self) -> Step<()> {
        let g = &mut self.guest;
        let api = g.driver.mongo_wasi_driver_client().client();
        for client in self.entities.clients_mut() {
            let events = api
                .call_take_command_events(&mut g.store, client.handle)
                .w()?;
            client.log.record(&events);
            let pool = api.call_take_pool_events(&mut g.store, client.handle).w()?;
            client.log.record_pool(&pool);
            let sdam = api.call_take_sdam_events(&mut g.store, client.handle).w()?;
            client.log.record_sdam(&sdam);
            let messages = api
                .call_take_log_messages(&mut g.store, client.handle)
                .w()?;
            client.log.record_logs(&messages).map_err(Fail)?;
        }
        Ok(())
    }

    fn disable_failpoints(&mut self) -> Step<()> {
        for name in std::mem::take(&mut self.failpoints) {
            self.internal_command("admin", &doc! { "configureFailPoint": name, "mode": "off" })?;
        }
        for (name, address) in std::mem::take(&mut self.targeted) {
            let off = doc! { "configureFailPoint": name, "mode": "off" };
            self.command_on(&address, &off)?;
        }
        Ok(())
    }

    /// Runs `cmd` on admin at one server (`host:port`) of the topology, through a
    /// direct connection made for it with the topology URI's credentials and TLS.
    pub fn command_on(&mut self, address: &str, cmd: &Document) -> Step<Document> {
        let uri = super::uri::direct(&self.uri, address)?;
        let client = internal::connect(&mut self.guest, &uri)?;
        let out = internal::command(&mut self.guest, client, "admin", cmd)?;
        let g = &mut self.guest;
        g.driver
            .mongo_wasi_driver_client()
            .client()
            .call_close(&mut g.store, client)
            .w()?;
        crate::drop_resource(client, &mut g.store)?;
        out.map_err(|e| Fail(format!("{address}: {}", super::errors::describe(&e))))
    }

    /// Fail points off, sessions ended (a driver aborts an open transaction then),
    /// cursors closed; their errors do not matter now, a trap still does. The spec's
    /// `killAllSessions` is left out: the proxy answers it without effect.
    fn finish(&mut self) -> Step<()> {
        #[cfg(feature = "async-face")]
        self.threads.stop();
        let failpoints = self.disable_failpoints();
        let g = &mut self.guest;
        for name in self.entities.names() {
            match self.entities.remove(&name) {
                Some(Entity::Session(s)) => {
                    g.driver
                        .mongo_wasi_driver_session()
                        .session()
                        .call_end(&mut g.store, s.handle)
                        .w()?;
                }
                Some(Entity::Cursor(c)) => {
                    let _ = g
                        .driver
                        .mongo_wasi_driver_cursor()
                        .cursor()
                        .call_close(&mut g.store, c.handle, None)
                        .w()?;
                }
                _ => {}
            }
        }
        failpoints
    }
}

fn array<'a>(d: &'a Document, key: &str) -> Step<&'a [Bson]> {
    match d.get(key) {
        None => Ok(&[]),
        Some(Bson::Array(a)) => Ok(a),
        Some(_) => Err(Fail(format!("{key} is not an array"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn databases_come_from_data_entities_and_operations_but_not_system_ones() {
        let file = doc! {
            "createEntities": [{ "database": { "id": "d", "client": "c", "databaseName": "db1" } }],
            "initialData": [{ "databaseName": "db2", "collectionName": "x", "documents": [] }],
        };
        let test = doc! { "operations": [{ "name": "createEntities", "object": "testRunner", "arguments": {
        "entities": [{ "database": { "id": "e", "client": "c", "databaseName": "admin" } },
                     { "database": { "id": "f", "client": "c", "databaseName": "db3" } }] } }] };
        let names: Vec<String> = databases_used(&file, &test).into_iter().collect();
        assert_eq!(names, ["db1", "db2", "db3"]);
    }

    #[test]
    #[cfg(not(feature = "async-face"))]
    fn threads_are_a_structural_skip() {
        let file = doc! { "createEntities": [{ "client": { "id": "c" } }] };
        let plain = doc! { "operations": [{ "name": "find", "object": "coll", "arguments": {} }] };
        assert_eq!(structural_skip(&file, &plain), None);
        let threaded = doc! { "operations": [{ "name": "runOnThread", "object": "testRunner",
        "arguments": { "thread": "t0", "operation": {} } }] };
        assert!(structural_skip(&file, &threaded)
            .unwrap()
            .contains("threads"));
        let entity = doc! { "createEntities": [{ "thread": { "id": "t0" } }] };
        assert!(structural_skip(&entity, &plain).is_some());
    }

    #[test]
    #[cfg(feature = "async-face")]
    fn threads_run_on_the_async_face() {
        let entity = doc! { "createEntities": [{ "thread": { "id": "t0" } }] };
        let threaded = doc! { "operations": [{ "name": "runOnThread", "object": "testRunner",
        "arguments": { "thread": "t0", "operation": {} } }] };
        assert_eq!(structural_skip(&entity, &threaded), None);
    }
}
