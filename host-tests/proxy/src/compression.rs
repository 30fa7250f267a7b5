//! OP_COMPRESSED on the client side, as mongod speaks it (its default
//! `networkMessageCompressors` is snappy,zstd,zlib): a hello carrying
//! `compression` is answered with the ones the proxy shares, in the client's
//! order; a compressed request is unwrapped before anything reads it, and its
//! reply goes back compressed with the same compressor. The backend
//! (nx-27017) only ever sees plain messages.
//!
//! Stricter than mongod, to catch a client's mistakes: a message compressed
//! with a compressor the connection did not negotiate, or a command the
//! Wire Compression spec says never to compress (authentication, hello), is
//! a protocol error. Written apart from the driver's codec (same libraries).
//! Public so that another test server (a benchmark's) can speak it too:
//! [`negotiate`] a hello, [`unwrap`] a request, [`wrap`] its reply.

use std::io::Read;

use bson::{Bson, Document};

use crate::frame::{FrameError, Message, HEADER_LEN, MAX_MESSAGE_LEN};

pub const OP_COMPRESSED: i32 = 2012;

/// mongod's names and ids.
const SUPPORTED: [(&str, u8); 3] = [("snappy", 1), ("zstd", 3), ("zlib", 2)];

/// Never compressed (the spec's list), lowercased.
const NEVER: [&str; 11] = [
    "hello",
    "ismaster",
    "saslstart",
    "saslcontinue",
    "getnonce",
    "authenticate",
    "createuser",
    "updateuser",
    "copydbsaslstart",
    "copydbgetnonce",
    "copydb",
];

pub fn name_of(id: u8) -> &'static str {
    match id {
        0 => "noop",
        1 => "snappy",
        2 => "zlib",
        3 => "zstd",
        _ => "unknown",
    }
}

pub fn never_compressed(command: &str) -> bool {
    NEVER.iter().any(|n| n.eq_ignore_ascii_case(command))
}

/// The hello `body`'s `compression` list answered: the ids this connection
/// may now use, and the names for the reply. None when the hello has no list.
pub fn negotiate(body: &Document) -> Option<(Vec<u8>, Vec<Bson>)> {
    let offered = body.get_array("compression").ok()?;
    let mut ids = Vec::new();
    let mut names = Vec::new();
    for name in offered.iter().filter_map(Bson::as_str) {
        if let Some((n, id)) = SUPPORTED.iter().find(|(n, _)| *n == name) {
            if !ids.contains(id) {
                ids.push(*id);
                names.push(Bson::String(n.to_string()));
            }
        }
    }
    Some((ids, names))
}

fn le_i32(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn invalid<T>(why: String) -> Result<T, String> {
    Err(why)
}

/// The message an OP_COMPRESSED `msg` carries, and its compressor id.
pub(crate) fn unwrap_message(msg: &Message) -> Result<(Message, u8), FrameError> {
    let (bytes, id) = unwrap(&msg.bytes).map_err(FrameError::Invalid)?;
    Ok((
        Message {
            request_id: msg.request_id,
            response_to: msg.response_to,
            op_code: le_i32(&bytes, 12),
            bytes,
        },
        id,
    ))
}

/// The whole message (header rebuilt) an OP_COMPRESSED message `b` carries,
/// and its compressor id; why not, when it is not a valid one.
pub fn unwrap(b: &[u8]) -> Result<(Vec<u8>, u8), String> {
    if b.len() < HEADER_LEN + 9 || le_i32(b, 12) != OP_COMPRESSED {
        return invalid("not a whole OP_COMPRESSED message".into());
    }
    let op_code = le_i32(b, 16);
    let size = le_i32(b, 20);
    let id = b[24];
    let data = &b[25..];
    if op_code == OP_COMPRESSED {
        return invalid("OP_COMPRESSED inside OP_COMPRESSED".into());
    }
    let size = match usize::try_from(size) {
        Ok(s) if s + HEADER_LEN <= MAX_MESSAGE_LEN => s,
        _ => return invalid(format!("OP_COMPRESSED uncompressedSize {size}")),
    };
    let body = match id {
        0 => data.to_vec(),
        1 => {
            let len = snap::raw::decompress_len(data).map_err(|e| format!("snappy: {e}"))?;
            if len != size {
                return invalid(format!("snappy length {len}, uncompressedSize {size}"));
            }
            snap::raw::Decoder::new()
                .decompress_vec(data)
                .map_err(|e| format!("snappy: {e}"))?
        }
        2 => miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(data, size)
            .map_err(|e| format!("zlib: {e:?}"))?,
        3 => {
            let mut out = Vec::new();
            let decoder =
                ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| format!("zstd: {e}"))?;
            decoder
                .take(size as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("zstd: {e}"))?;
            out
        }
        other => return invalid(format!("unknown compressorId {other}")),
    };
    if body.len() != size {
        return invalid(format!(
            "{} data decompressed to {} bytes, uncompressedSize {size}",
            name_of(id),
            body.len()
        ));
    }
    let mut bytes = Vec::with_capacity(HEADER_LEN + size);
    bytes.extend_from_slice(&((HEADER_LEN + size) as i32).to_le_bytes());
    bytes.extend_from_slice(&b[4..12]);
    bytes.extend_from_slice(&op_code.to_le_bytes());
    bytes.extend_from_slice(&body);
    Ok((bytes, id))
}

/// `message` (a whole message, header included) wrapped with compressor `id`
/// (zlib at its default level, as mongod's).
pub fn wrap(message: &[u8], id: u8) -> Vec<u8> {
    let body = &message[HEADER_LEN..];
    let compressed = match id {
        1 => snap::raw::Encoder::new()
            .compress_vec(body)
            .expect("snappy compresses any input"),
        2 => miniz_oxide::deflate::compress_to_vec_zlib(body, 6),
        3 => ruzstd::encoding::compress_to_vec(body, ruzstd::encoding::CompressionLevel::Fastest),
        _ => body.to_vec(),
    };
    let mut out = Vec::with_capacity(HEADER_LEN + 9 + compressed.len());
    out.extend_from_slice(&((HEADER_LEN + 9 + compressed.len()) as i32).to_le_bytes());
    out.extend_from_slice(&message[4..12]);
    out.extend_from_slice(&OP_COMPRESSED.to_le_bytes());
    out.extend_from_slice(&message[12..16]);
    out.extend_from_slice(&(body.len() as i32).to_le_bytes());
    out.push(id);
    out.extend_from_slice(&compressed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Vec<u8> {
        let doc = bson::doc! { "find": "c", "filter": { "a": "x".repeat(500) }, "$db": "d" };
        crate::frame::op_msg(5, 0, 0, &doc).unwrap()
    }

    #[test]
    fn each_compressor_round_trips() {
        let m = message();
        for id in [0u8, 1, 2, 3] {
            let wrapped = wrap(&m, id);
            if id != 0 {
                assert!(wrapped.len() < m.len() / 2, "{id}");
            }
            let msg = Message {
                request_id: 5,
                response_to: 0,
                op_code: OP_COMPRESSED,
                bytes: wrapped,
            };
            let (plain, got) = unwrap_message(&msg).unwrap();
            assert_eq!((plain.bytes, got, plain.op_code), (m.clone(), id, 2013));
        }
    }

    #[test]
    fn lies_are_refused() {
        let m = message();
        for id in [0u8, 1, 2, 3] {
            let mut wrapped = wrap(&m, id);
            let size = le_i32(&wrapped, 20);
            wrapped[20..24].copy_from_slice(&(size - 1).to_le_bytes());
            let msg = Message {
                request_id: 5,
                response_to: 0,
                op_code: OP_COMPRESSED,
                bytes: wrapped,
            };
            assert!(unwrap_message(&msg).is_err(), "{id}");
        }
    }

    #[test]
    fn negotiation_keeps_the_clients_order() {
        let body = bson::doc! { "hello": 1, "compression": ["zlib", "lz4", "snappy", "zlib"] };
        let (ids, names) = negotiate(&body).unwrap();
        assert_eq!(ids, [2, 1]);
        assert_eq!(names, [Bson::from("zlib"), Bson::from("snappy")]);
        assert!(negotiate(&bson::doc! { "hello": 1 }).is_none());
        assert!(never_compressed("isMaster") && never_compressed("saslStart"));
        assert!(!never_compressed("find"));
    }
}
