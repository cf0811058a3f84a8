//! UD multicast on IP multicast groups (`ibv_attach_mcast` / `ibv_detach_mcast`).
//!
//! A multicast GID is an IPv6 multicast address or an IPv4-mapped IPv4 multicast address
//! (`rdma_is_multicast_addr`). Attaching the first QP of a context to a group opens a
//! socket bound to `group:4791` (`SO_REUSEADDR`, so every process on the host that
//! attaches gets its own copy of each datagram) and joins the group on the device's
//! interface (`IP_ADD_MEMBERSHIP` by the device's IPv4 address, `IPV6_JOIN_GROUP` by its
//! interface index). The engine hands each datagram sent to the group with QPN
//! 0xFFFFFF to every attached QP (IBTA 10.5.2.4). Sending to a group is an ordinary UD
//! send through an AH whose `dgid` is the group, to QPN 0xFFFFFF; the kernel sends it
//! out of the interface that owns the source address. A context leaves a group when
//! its last QP detaches (at once) or is destroyed (at the next address re-scan, about a
//! second later).

use crate::context::{Shared, ROCE_PORT};
use crate::{sys, Error, Qp, Result};
use rverbs_engine::net::gid_to_ip;
use rverbs_wire::grh::Gid;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The multicast QPN: UD sends to a group go to this QPN (IBTA 10.5.2.4).
pub const MULTICAST_QPN: u32 = rverbs_engine::mcast::MULTICAST_QPN;

fn group_socket(group: IpAddr, shared: &Shared, local: &[IpAddr]) -> std::io::Result<Socket> {
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
        shared.info.ifindex,
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
        IpAddr::V6(g) => s.join_multicast_v6(&g, shared.info.ifindex)?,
    }
    s.set_nonblocking(true)?;
    sys::enable_recv_meta(&s, v6, false)?;
    shared.quiet_socket(&s)?;
    Ok(s)
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

/// Closes the group sockets no QP of the context is attached to any more.
pub(crate) fn prune_groups(shared: &Shared) {
    let engine = shared.lock();
    let mut socks = shared.sockets();
    let before = socks.len();
    socks.retain(|(a, _)| {
        !a.is_multicast() || engine.mcast_has_members(&rverbs_engine::net::ip_to_gid(*a))
    });
    if socks.len() != before {
        shared
            .sockets_changed
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

impl Qp {
    /// `ibv_attach_mcast`: this UD QP receives the datagrams sent to the multicast group
    /// `gid` (an IPv6 multicast or IPv4-mapped IPv4 multicast GID). `lid` is ignored
    /// (RoCE). EINVAL for another QP type or a non-multicast GID; attaching again to a
    /// group the QP is in succeeds and changes nothing (uverbs, rxe); joining the IP
    /// group may fail with the socket's errno.
    pub fn attach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        let shared = self.context().shared().clone();
        shared.lock().attach_mcast(self.qp_num(), *gid)?;
        let group = gid_to_ip(*gid);
        let joined = {
            let mut socks = shared.sockets();
            if socks.iter().any(|(a, _)| *a == group) {
                Ok(())
            } else {
                let local: Vec<IpAddr> = socks.iter().map(|(a, _)| *a).collect();
                match group_socket(group, &shared, &local) {
                    Ok(s) => {
                        socks.push((group, Arc::new(s)));
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        if let Err(e) = joined {
            let _ = shared.lock().detach_mcast(self.qp_num(), gid);
            return Err(Error::io("joining the IP multicast group", e));
        }
        shared
            .sockets_changed
            .store(true, std::sync::atomic::Ordering::Release);
        shared.wake();
        Ok(())
    }

    /// `ibv_detach_mcast`; EINVAL when the QP is not attached to the group.
    pub fn detach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        let shared = self.context().shared().clone();
        shared.lock().detach_mcast(self.qp_num(), gid)?;
        prune_groups(&shared);
        shared.wake();
        Ok(())
    }
}
