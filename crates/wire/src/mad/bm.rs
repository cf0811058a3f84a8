//! Baseboard management (class 0x05).
//!
//! A BM MAD is the common header, the 64-bit BM_Key at offset 24, 32 reserved bytes
//! and the 192-byte data area at offset 64 (IBTA Vol 1 16.1 / Vol 2 13.6; the same
//! shape as Intel opa-ff `ib_bm.h`'s `BM_SEND`, a 192-byte data field). The B_Key
//! check and the bad-B_Key trap (BM trap 259, see
//! [`notice::Trap259BKeyDetails`](super::notice::Trap259BKeyDetails)) are built on
//! these layouts by the BMA.

use super::pma::{GS_DATA_LEN, GS_DATA_OFFSET};
use super::{check_class, class, layout, MadHeaderRepr, MAD_LEN};
use crate::Result;

/// BM-specific ClassPortInfo `CapabilityMask` bits (Intel opa-ff `ib_bm.h`
/// `BM_CLASS_PORT_CAPMASK_*`).
pub mod capability {
    /// The BMA reaches an IB-ML (baseboard management bus) device.
    pub const IS_IBML_SUPPORTED: u16 = 1 << 8;
    /// The B_Key is kept in non-volatile memory.
    pub const IS_BKEY_NVRAM: u16 = 1 << 9;
}

fn check_bm(r: &BmMadRepr) -> Result<()> {
    check_class(
        &r.header,
        class::BM,
        "MAD class is not baseboard management (0x05)",
    )
}

layout! {
    /// A baseboard management MAD, over a whole 256-byte MAD.
    view BmMad;
    /// A baseboard management MAD, owned: header, BM_Key and raw data area.
    repr BmMadRepr;
    len MAD_LEN; what "baseboard management MAD";
    check check_bm;
    fields {
        /// The common header.
        header / set_header: MadHeaderRepr = (0, 0, 192);
        /// BM_Key (bytes 24-31); bytes 32-63 are reserved.
        bm_key / set_bm_key: u64 = (24, 0, 64);
        /// The 192-byte data area (bytes 64-255).
        data / set_data: [u8; GS_DATA_LEN] = (64, 0, 1536);
    }
}

impl<T: AsRef<[u8]>> BmMad<T> {
    /// The data area, borrowed, for an attribute view.
    pub fn data_ref(&self) -> &[u8] {
        &self.buffer.as_ref()[GS_DATA_OFFSET..GS_DATA_OFFSET + GS_DATA_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BmMad<T> {
    /// The data area, mutably borrowed.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[GS_DATA_OFFSET..GS_DATA_OFFSET + GS_DATA_LEN]
    }
}

layout! {
    /// The BKeyInfo attribute (0x0010), over a BM data area. Same shape as the
    /// congestion-control CongestionKeyInfo (libibmad `IB_CC_CONGESTION_KEY_INFO_*`)
    /// and Intel opa-ff `ib_bm.h` `BKEY_INFO`: the key, a protect bit, the lease period
    /// and the violation counter.
    view BKeyInfo;
    /// The BKeyInfo attribute, owned.
    repr BKeyInfoRepr;
    len 14; what "BKeyInfo";
    fields {
        /// B_Key (bits 0-63).
        b_key / set_b_key: u64 = (0, 0, 64);
        /// B_KeyProtectBit (bit 64; bits 65-79 reserved).
        b_key_protect_bit / set_b_key_protect_bit: bool = (8, 0, 1);
        /// B_KeyLeasePeriod in seconds, 0 = infinite (bits 80-95).
        b_key_lease_period / set_b_key_lease_period: u16 = (10, 0, 16);
        /// B_KeyViolations (bits 96-111).
        b_key_violations / set_b_key_violations: u16 = (12, 0, 16);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::attr;
    use crate::mad::tests::layout_tests;
    use crate::Error;

    fn fix_bm(b: &mut [u8]) {
        b[0] = 1;
        b[1] = class::BM;
    }

    layout_tests!(bm_mad: BmMad, BmMadRepr, fixup = fix_bm);
    layout_tests!(bkey_info: BKeyInfo, BKeyInfoRepr);

    #[test]
    fn bm_mad_with_bkey_info_by_hand() {
        let mut b = [0u8; MAD_LEN];
        b[..4].copy_from_slice(&[1, 0x05, 1, 0x81]);
        b[16..18].copy_from_slice(&attr::BM_BKEY_INFO.to_be_bytes());
        b[24..32].copy_from_slice(&0xB0B0_0000_0000_0001u64.to_be_bytes());
        // BKeyInfo: key, protect bit (MSB of byte 8), lease 60 s, 3 violations.
        b[64..72].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_be_bytes());
        b[72] = 0x80;
        b[74..78].copy_from_slice(&[0, 60, 0, 3]);
        let mad = BmMad::new_checked(&b[..]).unwrap();
        let r = BmMadRepr::parse(&mad).unwrap();
        assert_eq!(r.header.attribute_id, attr::BM_BKEY_INFO);
        assert_eq!(r.bm_key, 0xB0B0_0000_0000_0001);
        let info = BKeyInfoRepr::parse(&BKeyInfo::new_checked(mad.data_ref()).unwrap()).unwrap();
        assert_eq!(
            info,
            BKeyInfoRepr {
                b_key: 0x0123_4567_89ab_cdef,
                b_key_protect_bit: true,
                b_key_lease_period: 60,
                b_key_violations: 3,
            }
        );
        let mut out = [0u8; MAD_LEN];
        let mut view = BmMad::new_unchecked(&mut out[..]);
        r.emit(&mut view);
        assert_eq!(out, b);
        let mut again = [0u8; MAD_LEN];
        let mut view = BmMad::new_unchecked(&mut again[..]);
        BmMadRepr {
            data: [0; GS_DATA_LEN],
            ..r
        }
        .emit(&mut view);
        info.emit(&mut BKeyInfo::new_unchecked(view.data_mut()));
        assert_eq!(again, b);
        // A PMA MAD is not a BM MAD.
        b[1] = 0x04;
        assert_eq!(
            BmMadRepr::parse(&BmMad::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed(
                "MAD class is not baseboard management (0x05)"
            ))
        );
    }
}
