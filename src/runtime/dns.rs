//! Name resolution over wasi:sockets/ip-name-lookup; IP literals skip it.

use super::wait;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use std::net::IpAddr;
use wasi::sockets::instance_network::instance_network;
use wasi::sockets::ip_name_lookup::{resolve_addresses, ErrorCode};

pub fn resolve(host: &str, deadline: Deadline) -> Result<Vec<IpAddr>> {
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let network = instance_network();
    let lookup_err = |e: ErrorCode| {
        Error::network(format!("cannot resolve {host}")).with_cause(format!("{e:?}"))
    };
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
