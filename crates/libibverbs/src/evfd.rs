//! The descriptors a program sees as a completion channel's `fd` and a context's
//! `async_fd`.
//!
//! libibverbs reads events from those descriptors, so a program that sets
//! `O_NONBLOCK` on one gets -1 / EAGAIN from `ibv_get_cq_event` /
//! `ibv_get_async_event` when no event waits (UCX drains its async events that way;
//! pyverbs relies on it too). The device's own eventfds are non-blocking for its own
//! use, so a flag set on them could not be seen. The program gets instead an epoll
//! instance watching the device's eventfd: readable (for `poll`, `select`, `epoll`)
//! exactly while the eventfd is, and an open file of its own, whose `O_NONBLOCK` is
//! the program's choice alone.

use std::ffi::c_int;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    /// An epoll instance that reports `src` readable (level-triggered).
    pub(crate) fn over(src: BorrowedFd<'_>) -> Result<EventFd, c_int> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new fd.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        // SAFETY: `ep` was just created and is owned by nothing else.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: both descriptors are open; `ev` is a valid epoll_event.
        let r = unsafe {
            libc::epoll_ctl(
                ep.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                src.as_raw_fd(),
                &mut ev,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL));
        }
        Ok(EventFd(ep))
    }

    /// The descriptor the program sees.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// The program set `O_NONBLOCK` on it (F_GETFL failing counts as blocking).
    pub(crate) fn nonblocking(&self) -> bool {
        // SAFETY: fcntl(F_GETFL) on a descriptor this object owns.
        let fl = unsafe { libc::fcntl(self.0.as_raw_fd(), libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }
}
