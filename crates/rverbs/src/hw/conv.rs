//! Conversions between the verbs' types and libibverbs' C structs (verbs.h's enums and
//! fields: `ibv_device_attr`, `ibv_port_attr`, `ibv_qp_attr`, `ibv_ah_attr`, `ibv_wc`).

use crate::device::attrs::{DeviceAttr, DeviceAttrEx, PortAttr, PortState};
use crate::error::{Error, Result};
use crate::sys::ibv::consts as c;
use crate::sys::ibv::types as t;
use rverbs_engine::modify::{AhAttr, MigState, QpAttr, QpCap};
use rverbs_engine::{
    Access, AddressVector, Errno, Mtu, QpState, QpType, VerbError, Wc, WcFlags, WcOpcode, WcStatus,
    WrOpcode,
};
use rverbs_wire::grh::Gid;

/// An error of a libibverbs call, as the verbs report it (the device's errno).
pub(crate) fn verr(verb: &'static str, e: std::io::Error) -> Error {
    Error::io(verb, e)
}

pub(crate) fn inval(verb: &'static str, why: &'static str) -> Error {
    VerbError::new(verb, Errno::Inval, why).into()
}

fn text(b: &[std::ffi::c_char]) -> String {
    let v: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&v).into_owned()
}

pub(crate) fn device_attr(a: &t::ibv_device_attr) -> DeviceAttr {
    let u = |v: i32| u32::try_from(v).unwrap_or(0);
    DeviceAttr {
        fw_ver: text(&a.fw_ver),
        node_guid: u64::from_be(a.node_guid),
        sys_image_guid: u64::from_be(a.sys_image_guid),
        max_mr_size: a.max_mr_size,
        max_qp: u(a.max_qp),
        max_qp_wr: u(a.max_qp_wr),
        max_send_sge: u(a.max_sge),
        max_recv_sge: u(a.max_sge),
        max_cqe: u(a.max_cqe),
        max_mr: u(a.max_mr),
        max_mw: u(a.max_mw),
        max_qp_rd_atom: u(a.max_qp_rd_atom),
        max_qp_init_rd_atom: u(a.max_qp_init_rd_atom),
        max_srq_wr: u(a.max_srq_wr),
        max_srq_sge: u(a.max_srq_sge),
        // ibv_device_attr has no inline limit; the QP's granted cap says it.
        max_inline_data: 0,
        atomic_hca: a.atomic_cap != c::IBV_ATOMIC_NONE,
        phys_port_cnt: a.phys_port_cnt,
        device_cap_flags: u64::from(a.device_cap_flags),
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_cq: u(a.max_cq),
        max_pd: u(a.max_pd),
        max_ah: u(a.max_ah),
        max_srq: u(a.max_srq),
        max_res_rd_atom: u(a.max_res_rd_atom),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        max_mcast_grp: u(a.max_mcast_grp),
        max_mcast_qp_attach: u(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: u(a.max_total_mcast_qp_attach),
        ex: DeviceAttrEx::default(),
    }
}

/// [`device_attr`] with the extended attributes.
pub(crate) fn device_attr_ex(a: &t::ibv_device_attr_ex) -> DeviceAttr {
    let o = &a.odp_caps;
    DeviceAttr {
        ex: DeviceAttrEx {
            device_cap_flags_ex: a.device_cap_flags_ex,
            odp_general_caps: o.general_caps,
            odp_caps: [
                o.per_transport_caps.rc_odp_caps,
                o.per_transport_caps.uc_odp_caps,
                o.per_transport_caps.ud_odp_caps,
                a.xrc_odp_caps,
            ],
            completion_timestamp_mask: a.completion_timestamp_mask,
            hca_core_clock: a.hca_core_clock,
            raw_packet_caps: a.raw_packet_caps,
            max_tso: a.tso_caps.max_tso,
            tso_qpts: a.tso_caps.supported_qpts,
            rss_qpts: a.rss_caps.supported_qpts,
            max_rwq_indirection_tables: a.rss_caps.max_rwq_indirection_tables,
            max_rwq_indirection_table_size: a.rss_caps.max_rwq_indirection_table_size,
            rx_hash_function: a.rss_caps.rx_hash_function,
            rx_hash_fields_mask: a.rss_caps.rx_hash_fields_mask,
            max_wq_type_rq: a.max_wq_type_rq,
            qp_rate_limit_min: a.packet_pacing_caps.qp_rate_limit_min,
            qp_rate_limit_max: a.packet_pacing_caps.qp_rate_limit_max,
            pacing_qpts: a.packet_pacing_caps.supported_qpts,
            tm_max_num_tags: a.tm_caps.max_num_tags,
            tm_max_rndv_hdr_size: a.tm_caps.max_rndv_hdr_size,
            tm_flags: a.tm_caps.flags,
            tm_max_ops: a.tm_caps.max_ops,
            tm_max_sge: a.tm_caps.max_sge,
            max_cq_count: a.cq_mod_caps.max_cq_count,
            max_cq_period: a.cq_mod_caps.max_cq_period,
            max_dm_size: a.max_dm_size,
        },
        ..device_attr(&a.orig_attr)
    }
}

fn mtu(v: u32) -> Mtu {
    u8::try_from(v)
        .ok()
        .and_then(Mtu::from_enum)
        .unwrap_or(Mtu::M256)
}

pub(crate) fn port_attr(a: &t::ibv_port_attr, netdev_mtu: usize) -> PortAttr {
    PortAttr {
        state: if a.state == c::IBV_PORT_ACTIVE {
            PortState::Active
        } else {
            PortState::Down
        },
        max_mtu: mtu(a.max_mtu),
        active_mtu: mtu(a.active_mtu),
        gid_tbl_len: u32::try_from(a.gid_tbl_len).unwrap_or(0),
        pkey_tbl_len: a.pkey_tbl_len,
        link_layer_ethernet: u32::from(a.link_layer) == c::IBV_LINK_LAYER_ETHERNET,
        netdev_mtu,
        max_msg_sz: a.max_msg_sz,
        port_cap_flags: a.port_cap_flags,
        bad_pkey_cntr: a.bad_pkey_cntr,
        qkey_viol_cntr: a.qkey_viol_cntr,
        lid: a.lid,
        sm_lid: a.sm_lid,
        lmc: a.lmc,
        max_vl_num: a.max_vl_num,
        active_width: a.active_width,
        active_speed: a.active_speed,
        phys_state: a.phys_state,
    }
}

pub(crate) fn qp_type(q: QpType) -> u32 {
    match q {
        QpType::Rc => c::IBV_QPT_RC,
        QpType::Uc => c::IBV_QPT_UC,
        QpType::Ud => c::IBV_QPT_UD,
        QpType::RawPacket => c::IBV_QPT_RAW_PACKET,
    }
}

fn qp_state(s: QpState) -> u32 {
    match s {
        QpState::Reset => c::IBV_QPS_RESET,
        QpState::Init => c::IBV_QPS_INIT,
        QpState::Rtr => c::IBV_QPS_RTR,
        QpState::Rts => c::IBV_QPS_RTS,
        QpState::Sqd => c::IBV_QPS_SQD,
        QpState::Sqe => c::IBV_QPS_SQE,
        QpState::Err => c::IBV_QPS_ERR,
    }
}

pub(crate) fn state_of(v: u32) -> QpState {
    match v {
        c::IBV_QPS_RESET => QpState::Reset,
        c::IBV_QPS_INIT => QpState::Init,
        c::IBV_QPS_RTR => QpState::Rtr,
        c::IBV_QPS_RTS => QpState::Rts,
        c::IBV_QPS_SQD => QpState::Sqd,
        c::IBV_QPS_SQE => QpState::Sqe,
        _ => QpState::Err,
    }
}

pub(crate) fn cap(q: &QpCap) -> t::ibv_qp_cap {
    t::ibv_qp_cap {
        max_send_wr: q.max_send_wr,
        max_recv_wr: q.max_recv_wr,
        max_send_sge: q.max_send_sge,
        max_recv_sge: q.max_recv_sge,
        max_inline_data: q.max_inline_data,
    }
}

pub(crate) fn cap_of(q: &t::ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: q.max_send_wr,
        max_recv_wr: q.max_recv_wr,
        max_send_sge: q.max_send_sge,
        max_recv_sge: q.max_recv_sge,
        max_inline_data: q.max_inline_data,
    }
}

/// A RoCE address: always global (the GRH carries the GIDs), LID 0.
pub(crate) fn ah_attr(a: &AhAttr) -> t::ibv_ah_attr {
    let mut c: t::ibv_ah_attr = crate::sys::ibv::zeroed_ah_attr();
    c.grh.dgid = t::ibv_gid { raw: a.av.dgid.0 };
    c.grh.sgid_index = a.av.sgid_index;
    c.grh.hop_limit = a.av.hop_limit;
    c.grh.traffic_class = a.av.traffic_class;
    c.grh.flow_label = a.av.flow_label;
    c.is_global = 1;
    c.port_num = a.port_num;
    c
}

pub(crate) fn ah_attr_of(c: &t::ibv_ah_attr) -> AhAttr {
    AhAttr {
        av: AddressVector {
            dgid: Gid(crate::sys::ibv::gid_bytes(&c.grh.dgid)),
            sgid_index: c.grh.sgid_index,
            hop_limit: c.grh.hop_limit,
            traffic_class: c.grh.traffic_class,
            flow_label: c.grh.flow_label,
        },
        port_num: c.port_num,
    }
}

pub(crate) fn qp_attr(a: &QpAttr) -> t::ibv_qp_attr {
    let mut c: t::ibv_qp_attr = crate::sys::ibv::zeroed_qp_attr();
    c.qp_state = qp_state(a.qp_state);
    c.cur_qp_state = qp_state(a.cur_qp_state);
    c.path_mtu = a.path_mtu as u32;
    c.path_mig_state = match a.path_mig_state {
        MigState::Migrated => 0,
        MigState::Rearm => 1,
        MigState::Armed => 2,
    };
    c.qkey = a.qkey;
    c.rq_psn = a.rq_psn;
    c.sq_psn = a.sq_psn;
    c.dest_qp_num = a.dest_qp_num;
    c.qp_access_flags = a.qp_access_flags.0;
    c.cap = cap(&a.cap);
    if let Some(ah) = &a.ah_attr {
        c.ah_attr = ah_attr(ah);
    }
    c.pkey_index = a.pkey_index;
    c.en_sqd_async_notify = u8::from(a.en_sqd_async_notify);
    c.max_rd_atomic = a.max_rd_atomic;
    c.max_dest_rd_atomic = a.max_dest_rd_atomic;
    c.min_rnr_timer = a.min_rnr_timer;
    c.port_num = a.port_num;
    c.timeout = a.timeout;
    c.retry_cnt = a.retry_cnt;
    c.rnr_retry = a.rnr_retry;
    c.rate_limit = a.rate_limit;
    c
}

pub(crate) fn qp_attr_of(c: &t::ibv_qp_attr) -> QpAttr {
    QpAttr {
        qp_state: state_of(c.qp_state),
        cur_qp_state: state_of(c.cur_qp_state),
        path_mtu: mtu(c.path_mtu),
        path_mig_state: match c.path_mig_state {
            1 => MigState::Rearm,
            2 => MigState::Armed,
            _ => MigState::Migrated,
        },
        qkey: c.qkey,
        rq_psn: c.rq_psn,
        sq_psn: c.sq_psn,
        dest_qp_num: c.dest_qp_num,
        qp_access_flags: Access(c.qp_access_flags),
        cap: cap_of(&c.cap),
        ah_attr: (c.ah_attr.is_global != 0).then(|| ah_attr_of(&c.ah_attr)),
        pkey_index: c.pkey_index,
        en_sqd_async_notify: c.en_sqd_async_notify != 0,
        max_rd_atomic: c.max_rd_atomic,
        max_dest_rd_atomic: c.max_dest_rd_atomic,
        min_rnr_timer: c.min_rnr_timer,
        port_num: c.port_num,
        timeout: c.timeout,
        retry_cnt: c.retry_cnt,
        rnr_retry: c.rnr_retry,
        rate_limit: c.rate_limit,
    }
}

/// `IBV_WR_*` of an operation.
pub(crate) fn wr_opcode(o: &WrOpcode) -> Result<u32> {
    Ok(match o {
        WrOpcode::RdmaWrite => c::IBV_WR_RDMA_WRITE,
        WrOpcode::RdmaWriteWithImm => c::IBV_WR_RDMA_WRITE_WITH_IMM,
        WrOpcode::Send => c::IBV_WR_SEND,
        WrOpcode::SendWithImm => c::IBV_WR_SEND_WITH_IMM,
        WrOpcode::RdmaRead => c::IBV_WR_RDMA_READ,
        WrOpcode::AtomicCmpAndSwp => c::IBV_WR_ATOMIC_CMP_AND_SWP,
        WrOpcode::AtomicFetchAndAdd => c::IBV_WR_ATOMIC_FETCH_AND_ADD,
        WrOpcode::SendWithInv => c::IBV_WR_SEND_WITH_INV,
        WrOpcode::BindMw(_) => c::IBV_WR_BIND_MW,
        WrOpcode::LocalInv => c::IBV_WR_LOCAL_INV,
    })
}

fn wc_status(v: u32) -> WcStatus {
    use WcStatus::*;
    match v {
        0 => Success,
        1 => LocLenErr,
        2 => LocQpOpErr,
        4 => LocProtErr,
        5 => WrFlushErr,
        6 => MwBindErr,
        7 => BadRespErr,
        8 => LocAccessErr,
        9 => RemInvReqErr,
        10 => RemAccessErr,
        11 => RemOpErr,
        12 => RetryExcErr,
        13 => RnrRetryExcErr,
        19 => FatalErr,
        20 => RespTimeoutErr,
        _ => GeneralErr,
    }
}

fn wc_opcode(v: u32) -> WcOpcode {
    match v {
        c::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        c::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        c::IBV_WC_COMP_SWAP => WcOpcode::CompSwap,
        c::IBV_WC_FETCH_ADD => WcOpcode::FetchAdd,
        c::IBV_WC_BIND_MW => WcOpcode::BindMw,
        c::IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
        c::IBV_WC_RECV => WcOpcode::Recv,
        c::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        _ => WcOpcode::Send,
    }
}

/// How a device's completion flags are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WcDialect {
    /// verbs.h's `IBV_WC_*`.
    Verbs,
    /// The kernel's rxe: its responder writes the kernel's `IB_WC_WITH_INVALIDATE`
    /// (bit 2) into a user CQ (drivers/infiniband/sw/rxe/rxe_resp.c, `do_complete`),
    /// where verbs.h's bit 2 is `IBV_WC_IP_CSUM_OK`, which rxe never sets: bit 2 is
    /// read as `IBV_WC_WITH_INV`.
    Rxe,
}

impl WcDialect {
    /// rxe by its IDs (`RXE_VENDOR_ID` 0xffffff, part 0: rxe_param.h).
    pub(crate) fn of(vendor_id: u32, vendor_part_id: u32) -> WcDialect {
        if (vendor_id, vendor_part_id) == (0xff_ffff, 0) {
            WcDialect::Rxe
        } else {
            WcDialect::Verbs
        }
    }
}

pub(crate) fn wc(w: &t::ibv_wc, dialect: WcDialect) -> Wc {
    let mut flags = WcFlags(w.wc_flags);
    if dialect == WcDialect::Rxe && flags.contains(WcFlags::IP_CSUM_OK) {
        flags = WcFlags(flags.0 & !WcFlags::IP_CSUM_OK.0 | WcFlags::WITH_INV.0);
    }
    let imm = crate::sys::ibv::wc_imm(w);
    Wc {
        wr_id: w.wr_id,
        status: wc_status(w.status),
        opcode: wc_opcode(w.opcode),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        // ibv_wc.imm_data is big-endian; the engine's Wc holds the number posted.
        imm_data: if flags.contains(WcFlags::WITH_INV) {
            imm
        } else {
            u32::from_be(imm)
        },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
        flow_tag: 0,
    }
}

/// A validated rule in libibverbs' layout: its head and its specs back to back. The
/// specs are the kernel's (`rverbs_flow::uverbs::encode_flow_attr`) but for the two
/// that libibverbs lays out differently (rdma-core `ib_spec_to_kern_spec`, read
/// backwards): IPV4_EXT, which the kernel gets as IPV4 with a 12-byte filter, and the
/// tag action, 12 bytes in `struct ibv_flow_spec_action_tag`. Counter and action
/// handles name objects of the soft device: EINVAL.
pub(crate) fn flow_rule(
    a: &rverbs_flow::attr::FlowAttr,
) -> Result<(crate::sys::ibv::FlowHead, Vec<u8>)> {
    use rverbs_flow::attr::{spec_type, FlowSpec};
    use rverbs_flow::uverbs::{encode_flow_attr, FLOW_ATTR_LEN, SPEC_HDR_LEN};
    if a.specs
        .iter()
        .any(|s| matches!(s, FlowSpec::Count(_) | FlowSpec::ActionHandle(_)))
    {
        return Err(inval(
            "create_flow",
            "a counters or action handle of another device",
        ));
    }
    let kern = encode_flow_attr(a);
    let mut out = Vec::with_capacity(kern.len());
    let mut at = FLOW_ATTR_LEN;
    while at + SPEC_HDR_LEN <= kern.len() {
        let ty = u32::from_ne_bytes(kern[at..at + 4].try_into().expect("4 bytes"));
        let size = usize::from(u16::from_ne_bytes(
            kern[at + 4..at + 6].try_into().expect("2 bytes"),
        ));
        let spec = kern
            .get(at..at + size)
            .filter(|_| size >= SPEC_HDR_LEN)
            .ok_or_else(|| inval("create_flow", "spec length"))?;
        let start = out.len();
        if ty & !spec_type::INNER == spec_type::IPV4 && size == 32 {
            out.extend_from_slice(spec);
            let user = (ty & spec_type::INNER) | spec_type::IPV4_EXT;
            out[start..start + 4].copy_from_slice(&user.to_ne_bytes());
        } else if ty == spec_type::ACTION_TAG {
            out.extend_from_slice(&spec[..12]);
            out[start + 4..start + 6].copy_from_slice(&12u16.to_ne_bytes());
        } else {
            out.extend_from_slice(spec);
        }
        at += size;
    }
    let head = crate::sys::ibv::FlowHead {
        attr_type: a.attr_type as u32,
        priority: a.priority,
        port: a.port,
        flags: a.flags.bits(),
    };
    Ok((head, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specs of a rule in libibverbs' layout: (type, size) of each, walked by size.
    fn walk(b: &[u8]) -> Vec<(u32, usize)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < b.len() {
            let ty = u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
            let size = usize::from(u16::from_ne_bytes(b[at + 4..at + 6].try_into().unwrap()));
            out.push((ty, size));
            at += size;
        }
        out
    }

    #[test]
    fn a_flow_rule_is_laid_out_as_libibverbs_structs() {
        use rverbs_flow::text::parse_rule;
        let r = parse_rule("prio 3 eth type 0x0800 ipv4 src 10.0.0.1 ttl 64 udp dport 4791 tag 9")
            .unwrap();
        let (head, specs) = flow_rule(&r).unwrap();
        assert_eq!((head.priority, head.port, head.attr_type), (3, 1, 0));
        // ETH 40, IPV4_EXT (0x32, not the kernel's 0x30) 32, UDP 16, the tag 12.
        assert_eq!(
            walk(&specs),
            [(0x20, 40), (0x32, 32), (0x41, 16), (0x1000, 12)]
        );
        let tag_at = 40 + 32 + 16;
        assert_eq!(specs[tag_at + 8..tag_at + 12], 9u32.to_ne_bytes());
        // Plain IPv4 stays 0x30 (24 bytes); a counters spec names a soft object.
        let (_, specs) = flow_rule(&parse_rule("ipv4 dst 10.0.0.2").unwrap()).unwrap();
        assert_eq!(walk(&specs), [(0x30, 24)]);
        let mut c = parse_rule("udp dport 4791 drop").unwrap();
        c.specs.push(rverbs_flow::attr::FlowSpec::Count(
            rverbs_flow::attr::Counters::new(),
        ));
        assert_eq!(flow_rule(&c).unwrap_err().errno(), libc::EINVAL);
    }

    #[test]
    fn qp_attributes_survive_the_c_struct() {
        let a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: Mtu::M1024,
            dest_qp_num: 0x11,
            rq_psn: 0x123456,
            qp_access_flags: Access::ALL,
            ah_attr: Some(AhAttr::to(Gid([7; 16]), 1)),
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            port_num: 1,
            ..QpAttr::default()
        };
        let b = qp_attr_of(&qp_attr(&a));
        assert_eq!(b.qp_state, QpState::Rtr);
        assert_eq!(b.path_mtu, Mtu::M1024);
        assert_eq!((b.dest_qp_num, b.rq_psn), (0x11, 0x123456));
        assert_eq!(b.ah_attr, a.ah_attr);
        assert_eq!((b.max_dest_rd_atomic, b.min_rnr_timer), (4, 12));
        assert_eq!(qp_type(QpType::Ud), 4);
        assert_eq!(wr_opcode(&WrOpcode::LocalInv).unwrap(), c::IBV_WR_LOCAL_INV);
    }

    #[test]
    fn completions_read_the_immediate_in_host_order() {
        let mut w = crate::sys::ibv::zeroed_wc();
        w.wc_flags = WcFlags::WITH_IMM.0;
        w.opcode = c::IBV_WC_RECV;
        crate::sys::ibv::set_wc_imm(&mut w, 0x1234_5678u32.to_be());
        w.status = 12;
        let e = wc(&w, WcDialect::Verbs);
        assert_eq!(e.imm_data, 0x1234_5678);
        assert_eq!(
            (e.opcode, e.status),
            (WcOpcode::Recv, WcStatus::RetryExcErr)
        );
    }

    /// rxe's bit 2 on a receive is an invalidation (its key in host order); elsewhere
    /// it stays IP_CSUM_OK.
    #[test]
    fn rxe_reports_an_invalidation_in_the_kernels_bit() {
        let mut w = crate::sys::ibv::zeroed_wc();
        w.wc_flags = 1 | 1 << 2;
        w.opcode = c::IBV_WC_RECV;
        crate::sys::ibv::set_wc_imm(&mut w, 0x0800_0439);
        let e = wc(&w, WcDialect::Rxe);
        assert_eq!(e.wc_flags.0, WcFlags::GRH.0 | WcFlags::WITH_INV.0);
        assert_eq!(e.imm_data, 0x0800_0439);
        let e = wc(&w, WcDialect::Verbs);
        assert_eq!(e.wc_flags.0, WcFlags::GRH.0 | WcFlags::IP_CSUM_OK.0);
        assert_eq!(WcDialect::of(0x02c9, 4125), WcDialect::Verbs);
        assert_eq!(WcDialect::of(0xff_ffff, 0), WcDialect::Rxe);
    }
}
