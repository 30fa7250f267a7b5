//! wasi:sockets/ip-name-lookup 0.2: the face's part of name resolution (the
//! rules around it are `resolve`'s).

use super::wait;
use crate::deadline::Deadline;
use crate::error::Result;
use std::net::IpAddr;
use wasi::sockets::instance_network::instance_network;
use wasi::sockets::ip_name_lookup::{resolve_addresses, ErrorCode};

/// What the host's resolver answers for `host` (possibly nothing).
pub(super) async fn lookup_name(host: &str, deadline: Deadline) -> Result<Vec<IpAddr>> {
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
    Ok(out)
}
