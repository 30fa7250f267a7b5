//! WASI 0.3 probe of `mongo_wasi::runtime::p3`: hellos to a wire server, 16 at
//! once, a deadline against a silent server while hellos run beside it, and a
//! timed sleep. Arguments: the wire server's port, the silent server's port.
//! Prints one line per check and "PROBE OK" at the end; `run()` fails otherwise.

use mongo_wasi::deadline::Deadline;
use mongo_wasi::error::Result;
use mongo_wasi::runtime::p3::{self as rt, TcpStream};
use p3_util::join_all;
use std::time::Duration;

mod cancel;
mod driver;
mod pool;

struct Probe;

wasip3::cli::command::export!(Probe);

impl wasip3::exports::cli::run::Guest for Probe {
    async fn run() -> std::result::Result<(), ()> {
        let args: Vec<String> = std::env::args().collect();
        // `tls TLS_PORT SILENT` (CA_PEM in the environment): the driver over
        // rustls over the 0.3 TCP stream (driver.rs).
        if args.get(1).map(String::as_str) == Some("tls") {
            let port = |i: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(0);
            let ca = std::env::var("CA_PEM").unwrap_or_default().into_bytes();
            return match driver::tls(port(2), port(3), ca).await {
                Ok(()) => {
                    println!("TLS OK");
                    Ok(())
                }
                Err(e) => {
                    println!("TLS FAILED: {e}");
                    Err(())
                }
            };
        }
        // `cancel NX`: every cancellation point of find, insert, commit and a
        // GridFS upload (cancel.rs).
        if args.get(1).map(String::as_str) == Some("cancel") {
            let nx = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(47017);
            return match cancel::cancel(nx).await {
                Ok(()) => {
                    println!("CANCEL OK");
                    Ok(())
                }
                Err(e) => {
                    println!("CANCEL FAILED: {e}");
                    Err(())
                }
            };
        }
        // `pool PROXY`: CMAP through the failpoint proxy (pool.rs).
        if args.get(1).map(String::as_str) == Some("pool") {
            let port = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(0);
            return match pool::pool(port).await {
                Ok(()) => {
                    println!("POOL OK");
                    Ok(())
                }
                Err(e) => {
                    println!("POOL FAILED: {e}");
                    Err(())
                }
            };
        }
        // `scram LYING NX`: PBKDF2 yields to the other tasks (driver.rs).
        if args.get(1).map(String::as_str) == Some("scram") {
            let port = |i: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(0);
            return match driver::scram(port(2), port(3)).await {
                Ok(()) => {
                    println!("SCRAM OK");
                    Ok(())
                }
                Err(e) => {
                    println!("SCRAM FAILED: {e}");
                    Err(())
                }
            };
        }
        // `driver NX SILENT [seq|concurrent]`: the whole driver (driver.rs).
        if args.get(1).map(String::as_str) == Some("driver") {
            let port = |i: usize, d: u16| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
            let mode = match args.get(4).map(String::as_str) {
                Some("concurrent") => driver::Mode::Concurrent,
                _ => driver::Mode::Sequential,
            };
            return match driver::driver(port(2, 47017), port(3, 47018), mode).await {
                Ok(()) => {
                    println!("DRIVER OK");
                    Ok(())
                }
                Err(e) => {
                    println!("DRIVER FAILED: {e}");
                    Err(())
                }
            };
        }
        let nx: u16 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(47017);
        let silent: u16 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(47018);
        let trickle: u16 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(47019);
        let dns: u16 = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(47053);
        match probe(nx, silent, trickle, dns).await {
            Ok(()) => {
                println!("PROBE OK");
                Ok(())
            }
            Err(e) => {
                println!("PROBE FAILED: {e}");
                Err(())
            }
        }
    }
}

fn ms_since(start: mongo_wasi::deadline::Instant) -> f64 {
    rt::now().since(start).as_secs_f64() * 1000.0
}

fn after_ms(ms: u64) -> Deadline {
    Deadline::after(rt::now(), Duration::from_millis(ms))
}

/// OP_MSG `{hello: 1, $db: "admin"}`: header, flagBits 0, one kind-0 section.
fn hello_msg(request_id: i32) -> Vec<u8> {
    let doc = bson::rawdoc! { "hello": 1, "$db": "admin" };
    let body = doc.as_bytes();
    let len = (16 + 4 + 1 + body.len()) as i32;
    let mut m = Vec::with_capacity(len as usize);
    for v in [len, request_id, 0, 2013] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m.extend_from_slice(&0u32.to_le_bytes());
    m.push(0);
    m.extend_from_slice(body);
    m
}

/// One reply frame: its length first (read_up_to may bring more of it), then the rest.
async fn read_frame(s: &mut TcpStream, deadline: Deadline) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    s.read_up_to(&mut buf, 4, 1024, deadline).await?;
    let len = i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    assert!(buf.len() <= 1024.min(len.max(4)), "read past the frame");
    s.read_to_len(&mut buf, len, deadline).await?;
    assert_eq!(buf.len(), len, "read_to_len went past want");
    Ok(buf)
}

/// (ok, maxWireVersion) of a hello reply frame.
fn parse_hello(frame: &[u8]) -> (f64, i32) {
    let doc = bson::RawDocument::from_bytes(&frame[21..]).expect("a reply document");
    let ok = doc
        .get("ok")
        .ok()
        .flatten()
        .and_then(|v| v.as_f64().or(v.as_i32().map(f64::from)))
        .unwrap_or(0.0);
    (ok, doc.get_i32("maxWireVersion").unwrap_or(-1))
}

async fn hello(port: u16, deadline: Deadline) -> Result<(f64, i32)> {
    let mut s = TcpStream::connect("127.0.0.1", port, deadline).await?;
    s.write_all(&hello_msg(1), deadline).await?;
    let frame = read_frame(&mut s, deadline).await?;
    Ok(parse_hello(&frame))
}

async fn probe(nx: u16, silent: u16, trickle: u16, dns: u16) -> Result<()> {
    // 1. One hello.
    let t = rt::now();
    let (ok, wire) = hello(nx, after_ms(5000)).await?;
    println!(
        "1. hello: ok={ok} maxWireVersion={wire} in {:.1} ms",
        ms_since(t)
    );
    assert_eq!(ok, 1.0);

    // 1b. Two hellos in one write; frame by frame with read_to_len(4): what a
    // host read brings past the frame stays in the stream.
    let mut s = TcpStream::connect("127.0.0.1", nx, after_ms(5000)).await?;
    let mut two = hello_msg(7);
    two.extend_from_slice(&hello_msg(8));
    s.write_all(&two, after_ms(5000)).await?;
    for i in 0..2 {
        let mut buf = Vec::new();
        s.read_to_len(&mut buf, 4, after_ms(5000)).await?;
        assert_eq!(buf.len(), 4);
        let len = i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        s.read_to_len(&mut buf, len, after_ms(5000)).await?;
        let (ok, _) = parse_hello(&buf);
        assert_eq!(ok, 1.0);
        println!("1b. pipelined reply {i}: {len} bytes, ok={ok}");
    }

    // 1c. A read cut off by its deadline loses nothing: the stream still reads
    // the whole reply after it.
    s.write_all(&hello_msg(9), after_ms(5000)).await?;
    let mut buf = Vec::new();
    let first = s.read_up_to(&mut buf, 1 << 20, 1 << 20, after_ms(1)).await;
    let kept = buf.len();
    let first = match first {
        Err(e) if e.is_timeout() => format!("timed out with {kept} bytes in buf"),
        other => format!("{other:?}"),
    };
    let len = if buf.len() >= 4 {
        i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize
    } else {
        s.read_to_len(&mut buf, 4, after_ms(5000)).await?;
        i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize
    };
    s.read_to_len(&mut buf, len, after_ms(5000)).await?;
    let (ok, _) = parse_hello(&buf);
    assert_eq!(ok, 1.0);
    println!("1c. read with a 1 ms deadline: {first}; then the whole reply: ok={ok}");
    drop(s);

    // 2. 16 hellos on 16 connections at once, in this one task.
    let t = rt::now();
    let results = join_all((0..16).map(|_| hello(nx, after_ms(10_000))).collect()).await;
    let good = results
        .iter()
        .filter(|r| matches!(r, Ok((ok, _)) if *ok == 1.0))
        .count();
    println!(
        "2. 16 concurrent hellos: {good}/16 ok in {:.1} ms",
        ms_since(t)
    );
    for r in &results {
        if let Err(e) = r {
            println!("   error: {e}");
        }
    }
    assert_eq!(good, 16);

    // 2b. The same with wit-bindgen's spawn_local (tasks woken by others).
    let t = rt::now();
    let handles: Vec<_> = (0..16)
        .map(|_| wasip3::spawn_local(hello(nx, after_ms(10_000))))
        .collect();
    let mut good = 0;
    for h in handles {
        if matches!(h.await, Some(Ok((ok, _))) if ok == 1.0) {
            good += 1;
        }
    }
    println!(
        "2b. 16 spawned hellos: {good}/16 ok in {:.1} ms",
        ms_since(t)
    );
    assert_eq!(good, 16);

    // 3. A silent server: a 200 ms read deadline, while 15 hellos run beside it.
    let silent_read = async {
        let mut s = TcpStream::connect("127.0.0.1", silent, after_ms(5000)).await?;
        s.write_all(&hello_msg(3), after_ms(5000)).await?;
        let t = rt::now();
        let mut buf = Vec::new();
        let r = s.read_up_to(&mut buf, 4, 1024, after_ms(200)).await;
        Ok::<_, mongo_wasi::error::Error>((r, ms_since(t)))
    };
    let company = join_all((0..15).map(|_| hello(nx, after_ms(10_000))).collect());
    let ((silent_result, waited), company) = {
        let (a, b) = futures_lite::future::zip(silent_read, company).await;
        (a?, b)
    };
    let good = company
        .iter()
        .filter(|r| matches!(r, Ok((ok, _)) if *ok == 1.0))
        .count();
    match &silent_result {
        Err(e) if e.is_timeout() => println!(
            "3. silent server: timed out after {waited:.1} ms (deadline 200 ms): {e}; \
             beside it {good}/15 hellos ok"
        ),
        other => println!("3. silent server: UNEXPECTED {other:?}"),
    }
    assert!(matches!(&silent_result, Err(e) if e.is_timeout()));
    assert_eq!(good, 15);

    // 3c. A write the silent server never drains: cut off by its deadline,
    // the stream is then broken, and dropping it does not wait for the host.
    let mut s = TcpStream::connect("127.0.0.1", silent, after_ms(5000)).await?;
    let big = vec![0u8; 64 << 20];
    let t = rt::now();
    let w = s.write_all(&big, after_ms(200)).await;
    let waited = ms_since(t);
    let again = s.write_all(&hello_msg(4), after_ms(200)).await;
    let t = rt::now();
    drop(s);
    let closed = ms_since(t);
    println!(
        "3c. 64 MiB write to the silent server: {:?} after {waited:.1} ms; next write: {:?}; \
         drop took {closed:.3} ms",
        w.as_ref().map_err(|e| e.to_string()),
        again.as_ref().map_err(|e| e.to_string())
    );
    assert!(matches!(&w, Err(e) if e.is_timeout()));
    assert!(matches!(&again, Err(e) if e.is_network()));

    // 3d. A server sending a byte every 5 ms (0, 1, 2, ...): 20 reads each cut
    // off by a 13 ms deadline; what they kept is contiguous (nothing lost).
    let mut s = TcpStream::connect("127.0.0.1", trickle, after_ms(5000)).await?;
    let mut buf = Vec::new();
    let mut timeouts = 0;
    for _ in 0..20 {
        match s.read_to_len(&mut buf, 1 << 20, after_ms(13)).await {
            Err(e) if e.is_timeout() => timeouts += 1,
            other => other?,
        }
    }
    let contiguous = buf.iter().enumerate().all(|(i, b)| *b == i as u8);
    println!(
        "3d. trickle: {timeouts}/20 reads timed out, {} bytes kept, contiguous: {contiguous}",
        buf.len()
    );
    assert!(contiguous && timeouts == 20 && !buf.is_empty());

    // 3b. An expired deadline fails without touching the socket.
    let expired = rt::within(after_ms(0), "socket read", async {
        Ok::<_, mongo_wasi::error::Error>(())
    })
    .await;
    println!(
        "3b. expired deadline: {:?}",
        expired.map_err(|e| e.to_string())
    );

    // 5. Names: a name server first (UDP, TCP on truncation), ip-name-lookup after.
    let server = std::net::SocketAddr::from(([127, 0, 0, 1], dns));
    let t = rt::now();
    let ips = rt::dns::resolve_via("db.p3.test", &[server], after_ms(3000)).await?;
    println!(
        "5. db.p3.test via the name server: {ips:?} in {:.1} ms",
        ms_since(t)
    );
    assert_eq!(ips, [std::net::IpAddr::from([127, 0, 0, 1])]);
    let t = rt::now();
    let tc = rt::dns_lookup(
        &[server],
        "tc.p3.test",
        mongo_wasi::dns::RecordType::A,
        after_ms(3000),
    )
    .await?;
    println!(
        "5b. tc.p3.test (TC=1 over UDP, then TCP): {tc:?} in {:.1} ms",
        ms_since(t)
    );
    assert!(matches!(&tc, Ok(r) if r.len() == 1));
    let mut s = TcpStream::connect_via("db.p3.test", nx, &[server], after_ms(3000)).await?;
    s.write_all(&hello_msg(5), after_ms(3000)).await?;
    let (ok, _) = parse_hello(&read_frame(&mut s, after_ms(3000)).await?);
    println!("5c. connect_via db.p3.test:{nx} and hello: ok={ok}");
    assert_eq!(ok, 1.0);
    let nx_name = rt::dns::resolve_via("nope.p3.test", &[server], after_ms(3000)).await;
    println!(
        "5d. nope.p3.test (NXDOMAIN, then ip-name-lookup): {:?}",
        nx_name.map_err(|e| e.to_string())
    );
    let t = rt::now();
    let host = rt::dns::resolve("vm", after_ms(3000)).await;
    println!(
        "5e. ip-name-lookup of \"vm\" (/etc/hosts): {:?} in {:.1} ms",
        host.map_err(|e| e.to_string()),
        ms_since(t)
    );
    let nobody = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    let t = rt::now();
    let silent_dns = rt::dns_lookup(
        &[nobody],
        "db.p3.test",
        mongo_wasi::dns::RecordType::A,
        after_ms(300),
    )
    .await;
    println!(
        "5f. DNS to a closed UDP port, 300 ms deadline: {:?} after {:.1} ms",
        silent_dns.map_err(|e| e.to_string()),
        ms_since(t)
    );

    let t = rt::now();
    let unanswered = rt::dns_lookup(
        &[server],
        "silent.p3.test",
        mongo_wasi::dns::RecordType::A,
        after_ms(300),
    )
    .await;
    let waited = ms_since(t);
    println!(
        "5g. a query the server never answers, 300 ms deadline: {:?} after {waited:.1} ms",
        unanswered.as_ref().map_err(|e| e.to_string())
    );
    assert!(matches!(&unanswered, Err(e) if e.is_timeout()));

    // 4. sleep_until 100 ms.
    for _ in 0..3 {
        let t = rt::now();
        rt::sleep_until(after_ms(100)).await;
        println!("4. sleep_until 100 ms: {:.1} ms", ms_since(t));
    }
    let t = rt::now();
    rt::sleep_until(Deadline::Infinite).await;
    println!("4b. sleep_until Infinite: {:.3} ms", ms_since(t));
    Ok(())
}
