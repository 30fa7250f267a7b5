//! The documents of an OP_MSG document sequence, back to back in one
//! buffer: a write's statements are laid out once, one allocation for all
//! of them, and go into the message in one copy. A retry resends the same
//! buffer.

use bson::{RawDocument, RawDocumentBuf};
use std::ops::Range;
use std::rc::Rc;

/// Documents back to back (each a whole BSON document, checked by whoever
/// adds it), and where each starts.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Documents {
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

impl Documents {
    /// Room for `docs` documents of `bytes` in all.
    pub fn with_capacity(bytes: usize, docs: usize) -> Documents {
        Documents {
            bytes: Vec::with_capacity(bytes),
            starts: Vec::with_capacity(docs),
        }
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// All the documents' bytes, as the sequence carries them.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes of document `i`.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let start = *self.starts.get(i)?;
        let end = self.starts.get(i + 1).copied().unwrap_or(self.bytes.len());
        self.bytes.get(start..end)
    }

    /// The documents in order.
    pub fn iter(&self) -> impl Iterator<Item = &RawDocument> + '_ {
        // Every push adds a framed document, so each slice is one.
        (0..self.len()).filter_map(|i| RawDocument::from_bytes(self.get(i)?).ok())
    }

    pub fn push(&mut self, doc: &RawDocument) {
        self.starts.push(self.bytes.len());
        self.bytes.extend_from_slice(doc.as_bytes());
    }

    /// `doc` (a checked document's bytes) with `element` (a whole element:
    /// type, key, value) put first, its length grown to match. `None` when
    /// the result would be larger than a document can be.
    pub fn push_prefixed(&mut self, element: &[u8], doc: &[u8]) -> Option<()> {
        let fields = doc.get(4..)?;
        let len = i32::try_from(4 + element.len() + fields.len()).ok()?;
        self.starts.push(self.bytes.len());
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(element);
        self.bytes.extend_from_slice(fields);
        Some(())
    }

    /// A document that `write` appends to the buffer itself (no buffer of
    /// its own). Its error, or what it wrote not being one framed document
    /// (a protocol error: the driver wrote it), adds nothing.
    pub fn push_written(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> crate::error::Result<()>,
    ) -> crate::error::Result<()> {
        let start = self.bytes.len();
        let written = write(&mut self.bytes).and_then(|()| {
            RawDocument::from_bytes(&self.bytes[start..])?;
            Ok(())
        });
        match written {
            Ok(()) => self.starts.push(start),
            Err(_) => self.bytes.truncate(start),
        }
        written
    }
}

/// Documents `docs` of a shared list: a batch of a write, sent, shown by
/// monitoring and resent by a retry in place, however the write is split.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slice {
    all: Rc<Documents>,
    docs: Range<usize>,
}

impl Slice {
    /// Documents `docs` of `all` (clamped to what it holds).
    pub fn new(all: Rc<Documents>, docs: Range<usize>) -> Slice {
        let end = docs.end.min(all.len());
        let docs = docs.start.min(end)..end;
        Slice { all, docs }
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The documents' bytes, back to back, as the sequence carries them.
    pub fn bytes(&self) -> &[u8] {
        let at = |i: usize| {
            self.all
                .starts
                .get(i)
                .copied()
                .unwrap_or(self.all.bytes.len())
        };
        &self.all.bytes[at(self.docs.start)..at(self.docs.end)]
    }

    /// The documents in order.
    pub fn iter(&self) -> impl Iterator<Item = &RawDocument> + '_ {
        // Every push adds a framed document, so each slice is one.
        self.docs
            .clone()
            .filter_map(|i| RawDocument::from_bytes(self.all.get(i)?).ok())
    }
}

impl From<Vec<RawDocumentBuf>> for Slice {
    fn from(docs: Vec<RawDocumentBuf>) -> Slice {
        Documents::from(docs).into()
    }
}

impl From<Documents> for Slice {
    fn from(all: Documents) -> Slice {
        let docs = 0..all.len();
        Slice {
            all: Rc::new(all),
            docs,
        }
    }
}

impl From<Vec<RawDocumentBuf>> for Documents {
    fn from(mut docs: Vec<RawDocumentBuf>) -> Documents {
        if docs.len() == 1 {
            // One document (insert-one, a large one too): its own buffer,
            // not a copy.
            let bytes = docs
                .pop()
                .map(RawDocumentBuf::into_bytes)
                .unwrap_or_default();
            return Documents {
                bytes,
                starts: vec![0],
            };
        }
        let bytes = docs.iter().map(|d| d.as_bytes().len()).sum();
        let mut out = Documents::with_capacity(bytes, docs.len());
        for d in &docs {
            out.push(d);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn documents_lie_back_to_back_and_read_back() {
        let docs = vec![rawdoc! { "a": 1 }, rawdoc! { "b": "xy" }, rawdoc! {}];
        let list = Documents::from(docs.clone());
        assert_eq!(list.len(), 3);
        let all: Vec<u8> = docs.iter().flat_map(|d| d.as_bytes().to_vec()).collect();
        assert_eq!(list.bytes(), &all[..]);
        let back: Vec<RawDocumentBuf> = list.iter().map(|d| d.to_owned()).collect();
        assert_eq!(back, docs);
        assert_eq!(list.get(3), None);

        // A batch is a window on the shared list, read in place.
        let all = Rc::new(list);
        let mid = Slice::new(Rc::clone(&all), 1..3);
        assert_eq!(mid.len(), 2);
        assert_eq!(
            mid.iter().map(|d| d.to_owned()).collect::<Vec<_>>(),
            docs[1..]
        );
        assert_eq!(mid.bytes(), &all.bytes()[docs[0].as_bytes().len()..]);
        assert!(std::ptr::eq(
            mid.bytes().as_ptr(),
            all.bytes()[docs[0].as_bytes().len()..].as_ptr()
        ));
        // Out of range: clamped, never a panic.
        assert!(Slice::new(Rc::clone(&all), 2..9).len() == 1);
        assert!(Slice::new(all, 7..9).is_empty());
        assert_eq!(Slice::default().bytes(), b"");

        // One document keeps its own buffer.
        let one = rawdoc! { "x": 1 };
        let list = Documents::from(vec![one.clone()]);
        assert_eq!(list.iter().collect::<Vec<_>>(), [&*one]);
    }

    #[test]
    fn a_written_document_is_framed_or_not_added() {
        let mut list = Documents::default();
        let write = |bytes: Vec<u8>| {
            move |b: &mut Vec<u8>| {
                b.extend_from_slice(&bytes);
                Ok(())
            }
        };
        list.push_written(write(rawdoc! { "a": 1 }.into_bytes()))
            .unwrap();
        assert!(list.push_written(write(vec![9, 0, 0, 0, 0])).is_err());
        // The writer's own error: what it wrote before failing is dropped.
        let failing = |b: &mut Vec<u8>| {
            b.push(1);
            Err(crate::error::Error::invalid_argument("no"))
        };
        assert!(list.push_written(failing).is_err());
        assert_eq!(list.len(), 1);
        assert_eq!(
            list.bytes(),
            rawdoc! { "a": 1 }.as_bytes(),
            "nothing left over"
        );
    }

    #[test]
    fn a_prefixed_document_is_the_element_then_the_fields() {
        let mut list = Documents::default();
        let id = rawdoc! { "_id": 7 };
        let element = &id.as_bytes()[4..id.as_bytes().len() - 1];
        list.push_prefixed(element, rawdoc! { "x": 1 }.as_bytes())
            .unwrap();
        let got = list.iter().next().unwrap().to_owned();
        assert_eq!(got, rawdoc! { "_id": 7, "x": 1 });
    }
}
