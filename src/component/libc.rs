//! Two wasi-libc functions the component defines itself, so that it imports
//! only the WASI interfaces the driver uses (`cargo xtask build` checks the
//! list). Rust std reaches them from code every component has: a panic's or
//! a failed allocation's message is written to fd 2 with `write`, and the
//! panic hook looks up RUST_BACKTRACE with `getenv`. wasi-libc's versions
//! would import wasi:cli/stdin, stdout, stderr and terminal-* (its
//! descriptor table) and wasi:cli/exit (its environ set-up). A definition
//! here takes their place at link time (libc.a's are then never linked).
//!
//! The component has no stderr: a panic's message is dropped, and the panic
//! traps as before. Only with the `component` (or `component-async`) feature, which a Rust guest
//! linking the rlib leaves off (its own `println!` would vanish otherwise). The driver reads its environment variables and files
//! through `runtime::env_var` and `runtime::read_file`, not through libc.

use std::ffi::{c_char, c_int, c_void};

/// Writes to stdout and stderr vanish; nothing else is open to write to.
#[no_mangle]
extern "C" fn write(fd: c_int, _buf: *const c_void, count: usize) -> isize {
    match fd {
        1 | 2 => count as isize,
        _ => -1,
    }
}

/// No environment variable through libc (std's `env::var` sees none).
#[no_mangle]
extern "C" fn getenv(_name: *const c_char) -> *mut c_char {
    std::ptr::null_mut()
}
