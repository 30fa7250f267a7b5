//! The Rust value of a resource whose calls need `&mut` across awaits (a
//! cursor, a GridFS stream, a transaction runner). A call takes the value out
//! for its duration (`lease`) and the lease puts it back when dropped: when
//! the call ends, and also when the caller cancels it (a WASI 0.3 subtask
//! dropped mid-await). No `RefCell` borrow is held across an await, so a
//! second call on the same resource while one runs (possible on WASI 0.3
//! only: one instance runs many tasks) is an `invalid-argument` error, not a
//! panic that would kill the instance and every call in flight in it.

use super::{to_wit, WitResult};
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

pub struct Slot<T>(RefCell<Option<T>>);

/// The value of a `Slot`, out of it until this is dropped.
pub struct Lease<'a, T> {
    slot: &'a Slot<T>,
    value: Option<T>,
}

impl<T> Slot<T> {
    pub fn new(value: T) -> Self {
        Self(RefCell::new(Some(value)))
    }

    /// The value for one call; `what` names the resource in the busy error.
    pub fn lease(&self, what: &str) -> WitResult<Lease<'_, T>> {
        match self.0.borrow_mut().take() {
            Some(value) => Ok(Lease {
                slot: self,
                value: Some(value),
            }),
            None => Err(to_wit(crate::Error::invalid_argument(format!(
                "another call on this {what} is still running: one at a time"
            )))),
        }
    }

    /// The value, unless a call has it out (for a destructor).
    pub fn take(&self) -> Option<T> {
        self.0.borrow_mut().take()
    }

    /// `f` of the value, unless a call has it out.
    pub fn peek<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        self.0.borrow().as_ref().map(f)
    }
}

impl<T> Deref for Lease<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // Some from `lease` until `drop`.
        self.value.as_ref().expect("a lease holds its value")
    }
}

impl<T> DerefMut for Lease<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value.as_mut().expect("a lease holds its value")
    }
}

impl<T> Drop for Lease<'_, T> {
    fn drop(&mut self) {
        *self.slot.0.borrow_mut() = self.value.take();
    }
}
