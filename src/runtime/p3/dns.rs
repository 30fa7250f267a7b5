//! wasi:sockets 0.3 ip-name-lookup: the face's part of name resolution (the
//! rules around it, `resolve` and `resolve_via`, are shared and re-exported
//! here).

use super::within;
use crate::deadline::Deadline;
use crate::error::Result;
use std::net::IpAddr;
use wasip3::sockets::ip_name_lookup::resolve_addresses;

pub use super::super::resolve::{resolve, resolve_via};

/// What the host's resolver answers for `host` (possibly nothing).
pub(crate) async fn lookup_name(host: &str, deadline: Deadline) -> Result<Vec<IpAddr>> {
    let addrs = within(deadline, "name resolution", async {
        resolve_addresses(host.to_string())
            .await
            .map_err(|e| super::lookup_error_p3(e, &format!("resolve {host}")))
    })
    .await?;
    Ok(addrs.into_iter().map(super::tcp::from_wasi_ip).collect())
}
