//! The WIT export glue: a thin skin over the Rust API. Each resource wraps
//! the Rust type; documents cross as raw BSON bytes, errors as the WIT record.

mod client;
mod collection;
mod database;
mod gridfs;
mod libc;
mod session;

wit_bindgen::generate!({ path: "wit", world: "driver" });

use self::exports::mongo_wasi::driver::types as wit;
use crate::error::{Error, ErrorKind};
use bson::RawDocumentBuf;

pub struct Component;

export!(Component);

pub(crate) type WitResult<T> = Result<T, wit::Error>;

pub(crate) fn to_wit(e: Error) -> wit::Error {
    let kind = match e.kind {
        ErrorKind::Timeout => wit::ErrorKind::Timeout,
        ErrorKind::Network => wit::ErrorKind::Network,
        ErrorKind::Server => wit::ErrorKind::Server,
        ErrorKind::ServerSelection => wit::ErrorKind::ServerSelection,
        ErrorKind::InvalidArgument => wit::ErrorKind::InvalidArgument,
        ErrorKind::NotImplemented => wit::ErrorKind::NotImplemented,
        ErrorKind::Protocol => wit::ErrorKind::Protocol,
        ErrorKind::Closed => wit::ErrorKind::Closed,
        ErrorKind::Authentication => wit::ErrorKind::Authentication,
        ErrorKind::AccessDenied => wit::ErrorKind::AccessDenied,
    };
    wit::Error {
        kind,
        code: e.code,
        code_name: e.code_name,
        labels: e.labels,
        message: e.message,
        cause: e.cause.map(|c| c.to_string()),
        reply: e.reply.map(|r| r.into_bytes()),
    }
}

/// Bytes from the caller as a document, checked element by element (one
/// level deep) so that malformed input is an error here, not later.
pub(crate) fn doc(bytes: Vec<u8>) -> WitResult<RawDocumentBuf> {
    let d = RawDocumentBuf::from_bytes(bytes)
        .map_err(|e| to_wit(Error::invalid_argument("malformed BSON document").with_cause(e)))?;
    for item in d.iter() {
        item.map_err(|e| to_wit(Error::invalid_argument("malformed BSON document").with_cause(e)))?;
    }
    Ok(d)
}

pub(crate) fn opt_doc(bytes: Option<Vec<u8>>) -> WitResult<Option<RawDocumentBuf>> {
    bytes.map(doc).transpose()
}

pub(crate) fn docs(list: Vec<Vec<u8>>) -> WitResult<Vec<RawDocumentBuf>> {
    list.into_iter().map(doc).collect()
}

/// An accessor's optional document: the document, or the error a handle
/// built from it must return (accessors themselves cannot fail).
pub(crate) fn option_doc(bytes: Option<Vec<u8>>) -> (Option<RawDocumentBuf>, Option<Error>) {
    match bytes.map(|b| RawDocumentBuf::from_bytes(b).map_err(Error::from)) {
        None => (None, None),
        Some(Ok(d)) if d.iter().all(|e| e.is_ok()) => (Some(d), None),
        Some(_) => (
            None,
            Some(Error::invalid_argument(
                "malformed read or write concern document",
            )),
        ),
    }
}

pub(crate) fn not_implemented<T>(what: &str) -> WitResult<T> {
    Err(to_wit(Error::not_implemented(what)))
}

/// Runs a Rust API call and converts its error.
pub(crate) fn wrap<T>(r: crate::Result<T>) -> WitResult<T> {
    r.map_err(to_wit)
}
