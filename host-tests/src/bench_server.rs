//! A fast in-memory wire server for the benchmark (`cargo xtask bench`), so the
//! figures measure drivers rather than nx-27017 (about 1 ms a round trip).
//!
//! std threads, one per connection; OP_MSG and the legacy OP_QUERY handshake.
//! It answers what the benchmark sends: hello, ping, inserts (acknowledged,
//! kept only for GridFS collections), find/getMore over a preloaded
//! `perftest.corpus` (`_id` 1..=N), killCursors, and the GridFS collections.
//! Two fault collections: `perftest.slow` answers a find after `slow` and
//! ignores maxTimeMS (deadline accuracy); `perftest.honour` answers a find
//! with MaxTimeMSExpired (code 50) `late` after its maxTimeMS (churn).

use bson::{RawBsonRef, RawDocument, RawDocumentBuf};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const OP_REPLY: i32 = 1;
const OP_QUERY: i32 = 2004;
const OP_MSG: i32 = 2013;
const MAX_MESSAGE: usize = 48_000_000;
/// mongod caps a batch at 16 MiB of documents.
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

#[derive(Clone)]
pub struct Config {
    /// The documents of `perftest.corpus`, in `_id` order.
    pub corpus: Arc<Vec<RawDocumentBuf>>,
    /// How long a find on `perftest.slow` takes, whatever its maxTimeMS.
    pub slow: Duration,
    /// How long after its maxTimeMS a find on `perftest.honour` fails with code 50.
    pub late: Duration,
}

struct Shared {
    config: Config,
    /// GridFS (and any `*.files`/`*.chunks`) documents by namespace.
    stored: Mutex<HashMap<String, Vec<RawDocumentBuf>>>,
    cursors: Mutex<HashMap<i64, CursorState>>,
    next_cursor: AtomicI64,
    accepted: AtomicU64,
    /// Per connection that ran a command: the messages it sent before its first
    /// non-hello command (the handshake's round trips).
    before_first: Mutex<Vec<u32>>,
    stop: AtomicBool,
}

struct CursorState {
    docs: Arc<Vec<RawDocumentBuf>>,
    at: usize,
    ns: String,
}

/// A running server; stops (closes its listener) when dropped.
pub struct BenchServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl BenchServer {
    pub fn start(config: Config) -> io::Result<BenchServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            config,
            stored: Mutex::new(HashMap::new()),
            cursors: Mutex::new(HashMap::new()),
            next_cursor: AtomicI64::new(1),
            accepted: AtomicU64::new(0),
            before_first: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let id = s.accepted.fetch_add(1, Ordering::SeqCst) + 1;
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &s, id);
                });
            }
        });
        Ok(BenchServer { addr, shared })
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Drains the handshake round-trip counts of the connections that ran a command since.
    pub fn take_round_trips_before_first(&self) -> Vec<u32> {
        std::mem::take(&mut *self.shared.before_first.lock().unwrap())
    }

    /// Forgets the stored GridFS documents and open cursors.
    pub fn reset(&self) {
        self.shared.stored.lock().unwrap().clear();
        self.shared.cursors.lock().unwrap().clear();
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(self.addr);
    }
}

fn le_i32(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

fn serve(mut stream: TcpStream, s: &Shared, conn_id: u64) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    let mut out = Vec::with_capacity(4096);
    let mut next_id = 1i32;
    let mut hellos = 0u32;
    let mut commanded = false;
    loop {
        let mut head = [0u8; 4];
        if stream.read_exact(&mut head).is_err() {
            return Ok(()); // closed
        }
        let len = i32::from_le_bytes(head);
        if len < 16 || len as usize > MAX_MESSAGE {
            return Err(bad("message length"));
        }
        buf.resize(len as usize, 0);
        buf[..4].copy_from_slice(&head);
        stream.read_exact(&mut buf[4..])?;
        let request_id = le_i32(&buf, 4);
        let op = le_i32(&buf, 12);
        out.clear();
        let reply_to_query = match op {
            OP_MSG => false,
            OP_QUERY => true,
            _ => return Err(bad("op code")),
        };
        let (db, body, seq) = if reply_to_query {
            parse_query(&buf)?
        } else {
            let flags = le_i32(&buf, 16) as u32;
            if flags & 2 != 0 {
                // moreToCome (unacknowledged write): no reply.
                continue;
            }
            parse_msg(&buf)?
        };
        if !commanded {
            match body.iter().next() {
                Some(Ok((n, _))) if matches!(n.as_str(), "hello" | "isMaster" | "ismaster") => {
                    hellos += 1
                }
                _ => {
                    commanded = true;
                    s.before_first.lock().unwrap().push(hellos);
                }
            }
        }
        let reply = command(s, conn_id, &db, body, &seq);
        frame(&mut out, next_id, request_id, reply_to_query, &reply);
        next_id = next_id.wrapping_add(1);
        stream.write_all(&out)?;
    }
}

/// The body, the database and the documents of a kind-1 section (if any).
fn parse_msg(b: &[u8]) -> io::Result<(String, &RawDocument, Vec<&RawDocument>)> {
    let mut at = 20;
    let mut body = None;
    let mut seq = Vec::new();
    let end = b.len();
    while at < end {
        let kind = b[at];
        at += 1;
        let len = le_i32(b, at) as usize;
        if at + len > end || len < 5 {
            return Err(bad("section length"));
        }
        match kind {
            0 => body = Some(RawDocument::from_bytes(&b[at..at + len]).map_err(|_| bad("bson"))?),
            1 => {
                let sec_end = at + len;
                let mut p = at + 4;
                while p < sec_end && b[p] != 0 {
                    p += 1;
                }
                p += 1;
                while p < sec_end {
                    let dl = le_i32(b, p) as usize;
                    if p + dl > sec_end {
                        return Err(bad("sequence document"));
                    }
                    seq.push(RawDocument::from_bytes(&b[p..p + dl]).map_err(|_| bad("bson"))?);
                    p += dl;
                }
            }
            _ => return Err(bad("section kind")),
        }
        at += len;
    }
    let body = body.ok_or_else(|| bad("no body"))?;
    let db = match body.get("$db") {
        Ok(Some(RawBsonRef::String(s))) => s.to_string(),
        _ => "admin".to_string(),
    };
    Ok((db, body, seq))
}

fn parse_query(b: &[u8]) -> io::Result<(String, &RawDocument, Vec<&RawDocument>)> {
    let mut at = 20;
    let start = at;
    while at < b.len() && b[at] != 0 {
        at += 1;
    }
    let coll = String::from_utf8_lossy(&b[start..at]).into_owned();
    at += 1 + 8;
    if at + 4 > b.len() {
        return Err(bad("OP_QUERY"));
    }
    let len = le_i32(b, at) as usize;
    let q = RawDocument::from_bytes(b.get(at..at + len).ok_or_else(|| bad("OP_QUERY"))?)
        .map_err(|_| bad("bson"))?;
    let db = coll.split('.').next().unwrap_or("admin").to_string();
    // A wrapped `{$query: {...}}` carries the command inside.
    let q = match q.get("$query") {
        Ok(Some(RawBsonRef::Document(d))) => d,
        _ => q,
    };
    Ok((db, q, Vec::new()))
}

fn frame(out: &mut Vec<u8>, id: i32, to: i32, op_reply: bool, doc: &[u8]) {
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&to.to_le_bytes());
    if op_reply {
        out.extend_from_slice(&OP_REPLY.to_le_bytes());
        out.extend_from_slice(&8i32.to_le_bytes());
        out.extend_from_slice(&0i64.to_le_bytes());
        out.extend_from_slice(&0i32.to_le_bytes());
        out.extend_from_slice(&1i32.to_le_bytes());
    } else {
        out.extend_from_slice(&OP_MSG.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.push(0);
    }
    out.extend_from_slice(doc);
    let len = out.len() as i32;
    out[..4].copy_from_slice(&len.to_le_bytes());
}

/// A hand-rolled BSON document writer: replies are built without a `Document`.
pub struct Doc(Vec<u8>);

impl Doc {
    pub fn new() -> Doc {
        Doc(vec![0; 4])
    }
    fn key(&mut self, t: u8, k: &str) {
        self.0.push(t);
        self.0.extend_from_slice(k.as_bytes());
        self.0.push(0);
    }
    pub fn f64(mut self, k: &str, v: f64) -> Doc {
        self.key(0x01, k);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn str(mut self, k: &str, v: &str) -> Doc {
        self.key(0x02, k);
        self.0
            .extend_from_slice(&((v.len() + 1) as i32).to_le_bytes());
        self.0.extend_from_slice(v.as_bytes());
        self.0.push(0);
        self
    }
    pub fn i32(mut self, k: &str, v: i32) -> Doc {
        self.key(0x10, k);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(mut self, k: &str, v: i64) -> Doc {
        self.key(0x12, k);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bool(mut self, k: &str, v: bool) -> Doc {
        self.key(0x08, k);
        self.0.push(v as u8);
        self
    }
    pub fn date(mut self, k: &str, ms: i64) -> Doc {
        self.key(0x09, k);
        self.0.extend_from_slice(&ms.to_le_bytes());
        self
    }
    pub fn doc(mut self, k: &str, d: &[u8]) -> Doc {
        self.key(0x03, k);
        self.0.extend_from_slice(d);
        self
    }
    /// An array of the given documents.
    pub fn array<'a>(mut self, k: &str, docs: impl Iterator<Item = &'a [u8]>) -> Doc {
        self.key(0x04, k);
        let mut a = Doc::new();
        for (i, d) in docs.enumerate() {
            let mut key = itoa(i);
            a.key(0x03, std::str::from_utf8(key.as_slice()).unwrap());
            a.0.extend_from_slice(d);
            key.clear();
        }
        self.0.extend_from_slice(&a.finish());
        self
    }
    pub fn finish(mut self) -> Vec<u8> {
        self.0.push(0);
        let len = self.0.len() as i32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

impl Default for Doc {
    fn default() -> Doc {
        Doc::new()
    }
}

fn itoa(i: usize) -> Vec<u8> {
    i.to_string().into_bytes()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn ok() -> Vec<u8> {
    Doc::new().f64("ok", 1.0).finish()
}

fn error(code: i32, name: &str, msg: &str) -> Vec<u8> {
    Doc::new()
        .f64("ok", 0.0)
        .str("errmsg", msg)
        .i32("code", code)
        .str("codeName", name)
        .finish()
}

fn num_field(d: &RawDocument, k: &str) -> Option<i64> {
    match d.get(k) {
        Ok(Some(RawBsonRef::Int32(v))) => Some(v as i64),
        Ok(Some(RawBsonRef::Int64(v))) => Some(v),
        Ok(Some(RawBsonRef::Double(v))) => Some(v as i64),
        _ => None,
    }
}

fn hello(conn_id: u64) -> Vec<u8> {
    Doc::new()
        .bool("helloOk", true)
        .bool("isWritablePrimary", true)
        .bool("ismaster", true)
        .i32("maxBsonObjectSize", 16 * 1024 * 1024)
        .i32("maxMessageSizeBytes", MAX_MESSAGE as i32)
        .i32("maxWriteBatchSize", 100_000)
        .date("localTime", now_ms())
        .i32("logicalSessionTimeoutMinutes", 30)
        .i64("connectionId", conn_id as i64)
        .i32("minWireVersion", 0)
        .i32("maxWireVersion", 21)
        .bool("readOnly", false)
        .f64("ok", 1.0)
        .finish()
}

fn command(
    s: &Shared,
    conn_id: u64,
    db: &str,
    body: &RawDocument,
    seq: &[&RawDocument],
) -> Vec<u8> {
    let Some(Ok((name, first))) = body.iter().next() else {
        return error(59, "CommandNotFound", "empty command");
    };
    let name = name.as_str();
    match name {
        "hello" | "isMaster" | "ismaster" => hello(conn_id),
        "ping" | "endSessions" | "createIndexes" | "killAllSessions" | "dropDatabase" => ok(),
        "buildInfo" | "buildinfo" => Doc::new()
            .str("version", "7.0.0")
            .i32("maxBsonObjectSize", 16 * 1024 * 1024)
            .f64("ok", 1.0)
            .finish(),
        "insert" => {
            let coll = first.as_str().unwrap_or_default();
            let mut n = seq.len();
            let mut docs: Vec<&RawDocument> = seq.to_vec();
            if let Ok(Some(RawBsonRef::Array(a))) = body.get("documents") {
                for d in a.into_iter().flatten() {
                    if let Some(d) = d.as_document() {
                        docs.push(d);
                        n += 1;
                    }
                }
            }
            if keeps(coll) {
                let mut stored = s.stored.lock().unwrap();
                let v = stored.entry(format!("{db}.{coll}")).or_default();
                v.extend(docs.iter().map(|d| (*d).to_owned()));
            }
            Doc::new().i32("n", n as i32).f64("ok", 1.0).finish()
        }
        "delete" | "drop" => {
            let coll = first.as_str().unwrap_or_default();
            s.stored.lock().unwrap().remove(&format!("{db}.{coll}"));
            Doc::new().i32("n", 0).f64("ok", 1.0).finish()
        }
        "listIndexes" => {
            let coll = first.as_str().unwrap_or_default();
            cursor_reply(
                &format!("{db}.{coll}"),
                0,
                &mut std::iter::empty(),
                "firstBatch",
            )
        }
        "find" => find(s, db, first.as_str().unwrap_or_default(), body),
        "getMore" => {
            let id = match first {
                RawBsonRef::Int64(v) => v,
                _ => return error(2, "BadValue", "getMore id"),
            };
            let batch = num_field(body, "batchSize").filter(|&b| b > 0);
            get_more(s, id, batch.map(|b| b as usize))
        }
        "killCursors" => {
            if let Ok(Some(RawBsonRef::Array(a))) = body.get("cursors") {
                let mut c = s.cursors.lock().unwrap();
                for id in a.into_iter().flatten() {
                    if let RawBsonRef::Int64(id) = id {
                        c.remove(&id);
                    }
                }
            }
            ok()
        }
        _ => error(59, "CommandNotFound", &format!("no such command: '{name}'")),
    }
}

/// Only GridFS collections keep what is inserted (benchmark inserts are acknowledged and dropped).
fn keeps(coll: &str) -> bool {
    coll.ends_with(".files") || coll.ends_with(".chunks")
}

fn find(s: &Shared, db: &str, coll: &str, body: &RawDocument) -> Vec<u8> {
    let ns = format!("{db}.{coll}");
    let filter = match body.get("filter") {
        Ok(Some(RawBsonRef::Document(d))) => Some(d),
        _ => None,
    };
    let limit = num_field(body, "limit").unwrap_or(0).unsigned_abs() as usize;
    let single = body.get("singleBatch").ok().flatten() == Some(RawBsonRef::Boolean(true));
    let batch = num_field(body, "batchSize")
        .map(|b| b as usize)
        .unwrap_or(101);
    let max_time = num_field(body, "maxTimeMS").unwrap_or(0);
    match coll {
        "slow" => {
            std::thread::sleep(s.config.slow);
            return cursor_reply(&ns, 0, &mut std::iter::empty(), "firstBatch");
        }
        "honour" => {
            let t = Duration::from_millis(max_time.max(0) as u64);
            std::thread::sleep(t + s.config.late);
            return error(50, "MaxTimeMSExpired", "operation exceeded time limit");
        }
        _ => {}
    }
    let docs: Arc<Vec<RawDocumentBuf>> = if ns == "perftest.corpus" {
        match filter.and_then(|f| f.get("_id").ok().flatten()) {
            Some(id) => {
                let i = match id {
                    RawBsonRef::Int32(v) => v as i64,
                    RawBsonRef::Int64(v) => v,
                    RawBsonRef::Double(v) => v as i64,
                    _ => 0,
                };
                let c = &s.config.corpus;
                let one = if i >= 1 && (i as usize) <= c.len() {
                    vec![c[i as usize - 1].clone()]
                } else {
                    vec![]
                };
                Arc::new(one)
            }
            None => s.config.corpus.clone(),
        }
    } else if keeps(coll) {
        let stored = s.stored.lock().unwrap();
        let all = stored.get(&ns).map(Vec::as_slice).unwrap_or(&[]);
        let mut hits: Vec<RawDocumentBuf> =
            all.iter().filter(|d| matches(d, filter)).cloned().collect();
        if coll.ends_with(".chunks") {
            hits.sort_by_key(|d| num_field(d, "n").unwrap_or(0));
        }
        Arc::new(hits)
    } else {
        Arc::new(Vec::new())
    };
    let total = if limit > 0 {
        limit.min(docs.len())
    } else {
        docs.len()
    };
    let first = if single { total } else { batch.min(total) };
    let mut bytes = 0;
    let mut taken = 0;
    for d in docs.iter().take(first) {
        if taken > 0 && bytes + d.as_bytes().len() > MAX_BATCH_BYTES {
            break;
        }
        bytes += d.as_bytes().len();
        taken += 1;
    }
    let id = if taken < total && !single {
        let id = s.next_cursor.fetch_add(1, Ordering::SeqCst);
        let mut docs = docs.clone();
        if total < docs.len() {
            docs = Arc::new(docs[..total].to_vec());
        }
        s.cursors.lock().unwrap().insert(
            id,
            CursorState {
                docs,
                at: taken,
                ns: ns.clone(),
            },
        );
        id
    } else {
        0
    };
    cursor_reply(
        &ns,
        id,
        &mut docs[..taken].iter().map(|d| d.as_bytes()),
        "firstBatch",
    )
}

/// Equality on every top-level field of the filter (the GridFS queries' shape).
fn matches(d: &RawDocument, filter: Option<&RawDocument>) -> bool {
    let Some(f) = filter else { return true };
    f.iter().flatten().all(|(k, v)| {
        // `{k: {$eq: v}}` is `{k: v}` (PyMongo's GridFS sends it).
        let v = match v {
            RawBsonRef::Document(op) => match op.get("$eq") {
                Ok(Some(eq)) => eq,
                _ => v,
            },
            _ => v,
        };
        d.get(k.as_str()).ok().flatten() == Some(v)
    })
}

fn get_more(s: &Shared, id: i64, batch: Option<usize>) -> Vec<u8> {
    let mut cursors = s.cursors.lock().unwrap();
    let Some(c) = cursors.get_mut(&id) else {
        return error(43, "CursorNotFound", "cursor not found");
    };
    let max = batch.unwrap_or(usize::MAX);
    let start = c.at;
    let mut bytes = 0;
    while c.at < c.docs.len() && c.at - start < max {
        let l = c.docs[c.at].as_bytes().len();
        if c.at > start && bytes + l > MAX_BATCH_BYTES {
            break;
        }
        bytes += l;
        c.at += 1;
    }
    let docs = c.docs.clone();
    let ns = c.ns.clone();
    let end = c.at;
    let done = end >= docs.len();
    if done {
        cursors.remove(&id);
    }
    drop(cursors);
    cursor_reply(
        &ns,
        if done { 0 } else { id },
        &mut docs[start..end].iter().map(|d| d.as_bytes()),
        "nextBatch",
    )
}

fn cursor_reply(ns: &str, id: i64, docs: &mut dyn Iterator<Item = &[u8]>, key: &str) -> Vec<u8> {
    let cursor = Doc::new()
        .array(key, docs)
        .i64("id", id)
        .str("ns", ns)
        .finish();
    Doc::new().doc("cursor", &cursor).f64("ok", 1.0).finish()
}

/// The spec's TWEET document (`tweet`, without an `_id`) `n` times with `_id` 1..=n,
/// for `perftest.corpus`.
pub fn corpus(tweet: &RawDocument, n: usize) -> Vec<RawDocumentBuf> {
    let b = tweet.as_bytes();
    let elements = &b[4..b.len() - 1];
    (1..=n)
        .map(|i| {
            let mut d = Doc::new().i32("_id", i as i32);
            d.0.extend_from_slice(elements);
            RawDocumentBuf::from_bytes(d.finish()).expect("valid BSON")
        })
        .collect()
}
