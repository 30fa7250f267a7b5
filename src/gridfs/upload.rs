//! An upload stream: bytes are cut into chunks and inserted as each chunk
//! fills; `close` writes the last chunk and the files document.

use super::{Bucket, Call, UploadOptions};
use crate::csot::OpTimeout;
use crate::error::{Error, Result};
use crate::operation::write::{WriteCommand, WriteKind};
use crate::session::Session;
use crate::wire::Documents;
use bson::oid::ObjectId;
use bson::{rawdoc, RawBson, RawDocumentBuf};

pub struct UploadStream {
    bucket: Bucket,
    id: RawBson,
    filename: String,
    chunk_size: usize,
    metadata: Option<RawDocumentBuf>,
    buffer: Vec<u8>,
    next_n: i32,
    length: u64,
    budget: OpTimeout,
    session: Option<Session>,
    state: State,
}

#[derive(PartialEq, Eq)]
enum State {
    Open,
    Closed,
    Aborted,
}

impl UploadStream {
    pub(super) async fn open(
        bucket: Bucket,
        filename: &str,
        options: UploadOptions<'_>,
        budget: OpTimeout,
        session: Option<Session>,
    ) -> Result<UploadStream> {
        let chunk_size = options.chunk_size_bytes.unwrap_or(bucket.chunk_size);
        if chunk_size == 0 {
            return Err(Error::invalid_argument("chunkSizeBytes must be positive"));
        }
        let stream = UploadStream {
            id: options
                .id
                .unwrap_or_else(|| RawBson::ObjectId(bson::oid::ObjectId::new())),
            filename: filename.to_string(),
            chunk_size: chunk_size as usize,
            metadata: options.metadata,
            buffer: Vec::new(),
            next_n: 0,
            length: 0,
            budget,
            session,
            state: State::Open,
            bucket,
        };
        stream.bucket.ensure_indexes(&stream.call()).await?;
        Ok(stream)
    }

    pub fn id(&self) -> &RawBson {
        &self.id
    }

    fn call(&self) -> Call<'_> {
        Call {
            budget: self.budget,
            session: self.session.as_ref(),
        }
    }

    fn check_open(&self) -> Result<()> {
        match self.state {
            State::Open => Ok(()),
            State::Closed => Err(Error::closed("upload stream")),
            State::Aborted => Err(Error::closed("upload stream (aborted)")),
        }
    }

    /// Buffers `data` and inserts every chunk it completes (one command).
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        self.check_open()?;
        self.length += data.len() as u64;
        // A partly filled chunk is topped up; the whole chunks after it are
        // cut straight from `data`, not copied into the buffer first.
        let top_up = match self.buffer.is_empty() {
            true => 0,
            false => (self.chunk_size - self.buffer.len()).min(data.len()),
        };
        self.buffer.extend_from_slice(&data[..top_up]);
        let rest = &data[top_up..];
        let whole = rest.len() / self.chunk_size * self.chunk_size;
        let filled =
            (self.buffer.len() == self.chunk_size).then(|| std::mem::take(&mut self.buffer));
        self.buffer.extend_from_slice(&rest[whole..]);
        let mut pieces = Vec::with_capacity(1 + whole / self.chunk_size);
        pieces.extend(filled.as_deref());
        pieces.extend(rest[..whole].chunks(self.chunk_size));
        match pieces.is_empty() {
            true => Ok(()),
            false => self.insert_chunks(&pieces).await,
        }
    }

    /// Inserts one chunk per piece, in order (one command).
    async fn insert_chunks(&mut self, pieces: &[&[u8]]) -> Result<()> {
        // Written straight into the insert's one buffer, sized exactly:
        // every chunk's bytes besides its data are those of an empty one.
        let mut empty = Vec::new();
        write_chunk(&mut empty, ObjectId::from_bytes([0; 12]), &self.id, 0, &[])?;
        let bytes = pieces.iter().map(|p| p.len() + empty.len()).sum();
        let mut chunks = Documents::with_capacity(bytes, pieces.len());
        // One clock read for this flush's chunk ids.
        let oids = crate::runtime::object_ids();
        for piece in pieces {
            let (id, n) = (oids.next(), self.next_n);
            chunks.push_written(|out| write_chunk(out, id, &self.id, n, piece))?;
            self.next_n += 1;
        }
        let chunks_coll = self.bucket.chunks();
        self.insert(&chunks_coll, chunks).await
    }

    async fn insert(&self, coll: &str, docs: impl Into<Documents>) -> Result<()> {
        let mut op = WriteCommand::new(&self.bucket.db, coll, WriteKind::Insert, docs, 0);
        let call = self.call();
        while op.remaining() > 0 {
            let r = self.bucket.run(&mut op, &call).await;
            op.finish_batch();
            r?;
        }
        match op.result.write_errors.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes the last (short) chunk and the files document.
    pub async fn close(&mut self) -> Result<()> {
        self.check_open()?;
        self.state = State::Closed;
        if !self.buffer.is_empty() {
            let last = std::mem::take(&mut self.buffer);
            self.insert_chunks(&[&last]).await?;
        }
        let mut file = rawdoc! {
            "_id": self.id.clone(),
            "length": self.length as i64,
            "chunkSize": self.chunk_size as i32,
            "uploadDate": bson::DateTime::now(),
            "filename": self.filename.as_str(),
        };
        if let Some(m) = &self.metadata {
            file.append(bson::cstr!("metadata"), m.clone());
        }
        let files = self.bucket.files();
        self.insert(&files, vec![file]).await
    }

    /// Deletes the chunks written so far.
    pub async fn abort(&mut self) -> Result<()> {
        self.check_open()?;
        self.state = State::Aborted;
        let chunks = self.bucket.chunks();
        self.bucket
            .delete_where(
                &chunks,
                rawdoc! { "files_id": self.id.clone() },
                &self.call(),
            )
            .await
            .map(|_| ())
    }
}

/// `{_id, files_id, n, data}`, the piece written once into a buffer of
/// exactly the document's size (a `rawdoc!` with a `Binary` copied it
/// twice and grew its buffer by doubling).
/// The chunk document `{_id, files_id, n, data}` appended to `out`, written
/// once at its exact size.
fn write_chunk(
    out: &mut Vec<u8>,
    id: ObjectId,
    files_id: &RawBson,
    n: i32,
    piece: &[u8],
) -> Result<()> {
    let head = rawdoc! { "_id": id, "files_id": files_id.clone(), "n": n };
    // Without its terminator: then type 0x05, "data\0", length, subtype 0, the bytes, terminator.
    let head = &head.as_bytes()[..head.as_bytes().len() - 1];
    let len = head.len() + 1 + 5 + 4 + 1 + piece.len() + 1;
    let (Ok(len32), Ok(piece_len)) = (i32::try_from(len), i32::try_from(piece.len())) else {
        return Err(Error::invalid_argument(format!(
            "a chunk of {} bytes is too large",
            piece.len()
        )));
    };
    out.reserve(len);
    out.extend_from_slice(&len32.to_le_bytes());
    out.extend_from_slice(&head[4..]);
    out.push(0x05);
    out.extend_from_slice(b"data\0");
    out.extend_from_slice(&piece_len.to_le_bytes());
    out.push(0x00);
    out.extend_from_slice(piece);
    out.push(0x00);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{spec::BinarySubtype, Binary};

    #[test]
    fn a_written_chunk_is_what_rawdoc_builds() {
        let id = ObjectId::new();
        for files_id in [
            RawBson::ObjectId(ObjectId::new()),
            RawBson::String("f".into()),
        ] {
            for piece in [&b""[..], b"x", &[7u8; 300]] {
                let data = Binary {
                    subtype: BinarySubtype::Generic,
                    bytes: piece.to_vec(),
                };
                let want =
                    rawdoc! { "_id": id, "files_id": files_id.clone(), "n": 3, "data": data };
                // Appended after what the buffer holds.
                let mut out = vec![1, 2, 3];
                write_chunk(&mut out, id, &files_id, 3, piece).unwrap();
                assert_eq!(&out[..3], [1, 2, 3]);
                assert_eq!(&out[3..], want.as_bytes());
            }
        }
    }
}
