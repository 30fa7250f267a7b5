//! Load Balancer spec, sans I/O: what a driver in load-balanced mode
//! (`loadBalanced=true`) requires of a connection's handshake. The topology
//! side (one `LoadBalancer` server, never monitored) is in `sdam`.

use crate::error::{Error, Result};
use crate::handshake::HelloReply;

/// The spec's wording: drivers' tests match on it.
const NOT_SUPPORTED: &str =
    "Driver attempted to initialize in load balancing mode, but the server does not support this mode";

/// A load balancer's hello names the mongos behind it (`serviceId`); a server
/// that does not is not behind one.
pub fn check_hello(hello: &HelloReply) -> Result<()> {
    match hello.service_id {
        Some(_) => Ok(()),
        None => Err(Error::invalid_argument(NOT_SUPPORTED)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_without_service_id_is_refused() {
        let plain = HelloReply::default();
        let e = check_hello(&plain).unwrap_err();
        assert!(e.to_string().contains(NOT_SUPPORTED), "{e}");
        let lb = HelloReply {
            service_id: Some(bson::oid::ObjectId::new()),
            ..HelloReply::default()
        };
        check_hello(&lb).unwrap();
    }
}
