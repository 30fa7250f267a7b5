//! Minimal wire framing (OP_MSG, OP_QUERY, OP_REPLY), written independently from the
//! driver's codec so that a codec bug in the driver cannot hide itself behind the same bug here.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bson::{Document, RawDocument};

pub const OP_REPLY: i32 = 1;
pub const OP_QUERY: i32 = 2004;
pub const OP_MSG: i32 = 2013;
pub const HEADER_LEN: usize = 16;
/// mongod's `maxMessageSizeBytes`; anything larger is a protocol error.
pub const MAX_MESSAGE_LEN: usize = 48_000_000;

pub const FLAG_CHECKSUM: u32 = 1;
pub const FLAG_MORE_TO_COME: u32 = 1 << 1;

#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the connection between messages.
    Closed,
    Io(io::Error),
    Invalid(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Closed => write!(f, "connection closed"),
            FrameError::Io(e) => write!(f, "i/o: {e}"),
            FrameError::Invalid(m) => write!(f, "invalid message: {m}"),
        }
    }
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, FrameError> {
    Err(FrameError::Invalid(msg.into()))
}

/// One whole message: the header fields plus all its bytes (header included).
pub struct Message {
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
    pub bytes: Vec<u8>,
}

/// A byte stream messages are read from: TCP, or TLS over it.
pub trait Socket: Read + Write {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, t)
    }
}

/// Reads one message. Waiting for the first byte has no time limit (pooled connections idle);
/// once a message has started, the rest must arrive within `body_timeout`.
pub fn read_message<S: Socket>(
    stream: &mut S,
    body_timeout: Duration,
) -> Result<Message, FrameError> {
    let mut len_buf = [0u8; 4];
    let first = loop {
        match stream.read(&mut len_buf) {
            Ok(0) => return Err(FrameError::Closed),
            // A TLS peer that leaves without close_notify, between messages.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FrameError::Io(e)),
        }
    };
    stream
        .set_read_timeout(Some(body_timeout))
        .map_err(FrameError::Io)?;
    let result = read_rest(stream, len_buf, first);
    // Best effort: a failure here shows up on the next read anyway.
    let _ = stream.set_read_timeout(None);
    result
}

fn read_rest<S: Socket>(
    stream: &mut S,
    mut len_buf: [u8; 4],
    have: usize,
) -> Result<Message, FrameError> {
    stream
        .read_exact(&mut len_buf[have..])
        .map_err(FrameError::Io)?;
    let len = i32::from_le_bytes(len_buf);
    if len < HEADER_LEN as i32 || len as usize > MAX_MESSAGE_LEN {
        return invalid(format!("message length {len}"));
    }
    let mut bytes = vec![0u8; len as usize];
    bytes[..4].copy_from_slice(&len_buf);
    stream.read_exact(&mut bytes[4..]).map_err(FrameError::Io)?;
    Ok(Message {
        request_id: le_i32(&bytes, 4),
        response_to: le_i32(&bytes, 8),
        op_code: le_i32(&bytes, 12),
        bytes,
    })
}

fn le_i32(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Strictly decodes one BSON document that must fill `bytes` exactly.
pub fn decode_doc(bytes: &[u8]) -> Result<Document, FrameError> {
    let raw =
        RawDocument::from_bytes(bytes).map_err(|e| FrameError::Invalid(format!("bson: {e}")))?;
    Document::try_from(raw).map_err(|e| FrameError::Invalid(format!("bson: {e}")))
}

/// Length prefix of the document starting at `at`, checked against what is left.
fn doc_len(b: &[u8], at: usize, end: usize) -> Result<usize, FrameError> {
    if at + 4 > end {
        return invalid("truncated document");
    }
    let len = le_i32(b, at);
    if len < 5 || at + len as usize > end {
        return invalid(format!("document length {len}"));
    }
    Ok(len as usize)
}

pub struct OpMsg {
    pub flags: u32,
    pub body: Document,
    /// The kind-1 sections: identifier and documents (`documents`, `updates`, `deletes`...).
    pub sequences: Vec<(String, Vec<Document>)>,
}

/// Parses and validates an OP_MSG (every document is fully decoded).
pub fn parse_op_msg(msg: &Message) -> Result<OpMsg, FrameError> {
    let b = &msg.bytes;
    if b.len() < HEADER_LEN + 5 {
        return invalid("OP_MSG too short");
    }
    let flags = le_i32(b, HEADER_LEN) as u32;
    // Bits 0-15 are "required": an unknown one must be rejected (mongod: IllegalOpMsgFlag).
    if flags & 0xffff & !(FLAG_CHECKSUM | FLAG_MORE_TO_COME) != 0 {
        return invalid(format!("unknown required flag bits {flags:#x}"));
    }
    let mut end = b.len();
    if flags & FLAG_CHECKSUM != 0 {
        end -= 4;
        let want = u32::from_le_bytes([b[end], b[end + 1], b[end + 2], b[end + 3]]);
        if crc32c(&b[..end]) != want {
            return invalid("checksum mismatch");
        }
    }
    let mut at = HEADER_LEN + 4;
    let mut body = None;
    let mut sequences = Vec::new();
    while at < end {
        let kind = b[at];
        at += 1;
        match kind {
            0 => {
                let len = doc_len(b, at, end)?;
                if body.is_some() {
                    return invalid("two body sections");
                }
                body = Some(decode_doc(&b[at..at + len])?);
                at += len;
            }
            1 => {
                let size = doc_len(b, at, end)?; // same shape: i32 size covering itself
                let section_end = at + size;
                let mut p = at + 4;
                let nul = b[p..section_end]
                    .iter()
                    .position(|&c| c == 0)
                    .ok_or_else(|| {
                        FrameError::Invalid("unterminated sequence identifier".into())
                    })?;
                let identifier = std::str::from_utf8(&b[p..p + nul])
                    .map_err(|_| FrameError::Invalid("sequence identifier not UTF-8".into()))?;
                p += nul + 1;
                // Kept for the checks; the proxy forwards the original bytes.
                let mut docs = Vec::new();
                while p < section_end {
                    let len = doc_len(b, p, section_end)?;
                    docs.push(decode_doc(&b[p..p + len])?);
                    p += len;
                }
                sequences.push((identifier.to_string(), docs));
                at = section_end;
            }
            k => return invalid(format!("unknown section kind {k}")),
        }
    }
    match body {
        Some(body) => Ok(OpMsg {
            flags,
            body,
            sequences,
        }),
        None => invalid("no body section"),
    }
}

pub struct OpQuery {
    pub collection: String,
    pub query: Document,
}

pub fn parse_op_query(msg: &Message) -> Result<OpQuery, FrameError> {
    let b = &msg.bytes;
    let mut at = HEADER_LEN + 4; // skip flags
    if at >= b.len() {
        return invalid("OP_QUERY too short");
    }
    let nul = b[at..]
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| FrameError::Invalid("unterminated collection name".into()))?;
    let collection = String::from_utf8_lossy(&b[at..at + nul]).into_owned();
    at += nul + 1 + 8; // numberToSkip, numberToReturn
    let len = doc_len(b, at, b.len())?;
    let query = decode_doc(&b[at..at + len])?;
    at += len;
    if at < b.len() {
        let len = doc_len(b, at, b.len())?; // optional returnFieldsSelector
        decode_doc(&b[at..at + len])?;
        if at + len != b.len() {
            return invalid("trailing bytes after OP_QUERY");
        }
    }
    Ok(OpQuery { collection, query })
}

fn encode(doc: &Document) -> io::Result<Vec<u8>> {
    doc.to_vec()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

fn header(out: &mut Vec<u8>, request_id: i32, response_to: i32, op_code: i32) {
    out.extend_from_slice(&[0; 4]); // length, patched by `finish`
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(&response_to.to_le_bytes());
    out.extend_from_slice(&op_code.to_le_bytes());
}

fn finish(mut out: Vec<u8>) -> Vec<u8> {
    let len = out.len() as i32;
    out[..4].copy_from_slice(&len.to_le_bytes());
    out
}

/// An OP_MSG with one body section.
pub fn op_msg(
    request_id: i32,
    response_to: i32,
    flags: u32,
    doc: &Document,
) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    header(&mut out, request_id, response_to, OP_MSG);
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(0);
    out.extend_from_slice(&encode(doc)?);
    Ok(finish(out))
}

/// `msg` (a parsed OP_MSG) with its body section replaced by `body`, its document
/// sequences kept and its checksum dropped (the flag cleared with it).
pub fn replace_body(msg: &Message, body: &Document) -> io::Result<Vec<u8>> {
    let b = &msg.bytes;
    let flags = le_i32(b, HEADER_LEN) as u32;
    let end = match flags & FLAG_CHECKSUM {
        0 => b.len(),
        _ => b.len() - 4,
    };
    let mut out = Vec::with_capacity(b.len() + 64);
    out.extend_from_slice(&b[..HEADER_LEN]);
    out.extend_from_slice(&(flags & !FLAG_CHECKSUM).to_le_bytes());
    let mut at = HEADER_LEN + 4;
    while at < end {
        let len = 1 + le_i32(b, at + 1) as usize;
        match b[at] {
            0 => {
                out.push(0);
                out.extend_from_slice(&encode(body)?);
            }
            _ => out.extend_from_slice(&b[at..at + len]),
        }
        at += len;
    }
    Ok(finish(out))
}

/// `msg` (a parsed OP_MSG) rebuilt from `body` and `sequences`: its header and flags kept,
/// its checksum dropped (the flag cleared with it).
pub fn rebuild(
    msg: &Message,
    body: &Document,
    sequences: &[(String, Vec<Document>)],
) -> io::Result<Vec<u8>> {
    let b = &msg.bytes;
    let flags = le_i32(b, HEADER_LEN) as u32;
    let mut out = Vec::with_capacity(b.len() + 64);
    out.extend_from_slice(&b[..HEADER_LEN]);
    out.extend_from_slice(&(flags & !FLAG_CHECKSUM).to_le_bytes());
    out.push(0);
    out.extend_from_slice(&encode(body)?);
    for (identifier, docs) in sequences {
        let mut section = Vec::new();
        section.extend_from_slice(identifier.as_bytes());
        section.push(0);
        for doc in docs {
            section.extend_from_slice(&encode(doc)?);
        }
        out.push(1);
        out.extend_from_slice(&((section.len() + 4) as i32).to_le_bytes());
        out.extend_from_slice(&section);
    }
    Ok(finish(out))
}

/// An OP_REPLY carrying one document (mongod sets AwaitCapable, bit 3).
pub fn op_reply(request_id: i32, response_to: i32, doc: &Document) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    header(&mut out, request_id, response_to, OP_REPLY);
    out.extend_from_slice(&8i32.to_le_bytes());
    out.extend_from_slice(&0i64.to_le_bytes()); // cursorID
    out.extend_from_slice(&0i32.to_le_bytes()); // startingFrom
    out.extend_from_slice(&1i32.to_le_bytes()); // numberReturned
    out.extend_from_slice(&encode(doc)?);
    Ok(finish(out))
}

pub fn write_all<S: Write>(stream: &mut S, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes)?;
    stream.flush()
}

/// CRC-32C (Castagnoli), as OP_MSG checksums use.
pub fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0x82f6_3b78 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut crc = !0u32;
    for &byte in data {
        crc = TABLE[((crc ^ byte as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_vector() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn rebuild_round_trips_body_and_sequences() {
        let body = bson::doc! { "update": "c", "$db": "test" };
        let seqs = vec![(
            "updates".to_string(),
            vec![bson::doc! { "q": {}, "u": { "$set": { "a": 1 } } }],
        )];
        let first = op_msg(7, 0, FLAG_CHECKSUM, &body).unwrap();
        let msg = Message {
            request_id: 7,
            response_to: 0,
            op_code: OP_MSG,
            bytes: first,
        };
        let bytes = rebuild(&msg, &body, &seqs).unwrap();
        let again = Message { bytes, ..msg };
        let parsed = parse_op_msg(&again).unwrap();
        assert_eq!(parsed.flags & FLAG_CHECKSUM, 0);
        assert_eq!((parsed.body, parsed.sequences), (body, seqs));
    }
}
