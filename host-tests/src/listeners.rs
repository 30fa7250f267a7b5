//! Misbehaving loopback servers for deadline tests. Each runs on its own
//! thread, serves a bounded number of connections, and stops when dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Accepts and never answers anything (not even the handshake).
    Silent,
    /// Answers the handshake's `hello` like a standalone, then never answers again.
    HelloThenSilent,
}

pub struct Listener {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// At most this many connections, and never longer than this, so a leaked
/// listener cannot run on; normally the test drops it first.
const MAX_CONNECTIONS: usize = 16;
const HOLD: Duration = Duration::from_secs(120);

impl Listener {
    pub fn start(behaviour: Behaviour) -> std::io::Result<Listener> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            let started = std::time::Instant::now();
            while !flag.load(Ordering::Relaxed)
                && started.elapsed() < HOLD
                && held.len() < MAX_CONNECTIONS
            {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        count.fetch_add(1, Ordering::Relaxed);
                        let _ = stream.set_nonblocking(false);
                        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                        if behaviour == Behaviour::HelloThenSilent {
                            let _ = answer_hello(&mut stream);
                        }
                        held.push(stream);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            // Dropping `held` closes every connection.
        });
        Ok(Listener {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        })
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one OP_MSG request and answers it as a standalone server's hello.
fn answer_hello(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let n = i32::from_le_bytes(len).clamp(16, 1 << 20) as usize;
    let mut rest = vec![0u8; n - 4];
    stream.read_exact(&mut rest)?;
    let request_id = i32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let body = bson::rawdoc! {
        "isWritablePrimary": true, "helloOk": true, "maxWireVersion": 21, "minWireVersion": 0,
        "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": 48000000,
        "maxWriteBatchSize": 100000, "connectionId": 1, "ok": 1.0,
    };
    let mut msg = Vec::new();
    let total = 16 + 4 + 1 + body.as_bytes().len();
    msg.extend_from_slice(&(total as i32).to_le_bytes());
    msg.extend_from_slice(&1i32.to_le_bytes());
    msg.extend_from_slice(&request_id.to_le_bytes());
    msg.extend_from_slice(&2013i32.to_le_bytes());
    msg.extend_from_slice(&0u32.to_le_bytes());
    msg.push(0);
    msg.extend_from_slice(body.as_bytes());
    stream.write_all(&msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_then_silent_answers_each_connection_once() {
        let l = Listener::start(Behaviour::HelloThenSilent).unwrap();
        for _ in 0..2 {
            let mut s = TcpStream::connect(l.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let hello = bson::rawdoc! { "hello": 1, "$db": "admin" };
            let total = 16 + 4 + 1 + hello.as_bytes().len();
            let mut msg = Vec::new();
            for v in [total as i32, 9, 0, 2013] {
                msg.extend_from_slice(&v.to_le_bytes());
            }
            msg.extend_from_slice(&0u32.to_le_bytes());
            msg.push(0);
            msg.extend_from_slice(hello.as_bytes());
            s.write_all(&msg).unwrap();
            let mut header = [0u8; 16];
            s.read_exact(&mut header).unwrap();
            assert_eq!(
                i32::from_le_bytes([header[8], header[9], header[10], header[11]]),
                9,
                "responseTo"
            );
        }
        assert_eq!(l.accepted(), 2);
    }
}
