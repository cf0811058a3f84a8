//! `ibv_query_device` / `ibv_query_port`: what the soft device offers, in the fields
//! and units of `struct ibv_device_attr` and `struct ibv_port_attr` (rdma-core
//! `libibverbs/verbs.h`). The limits are the engine's own (what `create_qp`,
//! `modify_qp` and `post_send` enforce), so what a program reads is what it gets.

use crate::context::Context;
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use rverbs_engine::Mtu;

/// `IBV_DEVICE_BAD_PKEY_CNTR`: the port counts packets dropped for a bad P_Key.
pub const DEVICE_BAD_PKEY_CNTR: u32 = 1 << 1;
/// `IBV_DEVICE_BAD_QKEY_CNTR`: the port counts UD packets dropped for a bad Q_Key.
pub const DEVICE_BAD_QKEY_CNTR: u32 = 1 << 2;
/// `IBV_DEVICE_SYS_IMAGE_GUID`: `sys_image_guid` is valid.
pub const DEVICE_SYS_IMAGE_GUID: u32 = 1 << 11;
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

/// `enum ibv_atomic_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicCap {
    /// `IBV_ATOMIC_NONE` (0).
    None = 0,
    /// `IBV_ATOMIC_HCA` (1): atomic with respect to this device's own operations.
    Hca = 1,
    /// `IBV_ATOMIC_GLOB` (2): atomic with respect to the CPU too.
    Glob = 2,
}

/// `struct ibv_device_attr`: the device's identity and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version text (`fw_ver`): the crate version.
    pub fw_ver: String,
    /// Node GUID: the EUI-64 of the interface MAC, as rxe (big-endian bytes as a u64).
    pub node_guid: u64,
    /// System image GUID (same as the node GUID).
    pub sys_image_guid: u64,
    /// Largest memory region, bytes.
    pub max_mr_size: u64,
    /// Supported page sizes (bit n set: 2^n bytes).
    pub page_size_cap: u64,
    /// IEEE vendor ID (0xffffff: none, as rxe).
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Most QPs.
    pub max_qp: u32,
    /// Most outstanding work requests per queue.
    pub max_qp_wr: u32,
    /// `IBV_DEVICE_*` capability bits (see [`DEVICE_CAP_NAMES`]).
    pub device_cap_flags: u32,
    /// Most scatter/gather entries per send or receive request.
    pub max_sge: u32,
    /// Most scatter entries of an RDMA READ.
    pub max_sge_rd: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most memory regions.
    pub max_mr: u32,
    /// Most protection domains.
    pub max_pd: u32,
    /// Most outstanding READ/atomic requests a QP can receive.
    pub max_qp_rd_atom: u32,
    /// EE contexts (none on RoCE).
    pub max_ee_rd_atom: u32,
    /// Responder resources over the whole device.
    pub max_res_rd_atom: u32,
    /// Most outstanding READ/atomic requests a QP can initiate.
    pub max_qp_init_rd_atom: u32,
    /// EE contexts (none).
    pub max_ee_init_rd_atom: u32,
    /// Atomic guarantees.
    pub atomic_cap: AtomicCap,
    /// EE contexts (none).
    pub max_ee: u32,
    /// Reliable datagram domains (none).
    pub max_rdd: u32,
    /// Memory windows (not offered: 0).
    pub max_mw: u32,
    /// Raw IPv6 QPs.
    pub max_raw_ipv6_qp: u32,
    /// Raw Ethertype QPs.
    pub max_raw_ethy_qp: u32,
    /// Multicast groups (not offered: 0).
    pub max_mcast_grp: u32,
    /// QPs per multicast group.
    pub max_mcast_qp_attach: u32,
    /// QP attachments over all groups.
    pub max_total_mcast_qp_attach: u32,
    /// Most address handles.
    pub max_ah: u32,
    /// Fast memory regions (obsolete: 0).
    pub max_fmr: u32,
    /// Most SRQs.
    pub max_srq: u32,
    /// Most work requests per SRQ.
    pub max_srq_wr: u32,
    /// Most scatter entries per SRQ receive.
    pub max_srq_sge: u32,
    /// P_Key table length.
    pub max_pkeys: u16,
    /// Local CA ACK delay exponent (4.096 µs · 2^n), as rxe (15).
    pub local_ca_ack_delay: u8,
    /// Physical ports.
    pub phys_port_cnt: u8,
}

/// `enum ibv_port_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_DOWN` (1): the interface is down.
    Down = 1,
    /// `IBV_PORT_ACTIVE` (4).
    Active = 4,
}

/// `struct ibv_port_attr` of port 1 (the only one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// Port state, from the interface's operational state.
    pub state: PortState,
    /// Largest path MTU the port supports (4096).
    pub max_mtu: Mtu,
    /// The path MTU the interface allows (netdev MTU − headers, as rxe).
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Port capability bits (`IBV_PORT_*`).
    pub port_cap_flags: u32,
    /// Largest message, bytes.
    pub max_msg_sz: u32,
    /// P_Key violations (packets dropped for a bad P_Key).
    pub bad_pkey_cntr: u32,
    /// Q_Key violations.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID (0: RoCE has none).
    pub lid: u16,
    /// Subnet manager LID (0).
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// Subnet manager SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Link width code (1 = 1X, 2 = 4X, ...), from the interface speed as the kernel's
    /// `ib_get_eth_speed`.
    pub active_width: u8,
    /// Link speed code (1 = 2.5 Gbps SDR, ...), from the interface speed.
    pub active_speed: u8,
    /// Physical state (5 = LINK_UP, 3 = DISABLED).
    pub phys_state: u8,
    /// Link layer (`IBV_LINK_LAYER_ETHERNET` = 2).
    pub link_layer: u8,
}

/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;

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

fn node_guid(gid0: &[u8; 16]) -> u64 {
    u64::from_be_bytes(gid0[8..16].try_into().unwrap_or([0; 8]))
}

impl Context {
    /// `ibv_query_device`.
    pub fn query_device(&self) -> DeviceAttr {
        device_attr(self.shared().lock().config())
    }

    /// `ibv_query_port`; the soft device has port 1 only (others: `EINVAL`).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        check_port(port)?;
        let e = self.shared().lock();
        Ok(port_attr(self.device(), e.config(), e.counters()))
    }
}

impl DeviceInfo {
    /// The device's attributes, port 1 and GID table as an opened context would report
    /// them, without opening it (no socket is bound, so this works while another
    /// process holds the device or rxe holds port 4791). The port counters are a
    /// context's own and read 0 here; the loopback device's GIDs are its interface's
    /// addresses (an opened context gets its own 127.0.0.x).
    pub fn attributes(&self) -> (DeviceAttr, PortAttr, Vec<rverbs_wire::grh::Gid>) {
        let mut cfg = rverbs_engine::Config {
            gids: std::iter::once(self.default_gid())
                .chain(self.addrs.iter().map(|a| rverbs_engine::net::ip_to_gid(*a)))
                .collect(),
            ..rverbs_engine::Config::default()
        };
        cfg.limits.active_mtu = self.active_mtu();
        let (d, p) = (
            device_attr(&cfg),
            port_attr(self, &cfg, &rverbs_engine::Counters::default()),
        );
        (d, p, cfg.gids)
    }
}

fn check_port(port: u8) -> Result<()> {
    if port == 1 {
        Ok(())
    } else {
        Err(Error::Verb(rverbs_engine::VerbError::new(
            "query_port",
            rverbs_engine::Errno::Inval,
            "the soft device has one port (1)",
        )))
    }
}

fn device_attr(cfg: &rverbs_engine::Config) -> DeviceAttr {
    let guid = cfg.gids.first().map_or(0, |g| node_guid(&g.0));
    let l = &cfg.limits;
    DeviceAttr {
        fw_ver: env!("CARGO_PKG_VERSION").to_string(),
        node_guid: guid,
        sys_image_guid: guid,
        // A region is a Vec; the engine accepts messages up to 2 GiB.
        max_mr_size: isize::MAX as u64,
        page_size_cap: 0xffff_f000,
        vendor_id: 0xff_ffff,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: cfg.max_qp,
        max_qp_wr: l.max_qp_wr,
        device_cap_flags: DEVICE_BAD_PKEY_CNTR
            | DEVICE_BAD_QKEY_CNTR
            | DEVICE_SYS_IMAGE_GUID
            | DEVICE_RC_RNR_NAK_GEN,
        max_sge: l.max_send_sge.min(l.max_recv_sge),
        max_sge_rd: l.max_send_sge,
        max_cq: cfg.max_qp.saturating_mul(2),
        max_cqe: cfg.max_cqe,
        max_mr: cfg.max_qp,
        max_pd: cfg.max_qp,
        max_qp_rd_atom: l.max_qp_rd_atom,
        max_ee_rd_atom: 0,
        max_res_rd_atom: l.max_qp_rd_atom.saturating_mul(cfg.max_qp),
        max_qp_init_rd_atom: l.max_qp_init_rd_atom,
        max_ee_init_rd_atom: 0,
        // The engine applies atomics under its lock, which also guards every
        // access the device makes; the application reaches region bytes only
        // through the same lock (`Mr::with`), so atomics are device-atomic.
        atomic_cap: AtomicCap::Hca,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: cfg.max_qp,
        max_fmr: 0,
        max_srq: cfg.max_qp,
        max_srq_wr: l.max_qp_wr,
        max_srq_sge: l.max_recv_sge,
        max_pkeys: l.pkey_table_len,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    }
}

fn port_attr(
    info: &DeviceInfo,
    cfg: &rverbs_engine::Config,
    c: &rverbs_engine::Counters,
) -> PortAttr {
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
        gid_tbl_len: cfg.limits.gid_table_len,
        // What the port's SMA reports in PortInfo (traps, CM, device management).
        port_cap_flags: rverbs_engine::mad::sma::PORT_CAPABILITIES,
        max_msg_sz: 1 << 31,
        bad_pkey_cntr: c.rx_bad_pkey.min(u64::from(u32::MAX)) as u32,
        qkey_viol_cntr: c.rx_bad_qkey.min(u64::from(u32::MAX)) as u32,
        pkey_tbl_len: cfg.limits.pkey_table_len,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: width,
        active_speed: speed,
        phys_state: if up { 5 } else { 3 },
        link_layer: LINK_LAYER_ETHERNET,
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
    fn loopback_device_and_port() {
        let ctx = crate::device(None).unwrap().open().unwrap();
        let d = ctx.query_device();
        assert_eq!(d.phys_port_cnt, 1);
        assert_eq!(d.node_guid, node_guid(&ctx.gid(0).unwrap().0));
        assert_eq!(d.max_qp_rd_atom, 128);
        assert!(d.device_cap_flags & DEVICE_RC_RNR_NAK_GEN != 0);
        let p = ctx.query_port(1).unwrap();
        assert_eq!(p.state, PortState::Active);
        assert_eq!(p.active_mtu, ctx.device().active_mtu());
        assert_eq!(p.link_layer, LINK_LAYER_ETHERNET);
        assert_eq!(p.gid_tbl_len, 1024);
        let e = ctx.query_port(2).unwrap_err();
        assert!(e.to_string().contains("query_port"), "{e}");
    }
}
