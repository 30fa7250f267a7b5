//! http-handler-p3: the JSON API of `examples/http-handler` as a WASI 0.3
//! `wasi:http/handler`, on the driver's Rust async API (feature `p3`) rather
//! than the composed 0.2 component. Built on its own (not a workspace
//! member: the workspace's default `component` feature excludes `p3`):
//!
//!   cargo build --manifest-path examples/http-handler-p3/Cargo.toml --target wasm32-wasip2 --release
//!   wasmtime serve -S cli -S inherit-network --addr 127.0.0.1:8080 \
//!     --env MONGODB_URI='mongodb://127.0.0.1:27017/?timeoutMS=2000' \
//!     examples/http-handler-p3/target/wasm32-wasip2/release/http_handler_p3.wasm
//!
//! (`-S cli`: Rust std still imports WASI 0.2; `-S inherit-network`: TCP to MongoDB.)
//!
//! - `GET /items`: the first 100 documents, as a JSON array (relaxed extended JSON);
//! - `POST /items` with a JSON object: inserts it, answers 201 `{"id": "<hex>"}`;
//! - `GET /items/<id>`: that document, or 404;
//! - `GET /health`: `{"ok": true}`, without touching MongoDB.
//!
//! Every answer carries `x-instance-id`, a random id made once per instance,
//! so a test can count the instances the host started, and, once the
//! instance has a client, `x-scram-derivations`: its PBKDF2 runs.
//!
//! Warm state, as http-handler: with `--dir <host dir>::/warm --env
//! WARM_STATE=/warm/mongo-wasi`, the client adopts the blob in that file
//! and writes its own back after a successful operation (the file is as
//! secret as the password).
//!
//! `wasmtime serve` gives a 0.3 handler up to 16 requests at once per
//! instance and reuses an instance for up to 128 requests: they all share
//! the instance's one client, its topology and its connection pool (a
//! checkout waits when the pool is at maxPoolSize). The client is made at
//! the instance's first request; no `RefCell` borrow is held across an
//! await (a request clones the `Client`, an `Rc`, out of the cell).

// The wasi:http export names link only into a wasm component.
#![cfg(target_arch = "wasm32")]

use bson::oid::ObjectId;
use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use mongo_wasi::{Client, ClientOptions, Collection, Error, ErrorKind, FindOptions, OpOptions};
use std::cell::{OnceCell, RefCell};
use std::io::Read;
use wasip3::http::types::{ErrorCode, Fields, Method, Request, Response};
use wasip3::wit_bindgen::StreamResult;
use wasip3::{wit_future, wit_stream};

wasip3::http::service::export!(Handler);

const DATABASE: &str = "http_example";
const COLLECTION: &str = "items";
/// The largest request body accepted.
const MAX_BODY: usize = 64 * 1024;
/// Documents `GET /items` returns at most.
const LIST_LIMIT: i64 = 100;

thread_local! {
    /// This instance's client, made at its first request, shared by every
    /// request the instance serves (concurrent ones too).
    static CLIENT: OnceCell<Client> = const { OnceCell::new() };
    /// This instance's random id, answered in `x-instance-id`.
    static INSTANCE_ID: String = format!("{:016x}", wasip3::random::random::get_random_u64());
    /// The warm state last read from or written to the `WARM_STATE` file.
    static WARM_SAVED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

struct Handler;

impl wasip3::exports::http::handler::Guest for Handler {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let (status, body) = match route(request).await {
            Ok(answer) => answer,
            Err(Failure::Own(status, message)) => (status, json(&doc! { "error": message })),
            Err(Failure::Driver(status, kind, message)) => {
                (status, json(&doc! { "error": message, "kind": kind }))
            }
        };
        Ok(respond(status, body))
    }
}

/// An HTTP status and what went wrong: the handler's own words, or the
/// driver's error with its kind as the WIT names it (as http-handler does).
enum Failure {
    Own(u16, String),
    Driver(u16, &'static str, String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let (status, kind) = match e.kind {
            ErrorKind::Timeout => (504, "timeout"),
            ErrorKind::ServerSelection => (504, "server-selection"),
            ErrorKind::InvalidArgument => (400, "invalid-argument"),
            // A unique index refused the write: the client's conflict.
            ErrorKind::DuplicateKey => (409, "duplicate-key"),
            ErrorKind::Network => (502, "network"),
            ErrorKind::Server => (502, "server"),
            ErrorKind::NotImplemented => (502, "not-implemented"),
            ErrorKind::Protocol => (502, "protocol"),
            ErrorKind::Closed => (502, "closed"),
            ErrorKind::Authentication => (502, "authentication"),
            ErrorKind::AccessDenied => (502, "access-denied"),
            ErrorKind::WriteConcern => (502, "write-concern"),
        };
        Failure::Driver(status, kind, e.message)
    }
}

async fn route(request: Request) -> Result<(u16, Vec<u8>), Failure> {
    let path = request.get_path_with_query().unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default().to_string();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let answer = match (request.get_method(), segments.as_slice()) {
        // Liveness, without MongoDB: what the platform alone costs per request.
        (Method::Get, ["health"]) => return Ok((200, json(&doc! { "ok": true }))),
        (Method::Get, ["items"]) => list(&items()?).await,
        (Method::Post, ["items"]) => {
            let body = read_body(request).await?;
            add(&items()?, &body).await
        }
        (Method::Get, ["items", id]) => get(&items()?, id).await,
        (_, ["items"] | ["items", _]) => Err(Failure::Own(405, "method not allowed".into())),
        _ => Err(Failure::Own(404, format!("no route for {path}"))),
    }?;
    save_warm_state();
    Ok(answer)
}

/// The largest warm state file read (the driver refuses larger blobs).
const MAX_WARM_STATE: u64 = 64 * 1024;

/// The `WARM_STATE` file's path, if the host gave one.
fn warm_state_path() -> Option<String> {
    std::env::var("WARM_STATE").ok().filter(|p| !p.is_empty())
}

/// Hands the `WARM_STATE` file's blob to a new client. No file yet, or one
/// the driver does not take (damaged, another format): a cold start.
fn adopt_warm_state(client: &Client) {
    let Some(path) = warm_state_path() else {
        return;
    };
    let mut blob = Vec::new();
    let read = std::fs::File::open(&path)
        .and_then(|file| file.take(MAX_WARM_STATE + 1).read_to_end(&mut blob));
    if read.is_ok() && client.adopt_warm_state(&blob).is_ok() {
        WARM_SAVED.with(|saved| *saved.borrow_mut() = blob);
    }
}

/// Writes the instance's client's warm state to the `WARM_STATE` file when
/// it holds something new: whole to a file of its own, then renamed over
/// the old one, so an instance never reads half a blob. Best effort.
fn save_warm_state() {
    let Some(path) = warm_state_path() else {
        return;
    };
    let Some(blob) = CLIENT.with(|cell| cell.get().map(Client::warm_state)) else {
        return;
    };
    if WARM_SAVED.with(|saved| *saved.borrow() == blob) {
        return;
    }
    let part = format!("{path}.{:016x}", wasip3::random::random::get_random_u64());
    if std::fs::write(&part, &blob).is_ok() && std::fs::rename(&part, &path).is_ok() {
        WARM_SAVED.with(|saved| *saved.borrow_mut() = blob);
    } else {
        let _ = std::fs::remove_file(&part);
    }
}

async fn list(items: &Collection) -> Result<(u16, Vec<u8>), Failure> {
    let options = FindOptions {
        limit: Some(LIST_LIMIT),
        ..FindOptions::default()
    };
    let mut cursor = items.find(RawDocumentBuf::new(), &options).await?;
    let mut all = Vec::new();
    loop {
        let batch = cursor.next_batch().await?;
        for raw in &batch.documents {
            all.push(Bson::Document(decode(raw)?).into_relaxed_extjson());
        }
        if batch.exhausted || all.len() as i64 >= LIST_LIMIT {
            break;
        }
    }
    // A cursor closed before exhaustion is killed at once, not left to the server.
    let _ = cursor.close(None).await;
    Ok((200, serde_json::to_vec(&all).unwrap_or_default()))
}

async fn add(items: &Collection, body: &[u8]) -> Result<(u16, Vec<u8>), Failure> {
    let bad = |e: String| Failure::Own(400, e);
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    let serde_json::Value::Object(map) = value else {
        return Err(bad("expected a JSON object".into()));
    };
    let document = Document::try_from(map).map_err(|e| bad(e.to_string()))?;
    let inserted = items
        .insert_one(&to_raw(&document)?, &OpOptions::default())
        .await?;
    // The document's own `_id`, else the ObjectId the driver added, as hex.
    let id = match Bson::try_from(inserted) {
        Ok(Bson::ObjectId(oid)) => Bson::String(oid.to_hex()),
        Ok(other) => other,
        Err(e) => return Err(Failure::Own(502, format!("malformed _id: {e}"))),
    };
    Ok((201, json(&doc! { "id": id })))
}

async fn get(items: &Collection, id: &str) -> Result<(u16, Vec<u8>), Failure> {
    // An ObjectId in hex, else the `_id` as a string.
    let id = ObjectId::parse_str(id).map_or_else(|_| Bson::String(id.into()), Bson::ObjectId);
    let filter = to_raw(&doc! { "_id": id })?;
    match items.find_one(filter, &FindOptions::default()).await? {
        Some(raw) => Ok((200, json(&decode(&raw)?))),
        None => Err(Failure::Own(404, "no such item".into())),
    }
}

/// The collection on this instance's client, making the client first if
/// needed. Only a clone of the client leaves the cell: nothing here is
/// borrowed across the caller's awaits.
fn items() -> Result<Collection, Failure> {
    let client = CLIENT.with(|cell| -> Result<Client, Failure> {
        if let Some(client) = cell.get() {
            return Ok(client.clone());
        }
        let uri = std::env::var("MONGODB_URI")
            .map_err(|_| Failure::Own(500, "MONGODB_URI is not set".into()))?;
        // No I/O yet: the first operation connects, under its deadline. The
        // URI's timeoutMS bounds each operation (set one: a handler should not wait 30 s).
        let client = Client::with_options(&uri, ClientOptions::default())?;
        adopt_warm_state(&client);
        Ok(cell.get_or_init(|| client).clone())
    })?;
    Ok(client.database(DATABASE, None).collection(COLLECTION, None))
}

/// The request body, refused past `MAX_BODY` bytes without reading it all.
async fn read_body(request: Request) -> Result<Vec<u8>, Failure> {
    let (done_tx, done_rx) = wit_future::new(|| Ok(()));
    let (mut stream, _trailers) = Request::consume_body(request, done_rx);
    let mut bytes = Vec::with_capacity(4096);
    loop {
        if bytes.len() > MAX_BODY {
            return Err(Failure::Own(413, format!("body over {MAX_BODY} bytes")));
        }
        if bytes.len() == bytes.capacity() {
            bytes.reserve((MAX_BODY + 1 - bytes.len()).min(16 * 1024));
        }
        let (status, buf) = stream.read(bytes).await;
        bytes = buf;
        match status {
            StreamResult::Complete(_) => {}
            StreamResult::Dropped => break,
            StreamResult::Cancelled => {
                return Err(Failure::Own(400, "unreadable request body".into()))
            }
        }
    }
    drop(done_tx);
    Ok(bytes)
}

/// The response; its body is written by a task of its own once the host
/// reads it (after `handle` returns).
fn respond(status: u16, body: Vec<u8>) -> Response {
    let instance = INSTANCE_ID.with(|id| id.clone().into_bytes());
    let mut headers = vec![
        ("content-type".into(), b"application/json".to_vec()),
        ("content-length".into(), body.len().to_string().into_bytes()),
        ("x-instance-id".into(), instance),
    ];
    if let Some(runs) = CLIENT.with(|cell| cell.get().map(Client::scram_derivations)) {
        headers.push(("x-scram-derivations".into(), runs.to_string().into_bytes()));
    }
    let headers = Fields::from_list(&headers).expect("valid header names and values");
    let (mut body_tx, body_rx) = wit_stream::new();
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    drop(trailers_tx);
    let (response, _sent) = Response::new(headers, Some(body_rx), trailers_rx);
    let _ = response.set_status_code(status);
    wasip3::spawn_local(async move {
        // The client may have gone: nothing to do about what is left.
        let _ = body_tx.write_all(body).await;
    });
    response
}

fn to_raw(document: &Document) -> Result<RawDocumentBuf, Failure> {
    let bad = |e: String| Failure::Own(400, e);
    let bytes = document.to_vec().map_err(|e| bad(e.to_string()))?;
    RawDocumentBuf::from_bytes(bytes).map_err(|e| bad(e.to_string()))
}

fn decode(raw: &RawDocument) -> Result<Document, Failure> {
    Document::try_from(raw)
        .map_err(|e| Failure::Own(502, format!("malformed document from the driver: {e}")))
}

fn json(document: &Document) -> Vec<u8> {
    let value = Bson::Document(document.clone()).into_relaxed_extjson();
    serde_json::to_vec(&value).unwrap_or_default()
}
