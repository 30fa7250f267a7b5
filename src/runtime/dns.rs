//! Name resolution over wasi:sockets/ip-name-lookup; IP literals skip it. A
//! client that resolved `mongodb+srv` asks its DNS servers first.

use super::wait;
use crate::deadline::Deadline;
use crate::dns::{Record, RecordType};
use crate::error::{Error, Result};
use std::net::{IpAddr, SocketAddr};
use wasi::sockets::instance_network::instance_network;
use wasi::sockets::ip_name_lookup::{resolve_addresses, ErrorCode};

pub fn resolve(host: &str, deadline: Deadline) -> Result<Vec<IpAddr>> {
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return Ok(vec![ip]);
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

/// `host`'s addresses from `name_servers` (A, then AAAA), falling back to
/// ip-name-lookup when they know none. `localhost` names never go to DNS
/// (RFC 6761), and no servers means ip-name-lookup alone.
pub fn resolve_via(
    host: &str,
    name_servers: &[SocketAddr],
    deadline: Deadline,
) -> Result<Vec<IpAddr>> {
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    let local = host == "localhost" || host.ends_with(".localhost");
    if name_servers.is_empty() || local || literal.parse::<IpAddr>().is_ok() {
        return resolve(host, deadline);
    }
    for rtype in [RecordType::A, RecordType::Aaaa] {
        match super::udp::lookup(name_servers, host, rtype, deadline)? {
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
}
