//! A DNS client over wasi:sockets UDP, the same on both faces: one query or
//! several at once (sent together on one socket, answered in one round trip),
//! retransmitted a bounded number of times within the deadline, to each
//! configured server in turn; a truncated answer (TC) is asked again over TCP.
//! The bytes are `crate::dns`'s; this file only moves them, through the
//! face's `Channel` (one UDP socket connected to one server: `open`, `send`,
//! `receive` until an instant).

use super::{now, Channel, TcpStream};
use crate::deadline::Deadline;
use crate::dns::{self, DnsError, Record, RecordType};
use crate::error::{Error, Result};
use std::cell::Cell;
use std::net::SocketAddr;
use std::time::Duration;

/// Rounds over the servers; the wait for an answer doubles each round.
const ROUNDS: u32 = 3;
const FIRST_WAIT: Duration = Duration::from_millis(1000);
/// What a timeout of the lookup names.
pub(super) const SECTION: &str = "the DNS lookup for mongodb+srv";

/// Asks `servers` for `name`'s `rtype` records. The outer error is I/O (no
/// server answered in time, none reachable); the inner one is the answer's
/// (NXDOMAIN, SERVFAIL, a malformed reply).
pub async fn lookup(
    servers: &[SocketAddr],
    name: &str,
    rtype: RecordType,
    deadline: Deadline,
) -> Result<Answer> {
    let mut all = lookup_all(servers, &[(name, rtype)], deadline).await?;
    Ok(all
        .pop()
        .unwrap_or(Err(DnsError::Malformed("no answer".into()))))
}

/// One question's answer: its records, or what the DNS said instead.
pub type Answer = std::result::Result<Vec<Record>, DnsError>;

/// Asks `servers` several questions at once (SRV and TXT; A and AAAA): every
/// query goes out before any answer is awaited, on one socket per server,
/// so they cost one round trip, not one each. The answers, in the order of
/// `questions`; the outer error as for [`lookup`]. Retransmission is per
/// round, for the questions still unanswered.
pub async fn lookup_all(
    servers: &[SocketAddr],
    questions: &[(&str, RecordType)],
    deadline: Deadline,
) -> Result<Vec<Answer>> {
    let timed = lookup_all_timed(servers, questions, deadline).await?;
    Ok(timed.into_iter().map(|(answer, _)| answer).collect())
}

/// [`lookup_all`] with each answer's TTL in seconds (the smallest of its
/// records; `None` without records): how long it may be reused.
pub async fn lookup_all_timed(
    servers: &[SocketAddr],
    questions: &[(&str, RecordType)],
    deadline: Deadline,
) -> Result<Vec<(Answer, Option<u32>)>> {
    let all = |answers: &[Option<Answer>]| answers.iter().all(Option::is_some);
    let (answers, ttls) = lookup_until_timed(servers, questions, &all, deadline).await?;
    Ok(answers
        .into_iter()
        .zip(ttls)
        .filter_map(|(answer, ttl)| Some((answer?, ttl)))
        .collect())
}

/// What each question's answer is (`None` if left unanswered), and its TTL.
pub(super) type Timed = (Vec<Option<Answer>>, Vec<Option<u32>>);

/// [`lookup_all`] that stops waiting once `enough` says the answers so far
/// will do (an A answer with addresses need not wait for AAAA's): the
/// answers, `None` for the questions left unanswered then, and each
/// answer's TTL.
pub(super) async fn lookup_until_timed(
    servers: &[SocketAddr],
    questions: &[(&str, RecordType)],
    enough: &dyn Fn(&[Option<Answer>]) -> bool,
    deadline: Deadline,
) -> Result<Timed> {
    let mut answers: Vec<Option<Answer>> = questions.iter().map(|_| None).collect();
    // Distinct ids, so each reply finds its question.
    let random = super::random_bytes(2 * questions.len() as u64);
    let mut asked: Vec<Asked> = Vec::with_capacity(questions.len());
    for (i, &(name, rtype)) in questions.iter().enumerate() {
        let mut id = match random.get(2 * i..2 * i + 2) {
            Some([a, b]) => u16::from_be_bytes([*a, *b]),
            _ => 0x5aa5 ^ i as u16,
        };
        while asked.iter().any(|a| a.id == id) {
            id = id.wrapping_add(1);
        }
        let query = dns::query(id, name, rtype).unwrap_or_else(|e| {
            answers[i] = Some(Err(e));
            Vec::new()
        });
        asked.push(Asked {
            name,
            rtype,
            id,
            query,
            ttl: Cell::new(None),
        });
    }
    let what = match questions {
        [(name, rtype)] => format!("the DNS {rtype} query for {name}"),
        _ => {
            let qs: Vec<String> = questions.iter().map(|(n, t)| format!("{t} {n}")).collect();
            format!("the DNS queries {}", qs.join(", "))
        }
    };
    let mut channels: Vec<Option<Channel>> = servers.iter().map(|_| None).collect();
    let mut last_error = None;
    let mut interval = FIRST_WAIT;
    let ttls = |asked: &[Asked]| asked.iter().map(|a| a.ttl.get()).collect();
    for _ in 0..ROUNDS {
        for (i, server) in servers.iter().enumerate() {
            if enough(&answers) {
                return Ok((answers, ttls(&asked)));
            }
            if deadline.is_expired(now()) {
                return Err(no_answer(servers, &what, true));
            }
            match ask_all(
                &mut channels[i],
                *server,
                &asked,
                &mut answers,
                enough,
                interval,
                deadline,
            )
            .await
            {
                Ok(()) => {}
                Err(e) if e.is_timeout() => return Err(no_answer(servers, &what, true)),
                // This server is unusable (refused, unreachable): the next one may do.
                Err(e) => {
                    channels[i] = None;
                    last_error = Some(e);
                }
            }
        }
        interval = interval.saturating_mul(2);
    }
    if enough(&answers) {
        return Ok((answers, ttls(&asked)));
    }
    Err(last_error.unwrap_or_else(|| no_answer(servers, &what, false)))
}

fn no_answer(servers: &[SocketAddr], what: &str, timed_out: bool) -> Error {
    let list: Vec<String> = servers.iter().map(SocketAddr::to_string).collect();
    let cause = format!(
        "no answer from the DNS server {} to {what}",
        list.join(", ")
    );
    if timed_out {
        Error::timeout(SECTION).with_cause(cause)
    } else {
        Error::network(format!("{cause} after {ROUNDS} attempts"))
    }
}

/// One question as sent: its id and the query's bytes, and its answer's
/// TTL once answered.
struct Asked<'q> {
    name: &'q str,
    rtype: RecordType,
    id: u16,
    query: Vec<u8>,
    ttl: Cell<Option<u32>>,
}

/// Sends the unanswered queries to `server` (opening the channel if needed),
/// then takes replies for up to `interval` (within `deadline`) until the
/// answers are `enough`. Datagrams that answer none (stray, late,
/// spoofed) are dropped and the wait goes on.
async fn ask_all(
    channel: &mut Option<Channel>,
    server: SocketAddr,
    asked: &[Asked<'_>],
    answers: &mut [Option<Answer>],
    enough: &dyn Fn(&[Option<Answer>]) -> bool,
    interval: Duration,
    deadline: Deadline,
) -> Result<()> {
    if channel.is_none() {
        *channel = Some(Channel::open(server, deadline)?);
    }
    let Some(ch) = channel.as_ref() else {
        return Ok(());
    };
    for (k, a) in asked.iter().enumerate() {
        if answers[k].is_none() {
            ch.send(server, &a.query, deadline).await?;
        }
    }
    let until = Deadline::after(now(), interval).min(deadline);
    // Which unanswered question `bytes` replies to.
    let whose = |answers: &[Option<Answer>], bytes: &[u8]| {
        (0..asked.len()).find(|&k| {
            let a = &asked[k];
            answers[k].is_none()
                && !matches!(
                    dns::parse_reply(bytes, a.id, a.name, a.rtype),
                    Err(DnsError::NotOurs(_))
                )
        })
    };
    // Bounded: each pass answers a question or ends at `until`.
    while !enough(answers) {
        let got = {
            let snapshot: &[Option<Answer>] = answers;
            let is_ours = |bytes: &[u8]| whose(snapshot, bytes).is_some();
            ch.receive(server, &is_ours, until).await?
        };
        let Some(bytes) = got else {
            if deadline.is_expired(now()) {
                return Err(Error::timeout(SECTION));
            }
            return Ok(());
        };
        let Some(k) = whose(answers, &bytes) else {
            continue;
        };
        let a = &asked[k];
        if let Some((result, ttl)) =
            read_reply(&bytes, server, a.id, a.name, a.rtype, &a.query, deadline).await?
        {
            answers[k] = Some(result);
            a.ttl.set(ttl);
        }
    }
    Ok(())
}

/// A validated reply and its TTL, asking over TCP when it was truncated;
/// `None` when the bytes were not a reply to our query (keep waiting).
async fn read_reply(
    bytes: &[u8],
    server: SocketAddr,
    id: u16,
    name: &str,
    rtype: RecordType,
    query: &[u8],
    deadline: Deadline,
) -> Result<Option<(Answer, Option<u32>)>> {
    match dns::parse_reply(bytes, id, name, rtype) {
        Ok(reply) if reply.truncated => {
            let bytes = over_tcp(server, query, deadline).await?;
            match dns::parse_reply(&bytes, id, name, rtype) {
                Ok(reply) if reply.truncated => Ok(Some((
                    Err(DnsError::Malformed(
                        "the answer over TCP is truncated too".into(),
                    )),
                    None,
                ))),
                Ok(reply) => Ok(Some((Ok(reply.answers), reply.ttl))),
                Err(DnsError::NotOurs(why)) => Ok(Some((
                    Err(DnsError::Malformed(format!("the answer over TCP is {why}"))),
                    None,
                ))),
                Err(e) => Ok(Some((Err(e), None))),
            }
        }
        Ok(reply) => Ok(Some((Ok(reply.answers), reply.ttl))),
        Err(DnsError::NotOurs(_)) => Ok(None),
        Err(e) => Ok(Some((Err(e), None))),
    }
}

/// RFC 1035 4.2.2: the same message with a two-byte length prefix. Connects
/// by address (`connect_ip`): no name lookup, so no recursion into `resolve_via`.
async fn over_tcp(server: SocketAddr, query: &[u8], deadline: Deadline) -> Result<Vec<u8>> {
    let mut stream = TcpStream::connect_ip(server.ip(), server.port(), deadline).await?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&(query.len() as u16).to_be_bytes());
    framed.extend_from_slice(query);
    stream.write_all(&framed, deadline).await?;
    let mut buf = Vec::with_capacity(dns::UDP_MAX);
    stream.read_to_len(&mut buf, 2, deadline).await?;
    let len = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
    stream.read_to_len(&mut buf, 2 + len, deadline).await?;
    buf.drain(..2);
    Ok(buf)
}
