//! The one transport layer: monotonic clock, the deadline-aware wait, TCP,
//! TLS over it, name lookup, DNS over UDP (for `mongodb+srv`) and reading a
//! (preopened) file. Nothing outside this folder touches WASI I/O.
//!
//! Two faces, one front: without feature `p3` the WASI 0.2 modules here
//! (`clock`, `tcp`, `dns`, `udp`, `wait`: every wait blocks in `wait`, one
//! caller per instance); with it WASI 0.3's (`p3/`: every wait is an await, so
//! operations run concurrently). Shared by both: `stream`, `tls`, `host`,
//! `resolve` (name resolution and connecting to each address), `dns_udp` (the
//! DNS client) and `addr` (address conversions); each face keeps only what
//! touches its WASI: the sockets, the waits, the clock.

#[macro_use]
mod addr;
mod dns_udp;
mod host;
mod resolve;
mod stream;
mod tls;

// Natively (unit tests) std's clock stands in on either face.
#[cfg(any(not(feature = "p3"), not(target_os = "wasi")))]
mod clock;
#[cfg(not(feature = "p3"))]
mod dns;
#[cfg(not(feature = "p3"))]
mod tcp;
#[cfg(not(feature = "p3"))]
mod udp;
#[cfg(not(feature = "p3"))]
mod wait;

#[cfg(feature = "p3")]
pub mod p3;

#[cfg(not(feature = "p3"))]
pub use clock::now;
#[cfg(not(feature = "p3"))]
pub use tcp::TcpStream;
#[cfg(not(feature = "p3"))]
pub use wait::{check, sleep_until, wait, within, yield_now, CONCURRENT};

#[cfg(feature = "p3")]
pub use p3::{check, now, sleep_until, within, yield_now, TcpStream, CONCURRENT};

pub use resolve::{adopt_addresses, learned_addresses};

pub use dns_udp::{
    lookup as dns_lookup, lookup_all as dns_lookup_all, lookup_all_timed as dns_lookup_all_timed,
};

#[cfg(feature = "p3")]
use p3::{dns::lookup_name, udp::Channel};
/// What each face gives the shared modules: ip-name-lookup (`resolve`) and
/// a UDP channel to one DNS server (`dns_udp`).
#[cfg(not(feature = "p3"))]
use {dns::lookup_name, udp::Channel};

/// Runs an operation of the async core to its end on WASI 0.2. Every wait of
/// the 0.2 runtime blocks inside `wait` (one caller per instance: the sync
/// exports), so the future is ready at its first poll; the loop is only for
/// a foreign future that is not. Natively (unit tests with `p3`; no 0.3 host)
/// a future that needs no I/O runs here too.
///
/// No `block_on` on 0.3: a nested event loop inside a task would starve the
/// other tasks (a connection another operation holds, a detached kill), so
/// sync code there is an error at build time, not a deadlock at run time.
#[cfg(any(not(feature = "p3"), not(target_os = "wasi")))]
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

// On 0.3 too, `host` and `random_bytes`/`unix_seconds` stay on WASI 0.2 (the
// `wasi` crate): Rust std imports 0.2 anyway, and 0.3 hosts provide both.
pub use host::{env_var, read_file};
pub use stream::Stream;
pub use tls::TlsStream;

/// Runs `fut` to its end without the caller awaiting it: the I/O of a `Drop`
/// (a cursor's killCursors, a client's endSessions). WASI 0.2 runs it here
/// and now, as before (one caller per instance, every wait blocks).
#[cfg(not(feature = "p3"))]
pub fn detach(fut: impl std::future::Future<Output = ()> + 'static) {
    block_on(fut)
}

/// On WASI 0.3 `fut` becomes a task of its own (wit-bindgen's executor,
/// which runs it after the current export returns if need be).
#[cfg(feature = "p3")]
pub fn detach(fut: impl std::future::Future<Output = ()> + 'static) {
    // Dropping the handle detaches the task; it still runs to its end.
    drop(wit_bindgen::spawn_local(fut));
}

#[cfg(not(feature = "p3"))]
use crate::error::{Error, ErrorKind};
#[cfg(not(feature = "p3"))]
use wasi::sockets::network::ErrorCode;

/// What a sandbox denial tells the user to grant.
#[cfg(not(feature = "p3"))]
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
/// (0.3's codes: `p3::socket_error_p3`.)
#[cfg(not(feature = "p3"))]
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

#[cfg(all(test, not(feature = "p3")))]
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
