//! The few system calls socket2 does not wrap: `IP_MTU_DISCOVER`, `UDP_NO_CHECK6_RX`,
//! `eventfd` and `poll`. Every `unsafe` block of the crate is here, each with the
//! promise it relies on.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Sets `IP_MTU_DISCOVER = IP_PMTUDISC_DO` (DF on every datagram; Linux then sends IPv4
/// ID 0 from an unconnected socket, which the ICRC computation assumes — DESIGN §3).
pub(crate) fn set_pmtudisc_do(fd: &impl AsRawFd) -> io::Result<()> {
    let v: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: `fd` is an open socket owned by the caller for the duration of the call;
    // the option value points at a live c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets `UDP_NO_CHECK6_RX`: accept IPv6 UDP datagrams with a zero checksum. RFC 8200
/// forbids them, but RoCE v2 senders such as the kernel's rxe send checksum 0 on IPv6
/// too (the ICRC protects the packet), and Linux drops them without this option.
pub(crate) fn set_udp_no_check6_rx(fd: &impl AsRawFd) -> io::Result<()> {
    let v: libc::c_int = 1;
    // SAFETY: as in `set_pmtudisc_do`: an open socket and a live c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_UDP,
            libc::UDP_NO_CHECK6_RX,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A non-blocking eventfd used to wake the driver thread.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
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
pub(crate) fn eventfd_signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an fd we own; failure (counter full)
    // only means a wake-up is already pending.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd's counter.
pub(crate) fn eventfd_drain(fd: &OwnedFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64 from an fd we own (non-blocking).
    let _ = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

/// Waits until one of `fds` is readable or `timeout_ms` passes (-1: forever). Returns
/// the readiness of each fd.
pub(crate) fn poll_readable(
    fds: &[RawFd],
    timeout_ms: i32,
    ready: &mut Vec<bool>,
) -> io::Result<()> {
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

/// Registers `fd` with the current tokio runtime for readability.
#[cfg(feature = "tokio")]
pub(crate) fn async_fd(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of `fd`, an OwnedFd: it is open, is closed
    // only when the AsyncFd drops it, and `as_raw_fd` always returns the same number.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(io::Error::from)
}
