//! The examples that use the driver component from outside, composed with it
//! by `cargo xtask build` (`target/examples/*.wasm`) and run by the wasmtime
//! CLI, as an adopter would: `examples/consumer` as a command, and
//! `examples/http-handler` under `wasmtime serve`, answering real HTTP
//! requests on loopback through the failpoint proxy, which counts the
//! MongoDB connections and commands each request costs.
//!
//! Ignored by default (they need the composed examples and the wasmtime CLI
//! from `.work/venv`): `cargo xtask examples` runs them, and prints the
//! handler's figures; so does a step of `cargo xtask test`.
//! `MONGO_WASI_EXAMPLE_REQUESTS` sets how many requests are measured (200).

use host_tests::dns_responder::{DnsResponder, Mode, Records};
use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, Stats, User};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `target/examples/<name>.wasm`: the example composed with the driver.
fn composed(name: &str) -> PathBuf {
    let dir = std::env::var_os("MONGO_WASI_EXAMPLES").map_or_else(
        || host_tests::repo_root().join("target/examples"),
        PathBuf::from,
    );
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask build`",
        path.display()
    );
    path
}

/// The wasmtime CLI: `MONGO_WASI_WASMTIME`, else the one in the venv.
fn wasmtime() -> PathBuf {
    let path = std::env::var_os("MONGO_WASI_WASMTIME").map_or_else(
        || host_tests::repo_root().join(".work/venv/bin/wasmtime"),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask setup`",
        path.display()
    );
    path
}

#[test]
#[ignore = "needs the composed examples and the wasmtime CLI: cargo xtask examples"]
fn consumer_writes_reads_back_and_prints() {
    let (uri, _) = host_tests::test_server();
    let out = Command::new(wasmtime())
        .args(["run", "-S", "inherit-network"])
        .arg(composed("consumer"))
        .arg(&uri)
        .output()
        .expect("wasmtime runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    let lines: Vec<&str> = stdout.lines().collect();
    // inserted ObjectId("...") / read back { "_id": ObjectId("..."), "text": ..., "n": 42 }
    let id = lines[0]
        .strip_prefix("inserted ObjectId(\"")
        .and_then(|rest| rest.strip_suffix("\")"))
        .unwrap_or_else(|| panic!("first line: {stdout}"));
    assert_eq!(id.len(), 24, "{stdout}");
    let read_back = lines[1];
    assert!(read_back.starts_with("read back {"), "{stdout}");
    for field in [
        format!("\"_id\": ObjectId(\"{id}\")"),
        "\"text\": \"hello from a composed component\"".to_string(),
        "\"n\": 42".to_string(),
    ] {
        assert!(read_back.contains(&field), "{field} in {read_back}");
    }
    let count: u64 = lines[2]
        .strip_suffix(" documents in consumer_example.greetings")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("third line: {stdout}"));
    assert!(count >= 1, "{stdout}");
}

/// `wasmtime serve` with the composed handler on a free loopback port,
/// killed when dropped.
struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Serve {
    fn start(mongodb_uri: &str, extra: &[&str]) -> Serve {
        Serve::start_handler("http-handler", mongodb_uri, extra)
    }

    /// `handler`: `http-handler` (0.2, composed) or `http-handler-p3` (0.3).
    fn start_handler(handler: &str, mongodb_uri: &str, extra: &[&str]) -> Serve {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        // -S cli: wasmtime serve links wasi:sockets only with the CLI interfaces.
        let child = Command::new(wasmtime())
            .args(["serve", "-S", "cli", "-S", "inherit-network"])
            .arg("--addr")
            .arg(addr.to_string())
            .arg("--env")
            .arg(format!("MONGODB_URI={mongodb_uri}"))
            .args(extra)
            .arg(composed(handler))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("wasmtime serve starts");
        let mut serve = Serve { child, addr };
        // It compiles the component first (seconds on a loaded machine).
        let deadline = Instant::now() + Duration::from_secs(120);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = serve.child.try_wait() {
                panic!("wasmtime serve exited: {status}");
            }
            assert!(Instant::now() < deadline, "wasmtime serve never listened");
            std::thread::sleep(Duration::from_millis(100));
        }
        serve
    }

    fn client(&self) -> Http {
        let stream = TcpStream::connect(self.addr).expect("connect to wasmtime serve");
        stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
        stream.set_nodelay(true).ok();
        Http {
            reader: BufReader::new(stream.try_clone().unwrap()),
            stream,
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 client on one keep-alive connection.
struct Http {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Http {
    fn request(&mut self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        let answer = self.exchange(method, path, body);
        (answer.status, answer.body)
    }

    /// One request and its answer, with the handler's `x-instance-id`.
    fn exchange(&mut self, method: &str, path: &str, body: &[u8]) -> Answer {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        self.stream.write_all(head.as_bytes()).unwrap();
        self.stream.write_all(body).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("status line {line:?}"));
        let (mut length, mut chunked, mut instance) = (0usize, false, None);
        let mut scram_derivations = None;
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap(),
                "transfer-encoding" => chunked = value.contains("chunked"),
                "x-instance-id" => instance = Some(value.trim().to_string()),
                "x-scram-derivations" => scram_derivations = value.trim().parse().ok(),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line).unwrap();
                let size = usize::from_str_radix(line.trim(), 16).unwrap();
                let mut chunk = vec![0; size + 2]; // and its CRLF
                self.reader.read_exact(&mut chunk).unwrap();
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            body.resize(length, 0);
            self.reader.read_exact(&mut body).unwrap();
        }
        Answer {
            status,
            body: String::from_utf8(body).unwrap(),
            instance,
            scram_derivations,
        }
    }
}

struct Answer {
    status: u16,
    body: String,
    instance: Option<String>,
    /// `x-scram-derivations`: the instance's PBKDF2 runs (once it has a client).
    scram_derivations: Option<u64>,
}

/// The handler's `{"id": "<hex>"}`.
fn id_of(body: &str) -> String {
    body.strip_prefix("{\"id\":\"")
        .and_then(|rest| rest.strip_suffix("\"}"))
        .unwrap_or_else(|| panic!("not an id: {body}"))
        .to_string()
}

/// A proxy in front of the test server, and a URI through it.
fn proxy() -> (Proxy, String) {
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig::new(backend)).expect("failpoint proxy");
    let uri = format!("mongodb://{}/?timeoutMS=5000", proxy.addresses()[0]);
    (proxy, uri)
}

#[test]
#[ignore = "needs the composed examples and the wasmtime CLI: cargo xtask examples"]
fn http_handler_serves_its_json_api() {
    json_api("http-handler");
}

#[test]
#[ignore = "needs the built examples and the wasmtime CLI: cargo xtask examples"]
fn http_handler_p3_serves_the_same_json_api() {
    json_api("http-handler-p3");
}

fn json_api(handler: &str) {
    let (_proxy, uri) = proxy();
    let serve = Serve::start_handler(handler, &uri, &[]);
    let mut http = serve.client();
    let (status, body) = http.request("POST", "/items", br#"{"name": "apple", "qty": 3}"#);
    assert_eq!(status, 201, "{body}");
    let apple = id_of(&body);
    let (status, body) = http.request("POST", "/items", br#"{"name": "pear", "tags": ["green"]}"#);
    assert_eq!(status, 201, "{body}");
    let pear = id_of(&body);

    let (status, body) = http.request("GET", &format!("/items/{apple}"), b"");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        format!(r#"{{"_id":{{"$oid":"{apple}"}},"name":"apple","qty":3}}"#)
    );
    let (status, body) = http.request("GET", "/items", b"");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with('[') && body.ends_with(']'), "{body}");
    for id in [&apple, &pear] {
        assert!(
            body.contains(&format!(r#"{{"$oid":"{id}"}}"#)),
            "{id} in {body}"
        );
    }
    assert!(body.contains(r#""tags":["green"]"#), "{body}");

    let (status, body) = http.request("GET", "/items/0123456789abcdef01234567", b"");
    assert_eq!(
        (status, body.as_str()),
        (404, r#"{"error":"no such item"}"#)
    );
    // A duplicate `_id` is the client's conflict: 409, the kind by its WIT name.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let item = format!(r#"{{"_id": "dup-{nanos}", "name": "plum"}}"#);
    let (status, body) = http.request("POST", "/items", item.as_bytes());
    assert_eq!(status, 201, "{body}");
    let (status, body) = http.request("POST", "/items", item.as_bytes());
    assert_eq!(status, 409, "{body}");
    assert!(body.contains(r#""kind":"duplicate-key""#), "{body}");
    assert!(!body.contains("ErrorKind"), "no Rust Debug text: {body}");

    let (status, body) = http.request("POST", "/items", b"{not json");
    assert_eq!(status, 400, "{body}");
    let (status, body) = http.request("POST", "/items", b"[1, 2]");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("expected a JSON object"), "{body}");
    let (status, _) = http.request("DELETE", "/items", b"");
    assert_eq!(status, 405);
    let (status, _) = http.request("GET", "/elsewhere", b"");
    assert_eq!(status, 404);
}

/// What `requests` sequential `GET /items/<id>` cost, seen from the client
/// and at the proxy.
struct Figures {
    requests: usize,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    stats: Stats,
}

impl Figures {
    fn per_request(&self, n: u64) -> f64 {
        n as f64 / self.requests as f64
    }

    fn command(&self, name: &str) -> u64 {
        self.stats.commands.get(name).copied().unwrap_or(0)
    }

    fn print(&self, what: &str) {
        let commands: Vec<String> = self
            .stats
            .commands
            .iter()
            .map(|(name, n)| format!("{name} {:.2}", self.per_request(*n)))
            .collect();
        println!(
            "{what}: {} requests, {:.0} requests/s, latency p50 {:.2} ms, p99 {:.2} ms; \
             per request: {:.2} MongoDB connections opened, commands: {}",
            self.requests,
            self.per_second,
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.per_request(self.stats.connections_opened),
            commands.join(", "),
        );
    }
}

/// An item's path, for the measured requests.
fn an_item(serve: &Serve) -> String {
    let (status, body) = serve
        .client()
        .request("POST", "/items", br#"{"name": "fig"}"#);
    assert_eq!(status, 201, "{body}");
    format!("/items/{}", id_of(&body))
}

fn measure(serve: &Serve, proxy: &Proxy, path: &str) -> Figures {
    let requests: usize = std::env::var("MONGO_WASI_EXAMPLE_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let mut http = serve.client();
    // One request first, so the measured ones are alike.
    assert_eq!(http.request("GET", path, b"").0, 200);
    proxy.reset_stats();
    let mut latencies = Vec::with_capacity(requests);
    let started = Instant::now();
    for _ in 0..requests {
        let t = Instant::now();
        let (status, body) = http.request("GET", path, b"");
        latencies.push(t.elapsed());
        assert_eq!(status, 200, "{body}");
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    Figures {
        requests,
        per_second: requests as f64 / elapsed.as_secs_f64(),
        p50: at(0.5),
        p99: at(0.99),
        stats: proxy.stats(),
    }
}

#[test]
#[ignore = "needs the composed examples and the wasmtime CLI: cargo xtask examples"]
fn http_handler_cold_cost_per_request() {
    let (proxy, uri) = proxy();
    // wasmtime serve's default for a WASIp2 component: a new instance per request.
    let serve = Serve::start(&uri, &[]);
    let path = an_item(&serve);
    // What a request costs without the driver: wasmtime's own share.
    let bare = measure(&serve, &proxy, "/health");
    bare.print("GET /health, no MongoDB, instance per request");
    assert_eq!(bare.stats.connections_opened, 0);
    let cold = measure(&serve, &proxy, &path);
    cold.print("GET /items/<id>, instance per request (wasmtime serve's default)");
    // The cold path: one connection, one hello (the check whose connection
    // the operation then uses), then the find; nothing else.
    assert_eq!(cold.per_request(cold.stats.connections_opened), 1.0);
    assert_eq!(cold.per_request(cold.command("hello")), 1.0);
    assert_eq!(cold.per_request(cold.command("find")), 1.0);
    let total: u64 = cold.stats.commands.values().sum();
    assert_eq!(cold.per_request(total), 2.0, "{:?}", cold.stats.commands);
}

#[test]
#[ignore = "needs the composed examples and the wasmtime CLI: cargo xtask examples"]
fn http_handler_reuses_its_connection_with_the_instance() {
    let (proxy, uri) = proxy();
    let serve = Serve::start(&uri, &["--max-instance-reuse-count", "100000"]);
    let path = an_item(&serve);
    let warm = measure(&serve, &proxy, &path);
    warm.print("GET /items/<id>, instance reused (--max-instance-reuse-count 100000)");
    // An instance serves request after request with its client's pooled
    // connection. wasmtime may still start another instance now and then
    // (an idle one is dropped after 1 s): each costs one connection, one hello.
    assert!(warm.stats.connections_opened <= 4, "{:?}", warm.stats);
    assert_eq!(warm.command("hello"), warm.stats.connections_opened);
    assert_eq!(warm.per_request(warm.command("find")), 1.0);
}

/// The pool size the WASI 0.3 handler's client gets under load: small, so
/// that 16 requests in flight in one instance wait for a connection, and so
/// that the pools' hellos stay under 0.1 per request however many instances
/// wasmtime starts for the first wave (4 to 16 seen).
const P3_MAX_POOL_SIZE: u64 = 2;

/// What `requests` requests, `in_flight` at a time (each sender on its own
/// keep-alive connection), cost: seen from the senders, at the proxy, and
/// in the instances the answers came from.
struct Load {
    what: String,
    requests: usize,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    instances: usize,
    stats: Stats,
}

impl Load {
    /// hello and its legacy spellings: each connection's handshake, and any
    /// monitoring check.
    fn hellos(&self) -> u64 {
        ["hello", "isMaster", "ismaster"]
            .iter()
            .filter_map(|name| self.stats.commands.get(*name))
            .sum()
    }

    fn row(&self) -> String {
        let per = |n: u64| n as f64 / self.requests as f64;
        format!(
            "{:<44} {:>8.0} {:>8.2} {:>8.2} {:>9} {:>11} {:>12.3} {:>10.3}",
            self.what,
            self.per_second,
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.instances,
            self.stats.connections_opened,
            per(self.stats.connections_opened),
            per(self.hellos()),
        )
    }

    fn header() -> String {
        format!(
            "{:<44} {:>8} {:>8} {:>8} {:>9} {:>11} {:>12} {:>10}",
            "handler",
            "req/s",
            "p50 ms",
            "p99 ms",
            "instances",
            "connections",
            "conns/req",
            "hellos/req"
        )
    }
}

fn load_requests() -> usize {
    std::env::var("MONGO_WASI_LOAD_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(400)
}

/// `requests` requests, 16 in flight: every 4th a `POST /items` (201 and a
/// new ObjectId), the others `GET /items/<id>` of one item made first (200
/// and exactly that document). Every answer is checked and must name its
/// instance.
fn load(what: &str, serve: &Serve, proxy: &Proxy, requests: usize) -> Load {
    const IN_FLIGHT: usize = 16;
    let mut http = serve.client();
    let (status, body) = http.request("POST", "/items", br#"{"name": "seed", "seq": -1}"#);
    assert_eq!(status, 201, "{body}");
    let seed = id_of(&body);
    let path = format!("/items/{seed}");
    let expected = format!(r#"{{"_id":{{"$oid":"{seed}"}},"name":"seed","seq":-1}}"#);
    drop(http);
    proxy.reset_stats();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    let answered: Vec<(Duration, String)> = std::thread::scope(|scope| {
        let senders: Vec<_> = (0..IN_FLIGHT)
            .map(|_| {
                scope.spawn(|| {
                    let mut http = serve.client();
                    let mut out = Vec::new();
                    // Bounded: each turn takes one of the `requests` numbers.
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= requests {
                            break out;
                        }
                        let t = Instant::now();
                        let answer = if i.is_multiple_of(4) {
                            let item = format!(r#"{{"name": "load", "i": {i}}}"#);
                            let answer = http.exchange("POST", "/items", item.as_bytes());
                            assert_eq!(answer.status, 201, "request {i}: {}", answer.body);
                            let id = id_of(&answer.body);
                            assert!(
                                id.len() == 24 && id.bytes().all(|b| b.is_ascii_hexdigit()),
                                "request {i}: {}",
                                answer.body
                            );
                            answer
                        } else {
                            let answer = http.exchange("GET", &path, b"");
                            assert_eq!(
                                (answer.status, answer.body.as_str()),
                                (200, expected.as_str()),
                                "request {i}"
                            );
                            answer
                        };
                        let elapsed = t.elapsed();
                        let instance = answer
                            .instance
                            .unwrap_or_else(|| panic!("request {i}: no x-instance-id"));
                        out.push((elapsed, instance));
                    }
                })
            })
            .collect();
        senders
            .into_iter()
            .flat_map(|s| s.join().expect("a sender panicked"))
            .collect()
    });
    let elapsed = started.elapsed();
    assert_eq!(answered.len(), requests);
    let mut latencies: Vec<Duration> = answered.iter().map(|(d, _)| *d).collect();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    let instances: std::collections::BTreeSet<&String> = answered.iter().map(|(_, i)| i).collect();
    let figures = Load {
        what: what.to_string(),
        requests,
        per_second: requests as f64 / elapsed.as_secs_f64(),
        p50: at(0.5),
        p99: at(0.99),
        instances: instances.len(),
        stats: proxy.stats(),
    };
    // The other tests list the collection's first 100 documents: take these out again.
    let removed = remove_load_items();
    assert_eq!(
        removed,
        1 + requests.div_ceil(4) as i32,
        "documents removed"
    );
    figures
}

/// `{delete: "items", deletes: [{q: {name: {$in: ["seed", "load"]}}, limit: 0}]}`
/// straight to the test server (not through the proxy) in one OP_MSG; the
/// number of documents deleted.
fn remove_load_items() -> i32 {
    let (_, backend) = host_tests::test_server();
    let command = bson::doc! {
        "delete": "items",
        "deletes": [{ "q": { "name": { "$in": ["seed", "load"] } }, "limit": 0 }],
        "$db": "http_example",
    };
    let body = command.to_vec().expect("a command document");
    let mut message = Vec::new();
    for v in [(16 + 4 + 1 + body.len()) as i32, 1, 0, 2013] {
        message.extend_from_slice(&v.to_le_bytes());
    }
    message.extend_from_slice(&0u32.to_le_bytes());
    message.push(0);
    message.extend_from_slice(&body);
    let mut stream = TcpStream::connect(backend).expect("connect to the test server");
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    stream.write_all(&message).expect("send the delete");
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).expect("a reply");
    let mut reply = vec![0u8; i32::from_le_bytes(length) as usize - 4];
    stream.read_exact(&mut reply).expect("the whole reply");
    // Header (12 more bytes), flagBits (4), section kind 0 (1), then the document.
    let reply = bson::Document::from_reader(&reply[17..]).expect("a reply document");
    let ok = reply
        .get("ok")
        .and_then(|ok| ok.as_f64().or(ok.as_i32().map(f64::from)));
    assert_eq!(ok, Some(1.0), "{reply}");
    reply.get_i32("n").unwrap_or_else(|_| panic!("{reply}"))
}

/// The WASI 0.3 handler under wasmtime serve's defaults (16 requests at
/// once per instance, 128 per instance, 1 s idle): the requests an
/// instance serves share its one client, so its pool, and MongoDB sees a
/// few connections per instance (its pool's and its monitor's) and one
/// hello per connection, plus the monitor's own.
fn p3_under_load(requests: usize) -> Load {
    let (proxy, backend) = proxy();
    let uri = format!("{backend}&maxPoolSize={P3_MAX_POOL_SIZE}");
    let serve = Serve::start_handler("http-handler-p3", &uri, &[]);
    let p3 = load(
        &format!("0.3, serve defaults, maxPoolSize {P3_MAX_POOL_SIZE}"),
        &serve,
        &proxy,
        requests,
    );
    println!("{}\n{}", Load::header(), p3.row());
    // The instance that made the seed item may have connected before the
    // counters were reset: it is counted among the instances all the same.
    // Each instance's monitor task (one per server) has a connection of its
    // own and, streaming, an RTT connection: neither counts in its pool.
    let instances = p3.instances as u64;
    let monitoring_connections = 2 * instances;
    assert!(
        p3.stats.connections_opened <= instances * P3_MAX_POOL_SIZE + monitoring_connections,
        "{} connections for {instances} instances of maxPoolSize {P3_MAX_POOL_SIZE} and 2 \
         monitoring connections each: {:?}",
        p3.stats.connections_opened,
        p3.stats
    );
    // Each connection's handshake is its one hello, and each monitor adds
    // its first awaitable hello and its RTT task's first hello (the next
    // ones come after heartbeatFrequencyMS, 10 s): nothing checks a pooled
    // connection again.
    let monitor_checks = 2 * instances;
    assert!(
        p3.hellos() <= p3.stats.connections_opened + monitor_checks,
        "{:?}",
        p3.stats
    );
    // What is left are the pools' handshakes: they grow with the instances
    // wasmtime starts, never with the requests the instances share.
    let pool_hellos = p3
        .hellos()
        .saturating_sub(monitoring_connections + monitor_checks);
    assert!(
        (pool_hellos as f64) < 0.1 * requests as f64,
        "{pool_hellos} pool hellos ({} in all) for {requests} requests in {instances} \
         instances: {:?}",
        p3.hellos(),
        p3.stats
    );
    p3
}

#[test]
#[ignore = "needs the built examples and the wasmtime CLI: cargo xtask examples"]
fn http_handler_p3_shares_its_pool_under_load() {
    p3_under_load(load_requests());
}

/// The same load on the WASI 0.3 handler and on the 0.2 one (instance per
/// request, wasmtime serve's default for 0.2; then instances reused for up
/// to 128 requests, as 0.3 gets by default), printed as a table.
/// `cargo xtask examples --compare` runs it.
#[test]
#[ignore = "a comparison, not a check: cargo xtask examples --compare"]
fn http_handlers_under_load_compared() {
    let requests = load_requests();
    let mut rows = vec![p3_under_load(requests)];
    for (what, extra) in [
        ("0.2, instance per request (serve default)", &[][..]),
        (
            "0.2, --max-instance-reuse-count 128",
            &["--max-instance-reuse-count", "128"][..],
        ),
    ] {
        let (proxy, uri) = proxy();
        let serve = Serve::start(&uri, extra);
        let row = load(what, &serve, &proxy, requests);
        // A 0.2 instance runs one request at a time: one connection at most.
        assert!(
            row.stats.connections_opened <= row.instances as u64,
            "{:?}",
            row.stats
        );
        rows.push(row);
    }
    println!(
        "\n{requests} requests, 16 in flight, 3 GET /items/<id> to 1 POST /items; \
         connections and hellos counted at a proxy in front of nx-27017"
    );
    println!("{}", Load::header());
    for row in &rows {
        println!("{}", row.row());
    }
}

#[test]
#[ignore = "needs the composed examples and the wasmtime CLI: cargo xtask examples"]
fn http_handler_keeps_its_warm_state_in_a_file() {
    warm_state_in_a_file("http-handler");
}

#[test]
#[ignore = "needs the built examples and the wasmtime CLI: cargo xtask examples"]
fn http_handler_p3_keeps_its_warm_state_in_a_file() {
    warm_state_in_a_file("http-handler-p3");
}

/// Warm state (issue 28): the handler keeps the driver's blob in a file of
/// a directory the host preopens. Each request gets a new instance; the
/// first, cold, looks up SRV, TXT and the target's address and runs PBKDF2
/// for the SCRAM user; the second adopts the first one's blob and does
/// none of it (the answers' 60 s TTL has not run out).
fn warm_state_in_a_file(handler: &str) {
    const SRV_HOST: &str = "test1.test.build.10gen.cc";
    const TARGET: &str = "localhost.test.build.10gen.cc";
    let (_, backend) = host_tests::test_server();
    let proxy = Proxy::start(ProxyConfig {
        auth: AuthConfig::with_users(vec![User::new("warm", "admin", "warm-pw")]),
        ..ProxyConfig::new(backend)
    })
    .expect("failpoint proxy");
    let records = Records::default()
        .srv(
            &format!("_mongodb._tcp.{SRV_HOST}"),
            proxy.addresses()[0].port(),
            TARGET,
        )
        .txt(SRV_HOST, &["authSource=admin"])
        .a(TARGET, Ipv4Addr::LOCALHOST);
    let dns = DnsResponder::start(records, Mode::Answer).expect("DNS responder");
    let dir =
        std::env::temp_dir().join(format!("mongo-wasi-warm-{handler}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let uri = format!("mongodb+srv://warm:warm-pw@{SRV_HOST}/?tls=false&timeoutMS=10000");
    let serve = Serve::start_handler(
        handler,
        &uri,
        &[
            "--env",
            &format!("MONGO_WASI_DNS_SERVER={}", dns.addr()),
            "--dir",
            &format!("{}::/warm", dir.display()),
            "--env",
            "WARM_STATE=/warm/mongo-wasi",
            // A new instance per request (0.3's default reuses one for 128).
            "--max-instance-reuse-count",
            "1",
        ],
    );
    // The responder's queries so far: SRV, TXT, A.
    let asked = || {
        let log = dns.log();
        let n = |t: &str| log.iter().filter(|q| q.ends_with(&format!(" {t}"))).count();
        (n("SRV"), n("TXT"), n("A"))
    };
    let mut figures = Vec::new();
    let mut instances = Vec::new();
    for i in 0..2 {
        let before = asked();
        let mut http = serve.client();
        let started = Instant::now();
        let answer = http.exchange("GET", "/items", b"");
        let ms = started.elapsed().as_secs_f64() * 1e3;
        assert_eq!(answer.status, 200, "request {i}: {}", answer.body);
        let after = asked();
        let dns_queries = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
        println!(
            "{handler} request {i}: {ms:.1} ms, PBKDF2 {:?}, DNS queries SRV/TXT/A {dns_queries:?}",
            answer.scram_derivations
        );
        figures.push((answer.scram_derivations, dns_queries));
        instances.push(answer.instance);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_ne!(instances[0], instances[1], "two instances");
    assert_eq!(figures[0].0, Some(1), "the cold instance derives the keys");
    assert_eq!(
        (figures[0].1 .0, figures[0].1 .1),
        (1, 1),
        "{:?}",
        dns.log()
    );
    assert_eq!(figures[1].0, Some(0), "the second instance runs no PBKDF2");
    assert_eq!(
        figures[1].1,
        (0, 0, 0),
        "the second instance asks no DNS: {:?}",
        dns.log()
    );
}
