//! Executing one `operation`: dispatch to the entity's WIT methods (or to a
//! test-runner operation), then `expectResult`, `expectError`, `saveResultAsEntity`.

mod bucket;
pub(crate) mod client;
pub(crate) mod collection;
pub mod cursor;
mod database;
mod runner;
mod session;
#[cfg(feature = "async-face")]
pub(crate) mod threads;

use super::args::Args;
use super::entities::Entity;
use super::errors;
use super::matching;
use super::testcase::TestRun;
use super::{Fail, Step};
use crate::bindings::exports::mongo_wasi::driver::types::{
    BulkWriteError, BulkWriteResult, ClientBulkWriteError, ClientBulkWriteResult,
    Error as WitError, ErrorKind, WriteConcernError, WriteError,
};
use bson::{Bson, Document};
use wasmtime::component::ResourceAny;

/// What a driver operation returned.
pub enum Output {
    None,
    Value(Bson),
    /// An iterable's documents, each matched as a root document.
    Documents(Vec<Document>),
    /// A cursor, change stream or collection, for `saveResultAsEntity`.
    Entity(Entity),
}

/// The driver's answer: a result, or the error it returned.
pub type OpResult = Result<Output, OpError>;

/// A failed operation: the WIT error and, from insert-many and the bulk
/// writes (whose WIT error types carry them), what the writes did.
#[derive(Clone, Debug)]
pub struct OpError {
    pub error: WitError,
    pub write_errors: Vec<WriteError>,
    pub write_concern_errors: Vec<WriteConcernError>,
    pub partial_result: Option<BulkWriteResult>,
    pub client_partial_result: Option<ClientBulkWriteResult>,
}

impl std::ops::Deref for OpError {
    type Target = WitError;
    fn deref(&self) -> &WitError {
        &self.error
    }
}

impl From<WitError> for OpError {
    fn from(error: WitError) -> Self {
        OpError {
            error,
            write_errors: Vec::new(),
            write_concern_errors: Vec::new(),
            partial_result: None,
            client_partial_result: None,
        }
    }
}

impl From<BulkWriteError> for OpError {
    fn from(e: BulkWriteError) -> Self {
        OpError {
            partial_result: e.partial_result,
            write_errors: e.write_errors,
            write_concern_errors: e.write_concern_errors,
            ..e.error.into()
        }
    }
}

impl From<ClientBulkWriteError> for OpError {
    fn from(e: ClientBulkWriteError) -> Self {
        OpError {
            client_partial_result: e.partial_result,
            write_errors: e.write_errors,
            write_concern_errors: e.write_concern_errors,
            ..e.error.into()
        }
    }
}

const OP_KEYS: &[&str] = &[
    "name",
    "object",
    "arguments",
    "expectResult",
    "expectError",
    "saveResultAsEntity",
    "ignoreResultAndError",
];

impl TestRun {
    /// Runs one operation and its assertions.
    pub fn operation(&mut self, op: &Document) -> Step<()> {
        if let Some(k) = op.keys().find(|k| !OP_KEYS.contains(&k.as_str())) {
            return Err(Fail(format!("unknown operation field {k:?}")));
        }
        let name = op
            .get_str("name")
            .map_err(|_| Fail("operation without a name".into()))?;
        let object = op
            .get_str("object")
            .map_err(|_| Fail(format!("{name}: operation without an object")))?;
        let args = match op.get("arguments") {
            None => None,
            Some(Bson::Document(d)) => Some(d),
            Some(_) => return Err(Fail(format!("{name}: arguments is not a document"))),
        };
        // A failure (or a trap, after which the instance cannot be entered again) ends
        // the test before the events are drained.
        if object == "testRunner" {
            self.runner_operation(name, args)?;
            return self.drain_events();
        }
        let result = self.entity_operation(object, name, Args::new(name, args))?;
        self.drain_events()?;
        self.check_result(name, op, result)
    }

    /// An operation of a `withTransaction` callback: like `operation`, but
    /// an error, expected or not, is returned for the callback to raise.
    pub(super) fn callback_operation(&mut self, op: &Document) -> Step<Option<WitError>> {
        let name = op
            .get_str("name")
            .map_err(|_| Fail("operation without a name".into()))?;
        let object = op
            .get_str("object")
            .map_err(|_| Fail(format!("{name}: operation without an object")))?;
        if object == "testRunner" {
            self.operation(op)?;
            return Ok(None);
        }
        if let Some(k) = op.keys().find(|k| !OP_KEYS.contains(&k.as_str())) {
            return Err(Fail(format!("unknown operation field {k:?}")));
        }
        let args = match op.get("arguments") {
            None => None,
            Some(Bson::Document(d)) => Some(d),
            Some(_) => return Err(Fail(format!("{name}: arguments is not a document"))),
        };
        let result = self.entity_operation(object, name, Args::new(name, args))?;
        self.drain_events()?;
        match result {
            Err(e) if e.kind != ErrorKind::NotImplemented && !op.contains_key("expectError") => {
                Ok(Some(e.error))
            }
            result => {
                let error = result.as_ref().err().map(|e| e.error.clone());
                self.check_result(name, op, result)?;
                Ok(error)
            }
        }
    }

    fn entity_operation(&mut self, object: &str, name: &str, args: Args) -> Step<OpResult> {
        let kind = match self.entities.get(object) {
            None => return Err(Fail(format!("{name}: no entity named {object:?}"))),
            Some(Entity::Client(_)) => "client",
            Some(Entity::Database(_)) => "database",
            Some(Entity::Collection(_)) => "collection",
            Some(Entity::Session(_)) => "session",
            Some(Entity::Bucket(_)) => "bucket",
            Some(Entity::Cursor(_)) => "cursor",
            Some(Entity::Value(_)) => {
                return Err(Fail(format!("{name}: entity {object:?} is a BSON value")))
            }
            Some(Entity::Thread) => {
                return Err(Fail(format!("{name}: entity {object:?} is a thread")))
            }
        };
        match kind {
            "client" => self.client_operation(object, name, args),
            "database" => self.database_operation(object, name, args),
            "collection" => self.collection_operation(object, name, args),
            "session" => self.session_operation(object, name, args),
            "bucket" => self.bucket_operation(object, name, args),
            _ => self.cursor_operation(object, name, args),
        }
    }

    fn check_result(&mut self, name: &str, op: &Document, result: OpResult) -> Step<()> {
        if op.get_bool("ignoreResultAndError").unwrap_or(false) {
            return Ok(());
        }
        let expect_error = match op.get("expectError") {
            None => None,
            Some(Bson::Document(d)) => Some(d),
            Some(_) => return Err(Fail(format!("{name}: expectError is not a document"))),
        };
        let output = match (expect_error, result) {
            // A feature the driver lacks never is the error a test expects.
            (_, Err(e)) if e.kind == ErrorKind::NotImplemented => {
                return Err(Fail(format!("{name}: {}", errors::describe(&e))));
            }
            (Some(expected), Err(e)) => {
                return errors::check(expected, &e, &self.entities)
                    .map_err(|m| Fail(format!("{name}: {m}")))
            }
            (Some(_), Ok(out)) => {
                return Err(Fail(format!(
                    "{name}: expected an error, got {}",
                    describe(&out)
                )))
            }
            (None, Err(e)) => {
                return Err(Fail(format!("{name}: {}", errors::describe(&e))));
            }
            (None, Ok(out)) => out,
        };
        if let Some(expected) = op.get("expectResult") {
            let found = match &output {
                Output::None => matching::matches(expected, None, true, &self.entities),
                Output::Value(v) => matching::matches(expected, Some(v), true, &self.entities),
                Output::Documents(docs) => {
                    let docs: Vec<Bson> = docs.iter().cloned().map(Bson::Document).collect();
                    matching::matches_documents(expected, &docs, &self.entities)
                }
                Output::Entity(_) => Err("the result is an entity, not a value".into()),
            };
            found.map_err(|m| Fail(format!("{name}: result {m}")))?;
        }
        if let Some(save) = op.get("saveResultAsEntity") {
            let save = save
                .as_str()
                .ok_or_else(|| Fail(format!("{name}: saveResultAsEntity is not a string")))?;
            let entity = match output {
                Output::None => return Err(Fail(format!("{name}: no result to save as {save}"))),
                Output::Value(v) => Entity::Value(v),
                Output::Documents(d) => {
                    Entity::Value(Bson::Array(d.into_iter().map(Bson::Document).collect()))
                }
                Output::Entity(e) => e,
            };
            self.entities.insert(save, entity)?;
        }
        Ok(())
    }

    /// The `session` argument, resolved to its WIT resource.
    pub(super) fn session_arg(&self, args: &mut Args) -> Step<Option<ResourceAny>> {
        match args.string("session")? {
            None => Ok(None),
            Some(name) => Ok(Some(self.entities.session(&name)?.handle)),
        }
    }
}

fn describe(out: &Output) -> String {
    match out {
        Output::None => "no result".into(),
        Output::Value(v) => matching::show(v),
        Output::Documents(d) => format!("{} documents", d.len()),
        Output::Entity(_) => "an entity".into(),
    }
}

/// A WIT document (raw BSON bytes) decoded; a malformed one fails the test.
pub fn decode(bytes: &[u8], what: &str) -> Step<Document> {
    Document::from_reader(bytes).map_err(|e| Fail(format!("{what} is not BSON: {e}")))
}

/// The WIT's `{v: <value>}` wrapper around a single value (ids).
pub fn unwrap_v(bytes: &[u8], what: &str) -> Step<Bson> {
    let mut d = decode(bytes, what)?;
    d.remove("v")
        .ok_or_else(|| Fail(format!("{what} has no `v` field")))
}

/// Converts a WIT call's inner result.
pub fn output<T, E: Into<OpError>>(
    r: Result<T, E>,
    f: impl FnOnce(T) -> Step<Output>,
) -> Step<OpResult> {
    match r {
        Ok(v) => f(v).map(Ok),
        Err(e) => Ok(Err(e.into())),
    }
}
