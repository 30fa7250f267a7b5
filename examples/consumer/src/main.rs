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
});

use bson::{doc, rawdoc, Document, RawDocument};
use mongo_wasi::driver::client::{Client, ClientOptions};
use mongo_wasi::driver::collection::{FindOptions, OpOptions};
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
        monitor_commands: false,
        server_api: None,
        tls_ca_pem: None,
        tls_certificate_key_pem: None,
        logging: None,
    };
    let client = Client::connect(uri, &options).map_err(show)?;
    let inherit = CollectionOptions {
        timeout_ms: None,
        read_concern: None,
        write_concern: None,
        read_preference: None,
    };
    let greetings = client
        .database("consumer_example", &inherit)
        .collection("greetings", &inherit);

    let doc = rawdoc! { "text": "hello from a composed component", "n": 42 };
    let inserted = greetings.insert_one(doc.as_bytes(), &op()).map_err(show)?;
    // `{v: <id>}`: the ObjectId the driver added.
    let id = decode(&inserted.inserted_id)?
        .get("v")
        .cloned()
        .ok_or("insert-one returned no id")?;
    println!("inserted {id}");

    let filter = doc! { "_id": id.clone() }
        .to_vec()
        .map_err(|e| e.to_string())?;
    let found = greetings
        .find_one(&filter, &find())
        .map_err(show)?
        .ok_or_else(|| format!("{id} not found after its insert"))?;
    println!("read back {}", decode(&found)?);

    let total = greetings
        .count_documents(rawdoc! {}.as_bytes(), &op())
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

fn op() -> OpOptions<'static> {
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

fn find() -> FindOptions<'static> {
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
