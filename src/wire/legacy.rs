//! OP_QUERY / OP_REPLY: only for the legacy `isMaster` handshake fallback.

use super::{read_document, read_i32, Header, HEADER_LEN, OP_QUERY};
use crate::error::{Error, Result};
use bson::RawDocument;

/// An OP_REPLY, borrowing its frame. The driver sends OP_QUERY only with
/// numberToReturn -1 (one command), so its reply holds exactly one document
/// filling the rest of the frame: anything else is a protocol error, found
/// without copying a document however many a server sends.
#[derive(Debug, Clone, PartialEq)]
pub struct OpReply<'a> {
    pub flags: i32,
    pub cursor_id: i64,
    /// The one document (its framing checked, its content not yet).
    pub document: &'a RawDocument,
}

impl<'a> OpReply<'a> {
    /// `frame` is the whole message, header included.
    pub(super) fn decode(frame: &'a [u8]) -> Result<OpReply<'a>> {
        let body = &frame[HEADER_LEN..];
        let flags = read_i32(body, 0)?;
        let cursor_id = body
            .get(4..12)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_le_bytes)
            .ok_or_else(|| Error::protocol("OP_REPLY truncated"))?;
        let count = read_i32(body, 16)?;
        if count != 1 {
            return Err(Error::protocol(format!(
                "OP_REPLY holds {count} documents, but a command reply holds one"
            )));
        }
        let (document, len) = read_document(body, 20)?;
        if 20 + len != body.len() {
            return Err(Error::protocol("OP_REPLY has bytes after its document"));
        }
        Ok(OpReply {
            flags,
            cursor_id,
            document,
        })
    }
}

/// An OP_QUERY of `command` against `<db>.$cmd`, numberToReturn -1.
pub fn encode_op_query(
    out: &mut Vec<u8>,
    request_id: i32,
    db: &str,
    command: &RawDocument,
) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    out.extend_from_slice(&0i32.to_le_bytes()); // flags
    out.extend_from_slice(db.as_bytes());
    out.extend_from_slice(b".$cmd\0");
    out.extend_from_slice(&0i32.to_le_bytes()); // numberToSkip
    out.extend_from_slice(&(-1i32).to_le_bytes()); // numberToReturn
    out.extend_from_slice(command.as_bytes());
    let len = out.len() - start;
    let mut h = Vec::with_capacity(HEADER_LEN);
    Header {
        length: len as i32,
        request_id,
        response_to: 0,
        op_code: OP_QUERY,
    }
    .write(&mut h);
    out[start..start + HEADER_LEN].copy_from_slice(&h);
    len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{decode, Message, OP_REPLY};
    use bson::{rawdoc, RawDocumentBuf};

    fn reply_frame(docs: &[RawDocumentBuf], count: i32) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&0i32.to_le_bytes());
        body.extend_from_slice(&0i64.to_le_bytes());
        body.extend_from_slice(&0i32.to_le_bytes());
        body.extend_from_slice(&count.to_le_bytes());
        for d in docs {
            body.extend_from_slice(d.as_bytes());
        }
        let mut frame = Vec::new();
        let len = (HEADER_LEN + body.len()) as i32;
        Header {
            length: len,
            request_id: 2,
            response_to: 1,
            op_code: OP_REPLY,
        }
        .write(&mut frame);
        frame.extend_from_slice(&body);
        frame
    }

    #[test]
    fn op_reply_decodes() {
        let doc = rawdoc! { "ismaster": true, "ok": 1 };
        let frame = reply_frame(std::slice::from_ref(&doc), 1);
        let (h, msg) = decode(&frame).unwrap();
        assert_eq!(h.response_to, 1);
        assert_eq!(
            msg,
            Message::Reply(OpReply {
                flags: 0,
                cursor_id: 0,
                document: &doc,
            })
        );
    }

    #[test]
    fn op_reply_with_other_than_one_document_is_an_error() {
        assert!(decode(&reply_frame(&[], 3)).is_err());
        assert!(decode(&reply_frame(&[], 0)).is_err());
        let docs = vec![rawdoc! {}; 3];
        assert!(decode(&reply_frame(&docs, 3)).is_err(), "three documents");
        assert!(
            decode(&reply_frame(&docs, 1)).is_err(),
            "bytes after the first"
        );
        assert!(decode(&reply_frame(&docs[..1], -1)).is_err());
    }

    #[test]
    fn op_query_layout() {
        let mut out = Vec::new();
        let cmd = rawdoc! { "isMaster": 1 };
        let len = encode_op_query(&mut out, 5, "admin", &cmd);
        assert_eq!(len, out.len());
        let h = Header::parse(&out).unwrap();
        assert_eq!(
            (h.length as usize, h.request_id, h.op_code),
            (len, 5, OP_QUERY)
        );
        assert_eq!(&out[20..32], b"admin.$cmd\0\0");
        assert!(out.ends_with(cmd.as_bytes()));
    }
}
