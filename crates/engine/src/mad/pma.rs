//! The performance management agent (class 0x04; IBTA 16.1; kernel qib/hfi1
//! `process_perf`): ClassPortInfo, PortCounters and PortCountersExtended over the
//! engine's traffic and error [`Counters`].
//!
//! Counter mapping (the soft port has no physical layer, so link/symbol counters are
//! 0): PortXmitData / PortRcvData = bytes / 4 of the RoCE transport packets (BTH to
//! ICRC), PortXmitPkts / PortRcvPkts = packets, PortRcvErrors = bad ICRC + malformed
//! packets, PortXmitDiscards = 0 (the soft port never discards on transmit),
//! QP1Dropped = GSI MADs dropped. Every packet is unicast.

use super::{reply, reply_status, Mad, MadPort, MadResult};
use crate::counters::Counters;
use rverbs_wire::mad::pma::{
    capability, counter_select as sel, ClassPortInfo, ClassPortInfoRepr, PortCounters,
    PortCountersExtended, PortCountersExtendedRepr, PortCountersRepr, GS_DATA_LEN, GS_DATA_OFFSET,
};
use rverbs_wire::mad::{attr, method, status, MadHeader};

/// PortSelect meaning "all ports" (perfquery `ALL_PORTS`). Accepted because
/// ClassPortInfo advertises AllPortSelect (bit 8), which is what perfquery checks
/// before sending it; qib advertises no AllPortSelect and answers any PortSelect other
/// than its port with 0x001C (`pma_get_portcounters_ext`).
pub const ALL_PORTS: u8 = 0xFF;

/// The PMA ClassPortInfo CapabilityMask: AllPortSelect, 64-bit PortCountersExtended
/// (IETF-style and NOIETF), and IsQP1DropSupported (PortCounters carries QP1Dropped),
/// as perfquery checks them (`infiniband-diags/perfquery.c`: without bit 15 its `-R`
/// never selects QP1Dropped for clearing).
pub const CAPABILITY_MASK: u16 = capability::PM_ALL_PORT_SELECT
    | capability::PM_EXT_WIDTH_SUPPORTED
    | capability::PM_EXT_WIDTH_NOIETF_SUP
    | capability::PM_IS_QP1_DROP_SUP;

/// PortCounters CounterSelect2 bits (byte 18): perfquery's reset mask bits 16 and 17
/// (`infiniband-diags/perfquery.c` "reset portxmitwait" / "reset qp1dropped", shifted
/// into CounterSelect2 by libibmad `performance_reset_via`).
pub mod select2 {
    /// PortXmitWait.
    pub const PORT_XMIT_WAIT: u8 = 1 << 0;
    /// QP1Dropped.
    pub const QP1_DROPPED: u8 = 1 << 1;
}

/// PortCountersExtended CounterSelect2 bits (bytes 4-7, libibmad
/// `IB_PC_EXT_COUNTER_SELECT2_F`): the 64-bit error counters in field order, as
/// perfquery `-x -R` sets them (`mask |= 0xfff0000`, bit 28 PortXmitWait, bit 29
/// QP1Dropped, shifted down 16 by `performance_reset_via`).
pub mod ext_select2 {
    /// PortRcvErrors (the fourth error counter, as CounterSelect bit 3 in PortCounters).
    pub const PORT_RCV_ERRORS: u32 = 1 << 3;
    /// PortXmitWait.
    pub const PORT_XMIT_WAIT: u32 = 1 << 12;
    /// QP1Dropped.
    pub const QP1_DROPPED: u32 = 1 << 13;
}

/// CapabilityMask2: the additional (error) counters of PortCountersExtended are filled.
pub const CAPABILITY_MASK2: u32 = capability::PM2_IS_ADDL_PORT_CTRS_EXT_SUP;

/// PortCountersExtended CounterSelect bits (IBTA 16.1.4.11; kernel `ib_pma.h`
/// `IB_PMA_SELX_*`).
pub mod ext_select {
    /// PortXmitData.
    pub const PORT_XMIT_DATA: u16 = 1 << 0;
    /// PortRcvData.
    pub const PORT_RCV_DATA: u16 = 1 << 1;
    /// PortXmitPkts.
    pub const PORT_XMIT_PKTS: u16 = 1 << 2;
    /// PortRcvPkts.
    pub const PORT_RCV_PKTS: u16 = 1 << 3;
    /// PortUnicastXmitPkts.
    pub const PORT_UNI_XMIT_PKTS: u16 = 1 << 4;
    /// PortUnicastRcvPkts.
    pub const PORT_UNI_RCV_PKTS: u16 = 1 << 5;
    /// PortMulticastXmitPkts.
    pub const PORT_MULTI_XMIT_PKTS: u16 = 1 << 6;
    /// PortMulticastRcvPkts.
    pub const PORT_MULTI_RCV_PKTS: u16 = 1 << 7;
}

/// The PMA's view of the counters: raw values minus what a Set cleared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortTotals {
    /// Bytes sent.
    pub xmit_bytes: u64,
    /// Bytes received.
    pub rcv_bytes: u64,
    /// Packets sent.
    pub xmit_pkts: u64,
    /// Packets received.
    pub rcv_pkts: u64,
    /// Unicast packets sent (every packet; cleared on its own).
    pub uni_xmit_pkts: u64,
    /// Unicast packets received (every packet; cleared on its own).
    pub uni_rcv_pkts: u64,
    /// Receive errors.
    pub rcv_errors: u64,
    /// QP1 MADs dropped.
    pub qp1_dropped: u64,
}

impl PortTotals {
    fn raw(c: &Counters, qp1_dropped: u64) -> Self {
        PortTotals {
            xmit_bytes: c.tx_bytes,
            rcv_bytes: c.rx_bytes,
            xmit_pkts: c.tx_packets,
            rcv_pkts: c.rx_packets,
            uni_xmit_pkts: c.tx_packets,
            uni_rcv_pkts: c.rx_packets,
            rcv_errors: c.rx_icrc_errors + c.rx_malformed,
            qp1_dropped,
        }
    }
}

/// Baselines: a Set(PortCounters) with a CounterSelect bit records the current raw
/// value, and reads report the difference (kernel qib keeps `z_*` the same way).
#[derive(Debug, Clone, Default)]
pub(crate) struct PmaState {
    base: PortTotals,
}

impl MadPort {
    /// The PMA counters as PortCountersExtended reports them (after resets).
    pub fn pma_totals(&self, counters: &Counters) -> PortTotals {
        let raw = PortTotals::raw(counters, self.stats.gsi_dropped);
        let b = &self.pma.base;
        PortTotals {
            xmit_bytes: raw.xmit_bytes.saturating_sub(b.xmit_bytes),
            rcv_bytes: raw.rcv_bytes.saturating_sub(b.rcv_bytes),
            xmit_pkts: raw.xmit_pkts.saturating_sub(b.xmit_pkts),
            rcv_pkts: raw.rcv_pkts.saturating_sub(b.rcv_pkts),
            uni_xmit_pkts: raw.uni_xmit_pkts.saturating_sub(b.uni_xmit_pkts),
            uni_rcv_pkts: raw.uni_rcv_pkts.saturating_sub(b.uni_rcv_pkts),
            rcv_errors: raw.rcv_errors.saturating_sub(b.rcv_errors),
            qp1_dropped: raw.qp1_dropped.saturating_sub(b.qp1_dropped),
        }
    }
}

fn data_mut(mad: &mut Mad) -> &mut [u8] {
    &mut mad[GS_DATA_OFFSET..GS_DATA_OFFSET + GS_DATA_LEN]
}

pub(crate) fn process(p: &mut MadPort, counters: &Counters, port: u8, out: &mut Mad) -> MadResult {
    let h = MadHeader::new_unchecked(&out[..]);
    let (m, attr_id, attr_mod) = (h.method(), h.attribute_id(), h.attribute_modifier());
    match m {
        method::GET => match attr_id {
            attr::CLASS_PORT_INFO => get_class_port_info(attr_mod, out),
            attr::PMA_PORT_COUNTERS => get_port_counters(p, counters, port, attr_mod, out),
            attr::PMA_PORT_COUNTERS_EXT => get_port_counters_ext(p, counters, port, attr_mod, out),
            _ => reply_status(out, status::METHOD_ATTR_UNSUPPORTED),
        },
        method::SET => match attr_id {
            attr::PMA_PORT_COUNTERS => set_port_counters(p, counters, port, attr_mod, out),
            attr::PMA_PORT_COUNTERS_EXT => set_port_counters_ext(p, counters, port, attr_mod, out),
            _ => reply_status(out, status::METHOD_ATTR_UNSUPPORTED),
        },
        method::GET_RESP | method::TRAP | method::REPORT | method::REPORT_RESP => {
            MadResult::SUCCESS
        }
        _ => reply_status(out, status::METHOD_UNSUPPORTED),
    }
}

fn get_class_port_info(attr_mod: u32, out: &mut Mad) -> MadResult {
    data_mut(out).fill(0);
    if attr_mod != 0 {
        return reply_status(out, status::INVALID_FIELD);
    }
    ClassPortInfoRepr {
        base_version: 1,
        class_version: 1,
        capability_mask: CAPABILITY_MASK,
        capability_mask2: CAPABILITY_MASK2,
        // qib: 2^18 * 4.096 us, about 1 s.
        resp_time_value: 18,
        ..zero_cpi()
    }
    .emit(&mut ClassPortInfo::new_unchecked(data_mut(out)));
    reply(out)
}

pub(crate) fn zero_cpi() -> ClassPortInfoRepr {
    ClassPortInfoRepr::parse(&ClassPortInfo::new_unchecked(&[0u8; 72][..]))
        .unwrap_or_else(|_| unreachable!("72 bytes is a whole ClassPortInfo"))
}

/// PortSelect must name this port (or all ports, see [`ALL_PORTS`]), and the modifier
/// must be 0 (qib `pma_get_portcounters_ext`; IBTA 16.1.3.5).
fn port_select_ok(data: &[u8], port: u8, attr_mod: u32) -> bool {
    let ps = data[1];
    attr_mod == 0 && (ps == port || ps == ALL_PORTS)
}

fn sat(v: u64, max: u64) -> u64 {
    v.min(max)
}

fn get_port_counters(
    p: &MadPort,
    counters: &Counters,
    port: u8,
    attr_mod: u32,
    out: &mut Mad,
) -> MadResult {
    let ok = port_select_ok(data_mut(out), port, attr_mod);
    let ps = data_mut(out)[1];
    let cs = u16::from_be_bytes([data_mut(out)[2], data_mut(out)[3]]);
    data_mut(out).fill(0);
    if !ok {
        data_mut(out)[1] = ps;
        return reply_status(out, status::INVALID_FIELD);
    }
    let t = p.pma_totals(counters);
    PortCountersRepr {
        port_select: ps,
        counter_select: cs,
        symbol_error_counter: 0,
        link_error_recovery_counter: 0,
        link_downed_counter: 0,
        port_rcv_errors: sat(t.rcv_errors, 0xffff) as u16,
        port_rcv_remote_physical_errors: 0,
        port_rcv_switch_relay_errors: 0,
        port_xmit_discards: 0,
        port_xmit_constraint_errors: 0,
        port_rcv_constraint_errors: 0,
        counter_select2: 0,
        local_link_integrity_errors: 0,
        excessive_buffer_overrun_errors: 0,
        qp1_dropped: sat(t.qp1_dropped, 0xffff) as u16,
        vl15_dropped: 0,
        port_xmit_data: sat(t.xmit_bytes / 4, 0xffff_ffff) as u32,
        port_rcv_data: sat(t.rcv_bytes / 4, 0xffff_ffff) as u32,
        port_xmit_pkts: sat(t.xmit_pkts, 0xffff_ffff) as u32,
        port_rcv_pkts: sat(t.rcv_pkts, 0xffff_ffff) as u32,
        port_xmit_wait: 0,
    }
    .emit(&mut PortCounters::new_unchecked(data_mut(out)));
    reply(out)
}

fn get_port_counters_ext(
    p: &MadPort,
    counters: &Counters,
    port: u8,
    attr_mod: u32,
    out: &mut Mad,
) -> MadResult {
    let ok = port_select_ok(data_mut(out), port, attr_mod);
    let ps = data_mut(out)[1];
    let cs = u16::from_be_bytes([data_mut(out)[2], data_mut(out)[3]]);
    data_mut(out).fill(0);
    if !ok {
        data_mut(out)[1] = ps;
        return reply_status(out, status::INVALID_FIELD);
    }
    let t = p.pma_totals(counters);
    let mut r = PortCountersExtendedRepr::parse(&PortCountersExtended::new_unchecked(
        &[0u8; GS_DATA_LEN][..],
    ))
    .unwrap_or_else(|_| unreachable!("a whole data area"));
    r.port_select = ps;
    r.counter_select = cs;
    r.port_xmit_data = t.xmit_bytes / 4;
    r.port_rcv_data = t.rcv_bytes / 4;
    r.port_xmit_pkts = t.xmit_pkts;
    r.port_rcv_pkts = t.rcv_pkts;
    r.port_unicast_xmit_pkts = t.uni_xmit_pkts;
    r.port_unicast_rcv_pkts = t.uni_rcv_pkts;
    r.port_rcv_errors = t.rcv_errors;
    r.qp1_dropped = t.qp1_dropped;
    r.emit(&mut PortCountersExtended::new_unchecked(data_mut(out)));
    reply(out)
}

/// Set(PortCounters): each CounterSelect bit clears its counter, then the response is
/// the Get (kernel qib `pma_set_portcounters`).
fn set_port_counters(
    p: &mut MadPort,
    counters: &Counters,
    port: u8,
    attr_mod: u32,
    out: &mut Mad,
) -> MadResult {
    if port_select_ok(data_mut(out), port, attr_mod) {
        let cs = u16::from_be_bytes([data_mut(out)[2], data_mut(out)[3]]);
        let cs2 = data_mut(out)[18];
        let raw = PortTotals::raw(counters, p.stats.gsi_dropped);
        let b = &mut p.pma.base;
        if cs & sel::PORT_RCV_ERRORS != 0 {
            b.rcv_errors = raw.rcv_errors;
        }
        if cs & sel::PORT_XMIT_DATA != 0 {
            b.xmit_bytes = raw.xmit_bytes;
        }
        if cs & sel::PORT_RCV_DATA != 0 {
            b.rcv_bytes = raw.rcv_bytes;
        }
        if cs & sel::PORT_XMIT_PKTS != 0 {
            b.xmit_pkts = raw.xmit_pkts;
        }
        if cs & sel::PORT_RCV_PKTS != 0 {
            b.rcv_pkts = raw.rcv_pkts;
        }
        // QP1Dropped has no CounterSelect bit: CounterSelect2 bit 1 selects it (bit 0
        // is PortXmitWait, always 0 here).
        if cs2 & select2::QP1_DROPPED != 0 {
            b.qp1_dropped = raw.qp1_dropped;
        }
    }
    get_port_counters(p, counters, port, attr_mod, out)
}

/// Set(PortCountersExtended): the same for the 64-bit counters (qib
/// `pma_set_portcounters_ext`); each counter has its own baseline, so a bit clears
/// only its counter. CounterSelect2 clears the 64-bit error counters the port
/// reports (PortRcvErrors, QP1Dropped).
fn set_port_counters_ext(
    p: &mut MadPort,
    counters: &Counters,
    port: u8,
    attr_mod: u32,
    out: &mut Mad,
) -> MadResult {
    if port_select_ok(data_mut(out), port, attr_mod) {
        let d = data_mut(out);
        let cs = u16::from_be_bytes([d[2], d[3]]);
        let cs2 = u32::from_be_bytes([d[4], d[5], d[6], d[7]]);
        let raw = PortTotals::raw(counters, p.stats.gsi_dropped);
        let b = &mut p.pma.base;
        if cs & ext_select::PORT_XMIT_DATA != 0 {
            b.xmit_bytes = raw.xmit_bytes;
        }
        if cs & ext_select::PORT_RCV_DATA != 0 {
            b.rcv_bytes = raw.rcv_bytes;
        }
        if cs & ext_select::PORT_XMIT_PKTS != 0 {
            b.xmit_pkts = raw.xmit_pkts;
        }
        if cs & ext_select::PORT_RCV_PKTS != 0 {
            b.rcv_pkts = raw.rcv_pkts;
        }
        if cs & ext_select::PORT_UNI_XMIT_PKTS != 0 {
            b.uni_xmit_pkts = raw.uni_xmit_pkts;
        }
        if cs & ext_select::PORT_UNI_RCV_PKTS != 0 {
            b.uni_rcv_pkts = raw.uni_rcv_pkts;
        }
        if cs2 & ext_select2::PORT_RCV_ERRORS != 0 {
            b.rcv_errors = raw.rcv_errors;
        }
        if cs2 & ext_select2::QP1_DROPPED != 0 {
            b.qp1_dropped = raw.qp1_dropped;
        }
    }
    get_port_counters_ext(p, counters, port, attr_mod, out)
}
