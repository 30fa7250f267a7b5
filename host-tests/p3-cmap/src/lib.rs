//! The CMAP spec's cmap-format tests (connection-monitoring-and-pooling/tests/
//! cmap-format/*.json) through mongo-wasi's pool test face on WASI 0.3: the
//! pool of one real server (the failpoint proxy in front of nx-27017), its
//! "threads" as tasks of this one instance.
//!
//! Arguments: `PROXY_PORT DIR [NAME-SUBSTRING]`; DIR is a preopened directory
//! holding the JSON files. Prints one `RESULT {json}` line per file and
//! exits non-zero when a test not listed in [`SKIPS`] fails.

use mongo_wasi::cmap::{Changes, PoolEvent, PoolEventKind as K};
use mongo_wasi::runtime::p3 as rt;
use mongo_wasi::{Client, ClientOptions, Deadline, PooledConnection, RunCommandOptions};
use serde_json::{json, Map, Value};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

/// Tests that cannot pass here, and why (the report lists them as skipped).
const SKIPS: &[(&str, &str)] = &[];

/// The longest a waitForEvent or waitForThread waits without a `timeout` of its own.
const WAIT_BOUND_MS: u64 = 10_000;
/// The longest one test may take.
const TEST_BOUND_MS: u64 = 30_000;

struct Runner;

wasip3::cli::command::export!(Runner);

impl wasip3::exports::cli::run::Guest for Runner {
    async fn run() -> std::result::Result<(), ()> {
        let args: Vec<String> = std::env::args().collect();
        let port: u16 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(0);
        let dir = args.get(2).cloned().unwrap_or_else(|| "/tests".into());
        let filter = args.get(3).cloned().unwrap_or_default();
        match run_all(port, &dir, &filter).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(()),
            Err(e) => {
                println!("CMAP RUNNER FAILED: {e}");
                Err(())
            }
        }
    }
}

type Outcome<T = ()> = std::result::Result<T, String>;

async fn sleep_ms(ms: u64) {
    rt::sleep_until(Deadline::after(rt::now(), Duration::from_millis(ms))).await
}

fn elapsed_ms(since: mongo_wasi::deadline::Instant) -> f64 {
    rt::now().since(since).as_secs_f64() * 1000.0
}

async fn run_all(port: u16, dir: &str, filter: &str) -> Outcome<bool> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{dir}: {e}"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && n.contains(filter))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no test files in {dir}"));
    }
    let server_version = server_version(port).await?;
    let mut ok = true;
    for name in files {
        let text =
            std::fs::read_to_string(format!("{dir}/{name}")).map_err(|e| format!("{name}: {e}"))?;
        let test: Value = serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
        let t = rt::now();
        let (outcome, reason) = match SKIPS.iter().find(|(f, _)| *f == name) {
            Some((_, why)) => ("skip", why.to_string()),
            None => match skip_for_version(&test, &server_version) {
                Some(why) => ("skip", why),
                None => {
                    let bound = async {
                        sleep_ms(TEST_BOUND_MS).await;
                        Err(format!("not done in {TEST_BOUND_MS} ms"))
                    };
                    match futures_lite::future::or(run_test(port, &test), bound).await {
                        Ok(()) => ("pass", String::new()),
                        Err(e) => {
                            ok = false;
                            ("fail", e)
                        }
                    }
                }
            },
        };
        let line = json!({
            "file": name,
            "description": test["description"],
            "outcome": outcome,
            "reason": reason,
            "ms": (elapsed_ms(t) * 10.0).round() / 10.0,
        });
        println!("RESULT {line}");
    }
    Ok(ok)
}

fn admin_client(port: u16) -> Outcome<Client> {
    Client::with_options(
        &format!("mongodb://127.0.0.1:{port}/?directConnection=true"),
        ClientOptions {
            timeout_ms: Some(10_000),
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())
}

async fn admin(port: u16, cmd: bson::RawDocumentBuf) -> Outcome<bson::RawDocumentBuf> {
    let c = admin_client(port)?;
    let r = c
        .database("admin", None)
        .run_command(cmd, &RunCommandOptions::default())
        .await
        .map_err(|e| e.to_string());
    c.close().await;
    r
}

async fn server_version(port: u16) -> Outcome<Vec<u32>> {
    let reply = admin(port, bson::rawdoc! { "buildInfo": 1 }).await?;
    let version = reply
        .get_str("version")
        .map_err(|e| format!("buildInfo: {e}"))?;
    Ok(parse_version(version))
}

fn parse_version(v: &str) -> Vec<u32> {
    v.split('.')
        .map(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

/// `runOn`: skipped unless one entry's version bounds hold.
fn skip_for_version(test: &Value, server: &[u32]) -> Option<String> {
    let run_on = test.get("runOn")?.as_array()?;
    let fits = |r: &Value| {
        let min = r["minServerVersion"].as_str().map(parse_version);
        let max = r["maxServerVersion"].as_str().map(parse_version);
        min.is_none_or(|m| server >= m.as_slice()) && max.is_none_or(|m| server <= m.as_slice())
    };
    match run_on.iter().any(fits) {
        true => None,
        false => Some(format!(
            "runOn {run_on:?} excludes server version {server:?}"
        )),
    }
}

/// The URI options a test's `poolOptions` stand for (backgroundThreadIntervalMS
/// has none: the driver's pool has no periodic background run, and the
/// runner MUST then ignore it).
fn uri_query(options: &Map<String, Value>) -> Outcome<String> {
    let mut out = vec!["directConnection=true".to_string()];
    for (k, v) in options {
        let v = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err(format!("poolOptions.{k}: {other}")),
        };
        match k.as_str() {
            "backgroundThreadIntervalMS" => {}
            "maxPoolSize" | "minPoolSize" | "maxIdleTimeMS" | "waitQueueTimeoutMS"
            | "maxConnecting" | "appName" => out.push(format!("{k}={v}")),
            other => return Err(format!("poolOptions.{other}: not mapped")),
        }
    }
    Ok(out.join("&"))
}

/// One test's pool, connections and event log, shared by its threads.
struct Pool {
    client: Client,
    address: String,
    labelled: RefCell<HashMap<String, PooledConnection>>,
    /// Connections checked out without a label: held until the test ends.
    held: RefCell<Vec<PooledConnection>>,
    /// Every CMAP event so far, as JSON.
    log: RefCell<Vec<Value>>,
}

impl Pool {
    fn pump(&self) {
        let events = self.client.take_pool_events();
        self.log
            .borrow_mut()
            .extend(events.iter().filter_map(event_json));
    }

    fn count(&self, kind: &str) -> usize {
        self.pump();
        self.log
            .borrow()
            .iter()
            .filter(|e| e["type"] == kind)
            .count()
    }
}

/// A CMAP event as the spec tests name and shape it; the pending-response
/// events (a proposal's, not CMAP's) are left out.
fn event_json(e: &PoolEvent) -> Option<Value> {
    let name = match e.kind {
        K::PendingResponseStarted | K::PendingResponseSucceeded | K::PendingResponseFailed => {
            return None
        }
        K::PoolCreated => "ConnectionPoolCreated",
        K::PoolReady => "ConnectionPoolReady",
        K::PoolCleared => "ConnectionPoolCleared",
        K::PoolClosed => "ConnectionPoolClosed",
        K::ConnectionCreated => "ConnectionCreated",
        K::ConnectionReady => "ConnectionReady",
        K::ConnectionClosed => "ConnectionClosed",
        K::ConnectionCheckOutStarted => "ConnectionCheckOutStarted",
        K::ConnectionCheckOutFailed => "ConnectionCheckOutFailed",
        K::ConnectionCheckedOut => "ConnectionCheckedOut",
        K::ConnectionCheckedIn => "ConnectionCheckedIn",
    };
    let mut m = Map::new();
    m.insert("type".into(), name.into());
    m.insert("address".into(), e.server_address.clone().into());
    let per_connection = matches!(
        e.kind,
        K::ConnectionCreated
            | K::ConnectionReady
            | K::ConnectionClosed
            | K::ConnectionCheckedOut
            | K::ConnectionCheckedIn
    );
    if per_connection {
        m.insert("connectionId".into(), e.connection_id.into());
    }
    if let Some(d) = e.duration {
        m.insert("duration".into(), json!(d.as_secs_f64() * 1000.0));
    }
    if let Some(r) = &e.reason {
        m.insert("reason".into(), r.clone().into());
    }
    if let Some(options) = &e.options {
        let doc = bson::Document::try_from(options.as_ref()).unwrap_or_default();
        let options: Map<String, Value> = doc
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), json!(v.as_i64()?))))
            .collect();
        m.insert("options".into(), Value::Object(options));
    }
    if e.kind == K::PoolCleared {
        m.insert(
            "interruptInUseConnections".into(),
            e.interrupt_in_use_connections.into(),
        );
    }
    Some(Value::Object(m))
}

/// The spec's error types, from the driver's errors.
fn error_json(e: &mongo_wasi::Error) -> Value {
    let kind = if e.kind == mongo_wasi::ErrorKind::Closed {
        "PoolClosedError"
    } else if e.is_timeout() && e.message.contains("connection pool") {
        "WaitQueueTimeoutError"
    } else if e.message.contains("was cleared") || e.message.contains("interrupted due to") {
        "PoolClearedError"
    } else {
        "Error"
    };
    json!({ "type": kind, "message": e.message, "kind": format!("{:?}", e.kind) })
}

/// A "thread": a task running the operations given to it, in order.
#[derive(Default)]
struct Thread {
    ops: RefCell<VecDeque<Value>>,
    busy: Cell<bool>,
    error: RefCell<Option<Value>>,
    stop: Cell<bool>,
    changes: Rc<Changes>,
}

impl Thread {
    fn idle(&self) -> bool {
        !self.busy.get() && self.ops.borrow().is_empty()
    }
}

async fn thread_loop(pool: Rc<Pool>, me: Rc<Thread>) {
    loop {
        let changed = Changes::next(&me.changes);
        let op = me.ops.borrow_mut().pop_front();
        match op {
            Some(op) => {
                me.busy.set(true);
                let r = operation(&pool, &op).await;
                if let Err(e) = r {
                    // The first error stays; the thread stops taking work.
                    me.error.borrow_mut().get_or_insert(e);
                    me.ops.borrow_mut().clear();
                }
                me.busy.set(false);
            }
            None if me.stop.get() => return,
            None => changed.await,
        }
    }
}

fn err(message: String) -> Value {
    json!({ "type": "RunnerError", "message": message })
}

/// One operation on `pool`, in the calling thread. The error is the spec's.
async fn operation(pool: &Pool, op: &Value) -> std::result::Result<(), Value> {
    let name = op["name"].as_str().unwrap_or("");
    match name {
        "wait" => sleep_ms(op["ms"].as_u64().unwrap_or(0)).await,
        "checkOut" => {
            let conn = pool
                .client
                .pool_check_out(&pool.address)
                .await
                .map_err(|e| error_json(&e))?;
            match op["label"].as_str() {
                Some(label) => {
                    pool.labelled.borrow_mut().insert(label.to_string(), conn);
                }
                None => pool.held.borrow_mut().push(conn),
            }
        }
        "checkIn" => {
            let label = op["connection"].as_str().unwrap_or("");
            let conn = pool.labelled.borrow_mut().remove(label);
            match conn {
                Some(conn) => pool.client.pool_check_in(conn),
                None => return Err(err(format!("checkIn: no connection {label:?}"))),
            }
        }
        "clear" => {
            let interrupt = op["interruptInUseConnections"].as_bool().unwrap_or(false);
            pool.client.pool_clear(&pool.address, interrupt);
        }
        "close" => pool.client.close().await,
        "ready" => pool.client.pool_ready(&pool.address),
        "waitForEvent" => {
            let event = op["event"].as_str().unwrap_or("");
            let count = op["count"].as_u64().unwrap_or(1) as usize;
            let bound = op["timeout"].as_u64().unwrap_or(WAIT_BOUND_MS);
            let t = rt::now();
            while pool.count(event) < count {
                if elapsed_ms(t) > bound as f64 {
                    return Err(err(format!(
                        "waitForEvent: {} {event} of {count} in {bound} ms",
                        pool.count(event)
                    )));
                }
                sleep_ms(2).await;
            }
        }
        other => return Err(err(format!("unknown operation {other:?}"))),
    }
    Ok(())
}

/// Spec "MATCH": `expected` a subset of `actual`, 42 and "42" any value.
fn matches(expected: &Value, actual: Option<&Value>, path: &str) -> Outcome {
    let any = matches!(expected, Value::Number(n) if n.as_i64() == Some(42))
        || expected.as_str() == Some("42");
    let Some(actual) = actual.filter(|a| !a.is_null()) else {
        return Err(format!("{path}: missing, expected {expected}"));
    };
    if any {
        return Ok(());
    }
    match (expected, actual) {
        (Value::Array(e), Value::Array(a)) => {
            for (i, v) in e.iter().enumerate() {
                matches(v, a.get(i), &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                matches(v, a.get(k), &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => Ok(()),
        (e, a) if e == a => Ok(()),
        (e, a) => Err(format!("{path}: expected {e}, got {a}")),
    }
}

/// A JSON value as BSON (integers as int32 when they fit).
fn to_bson(v: &Value) -> bson::Bson {
    use bson::Bson;
    match v {
        Value::Null => Bson::Null,
        Value::Bool(b) => Bson::Boolean(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i32::try_from(i).map_or(Bson::Int64(i), Bson::Int32),
            (None, Some(f)) => Bson::Double(f),
            _ => Bson::Null,
        },
        Value::String(s) => Bson::String(s.clone()),
        Value::Array(a) => Bson::Array(a.iter().map(to_bson).collect()),
        Value::Object(m) => {
            Bson::Document(m.iter().map(|(k, v)| (k.clone(), to_bson(v))).collect())
        }
    }
}

async fn run_test(port: u16, test: &Value) -> Outcome {
    let fail_point = test.get("failPoint").cloned();
    if let Some(fp) = &fail_point {
        let bson::Bson::Document(doc) = to_bson(fp) else {
            return Err(format!("failPoint: not a document: {fp}"));
        };
        let cmd = bson::RawDocumentBuf::try_from(&doc).map_err(|e| format!("failPoint: {e}"))?;
        admin(port, cmd)
            .await
            .map_err(|e| format!("failPoint: {e}"))?;
    }
    let result = run_operations(port, test).await;
    if let Some(fp) = &fail_point {
        let name = fp["configureFailPoint"].as_str().unwrap_or("failCommand");
        let off = bson::rawdoc! { "configureFailPoint": name, "mode": "off" };
        admin(port, off)
            .await
            .map_err(|e| format!("failPoint off: {e}"))?;
    }
    result
}

async fn run_operations(port: u16, test: &Value) -> Outcome {
    let empty = Map::new();
    let options = test["poolOptions"].as_object().unwrap_or(&empty);
    let uri = format!("mongodb://127.0.0.1:{port}/?{}", uri_query(options)?);
    let client = Client::with_options(
        &uri,
        ClientOptions {
            monitor_commands: true,
            ..Default::default()
        },
    )
    .map_err(|e| format!("{uri}: {e}"))?;
    let pool = Rc::new(Pool {
        client,
        address: format!("127.0.0.1:{port}"),
        labelled: RefCell::default(),
        held: RefCell::default(),
        log: RefCell::default(),
    });
    // "Create a Pool": its creation is the first event.
    pool.client.pool_create(&pool.address);
    let mut threads: HashMap<String, Rc<Thread>> = HashMap::new();
    let mut main_error: Option<Value> = None;
    let ops = test["operations"].as_array().cloned().unwrap_or_default();
    for op in &ops {
        let r = match (op["name"].as_str(), op["thread"].as_str()) {
            (Some("start"), _) => {
                let target = op["target"].as_str().unwrap_or("").to_string();
                let thread = Rc::new(Thread::default());
                drop(wasip3::spawn_local(thread_loop(
                    pool.clone(),
                    thread.clone(),
                )));
                threads.insert(target, thread);
                Ok(())
            }
            (Some("waitForThread"), _) => {
                let target = op["target"].as_str().unwrap_or("");
                match threads.get(target) {
                    None => Err(err(format!("waitForThread: no thread {target:?}"))),
                    Some(thread) => {
                        let t = rt::now();
                        let mut r = Ok(());
                        while !thread.idle() {
                            if elapsed_ms(t) > WAIT_BOUND_MS as f64 {
                                r = Err(err(format!("waitForThread {target}: still running")));
                                break;
                            }
                            sleep_ms(2).await;
                        }
                        match thread.error.borrow_mut().take() {
                            Some(e) => Err(e),
                            None => r,
                        }
                    }
                }
            }
            (_, Some(target)) => match threads.get(target) {
                None => Err(err(format!("no thread {target:?}"))),
                Some(thread) => {
                    thread.ops.borrow_mut().push_back(op.clone());
                    thread.changes.notify();
                    // Let it begin (as a thread would) before the next operation.
                    sleep_ms(1).await;
                    Ok(())
                }
            },
            (_, None) => operation(&pool, op).await,
        };
        if let Err(e) = r {
            main_error = Some(e);
            break;
        }
    }
    pool.pump();
    let log = pool.log.borrow().clone();
    // Stop the threads and the pool (a checkout still waiting fails on close).
    for thread in threads.values() {
        thread.stop.set(true);
        thread.changes.notify();
    }
    pool.client.close().await;
    pool.labelled.borrow_mut().clear();
    pool.held.borrow_mut().clear();

    match (test.get("error"), &main_error) {
        (Some(expected), Some(actual)) => {
            // The type is the spec's; the message is each driver's own wording.
            matches(&json!({ "type": expected["type"] }), Some(actual), "error")?;
        }
        (Some(expected), None) => return Err(format!("expected error {expected}, got none")),
        (None, Some(actual)) => return Err(format!("unexpected error {actual}")),
        (None, None) => {}
    }
    let ignore: Vec<&str> = test["ignore"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let actual: Vec<Value> = log
        .into_iter()
        .filter(|e| !ignore.contains(&e["type"].as_str().unwrap_or("")))
        .collect();
    let expected = test["events"].as_array().cloned().unwrap_or_default();
    for (i, e) in expected.iter().enumerate() {
        matches(e, actual.get(i), &format!("events[{i}]")).map_err(|m| {
            let types: Vec<&str> = actual.iter().filter_map(|a| a["type"].as_str()).collect();
            format!("{m}; actual events {types:?}")
        })?;
    }
    Ok(())
}
