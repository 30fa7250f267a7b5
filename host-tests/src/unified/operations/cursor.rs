//! Cursors: full iteration for find/aggregate-like operations, and the cursor
//! entity operations (`iterateUntilDocumentOrError`, `iterateOnce`, `close`).

use super::{decode, output, OpResult, Output};
use crate::bindings::exports::mongo_wasi::driver::types::Error as WitError;
use crate::guest::Guest;
use crate::unified::args::Args;
use crate::unified::entities::{CursorEntity, Entity};
use crate::unified::testcase::TestRun;
use crate::unified::{Fail, Step};
use crate::Wait;
use bson::Document;
use std::collections::VecDeque;
use wasmtime::component::ResourceAny;

/// More batches than any spec test needs: a cursor that never ends fails instead of hanging.
const MAX_BATCHES: usize = 10_000;
/// How many empty getMores `iterateUntilDocumentOrError` tries (tailable cursors, change streams).
const MAX_EMPTY: usize = 1_000;

/// Every document of a cursor, then drops the cursor resource.
pub fn drain(guest: &mut Guest, cursor: ResourceAny) -> Step<Result<Vec<Document>, WitError>> {
    let mut docs = Vec::new();
    let api = guest.driver.mongo_wasi_driver_cursor().cursor();
    for _ in 0..MAX_BATCHES {
        let batch = match api.call_next_batch(&mut guest.store, cursor).w()? {
            Ok(b) => b,
            Err(e) => {
                // On the WASI 0.3 face a destructor cannot do I/O (it runs outside
                // any task), so the killCursors a drop sends on 0.2 waits for the
                // next async call: close explicitly, as a 0.3 caller should.
                if cfg!(feature = "async-face") {
                    let _ = api.call_close(&mut guest.store, cursor, None).w();
                }
                let _ = crate::drop_resource(cursor, &mut guest.store);
                return Ok(Err(e));
            }
        };
        for d in &batch.documents {
            docs.push(decode(d, "a cursor document")?);
        }
        if batch.exhausted {
            crate::drop_resource(cursor, &mut guest.store)?;
            return Ok(Ok(docs));
        }
    }
    Err(Fail(format!(
        "a cursor was not exhausted after {MAX_BATCHES} batches"
    )))
}

/// A cursor result as an iterable's documents.
pub fn documents(guest: &mut Guest, r: Result<ResourceAny, WitError>) -> Step<OpResult> {
    match r {
        Ok(c) => Ok(drain(guest, c)?.map(Output::Documents).map_err(Into::into)),
        Err(e) => Ok(Err(e.into())),
    }
}

/// A cursor result kept open as an entity (createFindCursor and friends).
pub fn entity(r: Result<ResourceAny, WitError>) -> Step<OpResult> {
    output(r, |handle| {
        Ok(Output::Entity(Entity::Cursor(CursorEntity {
            handle,
            buffer: VecDeque::new(),
            batches: 0,
            exhausted: false,
        })))
    })
}

/// One `next-batch` into the entity's buffer.
fn fetch(guest: &mut Guest, c: &mut CursorEntity) -> Step<Result<(), WitError>> {
    let api = guest.driver.mongo_wasi_driver_cursor().cursor();
    let batch = match api.call_next_batch(&mut guest.store, c.handle).w()? {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    c.batches += 1;
    c.exhausted = batch.exhausted;
    for d in &batch.documents {
        c.buffer.push_back(decode(d, "a cursor document")?);
    }
    Ok(Ok(()))
}

impl TestRun {
    pub(super) fn cursor_operation(
        &mut self,
        object: &str,
        name: &str,
        mut args: Args,
    ) -> Step<OpResult> {
        let guest = &mut self.guest;
        let c = self.entities.cursor_mut(object)?;
        match name {
            "iterateUntilDocumentOrError" => {
                args.done()?;
                let mut empty = 0;
                while c.buffer.is_empty() {
                    if c.exhausted {
                        return Err(Fail(
                            "iterateUntilDocumentOrError: the cursor is exhausted".into(),
                        ));
                    }
                    if let Err(e) = fetch(guest, c)? {
                        return Ok(Err(e.into()));
                    }
                    empty += 1;
                    if empty > MAX_EMPTY {
                        return Err(Fail(format!(
                            "iterateUntilDocumentOrError: no document after {MAX_EMPTY} batches"
                        )));
                    }
                }
                Ok(Ok(c
                    .buffer
                    .pop_front()
                    .map_or(Output::None, |d| Output::Value(d.into()))))
            }
            "iterateOnce" => {
                args.done()?;
                if c.buffer.is_empty() && !c.exhausted {
                    if let Err(e) = fetch(guest, c)? {
                        return Ok(Err(e.into()));
                    }
                    // The first next-batch hands over the initial batch without a round
                    // trip; an empty one still owes the getMore the spec asks for.
                    if c.batches == 1 && c.buffer.is_empty() && !c.exhausted {
                        if let Err(e) = fetch(guest, c)? {
                            return Ok(Err(e.into()));
                        }
                    }
                }
                Ok(Ok(c
                    .buffer
                    .pop_front()
                    .map_or(Output::None, |d| Output::Value(d.into()))))
            }
            "close" => {
                let timeout = args.timeout()?;
                args.done()?;
                // Errors from killCursors are suppressed, as the spec says.
                let api = guest.driver.mongo_wasi_driver_cursor().cursor();
                let _ = api.call_close(&mut guest.store, c.handle, timeout).w()?;
                c.buffer.clear();
                c.exhausted = true;
                Ok(Ok(Output::None))
            }
            other => Err(Fail(format!("unsupported cursor operation {other}"))),
        }
    }
}
