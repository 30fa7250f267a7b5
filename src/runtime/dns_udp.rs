//! A DNS client over wasi:sockets UDP, the same on both faces: one query,
//! retransmitted a bounded number of times within the deadline, to each
//! configured server in turn; a truncated answer (TC) is asked again over TCP.
//! The bytes are `crate::dns`'s; this file only moves them, through the
//! face's `Channel` (one UDP socket connected to one server: `open`, `send`,
//! `receive` until an instant).

use super::{now, Channel, TcpStream};
use crate::deadline::Deadline;
use crate::dns::{self, DnsError, Record, RecordType};
use crate::error::{Error, Result};
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
) -> Result<std::result::Result<Vec<Record>, DnsError>> {
    let id = u16::from_be_bytes(match super::random_bytes(2).as_slice() {
        [a, b] => [*a, *b],
        _ => [0x5a, 0xa5],
    });
    let query = match dns::query(id, name, rtype) {
        Ok(q) => q,
        Err(e) => return Ok(Err(e)),
    };
    let what = format!("the DNS {rtype} query for {name}");
    let mut channels: Vec<Option<Channel>> = servers.iter().map(|_| None).collect();
    let mut last_error = None;
    let mut interval = FIRST_WAIT;
    for _ in 0..ROUNDS {
        for (i, server) in servers.iter().enumerate() {
            if deadline.is_expired(now()) {
                return Err(no_answer(servers, &what, true));
            }
            let is_ours = |bytes: &[u8]| {
                !matches!(
                    dns::parse_reply(bytes, id, name, rtype),
                    Err(DnsError::NotOurs(_))
                )
            };
            let answer = match ask(
                &mut channels[i],
                *server,
                &query,
                &is_ours,
                interval,
                deadline,
            )
            .await
            {
                Ok(Some(bytes)) => {
                    read_reply(&bytes, *server, id, name, rtype, &query, deadline).await
                }
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            };
            match answer {
                Ok(Some(result)) => return Ok(result),
                Ok(None) => {}
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

/// Sends the query (opening the channel if needed) and waits up to `interval`
/// (within `deadline`) for a datagram that `is_ours`; returns its bytes, or
/// `None` when the interval passed without one. Other datagrams (stray, late,
/// spoofed) are dropped and the wait goes on.
async fn ask(
    channel: &mut Option<Channel>,
    server: SocketAddr,
    query: &[u8],
    is_ours: &dyn Fn(&[u8]) -> bool,
    interval: Duration,
    deadline: Deadline,
) -> Result<Option<Vec<u8>>> {
    if channel.is_none() {
        *channel = Some(Channel::open(server, deadline)?);
    }
    let Some(ch) = channel.as_ref() else {
        return Ok(None);
    };
    ch.send(server, query, deadline).await?;
    let until = Deadline::after(now(), interval).min(deadline);
    match ch.receive(server, is_ours, until).await? {
        Some(data) => Ok(Some(data)),
        None if deadline.is_expired(now()) => Err(Error::timeout(SECTION)),
        None => Ok(None),
    }
}

/// A validated reply, asking over TCP when it was truncated; `None` when the
/// bytes were not a reply to our query (keep waiting).
async fn read_reply(
    bytes: &[u8],
    server: SocketAddr,
    id: u16,
    name: &str,
    rtype: RecordType,
    query: &[u8],
    deadline: Deadline,
) -> Result<Option<std::result::Result<Vec<Record>, DnsError>>> {
    match dns::parse_reply(bytes, id, name, rtype) {
        Ok(reply) if reply.truncated => {
            let bytes = over_tcp(server, query, deadline).await?;
            match dns::parse_reply(&bytes, id, name, rtype) {
                Ok(reply) if reply.truncated => Ok(Some(Err(DnsError::Malformed(
                    "the answer over TCP is truncated too".into(),
                )))),
                Ok(reply) => Ok(Some(Ok(reply.answers))),
                Err(DnsError::NotOurs(why)) => Ok(Some(Err(DnsError::Malformed(format!(
                    "the answer over TCP is {why}"
                ))))),
                Err(e) => Ok(Some(Err(e))),
            }
        }
        Ok(reply) => Ok(Some(Ok(reply.answers))),
        Err(DnsError::NotOurs(_)) => Ok(None),
        Err(e) => Ok(Some(Err(e))),
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
