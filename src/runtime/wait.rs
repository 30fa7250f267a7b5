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
pub fn sleep_until(deadline: Deadline) {
    if let Deadline::At(at) = deadline {
        until(at, None);
    }
}

/// Waits for `pollable` (true) or for the clock to reach `at` (false). Every
/// pass reads the clock before the pollable, so the deadline wins a tie.
fn until(at: Instant, pollable: Option<&Pollable>) -> bool {
    loop {
        let now = super::now();
        if now >= at {
            return false;
        }
        if pollable.is_some_and(Pollable::ready) {
            return true;
        }
        let wake = SLACK.get().wake_at(at);
        if now >= wake {
            // The finish: too close to `at` for the host's timers.
            continue;
        }
        let timer = monotonic_clock::subscribe_instant(wake.0);
        let timer_fired = match pollable {
            Some(p) => poll(&[p, &timer]).contains(&1),
            None => {
                timer.block();
                true
            }
        };
        if timer_fired {
            let mut slack = SLACK.get();
            slack.woke(wake, super::now());
            SLACK.set(slack);
        }
    }
}
