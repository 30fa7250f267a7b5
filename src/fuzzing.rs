//! Entry points for the in-repo fuzzer (`host-tests/fuzz`, `cargo xtask fuzz`):
//! each feeds untrusted bytes to the sans-I/O code that reads what a server
//! (or a DNS resolver, or a user's URI) sends, the way the driver calls it.
//! Not an API: errors are the expected outcome (noted in a trace that guides
//! the fuzzer, then dropped); a panic, a hang or an unbounded allocation is
//! the finding.

use crate::auth::scram::{Hash, KeyCache, Scram};
use crate::collection::writes::{find_and_modify_value, update_result, Totals};
use crate::dns::{self, Record, RecordType};
use crate::error::check_ok;
use crate::handshake::HelloReply;
use crate::operation::write::{WriteCommand, WriteKind};
use crate::operation::{CursorReply, EndTransaction, Operation};
use crate::uri::seedlist::{self, SrvTarget};
use crate::wire;
use bson::{rawdoc, RawDocument, RawDocumentBuf};
use std::cell::Cell;
use std::time::Duration;

/// The name the DNS target asks about (its replies must echo it).
pub const DNS_NAME: &str = "_mongodb._tcp.test1.test.build.10gen.cc";
/// The query id the DNS target expects.
pub const DNS_ID: u16 = 0xBEEF;
/// The SCRAM client nonce of the SCRAM targets.
pub const SCRAM_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
/// A server-first message the SCRAM-final target answers first (4096 iterations).
pub const SCRAM_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";

thread_local! {
    static TRACE: Cell<u64> = const { Cell::new(FNV_OFFSET) };
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn mix(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Adds a result to the trace of this input: `ok`, or the error's text
/// without its digits (so that a new kind of error is news, a new number is not).
fn note<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> std::result::Result<T, E> {
    let h = TRACE.with(Cell::get);
    let h = match &r {
        Ok(_) => mix(h, b"ok;"),
        Err(e) => {
            let text = e.to_string();
            let kept: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_digit()).collect();
            mix(mix(h, &kept), b";")
        }
    };
    TRACE.with(|t| t.set(h));
    r
}

/// The outcomes noted since the last call, as one number: the fuzzer keeps
/// an input that gives one it has not seen (the poor man's coverage).
pub fn take_trace() -> u64 {
    TRACE.with(|t| t.replace(FNV_OFFSET))
}

/// The BSON documents laid end to end in `bytes` (as many as parse).
pub fn documents(mut bytes: &[u8]) -> Vec<&RawDocument> {
    let mut out = Vec::new();
    while bytes.len() >= 5 {
        let len = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let Ok(len) = usize::try_from(len) else { break };
        if len < 5 || len > bytes.len() {
            break;
        }
        let Ok(doc) = RawDocument::from_bytes(&bytes[..len]) else {
            break;
        };
        out.push(doc);
        bytes = &bytes[len..];
    }
    out
}

/// A frame as `Connection::receive` reads it: the length prefix, an
/// OP_COMPRESSED frame unwrapped (within 1 MiB here, the same bound logic as
/// the connection's 48 MB), then `check_reply` for either request opcode,
/// then the body.
pub fn wire_frame(frame: &[u8]) {
    if frame.len() >= 4 {
        let prefix = [frame[0], frame[1], frame[2], frame[3]];
        let _ = note(wire::frame_length(prefix, wire::DEFAULT_MAX_MESSAGE_SIZE));
    }
    let mut plain = Vec::new();
    let frame = match wire::compression::is_compressed(frame)
        && note(wire::compression::decompress(frame, 1 << 20, &mut plain)).is_ok()
    {
        true => &plain[..],
        false => frame,
    };
    for sent in [wire::OP_MSG, wire::OP_QUERY] {
        if let Ok(range) = note(wire::check_reply(frame, 7, sent)) {
            let mut buf = frame.to_vec();
            if let Ok(doc) = note(wire::take_document(&mut buf, range)) {
                let _ = note(check_ok(&doc));
            }
        }
    }
}

/// A hello reply: parsed, checked, classified, applied to a topology, and its
/// limits used to split a write into batches.
/// A hello reply with a long member list (or a lying one) applied as
/// SDAM does: by the seed it came from, then by a member it names. What it
/// costs must be linear in its size; the fuzzer's slow-input watchdog
/// catches anything quadratic (25,000 members: seconds, where linear takes
/// milliseconds).
pub fn hello_members(bytes: &[u8]) {
    let Ok(doc) = RawDocument::from_bytes(bytes) else {
        return;
    };
    let Ok(reply) = note(HelloReply::parse(doc)) else {
        return;
    };
    let _ = note(reply.check_wire_version("a:27017"));
    let seeds = ["a:27017".to_string()];
    let mut topology = crate::sdam::TopologyDescription::new(&seeds, None, None);
    topology.update("a:27017", Ok((reply.clone(), None)));
    let member = reply.hosts.get(1).or(reply.passives.first());
    if let Some(member) = member.map(|m| m.to_ascii_lowercase()) {
        topology.update(&member, Ok((reply.clone(), None)));
    }
    use crate::sdam::selection::{suitable_servers, Criteria, ReadMode};
    let nearest = Criteria::read(ReadMode::Nearest);
    let found = suitable_servers(&topology, &nearest, Duration::from_secs(10), &[]);
    let _ = note(found.map(|s| s.len()).map_err(|e| format!("{e:?}")));
}

pub fn hello(bytes: &[u8]) {
    let Ok(doc) = RawDocument::from_bytes(bytes) else {
        return;
    };
    let _ = crate::auth::negotiate(doc);
    if note(check_ok(doc)).is_err() {
        return;
    }
    let Ok(reply) = note(HelloReply::parse(doc)) else {
        return;
    };
    let _ = note(reply.check_wire_version("a:27017"));
    let _ = crate::sdam::ServerType::from_hello(&reply, false);
    let seeds = ["a:27017".to_string(), "b:27017".to_string()];
    let mut topology = crate::sdam::TopologyDescription::new(&seeds, None, None);
    topology.update("a:27017", Ok((reply.clone(), None)));
    let docs: Vec<_> = (0..4).map(|i| rawdoc! { "_id": i }).collect();
    let mut op = WriteCommand::new("db", "c", WriteKind::Insert, docs, 0);
    while op.remaining() > 0 {
        if note(op.build(&reply)).is_err() {
            break;
        }
        op.finish_batch();
    }
}

/// Runs the executor's reply path: `ok` checked, then the operation's handler.
fn reply_of<O: Operation>(op: &mut O, doc: &RawDocument) -> crate::Result<O::Output> {
    note(check_ok(doc))?;
    note(op.handle_reply(doc.to_owned(), "a:27017"))
}

/// A reply opening or continuing a cursor (find, aggregate, getMore,
/// listCollections, listIndexes all answer with `cursor`).
pub fn cursor_reply(bytes: &[u8]) {
    let Ok(doc) = RawDocument::from_bytes(bytes) else {
        return;
    };
    if note(check_ok(doc)).is_ok() {
        let _ = note(CursorReply::parse(doc, "a:27017"));
    }
}

/// The replies to a bulk write: fixed insert, update and delete runs, each
/// fed the next document of `bytes`, folded into the bulk result; the last
/// update run also makes an update result.
pub fn write_replies(bytes: &[u8]) {
    let replies = documents(bytes);
    let mut replies = replies.into_iter();
    let hello = default_hello();
    let runs = [
        (WriteKind::Insert, 3, 0),
        (WriteKind::Update, 2, 3),
        (WriteKind::Delete, 2, 5),
    ];
    let mut total = Totals::default();
    let mut inserted = Vec::new();
    for (kind, n, first) in runs {
        let statements: Vec<RawDocumentBuf> = (0..n).map(|i| rawdoc! { "_id": i }).collect();
        if kind == WriteKind::Insert {
            inserted.extend((0..n).map(|i| (first + i as usize, bson::RawBson::Int32(i))));
        }
        let mut op = WriteCommand::new("db", "c", kind, statements, first);
        op.ordered = first == 0;
        while op.remaining() > 0 {
            let Some(reply) = replies.next() else { break };
            if note(op.build(&hello)).is_err() {
                break;
            }
            let _ = reply_of(&mut op, reply);
            op.finish_batch();
        }
        if kind == WriteKind::Update {
            let _ = note(update_result(&op.result));
        }
        total.add(kind, op.result);
    }
    let _ = note(total.finish(&inserted, true));
}

/// findAndModify's reply.
pub fn find_and_modify(bytes: &[u8]) {
    if let Ok(doc) = RawDocument::from_bytes(bytes) {
        if note(check_ok(doc)).is_ok() {
            let _ = note(find_and_modify_value(doc));
        }
    }
}

/// count's and distinct's replies.
pub fn count_distinct(bytes: &[u8]) {
    if let Ok(doc) = RawDocument::from_bytes(bytes) {
        if note(check_ok(doc)).is_ok() {
            let _ = note(crate::collection::number(doc, "n"));
            let _ = note(crate::collection::distinct_values(doc));
        }
    }
}

/// commitTransaction's and abortTransaction's replies.
pub fn end_transaction(bytes: &[u8]) {
    if let Ok(doc) = RawDocument::from_bytes(bytes) {
        let _ = reply_of(&mut EndTransaction::commit(None, None), doc);
        let _ = reply_of(&mut EndTransaction::abort(None), doc);
    }
}

/// An error reply (code, codeName, labels, writeConcernError) as the
/// executor classifies it, and its `$clusterTime` gossip.
pub fn error_reply(bytes: &[u8]) {
    let Ok(doc) = RawDocument::from_bytes(bytes) else {
        return;
    };
    if let Err(e) = note(check_ok(doc)) {
        let _ = e.to_string();
        let _ = crate::retryable::is_retryable_read_error(&e);
        let _ = crate::change_stream::is_resumable(&e, Some(8));
        if let Some(code) = e.code {
            let _ = crate::error::state_change_error(code);
        }
    }
    let _ = note(crate::operation::check_write_errors(doc));
    if let Ok(ct) = doc.get_document("$clusterTime") {
        let mut current = None;
        crate::session::cluster_time::advance(&mut current, ct.to_owned());
        crate::session::cluster_time::advance(&mut current, ct.to_owned());
    }
}

/// A connection string, and (for mongodb+srv) the seedlist rules on it.
pub fn uri(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let Ok(cs) = note(crate::uri::parse(text)) else {
        return;
    };
    let _ = format!("{cs:?}");
    if cs.srv {
        let _ = note(seedlist::srv_query(&cs));
        let srv = [SrvTarget {
            host: "host1.test.build.10gen.cc".into(),
            port: 27017,
        }];
        let _ = note(seedlist::apply(
            &cs,
            &srv,
            &[b"replicaSet=rs0".to_vec()],
            &mut |_: usize| 0,
        ));
    }
}

/// The server-first message of SCRAM-SHA-1 and SCRAM-SHA-256, parsed.
pub fn scram_server_first(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    for hash in [Hash::Sha1, Hash::Sha256] {
        if let Ok(scram) = Scram::new(hash, "user", "pencil", SCRAM_NONCE.into()) {
            let _ = note(scram.parse_server_first(text));
        }
    }
}

/// The server-final message, after a fixed server-first (keys derived once).
pub fn scram_server_final(bytes: &[u8]) {
    thread_local! {
        static CACHE: KeyCache = KeyCache::default();
    }
    let Ok(mut scram) = Scram::new(Hash::Sha256, "user", "pencil", SCRAM_NONCE.into()) else {
        return;
    };
    let first =
        CACHE.with(|cache| scram.client_final(SCRAM_SERVER_FIRST.as_bytes(), cache, &|| Ok(())));
    if note(first).is_ok() {
        let _ = note(scram.verify_server_final(bytes));
    }
}

/// A DNS reply to an SRV and to a TXT question for [`DNS_NAME`], and the
/// seedlist built from its records.
pub fn dns_reply(bytes: &[u8]) {
    let cs = crate::uri::parse("mongodb+srv://test1.test.build.10gen.cc/").ok();
    if let Ok(reply) = note(dns::parse_reply(bytes, DNS_ID, DNS_NAME, RecordType::Srv)) {
        let srv: Vec<SrvTarget> = reply
            .answers
            .iter()
            .filter_map(|r| match r {
                Record::Srv { port, target, .. } => Some(SrvTarget {
                    host: target.clone(),
                    port: *port,
                }),
                _ => None,
            })
            .collect();
        if let Some(cs) = &cs {
            let _ = note(seedlist::apply(cs, &srv, &[], &mut |_: usize| 0));
        }
    }
    if let Ok(reply) = note(dns::parse_reply(bytes, DNS_ID, DNS_NAME, RecordType::Txt)) {
        let txt: Vec<Vec<u8>> = reply
            .answers
            .into_iter()
            .filter_map(|r| match r {
                Record::Txt(t) => Some(t),
                _ => None,
            })
            .collect();
        let srv = [SrvTarget {
            host: "localhost.test.build.10gen.cc".into(),
            port: 27017,
        }];
        if let Some(cs) = &cs {
            let _ = note(seedlist::apply(cs, &srv, &txt, &mut |_: usize| 0));
        }
    }
}

/// A warm state blob (`Client::adopt_warm_state`): decoded, and what it
/// decodes to encodes to a blob that decodes again, with the same keys,
/// and whose answers say fresh or not without a panic.
pub fn warm_state(bytes: &[u8]) {
    use crate::warm::WarmState;
    let Ok(state) = note(WarmState::decode(bytes)) else {
        return;
    };
    let again = WarmState::decode(&state.encode());
    let again = again.expect("a decoded warm state encodes to a warm state");
    assert_eq!(again.scram, state.scram, "the keys survive a round trip");
    let name = "_mongodb._tcp.test1.test.build.10gen.cc";
    for now in [0, 1_000_000, u64::MAX] {
        let _ = state.srv.as_ref().map(|a| a.fresh_for(name, now));
        for a in &state.addresses {
            let _ = a.fresh_for("localhost.test.build.10gen.cc", now);
        }
    }
}

/// The limits of a server that said nothing about them.
fn default_hello() -> HelloReply {
    HelloReply::parse(&rawdoc! { "ok": 1, "isWritablePrimary": true, "maxWireVersion": 21 })
        .unwrap_or_default()
}
