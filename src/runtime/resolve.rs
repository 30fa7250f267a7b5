//! Name resolution and connecting, the same on both faces: IP literals and
//! `localhost` names (RFC 6761) need no lookup; a client with DNS servers
//! (those that resolved `mongodb+srv`, or the ones the host configured) asks
//! them first, over the driver's own DNS client (`dns_udp`); the face's
//! wasi:sockets ip-name-lookup (`lookup_name`) does the rest. A host that
//! denies name lookup (Spin) thus still reaches servers by name when it grants
//! UDP to a DNS server. Then each address in turn is connected to.
//!
//! Nothing here recurses: the DNS client reaches its servers by address
//! (`TcpStream::connect_ip`), never through `resolve_via`.
//!
//! What the DNS servers answered is kept per instance with its TTL, for a
//! warm state (`learned_addresses`), and answers for its name while fresh,
//! as a caching resolver's would: each new connection to a server (a
//! monitor's, an RTT monitor's, a pool's) asks once per TTL, not once per
//! connection. A warm state's addresses (`adopt_addresses`) answer the same way.

use super::{lookup_name, TcpStream};
use crate::deadline::Deadline;
use crate::dns::{Record, RecordType};
use crate::error::{Error, ErrorKind, Result};
use crate::warm::{HostAddresses, MAX_ADDRESSES, MAX_HOSTS, MAX_SRV_TTL};
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};

thread_local! {
    /// The DNS servers' answers this instance got, newest last (at most
    /// `MAX_HOSTS`): what a warm state hands on.
    static LEARNED: RefCell<Vec<HostAddresses>> = const { RefCell::new(Vec::new()) };
    /// A warm state's answers, used for their name while fresh.
    static ADOPTED: RefCell<Vec<HostAddresses>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `entry` (replacing the same name's), newest last, bounded.
fn keep(list: &RefCell<Vec<HostAddresses>>, entry: HostAddresses) {
    let mut list = list.borrow_mut();
    list.retain(|e| e.host != entry.host);
    if list.len() == MAX_HOSTS {
        list.remove(0);
    }
    list.push(entry);
}

/// The fresh answers this instance's DNS servers gave (or a warm state
/// brought) for `hosts`, for a warm state.
pub fn learned_addresses(hosts: &[&str]) -> Vec<HostAddresses> {
    let now = super::unix_seconds();
    LEARNED.with(|learned| {
        learned
            .borrow()
            .iter()
            .filter(|e| hosts.iter().any(|h| e.fresh_for(h, now)))
            .cloned()
            .collect()
    })
}

/// Takes a warm state's addresses: each answers for its name, while fresh,
/// in place of the DNS servers. How many were taken.
pub fn adopt_addresses(entries: &[HostAddresses]) -> usize {
    ADOPTED.with(|adopted| {
        for entry in entries.iter().take(MAX_HOSTS) {
            keep(adopted, entry.clone());
        }
    });
    entries.len().min(MAX_HOSTS)
}

/// `list`'s fresh answer for `host`.
fn fresh(list: &RefCell<Vec<HostAddresses>>, host: &str) -> Option<HostAddresses> {
    let now = super::unix_seconds();
    list.borrow()
        .iter()
        .find(|e| e.fresh_for(host, now))
        .cloned()
}

/// A fresh adopted answer for `host`, handed on to the next warm state too.
fn adopted(host: &str) -> Option<Vec<IpAddr>> {
    let entry = ADOPTED.with(|adopted| fresh(adopted, host))?;
    let ips = entry.ips.clone();
    LEARNED.with(|learned| keep(learned, entry));
    Some(ips)
}

/// A fresh answer the DNS servers gave this instance for `host`.
fn learned(host: &str) -> Option<Vec<IpAddr>> {
    LEARNED.with(|learned| fresh(learned, host)).map(|e| e.ips)
}

/// `host`'s addresses: a literal is its own, `localhost` names the loopback
/// addresses, anything else the face's ip-name-lookup.
pub async fn resolve(host: &str, deadline: Deadline) -> Result<Vec<IpAddr>> {
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    if is_localhost(host) {
        // RFC 6761: the loopback addresses, never a lookup.
        return Ok(vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
        ]);
    }
    let out = lookup_name(host, deadline).await?;
    if out.is_empty() {
        return Err(Error::network(format!("{host} resolved to no addresses")));
    }
    Ok(out)
}

/// `localhost` and names under it (RFC 6761).
fn is_localhost(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// `host`'s addresses from `name_servers` (A and AAAA at once), falling back to
/// ip-name-lookup when they know none or cannot be reached (the host denied
/// UDP to them, say). `localhost` names never go to DNS (RFC 6761), and no
/// servers means ip-name-lookup alone.
pub async fn resolve_via(
    host: &str,
    name_servers: &[SocketAddr],
    deadline: Deadline,
) -> Result<Vec<IpAddr>> {
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if name_servers.is_empty() || is_localhost(host) || literal.parse::<IpAddr>().is_ok() {
        return resolve(host, deadline).await;
    }
    if let Some(ips) = adopted(host).or_else(|| learned(host)) {
        return Ok(ips);
    }
    let mut unreachable = None;
    // A and AAAA at once (one round trip, as a system resolver asks); the
    // IPv4 addresses when there are any, else the IPv6 ones. An A answer
    // with addresses does not wait for AAAA's (a server that drops AAAA
    // queries costs nothing then).
    let questions = [(host, RecordType::A), (host, RecordType::Aaaa)];
    let has_addresses =
        |a: &Option<super::dns_udp::Answer>| matches!(a, Some(Ok(records)) if !records.is_empty());
    let enough = |answers: &[Option<super::dns_udp::Answer>]| {
        answers.first().is_some_and(has_addresses) || answers.iter().all(Option::is_some)
    };
    match super::dns_udp::lookup_until_timed(name_servers, &questions, &enough, deadline).await {
        Ok((answers, ttls)) => {
            for (answer, ttl) in answers.into_iter().zip(ttls) {
                let Some(answer) = answer else {
                    continue;
                };
                match answer {
                    Ok(records) => {
                        let ips: Vec<IpAddr> = records
                            .into_iter()
                            .filter_map(|r| match r {
                                Record::A(ip) => Some(IpAddr::V4(ip)),
                                Record::Aaaa(ip) => Some(IpAddr::V6(ip)),
                                _ => None,
                            })
                            .collect();
                        if !ips.is_empty() {
                            let ttl = u64::from(ttl.unwrap_or(0)).min(MAX_SRV_TTL);
                            let entry = HostAddresses {
                                host: host.trim_end_matches('.').to_ascii_lowercase(),
                                ips: ips.iter().copied().take(MAX_ADDRESSES).collect(),
                                expires: super::unix_seconds().saturating_add(ttl),
                            };
                            LEARNED.with(|learned| keep(learned, entry));
                            return Ok(ips);
                        }
                    }
                    Err(crate::dns::DnsError::NxDomain) => break,
                    Err(_) => {}
                }
            }
        }
        Err(e) if e.is_timeout() => return Err(e),
        Err(e) => unreachable = Some(e),
    }
    resolve(host, deadline)
        .await
        .map_err(|e| match unreachable {
            // Neither way worked: say both.
            Some(dns) => Error {
                message: format!(
                    "{}; the DNS servers were not reachable either: {}",
                    e.message, dns.message
                ),
                ..e
            },
            None => e,
        })
}

impl TcpStream {
    /// Resolves `host` and connects to the first address that answers.
    pub async fn connect(host: &str, port: u16, deadline: Deadline) -> Result<TcpStream> {
        Self::connect_via(host, port, &[], deadline).await
    }

    /// As `connect`, asking `name_servers` (if any) for `host`'s addresses
    /// first: the servers that answered a `mongodb+srv` lookup know its targets.
    pub async fn connect_via(
        host: &str,
        port: u16,
        name_servers: &[SocketAddr],
        deadline: Deadline,
    ) -> Result<TcpStream> {
        let ips = resolve_via(host, name_servers, deadline)
            .await
            .map_err(|mut e| {
                // Name the address the lookup was for.
                e.message = format!("{} (for {host}:{port})", e.message);
                e
            })?;
        let mut last: Option<Error> = None;
        for ip in ips {
            match Self::connect_ip(ip, port, deadline).await {
                Ok(s) => return Ok(s),
                Err(e) if e.is_timeout() => return Err(e),
                // A denied address is reported only if no other failed for another reason.
                Err(e) => {
                    if last
                        .as_ref()
                        .is_none_or(|l| l.kind == ErrorKind::AccessDenied)
                    {
                        last = Some(e);
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::network(format!("no address for {host}"))))
    }
}

/// `ip:port` as a connect error names it (`[v6]:port` for IPv6), or the
/// error for an address WASI sockets refuse (IPv4-mapped IPv6, which they
/// answer with a bare invalid-argument), saying which address to use.
pub(super) fn peer(ip: IpAddr, port: u16) -> Result<String> {
    let peer = match ip {
        IpAddr::V6(_) => format!("[{ip}]:{port}"),
        IpAddr::V4(_) => format!("{ip}:{port}"),
    };
    if let IpAddr::V6(v6) = ip {
        if let Some(v4) = v6.to_ipv4_mapped() {
            return Err(Error::invalid_argument(format!(
                "cannot connect to {peer}: WASI sockets do not take IPv4-mapped IPv6 \
                 addresses; use {v4}:{port}"
            )));
        }
    }
    Ok(peer)
}
