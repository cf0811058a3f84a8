//! The system calls socket2 does not wrap for packet sockets and namespaces. Every
//! `unsafe` block of the crate is here, each with the promise it relies on.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// `if_nametoindex(3)`.
pub(crate) fn if_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a live NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// Binds an AF_PACKET socket to interface `ifindex` for every EtherType (`packet(7)`).
pub(crate) fn bind_packet(fd: &impl AsRawFd, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `fd` is an open socket; the address points at a live sockaddr_ll of the
    // size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets an int-valued `SOL_PACKET` option.
pub(crate) fn set_packet_opt(
    fd: &impl AsRawFd,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is an open socket; the value points at a live c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            opt,
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

/// Moves the calling thread into the network namespace open at `fd` (`setns(2)`).
pub(crate) fn setns_net(fd: RawFd) -> io::Result<()> {
    // SAFETY: setns takes no memory arguments; it only changes this thread's namespace.
    let rc = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What `PACKET_AUXDATA` tells about a received frame (`struct tpacket_auxdata`,
/// linux/if_packet.h).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Aux {
    /// `tp_status` (`TP_STATUS_*`).
    pub status: u32,
    /// Original length on the wire (`tp_len`).
    pub len: u32,
    /// `tp_vlan_tci`.
    pub vlan_tci: u16,
    /// `tp_vlan_tpid`.
    pub vlan_tpid: u16,
}

/// `PACKET_AUXDATA` (linux/if_packet.h).
pub(crate) const PACKET_AUXDATA: libc::c_int = 8;

/// `recvmsg(2)` of one frame into `buf`, with the `PACKET_AUXDATA` control message if
/// the kernel sent one. Returns the bytes received (at most `buf.len()`).
pub(crate) fn recv_with_aux(fd: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, Option<Aux>)> {
    // Room for one cmsghdr + tpacket_auxdata (20 bytes), generously aligned.
    let mut ctrl = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
    // SAFETY: `msg` points at one live iovec covering `buf` and at the live `ctrl`
    // array of the length given; the kernel writes at most those lengths.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut aux = None;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel just filled, within
    // `msg_controllen`; the data pointer of a PACKET_AUXDATA message points at a
    // tpacket_auxdata that may be unaligned, hence read_unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA {
                let d: libc::tpacket_auxdata = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                aux = Some(Aux {
                    status: d.tp_status,
                    len: d.tp_len,
                    vlan_tci: d.tp_vlan_tci,
                    vlan_tpid: d.tp_vlan_tpid,
                });
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, aux))
}
