//! A connection's byte stream: plain TCP, or TLS over it; and what both
//! faces' `TcpStream`s share.

use super::tls::TlsStream;
use super::TcpStream;
use crate::deadline::Deadline;
use crate::error::Result;
use std::sync::Arc;

pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl Stream {
    /// Connects to `host:port` and, given a TLS configuration, completes the
    /// TLS handshake; all within `deadline`.
    pub async fn connect(
        address: &str,
        host: &str,
        port: u16,
        name_servers: &[std::net::SocketAddr],
        tls: Option<&Arc<rustls::ClientConfig>>,
        deadline: Deadline,
    ) -> Result<Stream> {
        let tcp = TcpStream::connect_via(host, port, name_servers, deadline).await?;
        Ok(match tls {
            None => Stream::Plain(tcp),
            Some(config) => Stream::Tls(Box::new(
                TlsStream::handshake(tcp, config.clone(), host, address, deadline).await?,
            )),
        })
    }

    /// Writes one whole message, in one write on the socket.
    pub async fn write_all(&mut self, bytes: &[u8], deadline: Deadline) -> Result<()> {
        match self {
            Stream::Plain(s) => s.write_all(bytes, deadline).await,
            Stream::Tls(s) => s.write_all(bytes, deadline).await,
        }
    }

    /// Appends to `buf` until it holds at least `want` bytes, taking what
    /// has arrived up to `max` (at least `want`) in all: a reply's length
    /// and body usually come in one read.
    pub async fn read_up_to(
        &mut self,
        buf: &mut Vec<u8>,
        want: usize,
        max: usize,
        deadline: Deadline,
    ) -> Result<()> {
        match self {
            Stream::Plain(s) => s.read_up_to(buf, want, max, deadline).await,
            // rustls holds what follows: no socket call is saved by taking more.
            Stream::Tls(s) => s.read_to_len(buf, want, deadline).await,
        }
    }
}

impl TcpStream {
    /// Writes all of `bytes` (`write_all_as`, its waits named "socket write").
    pub async fn write_all(&mut self, bytes: &[u8], deadline: Deadline) -> Result<()> {
        self.write_all_as(bytes, deadline, "socket write").await
    }

    /// Appends to `buf` until it holds at least `want` bytes, never reading
    /// past `want` nor growing `buf` beyond it (`read_up_to` with `max` =
    /// `want`). Every pass checks the deadline, so a reply trickled or
    /// flooded past it fails in time.
    pub async fn read_to_len(
        &mut self,
        buf: &mut Vec<u8>,
        want: usize,
        deadline: Deadline,
    ) -> Result<()> {
        self.read_up_to(buf, want, want, deadline).await
    }
}

/// Room for `more` bytes, growing geometrically but never past `limit` (the
/// frame length), so a reply claiming a large frame costs only what arrived.
/// Both faces' `TcpStream` reads grow their caller's buffer through it.
pub(super) fn reserve_within(buf: &mut Vec<u8>, more: usize, limit: usize) {
    let need = buf.len() + more;
    if need > buf.capacity() {
        let target = buf
            .capacity()
            .saturating_mul(2)
            .clamp(need, limit.max(need));
        buf.reserve_exact(target - buf.len());
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
