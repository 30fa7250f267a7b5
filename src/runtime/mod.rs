//! The one transport layer over WASI 0.2: monotonic clock, the deadline-aware
//! wait, TCP, TLS over it, name lookup, DNS over UDP (for `mongodb+srv`) and reading a
//! (preopened) file. Nothing outside this folder touches `wasi::`
//! I/O, and only `wait` calls `poll`. Moving to WASI 0.3 touches only here.

mod clock;
mod dns;
mod host;
mod stream;
mod tcp;
mod tls;
mod udp;
mod wait;

#[cfg(feature = "p3")]
pub mod p3;

pub use clock::now;
pub use host::{env_var, read_file};
pub use stream::Stream;
pub use tcp::TcpStream;
pub use tls::TlsStream;
pub use udp::lookup as dns_lookup;
pub use wait::{block_on, sleep_until, wait, within, CONCURRENT};

use crate::error::{Error, ErrorKind};
use wasi::sockets::network::ErrorCode;

/// What a sandbox denial tells the user to grant.
const GRANT: &str = "grant it in the host (wasmtime CLI: -S inherit-network for TCP and UDP, \
    -S allow-ip-name-lookup for host names; an embedder: WasiCtxBuilder's socket_addr_check \
    and allow_ip_name_lookup); see \"Security: what a host must allow\" in the README";

/// The one decision on which wasi:sockets errors are permanent: `access-denied` and
/// `not-supported` are the host's policy, and `permanent-resolver-failure` is what wasmtime
/// answers when the host does not allow name lookup. Retrying cannot help, so they become
/// `AccessDenied`, which server selection reports at once rather than after its timeout.
/// `invalid-argument` is an address no socket takes (e.g. an IPv4-mapped IPv6 address),
/// which no retry mends either. Every other code is a network error, worth another try.
/// `what` says what failed and names the address (e.g. "connect to 127.0.0.1:27017").
pub(crate) fn socket_error(code: ErrorCode, what: &str) -> Error {
    match code {
        ErrorCode::InvalidArgument => Error::invalid_argument(format!(
            "cannot {what}: the address is not one a socket takes"
        )),
        ErrorCode::AccessDenied | ErrorCode::NotSupported | ErrorCode::PermanentResolverFailure => {
            Error::new(
                ErrorKind::AccessDenied,
                format!("the host does not allow this component to {what}; {GRANT}"),
            )
        }
        _ => Error::network(format!("cannot {what}")),
    }
    .with_cause(code.name())
}

/// Random bytes from wasi:random (session ids).
#[cfg(target_os = "wasi")]
pub fn random_bytes(n: u64) -> Vec<u8> {
    wasi::random::random::get_random_bytes(n)
}

/// Seconds since the Unix epoch, from wasi:clocks/wall-clock (ObjectIds).
#[cfg(target_os = "wasi")]
pub fn unix_seconds() -> u64 {
    wasi::clocks::wall_clock::now().seconds
}

/// Natively, std's clock.
#[cfg(not(target_os = "wasi"))]
pub fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// ObjectIds for one batch: the wall clock read once, and the process's
/// random bytes from wasi:random the first time.
pub fn object_ids() -> crate::object_id::ObjectIds {
    crate::object_id::ObjectIds::at(unix_seconds(), || {
        let mut b = [0u8; 8];
        b.copy_from_slice(&random_bytes(8));
        b
    })
}

/// A random number in [0, 1) for a backoff's jitter (withTransaction, overload retries).
pub fn jitter() -> f64 {
    let mut b = [0u8; 8];
    for (dst, src) in b.iter_mut().zip(random_bytes(8)) {
        *dst = src;
    }
    // 53 random bits: exactly representable, below 1.
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

/// Natively, std's per-process random keys stand in.
#[cfg(not(target_os = "wasi"))]
pub fn random_bytes(n: u64) -> Vec<u8> {
    use std::hash::{BuildHasher, RandomState};
    let state = RandomState::new();
    (0..n).map(|i| state.hash_one(i) as u8).collect()
}

/// What the host configured for DNS: `MONGO_WASI_DNS_SERVER`, and
/// `/etc/resolv.conf` if it preopened it (see `dns::config`).
pub fn dns_config() -> (Option<String>, Option<String>) {
    let env = env_var(crate::dns::config::ENV_VAR);
    let file = match env {
        Some(_) => None,
        None => read_file(crate::dns::config::RESOLV_CONF)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
    };
    (env, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_hosts_refusals_are_permanent() {
        for code in [
            ErrorCode::AccessDenied,
            ErrorCode::NotSupported,
            ErrorCode::PermanentResolverFailure,
        ] {
            let e = socket_error(code, "connect to 127.0.0.1:27017");
            assert_eq!(e.kind, ErrorKind::AccessDenied, "{e}");
            assert!(e.message.contains("127.0.0.1:27017"), "{e}");
            assert!(
                e.message.contains("-S inherit-network"),
                "what to grant: {e}"
            );
            assert!(!e.is_network(), "never retried as a network error: {e}");
        }
        for code in [
            ErrorCode::ConnectionRefused,
            ErrorCode::Timeout,
            ErrorCode::NameUnresolvable,
            ErrorCode::TemporaryResolverFailure,
        ] {
            let e = socket_error(code, "connect to 127.0.0.1:27017");
            assert_eq!(e.kind, ErrorKind::Network, "{e}");
            assert_eq!(e.message, "cannot connect to 127.0.0.1:27017");
        }
    }
}
