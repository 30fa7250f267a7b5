//! Cleanup a resource's destructor cannot run where it is called.
//!
//! Dropping a client, an open cursor or an open download stream starts I/O
//! (endSessions, killCursors) that the engine detaches
//! (`runtime::detach`). On WASI 0.2 that runs there and then. On WASI 0.3
//! it becomes a task of wit-bindgen's executor, which needs a task to
//! attach to, and a resource destructor is a sync canonical call outside
//! every task: spawning there traps, killing the instance. So the async
//! face keeps such a drop here and the next async export runs it inside its
//! own task (`io!` calls `run` first). A drop that no later call picks up
//! (the instance's last call) is skipped: its server cursor times out on
//! the server, and `close` is the way to end a client's sessions for sure.

#[cfg(feature = "component-async")]
use std::cell::RefCell;

#[cfg(feature = "component-async")]
thread_local! {
    static DEFERRED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `cleanup` now (WASI 0.2), or keeps it for the next async export (0.3).
pub fn defer(cleanup: impl FnOnce() + 'static) {
    #[cfg(not(feature = "component-async"))]
    cleanup();
    #[cfg(feature = "component-async")]
    DEFERRED.with(|d| d.borrow_mut().push(Box::new(cleanup)));
}

/// Runs the cleanups kept so far; only from inside a task (an async export).
#[cfg(feature = "component-async")]
pub fn run() {
    // Taken out first: a cleanup may defer again.
    let pending = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
    for cleanup in pending {
        cleanup();
    }
}
