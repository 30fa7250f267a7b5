//! The one transport layer over WASI 0.2: monotonic clock, the deadline-aware
//! wait, TCP and name lookup. Nothing outside this folder touches `wasi::`
//! I/O, and only `wait` calls `poll`. Moving to WASI 0.3 touches only here.

mod clock;
mod dns;
mod tcp;
mod wait;

pub use clock::now;
pub use tcp::TcpStream;
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
