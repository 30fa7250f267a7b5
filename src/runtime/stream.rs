//! A connection's byte stream: plain TCP, or TLS over it.

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
