use crate::deadline::Instant;

/// Now, on the monotonic clock.
#[cfg(target_os = "wasi")]
pub fn now() -> Instant {
    Instant(wasi::clocks::monotonic_clock::now())
}

/// Natively (unit tests, tools) the std clock stands in, so pure code that
/// reads the time still runs.
#[cfg(not(target_os = "wasi"))]
pub fn now() -> Instant {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    // Offset so that "now" is never zero, like a real monotonic reading.
    Instant(1 + start.elapsed().as_nanos() as u64)
}
