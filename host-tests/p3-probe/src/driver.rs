//! The whole driver on WASI 0.3: the Rust async API over `runtime::p3`.
//! One client shared by 16 operations (insert_one then find_one each), a
//! second client to the silent server whose find_one must time out within
//! its timeoutMS while the 16 succeed, a count, a cursor dropped open (its
//! killCursors runs detached), and the TLS Drop's `send_now`.
//!
//! `Mode::Sequential` runs the 16 one after another in one future (beside
//! the silent client's); `Mode::Concurrent` joins them on the one client
//! (before main's a0aa0eb, which holds no topology borrow across an await,
//! that panicked "RefCell already mutably borrowed").

use super::{hello_msg, join_all, ms_since, parse_hello, read_frame};
use bson::{rawdoc, RawDocumentBuf};
use mongo_wasi::runtime::p3 as rt;
use mongo_wasi::{Client, ClientOptions, Collection, FindOptions, OpOptions};
use std::future::Future;
use std::pin::Pin;

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Mode {
    Sequential,
    Concurrent,
}

type Outcome = std::result::Result<(), String>;

/// insert_one {n, run} then find_one {n, run}: the document comes back.
async fn insert_and_find(coll: Collection, run: i64, n: i32) -> Outcome {
    let e = |what: &str, err: mongo_wasi::Error| format!("#{n} {what}: {err}");
    coll.insert_one(&rawdoc! { "n": n, "run": run }, &OpOptions::default())
        .await
        .map_err(|err| e("insert_one", err))?;
    let found = coll
        .find_one(rawdoc! { "n": n, "run": run }, &FindOptions::default())
        .await
        .map_err(|err| e("find_one", err))?;
    match found.as_deref().map(|d| d.get_i32("n")) {
        Some(Ok(got)) if got == n => Ok(()),
        other => Err(format!("#{n} find_one returned {other:?}")),
    }
}

pub async fn driver(nx: u16, silent: u16, mode: Mode) -> std::result::Result<(), String> {
    let run = mongo_wasi::runtime::unix_seconds() as i64 * 1000 + (rt::now().0 % 1000) as i64;
    let client = Client::with_options(
        &format!("mongodb://127.0.0.1:{nx}/"),
        ClientOptions {
            timeout_ms: Some(10_000),
            monitor_commands: true,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let coll = client.database("p3probe", None).collection("c", None);
    let quiet = Client::with_options(
        &format!("mongodb://127.0.0.1:{silent}/"),
        ClientOptions {
            timeout_ms: Some(300),
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let quiet_coll = quiet.database("p3probe", None).collection("c", None);

    // D1. The 16 beside the silent client's find_one.
    let t = rt::now();
    let sixteen: Pin<Box<dyn Future<Output = Vec<Outcome>>>> = match mode {
        Mode::Concurrent => Box::pin(join_all(
            (0..16)
                .map(|n| insert_and_find(coll.clone(), run, n))
                .collect(),
        )),
        Mode::Sequential => {
            let coll = coll.clone();
            Box::pin(async move {
                let mut out = Vec::new();
                for n in 0..16 {
                    out.push(insert_and_find(coll.clone(), run, n).await);
                }
                out
            })
        }
    };
    let timed = async {
        let t = rt::now();
        let r = quiet_coll
            .find_one(rawdoc! {}, &FindOptions::default())
            .await;
        (r, ms_since(t))
    };
    let sixteen = async {
        let out = sixteen.await;
        (out, ms_since(t))
    };
    let ((results, took), (quiet_result, waited)) = futures_lite::future::zip(sixteen, timed).await;
    let good = results.iter().filter(|r| r.is_ok()).count();
    let conns = client
        .take_pool_events()
        .iter()
        .filter(|e| e.kind == mongo_wasi::cmap::PoolEventKind::ConnectionCreated)
        .count();
    println!(
        "D1. {mode:?}: {good}/16 insert_one+find_one ok on one client in {took:.1} ms \
         ({conns} connections)"
    );
    for r in &results {
        if let Err(e) = r {
            println!("    error: {e}");
        }
    }
    match &quiet_result {
        Err(e) if e.is_timeout() => println!(
            "D1. beside them, find_one on the silent server (timeoutMS 300): timed out \
             after {waited:.1} ms: {e}"
        ),
        other => println!("D1. silent server: UNEXPECTED {other:?}"),
    }
    if good != 16 {
        return Err("not all 16 operations succeeded".into());
    }
    // Not before its deadline; at most 600 ms after it, on a loaded machine too.
    if !matches!(&quiet_result, Err(e) if e.is_timeout()) || !(295.0..900.0).contains(&waited) {
        return Err(format!(
            "the silent find_one did not time out at 300 ms ({waited:.1})"
        ));
    }

    // D1b. A pool of two: 16 concurrent operations wait their turn for its
    // connections (maxPoolSize), and never more than two are opened.
    let small = Client::with_options(
        &format!("mongodb://127.0.0.1:{nx}/?maxPoolSize=2"),
        ClientOptions {
            timeout_ms: Some(10_000),
            monitor_commands: true,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let small_coll = small.database("p3probe", None).collection("small", None);
    let t = rt::now();
    let results = join_all(
        (0..16)
            .map(|n| insert_and_find(small_coll.clone(), run, n))
            .collect(),
    )
    .await;
    let good = results.iter().filter(|r| r.is_ok()).count();
    let created = small
        .take_pool_events()
        .iter()
        .filter(|e| e.kind == mongo_wasi::cmap::PoolEventKind::ConnectionCreated)
        .count();
    println!(
        "D1b. maxPoolSize=2: {good}/16 concurrent insert_one+find_one ok in {:.1} ms, \
         {created} connections opened",
        ms_since(t)
    );
    if good != 16 || created > 2 {
        return Err(format!(
            "maxPoolSize=2: {good}/16 ok, {created} connections"
        ));
    }
    small.close().await;

    // D2. count_documents sees the 16.
    let n = coll
        .count_documents(rawdoc! { "run": run }, &OpOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    println!("D2. count_documents {{run}}: {n}");
    if n != 16 {
        return Err(format!("count_documents: {n}, not 16"));
    }

    // D3. A cursor dropped with its server cursor open: Drop detaches the
    // killCursors as a task; the client still works after it.
    let mut cursor = coll
        .find(
            rawdoc! { "run": run },
            &FindOptions {
                batch_size: Some(2),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let first: Option<RawDocumentBuf> = cursor.next().await.map_err(|e| e.to_string())?;
    client.take_command_events();
    drop(cursor);
    rt::sleep_until(mongo_wasi::Deadline::after(
        rt::now(),
        std::time::Duration::from_millis(50),
    ))
    .await;
    let again = coll
        .count_documents(rawdoc! { "run": run }, &OpOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let kills: Vec<String> = client
        .take_command_events()
        .into_iter()
        .filter(|e| e.command_name == "killCursors")
        .map(|e| format!("{:?}", e.kind))
        .collect();
    println!(
        "D3. a cursor dropped after its first document (got one: {}): killCursors events \
         {kills:?}; count after it: {again}",
        first.is_some()
    );
    if kills.is_empty() {
        return Err("the dropped cursor's killCursors never ran".into());
    }

    // D4. send_now (what TLS's Drop sends close_notify with): does the host
    // take a message without waiting?
    let mut s = rt::TcpStream::connect("127.0.0.1", nx, after(5000))
        .await
        .map_err(|e| e.to_string())?;
    let sent = s.send_now(&hello_msg(9));
    let reply = match &sent {
        Ok(()) => Some(
            read_frame(&mut s, after(5000))
                .await
                .map(|f| parse_hello(&f).0),
        ),
        Err(_) => None,
    };
    println!(
        "D4. send_now of a hello on a fresh connection: {:?}; reply ok: {:?}",
        sent.map_err(|e| e.to_string()),
        reply.map(|r| r.map_err(|e| e.to_string()))
    );

    let t = rt::now();
    client.close().await;
    quiet.close().await;
    println!("D5. both clients closed in {:.1} ms", ms_since(t));
    Ok(())
}

/// TLS on the 0.3 face: a client verifying the server (`ca`) through a TLS
/// relay in front of nx-27017 runs 8 insert+find one after another and two
/// finds at once; a second client's handshake with the silent server (TCP
/// accepted, no TLS answer) ends as a timeout at its timeoutMS.
pub async fn tls(port: u16, silent: u16, ca: Vec<u8>) -> std::result::Result<(), String> {
    let options = |timeout_ms| ClientOptions {
        timeout_ms: Some(timeout_ms),
        tls_ca_pem: Some(ca.clone()),
        ..Default::default()
    };
    let client = Client::with_options(
        &format!("mongodb://localhost:{port}/?tls=true"),
        options(10_000),
    )
    .map_err(|e| e.to_string())?;
    let coll = client.database("p3probe", None).collection("tls", None);
    let run = mongo_wasi::runtime::unix_seconds() as i64;
    for n in 0..8 {
        insert_and_find(coll.clone(), run, n).await?;
    }
    let (fa, fb) = (FindOptions::default(), FindOptions::default());
    let (a, b) = futures_lite::future::zip(
        coll.find_one(rawdoc! { "run": run }, &fa),
        coll.find_one(rawdoc! { "run": run }, &fb),
    )
    .await;
    let both = matches!((&a, &b), (Ok(Some(_)), Ok(Some(_))));
    println!("T1. over TLS: 8 insert_one+find_one ok; two concurrent find_ones ok: {both}");
    if !both {
        return Err(format!("concurrent finds over TLS: {a:?} {b:?}"));
    }
    client.close().await;

    let quiet = Client::with_options(
        &format!("mongodb://localhost:{silent}/?tls=true"),
        options(300),
    )
    .map_err(|e| e.to_string())?;
    let t = rt::now();
    let r = quiet
        .database("p3probe", None)
        .collection("tls", None)
        .find_one(rawdoc! {}, &fa)
        .await;
    let waited = ms_since(t);
    println!("T2. TLS handshake with a silent server, timeoutMS 300: {waited:.1} ms: {r:?}");
    // Not before its deadline; at most 600 ms after it, on a loaded machine too.
    if !matches!(&r, Err(e) if e.is_timeout()) || !(295.0..900.0).contains(&waited) {
        return Err(format!(
            "the silent TLS handshake did not time out at 300 ms ({waited:.1})"
        ));
    }
    Ok(())
}

fn after(ms: u64) -> mongo_wasi::Deadline {
    mongo_wasi::Deadline::after(rt::now(), std::time::Duration::from_millis(ms))
}

/// PBKDF2 on the 0.3 face: a client whose server asks for 10,000,000
/// iterations (lying_scram.py; some 14 s of CPU) with timeoutMS 500 times
/// out near 500 ms, and meanwhile another client's pings to nx-27017 in the
/// same instance keep going: key derivation yields between its slices.
pub async fn scram(lying: u16, nx: u16) -> std::result::Result<(), String> {
    let liar = Client::with_options(
        &format!("mongodb://user:pencil@127.0.0.1:{lying}/?authMechanism=SCRAM-SHA-256"),
        ClientOptions {
            timeout_ms: Some(500),
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let other = Client::with_options(
        &format!("mongodb://127.0.0.1:{nx}/"),
        ClientOptions {
            timeout_ms: Some(10_000),
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let db = other.database("p3probe", None);
    let opts = mongo_wasi::RunCommandOptions::default();
    let ping = || db.run_command(rawdoc! { "ping": 1 }, &opts);
    ping().await.map_err(|e| format!("warm-up ping: {e}"))?;
    let done = std::cell::Cell::new(false);
    let t = rt::now();
    let lying = async {
        let r = liar
            .database("p3probe", None)
            .collection("c", None)
            .find_one(rawdoc! {}, &FindOptions::default())
            .await;
        done.set(true);
        (r, ms_since(t))
    };
    let pings = async {
        let (mut n, mut gap, mut last) = (0u32, 0f64, rt::now());
        // Bounded: the lying operation ends by its deadline; 10 s at most.
        while !done.get() && ms_since(t) < 10_000.0 {
            if let Err(e) = ping().await {
                return Err(format!("ping #{n}: {e}"));
            }
            gap = gap.max(ms_since(last));
            last = rt::now();
            n += 1;
        }
        Ok((n, gap))
    };
    let ((r, waited), pinged) = futures_lite::future::zip(lying, pings).await;
    let (n, gap) = pinged?;
    println!(
        "S1. SCRAM asking 10,000,000 iterations, timeoutMS 500: {waited:.1} ms: {:?}; \
         meanwhile {n} pings on another client, the longest {gap:.1} ms",
        r.as_ref().map(|_| ()).map_err(|e| e.to_string())
    );
    let timed_out = matches!(&r, Err(e) if e.is_timeout() && e.to_string().contains("PBKDF2"));
    // Not before its deadline; on a loaded machine well within 1.5 s.
    if !timed_out || !(495.0..1500.0).contains(&waited) {
        return Err(format!(
            "the lying SCRAM server: {r:?} after {waited:.1} ms"
        ));
    }
    // Without yields between slices the pings would stop for the whole
    // derivation (~500 ms); a slice is ~1-2 ms.
    if n < 10 || gap > 150.0 {
        return Err(format!(
            "the other client starved: {n} pings, the longest {gap:.1} ms"
        ));
    }
    Ok(())
}
