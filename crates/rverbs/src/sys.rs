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

/// Converts a kernel socket address to a `SocketAddr` (IPv4 or IPv6 only).
fn from_storage(ss: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which is smaller
            // than sockaddr_storage and has no stricter alignment.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(
                SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )
                .into(),
            )
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(
                SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )
                .into(),
            )
        }
        _ => None,
    }
}

/// Sets `UDP_GRO`: the kernel may hand over a train of same-size datagrams sent with
/// `UDP_SEGMENT` as one buffer, with their size in a control message.
pub(crate) fn set_udp_gro(fd: &impl AsRawFd) -> io::Result<()> {
    let v: libc::c_int = 1;
    // SAFETY: an open socket and a live c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
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

/// One received buffer: where it is in the batch buffer, who sent it, and the size
/// of the datagrams it holds when the kernel coalesced several (`UDP_GRO`), else 0.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) from: std::net::SocketAddr,
    pub(crate) segment: usize,
}

/// Most buffers one [`recv_batch`] takes.
pub(crate) const RECV_MAX: usize = 64;
const CONTROL_LEN: usize = 64;

/// Receives up to `buf.len() / slot` buffers (at most [`RECV_MAX`]) with one
/// `recvmmsg(2)` (non-blocking) into `slot`-byte slots of `buf`, appending one
/// [`Received`] per buffer to `out`. A buffer longer than a slot arrives cut to it
/// (its ICRC then fails and it is counted as a drop). Returns how many arrived.
pub(crate) fn recv_batch(
    fd: &impl AsRawFd,
    buf: &mut [u8],
    slot: usize,
    out: &mut Vec<Received>,
) -> io::Result<usize> {
    let n = buf.len().checked_div(slot).unwrap_or(0).min(RECV_MAX);
    if n == 0 {
        return Ok(0);
    }
    let mut iov: [libc::iovec; RECV_MAX] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; RECV_MAX];
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut names: [libc::sockaddr_storage; RECV_MAX] = unsafe { std::mem::zeroed() };
    // Control buffers, u64-aligned as cmsghdr needs.
    let mut control = [[0u64; CONTROL_LEN / 8]; RECV_MAX];
    // SAFETY: mmsghdr is plain data; all-zero is a valid value (null pointers, 0 lens).
    let mut hdrs: [libc::mmsghdr; RECV_MAX] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        iov[i].iov_base = buf[i * slot..].as_mut_ptr().cast();
        iov[i].iov_len = slot;
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = 1;
        h.msg_control = control[i].as_mut_ptr().cast();
        h.msg_controllen = CONTROL_LEN as _;
    }
    // SAFETY: every header points at a live iovec covering its own `slot` bytes of
    // `buf` (disjoint, in bounds since i * slot + slot <= buf.len()), at a live
    // sockaddr_storage and at a live control buffer of the sizes given; all outlive
    // the call. MSG_DONTWAIT: the call never blocks.
    let rc = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = rc as usize;
    for i in 0..got {
        let len = (hdrs[i].msg_len as usize).min(slot);
        let mut segment = 0;
        let h = &hdrs[i].msg_hdr;
        // SAFETY: `h` is a msghdr the kernel filled: its control pointer and (updated)
        // length describe bytes inside `control[i]`; CMSG_FIRSTHDR/NXTHDR stay within
        // them and return null at the end.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP
                    && (*c).cmsg_type == libc::UDP_GRO
                    && (*c).cmsg_len as usize
                        >= libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize
                {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                    segment = usize::try_from(v).unwrap_or(0);
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        if let Some(from) = from_storage(&names[i]) {
            out.push(Received {
                offset: i * slot,
                len,
                from,
                segment,
            });
        }
    }
    Ok(got)
}

/// One datagram to send, or (with `segment` > 0) a train of datagrams of `segment`
/// bytes each (the last may be shorter) sent as one buffer with `UDP_SEGMENT`.
pub(crate) struct Outgoing<'a> {
    pub(crate) bufs: Vec<&'a [u8]>,
    pub(crate) dst: std::net::SocketAddr,
    pub(crate) segment: u16,
}

/// Sends with `sendmmsg(2)` (as many calls as the kernel needs). A message the kernel
/// refuses (no route, buffer full) is skipped: lost packets, which the transport's
/// retransmission covers.
pub(crate) fn send_batch(fd: &impl AsRawFd, msgs: &[Outgoing<'_>]) {
    const MAX: usize = 64;
    // SAFETY (for CMSG_SPACE/CMSG_LEN): pure arithmetic on the length given.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
    let mut start = 0;
    while start < msgs.len() {
        let chunk = &msgs[start..(start + MAX).min(msgs.len())];
        let addrs: Vec<socket2::SockAddr> = chunk
            .iter()
            .map(|m| socket2::SockAddr::from(m.dst))
            .collect();
        let mut iovs: Vec<Vec<libc::iovec>> = chunk
            .iter()
            .map(|m| {
                m.bufs
                    .iter()
                    .map(|b| libc::iovec {
                        iov_base: b.as_ptr() as *mut libc::c_void,
                        iov_len: b.len(),
                    })
                    .collect()
            })
            .collect();
        let mut control = vec![[0u64; 4]; chunk.len()];
        // SAFETY: mmsghdr is plain data; all-zero is a valid value.
        let mut hdrs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; chunk.len()];
        for (i, h) in hdrs.iter_mut().enumerate() {
            let m = &mut h.msg_hdr;
            m.msg_name = addrs[i].as_ptr() as *mut libc::c_void;
            m.msg_namelen = addrs[i].len();
            m.msg_iov = iovs[i].as_mut_ptr();
            m.msg_iovlen = iovs[i].len() as _;
            if chunk[i].segment > 0 {
                m.msg_control = control[i].as_mut_ptr().cast();
                m.msg_controllen = space as _;
                // SAFETY: the control buffer (32 bytes, u64-aligned) holds one cmsghdr
                // with a u16 (CMSG_SPACE(2) <= 32); CMSG_FIRSTHDR points at its start.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(m);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), chunk[i].segment);
                }
            }
        }
        // SAFETY: each header points at a live address of the length given, at iovecs
        // over live byte slices (read only by the kernel) and at a live control buffer;
        // all outlive the call.
        let rc = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        // rc < 0: the first message failed; skip it. Otherwise rc were sent.
        start += if rc <= 0 { 1 } else { rc as usize };
    }
}
