//! UDP sockets for RoCE v2: the options the carrier sets (DF, zero IPv6 checksums,
//! GRO, transmit loop-back, forced buffers, an interface filter) and the batched
//! receive and send paths (`recvmmsg` / `sendmmsg`, with `recvmsg` / `sendto` for a
//! single datagram), which carry each datagram's source and IP metadata.

use crate::msg::{parse_recv_meta, RecvMeta, RECV_CONTROL_LEN};
use crate::opt::set_int_opt;
use std::io;
use std::os::fd::AsRawFd;

/// Sets `IP_MTU_DISCOVER = IP_PMTUDISC_DO` (DF on every datagram; Linux then sends IPv4
/// ID 0 from an unconnected socket, which the ICRC computation assumes — DESIGN §3).
pub fn set_pmtudisc_do(fd: &impl AsRawFd) -> io::Result<()> {
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
pub fn set_tx_loop(fd: &impl AsRawFd, on: bool) -> io::Result<()> {
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

/// Attaches a classic BPF socket filter that drops every datagram which arrived on
/// interface `ifindex` and keeps the rest (`SO_ATTACH_FILTER`; the `SKF_AD_IFINDEX`
/// ancillary load reads `skb->dev->ifindex`, `net/core/filter.c`). A raw-mode context
/// receives that interface's RoCE v2 frames from its raw device, so its UDP sockets stay
/// bound (the kernel then sends no ICMP port unreachable) but must not hand the same
/// packets to the engine a second time; datagrams from this host (over `lo`) still come
/// through them.
pub fn drop_from_interface(fd: &impl AsRawFd, ifindex: u32) -> io::Result<()> {
    // linux/filter.h: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K;
    // SKF_AD_OFF (-0x1000) + SKF_AD_IFINDEX (8).
    const LD_ABS_W: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const SKF_AD_IFINDEX: u32 = (-0x1000i32 + 8) as u32;
    let ins = |code, jt, jf, k| crate::packet::SockFilter { code, jt, jf, k };
    crate::packet::attach_filter(
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
pub fn set_udp_no_check6_rx(fd: &impl AsRawFd) -> io::Result<()> {
    set_int_opt(fd, libc::IPPROTO_UDP, libc::UDP_NO_CHECK6_RX, 1)
}

/// Converts a kernel socket address to a `SocketAddr` (IPv4 or IPv6 only).
pub(crate) fn from_storage(ss: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
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
pub fn force_recv_buffer(fd: &impl AsRawFd, bytes: libc::c_int) -> io::Result<()> {
    set_int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes)
}

/// Sets `UDP_GRO`: the kernel may hand over a train of same-size datagrams sent with
/// `UDP_SEGMENT` as one buffer, with their size in a control message.
pub fn set_udp_gro(fd: &impl AsRawFd) -> io::Result<()> {
    set_int_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 1)
}

/// One received buffer: where it is in the batch buffer, who sent it, and the size
/// of the datagrams it holds when the kernel coalesced several (`UDP_GRO`), else 0.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Where the buffer starts in the batch buffer (a multiple of the slot size).
    pub offset: usize,
    /// Bytes received (cut to the slot).
    pub len: usize,
    /// The sender.
    pub from: std::net::SocketAddr,
    /// `UDP_GRO` segment size, or 0.
    pub segment: usize,
    /// What the control messages said.
    pub meta: RecvMeta,
}

/// Most buffers one [`recv_batch`] takes.
pub const RECV_MAX: usize = 64;
const CONTROL_LEN: usize = RECV_CONTROL_LEN + 32;

/// The `recvmmsg` headers, addresses and control buffers of a receiver, allocated
/// once and reused: a call only rewrites the fields the kernel reads, instead of
/// zeroing some 6 KB of headers every time (which showed in profiles of the
/// ping-pong and of the sender's ACK receives).
pub struct RecvScratch {
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
    pub fn new(n: usize) -> RecvScratch {
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
pub fn recv_batch(
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
pub fn recv_batch_wait(
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
pub struct Outgoing {
    /// The destination.
    pub dst: std::net::SocketAddr,
    /// The first buffer of the batch this message sends.
    pub first: usize,
    /// How many buffers (datagrams) it sends.
    pub count: usize,
    /// `UDP_SEGMENT` size, or 0 for one datagram.
    pub segment: u16,
    /// Bytes of the first buffer.
    pub first_len: usize,
    /// Bytes of the last buffer.
    pub last_len: usize,
    /// Bytes of all.
    pub bytes: usize,
}

/// The `sendmmsg` headers, iovecs, addresses and control buffers of a sender,
/// reused from call to call (no allocation per batch).
#[derive(Default)]
pub struct SendScratch {
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
pub fn send_batch<'b>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{enable_recv_meta, send_with_meta, IpMeta};

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
