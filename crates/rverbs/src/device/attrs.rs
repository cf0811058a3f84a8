//! `ibv_query_device` / `ibv_query_port`: the soft device's attributes and limits.

use crate::device::DeviceInfo;
use rverbs_engine::{Config, Counters, Mtu};

/// `IBV_DEVICE_BAD_PKEY_CNTR`: the port counts packets dropped for a bad P_Key.
pub const DEVICE_BAD_PKEY_CNTR: u32 = 1 << 1;
/// `IBV_DEVICE_BAD_QKEY_CNTR`: the port counts UD packets dropped for a bad Q_Key.
pub const DEVICE_BAD_QKEY_CNTR: u32 = 1 << 2;
/// `IBV_DEVICE_SYS_IMAGE_GUID`: `sys_image_guid` is valid.
pub const DEVICE_SYS_IMAGE_GUID: u32 = 1 << 11;
/// `IBV_DEVICE_MEM_WINDOW`: memory windows (type 1), as rxe advertises.
pub const DEVICE_MEM_WINDOW: u32 = 1 << 17;
/// `IBV_DEVICE_MEM_WINDOW_TYPE_2B`: type-2B windows (bound by work request to a QP).
pub const DEVICE_MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
/// `IBV_DEVICE_RC_RNR_NAK_GEN`: an RC responder without a receive WQE sends RNR NAK.
pub const DEVICE_RC_RNR_NAK_GEN: u32 = 1 << 12;

/// The names `ibv_devinfo -v` prints for `device_cap_flags` bits (verbs.h order).
pub const DEVICE_CAP_NAMES: &[(u32, &str)] = &[
    (1 << 0, "RESIZE_MAX_WR"),
    (1 << 1, "BAD_PKEY_CNTR"),
    (1 << 2, "BAD_QKEY_CNTR"),
    (1 << 3, "RAW_MULTI"),
    (1 << 4, "AUTO_PATH_MIG"),
    (1 << 5, "CHANGE_PHY_PORT"),
    (1 << 6, "UD_AV_PORT_ENFORCE"),
    (1 << 7, "CURR_QP_STATE_MOD"),
    (1 << 8, "SHUTDOWN_PORT"),
    (1 << 9, "INIT_TYPE"),
    (1 << 10, "PORT_ACTIVE_EVENT"),
    (1 << 11, "SYS_IMAGE_GUID"),
    (1 << 12, "RC_RNR_NAK_GEN"),
    (1 << 13, "SRQ_RESIZE"),
    (1 << 14, "N_NOTIFY_CQ"),
    (1 << 17, "MEM_WINDOW"),
    (1 << 18, "UD_IP_CSUM"),
    (1 << 20, "XRC"),
    (1 << 21, "MEM_MGT_EXTENSIONS"),
    (1 << 23, "MEM_WINDOW_TYPE_2A"),
    (1 << 24, "MEM_WINDOW_TYPE_2B"),
    (1 << 25, "RC_IP_CSUM"),
    (1 << 26, "RAW_IP_CSUM"),
    (1 << 29, "MANAGED_FLOW_STEERING"),
];

/// Link width and speed codes for an Ethernet speed in Mb/s, as the kernel's
/// `ib_get_eth_speed` (drivers/infiniband/core/verbs.c) maps them; unknown speed
/// (loopback, virtual NICs) is 1X SDR like rxe on those.
pub fn eth_width_speed(mbps: Option<u32>) -> (u8, u8) {
    // Width codes: 1 = 1X, 2 = 4X. Speed codes: 1 SDR, 2 DDR, 4 QDR, 8 FDR10,
    // 16 FDR, 32 EDR, 64 HDR, 128 NDR.
    match mbps {
        None => (1, 1),
        Some(s) if s <= 1000 => (1, 1),
        Some(s) if s <= 10_000 => (1, 8),
        Some(s) if s <= 20_000 => (2, 2),
        Some(s) if s <= 25_000 => (1, 32),
        Some(s) if s <= 40_000 => (2, 8),
        Some(s) if s <= 100_000 => (2, 32),
        Some(s) if s <= 200_000 => (2, 64),
        Some(_) => (2, 128),
    }
}

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
    /// Maximum memory windows.
    pub max_mw: u32,
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
    /// `IBV_DEVICE_*` capability bits (see [`DEVICE_CAP_NAMES`]), including
    /// [`rverbs_raw::IBV_DEVICE_MANAGED_FLOW_STEERING`] (flows on UD QPs, and on
    /// RAW_PACKET QPs in raw mode), plus [`rverbs_raw::IBV_DEVICE_RAW_IP_CSUM`] in raw
    /// mode ([`crate::OpenOptions::raw_interface`]).
    pub device_cap_flags: u64,
    /// Supported page sizes (bit n set: 2^n bytes).
    pub page_size_cap: u64,
    /// IEEE vendor ID (0xffffff: none, as rxe).
    pub vendor_id: u32,
    /// Vendor part ID (0).
    pub vendor_part_id: u32,
    /// Hardware version (0).
    pub hw_ver: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most protection domains.
    pub max_pd: u32,
    /// Most address handles.
    pub max_ah: u32,
    /// Most SRQs.
    pub max_srq: u32,
    /// Responder resources over the whole device.
    pub max_res_rd_atom: u32,
    /// P_Key table length.
    pub max_pkeys: u16,
    /// Local CA ACK delay exponent (4.096 µs · 2^n), as rxe (15).
    pub local_ca_ack_delay: u8,
    /// Multicast groups a device may have (rxe's limit).
    pub max_mcast_grp: u32,
    /// QPs one multicast group may have attached (rxe's limit).
    pub max_mcast_qp_attach: u32,
    /// QP attachments over all groups (rxe's limit).
    pub max_total_mcast_qp_attach: u32,
    /// The extended attributes (`ibv_query_device_ex`).
    pub ex: DeviceAttrEx,
}

/// The extended attributes (`struct ibv_device_attr_ex` beyond `ibv_device_attr`), as
/// `ibv_devinfo -v` prints them after the basic limits. A device that lacks a feature
/// reports 0 for it (the soft device: all 0 but `device_cap_flags_ex`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceAttrEx {
    /// `IBV_DEVICE_*` capability bits, including those above bit 31.
    pub device_cap_flags_ex: u64,
    /// On-demand paging: `IBV_ODP_SUPPORT*` bits.
    pub odp_general_caps: u64,
    /// On-demand paging per transport (`IBV_ODP_SUPPORT_SEND`...): RC, UC, UD, XRC.
    pub odp_caps: [u32; 4],
    /// Bits of a completion's timestamp (0: no timestamps).
    pub completion_timestamp_mask: u64,
    /// The timestamp clock in kHz (0: none).
    pub hca_core_clock: u64,
    /// `IBV_RAW_PACKET_CAP_*` bits.
    pub raw_packet_caps: u32,
    /// Largest TSO payload (0: no TSO), and the QP types that offer it (bit = QP type).
    pub max_tso: u32,
    /// QP types with TSO (bit n: `IBV_QPT_*` n).
    pub tso_qpts: u32,
    /// RSS: QP types with it, most indirection tables and their size, the hash
    /// functions and the fields hashed.
    pub rss_qpts: u32,
    /// Most receive-WQ indirection tables.
    pub max_rwq_indirection_tables: u32,
    /// Most entries of one.
    pub max_rwq_indirection_table_size: u32,
    /// `IBV_RX_HASH_FUNC_*` bits.
    pub rx_hash_function: u8,
    /// `IBV_RX_HASH_*` field bits.
    pub rx_hash_fields_mask: u64,
    /// Most receive work queues.
    pub max_wq_type_rq: u32,
    /// Packet pacing: the rate limits in kbps and the QP types with it.
    pub qp_rate_limit_min: u32,
    /// Highest rate limit in kbps.
    pub qp_rate_limit_max: u32,
    /// QP types with packet pacing.
    pub pacing_qpts: u32,
    /// Tag matching: most tags (0: none), header size, flags, operations, SGEs.
    pub tm_max_num_tags: u32,
    /// Largest rendezvous header.
    pub tm_max_rndv_hdr_size: u32,
    /// `IBV_TM_CAP_*` bits.
    pub tm_flags: u32,
    /// Outstanding tag-list operations.
    pub tm_max_ops: u32,
    /// SGEs of a tagged receive.
    pub tm_max_sge: u32,
    /// CQ moderation: most completions and longest period (µs); 0: none.
    pub max_cq_count: u16,
    /// Longest moderation period (µs).
    pub max_cq_period: u16,
    /// Device memory in bytes (0: none).
    pub max_dm_size: u64,
}

/// Port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_DOWN`.
    Down,
    /// `IBV_PORT_ACTIVE`: the interface is up.
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
    /// Largest message, bytes.
    pub max_msg_sz: u32,
    /// Port capability bits: what the port's SMA reports in PortInfo.
    pub port_cap_flags: u32,
    /// P_Key violations (packets dropped for a bad P_Key) of this context.
    pub bad_pkey_cntr: u32,
    /// Q_Key violations of this context.
    pub qkey_viol_cntr: u32,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Subnet manager LID (0).
    pub sm_lid: u16,
    /// LID mask control (0).
    pub lmc: u8,
    /// Virtual lanes (1).
    pub max_vl_num: u8,
    /// Link width code (1 = 1X, 2 = 4X, ...), from the interface speed as the kernel's
    /// `ib_get_eth_speed`.
    pub active_width: u8,
    /// Link speed code (1 = 2.5 Gbps SDR, ...), from the interface speed.
    pub active_speed: u8,
    /// Physical state (5 = LINK_UP, 3 = DISABLED).
    pub phys_state: u8,
}

impl DeviceInfo {
    /// The soft rule of [`DeviceInfo::attributes`]: what a soft context opened on this
    /// device would report.
    pub(crate) fn soft_attributes(&self) -> (DeviceAttr, PortAttr, Vec<rverbs_wire::grh::Gid>) {
        let mut cfg = Config {
            gids: std::iter::once(self.default_gid())
                .chain(self.addrs.iter().map(|a| rverbs_engine::net::ip_to_gid(*a)))
                .collect(),
            ..Config::default()
        };
        cfg.limits.active_mtu = self.active_mtu();
        let (d, p) = (
            device_attr(&cfg),
            port_attr(self, &cfg, &Counters::default()),
        );
        (d, p, cfg.gids)
    }
}

pub(crate) fn device_attr(cfg: &Config) -> DeviceAttr {
    let l = &cfg.limits;
    let guid = cfg.gids.first().map_or(0, |g| g.interface_id());
    let mut d = DeviceAttr {
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
        max_mw: rverbs_engine::MAX_MW,
        max_qp_rd_atom: l.max_qp_rd_atom,
        max_qp_init_rd_atom: l.max_qp_init_rd_atom,
        // create_srq checks against these two.
        max_srq_wr: l.max_qp_wr,
        max_srq_sge: l.max_recv_sge,
        max_inline_data: l.max_inline_data,
        atomic_hca: true,
        phys_port_cnt: 1,
        device_cap_flags: u64::from(
            DEVICE_BAD_PKEY_CNTR
                | DEVICE_BAD_QKEY_CNTR
                | DEVICE_SYS_IMAGE_GUID
                | DEVICE_RC_RNR_NAK_GEN
                | DEVICE_MEM_WINDOW
                | DEVICE_MEM_WINDOW_TYPE_2B,
        ) | rverbs_raw::IBV_DEVICE_MANAGED_FLOW_STEERING,
        page_size_cap: 0xffff_f000,
        vendor_id: 0xff_ffff,
        vendor_part_id: 0,
        hw_ver: 0,
        max_cq: cfg.max_qp.saturating_mul(2),
        max_pd: cfg.max_qp,
        max_ah: cfg.max_qp,
        max_srq: cfg.max_qp,
        max_res_rd_atom: l.max_qp_rd_atom.saturating_mul(cfg.max_qp),
        max_pkeys: l.pkey_table_len,
        local_ca_ack_delay: 15,
        // rxe's limits (drivers/infiniband/sw/rxe/rxe_param.h: RXE_MAX_MCAST_GRP,
        // RXE_MAX_MCAST_QP_ATTACH, RXE_MAX_TOT_MCAST_QP_ATTACH).
        max_mcast_grp: 8192,
        max_mcast_qp_attach: 56,
        max_total_mcast_qp_attach: 8192 * 56,
        ex: DeviceAttrEx::default(),
    };
    d.ex.device_cap_flags_ex = d.device_cap_flags;
    d
}

pub(crate) fn port_attr(info: &DeviceInfo, cfg: &Config, c: &Counters) -> PortAttr {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{}/{f}", info.ifname))
            .ok()
            .map(|s| s.trim().to_string())
    };
    // "unknown" (loopback) counts as up; "down"/"lowerlayerdown" as down.
    let up = read("operstate").is_none_or(|s| s == "up" || s == "unknown");
    let (width, speed) = eth_width_speed(
        read("speed")
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|&s| s > 0)
            .map(|s| s as u32),
    );
    PortAttr {
        state: if up {
            PortState::Active
        } else {
            PortState::Down
        },
        max_mtu: Mtu::M4096,
        active_mtu: cfg.limits.active_mtu,
        // The table's capacity, as rxe reports it (RXE_PORT_GID_TBL_LEN), not the
        // entries in use.
        gid_tbl_len: crate::GID_TABLE_LEN as u32,
        pkey_tbl_len: cfg.limits.pkey_table_len,
        link_layer_ethernet: true,
        netdev_mtu: info.netdev_mtu,
        max_msg_sz: 1 << 31,
        port_cap_flags: rverbs_engine::mad::sma::PORT_CAPABILITIES,
        bad_pkey_cntr: c.rx_bad_pkey.min(u64::from(u32::MAX)) as u32,
        qkey_viol_cntr: c.rx_bad_qkey.min(u64::from(u32::MAX)) as u32,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        active_width: width,
        active_speed: speed,
        phys_state: if up { 5 } else { 3 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eth_speed_table() {
        assert_eq!(eth_width_speed(None), (1, 1));
        assert_eq!(eth_width_speed(Some(1000)), (1, 1));
        assert_eq!(eth_width_speed(Some(10_000)), (1, 8));
        assert_eq!(eth_width_speed(Some(25_000)), (1, 32));
        assert_eq!(eth_width_speed(Some(100_000)), (2, 32));
        assert_eq!(eth_width_speed(Some(400_000)), (2, 128));
    }

    #[test]
    fn unopened_attributes_match_an_opened_context() {
        let info = crate::device(None).unwrap();
        let ctx = info.open().unwrap();
        let (d, p, gids) = info.attributes();
        assert_eq!(ctx.query_device().unwrap(), d);
        let q = ctx.query_port(1).unwrap();
        assert_eq!(
            (q.active_mtu, q.state, q.port_cap_flags),
            (p.active_mtu, p.state, p.port_cap_flags)
        );
        assert_eq!(gids[0], ctx.gid(0).unwrap());
        assert!(d.device_cap_flags & u64::from(DEVICE_RC_RNR_NAK_GEN) != 0);
    }
}
