//! Subnet management packets (SMPs): the LID-routed and the directed-route layout
//! (IBTA 14.2.1.1 and 14.2.1.2; kernel `include/rdma/ib_smi.h` `struct ib_smp`;
//! libibmad `IB_MAD_MKEY_F`, `IB_DRSMP_*_F`).
//!
//! ```text
//! LID routed                         directed route
//!   0..24   common header              0..24   common header (D bit, hop ptr/count)
//!  24..32   M_Key                     24..32   M_Key
//!  32..64   reserved                  32..34   DrSLID
//!  64..128  SMP data (64 bytes)       34..36   DrDLID
//! 128..256  reserved                  36..64   reserved
//!                                     64..128  SMP data
//!                                    128..192  InitialPath (64 hops)
//!                                    192..256  ReturnPath (64 hops)
//! ```

use super::{check_class, class, layout, MadHeaderRepr, MAD_LEN};
use crate::Result;

/// Size of the SMP data area (kernel `IB_SMP_DATA_SIZE`).
pub const SMP_DATA_LEN: usize = 64;
/// Offset of the SMP data area inside the MAD.
pub const SMP_DATA_OFFSET: usize = 64;
/// Entries in each directed-route path (kernel `IB_SMP_MAX_PATH_HOPS`).
pub const DR_PATH_LEN: usize = 64;
/// The permissive LID, DrSLID/DrDLID of a purely directed-route segment.
pub const PERMISSIVE_LID: u16 = 0xFFFF;

fn check_lid_routed(r: &SmpRepr) -> Result<()> {
    check_class(
        &r.header,
        class::SUBN_LID_ROUTED,
        "SMP class is not LID routed (0x01)",
    )
}

fn check_directed_route(r: &DrSmpRepr) -> Result<()> {
    check_class(
        &r.header,
        class::SUBN_DIRECTED_ROUTE,
        "SMP class is not directed route (0x81)",
    )
}

layout! {
    /// A LID-routed SMP (class 0x01), over a whole 256-byte MAD.
    view Smp;
    /// A LID-routed SMP, owned. `parse` requires base version 1 and class 0x01.
    repr SmpRepr;
    len MAD_LEN; what "LID-routed SMP";
    check check_lid_routed;
    fields {
        /// The common header.
        header / set_header: MadHeaderRepr = (0, 0, 192);
        /// M_Key (bytes 24-31).
        m_key / set_m_key: u64 = (24, 0, 64);
        /// The 64-byte attribute data (bytes 64-127).
        data / set_data: [u8; SMP_DATA_LEN] = (64, 0, 512);
    }
}

layout! {
    /// A directed-route SMP (class 0x81), over a whole 256-byte MAD.
    view DrSmp;
    /// A directed-route SMP, owned. `parse` requires base version 1 and class 0x81.
    ///
    /// The D bit, 15-bit status, hop pointer and hop count live in the header's
    /// `status` and `class_specific` words; [`MadHeaderRepr`] has helpers for them.
    repr DrSmpRepr;
    len MAD_LEN; what "directed-route SMP";
    check check_directed_route;
    fields {
        /// The common header.
        header / set_header: MadHeaderRepr = (0, 0, 192);
        /// M_Key (bytes 24-31).
        m_key / set_m_key: u64 = (24, 0, 64);
        /// DrSLID (bytes 32-33).
        dr_slid / set_dr_slid: u16 = (32, 0, 16);
        /// DrDLID (bytes 34-35).
        dr_dlid / set_dr_dlid: u16 = (34, 0, 16);
        /// The 64-byte attribute data (bytes 64-127).
        data / set_data: [u8; SMP_DATA_LEN] = (64, 0, 512);
        /// InitialPath: one egress port per hop (bytes 128-191).
        initial_path / set_initial_path: [u8; DR_PATH_LEN] = (128, 0, 512);
        /// ReturnPath: one ingress port per hop (bytes 192-255).
        return_path / set_return_path: [u8; DR_PATH_LEN] = (192, 0, 512);
    }
}

macro_rules! smp_data_slices {
    ($($view:ident),*) => {$(
        impl<T: AsRef<[u8]>> $view<T> {
            /// The 64-byte data area, borrowed (for attribute views such as
            /// [`Notice`](super::notice::Notice)).
            pub fn data_ref(&self) -> &[u8] {
                &self.buffer.as_ref()[SMP_DATA_OFFSET..SMP_DATA_OFFSET + SMP_DATA_LEN]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            /// The 64-byte data area, mutably borrowed.
            pub fn data_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[SMP_DATA_OFFSET..SMP_DATA_OFFSET + SMP_DATA_LEN]
            }
        }
    )*};
}
smp_data_slices!(Smp, DrSmp);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::tests::layout_tests;
    use crate::mad::{attr, method, status, MadHeader};
    use crate::Error;

    fn fix_lid(b: &mut [u8]) {
        b[0] = 1;
        b[1] = class::SUBN_LID_ROUTED;
    }

    fn fix_dr(b: &mut [u8]) {
        b[0] = 1;
        b[1] = class::SUBN_DIRECTED_ROUTE;
    }

    layout_tests!(lid_routed: Smp, SmpRepr, fixup = fix_lid);
    layout_tests!(directed_route: DrSmp, DrSmpRepr, fixup = fix_dr);

    #[test]
    fn directed_route_bytes_by_hand() {
        // Built from libibmad/fields.c: IB_MAD_MKEY_F at bit 192, IB_DRSMP_DLID_F and
        // IB_DRSMP_SLID_F in the word at byte 32 (SLID first), IB_DRSMP_PATH_F at
        // bit 1024 and IB_DRSMP_RPATH_F at bit 1536.
        let mut b = [0u8; MAD_LEN];
        b[..8].copy_from_slice(&[1, 0x81, 1, 0x81, 0x80, 0x00, 2, 1]);
        b[16..18].copy_from_slice(&[0x00, 0x15]); // PortInfo
        b[24..32].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        b[32..36].copy_from_slice(&[0xff, 0xff, 0x00, 0x07]);
        b[64] = 0xAB;
        b[129] = 3; // InitialPath[1]
        b[193] = 4; // ReturnPath[1]
        let smp = DrSmp::new_checked(&b[..]).unwrap();
        let r = DrSmpRepr::parse(&smp).unwrap();
        assert_eq!(r.header.method, method::GET_RESP);
        assert!(r.header.dr_direction());
        assert_eq!(r.header.dr_status(), 0);
        assert_eq!((r.header.hop_pointer(), r.header.hop_count()), (2, 1));
        assert_eq!(r.header.attribute_id, 0x0015);
        assert_eq!(r.m_key, 0x1122_3344_5566_7788);
        assert_eq!((r.dr_slid, r.dr_dlid), (PERMISSIVE_LID, 7));
        assert_eq!(r.data[0], 0xAB);
        assert_eq!(smp.data_ref()[0], 0xAB);
        assert_eq!((r.initial_path[1], r.return_path[1]), (3, 4));
        let mut out = [0u8; MAD_LEN];
        r.emit(&mut DrSmp::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        // The same bytes are not a LID-routed SMP.
        assert_eq!(
            SmpRepr::parse(&Smp::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed("SMP class is not LID routed (0x01)"))
        );
    }

    #[test]
    fn lid_routed_bytes_by_hand() {
        let mut b = [0u8; MAD_LEN];
        b[..4].copy_from_slice(&[1, 0x01, 1, method::TRAP]);
        b[16..18].copy_from_slice(&attr::NOTICE.to_be_bytes());
        b[24..32].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9]);
        b[127] = 0x5A;
        let smp = Smp::new_checked(&b[..]).unwrap();
        let r = SmpRepr::parse(&smp).unwrap();
        assert_eq!(r.header.method, method::TRAP);
        assert_eq!(r.m_key, 9);
        assert_eq!(r.data[63], 0x5A);
        let mut out = [0xFFu8; MAD_LEN];
        r.emit(&mut Smp::new_unchecked(&mut out[..]));
        assert_eq!(out, b);

        // Bad base version is Unsupported, not Malformed.
        b[0] = 2;
        assert_eq!(
            SmpRepr::parse(&Smp::new_checked(&b[..]).unwrap()),
            Err(Error::Unsupported("MAD base version"))
        );
        // Setters on the view write in place.
        let mut v = Smp::new_checked(&mut b[..]).unwrap();
        v.data_mut()[0] = 1;
        let mut h = MadHeader::new_checked(v.as_bytes_mut()).unwrap();
        h.set_status(status::METHOD_UNSUPPORTED);
        assert_eq!(&b[4..6], &[0, 8]);
        assert_eq!(b[64], 1);
    }
}
