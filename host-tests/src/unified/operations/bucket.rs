//! GridFS bucket operations on the WIT `bucket`. Ids cross as `{v: <id>}`.

use super::{output, unwrap_v, OpResult, Output};
use crate::bindings::exports::mongo_wasi::driver::gridfs::{
    DownloadByNameOptions, GridfsOptions, UploadOptions,
};
use crate::unified::args::{bytes, Args};
use crate::unified::matching::decode_hex;
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use crate::Wait;
use bson::{doc, spec::BinarySubtype, Binary, Bson};
use wasmtime::component::ResourceAny;

/// A file id wrapped for the WIT.
fn id(args: &mut Args) -> Step<Vec<u8>> {
    let id = args
        .take("id")
        .ok_or_else(|| Fail("missing argument id".into()))?;
    bytes(&doc! { "v": id })
}

fn gridfs_options(
    args: Args,
    session: Option<ResourceAny>,
    timeout_ms: Option<u64>,
) -> Step<GridfsOptions> {
    args.done()?;
    Ok(GridfsOptions {
        timeout_ms,
        session,
    })
}

fn data(bytes: Vec<u8>) -> Output {
    Output::Value(Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    }))
}

impl TestRun {
    pub(super) fn bucket_operation(
        &mut self,
        object: &str,
        name: &str,
        mut args: Args,
    ) -> Step<OpResult> {
        let bucket = *self.entities.bucket(object)?;
        let session = self.session_arg(&mut args)?;
        let timeout_ms = args.timeout()?;
        let g = &mut self.guest;
        let api = g.driver.mongo_wasi_driver_gridfs().bucket();
        let s = &mut g.store;
        match name {
            "upload" => {
                let filename = args.req_string("filename")?;
                let source = args.req_doc("source")?;
                let hex = source
                    .get_str("$$hexBytes")
                    .map_err(|_| Fail("upload: source needs {$$hexBytes: <string>}".into()))?;
                let content = decode_hex(hex).map_err(Fail)?;
                let id = match args.take("id") {
                    Some(v) => Some(bytes(&doc! { "v": v })?),
                    None => None,
                };
                let chunk_size_bytes = args.u32("chunkSizeBytes")?;
                let metadata = args.doc("metadata")?.map(|d| bytes(&d)).transpose()?;
                // MD5 is gone from the GridFS spec: a driver computes none, so disabling it is moot.
                args.bool("disableMD5")?;
                args.done()?;
                let opts = UploadOptions {
                    id,
                    chunk_size_bytes,
                    metadata,
                    timeout_ms,
                    session,
                };
                let r = api
                    .call_upload_from_bytes(s, bucket, &filename, &content, &opts)
                    .w()?;
                output(r, |id| Ok(Output::Value(unwrap_v(&id, "the file id")?)))
            }
            "download" => {
                let id = id(&mut args)?;
                let r = api
                    .call_download_to_bytes(
                        s,
                        bucket,
                        &id,
                        gridfs_options(args, session, timeout_ms)?,
                    )
                    .w()?;
                output(r, |b| Ok(data(b)))
            }
            "downloadByName" => {
                let filename = args.req_string("filename")?;
                let revision = match args.int("revision")? {
                    None => None,
                    Some(r) => Some(
                        i32::try_from(r)
                            .map_err(|_| Fail(format!("revision {r} does not fit s32")))?,
                    ),
                };
                args.done()?;
                let opts = DownloadByNameOptions {
                    revision,
                    timeout_ms,
                    session,
                };
                let r = api.call_download_by_name(s, bucket, &filename, opts).w()?;
                output(r, |b| Ok(data(b)))
            }
            "delete" => {
                let id = id(&mut args)?;
                let r = api
                    .call_delete(s, bucket, &id, gridfs_options(args, session, timeout_ms)?)
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "rename" => {
                let id = id(&mut args)?;
                let new_name = args.req_string("newFilename")?;
                let r = api
                    .call_rename(
                        s,
                        bucket,
                        &id,
                        &new_name,
                        gridfs_options(args, session, timeout_ms)?,
                    )
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "deleteByName" => {
                let name = args.req_string("filename")?;
                let opts = gridfs_options(args, session, timeout_ms)?;
                let r = api.call_delete_by_name(s, bucket, &name, opts).w()?;
                output(r, |()| Ok(Output::None))
            }
            "renameByName" => {
                let name = args.req_string("filename")?;
                let new_name = args.req_string("newFilename")?;
                let opts = gridfs_options(args, session, timeout_ms)?;
                let r = api
                    .call_rename_by_name(s, bucket, &name, &new_name, opts)
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "drop" => {
                let r = api
                    .call_drop(s, bucket, gridfs_options(args, session, timeout_ms)?)
                    .w()?;
                output(r, |()| Ok(Output::None))
            }
            "find" => {
                let filter = bytes(&args.doc("filter")?.unwrap_or_default())?;
                let r = api
                    .call_find(
                        s,
                        bucket,
                        &filter,
                        gridfs_options(args, session, timeout_ms)?,
                    )
                    .w()?;
                super::cursor::documents(g, r)
            }
            other => Err(Fail(format!("bucket.{other}: no WIT method for it"))),
        }
    }
}
