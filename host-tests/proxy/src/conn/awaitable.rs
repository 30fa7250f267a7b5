//! mongod 4.4+'s awaitable hello and its exhaust stream (the Server Monitoring spec's
//! streaming protocol).
//!
//! A hello carrying `topologyVersion` and `maxAwaitTimeMS` whose process id is this member's
//! and whose counter is the current one waits (on a condition variable, no lock held) until
//! the counter moves or `maxAwaitTimeMS` passes, then answers the current state; another
//! process id or an older counter answers at once. One field without the other is mongod's
//! error 31368 (a mongos's 51760). With OP_MSG's exhaustAllowed bit the reply carries
//! moreToCome and the proxy goes on answering, each reply a new run of the same hello (its
//! `topologyVersion` the one last sent, fail points evaluated again) whose `responseTo` is
//! the previous reply's `requestID`, until a reply is an error (no moreToCome), the client
//! leaves or the proxy stops.

use std::time::{Duration, Instant};

use bson::{Bson, Document};

use super::{is_ok, Action, Conn};
use crate::cluster_time;
use crate::codes::{self, error_doc};
use crate::frame::{self, FLAG_MORE_TO_COME};
use crate::server::{lock, Awaited};
use crate::topology::{Role, TopologyVersion, MIN_AWAITABLE_WIRE};

/// OP_MSG flag bit 16: the client accepts several replies (moreToCome) to this request.
pub(super) const FLAG_EXHAUST_ALLOWED: u32 = 1 << 16;

/// Longest wait honoured, so that an absurd `maxAwaitTimeMS` cannot overflow an `Instant`.
const MAX_AWAIT_MS: i64 = 24 * 3600 * 1000;

/// What an awaitable hello asked for: the client's topology version and how long to wait.
#[derive(Debug, PartialEq)]
pub(crate) struct AwaitRequest {
    pub seen: TopologyVersion,
    pub max_await_ms: i64,
}

/// The awaitable fields of a hello as mongod's IDL parses them: None for a plain hello,
/// an error reply for a malformed or half request. `mongos` picks a mongos's codes.
pub(crate) fn parse(body: &Document, mongos: bool) -> Result<Option<AwaitRequest>, Document> {
    let wrong_type = |field: &str, got: &Bson, want: &str| {
        let msg = format!(
            "BSON field '{field}' is the wrong type '{}', expected type '{want}'",
            type_name(got)
        );
        error_doc(codes::TYPE_MISMATCH, &msg)
    };
    let seen = match body.get("topologyVersion") {
        None => None,
        Some(Bson::Document(tv)) => Some(topology_version(tv)?),
        Some(other) => {
            let msg = format!(
                "BSON field 'hello.topologyVersion' is the wrong type '{}', expected type 'object'",
                type_name(other)
            );
            return Err(error_doc(codes::OBJECT_EXPECTED, &msg));
        }
    };
    let max_await_ms = match body.get("maxAwaitTimeMS") {
        None => None,
        Some(v) => {
            let ms = match v {
                Bson::Int32(i) => i64::from(*i),
                Bson::Int64(i) => *i,
                Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.0e15 => *d as i64,
                other => return Err(wrong_type("hello.maxAwaitTimeMS", other, "long")),
            };
            if ms < 0 {
                let msg =
                    format!("BSON field 'maxAwaitTimeMS' value must be >= 0, actual value '{ms}'");
                return Err(error_doc(codes::IDL_COMPARISON, &msg));
            }
            Some(ms)
        }
    };
    let half = if mongos { 51760 } else { 31368 };
    match (seen, max_await_ms) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(error_doc(
            half,
            "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'",
        )),
        (None, Some(_)) => Err(error_doc(
            half,
            "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'",
        )),
        (Some(seen), Some(_)) if seen.counter < 0 => Err(error_doc(
            31372,
            "topologyVersion must have a non-negative counter",
        )),
        (Some(seen), Some(ms)) => Ok(Some(AwaitRequest {
            seen,
            max_await_ms: ms.min(MAX_AWAIT_MS),
        })),
    }
}

/// `{processId: ObjectId, counter: long}`, strictly (mongod's IDL struct).
fn topology_version(tv: &Document) -> Result<TopologyVersion, Document> {
    if let Some(extra) = tv.keys().find(|k| *k != "processId" && *k != "counter") {
        let msg = format!("BSON field 'topologyVersion.{extra}' is an unknown field.");
        return Err(error_doc(codes::IDL_UNKNOWN_FIELD, &msg));
    }
    let missing = |field: &str| {
        let msg = format!("BSON field 'topologyVersion.{field}' is missing but a required field");
        error_doc(codes::IDL_MISSING_FIELD, &msg)
    };
    let wrong = |field: &str, got: &Bson, want: &str| {
        let msg = format!(
            "BSON field 'topologyVersion.{field}' is the wrong type '{}', expected type '{want}'",
            type_name(got)
        );
        error_doc(codes::TYPE_MISMATCH, &msg)
    };
    let process_id = match tv.get("processId") {
        None => return Err(missing("processId")),
        Some(Bson::ObjectId(id)) => *id,
        Some(other) => return Err(wrong("processId", other, "objectId")),
    };
    let counter = match tv.get("counter") {
        None => return Err(missing("counter")),
        Some(Bson::Int64(c)) => *c,
        Some(other) => return Err(wrong("counter", other, "long")),
    };
    Ok(TopologyVersion {
        process_id,
        counter,
    })
}

fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        Bson::Int32(_) => "int",
        Bson::Int64(_) => "long",
        Bson::ObjectId(_) => "objectId",
        Bson::DateTime(_) => "date",
        _ => "other",
    }
}

/// The reply's `topologyVersion`, when it is a successful hello from a 4.4+ member.
fn replied_version(reply: &Document) -> Option<Document> {
    if !is_ok(reply) {
        return None;
    }
    reply.get_document("topologyVersion").ok().cloned()
}

impl Conn {
    /// hello, isMaster, ismaster: waits first when the request is awaitable (see the module).
    pub(super) fn hello(&mut self, name: &str, db: &str, body: &Document) -> Action {
        if self.shared.version.get().max_wire >= MIN_AWAITABLE_WIRE {
            let mongos = self.role() == Role::Mongos;
            let request = match parse(body, mongos) {
                Ok(r) => r,
                Err(reply) => return Action::Reply(reply),
            };
            if let Some(request) = request {
                let current = lock(&self.shared.topology).topology_version(self.member);
                if request.seen.process_id == current.process_id {
                    if request.seen.counter > current.counter {
                        let code = if mongos { 51761 } else { 31382 };
                        let msg = format!(
                            "Received a topology version with the same process ID and a higher \
                             counter than the current topology version (counter {} > {})",
                            request.seen.counter, current.counter
                        );
                        return Action::Reply(error_doc(code, &msg));
                    }
                    if request.seen.counter == current.counter {
                        let until =
                            Instant::now() + Duration::from_millis(request.max_await_ms as u64);
                        let awaited =
                            self.shared
                                .await_topology_change(self.member, current, until, || {
                                    self.client_gone()
                                });
                        if matches!(awaited, Awaited::Stopped | Awaited::ClientGone) {
                            return Action::Close;
                        }
                    }
                }
            }
        }
        Action::Reply(self.local_command(name, db, body))
    }

    /// Sends an OP_MSG hello's first reply and, when the request allows exhaust and is
    /// awaitable, streams the next ones. Answers whether the connection stays open.
    pub(super) fn reply_to_hello(
        &mut self,
        request_id: i32,
        flags: u32,
        name: &str,
        body: &Document,
        mut reply: Document,
    ) -> Result<bool, String> {
        let exhaust = flags & FLAG_EXHAUST_ALLOWED != 0;
        let awaitable = body.contains_key("maxAwaitTimeMS");
        if exhaust && !awaitable && is_ok(&reply) && self.streams() {
            let msg = "An isMaster or hello request with exhaust must specify 'maxAwaitTimeMS'";
            reply = error_doc(51756, msg);
        }
        let mut next = match exhaust && awaitable && self.streams() {
            true => replied_version(&reply),
            false => None,
        };
        let mut response_to = request_id;
        let mut reply = reply;
        let db = body.get_str("$db").unwrap_or("admin").to_string();
        // Each turn sends one reply; it ends on an error reply, the client leaving (a failed
        // write, or the wait's check) or the proxy stopping.
        loop {
            let more = next.is_some();
            if self.reports_cluster_time() {
                cluster_time::stamp(&mut reply, self.shared.clock.tick());
            }
            let id = self.shared.request_id();
            let flags = if more { FLAG_MORE_TO_COME } else { 0 };
            self.send(&frame::op_msg(id, response_to, flags, &reply))?;
            let Some(seen) = next else {
                return Ok(true);
            };
            if self.shared.is_stopped() {
                return Ok(false);
            }
            // mongod's next invocation: the same command with the topologyVersion it sent.
            let mut again = body.clone();
            again.insert("topologyVersion", seen);
            reply = match self.dispatch(name, &db, &again, &[], Instant::now()) {
                Action::Reply(r) => r,
                Action::Close => return Ok(false),
                Action::Forward { .. } => return Err("a hello was to be forwarded".into()),
            };
            next = match self.streams() {
                true => replied_version(&reply),
                false => None,
            };
            response_to = id;
        }
    }

    /// Whether the presented version streams hellos (4.4+).
    fn streams(&self) -> bool {
        self.shared.version.get().max_wire >= MIN_AWAITABLE_WIRE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId};

    #[test]
    fn awaitable_fields_parse_as_mongod_does() {
        let id = ObjectId::new();
        let tv = doc! { "processId": id, "counter": 3i64 };
        let ok = doc! { "hello": 1, "topologyVersion": tv.clone(), "maxAwaitTimeMS": 500 };
        let want = AwaitRequest {
            seen: TopologyVersion {
                process_id: id,
                counter: 3,
            },
            max_await_ms: 500,
        };
        assert_eq!(parse(&ok, false), Ok(Some(want)));
        assert_eq!(parse(&doc! { "hello": 1 }, false), Ok(None));
        let code = |body: Document, mongos: bool| {
            parse(&body, mongos).unwrap_err().get_i32("code").unwrap()
        };
        assert_eq!(code(doc! { "hello": 1, "maxAwaitTimeMS": 0 }, false), 31368);
        assert_eq!(
            code(doc! { "hello": 1, "topologyVersion": tv.clone() }, false),
            31368
        );
        assert_eq!(code(doc! { "hello": 1, "maxAwaitTimeMS": 0 }, true), 51760);
        let with =
            |tv: Bson, ms: Bson| doc! { "hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": ms };
        assert_eq!(code(with("x".into(), 0.into()), false), 10065);
        assert_eq!(
            code(
                with(doc! { "processId": "p", "counter": 1i64 }.into(), 0.into()),
                false
            ),
            14
        );
        assert_eq!(
            code(
                with(doc! { "processId": id, "counter": 1 }.into(), 0.into()),
                false
            ),
            14
        );
        assert_eq!(
            code(with(doc! { "processId": id }.into(), 0.into()), false),
            40414
        );
        assert_eq!(
            code(
                with(
                    doc! { "processId": id, "counter": 1i64, "x": 1 }.into(),
                    0.into()
                ),
                false
            ),
            40415
        );
        assert_eq!(
            code(
                with(doc! { "processId": id, "counter": -1i64 }.into(), 0.into()),
                false
            ),
            31372
        );
        assert_eq!(code(with(tv.clone().into(), "s".into()), false), 14);
        assert_eq!(code(with(tv.into(), (-1).into()), false), 51024);
    }
}
