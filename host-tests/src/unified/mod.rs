//! A runner for the MongoDB unified test format (`unified-test-format.md` in the
//! specifications repository) that drives the mongo-wasi component through its
//! WIT exports, as a guest's host would.
//!
//! - `runner`: suites and files; which tests run, on which topology, or why not.
//! - `deployment`: the failpoint proxies in front of nx-27017 and what they report;
//!   `tls`: the CA clients trust when the proxies terminate TLS (`--tls`).
//! - `worker` / `testcase` / `engine`: one test on its own thread and component
//!   instance, trapped by epoch interruption at its wall-clock cap.
//! - `entities`, `uri`, `operations/*`, `internal`: the entity map and client URIs,
//!   the WIT calls per entity type and test-runner operation, the internal client.
//! - `matching`, `errors`, `events`, `logs`: expectResult, expectError, expectEvents,
//!   expectLogMessages.
//! - `requirements`, `server_version`, `skips`, `report`: runOnRequirements and the server
//!   version each test is given, the checked-in lists, the results.

pub mod args;
pub mod deployment;
pub mod engine;
pub mod entities;
pub mod errors;
pub mod events;
mod internal;
pub mod logs;
pub mod matching;
mod operations;
pub mod report;
pub mod requirements;
pub mod runner;
pub mod server_version;
pub mod skips;
pub mod testcase;
pub mod tls;
pub mod uri;
pub mod worker;

/// Why a test did not pass: the first assertion that failed, or why the runner
/// could not go on with it.
#[derive(Debug)]
pub struct Fail(pub String);

pub type Step<T> = Result<T, Fail>;

impl From<wasmtime::Error> for Fail {
    fn from(e: wasmtime::Error) -> Fail {
        if engine::is_interrupt(&e) {
            Fail("exceeded the per-test time cap (the guest was interrupted)".into())
        } else {
            Fail(format!("the guest trapped: {e:#}"))
        }
    }
}

impl From<String> for Fail {
    fn from(s: String) -> Fail {
        Fail(s)
    }
}
