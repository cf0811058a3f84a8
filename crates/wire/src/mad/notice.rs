//! The Notice attribute (0x0002) carried by Trap, Report and TrapRepress, and the
//! typed data details of the two traps the stack raises itself.
//!
//! Notice layout: IBTA 13.4.8.2; libibmad `IB_NOTICE_*_F`; kernel `ib_mad.h` (older
//! trees) `struct ib_mad_notice_attr`. In an SMP the Notice fills the 64-byte data
//! area ([`Notice`]); in a GS MAD (SA, BM) the 16-byte IssuerGID follows it
//! ([`GsNotice`], 80 bytes).
//!
//! ```text
//!  byte 0      IsGeneric(1) Type(7)
//!  1..4        ProducerType (generic) / VendorID (vendor specific), 24 bits
//!  4..6        TrapNumber (generic) / DeviceID (vendor specific)
//!  6..8        IssuerLID
//!  8..10       NoticeToggle(1) NoticeCount(15)
//! 10..64       DataDetails (54 bytes)
//! 64..80       IssuerGID (GS classes only)
//! ```

use super::layout;

/// Notice `Type` values (IBTA 13.4.8.2; kernel `IB_NOTICE_TYPE_*` minus the
/// IsGeneric bit).
pub mod notice_type {
    /// Fatal.
    pub const FATAL: u8 = 0;
    /// Urgent.
    pub const URGENT: u8 = 1;
    /// Security.
    pub const SECURITY: u8 = 2;
    /// Subnet management.
    pub const SUBNET_MGMT: u8 = 3;
    /// Informational.
    pub const INFO: u8 = 4;
    /// Empty notice (no notice pending).
    pub const EMPTY: u8 = 0x7F;
}

/// Generic notice `ProducerType` values (IBTA 13.4.8.2; kernel `IB_NOTICE_PROD_*`).
pub mod producer_type {
    /// Channel adapter.
    pub const CA: u32 = 1;
    /// Switch.
    pub const SWITCH: u32 = 2;
    /// Router.
    pub const ROUTER: u32 = 3;
    /// Class manager (for example the SM).
    pub const CLASS_MANAGER: u32 = 4;
}

/// Trap numbers of the traps with typed details here.
pub mod trap {
    /// SM trap 256: bad M_Key (IBTA 14.2.5.1; kernel `IB_NOTICE_TRAP_BAD_MKEY`).
    pub const SM_BAD_M_KEY: u16 = 256;
    /// BM trap 259: bad B_Key (Intel opa-ff `ib_bm.h` `BMA_TRAP_BAD_BKEY`). In the SM
    /// class the same number means "bad P_Key at a switch external port"; trap
    /// numbers are per class.
    pub const BM_BAD_B_KEY: u16 = 259;
}

layout! {
    /// The Notice attribute as an SMP carries it: the first 64 bytes, without the
    /// IssuerGID.
    view Notice;
    /// The Notice attribute (64-byte SMP form), owned.
    repr NoticeRepr;
    len 64; what "Notice";
    fields {
        /// IsGeneric (bit 0): generic notice (true) or vendor specific.
        is_generic / set_is_generic: bool = (0, 0, 1);
        /// Type (bits 1-7), see [`notice_type`].
        notice_type / set_notice_type: u8 = (0, 1, 7);
        /// ProducerType when generic ([`producer_type`]), VendorID otherwise (24 bits).
        producer_type_or_vendor_id / set_producer_type_or_vendor_id: u32 = (1, 0, 24);
        /// TrapNumber when generic ([`trap`]), DeviceID otherwise.
        trap_number_or_device_id / set_trap_number_or_device_id: u16 = (4, 0, 16);
        /// IssuerLID.
        issuer_lid / set_issuer_lid: u16 = (6, 0, 16);
        /// NoticeToggle (bit 64): flips with every new notice.
        notice_toggle / set_notice_toggle: bool = (8, 0, 1);
        /// NoticeCount (15 bits from bit 65).
        notice_count / set_notice_count: u16 = (8, 1, 15);
        /// DataDetails (bits 80-511), see [`Trap256Details`] and [`Trap259BKeyDetails`].
        data_details / set_data_details: [u8; 54] = (10, 0, 432);
    }
}

/// Offset of DataDetails inside the Notice.
pub const DATA_DETAILS_OFFSET: usize = 10;
/// Length of DataDetails.
pub const DATA_DETAILS_LEN: usize = 54;

impl<T: AsRef<[u8]>> Notice<T> {
    /// DataDetails, borrowed, for a details view.
    pub fn data_details_ref(&self) -> &[u8] {
        &self.buffer.as_ref()[DATA_DETAILS_OFFSET..DATA_DETAILS_OFFSET + DATA_DETAILS_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Notice<T> {
    /// DataDetails, mutably borrowed.
    pub fn data_details_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[DATA_DETAILS_OFFSET..DATA_DETAILS_OFFSET + DATA_DETAILS_LEN]
    }
}

layout! {
    /// The Notice attribute as GS classes (SA, BM) carry it: the 64-byte [`Notice`]
    /// followed by the IssuerGID (80 bytes).
    view GsNotice;
    /// The Notice attribute (80-byte GS form), owned.
    repr GsNoticeRepr;
    len 80; what "Notice with IssuerGID";
    fields {
        /// The first 64 bytes.
        notice / set_notice: NoticeRepr = (0, 0, 512);
        /// IssuerGID (bits 512-639).
        issuer_gid / set_issuer_gid: [u8; 16] = (64, 0, 128);
    }
}

layout! {
    /// DataDetails of SM trap 256, bad M_Key (`Bad M_Key, <M_Key> from <LIDADDR>
    /// attempted <METHOD> with <ATTRIBUTEID> and <ATTRIBUTEMODIFIER>`), plus the
    /// directed-route return path when the offending SMP was directed routed
    /// (IBTA 14.2.5.1; layout of kernel `ib_mad.h` `ntc_256` and rdma-core
    /// `libibmad/ib_types.h` `ntc_256`; DR flag bits of kernel `ib_smi.h`
    /// `IB_NOTICE_TRAP_DR_NOTICE` / `IB_NOTICE_TRAP_DR_TRUNC`).
    view Trap256Details;
    /// DataDetails of SM trap 256, owned.
    repr Trap256DetailsRepr;
    len DATA_DETAILS_LEN; what "trap 256 details";
    fields {
        /// LIDADDR: the LID of the requester (bytes 2-3; bytes 0-1 reserved).
        lidaddr / set_lidaddr: u16 = (2, 0, 16);
        /// DRSLID: the DrSLID of a directed-route SMP.
        dr_slid / set_dr_slid: u16 = (4, 0, 16);
        /// METHOD of the offending MAD (byte 6; byte 7 reserved).
        method / set_method: u8 = (6, 0, 8);
        /// ATTRIBUTEID of the offending MAD.
        attribute_id / set_attribute_id: u16 = (8, 0, 16);
        /// ATTRIBUTEMODIFIER of the offending MAD.
        attribute_modifier / set_attribute_modifier: u32 = (10, 0, 32);
        /// The M_Key the offending MAD carried.
        m_key / set_m_key: u64 = (14, 0, 64);
        /// DRNotice: the offending SMP was directed routed (MSB of byte 23; byte 22
        /// reserved).
        dr_notice / set_dr_notice: bool = (23, 0, 1);
        /// DRPathTruncated: the return path did not fit in 30 bytes.
        dr_path_truncated / set_dr_path_truncated: bool = (23, 1, 1);
        /// DRHopCount: hop count of the offending SMP (6 bits).
        dr_hop_count / set_dr_hop_count: u8 = (23, 2, 6);
        /// DRNoticeReturnPath: the first 30 bytes of the SMP's return path.
        dr_notice_return_path / set_dr_notice_return_path: [u8; 30] = (24, 0, 240);
    }
}

layout! {
    /// DataDetails of BM trap 259, bad B_Key (`Bad B_Key, <B_Key> from
    /// <LIDADDR>/<GIDADDR>/<QP> attempted <METHOD> with <ATTRIBUTEID> and
    /// <ATTRIBUTEMODIFIER>`).
    ///
    /// Layout followed: rdma-core `libibmad/ib_types.h` `struct _ntc_bkey_259`
    /// (LIDADDR, METHOD, reserved byte, ATTRIBUTEID, ATTRIBUTEMODIFIER, QP in the low
    /// 24 bits of a 32-bit word, B_Key, GIDADDR), which agrees field for field with
    /// Intel opa-ff `ib_bm.h` `BMA_TRAP_DATA_BAD_BKEY`. Wireshark's dissector only
    /// decodes the SM meaning of trap 259 (bad P_Key at a switch), so it is not a
    /// source for this one. The 38 bytes used leave bytes 38-53 reserved.
    view Trap259BKeyDetails;
    /// DataDetails of BM trap 259, owned.
    repr Trap259BKeyDetailsRepr;
    len 38; what "trap 259 (bad B_Key) details";
    fields {
        /// LIDADDR: the LID that sent the offending MAD.
        lidaddr / set_lidaddr: u16 = (0, 0, 16);
        /// METHOD of the offending MAD (byte 2; byte 3 reserved).
        method / set_method: u8 = (2, 0, 8);
        /// ATTRIBUTEID of the offending MAD.
        attribute_id / set_attribute_id: u16 = (4, 0, 16);
        /// ATTRIBUTEMODIFIER of the offending MAD.
        attribute_modifier / set_attribute_modifier: u32 = (6, 0, 32);
        /// QP that sent the offending MAD (24 bits; byte 10 reserved).
        qp / set_qp: u32 = (11, 0, 24);
        /// The B_Key the offending MAD carried.
        b_key / set_b_key: u64 = (14, 0, 64);
        /// GIDADDR: the GID that sent the offending MAD (from its GRH).
        gidaddr / set_gidaddr: [u8; 16] = (22, 0, 128);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::tests::layout_tests;
    use crate::mad::{attr, method};

    layout_tests!(notice: Notice, NoticeRepr);
    layout_tests!(gs_notice: GsNotice, GsNoticeRepr);
    layout_tests!(trap256: Trap256Details, Trap256DetailsRepr);
    layout_tests!(trap259: Trap259BKeyDetails, Trap259BKeyDetailsRepr);

    #[test]
    fn trap_256_notice_by_hand() {
        // libibmad/fields.c: NoticeIsGeneric BITSOFFS(0,1), NoticeType BITSOFFS(1,7),
        // NoticeProducerType BITSOFFS(8,24), NoticeTrapNumber BITSOFFS(32,16),
        // NoticeIssuerLID BITSOFFS(48,16), NoticeToggle BITSOFFS(64,1), NoticeCount
        // BITSOFFS(65,15), NoticeDataDetails at bit 80. Details as kernel ntc_256.
        let mut b = [0u8; 64];
        b[..10].copy_from_slice(&[0x82, 0, 0, 1, 0x01, 0x00, 0x00, 0x07, 0x80, 0x02]);
        let d = &mut b[10..];
        d[2..4].copy_from_slice(&[0x00, 0x09]); // LIDADDR 9
        d[4..6].copy_from_slice(&[0xff, 0xff]); // DRSLID permissive
        d[6] = method::SET;
        d[8..10].copy_from_slice(&[0x00, 0x15]); // PortInfo
        d[10..14].copy_from_slice(&[0, 0, 0, 1]);
        d[14..22].copy_from_slice(&0xbad0_0000_0000_00ffu64.to_be_bytes());
        d[23] = 0x80 | 0x40 | 5; // DR notice, truncated, 5 hops
        d[24] = 1;
        d[53] = 9;
        let notice = Notice::new_checked(&b[..]).unwrap();
        let n = NoticeRepr::parse(&notice).unwrap();
        assert!(n.is_generic);
        assert_eq!(n.notice_type, notice_type::SECURITY);
        assert_eq!(n.producer_type_or_vendor_id, producer_type::CA);
        assert_eq!(n.trap_number_or_device_id, trap::SM_BAD_M_KEY);
        assert_eq!(n.issuer_lid, 7);
        assert!(n.notice_toggle);
        assert_eq!(n.notice_count, 2);
        let t = Trap256DetailsRepr::parse(
            &Trap256Details::new_checked(notice.data_details_ref()).unwrap(),
        )
        .unwrap();
        assert_eq!((t.lidaddr, t.dr_slid, t.method), (9, 0xffff, method::SET));
        assert_eq!((t.attribute_id, t.attribute_modifier), (0x15, 1));
        assert_eq!(t.m_key, 0xbad0_0000_0000_00ff);
        assert!(t.dr_notice && t.dr_path_truncated);
        assert_eq!(t.dr_hop_count, 5);
        assert_eq!(
            (t.dr_notice_return_path[0], t.dr_notice_return_path[29]),
            (1, 9)
        );
        // Rebuild: notice first, details into its DataDetails.
        let mut out = [0u8; 64];
        let mut view = Notice::new_unchecked(&mut out[..]);
        NoticeRepr {
            data_details: [0; 54],
            ..n
        }
        .emit(&mut view);
        t.emit(&mut Trap256Details::new_unchecked(view.data_details_mut()));
        assert_eq!(out, b);
    }

    #[test]
    fn bm_trap_259_gs_notice_by_hand() {
        // Field order of rdma-core libibmad/ib_types.h ntc_bkey_259.
        let gid = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x52, 0x54, 0, 0xff, 0xfe, 0x77, 0, 3,
        ];
        let mut b = [0u8; 80];
        b[..10].copy_from_slice(&[0x82, 0, 0, 1, 0x01, 0x03, 0x00, 0x02, 0x00, 0x01]);
        let d = &mut b[10..];
        d[0..2].copy_from_slice(&[0x00, 0x0c]); // LIDADDR 12
        d[2] = method::GET;
        d[4..6].copy_from_slice(&attr::BM_BKEY_INFO.to_be_bytes());
        d[6..10].copy_from_slice(&[0, 0, 0, 0]);
        d[10..14].copy_from_slice(&[0x00, 0x00, 0x00, 0x01]); // QP1
        d[14..22].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_be_bytes());
        d[22..38].copy_from_slice(&gid);
        b[64..80].copy_from_slice(&gid);
        let gs = GsNoticeRepr::parse(&GsNotice::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(gs.notice.trap_number_or_device_id, trap::BM_BAD_B_KEY);
        assert_eq!(gs.notice.issuer_lid, 2);
        assert!(!gs.notice.notice_toggle);
        assert_eq!(gs.notice.notice_count, 1);
        assert_eq!(gs.issuer_gid, gid);
        let t = Trap259BKeyDetailsRepr::parse(
            &Trap259BKeyDetails::new_checked(&gs.notice.data_details[..]).unwrap(),
        )
        .unwrap();
        assert_eq!(
            t,
            Trap259BKeyDetailsRepr {
                lidaddr: 12,
                method: method::GET,
                attribute_id: attr::BM_BKEY_INFO,
                attribute_modifier: 0,
                qp: 1,
                b_key: 0x0123_4567_89ab_cdef,
                gidaddr: gid,
            }
        );
        let mut out = [0u8; 80];
        gs.emit(&mut GsNotice::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        let mut details = [0u8; DATA_DETAILS_LEN];
        t.emit(&mut Trap259BKeyDetails::new_unchecked(&mut details[..]));
        assert_eq!(details, gs.notice.data_details);
    }
}
