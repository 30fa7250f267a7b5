//! OP_MSG (opCode 2013): flag bits, a body section and document sequences.

use super::{
    crc32c, read_document, read_i32, read_u32, validate_document, Header, HEADER_LEN, OP_MSG,
};
use crate::error::{Error, Result};
use bson::RawDocument;

pub const CHECKSUM_PRESENT: u32 = 1 << 0;
pub const MORE_TO_COME: u32 = 1 << 1;
/// The client accepts several replies to this request (the streaming hello).
pub const EXHAUST_ALLOWED: u32 = 1 << 16;
/// Bits 0-15 are "required": an unknown one set must be an error.
const KNOWN_REQUIRED: u32 = CHECKSUM_PRESENT | MORE_TO_COME;

/// A kind-1 section: many documents under one identifier (e.g. `documents`),
/// kept as the received bytes. Its framing was checked at decode; each
/// document is checked only when [`DocumentSequence::documents`] reads it,
/// so a sequence nobody reads costs nothing beyond the frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DocumentSequence<'a> {
    pub identifier: &'a str,
    /// The documents, back to back.
    bytes: &'a [u8],
}

impl<'a> DocumentSequence<'a> {
    /// The documents in order, each validated as it is read; a malformed one
    /// is a protocol error (and the last item).
    pub fn documents(&self) -> Documents<'a> {
        Documents {
            bytes: self.bytes,
            at: 0,
        }
    }
}

/// The documents of a [`DocumentSequence`], borrowed from the frame.
pub struct Documents<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Documents<'a> {
    type Item = Result<&'a RawDocument>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let r = read_document(self.bytes, self.at).and_then(|(doc, len)| {
            validate_document(doc)?;
            self.at += len;
            Ok(doc)
        });
        if r.is_err() {
            self.at = self.bytes.len();
        }
        Some(r)
    }
}

/// A decoded OP_MSG, borrowing its frame.
#[derive(Debug, Clone, PartialEq)]
pub struct OpMsg<'a> {
    pub flags: u32,
    /// The kind-0 section (its framing checked, its content not yet).
    pub body: &'a RawDocument,
    /// The sections after the flag bits, checksum excluded; framing checked.
    sections: &'a [u8],
}

impl<'a> OpMsg<'a> {
    pub fn more_to_come(&self) -> bool {
        self.flags & MORE_TO_COME != 0
    }

    /// The kind-1 sections, in order.
    pub fn sequences(&self) -> impl Iterator<Item = DocumentSequence<'a>> + 'a {
        let sections = self.sections;
        let mut at = 0;
        std::iter::from_fn(move || loop {
            let (kind, len, seq) = section_at(sections, at).ok()??;
            at += 1 + len;
            if kind == 1 {
                return seq;
            }
        })
    }

    /// `frame` is the whole message (for the checksum); `body` follows the header.
    pub(super) fn decode(frame: &'a [u8], body: &'a [u8]) -> Result<OpMsg<'a>> {
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
        let sections = &body[4..end];
        // One pass over the framing, allocating nothing however many
        // sections or documents a server sends.
        let mut at = 0;
        let mut doc_body = None;
        while let Some((kind, len, _)) = section_at(sections, at)? {
            if kind == 0 {
                let (doc, _) = read_document(sections, at + 1)?;
                if doc_body.replace(doc).is_some() {
                    return Err(Error::protocol("OP_MSG has two body sections"));
                }
            }
            at += 1 + len;
        }
        let body = doc_body.ok_or_else(|| Error::protocol("OP_MSG without a body section"))?;
        Ok(OpMsg {
            flags,
            body,
            sections,
        })
    }
}

/// The section starting at `at` (its kind byte): its kind, its length after
/// the kind byte, and for kind 1 the sequence. `None` at the end.
#[allow(clippy::type_complexity)]
fn section_at(
    sections: &[u8],
    at: usize,
) -> Result<Option<(u8, usize, Option<DocumentSequence<'_>>)>> {
    let Some(&kind) = sections.get(at) else {
        return Ok(None);
    };
    match kind {
        0 => {
            let (_, len) = read_document(sections, at + 1)?;
            Ok(Some((0, len, None)))
        }
        1 => {
            let (seq, len) = decode_sequence(sections, at + 1)?;
            Ok(Some((1, len, Some(seq))))
        }
        k => Err(Error::protocol(format!("unknown OP_MSG section kind {k}"))),
    }
}

/// A kind-1 section at `at` (after its kind byte): the identifier, and
/// documents whose lengths tile the section exactly.
fn decode_sequence(bytes: &[u8], at: usize) -> Result<(DocumentSequence<'_>, usize)> {
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
        .map_err(|_| Error::protocol("document sequence identifier is not UTF-8"))?;
    let documents = &section[4 + nul + 1..];
    let mut pos = 0;
    while pos < documents.len() {
        let (_, len) = read_document(documents, pos)?;
        pos += len;
    }
    Ok((
        DocumentSequence {
            identifier,
            bytes: documents,
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
    sequences: &[(&str, &[u8])],
    max_message_size: usize,
) -> Result<usize> {
    // The whole message's size first: one allocation, and a message over
    // the limit is refused before anything is copied.
    let len = HEADER_LEN
        + 4
        + 1
        + body.as_bytes().len()
        + sequences
            .iter()
            .map(|(id, docs)| 1 + 4 + id.len() + 1 + docs.len())
            .sum::<usize>();
    if len > max_message_size {
        return Err(Error::invalid_argument(format!(
            "message of {len} bytes exceeds maxMessageSizeBytes {max_message_size}"
        )));
    }
    out.reserve(len);
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
        out.extend_from_slice(docs);
        let size = i32::try_from(out.len() - size_at)
            .map_err(|_| Error::invalid_argument("document sequence too large"))?;
        out[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
    }
    debug_assert_eq!(out.len() - start, len);
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
    use crate::wire::{decode, Documents, Message};
    use bson::{rawdoc, RawDocumentBuf};

    fn encode(body: &RawDocument, seqs: &[(&str, &[RawDocumentBuf])]) -> Vec<u8> {
        // A sequence goes in as its documents' bytes, back to back.
        let bytes: Vec<(&str, Vec<u8>)> = seqs
            .iter()
            .map(|(id, docs)| {
                (
                    *id,
                    docs.iter().flat_map(|d| d.as_bytes().to_vec()).collect(),
                )
            })
            .collect();
        let seqs: Vec<(&str, &[u8])> = bytes.iter().map(|(id, b)| (*id, &b[..])).collect();
        let mut out = Vec::new();
        encode_op_msg(&mut out, 7, 0, body, &seqs, 1 << 20).unwrap();
        out
    }

    fn decode_msg(frame: &[u8]) -> Result<OpMsg<'_>> {
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
        assert_eq!(msg.body, &*body);
        assert_eq!(msg.sequences().count(), 0);
        assert!(!msg.more_to_come());
    }

    #[test]
    fn round_trip_with_sequences() {
        let body = rawdoc! { "insert": "c", "$db": "d" };
        let docs: Vec<RawDocumentBuf> = (0..3).map(|i| rawdoc! { "_id": i }).collect();
        let frame = encode(&body, &[("documents", &docs), ("empty", &[])]);
        let msg = decode_msg(&frame).unwrap();
        let seqs: Vec<_> = msg.sequences().collect();
        assert_eq!(seqs.len(), 2);
        assert_eq!(seqs[0].identifier, "documents");
        let read: Vec<&RawDocument> = seqs[0].documents().map(Result::unwrap).collect();
        let want: Vec<&RawDocument> = docs.iter().map(|d| &**d).collect();
        assert_eq!(read, want);
        assert_eq!(seqs[1].documents().count(), 0);
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
        assert_eq!(decode_msg(&frame).unwrap().body, &*rawdoc! { "ok": 1 });
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

    #[test]
    fn a_bad_document_in_a_sequence_is_an_error_when_read() {
        // `{"s": <string whose length says 9 but holds 2>}`: framed right,
        // malformed inside.
        let bad: &[u8] = &[14, 0, 0, 0, 2, b's', 0, 9, 0, 0, 0, b'a', 0, 0];
        let bad = RawDocumentBuf::from_bytes(bad.to_vec()).unwrap();
        let good = rawdoc! { "x": 1 };
        let frame = encode(&rawdoc! { "ok": 1 }, &[("d", &[good.clone(), bad])]);
        let msg = decode_msg(&frame).expect("the framing is fine");
        let seq = msg.sequences().next().unwrap();
        let mut docs = seq.documents();
        assert_eq!(docs.next().unwrap().unwrap(), &*good);
        let err = docs.next().unwrap().unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::Protocol);
        assert!(docs.next().is_none());
    }

    #[test]
    fn many_tiny_documents_are_not_copied() {
        // 200,000 empty documents: decoding allocates nothing per document.
        let docs = Documents::from(vec![RawDocumentBuf::new(); 200_000]);
        let mut out = Vec::new();
        encode_op_msg(
            &mut out,
            1,
            0,
            &rawdoc! { "ok": 1 },
            &[("d", docs.bytes())],
            1 << 24,
        )
        .unwrap();
        let msg = decode_msg(&out).unwrap();
        assert_eq!(msg.sequences().next().unwrap().documents().count(), 200_000);
        // The sequence borrows the frame itself.
        let seq = msg.sequences().next().unwrap();
        let range = out.as_ptr_range();
        assert!(range.contains(&seq.bytes.as_ptr()));
    }
}
