//! Control messages: the per-datagram IP metadata a UDP socket reports and is given
//! (TTL / hop limit, TOS / traffic class, flow label, destination address, GRO
//! segment size), built and parsed as bytes; and one `recvmsg` with a control buffer.

use crate::opt::set_int_opt;
use std::io;
use std::os::fd::AsRawFd;

/// Takes one message from the socket's error queue (`MSG_ERRQUEUE`, non-blocking) into
/// `buf`: with `set_tx_loop` (the `udp` module), a looped copy of a sent datagram. Returns its length
/// (cut to `buf`).
pub fn recv_error_queue(fd: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
    let mut ctl = [0u64; 32];
    let (n, _) = recvmsg_ctl(fd, buf, &mut ctl, libc::MSG_ERRQUEUE)?;
    Ok(n.min(buf.len()))
}

/// One non-blocking `recvmsg` (`flags` | `MSG_DONTWAIT`) into `buf`, with `ctl` as the
/// control buffer: the length received and the header, whose `msg_control`,
/// `msg_controllen` and `msg_flags` describe what the kernel wrote into `ctl` (its
/// iovec fields are cleared: they pointed at this call's locals).
pub(crate) fn recvmsg_ctl(
    fd: &impl AsRawFd,
    buf: &mut [u8],
    ctl: &mut [u64],
    flags: libc::c_int,
) -> io::Result<(usize, libc::msghdr)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = ctl.as_mut_ptr().cast();
    h.msg_controllen = std::mem::size_of_val(ctl) as _;
    // SAFETY: the header points at a live iovec over `buf` and at a live control
    // buffer of the sizes given; both outlive the call, which does not block.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut h, flags | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    h.msg_iov = std::ptr::null_mut();
    h.msg_iovlen = 0;
    Ok((n as usize, h))
}

/// IP-level metadata of one datagram: what `ibv_ah_attr.grh` carries and what a UD
/// receive reports in its GRH area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpMeta {
    /// TTL (IPv4) / hop limit (IPv6).
    pub hop_limit: u8,
    /// TOS (IPv4) / traffic class (IPv6), ECN bits included.
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits; 0 for IPv4).
    pub flow_label: u32,
}

/// What the control messages of one received datagram say. Fields the kernel did not
/// report are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// `IP_TTL` / `IPV6_HOPLIMIT`.
    pub hop_limit: Option<u8>,
    /// `IP_TOS` / `IPV6_TCLASS`.
    pub traffic_class: Option<u8>,
    /// `IPV6_FLOWINFO` (flow label bits only).
    pub flow_label: Option<u32>,
    /// The datagram's destination address (`IP_PKTINFO` / `IPV6_PKTINFO`).
    pub dst: Option<std::net::IpAddr>,
    /// `UDP_GRO`: the buffer holds a train of datagrams of this size (the last may be
    /// shorter).
    pub segment: Option<usize>,
}

impl RecvMeta {
    /// The metadata with the socket defaults filled in for what was not reported.
    pub fn ip(&self) -> IpMeta {
        IpMeta {
            hop_limit: self.hop_limit.unwrap_or(64),
            traffic_class: self.traffic_class.unwrap_or(0),
            flow_label: self.flow_label.unwrap_or(0),
        }
    }
}

/// Bytes of a `struct cmsghdr` and the alignment of control messages (`CMSG_ALIGN`):
/// `size_t cmsg_len; int cmsg_level; int cmsg_type;` aligned to `size_t`.
const CMSG_ALIGN: usize = std::mem::size_of::<usize>();
const CMSG_HDR: usize = (std::mem::size_of::<usize>() + 8).div_ceil(CMSG_ALIGN) * CMSG_ALIGN;

/// Room for the control messages a datagram can carry here (five, each ≤ 20 bytes of
/// data).
pub const RECV_CONTROL_LEN: usize = 5 * (CMSG_HDR + 24);

fn ne_i32(b: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

/// Parses the control messages `recvmsg` returned (`msg_control`, `msg_controllen`
/// bytes): `IP_TTL`, `IP_TOS`, `IP_PKTINFO`, `IPV6_HOPLIMIT`, `IPV6_TCLASS`,
/// `IPV6_FLOWINFO`, `IPV6_PKTINFO` (Linux `ip_cmsg_recv`, `ip6_datagram_recv_ctl`).
/// Unknown or truncated messages are skipped; parsing never reads past `control`.
/// Self-contained so a batched (`recvmmsg`) receive loop can reuse it per message.
pub fn parse_recv_meta(control: &[u8]) -> RecvMeta {
    let mut m = RecvMeta::default();
    let mut off = 0usize;
    while off + CMSG_HDR <= control.len() {
        let h = &control[off..];
        let len = usize::from_ne_bytes(h[..CMSG_ALIGN].try_into().unwrap_or_default());
        if len < CMSG_HDR || len > h.len() {
            break;
        }
        let level = ne_i32(&h[CMSG_ALIGN..]).unwrap_or(-1);
        let ty = ne_i32(&h[CMSG_ALIGN + 4..]).unwrap_or(-1);
        let data = &h[CMSG_HDR..len];
        match (level, ty) {
            // IP_TTL and IPV6_HOPLIMIT / IPV6_TCLASS are ints; IP_TOS is one byte.
            (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                m.hop_limit = ne_i32(data).and_then(|v| u8::try_from(v).ok());
            }
            (libc::IPPROTO_IP, libc::IP_TOS) => m.traffic_class = data.first().copied(),
            (libc::SOL_UDP, libc::UDP_GRO) => {
                m.segment = ne_i32(data).and_then(|v| usize::try_from(v).ok());
            }
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                m.traffic_class = ne_i32(data).and_then(|v| u8::try_from(v).ok());
            }
            (libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO) => {
                m.flow_label = data
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0xf_ffff);
            }
            // struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                if let Some(a) = data.get(8..12) {
                    m.dst = Some(std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]).into());
                }
            }
            // struct in6_pktinfo { in6_addr ipi6_addr; int ipi6_ifindex; }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                if let Some(a) = data.get(..16) {
                    let b: [u8; 16] = a.try_into().unwrap_or_default();
                    m.dst = Some(std::net::Ipv6Addr::from(b).into());
                }
            }
            _ => {}
        }
        off += len.div_ceil(CMSG_ALIGN) * CMSG_ALIGN;
    }
    m
}

/// Asks the kernel for the metadata [`parse_recv_meta`] reads: TTL and TOS on IPv4,
/// hop limit, traffic class and flow label on IPv6 (and the destination address when
/// `pktinfo`, for a socket not bound to one address).
pub fn enable_recv_meta(s: &socket2::Socket, ipv6: bool, pktinfo: bool) -> io::Result<()> {
    set_recv_meta(s, ipv6, true)?;
    match (pktinfo, ipv6) {
        (false, _) => Ok(()),
        (true, true) => set_int_opt(s, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1),
        (true, false) => set_int_opt(s, libc::IPPROTO_IP, libc::IP_PKTINFO, 1),
    }
}

/// Turns the TTL / TOS (IPv4) or hop limit / traffic class / flow label (IPv6)
/// control messages of [`enable_recv_meta`] on or off. Each costs the kernel a
/// `put_cmsg` per datagram received, so sockets ask for them only while something
/// reads them (`Shared::recv_meta_user`); without them those fields read as 0.
pub fn set_recv_meta(s: &socket2::Socket, ipv6: bool, on: bool) -> io::Result<()> {
    if ipv6 {
        s.set_recv_hoplimit_v6(on)?;
        s.set_recv_tclass_v6(on)?;
        set_int_opt(s, libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO, i32::from(on))
    } else {
        s.set_recv_tos_v4(on)?;
        set_int_opt(s, libc::IPPROTO_IP, libc::IP_RECVTTL, i32::from(on))
    }
}

/// Bytes of one control message with an `int` payload (`CMSG_SPACE(sizeof(int))`).
const CMSG_INT_SPACE: usize = (CMSG_HDR + 4).div_ceil(CMSG_ALIGN) * CMSG_ALIGN;

/// Up to two `int` control messages, built on the stack (no allocation per datagram).
pub struct SendControl {
    buf: [u8; 2 * CMSG_INT_SPACE],
    len: usize,
}

impl SendControl {
    fn new() -> SendControl {
        SendControl {
            buf: [0; 2 * CMSG_INT_SPACE],
            len: 0,
        }
    }

    /// Appends one control message with an `int` payload (at most two fit).
    fn push_int(&mut self, level: libc::c_int, ty: libc::c_int, v: libc::c_int) {
        let Some(m) = self.buf.get_mut(self.len..self.len + CMSG_INT_SPACE) else {
            return;
        };
        m[..CMSG_ALIGN].copy_from_slice(&(CMSG_HDR + 4).to_ne_bytes());
        m[CMSG_ALIGN..CMSG_ALIGN + 4].copy_from_slice(&level.to_ne_bytes());
        m[CMSG_ALIGN + 4..CMSG_ALIGN + 8].copy_from_slice(&ty.to_ne_bytes());
        m[CMSG_HDR..CMSG_HDR + 4].copy_from_slice(&v.to_ne_bytes());
        self.len += CMSG_INT_SPACE;
    }

    /// The control bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The control messages that set a datagram's TTL / hop limit and TOS / traffic class
/// (`IP_TTL`+`IP_TOS` or `IPV6_HOPLIMIT`+`IPV6_TCLASS`, Linux `ip_cmsg_send` /
/// `ip6_datagram_send_ctl`). A hop limit of 0 keeps the socket's default (an IP TTL
/// of 0 is not sendable). The flow label is left to the kernel (IPv6 flow labels
/// need the flow-label manager; the ICRC masks the field, DESIGN §3).
pub fn send_control(ipv6: bool, meta: IpMeta) -> SendControl {
    let mut c = SendControl::new();
    let (level, ttl, tos) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT, libc::IPV6_TCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TTL, libc::IP_TOS)
    };
    if meta.hop_limit != 0 {
        c.push_int(level, ttl, meta.hop_limit.into());
    }
    c.push_int(level, tos, meta.traffic_class.into());
    c
}

/// Sends one datagram with its TTL / hop limit and TOS / traffic class (`sendmsg`).
pub fn send_with_meta(
    s: &socket2::Socket,
    bytes: &[u8],
    dst: std::net::SocketAddr,
    meta: IpMeta,
) -> io::Result<usize> {
    let addr = socket2::SockAddr::from(dst);
    // What the socket does anyway (TTL 64 to a unicast address, TOS 0) needs no
    // control message.
    let default_ttl = meta.hop_limit == 0 || (meta.hop_limit == 64 && !dst.ip().is_multicast());
    if default_ttl && meta.traffic_class == 0 {
        return s.send_to_with_flags(bytes, &addr, libc::MSG_DONTWAIT);
    }
    let control = send_control(dst.is_ipv6(), meta);
    let bufs = [io::IoSlice::new(bytes)];
    let msg = socket2::MsgHdr::new()
        .with_addr(&addr)
        .with_buffers(&bufs)
        .with_control(control.as_slice());
    s.sendmsg(&msg, libc::MSG_DONTWAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip_through_the_parser() {
        // What we send is what the kernel reports back in the same layout.
        let c = send_control(
            false,
            IpMeta {
                hop_limit: 7,
                traffic_class: 0x2e,
                flow_label: 0,
            },
        );
        let mut m = parse_recv_meta(c.as_slice());
        // IP_TOS is one byte on receive but an int on send: the first byte of a
        // native-endian int is its low byte only on little-endian machines.
        if cfg!(target_endian = "big") {
            m.traffic_class = Some(0x2e);
        }
        assert_eq!((m.hop_limit, m.traffic_class), (Some(7), Some(0x2e)));
        let c6 = send_control(
            true,
            IpMeta {
                hop_limit: 0,
                traffic_class: 0xb8,
                flow_label: 0,
            },
        );
        let m6 = parse_recv_meta(c6.as_slice());
        assert_eq!((m6.hop_limit, m6.traffic_class), (None, Some(0xb8)));
    }

    #[test]
    fn parser_skips_bad_and_truncated_messages() {
        assert_eq!(parse_recv_meta(&[]), RecvMeta::default());
        assert_eq!(parse_recv_meta(&[0xff; 7]), RecvMeta::default());
        // A length beyond the buffer, and a length below the header, both stop parsing.
        let mut c = send_control(
            false,
            IpMeta {
                hop_limit: 9,
                traffic_class: 1,
                flow_label: 0,
            },
        )
        .as_slice()
        .to_vec();
        c[..CMSG_ALIGN].copy_from_slice(&1000usize.to_ne_bytes());
        assert_eq!(parse_recv_meta(&c), RecvMeta::default());
        c[..CMSG_ALIGN].copy_from_slice(&3usize.to_ne_bytes());
        assert_eq!(parse_recv_meta(&c), RecvMeta::default());
        // An IPv6 pktinfo and flowinfo.
        let mut p = Vec::new();
        let len = CMSG_HDR + 20;
        p.extend_from_slice(&len.to_ne_bytes());
        p.extend_from_slice(&libc::IPPROTO_IPV6.to_ne_bytes());
        p.extend_from_slice(&libc::IPV6_PKTINFO.to_ne_bytes());
        p.resize(CMSG_HDR, 0);
        p.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(&1i32.to_ne_bytes());
        p.resize(p.len().div_ceil(CMSG_ALIGN) * CMSG_ALIGN, 0);
        let start = p.len();
        p.extend_from_slice(&(CMSG_HDR + 4).to_ne_bytes());
        p.extend_from_slice(&libc::IPPROTO_IPV6.to_ne_bytes());
        p.extend_from_slice(&libc::IPV6_FLOWINFO.to_ne_bytes());
        p.resize(start + CMSG_HDR, 0);
        p.extend_from_slice(&0x0abc_def1u32.to_be_bytes());
        let m = parse_recv_meta(&p);
        assert_eq!(m.dst, Some(std::net::Ipv6Addr::LOCALHOST.into()));
        assert_eq!(m.flow_label, Some(0xc_def1));
        // An out-of-range TTL value is not a TTL.
        let mut t = SendControl::new();
        t.push_int(libc::IPPROTO_IP, libc::IP_TTL, 300);
        assert_eq!(parse_recv_meta(t.as_slice()).hop_limit, None);
        // A third message does not fit and is not written.
        t.push_int(libc::IPPROTO_IP, libc::IP_TOS, 1);
        t.push_int(libc::IPPROTO_IP, libc::IP_TOS, 2);
        assert_eq!(t.as_slice().len(), 2 * CMSG_INT_SPACE);
    }
}
