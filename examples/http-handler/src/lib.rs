//! http-handler: a `wasi:http/incoming-handler` component serving a small
//! JSON API over one collection, through the driver's WIT imports. Composed
//! with the driver component (`cargo xtask build` does) it runs under
//! `wasmtime serve`:
//!
//!   wasmtime serve -S cli -S inherit-network --addr 127.0.0.1:8080 \
//!     --env MONGODB_URI='mongodb://127.0.0.1:27017/?timeoutMS=2000' target/examples/http-handler.wasm
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
//! Warm state: with `--dir <host dir>::/warm --env WARM_STATE=/warm/mongo-wasi`,
//! an instance's client adopts the blob in that file (SCRAM keys, a
//! `mongodb+srv` URI's SRV/TXT answers) and writes its own back after a
//! successful operation, so the next cold instance skips PBKDF2 and the SRV
//! lookups. The file is as secret as the password: give it a directory only
//! this handler's host can read.
//!
//! `wasmtime serve` makes a new instance for every request by default, so
//! each request is a cold start: the client connects lazily, at its first
//! operation, on one connection with one `hello`. A host that reuses
//! instances (`--max-instance-reuse-count N`) reuses the client below and
//! its pooled connection too.

// The wasi:http export names link only into a wasm component (a native
// `cargo build --workspace` builds an empty library).
#![cfg(target_arch = "wasm32")]

wasi::http::proxy::export!(Handler);

wit_bindgen::generate!({
    inline: "
        package example:http-handler;
        world handler { include mongo-wasi:driver/imports@0.2.0; }
    ",
    // The driver's WIT package. An adopter vendors it under its own `wit/deps/`.
    path: "../../wit",
    generate_all,
});

use bson::oid::ObjectId;
use bson::{doc, Bson, Document, RawDocument};
use mongo_wasi::driver::client::{Client, ClientOptions};
use mongo_wasi::driver::collection::{Collection, FindOptions, OpOptions};
use mongo_wasi::driver::database::CollectionOptions;
use mongo_wasi::driver::types::{Error, ErrorKind};
use std::cell::{OnceCell, RefCell};
use std::io::{Read, Write};
use wasi::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

const DATABASE: &str = "http_example";
const COLLECTION: &str = "items";
/// The largest request body accepted.
const MAX_BODY: u64 = 64 * 1024;
/// Documents `GET /items` returns at most.
const LIST_LIMIT: i64 = 100;

thread_local! {
    /// This instance's client, made at its first request.
    static CLIENT: OnceCell<Client> = const { OnceCell::new() };
    /// This instance's random id, answered in `x-instance-id`.
    static INSTANCE_ID: String = format!("{:016x}", wasi::random::random::get_random_u64());
    /// The warm state last read from or written to the `WARM_STATE` file.
    static WARM_SAVED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

struct Handler;

impl wasi::exports::http::incoming_handler::Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let (status, body) = match route(&request) {
            Ok(answer) => answer,
            Err(Failure::Own(status, message)) => (status, json(&doc! { "error": message })),
            Err(Failure::Driver(status, kind, message)) => {
                (status, json(&doc! { "error": message, "kind": kind }))
            }
        };
        respond(out, status, &body);
    }
}

/// An HTTP status and what went wrong: the handler's own words, or the
/// driver's error with its kind as the WIT names it.
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

fn route(request: &IncomingRequest) -> Result<(u16, Vec<u8>), Failure> {
    let path = request.path_with_query().unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match (request.method(), segments.as_slice()) {
        // Liveness, without MongoDB: what the platform alone costs per request.
        (Method::Get, ["health"]) => Ok((200, json(&doc! { "ok": true }))),
        (Method::Get, ["items"]) => with_items(list),
        (Method::Post, ["items"]) => {
            let body = read_body(request)?;
            with_items(|items| add(items, &body))
        }
        (Method::Get, ["items", id]) => with_items(|items| get(items, id)),
        (_, ["items"] | ["items", _]) => Err(Failure::Own(405, "method not allowed".into())),
        _ => Err(Failure::Own(404, format!("no route for {path}"))),
    }
}

fn list(items: &Collection) -> Result<(u16, Vec<u8>), Failure> {
    let options = FindOptions {
        limit: Some(LIST_LIMIT),
        ..find_options()
    };
    let cursor = items.find(&to_bytes(&doc! {})?, &options)?;
    let mut all = Vec::new();
    loop {
        let batch = cursor.next_batch()?;
        for raw in &batch.documents {
            all.push(Bson::Document(decode(raw)?).into_relaxed_extjson());
        }
        if batch.exhausted || all.len() as i64 >= LIST_LIMIT {
            break;
        }
    }
    // A cursor closed before exhaustion is killed at once, not left to the server.
    let _ = cursor.close(None);
    Ok((200, serde_json::to_vec(&all).unwrap_or_default()))
}

fn add(items: &Collection, body: &[u8]) -> Result<(u16, Vec<u8>), Failure> {
    let bad = |e: String| Failure::Own(400, e);
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    let serde_json::Value::Object(map) = value else {
        return Err(bad("expected a JSON object".into()));
    };
    let document = Document::try_from(map).map_err(|e| bad(e.to_string()))?;
    let inserted = items.insert_one(&to_bytes(&document)?, &op_options())?;
    // `{v: <id>}`: the document's own `_id`, else the ObjectId the driver added.
    let id = match decode(&inserted.inserted_id)?.get("v") {
        Some(Bson::ObjectId(oid)) => Bson::String(oid.to_hex()),
        Some(other) => other.clone(),
        None => Bson::Null,
    };
    Ok((201, json(&doc! { "id": id })))
}

fn get(items: &Collection, id: &str) -> Result<(u16, Vec<u8>), Failure> {
    // An ObjectId in hex, else the `_id` as a string.
    let id = ObjectId::parse_str(id).map_or_else(|_| Bson::String(id.into()), Bson::ObjectId);
    let filter = to_bytes(&doc! { "_id": id })?;
    match items.find_one(&filter, &find_options())? {
        Some(raw) => Ok((200, json(&decode(&raw)?))),
        None => Err(Failure::Own(404, "no such item".into())),
    }
}

/// Runs `f` on the collection, connecting this instance's client first if needed.
fn with_items<T>(f: impl FnOnce(&Collection) -> Result<T, Failure>) -> Result<T, Failure> {
    CLIENT.with(|cell| {
        if cell.get().is_none() {
            let uri = std::env::var("MONGODB_URI")
                .map_err(|_| Failure::Own(500, "MONGODB_URI is not set".into()))?;
            // No I/O yet: the connection is made by the first operation, under its deadline.
            let client = Client::connect(&uri, &client_options())?;
            adopt_warm_state(&client);
            let _ = cell.set(client);
        }
        let client = cell.get().expect("set above");
        let inherit = CollectionOptions {
            timeout_ms: None,
            read_concern: None,
            write_concern: None,
            read_preference: None,
        };
        let answer = f(&client
            .database(DATABASE, &inherit)
            .collection(COLLECTION, &inherit))?;
        save_warm_state(client);
        Ok(answer)
    })
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

/// Writes the client's warm state to the `WARM_STATE` file when it holds
/// something new: whole to a file of its own, then renamed over the old
/// one, so an instance never reads half a blob. Best effort.
fn save_warm_state(client: &Client) {
    let Some(path) = warm_state_path() else {
        return;
    };
    let blob = client.warm_state();
    if WARM_SAVED.with(|saved| *saved.borrow() == blob) {
        return;
    }
    let part = format!("{path}.{:016x}", wasi::random::random::get_random_u64());
    if std::fs::write(&part, &blob).is_ok() && std::fs::rename(&part, &path).is_ok() {
        WARM_SAVED.with(|saved| *saved.borrow_mut() = blob);
    } else {
        let _ = std::fs::remove_file(&part);
    }
}

fn read_body(request: &IncomingRequest) -> Result<Vec<u8>, Failure> {
    let unreadable = || Failure::Own(400, "unreadable request body".into());
    let body = request.consume().map_err(|()| unreadable())?;
    let mut bytes = Vec::new();
    {
        let mut stream = body.stream().map_err(|()| unreadable())?;
        // `take`: a body over the limit is refused without reading it all.
        (&mut stream)
            .take(MAX_BODY + 1)
            .read_to_end(&mut bytes)
            .map_err(|_| unreadable())?;
    }
    if bytes.len() as u64 > MAX_BODY {
        return Err(Failure::Own(413, format!("body over {MAX_BODY} bytes")));
    }
    Ok(bytes)
}

fn respond(out: ResponseOutparam, status: u16, body: &[u8]) {
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
    let response = OutgoingResponse::new(headers);
    let _ = response.set_status_code(status);
    let outgoing = response.body().expect("the first call to body()");
    ResponseOutparam::set(out, Ok(response));
    if let Ok(mut stream) = outgoing.write() {
        let _ = stream
            .write_all(body)
            .and_then(|()| Write::flush(&mut stream));
    }
    let _ = OutgoingBody::finish(outgoing, None);
}

fn client_options() -> ClientOptions {
    ClientOptions {
        // The URI's timeoutMS bounds each operation (set one: a handler should not wait 30 s).
        timeout_ms: None,
        monitor_commands: false,
        server_api: None,
        tls_ca_pem: None,
        tls_certificate_key_pem: None,
        logging: None,
    }
}

fn op_options() -> OpOptions<'static> {
    OpOptions {
        timeout_ms: None,
        session: None,
        extra: None,
        upsert: None,
        ordered: None,
        hint: None,
        collation: None,
        comment: None,
        let_: None,
        array_filters: None,
        return_document: None,
        projection: None,
        sort: None,
        bypass_document_validation: None,
        read_concern: None,
        write_concern: None,
        read_preference: None,
    }
}

fn find_options() -> FindOptions<'static> {
    FindOptions {
        timeout_ms: None,
        session: None,
        sort: None,
        projection: None,
        skip: None,
        limit: None,
        batch_size: None,
        timeout_mode: None,
        extra: None,
        hint: None,
        collation: None,
        comment: None,
        let_: None,
        max_await_time_ms: None,
        read_concern: None,
        read_preference: None,
    }
}

fn to_bytes(document: &Document) -> Result<Vec<u8>, Failure> {
    document
        .to_vec()
        .map_err(|e| Failure::Own(400, e.to_string()))
}

fn decode(bytes: &[u8]) -> Result<Document, Failure> {
    let bad = |e: String| Failure::Own(502, format!("malformed document from the driver: {e}"));
    let raw = RawDocument::from_bytes(bytes).map_err(|e| bad(e.to_string()))?;
    Document::try_from(raw).map_err(|e| bad(e.to_string()))
}

fn json(document: &Document) -> Vec<u8> {
    let value = Bson::Document(document.clone()).into_relaxed_extjson();
    serde_json::to_vec(&value).unwrap_or_default()
}
