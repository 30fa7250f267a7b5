//! A TCP stream over wasi:sockets/tcp whose every wait honours a `Deadline`.

use super::dns;
use super::wait::{check, wait};
use crate::deadline::Deadline;
use crate::error::{Error, ErrorKind, Result};
use std::cell::RefCell;
use std::net::IpAddr;
use wasi::io::poll::Pollable;
use wasi::io::streams::{InputStream, OutputStream, StreamError};
use wasi::sockets::instance_network::instance_network;
use wasi::sockets::network::{
    ErrorCode, IpAddress, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, Ipv6SocketAddress,
};
use wasi::sockets::tcp::{ShutdownType, TcpSocket};
use wasi::sockets::tcp_create_socket::create_tcp_socket;

/// Bytes asked of one `read`: large enough for typical replies in one call.
const READ_CHUNK: u64 = 64 * 1024;

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
    /// Resolves `host` and connects to the first address that answers.
    pub async fn connect(host: &str, port: u16, deadline: Deadline) -> Result<TcpStream> {
        Self::connect_via(host, port, &[], deadline).await
    }

    /// As `connect`, asking `name_servers` (if any) for `host`'s addresses
    /// first: the servers that answered a `mongodb+srv` lookup know its targets.
    pub async fn connect_via(
        host: &str,
        port: u16,
        name_servers: &[std::net::SocketAddr],
        deadline: Deadline,
    ) -> Result<TcpStream> {
        let mut last: Option<Error> = None;
        for ip in dns::resolve_via(host, name_servers, deadline)
            .await
            .map_err(|mut e| {
                // Name the address the lookup was for.
                e.message = format!("{} (for {host}:{port})", e.message);
                e
            })?
        {
            match Self::connect_ip(ip, port, deadline).await {
                Ok(s) => return Ok(s),
                Err(e) if e.is_timeout() => return Err(e),
                // A denied address is reported only if no other failed for another reason.
                Err(e) => {
                    if last
                        .as_ref()
                        .is_none_or(|l| l.kind == ErrorKind::AccessDenied)
                    {
                        last = Some(e);
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::network(format!("no address for {host}"))))
    }

    /// One address, no lookup (DNS over TCP connects here: no recursion).
    pub async fn connect_ip(ip: IpAddr, port: u16, deadline: Deadline) -> Result<TcpStream> {
        let peer = match ip {
            IpAddr::V6(_) => format!("[{ip}]:{port}"),
            IpAddr::V4(_) => format!("{ip}:{port}"),
        };
        let net_err = |e: ErrorCode| super::socket_error(e, &format!("connect to {peer}"));
        if let IpAddr::V6(v6) = ip {
            // WASI sockets refuse these (invalid-argument): say which address to use.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return Err(Error::invalid_argument(format!(
                    "cannot connect to {peer}: WASI sockets do not take IPv4-mapped IPv6 \
                     addresses; use {v4}:{port}"
                )));
            }
        }
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

    /// Writes all of `bytes`: one `write` when the permit allows (it usually
    /// does). Every pass checks the deadline, the flush wait's included.
    pub async fn write_all(&mut self, bytes: &[u8], deadline: Deadline) -> Result<()> {
        self.write_all_now(bytes, deadline, "socket write")
    }

    /// `write_all`, its waits named `section` (e.g. "TLS handshake").
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

    /// Appends to `buf` until it holds at least `want` bytes, never reading
    /// past `want` nor growing `buf` beyond it. Every pass checks the
    /// deadline, so a reply trickled or flooded past it fails in time.
    pub async fn read_to_len(
        &mut self,
        buf: &mut Vec<u8>,
        want: usize,
        deadline: Deadline,
    ) -> Result<()> {
        self.read_up_to(buf, want, want, deadline).await
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
        // Read first: a fast server's reply is usually there already (then
        // one call brings it), and an empty read costs less than a wait.
        while buf.len() < want {
            check(deadline, SECTION)?;
            let ask = ((max - buf.len()) as u64).clamp(1, READ_CHUNK);
            let chunk = p.input.read(ask).map_err(stream_err)?;
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

/// Room for `more` bytes, growing geometrically but never past `limit` (the
/// frame length), so a reply claiming a large frame costs only what arrived.
fn reserve_within(buf: &mut Vec<u8>, more: usize, limit: usize) {
    let need = buf.len() + more;
    if need > buf.capacity() {
        let target = buf
            .capacity()
            .saturating_mul(2)
            .clamp(need, limit.max(need));
        buf.reserve_exact(target - buf.len());
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
            let chunk = p.input.read(READ_CHUNK).map_err(stream_err)?;
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

pub(super) fn to_wasi_addr(ip: IpAddr, port: u16) -> (IpAddressFamily, IpSocketAddress) {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            let addr = Ipv4SocketAddress {
                port,
                address: (a, b, c, d),
            };
            (IpAddressFamily::Ipv4, IpSocketAddress::Ipv4(addr))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let addr = Ipv6SocketAddress {
                port,
                flow_info: 0,
                address: (s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
                scope_id: 0,
            };
            (IpAddressFamily::Ipv6, IpSocketAddress::Ipv6(addr))
        }
    }
}

pub(super) fn from_wasi_ip(ip: IpAddress) -> IpAddr {
    match ip {
        IpAddress::Ipv4((a, b, c, d)) => IpAddr::from([a, b, c, d]),
        IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => IpAddr::from([a, b, c, d, e, f, g, h]),
    }
}

#[cfg(test)]
mod tests {
    use super::reserve_within;

    #[test]
    fn the_read_buffer_never_grows_past_the_frame() {
        let mut buf = Vec::new();
        let frame = 1_000_000;
        while buf.len() < frame {
            let n = (frame - buf.len()).min(64 * 1024);
            reserve_within(&mut buf, n, frame);
            buf.extend(std::iter::repeat_n(0u8, n));
            assert!(buf.capacity() <= frame, "{} > {frame}", buf.capacity());
        }
        assert_eq!(buf.len(), frame);
        // Growth stays geometric: few reallocations, not one per chunk.
        let mut small = Vec::with_capacity(10);
        reserve_within(&mut small, 10, 1000);
        reserve_within(&mut small, 11, 1000);
        assert!(small.capacity() >= 20);
    }
}
