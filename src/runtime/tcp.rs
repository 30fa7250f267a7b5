//! A TCP stream over wasi:sockets/tcp whose every wait honours a `Deadline`.

use super::{dns, wait};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use std::net::IpAddr;
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
    // Field order is drop order: the streams are children of the socket.
    input: InputStream,
    output: OutputStream,
    socket: TcpSocket,
}

impl TcpStream {
    /// Resolves `host` and connects to the first address that answers.
    pub fn connect(host: &str, port: u16, deadline: Deadline) -> Result<TcpStream> {
        let mut last = None;
        for ip in dns::resolve(host, deadline)? {
            match Self::connect_ip(ip, port, deadline) {
                Ok(s) => return Ok(s),
                Err(e) if e.is_timeout() => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::network(format!("no address for {host}"))))
    }

    fn connect_ip(ip: IpAddr, port: u16, deadline: Deadline) -> Result<TcpStream> {
        let peer = format!("{ip}:{port}");
        let net_err = |e: ErrorCode| {
            Error::network(format!("cannot connect to {peer}")).with_cause(format!("{e:?}"))
        };
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
            input,
            output,
            socket,
        })
    }

    /// Writes all of `bytes`: one `write` when the permit allows (it usually does).
    pub fn write_all(&mut self, bytes: &[u8], deadline: Deadline) -> Result<()> {
        self.write_all_as(bytes, deadline, "socket write")
    }

    /// `write_all`, its waits named `section` (e.g. "TLS handshake").
    pub fn write_all_as(&mut self, bytes: &[u8], deadline: Deadline, section: &str) -> Result<()> {
        let pollable = self.output.subscribe();
        let mut off = 0;
        while off < bytes.len() {
            let permit = self.output.check_write().map_err(stream_err)?;
            if permit == 0 {
                wait(&pollable, deadline, section)?;
                continue;
            }
            let n = (bytes.len() - off).min(usize::try_from(permit).unwrap_or(usize::MAX));
            self.output
                .write(&bytes[off..off + n])
                .map_err(stream_err)?;
            off += n;
        }
        self.output.flush().map_err(stream_err)?;
        // The flush is done once the stream accepts writes again.
        while self.output.check_write().map_err(stream_err)? == 0 {
            wait(&pollable, deadline, section)?;
        }
        Ok(())
    }

    /// Appends to `buf` until it holds at least `want` bytes.
    pub fn read_to_len(
        &mut self,
        buf: &mut Vec<u8>,
        want: usize,
        deadline: Deadline,
    ) -> Result<()> {
        let pollable = self.input.subscribe();
        while buf.len() < want {
            let ask = ((want - buf.len()) as u64).clamp(1, READ_CHUNK);
            let chunk = self.input.read(ask).map_err(stream_err)?;
            if chunk.is_empty() {
                wait(&pollable, deadline, "socket read")?;
            } else {
                buf.extend_from_slice(&chunk);
            }
        }
        Ok(())
    }
}

impl TcpStream {
    /// Appends what has arrived (at least one byte) to `buf`, waiting as
    /// `section` until `deadline`.
    pub fn read_some(
        &mut self,
        buf: &mut Vec<u8>,
        deadline: Deadline,
        section: &str,
    ) -> Result<()> {
        let pollable = self.input.subscribe();
        loop {
            let chunk = self.input.read(READ_CHUNK).map_err(stream_err)?;
            if !chunk.is_empty() {
                buf.extend_from_slice(&chunk);
                return Ok(());
            }
            wait(&pollable, deadline, section)?;
        }
    }
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(ShutdownType::Both);
    }
}

fn stream_err(e: StreamError) -> Error {
    match e {
        StreamError::Closed => Error::network("connection closed by the server"),
        StreamError::LastOperationFailed(err) => {
            Error::network("socket error").with_cause(err.to_debug_string())
        }
    }
}

fn to_wasi_addr(ip: IpAddr, port: u16) -> (IpAddressFamily, IpSocketAddress) {
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
