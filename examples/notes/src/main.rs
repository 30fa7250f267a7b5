//! notes: a small notes CLI whose logic runs inside wasm32-wasip2, linking
//! mongo-wasi as a Rust library. Run it under wasmtime with the loopback
//! server allowed (`cargo xtask demo` does this):
//!
//!   run-guest --allow 127.0.0.1:PORT notes.wasm -- mongodb://127.0.0.1:PORT/ [COMMAND]
//!
//! Commands: `add TEXT...`, `list`, `done N`, `rm N`, `demo` (the default:
//! a scripted session that shows each of those).

use bson::{rawdoc, RawDocumentBuf};
use mongo_wasi::{Client, Collection, FindOptions, OpOptions, Result, UpdateSpec};
use std::time::Instant;

fn main() {
    const USAGE: &str = "usage: notes MONGODB_URI [add TEXT...|list|done N|rm N|demo]";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(uri) = args.first() else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    if uri == "--help" {
        println!("{USAGE}");
        std::process::exit(0);
    }
    // The sync form: one block_on around the async API.
    if let Err(e) = mongo_wasi::block_on(run(uri, &args[1..])) {
        eprintln!("notes: {e}");
        std::process::exit(1);
    }
}

async fn run(uri: &str, command: &[String]) -> Result<()> {
    // Every operation gets at most two seconds, end to end.
    let client = Client::with_options(
        uri,
        mongo_wasi::ClientOptions {
            timeout_ms: Some(2000),
            ..Default::default()
        },
    )?;
    let notes = client
        .database("notes_demo", None)
        .collection("notes", None);
    match command.first().map(String::as_str) {
        None | Some("demo") => demo(&notes).await,
        Some("add") => add(&notes, &command[1..].join(" "))
            .await
            .map(|n| println!("added note #{n}")),
        Some("list") => list(&notes).await,
        Some("done") => set_done(&notes, number(command.get(1))?).await,
        Some("rm") => remove(&notes, number(command.get(1))?).await,
        Some(other) => Err(mongo_wasi::Error::invalid_argument(format!(
            "unknown command {other}"
        ))),
    }
}

fn number(arg: Option<&String>) -> Result<i32> {
    arg.and_then(|a| a.parse().ok())
        .ok_or_else(|| mongo_wasi::Error::invalid_argument("expected a note number"))
}

async fn demo(notes: &Collection) -> Result<()> {
    let started = Instant::now();
    notes.drop(&OpOptions::default()).await?;
    println!("== a fresh notebook in notes_demo.notes");
    for text in [
        "buy oat milk",
        "read the CSOT spec",
        "ship mongo-wasi",
        "water the plants",
    ] {
        let n = add(notes, text).await?;
        println!("added note #{n}: {text}");
    }
    set_done(notes, 2).await?;
    set_done(notes, 4).await?;
    list(notes).await?;
    remove(notes, 1).await?;
    let open = notes
        .count_documents(rawdoc! { "done": false }, &OpOptions::default())
        .await?;
    let all = notes
        .count_documents(rawdoc! {}, &OpOptions::default())
        .await?;
    println!("{all} notes left, {open} still open");
    list(notes).await?;
    println!(
        "== done in {} ms, every operation under a 2000 ms deadline",
        started.elapsed().as_millis()
    );
    Ok(())
}

/// Adds a note numbered one past the highest; returns its number.
async fn add(notes: &Collection, text: &str) -> Result<i32> {
    let last = notes
        .find_one(
            rawdoc! {},
            &FindOptions {
                sort: Some(rawdoc! { "n": -1 }),
                ..Default::default()
            },
        )
        .await?;
    let n = last.and_then(|d| d.get_i32("n").ok()).unwrap_or(0) + 1;
    notes
        .insert_one(
            &rawdoc! { "n": n, "text": text, "done": false },
            &OpOptions::default(),
        )
        .await?;
    Ok(n)
}

async fn list(notes: &Collection) -> Result<()> {
    let mut cursor = notes
        .find(
            rawdoc! {},
            &FindOptions {
                sort: Some(rawdoc! { "n": 1 }),
                batch_size: Some(2),
                ..Default::default()
            },
        )
        .await?;
    println!("-- notes");
    loop {
        let batch = cursor.next_batch().await?;
        for doc in &batch.documents {
            print_note(doc);
        }
        if batch.exhausted {
            return Ok(());
        }
    }
}

fn print_note(doc: &RawDocumentBuf) {
    let n = doc.get_i32("n").unwrap_or(0);
    let text = doc.get_str("text").unwrap_or("?");
    // nx-27017 stores a `$set` boolean as the integer 1, so read it as truthy.
    let done = match doc.get("done") {
        Ok(Some(bson::RawBsonRef::Boolean(b))) => b,
        Ok(Some(bson::RawBsonRef::Int32(i))) => i != 0,
        _ => false,
    };
    let mark = if done { "x" } else { " " };
    println!("  [{mark}] #{n} {text}");
}

async fn set_done(notes: &Collection, n: i32) -> Result<()> {
    let r = notes
        .update_one(
            rawdoc! { "n": n },
            UpdateSpec::Document(rawdoc! { "$set": { "done": true } }),
            &OpOptions::default(),
        )
        .await?;
    println!("marked #{n} done ({} matched)", r.matched);
    Ok(())
}

async fn remove(notes: &Collection, n: i32) -> Result<()> {
    let deleted = notes
        .delete_one(rawdoc! { "n": n }, &OpOptions::default())
        .await?;
    println!("removed #{n} ({deleted} deleted)");
    Ok(())
}
