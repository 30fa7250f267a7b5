//! The one deadline-aware wait: an I/O pollable raced against a clock
//! pollable for the deadline. Every blocking section goes through here.

use crate::deadline::Deadline;
use crate::error::Result;
use wasi::clocks::monotonic_clock;
use wasi::io::poll::{poll, Pollable};

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
    check(deadline, section)?;
    match deadline {
        Deadline::Infinite => {
            pollable.block();
            Ok(())
        }
        Deadline::At(at) => {
            // No `ready()` shortcut: callers wait only after a read or write
            // would block, and jco's preview2-shim answers `ready()` from a
            // flag that only `poll` refreshes, so a shortcut spun on a stale
            // `true` until the deadline (examples/node's tests measure it).
            let timer = monotonic_clock::subscribe_instant(at.0);
            poll(&[pollable, &timer]);
            // Whichever woke us, the deadline decides.
            check(deadline, section)
        }
    }
}

/// Sleeps until `deadline` (a retry backoff, a blockConnection-style wait).
pub fn sleep_until(deadline: Deadline) {
    if let Deadline::At(at) = deadline {
        monotonic_clock::subscribe_instant(at.0).block();
    }
}
