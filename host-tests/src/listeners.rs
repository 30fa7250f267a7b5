//! Misbehaving loopback servers for deadline tests. Each connection is served
//! on its own thread; a listener serves a bounded number of connections, for
//! a bounded time, and stops (closing every connection) when dropped.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Accepts and never answers anything (not even the handshake).
    Silent,
    /// Answers the handshake's `hello` like a standalone, then never answers again.
    HelloThenSilent,
    /// Answers `hello`, then answers the next command with a valid reply of
    /// `TRICKLE_LEN` bytes sent `TRICKLE_STEP` bytes every `TRICKLE_PAUSE`:
    /// data keeps arriving for far longer than any test's deadline.
    Trickle,
    /// Answers `hello` (advertising a `maxMessageSizeBytes` of 256 MiB), then
    /// the next command with a valid `FLOOD_LEN`-byte reply, as fast as the
    /// socket takes it.
    Flood,
    /// Answers `hello`, then reads what comes a few bytes at a time
    /// (`TRICKLE_STEP` every `TRICKLE_PAUSE`) and never answers: a large
    /// command's write cannot finish within any test's deadline.
    SlowReader,
    /// Answers `hello`, then closes the connection when the next command arrives
    /// (after recording it): a network error for every attempt.
    CloseOnCommand,
    /// A cursor that never ends: any command naming `find` opens cursor
    /// `CURSOR_ID` with one document; every getMore answers an empty batch
    /// and keeps the cursor open; anything else answers `{ok: 1}`.
    EmptyBatches,
    /// Answers `hello`, then every command `LATE_REPLY` late with `{ok: 1}`
    /// whose `responseTo` names another request: a late reply that must not
    /// be taken for the one awaited.
    LateWrongReply,
    /// Answers `hello` advertising a `maxMessageSizeBytes` of 2^31-1, then
    /// the next command with a frame header announcing `HUGE_FRAME` bytes,
    /// followed by zeros as fast as the socket takes them.
    HugeFrame,
    /// Answers `hello`, then the next command with a legal `SEQUENCE_LEN`-byte
    /// OP_MSG: body `{ok: 1}` and one document sequence of empty documents.
    TinySequences,
    /// Answers `hello`, then the next command with an OP_REPLY (not OP_MSG)
    /// of `SEQUENCE_LEN` bytes: many empty documents, `{ok: 1}` last.
    TinyOpReply,
    /// As `EmptyBatches`, but the find's first batch is `SEQUENCE_LEN` bytes
    /// of empty documents, and the cursor is exhausted.
    TinyBatch,
    /// Answers `hello`, then every command with an OP_MSG whose body has a
    /// right length and terminator and garbage between them.
    GarbageBody,
    /// As `EmptyBatches`, but the find's first batch holds a document whose
    /// string claims more bytes than it has.
    BadBatchDocument,
    /// A server of `BULK_WRITE_BATCH` writes per command for client bulk
    /// writes (Bulk Write spec): the first `bulkWrite` of a connection answers
    /// its two inserts through a results cursor that needs a getMore, the
    /// second fails its one insert with a duplicate key (code 11000).
    BulkWriteBatches,
    /// As `BulkWriteBatches`, but the getMore of the first results cursor
    /// fails (code 8): a top-level error after one result was observed.
    BulkWriteGetMoreFails,
    /// Answers `hello`, then sends the first half of a valid reply to the
    /// next command and closes the connection.
    HalfReply,
    /// Answers `hello`, then the next command with a valid 200-byte reply,
    /// one byte every `BYTE_PAUSE` (some 10 s in all).
    ByteTrickle,
    /// A SCRAM-SHA-256 server that asks for `LYING_ITERATIONS` iterations:
    /// its server-first message answers the hello's speculative
    /// authentication. Anything after that is held, never answered.
    ScramSpeculativeIterations,
    /// The same server-first message, but as the answer to `saslStart`
    /// (the hello has no `speculativeAuthenticate`).
    ScramSaslStartIterations,
    /// The primary of replica set rs0 whose `hello` lists `MANY_HOSTS`
    /// members (this listener first, then names that do not resolve);
    /// every other command answers `{ok: 1}`.
    ManyHosts,
    /// A standalone whose `hello` says `maxWireVersion: 0`: older than any
    /// server this driver speaks to. Every later hello says so again.
    OldWireVersion,
    /// A standalone whose `hello` says `minWireVersion: 99`: newer than this
    /// driver speaks.
    NewWireVersion,
    /// Not TLS: reads what arrives (a TLS ClientHello) and answers with a
    /// plain OP_MSG, as a server without TLS would.
    NotTls,
    /// A standalone that answers each `hello` `SLOW_HELLO` late, and any
    /// other command at once with `{ok: 1}`.
    SlowHello,
    /// The primary of replica set rs0 that announces itself by name: its
    /// hello's `me` and `hosts` are `NAMED_MEMBER` at this listener's port;
    /// any other command answers `{ok: 1}`.
    NamedMember,
}

/// The host name `NamedMember` announces (a DNS responder maps it to loopback).
pub const NAMED_MEMBER: &str = "member.test.build.10gen.cc";

/// How late `SlowHello` answers a hello.
pub const SLOW_HELLO: Duration = Duration::from_millis(100);

/// What `ScramSpeculativeIterations` and `ScramSaslStartIterations` ask for:
/// the driver's limit, some 14 s of PBKDF2-HMAC-SHA-256 in the guest.
pub const LYING_ITERATIONS: u32 = 10_000_000;
/// The members `ManyHosts` lists.
pub const MANY_HOSTS: usize = 100_000;

/// Size of the trickled reply, and its pace (about 50 KB/s: some 4 s in all).
pub const TRICKLE_LEN: usize = 200 * 1024;
const TRICKLE_STEP: usize = 100;
const TRICKLE_PAUSE: Duration = Duration::from_millis(2);
/// Size of the flooded reply: just under the 48,000,000 bytes the driver
/// accepts, though its hello announces `FLOOD_MAX_MESSAGE`.
pub const FLOOD_LEN: usize = 47_900_000;
const FLOOD_MAX_MESSAGE: i32 = 256 * 1024 * 1024;
/// How late `LateWrongReply` answers.
pub const LATE_REPLY: Duration = Duration::from_millis(300);
/// What `HugeFrame` announces.
pub const HUGE_FRAME: i32 = 2_100_000_000;
/// The size of `TinySequences`' and `TinyOpReply`'s replies: under mongod's
/// 48,000,000-byte maximum.
pub const SEQUENCE_LEN: usize = 47_000_000;
/// `ByteTrickle`'s pace.
pub const BYTE_PAUSE: Duration = Duration::from_millis(50);
/// The id of `EmptyBatches`' cursor.
pub const CURSOR_ID: i64 = 4242;
/// `BulkWriteBatches`' maxWriteBatchSize.
pub const BULK_WRITE_BATCH: i32 = 2;

pub struct Listener {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    commands: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// At most this many connections, and never longer than this, so a leaked
/// listener cannot run on; normally the test drops it first.
const MAX_CONNECTIONS: usize = 16;
const HOLD: Duration = Duration::from_secs(120);
/// How often a blocked connection thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// What a connection thread shares with its listener.
#[derive(Clone)]
struct Shared {
    stop: Arc<AtomicBool>,
    commands: Arc<Mutex<Vec<String>>>,
    started: Instant,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.started.elapsed() >= HOLD
    }
}

impl Listener {
    pub fn start(behaviour: Behaviour) -> std::io::Result<Listener> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let commands = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            stop: stop.clone(),
            commands: commands.clone(),
            started: Instant::now(),
        };
        let count = accepted.clone();
        let thread = std::thread::spawn(move || {
            let mut served = Vec::new();
            while !shared.stopped() && served.len() < MAX_CONNECTIONS {
                match listener.accept() {
                    Ok((stream, _)) => {
                        count.fetch_add(1, Ordering::Relaxed);
                        let shared = shared.clone();
                        served.push(std::thread::spawn(move || {
                            let _ = serve(stream, behaviour, &shared);
                        }));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for t in served {
                let _ = t.join();
            }
        });
        Ok(Listener {
            addr,
            accepted,
            commands,
            stop,
            thread: Some(thread),
        })
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }

    /// The names of the commands received so far (handshakes included), in order.
    pub fn commands(&self) -> Vec<String> {
        self.commands.lock().unwrap().clone()
    }

    /// How many commands named `name` were received so far.
    pub fn count(&self, name: &str) -> usize {
        self.commands().iter().filter(|c| *c == name).count()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Each connection thread sees the flag within `POLL` and closes its socket.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One connection, until the listener stops or the client goes away.
fn serve(mut stream: TcpStream, behaviour: Behaviour, shared: &Shared) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(POLL))?;
    match behaviour {
        Behaviour::Silent => return hold(shared),
        Behaviour::ScramSpeculativeIterations | Behaviour::ScramSaslStartIterations => {
            return lying_scram(stream, behaviour, shared)
        }
        Behaviour::ManyHosts
        | Behaviour::OldWireVersion
        | Behaviour::NewWireVersion
        | Behaviour::NamedMember => return hello_then_ok(stream, behaviour, shared),
        Behaviour::SlowHello => loop {
            let (request_id, name) = read_command(&mut stream, shared)?;
            let reply = match name.as_str() {
                "hello" | "isMaster" | "ismaster" => {
                    std::thread::sleep(SLOW_HELLO);
                    hello_doc(48_000_000, 100_000)
                }
                _ => bson::rawdoc! { "ok": 1.0 },
            };
            write_all(&mut stream, &op_msg(request_id, &reply), shared)?;
        },
        Behaviour::NotTls => {
            let mut hello = [0u8; 64];
            read_full(&mut stream, &mut hello[..5], shared)?;
            write_all(
                &mut stream,
                &op_msg(0, &hello_doc(48_000_000, 100_000)),
                shared,
            )?;
            return hold(shared);
        }
        _ => {}
    }
    let max_message = match behaviour {
        Behaviour::Flood => FLOOD_MAX_MESSAGE,
        Behaviour::HugeFrame => i32::MAX,
        _ => 48_000_000,
    };
    let max_batch = match behaviour {
        Behaviour::BulkWriteBatches | Behaviour::BulkWriteGetMoreFails => BULK_WRITE_BATCH,
        _ => 100_000,
    };
    let (request_id, _) = read_command(&mut stream, shared)?;
    write_all(
        &mut stream,
        &op_msg(request_id, &hello_doc(max_message, max_batch)),
        shared,
    )?;
    match behaviour {
        Behaviour::Silent | Behaviour::HelloThenSilent => hold(shared),
        Behaviour::Trickle => {
            let (request_id, _) = read_command(&mut stream, shared)?;
            let reply = op_msg(request_id, &padded_reply(TRICKLE_LEN));
            for piece in reply.chunks(TRICKLE_STEP) {
                write_all(&mut stream, piece, shared)?;
                std::thread::sleep(TRICKLE_PAUSE);
            }
            hold(shared)
        }
        Behaviour::Flood => {
            let (request_id, _) = read_command(&mut stream, shared)?;
            flood(&mut stream, request_id, shared)?;
            hold(shared)
        }
        Behaviour::SlowReader => {
            let mut piece = [0u8; TRICKLE_STEP];
            while !shared.stopped() {
                match stream.read(&mut piece) {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e) if is_timeout(&e) => {}
                    Err(e) => return Err(e),
                }
                std::thread::sleep(TRICKLE_PAUSE);
            }
            Ok(())
        }
        Behaviour::CloseOnCommand => {
            read_command(&mut stream, shared)?;
            stream.shutdown(std::net::Shutdown::Both)
        }
        Behaviour::LateWrongReply => loop {
            let (request_id, _) = read_command(&mut stream, shared)?;
            std::thread::sleep(LATE_REPLY);
            let reply = op_msg(request_id.wrapping_add(1000), &bson::rawdoc! { "ok": 1.0 });
            write_all(&mut stream, &reply, shared)?;
        },
        Behaviour::HugeFrame => {
            let (request_id, _) = read_command(&mut stream, shared)?;
            let mut head = Vec::new();
            for v in [HUGE_FRAME, 1, request_id, 2013, 0] {
                head.extend_from_slice(&v.to_le_bytes());
            }
            write_all(&mut stream, &head, shared)?;
            let zeros = vec![0u8; 1 << 20];
            let mut left = HUGE_FRAME as usize - head.len();
            while left > 0 {
                let n = left.min(zeros.len());
                write_all(&mut stream, &zeros[..n], shared)?;
                left -= n;
            }
            hold(shared)
        }
        Behaviour::TinySequences | Behaviour::TinyOpReply => {
            let (request_id, _) = read_command(&mut stream, shared)?;
            tiny_documents(&mut stream, request_id, behaviour, shared)?;
            hold(shared)
        }
        Behaviour::GarbageBody => loop {
            let (request_id, _) = read_command(&mut stream, shared)?;
            let mut body = vec![0xAB; 64];
            body[0..4].copy_from_slice(&64i32.to_le_bytes());
            body[63] = 0;
            let body = bson::RawDocument::from_bytes(&body).unwrap();
            write_all(&mut stream, &op_msg(request_id, body), shared)?;
        },
        Behaviour::HalfReply => {
            let (request_id, _) = read_command(&mut stream, shared)?;
            let reply = op_msg(request_id, &padded_reply(1000));
            write_all(&mut stream, &reply[..reply.len() / 2], shared)?;
            stream.shutdown(std::net::Shutdown::Both)
        }
        Behaviour::ByteTrickle => {
            let (request_id, _) = read_command(&mut stream, shared)?;
            for byte in op_msg(request_id, &padded_reply(200)) {
                write_all(&mut stream, &[byte], shared)?;
                std::thread::sleep(BYTE_PAUSE);
            }
            hold(shared)
        }
        Behaviour::TinyBatch => {
            let (request_id, _) = read_command(&mut stream, shared)?;
            tiny_batch(&mut stream, request_id, shared)?;
            hold(shared)
        }
        Behaviour::BulkWriteBatches | Behaviour::BulkWriteGetMoreFails => {
            let mut bulk_writes = 0;
            loop {
                let (request_id, name) = read_command(&mut stream, shared)?;
                let ns = "admin.$cmd.bulkWrite";
                let reply = match name.as_str() {
                    "bulkWrite" if bulk_writes == 0 => {
                        bulk_writes += 1;
                        bson::rawdoc! {
                            "cursor": { "id": CURSOR_ID, "ns": ns, "firstBatch": [{ "ok": 1, "idx": 0, "n": 1 }] },
                            "nErrors": 0, "nInserted": 2, "nMatched": 0, "nModified": 0, "nUpserted": 0, "nDeleted": 0, "ok": 1.0,
                        }
                    }
                    "bulkWrite" => bson::rawdoc! {
                        "cursor": { "id": 0i64, "ns": ns, "firstBatch": [{ "ok": 0, "idx": 0, "code": 11000, "errmsg": "E11000 duplicate key" }] },
                        "nErrors": 1, "nInserted": 0, "nMatched": 0, "nModified": 0, "nUpserted": 0, "nDeleted": 0, "ok": 1.0,
                    },
                    "getMore" if behaviour == Behaviour::BulkWriteGetMoreFails => bson::rawdoc! {
                        "ok": 0.0, "code": 8, "codeName": "UnknownError", "errmsg": "getMore failed",
                    },
                    "getMore" => bson::rawdoc! {
                        "cursor": { "id": 0i64, "ns": ns, "nextBatch": [{ "ok": 1, "idx": 1, "n": 1 }] },
                        "ok": 1.0,
                    },
                    _ => bson::rawdoc! { "ok": 1.0 },
                };
                write_all(&mut stream, &op_msg(request_id, &reply), shared)?;
            }
        }
        Behaviour::EmptyBatches | Behaviour::BadBatchDocument => loop {
            let (request_id, name) = read_command(&mut stream, shared)?;
            let reply = match name.as_str() {
                "find" if behaviour == Behaviour::BadBatchDocument => bad_batch(),
                "find" => bson::rawdoc! {
                    "cursor": { "id": CURSOR_ID, "ns": "db.coll", "firstBatch": [{ "_id": 1 }] },
                    "ok": 1.0,
                },
                "getMore" => bson::rawdoc! {
                    "cursor": { "id": CURSOR_ID, "ns": "db.coll", "nextBatch": [] },
                    "ok": 1.0,
                },
                "killCursors" => bson::rawdoc! { "cursorsKilled": [CURSOR_ID], "ok": 1.0 },
                _ => bson::rawdoc! { "ok": 1.0 },
            };
            write_all(&mut stream, &op_msg(request_id, &reply), shared)?;
        },
        Behaviour::ScramSpeculativeIterations
        | Behaviour::ScramSaslStartIterations
        | Behaviour::ManyHosts
        | Behaviour::OldWireVersion
        | Behaviour::NewWireVersion
        | Behaviour::SlowHello
        | Behaviour::NamedMember
        | Behaviour::NotTls => unreachable!("served above"),
    }
}

/// `ScramSpeculativeIterations` and `ScramSaslStartIterations`: a server-first
/// message asking for `LYING_ITERATIONS`, then silence.
fn lying_scram(
    mut stream: TcpStream,
    behaviour: Behaviour,
    shared: &Shared,
) -> std::io::Result<()> {
    let (request_id, hello) = read_request(&mut stream, shared)?;
    // The client-first message: "n,,n=<user>,r=<client nonce>".
    let client_first = |cmd: &bson::RawDocument| -> Option<String> {
        let payload = cmd.get_binary("payload").ok()?.bytes;
        let text = String::from_utf8(payload.to_vec()).ok()?;
        Some(text.split(",r=").nth(1)?.to_string())
    };
    let server_first = |nonce: &str| bson::Binary {
        subtype: bson::spec::BinarySubtype::Generic,
        bytes: format!("r={nonce}server,s=QSXCR+Q6sek8bf92,i={LYING_ITERATIONS}").into_bytes(),
    };
    let mut reply = hello_doc(48_000_000, 100_000);
    let speculative = behaviour == Behaviour::ScramSpeculativeIterations;
    if speculative {
        let nonce = hello
            .get_document("speculativeAuthenticate")
            .ok()
            .and_then(client_first)
            .unwrap_or_default();
        let answer =
            bson::rawdoc! { "conversationId": 1, "done": false, "payload": server_first(&nonce) };
        reply.append(bson::cstr!("speculativeAuthenticate"), answer);
    }
    write_all(&mut stream, &op_msg(request_id, &reply), shared)?;
    if !speculative {
        let (request_id, start) = read_request(&mut stream, shared)?;
        let nonce = client_first(&start).unwrap_or_default();
        let answer = bson::rawdoc! {
            "conversationId": 1, "done": false, "payload": server_first(&nonce), "ok": 1.0,
        };
        write_all(&mut stream, &op_msg(request_id, &answer), shared)?;
    }
    hold(shared)
}

/// `ManyHosts`, `OldWireVersion`, `NewWireVersion` and `NamedMember`: their
/// hello to every hello, `{ok: 1}` to anything else.
fn hello_then_ok(
    mut stream: TcpStream,
    behaviour: Behaviour,
    shared: &Shared,
) -> std::io::Result<()> {
    let mut hello = hello_doc(48_000_000, 100_000);
    match behaviour {
        Behaviour::OldWireVersion => {
            hello = bson::rawdoc! {
                "isWritablePrimary": true, "maxWireVersion": 0, "minWireVersion": 0, "ok": 1.0,
            }
        }
        Behaviour::NewWireVersion => {
            hello = bson::rawdoc! {
                "isWritablePrimary": true, "maxWireVersion": 100, "minWireVersion": 99, "ok": 1.0,
            }
        }
        Behaviour::NamedMember => {
            let me = format!("{NAMED_MEMBER}:{}", stream.local_addr()?.port());
            let mut hosts = bson::RawArrayBuf::new();
            hosts.push(me.as_str());
            hello.append(bson::cstr!("setName"), "rs0");
            hello.append(bson::cstr!("hosts"), hosts);
            hello.append(bson::cstr!("me"), me.as_str());
        }
        _ => {
            let me = stream.local_addr()?.to_string();
            let mut hosts = bson::RawArrayBuf::new();
            hosts.push(me.as_str());
            for i in 1..MANY_HOSTS {
                hosts.push(format!("member{i}.invalid:27017"));
            }
            hello.append(bson::cstr!("setName"), "rs0");
            hello.append(bson::cstr!("hosts"), hosts);
        }
    }
    loop {
        let (request_id, name) = read_command(&mut stream, shared)?;
        let reply = match name.as_str() {
            "hello" | "isMaster" | "ismaster" => op_msg(request_id, &hello),
            _ => op_msg(request_id, &bson::rawdoc! { "ok": 1.0 }),
        };
        write_all(&mut stream, &reply, shared)?;
    }
}

/// Keeps the connection open, answering nothing, until the listener stops.
fn hold(shared: &Shared) -> std::io::Result<()> {
    while !shared.stopped() {
        std::thread::sleep(POLL);
    }
    Ok(())
}

fn stopped_err() -> std::io::Error {
    std::io::Error::new(ErrorKind::Interrupted, "listener stopped")
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Fills `buf`, looking at the stop flag between timed-out reads.
fn read_full(stream: &mut TcpStream, buf: &mut [u8], shared: &Shared) -> std::io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        if shared.stopped() {
            return Err(stopped_err());
        }
        match stream.read(&mut buf[off..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => off += n,
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `bytes`, looking at the stop flag between timed-out writes.
fn write_all(stream: &mut TcpStream, bytes: &[u8], shared: &Shared) -> std::io::Result<()> {
    let mut off = 0;
    while off < bytes.len() {
        if shared.stopped() {
            return Err(stopped_err());
        }
        match stream.write(&bytes[off..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads one OP_MSG request; returns its request id and command name (also
/// recorded in the listener's log).
fn read_command(stream: &mut TcpStream, shared: &Shared) -> std::io::Result<(i32, String)> {
    let (request_id, body) = read_request(stream, shared)?;
    let name = body
        .iter()
        .next()
        .and_then(|e| e.ok().map(|(k, _)| k.to_string()))
        .unwrap_or_default();
    Ok((request_id, name))
}

/// Reads one OP_MSG request; returns its request id and body (its command
/// name is recorded in the listener's log; an unreadable body is empty).
fn read_request(
    stream: &mut TcpStream,
    shared: &Shared,
) -> std::io::Result<(i32, bson::RawDocumentBuf)> {
    let mut len = [0u8; 4];
    read_full(stream, &mut len, shared)?;
    let n = i32::from_le_bytes(len).clamp(16, 1 << 24) as usize;
    let mut rest = vec![0u8; n - 4];
    read_full(stream, &mut rest, shared)?;
    let request_id = i32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    // Header (12 bytes left), flag bits (4), section kind 0 (1), then the body.
    let body = rest
        .get(17..)
        .and_then(|b| bson::RawDocument::from_bytes(b).ok())
        .or_else(|| {
            // The body is followed by document sequences: cut it to its own length.
            let b = rest.get(17..21)?;
            let len = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            bson::RawDocument::from_bytes(rest.get(17..17 + len)?).ok()
        })
        .map(bson::RawDocument::to_owned)
        .unwrap_or_default();
    let name = body
        .iter()
        .next()
        .and_then(|e| e.ok().map(|(k, _)| k.to_string()))
        .unwrap_or_default();
    shared.commands.lock().unwrap().push(name);
    Ok((request_id, body))
}

fn hello_doc(max_message: i32, max_batch: i32) -> bson::RawDocumentBuf {
    bson::rawdoc! {
        "isWritablePrimary": true, "helloOk": true, "maxWireVersion": 21, "minWireVersion": 0,
        "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": max_message,
        "maxWriteBatchSize": max_batch, "connectionId": 1, "ok": 1.0,
    }
}

/// `{ok: 1, pad: "xxx..."}` of about `len` bytes.
fn padded_reply(len: usize) -> bson::RawDocumentBuf {
    let pad = "x".repeat(len.saturating_sub(64));
    bson::rawdoc! { "ok": 1.0, "pad": pad }
}

/// One OP_MSG (flags 0, one body section) answering `request_id`.
fn op_msg(request_id: i32, body: &bson::RawDocument) -> Vec<u8> {
    let mut msg = Vec::new();
    let total = 16 + 4 + 1 + body.as_bytes().len();
    msg.extend_from_slice(&(total as i32).to_le_bytes());
    msg.extend_from_slice(&1i32.to_le_bytes());
    msg.extend_from_slice(&request_id.to_le_bytes());
    msg.extend_from_slice(&2013i32.to_le_bytes());
    msg.extend_from_slice(&0u32.to_le_bytes());
    msg.push(0);
    msg.extend_from_slice(body.as_bytes());
    msg
}

/// A find reply whose first batch holds `{_id: 1, s: <string>}` whose
/// string claims 200 bytes where it has 3: each enclosing length is right,
/// so only a check of the documents' content finds it.
fn bad_batch() -> bson::RawDocumentBuf {
    let good = bson::rawdoc! {
        "cursor": { "id": CURSOR_ID, "ns": "db.coll", "firstBatch": [{ "_id": 1, "s": "ab" }] },
        "ok": 1.0,
    };
    let mut bytes = good.into_bytes();
    // The string "ab": its length prefix (3) sits right before it.
    let at = bytes.windows(3).position(|w| w == b"ab\0").unwrap() - 4;
    bytes[at..at + 4].copy_from_slice(&200i32.to_le_bytes());
    bson::RawDocumentBuf::from_bytes(bytes).unwrap()
}

/// `SEQUENCE_LEN` bytes of empty documents: for `TinySequences` an OP_MSG
/// `{ok: 1}` plus a kind-1 section of them, for `TinyOpReply` an OP_REPLY
/// of them ending with `{ok: 1}`. Streamed from one small buffer.
fn tiny_documents(
    stream: &mut TcpStream,
    request_id: i32,
    behaviour: Behaviour,
    shared: &Shared,
) -> std::io::Result<()> {
    const EMPTY: [u8; 5] = [5, 0, 0, 0, 0];
    let ok = bson::rawdoc! { "ok": 1.0 };
    let ok = ok.as_bytes();
    let mut head = Vec::new();
    let (count, tail) = if behaviour == Behaviour::TinySequences {
        // header, flags, kind 0 + body, kind 1 + size + "d\0" + documents
        let fixed = 16 + 4 + 1 + ok.len() + 1 + 4 + 2;
        let count = (SEQUENCE_LEN - fixed) / EMPTY.len();
        let len = fixed + count * EMPTY.len();
        for v in [len as i32, 1, request_id, 2013, 0] {
            head.extend_from_slice(&v.to_le_bytes());
        }
        head.push(0);
        head.extend_from_slice(ok);
        head.push(1);
        head.extend_from_slice(&((4 + 2 + count * EMPTY.len()) as i32).to_le_bytes());
        head.extend_from_slice(b"d\0");
        (count, Vec::new())
    } else {
        // header, flags, cursor id, starting from, number returned
        let fixed = 16 + 20 + ok.len();
        let count = (SEQUENCE_LEN - fixed) / EMPTY.len();
        let len = fixed + count * EMPTY.len();
        for v in [len as i32, 1, request_id, 1, 0, 0, 0, 0, count as i32 + 1] {
            head.extend_from_slice(&v.to_le_bytes());
        }
        (count, ok.to_vec())
    };
    write_all(stream, &head, shared)?;
    let chunk = EMPTY.repeat(1 << 16);
    let mut left = count;
    while left > 0 {
        let n = left.min(1 << 16);
        write_all(stream, &chunk[..n * EMPTY.len()], shared)?;
        left -= n;
    }
    write_all(stream, &tail, shared)
}

/// A find reply of about `SEQUENCE_LEN` bytes whose first batch holds only
/// empty documents, streamed: `{cursor: {id: 0, ns, firstBatch: [{}, ...]}, ok: 1}`.
fn tiny_batch(stream: &mut TcpStream, request_id: i32, shared: &Shared) -> std::io::Result<()> {
    let element = |i: usize| 1 + i.to_string().len() + 1 + 5;
    // body: len, cursor (1+7), ok (1+3+8), terminator; cursor: len, id
    // (1+3+8), ns (1+3+4+8), firstBatch (1+11), terminator; array: len, terminator.
    let fixed = 16 + 4 + 1 + (4 + 8 + 12 + 1) + (4 + 12 + 16 + 12 + 1) + (4 + 1);
    let (mut count, mut array) = (0, 5);
    while fixed + array - 5 + element(count) <= SEQUENCE_LEN {
        array += element(count);
        count += 1;
    }
    let cursor = 4 + 12 + 16 + 12 + array + 1;
    let body = 4 + 8 + cursor + 12 + 1;
    let mut head = Vec::new();
    for v in [(16 + 4 + 1 + body) as i32, 1, request_id, 2013, 0] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    head.push(0);
    head.extend_from_slice(&(body as i32).to_le_bytes());
    head.extend_from_slice(b"\x03cursor\0");
    head.extend_from_slice(&(cursor as i32).to_le_bytes());
    head.extend_from_slice(b"\x12id\0");
    head.extend_from_slice(&0i64.to_le_bytes());
    head.extend_from_slice(b"\x02ns\0");
    head.extend_from_slice(&8i32.to_le_bytes());
    head.extend_from_slice(b"db.coll\0");
    head.extend_from_slice(b"\x04firstBatch\0");
    head.extend_from_slice(&(array as i32).to_le_bytes());
    write_all(stream, &head, shared)?;
    let mut chunk = Vec::with_capacity(1 << 20);
    for i in 0..count {
        chunk.push(3);
        chunk.extend_from_slice(i.to_string().as_bytes());
        chunk.extend_from_slice(&[0, 5, 0, 0, 0, 0]);
        if chunk.len() > (1 << 20) - 32 {
            write_all(stream, &chunk, shared)?;
            chunk.clear();
        }
    }
    chunk.push(0); // the array's end
    chunk.push(0); // the cursor's
    chunk.extend_from_slice(b"\x01ok\0");
    chunk.extend_from_slice(&1.0f64.to_le_bytes());
    chunk.push(0); // the body's
    write_all(stream, &chunk, shared)
}

/// A valid `FLOOD_LEN`-byte reply `{ok: 1, pad: BinData(<zeros>)}`, streamed
/// from one small buffer so the listener never holds it whole.
fn flood(stream: &mut TcpStream, request_id: i32, shared: &Shared) -> std::io::Result<()> {
    // OP_MSG header 16 + flags 4 + kind 1; the document: length 4, "ok"
    // double 1+3+8, "pad" binary 1+4+4+1 + data, terminator 1.
    let doc_len = FLOOD_LEN - 21;
    let data_len = doc_len - (4 + 12 + 10 + 1);
    let mut head = Vec::new();
    for v in [FLOOD_LEN as i32, 1, request_id, 2013, 0] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    head.push(0);
    head.extend_from_slice(&(doc_len as i32).to_le_bytes());
    head.extend_from_slice(b"\x01ok\0");
    head.extend_from_slice(&1.0f64.to_le_bytes());
    head.extend_from_slice(b"\x05pad\0");
    head.extend_from_slice(&(data_len as i32).to_le_bytes());
    head.push(0);
    write_all(stream, &head, shared)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = data_len;
    while left > 0 {
        let n = left.min(zeros.len());
        write_all(stream, &zeros[..n], shared)?;
        left -= n;
    }
    write_all(stream, &[0], shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(s: &mut TcpStream, request_id: i32, cmd: &bson::RawDocument) {
        let mut msg = op_msg(0, cmd);
        msg[4..8].copy_from_slice(&request_id.to_le_bytes());
        s.write_all(&msg).unwrap();
    }

    /// One reply: its responseTo and body.
    fn receive(s: &mut TcpStream) -> (i32, Vec<u8>) {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut rest = vec![0u8; i32::from_le_bytes(len) as usize - 4];
        s.read_exact(&mut rest).unwrap();
        let to = i32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        (to, rest[17..].to_vec())
    }

    fn connect(l: &Listener) -> TcpStream {
        let s = TcpStream::connect(l.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    #[test]
    fn hello_then_silent_answers_each_connection_once() {
        let l = Listener::start(Behaviour::HelloThenSilent).unwrap();
        for _ in 0..2 {
            let mut s = connect(&l);
            send(&mut s, 9, &bson::rawdoc! { "hello": 1, "$db": "admin" });
            assert_eq!(receive(&mut s).0, 9, "responseTo");
        }
        assert_eq!(l.accepted(), 2);
        assert_eq!(l.commands(), ["hello", "hello"]);
    }

    #[test]
    fn empty_batches_keep_the_cursor_open() {
        let l = Listener::start(Behaviour::EmptyBatches).unwrap();
        let mut s = connect(&l);
        send(&mut s, 1, &bson::rawdoc! { "hello": 1 });
        receive(&mut s);
        send(&mut s, 2, &bson::rawdoc! { "find": "coll" });
        let (_, body) = receive(&mut s);
        let doc = bson::RawDocument::from_bytes(&body).unwrap();
        let cursor = doc.get_document("cursor").unwrap();
        assert_eq!(cursor.get_i64("id").unwrap(), CURSOR_ID);
        for id in 3..6 {
            send(
                &mut s,
                id,
                &bson::rawdoc! { "getMore": CURSOR_ID, "collection": "coll" },
            );
            let (to, body) = receive(&mut s);
            assert_eq!(to, id);
            let doc = bson::RawDocument::from_bytes(&body).unwrap();
            let cursor = doc.get_document("cursor").unwrap();
            assert!(cursor
                .get_array("nextBatch")
                .unwrap()
                .into_iter()
                .next()
                .is_none());
        }
        assert_eq!(l.count("getMore"), 3);
    }

    #[test]
    fn trickle_and_flood_send_whole_valid_replies() {
        for (behaviour, len) in [
            (Behaviour::Trickle, None),
            (Behaviour::Flood, Some(FLOOD_LEN)),
        ] {
            let l = Listener::start(behaviour).unwrap();
            let mut s = connect(&l);
            send(&mut s, 1, &bson::rawdoc! { "hello": 1 });
            receive(&mut s);
            send(&mut s, 2, &bson::rawdoc! { "ping": 1 });
            let (to, body) = receive(&mut s);
            assert_eq!(to, 2);
            let doc = bson::RawDocument::from_bytes(&body).unwrap();
            assert_eq!(doc.get_f64("ok").unwrap(), 1.0);
            if let Some(len) = len {
                assert_eq!(body.len(), len - 21);
            } else {
                assert!(body.len() > TRICKLE_LEN - 100, "{}", body.len());
            }
        }
    }
}
