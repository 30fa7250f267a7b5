//! PBKDF2 as SCRAM runs it, timed: ring's `pbkdf2::derive` (one call, no
//! deadline) against the driver's resumable `Pbkdf2` in slices of
//! `ITERATIONS_PER_SLICE`, and the hash's compression function alone (an
//! HMAC iteration is two compression blocks: inner and outer), so the rest
//! is per-iteration overhead. Built natively and for wasm32-wasip2 (with and
//! without `+simd128`) by `cargo xtask bench --only pbkdf2`, which runs each.
//!
//! Prints figures; asserts nothing (timing belongs in the benchmark).

use mongo_wasi::auth::scram::{Hash, Pbkdf2, ITERATIONS_PER_SLICE};
use ring::{digest, pbkdf2};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

/// A production deployment's count (MongoDB's default SCRAM-SHA-256 count).
const ITERATIONS: u32 = 15_000;
const RUNS: usize = 15;
/// Bytes hashed to time the compression function alone.
const BLOCK_BYTES: usize = 1 << 20;

/// Milliseconds, the median of `RUNS` after one warm-up run.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let mut ms: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms[RUNS / 2]
}

fn main() {
    let iterations: u32 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("usage: pbkdf2-bench [ITERATIONS]"))
        .unwrap_or(ITERATIONS);
    let n = NonZeroU32::new(iterations).expect("at least one iteration");
    let build = if cfg!(target_arch = "wasm32") {
        if cfg!(target_feature = "simd128") {
            "wasm32-wasip2 +simd128"
        } else {
            "wasm32-wasip2"
        }
    } else {
        std::env::consts::ARCH
    };
    println!("PBKDF2, {iterations} iterations, {build}, median of {RUNS} (ms)");
    println!(
        "  {:<8} {:>8} {:>8} {:>7} {:>10} {:>9} {:>9}",
        "hash", "ring", "driver", "d/ring", "2 blocks", "overhead", "slice"
    );
    let (password, salt) = (b"pencil".as_slice(), b"QSXCR+Q6sek8bf92".as_slice());
    let data = vec![0x5au8; BLOCK_BYTES];
    for (name, hash, alg, digest_alg, len) in [
        (
            "SHA-1",
            Hash::Sha1,
            pbkdf2::PBKDF2_HMAC_SHA1,
            &digest::SHA1_FOR_LEGACY_USE_ONLY,
            20,
        ),
        (
            "SHA-256",
            Hash::Sha256,
            pbkdf2::PBKDF2_HMAC_SHA256,
            &digest::SHA256,
            32,
        ),
    ] {
        let mut out = vec![0u8; len];
        let ring_ms = time(|| {
            pbkdf2::derive(alg, n, black_box(salt), black_box(password), &mut out);
            black_box(&out);
        });
        let mut ours = Vec::new();
        let driver_ms = time(|| {
            let mut d = Pbkdf2::new(hash, black_box(password), black_box(salt), n);
            while !d.step(ITERATIONS_PER_SLICE) {}
            ours = d.output().expect("finished").to_vec();
        });
        assert_eq!(ours, out, "{name}: the driver's PBKDF2 is ring's");
        // The compression function alone, per 64-byte block, times the two
        // blocks each iteration hashes.
        let blocks = (BLOCK_BYTES / 64) as f64;
        let block_ms = time(|| {
            black_box(digest::digest(digest_alg, black_box(&data)));
        }) / blocks;
        let floor_ms = 2.0 * f64::from(iterations) * block_ms;
        let slice_ms = driver_ms * f64::from(ITERATIONS_PER_SLICE) / f64::from(iterations);
        println!(
            "  {name:<8} {ring_ms:>8.2} {driver_ms:>8.2} {:>7.2} {floor_ms:>10.2} {:>8.0}% {slice_ms:>9.3}",
            driver_ms / ring_ms,
            100.0 * (driver_ms - floor_ms) / driver_ms,
        );
    }
    println!(
        "  (d/ring: the driver's time over ring's; 2 blocks: the compression function's share, \
         two 64-byte blocks per iteration; overhead: the rest of the driver's time; slice: \
         {ITERATIONS_PER_SLICE} iterations, the work between two deadline checks)"
    );
}
