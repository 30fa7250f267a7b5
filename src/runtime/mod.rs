//! The one transport layer over WASI 0.2: monotonic clock, the deadline-aware
//! wait, TCP, TLS over it, name lookup, DNS over UDP (for `mongodb+srv`) and reading a
//! (preopened) file. Nothing outside this folder touches `wasi::`
//! I/O, and only `wait` calls `poll`. Moving to WASI 0.3 touches only here.

mod clock;
mod dns;
mod stream;
mod tcp;
mod tls;
mod udp;
mod wait;

pub use clock::now;
pub use stream::Stream;
pub use tcp::TcpStream;
pub use tls::TlsStream;
pub use udp::lookup as dns_lookup;
pub use wait::{sleep_until, wait};

/// Random bytes from wasi:random (session ids).
#[cfg(target_os = "wasi")]
pub fn random_bytes(n: u64) -> Vec<u8> {
    wasi::random::random::get_random_bytes(n)
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
    let env = std::env::var(crate::dns::config::ENV_VAR).ok();
    let file = match env {
        Some(_) => None,
        None => std::fs::read_to_string(crate::dns::config::RESOLV_CONF).ok(),
    };
    (env, file)
}

/// A whole file, through wasi:filesystem: only under a directory the host preopened.
pub fn read_file(path: &str) -> std::io::Result<Vec<u8>> {
    std::fs::read(path)
}
