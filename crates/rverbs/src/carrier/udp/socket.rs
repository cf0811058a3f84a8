//! The UDP carrier's sockets: the device's own (one per address, bound to
//! `address:4791`), its multicast groups', and how each receive sizes its batch.

use super::ROCE_PORT;
use crate::error::{Error, Result};
use crate::sys;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Bytes per received buffer: a whole UDP payload, which holds the largest RoCE v2
/// packet and a coalesced (`UDP_GRO`) train of them; anything longer arrives cut and
/// fails its ICRC.
pub(crate) const RX_SLOT: usize = 65536;
/// Buffers one `recvmmsg` takes.
pub(crate) const RX_BATCH: usize = 16;

/// Longest one sleep in `recvmmsg` (the sleeping receive) lasts: the device sockets'
/// receive timeout (500 µs).
pub(crate) const SLEEP_RECV_NS: u64 = 500_000;

/// How many buffers a non-sleeping receive asks one socket for. With more buffers
/// than datagrams waiting, `recvmmsg` makes another pass through the socket before it
/// returns (0.2-0.4 µs), and sets up every header first: a ping-pong asks for one.
/// The count doubles while full receives follow each other back to back (a stream),
/// up to [`RX_BATCH`], and falls to what came when fewer came.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PollBatch {
    want: usize,
    /// The last receive filled all `want` buffers: if the next one finds datagrams
    /// too, they are a stream.
    full: bool,
}

impl Default for PollBatch {
    fn default() -> Self {
        PollBatch {
            want: 1,
            full: false,
        }
    }
}

impl PollBatch {
    /// Buffers to ask for.
    pub(crate) fn want(&self) -> usize {
        self.want.clamp(1, RX_BATCH)
    }

    /// Learns from a receive that asked for `want()` buffers and got `n`.
    pub(crate) fn got(&mut self, n: usize) {
        let want = self.want();
        if n == 0 {
            self.full = false;
        } else if n >= want {
            if std::mem::replace(&mut self.full, true) {
                self.want = (want * 2).min(RX_BATCH);
            }
        } else {
            self.want = n;
            self.full = false;
        }
    }

    /// One non-blocking receive of up to `want()` datagrams from `sock` into `buf`
    /// (slots of [`RX_SLOT`] bytes), learning from what came: `None` when the socket
    /// had nothing (or failed). An empty socket ends a stream too: datagrams that
    /// arrive one per poll are a ping-pong, whatever the polls found in between.
    pub(crate) fn recv(
        &mut self,
        sock: &Socket,
        buf: &mut [u8],
        list: &mut Vec<sys::Received>,
        hdrs: &mut sys::RecvScratch,
    ) -> Option<usize> {
        list.clear();
        let want = self.want();
        match sys::recv_batch(sock, &mut buf[..want * RX_SLOT], RX_SLOT, list, hdrs) {
            Ok(n) => {
                self.got(n);
                Some(n)
            }
            Err(_) => {
                self.got(0);
                None
            }
        }
    }
}

/// A device socket bound to `addr:4791`.
pub(crate) fn udp_socket(addr: IpAddr) -> std::io::Result<Socket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
        sys::set_udp_no_check6_rx(&s)?;
    } else {
        sys::set_pmtudisc_do(&s)?;
    }
    let _ = s.set_recv_buffer_size(4 << 20);
    // Batched senders (sendmmsg, UDP_SEGMENT trains) can outrun a receiver that is
    // not scheduled for a moment: a long READ response is thousands of packets at
    // once. Room for 256 MiB (allocated only as used) when the process may raise the
    // limit.
    let _ = sys::force_recv_buffer(&s, 256 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.bind(&SockAddr::from(SocketAddr::new(addr, ROCE_PORT)))?;
    // Blocking, with a receive timeout: every call passes MSG_DONTWAIT except the
    // sleeping receive, which the timeout bounds.
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(std::time::Duration::from_nanos(SLEEP_RECV_NS)))?;
    // Bound to one address, so the destination is known without IP_PKTINFO. The
    // TTL / TOS control messages are asked for only while something reads them
    // (`Udp::recv_meta_user`).
    Ok(s)
}

/// Binds a free loopback address 127.0.0.x:4791 (x in 2..=254), so that any number of
/// processes on one machine each get their own RoCE address with no setup and no root.
pub(crate) fn loopback_socket() -> Result<(IpAddr, Socket)> {
    let start = (std::process::id() % 253) as u8;
    let mut last = None;
    for i in 0..253u8 {
        let x = 2 + (start.wrapping_add(i) % 253);
        let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, x));
        match udp_socket(addr) {
            // (`UDP_GRO` is set by `Udp::open`, as on the IPv6 socket.)
            Ok(s) => return Ok((addr, s)),
            Err(e) => last = Some(e),
        }
    }
    Err(Error::io(
        "binding a free 127.0.0.x:4791 (all 253 loopback addresses are taken)",
        last.unwrap_or_else(|| std::io::Error::other("no address")),
    ))
}

/// Binds the first IPv6 address of `addrs` (lo's) whose port 4791 is free: `::1` only
/// when `localhost` is set, after the others.
pub(crate) fn loopback_v6_socket(addrs: &[IpAddr], localhost: bool) -> Option<(IpAddr, Socket)> {
    let lo6 = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    addrs
        .iter()
        .filter(|a| a.is_ipv6() && **a != lo6)
        .chain(localhost.then_some(&lo6))
        .find_map(|&a| udp_socket(a).ok().map(|s| (a, s)))
}

/// `a` with the interface `ifindex` as its scope when it is an IPv6 multicast address
/// of interface-local or link-local scope (RFC 4291 2.7: scop 1 or 2, such as ff02::
/// and the ff12:: of IB-style MGIDs): Linux binds and sends to those only with a scope
/// id (`__ipv6_addr_needs_scope_id`), and a bind without one fails with EINVAL.
pub(crate) fn scoped(a: SocketAddr, ifindex: u32) -> SocketAddr {
    match a {
        SocketAddr::V6(v6)
            if v6.ip().is_multicast() && (1..=2).contains(&(v6.ip().octets()[1] & 0x0f)) =>
        {
            std::net::SocketAddrV6::new(*v6.ip(), v6.port(), 0, ifindex).into()
        }
        _ => a,
    }
}

/// A socket bound to multicast `group:4791` that joined the group on interface
/// `ifindex` (by the first IPv4 address of `local` for IPv4), `SO_REUSEADDR` so
/// every process of the host that joins gets its own copy (`mcast.rs`).
pub(crate) fn group_socket(
    group: IpAddr,
    ifindex: u32,
    local: &[IpAddr],
) -> std::io::Result<Socket> {
    let v6 = group.is_ipv6();
    let s = Socket::new(
        if v6 { Domain::IPV6 } else { Domain::IPV4 },
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    s.set_reuse_address(true)?;
    if v6 {
        s.set_only_v6(true)?;
        sys::set_udp_no_check6_rx(&s)?;
    }
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&SockAddr::from(scoped(
        SocketAddr::new(group, ROCE_PORT),
        ifindex,
    )))?;
    match group {
        IpAddr::V4(g) => {
            let ifaddr = local
                .iter()
                .find_map(|a| match a {
                    IpAddr::V4(v4) if !v4.is_multicast() => Some(*v4),
                    _ => None,
                })
                .ok_or_else(|| std::io::Error::other("the device has no IPv4 address"))?;
            s.join_multicast_v4(&g, &ifaddr)?;
        }
        IpAddr::V6(g) => s.join_multicast_v6(&g, ifindex)?,
    }
    s.set_nonblocking(true)?;
    sys::enable_recv_meta(&s, v6, false)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_batch_follows_the_traffic() {
        let mut pb = PollBatch::default();
        for _ in 0..10 {
            assert_eq!(pb.want(), 1);
            pb.got(1);
            pb.got(0);
        }
        assert_eq!(pb.want(), 1);
        pb.got(1);
        assert_eq!(pb.want(), 1, "one full receive is not yet a stream");
        let mut doublings = 0;
        while pb.want() < RX_BATCH {
            let w = pb.want();
            pb.got(w);
            assert_eq!(pb.want(), 2 * w);
            doublings += 1;
        }
        assert_eq!(doublings, RX_BATCH.trailing_zeros());
        pb.got(RX_BATCH);
        assert_eq!(pb.want(), RX_BATCH);
        pb.got(5);
        assert_eq!(pb.want(), 5);
        pb.got(0);
        assert_eq!(pb.want(), 5);
    }

    /// Through real receives on a loopback socket: a ping-pong whose polls find the
    /// socket empty between datagrams keeps asking for one buffer (an empty receive
    /// ends the stream; it once did not, and every third datagram of a ping-pong went
    /// through a two-buffer `recvmmsg` and its second, empty pass); datagrams queued
    /// back to back double the batch.
    #[test]
    fn poll_batch_recv_sees_empty_sockets() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let sock = socket2::Socket::from(rx);
        sock.set_nonblocking(true).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut buf = vec![0u8; RX_BATCH * RX_SLOT];
        let mut list = Vec::new();
        let mut hdrs = sys::RecvScratch::new(RX_BATCH);
        let mut pb = PollBatch::default();
        for i in 0..10u8 {
            tx.send_to(&[i; 24], to).unwrap();
            // Loopback delivers within the send call.
            assert_eq!(pb.recv(&sock, &mut buf, &mut list, &mut hdrs), Some(1));
            assert_eq!(list.len(), 1);
            assert_eq!(&buf[list[0].offset..][..list[0].len], &[i; 24]);
            assert_eq!(pb.recv(&sock, &mut buf, &mut list, &mut hdrs), None);
            assert!(list.is_empty());
            assert_eq!(pb.want(), 1, "round {i}");
        }
        // A backlog: full receives back to back.
        for i in 0..8u8 {
            tx.send_to(&[i; 24], to).unwrap();
        }
        let mut wants = Vec::new();
        while let Some(n) = pb.recv(&sock, &mut buf, &mut list, &mut hdrs) {
            wants.push((n, pb.want()));
        }
        assert_eq!(wants, [(1, 1), (1, 2), (2, 4), (4, 8)]);
    }
}
