//! `AF_UNIX` seqpacket sockets in the abstract namespace (`unix(7)`): how same-host
//! contexts find each other, hand over descriptors (`SCM_RIGHTS`) and check who is at
//! the other end (`SO_PEERCRED`).

use crate::msg::recvmsg_ctl;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The socket address of abstract name `name` (`sun_path[0]` = 0, then the name, no
/// terminator), and its length.
fn abstract_addr(name: &[u8]) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zero is a valid value.
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if name.len() >= sun.sun_path.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in sun.sun_path[1..].iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    Ok((sun, len as libc::socklen_t))
}

/// A new non-blocking, close-on-exec seqpacket socket.
fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A non-blocking seqpacket socket listening on abstract name `name` (which lives in
/// the caller's network namespace); fails (`EADDRINUSE`) when another socket has it.
pub fn listen_abstract(name: &[u8], backlog: i32) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let (sun, len) = abstract_addr(name)?;
    // SAFETY: `sun` is a valid address of `len` bytes; `fd` is ours.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sun as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    // SAFETY: a bound socket of ours; no memory arguments.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) })?;
    Ok(fd)
}

/// A non-blocking seqpacket socket connected to abstract name `name`.
pub fn connect_abstract(name: &[u8]) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let (sun, len) = abstract_addr(name)?;
    // SAFETY: `sun` is a valid address of `len` bytes; `fd` is ours.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sun as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    Ok(fd)
}

/// Accepts one connection on listener `l` (non-blocking, close-on-exec);
/// `WouldBlock` when none waits.
pub fn accept(l: &impl AsRawFd) -> io::Result<OwnedFd> {
    // SAFETY: accepts on a listener the caller holds, with no peer address asked for;
    // the result is checked.
    let fd = cvt(unsafe {
        libc::accept4(
            l.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: a descriptor accept4 just gave us, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Most descriptors [`send_with_fds`] attaches to one message.
pub const SEND_FDS_MAX: usize = 8;

/// Sends `bytes` as one message with descriptor `fd` attached (`SCM_RIGHTS`,
/// `MSG_NOSIGNAL`); a message the kernel took only in part is an error.
pub fn send_with_fd(sock: &impl AsRawFd, bytes: &[u8], fd: &impl AsRawFd) -> io::Result<()> {
    send_raw_fds(sock.as_raw_fd(), bytes, &[fd.as_raw_fd()])
}

/// Sends `bytes` as one message with descriptors `fds` attached (one `SCM_RIGHTS`
/// control message; none at all when `fds` is empty), as [`send_with_fd`]. More than
/// [`SEND_FDS_MAX`] descriptors is `InvalidInput`, and nothing is sent.
pub fn send_with_fds(sock: &impl AsRawFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut raw = [0 as RawFd; SEND_FDS_MAX];
    if fds.len() > raw.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (r, fd) in raw.iter_mut().zip(fds) {
        *r = fd.as_raw_fd();
    }
    send_raw_fds(sock.as_raw_fd(), bytes, &raw[..fds.len()])
}

fn send_raw_fds(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut ctl = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; the pointers set below outlive the call.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    if !fds.is_empty() {
        let data = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(data) } as usize;
        if space > std::mem::size_of_val(&ctl) {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        h.msg_control = ctl.as_mut_ptr().cast();
        h.msg_controllen = space as _;
        // SAFETY: the control buffer (8-aligned) holds `space` bytes, checked above:
        // one header and `fds.len()` descriptors after it; CMSG_FIRSTHDR points at its
        // start (non-null: `msg_controllen` is at least a header).
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&h);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(data) as _;
            let p = libc::CMSG_DATA(c).cast::<RawFd>();
            for (k, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(p.add(k), *fd);
            }
        }
    }
    // SAFETY: `h` describes live buffers (`bytes`, read only, and `ctl`).
    let n = unsafe { libc::sendmsg(sock, &h, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != bytes.len() {
        return Err(io::Error::other("message cut short"));
    }
    Ok(())
}

/// Receives one message into `buf` (non-blocking) and the descriptors attached to it
/// (close-on-exec, all of them the caller's). A message or control data cut short
/// (`MSG_TRUNC`, `MSG_CTRUNC`) is an error, its descriptors closed.
pub fn recv_with_fds(sock: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut ctl = [0u64; 16];
    let (n, h) = recvmsg_ctl(sock, buf, &mut ctl, libc::MSG_CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    // SAFETY: walks the control messages the kernel wrote into `ctl`, within
    // `msg_controllen` (the CMSG_* macros stop at its end); every SCM_RIGHTS
    // descriptor is a new one of this process, owned by nobody else.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes = ((*c).cmsg_len as usize).saturating_sub(data as usize - c as usize);
                for k in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(k));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&h, c);
        }
    }
    if h.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::other("message cut short"));
    }
    Ok((n, fds))
}

/// The user id of the process at the other end of `sock` (`SO_PEERCRED`).
pub fn peer_uid(sock: &impl AsRawFd) -> io::Result<u32> {
    // SAFETY: ucred is plain data; all zero is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which we own.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    cvt(rc)?;
    Ok(cred.uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A descriptor crosses a connection with its message; the listener's peer is
    /// this process's user; a name too long for `sun_path` is refused.
    #[test]
    fn a_descriptor_crosses_with_its_message() {
        let name = format!("rverbs-sys-test-{}", std::process::id());
        let l = listen_abstract(name.as_bytes(), 4).unwrap();
        assert!(listen_abstract(name.as_bytes(), 4).is_err(), "name taken");
        let c = connect_abstract(name.as_bytes()).unwrap();
        let s = accept(&l).unwrap();
        assert_eq!(peer_uid(&s).unwrap(), crate::misc::uid());
        let ev = crate::event::eventfd().unwrap();
        send_with_fd(&c, b"hello", &ev).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(&s, &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"hello"[..], 1));
        assert!(crate::event::is_nonblocking_eventfd(&fds[0]));
        // A message longer than the buffer is an error, not a partial hello.
        send_with_fd(&c, b"a longer message", &ev).unwrap();
        let mut small = [0u8; 4];
        assert!(recv_with_fds(&s, &mut small).is_err());
        assert!(accept(&l).is_err(), "nobody else waits");
        assert!(connect_abstract(&[b'x'; 200]).is_err());
    }

    /// A message carries no descriptor (and no control message), or several, in
    /// order; too many is refused before anything is sent.
    #[test]
    fn a_message_carries_none_or_several_descriptors() {
        use std::os::fd::AsFd;
        let name = format!("rverbs-sys-test-fds-{}", std::process::id());
        let l = listen_abstract(name.as_bytes(), 4).unwrap();
        let c = connect_abstract(name.as_bytes()).unwrap();
        let s = accept(&l).unwrap();
        let mut buf = [0u8; 16];
        send_with_fds(&c, b"none", &[]).unwrap();
        let (n, fds) = recv_with_fds(&s, &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"none"[..], 0));
        let ev = crate::event::eventfd().unwrap();
        let file = std::fs::File::open("/proc/self/status").unwrap();
        send_with_fds(&c, b"two", &[ev.as_fd(), file.as_fd()]).unwrap();
        let (n, fds) = recv_with_fds(&s, &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"two"[..], 2));
        assert!(crate::event::is_nonblocking_eventfd(&fds[0]));
        assert!(!crate::event::is_nonblocking_eventfd(&fds[1]));
        let many = vec![ev.as_fd(); SEND_FDS_MAX + 1];
        let e = send_with_fds(&c, b"many", &many).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let all = vec![ev.as_fd(); SEND_FDS_MAX];
        send_with_fds(&c, b"all", &all).unwrap();
        let (n, fds) = recv_with_fds(&s, &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"all"[..], SEND_FDS_MAX));
        let e = recv_with_fds(&s, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "nothing else was sent");
    }
}
