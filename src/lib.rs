//! mongo-wasi: a MongoDB driver for wasm32-wasip2 with one deadline per operation (CSOT).
//!
//! Layering, imports reading top to bottom (`cargo xtask layers` checks it):
//! `component` (the WIT export glue, behind the `component` feature) -> the
//! API objects (`Client`, `Database`, `Collection`, `Cursor`, change streams,
//! GridFS, client bulk write) -> the engine (`client::inner`, `executor`,
//! `topology`, `conn`, `cmap`, `session`, `operation`, `discovery`) ->
//! `runtime` (the only I/O, over WASI 0.2, or 0.3 with feature `p3`) -> the sans-I/O core (`wire`,
//! `uri`, `auth`, `dns`, `tls`, `handshake`, `sdam`, `csot`, `retryable`,
//! `concern`, `error`, ...), which unit-tests natively.

// A RefCell borrowed across an await panics once a second operation runs in
// the instance (WASI 0.3), and the panic ends every request in it.
#![deny(clippy::await_holding_refcell_ref)]

// The component's exports are sync (WASI 0.2's `block_on` in each); the 0.3
// runtime has no `block_on`. One face per build.
#[cfg(all(feature = "component", feature = "p3"))]
compile_error!(
    "features `component` (WASI 0.2 exports) and `p3` (WASI 0.3 runtime) exclude each other: \
     build p3 with --no-default-features --features p3"
);

pub mod auth;
pub mod backpressure;
mod bulk_write;
pub mod causal_consistency;
pub mod cmap;
pub mod csot;
pub mod deadline;
pub mod dns;
pub mod error;
pub mod handshake;
pub mod load_balancer;
pub mod logging;
pub mod monitoring;
pub mod object_id;
pub mod sdam;
pub mod tls;
pub mod uri;
pub mod wire;
pub mod write_result;

pub mod change_stream;
mod client;
mod collection;
pub mod concern;
mod conn;
mod cursor;
mod database;
mod discovery;
mod executor;
// Entry points for host-tests/fuzz; not an API, and not in the component.
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod gridfs;
pub(crate) mod operation;
pub mod retryable;
pub mod runtime;
mod session;
mod topology;
pub mod versioned_api;
pub mod warm;

// Export names such as `mongo-wasi:driver/client@0.2.0` only link into a
// wasm component; a native cdylib's linker rejects them.
// With `component-async` (which brings `p3`) the same module holds the
// `driver-async` world's glue instead: `async func` exports, no block_on.
#[cfg(all(
    any(feature = "component", feature = "component-async"),
    target_arch = "wasm32"
))]
mod component;

pub use bulk_write::{ClientBulkWriteOptions, ClientWriteModel};
pub use client::{Client, ClientOptions, PooledConnection};
pub use collection::{
    Collection, DeleteModel, FindOptions, Hint, OpOptions, ReadMode, ReturnDocument,
    SearchIndexModel, UpdateModel, UpdateSpec, WriteModel,
};
pub use concern::{ReadConcern, WriteConcern};
pub use cursor::{Batch, Cursor, PackedBatch, TimeoutMode};
pub use database::{Database, RunCommandOptions};
pub use deadline::Deadline;
pub use error::{Cause, Error, ErrorKind, Result, WriteConcernError, WriteError, WriteFailure};
pub use gridfs::{
    Bucket, BucketOptions, DownloadStream, GridfsOptions, UploadOptions, UploadStream,
};
pub use logging::{Component as LogComponent, Level as LogLevel, LogMessage, LogOptions};
/// The sync form of the API: `block_on(collection.find_one(..))` runs one
/// operation to its end on WASI 0.2, as the `driver` world's exports do.
/// Not on WASI 0.3 (feature `p3`): there the API is awaited in a task.
#[cfg(not(feature = "p3"))]
pub use runtime::block_on;
pub use session::{
    RunnerStep, Session, TransactionOptions, TransactionRunner, TransactionState,
    WithTransactionOptions,
};
pub use versioned_api::{ServerApi, ServerApiVersion};
pub use write_result::{BulkWriteResult, ClientBulkWriteResult, UpdateResult, VerboseResults};
