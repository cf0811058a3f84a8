//! The structures of libibverbs' public ABI, laid out as the installed
//! `<infiniband/verbs.h>` (rdma-core 44) lays them out, field for field.
//!
//! Names are the C names, so a reader can hold this file next to the header and
//! `tests/layout.rs` can compare each type and field with what gcc computes. C enums
//! are `u32` aliases (`consts`), never Rust enums: a C caller may store any value in
//! them. Where C has an anonymous union, the Rust field is named after its role
//! (`imm`, `ext`, `spec`) and the test maps it back to the C path. Types that programs
//! only ever hold through a pointer and that this layer does not build yet
//! (`verbs_ex_private`, `_compat_ibv_port_attr`, `ibv_flow_action_esp_attr`) are
//! opaque.
//!
//! rdma-core's `verbs_device` lives in the provider header (`driver.h`), not in the
//! public one: a program never sees past `ibv_device`, so it has no public part here.

#![allow(non_camel_case_types)]

mod context;
mod queues;
mod rdmacm;
mod requests;

pub use context::*;
pub use queues::*;
pub use rdmacm::*;
pub use requests::*;

use core::ffi::{c_char, c_int, c_uint, c_void};
use libc::{pthread_cond_t, pthread_mutex_t, timespec};

/// `__be32` / `__be64`: big-endian on the wire and in memory; the type only documents it.
pub type __be16 = u16;
/// See [`__be16`].
pub type __be32 = u32;
/// See [`__be16`].
pub type __be64 = u64;

/// `enum ibv_gid_type` (values in `consts`).
pub type ibv_gid_type = u32;
/// `enum ibv_node_type`; `IBV_NODE_UNKNOWN` is -1, so this one is signed.
pub type ibv_node_type = i32;
/// `enum ibv_transport_type`; `IBV_TRANSPORT_UNKNOWN` is -1.
pub type ibv_transport_type = i32;
/// `enum ibv_atomic_cap`.
pub type ibv_atomic_cap = u32;
/// `enum ibv_mtu`.
pub type ibv_mtu = u32;
/// `enum ibv_port_state`.
pub type ibv_port_state = u32;
/// `enum ibv_event_type`.
pub type ibv_event_type = u32;
/// `enum ibv_wc_status`.
pub type ibv_wc_status = u32;
/// `enum ibv_wc_opcode`.
pub type ibv_wc_opcode = u32;
/// `enum ibv_mw_type`.
pub type ibv_mw_type = u32;
/// `enum ibv_srq_type`.
pub type ibv_srq_type = u32;
/// `enum ibv_wq_type`.
pub type ibv_wq_type = u32;
/// `enum ibv_wq_state`.
pub type ibv_wq_state = u32;
/// `enum ibv_qp_type`.
pub type ibv_qp_type = u32;
/// `enum ibv_qp_state`.
pub type ibv_qp_state = u32;
/// `enum ibv_mig_state`.
pub type ibv_mig_state = u32;
/// `enum ibv_wr_opcode`.
pub type ibv_wr_opcode = u32;
/// `enum ibv_ops_wr_opcode`.
pub type ibv_ops_wr_opcode = u32;
/// `enum ibv_flow_attr_type`.
pub type ibv_flow_attr_type = u32;
/// `enum ibv_flow_spec_type`.
pub type ibv_flow_spec_type = u32;
/// `enum ibv_advise_mr_advice`.
pub type ibv_advise_mr_advice = u32;
/// `enum ibv_counter_description`.
pub type ibv_counter_description = u32;

/// Declares types that only travel behind pointers here.
macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident;)*) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _opaque: [u8; 0],
        }
    )*};
}

opaque! {
    /// Private to the library (behind `verbs_context.priv`).
    verbs_ex_private;
    /// The port attributes of the 1.0 ABI, reached only through `_compat_query_port`.
    _compat_ibv_port_attr;
    /// IPsec ESP flow action attributes (`ibv_create_flow_action_esp`).
    ibv_flow_action_esp_attr;
}

// ---- GIDs and addresses ------------------------------------------------------------

/// The two 64-bit halves of a GID.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid_global {
    pub subnet_prefix: __be64,
    pub interface_id: __be64,
}

/// `union ibv_gid`: 16 bytes, 8-byte aligned through `global`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    pub raw: [u8; 16],
    pub global: ibv_gid_global,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// The 40-byte header in front of a UD receive buffer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_grh {
    pub version_tclass_flow: __be32,
    pub paylen: __be16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

// ---- device and port attributes ----------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: __be64,
    pub sys_image_guid: __be64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: ibv_atomic_cap,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_odp_per_transport_caps {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ibv_odp_per_transport_caps,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `ibv_query_device_ex` fills as much of this as the caller's `attr_size` covers.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: ibv_tso_caps,
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    pub raw_packet_caps: u32,
    pub tm_caps: ibv_tm_caps,
    pub cq_mod_caps: ibv_cq_moderation_caps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// The 1.1 port attributes; `ibv_query_port` is a macro that passes `sizeof` of this.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_port_attr {
    pub state: ibv_port_state,
    pub max_mtu: ibv_mtu,
    pub active_mtu: ibv_mtu,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}
