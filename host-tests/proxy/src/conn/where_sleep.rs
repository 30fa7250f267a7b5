//! mongod's `{$where: "sleep(N) || true"}`, emulated: nx-27017 has no JavaScript and refuses
//! every `$where` (`nx-gaps.py`: where-js), but the spec tests use this one idiom to keep a
//! command busy on the server (SDAM `interruptInUse-pool-clear.json`: a `find` and an
//! `updateOne` stay in use while a monitor's hello times out and the pool clear interrupts
//! them). `sleep(N) || true` is true for every document, so the command is held here for N ms
//! and then forwarded with that `$where` taken out of its filter, which gives the same result.
//!
//! The hold is [`Conn::wait`] (as `blockConnection` waits): on a condition variable, no lock
//! held, ended early when the client hangs up (mongod kills the operation with
//! ClientDisconnect: it never runs and nothing is answered) or the proxy stops. A `maxTimeMS`
//! shorter than N fails it with MaxTimeMSExpired (50) when it passes, as mongod's
//! interruptible sleep does.
//!
//! Filters read: `find`, `count`, `distinct`, `findAndModify` (`filter`/`query`), `update`
//! and `delete` statements (`q`, in the body or a document sequence), and `aggregate`'s
//! `$match` stages. Only a top-level `$where` whose value (a string or BSON JavaScript code) is
//! exactly `sleep(<integer>) || true`, spaces allowed, is taken; any other `$where` reaches
//! nx-27017 unchanged and is refused as before. Not emulated: mongod evaluates `$where` once
//! per document examined, so it sleeps N ms per document (the tests have one); the proxy
//! sleeps N ms per filter, whatever the collection holds.

use std::time::Instant;

use bson::{Bson, Document};

use super::dispatch::{after, Waited};
use super::{Action, Conn};
use crate::codes::{self, error_doc, with_labels};
use crate::commands::{self, canonical};
use crate::failpoint as fp;
use crate::frame::{self, Message};

/// A command whose filters held the idiom: how long mongod would sleep, and the command
/// without it.
#[derive(Debug, PartialEq)]
pub(super) struct Held {
    pub ms: u64,
    pub body: Document,
    /// The document sequences, edited or not; `None` when the message's own are kept.
    pub sequences: Option<Vec<(String, Vec<Document>)>>,
}

/// N of `sleep(N) || true` (spaces allowed around each token), else `None`.
fn sleep_ms(code: &str) -> Option<u64> {
    let rest = code.trim().strip_prefix("sleep")?.trim_start();
    let rest = rest.strip_prefix('(')?;
    let (n, rest) = rest.split_once(')')?;
    let n = n.trim();
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let rest = rest.trim_start().strip_prefix("||")?;
    (rest.trim() == "true").then(|| n.parse().ok())?
}

/// Takes the idiom out of one filter; its N when it was there.
fn take(filter: &mut Document) -> Option<u64> {
    let ms = match filter.get("$where")? {
        Bson::String(code) | Bson::JavaScriptCode(code) => sleep_ms(code)?,
        _ => return None,
    };
    filter.remove("$where");
    Some(ms)
}

/// Takes the idiom out of the filter at `body[key]`, if it is a document.
fn take_at(body: &mut Document, key: &str) -> Option<u64> {
    take(body.get_document_mut(key).ok()?)
}

/// Takes the idiom out of each write statement's `q`; the sum of their N (mongod runs the
/// statements one after another).
fn take_statements(statements: &mut [Document]) -> Option<u64> {
    statements
        .iter_mut()
        .fold(None, |sum, s| match take_at(s, "q") {
            Some(ms) => Some(sum.unwrap_or(0).saturating_add(ms)),
            None => sum,
        })
}

/// The same, for statements held in a body array.
fn take_array(body: &mut Document, key: &str) -> Option<u64> {
    let Ok(array) = body.get_array_mut(key) else {
        return None;
    };
    array.iter_mut().fold(None, |sum, s| match s {
        Bson::Document(d) => match take_at(d, "q") {
            Some(ms) => Some(sum.unwrap_or(0).saturating_add(ms)),
            None => sum,
        },
        _ => sum,
    })
}

/// The command without the idiom, and how long mongod would sleep on it; `None` when no
/// filter of it holds the idiom.
pub(super) fn plan(
    name: &str,
    body: &Document,
    sequences: &[(String, Vec<Document>)],
) -> Option<Held> {
    let mut body = body.clone();
    let mut edited_sequences = None;
    let ms = match canonical(name) {
        "find" => take_at(&mut body, "filter"),
        "count" | "distinct" | "findAndModify" => take_at(&mut body, "query"),
        "update" | "delete" => {
            let key = if name == "update" {
                "updates"
            } else {
                "deletes"
            };
            match body.contains_key(key) {
                true => take_array(&mut body, key),
                false => {
                    let mut seqs = sequences.to_vec();
                    let ms =
                        seqs.iter_mut()
                            .filter(|(id, _)| id == key)
                            .fold(None, |sum, (_, docs)| match take_statements(docs) {
                                Some(ms) => Some(sum.unwrap_or(0u64).saturating_add(ms)),
                                None => sum,
                            });
                    edited_sequences = ms.map(|_| seqs);
                    ms
                }
            }
        }
        "aggregate" => body.get_array_mut("pipeline").ok().and_then(|stages| {
            stages.iter_mut().fold(None, |sum, stage| {
                let Bson::Document(stage) = stage else {
                    return sum;
                };
                match take_at(stage, "$match") {
                    Some(ms) => Some(sum.unwrap_or(0u64).saturating_add(ms)),
                    None => sum,
                }
            })
        }),
        _ => None,
    }?;
    Some(Held {
        ms,
        body,
        sequences: edited_sequences,
    })
}

/// What to do with a command after its sleep.
pub(super) enum Outcome {
    /// Forward this message (the command without the idiom) and body instead.
    Forward(Message, Document),
    /// Answer or close as this says (maxTimeMS expired, client gone, proxy stopping).
    Done(Action),
}

impl Conn {
    /// Sleeps as mongod would on a command holding the idiom (`None`: it holds none);
    /// `Err` drops the connection, as any failure to re-encode a command does.
    pub(super) fn where_sleep(
        &self,
        msg: &Message,
        name: &str,
        body: &Document,
        sequences: &[(String, Vec<Document>)],
        received: Instant,
    ) -> Result<Option<Outcome>, String> {
        let Some(held) = plan(name, body, sequences) else {
            return Ok(None);
        };
        let deadline = commands::max_time_ms(name, body).map(|ms| after(received, ms));
        match self.wait(held.ms, deadline) {
            Waited::Done => {}
            Waited::Expired => {
                let db = body.get_str("$db").unwrap_or("");
                let info = self.info(name, db, body);
                let labels = fp::error_labels(&info, Some(codes::MAX_TIME_MS_EXPIRED), None, false);
                let reply = error_doc(codes::MAX_TIME_MS_EXPIRED, "operation exceeded time limit");
                return Ok(Some(Outcome::Done(Action::Reply(with_labels(
                    reply, labels,
                )))));
            }
            Waited::Stopped | Waited::ClientGone => return Ok(Some(Outcome::Done(Action::Close))),
        }
        let bytes = match &held.sequences {
            None => frame::replace_body(msg, &held.body),
            Some(seqs) => frame::rebuild(msg, &held.body, seqs),
        }
        .map_err(|e| format!("re-encoding the command without $where: {e}"))?;
        let edited = Message {
            request_id: msg.request_id,
            response_to: msg.response_to,
            op_code: msg.op_code,
            bytes,
        };
        Ok(Some(Outcome::Forward(edited, held.body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn the_idiom_and_only_it() {
        assert_eq!(sleep_ms("sleep(2000) || true"), Some(2000));
        assert_eq!(sleep_ms("  sleep ( 15 )||true "), Some(15));
        assert_eq!(sleep_ms("sleep(0) || true"), Some(0));
        for other in [
            "sleep(2000)",
            "sleep(2000) || false",
            "sleep(-1) || true",
            "sleep(1.5) || true",
            "sleep() || true",
            "sleep(1) || true; x",
            "this.a == 1",
            "sleep(99999999999999999999999) || true",
        ] {
            assert_eq!(sleep_ms(other), None, "{other}");
        }
    }

    #[test]
    fn find_loses_its_where_and_keeps_the_rest() {
        let body = doc! { "find": "c", "filter": { "$where": "sleep(300) || true", "a": 1 } };
        let held = plan("find", &body, &[]).unwrap();
        assert_eq!(held.ms, 300);
        assert_eq!(held.body, doc! { "find": "c", "filter": { "a": 1 } });
        let code = Bson::JavaScriptCode("sleep(5) || true".into());
        let body = doc! { "find": "c", "filter": { "$where": code } };
        let held = plan("find", &body, &[]).unwrap();
        assert_eq!(
            (held.ms, held.body),
            (5, doc! { "find": "c", "filter": {} })
        );
    }

    #[test]
    fn other_where_and_nested_ones_pass() {
        let body = doc! { "find": "c", "filter": { "$where": "this.a == 1" } };
        assert!(plan("find", &body, &[]).is_none());
        let body = doc! { "find": "c", "filter": { "$and": [{ "$where": "sleep(1) || true" }] } };
        assert!(plan("find", &body, &[]).is_none());
        let body = doc! { "insert": "c", "documents": [{ "$where": "sleep(1) || true" }] };
        assert!(plan("insert", &body, &[]).is_none());
    }

    #[test]
    fn update_statements_in_the_body_or_a_sequence() {
        let stmt = |w: &str| doc! { "q": { "$where": w }, "u": { "$set": { "a": 1 } } };
        let body = doc! { "update": "c", "updates": [stmt("sleep(10) || true"), stmt("sleep(20) || true")] };
        let held = plan("update", &body, &[]).unwrap();
        assert_eq!(held.ms, 30);
        assert_eq!(held.sequences, None);
        let q = held.body.get_array("updates").unwrap()[1]
            .as_document()
            .unwrap()
            .get_document("q")
            .unwrap()
            .clone();
        assert_eq!(q, doc! {});

        let body = doc! { "delete": "c" };
        let seqs = vec![(
            "deletes".to_string(),
            vec![doc! { "q": { "$where": "sleep(7) || true", "b": 2 }, "limit": 1 }],
        )];
        let held = plan("delete", &body, &seqs).unwrap();
        assert_eq!(held.ms, 7);
        assert_eq!(
            held.sequences.unwrap()[0].1[0],
            doc! { "q": { "b": 2 }, "limit": 1 }
        );
    }

    #[test]
    fn aggregate_match_count_and_find_and_modify() {
        let body = doc! { "aggregate": "c", "pipeline": [{ "$match": { "$where": "sleep(4) || true" } }, { "$limit": 1 }] };
        let held = plan("aggregate", &body, &[]).unwrap();
        assert_eq!(held.ms, 4);
        assert_eq!(
            held.body.get_array("pipeline").unwrap()[0],
            Bson::Document(doc! { "$match": {} })
        );
        let body = doc! { "count": "c", "query": { "$where": "sleep(3) || true" } };
        assert_eq!(plan("count", &body, &[]).unwrap().ms, 3);
        let body = doc! { "findandmodify": "c", "query": { "$where": "sleep(2) || true" }, "remove": true };
        assert_eq!(plan("findandmodify", &body, &[]).unwrap().ms, 2);
    }
}
