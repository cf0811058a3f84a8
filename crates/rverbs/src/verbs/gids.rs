//! The GID table verbs of a [`Context`] (`ibv_query_gid`, `ibv_query_gid_ex`,
//! `ibv_query_gid_table`), over the device's table (`crate::gid`).

use super::Context;
use crate::gid::{table_with_capacity, GidEntry, GidTable, GidType};
use rverbs_wire::grh::Gid;

impl Context {
    fn gid_table(&self) -> std::sync::MutexGuard<'_, GidTable> {
        self.dev().gid_table()
    }

    /// `ibv_query_gid`: the GID at `index` of port `port` (all zero for an empty slot).
    /// A bad port or an index beyond the table fails with EINVAL.
    pub fn query_gid(&self, port: u8, index: u32) -> crate::Result<Gid> {
        self.gid_table().query(port.into(), index)
    }

    /// `ibv_query_gid_ex`: the entry at `index` of port `port`, with its type and
    /// interface. `flags` must be 0 (EINVAL otherwise); a bad port or an index beyond
    /// the table → EINVAL; an empty slot → ENODATA.
    pub fn query_gid_ex(&self, port: u32, index: u32, flags: u32) -> crate::Result<GidEntry> {
        self.gid_table().query_ex(port, index, flags)
    }

    /// `ibv_query_gid_table`: every valid entry of every port (the soft device has one
    /// port). `max_entries` smaller than the number of valid entries → EINVAL.
    pub fn query_gid_table(&self, max_entries: usize) -> crate::Result<Vec<GidEntry>> {
        table_with_capacity(self.gid_table().entries(), max_entries)
    }

    /// The number of slots in the port's GID table (`ibv_port_attr.gid_tbl_len`).
    pub fn gid_table_len(&self) -> usize {
        self.gid_table().len()
    }

    /// The index of the valid entry equal to `gid` of type `ty`, if any.
    pub fn find_gid_index(&self, gid: &Gid, ty: GidType) -> Option<u32> {
        self.gid_table().find(gid, ty)
    }

    /// The port's valid GIDs by index (slots up to the last valid one; empty slots are
    /// zero). Index 0 is the default GID.
    pub fn gids(&self) -> Vec<Gid> {
        let t = self.gid_table();
        let mut out = vec![Gid::ZERO; t.entries().last().map_or(0, |e| e.gid_index as usize + 1)];
        for e in t.entries() {
            out[e.gid_index as usize] = e.gid;
        }
        out
    }

    /// The valid GID at `index`, if any.
    pub fn gid(&self, index: u8) -> Option<Gid> {
        self.gid_table()
            .query_ex(1, index.into(), 0)
            .ok()
            .map(|e| e.gid)
    }

    /// The index of the first RoCE v2 address GID (not the default GID) of the given IP
    /// family (`true` = IPv6).
    pub fn gid_index_for(&self, ipv6: bool) -> Option<u8> {
        // RoCE v2 entries only (a raw-mode table has v1 ones too), past the default GID.
        self.gid_table()
            .entries()
            .iter()
            .filter(|e| e.gid_type == GidType::RoceV2)
            .skip(1)
            .find(|e| e.gid.to_ipv4_mapped().is_none() == ipv6)
            .and_then(|e| u8::try_from(e.gid_index).ok())
    }
}
