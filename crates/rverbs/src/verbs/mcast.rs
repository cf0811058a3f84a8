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

use crate::{Qp, Result};
use rverbs_wire::grh::Gid;

/// The multicast QPN: UD sends to a group go to this QPN (IBTA 10.5.2.4).
pub const MULTICAST_QPN: u32 = rverbs_engine::mcast::MULTICAST_QPN;

impl Qp {
    /// `ibv_attach_mcast`: this UD QP receives the datagrams sent to the multicast group
    /// `gid` (an IPv6 multicast or IPv4-mapped IPv4 multicast GID). `lid` is ignored
    /// (RoCE). EINVAL for another QP type or a non-multicast GID; attaching again to a
    /// group the QP is in succeeds and changes nothing (uverbs, rxe); joining the IP
    /// group may fail with the socket's errno.
    pub fn attach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        self.dev.attach_mcast(gid)
    }

    /// `ibv_detach_mcast`; EINVAL when the QP is not attached to the group.
    pub fn detach_mcast(&self, gid: &Gid, _lid: u16) -> Result<()> {
        self.dev.detach_mcast(gid)
    }
}
