//! `runOnThread` and `waitForThread` on the WASI 0.3 face.
//!
//! The runner's own calls are sync-shaped (`call_x(store, ..)` then `.w()`),
//! one at a time. A thread's operation is instead started as a concurrent
//! call (`TypedFunc::call_concurrent`) inside a task spawned into the store
//! (`Store::spawn`): it lives in the store's event loop, so it goes on
//! whenever the store runs, i.e. during every later call of the main
//! sequence (wasmtime runs each of them with `run_concurrent`) and during the
//! runner's waits (`crate::idle`). One task per thread runs that thread's
//! operations in order. Each finished operation leaves its raw WIT result;
//! `waitForThread` waits for all of them, then converts and checks each as
//! the main sequence checks its own (`expectResult`, `expectError`, ...).
//!
//! Only the operations the spec tests run on threads have a concurrent form
//! here (insertOne, updateOne, find, runCommand); any other fails the test
//! with that reason.

use super::collection::{find_options, typed_options, update_result, update_spec};
use super::database::{command_reply, run_command_args};
use super::{decode, output, unwrap_v, OpResult, Output, OP_KEYS};
use crate::bindings::exports::mongo_wasi::driver::collection::{
    FindOptions, OpOptions, UpdateSpec,
};
use crate::bindings::exports::mongo_wasi::driver::database::RunCommandOptions;
use crate::bindings::exports::mongo_wasi::driver::types::{
    Batch, Error as WitError, InsertOneResult, UpdateResult,
};
use crate::unified::args::{bytes, Args};
use crate::unified::entities::Entity;
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use crate::HostState;
use bson::{doc, Bson, Document};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use wasmtime::component::{
    Accessor, AccessorTask, ComponentNamedList, JoinHandle, Lift, Lower, ResourceAny, TypedFunc,
};

/// How long `waitForThread` waits for a thread's operations.
const THREAD_WAIT: Duration = Duration::from_secs(30);
/// How often `waitForThread` looks again while the store's event loop runs.
const POLL: Duration = Duration::from_millis(2);
/// More batches than any spec test needs (as `cursor::drain`).
const MAX_BATCHES: usize = 10_000;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A finished operation's raw result, turned into the operation's result on
/// the main sequence (which may drop resources, decode, match).
type Outcome = Box<dyn FnOnce(&mut TestRun) -> Step<OpResult> + Send>;

/// One operation's calls, made through the store's accessor.
type Work = Box<
    dyn for<'a> FnOnce(&'a Accessor<HostState>) -> BoxFuture<'a, wasmtime::Result<Outcome>> + Send,
>;

fn work<F>(f: F) -> Work
where
    F: for<'a> FnOnce(&'a Accessor<HostState>) -> BoxFuture<'a, wasmtime::Result<Outcome>>
        + Send
        + 'static,
{
    Box::new(f)
}

fn outcome(f: impl FnOnce(&mut TestRun) -> Step<OpResult> + Send + 'static) -> Outcome {
    Box::new(f)
}

/// What a thread's task has finished: each operation with its outcome, or
/// why its calls failed (a trap, the time cap).
type Finished = Arc<Mutex<Vec<(Document, Result<Outcome, String>)>>>;

struct Thread {
    queue: mpsc::UnboundedSender<(Document, Work)>,
    finished: Finished,
    /// Operations given to the thread and not yet checked by `waitForThread`.
    pending: usize,
    task: JoinHandle,
}

/// The tasks of the test's thread entities, each started by the thread's
/// first operation.
#[derive(Default)]
pub struct Threads {
    map: HashMap<String, Thread>,
}

impl Threads {
    /// Ends every thread's task (a call in flight cancelled).
    pub fn stop(&mut self) {
        for (_, t) in self.map.drain() {
            t.task.abort();
        }
    }
}

/// Runs one thread's operations in order, each to its end.
struct Worker {
    queue: mpsc::UnboundedReceiver<(Document, Work)>,
    finished: Finished,
}

impl AccessorTask<HostState> for Worker {
    async fn run(mut self, accessor: &Accessor<HostState>) -> wasmtime::Result<()> {
        while let Some((op, work)) = self.queue.recv().await {
            let result = work(accessor).await.map_err(|e| Fail::from(e).0);
            self.finished
                .lock()
                .map_err(|_| wasmtime::format_err!("a thread's result list is poisoned"))?
                .push((op, result));
        }
        Ok(())
    }
}

impl TestRun {
    /// The export `func` of `interface`, typed.
    fn typed<P, R>(&mut self, interface: &str, func: &str) -> Step<TypedFunc<P, R>>
    where
        P: ComponentNamedList + Lower + Send + Sync + 'static,
        R: ComponentNamedList + Lift + Send + Sync + 'static,
    {
        let g = &mut self.guest;
        let f = g.driver.func(&mut g.store, interface, func)?;
        Ok(f.typed::<P, R>(&g.store)?)
    }

    /// `runOnThread`: the operation is queued on the thread and starts now.
    pub(super) fn run_on_thread(&mut self, thread: &str, op: &Document) -> Step<()> {
        if let Some(k) = op.keys().find(|k| !OP_KEYS.contains(&k.as_str())) {
            return Err(Fail(format!("unknown operation field {k:?}")));
        }
        if !matches!(self.entities.get(thread), Some(Entity::Thread)) {
            return Err(Fail(format!("runOnThread: no thread entity {thread:?}")));
        }
        let work = self.thread_work(op)?;
        if !self.threads.map.contains_key(thread) {
            let (queue, rx) = mpsc::unbounded_channel();
            let finished = Finished::default();
            let worker = Worker {
                queue: rx,
                finished: finished.clone(),
            };
            let task = self.guest.store.spawn(worker)?;
            let t = Thread {
                queue,
                finished,
                pending: 0,
                task,
            };
            self.threads.map.insert(thread.to_string(), t);
        }
        let Some(t) = self.threads.map.get_mut(thread) else {
            return Err(Fail(format!("runOnThread: no thread entity {thread:?}")));
        };
        t.queue
            .send((op.clone(), work))
            .map_err(|_| Fail(format!("runOnThread: thread {thread} has stopped")))?;
        t.pending += 1;
        Ok(())
    }

    /// `waitForThread`: the store runs until the thread has finished every
    /// operation given to it; then each is checked, and the first that
    /// failed fails the test.
    pub(super) fn wait_for_thread(&mut self, thread: &str) -> Step<()> {
        if !matches!(self.entities.get(thread), Some(Entity::Thread)) {
            return Err(Fail(format!("waitForThread: no thread entity {thread:?}")));
        }
        let (finished, pending) = match self.threads.map.get(thread) {
            None => return Ok(()),
            Some(t) => (t.finished.clone(), t.pending),
        };
        let count = || finished.lock().map(|f| f.len()).unwrap_or(usize::MAX);
        let deadline = Instant::now() + THREAD_WAIT;
        while count() < pending {
            if Instant::now() >= deadline {
                return Err(Fail(format!(
                    "waitForThread: thread {thread} finished {} of {pending} operations in {} s",
                    count(),
                    THREAD_WAIT.as_secs()
                )));
            }
            crate::idle(&mut self.guest.store, POLL)?;
        }
        let done = std::mem::take(
            &mut *finished
                .lock()
                .map_err(|_| Fail("a thread's result list is poisoned".into()))?,
        );
        if let Some(t) = self.threads.map.get_mut(thread) {
            t.pending = 0;
        }
        self.drain_events()?;
        let mut first_failure = None;
        for (op, result) in done {
            let name = op.get_str("name").unwrap_or("operation").to_string();
            let checked = result.map_err(Fail).and_then(|outcome| {
                let result = outcome(self)?;
                self.check_result(&name, &op, result)
            });
            if let Err(f) = checked {
                first_failure.get_or_insert(Fail(format!("thread {thread}: {}", f.0)));
            }
        }
        match first_failure {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    /// A thread's operation, its arguments read now, as calls to make later.
    fn thread_work(&mut self, op: &Document) -> Step<Work> {
        let name = op
            .get_str("name")
            .map_err(|_| Fail("runOnThread: an operation without a name".into()))?;
        let object = op
            .get_str("object")
            .map_err(|_| Fail(format!("runOnThread: {name} without an object")))?;
        let args = match op.get("arguments") {
            None => None,
            Some(Bson::Document(d)) => Some(d),
            Some(_) => return Err(Fail(format!("{name}: arguments is not a document"))),
        };
        let mut args = Args::new(name, args);
        let unsupported = || {
            Fail(format!(
                "runOnThread: {name} on {object:?} has no concurrent form in this runner \
                 (insertOne, updateOne, find, runCommand)"
            ))
        };
        let handle = match self.entities.get(object) {
            Some(Entity::Collection(c)) => c.handle,
            Some(Entity::Database(d)) => d.handle,
            Some(_) => return Err(unsupported()),
            None => return Err(Fail(format!("{name}: no entity named {object:?}"))),
        };
        let is_collection = matches!(self.entities.get(object), Some(Entity::Collection(_)));
        let session = self.session_arg(&mut args)?;
        match (is_collection, name) {
            (true, "insertOne") => {
                let d = bytes(&args.req_doc("document")?)?;
                let o = typed_options(&mut args, session)?;
                let f = self.typed::<(ResourceAny, Vec<u8>, OpOptions), (Result<InsertOneResult, WitError>,)>(
                    "collection",
                    "[method]collection.insert-one",
                )?;
                Ok(work(move |a| {
                    Box::pin(async move {
                        let (r,) = f.call_concurrent(a, (handle, d, o)).await?;
                        Ok(outcome(move |_| {
                            output(r, |r| {
                                let id = unwrap_v(&r.inserted_id, "inserted-id")?;
                                Ok(Output::Value(doc! { "insertedId": id }.into()))
                            })
                        }))
                    })
                }))
            }
            (true, "updateOne") => {
                let filter = bytes(&args.req_doc("filter")?)?;
                let update = update_spec(&mut args, "update")?;
                let o = typed_options(&mut args, session)?;
                type P = (ResourceAny, Vec<u8>, UpdateSpec, OpOptions);
                let f = self.typed::<P, (Result<UpdateResult, WitError>,)>(
                    "collection",
                    "[method]collection.update-one",
                )?;
                Ok(work(move |a| {
                    Box::pin(async move {
                        let (r,) = f.call_concurrent(a, (handle, filter, update, o)).await?;
                        Ok(outcome(move |_| output(r, update_result)))
                    })
                }))
            }
            (true, "find") => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let o = find_options(&mut args, session)?;
                let find = self
                    .typed::<(ResourceAny, Vec<u8>, FindOptions), (Result<ResourceAny, WitError>,)>(
                        "collection",
                        "[method]collection.find",
                    )?;
                let next = self.typed::<(ResourceAny,), (Result<Batch, WitError>,)>(
                    "cursor",
                    "[method]cursor.next-batch",
                )?;
                let close = self.typed::<(ResourceAny, Option<u64>), (Result<(), WitError>,)>(
                    "cursor",
                    "[method]cursor.close",
                )?;
                Ok(work(move |a| {
                    Box::pin(async move {
                        let cursor = match find.call_concurrent(a, (handle, filter, o)).await? {
                            (Ok(c),) => c,
                            (Err(e),) => return Ok(outcome(move |_| Ok(Err(e.into())))),
                        };
                        let mut docs = Vec::new();
                        for _ in 0..MAX_BATCHES {
                            let batch = match next.call_concurrent(a, (cursor,)).await? {
                                (Ok(b),) => b,
                                (Err(e),) => {
                                    // As `cursor::drain`: closed before its resource is dropped.
                                    let _ = close.call_concurrent(a, (cursor, None)).await;
                                    return Ok(outcome(move |run| {
                                        let _ = crate::drop_resource(cursor, &mut run.guest.store);
                                        Ok(Err(e.into()))
                                    }));
                                }
                            };
                            docs.extend(batch.documents);
                            if batch.exhausted {
                                return Ok(outcome(move |run| {
                                    crate::drop_resource(cursor, &mut run.guest.store)?;
                                    let docs: Step<Vec<Document>> = docs
                                        .iter()
                                        .map(|d| decode(d, "a cursor document"))
                                        .collect();
                                    Ok(Ok(Output::Documents(docs?)))
                                }));
                            }
                        }
                        Err(wasmtime::format_err!(
                            "a cursor was not exhausted after {MAX_BATCHES} batches"
                        ))
                    })
                }))
            }
            (false, "runCommand") => {
                let (command, o) = run_command_args(args, session)?;
                type P = (ResourceAny, Vec<u8>, RunCommandOptions);
                let f = self.typed::<P, (Result<Vec<u8>, WitError>,)>(
                    "database",
                    "[method]database.run-command",
                )?;
                Ok(work(move |a| {
                    Box::pin(async move {
                        let (r,) = f.call_concurrent(a, (handle, command, o)).await?;
                        Ok(outcome(move |_| output(r, command_reply)))
                    })
                }))
            }
            _ => Err(unsupported()),
        }
    }
}
