//! Test helpers: a fake backend and a tiny wire client, with their own framing code.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use mongo_wasi_proxy::{Proxy, ProxyConfig, Topology};

pub const TIMEOUT: Duration = Duration::from_secs(10);

fn read_exact_or_eof(s: &mut TcpStream, buf: &mut [u8]) -> Option<()> {
    s.read_exact(buf).ok()
}

/// Reads one message: (request id, response to, opcode, payload after the header).
pub fn read_msg(s: &mut TcpStream) -> Option<(i32, i32, i32, Vec<u8>)> {
    let mut head = [0u8; 16];
    read_exact_or_eof(s, &mut head)?;
    let f = |i: usize| i32::from_le_bytes(head[i..i + 4].try_into().unwrap());
    let len = f(0);
    assert!((16..=48_000_000).contains(&len), "bad reply length {len}");
    let mut payload = vec![0u8; len as usize - 16];
    read_exact_or_eof(s, &mut payload)?;
    Some((f(4), f(8), f(12), payload))
}

pub fn encode_msg(request_id: i32, response_to: i32, flags: u32, body: &Document) -> Vec<u8> {
    let doc = body.to_vec().unwrap();
    let len = 16 + 4 + 1 + doc.len();
    let mut out = Vec::with_capacity(len);
    out.extend((len as i32).to_le_bytes());
    out.extend(request_id.to_le_bytes());
    out.extend(response_to.to_le_bytes());
    out.extend(2013i32.to_le_bytes());
    out.extend(flags.to_le_bytes());
    out.push(0);
    out.extend(doc);
    out
}

/// The body of an OP_MSG payload (section kind 0 is assumed first, as servers send it).
pub fn body_of(payload: &[u8]) -> Document {
    assert_eq!(payload[4], 0, "first section must be the body");
    Document::from_reader(&payload[5..]).unwrap()
}

/// A fake backend answering every OP_MSG with `{ok: 1, echo: <command name>}` (writes also get
/// `n: 1`); a command carrying `die: true` makes it close the connection, `fail: <i32>` fails
/// it with that code, `cursorId: <i64>` (or `cursorId32: <i32>`) answers a cursor with that id. Records every command name it saw.
pub struct FakeBackend {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl FakeBackend {
    pub fn start() -> FakeBackend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let handle = thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let seen = seen2.clone();
                thread::spawn(move || serve_fake(stream, seen));
            }
        });
        FakeBackend {
            addr,
            seen,
            stop,
            handle: Some(handle),
        }
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self, name: &str) -> usize {
        self.seen().iter().filter(|n| *n == name).count()
    }
}

impl Drop for FakeBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn serve_fake(mut s: TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut id = 1000;
    while let Some((req_id, _, op, payload)) = read_msg(&mut s) {
        assert_eq!(op, 2013, "the proxy forwards only OP_MSG");
        let body = body_of(&payload);
        let name = body.keys().next().cloned().unwrap_or_default();
        seen.lock().unwrap().push(name.clone());
        if body.get_bool("die").unwrap_or(false) {
            let _ = s.shutdown(Shutdown::Both);
            return;
        }
        let mut reply = doc! { "ok": 1.0, "echo": name.as_str() };
        if matches!(name.as_str(), "insert" | "update" | "delete") {
            reply.insert("n", 1);
        }
        if let Ok(id) = body.get_i64("cursorId") {
            reply.insert(
                "cursor",
                doc! { "id": id, "ns": "test.c", "firstBatch": [] },
            );
        }
        if let Ok(id) = body.get_i32("cursorId32") {
            reply.insert(
                "cursor",
                doc! { "id": id, "ns": "test.c", "firstBatch": [] },
            );
        }
        if let Ok(code) = body.get_i32("fail") {
            reply = doc! { "ok": 0.0, "errmsg": "failed by the fake", "code": code, "echo": name.as_str() };
        }
        // Like nx-27017, it answers even moreToCome requests.
        id += 1;
        if s.write_all(&encode_msg(id, req_id, 0, &reply)).is_err() {
            return;
        }
    }
}

/// A wire client with read timeouts so that no test can hang.
pub struct Client {
    pub stream: TcpStream,
    next_id: i32,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect_timeout(&addr, TIMEOUT).unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(TIMEOUT)).unwrap();
        Client { stream, next_id: 1 }
    }

    /// Connects and sends a handshake `hello` carrying `app_name`.
    pub fn with_app_name(addr: SocketAddr, app_name: &str) -> Client {
        let mut c = Client::connect(addr);
        let hello = doc! { "hello": 1, "client": { "application": { "name": app_name } } };
        assert_ok(&c.run("admin", hello));
        c
    }

    fn next(&mut self) -> i32 {
        self.next_id += 1;
        self.next_id
    }

    pub fn send(&mut self, db: &str, mut cmd: Document, flags: u32) -> i32 {
        cmd.insert("$db", db);
        let id = self.next();
        self.stream
            .write_all(&encode_msg(id, 0, flags, &cmd))
            .unwrap();
        id
    }

    /// Sends `cmd` to `db` and answers the reply body; None if the proxy closed the connection.
    pub fn try_run(&mut self, db: &str, cmd: Document) -> Option<Document> {
        let id = self.send(db, cmd, 0);
        let (_, response_to, op, payload) = read_msg(&mut self.stream)?;
        assert_eq!(op, 2013);
        assert_eq!(response_to, id, "reply must answer the request");
        Some(body_of(&payload))
    }

    pub fn run(&mut self, db: &str, cmd: Document) -> Document {
        self.try_run(db, cmd)
            .expect("connection closed unexpectedly")
    }

    pub fn admin(&mut self, cmd: Document) -> Document {
        self.run("admin", cmd)
    }

    pub fn find(&mut self) -> Document {
        self.run("test", doc! { "find": "c" })
    }

    /// Legacy handshake over OP_QUERY; answers the OP_REPLY document.
    pub fn op_query(&mut self, db_cmd: &str, query: Document) -> Option<Document> {
        let doc = query.to_vec().unwrap();
        let mut body = Vec::new();
        body.extend(0i32.to_le_bytes());
        body.extend(db_cmd.as_bytes());
        body.push(0);
        body.extend(0i32.to_le_bytes());
        body.extend((-1i32).to_le_bytes());
        body.extend(doc);
        let id = self.next();
        let mut out = Vec::new();
        out.extend(((16 + body.len()) as i32).to_le_bytes());
        out.extend(id.to_le_bytes());
        out.extend(0i32.to_le_bytes());
        out.extend(2004i32.to_le_bytes());
        out.extend(body);
        self.stream.write_all(&out).unwrap();
        let (_, response_to, op, payload) = read_msg(&mut self.stream)?;
        assert_eq!((op, response_to), (1, id), "an OP_REPLY to our OP_QUERY");
        let returned = i32::from_le_bytes(payload[16..20].try_into().unwrap());
        assert_eq!(returned, 1);
        Some(Document::from_reader(&payload[20..]).unwrap())
    }

    /// True when the peer closed the connection (EOF or reset) within the timeout.
    pub fn is_closed(&mut self) -> bool {
        let mut buf = [0u8; 1];
        match self.stream.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }
}

pub fn assert_ok(reply: &Document) {
    assert!(ok(reply), "expected ok:1, got {reply}");
}

pub fn ok(reply: &Document) -> bool {
    match reply.get("ok") {
        Some(Bson::Double(d)) => *d == 1.0,
        Some(Bson::Int32(i)) => *i == 1,
        _ => false,
    }
}

pub fn code(reply: &Document) -> Option<i32> {
    reply.get_i32("code").ok()
}

pub fn labels(reply: &Document) -> Vec<String> {
    reply
        .get_array("errorLabels")
        .map(|a| {
            a.iter()
                .filter_map(|l| l.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn assert_error(reply: &Document, want: i32, code_name: &str) {
    assert!(!ok(reply), "expected an error, got {reply}");
    assert_eq!(code(reply), Some(want), "{reply}");
    assert_eq!(reply.get_str("codeName").unwrap(), code_name, "{reply}");
    assert!(reply.get_str("errmsg").is_ok(), "{reply}");
}

pub fn fail_point(c: &mut Client, mode: Bson, data: Document) {
    assert_ok(&c.admin(doc! { "configureFailPoint": "failCommand", "mode": mode, "data": data }));
}

pub struct Setup {
    pub backend: FakeBackend,
    pub proxy: Proxy,
}

impl Setup {
    pub fn standalone() -> Setup {
        let backend = FakeBackend::start();
        let proxy = Proxy::start(ProxyConfig::new(backend.addr)).unwrap();
        Setup { backend, proxy }
    }

    pub fn replica_set(members: usize, arbiters: usize) -> Setup {
        let backend = FakeBackend::start();
        let mut config = ProxyConfig::new(backend.addr);
        config.topology = Topology::ReplicaSet {
            name: "rs0".into(),
            members,
            arbiters,
        };
        let proxy = Proxy::start(config).unwrap();
        Setup { backend, proxy }
    }

    pub fn addr(&self) -> SocketAddr {
        self.proxy.addresses()[0]
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr())
    }
}

pub fn elapsed_ms(start: Instant) -> u128 {
    start.elapsed().as_millis()
}

/// `MONGO_WASI_VENV` and `MONGO_WASI_URI`, or None (the caller prints `skipped`).
pub fn venv_and_uri() -> Option<(String, String)> {
    match (
        std::env::var("MONGO_WASI_VENV"),
        std::env::var("MONGO_WASI_URI"),
    ) {
        (Ok(v), Ok(u)) if !v.is_empty() && !u.is_empty() => Some((v, u)),
        (_, Err(_)) => {
            println!("skipped: MONGO_WASI_URI not set");
            None
        }
        _ => {
            println!("skipped: MONGO_WASI_VENV not set");
            None
        }
    }
}

/// The first host of a `mongodb://` URI, resolved (IPv4 preferred: the proxy dials loopback).
pub fn backend_addr(uri: &str) -> SocketAddr {
    let rest = uri
        .strip_prefix("mongodb://")
        .expect("MONGO_WASI_URI must start with mongodb://");
    let hosts = rest.split(['/', '?']).next().unwrap_or(rest);
    let host = hosts
        .rsplit('@')
        .next()
        .unwrap_or(hosts)
        .split(',')
        .next()
        .unwrap_or(hosts);
    let host = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:27017")
    };
    let addrs: Vec<SocketAddr> = host
        .to_socket_addrs()
        .expect("resolve MONGO_WASI_URI host")
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .expect("MONGO_WASI_URI resolves to nothing")
}

/// Runs `tests/<script>` with the venv's python and `env`; panics if it fails or outlives
/// `timeout`.
pub fn run_python(venv: &str, script: &str, env: &[(&str, String)], timeout: Duration) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let python = Path::new(venv).join("bin/python");
    let mut child = Command::new(&python)
        .arg(&path)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", python.display()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the script") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{script} did not finish within {timeout:?}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "{script} reported mismatches ({status}); see its output above"
    );
}
