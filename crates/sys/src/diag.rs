//! Socket diagnostics (`NETLINK_SOCK_DIAG`): the receive buffer of a local UDP socket.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// Socket diagnostics (linux/sock_diag.h, linux/inet_diag.h): the request and
// message layouts, written and read as bytes.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_SKMEMINFO: u16 = 7;
/// `SK_MEMINFO_RCVBUF`: the second u32 of the `INET_DIAG_SKMEMINFO` attribute.
const SK_MEMINFO_RCVBUF: usize = 1;
const NLMSG_HDR_LEN: usize = 16;
/// `struct inet_diag_sockid`: ports, two 16-byte addresses, interface, cookie.
const DIAG_SOCKID_LEN: usize = 48;
/// `struct inet_diag_msg`: family, state, timer, retrans, the socket id, then
/// expires, rqueue, wqueue, uid and inode.
const DIAG_MSG_LEN: usize = 4 + DIAG_SOCKID_LEN + 20;

/// The receive buffer (`SO_RCVBUF`, bytes) of the UDP socket on this machine that
/// datagrams sent to `local` arrive at, from the kernel's socket diagnostics
/// (`NETLINK_SOCK_DIAG`, as `ss -u -m` reads it; no privilege needed): what a loopback
/// peer can take at once. One exact lookup, not a dump of every UDP socket: the kernel
/// finds the socket as it would for a datagram from any address to `local`
/// (`udp_dump_one` in net/ipv4/udp_diag.c, whose `__udp4_lib_lookup` takes the request's
/// `idiag_src`/`idiag_sport` as the datagram's source and `idiag_dst`/`idiag_dport` as
/// its destination), so its cost does not grow with the sockets the machine has.
/// `None` if no socket would receive them or the kernel will not say.
pub fn udp_rcvbuf_of(local: std::net::SocketAddr) -> Option<u32> {
    let family = if local.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // A reply that never comes (it always does, at once) must not hang a connect.
    let tv = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: setsockopt with a timeval of the size given.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    let req = diag_lookup_request(local, family);
    // SAFETY: sends `req.len()` bytes of `req` on the netlink socket (kernel as peer).
    let rc = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if rc != req.len() as isize {
        return None;
    }
    // One message (about 170 bytes): the socket's, or an error (ENOENT: none).
    let mut buf = [0u8; 1024];
    // SAFETY: receives at most `buf.len()` bytes into `buf`, which we own.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n <= 0 {
        return None;
    }
    parse_diag_reply(&buf[..n as usize])
}

/// The `nlmsghdr` + `inet_diag_req_v2` of an exact UDP lookup (no `NLM_F_DUMP`): the
/// socket a datagram from anywhere (`idiag_src`, `idiag_sport` zero) to `to`, arriving
/// over loopback, would reach, with its memory counters; any cookie
/// (`INET_DIAG_NOCOOKIE`).
fn diag_lookup_request(to: std::net::SocketAddr, family: libc::c_int) -> [u8; 72] {
    let mut req = [0u8; NLMSG_HDR_LEN + 8 + DIAG_SOCKID_LEN];
    let len = req.len() as u32;
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    let body = &mut req[NLMSG_HDR_LEN..];
    body[0] = family as u8;
    body[1] = libc::IPPROTO_UDP as u8;
    body[2] = 1 << (INET_DIAG_SKMEMINFO - 1);
    body[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    // struct inet_diag_sockid: sport, dport (big-endian), src[16], dst[16], if, cookie.
    let id = &mut body[8..];
    id[2..4].copy_from_slice(&to.port().to_be_bytes());
    match to.ip() {
        std::net::IpAddr::V4(a) => id[20..24].copy_from_slice(&a.octets()),
        std::net::IpAddr::V6(a) => id[20..36].copy_from_slice(&a.octets()),
    }
    // The interface the datagram arrives on: loopback (`LOOPBACK_IFINDEX`, 1 in every
    // network namespace), so a socket bound to it (SO_BINDTODEVICE) is found as well
    // as an unbound one.
    id[36..40].copy_from_slice(&1u32.to_ne_bytes());
    id[40..48].fill(0xff);
    req
}

/// The receive buffer a socket lookup's reply reports: its `SOCK_DIAG_BY_FAMILY`
/// message's `INET_DIAG_SKMEMINFO` attribute; `None` for an error reply (`ENOENT`: no
/// such socket), `NLMSG_DONE` or anything malformed. Untrusted bytes in the sense that
/// any length may be wrong: nothing is read past a message or an attribute.
pub fn parse_diag_reply(mut b: &[u8]) -> Option<u32> {
    let u16_at = |b: &[u8], i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
    let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    while b.len() >= NLMSG_HDR_LEN {
        let len = u32_at(b, 0) as usize;
        let ty = u16_at(b, 4);
        if len < NLMSG_HDR_LEN
            || len > b.len()
            || ty == libc::NLMSG_DONE as u16
            || ty == libc::NLMSG_ERROR as u16
        {
            return None;
        }
        let msg = &b[NLMSG_HDR_LEN..len];
        if ty == SOCK_DIAG_BY_FAMILY && msg.len() >= DIAG_MSG_LEN {
            let mut attrs = &msg[DIAG_MSG_LEN..];
            while attrs.len() >= 4 {
                let alen = u16_at(attrs, 0) as usize;
                if alen < 4 || alen > attrs.len() {
                    return None;
                }
                let data = &attrs[4..alen];
                if u16_at(attrs, 2) == INET_DIAG_SKMEMINFO
                    && data.len() >= 4 * (SK_MEMINFO_RCVBUF + 1)
                {
                    return Some(u32_at(data, 4 * SK_MEMINFO_RCVBUF));
                }
                attrs = &attrs[alen.next_multiple_of(4).min(attrs.len())..];
            }
        }
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The socket diagnostics find a bound UDP socket's receive buffer (what
    /// `getsockopt(SO_RCVBUF)` says) by its address, and nothing for an address no
    /// socket holds.
    #[test]
    fn the_receive_buffer_of_a_local_socket_is_found_by_address() {
        for ip in [
            std::net::IpAddr::from([127, 0, 0, 1]),
            std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        ] {
            let Ok(s) = std::net::UdpSocket::bind((ip, 0)) else {
                continue; // (no IPv6 on this machine)
            };
            let s2 = socket2::SockRef::from(&s);
            s2.set_recv_buffer_size(96 << 10).unwrap();
            let want = s2.recv_buffer_size().unwrap() as u32;
            let at = s.local_addr().unwrap();
            assert_eq!(udp_rcvbuf_of(at), Some(want), "{at}");
            drop(s);
            assert_eq!(udp_rcvbuf_of(at), None, "{at} after close");
        }
    }

    /// The lookup finds the socket a datagram to the address would reach, as the
    /// kernel delivers it: also one bound to the wildcard address.
    #[test]
    fn the_receive_buffer_is_that_of_the_socket_datagrams_would_reach() {
        let s = std::net::UdpSocket::bind(("0.0.0.0", 0)).unwrap();
        let s2 = socket2::SockRef::from(&s);
        s2.set_recv_buffer_size(80 << 10).unwrap();
        let want = s2.recv_buffer_size().unwrap() as u32;
        let port = s.local_addr().unwrap().port();
        for ip in [[127, 0, 0, 1], [127, 0, 0, 77]] {
            let to = std::net::SocketAddr::from((ip, port));
            assert_eq!(udp_rcvbuf_of(to), Some(want), "{to}");
        }
        // A socket bound to the loopback device is found too (as root: binding to a
        // device needs CAP_NET_RAW).
        let lo = std::net::UdpSocket::bind(("127.0.0.1", 0)).unwrap();
        if socket2::SockRef::from(&lo).bind_device(Some(b"lo")).is_ok() {
            let at = lo.local_addr().unwrap();
            let want = socket2::SockRef::from(&lo).recv_buffer_size().unwrap() as u32;
            assert_eq!(udp_rcvbuf_of(at), Some(want), "{at} bound to lo");
        }
        // A port nobody listens on: no socket.
        drop(s);
        assert_eq!(udp_rcvbuf_of(([127, 0, 0, 1], port).into()), None);
    }

    /// The reply parser reads nothing past a message or an attribute, whatever their
    /// lengths say, and an error or end message holds no figure.
    #[test]
    fn a_diag_reply_with_bad_lengths_is_read_safely() {
        let msg = |nl_len: Option<u32>, attr_len: u16| {
            let mut m = vec![0u8; NLMSG_HDR_LEN + DIAG_MSG_LEN];
            m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
            let d = &mut m[NLMSG_HDR_LEN..];
            d[0] = libc::AF_INET as u8;
            d[4..6].copy_from_slice(&4791u16.to_be_bytes());
            d[8..12].copy_from_slice(&[127, 0, 0, 9]);
            m.extend_from_slice(&attr_len.to_ne_bytes());
            m.extend_from_slice(&INET_DIAG_SKMEMINFO.to_ne_bytes());
            for v in [10u32, 4242, 0, 0] {
                m.extend_from_slice(&v.to_ne_bytes());
            }
            let len = nl_len.unwrap_or(m.len() as u32);
            m[0..4].copy_from_slice(&len.to_ne_bytes());
            m
        };
        assert_eq!(parse_diag_reply(&msg(None, 20)), Some(4242));
        for (nl, attr) in [
            (Some(5000), 20),
            (Some(3), 20),
            (None, 200),
            (None, 2),
            (None, 8),
        ] {
            let m = msg(nl, attr);
            assert_eq!(parse_diag_reply(&m), None, "{nl:?} {attr}");
            for cut in 0..m.len() {
                assert_eq!(parse_diag_reply(&m[..cut]), None, "{nl:?} {attr} cut {cut}");
            }
        }
        for ty in [libc::NLMSG_DONE, libc::NLMSG_ERROR] {
            let mut m = vec![0u8; NLMSG_HDR_LEN + 4];
            m[0..4].copy_from_slice(&((NLMSG_HDR_LEN + 4) as u32).to_ne_bytes());
            m[4..6].copy_from_slice(&(ty as u16).to_ne_bytes());
            assert_eq!(parse_diag_reply(&m), None, "type {ty}");
        }
    }
}
