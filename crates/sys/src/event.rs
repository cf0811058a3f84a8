//! Eventfds: the wake-ups of the driver thread and the same-host doorbells.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A non-blocking eventfd used to wake the driver thread.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd has no memory arguments; a non-negative result is a new fd that
    // we own exclusively.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd (wakes a poller).
pub fn eventfd_signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an fd we own; failure (counter full)
    // only means a wake-up is already pending.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd's counter.
pub fn eventfd_drain(fd: &OwnedFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64 from an fd we own (non-blocking).
    let _ = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

/// Registers `fd` with the current tokio runtime for readability.
#[cfg(feature = "tokio")]
pub fn async_fd(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of `fd`, an OwnedFd: it is open, is closed
    // only when the AsyncFd drops it, and `as_raw_fd` always returns the same number.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(io::Error::from)
}

/// Whether `fd` is an eventfd whose writes never block (a doorbell a peer handed us:
/// anything else could stall the sender).
pub fn is_nonblocking_eventfd(fd: &impl AsRawFd) -> bool {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    // SAFETY: F_GETFL takes no memory argument.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    link.is_ok_and(|l| l.as_os_str() == "anon_inode:[eventfd]")
        && flags >= 0
        && flags & libc::O_NONBLOCK != 0
}
