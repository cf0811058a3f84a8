//! UDP headers (RFC 768). RoCE v2 uses destination port 4791 (IANA "roce").

use crate::checksum;
use crate::field::{set_u16, u16_at};
use crate::{Error, Result};
use core::net::IpAddr;

/// Length of a UDP header.
pub const HEADER_LEN: usize = 8;
/// The RoCE v2 destination port.
pub const ROCE_V2_PORT: u16 = 4791;

/// A checked view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps a buffer and checks the length field against it.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the header is present and that the length field is at least 8 and no
    /// longer than the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("UDP header"));
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed("UDP length below 8"));
        }
        if b.len() < len {
            return Err(Error::Truncated("UDP payload"));
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }

    /// Length of header and payload.
    pub fn len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }

    /// True when the length field announces no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// The checksum field (0 = none; rxe always sends 0).
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 6)
    }

    /// Verifies the checksum over the pseudo-header of `src`/`dst`. A zero checksum
    /// field means "not computed" and passes (RFC 768; RFC 6935 for IPv6 tunnels, which
    /// is how rxe treats RoCE v2 over IPv6).
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let data = &self.buffer.as_ref()[..usize::from(self.len())];
        checksum::sum(data, pseudo_header_sum(src, dst, self.len())) == 0xffff
    }
}

fn pseudo_header_sum(src: IpAddr, dst: IpAddr, udp_len: u16) -> u32 {
    let mut acc = u32::from(crate::ipv4::PROTO_UDP) + u32::from(udp_len);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = checksum::sum(&s.octets(), acc);
            checksum::sum(&d.octets(), acc)
        }
        _ => {
            let s = ip6(src);
            let d = ip6(dst);
            acc = checksum::sum(&s, acc);
            checksum::sum(&d, acc)
        }
    }
}

fn ip6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UdpPacket<&'a T> {
    /// The payload (up to the length field).
    pub fn payload(&self) -> &'a [u8] {
        &T::as_ref(self.buffer)[HEADER_LEN..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 0, v);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 4, v);
    }

    /// Sets the checksum field as is.
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 6, v);
    }

    /// Computes and stores the checksum over the pseudo-header and the datagram
    /// (a computed 0 is sent as 0xffff).
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let len = self.len();
        let data = &self.buffer.as_ref()[..usize::from(len)];
        let c = !(checksum::sum(data, pseudo_header_sum(src, dst, len)) as u16);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// An owned UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// The checksum field as carried (0 = none).
    pub checksum: u16,
}

impl UdpRepr {
    /// Reads a checked datagram (the checksum is kept as carried, not verified: that
    /// needs the IP pseudo-header, see [`UdpPacket::verify_checksum`]).
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Result<Self> {
        p.check_len()?;
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: usize::from(p.len()) - HEADER_LEN,
            checksum: p.checksum(),
        })
    }

    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header with the checksum field as held in `self.checksum`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut UdpPacket<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len((HEADER_LEN + self.payload_len) as u16);
        p.set_checksum(self.checksum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use proptest::prelude::*;

    #[test]
    fn checksum_fill_and_verify() {
        let mut b = [0u8; 13];
        let repr = UdpRepr {
            src_port: 0xc000,
            dst_port: ROCE_V2_PORT,
            payload_len: 5,
            checksum: 0,
        };
        repr.emit(&mut UdpPacket::new_unchecked(&mut b[..]));
        b[8..].copy_from_slice(b"hello");
        let (s, d) = (
            Ipv4Addr::new(10, 0, 0, 1).into(),
            Ipv4Addr::new(10, 0, 0, 2).into(),
        );
        let mut p = UdpPacket::new_checked(&mut b[..]).unwrap();
        assert!(p.verify_checksum(s, d), "zero checksum passes");
        p.fill_checksum(s, d);
        assert_ne!(p.checksum(), 0);
        assert!(p.verify_checksum(s, d));
        assert!(!p.verify_checksum(d, Ipv4Addr::new(10, 0, 0, 3).into()));
        let v6: IpAddr = "fd00:77::1".parse().unwrap();
        p.fill_checksum(v6, "fd00:77::2".parse().unwrap());
        assert!(p.verify_checksum(v6, "fd00:77::2".parse().unwrap()));
    }

    #[test]
    fn rejects_bad_lengths() {
        let mut b = [0u8; 8];
        b[5] = 7;
        assert!(matches!(
            UdpPacket::new_checked(&b[..]),
            Err(Error::Malformed(_))
        ));
        b[5] = 9;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Truncated("UDP payload")
        );
        assert_eq!(
            UdpPacket::new_checked(&b[..7]).unwrap_err(),
            Error::Truncated("UDP header")
        );
    }

    proptest! {
        #[test]
        fn round_trip(src_port: u16, dst_port: u16, checksum: u16, payload_len in 0usize..2000) {
            let repr = UdpRepr { src_port, dst_port, payload_len, checksum };
            let mut buf = std::vec![0u8; 8 + payload_len];
            repr.emit(&mut UdpPacket::new_unchecked(&mut buf[..]));
            prop_assert_eq!(UdpRepr::parse(&UdpPacket::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
