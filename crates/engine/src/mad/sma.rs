//! The subnet management agent of a channel adapter (IBTA 14.2; kernel qib/hfi1
//! `process_subn`), for SMPs delivered locally: RoCE has no QP0, so SMPs reach the
//! SMA only through the local path (kernel `core/mad.c` `handle_outgoing_dr_smp`),
//! which [`dr_smp_send`] and [`dr_is_local`] implement.

use super::{reply, reply_status, security_notice, trap_header, Mad, MadPort, MadResult, Trap};
use crate::counters::Counters;
use crate::types::{Nanos, Wc};
use rverbs_wire::mad::notice::{trap, Notice, Trap256Details, Trap256DetailsRepr};
use rverbs_wire::mad::sma::{
    node_type, port_cap, sm_attr, NodeInfo, NodeInfoRepr, PortInfo, PortInfoRepr, GUIDS_PER_BLOCK,
    PKEYS_PER_BLOCK,
};
use rverbs_wire::mad::smp::{DR_PATH_LEN, PERMISSIVE_LID, SMP_DATA_LEN, SMP_DATA_OFFSET};
use rverbs_wire::mad::{class, method, status, MadHeader};

/// Additional GUIDs a port holds beside its PortGUID (GUIDInfo block 0, entries 1-7).
pub const EXTRA_GUIDS: usize = GUIDS_PER_BLOCK - 1;

/// The SMA's per-port state.
#[derive(Debug, Clone)]
pub(crate) struct SmaState {
    pub(crate) m_key: u64,
    /// M_KeyProtectBits, 0-3.
    pub(crate) protect_bits: u8,
    /// M_KeyLeasePeriod in seconds (0 = the lease never expires).
    pub(crate) lease_period: u16,
    /// When the running lease ends (kernel qib `mkey_lease_timeout`).
    pub(crate) lease_deadline: Option<Nanos>,
    pub(crate) m_key_violations: u16,
    pub(crate) lid: u16,
    pub(crate) sm_lid: u16,
    pub(crate) gid_prefix: u64,
    pub(crate) lmc: u8,
    /// SubnetTimeOut, also the trap rate limit (4.096 us * 2^value).
    pub(crate) subnet_timeout: u8,
    pub(crate) guids: [u64; EXTRA_GUIDS],
    /// Counter values at the last reset of P_KeyViolations / Q_KeyViolations.
    pub(crate) pkey_base: u64,
    pub(crate) qkey_base: u64,
    /// The port's active MTU as an IBTA code (1 = 256 ... 5 = 4096).
    pub(crate) mtu_code: u8,
    tid: u64,
}

impl Default for SmaState {
    fn default() -> Self {
        SmaState {
            m_key: 0,
            protect_bits: 0,
            lease_period: 0,
            lease_deadline: None,
            m_key_violations: 0,
            lid: 0,
            sm_lid: 0,
            // The default GID prefix fe80::/64 (IBTA 4.1.1).
            gid_prefix: 0xfe80_0000_0000_0000,
            lmc: 0,
            // qib's initial SubnetTimeOut: 18, about 1.07 s between traps.
            subnet_timeout: 18,
            guids: [0; EXTRA_GUIDS],
            pkey_base: 0,
            qkey_base: 0,
            mtu_code: 3,
            tid: 0,
        }
    }
}

/// PortInfo CapabilityMask the soft port reports.
pub const PORT_CAPABILITIES: u32 = port_cap::IS_TRAP_SUPPORTED
    | port_cap::IS_CM_SUPPORTED
    | port_cap::IS_DEVICE_MANAGEMENT_SUPPORTED;

/// The directed-route rules of a CA for an SMP it sends (IBTA 14.2.2.2 C14-9 and
/// C14-13; kernel `core/smi.c` `smi_handle_dr_smp_send` for a non-switch): updates
/// the hop pointer and says whether the SMP may go on (`false` = discard).
pub fn dr_smp_send(mad: &mut Mad, port: u8) -> bool {
    let h = MadHeader::new_unchecked(&mad[..]);
    let (hop_ptr, hop_cnt, out) = (h.hop_pointer(), h.hop_count(), !h.dr_direction());
    let dr_slid = u16::from_be_bytes([mad[32], mad[33]]);
    let dr_dlid = u16::from_be_bytes([mad[34], mad[35]]);
    // The paths hold 64 hops (IB_SMP_MAX_PATH_HOPS); a longer hop count would index
    // past them (fuzz-found; later kernels discard such SMPs the same way).
    if usize::from(hop_cnt) >= DR_PATH_LEN {
        return false;
    }
    let mut h = MadHeader::new_unchecked(&mut mad[..]);
    if out {
        if hop_cnt != 0 && hop_ptr == 0 {
            // C14-9:1: leaving through the first hop's port.
            h.set_hop_pointer(1);
            return mad[128 + 1] == port;
        }
        if hop_ptr != 0 && hop_ptr < hop_cnt {
            // C14-9:2: only a switch forwards in the middle of a path.
            return false;
        }
        if hop_ptr == hop_cnt {
            // C14-9:3: end of the directed part; a CA needs a permissive DrDLID.
            h.set_hop_pointer(hop_ptr.wrapping_add(1));
            return dr_dlid == PERMISSIVE_LID;
        }
        // C14-9:4 (give to the SMA) and C14-9:5 (unreasonable hop pointer).
        u16::from(hop_ptr) == u16::from(hop_cnt) + 1
    } else {
        if hop_cnt != 0 && u16::from(hop_ptr) == u16::from(hop_cnt) + 1 {
            // C14-13:1.
            let p = hop_ptr - 1;
            h.set_hop_pointer(p);
            return mad[192 + usize::from(p)] == port;
        }
        if 2 <= hop_ptr && hop_ptr <= hop_cnt {
            // C14-13:2: switches only.
            return false;
        }
        if hop_ptr == 1 {
            // C14-13:3.
            h.set_hop_pointer(0);
            return dr_slid == PERMISSIVE_LID;
        }
        // C14-13:4 (hop pointer 0: for the SM) and C14-13:5.
        hop_ptr == 0
    }
}

/// Whether an outgoing directed-route SMP (after [`dr_smp_send`]) is for the local
/// SMA (kernel `core/smi.h` `smi_check_local_smp`): direction out and hop pointer
/// one past the hop count.
pub fn dr_is_local(mad: &Mad) -> bool {
    let h = MadHeader::new_unchecked(&mad[..]);
    !h.dr_direction() && u16::from(h.hop_pointer()) == u16::from(h.hop_count()) + 1
}

fn smp_m_key(mad: &Mad) -> u64 {
    u64::from_be_bytes(mad[24..32].try_into().unwrap_or([0; 8]))
}

fn data_mut(mad: &mut Mad) -> &mut [u8] {
    &mut mad[SMP_DATA_OFFSET..SMP_DATA_OFFSET + SMP_DATA_LEN]
}

/// The M_Key check (IBTA 14.2.4; kernel qib `check_mkey`, hfi1 `check_mkey`):
/// returns `true` when the SMP must be dropped as a violation.
fn check_mkey(p: &mut MadPort, now: Nanos, mad_flags: u32, wc: Option<&Wc>, mad: &Mad) -> bool {
    let s = &mut p.sma;
    // A lease that ran out clears the protection (14.2.4.2).
    if s.lease_deadline.is_some_and(|t| now >= t) {
        s.lease_deadline = None;
        s.protect_bits = 0;
    }
    let key = smp_m_key(mad);
    let valid = mad_flags & super::flags::IGNORE_MKEY != 0 || s.m_key == 0 || s.m_key == key;
    let m = mad[3];
    // Any valid Get / Set / TrapRepress stops a running lease.
    if valid
        && s.lease_deadline.is_some()
        && matches!(m, method::GET | method::SET | method::TRAP_REPRESS)
    {
        s.lease_deadline = None;
    }
    if valid {
        return false;
    }
    let violation = match m {
        // A bad key on a Get is a violation only from protect level 2 up.
        method::GET => s.protect_bits >= 2,
        method::SET | method::TRAP_REPRESS => true,
        _ => false,
    };
    if !violation {
        return false;
    }
    s.m_key_violations = s.m_key_violations.saturating_add(1);
    if s.lease_deadline.is_none() && s.lease_period != 0 {
        s.lease_deadline = Some(now.saturating_add(u64::from(s.lease_period) * 1_000_000_000));
    }
    p.stats.mkey_drops += 1;
    let t = bad_mkey_trap(p, wc, mad);
    p.raise_trap(now, t);
    true
}

/// SM Trap 256, bad M_Key (IBTA 14.2.5.1 Notice; kernel qib `qib_bad_mkey`): the
/// offending method, attribute and key, and for a directed-route SMP its DrSLID, hop
/// count and return path (truncated to 30 hops).
fn bad_mkey_trap(p: &mut MadPort, _wc: Option<&Wc>, mad: &Mad) -> Trap {
    let h = MadHeader::new_unchecked(&mad[..]);
    let lid = p.sma.lid;
    let mut d = Trap256DetailsRepr {
        // As qib and hfi1 do, LIDADDR carries the issuer's LID.
        lidaddr: lid,
        dr_slid: 0,
        method: h.method(),
        attribute_id: h.attribute_id(),
        attribute_modifier: h.attribute_modifier(),
        m_key: smp_m_key(mad),
        dr_notice: false,
        dr_path_truncated: false,
        dr_hop_count: 0,
        dr_notice_return_path: [0; 30],
    };
    if h.mgmt_class() == class::SUBN_DIRECTED_ROUTE {
        d.dr_slid = u16::from_be_bytes([mad[32], mad[33]]);
        d.dr_notice = true;
        let mut hops = usize::from(h.hop_count());
        if hops > 30 {
            d.dr_path_truncated = true;
            hops = 30;
        }
        d.dr_hop_count = hops as u8;
        d.dr_notice_return_path[..hops].copy_from_slice(&mad[192..192 + hops]);
    }
    let mut notice = security_notice(trap::SM_BAD_M_KEY, lid);
    d.emit(&mut Trap256Details::new_unchecked(
        &mut notice.data_details[..],
    ));
    p.sma.tid = p.sma.tid.wrapping_add(1);
    let mut out = [0u8; rverbs_wire::mad::MAD_LEN];
    trap_header(class::SUBN_LID_ROUTED, p.sma.tid)
        .emit(&mut MadHeader::new_unchecked(&mut out[..]));
    // o14-1: the trap's M_Key is 0 (already zero).
    notice.emit(&mut Notice::new_unchecked(data_mut(&mut out)));
    Trap { mad: out }
}

pub(crate) fn process(
    p: &mut MadPort,
    now: Nanos,
    counters: &Counters,
    mad_flags: u32,
    port: u8,
    wc: Option<&Wc>,
    out: &mut Mad,
) -> MadResult {
    let h = MadHeader::new_unchecked(&out[..]);
    let (m, attr_id, attr_mod) = (h.method(), h.attribute_id(), h.attribute_modifier());
    if check_mkey(p, now, mad_flags, wc, out) {
        // qib and hfi1 `process_subn` answer an M_Key violation with
        // IB_MAD_RESULT_FAILURE (not CONSUMED): the GSI then neither replies nor
        // generates the 0x000C answer, and the local DR path fails the send.
        return MadResult::FAILURE;
    }
    match m {
        method::GET => match attr_id {
            sm_attr::NODE_DESC => get_node_desc(p, attr_mod, out),
            sm_attr::NODE_INFO => get_node_info(p, port, attr_mod, out),
            sm_attr::GUID_INFO => get_guid_info(p, attr_mod, out),
            sm_attr::PORT_INFO => get_port_info(p, counters, port, attr_mod, out),
            sm_attr::PKEY_TABLE => get_pkey_table(attr_mod, out),
            _ => reply_status(out, status::METHOD_ATTR_UNSUPPORTED),
        },
        method::SET => match attr_id {
            sm_attr::PORT_INFO => set_port_info(p, counters, port, attr_mod, out),
            sm_attr::GUID_INFO => set_guid_info(p, attr_mod, out),
            _ => reply_status(out, status::METHOD_ATTR_UNSUPPORTED),
        },
        // One trap per violation is all the port sends, so a repress needs no action
        // (qib `subn_trap_repress`).
        method::TRAP_REPRESS if attr_id == sm_attr::NOTICE => {
            MadResult::SUCCESS | MadResult::CONSUMED
        }
        method::TRAP_REPRESS => reply_status(out, status::METHOD_ATTR_UNSUPPORTED),
        // Responses and traps are for agents ("process it normally").
        method::GET_RESP | method::TRAP | method::REPORT | method::REPORT_RESP => {
            MadResult::SUCCESS
        }
        _ => reply_status(out, status::METHOD_UNSUPPORTED),
    }
}

fn get_node_desc(p: &MadPort, attr_mod: u32, out: &mut Mad) -> MadResult {
    let d = data_mut(out);
    d.fill(0);
    if attr_mod != 0 {
        return reply_status(out, status::INVALID_FIELD);
    }
    let desc = p.node.description.as_bytes();
    let n = desc.len().min(SMP_DATA_LEN);
    d[..n].copy_from_slice(&desc[..n]);
    reply(out)
}

fn get_node_info(p: &MadPort, port: u8, attr_mod: u32, out: &mut Mad) -> MadResult {
    data_mut(out).fill(0);
    if attr_mod != 0 || p.node.node_guid == 0 {
        // qib: "GUID 0 is illegal".
        return reply_status(out, status::INVALID_FIELD);
    }
    NodeInfoRepr {
        base_version: 1,
        class_version: 1,
        node_type: node_type::CA,
        num_ports: 1,
        system_image_guid: p.node.node_guid,
        node_guid: p.node.node_guid,
        port_guid: p.node.node_guid,
        partition_cap: 1,
        device_id: p.node.device_id,
        revision: p.node.revision,
        local_port_num: port,
        vendor_id: p.node.vendor_id & 0xff_ffff,
    }
    .emit(&mut NodeInfo::new_unchecked(data_mut(out)));
    reply(out)
}

fn get_guid_info(p: &MadPort, attr_mod: u32, out: &mut Mad) -> MadResult {
    let d = data_mut(out);
    d.fill(0);
    if attr_mod != 0 {
        return reply_status(out, status::INVALID_FIELD);
    }
    d[..8].copy_from_slice(&p.node.node_guid.to_be_bytes());
    for (i, g) in p.sma.guids.iter().enumerate() {
        d[8 + 8 * i..16 + 8 * i].copy_from_slice(&g.to_be_bytes());
    }
    reply(out)
}

fn set_guid_info(p: &mut MadPort, attr_mod: u32, out: &mut Mad) -> MadResult {
    if attr_mod != 0 {
        data_mut(out).fill(0);
        return reply_status(out, status::INVALID_FIELD);
    }
    // Entry 0 is the PortGUID, which is read-only (qib `subn_set_guidinfo`).
    let d = data_mut(out);
    for i in 0..EXTRA_GUIDS {
        let at = 8 + 8 * i;
        p.sma.guids[i] = u64::from_be_bytes(d[at..at + 8].try_into().unwrap_or([0; 8]));
    }
    get_guid_info(p, attr_mod, out)
}

fn get_pkey_table(attr_mod: u32, out: &mut Mad) -> MadResult {
    let d = data_mut(out);
    d.fill(0);
    // The block number is the low 16 bits; RoCE ports have the one default P_Key.
    if attr_mod & 0xffff != 0 {
        return reply_status(out, status::INVALID_FIELD);
    }
    debug_assert_eq!(PKEYS_PER_BLOCK * 2, SMP_DATA_LEN);
    d[..2].copy_from_slice(&0xffffu16.to_be_bytes());
    reply(out)
}

fn port_ok(port: u8, attr_mod: u32) -> bool {
    attr_mod == 0 || attr_mod == u32::from(port)
}

fn get_port_info(
    p: &MadPort,
    counters: &Counters,
    port: u8,
    attr_mod: u32,
    out: &mut Mad,
) -> MadResult {
    let key = smp_m_key(out);
    let is_get = out[3] == method::GET;
    data_mut(out).fill(0);
    if !port_ok(port, attr_mod) {
        return reply_status(out, status::INVALID_FIELD);
    }
    let s = &p.sma;
    let sat16 = |v: u64| v.min(0xffff) as u16;
    // Protect level 1 hides the key from a Get with the wrong one (qib
    // `subn_get_portinfo`).
    let hide = is_get && s.m_key != key && s.protect_bits == 1;
    PortInfoRepr {
        m_key: if hide { 0 } else { s.m_key },
        gid_prefix: s.gid_prefix,
        lid: s.lid,
        master_sm_lid: s.sm_lid,
        capability_mask: PORT_CAPABILITIES,
        diag_code: 0,
        m_key_lease_period: s.lease_period,
        local_port_num: port,
        link_width_enabled: 1,
        link_width_supported: 1,
        link_width_active: 1,
        link_speed_supported: 1,
        port_state: 4,
        port_phys_state: 5,
        link_down_default_state: 2,
        m_key_protect_bits: s.protect_bits,
        lmc: s.lmc,
        link_speed_active: 1,
        link_speed_enabled: 1,
        neighbor_mtu: s.mtu_code,
        master_sm_sl: 0,
        vl_cap: 1,
        init_type: 0,
        vl_high_limit: 0,
        vl_arb_high_cap: 0,
        vl_arb_low_cap: 0,
        init_type_reply: 0,
        mtu_cap: s.mtu_code,
        vl_stall_count: 0,
        hoq_life: 0,
        operational_vls: 1,
        enforcement_flags: 0,
        m_key_violations: s.m_key_violations,
        p_key_violations: sat16(counters.rx_bad_pkey.saturating_sub(s.pkey_base)),
        q_key_violations: sat16(counters.rx_bad_qkey.saturating_sub(s.qkey_base)),
        guid_cap: GUIDS_PER_BLOCK as u8,
        client_reregister: false,
        mcast_pkey_trap_suppression: 0,
        subnet_timeout: s.subnet_timeout,
        resp_time_value: 18,
        local_phy_errors: 0,
        overrun_errors: 0,
        max_credit_hint: 0,
        link_round_trip_latency: 0,
    }
    .emit(&mut PortInfo::new_unchecked(data_mut(out)));
    reply(out)
}

/// Set(PortInfo): the writable fields of a CA port (IBTA 14.2.5.6; kernel qib
/// `subn_set_portinfo`): M_Key, GidPrefix, LID, MasterSMLID, M_KeyLeasePeriod,
/// M_KeyProtectBits, LMC, SubnetTimeOut; a violation counter written as 0 is reset.
/// The link is always up on the soft device, so PortState must be 0 (no change) or 4
/// (Active); anything else is an invalid field and nothing is applied.
fn set_port_info(
    p: &mut MadPort,
    counters: &Counters,
    port: u8,
    attr_mod: u32,
    out: &mut Mad,
) -> MadResult {
    if !port_ok(port, attr_mod) {
        data_mut(out).fill(0);
        return reply_status(out, status::INVALID_FIELD);
    }
    let view = PortInfo::new_unchecked(&out[SMP_DATA_OFFSET..SMP_DATA_OFFSET + SMP_DATA_LEN]);
    let Ok(pi) = PortInfoRepr::parse(&view) else {
        return reply_status(out, status::INVALID_FIELD);
    };
    if !matches!(pi.port_state, 0 | 4) {
        get_port_info(p, counters, port, attr_mod, out);
        return reply_status(out, status::INVALID_FIELD);
    }
    let s = &mut p.sma;
    s.m_key = pi.m_key;
    s.gid_prefix = pi.gid_prefix;
    s.lid = pi.lid;
    s.sm_lid = pi.master_sm_lid;
    s.lease_period = pi.m_key_lease_period;
    s.protect_bits = pi.m_key_protect_bits;
    s.lmc = pi.lmc;
    s.subnet_timeout = pi.subnet_timeout;
    if pi.m_key_violations == 0 {
        s.m_key_violations = 0;
    }
    if pi.p_key_violations == 0 {
        s.pkey_base = counters.rx_bad_pkey;
    }
    if pi.q_key_violations == 0 {
        s.qkey_base = counters.rx_bad_qkey;
    }
    get_port_info(p, counters, port, attr_mod, out)
}
