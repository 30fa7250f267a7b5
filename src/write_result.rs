//! What a write reports, as plain values: the CRUD spec's UpdateResult and
//! BulkWriteResult, and the Bulk Write spec's client results. The API
//! objects return them; a failed write's error carries what it wrote
//! (`error::WriteFailure`), so they sit below both.

use bson::RawBson;

/// The result of an update (CRUD spec, UpdateResult).
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateResult {
    pub matched: i64,
    pub modified: i64,
    /// The `_id` of the upserted document, when the update upserted.
    pub upserted_id: Option<RawBson>,
}

/// The result of a bulk write (CRUD spec, BulkWriteResult).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BulkWriteResult {
    pub inserted_count: i64,
    pub matched_count: i64,
    pub modified_count: i64,
    pub deleted_count: i64,
    pub upserted_count: i64,
    /// (model index, `_id`) of each applied insert.
    pub inserted_ids: Vec<(u32, RawBson)>,
    /// (model index, `_id`) of each upsert.
    pub upserted_ids: Vec<(u32, RawBson)>,
}

/// The per-model results of a verbose client bulk write, by model index.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VerboseResults {
    /// (index, `_id`) of each insert the server confirmed.
    pub insert_results: Vec<(u32, RawBson)>,
    pub update_results: Vec<(u32, UpdateResult)>,
    /// (index, documents deleted).
    pub delete_results: Vec<(u32, i64)>,
}

/// The spec's BulkWriteResult for a client bulk write.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClientBulkWriteResult {
    /// False for an unacknowledged (w:0) write: nothing else is known.
    pub acknowledged: bool,
    pub inserted_count: i64,
    pub upserted_count: i64,
    pub matched_count: i64,
    pub modified_count: i64,
    pub deleted_count: i64,
    /// Set when `verbose_results` was asked for.
    pub verbose: Option<VerboseResults>,
}
