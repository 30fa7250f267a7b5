//! The I/O runtime over WASI 0.3 (the async component model): the same face as
//! the 0.2 runtime, async. Futures here run on wit-bindgen's executor, one task
//! per export call; any of them may be dropped at any await (see `TcpStream`
//! for what a dropped read or write leaves behind).
//!
//! One race only: `within` runs an I/O future against the monotonic clock.
//! Every I/O await goes through it, and every loop pass checks the deadline
//! (`check`), so data that keeps arriving cannot outlast it.

pub mod dns;
pub mod tcp;
pub mod udp;

pub use super::dns_udp::{
    lookup as dns_lookup, lookup_all as dns_lookup_all, lookup_all_timed as dns_lookup_all_timed,
};
pub use tcp::TcpStream;

use crate::deadline::{Deadline, WakeSlack};
use crate::error::{Error, ErrorKind, Result};
use std::cell::Cell;
use std::future::Future;
use wasip3::clocks::monotonic_clock;
use wasip3::sockets::ip_name_lookup::ErrorCode as LookupErrorCode;
use wasip3::sockets::types::ErrorCode;

thread_local! {
    /// The host's timer lateness as learned so far (one guest thread; a
    /// `Cell`, read and set between awaits, never held across one).
    static SLACK: Cell<WakeSlack> = const { Cell::new(WakeSlack::INITIAL) };
}

/// Now, on wasi:clocks 0.3's monotonic clock (the same clock as 0.2's).
#[cfg(target_os = "wasi")]
pub fn now() -> crate::deadline::Instant {
    crate::deadline::Instant(monotonic_clock::now())
}

/// Natively (unit tests; 0.3's imports are stubs there) std's clock.
#[cfg(not(target_os = "wasi"))]
pub use super::clock::now;

/// Sleeps until `deadline`; `Infinite` returns at once (nothing to wait for).
pub async fn sleep_until(deadline: Deadline) {
    if let Deadline::At(_) = deadline {
        // `within`'s clock, for its wake-slack correction (as 0.2's sleep).
        let never = std::future::pending::<Result<()>>();
        let _ = within(deadline, "sleep", never).await;
    }
}

/// Lets the instance's other tasks run between slices of a long computation
/// (PBKDF2): a task that computes without awaiting starves every other one
/// (their I/O and timers are not even delivered).
pub async fn yield_now() {
    // Natively (unit tests) there is no component-model executor.
    #[cfg(target_os = "wasi")]
    wit_bindgen::yield_async().await;
}

/// Operations of one instance run concurrently on WASI 0.3 (tasks of one
/// executor): a checkout may wait for another operation's connection.
pub const CONCURRENT: bool = true;

/// Fails with a timeout naming `section` once `deadline` has passed: every
/// pass of an I/O loop calls it, whether data arrived or not.
pub fn check(deadline: Deadline, section: &str) -> Result<()> {
    match deadline {
        Deadline::Infinite => Ok(()),
        Deadline::At(_) => deadline.check(now(), section),
    }
}

/// The one race of the 0.3 face: `io` against the clock; a timeout error names
/// `section`. An expired deadline fails without polling `io`. `io` is polled
/// first, so I/O that completes at once never arms a timer. When the clock
/// wins, `io` is dropped, which cancels the host operation it was awaiting.
pub async fn within<T>(
    deadline: Deadline,
    section: &str,
    io: impl Future<Output = Result<T>>,
) -> Result<T> {
    match deadline {
        Deadline::Infinite => io.await,
        Deadline::At(at) => {
            if now() >= at {
                return Err(Error::timeout(section));
            }
            let clock = async {
                // As 0.2's `wait`: the timer is asked for `at - slack` (host
                // timers wake late), and the rest is finished on the clock.
                let wake = SLACK.get().wake_at(at);
                if now() < wake {
                    monotonic_clock::wait_until(wake.0).await;
                    let mut slack = SLACK.get();
                    slack.woke(wake, now());
                    SLACK.set(slack);
                }
                // At most `WakeSlack::MAX`: each yield lets the host deliver
                // I/O, and `or` polls `io` again before the clock.
                while now() < at {
                    wit_bindgen::yield_async().await;
                }
                Err(Error::timeout(section))
            };
            futures_lite::future::or(io, clock).await
        }
    }
}

/// The 0.2 runtime's `socket_error` decision for 0.3's error codes:
/// `access-denied` and `not-supported` are the host's policy (AccessDenied,
/// never retried), `invalid-argument` an address no socket takes, and every
/// other code a network error worth another try. `what` names the address.
pub(crate) fn socket_error_p3(code: ErrorCode, what: &str) -> Error {
    let (denied, invalid) = match code {
        ErrorCode::AccessDenied | ErrorCode::NotSupported => (true, false),
        ErrorCode::InvalidArgument => (false, true),
        _ => (false, false),
    };
    classify(denied, invalid, what, error_code_name(&code))
}

/// The same for ip-name-lookup, its own error type in 0.3:
/// `permanent-resolver-failure` is what wasmtime answers when the host does
/// not allow name lookup.
pub(crate) fn lookup_error_p3(code: LookupErrorCode, what: &str) -> Error {
    let (denied, invalid) = match code {
        LookupErrorCode::AccessDenied | LookupErrorCode::PermanentResolverFailure => (true, false),
        LookupErrorCode::InvalidArgument => (false, true),
        _ => (false, false),
    };
    let name = match &code {
        LookupErrorCode::AccessDenied => "access-denied".to_string(),
        LookupErrorCode::InvalidArgument => "invalid-argument".to_string(),
        LookupErrorCode::NameUnresolvable => "name-unresolvable".to_string(),
        LookupErrorCode::TemporaryResolverFailure => "temporary-resolver-failure".to_string(),
        LookupErrorCode::PermanentResolverFailure => "permanent-resolver-failure".to_string(),
        LookupErrorCode::Other(detail) => other_name(detail),
    };
    classify(denied, invalid, what, name)
}

/// Messages as the 0.2 runtime words them, so the engine and its tests see
/// one wording whichever runtime runs.
fn classify(denied: bool, invalid: bool, what: &str, cause: String) -> Error {
    if invalid {
        Error::invalid_argument(format!(
            "cannot {what}: the address is not one a socket takes"
        ))
    } else if denied {
        Error::new(
            ErrorKind::AccessDenied,
            format!("the host does not allow this component to {what}; {GRANT}"),
        )
    } else {
        Error::network(format!("cannot {what}"))
    }
    .with_cause(cause)
}

/// What a sandbox denial tells the user to grant (the 0.2 runtime's text).
const GRANT: &str = "grant it in the host (wasmtime CLI: -S inherit-network for TCP and UDP, \
    -S allow-ip-name-lookup for host names; an embedder: WasiCtxBuilder's socket_addr_check \
    and allow_ip_name_lookup); see \"Security: what a host must allow\" in the README";

/// The WIT name of a code (0.3's bindings have no `name()`).
pub(crate) fn error_code_name(code: &ErrorCode) -> String {
    match code {
        ErrorCode::AccessDenied => "access-denied",
        ErrorCode::NotSupported => "not-supported",
        ErrorCode::InvalidArgument => "invalid-argument",
        ErrorCode::OutOfMemory => "out-of-memory",
        ErrorCode::Timeout => "timeout",
        ErrorCode::InvalidState => "invalid-state",
        ErrorCode::AddressNotBindable => "address-not-bindable",
        ErrorCode::AddressInUse => "address-in-use",
        ErrorCode::RemoteUnreachable => "remote-unreachable",
        ErrorCode::ConnectionRefused => "connection-refused",
        ErrorCode::ConnectionBroken => "connection-broken",
        ErrorCode::ConnectionReset => "connection-reset",
        ErrorCode::ConnectionAborted => "connection-aborted",
        ErrorCode::DatagramTooLarge => "datagram-too-large",
        ErrorCode::Other(detail) => return other_name(detail),
    }
    .to_string()
}

fn other_name(detail: &Option<String>) -> String {
    match detail {
        Some(d) => format!("other: {d}"),
        None => "other".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_hosts_refusals_are_permanent() {
        for code in [ErrorCode::AccessDenied, ErrorCode::NotSupported] {
            let e = socket_error_p3(code, "connect to 127.0.0.1:27017");
            assert_eq!(e.kind, ErrorKind::AccessDenied, "{e}");
            assert!(e.message.contains("127.0.0.1:27017"), "{e}");
            assert!(e.message.contains("-S inherit-network"), "{e}");
            assert!(!e.is_network(), "never retried as a network error: {e}");
        }
        let e = lookup_error_p3(
            LookupErrorCode::PermanentResolverFailure,
            "resolve db.example",
        );
        assert_eq!(e.kind, ErrorKind::AccessDenied, "{e}");
        let e = socket_error_p3(ErrorCode::InvalidArgument, "connect to [::ffff:1.2.3.4]:1");
        assert!(!e.is_network(), "{e}");
        for code in [
            ErrorCode::ConnectionRefused,
            ErrorCode::Timeout,
            ErrorCode::ConnectionReset,
            ErrorCode::Other(Some("weird".into())),
        ] {
            let e = socket_error_p3(code, "connect to 127.0.0.1:27017");
            assert_eq!(e.kind, ErrorKind::Network, "{e}");
            assert_eq!(e.message, "cannot connect to 127.0.0.1:27017");
        }
        for code in [
            LookupErrorCode::NameUnresolvable,
            LookupErrorCode::TemporaryResolverFailure,
        ] {
            let e = lookup_error_p3(code, "resolve db.example");
            assert_eq!(e.kind, ErrorKind::Network, "{e}");
        }
    }
}
