//! Smoke test of the WASI 0.3 driver component (world `driver-async`): a
//! command that uses it only through `mongo-wasi:driver/imports-async`, so
//! every I/O call below is an `async func` import answered by the driver
//! component's async exports. Composed with it by `wasm-tools compose`
//! (run.sh). Argument: a MongoDB URI. Prints one line per check and
//! "ASYNC SMOKE OK" at the end; `run()` fails otherwise.
//!
//! Checks: insert-one and find-one; 16 find-ones sequentially, then the same
//! 16 at once on the one client (one task polls 16 import calls, each a
//! subtask of the driver, all in flight together); a cursor read in batches
//! of 5 with `next-batch`; count-documents; close.

wit_bindgen::generate!({
    inline: "
        package example:async-smoke;
        world smoke { include mongo-wasi:driver/imports-async@0.2.0; }
    ",
    path: "../../wit",
    generate_all,
});

use bson::{rawdoc, RawDocument};
use mongo_wasi::driver::client_async::{Client, ClientOptions};
use mongo_wasi::driver::collection_async::{Collection, FindOptions, OpOptions};
use mongo_wasi::driver::database_async::CollectionOptions;
use mongo_wasi::driver::types::{CommandEventKind, Error};
use p3_util::join_all;
use std::time::Instant;

struct Smoke;

wasip3::cli::command::export!(Smoke);

impl wasip3::exports::cli::run::Guest for Smoke {
    async fn run() -> Result<(), ()> {
        let uri = std::env::args()
            .nth(1)
            .unwrap_or_else(|| "mongodb://127.0.0.1:27017/".into());
        match smoke(&uri).await {
            Ok(()) => {
                println!("ASYNC SMOKE OK");
                Ok(())
            }
            Err(e) => {
                println!("ASYNC SMOKE FAILED: {e}");
                Err(())
            }
        }
    }
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

fn find_opts(batch_size: Option<u32>) -> FindOptions<'static> {
    FindOptions {
        timeout_ms: None,
        session: None,
        sort: Some(rawdoc! { "n": 1 }.into_bytes()),
        projection: None,
        skip: None,
        limit: None,
        batch_size,
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

/// find-one {run, n}: the document's `n`.
async fn find_n(coll: &Collection, run: i64, n: i32) -> Result<i32, String> {
    let filter = rawdoc! { "run": run, "n": n }.into_bytes();
    let found = coll
        .find_one(filter, find_opts(None))
        .await
        .map_err(show)?
        .ok_or_else(|| format!("#{n} not found"))?;
    let d = RawDocument::from_bytes(&found).map_err(|e| e.to_string())?;
    d.get_i32("n").map_err(|e| e.to_string())
}

async fn smoke(uri: &str) -> Result<(), String> {
    let options = ClientOptions {
        timeout_ms: Some(10_000),
        monitor_commands: true,
        server_api: None,
        tls_ca_pem: None,
        tls_certificate_key_pem: None,
        logging: None,
    };
    let client = Client::connect(uri, &options).map_err(show)?;
    let inherit = || CollectionOptions {
        timeout_ms: None,
        read_concern: None,
        write_concern: None,
        read_preference: None,
    };
    let coll = client
        .database("async_smoke", &inherit())
        .collection("c", &inherit());
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);

    // 1. insert-one, then find-one of what it wrote.
    let t = Instant::now();
    let inserted = coll
        .insert_one(rawdoc! { "run": run, "n": 0 }.into_bytes(), op())
        .await
        .map_err(show)?;
    let filter = Collection::id_filter(&inserted.inserted_id).map_err(show)?;
    let found = coll
        .find_one(filter, find_opts(None))
        .await
        .map_err(show)?
        .ok_or("find-one found nothing after insert-one")?;
    let found = RawDocument::from_bytes(&found).map_err(|e| e.to_string())?;
    println!(
        "insert-one + find-one: {} ({:.1} ms)",
        found.get_i32("n").map_err(|e| e.to_string())?,
        ms(t)
    );

    // 15 more, so that 16 documents {run, n: 0..16} exist.
    let docs: Vec<Vec<u8>> = (1..16)
        .map(|n| rawdoc! { "run": run, "n": n }.into_bytes())
        .collect();
    coll.insert_many(docs, op())
        .await
        .map_err(|e| show(e.error))?;

    // 2. 16 find-ones one after another, then the same 16 at once.
    let t = Instant::now();
    for n in 0..16 {
        if find_n(&coll, run, n).await? != n {
            return Err(format!("sequential #{n}: wrong document"));
        }
    }
    let sequential = ms(t);
    let t = Instant::now();
    let results = join_all((0..16).map(|n| find_n(&coll, run, n)).collect()).await;
    let concurrent = ms(t);
    for (n, r) in results.into_iter().enumerate() {
        if r? != n as i32 {
            return Err(format!("concurrent #{n}: wrong document"));
        }
    }
    println!(
        "16 find-ones: sequential {sequential:.1} ms, concurrent {concurrent:.1} ms (all 16 right)"
    );

    // 3. A cursor over the 16 in batches of 5 (one getMore per next-batch).
    let cursor = coll
        .find(rawdoc! { "run": run }.into_bytes(), find_opts(Some(5)))
        .await
        .map_err(show)?;
    let mut sizes = Vec::new();
    let mut total = 0;
    loop {
        let batch = cursor.next_batch().await.map_err(show)?;
        sizes.push(batch.documents.len());
        total += batch.documents.len();
        if batch.exhausted {
            break;
        }
    }
    println!(
        "cursor: batches {sizes:?}, {total} documents, id now {}",
        cursor.id()
    );
    if total != 16 {
        return Err(format!("cursor read {total} documents, not 16"));
    }

    // 4. Two next-batch calls at once on one cursor. When the first is still
    // in its getMore as the second starts, the second is refused (one call
    // at a time per cursor, an error rather than a trap); when the reply
    // beat the second call, both succeed. Either way the instance lives on.
    let cursor = coll
        .find(rawdoc! { "run": run }.into_bytes(), find_opts(Some(2)))
        .await
        .map_err(show)?;
    let first = cursor.next_batch().await.map_err(show)?; // the find's own batch
    let both = join_all(vec![cursor.next_batch(), cursor.next_batch()]).await;
    let outcome = |r: &Result<mongo_wasi::driver::types::Batch, Error>| match r {
        Ok(batch) => format!("{} documents", batch.documents.len()),
        Err(e) => show(e.clone()),
    };
    let (a, b) = (outcome(&both[0]), outcome(&both[1]));
    if both.iter().all(Result::is_err) {
        return Err(format!("two next-batch at once: both failed: {a}; {b}"));
    }
    println!(
        "two next-batch at once (after the find's batch of {}): {a}; {b}",
        first.documents.len()
    );

    // 5. A cursor dropped open: its killCursors is deferred from the
    // destructor (no task there) to the next async call, here count-documents.
    let open = coll
        .find(rawdoc! { "run": run }.into_bytes(), find_opts(Some(2)))
        .await
        .map_err(show)?;
    let open_id = open.id();
    drop(open);
    drop(cursor);
    println!("dropped open cursors (id {open_id} among them)");

    // 6. count-documents, then close.
    let count = coll
        .count_documents(rawdoc! { "run": run }.into_bytes(), op())
        .await
        .map_err(show)?;
    println!("count-documents: {count}");
    // The deferred kills ran as tasks beside it: their command events show.
    let kills = client
        .take_command_events()
        .iter()
        .filter(|e| e.command_name == "killCursors" && e.kind == CommandEventKind::Started)
        .count();
    println!("killCursors started after the drops: {kills}");
    if kills == 0 {
        return Err("no killCursors for the cursors dropped open".into());
    }
    if count != 16 {
        return Err(format!("count-documents {count}, not 16"));
    }
    client.close().await;
    Ok(())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}
