//! GID tables with GID types (`ibv_query_gid_ex`, `ibv_query_gid_table`), built and kept
//! current the way the kernel's `drivers/infiniband/core/roce_gid_mgmt.c` builds them for
//! a RoCE v2-only device such as rxe.
//!
//! **Layout.** Index 0 holds the default GID, fe80::EUI-64 of the interface MAC (a
//! stable substitute on interfaces without a MAC, see [`DeviceInfo::default_gid`]). Then
//! one entry per IPv4 address (`::ffff:a.b.c.d`) in the order the interface lists them,
//! then one per IPv6 address, each in the first free slot — the order in which
//! roce_gid_mgmt's `enum_netdev_ipv4_ips` / `enum_netdev_ipv6_ips` add them when the
//! device is registered. Every entry is RoCE v2 on a UDP-only context (rxe has no RoCE
//! v1 entries either, `rxe-peer/reference/gid-table.txt`). A raw-mode context with
//! CAP_NET_RAW also sends EtherType 0x8915 frames, and its table holds each GID twice,
//! a RoCE v1 entry then a RoCE v2 one, as mlx4/mlx5 tables do ([`GidTable::with_types`]). An
//! address equal to a GID already in the table (the EUI-64 link-local address is the
//! default GID) is not added twice. IPv6 link-local addresses other than that are left
//! out: a RoCE v2 source needs a socket bound to it, which a link-local address only
//! gets with a scope this device does not track.
//!
//! **Changes while open.** [`GidTable::update`] applies the interface's current
//! addresses: a new address takes the first free slot (indices of other entries never
//! move); a removed address's entry stops being valid at once (queries return
//! `ENODATA`, new AHs and QP transitions may not use it), but if an AH or a QP still
//! uses its index the slot stays *pending delete* — the engine keeps its GID so those
//! objects keep their source address — and is freed for reuse only once nothing uses it
//! (checked again on every update). If the address comes back meanwhile it takes a free
//! slot like a new one. This is the kernel's rule too: `core/cache.c` marks an entry in
//! use `GID_TABLE_ENTRY_PENDING_DEL`, frees a RoCE slot on its last put, and `find_gid`
//! allocates only free slots.
//!
//! [`DeviceInfo::default_gid`]: crate::DeviceInfo::default_gid

use rverbs_engine::{Errno, VerbError};
use rverbs_wire::grh::Gid;
use std::fmt;
use std::net::IpAddr;

/// Slots in a port's GID table: 1024, as rxe (`rxe-peer/reference/gid-table.txt`).
pub const GID_TABLE_LEN: usize = 1024;

/// The type of a GID table entry (`enum ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GidType {
    /// InfiniBand (`IBV_GID_TYPE_IB`, 0).
    Ib = 0,
    /// RoCE v1: IB transport over Ethernet, ethertype 0x8915 (`IBV_GID_TYPE_ROCE_V1`, 1).
    RoceV1 = 1,
    /// RoCE v2: IB transport over UDP/IP (`IBV_GID_TYPE_ROCE_V2`, 2).
    RoceV2 = 2,
}

impl GidType {
    /// A short name: `IB`, `v1`, `v2` (`show_gids` prints `v1` for IB entries, whose
    /// sysfs type text is "IB/RoCE v1").
    pub fn short_name(self) -> &'static str {
        match self {
            GidType::Ib => "IB",
            GidType::RoceV1 => "v1",
            GidType::RoceV2 => "v2",
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GidType::Ib => "IB",
            GidType::RoceV1 => "RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        })
    }
}

/// One valid GID table entry (`struct ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the port's table.
    pub gid_index: u32,
    /// The port (1-based).
    pub port_num: u32,
    /// Its type.
    pub gid_type: GidType,
    /// Interface index of the network device the GID belongs to (0 = none).
    pub ndev_ifindex: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Empty,
    Valid(Gid, GidType),
    /// The address went away while an AH or QP used the index.
    PendingDelete(Gid, GidType),
}

/// One port's GID table (see the module documentation for the rules). Its `Debug`
/// shows the occupied slots only (valid and pending-delete ones, with their indices),
/// not the empty rest of the 1,024.
#[derive(Clone)]
pub struct GidTable {
    slots: Vec<Slot>,
    port_num: u32,
    ifindex: u32,
    /// The entry types each address gets, in index order: `[RoceV2]`, or
    /// `[RoceV1, RoceV2]` on a raw-mode device.
    types: &'static [GidType],
}

impl fmt::Debug for GidTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Occupied<'a>(&'a [Slot]);
        impl fmt::Debug for Occupied<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut m = f.debug_map();
                for (i, s) in self.0.iter().enumerate() {
                    match s {
                        Slot::Empty => {}
                        Slot::Valid(g, ty) => {
                            m.entry(&i, &format_args!("{g} {ty}"));
                        }
                        Slot::PendingDelete(g, ty) => {
                            m.entry(&i, &format_args!("{g} {ty} (pending delete)"));
                        }
                    }
                }
                m.finish()
            }
        }
        f.debug_struct("GidTable")
            .field("port_num", &self.port_num)
            .field("ifindex", &self.ifindex)
            .field("len", &self.slots.len())
            .field("entries", &Occupied(&self.slots))
            .finish()
    }
}

fn err(verb: &'static str, errno: Errno, reason: &'static str) -> crate::Error {
    crate::Error::Verb(VerbError::new(verb, errno, reason))
}

/// True for an IPv6 link-local unicast address (fe80::/10).
fn is_link_local_v6(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

impl GidTable {
    /// A table for port `port_num` of the interface `ifindex`: the default GID, then
    /// `addrs` (IPv4 first, then IPv6, each family in the given order).
    pub fn new(port_num: u32, ifindex: u32, default_gid: Gid, addrs: &[IpAddr]) -> GidTable {
        Self::with_types(port_num, ifindex, default_gid, addrs, false)
    }

    /// A system device's table as its kernel reports it: `(index, gid, type, ndev)`
    /// entries (the netdev of the first one is the table's), the rest empty.
    pub(crate) fn from_entries(
        port_num: u32,
        ifindex: u32,
        entries: impl IntoIterator<Item = (usize, Gid, GidType, u32)>,
    ) -> GidTable {
        let mut slots = vec![Slot::Empty; GID_TABLE_LEN];
        for (i, g, ty, _) in entries {
            if let Some(s) = slots.get_mut(i) {
                *s = Slot::Valid(g, ty);
            }
        }
        GidTable {
            slots,
            port_num,
            ifindex,
            types: &[GidType::RoceV2],
        }
    }

    /// [`GidTable::new`], with a RoCE v1 entry before the RoCE v2 one of every GID when
    /// `roce_v1` (a raw-mode device, which can send EtherType 0x8915 frames). This is
    /// the kernel's layout for a device supporting both types (mlx4/mlx5):
    /// `core/cache.c` reserves one default-GID index per supported type (v1 at 0, v2
    /// at 1) and `roce_gid_mgmt.c` `update_gid` adds each address once per type in
    /// `enum ib_gid_type` order, RoCE v1 (`IB_GID_TYPE_ROCE`) first.
    pub fn with_types(
        port_num: u32,
        ifindex: u32,
        default_gid: Gid,
        addrs: &[IpAddr],
        roce_v1: bool,
    ) -> GidTable {
        let types: &'static [GidType] = if roce_v1 {
            &[GidType::RoceV1, GidType::RoceV2]
        } else {
            &[GidType::RoceV2]
        };
        let mut t = GidTable {
            slots: vec![Slot::Empty; GID_TABLE_LEN],
            port_num,
            ifindex,
            types,
        };
        for (i, ty) in types.iter().enumerate() {
            t.slots[i] = Slot::Valid(default_gid, *ty);
        }
        t.apply(addrs, |_| false, false);
        t
    }

    /// Applies the interface's current addresses (as the interface lists them: IPv4
    /// in order, IPv6 newest first); `in_use(i)` says whether an AH or a QP uses index
    /// `i`. Returns true when the table changed.
    ///
    /// The kernel adds addresses in the order its notifier sees them. A re-scan sees
    /// only the result, so the addresses new since the last one are added IPv4 first in
    /// list order, then IPv6 oldest first (the reverse of the list): the kernel's order
    /// unless the two families were interleaved within one re-scan period.
    pub fn update(&mut self, addrs: &[IpAddr], in_use: impl Fn(usize) -> bool) -> bool {
        self.apply(addrs, in_use, true)
    }

    fn apply(&mut self, addrs: &[IpAddr], in_use: impl Fn(usize) -> bool, live: bool) -> bool {
        let gid = |a: &IpAddr| rverbs_engine::net::ip_to_gid(*a);
        let v4 = addrs.iter().filter(|a| a.is_ipv4());
        let v6: Vec<&IpAddr> = addrs
            .iter()
            .filter(|a| a.is_ipv6() && !is_link_local_v6(a))
            .collect();
        let mut addr_gids: Vec<Gid> = v4.map(gid).collect();
        if live {
            addr_gids.extend(v6.iter().rev().map(|a| gid(a)));
        } else {
            addr_gids.extend(v6.iter().map(|a| gid(a)));
        }
        let wanted: Vec<(Gid, GidType)> = addr_gids
            .iter()
            .flat_map(|g| self.types.iter().map(move |ty| (*g, *ty)))
            .collect();
        let before = self.slots.clone();
        // The default GIDs (one per type) stay for the life of the device.
        for i in self.types.len()..self.slots.len() {
            match self.slots[i] {
                Slot::Valid(g, ty) if !wanted.contains(&(g, ty)) => {
                    self.slots[i] = if in_use(i) {
                        Slot::PendingDelete(g, ty)
                    } else {
                        Slot::Empty
                    };
                }
                Slot::PendingDelete(..) if !in_use(i) => self.slots[i] = Slot::Empty,
                _ => {}
            }
        }
        for (g, ty) in wanted {
            if self.slots.contains(&Slot::Valid(g, ty)) {
                continue;
            }
            // A returning address whose old slot is still pending delete takes a
            // free slot like any new one: the kernel's find_gid (core/cache.c) skips
            // entries that are not valid and allocates only free (NULL) slots, and a
            // RoCE entry pending delete keeps its slot until its last reference goes.
            if let Some(s) = self.slots.iter_mut().find(|s| **s == Slot::Empty) {
                *s = Slot::Valid(g, ty);
            }
            // A full table drops the address, as the kernel's add_gid fails with ENOSPC.
        }
        self.slots != before
    }

    /// The GIDs the engine sends from, by index: valid and pending-delete entries keep
    /// their GID, empty slots are zero. Trailing empty slots are left off.
    pub(crate) fn engine_gids(&self) -> Vec<Gid> {
        let last = self
            .slots
            .iter()
            .rposition(|s| *s != Slot::Empty)
            .map_or(0, |i| i + 1);
        self.slots[..last]
            .iter()
            .map(|s| match s {
                Slot::Valid(g, _) | Slot::PendingDelete(g, _) => *g,
                Slot::Empty => Gid::ZERO,
            })
            .collect()
    }

    /// Which of [`GidTable::engine_gids`] are RoCE v1 entries (same indices; the
    /// engine's `Config::gid_roce_v1`).
    pub(crate) fn engine_gid_roce_v1(&self) -> Vec<bool> {
        let n = self.engine_gids().len();
        self.slots[..n]
            .iter()
            .map(|s| {
                matches!(
                    s,
                    Slot::Valid(_, GidType::RoceV1) | Slot::PendingDelete(_, GidType::RoceV1)
                )
            })
            .collect()
    }

    /// The table's size (valid or not).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Always false: a table has [`GID_TABLE_LEN`] slots.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// `ibv_query_gid_ex` on this table: flags ≠ 0 → EINVAL, `port` not this port or
    /// `index` beyond the table → EINVAL, an empty (or pending-delete) slot → ENODATA.
    pub fn query_ex(&self, port: u32, index: u32, flags: u32) -> crate::Result<GidEntry> {
        const V: &str = "query_gid_ex";
        if flags != 0 {
            return Err(err(V, Errno::Inval, "flags must be 0"));
        }
        if port != self.port_num {
            return Err(err(V, Errno::Inval, "no such port"));
        }
        match self.slots.get(index as usize) {
            None => Err(err(V, Errno::Inval, "index beyond the GID table")),
            Some(Slot::Valid(g, ty)) => Ok(self.entry(index, *g, *ty)),
            Some(_) => Err(err(V, Errno::NoData, "empty GID table entry")),
        }
    }

    /// `ibv_query_gid`: the GID at `index`, zero for an empty slot (as sysfs reads it);
    /// a bad port or an index beyond the table → EINVAL.
    pub fn query(&self, port: u32, index: u32) -> crate::Result<Gid> {
        if port != self.port_num {
            return Err(err("query_gid", Errno::Inval, "no such port"));
        }
        match self.slots.get(index as usize) {
            None => Err(err("query_gid", Errno::Inval, "index beyond the GID table")),
            Some(Slot::Valid(g, _)) => Ok(*g),
            Some(_) => Ok(Gid::ZERO),
        }
    }

    /// Every valid entry, in index order.
    pub fn entries(&self) -> Vec<GidEntry> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Slot::Valid(g, ty) => Some(self.entry(i as u32, *g, *ty)),
                _ => None,
            })
            .collect()
    }

    /// True when `index` holds a valid entry (new AHs and QPs may use it).
    pub fn is_valid(&self, index: usize) -> bool {
        matches!(self.slots.get(index), Some(Slot::Valid(..)))
    }

    /// The index of the valid entry equal to `gid` of type `ty` (`ibv_find_gid_index`).
    pub fn find(&self, gid: &Gid, ty: GidType) -> Option<u32> {
        self.slots
            .iter()
            .position(|s| *s == Slot::Valid(*gid, ty))
            .map(|i| i as u32)
    }

    /// The type of the entry at `index` (valid or pending delete).
    pub fn gid_type(&self, index: usize) -> Option<GidType> {
        match self.slots.get(index) {
            Some(Slot::Valid(_, ty) | Slot::PendingDelete(_, ty)) => Some(*ty),
            _ => None,
        }
    }

    fn entry(&self, index: u32, gid: Gid, gid_type: GidType) -> GidEntry {
        GidEntry {
            gid,
            gid_index: index,
            port_num: self.port_num,
            gid_type,
            ndev_ifindex: self.ifindex,
        }
    }
}

/// `ibv_query_gid_table`'s rule: every valid entry of every port, or EINVAL when
/// `capacity` is too small for them.
pub fn table_with_capacity(
    entries: Vec<GidEntry>,
    capacity: usize,
) -> crate::Result<Vec<GidEntry>> {
    if entries.len() > capacity {
        return Err(err(
            "query_gid_table",
            Errno::Inval,
            "max_entries is smaller than the number of valid entries",
        ));
    }
    Ok(entries)
}

impl GidTable {
    /// EINVAL unless `index` holds a valid entry: a new AH or QP path may not use an
    /// empty slot or one whose address went away (see the module documentation).
    pub(crate) fn check_sgid(&self, index: u8, verb: &'static str) -> crate::Result<()> {
        if self.is_valid(index.into()) {
            Ok(())
        } else {
            Err(err(
                verb,
                Errno::Inval,
                "sgid_index is not a valid GID table entry",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn dflt() -> Gid {
        "fe80::5054:ff:fe77:2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .into()
    }

    #[test]
    fn matches_the_kernel_rxe_table() {
        // rxe-peer reference/gid-table.txt: eth0 with 10.77.0.2 and fd00:77::2, plus the
        // link-local fe80::5054:ff:fe77:2 which is the default GID (not added twice).
        let t = GidTable::new(
            1,
            2,
            dflt(),
            &[
                ip("fd00:77::2"),
                ip("fe80::5054:ff:fe77:2"),
                ip("10.77.0.2"),
            ],
        );
        let e = t.entries();
        let shown: Vec<String> = e.iter().map(|e| e.gid.sysfs().to_string()).collect();
        assert_eq!(
            shown,
            [
                "fe80:0000:0000:0000:5054:00ff:fe77:0002",
                "0000:0000:0000:0000:0000:ffff:0a4d:0002",
                "fd00:0077:0000:0000:0000:0000:0000:0002",
            ]
        );
        assert!(e
            .iter()
            .all(|e| e.gid_type == GidType::RoceV2 && e.ndev_ifindex == 2));
        assert_eq!(t.len(), 1024);
    }

    #[test]
    fn query_ex_errors_follow_rdma_core() {
        let t = GidTable::new(1, 2, dflt(), &[ip("10.0.0.1")]);
        assert_eq!(
            t.query_ex(1, 1, 0).unwrap().gid,
            Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1))
        );
        let errno = |r: crate::Result<GidEntry>| r.unwrap_err().errno();
        assert_eq!(errno(t.query_ex(1, 0, 1)), libc::EINVAL);
        assert_eq!(errno(t.query_ex(2, 0, 0)), libc::EINVAL);
        assert_eq!(errno(t.query_ex(0, 0, 0)), libc::EINVAL);
        assert_eq!(errno(t.query_ex(1, 1024, 0)), libc::EINVAL);
        assert_eq!(errno(t.query_ex(1, 2, 0)), libc::ENODATA);
        assert_eq!(errno(t.query_ex(1, 1023, 0)), libc::ENODATA);
        assert_eq!(t.query(1, 5).unwrap(), Gid::ZERO);
        assert_eq!(t.query(1, 1024).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(t.query(3, 0).unwrap_err().errno(), libc::EINVAL);
        let all = t.entries();
        assert_eq!(table_with_capacity(all.clone(), 2).unwrap().len(), 2);
        assert_eq!(
            table_with_capacity(all, 1).unwrap_err().errno(),
            libc::EINVAL
        );
    }

    #[test]
    fn updates_keep_indices_and_hold_entries_in_use() {
        let mut t = GidTable::new(
            1,
            2,
            dflt(),
            &[ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1")],
        );
        let idx =
            |t: &GidTable, a: &str| t.find(&rverbs_engine::net::ip_to_gid(ip(a)), GidType::RoceV2);
        assert_eq!(
            (idx(&t, "10.0.0.1"), idx(&t, "10.0.0.2"), idx(&t, "fd00::1")),
            (Some(1), Some(2), Some(3))
        );
        // 10.0.0.1 goes while index 1 is in use: pending, not reusable, GID kept for the engine.
        assert!(t.update(&[ip("10.0.0.2"), ip("fd00::1"), ip("10.0.0.9")], |i| i == 1));
        assert_eq!(t.query_ex(1, 1, 0).unwrap_err().errno(), libc::ENODATA);
        assert!(!t.is_valid(1));
        assert_eq!(idx(&t, "10.0.0.9"), Some(4), "a pending slot is not reused");
        assert_eq!(
            t.engine_gids()[1],
            rverbs_engine::net::ip_to_gid(ip("10.0.0.1"))
        );
        assert_eq!(idx(&t, "10.0.0.2"), Some(2));
        // Released: the slot empties and the next new address takes it.
        assert!(t.update(&[ip("10.0.0.2"), ip("fd00::1"), ip("10.0.0.9")], |_| false));
        assert_eq!(t.engine_gids()[1], Gid::ZERO);
        assert!(!t.update(&[ip("10.0.0.2"), ip("fd00::1"), ip("10.0.0.9")], |_| false));
        t.update(
            &[ip("10.0.0.2"), ip("fd00::1"), ip("10.0.0.9"), ip("fd00::7")],
            |_| false,
        );
        assert_eq!(idx(&t, "fd00::7"), Some(1));
        // A returning address does not take back its pending slot: it gets the first
        // free one, as in the kernel (core/cache.c find_gid allocates only free slots).
        t.update(&[ip("fd00::1"), ip("10.0.0.9"), ip("fd00::7")], |i| i == 2);
        t.update(
            &[ip("10.0.0.2"), ip("fd00::1"), ip("10.0.0.9"), ip("fd00::7")],
            |i| i == 2,
        );
        assert_eq!(idx(&t, "10.0.0.2"), Some(5));
        assert!(
            !t.is_valid(2),
            "the old slot stays pending delete while in use"
        );
        let g2 = rverbs_engine::net::ip_to_gid(ip("10.0.0.2"));
        assert_eq!((t.engine_gids()[2], t.engine_gids()[5]), (g2, g2));
        // Released: the old slot is freed, the address keeps its new index.
        t.update(
            &[ip("10.0.0.2"), ip("fd00::1"), ip("10.0.0.9"), ip("fd00::7")],
            |_| false,
        );
        assert_eq!(t.engine_gids()[2], Gid::ZERO);
        assert_eq!(idx(&t, "10.0.0.2"), Some(5));
        // The default GID never goes; other types are never found.
        t.update(&[], |_| false);
        assert_eq!(t.entries().len(), 1);
        assert_eq!(t.find(&dflt(), GidType::RoceV1), None);
    }

    #[test]
    fn debug_shows_the_occupied_entries_only() {
        let t = GidTable::new(1, 1, dflt(), &[ip("127.0.0.3"), ip("fd00::1")]);
        let d = format!("{t:?}");
        assert!(d.contains("len: 1024"), "{d}");
        assert!(d.contains("1: ::ffff:127.0.0.3 RoCE v2"), "{d}");
        assert!(d.contains("2: fd00::1 RoCE v2"), "{d}");
        assert!(!d.contains("Empty") && !d.contains("3:"), "{d}");
        assert!(d.len() < 300, "{d}");
    }

    #[test]
    fn a_full_table_drops_further_addresses() {
        let addrs: Vec<IpAddr> = (0..1100u32)
            .map(|i| IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)))
            .collect();
        let t = GidTable::new(1, 2, dflt(), &addrs);
        assert_eq!(t.entries().len(), 1024);
        assert_eq!(t.engine_gids().len(), 1024);
    }

    /// Raw mode: v1 then v2 per GID, default GIDs at 0 and 1 (mlx5's layout); the
    /// engine learns which indices are v1; a removed address frees both entries (or
    /// leaves the used one pending delete, with its type).
    #[test]
    fn raw_mode_has_v1_then_v2_per_gid() {
        let mut t = GidTable::with_types(1, 2, dflt(), &[ip("10.0.0.1"), ip("fd00::1")], true);
        let types: Vec<(u32, GidType)> = t
            .entries()
            .iter()
            .map(|e| (e.gid_index, e.gid_type))
            .collect();
        use GidType::{RoceV1 as V1, RoceV2 as V2};
        assert_eq!(
            types,
            vec![(0, V1), (1, V2), (2, V1), (3, V2), (4, V1), (5, V2)]
        );
        assert_eq!(
            t.find(&Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1)), V1),
            Some(2)
        );
        assert_eq!(
            t.find(&Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1)), V2),
            Some(3)
        );
        assert_eq!(t.find(&dflt(), V1), Some(0));
        assert_eq!(t.find(&dflt(), GidType::Ib), None);
        assert_eq!(
            t.engine_gid_roce_v1(),
            vec![true, false, true, false, true, false]
        );
        assert_eq!(t.gid_type(4), Some(V1));
        assert_eq!(t.gid_type(6), None);
        // 10.0.0.1 goes away while its v1 entry (index 2) is in use.
        assert!(t.update(&[ip("fd00::1")], |i| i == 2));
        assert!(!t.is_valid(2) && !t.is_valid(3));
        assert_eq!(t.gid_type(2), Some(V1), "pending delete keeps its type");
        assert_eq!(t.gid_type(3), None);
        assert!(t.engine_gid_roce_v1()[2]);
        // Back again: it takes free slots, v1 first (3, then 6).
        assert!(t.update(&[ip("10.0.0.1"), ip("fd00::1")], |i| i == 2));
        assert_eq!(
            t.find(&Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1)), V1),
            Some(3)
        );
        assert_eq!(
            t.find(&Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1)), V2),
            Some(6)
        );
        // A v2-only table has no v1 entries at all.
        let t2 = GidTable::new(1, 2, dflt(), &[ip("10.0.0.1")]);
        assert!(t2.engine_gid_roce_v1().iter().all(|v| !v));
        assert_eq!(t2.find(&dflt(), V1), None);
    }
}
