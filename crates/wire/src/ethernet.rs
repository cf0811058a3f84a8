//! Ethernet II frames (with an optional 802.1Q tag), for capture decoding and the raw
//! device. IEEE 802.3 clause 3; 802.1Q clause 9.

use crate::field::{set_u16, u16_at};
use crate::{Error, Result};
use core::fmt;

/// EtherType values the stack cares about.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// IPv6.
    pub const IPV6: u16 = 0x86DD;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (QinQ).
    pub const QINQ: u16 = 0x88A8;
    /// RoCE v1 (IBTA Annex A16): a GRH follows the Ethernet header.
    pub const ROCE_V1: u16 = 0x8915;
}

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for group (multicast or broadcast) addresses.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// A checked view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer and checks that the header (and its VLAN tag, if any) is present.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks the length against the header, including one 802.1Q/802.1ad tag.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("Ethernet header"));
        }
        if self.is_tagged() && b.len() < HEADER_LEN + VLAN_TAG_LEN {
            return Err(Error::Truncated("802.1Q tag"));
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC.
    pub fn dst_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[0..6]);
        MacAddr(a)
    }

    /// Source MAC.
    pub fn src_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[6..12]);
        MacAddr(a)
    }

    fn outer_type(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 12)
    }

    /// True when the frame carries an 802.1Q (or 802.1ad) tag.
    pub fn is_tagged(&self) -> bool {
        matches!(self.outer_type(), ethertype::VLAN | ethertype::QINQ)
    }

    /// The VLAN tag control information (PCP, DEI, VID), if tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        self.is_tagged()
            .then(|| u16_at(self.buffer.as_ref(), HEADER_LEN))
    }

    /// The EtherType of the payload (after the tag, if any).
    pub fn ethertype(&self) -> u16 {
        if self.is_tagged() {
            u16_at(self.buffer.as_ref(), HEADER_LEN + 2)
        } else {
            self.outer_type()
        }
    }

    /// Length of the header including the tag.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The frame's payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[0..6].copy_from_slice(&a.0);
    }

    /// Sets the source MAC.
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[6..12].copy_from_slice(&a.0);
    }

    /// Writes an untagged EtherType, or a tag and the inner EtherType.
    pub fn set_type(&mut self, vlan_tci: Option<u16>, ethertype: u16) {
        let b = self.buffer.as_mut();
        match vlan_tci {
            None => set_u16(b, 12, ethertype),
            Some(tci) => {
                set_u16(b, 12, ethertype::VLAN);
                set_u16(b, 14, tci);
                set_u16(b, 16, ethertype);
            }
        }
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.header_len();
        &mut self.buffer.as_mut()[at..]
    }
}

/// An owned Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src: MacAddr,
    /// Destination MAC.
    pub dst: MacAddr,
    /// 802.1Q tag control information, if the frame is tagged.
    pub vlan_tci: Option<u16>,
    /// EtherType of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> Result<Self> {
        f.check_len()?;
        Ok(EthernetRepr {
            src: f.src_addr(),
            dst: f.dst_addr(),
            vlan_tci: f.vlan_tci(),
            ethertype: f.ethertype(),
        })
    }

    /// Bytes the header occupies.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan_tci.is_some() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header into a frame of at least [`Self::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut EthernetFrame<T>) {
        f.set_dst_addr(self.dst);
        f.set_src_addr(self.src);
        f.set_type(self.vlan_tci, self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    const UNTAGGED: [u8; 16] = [
        0x52, 0x54, 0x00, 0x77, 0x00, 0x02, 0x52, 0x54, 0x00, 0x77, 0x00, 0x03, 0x08, 0x00, 0x45,
        0x00,
    ];

    #[test]
    fn deconstruct_untagged() {
        let f = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(f.dst_addr().to_string(), "52:54:00:77:00:02");
        assert_eq!(f.src_addr().0, [0x52, 0x54, 0, 0x77, 0, 3]);
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.vlan_tci(), None);
        assert_eq!(f.payload(), &[0x45, 0x00]);
    }

    #[test]
    fn tagged_round_trip() {
        let repr = EthernetRepr {
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            dst: MacAddr::BROADCAST,
            vlan_tci: Some(0x2064),
            ethertype: ethertype::IPV6,
        };
        let mut buf = [0u8; 20];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        repr.emit(&mut f);
        let f = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(f.header_len(), 18);
        assert_eq!(EthernetRepr::parse(&f).unwrap(), repr);
        assert!(repr.dst.is_multicast());
    }

    #[test]
    fn short_frames_are_rejected() {
        assert_eq!(
            EthernetFrame::new_checked(&UNTAGGED[..13]).unwrap_err(),
            Error::Truncated("Ethernet header")
        );
        let mut tagged = UNTAGGED;
        tagged[12] = 0x81;
        assert_eq!(
            EthernetFrame::new_checked(&tagged[..15]).unwrap_err(),
            Error::Truncated("802.1Q tag")
        );
    }
}
