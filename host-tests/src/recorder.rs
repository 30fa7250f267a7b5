//! A loopback server that records what it receives: the handshakes and
//! commands a test then inspects (Stable API fields, client metadata).

use bson::{rawdoc, RawDocument, RawDocumentBuf};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a recording server received: (opCode, command document).
type Received = Arc<Mutex<Vec<(i32, RawDocumentBuf)>>>;

/// A loopback server that records every request and answers OP_MSG `hello`
/// with CommandNotFound (a server without `hello`) when `reject_hello`, or as
/// a standalone otherwise; legacy OP_QUERY `isMaster` and other commands get
/// `ok: 1` replies.
pub struct Recorder {
    pub addr: SocketAddr,
    received: Received,
}

const OP_REPLY: i32 = 1;
pub const OP_QUERY: i32 = 2004;
pub const OP_MSG: i32 = 2013;

impl Recorder {
    pub fn start(reject_hello: bool) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Received = Arc::default();
        let log = received.clone();
        std::thread::spawn(move || {
            // Bounded: a few connections, each served until the client closes it.
            for stream in listener.incoming().take(8).flatten() {
                let log = log.clone();
                std::thread::spawn(move || serve(stream, reject_hello, &log));
            }
        });
        Recorder { addr, received }
    }

    pub fn received(&self) -> Vec<(i32, RawDocumentBuf)> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(mut s: TcpStream, reject_hello: bool, log: &Mutex<Vec<(i32, RawDocumentBuf)>>) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    loop {
        let mut head = [0u8; 16];
        if s.read_exact(&mut head).is_err() {
            return;
        }
        let int = |i: usize| i32::from_le_bytes(head[i..i + 4].try_into().unwrap());
        let (len, request_id, op) = (int(0), int(4), int(12));
        let mut rest = vec![0u8; (len as usize).clamp(16, 1 << 20) - 16];
        if s.read_exact(&mut rest).is_err() {
            return;
        }
        let doc = match op {
            // flags, section kind 0, the body.
            OP_MSG => body_at(&rest, 5),
            // flags, the collection name, skip and limit, the query.
            OP_QUERY => {
                let name_end = 4 + rest[4..].iter().position(|b| *b == 0).unwrap();
                body_at(&rest, name_end + 1 + 8)
            }
            _ => return,
        };
        let name = doc.iter().next().unwrap().unwrap().0.to_string();
        log.lock().unwrap().push((op, doc));
        let standalone = rawdoc! {
            "isWritablePrimary": true, "ismaster": true, "maxWireVersion": 21,
            "minWireVersion": 0, "maxBsonObjectSize": 16777216,
            "maxMessageSizeBytes": 48000000, "maxWriteBatchSize": 100000, "ok": 1.0,
        };
        let reply = match (op, name.as_str()) {
            (OP_MSG, "hello") if reject_hello => rawdoc! {
                "ok": 0.0, "errmsg": "no such command: 'hello'", "code": 59,
                "codeName": "CommandNotFound",
            },
            (_, "hello" | "isMaster") => standalone,
            _ => rawdoc! { "ok": 1.0 },
        };
        let mut out = Vec::new();
        let payload_len = if op == OP_MSG { 5 } else { 20 } + reply.as_bytes().len();
        out.extend_from_slice(&(16 + payload_len as i32).to_le_bytes());
        out.extend_from_slice(&1i32.to_le_bytes());
        out.extend_from_slice(&request_id.to_le_bytes());
        if op == OP_MSG {
            out.extend_from_slice(&OP_MSG.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.push(0);
        } else {
            out.extend_from_slice(&OP_REPLY.to_le_bytes());
            out.extend_from_slice(&0i32.to_le_bytes()); // responseFlags
            out.extend_from_slice(&0i64.to_le_bytes()); // cursorID
            out.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
            out.extend_from_slice(&1i32.to_le_bytes()); // numberReturned
        }
        out.extend_from_slice(reply.as_bytes());
        if s.write_all(&out).is_err() {
            return;
        }
    }
}

fn body_at(bytes: &[u8], at: usize) -> RawDocumentBuf {
    let len = i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    RawDocument::from_bytes(&bytes[at..at + len])
        .unwrap()
        .to_owned()
}
