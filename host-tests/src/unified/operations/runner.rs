//! The special test operations (`object: testRunner`).

use crate::bindings::exports::mongo_wasi::driver::session::TransactionState;
use crate::unified::entities::Entity;
use crate::unified::errors::describe;
use crate::unified::events::{self, EventLog};
use crate::unified::internal;
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use crate::Wait;
use bson::{doc, Bson, Document};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The command monitoring events of the unified format.
const COMMAND_EVENTS: &[&str] = &[
    "commandStartedEvent",
    "commandSucceededEvent",
    "commandFailedEvent",
];

/// How long `waitForEvent` waits, as the spec says.
const EVENT_WAIT: Duration = Duration::from_secs(10);

fn arg<'a>(args: Option<&'a Document>, key: &str) -> Step<&'a Bson> {
    args.and_then(|a| a.get(key))
        .ok_or_else(|| Fail(format!("missing argument {key}")))
}

fn str_arg<'a>(args: Option<&'a Document>, key: &str) -> Step<&'a str> {
    arg(args, key)?
        .as_str()
        .ok_or_else(|| Fail(format!("argument {key} is not a string")))
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl TestRun {
    /// The mongos or load balancer a session entity's transaction is pinned to.
    fn pinned_server(&mut self, session: &str) -> Step<Option<String>> {
        let handle = self.entities.session(session)?.handle;
        let g = &mut self.guest;
        Ok(g.driver
            .mongo_wasi_driver_session()
            .session()
            .call_pinned_server(&mut g.store, handle)
            .w()?)
    }

    pub(super) fn runner_operation(&mut self, name: &str, args: Option<&Document>) -> Step<()> {
        match name {
            "failPoint" => {
                let fp = arg(args, "failPoint")?
                    .as_document()
                    .ok_or_else(|| Fail("failPoint is not a document".into()))?;
                let client = self.entities.client(str_arg(args, "client")?)?.handle;
                let fp_name = fp.get_str("configureFailPoint").unwrap_or("failCommand");
                // Recorded before sending: even a half-applied fail point gets switched off.
                self.failpoints.push(fp_name.to_string());
                match internal::command(&mut self.guest, client, "admin", fp)? {
                    Ok(_) => Ok(()),
                    Err(e) => Err(Fail(format!("configureFailPoint: {}", describe(&e)))),
                }
            }
            "targetedFailPoint" => {
                let fp = arg(args, "failPoint")?
                    .as_document()
                    .ok_or_else(|| Fail("failPoint is not a document".into()))?
                    .clone();
                let address = self
                    .pinned_server(str_arg(args, "session")?)?
                    .ok_or_else(|| Fail(format!("{name}: the session is not pinned")))?;
                let fp_name = fp.get_str("configureFailPoint").unwrap_or("failCommand");
                // Recorded before sending: even a half-applied fail point gets switched off.
                self.targeted.push((fp_name.to_string(), address.clone()));
                self.command_on(&address, &fp)
                    .map(drop)
                    .map_err(|f| Fail(format!("configureFailPoint: {}", f.0)))
            }
            "assertSessionPinned" => match self.pinned_server(str_arg(args, "session")?)? {
                Some(_) => Ok(()),
                None => Err(Fail("the session is not pinned".into())),
            },
            "assertSessionUnpinned" => match self.pinned_server(str_arg(args, "session")?)? {
                None => Ok(()),
                Some(a) => Err(Fail(format!("the session is pinned to {a}"))),
            },
            "assertSessionTransactionState" => {
                let session = self.entities.session(str_arg(args, "session")?)?.handle;
                let want = str_arg(args, "state")?;
                let g = &mut self.guest;
                let api = g.driver.mongo_wasi_driver_session().session();
                let got = match api.call_transaction_state(&mut g.store, session).w()? {
                    TransactionState::None => "none",
                    TransactionState::Starting => "starting",
                    TransactionState::InProgress => "in_progress",
                    TransactionState::Committed => "committed",
                    TransactionState::Aborted => "aborted",
                };
                match got == want {
                    true => Ok(()),
                    false => Err(Fail(format!("expected state {want}, the session is {got}"))),
                }
            }
            "assertSessionDirty" | "assertSessionNotDirty" => {
                let session = self.entities.session(str_arg(args, "session")?)?.handle;
                let g = &mut self.guest;
                let api = g.driver.mongo_wasi_driver_session().session();
                let dirty = api.call_is_dirty(&mut g.store, session).w()?;
                match dirty == (name == "assertSessionDirty") {
                    true => Ok(()),
                    false => Err(Fail(format!("{name}: is-dirty() is {dirty}"))),
                }
            }
            "assertSameLsidOnLastTwoCommands" | "assertDifferentLsidOnLastTwoCommands" => {
                let log = &self.entities.client(str_arg(args, "client")?)?.log;
                self.last_two_lsids(name, log)
            }
            "assertCollectionExists" | "assertCollectionNotExists" => {
                let db = str_arg(args, "databaseName")?;
                let coll = str_arg(args, "collectionName")?;
                let exists = self.collection_names(db)?.iter().any(|n| n == coll);
                match (exists, name == "assertCollectionExists") {
                    (true, true) | (false, false) => Ok(()),
                    (false, true) => Err(Fail(format!("collection {db}.{coll} does not exist"))),
                    (true, false) => Err(Fail(format!("collection {db}.{coll} exists"))),
                }
            }
            "assertIndexExists" | "assertIndexNotExists" => {
                let db = str_arg(args, "databaseName")?;
                let coll = str_arg(args, "collectionName")?;
                let index = str_arg(args, "indexName")?;
                let names = self.index_names(db, coll)?;
                let exists = names.iter().any(|n| n == index);
                match (exists, name == "assertIndexExists") {
                    (true, true) | (false, false) => Ok(()),
                    (false, true) => Err(Fail(format!(
                        "no index {index} on {db}.{coll} (has {names:?})"
                    ))),
                    (true, false) => Err(Fail(format!("index {index} exists on {db}.{coll}"))),
                }
            }
            "createEntities" => {
                let list = arg(args, "entities")?
                    .as_array()
                    .ok_or_else(|| Fail("entities is not an array".into()))?;
                for spec in list {
                    let spec = spec
                        .as_document()
                        .ok_or_else(|| Fail("an entity is not a document".into()))?;
                    self.entities.create(&mut self.guest, spec, &self.uri)?;
                }
                Ok(())
            }
            "loop" => self.run_loop(args),
            "wait" => {
                let ms = arg(args, "ms")?
                    .as_i64()
                    .or_else(|| arg(args, "ms").ok().and_then(Bson::as_i32).map(i64::from))
                    .ok_or_else(|| Fail("ms is not an integer".into()))?;
                crate::idle(
                    &mut self.guest.store,
                    Duration::from_millis(ms.max(0) as u64),
                )?;
                Ok(())
            }
            "waitForEvent" | "assertEventCount" => self.count_events(name, args),
            "assertNumberConnectionsCheckedOut" => {
                let client = str_arg(args, "client")?.to_string();
                let want = arg(args, "connections")?
                    .as_i32()
                    .map(i64::from)
                    .ok_or_else(|| Fail("connections is not an integer".into()))?;
                self.drain_events()?;
                let seen = self.entities.client(&client)?.log.checked_out;
                if seen == want {
                    Ok(())
                } else {
                    Err(Fail(format!(
                        "{name}: {seen} connections checked out, expected {want}"
                    )))
                }
            }
            "recordTopologyDescription" => {
                let client = str_arg(args, "client")?.to_string();
                self.drain_events()?;
                let seen = self.entities.client(&client)?.log.topology.clone();
                self.topologies
                    .insert(str_arg(args, "id")?.to_string(), seen);
                Ok(())
            }
            "assertTopologyType" => {
                let seen = self.recorded_topology(args)?;
                let want = str_arg(args, "topologyType")?;
                match seen.kind == want {
                    true => Ok(()),
                    false => Err(Fail(format!(
                        "{name}: topology type {}, expected {want}",
                        seen.kind
                    ))),
                }
            }
            "waitForPrimaryChange" => self.wait_for_primary_change(args),
            #[cfg(feature = "async-face")]
            "runOnThread" => {
                let op = arg(args, "operation")?
                    .as_document()
                    .ok_or_else(|| Fail("operation is not a document".into()))?;
                self.run_on_thread(str_arg(args, "thread")?, op)
            }
            #[cfg(feature = "async-face")]
            "waitForThread" => self.wait_for_thread(str_arg(args, "thread")?),
            #[cfg(not(feature = "async-face"))]
            "runOnThread" | "waitForThread" => Err(Fail(format!(
                "{name}: a component instance is single-threaded"
            ))),
            other => Err(Fail(format!("unknown test runner operation {other}"))),
        }
    }

    /// What the background monitor of a multi-threaded driver would do while
    /// the test waits: the client's due server checks (`check-servers`; a
    /// single-threaded client has no monitor of its own). Their failures are
    /// the monitor's, not the test's: they show as events.
    /// The description `recordTopologyDescription` stored under the
    /// `topologyDescription` (or `priorTopologyDescription`) argument.
    fn recorded_topology(
        &self,
        args: Option<&Document>,
    ) -> Step<super::super::events::TopologySeen> {
        let id = str_arg(args, "topologyDescription")
            .or_else(|_| str_arg(args, "priorTopologyDescription"))?;
        self.topologies
            .get(id)
            .cloned()
            .ok_or_else(|| Fail(format!("no topology description recorded as {id:?}")))
    }

    /// `waitForPrimaryChange`: until the client's topology has a primary
    /// other than the recorded one's, within `timeoutMS` (default 10 s).
    /// The client's own monitors must notice: the runner only waits.
    fn wait_for_primary_change(&mut self, args: Option<&Document>) -> Step<()> {
        let client = str_arg(args, "client")?.to_string();
        let prior = self.recorded_topology(args)?;
        let ms = arg(args, "timeoutMS")
            .ok()
            .and_then(|v| v.as_i32().map(i64::from).or_else(|| v.as_i64()))
            .unwrap_or(10_000);
        let deadline = Instant::now() + Duration::from_millis(ms.max(0) as u64);
        loop {
            self.drain_events()?;
            let now = self.entities.client(&client)?.log.topology.clone();
            if now.primary.is_some() && now.primary != prior.primary {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Fail(format!(
                    "waitForPrimaryChange: the primary is still {:?} after {ms} ms",
                    now.primary
                )));
            }
            crate::idle(&mut self.guest.store, Duration::from_millis(20))?;
            self.monitor(&client)?;
        }
    }

    fn monitor(&mut self, client: &str) -> Step<()> {
        let handle = self.entities.client(client)?.handle;
        let g = &mut self.guest;
        let api = g.driver.mongo_wasi_driver_client().client();
        let _ = api.call_check_servers(&mut g.store, handle).w()?;
        Ok(())
    }

    fn last_two_lsids(&self, name: &str, log: &EventLog) -> Step<()> {
        let started = log.started_commands();
        let [.., a, b] = started.as_slice() else {
            return Err(Fail(format!(
                "{name}: fewer than two commandStartedEvents observed"
            )));
        };
        let (Some(x), Some(y)) = (a.get("lsid"), b.get("lsid")) else {
            return Err(Fail(format!("{name}: a command has no lsid")));
        };
        match (x == y, name == "assertSameLsidOnLastTwoCommands") {
            (true, true) | (false, false) => Ok(()),
            (false, true) => Err(Fail(format!("{name}: lsids differ: {x} and {y}"))),
            (true, false) => Err(Fail(format!("{name}: both commands used lsid {x}"))),
        }
    }

    fn count_events(&mut self, name: &str, args: Option<&Document>) -> Step<()> {
        let client = str_arg(args, "client")?.to_string();
        let event = arg(args, "event")?
            .as_document()
            .ok_or_else(|| Fail("event is not a document".into()))?;
        let want = arg(args, "count")?
            .as_i32()
            .map(i64::from)
            .or_else(|| arg(args, "count").ok().and_then(Bson::as_i64))
            .ok_or_else(|| Fail("count is not an integer".into()))?;
        let key = event.keys().next().map(String::as_str).unwrap_or_default();
        let (cmap, sdam) = (events::is_cmap_event(key), events::is_sdam_event(key));
        if !cmap && !sdam && !COMMAND_EVENTS.contains(&key) {
            return Err(Fail(format!("{name}: unknown event {key:?}")));
        }
        // A malformed SDAM expectation fails instead of counting nothing.
        let sdam_want = match sdam {
            true => Some(
                events::SdamExpectation::parse(event).map_err(|m| Fail(format!("{name}: {m}")))?,
            ),
            false => None,
        };
        let deadline = Instant::now() + EVENT_WAIT;
        loop {
            let log = &self.entities.client(&client)?.log;
            let seen = if cmap {
                log.cmap
                    .iter()
                    .filter(|e| events::cmap_matches(event, e).is_ok())
                    .count() as i64
            } else if let Some(want) = &sdam_want {
                log.sdam.iter().filter(|e| want.matches(e).is_ok()).count() as i64
            } else {
                log.events
                    .iter()
                    .filter(|e| events::event_matches(event, e, &self.entities).is_ok())
                    .count() as i64
            };
            if seen == want || (name == "waitForEvent" && seen > want) {
                return Ok(());
            }
            if name == "assertEventCount" || Instant::now() >= deadline {
                return Err(Fail(format!(
                    "{name}: {seen} matching {key}, expected {want}"
                )));
            }
            crate::idle(&mut self.guest.store, Duration::from_millis(20))?;
            self.monitor(&client)?;
            self.drain_events()?;
        }
    }

    /// `loop`: runs its operations until the runner asks it to stop, which
    /// spec-runner does after its loop budget (no workload executor sends a signal).
    fn run_loop(&mut self, args: Option<&Document>) -> Step<()> {
        let ops = arg(args, "operations")?
            .as_array()
            .ok_or_else(|| Fail("operations is not an array".into()))?
            .clone();
        let get = |key: &str| args.and_then(|a| a.get_str(key).ok()).map(String::from);
        let (errors, failures) = (get("storeErrorsAsEntity"), get("storeFailuresAsEntity"));
        // This runner does not tell errors from failures: both go to one list.
        let store = failures.clone().or(errors.clone());
        for list in [&errors, &failures].into_iter().flatten() {
            match self.entities.get(list) {
                None => self
                    .entities
                    .insert(list, Entity::Value(Bson::Array(Vec::new())))?,
                Some(Entity::Value(Bson::Array(_))) => {}
                Some(_) => return Err(Fail(format!("loop: entity {list} is not an array"))),
            }
        }
        let stop = Instant::now() + self.loop_budget;
        let (mut successes, mut iterations) = (0i64, 0i64);
        while Instant::now() < stop {
            iterations += 1;
            for op in &ops {
                let op = op
                    .as_document()
                    .ok_or_else(|| Fail("loop: an operation is not a document".into()))?;
                match (self.operation(op), &store) {
                    (Ok(()), _) => successes += 1,
                    (Err(f), Some(list)) => {
                        let entry = doc! { "error": f.0, "time": now_secs() };
                        if let Some(Entity::Value(Bson::Array(a))) = self.entities.get_mut(list) {
                            a.push(entry.into());
                        }
                        break;
                    }
                    (Err(f), None) => return Err(f),
                }
            }
        }
        for (key, n) in [
            ("storeSuccessesAsEntity", successes),
            ("storeIterationsAsEntity", iterations),
        ] {
            if let Some(name) = get(key) {
                self.entities.insert(&name, Entity::Value(Bson::Int64(n)))?;
            }
        }
        Ok(())
    }
}
