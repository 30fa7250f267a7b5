//! consumer: a command component that uses the driver through its WIT
//! interfaces only. It imports `mongo-wasi:driver/*` (the `imports` world) and
//! exports `wasi:cli/run` (Rust's `main`); composing it with the driver
//! component satisfies those imports, and the result runs under any WASI 0.2
//! host. `cargo xtask build` builds and composes it:
//!
//!   wasm-tools compose consumer.wasm -d mongo-wasi.wasm -o target/examples/consumer.wasm
//!   wasmtime run -S inherit-network target/examples/consumer.wasm mongodb://127.0.0.1:27017/
//!
//! It writes a document, reads it back by the `_id` the driver gave it, and
//! prints both.

wit_bindgen::generate!({
    inline: "
        package example:consumer;
        world consumer { include mongo-wasi:driver/imports@0.2.0; }
    ",
    // The driver's WIT package. An adopter vendors it under its own `wit/deps/`.
    path: "../../wit",
    generate_all,
    // `Default` for the records a consumer fills in (the options records:
    // 13-17 fields each, every one optional), as `..Default::default()` below.
    // Enums and variants have no natural default, nor the records that hold
    // one (results and events, which the driver fills in): left out by name.
    additional_derives: [Default],
    additional_derives_ignore: [
        "command-event-kind", "error-kind", "log-component", "log-level", "pool-event-kind",
        "read-mode", "return-document", "runner-step", "sdam-event-kind", "server-type",
        "timeout-mode", "topology-type", "transaction-state", "acknowledgement", "hint",
        "update-spec", "write-model", "bulk-write-error", "client-bulk-write-error",
        "client-write-model", "command-event", "error", "log-message", "pool-event",
        "read-preference", "sdam-event", "server-description", "topology-description",
        "update-model",
    ],
});

use bson::{rawdoc, Document, RawDocument};
use mongo_wasi::driver::client::{Client, ClientOptions};
use mongo_wasi::driver::collection::{Collection, FindOptions, OpOptions};
use mongo_wasi::driver::database::CollectionOptions;
use mongo_wasi::driver::types::Error;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(uri) = std::env::args().nth(1) else {
        eprintln!("usage: consumer MONGODB_URI");
        return ExitCode::from(2);
    };
    match run(&uri) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("consumer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(uri: &str) -> Result<(), String> {
    // One deadline of five seconds bounds each operation, end to end.
    let options = ClientOptions {
        timeout_ms: Some(5000),
        ..Default::default()
    };
    let client = Client::connect(uri, &options).map_err(show)?;
    let inherit = CollectionOptions::default();
    let greetings = client
        .database("consumer_example", &inherit)
        .collection("greetings", &inherit);

    let doc = rawdoc! { "text": "hello from a composed component", "n": 42 };
    let inserted = greetings
        .insert_one(doc.as_bytes(), &OpOptions::default())
        .map_err(show)?;
    // `{_id: <id>}` from the `{v: <id>}` insert-one returned (the ObjectId
    // the driver added), for the read that follows.
    let filter = Collection::id_filter(&inserted.inserted_id).map_err(show)?;
    let id = decode(&filter)?.get("_id").cloned().ok_or("no _id")?;
    println!("inserted {id}");

    let found = greetings
        .find_one(&filter, &FindOptions::default())
        .map_err(show)?
        .ok_or_else(|| format!("{id} not found after its insert"))?;
    println!("read back {}", decode(&found)?);

    let total = greetings
        .count_documents(rawdoc! {}.as_bytes(), &OpOptions::default())
        .map_err(show)?;
    println!("{total} documents in consumer_example.greetings");
    client.close();
    Ok(())
}

fn decode(bytes: &[u8]) -> Result<Document, String> {
    let raw = RawDocument::from_bytes(bytes).map_err(|e| e.to_string())?;
    Document::try_from(raw).map_err(|e| e.to_string())
}

fn show(e: Error) -> String {
    format!("{:?}: {}", e.kind, e.message)
}
