//! OP_MSG (opCode 2013): flag bits, a body section and document sequences.

use super::{crc32c, read_document, read_i32, read_u32, Header, HEADER_LEN, OP_MSG};
use crate::error::{Error, Result};
use bson::{RawDocument, RawDocumentBuf};

pub const CHECKSUM_PRESENT: u32 = 1 << 0;
pub const MORE_TO_COME: u32 = 1 << 1;
/// Bits 0-15 are "required": an unknown one set must be an error.
const KNOWN_REQUIRED: u32 = CHECKSUM_PRESENT | MORE_TO_COME;

/// A kind-1 section: many documents under one identifier (e.g. `documents`).
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentSequence {
    pub identifier: String,
    pub documents: Vec<RawDocumentBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OpMsg {
    pub flags: u32,
    pub body: RawDocumentBuf,
    pub sequences: Vec<DocumentSequence>,
}

impl OpMsg {
    pub fn more_to_come(&self) -> bool {
        self.flags & MORE_TO_COME != 0
    }

    /// `frame` is the whole message (for the checksum); `body` follows the header.
    pub(super) fn decode(frame: &[u8], body: &[u8]) -> Result<OpMsg> {
        let flags = read_u32(body, 0)?;
        let unknown = flags & 0xffff & !KNOWN_REQUIRED;
        if unknown != 0 {
            return Err(Error::protocol(format!(
                "unknown required OP_MSG flag bits {unknown:#x}"
            )));
        }
        let mut end = body.len();
        if flags & CHECKSUM_PRESENT != 0 {
            if end < 8 {
                return Err(Error::protocol("OP_MSG too short for its checksum"));
            }
            end -= 4;
            let expected = read_u32(body, end)?;
            if crc32c::checksum(&frame[..HEADER_LEN + end]) != expected {
                return Err(Error::protocol("OP_MSG checksum mismatch"));
            }
        }
        let sections = &body[..end];
        let mut at = 4;
        let mut doc_body = None;
        let mut sequences = Vec::new();
        while at < sections.len() {
            let kind = sections[at];
            at += 1;
            match kind {
                0 => {
                    let (doc, len) = read_document(sections, at)?;
                    if doc_body.replace(doc.to_owned()).is_some() {
                        return Err(Error::protocol("OP_MSG has two body sections"));
                    }
                    at += len;
                }
                1 => {
                    let (seq, len) = decode_sequence(sections, at)?;
                    sequences.push(seq);
                    at += len;
                }
                k => return Err(Error::protocol(format!("unknown OP_MSG section kind {k}"))),
            }
        }
        let body = doc_body.ok_or_else(|| Error::protocol("OP_MSG without a body section"))?;
        Ok(OpMsg {
            flags,
            body,
            sequences,
        })
    }
}

fn decode_sequence(bytes: &[u8], at: usize) -> Result<(DocumentSequence, usize)> {
    let size = read_i32(bytes, at)?;
    let size = usize::try_from(size)
        .ok()
        .filter(|s| *s >= 5 && at + s <= bytes.len())
        .ok_or_else(|| Error::protocol("document sequence size runs past the message"))?;
    let section = &bytes[at..at + size];
    let nul = section[4..]
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| Error::protocol("document sequence identifier is not terminated"))?;
    let identifier = std::str::from_utf8(&section[4..4 + nul])
        .map_err(|_| Error::protocol("document sequence identifier is not UTF-8"))?
        .to_string();
    let mut pos = 4 + nul + 1;
    let mut documents = Vec::new();
    while pos < section.len() {
        let (doc, len) = read_document(section, pos)?;
        documents.push(doc.to_owned());
        pos += len;
    }
    Ok((
        DocumentSequence {
            identifier,
            documents,
        },
        size,
    ))
}

/// Appends one OP_MSG to `out` (the connection's reused buffer), so the
/// whole message can go out in one write. Returns its length.
pub fn encode_op_msg(
    out: &mut Vec<u8>,
    request_id: i32,
    flags: u32,
    body: &RawDocument,
    sequences: &[(&str, &[RawDocumentBuf])],
    max_message_size: usize,
) -> Result<usize> {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    out.extend_from_slice(&(flags & !CHECKSUM_PRESENT).to_le_bytes());
    out.push(0);
    out.extend_from_slice(body.as_bytes());
    for (identifier, docs) in sequences {
        out.push(1);
        let size_at = out.len();
        out.extend_from_slice(&[0u8; 4]);
        out.extend_from_slice(identifier.as_bytes());
        out.push(0);
        for doc in docs.iter() {
            out.extend_from_slice(doc.as_bytes());
        }
        let size = i32::try_from(out.len() - size_at)
            .map_err(|_| Error::invalid_argument("document sequence too large"))?;
        out[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
    }
    let len = out.len() - start;
    if len > max_message_size {
        out.truncate(start);
        return Err(Error::invalid_argument(format!(
            "message of {len} bytes exceeds maxMessageSizeBytes {max_message_size}"
        )));
    }
    let header = Header {
        length: len as i32,
        request_id,
        response_to: 0,
        op_code: OP_MSG,
    };
    let mut h = Vec::with_capacity(HEADER_LEN);
    header.write(&mut h);
    out[start..start + HEADER_LEN].copy_from_slice(&h);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{decode, Message};
    use bson::rawdoc;

    fn encode(body: &RawDocument, seqs: &[(&str, &[RawDocumentBuf])]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_op_msg(&mut out, 7, 0, body, seqs, 1 << 20).unwrap();
        out
    }

    fn decode_msg(frame: &[u8]) -> Result<OpMsg> {
        match decode(frame)?.1 {
            Message::Msg(m) => Ok(m),
            Message::Reply(_) => panic!("expected OP_MSG"),
        }
    }

    #[test]
    fn round_trip_body_only() {
        let body = rawdoc! { "ping": 1, "$db": "admin" };
        let frame = encode(&body, &[]);
        let (header, _) = decode(&frame).unwrap();
        assert_eq!(header.request_id, 7);
        assert_eq!(header.op_code, OP_MSG);
        let msg = decode_msg(&frame).unwrap();
        assert_eq!(msg.body, body);
        assert!(msg.sequences.is_empty());
        assert!(!msg.more_to_come());
    }

    #[test]
    fn round_trip_with_sequences() {
        let body = rawdoc! { "insert": "c", "$db": "d" };
        let docs: Vec<RawDocumentBuf> = (0..3).map(|i| rawdoc! { "_id": i }).collect();
        let frame = encode(&body, &[("documents", &docs), ("empty", &[])]);
        let msg = decode_msg(&frame).unwrap();
        assert_eq!(msg.sequences.len(), 2);
        assert_eq!(msg.sequences[0].identifier, "documents");
        assert_eq!(msg.sequences[0].documents, docs);
        assert!(msg.sequences[1].documents.is_empty());
    }

    #[test]
    fn appends_to_a_reused_buffer() {
        let mut out = b"junk".to_vec();
        let len = encode_op_msg(&mut out, 1, 0, &rawdoc! {"a": 1}, &[], 1 << 20).unwrap();
        assert_eq!(out.len(), 4 + len);
        decode_msg(&out[4..]).unwrap();
    }

    #[test]
    fn size_limit_is_enforced_and_buffer_restored() {
        let mut out = Vec::new();
        let err = encode_op_msg(&mut out, 1, 0, &rawdoc! {"a": "x".repeat(100)}, &[], 64);
        assert!(err.is_err());
        assert!(out.is_empty());
    }

    fn with_checksum(body: &RawDocument) -> Vec<u8> {
        let mut frame = encode(body, &[]);
        frame[16] |= CHECKSUM_PRESENT as u8;
        let new_len = (frame.len() + 4) as i32;
        frame[0..4].copy_from_slice(&new_len.to_le_bytes());
        let crc = crc32c::checksum(&frame);
        frame.extend_from_slice(&crc.to_le_bytes());
        frame
    }

    #[test]
    fn checksum_is_verified() {
        let frame = with_checksum(&rawdoc! { "ok": 1 });
        assert_eq!(decode_msg(&frame).unwrap().body, rawdoc! { "ok": 1 });
        let mut bad = frame.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(decode_msg(&bad).is_err());
    }

    #[test]
    fn more_to_come_flag_reads_back() {
        let mut out = Vec::new();
        encode_op_msg(&mut out, 1, MORE_TO_COME, &rawdoc! {"a": 1}, &[], 1 << 20).unwrap();
        assert!(decode_msg(&out).unwrap().more_to_come());
    }

    #[test]
    fn malformed_inputs_are_errors_not_panics() {
        let good = encode(&rawdoc! { "ok": 1 }, &[("d", &[rawdoc! {"x": 1}])]);
        // Every truncation, with the header length patched to match.
        for cut in 16..good.len() {
            let mut f = good[..cut].to_vec();
            f[0..4].copy_from_slice(&(cut as i32).to_le_bytes());
            let _ = decode(&f);
        }
        // Every single-byte corruption after the header.
        for i in 16..good.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut f = good.clone();
                f[i] = v;
                let _ = decode(&f);
            }
        }
        let mut unknown_flag = good.clone();
        unknown_flag[16] = 0x04;
        assert!(decode(&unknown_flag).is_err());
        let mut bad_kind = good.clone();
        bad_kind[20] = 9;
        assert!(decode(&bad_kind).is_err());
        // No body at all.
        let mut empty = Vec::new();
        Header {
            length: 20,
            request_id: 1,
            response_to: 0,
            op_code: OP_MSG,
        }
        .write(&mut empty);
        empty.extend_from_slice(&[0; 4]);
        assert!(decode(&empty).is_err());
    }

    #[test]
    fn two_bodies_are_rejected() {
        let mut f = encode(&rawdoc! { "a": 1 }, &[]);
        let doc = rawdoc! { "b": 1 };
        f.push(0);
        f.extend_from_slice(doc.as_bytes());
        let len = f.len() as i32;
        f[0..4].copy_from_slice(&len.to_le_bytes());
        assert!(decode(&f).is_err());
    }
}
