//! GridFS: declared in the WIT surface; the bodies come with the GridFS work.

use super::exports::mongo_wasi::driver::cursor::Cursor as WitCursor;
use super::exports::mongo_wasi::driver::gridfs::{
    self as wit_gridfs, DownloadByNameOptions, DownloadStream, GridfsOptions, GuestBucket,
    GuestDownloadStream, GuestUploadStream, UploadOptions, UploadStream,
};
use super::{not_implemented, Component, WitResult};

pub struct BucketRes;
pub struct UploadStreamRes;
pub struct DownloadStreamRes;

impl wit_gridfs::Guest for Component {
    type Bucket = BucketRes;
    type UploadStream = UploadStreamRes;
    type DownloadStream = DownloadStreamRes;
}

const GRIDFS: &str = "GridFS";

impl GuestBucket for BucketRes {
    fn upload_from_bytes(&self, _: String, _: Vec<u8>, _: UploadOptions<'_>) -> WitResult<Vec<u8>> {
        not_implemented(GRIDFS)
    }
    fn open_upload_stream(&self, _: String, _: UploadOptions<'_>) -> WitResult<UploadStream> {
        not_implemented(GRIDFS)
    }
    fn download_to_bytes(&self, _: Vec<u8>, _: GridfsOptions<'_>) -> WitResult<Vec<u8>> {
        not_implemented(GRIDFS)
    }
    fn open_download_stream(&self, _: Vec<u8>, _: GridfsOptions<'_>) -> WitResult<DownloadStream> {
        not_implemented(GRIDFS)
    }
    fn download_by_name(&self, _: String, _: DownloadByNameOptions<'_>) -> WitResult<Vec<u8>> {
        not_implemented(GRIDFS)
    }
    fn delete(&self, _: Vec<u8>, _: GridfsOptions<'_>) -> WitResult<()> {
        not_implemented(GRIDFS)
    }
    fn find(&self, _: Vec<u8>, _: GridfsOptions<'_>) -> WitResult<WitCursor> {
        not_implemented(GRIDFS)
    }
    fn rename(&self, _: Vec<u8>, _: String, _: GridfsOptions<'_>) -> WitResult<()> {
        not_implemented(GRIDFS)
    }
    fn drop(&self, _: GridfsOptions<'_>) -> WitResult<()> {
        not_implemented(GRIDFS)
    }
}

impl GuestUploadStream for UploadStreamRes {
    fn id(&self) -> Vec<u8> {
        Vec::new()
    }
    fn write(&self, _: Vec<u8>) -> WitResult<()> {
        not_implemented(GRIDFS)
    }
    fn close(&self) -> WitResult<()> {
        not_implemented(GRIDFS)
    }
    fn abort(&self) -> WitResult<()> {
        not_implemented(GRIDFS)
    }
}

impl GuestDownloadStream for DownloadStreamRes {
    fn read(&self, _: u32) -> WitResult<Vec<u8>> {
        not_implemented(GRIDFS)
    }
    fn close(&self) {}
}
