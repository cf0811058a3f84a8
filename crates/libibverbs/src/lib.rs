//! `libibverbs.so.1` over rverbs' soft device.
//!
//! A distribution-built C program (ibverbs-utils, perftest, anything linked with
//! `-libverbs`) runs on the soft device with `LD_LIBRARY_PATH` pointing here: no kernel
//! module, no root. The program reaches the verbs two ways, and both are served:
//!
//! - exported functions with rdma-core's symbol versions (`export!`: each symbol gets
//!   the version node Debian 12's library gives it, see `crates/ibverbs/abi/`);
//! - the `static inline` verbs of `<infiniband/verbs.h>`, compiled into the program,
//!   which jump through `ibv_context.ops`, the `verbs_context` in front of the context,
//!   and the pointers of `ibv_cq_ex` / `ibv_qp_ex` (filled in `context.rs`, `cq.rs`,
//!   `qp_ex.rs`).
//!
//! Each C object is a `#[repr(C)]` struct whose first field is the public C struct, so
//! the pointer a program holds is the pointer to the object; the rest is the rverbs
//! handle behind it. Memory regions are over the caller's memory ([`memory`]): there the
//! caller promises, as in C, that the memory outlives the registration.
//!
//! Every entry point runs inside [`catch_unwind`](std::panic::catch_unwind): a panic
//! becomes an error return (EIO) for the C caller, never an unwind into C or an abort.

// Entry points are `unsafe extern "C"`: their contract is rdma-core's man pages and
// verbs.h, not a Rust `# Safety` section.
#![allow(clippy::missing_safety_doc)]
#![allow(non_camel_case_types)]

#[macro_use]
mod export;
pub mod memory;

mod context;
mod cq;
mod cq_ex;
mod device;
mod evfd;
mod flow;
#[doc(hidden)]
pub mod fuzzing;
pub mod kern;
mod misc;
mod mw;
mod open;
mod pd;
mod provider;
mod qp;
mod qp_ex;
mod rdmacm;

use std::ffi::c_int;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// The errno of an rverbs error.
pub(crate) fn errno_of(e: &rverbs::Error) -> c_int {
    e.errno()
}

/// Runs an entry point that returns 0 or an errno (`ibv_modify_qp`, `ibv_destroy_cq`...).
pub(crate) fn ret_errno(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e,
        Err(_) => libc::EIO,
    }
}

/// Runs an entry point that returns a value or -1 with `errno` set.
pub(crate) fn ret_neg(f: impl FnOnce() -> Result<c_int, c_int>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(_) => {
            set_errno(libc::EIO);
            -1
        }
    }
}

/// Runs an entry point that returns an object or NULL with `errno` set.
pub(crate) fn ret_ptr<T>(f: impl FnOnce() -> Result<*mut T, c_int>) -> *mut T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Err(_) => {
            set_errno(libc::EIO);
            std::ptr::null_mut()
        }
    }
}

/// Runs an entry point that returns nothing (a panic is swallowed).
pub(crate) fn ret_void(f: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}

/// Runs an entry point that returns a plain value (`def` on a panic).
pub(crate) fn ret_val<T>(def: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(def)
}

/// `&*p` for a pointer from C, EINVAL when NULL.
///
/// # Safety
/// `p` is NULL or points to a live `T` (the C caller's promise).
pub(crate) unsafe fn arg<'a, T>(p: *const T) -> Result<&'a T, c_int> {
    // SAFETY: the caller's promise above.
    unsafe { p.as_ref() }.ok_or(libc::EINVAL)
}

/// `&mut *p` for an out-pointer from C, EINVAL when NULL.
///
/// # Safety
/// `p` is NULL or points to writable memory for a `T`.
pub(crate) unsafe fn out<'a, T>(p: *mut T) -> Result<&'a mut T, c_int> {
    // SAFETY: the caller's promise above.
    unsafe { p.as_mut() }.ok_or(libc::EINVAL)
}

/// Initialises a `pthread_mutex_t` / `pthread_cond_t` pair of a C object.
pub(crate) fn init_sync(m: *mut libc::pthread_mutex_t, c: *mut libc::pthread_cond_t) {
    // SAFETY: both point into an object this library just allocated.
    unsafe {
        libc::pthread_mutex_init(m, std::ptr::null());
        libc::pthread_cond_init(c, std::ptr::null());
    }
}
