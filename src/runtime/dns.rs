//! Name resolution: IP literals and `localhost` names (RFC 6761) need none;
//! a client with DNS servers (those that resolved `mongodb+srv`, or the ones
//! the host configured) asks them first, over the driver's own DNS client;
//! wasi:sockets/ip-name-lookup does the rest. A host that denies name lookup
//! (Spin) thus still reaches servers by name when it grants UDP to a DNS server.

use super::wait;
use crate::deadline::Deadline;
use crate::dns::{Record, RecordType};
use crate::error::{Error, Result};
use std::net::{IpAddr, SocketAddr};
use wasi::sockets::instance_network::instance_network;
use wasi::sockets::ip_name_lookup::{resolve_addresses, ErrorCode};

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
    let network = instance_network();
    let lookup_err = |e: ErrorCode| super::socket_error(e, &format!("resolve {host}"));
    let stream = resolve_addresses(&network, host).map_err(lookup_err)?;
    let pollable = stream.subscribe();
    let mut out = Vec::new();
    loop {
        match stream.resolve_next_address() {
            Ok(Some(addr)) => out.push(super::tcp::from_wasi_ip(addr)),
            Ok(None) => break,
            Err(ErrorCode::WouldBlock) => wait(&pollable, deadline, "name resolution")?,
            Err(e) => return Err(lookup_err(e)),
        }
    }
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

/// `host`'s addresses from `name_servers` (A, then AAAA), falling back to
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
    let mut unreachable = None;
    for rtype in [RecordType::A, RecordType::Aaaa] {
        let answer = match super::udp::lookup(name_servers, host, rtype, deadline).await {
            Ok(answer) => answer,
            Err(e) if e.is_timeout() => return Err(e),
            Err(e) => {
                unreachable = Some(e);
                break;
            }
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
                    return Ok(ips);
                }
            }
            Err(crate::dns::DnsError::NxDomain) => break,
            Err(_) => {}
        }
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
