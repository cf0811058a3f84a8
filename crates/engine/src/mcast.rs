//! UD multicast groups (`ibv_attach_mcast` / `ibv_detach_mcast`): which QPs receive the
//! datagrams sent to a multicast GID with the multicast QPN 0xFFFFFF (IBTA 10.5.2.4).
//! For RoCE v2 a multicast GID is an IPv6 multicast address or an IPv4-mapped IPv4
//! multicast address (the kernel's `rdma_is_multicast_addr`).

use rverbs_wire::grh::Gid;
use std::collections::HashMap;

/// The destination QPN of every multicast packet (IBTA 10.5.2.4, `IB_MULTICAST_QPN`).
pub const MULTICAST_QPN: u32 = 0xff_ffff;

/// True for a GID that names a multicast group: `ff00::/8`, or `::ffff:224.0.0.0/100`.
pub fn is_multicast_gid(g: &Gid) -> bool {
    g.is_multicast() || g.to_ipv4_mapped().is_some_and(|v4| v4.is_multicast())
}

/// Members of each multicast group, in attach order.
#[derive(Debug, Default, Clone)]
pub(crate) struct McastTable {
    groups: HashMap<Gid, Vec<u32>>,
}

impl McastTable {
    /// Adds `qpn` to the group; false if it was already a member.
    pub(crate) fn attach(&mut self, gid: Gid, qpn: u32) -> bool {
        let m = self.groups.entry(gid).or_default();
        if m.contains(&qpn) {
            return false;
        }
        m.push(qpn);
        true
    }

    /// Removes `qpn` from the group; false if it was not a member.
    pub(crate) fn detach(&mut self, gid: &Gid, qpn: u32) -> bool {
        let Some(m) = self.groups.get_mut(gid) else {
            return false;
        };
        let before = m.len();
        m.retain(|&q| q != qpn);
        let removed = m.len() != before;
        if m.is_empty() {
            self.groups.remove(gid);
        }
        removed
    }

    /// Removes `qpn` from every group (the QP is being destroyed).
    pub(crate) fn detach_all(&mut self, qpn: u32) {
        self.groups.retain(|_, m| {
            m.retain(|&q| q != qpn);
            !m.is_empty()
        });
    }

    /// The members of a group.
    pub(crate) fn members(&self, gid: &Gid) -> &[u32] {
        self.groups.get(gid).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups() {
        let g: Gid = "ff0e::1".parse::<std::net::Ipv6Addr>().unwrap().into();
        let g4 = Gid::from(std::net::Ipv4Addr::new(239, 1, 2, 3));
        assert!(is_multicast_gid(&g) && is_multicast_gid(&g4));
        assert!(!is_multicast_gid(&Gid::from(std::net::Ipv4Addr::new(
            10, 0, 0, 1
        ))));
        let mut t = McastTable::default();
        assert!(t.attach(g, 5) && t.attach(g, 6) && !t.attach(g, 5) && t.attach(g4, 5));
        assert_eq!(t.members(&g), [5, 6]);
        assert!(t.detach(&g, 6) && !t.detach(&g, 6) && !t.detach(&g4, 9));
        t.detach_all(5);
        assert!(t.members(&g).is_empty() && t.members(&g4).is_empty());
    }
}
