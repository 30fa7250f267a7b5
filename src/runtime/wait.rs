//! The one deadline-aware wait: an I/O pollable raced against a clock
//! pollable for the deadline. Every blocking section goes through here.

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use wasi::clocks::monotonic_clock;
use wasi::io::poll::{poll, Pollable};

/// Blocks until `pollable` is ready or `deadline` passes; the timeout error
/// names `section` (e.g. "socket read").
pub fn wait(pollable: &Pollable, deadline: Deadline, section: &str) -> Result<()> {
    match deadline {
        Deadline::Infinite => {
            pollable.block();
            Ok(())
        }
        Deadline::At(at) => {
            // The deadline first: a pollable that always reads ready (a stale
            // `ready()`, a peer that keeps sending) must not hold a loop past it.
            if deadline.is_expired(super::now()) {
                return Err(Error::timeout(section));
            }
            if pollable.ready() {
                return Ok(());
            }
            let timer = monotonic_clock::subscribe_instant(at.0);
            let ready = poll(&[pollable, &timer]);
            if ready.contains(&0) {
                Ok(())
            } else {
                Err(Error::timeout(section))
            }
        }
    }
}

/// Sleeps until `deadline` (a retry backoff, a blockConnection-style wait).
pub fn sleep_until(deadline: Deadline) {
    if let Deadline::At(at) = deadline {
        monotonic_clock::subscribe_instant(at.0).block();
    }
}
