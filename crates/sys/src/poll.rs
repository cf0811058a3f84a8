//! `poll(2)`: waiting for readable descriptors.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// A `poll(2)` timeout for a sleep of `ns` nanoseconds: whole milliseconds, rounded up
/// (waking early would only mean another look), at most a second.
pub fn poll_ms(ns: u64) -> i32 {
    ns.div_ceil(1_000_000).min(1000) as i32
}

/// Waits until one of `fds` is readable or `timeout_ms` passes (-1: forever), and
/// stores the readiness of each fd in `ready`.
pub fn poll_readable(fds: &[RawFd], timeout_ms: i32, ready: &mut Vec<bool>) -> io::Result<()> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a live array of `pfds.len()` pollfd structs for the call.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    ready.clear();
    ready.extend(
        pfds.iter()
            .map(|p| p.revents & (libc::POLLIN | libc::POLLERR) != 0),
    );
    Ok(())
}

/// Waits until `fd` is readable or `timeout_ms` passes.
pub fn poll_in(fd: &impl AsRawFd, timeout_ms: i32) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN | libc::POLLERR,
        revents: 0,
    };
    // SAFETY: one live pollfd for the duration of the call.
    unsafe {
        libc::poll(&mut p, 1, timeout_ms);
    }
}

/// `poll(2)` over `fds` (whatever events each asks for; an unknown descriptor reports
/// `POLLNVAL`): how many have events, or the error (`Interrupted` included).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a live array of `fds.len()` pollfd structs, which the kernel
    // reads and whose `revents` it writes, for the duration of the call.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}
