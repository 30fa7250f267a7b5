//! The MongoDB wire protocol, sans I/O: bytes in, messages out (and back).
//! The transport reads a 4-byte length with [`frame_length`], then the rest,
//! and hands the whole frame to [`check_reply`] (or [`decode`]). Decoded
//! messages borrow the frame: nothing is copied until a caller asks.

pub mod compression;
mod crc32c;
mod documents;
mod legacy;
mod op_msg;
pub mod raw;
mod reply;

pub use compression::{Compression, Compressor};
pub use documents::{Documents, Slice};
pub use legacy::{encode_op_query, OpReply};
pub use op_msg::{encode_op_msg, DocumentSequence, OpMsg, EXHAUST_ALLOWED, MORE_TO_COME};
pub use reply::{check_reply, check_streamed_reply, take_document, validate_document, MAX_DEPTH};

use crate::error::{Error, Result};

pub const HEADER_LEN: usize = 16;
pub const OP_REPLY: i32 = 1;
pub const OP_QUERY: i32 = 2004;
pub const OP_COMPRESSED: i32 = 2012;
pub const OP_MSG: i32 = 2013;

/// The largest message the driver reads or writes, whatever a `hello` says:
/// every mongod and mongos announces 48,000,000 bytes and builds no larger
/// reply. A larger announced size is clamped to it (handshake.rs), and
/// [`frame_length`] never accepts more, so one reply can never ask the 32-bit
/// wasm heap (4 GiB at most, doubled growth) for more than this.
pub const MAX_MESSAGE_SIZE: usize = 48_000_000;

/// maxMessageSizeBytes until a handshake says otherwise.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = MAX_MESSAGE_SIZE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub length: i32,
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
}

impl Header {
    pub fn write(&self, out: &mut Vec<u8>) {
        for v in [self.length, self.request_id, self.response_to, self.op_code] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    pub fn parse(bytes: &[u8]) -> Result<Header> {
        if bytes.len() < HEADER_LEN {
            return Err(Error::protocol("message shorter than its header"));
        }
        Ok(Header {
            length: read_i32(bytes, 0)?,
            request_id: read_i32(bytes, 4)?,
            response_to: read_i32(bytes, 8)?,
            op_code: read_i32(bytes, 12)?,
        })
    }
}

/// A decoded server message, borrowing its frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Message<'a> {
    Msg(OpMsg<'a>),
    Reply(OpReply<'a>),
}

/// The whole frame length announced by the first four bytes, validated
/// against the header size and the negotiated maximum (itself never above
/// [`MAX_MESSAGE_SIZE`]).
pub fn frame_length(prefix: [u8; 4], max_message_size: usize) -> Result<usize> {
    let max_message_size = max_message_size.min(MAX_MESSAGE_SIZE);
    let len = i32::from_le_bytes(prefix);
    let len = usize::try_from(len)
        .map_err(|_| Error::protocol(format!("negative message length {len}")))?;
    if len < HEADER_LEN {
        return Err(Error::protocol(format!(
            "message length {len} is below the header size"
        )));
    }
    if len > max_message_size {
        return Err(Error::protocol(format!(
            "message length {len} exceeds maxMessageSizeBytes {max_message_size}"
        )));
    }
    Ok(len)
}

/// Decodes one whole frame (header included): its framing is checked, the
/// documents it holds are not (see [`check_reply`]).
pub fn decode(frame: &[u8]) -> Result<(Header, Message<'_>)> {
    let header = Header::parse(frame)?;
    if usize::try_from(header.length).ok() != Some(frame.len()) {
        return Err(Error::protocol("message length does not match its frame"));
    }
    let body = &frame[HEADER_LEN..];
    let message = match header.op_code {
        OP_MSG => Message::Msg(OpMsg::decode(frame, body)?),
        OP_REPLY => Message::Reply(OpReply::decode(frame)?),
        OP_COMPRESSED => {
            return Err(Error::protocol(
                "compressed reply, but no compressor was offered",
            ))
        }
        other => {
            return Err(Error::protocol(format!(
                "unexpected opCode {other} in reply"
            )))
        }
    };
    Ok((header, message))
}

pub(crate) fn read_i32(bytes: &[u8], at: usize) -> Result<i32> {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_le_bytes)
        .ok_or_else(|| Error::protocol("message truncated"))
}

pub(crate) fn read_u32(bytes: &[u8], at: usize) -> Result<u32> {
    read_i32(bytes, at).map(|v| v as u32)
}

/// Length-prefixed BSON document at `at`; returns it and its length.
pub(crate) fn read_document(bytes: &[u8], at: usize) -> Result<(&bson::RawDocument, usize)> {
    let len = read_i32(bytes, at)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l >= 5 && at + l <= bytes.len())
        .ok_or_else(|| Error::protocol("document length runs past the message"))?;
    let doc = bson::RawDocument::from_bytes(&bytes[at..at + len])?;
    Ok((doc, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_length_rejects_nonsense() {
        assert!(frame_length((-1i32).to_le_bytes(), 1000).is_err());
        assert!(frame_length(15i32.to_le_bytes(), 1000).is_err());
        assert!(frame_length(1001i32.to_le_bytes(), 1000).is_err());
        assert_eq!(frame_length(16i32.to_le_bytes(), 1000).unwrap(), 16);
    }

    #[test]
    fn frame_length_never_exceeds_the_protocol_maximum() {
        // A server that announced 2^31-1 in hello still gets no 2 GB frame.
        let huge = i32::MAX as usize;
        let err = frame_length(2_100_000_000i32.to_le_bytes(), huge).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::Protocol);
        assert!(frame_length(48_000_001i32.to_le_bytes(), huge).is_err());
        assert_eq!(
            frame_length(48_000_000i32.to_le_bytes(), huge).unwrap(),
            MAX_MESSAGE_SIZE
        );
    }

    #[test]
    fn decode_rejects_short_mismatched_and_unknown() {
        assert!(decode(&[0u8; 3]).is_err());
        let mut frame = Vec::new();
        Header {
            length: 99,
            request_id: 1,
            response_to: 0,
            op_code: OP_MSG,
        }
        .write(&mut frame);
        assert!(decode(&frame).is_err(), "length mismatch");
        let mut frame = Vec::new();
        Header {
            length: 16,
            request_id: 1,
            response_to: 0,
            op_code: 9999,
        }
        .write(&mut frame);
        assert!(decode(&frame).is_err(), "unknown opcode");
    }
}
