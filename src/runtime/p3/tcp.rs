//! A TCP stream over wasi:sockets 0.3 whose every await honours a `Deadline`.
//!
//! Cancellation (the future of any method dropped at an await):
//! - A read loses no bytes. The host read is cancelled synchronously and what
//!   it had delivered is kept in the stream for the next read; bytes already
//!   appended to the caller's `buf` stay there. The stream stays usable, but
//!   the caller's framing is wherever its `buf` left it.
//! - A write dropped before it finished may have sent part of the message, so
//!   the stream is then broken: later calls fail with "connection closed".
//! - Connecting: the socket is dropped with the future; nothing lingers.

use super::super::stream::reserve_within;
use super::{check, within};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use wasip3::sockets::types::{ErrorCode, TcpSocket};
use wasip3::wit_bindgen::{FutureReader, StreamRead, StreamReader, StreamResult, StreamWriter};

/// Most bytes asked of one host read: large replies come in few calls.
const READ_CHUNK: usize = 64 * 1024;
/// Least bytes asked of one host read, and the most an idle stream keeps
/// allocated (a pool of idle connections holds no 64 KiB buffers).
const READ_MIN: usize = 4 * 1024;

/// Closing is dropping, which never blocks: it drops handles only, and the
/// host finishes (or abandons) a send in flight on its own (0.2 needed parking).
pub struct TcpStream {
    /// Bytes received but not yet handed out: `rx[rx_off..]`.
    rx: Vec<u8>,
    rx_off: usize,
    input: StreamReader<u8>,
    /// How the receive side ended (read once the input stream is dropped).
    input_result: Option<FutureReader<std::result::Result<(), ErrorCode>>>,
    /// Written into by us, read by the host's `send`.
    output: StreamWriter<u8>,
    output_result: Option<FutureReader<std::result::Result<(), ErrorCode>>>,
    /// Set while a write is under way: still set means it was dropped mid-way.
    broken: bool,
    _socket: TcpSocket,
}

impl TcpStream {
    /// Connects to one address (no lookup: the DNS client uses it, so no recursion).
    pub(crate) async fn connect_ip(ip: IpAddr, port: u16, deadline: Deadline) -> Result<TcpStream> {
        let peer = super::super::resolve::peer(ip, port)?;
        let net_err = |e: ErrorCode| super::socket_error_p3(e, &format!("connect to {peer}"));
        let (family, addr) = to_wasi_addr(ip, port);
        let socket = TcpSocket::create(family).map_err(net_err)?;
        within(deadline, "connection establishment", async {
            socket.connect(addr).await.map_err(net_err)
        })
        .await?;
        let (input, input_result) = socket.receive();
        let (output, outgoing) = wasip3::wit_stream::new::<u8>();
        // The host reads `outgoing` from now on; the future says how that ended.
        let output_result = socket.send(outgoing);
        Ok(TcpStream {
            rx: Vec::new(),
            rx_off: 0,
            input,
            input_result: Some(input_result),
            output,
            output_result: Some(output_result),
            broken: false,
            _socket: socket,
        })
    }

    fn usable(&self) -> Result<()> {
        match self.broken {
            true => Err(Error::network("connection closed")),
            false => Ok(()),
        }
    }

    /// Writes all of `bytes`, its waits named `section` (e.g. "TLS
    /// handshake"): one host write of the whole message (there is no
    /// TCP_NODELAY on wasi), more only if the host takes part of it.
    pub async fn write_all_as(
        &mut self,
        bytes: &[u8],
        deadline: Deadline,
        section: &str,
    ) -> Result<()> {
        self.usable()?;
        check(deadline, section)?;
        // Broken until the whole message is out: a write dropped (or failed)
        // mid-way leaves part of it sent.
        self.broken = true;
        let output = &mut self.output;
        let (mut status, mut rest) = within(deadline, section, async {
            Ok(output.write(bytes.to_vec()).await)
        })
        .await?;
        loop {
            if status == StreamResult::Dropped {
                return Err(self.write_failed(deadline).await);
            }
            if rest.remaining() == 0 {
                break;
            }
            check(deadline, section)?;
            let output = &mut self.output;
            (status, rest) = within(deadline, section, async {
                Ok(output.write_buf(rest).await)
            })
            .await?;
        }
        self.broken = false;
        Ok(())
    }

    /// Hands `bytes` to the host's `send` only if it takes them all at once,
    /// never waiting (a TLS close_notify from `Drop`, which cannot await). If
    /// the host is not ready for them, the write is cancelled there and then
    /// and the close_notify skipped: the socket closes right after anyway, and
    /// a server takes a close without close_notify as any closed connection.
    pub fn send_now(&mut self, bytes: &[u8]) -> Result<()> {
        self.usable()?;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut write = std::pin::pin!(self.output.write(bytes.to_vec()));
        let done = match write.as_mut().poll(&mut cx) {
            Poll::Ready((StreamResult::Complete(_), rest)) => rest.remaining() == 0,
            Poll::Ready(_) => false,
            Poll::Pending => {
                let (_, rest) = write.as_mut().cancel();
                rest.remaining() == 0
            }
        };
        match done {
            true => Ok(()),
            false => {
                // Part of it may have gone: nothing more can follow it.
                self.broken = true;
                Err(Error::network("the socket did not take the bytes at once"))
            }
        }
    }

    /// The host stopped reading what we send: its `send` future says why.
    async fn write_failed(&mut self, deadline: Deadline) -> Error {
        match self.output_result.take() {
            Some(result) => {
                match within(deadline, "socket write", async { Ok(result.await) }).await {
                    Ok(Err(code)) => {
                        Error::network("socket error").with_cause(super::error_code_name(&code))
                    }
                    Ok(Ok(())) => Error::network("connection closed by the server"),
                    Err(e) => e,
                }
            }
            None => Error::network("connection closed by the server"),
        }
    }

    /// Appends to `buf` until it holds at least `want` bytes, taking what has
    /// arrived up to `max` (at least `want`) in all: one read can bring a
    /// frame's length and its body together. `buf` never grows past `max`;
    /// bytes received beyond it stay in the stream for the next read. Every
    /// pass checks the deadline, so a reply trickled or flooded past it fails
    /// in time.
    pub async fn read_up_to(
        &mut self,
        buf: &mut Vec<u8>,
        want: usize,
        max: usize,
        deadline: Deadline,
    ) -> Result<()> {
        const SECTION: &str = "socket read";
        let max = max.max(want);
        self.usable()?;
        while buf.len() < want {
            check(deadline, SECTION)?;
            if self.rx_off == self.rx.len() {
                self.fill(max - buf.len(), deadline, SECTION).await?;
            }
            self.take_pending(buf, max - buf.len(), max);
        }
        Ok(())
    }

    /// Appends what has arrived (at least one byte) to `buf`, waiting as
    /// `section` until `deadline`, which is checked even when data is ready.
    pub async fn read_some(
        &mut self,
        buf: &mut Vec<u8>,
        deadline: Deadline,
        section: &str,
    ) -> Result<()> {
        self.usable()?;
        loop {
            check(deadline, section)?;
            if self.rx_off < self.rx.len() {
                let n = self.rx.len() - self.rx_off;
                self.take_pending(buf, n, usize::MAX);
                return Ok(());
            }
            self.fill(READ_CHUNK, deadline, section).await?;
        }
    }

    /// Moves up to `room` pending bytes to `buf` (which never grows past `limit`).
    fn take_pending(&mut self, buf: &mut Vec<u8>, room: usize, limit: usize) {
        let avail = &self.rx[self.rx_off..];
        let n = avail.len().min(room);
        reserve_within(buf, n, limit);
        buf.extend_from_slice(&avail[..n]);
        self.rx_off += n;
        if self.rx_off == self.rx.len() {
            self.rx.clear();
            self.rx_off = 0;
            if self.rx.capacity() > READ_MIN {
                self.rx = Vec::new();
            }
        }
    }

    /// One host read into `rx` (which holds no pending bytes), asking for
    /// about `hint` bytes. A read may complete with none; the caller loops.
    async fn fill(&mut self, hint: usize, deadline: Deadline, section: &str) -> Result<()> {
        debug_assert_eq!(self.rx_off, self.rx.len());
        self.rx.clear();
        self.rx_off = 0;
        // The host fills the spare capacity, never more.
        self.rx.reserve_exact(hint.clamp(READ_MIN, READ_CHUNK));
        let read = KeepOnCancel {
            op: Some(Box::pin(self.input.read(std::mem::take(&mut self.rx)))),
            slot: &mut self.rx,
        };
        match within(deadline, section, async { Ok(read.await) }).await? {
            StreamResult::Complete(_) | StreamResult::Cancelled => Ok(()),
            StreamResult::Dropped => Err(self.read_ended(deadline, section).await),
        }
    }

    /// The host dropped the input stream: its `receive` future says why.
    async fn read_ended(&mut self, deadline: Deadline, section: &str) -> Error {
        match self.input_result.take() {
            Some(result) => match within(deadline, section, async { Ok(result.await) }).await {
                Ok(Err(code)) => {
                    Error::network("socket error").with_cause(super::error_code_name(&code))
                }
                Ok(Ok(())) => Error::network("connection closed by the server"),
                Err(e) => e,
            },
            None => Error::network("connection closed by the server"),
        }
    }
}

/// A host read into a buffer taken from `slot`, which gets the buffer back
/// however the read ends: done, or dropped (a deadline, a cancelled caller).
/// Dropping cancels the host read synchronously and keeps what it delivered,
/// so a cancelled read loses no bytes.
struct KeepOnCancel<'a> {
    op: Option<Pin<Box<StreamRead<'a, u8>>>>,
    slot: &'a mut Vec<u8>,
}

impl Future for KeepOnCancel<'_> {
    type Output = StreamResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StreamResult> {
        let this = &mut *self;
        let Some(op) = this.op.as_mut() else {
            return Poll::Ready(StreamResult::Cancelled);
        };
        match op.as_mut().poll(cx) {
            Poll::Ready((result, buf)) => {
                *this.slot = buf;
                // Done: `cancel` must not be called on it now.
                this.op = None;
                Poll::Ready(result)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for KeepOnCancel<'_> {
    fn drop(&mut self) {
        if let Some(mut op) = self.op.take() {
            let (_, buf) = op.as_mut().cancel();
            *self.slot = buf;
        }
    }
}

wasi_addr_conversions!(wasip3::sockets::types);
