//! The one lock-order rule between the verbs and a device: a thread inside
//! [`crate::Mr::with`] holds a region's lock, and a device that reaches regions through
//! their locks (the soft device takes its engine lock, then a region's) must not make
//! such a thread wait for it. `Mr::with` marks the thread; the device's verbs check the
//! mark and fail with EDEADLK instead.

use crate::error::{Error, Result};
use std::cell::Cell;

thread_local! {
    /// How many [`crate::Mr::with`] closures this thread is inside.
    static IN_WITH: Cell<u32> = const { Cell::new(0) };
}

/// Fails when the calling thread is inside [`crate::Mr::with`]: a verb would wait for the
/// engine lock while holding a region's lock, and the driver thread takes them in the
/// other order (engine, then the region it writes), so both would wait forever.
pub(crate) fn check_not_in_with(verb: &'static str) -> Result<()> {
    if IN_WITH.with(Cell::get) > 0 {
        return Err(Error::WouldDeadlock { verb });
    }
    Ok(())
}

/// Counts a thread's [`crate::Mr::with`] depth, also when the closure panics.
pub(crate) struct WithGuard;

impl WithGuard {
    pub(crate) fn enter() -> Self {
        IN_WITH.with(|c| c.set(c.get() + 1));
        WithGuard
    }
}

impl Drop for WithGuard {
    fn drop(&mut self) {
        IN_WITH.with(|c| c.set(c.get() - 1));
    }
}
