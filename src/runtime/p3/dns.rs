//! Name resolution, as the 0.2 runtime's: IP literals and `localhost` names
//! (RFC 6761) need none; name servers (those that resolved `mongodb+srv`, or
//! the host's) are asked first over the driver's own DNS client;
//! wasi:sockets 0.3 ip-name-lookup does the rest.

use super::within;
use crate::deadline::Deadline;
use crate::dns::{Record, RecordType};
use crate::error::{Error, Result};
use std::net::{IpAddr, SocketAddr};
use wasip3::sockets::ip_name_lookup::resolve_addresses;

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
    let addrs = within(deadline, "name resolution", async {
        resolve_addresses(host.to_string())
            .await
            .map_err(|e| super::lookup_error_p3(e, &format!("resolve {host}")))
    })
    .await?;
    if addrs.is_empty() {
        return Err(Error::network(format!("{host} resolved to no addresses")));
    }
    Ok(addrs.into_iter().map(super::tcp::from_wasi_ip).collect())
}

/// `localhost` and names under it (RFC 6761).
fn is_localhost(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// `host`'s addresses from `name_servers` (A, then AAAA), falling back to
/// ip-name-lookup when they know none or cannot be reached. `localhost` names
/// never go to DNS (RFC 6761), and no servers means ip-name-lookup alone.
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
