//! Small system calls of their own: an interface's MAC address, the process's CPU
//! time, user ids and page size, a TCP connection's retransmissions, a non-blocking
//! `recv`, and moving a thread into a network namespace.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// The MAC address of `ifname` in the calling thread's network namespace
/// (`SIOCGIFHWADDR`; sysfs shows the namespace it was mounted in, not the thread's).
pub fn interface_mac(ifname: &str) -> std::io::Result<[u8; 6]> {
    let name = ifname.as_bytes();
    if name.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::from_raw_os_error(libc::ENODEV));
    }
    // SAFETY: a plain datagram socket, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq with a NUL-terminated name; the kernel fills
    // `ifru_hwaddr`.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut req) };
    let err = std::io::Error::last_os_error();
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    if rc < 0 {
        return Err(err);
    }
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member of the union.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(data.iter()) {
        *m = *d as u8;
    }
    Ok(mac)
}

/// Moves the calling thread into the network namespace open at `fd` (`setns(2)`).
pub fn setns_net(fd: RawFd) -> io::Result<()> {
    // SAFETY: setns takes no memory arguments; it only changes this thread's namespace.
    let rc = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The real user id of this process (`getuid(2)`, which cannot fail).
pub fn uid() -> u32 {
    // SAFETY: getuid has no arguments and no failure.
    unsafe { libc::getuid() }
}

/// The effective user id of this process (`geteuid(2)`, which cannot fail): what
/// permission checks use, so 0 means root.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and no failure.
    unsafe { libc::geteuid() }
}

/// Process CPU time (user + system, all threads) in seconds; 0 if the kernel will
/// not say (`getrusage(RUSAGE_SELF)`).
pub fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into `ru`, which we own; RUSAGE_SELF is a
    // valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return 0.0;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Segments a TCP connection has retransmitted (`TCP_INFO`'s `tcpi_total_retrans`);
/// 0 if the kernel will not say.
pub fn tcp_total_retrans(s: &impl AsRawFd) -> u32 {
    // SAFETY: an all-zero tcp_info is a valid value (integers only).
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, which we own, and
    // stores the length it wrote in `len`.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        info.tcpi_total_retrans
    } else {
        0
    }
}

/// One `recv(2)` with `MSG_DONTWAIT` (also on a blocking socket).
pub fn recv_nowait(s: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: recv writes at most `buf.len()` bytes into `buf`, which we hold
    // mutably for the call.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The host's page size (`sysconf(_SC_PAGESIZE)`); 4096 if it will not say.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `Uid:` line of `/proc/self/status`: real, effective, saved, filesystem.
    fn status_uids() -> Vec<u32> {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        line.split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect()
    }

    #[test]
    fn the_user_ids_are_the_kernels() {
        let ids = status_uids();
        assert_eq!(ids.len(), 4, "{ids:?}");
        assert_eq!((uid(), euid()), (ids[0], ids[1]));
    }
}
