//! Change streams (Change Streams spec): `watch` opens an aggregate whose
//! first stage is `$changeStream`; the cursor keeps the resume token of what
//! it handed out, and on a resumable error opens the stream again from it.
//! The pure parts (stage, token, resumability) are here; the cursor drives them.

use crate::client::Client;
use crate::collection::OpOptions;
use crate::cursor::{Cursor, CursorSettings, TimeoutMode};
use crate::error::{Error, Result};
use crate::operation::{CursorCommand, RunCommand};
use bson::{cstr, rawdoc, RawArrayBuf, RawBson, RawDocument, RawDocumentBuf};

/// Server names of `$changeStream` stage options (everything else in the
/// caller's options goes on the aggregate command).
const STAGE_OPTIONS: &[&str] = &[
    "fullDocument",
    "fullDocumentBeforeChange",
    "showExpandedEvents",
    "allChangesForCluster",
];

#[derive(Debug, Clone, Default)]
pub struct ChangeStreamOptions {
    stage: RawDocumentBuf,
    resume_after: Option<RawDocumentBuf>,
    start_after: Option<RawDocumentBuf>,
    start_at_operation_time: Option<RawBson>,
    pub max_await_ms: Option<u64>,
    pub batch_size: Option<u32>,
    command_extra: RawDocumentBuf,
}

impl ChangeStreamOptions {
    /// Splits options given by their server names (`fullDocument`,
    /// `resumeAfter`, `maxAwaitTimeMS`, `comment`...), under the stream's timeoutMS.
    pub fn from_extra(
        extra: Option<&RawDocument>,
        batch_size: Option<u32>,
        timeout_ms: Option<u64>,
    ) -> Result<Self> {
        let mut o = ChangeStreamOptions {
            batch_size,
            ..Default::default()
        };
        let Some(extra) = extra else { return Ok(o) };
        for item in extra {
            let (key, value) = item?;
            match key.as_str() {
                "resumeAfter" => o.resume_after = value.as_document().map(|d| d.to_owned()),
                "startAfter" => o.start_after = value.as_document().map(|d| d.to_owned()),
                "startAtOperationTime" => o.start_at_operation_time = Some(value.into()),
                "maxAwaitTimeMS" => {
                    o.max_await_ms = crate::csot::max_await_ms(Some(value), timeout_ms)?
                }
                "batchSize" => {}
                k if STAGE_OPTIONS.contains(&k) => o.stage.append(key, value),
                _ => o.command_extra.append(key, value),
            }
        }
        Ok(o)
    }
}

/// What a change stream needs to open itself again.
#[derive(Debug, Clone)]
pub struct StreamState {
    /// The collection name, or 1 for a database or the whole client.
    pub target: RawBson,
    pub pipeline: Vec<RawDocumentBuf>,
    pub options: ChangeStreamOptions,
    /// `startAfter` applies only until the stream has handed out a change.
    pub returned_any: bool,
    /// The first call has handed over the aggregate's own batch.
    pub initial_returned: bool,
}

impl StreamState {
    /// The aggregate's `comment`, which its getMores carry too (4.4+).
    pub fn comment(&self) -> Option<RawBson> {
        self.options
            .command_extra
            .get("comment")
            .ok()
            .flatten()
            .map(RawBson::from)
    }

    /// The aggregate, resuming from `token` when there is one.
    pub fn command(&self, token: Option<&RawDocumentBuf>) -> Result<RawDocumentBuf> {
        let o = &self.options;
        let mut stage = o.stage.clone();
        match token {
            Some(t) if !self.returned_any && o.start_after.is_some() => {
                stage.append(cstr!("startAfter"), t.clone())
            }
            Some(t) => stage.append(cstr!("resumeAfter"), t.clone()),
            None => {
                if let Some(r) = &o.resume_after {
                    stage.append(cstr!("resumeAfter"), r.clone());
                }
                if let Some(s) = &o.start_after {
                    stage.append(cstr!("startAfter"), s.clone());
                }
                if let Some(t) = &o.start_at_operation_time {
                    stage.append(cstr!("startAtOperationTime"), t.clone());
                }
            }
        }
        let mut pipeline = RawArrayBuf::new();
        pipeline.push(rawdoc! { "$changeStream": stage });
        for p in &self.pipeline {
            pipeline.push(p.clone());
        }
        let mut cursor = RawDocumentBuf::new();
        if let Some(b) = o.batch_size {
            cursor.append(cstr!("batchSize"), i64::from(b));
        }
        let mut cmd =
            rawdoc! { "aggregate": self.target.clone(), "pipeline": pipeline, "cursor": cursor };
        for item in &o.command_extra {
            let (k, v) = item?;
            cmd.append(k, v);
        }
        Ok(cmd)
    }
}

/// `watch` takes no timeoutMode: a change stream iterates like a tailable
/// awaitData cursor, in iteration mode (CSOT spec, "Change Streams").
pub fn refuse_timeout_mode(mode: Option<TimeoutMode>) -> Result<()> {
    match mode {
        Some(_) => Err(Error::invalid_argument(
            "change streams do not take timeoutMode (they always use iteration)",
        )),
        None => Ok(()),
    }
}

/// Opens a change stream on `target` in `db` (the executor runs the aggregate).
pub(crate) async fn open(
    client: &Client,
    db: &str,
    target: RawBson,
    pipeline: &[RawDocumentBuf],
    options: &OpOptions<'_>,
    batch_size: Option<u32>,
    timeout_ms: Option<u64>,
) -> Result<Cursor> {
    let extra = crate::csot::without_caller_max_time(options.extra.as_ref(), timeout_ms)?;
    let stream_options = ChangeStreamOptions::from_extra(extra.as_deref(), batch_size, timeout_ms)?;
    let state = StreamState {
        target,
        pipeline: pipeline.to_vec(),
        options: stream_options,
        returned_any: false,
        initial_returned: false,
    };
    let budget = client.start_timeout(timeout_ms);
    let session = client.session_for(options.session);
    let mut op = CursorCommand(RunCommand::read(db, state.command(None)?));
    let reply = client
        .execute_within(&mut op, &budget, Some(&session), None)
        .await?;
    // A change stream is a tailable awaitData cursor: iteration mode (CSOT spec).
    let settings = CursorSettings {
        batch_size,
        mode: TimeoutMode::Iteration,
        timeout_ms,
        max_await_ms: state.options.max_await_ms,
        // The stream's getMores carry its comment themselves (`StreamState`).
        ..Default::default()
    };
    let cursor = Cursor::new(client.clone(), db, reply, settings, budget, Some(session))?;
    Ok(cursor.into_change_stream(state))
}

/// The resume token after handing out `batch`: the server's
/// postBatchResumeToken, else the last change's `_id`.
pub fn token_after(
    batch: &[RawDocumentBuf],
    post_batch: Option<&RawDocumentBuf>,
) -> Result<Option<RawDocumentBuf>> {
    if let Some(t) = post_batch {
        return Ok(Some(t.clone()));
    }
    match batch.last() {
        None => Ok(None),
        Some(doc) => match doc.get_document("_id") {
            Ok(id) => Ok(Some(id.to_owned())),
            Err(_) => Err(Error::invalid_argument(
                "a change has no _id (resume token): a pipeline must not remove it",
            )),
        },
    }
}

/// Servers from this wire version (4.4) label resumable errors themselves.
const LABEL_MIN_WIRE_VERSION: i32 = 9;

/// Codes resumable on servers older than 4.4 (spec, "Resumable Error").
const RESUMABLE_CODES: &[i32] = &[
    6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 63, 150, 13388, 234, 133,
];

/// Errors after which the stream opens itself again at once (once per
/// call). A timeout is resumed by the next call instead (CSOT spec).
/// `wire_version` is that of the connection the getMore ran on (None: it
/// never reached one).
pub fn is_resumable(e: &Error, wire_version: Option<i32>) -> bool {
    if e.is_network() && !e.is_timeout() || e.code == Some(43) {
        return true;
    }
    match wire_version {
        Some(w) if w < LABEL_MIN_WIRE_VERSION => {
            e.code.is_some_and(|c| RESUMABLE_CODES.contains(&c))
        }
        _ => e.has_label("ResumableChangeStreamError"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn state(extra: RawDocumentBuf) -> StreamState {
        StreamState {
            target: RawBson::String("c".into()),
            pipeline: vec![rawdoc! { "$match": { "x": 1 } }],
            options: ChangeStreamOptions::from_extra(Some(&extra), Some(2), None).unwrap(),
            returned_any: false,
            initial_returned: false,
        }
    }

    #[test]
    fn options_split_between_stage_and_command() {
        let s = state(
            rawdoc! { "fullDocument": "updateLookup", "comment": "hi", "maxAwaitTimeMS": 50 },
        );
        let cmd = s.command(None).unwrap();
        assert_eq!(
            cmd,
            rawdoc! {
                "aggregate": "c",
                "pipeline": [{ "$changeStream": { "fullDocument": "updateLookup" } }, { "$match": { "x": 1 } }],
                "cursor": { "batchSize": 2i64 },
                "comment": "hi",
            }
        );
        assert_eq!(s.options.max_await_ms, Some(50));
    }

    #[test]
    fn resuming_uses_the_token() {
        let mut s = state(rawdoc! { "startAfter": { "t": 0 } });
        let token = rawdoc! { "t": 5 };
        let stage = |cmd: RawDocumentBuf| {
            let first = cmd
                .get_array("pipeline")
                .unwrap()
                .into_iter()
                .next()
                .unwrap()
                .unwrap();
            first
                .as_document()
                .unwrap()
                .get_document("$changeStream")
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            stage(s.command(None).unwrap()),
            rawdoc! { "startAfter": { "t": 0 } }
        );
        assert_eq!(
            stage(s.command(Some(&token)).unwrap()),
            rawdoc! { "startAfter": { "t": 5 } },
            "nothing handed out yet"
        );
        s.returned_any = true;
        assert_eq!(
            stage(s.command(Some(&token)).unwrap()),
            rawdoc! { "resumeAfter": { "t": 5 } }
        );
    }

    #[test]
    fn tokens_come_from_the_server_or_the_last_change() {
        let pbrt = rawdoc! { "p": 1 };
        let batch = vec![rawdoc! { "_id": { "a": 1 } }, rawdoc! { "_id": { "a": 2 } }];
        assert_eq!(token_after(&batch, Some(&pbrt)).unwrap(), Some(pbrt));
        assert_eq!(token_after(&batch, None).unwrap(), Some(rawdoc! { "a": 2 }));
        assert_eq!(token_after(&[], None).unwrap(), None);
        assert!(
            token_after(&[rawdoc! { "x": 1 }], None).is_err(),
            "a change without _id"
        );
    }

    #[test]
    fn max_await_must_fit_in_timeout() {
        let wait = rawdoc! { "maxAwaitTimeMS": 100 };
        let with = |t| ChangeStreamOptions::from_extra(Some(&wait), None, t);
        assert!(with(Some(100)).is_err());
        assert_eq!(with(Some(101)).unwrap().max_await_ms, Some(100));
        assert!(with(Some(0)).is_ok(), "0 = no limit");
        assert!(with(None).is_ok());
        let negative = rawdoc! { "maxAwaitTimeMS": -1 };
        assert!(ChangeStreamOptions::from_extra(Some(&negative), None, None).is_err());
    }

    #[test]
    fn watch_refuses_timeout_mode() {
        assert!(refuse_timeout_mode(None).is_ok());
        for mode in [TimeoutMode::Iteration, TimeoutMode::CursorLifetime] {
            let e = refuse_timeout_mode(Some(mode)).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
        }
    }

    #[test]
    fn resumable_errors() {
        assert!(is_resumable(&Error::network("reset"), None));
        let mut e = Error::new(ErrorKind::Server, "x");
        assert!(!is_resumable(&e, Some(17)));
        e.add_label("ResumableChangeStreamError");
        assert!(is_resumable(&e, Some(17)));
        assert!(is_resumable(&e, None));
    }

    #[test]
    fn resumable_codes_before_4_4_labels_after() {
        let mut stale = Error::new(ErrorKind::Server, "x");
        stale.code = Some(63);
        // 4.2 labels nothing: the allowlist decides.
        assert!(is_resumable(&stale, Some(8)));
        // 4.4 and later: only the label (mongod leaves it off a failCommand getMore).
        assert!(!is_resumable(&stale, Some(9)));
        let mut other = Error::new(ErrorKind::Server, "x");
        other.code = Some(2);
        other.add_label("ResumableChangeStreamError");
        assert!(!is_resumable(&other, Some(8)));
        other.code = Some(43);
        assert!(is_resumable(&other, Some(25)));
    }

    #[test]
    fn comment_is_the_aggregates() {
        let s = state(rawdoc! { "comment": { "k": "v" }, "fullDocument": "updateLookup" });
        assert_eq!(s.comment(), Some(RawBson::Document(rawdoc! { "k": "v" })));
        assert_eq!(state(rawdoc! {}).comment(), None);
    }
}
