//! mongo-wasi: a MongoDB driver for wasm32-wasip2 with one deadline per operation (CSOT).
//!
//! Layering: a sans-I/O core (`wire`, `uri`, `handshake`, `auth`, `sdam`, `csot`, `cmap`, `deadline`,
//! `monitoring`) that unit-tests natively; one transport layer over WASI 0.2 (`runtime`);
//! the `executor` that applies selection, checkout and the deadline to every `operation`;
//! the public Rust API (`Client`, `Database`, `Collection`, `Cursor`, `Session`); and,
//! behind the `component` feature, the WIT export glue.

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

// Export names such as `mongo-wasi:driver/client@0.2.0` only link into a
// wasm component; a native cdylib's linker rejects them.
#[cfg(all(feature = "component", target_arch = "wasm32"))]
mod component;

pub use bulk_write::{
    ClientBulkWriteOptions, ClientBulkWriteResult, ClientWriteModel, VerboseResults,
};
pub use client::{Client, ClientOptions};
pub use collection::{
    BulkWriteResult, Collection, DeleteModel, FindOptions, Hint, OpOptions, ReadConcern, ReadMode,
    ReturnDocument, SearchIndexModel, UpdateModel, UpdateResult, UpdateSpec, WriteConcern,
    WriteModel,
};
pub use cursor::{Batch, Cursor, PackedBatch, TimeoutMode};
pub use database::{Database, RunCommandOptions};
pub use deadline::Deadline;
pub use error::{Cause, Error, ErrorKind, Result, WriteConcernError, WriteError, WriteFailure};
pub use gridfs::{
    Bucket, BucketOptions, DownloadStream, GridfsOptions, UploadOptions, UploadStream,
};
pub use logging::{Component as LogComponent, Level as LogLevel, LogMessage, LogOptions};
pub use session::{
    RunnerStep, Session, TransactionOptions, TransactionRunner, TransactionState,
    WithTransactionOptions,
};
pub use versioned_api::{ServerApi, ServerApiVersion};
