//! An upload stream: bytes are cut into chunks and inserted as each chunk
//! fills; `close` writes the last chunk and the files document.

use super::{Bucket, Call, UploadOptions};
use crate::csot::OpTimeout;
use crate::error::{Error, Result};
use crate::operation::write::{WriteCommand, WriteKind};
use crate::session::Session;
use bson::spec::BinarySubtype;
use bson::{rawdoc, Binary, RawBson, RawDocumentBuf};

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
    pub(super) fn open(
        bucket: Bucket,
        filename: &str,
        options: UploadOptions,
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
        stream.bucket.ensure_indexes(&stream.call())?;
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
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        self.check_open()?;
        self.buffer.extend_from_slice(data);
        self.length += data.len() as u64;
        let full = self.buffer.len() / self.chunk_size * self.chunk_size;
        if full > 0 {
            let rest = self.buffer.split_off(full);
            let filled = std::mem::replace(&mut self.buffer, rest);
            self.insert_chunks(&filled)?;
        }
        Ok(())
    }

    fn insert_chunks(&mut self, bytes: &[u8]) -> Result<()> {
        let mut chunks = Vec::new();
        // One clock read for this flush's chunk ids.
        let oids = crate::object_id::ObjectIds::now();
        for piece in bytes.chunks(self.chunk_size) {
            let data = Binary {
                subtype: BinarySubtype::Generic,
                bytes: piece.to_vec(),
            };
            chunks.push(rawdoc! { "_id": oids.next(), "files_id": self.id.clone(), "n": self.next_n, "data": data });
            self.next_n += 1;
        }
        let chunks_coll = self.bucket.chunks();
        self.insert(&chunks_coll, chunks)
    }

    fn insert(&self, coll: &str, docs: Vec<RawDocumentBuf>) -> Result<()> {
        let mut op = WriteCommand::new(&self.bucket.db, coll, WriteKind::Insert, docs, 0);
        let call = self.call();
        while op.remaining() > 0 {
            let r = self.bucket.run(&mut op, &call);
            op.finish_batch();
            r?;
        }
        match op.result.write_errors.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes the last (short) chunk and the files document.
    pub fn close(&mut self) -> Result<()> {
        self.check_open()?;
        self.state = State::Closed;
        if !self.buffer.is_empty() {
            let last = std::mem::take(&mut self.buffer);
            self.insert_chunks(&last)?;
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
        self.insert(&files, vec![file])
    }

    /// Deletes the chunks written so far.
    pub fn abort(&mut self) -> Result<()> {
        self.check_open()?;
        self.state = State::Aborted;
        let chunks = self.bucket.chunks();
        self.bucket
            .delete_where(
                &chunks,
                rawdoc! { "files_id": self.id.clone() },
                &self.call(),
            )
            .map(|_| ())
    }
}
