//! DNS messages, sans I/O (RFC 1035, SRV from RFC 2782): a query for one name
//! and type, and the validation of its reply. `mongodb+srv` needs SRV and TXT
//! records, which `wasi:sockets/ip-name-lookup` cannot give; `runtime::udp`
//! carries these bytes. Malformed input is an error, never a panic, and every
//! loop is bounded by the message's length.

pub mod config;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Largest reply read over UDP without EDNS (RFC 1035 4.2.1); longer ones set TC.
pub const UDP_MAX: usize = 512;
/// A name's longest wire form (RFC 1035 2.3.4).
const NAME_MAX: usize = 255;
/// A label's longest form.
const LABEL_MAX: usize = 63;
/// Compression pointers followed in one name: more than a valid name can need.
const MAX_POINTERS: usize = 64;
const HEADER: usize = 12;
const CLASS_IN: u16 = 1;

/// The record types the driver asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordType {
    A,
    Aaaa,
    Srv,
    Txt,
}

impl RecordType {
    fn code(self) -> u16 {
        match self {
            RecordType::A => 1,
            RecordType::Txt => 16,
            RecordType::Aaaa => 28,
            RecordType::Srv => 33,
        }
    }
}

impl fmt::Display for RecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecordType::A => "A",
            RecordType::Aaaa => "AAAA",
            RecordType::Srv => "SRV",
            RecordType::Txt => "TXT",
        })
    }
}

/// One answer record of the type asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    /// Priority and weight are read but the seedlist spec ignores them.
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        /// Lowercase, without the trailing dot; empty for the root (".").
        target: String,
    },
    /// The record's character-strings, concatenated in order.
    Txt(Vec<u8>),
}

/// A validated reply to our question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// TC: the answer did not fit; ask again over TCP.
    pub truncated: bool,
    /// Records of the asked type and class IN from the answer section
    /// (empty when truncated). Other types (e.g. a CNAME chain) are skipped.
    pub answers: Vec<Record>,
    /// The smallest TTL of those records, in seconds (`None` without any):
    /// how long the answer may be reused (a warm state keeps it).
    pub ttl: Option<u32>,
}

/// Why a reply was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsError {
    /// Not a reply to our query (other id, not a response, other question):
    /// a stray or spoofed datagram, to be ignored while waiting for ours.
    NotOurs(&'static str),
    /// RCODE 3: the name does not exist.
    NxDomain,
    /// RCODE 2: the server could not answer.
    ServFail,
    /// Another RCODE (e.g. 5, refused).
    Rcode(u8),
    /// The bytes are not a well-formed message.
    Malformed(String),
    /// The name cannot be asked (empty label, label over 63 bytes, name over 255).
    BadName(String),
}

impl fmt::Display for DnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DnsError::NotOurs(why) => write!(f, "not a reply to the query ({why})"),
            DnsError::NxDomain => f.write_str("the name does not exist (NXDOMAIN)"),
            DnsError::ServFail => f.write_str("the DNS server failed to answer (SERVFAIL)"),
            DnsError::Rcode(5) => f.write_str("the DNS server refused the query (REFUSED)"),
            DnsError::Rcode(n) => write!(f, "the DNS server answered with RCODE {n}"),
            DnsError::Malformed(why) => write!(f, "malformed DNS reply: {why}"),
            DnsError::BadName(why) => write!(f, "cannot query this name: {why}"),
        }
    }
}

fn malformed<T>(why: impl Into<String>) -> Result<T, DnsError> {
    Err(DnsError::Malformed(why.into()))
}

/// A recursive query (RD set) for `name` and `rtype`, class IN.
pub fn query(id: u16, name: &str, rtype: RecordType) -> Result<Vec<u8>, DnsError> {
    let mut out = Vec::with_capacity(HEADER + name.len() + 6);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&0x0100u16.to_be_bytes()); // RD
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // QDCOUNT 1
    encode_name(&mut out, name)?;
    out.extend_from_slice(&rtype.code().to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(out)
}

fn encode_name(out: &mut Vec<u8>, name: &str) -> Result<(), DnsError> {
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if trimmed.is_empty() {
        return Err(DnsError::BadName("the name is empty".into()));
    }
    let start = out.len();
    for label in trimmed.split('.') {
        if label.is_empty() || label.len() > LABEL_MAX {
            return Err(DnsError::BadName(format!(
                "{name:?} has an empty label or one longer than {LABEL_MAX} bytes"
            )));
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    if out.len() - start > NAME_MAX {
        return Err(DnsError::BadName(format!(
            "{name:?} is longer than {NAME_MAX} bytes"
        )));
    }
    Ok(())
}

/// Validates `msg` as the reply to query `id` for `name`/`rtype` and returns
/// its answers. Errors say whether to keep waiting ([`DnsError::NotOurs`]) or stop.
pub fn parse_reply(msg: &[u8], id: u16, name: &str, rtype: RecordType) -> Result<Reply, DnsError> {
    if msg.len() < HEADER {
        return Err(DnsError::NotOurs("shorter than a DNS header"));
    }
    let r = Reader { msg };
    if r.u16(0)? != id {
        return Err(DnsError::NotOurs("another query id"));
    }
    let flags = r.u16(2)?;
    if flags & 0x8000 == 0 {
        return Err(DnsError::NotOurs("a query, not a response"));
    }
    if (flags >> 11) & 0xF != 0 {
        return Err(DnsError::NotOurs("another opcode"));
    }
    let (qdcount, ancount) = (r.u16(4)?, r.u16(6)?);
    // The question comes back unless the server gave up before reading it.
    let mut pos = HEADER;
    if qdcount != 1 {
        if qdcount == 0 && flags & 0xF != 0 {
            return Err(rcode_error(flags));
        }
        return Err(DnsError::NotOurs("not exactly one question"));
    }
    let (qname, next) = r.name(pos)?;
    let wanted = name.strip_suffix('.').unwrap_or(name);
    if !qname.eq_ignore_ascii_case(wanted) {
        return Err(DnsError::NotOurs("another question name"));
    }
    if r.u16(next)? != rtype.code() || r.u16(next + 2)? != CLASS_IN {
        return Err(DnsError::NotOurs("another question type"));
    }
    pos = next + 4;
    if flags & 0xF != 0 {
        return Err(rcode_error(flags));
    }
    if flags & 0x0200 != 0 {
        return Ok(Reply {
            truncated: true,
            answers: Vec::new(),
            ttl: None,
        });
    }
    // Each record takes at least 11 bytes: refuse counts the message cannot hold
    // before allocating anything for them.
    let left = msg.len() - pos;
    if usize::from(ancount) * 11 > left {
        return malformed(format!(
            "{ancount} answers announced but only {left} bytes follow"
        ));
    }
    let mut answers = Vec::new();
    let mut ttl: Option<u32> = None;
    for _ in 0..ancount {
        let (_, after_owner) = r.name(pos)?;
        let kind = r.u16(after_owner)?;
        let class = r.u16(after_owner + 2)?;
        let rdlength = usize::from(r.u16(after_owner + 8)?);
        let rdata = after_owner + 10;
        let end = rdata + rdlength;
        if end > msg.len() {
            return malformed("a record's data runs past the end of the message");
        }
        if kind == rtype.code() && class == CLASS_IN {
            answers.push(r.record(rtype, rdata, end)?);
            // RFC 2181 8: a TTL with the top bit set counts as zero.
            let secs =
                u32::from(r.u16(after_owner + 4)?) << 16 | u32::from(r.u16(after_owner + 6)?);
            let secs = if secs > i32::MAX as u32 { 0 } else { secs };
            ttl = Some(ttl.map_or(secs, |t| t.min(secs)));
        }
        pos = end;
    }
    Ok(Reply {
        truncated: false,
        answers,
        ttl,
    })
}

fn rcode_error(flags: u16) -> DnsError {
    match (flags & 0xF) as u8 {
        3 => DnsError::NxDomain,
        2 => DnsError::ServFail,
        n => DnsError::Rcode(n),
    }
}

/// Bounds-checked reads at absolute offsets.
struct Reader<'a> {
    msg: &'a [u8],
}

impl Reader<'_> {
    fn u8(&self, at: usize) -> Result<u8, DnsError> {
        match self.msg.get(at) {
            Some(b) => Ok(*b),
            None => malformed("the message ends early"),
        }
    }

    fn u16(&self, at: usize) -> Result<u16, DnsError> {
        Ok(u16::from_be_bytes([self.u8(at)?, self.u8(at + 1)?]))
    }

    fn slice(&self, from: usize, to: usize) -> Result<&[u8], DnsError> {
        match self.msg.get(from..to) {
            Some(s) => Ok(s),
            None => malformed("the message ends early"),
        }
    }

    /// The (possibly compressed) name at `at`, dotted and lowercase without the
    /// trailing dot (other bytes as '?'), and the offset just after it where it appears. Pointers must
    /// go strictly backwards, so a loop is impossible; their number is bounded too.
    fn name(&self, at: usize) -> Result<(String, usize), DnsError> {
        let mut out = String::new();
        let mut pos = at;
        let mut end = None;
        let mut wire_len = 0;
        let mut pointers = 0;
        loop {
            let len = self.u8(pos)?;
            match len >> 6 {
                0 => {}
                3 => {
                    let target = usize::from(self.u16(pos)? & 0x3FFF);
                    pointers += 1;
                    if target >= pos || pointers > MAX_POINTERS {
                        return malformed("a name's compression pointer does not point back");
                    }
                    end.get_or_insert(pos + 2);
                    pos = target;
                    continue;
                }
                _ => return malformed("a name uses an unknown label type"),
            }
            wire_len += usize::from(len) + 1;
            if wire_len > NAME_MAX {
                return malformed("a name is longer than 255 bytes");
            }
            if len == 0 {
                return Ok((out, end.unwrap_or(pos + 1)));
            }
            let label = self.slice(pos + 1, pos + 1 + usize::from(len))?;
            if !out.is_empty() {
                out.push('.');
            }
            // Bytes a host name cannot hold become '?', which `host_name` refuses.
            out.extend(label.iter().map(|&b| match b {
                b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' => b as char,
                b'A'..=b'Z' => b.to_ascii_lowercase() as char,
                _ => '?',
            }));
            pos += 1 + usize::from(len);
        }
    }

    fn record(&self, rtype: RecordType, from: usize, to: usize) -> Result<Record, DnsError> {
        let data = self.slice(from, to)?;
        match rtype {
            RecordType::A => match <[u8; 4]>::try_from(data) {
                Ok(b) => Ok(Record::A(Ipv4Addr::from(b))),
                Err(_) => malformed("an A record is not 4 bytes"),
            },
            RecordType::Aaaa => match <[u8; 16]>::try_from(data) {
                Ok(b) => Ok(Record::Aaaa(Ipv6Addr::from(b))),
                Err(_) => malformed("an AAAA record is not 16 bytes"),
            },
            RecordType::Srv => {
                if data.len() < 7 {
                    return malformed("an SRV record is too short");
                }
                // The target may be compressed (RFC 2782 forbids it; servers do it).
                let (target, after) = self.name(from + 6)?;
                if after != to {
                    return malformed("an SRV record's target does not fill its data");
                }
                if target.contains('?') {
                    return malformed(
                        "an SRV target has characters other than letters, digits, '-' and '_'",
                    );
                }
                Ok(Record::Srv {
                    priority: self.u16(from)?,
                    weight: self.u16(from + 2)?,
                    port: self.u16(from + 4)?,
                    target,
                })
            }
            RecordType::Txt => {
                let mut text = Vec::with_capacity(data.len());
                let mut rest = data;
                while let Some((&len, tail)) = rest.split_first() {
                    let Some(s) = tail.get(..usize::from(len)) else {
                        return malformed("a TXT character-string runs past its record");
                    };
                    text.extend_from_slice(s);
                    rest = &tail[usize::from(len)..];
                }
                Ok(Record::Txt(text))
            }
        }
    }
}
