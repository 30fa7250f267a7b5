//! TLS over the deadline-aware TCP stream: rustls' `ClientConnection` driven
//! over buffers (`read_tls`, `process_new_packets`, `write_tls`). Every wait
//! is the TCP stream's (0.2's `wait`, 0.3's `within`) with the caller's
//! deadline, and each pass checks the deadline even while bytes keep arriving.

use super::check;
use super::TcpStream;
use crate::deadline::Deadline;
use crate::error::{Error, ErrorKind, Result};
use rustls::{ClientConfig, ClientConnection};
use std::io::{ErrorKind as IoErrorKind, Read, Write};
use std::sync::Arc;

/// Plaintext asked of rustls per call, so a large reply grows `buf` as it arrives.
const PLAINTEXT_CHUNK: usize = 64 * 1024;

pub struct TlsStream {
    conn: ClientConnection,
    tcp: TcpStream,
    /// TLS bytes read from the socket; rustls has taken those before `raw_at`.
    raw: Vec<u8>,
    raw_at: usize,
    /// The TLS records of one message, sent in one write.
    out: Vec<u8>,
    address: String,
}

impl TlsStream {
    /// Runs the TLS handshake over `tcp` (a blocking section named "TLS
    /// handshake"), verifying the server as `config` says for `host`.
    pub async fn handshake(
        tcp: TcpStream,
        config: Arc<ClientConfig>,
        host: &str,
        address: &str,
        deadline: Deadline,
    ) -> Result<TlsStream> {
        let conn = ClientConnection::new(config, crate::tls::server_name(host)?)
            .map_err(|e| Error::network(format!("TLS setup for {address} failed: {e}")))?;
        let mut s = TlsStream {
            conn,
            tcp,
            raw: Vec::with_capacity(16 * 1024),
            raw_at: 0,
            out: Vec::new(),
            address: address.to_string(),
        };
        let section = format!("TLS handshake with {address}");
        while s.conn.is_handshaking() {
            check(deadline, &section)?;
            s.send_pending(deadline, &section).await?;
            if s.conn.is_handshaking() {
                s.receive(deadline, &section).await?;
            }
        }
        // TLS 1.3: the client's last flight (its Finished) is still queued; it
        // goes out in the first message's write, so the guest's TCP (no
        // TCP_NODELAY in WASI 0.2) never holds a small second write for an ACK.
        Ok(s)
    }

    /// Encrypts `bytes` and sends the records (after any queued handshake
    /// records) in one write.
    pub async fn write_all(&mut self, bytes: &[u8], deadline: Deadline) -> Result<()> {
        self.out.clear();
        self.drain_records()?;
        let mut off = 0;
        while off < bytes.len() {
            let n = self
                .conn
                .writer()
                .write(&bytes[off..])
                .map_err(|e| self.failed(e))?;
            off += n;
            let before = self.out.len();
            self.drain_records()?;
            if n == 0 && self.out.len() == before {
                return Err(Error::network(format!(
                    "TLS connection to {} accepts no more data",
                    self.address
                )));
            }
        }
        self.tcp.write_all(&self.out, deadline).await
    }

    /// Appends decrypted bytes to `buf` until it holds at least `want` bytes
    /// (never more: what follows stays in rustls for the next reply).
    pub async fn read_to_len(
        &mut self,
        buf: &mut Vec<u8>,
        want: usize,
        deadline: Deadline,
    ) -> Result<()> {
        loop {
            self.take_plaintext(buf, want)?;
            if buf.len() >= want {
                return Ok(());
            }
            check(deadline, "socket read")?;
            if self.conn.wants_write() {
                // The handshake's last flight, a key update's answer, an alert.
                self.send_pending(deadline, "socket write").await?;
            }
            self.receive(deadline, "socket read").await?;
        }
    }

    /// Moves decrypted bytes from rustls into `buf`, up to `want`.
    fn take_plaintext(&mut self, buf: &mut Vec<u8>, want: usize) -> Result<()> {
        let mut filled = buf.len();
        let result = loop {
            if filled >= want {
                break Ok(());
            }
            let end = want.min(filled + PLAINTEXT_CHUNK);
            buf.resize(end, 0);
            match self.conn.reader().read(&mut buf[filled..end]) {
                Ok(0) => {
                    break Err(Error::network(
                        "connection closed by the server (TLS close_notify)",
                    ))
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == IoErrorKind::WouldBlock => break Ok(()),
                Err(e) => break Err(self.failed(e)),
            }
        };
        buf.truncate(filled);
        result
    }

    /// Hands rustls the next TLS bytes (ones already read, else the socket's)
    /// and processes them.
    async fn receive(&mut self, deadline: Deadline, section: &str) -> Result<()> {
        if self.raw_at == self.raw.len() {
            self.raw.clear();
            self.raw_at = 0;
            self.tcp.read_some(&mut self.raw, deadline, section).await?;
        }
        let mut pending = &self.raw[self.raw_at..];
        let n = self
            .conn
            .read_tls(&mut pending)
            .map_err(|e| self.failed(e))?;
        self.raw_at += n;
        if let Err(e) = self.conn.process_new_packets() {
            // Tell the server why (rustls queued an alert); best effort.
            let _ = self.send_pending(deadline, section).await;
            return Err(self.refused(e));
        }
        Ok(())
    }

    /// Sends what rustls has queued (handshake messages, alerts).
    async fn send_pending(&mut self, deadline: Deadline, section: &str) -> Result<()> {
        self.out.clear();
        self.drain_records()?;
        if self.out.is_empty() {
            return Ok(());
        }
        self.tcp.write_all_as(&self.out, deadline, section).await
    }

    fn drain_records(&mut self) -> Result<()> {
        while self.conn.wants_write() {
            self.conn
                .write_tls(&mut self.out)
                .map_err(|e| Error::network("TLS write failed").with_cause(e))?;
        }
        Ok(())
    }

    /// What rustls decided from the peer's bytes. During the handshake
    /// (they are not TLS, a fatal alert, a certificate it rejects) that is a
    /// protocol error, which no retry mends (`Error::is_permanent`); on an
    /// established connection, a network error as any broken connection.
    fn refused(&self, e: rustls::Error) -> Error {
        let handshaking = self.conn.is_handshaking();
        let mut err = self.failed(e);
        if handshaking {
            err.kind = ErrorKind::Protocol;
        }
        err
    }

    /// A TLS failure as a network error naming the peer and the stage.
    fn failed(&self, e: impl std::fmt::Display) -> Error {
        let stage = if self.conn.is_handshaking() {
            "TLS handshake with"
        } else {
            "TLS connection to"
        };
        Error::network(format!("{stage} {} failed: {e}", self.address))
    }
}

impl Drop for TlsStream {
    /// A close_notify if the socket takes it at once; never waits.
    fn drop(&mut self) {
        if self.conn.is_handshaking() {
            return;
        }
        self.conn.send_close_notify();
        self.out.clear();
        if self.drain_records().is_ok() {
            let _ = self.tcp.send_now(&self.out);
        }
    }
}
