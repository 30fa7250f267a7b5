//! Each test runs on its own thread under a wall-clock cap. The guest's store
//! traps at the cap (epoch interruption); a guest blocked inside a host call
//! cannot be reached that way, so the thread is abandoned a little later.

use super::testcase::{self, Job};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

/// How long after the cap a thread that did not trap is given up on.
const GRACE: Duration = Duration::from_secs(5);

pub enum Verdict {
    Pass,
    Fail(String),
}

pub struct Finished {
    pub verdict: Verdict,
    /// False when the test thread never came back: its fail points may still be on.
    pub cleaned_up: bool,
}

pub fn run(job: Job) -> Finished {
    let cap = job.cap;
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("spec-test".into())
        .spawn(move || {
            let outcome = catch_unwind(AssertUnwindSafe(|| testcase::run(&job)));
            let _ = tx.send(outcome);
        });
    if let Err(e) = spawned {
        return Finished {
            verdict: Verdict::Fail(format!("cannot start a test thread: {e}")),
            cleaned_up: true,
        };
    }
    match rx.recv_timeout(cap + GRACE) {
        Ok(Ok(Ok(()))) => Finished {
            verdict: Verdict::Pass,
            cleaned_up: true,
        },
        Ok(Ok(Err(fail))) => Finished {
            verdict: Verdict::Fail(fail.0),
            cleaned_up: true,
        },
        Ok(Err(panic)) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Finished {
                verdict: Verdict::Fail(format!("the runner panicked: {msg}")),
                cleaned_up: false,
            }
        }
        Err(_) => Finished {
            verdict: Verdict::Fail(format!(
                "exceeded the {} s cap: the guest is blocked in a host call (thread abandoned)",
                cap.as_secs()
            )),
            cleaned_up: false,
        },
    }
}
