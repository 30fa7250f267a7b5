//! The one deadline-aware wait: an I/O pollable raced against a clock
//! pollable for the deadline. Every blocking section goes through here.
//!
//! Host timers wake late (wasmtime's by 1-2 ms), so a timed wait asks the
//! clock to wake it a little early (`WakeSlack`, learned from each wake) and
//! finishes on the clock: it reads the monotonic clock and the pollable's
//! readiness, without sleeping, until one of them decides. That finish lasts
//! at most `WakeSlack::MAX`, and a timed-out operation ends within a fraction
//! of a millisecond of its deadline.

use crate::deadline::{Deadline, Instant, WakeSlack};
use crate::error::{Error, Result};
use std::cell::Cell;
use wasi::clocks::monotonic_clock;
use wasi::io::poll::{poll, Pollable};

thread_local! {
    /// The host's timer lateness as learned so far (one guest thread).
    static SLACK: Cell<WakeSlack> = const { Cell::new(WakeSlack::INITIAL) };
}

/// Fails with a timeout naming `section` once `deadline` has passed. Every
/// pass of an I/O loop calls it (directly, or through `wait`), whether data
/// arrived or not: a server that keeps sending cannot outlast the deadline.
pub fn check(deadline: Deadline, section: &str) -> Result<()> {
    match deadline {
        Deadline::Infinite => Ok(()),
        Deadline::At(_) => deadline.check(super::now(), section),
    }
}

/// Blocks until `pollable` is ready or `deadline` passes; the timeout error
/// names `section` (e.g. "socket read"). The deadline is checked first, so a
/// pollable that is always ready (or a host whose `ready()` lies) still ends.
pub fn wait(pollable: &Pollable, deadline: Deadline, section: &str) -> Result<()> {
    match deadline {
        Deadline::Infinite => {
            pollable.block();
            Ok(())
        }
        Deadline::At(at) => match until(at, Some(pollable)) {
            true => Ok(()),
            false => Err(Error::timeout(section)),
        },
    }
}

/// Sleeps until `deadline` (a retry backoff, a blockConnection-style wait).
pub async fn sleep_until(deadline: Deadline) {
    if let Deadline::At(at) = deadline {
        until(at, None);
    }
}

/// Lets the instance's other tasks run between slices of a long computation
/// (PBKDF2). On WASI 0.2 there are none (one caller per instance): nothing.
pub async fn yield_now() {}

/// Whether operations of one instance run concurrently. Not on WASI 0.2:
/// one export call at a time, so a checkout that would wait for another
/// caller's connection fails at once instead.
pub const CONCURRENT: bool = false;

/// `io` within `deadline`, the timeout naming `section`. On WASI 0.2 every
/// wait blocks inside `wait`, so `io` is ready at its first poll; nothing
/// waits on another caller (`CONCURRENT`).
pub async fn within<T>(
    deadline: Deadline,
    section: &str,
    io: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    check(deadline, section)?;
    io.await
}

/// Waits for `pollable` (true) or for the clock to reach `at` (false). Every
/// pass reads the clock first, so the deadline wins a tie. Readiness is what
/// `poll` reports, never `ready()`: jco's preview2-shim answers `ready()` from a
/// flag only `poll` refreshes, and a stale `true` spun until the deadline
/// (examples/node's tests measure the CPU time).
fn until(at: Instant, pollable: Option<&Pollable>) -> bool {
    loop {
        let now = super::now();
        if now >= at {
            return false;
        }
        let wake = SLACK.get().wake_at(at);
        // Too close to `at` for the host's timers: finish on the clock, asking
        // the pollable without sleeping (a timer that is already due).
        let finishing = now >= wake;
        let timer = match finishing {
            true => monotonic_clock::subscribe_duration(0),
            false => monotonic_clock::subscribe_instant(wake.0),
        };
        let ready = match pollable {
            Some(p) => poll(&[p, &timer]),
            None => {
                timer.block();
                vec![1]
            }
        };
        if ready.contains(&0) {
            return true;
        }
        if !finishing && ready.contains(&1) {
            let mut slack = SLACK.get();
            slack.woke(wake, super::now());
            SLACK.set(slack);
        }
    }
}
