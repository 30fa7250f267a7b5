//! OP_QUERY / OP_REPLY: only for the legacy `isMaster` handshake fallback.

use super::{read_document, read_i32, Header, HEADER_LEN, OP_QUERY};
use crate::error::{Error, Result};
use bson::{RawDocument, RawDocumentBuf};

#[derive(Debug, Clone, PartialEq)]
pub struct OpReply {
    pub flags: i32,
    pub cursor_id: i64,
    pub documents: Vec<RawDocumentBuf>,
}

const QUERY_FAILURE: i32 = 1 << 1;

impl OpReply {
    pub(super) fn decode(body: &[u8]) -> Result<OpReply> {
        let flags = read_i32(body, 0)?;
        let cursor_id = body
            .get(4..12)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_le_bytes)
            .ok_or_else(|| Error::protocol("OP_REPLY truncated"))?;
        let count = read_i32(body, 16)?;
        let mut at = 20;
        let mut documents = Vec::new();
        for _ in 0..count.max(0) {
            let (doc, len) = read_document(body, at)?;
            documents.push(doc.to_owned());
            at += len;
        }
        if flags & QUERY_FAILURE != 0 && documents.is_empty() {
            return Err(Error::protocol("OP_REPLY query failure without a document"));
        }
        Ok(OpReply {
            flags,
            cursor_id,
            documents,
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
    use bson::rawdoc;

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
        let (h, msg) = decode(&reply_frame(std::slice::from_ref(&doc), 1)).unwrap();
        assert_eq!(h.response_to, 1);
        assert_eq!(
            msg,
            Message::Reply(OpReply {
                flags: 0,
                cursor_id: 0,
                documents: vec![doc]
            })
        );
    }

    #[test]
    fn op_reply_with_missing_documents_is_an_error() {
        assert!(decode(&reply_frame(&[], 3)).is_err());
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
