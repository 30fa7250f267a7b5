//! GridFS glue: ids cross as `{v: <value>}`; streams keep their state in the guest.

use super::collection::CursorRes;
use super::face::cursor::Cursor as WitCursor;
use super::face::gridfs::{
    self as wit_gridfs, DownloadByNameOptions, DownloadStream, GridfsOptions, GuestBucket,
    GuestDownloadStream, GuestUploadStream, UploadOptions, UploadStream,
};
use super::session::SessionRes;
use super::slot::Slot;
use super::{doc, opt_doc, to_wit, wrap, Component, WitResult};
use crate::gridfs;
use bson::{rawdoc, RawBson};

pub struct BucketRes(pub gridfs::Bucket);
/// An upload stream and its file id (as `{v: <id>}`), which `id` answers
/// even while a call has the stream out.
pub struct UploadStreamRes(Slot<gridfs::UploadStream>, Vec<u8>);
pub struct DownloadStreamRes(Slot<gridfs::DownloadStream>);

/// An open stream's chunk cursor is killed where a drop can do I/O (deferred.rs).
impl Drop for DownloadStreamRes {
    fn drop(&mut self) {
        if let Some(stream) = self.0.take() {
            super::deferred::defer(move || drop(stream));
        }
    }
}

impl wit_gridfs::Guest for Component {
    type Bucket = BucketRes;
    type UploadStream = UploadStreamRes;
    type DownloadStream = DownloadStreamRes;
}

/// `{v: <value>}` to the value.
fn id(bytes: Vec<u8>) -> WitResult<RawBson> {
    let d = doc(bytes)?;
    match d.get("v") {
        Ok(Some(v)) => Ok(RawBson::from(v)),
        _ => Err(to_wit(crate::Error::invalid_argument(
            "a file id is the document {v: <id>}",
        ))),
    }
}

fn id_doc(v: &RawBson) -> Vec<u8> {
    rawdoc! { "v": v.clone() }.into_bytes()
}

fn options<'a>(o: &GridfsOptions<'a>) -> gridfs::GridfsOptions<'a> {
    gridfs::GridfsOptions {
        timeout_ms: o.timeout_ms,
        session: o.session.as_ref().map(|s| &s.get::<SessionRes>().0),
    }
}

fn upload_options<'a>(o: &UploadOptions<'a>) -> WitResult<gridfs::UploadOptions<'a>> {
    Ok(gridfs::UploadOptions {
        id: o.id.clone().map(id).transpose()?,
        chunk_size_bytes: o.chunk_size_bytes,
        metadata: opt_doc(o.metadata.clone())?,
        timeout_ms: o.timeout_ms,
        session: o.session.as_ref().map(|s| &s.get::<SessionRes>().0),
    })
}

impl GuestBucket for BucketRes {
    io! {
        fn upload_from_bytes(
            &self,
            filename: String,
            data: Vec<u8>,
            options: UploadOptions<'_>,
        ) -> WitResult<Vec<u8>> {
            let file_id = wrap(
                self.0
                    .upload_from_bytes(&filename, &data, upload_options(&options)?)
                    .await,
            )?;
            Ok(id_doc(&file_id))
        }
    }

    io! {
        fn open_upload_stream(
            &self,
            filename: String,
            options: UploadOptions<'_>,
        ) -> WitResult<UploadStream> {
            let stream = wrap(
                self.0
                    .open_upload_stream(&filename, upload_options(&options)?)
                    .await,
            )?;
            let file_id = id_doc(stream.id());
            Ok(UploadStream::new(UploadStreamRes(Slot::new(stream), file_id)))
        }
    }

    io! {
        fn download_to_bytes(&self, file_id: Vec<u8>, o: GridfsOptions<'_>) -> WitResult<Vec<u8>> {
            wrap(self.0.download_to_bytes(&id(file_id)?, &options(&o)).await)
        }
    }

    io! {
        fn open_download_stream(
            &self,
            file_id: Vec<u8>,
            o: GridfsOptions<'_>,
        ) -> WitResult<DownloadStream> {
            let stream = wrap(
                self.0
                    .open_download_stream(&id(file_id)?, &options(&o))
                    .await,
            )?;
            Ok(DownloadStream::new(DownloadStreamRes(Slot::new(stream))))
        }
    }

    io! {
        fn download_by_name(
            &self,
            filename: String,
            o: DownloadByNameOptions<'_>,
        ) -> WitResult<Vec<u8>> {
            let opts = gridfs::GridfsOptions {
                timeout_ms: o.timeout_ms,
                session: o.session.as_ref().map(|s| &s.get::<SessionRes>().0),
            };
            wrap(
                self.0
                    .download_by_name(&filename, o.revision.unwrap_or(-1), &opts)
                    .await,
            )
        }
    }

    io! {
        fn delete(&self, file_id: Vec<u8>, o: GridfsOptions<'_>) -> WitResult<()> {
            wrap(self.0.delete(&id(file_id)?, &options(&o)).await)
        }
    }

    io! {
        fn find(&self, filter: Vec<u8>, o: GridfsOptions<'_>) -> WitResult<WitCursor> {
            Ok(CursorRes::wit(wrap(
                self.0.find(doc(filter)?, &options(&o)).await,
            )?))
        }
    }

    io! {
        fn rename(
            &self,
            file_id: Vec<u8>,
            new_filename: String,
            o: GridfsOptions<'_>,
        ) -> WitResult<()> {
            wrap(
                self.0
                    .rename(&id(file_id)?, &new_filename, &options(&o))
                    .await,
            )
        }
    }

    io! {
        fn delete_by_name(&self, filename: String, o: GridfsOptions<'_>) -> WitResult<()> {
            wrap(self.0.delete_by_name(&filename, &options(&o)).await)
        }
    }

    io! {
        fn rename_by_name(
            &self,
            filename: String,
            new_filename: String,
            o: GridfsOptions<'_>,
        ) -> WitResult<()> {
            wrap(
                self.0
                    .rename_by_name(&filename, &new_filename, &options(&o))
                    .await,
            )
        }
    }

    io! {
        fn drop(&self, o: GridfsOptions<'_>) -> WitResult<()> {
            wrap(self.0.drop(&options(&o)).await)
        }
    }
}

impl GuestUploadStream for UploadStreamRes {
    fn id(&self) -> Vec<u8> {
        self.1.clone()
    }

    io! {
        fn write(&self, data: Vec<u8>) -> WitResult<()> {
            wrap(self.0.lease("upload stream")?.write(&data).await)
        }
    }

    io! {
        fn close(&self) -> WitResult<()> {
            wrap(self.0.lease("upload stream")?.close().await)
        }
    }

    io! {
        fn abort(&self) -> WitResult<()> {
            wrap(self.0.lease("upload stream")?.abort().await)
        }
    }
}

impl GuestDownloadStream for DownloadStreamRes {
    io! {
        fn read(&self, max: u32) -> WitResult<Vec<u8>> {
            wrap(self.0.lease("download stream")?.read(max as usize).await)
        }
    }

    io! {
        fn close(&self, timeout_ms: Option<u64>) {
            // Another call has the stream: it closes when dropped (no error to report).
            if let Ok(mut stream) = self.0.lease("download stream") {
                stream.close(timeout_ms).await
            }
        }
    }
}
