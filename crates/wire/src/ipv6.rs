//! IPv6 headers (RFC 8200) as RoCE v2 carries them. The IB GRH shares this layout (the
//! `grh` module reads it through this one).

use crate::field::{set_u16, u16_at, u32_at};
use crate::{Error, Result};
use core::net::Ipv6Addr;

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;

/// A checked view of an IPv6 packet (fixed header only; extension headers are payload).
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer and checks version and payload length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the header and the payload it announces are present (trailing bytes,
    /// such as Ethernet padding, are ignored).
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("IPv6 header"));
        }
        if self.version() != 6 {
            return Err(Error::Malformed("IPv6 version is not 6"));
        }
        if b.len() < HEADER_LEN + usize::from(self.payload_len()) {
            return Err(Error::Truncated("IPv6 payload"));
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version nibble.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        ((u16_at(self.buffer.as_ref(), 0) >> 4) & 0xff) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 0) & 0x000f_ffff
    }

    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }

    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[6]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        addr_at(self.buffer.as_ref(), 8)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        addr_at(self.buffer.as_ref(), 24)
    }
}

pub(crate) fn addr_at(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(a)
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// The payload (the `payload_len` bytes after the header).
    pub fn payload(&self) -> &'a [u8] {
        &T::as_ref(self.buffer)[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Writes version 6, the traffic class and the flow label (low 20 bits).
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let word = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[0..4].copy_from_slice(&word.to_be_bytes());
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 4, v);
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[6] = v;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[7] = v;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[8..24].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[24..40].copy_from_slice(&a.octets());
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// An owned IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Next header.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Reads a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Ipv6Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            next_header: p.next_header(),
            hop_limit: p.hop_limit(),
            payload_len: usize::from(p.payload_len()),
        })
    }

    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into a buffer of at least 40 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) {
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::string::ToString;

    #[test]
    fn deconstruct() {
        let mut b = [0u8; 48];
        b[..8].copy_from_slice(&[0x6a, 0xb1, 0x23, 0x45, 0x00, 0x08, 0x11, 0x40]);
        b[8..24].copy_from_slice(&"fd00:77::1".parse::<Ipv6Addr>().unwrap().octets());
        b[24..40].copy_from_slice(&"fd00:77::2".parse::<Ipv6Addr>().unwrap().octets());
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.traffic_class(), 0xab);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 8);
        assert_eq!(p.next_header(), 17);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.dst_addr().to_string(), "fd00:77::2");
        assert_eq!(p.payload().len(), 8);
        assert_eq!(
            Ipv6Packet::new_checked(&b[..47]).unwrap_err(),
            Error::Truncated("IPv6 payload")
        );
        b[0] = 0x4a;
        assert!(matches!(
            Ipv6Packet::new_checked(&b[..]),
            Err(Error::Malformed(_))
        ));
    }

    proptest! {
        #[test]
        fn round_trip(src: [u8; 16], dst: [u8; 16], tc: u8, fl in 0u32..0x10_0000,
                      nh: u8, hl: u8, payload_len in 0usize..1500) {
            let repr = Ipv6Repr { src: src.into(), dst: dst.into(), traffic_class: tc,
                                  flow_label: fl, next_header: nh, hop_limit: hl, payload_len };
            let mut buf = std::vec![0u8; 40 + payload_len];
            repr.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]));
            let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Ipv6Repr::parse(&p).unwrap(), repr);
        }
    }
}
