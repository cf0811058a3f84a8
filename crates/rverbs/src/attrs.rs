//! `ibv_query_device` / `ibv_query_port`: the soft device's attributes and limits.

use crate::context::Context;
use crate::error::Result;
use rverbs_engine::{Errno, Mtu, VerbError};

/// Device attributes and limits (`struct ibv_device_attr`, the fields a RoCE soft device
/// fills in). The limits are the ones the device enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string (the crate's version).
    pub fw_ver: String,
    /// Node GUID: the interface ID of the default GID (EUI-64 of the MAC).
    pub node_guid: u64,
    /// System image GUID (the node GUID, as on rxe).
    pub sys_image_guid: u64,
    /// Largest memory region, in bytes.
    pub max_mr_size: u64,
    /// Most QPs.
    pub max_qp: u32,
    /// Most work requests per send or receive queue.
    pub max_qp_wr: u32,
    /// Most SGEs per send work request.
    pub max_send_sge: u32,
    /// Most SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most memory regions.
    pub max_mr: u32,
    /// Outstanding READ/atomic requests per QP as responder.
    pub max_qp_rd_atom: u32,
    /// Outstanding READ/atomic requests per QP as initiator.
    pub max_qp_init_rd_atom: u32,
    /// Most work requests per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ receive.
    pub max_srq_sge: u32,
    /// Bytes of inline data per send work request.
    pub max_inline_data: u32,
    /// Atomic operations are atomic with respect to this device only
    /// (`IBV_ATOMIC_HCA`): local CPU accesses go through [`crate::Mr::with`].
    pub atomic_hca: bool,
    /// Physical ports (1).
    pub phys_port_cnt: u8,
}

/// Port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_DOWN`.
    Down,
    /// `IBV_PORT_ACTIVE`: the device's sockets are bound.
    Active,
}

/// Port attributes (`struct ibv_port_attr`, the fields a RoCE port has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Largest path MTU the port supports.
    pub max_mtu: Mtu,
    /// The active MTU, from the interface MTU as rxe computes it (MTU − 80 rounded
    /// down to an IB size).
    pub active_mtu: Mtu,
    /// GID table entries.
    pub gid_tbl_len: u32,
    /// P_Key table entries.
    pub pkey_tbl_len: u16,
    /// The link layer is Ethernet (RoCE).
    pub link_layer_ethernet: bool,
    /// The interface's MTU in bytes.
    pub netdev_mtu: usize,
}

impl Context {
    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let e = self.shared().lock_verb("query_device")?;
        let cfg = e.config();
        let l = &cfg.limits;
        let guid = cfg.gids.first().map_or(0, |g| g.interface_id());
        Ok(DeviceAttr {
            fw_ver: env!("CARGO_PKG_VERSION").to_string(),
            node_guid: guid,
            sys_image_guid: guid,
            // Regions are heap buffers; the engine's offsets are usize.
            max_mr_size: isize::MAX as u64,
            max_qp: cfg.max_qp,
            max_qp_wr: l.max_qp_wr,
            max_send_sge: l.max_send_sge,
            max_recv_sge: l.max_recv_sge,
            max_cqe: cfg.max_cqe,
            max_mr: rverbs_engine::MAX_MR - 1,
            max_qp_rd_atom: l.max_qp_rd_atom,
            max_qp_init_rd_atom: l.max_qp_init_rd_atom,
            // create_srq checks against these two.
            max_srq_wr: l.max_qp_wr,
            max_srq_sge: l.max_recv_sge,
            max_inline_data: l.max_inline_data,
            atomic_hca: true,
            phys_port_cnt: 1,
        })
    }

    /// `ibv_query_port` of port `port` (this device has port 1 only; others are EINVAL).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(VerbError::new("query_port", Errno::Inval, "no such port").into());
        }
        let e = self.shared().lock_verb("query_port")?;
        let cfg = e.config();
        Ok(PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::M4096,
            active_mtu: cfg.limits.active_mtu,
            gid_tbl_len: cfg.gids.len() as u32,
            pkey_tbl_len: cfg.limits.pkey_table_len,
            link_layer_ethernet: true,
            netdev_mtu: self.device().netdev_mtu,
        })
    }
}
