//! A TCP stream over wasi:sockets/tcp whose every wait honours a `Deadline`.

use super::stream::reserve_within;
use super::wait::{check, wait};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::net::IpAddr;
use wasi::io::poll::Pollable;
use wasi::io::streams::{InputStream, OutputStream, StreamError};
use wasi::sockets::instance_network::instance_network;
use wasi::sockets::network::ErrorCode;
use wasi::sockets::tcp::{ShutdownType, TcpSocket};
use wasi::sockets::tcp_create_socket::create_tcp_socket;

/// Bytes asked of one `read`: large enough for typical replies in one call.
const READ_CHUNK: u64 = 64 * 1024;
/// The most `blocking-write-and-flush` takes in one call (wasi:io/streams).
const BLOCKING_WRITE_MAX: usize = 4096;

pub struct TcpStream {
    /// `None` only once `Drop` has taken it to `close`.
    parts: Option<Parts>,
    /// Bytes the output stream accepts in its next `write`, from the last
    /// `check-write` (a permit stays good until that write): a message
    /// usually goes out without asking again.
    permit: u64,
}

/// Field order is drop order: pollables are children of their streams, and
/// the streams children of the socket.
struct Parts {
    /// Each stream's pollable, made at its first wait and kept for the
    /// connection's life (one less resource made and dropped per message).
    input_ready: Option<Pollable>,
    output_ready: Option<Pollable>,
    input: InputStream,
    output: OutputStream,
    socket: TcpSocket,
}

impl TcpStream {
    /// One address, no lookup (DNS over TCP connects here: no recursion).
    pub async fn connect_ip(ip: IpAddr, port: u16, deadline: Deadline) -> Result<TcpStream> {
        let peer = super::resolve::peer(ip, port)?;
        let net_err = |e: ErrorCode| super::socket_error(e, &format!("connect to {peer}"));
        let (family, addr) = to_wasi_addr(ip, port);
        let network = instance_network();
        let socket = create_tcp_socket(family).map_err(net_err)?;
        socket.start_connect(&network, addr).map_err(net_err)?;
        let pollable = socket.subscribe();
        let (input, output) = loop {
            match socket.finish_connect() {
                Ok(pair) => break pair,
                Err(ErrorCode::WouldBlock) => {
                    wait(&pollable, deadline, "connection establishment")?
                }
                Err(e) => return Err(net_err(e)),
            }
        };
        drop(pollable);
        Ok(TcpStream {
            parts: Some(Parts {
                input_ready: None,
                output_ready: None,
                input,
                output,
                socket,
            }),
            permit: 0,
        })
    }

    fn parts(&mut self) -> Result<&mut Parts> {
        self.parts
            .as_mut()
            .ok_or_else(|| Error::network("connection closed"))
    }

    /// Writes all of `bytes`, its waits named `section` (e.g. "TLS
    /// handshake"): one `write` when the permit allows (it usually does).
    /// Every pass checks the deadline, the flush wait's included.
    pub async fn write_all_as(
        &mut self,
        bytes: &[u8],
        deadline: Deadline,
        section: &str,
    ) -> Result<()> {
        self.write_all_now(bytes, deadline, section)
    }

    /// `write_all_as`, blocking: WASI 0.2 has one caller at a time (and a
    /// `Drop` that sends a TLS close_notify cannot await).
    pub fn write_all_now(&mut self, bytes: &[u8], deadline: Deadline, section: &str) -> Result<()> {
        let mut permit = std::mem::take(&mut self.permit);
        let p = self.parts()?;
        // Without a deadline a message the host takes whole is written,
        // flushed and waited for in one call, where check-write, write and
        // flush are three; the next message asks for its permit again.
        if deadline == Deadline::Infinite && bytes.len() <= BLOCKING_WRITE_MAX {
            return p.output.blocking_write_and_flush(bytes).map_err(stream_err);
        }
        let mut off = 0;
        while off < bytes.len() {
            check(deadline, section)?;
            if permit == 0 {
                permit = p.output.check_write().map_err(stream_err)?;
                if permit == 0 {
                    let ready = p.output_ready.get_or_insert_with(|| p.output.subscribe());
                    wait(ready, deadline, section)?;
                    continue;
                }
            }
            let n = (bytes.len() - off).min(usize::try_from(permit).unwrap_or(usize::MAX));
            p.output.write(&bytes[off..off + n]).map_err(stream_err)?;
            permit -= n as u64;
            off += n;
        }
        p.output.flush().map_err(stream_err)?;
        // The flush is done once the stream accepts writes again; the permit
        // it then gives serves the next message.
        loop {
            permit = p.output.check_write().map_err(stream_err)?;
            if permit > 0 {
                break;
            }
            let ready = p.output_ready.get_or_insert_with(|| p.output.subscribe());
            wait(ready, deadline, section)?;
        }
        self.permit = permit;
        Ok(())
    }

    /// Appends to `buf` until it holds at least `want` bytes, each read
    /// taking what has arrived up to `max` (at least `want`) in all: one
    /// read can bring a frame's length and its body together. `buf` never
    /// grows past `max`. Every pass checks the deadline, so a reply trickled
    /// or flooded past it fails in time.
    pub async fn read_up_to(
        &mut self,
        buf: &mut Vec<u8>,
        want: usize,
        max: usize,
        deadline: Deadline,
    ) -> Result<()> {
        const SECTION: &str = "socket read";
        let max = max.max(want);
        let p = self.parts()?;
        while buf.len() < want {
            check(deadline, SECTION)?;
            let ask = ((max - buf.len()) as u64).clamp(1, READ_CHUNK);
            let chunk = read_or_block(&p.input, ask, deadline)?;
            if chunk.is_empty() {
                let ready = p.input_ready.get_or_insert_with(|| p.input.subscribe());
                wait(ready, deadline, SECTION)?;
            } else {
                reserve_within(buf, chunk.len(), max);
                buf.extend_from_slice(&chunk);
            }
        }
        Ok(())
    }
}

impl TcpStream {
    /// Appends what has arrived (at least one byte) to `buf`, waiting as
    /// `section` until `deadline`, which is checked even when data is ready.
    pub async fn read_some(
        &mut self,
        buf: &mut Vec<u8>,
        deadline: Deadline,
        section: &str,
    ) -> Result<()> {
        let p = self.parts()?;
        loop {
            check(deadline, section)?;
            let chunk = read_or_block(&p.input, READ_CHUNK, deadline)?;
            if !chunk.is_empty() {
                buf.extend_from_slice(&chunk);
                return Ok(());
            }
            let ready = p.input_ready.get_or_insert_with(|| p.input.subscribe());
            wait(ready, deadline, section)?;
        }
    }
}

impl TcpStream {
    /// Sends `bytes` only as far as the socket takes them without waiting
    /// (a TLS close_notify from `Drop`, which cannot wait).
    pub fn send_now(&mut self, bytes: &[u8]) -> Result<()> {
        self.write_all_now(bytes, Deadline::At(super::now()), "socket write")
    }
}

/// Up to `ask` bytes. Without a deadline the host waits for them (one
/// call, where a read that finds nothing, a block and a read again are
/// three); with one, what has arrived, possibly nothing: the caller waits
/// in `wait`, raced against the deadline. A timed read reads first because
/// a fast server's reply is often there already, and an empty read costs
/// less than a wait.
fn read_or_block(input: &InputStream, ask: u64, deadline: Deadline) -> Result<Vec<u8>> {
    match deadline {
        Deadline::Infinite => input.blocking_read(ask),
        Deadline::At(_) => input.read(ask),
    }
    .map_err(stream_err)
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            close(parts);
        }
    }
}

/// At most this many closed connections wait for a write in flight; past
/// that they are left to the host (freed with the instance), never waited for.
const MAX_PARKED: usize = 16;

thread_local! {
    /// Closed connections whose last write is still in flight: wasmtime's
    /// output-stream drop waits for that write, and a server that stops
    /// reading can hold it up far past any deadline. They are dropped by a
    /// later `close` once the write has finished.
    static PARKED: RefCell<Vec<(OutputStream, TcpSocket)>> = const { RefCell::new(Vec::new()) };
}

/// Shuts the socket down, and drops it now unless a write is still in
/// flight (then it is parked): closing never blocks.
fn close(parts: Parts) {
    let Parts {
        input_ready,
        output_ready,
        input,
        output,
        socket,
    } = parts;
    drop((input_ready, output_ready));
    let _ = socket.shutdown(ShutdownType::Both);
    // Dropping the input stream never waits.
    drop(input);
    let in_flight = |o: &OutputStream| matches!(o.check_write(), Ok(0));
    PARKED.with_borrow_mut(|parked| {
        // Tuples drop in field order: each stream before its socket.
        parked.retain(|(o, _)| in_flight(o));
        if !in_flight(&output) {
            drop(output);
            drop(socket);
        } else if parked.len() < MAX_PARKED {
            parked.push((output, socket));
        } else {
            std::mem::forget((output, socket));
        }
    });
}

fn stream_err(e: StreamError) -> Error {
    match e {
        StreamError::Closed => Error::network("connection closed by the server"),
        StreamError::LastOperationFailed(err) => {
            Error::network("socket error").with_cause(err.to_debug_string())
        }
    }
}

wasi_addr_conversions!(wasi::sockets::network);
