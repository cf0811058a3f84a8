//! Performance management (class 0x04) and the GS `ClassPortInfo` attribute.
//!
//! A PMA MAD is the common header, 40 reserved bytes and a 192-byte data area at
//! offset 64 (IBTA 16.1; kernel `include/rdma/ib_pma.h` `struct ib_pma_mad`).
//! Attribute layouts follow rdma-core `libibmad/fields.c` (`IB_CPI_*`, `IB_PC_*`,
//! `IB_PC_EXT_*`), whose bit offsets are IBTA's, counted from the start of the data
//! area; the same layouts are in kernel `ib_pma.h`.

use super::{check_class, class, layout, MadHeaderRepr, MAD_LEN};
use crate::Result;

/// Offset of the data area inside a PMA (and any other GS) MAD.
pub const GS_DATA_OFFSET: usize = 64;
/// Size of that data area.
pub const GS_DATA_LEN: usize = 192;

fn check_perf(r: &PerfMadRepr) -> Result<()> {
    check_class(
        &r.header,
        class::PERF_MGMT,
        "MAD class is not performance management (0x04)",
    )
}

layout! {
    /// A performance management MAD, over a whole 256-byte MAD.
    view PerfMad;
    /// A performance management MAD, owned: header and raw data area. Parse the data
    /// with the attribute view its `attribute_id` names.
    repr PerfMadRepr;
    len MAD_LEN; what "performance management MAD";
    check check_perf;
    fields {
        /// The common header.
        header / set_header: MadHeaderRepr = (0, 0, 192);
        /// The 192-byte data area (bytes 64-255); bytes 24-63 are reserved.
        data / set_data: [u8; GS_DATA_LEN] = (64, 0, 1536);
    }
}

impl<T: AsRef<[u8]>> PerfMad<T> {
    /// The data area, borrowed, for an attribute view.
    pub fn data_ref(&self) -> &[u8] {
        &self.buffer.as_ref()[GS_DATA_OFFSET..GS_DATA_OFFSET + GS_DATA_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PerfMad<T> {
    /// The data area, mutably borrowed.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[GS_DATA_OFFSET..GS_DATA_OFFSET + GS_DATA_LEN]
    }
}

/// ClassPortInfo `CapabilityMask` bits.
///
/// Bits 0-7 are common to all GS classes (IBTA 13.4.8.1); bits 8-15 are class
/// specific: the PMA ones are from rdma-core `libibmad/iba_types.h` `IB_PM_*` (the
/// ones perfquery tests) and kernel `ib_pma.h` `IB_PMA_CLASS_CAP_*`; the BM ones are
/// in `bm::capability` (the BM module builds on this one).
pub mod capability {
    /// The class agent can generate traps (opensm / libibmad `ib_types.h`
    /// `IB_CLASS_CAP_TRAP`).
    pub const IS_TRAP_SUPPORTED: u16 = 1 << 0;
    /// The class agent supports Get/Set of Notice (opensm `IB_CLASS_CAP_GETSET`).
    pub const IS_NOTICE_GET_SET_SUPPORTED: u16 = 1 << 1;
    /// CapabilityMask2 is meaningful (opensm `IB_CLASS_CAP_CAPMASK2`).
    pub const IS_CAPABILITY_MASK2_SUPPORTED: u16 = 1 << 2;
    /// PMA: PortSelect 0xFF (all ports) is supported (`IB_PM_ALL_PORT_SELECT`).
    pub const PM_ALL_PORT_SELECT: u16 = 1 << 8;
    /// PMA: PortCountersExtended with all eight counters (`IB_PM_EXT_WIDTH_SUPPORTED`).
    pub const PM_EXT_WIDTH_SUPPORTED: u16 = 1 << 9;
    /// PMA: PortCountersExtended without the unicast/multicast counters
    /// (`IB_PM_EXT_WIDTH_NOIETF_SUP`).
    pub const PM_EXT_WIDTH_NOIETF_SUP: u16 = 1 << 10;
    /// PMA: sampling-only PortSamplesControl (`IB_PM_SAMPLES_ONLY_SUP`).
    pub const PM_SAMPLES_ONLY_SUP: u16 = 1 << 11;
    /// PMA: PortCounters carries PortXmitWait (`IB_PM_PC_XMIT_WAIT_SUP`).
    pub const PM_PC_XMIT_WAIT_SUP: u16 = 1 << 12;
    /// PMA: PortCounters carries QP1Dropped (`IB_PM_IS_QP1_DROP_SUP`).
    pub const PM_IS_QP1_DROP_SUP: u16 = 1 << 15;
    /// PMA CapabilityMask2: PM_Key is supported (`IB_PM_IS_PM_KEY_SUPPORTED`).
    pub const PM2_IS_PM_KEY_SUPPORTED: u32 = 1 << 0;
    /// PMA CapabilityMask2: PortCountersExtended carries the 64-bit error counters
    /// (`IB_PM_IS_ADDL_PORT_CTRS_EXT_SUP`).
    pub const PM2_IS_ADDL_PORT_CTRS_EXT_SUP: u32 = 1 << 1;
}

layout! {
    /// The ClassPortInfo attribute (attribute 0x0001 of every GS class; IBTA 13.4.8.1,
    /// libibmad `IB_CPI_*_F`), over a data area. Used by the PMA, the BM, the CM and
    /// the SA alike.
    view ClassPortInfo;
    /// The ClassPortInfo attribute, owned.
    repr ClassPortInfoRepr;
    len 72; what "ClassPortInfo";
    fields {
        /// BaseVersion (bits 0-7).
        base_version / set_base_version: u8 = (0, 0, 8);
        /// ClassVersion (bits 8-15).
        class_version / set_class_version: u8 = (1, 0, 8);
        /// CapabilityMask (bits 16-31), see [`capability`].
        capability_mask / set_capability_mask: u16 = (2, 0, 16);
        /// CapabilityMask2 (27 bits from bit 32).
        capability_mask2 / set_capability_mask2: u32 = (4, 0, 27);
        /// RespTimeValue (5 bits from bit 59).
        resp_time_value / set_resp_time_value: u8 = (7, 3, 5);
        /// RedirectGID (bits 64-191).
        redirect_gid / set_redirect_gid: [u8; 16] = (8, 0, 128);
        /// RedirectTC (bits 192-199).
        redirect_tc / set_redirect_tc: u8 = (24, 0, 8);
        /// RedirectSL (4 bits from bit 200).
        redirect_sl / set_redirect_sl: u8 = (25, 0, 4);
        /// RedirectFL (20 bits from bit 204).
        redirect_fl / set_redirect_fl: u32 = (25, 4, 20);
        /// RedirectLID (bits 224-239).
        redirect_lid / set_redirect_lid: u16 = (28, 0, 16);
        /// RedirectP_Key (bits 240-255).
        redirect_p_key / set_redirect_p_key: u16 = (30, 0, 16);
        /// RedirectQP (24 bits from bit 264; bits 256-263 reserved).
        redirect_qp / set_redirect_qp: u32 = (33, 0, 24);
        /// RedirectQ_Key (bits 288-319).
        redirect_q_key / set_redirect_q_key: u32 = (36, 0, 32);
        /// TrapGID (bits 320-447).
        trap_gid / set_trap_gid: [u8; 16] = (40, 0, 128);
        /// TrapTC (bits 448-455).
        trap_tc / set_trap_tc: u8 = (56, 0, 8);
        /// TrapSL (4 bits from bit 456).
        trap_sl / set_trap_sl: u8 = (57, 0, 4);
        /// TrapFL (20 bits from bit 460).
        trap_fl / set_trap_fl: u32 = (57, 4, 20);
        /// TrapLID (bits 480-495).
        trap_lid / set_trap_lid: u16 = (60, 0, 16);
        /// TrapP_Key (bits 496-511).
        trap_p_key / set_trap_p_key: u16 = (62, 0, 16);
        /// TrapHL, the hop limit for traps (bits 512-519).
        trap_hl / set_trap_hl: u8 = (64, 0, 8);
        /// TrapQP (24 bits from bit 520).
        trap_qp / set_trap_qp: u32 = (65, 0, 24);
        /// TrapQ_Key (bits 544-575).
        trap_q_key / set_trap_q_key: u32 = (68, 0, 32);
    }
}

/// PortCounters CounterSelect bits (kernel `ib_pma.h` `IB_PMA_SEL_*`): a Set clears
/// the counters whose bit is set.
pub mod counter_select {
    /// SymbolErrorCounter.
    pub const SYMBOL_ERROR: u16 = 0x0001;
    /// LinkErrorRecoveryCounter.
    pub const LINK_ERROR_RECOVERY: u16 = 0x0002;
    /// LinkDownedCounter.
    pub const LINK_DOWNED: u16 = 0x0004;
    /// PortRcvErrors.
    pub const PORT_RCV_ERRORS: u16 = 0x0008;
    /// PortRcvRemotePhysicalErrors.
    pub const PORT_RCV_REMOTE_PHYSICAL_ERRORS: u16 = 0x0010;
    /// PortRcvSwitchRelayErrors.
    pub const PORT_RCV_SWITCH_RELAY_ERRORS: u16 = 0x0020;
    /// PortXmitDiscards.
    pub const PORT_XMIT_DISCARDS: u16 = 0x0040;
    /// PortXmitConstraintErrors.
    pub const PORT_XMIT_CONSTRAINT_ERRORS: u16 = 0x0080;
    /// PortRcvConstraintErrors.
    pub const PORT_RCV_CONSTRAINT_ERRORS: u16 = 0x0100;
    /// LocalLinkIntegrityErrors.
    pub const LOCAL_LINK_INTEGRITY_ERRORS: u16 = 0x0200;
    /// ExcessiveBufferOverrunErrors.
    pub const EXCESSIVE_BUFFER_OVERRUN_ERRORS: u16 = 0x0400;
    /// VL15Dropped.
    pub const VL15_DROPPED: u16 = 0x0800;
    /// PortXmitData.
    pub const PORT_XMIT_DATA: u16 = 0x1000;
    /// PortRcvData.
    pub const PORT_RCV_DATA: u16 = 0x2000;
    /// PortXmitPkts.
    pub const PORT_XMIT_PKTS: u16 = 0x4000;
    /// PortRcvPkts.
    pub const PORT_RCV_PKTS: u16 = 0x8000;
}

layout! {
    /// The PortCounters attribute (0x0012; IBTA 16.1, libibmad `IB_PC_*_F`,
    /// kernel `struct ib_pma_portcounters`), over a PMA data area.
    ///
    /// Counter widths are part of the table ([`PortCountersRepr::FIELDS`]) so the
    /// layer that fills them can saturate at the right maximum: the 4-bit
    /// LocalLinkIntegrityErrors and ExcessiveBufferOverrunErrors, the 8-bit and 16-bit
    /// error counters, and the 32-bit data/packet counters.
    view PortCounters;
    /// The PortCounters attribute, owned.
    repr PortCountersRepr;
    len 44; what "PortCounters";
    fields {
        /// PortSelect (bits 8-15; bits 0-7 reserved).
        port_select / set_port_select: u8 = (1, 0, 8);
        /// CounterSelect (bits 16-31), see [`counter_select`].
        counter_select / set_counter_select: u16 = (2, 0, 16);
        /// SymbolErrorCounter, 16 bits.
        symbol_error_counter / set_symbol_error_counter: u16 = (4, 0, 16);
        /// LinkErrorRecoveryCounter, 8 bits.
        link_error_recovery_counter / set_link_error_recovery_counter: u8 = (6, 0, 8);
        /// LinkDownedCounter, 8 bits.
        link_downed_counter / set_link_downed_counter: u8 = (7, 0, 8);
        /// PortRcvErrors, 16 bits.
        port_rcv_errors / set_port_rcv_errors: u16 = (8, 0, 16);
        /// PortRcvRemotePhysicalErrors, 16 bits.
        port_rcv_remote_physical_errors / set_port_rcv_remote_physical_errors: u16 = (10, 0, 16);
        /// PortRcvSwitchRelayErrors, 16 bits.
        port_rcv_switch_relay_errors / set_port_rcv_switch_relay_errors: u16 = (12, 0, 16);
        /// PortXmitDiscards, 16 bits.
        port_xmit_discards / set_port_xmit_discards: u16 = (14, 0, 16);
        /// PortXmitConstraintErrors, 8 bits.
        port_xmit_constraint_errors / set_port_xmit_constraint_errors: u8 = (16, 0, 8);
        /// PortRcvConstraintErrors, 8 bits.
        port_rcv_constraint_errors / set_port_rcv_constraint_errors: u8 = (17, 0, 8);
        /// CounterSelect2 (bits 144-151; reserved in kernel `ib_pma.h`).
        counter_select2 / set_counter_select2: u8 = (18, 0, 8);
        /// LocalLinkIntegrityErrors, 4 bits (bits 152-155).
        local_link_integrity_errors / set_local_link_integrity_errors: u8 = (19, 0, 4);
        /// ExcessiveBufferOverrunErrors, 4 bits (bits 156-159).
        excessive_buffer_overrun_errors / set_excessive_buffer_overrun_errors: u8 = (19, 4, 4);
        /// QP1Dropped, 16 bits (bits 160-175, when `PM_IS_QP1_DROP_SUP`; libibmad
        /// `IB_PC_QP1_DROP_F`).
        qp1_dropped / set_qp1_dropped: u16 = (20, 0, 16);
        /// VL15Dropped, 16 bits.
        vl15_dropped / set_vl15_dropped: u16 = (22, 0, 16);
        /// PortXmitData, 32 bits, in units of 4 octets.
        port_xmit_data / set_port_xmit_data: u32 = (24, 0, 32);
        /// PortRcvData, 32 bits, in units of 4 octets.
        port_rcv_data / set_port_rcv_data: u32 = (28, 0, 32);
        /// PortXmitPkts, 32 bits.
        port_xmit_pkts / set_port_xmit_pkts: u32 = (32, 0, 32);
        /// PortRcvPkts, 32 bits.
        port_rcv_pkts / set_port_rcv_pkts: u32 = (36, 0, 32);
        /// PortXmitWait, 32 bits (when `PM_PC_XMIT_WAIT_SUP`).
        port_xmit_wait / set_port_xmit_wait: u32 = (40, 0, 32);
    }
}

layout! {
    /// The PortCountersExtended attribute (0x001D; IBTA 16.1, libibmad
    /// `IB_PC_EXT_*_F`, kernel `struct ib_pma_portcounters_ext`), over the whole
    /// 192-byte PMA data area. All counters are 64 bits; the error counters from
    /// byte 72 on are valid only when ClassPortInfo CapabilityMask2 has
    /// [`capability::PM2_IS_ADDL_PORT_CTRS_EXT_SUP`].
    view PortCountersExtended;
    /// The PortCountersExtended attribute, owned.
    repr PortCountersExtendedRepr;
    len GS_DATA_LEN; what "PortCountersExtended";
    fields {
        /// PortSelect (bits 8-15).
        port_select / set_port_select: u8 = (1, 0, 8);
        /// CounterSelect (bits 16-31).
        counter_select / set_counter_select: u16 = (2, 0, 16);
        /// CounterSelect2 (bits 32-63; reserved in kernel `ib_pma.h`).
        counter_select2 / set_counter_select2: u32 = (4, 0, 32);
        /// PortXmitData, in units of 4 octets.
        port_xmit_data / set_port_xmit_data: u64 = (8, 0, 64);
        /// PortRcvData, in units of 4 octets.
        port_rcv_data / set_port_rcv_data: u64 = (16, 0, 64);
        /// PortXmitPkts.
        port_xmit_pkts / set_port_xmit_pkts: u64 = (24, 0, 64);
        /// PortRcvPkts.
        port_rcv_pkts / set_port_rcv_pkts: u64 = (32, 0, 64);
        /// PortUnicastXmitPkts.
        port_unicast_xmit_pkts / set_port_unicast_xmit_pkts: u64 = (40, 0, 64);
        /// PortUnicastRcvPkts.
        port_unicast_rcv_pkts / set_port_unicast_rcv_pkts: u64 = (48, 0, 64);
        /// PortMulticastXmitPkts.
        port_multicast_xmit_pkts / set_port_multicast_xmit_pkts: u64 = (56, 0, 64);
        /// PortMulticastRcvPkts.
        port_multicast_rcv_pkts / set_port_multicast_rcv_pkts: u64 = (64, 0, 64);
        /// SymbolErrorCounter (bit 576).
        symbol_error_counter / set_symbol_error_counter: u64 = (72, 0, 64);
        /// LinkErrorRecoveryCounter.
        link_error_recovery_counter / set_link_error_recovery_counter: u64 = (80, 0, 64);
        /// LinkDownedCounter.
        link_downed_counter / set_link_downed_counter: u64 = (88, 0, 64);
        /// PortRcvErrors.
        port_rcv_errors / set_port_rcv_errors: u64 = (96, 0, 64);
        /// PortRcvRemotePhysicalErrors.
        port_rcv_remote_physical_errors / set_port_rcv_remote_physical_errors: u64 = (104, 0, 64);
        /// PortRcvSwitchRelayErrors.
        port_rcv_switch_relay_errors / set_port_rcv_switch_relay_errors: u64 = (112, 0, 64);
        /// PortXmitDiscards.
        port_xmit_discards / set_port_xmit_discards: u64 = (120, 0, 64);
        /// PortXmitConstraintErrors.
        port_xmit_constraint_errors / set_port_xmit_constraint_errors: u64 = (128, 0, 64);
        /// PortRcvConstraintErrors.
        port_rcv_constraint_errors / set_port_rcv_constraint_errors: u64 = (136, 0, 64);
        /// LocalLinkIntegrityErrors.
        local_link_integrity_errors / set_local_link_integrity_errors: u64 = (144, 0, 64);
        /// ExcessiveBufferOverrunErrors.
        excessive_buffer_overrun_errors / set_excessive_buffer_overrun_errors: u64 = (152, 0, 64);
        /// VL15Dropped.
        vl15_dropped / set_vl15_dropped: u64 = (160, 0, 64);
        /// PortXmitWait.
        port_xmit_wait / set_port_xmit_wait: u64 = (168, 0, 64);
        /// QP1Dropped (bits 1408-1471).
        qp1_dropped / set_qp1_dropped: u64 = (176, 0, 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::tests::layout_tests;
    use crate::mad::{attr, find_field, method, MadHeader};

    fn fix_perf(b: &mut [u8]) {
        b[0] = 1;
        b[1] = class::PERF_MGMT;
    }

    layout_tests!(perf_mad: PerfMad, PerfMadRepr, fixup = fix_perf);
    layout_tests!(class_port_info: ClassPortInfo, ClassPortInfoRepr);
    layout_tests!(port_counters: PortCounters, PortCountersRepr);
    layout_tests!(port_counters_ext: PortCountersExtended, PortCountersExtendedRepr);

    #[test]
    fn class_port_info_bytes_by_hand() {
        // libibmad/fields.c IB_CPI_*: BITSOFFS(32, 27) CapabilityMask2 and
        // BITSOFFS(59, 5) RespTimeVal share bytes 4-7; RedirectSL/FL share the word at
        // byte 24 with RedirectTC; RedirectQP is the low 24 bits of the word at 32;
        // TrapTC/SL/FL at 56; TrapHL/QP at 64; TrapQKey at 68.
        let mut b = [0u8; 72];
        b[0] = 1;
        b[1] = 1;
        b[2..4].copy_from_slice(&0x1601u16.to_be_bytes()); // ext width, noietf, xmit wait, trap
        b[4..8].copy_from_slice(&((0x2u32 << 5) | 18).to_be_bytes()); // cap2 bit 1, RTV 18
        b[8] = 0xfe;
        b[8 + 15] = 0x01; // RedirectGID
        b[24..28].copy_from_slice(&[0x12, 0x3A, 0xBC, 0xDE]); // TC 0x12, SL 3, FL 0xABCDE
        b[28..32].copy_from_slice(&[0x00, 0x05, 0xff, 0xff]); // LID 5, P_Key 0xffff
        b[32..36].copy_from_slice(&[0x00, 0x00, 0x00, 0x01]); // QP 1
        b[36..40].copy_from_slice(&0x8001_0000u32.to_be_bytes());
        b[56..60].copy_from_slice(&[0x00, 0xF0, 0x00, 0x01]); // TrapSL 15, TrapFL 1
        b[60..64].copy_from_slice(&[0x00, 0x01, 0x7f, 0xff]);
        b[64..68].copy_from_slice(&[0x40, 0x00, 0x00, 0x01]); // TrapHL 64, TrapQP 1
        b[68..72].copy_from_slice(&0x8001_0000u32.to_be_bytes());
        let r = ClassPortInfoRepr::parse(&ClassPortInfo::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            r.capability_mask,
            capability::PM_EXT_WIDTH_SUPPORTED
                | capability::PM_EXT_WIDTH_NOIETF_SUP
                | capability::PM_PC_XMIT_WAIT_SUP
                | capability::IS_TRAP_SUPPORTED
        );
        assert_eq!(
            r.capability_mask2,
            capability::PM2_IS_ADDL_PORT_CTRS_EXT_SUP
        );
        assert_eq!(r.resp_time_value, 18);
        assert_eq!((r.redirect_gid[0], r.redirect_gid[15]), (0xfe, 0x01));
        assert_eq!(
            (r.redirect_tc, r.redirect_sl, r.redirect_fl),
            (0x12, 3, 0xABCDE)
        );
        assert_eq!(
            (r.redirect_lid, r.redirect_p_key, r.redirect_qp),
            (5, 0xffff, 1)
        );
        assert_eq!(r.redirect_q_key, 0x8001_0000);
        assert_eq!((r.trap_tc, r.trap_sl, r.trap_fl), (0, 15, 1));
        assert_eq!(
            (r.trap_lid, r.trap_p_key, r.trap_hl, r.trap_qp),
            (1, 0x7fff, 64, 1)
        );
        assert_eq!(r.trap_q_key, 0x8001_0000);
        let mut out = [0u8; 72];
        r.emit(&mut ClassPortInfo::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn port_counters_bytes_by_hand() {
        // libibmad/fields.c IB_PC_*: e.g. BITSOFFS(152, 4) LocalLinkIntegrityErrors and
        // BITSOFFS(156, 4) ExcessiveBufferOverrunErrors share byte 19; VL15Dropped is
        // BITSOFFS(176, 16); PortXmitData starts at bit 192.
        let b: [u8; 44] = [
            0x00, 0x01, 0xf0, 0x00, // PortSelect 1, CounterSelect 0xf000
            0x12, 0x34, 0x05, 0x06, // SymbolError 0x1234, LinkErrorRecovery 5, LinkDowned 6
            0x00, 0x07, 0x00, 0x08, // PortRcvErrors 7, RemotePhysical 8
            0x00, 0x09, 0x00, 0x0a, // SwitchRelay 9, XmitDiscards 10
            0x0b, 0x0c, 0x00, 0xde, // XmitConstraint 11, RcvConstraint 12, LLI 0xd, EBO 0xe
            0x00, 0x0f, 0x00, 0x10, // QP1Dropped 15, VL15Dropped 16
            0x11, 0x11, 0x11, 0x11, // PortXmitData
            0x22, 0x22, 0x22, 0x22, // PortRcvData
            0x33, 0x33, 0x33, 0x33, // PortXmitPkts
            0x44, 0x44, 0x44, 0x44, // PortRcvPkts
            0xff, 0xff, 0xff, 0xfe, // PortXmitWait
        ];
        let r = PortCountersRepr::parse(&PortCounters::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!((r.port_select, r.counter_select), (1, 0xf000));
        assert_eq!(r.symbol_error_counter, 0x1234);
        assert_eq!(
            (r.link_error_recovery_counter, r.link_downed_counter),
            (5, 6)
        );
        assert_eq!(
            (r.port_rcv_errors, r.port_rcv_remote_physical_errors),
            (7, 8)
        );
        assert_eq!(
            (r.port_rcv_switch_relay_errors, r.port_xmit_discards),
            (9, 10)
        );
        assert_eq!(
            (r.port_xmit_constraint_errors, r.port_rcv_constraint_errors),
            (11, 12)
        );
        assert_eq!(r.local_link_integrity_errors, 0xd);
        assert_eq!(r.excessive_buffer_overrun_errors, 0xe);
        assert_eq!((r.qp1_dropped, r.vl15_dropped), (15, 16));
        assert_eq!(r.port_xmit_data, 0x1111_1111);
        assert_eq!(r.port_rcv_data, 0x2222_2222);
        assert_eq!(r.port_xmit_pkts, 0x3333_3333);
        assert_eq!(r.port_rcv_pkts, 0x4444_4444);
        assert_eq!(r.port_xmit_wait, 0xffff_fffe);
        let mut out = [0u8; 44];
        r.emit(&mut PortCounters::new_unchecked(&mut out[..]));
        assert_eq!(out, b);

        // Widths a saturating layer will read from the table.
        let width = |n| find_field(PortCountersRepr::FIELDS, n).unwrap().max_value();
        assert_eq!(width("local_link_integrity_errors"), 0xF);
        assert_eq!(width("excessive_buffer_overrun_errors"), 0xF);
        assert_eq!(width("link_downed_counter"), 0xFF);
        assert_eq!(width("symbol_error_counter"), 0xFFFF);
        assert_eq!(width("port_xmit_wait"), 0xFFFF_FFFF);
    }

    #[test]
    fn port_counters_extended_bytes_by_hand() {
        // libibmad/fields.c IB_PC_EXT_*: PortXmitData at bit 64, ..., the error
        // counters from bit 576 (byte 72) to QP1Dropped at bit 1408 (byte 176).
        let mut b = [0u8; GS_DATA_LEN];
        b[1] = 2;
        b[2..4].copy_from_slice(&0x00ffu16.to_be_bytes());
        for i in 0..22u64 {
            let at = 8 + 8 * i as usize;
            b[at..at + 8].copy_from_slice(&(0x0100_0000_0000_0000 + i).to_be_bytes());
        }
        let r =
            PortCountersExtendedRepr::parse(&PortCountersExtended::new_checked(&b[..]).unwrap())
                .unwrap();
        assert_eq!((r.port_select, r.counter_select), (2, 0xff));
        assert_eq!(r.port_xmit_data, 0x0100_0000_0000_0000);
        assert_eq!(r.port_multicast_rcv_pkts, 0x0100_0000_0000_0007);
        assert_eq!(r.symbol_error_counter, 0x0100_0000_0000_0008);
        assert_eq!(r.port_xmit_wait, 0x0100_0000_0000_0014);
        assert_eq!(r.qp1_dropped, 0x0100_0000_0000_0015);
        let mut out = [0u8; GS_DATA_LEN];
        r.emit(&mut PortCountersExtended::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn perf_mad_carries_port_counters_at_offset_64() {
        // Kernel sysfs writes PortSelect at in_mad->data[41] = MAD byte 64 + 1.
        let mut mad = [0u8; MAD_LEN];
        let mut h = MadHeader::new_checked(&mut mad[..]).unwrap();
        h.set_base_version(1);
        h.set_mgmt_class(class::PERF_MGMT);
        h.set_class_version(1);
        h.set_method(method::GET);
        h.set_attribute_id(attr::PMA_PORT_COUNTERS);
        let mut pma = PerfMad::new_checked(&mut mad[..]).unwrap();
        PortCounters::new_checked(pma.data_mut())
            .unwrap()
            .set_port_select(1);
        assert_eq!(mad[65], 1);
        let r = PerfMadRepr::parse(&PerfMad::new_checked(&mad[..]).unwrap()).unwrap();
        assert_eq!(r.header.attribute_id, attr::PMA_PORT_COUNTERS);
        let pc = PortCounters::new_checked(&r.data[..]).unwrap();
        assert_eq!(pc.port_select(), 1);
    }
}
