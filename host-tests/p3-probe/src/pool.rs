//! CMAP on WASI 0.3, through the failpoint proxy in front of nx-27017 (a
//! `failCommand` with `blockConnection` holds a connection as long as a test
//! needs): the FIFO wait queue, one waiter's timeout beside others, a pending
//! reply drained in the background, a clear with interruptInUseConnections,
//! the minPoolSize fill and maxIdleTimeMS. Each section takes well under a
//! second; every wait is bounded.

use super::{join_all, ms_since};
use bson::rawdoc;
use mongo_wasi::cmap::{PoolEvent, PoolEventKind as K};
use mongo_wasi::runtime::p3 as rt;
use mongo_wasi::{Client, ClientOptions, Collection, FindOptions, OpOptions, RunCommandOptions};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

type Outcome = std::result::Result<(), String>;
type Task<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

fn client(port: u16, query: &str) -> std::result::Result<Client, String> {
    Client::with_options(
        &format!("mongodb://127.0.0.1:{port}/?{query}"),
        ClientOptions {
            timeout_ms: Some(10_000),
            monitor_commands: true,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())
}

async fn sleep_ms(ms: u64) {
    rt::sleep_until(mongo_wasi::Deadline::after(
        rt::now(),
        Duration::from_millis(ms),
    ))
    .await
}

/// `failCommand` once on `command`: blocked `block_ms` (and with
/// `reply_delay_ms`, a reply cut short by maxTimeMS comes that much later).
async fn block_once(c: &Client, command: &str, block_ms: i32, reply_delay_ms: i32) -> Outcome {
    let cmd = rawdoc! {
        "configureFailPoint": "failCommand",
        "mode": { "times": 1 },
        "data": {
            "failCommands": [command],
            "blockConnection": true,
            "blockTimeMS": block_ms,
            "proxyReplyDelayMS": reply_delay_ms,
        },
    };
    c.database("admin", None)
        .run_command(cmd, &RunCommandOptions::default())
        .await
        .map(|_| ())
        .map_err(|e| format!("configureFailPoint: {e}"))
}

fn count(events: &[PoolEvent], kind: K) -> usize {
    events.iter().filter(|e| e.kind == kind).count()
}

async fn insert(coll: &Collection, n: i32, timeout_ms: Option<u64>) -> mongo_wasi::Result<()> {
    let options = OpOptions {
        timeout_ms,
        ..Default::default()
    };
    coll.insert_one(&rawdoc! { "n": n }, &options)
        .await
        .map(|_| ())
}

pub async fn pool(port: u16) -> Outcome {
    fifo(port).await?;
    timeouts(port).await?;
    background_drain(port).await?;
    interrupt(port).await?;
    min_pool_size(port).await?;
    max_idle_time(port).await?;
    spec_face(port).await?;
    monitors(port).await
}

/// P1. maxPoolSize=1, the connection held 400 ms; five waiters arrive in
/// the reverse of the order they are polled in (30 ms apart): they get the
/// connection in arrival order.
async fn fifo(port: u16) -> Outcome {
    let c = client(port, "maxPoolSize=1")?;
    let coll = c.database("p3probe", None).collection("fifo", None);
    insert(&coll, -1, None).await.map_err(|e| e.to_string())?;
    block_once(&c, "aggregate", 400, 0).await?;
    let served = Rc::new(RefCell::new(Vec::new()));
    let mut tasks: Vec<Task<'_, Outcome>> = vec![Box::pin(async {
        coll.count_documents(rawdoc! {}, &OpOptions::default())
            .await
            .map(|_| ())
            .map_err(|e| format!("holder: {e}"))
    })];
    for i in 0..5u64 {
        let (coll, served) = (coll.clone(), served.clone());
        tasks.push(Box::pin(async move {
            sleep_ms(30 * (5 - i)).await;
            insert(&coll, i as i32, None)
                .await
                .map_err(|e| format!("waiter {i}: {e}"))?;
            served.borrow_mut().push(i);
            Ok(())
        }));
    }
    let t = rt::now();
    let results = join_all(tasks).await;
    let served = served.borrow().clone();
    println!(
        "P1. maxPoolSize=1, held 400 ms, waiters arriving 4,3,2,1,0: served {served:?} \
         in {:.1} ms",
        ms_since(t)
    );
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        return Err(e);
    }
    if served != [4, 3, 2, 1, 0] {
        return Err(format!("not served in arrival order: {served:?}"));
    }
    c.close().await;
    Ok(())
}

/// P2. maxPoolSize=1, the connection held 400 ms: waiter A (timeoutMS 100)
/// times out at its own deadline, waiter C's future is dropped while it
/// waits, and waiter B behind both gets the connection as soon as it is back.
async fn timeouts(port: u16) -> Outcome {
    let c = client(port, "maxPoolSize=1")?;
    let coll = c.database("p3probe", None).collection("fifo", None);
    insert(&coll, -1, None).await.map_err(|e| e.to_string())?;
    block_once(&c, "aggregate", 400, 0).await?;
    let t = rt::now();
    let holder = async {
        let r = coll
            .count_documents(rawdoc! {}, &OpOptions::default())
            .await;
        (r.map(|_| ()), ms_since(t))
    };
    let a = async {
        sleep_ms(20).await;
        let r = insert(&coll, 100, Some(100)).await;
        (r, ms_since(t))
    };
    let dropped = async {
        sleep_ms(30).await;
        let gave_up = async {
            sleep_ms(50).await;
            Err(mongo_wasi::Error::timeout("dropped by the test"))
        };
        let r = futures_lite::future::or(insert(&coll, 101, None), gave_up).await;
        (r, ms_since(t))
    };
    let b = async {
        sleep_ms(40).await;
        let r = insert(&coll, 102, Some(5_000)).await;
        (r, ms_since(t))
    };
    use futures_lite::future::zip;
    let (((held, held_ms), (a, a_ms)), ((c_r, c_ms), (b, b_ms))) =
        zip(zip(holder, a), zip(dropped, b)).await;
    println!(
        "P2. A (timeoutMS 100) {:?} at {a_ms:.1} ms; C dropped at {c_ms:.1} ms ({:?}); \
         B served at {b_ms:.1} ms; holder done at {held_ms:.1} ms",
        a.as_ref().map_err(|e| e.kind),
        c_r.as_ref().map_err(|e| e.message.clone()),
    );
    held.map_err(|e| format!("holder: {e}"))?;
    b.map_err(|e| format!("B: {e}"))?;
    if !matches!(&a, Err(e) if e.is_timeout()) || !(115.0..400.0).contains(&a_ms) {
        return Err(format!(
            "A did not time out at its deadline: {a:?} at {a_ms:.1}"
        ));
    }
    if !(380.0..700.0).contains(&b_ms) {
        return Err(format!("B waited past the holder: {b_ms:.1} ms"));
    }
    let inserted: Vec<i32> = c
        .take_command_events()
        .iter()
        .filter(|e| {
            e.command_name == "insert" && e.kind == mongo_wasi::monitoring::EventKind::Started
        })
        .filter_map(|e| e.command.as_ref())
        .filter_map(|cmd| cmd.get_array("documents").ok())
        .filter_map(|docs| docs.into_iter().next())
        .filter_map(|d| d.ok()?.as_document()?.get_i32("n").ok())
        .collect();
    if inserted.contains(&100) || inserted.contains(&101) {
        return Err(format!(
            "a waiter that left still sent its insert: {inserted:?}"
        ));
    }
    c.close().await;
    Ok(())
}

/// P3. A find (timeoutMS 150) times out while the server still owes its
/// reply (it comes ~400 ms later): the next operation does not wait for it,
/// and the reply is drained in the background, the connection kept.
async fn background_drain(port: u16) -> Outcome {
    let c = client(port, "maxPoolSize=4")?;
    let coll = c.database("p3probe", None).collection("drain", None);
    insert(&coll, -1, None).await.map_err(|e| e.to_string())?;
    block_once(&c, "find", 5_000, 400).await?;
    c.take_pool_events();
    let t = rt::now();
    let options = FindOptions {
        timeout_ms: Some(150),
        ..Default::default()
    };
    let r = coll.find_one(rawdoc! {}, &options).await;
    let timed_out = ms_since(t);
    if !matches!(&r, Err(e) if e.is_timeout()) {
        return Err(format!("the blocked find did not time out: {r:?}"));
    }
    let t = rt::now();
    insert(&coll, 1, None).await.map_err(|e| e.to_string())?;
    let next = ms_since(t);
    // The reply is due ~400 ms after the timeout: give the drain 1.5 s.
    let mut events = Vec::new();
    for _ in 0..30 {
        sleep_ms(50).await;
        events.extend(c.take_pool_events());
        if count(&events, K::PendingResponseSucceeded) + count(&events, K::PendingResponseFailed)
            > 0
        {
            break;
        }
    }
    let drained = events
        .iter()
        .find(|e| e.kind == K::PendingResponseSucceeded)
        .map(|e| (e.connection_id, e.duration));
    let closed = count(&events, K::ConnectionClosed);
    println!(
        "P3. find timed out at {timed_out:.1} ms; the next insert took {next:.1} ms; \
         background drain: {drained:?}; connections closed: {closed}"
    );
    if next > 120.0 {
        return Err(format!(
            "the next operation waited for the drain ({next:.1} ms)"
        ));
    }
    let Some((id, _)) = drained else {
        return Err("no PendingResponseSucceeded".into());
    };
    if closed != 0 {
        return Err("the drained connection was closed".into());
    }
    // It is available again: two operations at once use it and one other.
    let (x, y) = futures_lite::future::zip(insert(&coll, 2, None), insert(&coll, 3, None)).await;
    x.and(y).map_err(|e| e.to_string())?;
    let out: Vec<u64> = c
        .take_pool_events()
        .iter()
        .filter(|e| e.kind == K::ConnectionCheckedOut)
        .map(|e| e.connection_id)
        .collect();
    if !out.contains(&id) {
        return Err(format!(
            "connection {id} not reused after its drain: {out:?}"
        ));
    }
    c.close().await;
    Ok(())
}

/// P4. maxPoolSize=1, retryReads=false: A holds the connection (blocked
/// 2 s), B waits for it; a clear with interruptInUseConnections at 150 ms
/// fails both at once, and the pool serves the next operation.
async fn interrupt(port: u16) -> Outcome {
    let c = client(port, "maxPoolSize=1&retryReads=false")?;
    let coll = c.database("p3probe", None).collection("fifo", None);
    insert(&coll, -1, None).await.map_err(|e| e.to_string())?;
    block_once(&c, "aggregate", 2_000, 0).await?;
    c.take_pool_events();
    let address = format!("127.0.0.1:{port}");
    let t = rt::now();
    let a = async {
        let r = coll
            .count_documents(rawdoc! {}, &OpOptions::default())
            .await;
        (r.map(|_| ()), ms_since(t))
    };
    let b = async {
        sleep_ms(50).await;
        let r = coll.find_one(rawdoc! {}, &FindOptions::default()).await;
        (r.map(|_| ()), ms_since(t))
    };
    let clear = async {
        sleep_ms(150).await;
        c.clear_pool(&address, true);
    };
    let (((a, a_ms), (b, b_ms)), ()) =
        futures_lite::future::zip(futures_lite::future::zip(a, b), clear).await;
    let events = c.take_pool_events();
    let cleared = events
        .iter()
        .find(|e| e.kind == K::PoolCleared)
        .map(|e| e.interrupt_in_use_connections);
    let failed: Vec<Option<String>> = events
        .iter()
        .filter(|e| e.kind == K::ConnectionCheckOutFailed)
        .map(|e| e.reason.clone())
        .collect();
    let closed: Vec<Option<String>> = events
        .iter()
        .filter(|e| e.kind == K::ConnectionClosed)
        .map(|e| e.reason.clone())
        .collect();
    println!(
        "P4. clear(interruptInUseConnections) at 150 ms: A {:?} at {a_ms:.1} ms; B {:?} at \
         {b_ms:.1} ms; PoolCleared interrupt={cleared:?}; checkout failed {failed:?}; closed \
         {closed:?}",
        a.as_ref().map_err(|e| e.message.clone()),
        b.as_ref().map_err(|e| e.message.clone()),
    );
    let interrupted = |r: &mongo_wasi::Result<()>, what: &str| match r {
        Err(e) if e.is_network() && e.message.contains(what) => Ok(()),
        other => Err(format!("expected \"{what}\": {other:?}")),
    };
    interrupted(&a, "interrupted due to server monitor timeout")?;
    interrupted(&b, "was cleared")?;
    if a_ms > 600.0 || b_ms > 600.0 {
        return Err(format!(
            "not failed promptly: A {a_ms:.1} ms, B {b_ms:.1} ms"
        ));
    }
    if cleared != Some(true) || failed != [Some("connectionError".to_string())] {
        return Err(format!("events: cleared {cleared:?}, failed {failed:?}"));
    }
    if closed != [Some("stale".to_string())] {
        return Err(format!("the interrupted connection: closed {closed:?}"));
    }
    insert(&coll, 7, None)
        .await
        .map_err(|e| format!("after the clear: {e}"))?;
    c.close().await;
    Ok(())
}

/// P5. minPoolSize=3: after the first operation a background task opens
/// the other two (one operation's checkout never waits for them); closing
/// the client stops it.
async fn min_pool_size(port: u16) -> Outcome {
    let c = client(port, "minPoolSize=3&maxPoolSize=5")?;
    let coll = c.database("p3probe", None).collection("fifo", None);
    let t = rt::now();
    insert(&coll, -1, None).await.map_err(|e| e.to_string())?;
    let first = ms_since(t);
    let mut events = Vec::new();
    for _ in 0..40 {
        events.extend(c.take_pool_events());
        if count(&events, K::ConnectionReady) >= 3 {
            break;
        }
        sleep_ms(25).await;
    }
    let (created, ready) = (
        count(&events, K::ConnectionCreated),
        count(&events, K::ConnectionReady),
    );
    println!(
        "P5. minPoolSize=3: first operation {first:.1} ms; {created} created, {ready} ready \
         after {:.1} ms",
        ms_since(t)
    );
    if created != 3 || ready != 3 {
        return Err(format!("minPoolSize=3: {created} created, {ready} ready"));
    }
    c.close().await;
    sleep_ms(50).await;
    let after = count(&c.take_pool_events(), K::ConnectionCreated);
    if after != 0 {
        return Err(format!("{after} connections created after close"));
    }
    Ok(())
}

/// P6. maxIdleTimeMS=100: a connection idle 250 ms is closed as `idle` at
/// the next checkout, which opens another.
async fn max_idle_time(port: u16) -> Outcome {
    let c = client(port, "maxIdleTimeMS=100")?;
    let coll = c.database("p3probe", None).collection("fifo", None);
    insert(&coll, -1, None).await.map_err(|e| e.to_string())?;
    sleep_ms(250).await;
    insert(&coll, -2, None).await.map_err(|e| e.to_string())?;
    let events = c.take_pool_events();
    let idle = events
        .iter()
        .filter(|e| e.kind == K::ConnectionClosed && e.reason.as_deref() == Some("idle"))
        .count();
    let created = count(&events, K::ConnectionCreated);
    println!("P6. maxIdleTimeMS=100, idle 250 ms: {idle} closed as idle, {created} created");
    if idle != 1 || created != 2 {
        return Err(format!(
            "maxIdleTimeMS: {idle} idle closes, {created} created"
        ));
    }
    c.close().await;
    Ok(())
}

/// P7. The pool alone through the test face (the CMAP spec tests' shape):
/// a paused pool refuses a checkout; `ready`; a clear fails the checkouts
/// waiting (pool-clear-clears-waitqueue); a connection checked in after a
/// clear is closed as stale (pool-checkin-destroy-stale); event order as the
/// spec tests expect.
async fn spec_face(port: u16) -> Outcome {
    let c = client(port, "maxPoolSize=1&waitQueueTimeoutMS=5000")?;
    let address = format!("127.0.0.1:{port}");
    let paused = c.pool_check_out(&address).await;
    c.pool_ready(&address);
    let conn = c
        .pool_check_out(&address)
        .await
        .map_err(|e| format!("after ready: {e}"))?;
    let (cr, ar) = (&c, address.as_str());
    let waiters = async {
        let w = |ms| async move {
            sleep_ms(ms).await;
            cr.pool_check_out(ar).await.map(|_| ())
        };
        futures_lite::future::zip(futures_lite::future::zip(w(10), w(20)), w(30)).await
    };
    let clear = async {
        sleep_ms(60).await;
        c.pool_clear(&address, false);
    };
    let t = rt::now();
    let (((a, b), d), ()) = futures_lite::future::zip(waiters, clear).await;
    let waited = ms_since(t);
    c.pool_check_in(conn);
    let kinds: Vec<String> = c
        .take_pool_events()
        .iter()
        .filter(|e| !matches!(e.kind, K::PoolCreated | K::ConnectionReady))
        .map(|e| match &e.reason {
            Some(r) => format!("{:?}({r})", e.kind),
            None => format!("{:?}", e.kind),
        })
        .collect();
    println!(
        "P7. paused checkout: {:?}; three waiters after a clear at 60 ms: {:?} {:?} {:?} in \
         {waited:.1} ms; events {kinds:?}",
        paused.as_ref().map(|_| ()).map_err(|e| e.message.clone()),
        a.is_err(),
        b.is_err(),
        d.is_err()
    );
    if paused.is_ok() || a.is_ok() || b.is_ok() || d.is_ok() || waited > 500.0 {
        return Err("a paused or cleared pool handed out a connection".into());
    }
    let expected = [
        "ConnectionCheckOutStarted",
        "ConnectionCheckOutFailed(connectionError)",
        "PoolReady",
        "ConnectionCheckOutStarted",
        "ConnectionCreated",
        "ConnectionCheckedOut",
        "ConnectionCheckOutStarted",
        "ConnectionCheckOutStarted",
        "ConnectionCheckOutStarted",
        "PoolCleared",
        "ConnectionCheckOutFailed(connectionError)",
        "ConnectionCheckOutFailed(connectionError)",
        "ConnectionCheckOutFailed(connectionError)",
        "ConnectionCheckedIn",
        "ConnectionClosed(stale)",
    ];
    if kinds != expected {
        return Err(format!("events out of the spec's order: {kinds:?}"));
    }
    c.close().await;
    Ok(())
}

/// The proxy's open connections (its `proxyStats` gauge), read by `admin`.
async fn open_connections(admin: &Client) -> std::result::Result<i64, String> {
    let stats = admin
        .database("admin", None)
        .run_command(rawdoc! { "proxyStats": 1 }, &RunCommandOptions::default())
        .await
        .map_err(|e| format!("proxyStats: {e}"))?;
    stats
        .get_document("connections")
        .and_then(|c| c.get_i64("current"))
        .map_err(|e| format!("proxyStats: {e}"))
}

/// P8. Background monitoring (server-monitoring spec): with the proxy's
/// topologyVersion a client streams (awaited heartbeats, answered every
/// heartbeatFrequencyMS=500) on a connection of its own plus an RTT
/// connection, neither in the pool; with serverMonitoringMode=poll only the
/// monitoring connection, and no awaited heartbeat. Closing the client
/// closes both at once, though its monitor is waiting on an awaited hello.
async fn monitors(port: u16) -> Outcome {
    use mongo_wasi::sdam::monitoring::SdamEvent;
    let admin = client(port, "")?;
    let baseline = open_connections(&admin).await?;
    for (mode, extra) in [("stream", 2), ("poll", 1)] {
        let c = client(
            port,
            &format!("heartbeatFrequencyMS=500&serverMonitoringMode={mode}"),
        )?;
        let coll = c.database("p3probe", None).collection("fifo", None);
        insert(&coll, -1, None).await.map_err(|e| e.to_string())?;
        sleep_ms(1200).await;
        let events = c.take_sdam_events();
        let awaited = events
            .iter()
            .filter(|e| matches!(e, SdamEvent::ServerHeartbeatSucceeded(h) if h.awaited))
            .count();
        let beats = events
            .iter()
            .filter(|e| matches!(e, SdamEvent::ServerHeartbeatSucceeded(_)))
            .count();
        let pooled: usize = c.pool_status().iter().map(|p| p.idle + p.in_use).sum();
        let open = open_connections(&admin).await? - baseline;
        let t = rt::now();
        c.close().await;
        let mut after = open_connections(&admin).await? - baseline;
        while after > 0 && ms_since(t) < 2000.0 {
            sleep_ms(20).await;
            after = open_connections(&admin).await? - baseline;
        }
        println!(
            "P8. serverMonitoringMode={mode}: {beats} heartbeats in 1.2 s ({awaited} awaited); \
             {pooled} pooled, {open} open; after close: {after} open within {:.0} ms",
            ms_since(t)
        );
        let want_awaited = mode == "stream";
        if (awaited > 0) != want_awaited || beats < 2 {
            return Err(format!(
                "{mode}: {beats} heartbeats, {awaited} awaited (expected awaited: {want_awaited})"
            ));
        }
        if pooled != 1 || open != 1 + extra {
            return Err(format!(
                "{mode}: {pooled} pooled, {open} open (expected 1 pooled, {} open)",
                1 + extra
            ));
        }
        if after != 0 {
            return Err(format!(
                "{mode}: {after} connections still open after close"
            ));
        }
    }
    admin.close().await;
    Ok(())
}
