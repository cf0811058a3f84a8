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
    let ns = u64::try_from(timeout_ms).ok().map(|ms| ms * 1_000_000);
    poll_readable_ns(fds, ns, ready)
}

/// The longest one [`poll_readable_ns`] sleeps: a second, as [`poll_ms`].
pub const MAX_POLL_NS: u64 = 1_000_000_000;

/// The `ppoll(2)` timeout for a sleep of `ns` nanoseconds (at most [`MAX_POLL_NS`]);
/// `None` sleeps until a descriptor is ready.
fn timeout_spec(ns: Option<u64>) -> Option<libc::timespec> {
    ns.map(|ns| {
        let ns = ns.min(MAX_POLL_NS);
        libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        }
    })
}

/// [`poll_readable`] with a timeout in nanoseconds (`None`: forever; at most
/// [`MAX_POLL_NS`]), kept to the nanosecond by `ppoll(2)` instead of rounded up to
/// `poll(2)`'s millisecond: a sleeper whose next deadline is a 200 µs tail-loss
/// probe or a 50 µs deferred acknowledgement wakes for it, not a millisecond later.
pub fn poll_readable_ns(
    fds: &[RawFd],
    timeout_ns: Option<u64>,
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
    let spec = timeout_spec(timeout_ns);
    let spec_ptr = spec
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfds` is a live array of `pfds.len()` pollfd structs for the call;
    // `spec_ptr` is null or points at `spec`, which outlives the call; a null signal
    // mask leaves the thread's mask as it is (ppoll(2)).
    let rc = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            spec_ptr,
            std::ptr::null(),
        )
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn timeouts_keep_their_nanoseconds_up_to_a_second() {
        let t = timeout_spec(Some(200_000)).unwrap();
        assert_eq!((t.tv_sec, t.tv_nsec), (0, 200_000));
        let t = timeout_spec(Some(1_500_000_000)).unwrap();
        assert_eq!((t.tv_sec, t.tv_nsec), (1, 0));
        let t = timeout_spec(Some(999_999_999)).unwrap();
        assert_eq!((t.tv_sec, t.tv_nsec), (0, 999_999_999));
        assert!(timeout_spec(None).is_none());
    }

    #[test]
    fn a_sub_millisecond_sleep_lasts_its_time_and_a_ready_fd_ends_it() {
        let fd = crate::eventfd().unwrap();
        let mut ready = Vec::new();
        let start = Instant::now();
        poll_readable_ns(&[fd.as_raw_fd()], Some(300_000), &mut ready).unwrap();
        assert!(start.elapsed() >= Duration::from_micros(300));
        assert_eq!(ready, [false]);
        crate::eventfd_signal(&fd);
        poll_readable_ns(&[fd.as_raw_fd()], None, &mut ready).unwrap();
        assert_eq!(ready, [true]);
        // The millisecond form is the same call.
        poll_readable(&[fd.as_raw_fd()], 0, &mut ready).unwrap();
        assert_eq!(ready, [true]);
    }
}
