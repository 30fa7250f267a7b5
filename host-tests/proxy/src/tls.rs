//! TLS termination on the client side of the proxy (rustls, ring), and the
//! client certificate's subject as an RFC 2253 string (what mongod shows
//! MONGODB-X509). The backend connection stays plain TCP.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ServerConfig, ServerConnection, StreamOwned};

use crate::frame::Socket;

/// A client connection: plain, or TLS over TCP.
pub(crate) enum ClientStream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl ClientStream {
    /// Completes the server side of the TLS handshake within `limit`, and
    /// answers the stream with the client certificate's subject, if one was sent.
    pub fn accept(
        mut tcp: TcpStream,
        config: Arc<ServerConfig>,
        limit: Duration,
    ) -> io::Result<(ClientStream, Option<String>)> {
        let mut conn = ServerConnection::new(config).map_err(io::Error::other)?;
        tcp.set_read_timeout(Some(limit))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        tcp.set_read_timeout(None)?;
        let subject = conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|cert| subject_rfc2253(cert));
        let stream = StreamOwned::new(conn, tcp);
        Ok((ClientStream::Tls(Box::new(stream)), subject))
    }

    pub fn socket(&self) -> &TcpStream {
        match self {
            ClientStream::Plain(s) => s,
            ClientStream::Tls(s) => s.get_ref(),
        }
    }
}

impl Read for ClientStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(s) => s.read(buf),
            ClientStream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for ClientStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ClientStream::Plain(s) => s.write(buf),
            ClientStream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.flush(),
            ClientStream::Tls(s) => s.flush(),
        }
    }
}

impl Socket for ClientStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(t)
    }
}

/// The subject of a DER certificate in RFC 2253 form (last RDN first, `,`
/// between RDNs, `+` inside one), as mongod derives an X.509 user name.
pub fn subject_rfc2253(der: &[u8]) -> Option<String> {
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    let (tag, _, after) = tlv(rest)?;
    if tag == 0xa0 {
        rest = after; // [0] version
    }
    // serialNumber, signature, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = tlv(rest)?.2;
    }
    let (_, mut name, _) = tlv(rest)?;
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (_, mut set, next) = tlv(name)?;
        name = next;
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (_, atv, next) = tlv(set)?;
            set = next;
            let (_, oid, value) = tlv(atv)?;
            parts.push(format!(
                "{}={}",
                attribute_name(oid),
                attribute_value(value)?
            ));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// One DER element: (tag, contents, what follows).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *b.first()?;
    let first = *b.get(1)? as usize;
    let (len, header) = match first {
        n if n < 0x80 => (n, 2),
        0x81..=0x84 => {
            let n = first - 0x80;
            let bytes = b.get(2..2 + n)?;
            (
                bytes.iter().fold(0usize, |acc, &x| acc << 8 | x as usize),
                2 + n,
            )
        }
        _ => return None,
    };
    let end = header.checked_add(len)?;
    Some((tag, b.get(header..end)?, b.get(end..)?))
}

/// The short names RFC 2253 (and OpenSSL) use; other types as dotted OIDs.
fn attribute_name(oid: &[u8]) -> String {
    const NAMES: [(&[u8], &str); 11] = [
        (&[0x55, 0x04, 0x03], "CN"),
        (&[0x55, 0x04, 0x06], "C"),
        (&[0x55, 0x04, 0x07], "L"),
        (&[0x55, 0x04, 0x08], "ST"),
        (&[0x55, 0x04, 0x09], "STREET"),
        (&[0x55, 0x04, 0x0a], "O"),
        (&[0x55, 0x04, 0x0b], "OU"),
        (&[0x55, 0x04, 0x05], "serialNumber"),
        (
            &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
            "DC",
        ),
        (
            &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
            "UID",
        ),
        (
            &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01],
            "emailAddress",
        ),
    ];
    if let Some((_, name)) = NAMES.iter().find(|(bytes, _)| *bytes == oid) {
        return name.to_string();
    }
    dotted(oid)
}

fn dotted(oid: &[u8]) -> String {
    let mut arcs = Vec::new();
    let mut acc = 0u64;
    for &b in oid {
        acc = acc << 7 | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            arcs.push(acc);
            acc = 0;
        }
    }
    let mut out = Vec::new();
    if let Some(&first) = arcs.first() {
        let (a, b) = match first {
            0..=39 => (0, first),
            40..=79 => (1, first - 40),
            _ => (2, first - 80),
        };
        out.push(a.to_string());
        out.push(b.to_string());
    }
    out.extend(arcs.iter().skip(1).map(u64::to_string));
    out.join(".")
}

/// A string value, escaped; anything else as `#` and its DER in hex.
fn attribute_value(der: &[u8]) -> Option<String> {
    let (tag, content, _) = tlv(der)?;
    let text = match tag {
        // UTF8String, PrintableString, T61String, IA5String
        0x0c | 0x13 | 0x14 | 0x16 => String::from_utf8_lossy(content).into_owned(),
        // BMPString: UTF-16BE
        0x1e => {
            let units: Vec<u16> = content
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect();
            String::from_utf16_lossy(&units)
        }
        _ => {
            let len = der.len() - tlv(der)?.2.len();
            let hex: String = der[..len].iter().map(|b| format!("{b:02x}")).collect();
            return Some(format!("#{hex}"));
        }
    };
    Some(escape(&text))
}

fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
