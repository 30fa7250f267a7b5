//! Seedlist discovery at the first operation: the SRV and TXT lookups of a
//! `mongodb+srv` URI, at once, over `runtime::dns_lookup_all`, turned into seeds and
//! options by `uri::seedlist`. Nothing here runs at client construction.
//! Fresh answers from a warm state (`crate::warm::SrvAnswers`) for the same
//! SRV name stand in for the lookups; they pass the same seedlist rules.

use crate::deadline::Deadline;
use crate::dns::{self, DnsError, Record, RecordType};
use crate::error::{Error, ErrorKind, Result};
use crate::runtime;
use crate::uri::seedlist::{self, SrvTarget};
use crate::uri::ConnectionString;
use crate::warm::{SrvAnswers, MAX_SRV_TTL};
use std::net::SocketAddr;

/// A resolved `mongodb+srv` URI, the DNS servers that resolved it, and the
/// answers it was resolved from (for a warm state).
pub struct Discovered {
    pub cs: ConnectionString,
    pub name_servers: Vec<SocketAddr>,
    pub answers: SrvAnswers,
}

/// Looks up the SRV and TXT records of `cs` (together) within `deadline`,
/// unless `warm` holds fresh answers for the same SRV name. A DNS server
/// that does not answer in time is a timeout error; a name without records,
/// or records that break the spec's rules, are errors that say which.
pub async fn discover(
    cs: &ConnectionString,
    warm: Option<&SrvAnswers>,
    deadline: Deadline,
) -> Result<Discovered> {
    let (env, file) = runtime::dns_config();
    let servers = dns::config::name_servers(env.as_deref(), file.as_deref())
        .map_err(Error::invalid_argument)?;
    let srv_name = seedlist::srv_query(cs)?;
    let now = runtime::unix_seconds();
    if let Some(warm) = warm.filter(|w| w.fresh_for(&srv_name, now)) {
        let srv: Vec<SrvTarget> = warm
            .targets
            .iter()
            .map(|(host, port)| SrvTarget {
                host: host.clone(),
                port: *port,
            })
            .collect();
        let resolved = seedlist::apply(cs, &srv, &warm.txt, &mut shuffler())?;
        return Ok(Discovered {
            cs: resolved,
            name_servers: servers,
            answers: warm.clone(),
        });
    }
    let host = seedlist::host(cs)?;
    // SRV and TXT at once: one round trip for both.
    let mut both = runtime::dns_lookup_all_timed(
        &servers,
        &[(&srv_name, RecordType::Srv), (host, RecordType::Txt)],
        deadline,
    )
    .await?
    .into_iter();
    let ((srv_answer, srv_ttl), (txt_answer, txt_ttl)) = match (both.next(), both.next()) {
        (Some(srv), Some(txt)) => (srv, txt),
        _ => return Err(not_found(&srv_name, "the DNS lookup gave no answers")),
    };
    let srv: Vec<SrvTarget> = records(&srv_name, RecordType::Srv, srv_answer)?
        .into_iter()
        .filter_map(|r| match r {
            Record::Srv { port, target, .. } => Some(SrvTarget { host: target, port }),
            _ => None,
        })
        .collect();
    if srv.is_empty() {
        return Err(not_found(
            &srv_name,
            "the DNS server has no SRV records for it",
        ));
    }
    let txt: Vec<Vec<u8>> = records(host, RecordType::Txt, txt_answer)?
        .into_iter()
        .filter_map(|r| match r {
            Record::Txt(text) => Some(text),
            _ => None,
        })
        .collect();
    let resolved = seedlist::apply(cs, &srv, &txt, &mut shuffler())?;
    // Reusable for the smallest TTL of both answers (a missing TXT record
    // has none), at most a day.
    let ttl = srv_ttl.into_iter().chain(txt_ttl).min().unwrap_or(0);
    let answers = SrvAnswers {
        name: srv_name.trim_end_matches('.').to_ascii_lowercase(),
        targets: srv.iter().map(|t| (t.host.clone(), t.port)).collect(),
        txt,
        expires: now.saturating_add(u64::from(ttl).min(MAX_SRV_TTL)),
    };
    Ok(Discovered {
        cs: resolved,
        name_servers: servers,
        answers,
    })
}

/// The random choice `seedlist::apply` makes with srvMaxHosts.
fn shuffler() -> impl FnMut(usize) -> usize {
    let mut x = runtime::random_bytes(8)
        .iter()
        .fold(0x9E37_79B9_7F4A_7C15u64, |acc, b| {
            acc.rotate_left(8) ^ u64::from(*b)
        })
        | 1;
    move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n.max(1) as u64) as usize
    }
}

/// The records, or none for NXDOMAIN; other DNS failures are errors.
fn records(
    name: &str,
    rtype: RecordType,
    answer: std::result::Result<Vec<Record>, DnsError>,
) -> Result<Vec<Record>> {
    match answer {
        Ok(records) => Ok(records),
        // A missing TXT record only means no default options.
        Err(DnsError::NxDomain) if rtype == RecordType::Txt => Ok(Vec::new()),
        Err(e) => Err(not_found(name, &format!("the {rtype} lookup failed: {e}"))),
    }
}

/// The URI could not be used to find hosts (the spec's error), with the reason.
fn not_found(name: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::ServerSelection,
        format!("mongodb+srv: cannot find the hosts of {name}: {why}"),
    )
}

#[cfg(all(test, not(feature = "p3")))]
mod tests {
    use super::*;

    fn warm(target: &str, expires: u64) -> SrvAnswers {
        SrvAnswers {
            name: "_mongodb._tcp.test1.test.build.10gen.cc".into(),
            targets: vec![(target.into(), 27017)],
            txt: vec![b"replicaSet=repl0&authSource=thisDB".to_vec()],
            expires,
        }
    }

    /// Fresh answers for the URI's SRV name stand in for DNS (no lookup:
    /// the future is ready at once) and pass the seedlist rules like a DNS
    /// answer: a target outside the SRV name's domain is still an error.
    #[test]
    fn fresh_warm_answers_need_no_lookup_and_keep_the_seedlist_rules() {
        if runtime::dns_config() == (None, None) {
            return; // no DNS configuration here: discovery refuses to start
        }
        let cs = crate::uri::parse("mongodb+srv://test1.test.build.10gen.cc/").unwrap();
        let soon = runtime::unix_seconds() + 60;
        let deadline = Deadline::after(runtime::now(), std::time::Duration::from_secs(5));
        let answers = warm("localhost.test.build.10gen.cc", soon);
        let found = runtime::block_on(discover(&cs, Some(&answers), deadline)).unwrap();
        assert_eq!(found.answers, answers);
        assert_eq!(found.cs.options.replica_set.as_deref(), Some("repl0"));
        assert_eq!(found.cs.hosts.len(), 1);
        let outside = warm("evil.example.com", soon);
        let e = runtime::block_on(discover(&cs, Some(&outside), deadline))
            .err()
            .expect("a target outside the domain");
        assert!(e.message.contains("evil.example.com"), "{e}");
    }
}
