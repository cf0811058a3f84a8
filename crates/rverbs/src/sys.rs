//! The few system calls socket2 does not wrap: `IP_MTU_DISCOVER`, `UDP_NO_CHECK6_RX`,
//! `IP_RECVTTL`, `IPV6_FLOWINFO`, `eventfd` and `poll`; and the receive / send paths
//! with per-datagram IP metadata (`recvmsg` / `sendmsg` through socket2's safe wrappers,
//! with the control messages built and parsed here in safe code). Every `unsafe` block
//! of the crate is here, each with the promise it relies on.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Sets `IP_MTU_DISCOVER = IP_PMTUDISC_DO` (DF on every datagram; Linux then sends IPv4
/// ID 0 from an unconnected socket, which the ICRC computation assumes — DESIGN §3).
pub(crate) fn set_pmtudisc_do(fd: &impl AsRawFd) -> io::Result<()> {
    set_int_opt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )
}

/// Turns on (or off) the looping back of a copy of each sent datagram, headers and all,
/// to the socket's error queue (`SO_TIMESTAMPING` with software transmit timestamps,
/// taken when the datagram reaches the device's queue and its driver; the copy starts
/// at the link-layer header): how a connected socket learns the IPv4 Identification the
/// kernel gives its datagrams (`conn_tx.rs`).
pub(crate) fn set_tx_loop(fd: &impl AsRawFd, on: bool) -> io::Result<()> {
    let flags = if on {
        libc::SOF_TIMESTAMPING_TX_SCHED
            | libc::SOF_TIMESTAMPING_TX_SOFTWARE
            | libc::SOF_TIMESTAMPING_SOFTWARE
    } else {
        0
    };
    set_int_opt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        flags as libc::c_int,
    )
}

/// Takes one message from the socket's error queue (`MSG_ERRQUEUE`, non-blocking) into
/// `buf`: with [`set_tx_loop`], a looped copy of a sent datagram. Returns its length
/// (cut to `buf`).
pub(crate) fn recv_error_queue(fd: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
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

/// Sets an integer socket option.
fn set_int_opt(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller for the duration of the call;
    // the option value points at a live c_int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
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

/// Attaches a classic BPF socket filter that drops every datagram which arrived on
/// interface `ifindex` and keeps the rest (`SO_ATTACH_FILTER`; the `SKF_AD_IFINDEX`
/// ancillary load reads `skb->dev->ifindex`, `net/core/filter.c`). A raw-mode context
/// receives that interface's RoCE v2 frames from its raw device, so its UDP sockets stay
/// bound (the kernel then sends no ICMP port unreachable) but must not hand the same
/// packets to the engine a second time; datagrams from this host (over `lo`) still come
/// through them.
pub(crate) fn drop_from_interface(fd: &impl AsRawFd, ifindex: u32) -> io::Result<()> {
    // linux/filter.h: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K;
    // SKF_AD_OFF (-0x1000) + SKF_AD_IFINDEX (8).
    const LD_ABS_W: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const SKF_AD_IFINDEX: u32 = (-0x1000i32 + 8) as u32;
    let ins = |code, jt, jf, k| rverbs_raw::SockFilter { code, jt, jf, k };
    rverbs_raw::attach_socket_filter(
        fd,
        &[
            ins(LD_ABS_W, 0, 0, SKF_AD_IFINDEX),
            ins(JEQ_K, 0, 1, ifindex),
            ins(RET_K, 0, 0, 0),
            ins(RET_K, 0, 0, u32::MAX),
        ],
    )
}

/// Sets `UDP_NO_CHECK6_RX`: accept IPv6 UDP datagrams with a zero checksum. RFC 8200
/// forbids them, but RoCE v2 senders such as the kernel's rxe send checksum 0 on IPv6
/// too (the ICRC protects the packet), and Linux drops them without this option.
pub(crate) fn set_udp_no_check6_rx(fd: &impl AsRawFd) -> io::Result<()> {
    set_int_opt(fd, libc::IPPROTO_UDP, libc::UDP_NO_CHECK6_RX, 1)
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
/// A `poll(2)` timeout for a sleep of `ns` nanoseconds: whole milliseconds, rounded up
/// (waking early would only mean another look), at most a second.
pub(crate) fn poll_ms(ns: u64) -> i32 {
    ns.div_ceil(1_000_000).min(1000) as i32
}

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

/// IP-level metadata of one datagram: what `ibv_ah_attr.grh` carries and what a UD
/// receive reports in its GRH area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IpMeta {
    /// TTL (IPv4) / hop limit (IPv6).
    pub(crate) hop_limit: u8,
    /// TOS (IPv4) / traffic class (IPv6), ECN bits included.
    pub(crate) traffic_class: u8,
    /// IPv6 flow label (20 bits; 0 for IPv4).
    pub(crate) flow_label: u32,
}

/// What the control messages of one received datagram say. Fields the kernel did not
/// report are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RecvMeta {
    /// `IP_TTL` / `IPV6_HOPLIMIT`.
    pub(crate) hop_limit: Option<u8>,
    /// `IP_TOS` / `IPV6_TCLASS`.
    pub(crate) traffic_class: Option<u8>,
    /// `IPV6_FLOWINFO` (flow label bits only).
    pub(crate) flow_label: Option<u32>,
    /// The datagram's destination address (`IP_PKTINFO` / `IPV6_PKTINFO`).
    pub(crate) dst: Option<std::net::IpAddr>,
    /// `UDP_GRO`: the buffer holds a train of datagrams of this size (the last may be
    /// shorter).
    pub(crate) segment: Option<usize>,
}

impl RecvMeta {
    /// The metadata with the socket defaults filled in for what was not reported.
    pub(crate) fn ip(&self) -> IpMeta {
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
pub(crate) const RECV_CONTROL_LEN: usize = 5 * (CMSG_HDR + 24);

fn ne_i32(b: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

/// Parses the control messages `recvmsg` returned (`msg_control`, `msg_controllen`
/// bytes): `IP_TTL`, `IP_TOS`, `IP_PKTINFO`, `IPV6_HOPLIMIT`, `IPV6_TCLASS`,
/// `IPV6_FLOWINFO`, `IPV6_PKTINFO` (Linux `ip_cmsg_recv`, `ip6_datagram_recv_ctl`).
/// Unknown or truncated messages are skipped; parsing never reads past `control`.
/// Self-contained so a batched (`recvmmsg`) receive loop can reuse it per message.
pub(crate) fn parse_recv_meta(control: &[u8]) -> RecvMeta {
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
pub(crate) fn enable_recv_meta(s: &socket2::Socket, ipv6: bool, pktinfo: bool) -> io::Result<()> {
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
pub(crate) fn set_recv_meta(s: &socket2::Socket, ipv6: bool, on: bool) -> io::Result<()> {
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
pub(crate) struct SendControl {
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
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The control messages that set a datagram's TTL / hop limit and TOS / traffic class
/// (`IP_TTL`+`IP_TOS` or `IPV6_HOPLIMIT`+`IPV6_TCLASS`, Linux `ip_cmsg_send` /
/// `ip6_datagram_send_ctl`). A hop limit of 0 keeps the socket's default (an IP TTL
/// of 0 is not sendable). The flow label is left to the kernel (IPv6 flow labels
/// need the flow-label manager; the ICRC masks the field, DESIGN §3).
pub(crate) fn send_control(ipv6: bool, meta: IpMeta) -> SendControl {
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
pub(crate) fn send_with_meta(
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

/// Asks for a receive buffer of `bytes` past `net.core.rmem_max` (`SO_RCVBUFFORCE`,
/// which needs CAP_NET_ADMIN; without it the call fails and the capped size stays).
pub(crate) fn force_recv_buffer(fd: &impl AsRawFd, bytes: libc::c_int) -> io::Result<()> {
    set_int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes)
}

/// Sets `UDP_GRO`: the kernel may hand over a train of same-size datagrams sent with
/// `UDP_SEGMENT` as one buffer, with their size in a control message.
pub(crate) fn set_udp_gro(fd: &impl AsRawFd) -> io::Result<()> {
    set_int_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 1)
}

/// One received buffer: where it is in the batch buffer, who sent it, and the size
/// of the datagrams it holds when the kernel coalesced several (`UDP_GRO`), else 0.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) from: std::net::SocketAddr,
    pub(crate) segment: usize,
    pub(crate) meta: RecvMeta,
}

/// Most buffers one [`recv_batch`] takes.
pub(crate) const RECV_MAX: usize = 64;
const CONTROL_LEN: usize = RECV_CONTROL_LEN + 32;

/// The `recvmmsg` headers, addresses and control buffers of a receiver, allocated
/// once and reused: a call only rewrites the fields the kernel reads, instead of
/// zeroing some 6 KB of headers every time (which showed in profiles of the
/// ping-pong and of the sender's ACK receives).
pub(crate) struct RecvScratch {
    iov: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    /// Control buffers, u64-aligned as cmsghdr needs.
    control: Vec<[u64; CONTROL_LEN.div_ceil(8)]>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers inside the headers are rewritten before every call and
// dereferenced only by the kernel during it; between calls they are never used, so
// the scratch may move to (and be used from) another thread.
unsafe impl Send for RecvScratch {}

impl RecvScratch {
    /// Room for up to `n` buffers per call (at most [`RECV_MAX`]).
    pub(crate) fn new(n: usize) -> RecvScratch {
        let n = n.clamp(1, RECV_MAX);
        RecvScratch {
            iov: vec![
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                };
                n
            ],
            // SAFETY: sockaddr_storage and mmsghdr are plain data; all-zero is a valid
            // value (null pointers, 0 lengths).
            names: vec![unsafe { std::mem::zeroed() }; n],
            control: vec![[0u64; CONTROL_LEN.div_ceil(8)]; n],
            // SAFETY: as above.
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
        }
    }
}

/// Receives up to `buf.len() / slot` buffers (at most the scratch's size) with one
/// `recvmmsg(2)` (non-blocking) into `slot`-byte slots of `buf`, appending one
/// [`Received`] per buffer to `out`. A buffer longer than a slot arrives cut to it
/// (its ICRC then fails and it is counted as a drop). Returns how many arrived.
pub(crate) fn recv_batch(
    fd: &impl AsRawFd,
    buf: &mut [u8],
    slot: usize,
    out: &mut Vec<Received>,
    scratch: &mut RecvScratch,
) -> io::Result<usize> {
    recv_batch_flags(fd, buf, slot, out, scratch, libc::MSG_DONTWAIT)
}

/// [`recv_batch`] that sleeps until the first datagram arrives (`MSG_WAITFORONE` on
/// a blocking socket) or the socket's receive timeout (`SO_RCVTIMEO`) passes; an
/// expired timeout is `WouldBlock`.
pub(crate) fn recv_batch_wait(
    fd: &impl AsRawFd,
    buf: &mut [u8],
    slot: usize,
    out: &mut Vec<Received>,
    scratch: &mut RecvScratch,
) -> io::Result<usize> {
    recv_batch_flags(fd, buf, slot, out, scratch, libc::MSG_WAITFORONE)
}

fn recv_batch_flags(
    fd: &impl AsRawFd,
    buf: &mut [u8],
    slot: usize,
    out: &mut Vec<Received>,
    scratch: &mut RecvScratch,
    flags: libc::c_int,
) -> io::Result<usize> {
    let RecvScratch {
        iov,
        names,
        control,
        hdrs,
    } = scratch;
    let n = buf
        .len()
        .checked_div(slot)
        .unwrap_or(0)
        .min(RECV_MAX)
        .min(hdrs.len());
    if n == 0 {
        return Ok(0);
    }
    for i in 0..n {
        iov[i].iov_base = buf[i * slot..].as_mut_ptr().cast();
        iov[i].iov_len = slot;
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = 1;
        h.msg_control = control[i].as_mut_ptr().cast();
        h.msg_controllen = (CONTROL_LEN.div_ceil(8) * 8) as _;
        h.msg_flags = 0;
    }
    // SAFETY: every header points at a live iovec covering its own `slot` bytes of
    // `buf` (disjoint, in bounds since i * slot + slot <= buf.len()), at a live
    // sockaddr_storage and at a live control buffer of the sizes given; all outlive
    // the call. With MSG_DONTWAIT the call never blocks; with MSG_WAITFORONE it
    // blocks until the first datagram or the socket's receive timeout.
    let rc = if n == 1 {
        // One buffer (a ping-pong): `recvmsg` spares the kernel recvmmsg's loop and
        // its bookkeeping; MSG_WAITFORONE means nothing for a single datagram.
        // SAFETY: as above, for the first header only.
        let len = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut hdrs[0].msg_hdr,
                flags & !libc::MSG_WAITFORONE,
            )
        };
        if len >= 0 {
            hdrs[0].msg_len = len as libc::c_uint;
            1
        } else {
            -1
        }
    } else {
        // SAFETY: see above.
        unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        }
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = rc as usize;
    for i in 0..got {
        let len = (hdrs[i].msg_len as usize).min(slot);
        #[allow(clippy::unnecessary_cast)] // socklen_t or size_t, by C library
        let clen = (hdrs[i].msg_hdr.msg_controllen as usize).min(CONTROL_LEN);
        // SAFETY: `control[i]` is a live array of CONTROL_LEN initialized bytes (u64s
        // viewed as bytes, no padding); the kernel wrote `clen` of them.
        let bytes: &[u8] =
            unsafe { std::slice::from_raw_parts(control[i].as_ptr().cast::<u8>(), clen) };
        let meta = parse_recv_meta(bytes);
        let segment = meta.segment.unwrap_or(0);
        if let Some(from) = from_storage(&names[i]) {
            out.push(Received {
                offset: i * slot,
                len,
                from,
                segment,
                meta,
            });
        }
    }
    Ok(got)
}

/// One datagram to send, or (with `segment` > 0) a train of datagrams of `segment`
/// bytes each (the last may be shorter) sent as one buffer with `UDP_SEGMENT`: the
/// buffers `first .. first + count` of the batch ([`send_batch`]'s `buf`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outgoing {
    pub(crate) dst: std::net::SocketAddr,
    pub(crate) first: usize,
    pub(crate) count: usize,
    pub(crate) segment: u16,
    /// Bytes of the first buffer, of the last one, and of all.
    pub(crate) first_len: usize,
    pub(crate) last_len: usize,
    pub(crate) bytes: usize,
}

/// The `sendmmsg` headers, iovecs, addresses and control buffers of a sender,
/// reused from call to call (no allocation per batch).
#[derive(Default)]
pub(crate) struct SendScratch {
    /// A small train gathered into one buffer (see [`send_batch`]).
    gather: Vec<u8>,
    addrs: Vec<socket2::SockAddr>,
    iovs: Vec<libc::iovec>,
    iov_counts: Vec<usize>,
    control: Vec<[u64; 4]>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` are written by `send_batch` and used
// only by the kernel during its `sendmmsg`; `send_batch` clears both before it
// returns, so no pointer outlives the buffers it points at, and the scratch may move
// to (and be used from) another thread.
unsafe impl Send for SendScratch {}

/// Most datagrams and bytes of a train [`send_batch`] gathers into one buffer.
const GATHER_MAX_COUNT: usize = 8;
const GATHER_MAX_BYTES: usize = 512;

/// Sends with `sendmmsg(2)` (as many calls as the kernel needs; one datagram with
/// `sendto`, one train with `sendmsg`, a small one gathered into one buffer); `buf(i)`
/// is the i-th datagram of the batch, in up to three pieces sent one after the other
/// (a packet whose payload stays in registered memory, `Transmit::parts`; empty pieces
/// are skipped). A message the kernel refuses (no route, buffer full) is
/// skipped: lost packets, which the transport's retransmission covers. Without
/// `named`, the messages carry no destination (a connected socket's own peer, whose
/// route the socket keeps; naming it would look the route up again), and the send
/// stops at the first refused message: whether it took an IPv4 ID is unknown, and the
/// next messages' ICRCs assume it did not (`conn_tx.rs`). Returns how many messages the
/// kernel took (without `named`: the first that many).
pub(crate) fn send_batch<'b>(
    fd: &impl AsRawFd,
    msgs: &[Outgoing],
    buf: &dyn Fn(usize) -> [&'b [u8]; 3],
    scratch: &mut SendScratch,
    named: bool,
) -> usize {
    const MAX: usize = 64;
    if let [m] = msgs {
        if let (1, 0, [b, [], []]) = (m.count, m.segment, buf(m.first)) {
            // One datagram in one piece (a ping-pong's message): `sendto` passes the
            // address and the bytes directly, where `sendmmsg` makes the kernel copy in
            // and check an mmsghdr and an iovec array first.
            let addr = socket2::SockAddr::from(m.dst);
            let (name, name_len) = if named {
                (addr.as_ptr().cast(), addr.len())
            } else {
                (std::ptr::null(), 0)
            };
            // SAFETY: `b` and `addr` are live for the call; the kernel only reads them.
            let rc = unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    b.as_ptr().cast(),
                    b.len(),
                    libc::MSG_DONTWAIT,
                    name,
                    name_len,
                )
            };
            return usize::from(rc >= 0);
        }
    }
    // SAFETY (for CMSG_SPACE/CMSG_LEN): pure arithmetic on the length given.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
    let SendScratch {
        gather,
        addrs,
        iovs,
        iov_counts,
        control,
        hdrs,
    } = scratch;
    let (mut start, mut sent) = (0, 0);
    while start < msgs.len() {
        let chunk = &msgs[start..(start + MAX).min(msgs.len())];
        addrs.clear();
        if named {
            addrs.extend(chunk.iter().map(|m| socket2::SockAddr::from(m.dst)));
        }
        iovs.clear();
        // One small train (a reply with the ACK behind it): one buffer, which the
        // kernel copies in one piece, instead of an iovec per datagram.
        let gathered = match chunk {
            [m] if m.count > 1
                && m.count <= GATHER_MAX_COUNT
                && (m.first..m.first + m.count)
                    .flat_map(buf)
                    .map(<[u8]>::len)
                    .sum::<usize>()
                    <= GATHER_MAX_BYTES =>
            {
                gather.clear();
                for part in (m.first..m.first + m.count).flat_map(buf) {
                    gather.extend_from_slice(part);
                }
                true
            }
            _ => false,
        };
        // How many iovecs each message has.
        iov_counts.clear();
        if gathered {
            iovs.push(libc::iovec {
                iov_base: gather.as_ptr() as *mut libc::c_void,
                iov_len: gather.len(),
            });
            iov_counts.push(1);
        } else {
            for m in chunk {
                let before = iovs.len();
                iovs.extend(
                    (m.first..m.first + m.count)
                        .flat_map(buf)
                        .filter(|b| !b.is_empty())
                        .map(|b| libc::iovec {
                            iov_base: b.as_ptr() as *mut libc::c_void,
                            iov_len: b.len(),
                        }),
                );
                iov_counts.push(iovs.len() - before);
            }
        }
        if control.len() < chunk.len() {
            control.resize(chunk.len(), [0u64; 4]);
        }
        hdrs.clear();
        let mut at = 0;
        for (i, m) in chunk.iter().enumerate() {
            // SAFETY: mmsghdr is plain data; all-zero is a valid value.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            let mh = &mut h.msg_hdr;
            if named {
                mh.msg_name = addrs[i].as_ptr() as *mut libc::c_void;
                mh.msg_namelen = addrs[i].len();
            }
            mh.msg_iov = iovs[at..].as_mut_ptr();
            let n = iov_counts[i];
            mh.msg_iovlen = n as _;
            at += n;
            if m.segment > 0 {
                mh.msg_control = control[i].as_mut_ptr().cast();
                mh.msg_controllen = space as _;
                // SAFETY: the control buffer (32 bytes, u64-aligned) holds one cmsghdr
                // with a u16 (CMSG_SPACE(2) <= 32); CMSG_FIRSTHDR points at its start.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(mh);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), m.segment);
                }
            }
            hdrs.push(h);
        }
        // SAFETY: each header points at a live address of the length given, at its
        // own iovecs (`iov_counts`; one when gathered; in bounds of `iovs`, which is not
        // resized until the call returns) over live byte slices (the batch's pieces,
        // borrowed for the whole call — a lent region's bytes stay locked by the
        // caller — or `gather`, neither changed until the call returns; read only by
        // the kernel) and at a live control buffer; all outlive the call.
        let rc = if let [h] = &hdrs[..] {
            // One message: `sendmsg` spares the kernel sendmmsg's loop and the
            // write-back of the message length.
            // SAFETY: as above, for the one header.
            let len = unsafe { libc::sendmsg(fd.as_raw_fd(), &h.msg_hdr, libc::MSG_DONTWAIT) };
            if len >= 0 {
                1
            } else {
                -1
            }
        } else {
            // SAFETY: see above.
            unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    hdrs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            }
        };
        // rc < 0: the first message failed; skip it. Otherwise rc were sent.
        sent += rc.max(0) as usize;
        if !named && (rc <= 0 || rc as usize != chunk.len()) {
            break;
        }
        start += if rc <= 0 { 1 } else { rc as usize };
    }
    // No pointer into the caller's buffers stays behind.
    iovs.clear();
    hdrs.clear();
    sent
}

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
pub(crate) fn udp_rcvbuf_of(local: std::net::SocketAddr) -> Option<u32> {
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
pub(crate) fn parse_diag_reply(mut b: &[u8]) -> Option<u32> {
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

/// The MAC address of `ifname` in the calling thread's network namespace
/// (`SIOCGIFHWADDR`; sysfs shows the namespace it was mounted in, not the thread's).
pub(crate) fn interface_mac(ifname: &str) -> std::io::Result<[u8; 6]> {
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

    #[test]
    fn loopback_datagrams_carry_their_ttl_and_tos() {
        use socket2::{Domain, Socket, Type};
        for (addr, v6) in [("127.0.0.1:0", false), ("[::1]:0", true)] {
            let a: std::net::SocketAddr = addr.parse().unwrap();
            let dom = if v6 { Domain::IPV6 } else { Domain::IPV4 };
            let Ok(rx) = Socket::new(dom, Type::DGRAM, None) else {
                continue;
            };
            if rx.bind(&a.into()).is_err() {
                eprintln!("skipping {addr}: cannot bind (no IPv6 loopback?)");
                continue;
            }
            enable_recv_meta(&rx, v6, true).unwrap();
            let to = rx.local_addr().unwrap().as_socket().unwrap();
            let tx = Socket::new(dom, Type::DGRAM, None).unwrap();
            tx.bind(&a.into()).unwrap();
            let meta = IpMeta {
                hop_limit: 5,
                traffic_class: 0x28,
                flow_label: 0,
            };
            send_with_meta(&tx, b"hi", to, meta).unwrap();
            // The batched receive parses each datagram's control messages.
            let mut buf = vec![0u8; 4 * 64];
            let mut got = Vec::new();
            let mut scratch = RecvScratch::new(4);
            assert_eq!(
                recv_batch(&rx, &mut buf, 64, &mut got, &mut scratch).unwrap(),
                1
            );
            let r = got[0];
            assert_eq!(&buf[r.offset..r.offset + r.len], b"hi");
            assert_eq!(r.from, tx.local_addr().unwrap().as_socket().unwrap());
            let m = r.meta;
            assert_eq!(
                (m.hop_limit, m.traffic_class),
                (Some(5), Some(0x28)),
                "{addr}"
            );
            assert_eq!(m.dst, Some(to.ip()));
        }
    }

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

    /// Datagrams given in pieces (a packet whose payload stays in its memory region)
    /// arrive whole: alone, in a small train gathered into one buffer, and in a
    /// `UDP_SEGMENT` train with an iovec per piece; empty pieces are skipped.
    #[test]
    fn datagrams_in_pieces_arrive_whole() {
        use socket2::{Domain, Socket, Type};
        let a: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let rx = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        rx.bind(&a.into()).unwrap();
        let to = rx.local_addr().unwrap().as_socket().unwrap();
        let tx = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        tx.bind(&a.into()).unwrap();
        // Datagram i: a 12-byte head, a body (its length depends on the test below)
        // and a 4-byte tail, each byte telling its datagram and place.
        let piece = |i: usize, part: u8, len: usize| -> Vec<u8> {
            (0..len)
                .map(|k| (i * 64) as u8 ^ (part * 16) ^ k as u8)
                .collect()
        };
        for (count, body_len, segment) in [(1, 300, 0u16), (3, 40, 56), (5, 1000, 1016)] {
            let d: Vec<[Vec<u8>; 3]> = (0..count)
                .map(|i| [piece(i, 1, 12), piece(i, 2, body_len), piece(i, 3, 4)])
                .collect();
            let bytes = 16 + body_len;
            let m = Outgoing {
                dst: to,
                first: 0,
                count,
                segment: if count > 1 { segment } else { 0 },
                first_len: bytes,
                last_len: bytes,
                bytes: bytes * count,
            };
            let mut scratch = SendScratch::default();
            // (Odd ones with the head and body joined and an empty last piece.)
            let joined: Vec<Vec<u8>> = d.iter().map(|p| [&p[0][..], &p[1][..]].concat()).collect();
            let parts = |i: usize| -> [&[u8]; 3] {
                if i % 2 == 0 {
                    [&d[i][0], &d[i][1], &d[i][2]]
                } else {
                    [&joined[i], &d[i][2], &[]]
                }
            };
            assert_eq!(send_batch(&tx, &[m], &parts, &mut scratch, true), 1);
            let mut buf = vec![0u8; count * 2048];
            let mut got = Vec::new();
            let mut rs = RecvScratch::new(count);
            let mut n = 0;
            while n < count {
                n += recv_batch(&rx, &mut buf, 2048, &mut got, &mut rs).unwrap();
            }
            for (i, r) in got.iter().enumerate() {
                assert_eq!(
                    buf[r.offset..r.offset + r.len],
                    d[i].concat()[..],
                    "{count} datagrams: datagram {i}"
                );
            }
        }
    }
}
