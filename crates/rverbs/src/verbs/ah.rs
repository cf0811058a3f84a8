//! Address handles ([`Ah`], [`AhAttrs`]).

use super::*;
use rverbs_engine::{AddressVector, AhId};
use rverbs_wire::grh::Gid;
use std::sync::Arc;

/// Address-handle attributes.
#[derive(Debug, Clone, Copy)]
pub struct AhAttrs {
    /// Destination GID.
    pub dgid: Gid,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
}

impl AhAttrs {
    /// Towards `dgid` from the source GID at `sgid_index`, with hop limit 64, traffic
    /// class 0 and flow label 0.
    pub fn to(dgid: Gid, sgid_index: u8) -> Self {
        AhAttrs {
            dgid,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    pub(crate) fn av(&self) -> AddressVector {
        AddressVector {
            dgid: self.dgid,
            sgid_index: self.sgid_index,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
        }
    }
}

/// An address handle (`struct ibv_ah`).
pub struct Ah {
    pub(crate) pd: Arc<PdInner>,
    pub(crate) id: AhId,
}

impl Drop for Ah {
    fn drop(&mut self) {
        let id = self.id;
        self.pd.ctx.shared().destroy(move |_, e| {
            let _ = e.destroy_ah(id);
        });
    }
}
