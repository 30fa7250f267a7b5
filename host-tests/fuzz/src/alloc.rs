//! A global allocator that counts what the fuzzing thread holds while a
//! target runs, and stops the run when an input makes it hold more than the cap.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static CAP: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Called once (disarmed) with the size asked for and the bytes then live.
static ON_OVER: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // const-initialised: reading it never allocates (this is the allocator).
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

/// Counts from zero on this thread with `cap` bytes allowed.
pub fn arm(cap: usize) {
    LIVE.store(0, Ordering::Relaxed);
    PEAK.store(0, Ordering::Relaxed);
    CAP.store(cap, Ordering::Relaxed);
    ARMED.with(|a| a.set(true));
}

/// Stops counting; returns the peak of live bytes since `arm`.
pub fn disarm() -> usize {
    ARMED.with(|a| a.set(false));
    PEAK.load(Ordering::Relaxed).max(0) as usize
}

/// What to do when the cap is crossed (it must not return: report and exit).
pub fn on_over_allocation(f: fn(requested: usize, live: usize) -> !) {
    ON_OVER.store(f as usize, Ordering::SeqCst);
}

fn grew(by: usize) {
    let live = LIVE.fetch_add(by as isize, Ordering::Relaxed) + by as isize;
    PEAK.fetch_max(live, Ordering::Relaxed);
    if live.max(0) as usize > CAP.load(Ordering::Relaxed) {
        ARMED.with(|a| a.set(false));
        let f = ON_OVER.load(Ordering::SeqCst);
        if f != 0 {
            // SAFETY: only `on_over_allocation` stores here, and it stores such an fn.
            let f: fn(usize, usize) -> ! = unsafe { std::mem::transmute(f) };
            f(by, live as usize);
        }
    }
}

fn armed() -> bool {
    ARMED.try_with(|a| a.get()).unwrap_or(false)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if armed() {
            grew(layout.size());
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if armed() {
            grew(layout.size());
        }
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if armed() {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if armed() {
            if new_size > layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub((layout.size() - new_size) as isize, Ordering::Relaxed);
            }
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
