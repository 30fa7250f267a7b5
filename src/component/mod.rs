//! The WIT export glue: a thin skin over the Rust API. Each resource wraps
//! the Rust type; documents cross as raw BSON bytes, errors as the WIT record.
//!
//! One skin, two faces. By default (feature `component`) it exports world
//! `driver`: sync functions, each I/O body under WASI 0.2's `block_on`.
//! With `component-async` (WASI 0.3, runtime `p3`) it exports world
//! `driver-async`, the same interfaces with `async func` I/O methods: the
//! same bodies, awaited by the caller's task, many calls in flight in one
//! instance. `io!` writes each such method once for both; the generated
//! trait and record names are the same on both faces (`face`).

// The WIT error record (with 0.2.0's write errors and partial result) goes
// by value, as the generated trait signatures return it.
#![allow(clippy::result_large_err)]

#[macro_use]
mod face_macros {
    /// One export that does I/O, written once for both faces: on WASI 0.2
    /// (world `driver`) a sync fn that runs its body under
    /// `runtime::block_on`; on WASI 0.3 (`component-async`, world
    /// `driver-async`, where wit-bindgen binds the WIT `async func` as an
    /// `async fn`) the body itself, awaited by the caller's task.
    macro_rules! io {
        // `self` comes from the caller (`$this`): macro hygiene keeps the
        // macro's own `self` apart from the body's.
        (fn $name:ident(&$this:ident $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)? { $($body:tt)* }) => {
            #[cfg(not(feature = "component-async"))]
            fn $name(&$this $(, $arg: $ty)*) $(-> $ret)? {
                crate::runtime::block_on(async move { $($body)* })
            }
            #[cfg(feature = "component-async")]
            async fn $name(&$this $(, $arg: $ty)*) $(-> $ret)? {
                // In a task now: the drops destructors left here (deferred.rs).
                crate::component::deferred::run();
                $($body)*
            }
        };
    }
}

mod client;
mod collection;
mod database;
mod deferred;
mod gridfs;
mod libc;
mod session;
mod slot;

#[cfg(not(feature = "component-async"))]
wit_bindgen::generate!({ path: "wit", world: "driver" });

// The 0.3 face: world `driver-async` (wit/driver-async.wit), whose
// interfaces are the `-async` twins of `driver`'s with `types` shared.
#[cfg(feature = "component-async")]
wit_bindgen::generate!({ path: "wit", world: "driver-async" });

/// The exported interfaces under the names the glue uses on either face.
#[cfg(not(feature = "component-async"))]
pub(crate) use self::exports::mongo_wasi::driver as face;
#[cfg(feature = "component-async")]
pub(crate) mod face {
    pub use super::exports::mongo_wasi::driver::{
        client_async as client, collection_async as collection, cursor_async as cursor,
        database_async as database, gridfs_async as gridfs, session_async as session, types,
    };
}

use self::exports::mongo_wasi::driver::types as wit;
use crate::error::{Error, ErrorKind};
use bson::{cstr, RawBson, RawDocumentBuf};

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
        ErrorKind::DuplicateKey => wit::ErrorKind::DuplicateKey,
        ErrorKind::WriteConcern => wit::ErrorKind::WriteConcern,
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

/// The write errors and write concern errors of a failed bulk write, as WIT.
fn write_failures(
    f: &mut crate::WriteFailure,
) -> (Vec<wit::WriteError>, Vec<wit::WriteConcernError>) {
    let write_errors = std::mem::take(&mut f.write_errors)
        .into_iter()
        .map(|w| wit::WriteError {
            index: w.index,
            code: w.code,
            code_name: w.code_name,
            message: w.message,
            details: w.details.map(|d| d.into_bytes()),
        })
        .collect();
    let concern_errors = std::mem::take(&mut f.write_concern_errors)
        .into_iter()
        .map(|w| wit::WriteConcernError {
            code: w.code,
            code_name: w.code_name,
            message: w.message,
            details: w.details.map(|d| d.into_bytes()),
        })
        .collect();
    (write_errors, concern_errors)
}

/// How insert-many and a collection's bulk-write fail: only they carry the
/// write failure, so only their glue lowers it (each export lowers its own
/// error type, and a large one in every export cost ~4 KB of code apiece).
pub(crate) fn to_wit_bulk(mut e: Error) -> wit::BulkWriteError {
    let mut f = e.write_failure.take().map(|f| *f).unwrap_or_default();
    let (write_errors, write_concern_errors) = write_failures(&mut f);
    wit::BulkWriteError {
        error: to_wit(e),
        write_errors,
        write_concern_errors,
        partial_result: f.partial_result.map(bulk_write_result),
    }
}

/// How a client bulk-write fails (Bulk Write spec, ClientBulkWriteException).
pub(crate) fn to_wit_client_bulk(mut e: Error) -> wit::ClientBulkWriteError {
    let mut f = e.write_failure.take().map(|f| *f).unwrap_or_default();
    let (write_errors, write_concern_errors) = write_failures(&mut f);
    wit::ClientBulkWriteError {
        error: to_wit(e),
        write_errors,
        write_concern_errors,
        partial_result: f.client_partial_result.map(client_bulk_write_result),
    }
}

/// An argument refused before any write: no write failure to report.
impl From<wit::Error> for wit::BulkWriteError {
    fn from(error: wit::Error) -> Self {
        Self {
            error,
            write_errors: Vec::new(),
            write_concern_errors: Vec::new(),
            partial_result: None,
        }
    }
}

impl From<wit::Error> for wit::ClientBulkWriteError {
    fn from(error: wit::Error) -> Self {
        Self {
            error,
            write_errors: Vec::new(),
            write_concern_errors: Vec::new(),
            partial_result: None,
        }
    }
}

/// One BSON value as the WIT `value` shape, `{v: <value>}`.
pub(crate) fn to_value(v: RawBson) -> Vec<u8> {
    match v {
        // The new `_id` of every inserted document without one: written
        // whole at its exact size (`rawdoc!` grows its buffer twice).
        RawBson::ObjectId(id) => crate::wire::raw::value_doc(0x07, &id.bytes()),
        v => bson::rawdoc! { "v": v }.into_bytes(),
    }
}

/// A WIT `value` (`{v: <value>}`) from the caller: the value, or
/// `invalid-argument` when it is not that shape.
pub(crate) fn value(bytes: Vec<u8>) -> WitResult<RawBson> {
    let d = doc(bytes)?;
    match d.get("v") {
        Ok(Some(v)) => Ok(RawBson::from(v)),
        _ => Err(to_wit(Error::invalid_argument(
            "a value must be the document {v: <value>}",
        ))),
    }
}

pub(crate) fn bulk_write_result(r: crate::BulkWriteResult) -> wit::BulkWriteResult {
    let ids = |list: Vec<(u32, RawBson)>| {
        list.into_iter()
            .map(|(index, id)| wit::IndexedId {
                index,
                id: to_value(id),
            })
            .collect()
    };
    wit::BulkWriteResult {
        inserted_count: r.inserted_count,
        matched_count: r.matched_count,
        modified_count: r.modified_count,
        deleted_count: r.deleted_count,
        upserted_count: r.upserted_count,
        inserted_ids: ids(r.inserted_ids),
        upserted_ids: ids(r.upserted_ids),
    }
}

pub(crate) fn client_bulk_write_result(
    r: crate::ClientBulkWriteResult,
) -> wit::ClientBulkWriteResult {
    let verbose_results = r.verbose.map(|v| wit::ClientVerboseResults {
        insert_results: v
            .insert_results
            .into_iter()
            .map(|(index, id)| wit::IndexedId {
                index,
                id: to_value(id),
            })
            .collect(),
        update_results: v
            .update_results
            .into_iter()
            .map(|(index, u)| wit::ClientUpdateResult {
                index,
                matched_count: u.matched,
                modified_count: u.modified,
                upserted_id: u.upserted_id.map(to_value),
            })
            .collect(),
        delete_results: v
            .delete_results
            .into_iter()
            .map(|(index, n)| wit::ClientDeleteResult {
                index,
                deleted_count: n,
            })
            .collect(),
    });
    wit::ClientBulkWriteResult {
        acknowledged: r.acknowledged,
        inserted_count: r.inserted_count,
        upserted_count: r.upserted_count,
        matched_count: r.matched_count,
        modified_count: r.modified_count,
        deleted_count: r.deleted_count,
        verbose_results,
    }
}

/// A WIT read preference as the driver's: the same validation as one
/// given as a document (`ReadPreference::from_document`), so a tag whose
/// value is not a string is refused in one place.
pub(crate) fn read_preference(
    p: &wit::ReadPreference,
) -> WitResult<crate::sdam::selection::ReadPreference> {
    let mut d = RawDocumentBuf::new();
    d.append(cstr!("mode"), read_mode(p.mode).as_str());
    if !p.tag_sets.is_empty() {
        let mut sets = bson::RawArrayBuf::new();
        for set in &p.tag_sets {
            sets.push(doc(set.clone())?);
        }
        d.append(cstr!("tags"), sets);
    }
    if let Some(s) = p.max_staleness_seconds {
        d.append(cstr!("maxStalenessSeconds"), i64::from(s));
    }
    crate::sdam::selection::ReadPreference::from_document(&d).map_err(|e| {
        to_wit(Error::invalid_argument(format!(
            "invalid read preference: {e}"
        )))
    })
}

pub(crate) fn read_mode(m: wit::ReadMode) -> crate::ReadMode {
    match m {
        wit::ReadMode::Primary => crate::ReadMode::Primary,
        wit::ReadMode::PrimaryPreferred => crate::ReadMode::PrimaryPreferred,
        wit::ReadMode::Secondary => crate::ReadMode::Secondary,
        wit::ReadMode::SecondaryPreferred => crate::ReadMode::SecondaryPreferred,
        wit::ReadMode::Nearest => crate::ReadMode::Nearest,
    }
}

pub(crate) fn read_concern(c: wit::ReadConcern) -> crate::ReadConcern {
    crate::ReadConcern { level: c.level }
}

pub(crate) fn write_concern(c: wit::WriteConcern) -> crate::WriteConcern {
    crate::WriteConcern {
        w: c.w.map(|w| match w {
            wit::Acknowledgement::Nodes(n) => crate::uri::W::Nodes(n),
            wit::Acknowledgement::Majority => crate::uri::W::Majority,
            wit::Acknowledgement::Tag(t) => crate::uri::W::Tag(t),
        }),
        journal: c.journal,
        wtimeout_ms: c.wtimeout_ms,
    }
}

/// Bytes from the caller as a document, checked in full (every element,
/// nested ones too, as a server reply is: `wire::raw::walk`) so that
/// malformed input is an error here, not later.
pub(crate) fn doc(bytes: Vec<u8>) -> WitResult<RawDocumentBuf> {
    let malformed = |what: &str| {
        to_wit(Error::invalid_argument(format!(
            "malformed BSON document: {what}"
        )))
    };
    crate::wire::raw::walk(&bytes).map_err(malformed)?;
    RawDocumentBuf::from_bytes(bytes).map_err(|e| malformed(&e.to_string()))
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

/// A handle's read preference (`{mode, tags, maxStalenessSeconds}`), or
/// the error every operation of the handle then returns.
pub(crate) fn option_read_preference(
    bytes: Option<Vec<u8>>,
) -> (
    Option<crate::sdam::selection::ReadPreference>,
    Option<Error>,
) {
    let invalid = |why: String| Error::invalid_argument(format!("invalid read preference: {why}"));
    match bytes.map(|b| RawDocumentBuf::from_bytes(b).map_err(|e| e.to_string())) {
        None => (None, None),
        Some(Err(e)) => (None, Some(invalid(e))),
        Some(Ok(d)) => match crate::sdam::selection::ReadPreference::from_document(&d) {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(invalid(e))),
        },
    }
}

/// Runs a Rust API call and converts its error.
pub(crate) fn wrap<T>(r: crate::Result<T>) -> WitResult<T> {
    r.map_err(to_wit)
}
