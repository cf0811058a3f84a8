//! Subnet management attributes a channel adapter's SMA answers (IBTA 14.2.5):
//! NodeInfo, PortInfo, GUIDInfo and P_KeyTable, each a view over the 64-byte SMP data
//! area ([`smp`](super::smp)).
//!
//! Bit positions are IBTA's, and agree with rdma-core `libibmad/fields.c`
//! (`IB_NODE_*_F`, `IB_PORT_*_F`, `IB_GUID_GUID0_F`) once its `BITSOFFS` big-endian
//! normalisation is undone: a libibmad offset `BITSOFFS(o, w)` is IBTA bit `o`,
//! that is byte `o / 8`, bit `o % 8` counted from the most significant bit.

use super::layout;

/// SM attribute IDs (IBTA 14.2.5; kernel `include/rdma/ib_smi.h` `IB_SMP_ATTR_*`).
pub mod sm_attr {
    /// Notice (traps).
    pub const NOTICE: u16 = 0x0002;
    /// NodeDescription.
    pub const NODE_DESC: u16 = 0x0010;
    /// NodeInfo.
    pub const NODE_INFO: u16 = 0x0011;
    /// GUIDInfo.
    pub const GUID_INFO: u16 = 0x0014;
    /// PortInfo.
    pub const PORT_INFO: u16 = 0x0015;
    /// P_KeyTable.
    pub const PKEY_TABLE: u16 = 0x0016;
}

/// NodeType values of NodeInfo (IBTA 14.2.5.3).
pub mod node_type {
    /// Channel adapter.
    pub const CA: u8 = 1;
    /// Switch.
    pub const SWITCH: u8 = 2;
    /// Router.
    pub const ROUTER: u8 = 3;
}

layout! {
    /// NodeInfo (IBTA 14.2.5.3; libibmad `IB_NODE_*_F`; kernel `ib_smi.h`
    /// `struct ib_node_info`).
    view NodeInfo;
    /// NodeInfo, owned.
    repr NodeInfoRepr;
    len 40; what "NodeInfo";
    fields {
        /// BaseVersion (bit 0).
        base_version / set_base_version: u8 = (0, 0, 8);
        /// ClassVersion (bit 8).
        class_version / set_class_version: u8 = (1, 0, 8);
        /// NodeType (bit 16), one of [`node_type`].
        node_type / set_node_type: u8 = (2, 0, 8);
        /// NumPorts (bit 24).
        num_ports / set_num_ports: u8 = (3, 0, 8);
        /// SystemImageGUID (bit 32).
        system_image_guid / set_system_image_guid: u64 = (4, 0, 64);
        /// NodeGUID (bit 96).
        node_guid / set_node_guid: u64 = (12, 0, 64);
        /// PortGUID (bit 160).
        port_guid / set_port_guid: u64 = (20, 0, 64);
        /// PartitionCap (bit 224): P_Key table entries.
        partition_cap / set_partition_cap: u16 = (28, 0, 16);
        /// DeviceID (bit 240).
        device_id / set_device_id: u16 = (30, 0, 16);
        /// Revision (bit 256).
        revision / set_revision: u32 = (32, 0, 32);
        /// LocalPortNum (bit 288): the port the SMP arrived on.
        local_port_num / set_local_port_num: u8 = (36, 0, 8);
        /// VendorID (bit 296, 24 bits).
        vendor_id / set_vendor_id: u32 = (37, 0, 24);
    }
}

layout! {
    /// PortInfo (IBTA 14.2.5.6; libibmad `IB_PORT_*_F`; kernel `ib_smi.h`
    /// `struct ib_port_info`), all 64 bytes.
    view PortInfo;
    /// PortInfo, owned.
    repr PortInfoRepr;
    len 64; what "PortInfo";
    fields {
        /// M_Key (bit 0).
        m_key / set_m_key: u64 = (0, 0, 64);
        /// GidPrefix (bit 64).
        gid_prefix / set_gid_prefix: u64 = (8, 0, 64);
        /// LID (bit 128).
        lid / set_lid: u16 = (16, 0, 16);
        /// MasterSMLID (bit 144).
        master_sm_lid / set_master_sm_lid: u16 = (18, 0, 16);
        /// CapabilityMask (bit 160).
        capability_mask / set_capability_mask: u32 = (20, 0, 32);
        /// DiagCode (bit 192).
        diag_code / set_diag_code: u16 = (24, 0, 16);
        /// M_KeyLeasePeriod in seconds (bit 208).
        m_key_lease_period / set_m_key_lease_period: u16 = (26, 0, 16);
        /// LocalPortNum (bit 224).
        local_port_num / set_local_port_num: u8 = (28, 0, 8);
        /// LinkWidthEnabled (bit 232).
        link_width_enabled / set_link_width_enabled: u8 = (29, 0, 8);
        /// LinkWidthSupported (bit 240).
        link_width_supported / set_link_width_supported: u8 = (30, 0, 8);
        /// LinkWidthActive (bit 248).
        link_width_active / set_link_width_active: u8 = (31, 0, 8);
        /// LinkSpeedSupported (bit 256).
        link_speed_supported / set_link_speed_supported: u8 = (32, 0, 4);
        /// PortState (bit 260): 1 Down, 2 Init, 3 Armed, 4 Active.
        port_state / set_port_state: u8 = (32, 4, 4);
        /// PortPhysicalState (bit 264): 5 LinkUp.
        port_phys_state / set_port_phys_state: u8 = (33, 0, 4);
        /// LinkDownDefaultState (bit 268).
        link_down_default_state / set_link_down_default_state: u8 = (33, 4, 4);
        /// M_KeyProtectBits (bit 272, 2 bits).
        m_key_protect_bits / set_m_key_protect_bits: u8 = (34, 0, 2);
        /// LMC (bit 277, 3 bits).
        lmc / set_lmc: u8 = (34, 5, 3);
        /// LinkSpeedActive (bit 280).
        link_speed_active / set_link_speed_active: u8 = (35, 0, 4);
        /// LinkSpeedEnabled (bit 284).
        link_speed_enabled / set_link_speed_enabled: u8 = (35, 4, 4);
        /// NeighborMTU (bit 288).
        neighbor_mtu / set_neighbor_mtu: u8 = (36, 0, 4);
        /// MasterSMSL (bit 292).
        master_sm_sl / set_master_sm_sl: u8 = (36, 4, 4);
        /// VLCap (bit 296).
        vl_cap / set_vl_cap: u8 = (37, 0, 4);
        /// InitType (bit 300).
        init_type / set_init_type: u8 = (37, 4, 4);
        /// VLHighLimit (bit 304).
        vl_high_limit / set_vl_high_limit: u8 = (38, 0, 8);
        /// VLArbitrationHighCap (bit 312).
        vl_arb_high_cap / set_vl_arb_high_cap: u8 = (39, 0, 8);
        /// VLArbitrationLowCap (bit 320).
        vl_arb_low_cap / set_vl_arb_low_cap: u8 = (40, 0, 8);
        /// InitTypeReply (bit 328).
        init_type_reply / set_init_type_reply: u8 = (41, 0, 4);
        /// MTUCap (bit 332).
        mtu_cap / set_mtu_cap: u8 = (41, 4, 4);
        /// VLStallCount (bit 336, 3 bits).
        vl_stall_count / set_vl_stall_count: u8 = (42, 0, 3);
        /// HOQLife (bit 339, 5 bits).
        hoq_life / set_hoq_life: u8 = (42, 3, 5);
        /// OperationalVLs (bit 344).
        operational_vls / set_operational_vls: u8 = (43, 0, 4);
        /// PartitionEnforcementInbound, ...Outbound, FilterRawInbound, ...Outbound
        /// (bits 348-351).
        enforcement_flags / set_enforcement_flags: u8 = (43, 4, 4);
        /// M_KeyViolations (bit 352).
        m_key_violations / set_m_key_violations: u16 = (44, 0, 16);
        /// P_KeyViolations (bit 368).
        p_key_violations / set_p_key_violations: u16 = (46, 0, 16);
        /// Q_KeyViolations (bit 384).
        q_key_violations / set_q_key_violations: u16 = (48, 0, 16);
        /// GUIDCap (bit 400).
        guid_cap / set_guid_cap: u8 = (50, 0, 8);
        /// ClientReregister (bit 408).
        client_reregister / set_client_reregister: bool = (51, 0, 1);
        /// MulticastPKeyTrapSuppressionEnabled (bit 409, 2 bits).
        mcast_pkey_trap_suppression / set_mcast_pkey_trap_suppression: u8 = (51, 1, 2);
        /// SubnetTimeOut (bit 411, 5 bits): 4.096 us * 2^value.
        subnet_timeout / set_subnet_timeout: u8 = (51, 3, 5);
        /// RespTimeValue (bit 419, 5 bits).
        resp_time_value / set_resp_time_value: u8 = (52, 3, 5);
        /// LocalPhyErrors (bit 424).
        local_phy_errors / set_local_phy_errors: u8 = (53, 0, 4);
        /// OverrunErrors (bit 428).
        overrun_errors / set_overrun_errors: u8 = (53, 4, 4);
        /// MaxCreditHint (bit 432).
        max_credit_hint / set_max_credit_hint: u16 = (54, 0, 16);
        /// LinkRoundTripLatency (bit 456, 24 bits).
        link_round_trip_latency / set_link_round_trip_latency: u32 = (57, 0, 24);
    }
}

/// GUIDs in one GUIDInfo block (IBTA 14.2.5.5).
pub const GUIDS_PER_BLOCK: usize = 8;
/// P_Keys in one P_KeyTable block (IBTA 14.2.5.7).
pub const PKEYS_PER_BLOCK: usize = 32;

/// PortInfo CapabilityMask bits used by the soft device (IBTA 14.2.5.6; kernel
/// `ib_mad.h` `IB_PORT_*`).
pub mod port_cap {
    /// IsTrapSupported.
    pub const IS_TRAP_SUPPORTED: u32 = 1 << 3;
    /// IsDeviceManagementSupported (the BMA answers).
    pub const IS_DEVICE_MANAGEMENT_SUPPORTED: u32 = 1 << 19;
    /// IsCommunicationManagementSupported.
    pub const IS_CM_SUPPORTED: u32 = 1 << 16;
    /// IsClientReregistrationSupported.
    pub const IS_CLIENT_REREGISTRATION_SUPPORTED: u32 = 1 << 25;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::tests::layout_tests;

    layout_tests!(node_info: NodeInfo, NodeInfoRepr);
    layout_tests!(port_info: PortInfo, PortInfoRepr);

    /// libibmad `fields.c` offsets, as (IBTA bit offset, width) for the fields the
    /// SMA writes: `{0,64,"Mkey"}`, `BITSOFFS(128,16) "Lid"`, `BITSOFFS(208,16)
    /// "MkeyLeasePeriod"`, `BITSOFFS(260,4) "LinkState"`, `BITSOFFS(272,2)
    /// "ProtectBits"`, `BITSOFFS(277,3) "LMC"`, `BITSOFFS(332,4) "MtuCap"`,
    /// `BITSOFFS(352,16) "MkeyViolations"`, `BITSOFFS(411,5) "SubnetTimeout"`,
    /// `BITSOFFS(419,5) "RespTimeVal"`, `BITSOFFS(456,24) "RoundTrip"`.
    #[test]
    fn port_info_matches_libibmad_offsets() {
        let want: &[(&str, usize, u32)] = &[
            ("m_key", 0, 64),
            ("gid_prefix", 64, 64),
            ("lid", 128, 16),
            ("master_sm_lid", 144, 16),
            ("capability_mask", 160, 32),
            ("m_key_lease_period", 208, 16),
            ("local_port_num", 224, 8),
            ("port_state", 260, 4),
            ("port_phys_state", 264, 4),
            ("m_key_protect_bits", 272, 2),
            ("lmc", 277, 3),
            ("neighbor_mtu", 288, 4),
            ("mtu_cap", 332, 4),
            ("m_key_violations", 352, 16),
            ("p_key_violations", 368, 16),
            ("q_key_violations", 384, 16),
            ("guid_cap", 400, 8),
            ("client_reregister", 408, 1),
            ("subnet_timeout", 411, 5),
            ("resp_time_value", 419, 5),
            ("link_round_trip_latency", 456, 24),
        ];
        for &(name, bit, width) in want {
            let f = crate::mad::find_field(PortInfoRepr::FIELDS, name).unwrap();
            assert_eq!((f.byte * 8 + f.bit, f.width), (bit, width), "{name}");
        }
    }

    /// libibmad `fields.c` NodeInfo: `BITSOFFS(16,8) "NodeType"`, `{32,64
    /// "SystemGuid"}`, `{96,64,"Guid"}`, `{160,64,"PortGuid"}`, `BITSOFFS(224,16)
    /// "PartCap"`, `{256,32,"Revision"}`, `BITSOFFS(288,8) "LocalPort"`,
    /// `BITSOFFS(296,24) "VendorId"`.
    #[test]
    fn node_info_matches_libibmad_offsets() {
        let want: &[(&str, usize, u32)] = &[
            ("base_version", 0, 8),
            ("class_version", 8, 8),
            ("node_type", 16, 8),
            ("num_ports", 24, 8),
            ("system_image_guid", 32, 64),
            ("node_guid", 96, 64),
            ("port_guid", 160, 64),
            ("partition_cap", 224, 16),
            ("device_id", 240, 16),
            ("revision", 256, 32),
            ("local_port_num", 288, 8),
            ("vendor_id", 296, 24),
        ];
        for &(name, bit, width) in want {
            let f = crate::mad::find_field(NodeInfoRepr::FIELDS, name).unwrap();
            assert_eq!((f.byte * 8 + f.bit, f.width), (bit, width), "{name}");
        }
    }

    #[test]
    fn port_info_bytes_by_hand() {
        let mut b = [0u8; 64];
        b[34] = 0x80 | 0x03; // protect bits 2, LMC 3
        b[44..46].copy_from_slice(&[0x01, 0x02]);
        b[51] = 0x80 | 18; // client reregister, subnet timeout 18
        b[32] = 0x14; // speed supported 1, state Active
        let r = PortInfoRepr::parse(&PortInfo::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!((r.m_key_protect_bits, r.lmc), (2, 3));
        assert_eq!(r.m_key_violations, 0x0102);
        assert!(r.client_reregister);
        assert_eq!(r.subnet_timeout, 18);
        assert_eq!((r.link_speed_supported, r.port_state), (1, 4));
        let mut out = [0u8; 64];
        r.emit(&mut PortInfo::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }
}
