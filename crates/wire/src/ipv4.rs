//! IPv4 headers (RFC 791) as RoCE v2 carries them.

use crate::checksum;
use crate::field::{set_u16, u16_at};
use crate::{Error, Result};
use core::net::Ipv4Addr;

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

/// A checked view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer and checks version, header length and total length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the header and the `total_len` bytes it announces are present.
    /// Bytes past `total_len` (Ethernet padding) are allowed and ignored.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated("IPv4 header"));
        }
        if self.version() != 4 {
            return Err(Error::Malformed("IPv4 version is not 4"));
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::Malformed("IPv4 IHL below 5"));
        }
        if b.len() < hl {
            return Err(Error::Truncated("IPv4 options"));
        }
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(Error::Malformed("IPv4 total length below header length"));
        }
        if b.len() < total {
            return Err(Error::Truncated("IPv4 payload"));
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

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0f) * 4
    }

    /// The TOS byte (DSCP << 2 | ECN).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Total length of header and payload.
    pub fn total_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }

    /// The Identification field.
    pub fn ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }

    /// The Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.buffer.as_ref()[6] & 0x40 != 0
    }

    /// The More Fragments flag.
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[6] & 0x20 != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (u16_at(self.buffer.as_ref(), 6) & 0x1fff) * 8
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[9]
    }

    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 10)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }

    /// True when the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(&self.buffer.as_ref()[..self.header_len()], 0) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// The payload (the bytes up to `total_len`).
    pub fn payload(&self) -> &'a [u8] {
        &T::as_ref(self.buffer)[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4, 20..=60).
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[0] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    /// Sets the TOS byte.
    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    /// Sets the Identification field.
    pub fn set_ident(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 4, v);
    }

    /// Sets the flags and fragment offset word: DF as given, MF clear, offset 0.
    pub fn set_dont_frag(&mut self, df: bool) {
        set_u16(self.buffer.as_mut(), 6, if df { 0x4000 } else { 0 });
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[8] = v;
    }

    /// Sets the payload protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[9] = v;
    }

    /// Sets the checksum field as is.
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 10, v);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[12..16].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[16..20].copy_from_slice(&a.octets());
    }

    /// Computes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, total) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[hl..total]
    }
}

/// An owned IPv4 header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// TOS byte (DSCP and ECN).
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Payload protocol.
    pub protocol: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Reads a checked packet. Fragments and bad checksums are refused: RoCE v2 is never
    /// fragmented (it is sent with DF) and a bad header cannot be trusted.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Self> {
        p.check_len()?;
        if p.more_frags() || p.frag_offset() != 0 {
            return Err(Error::Unsupported("fragmented IPv4 packet"));
        }
        if !p.verify_checksum() {
            return Err(Error::Malformed("IPv4 header checksum"));
        }
        Ok(Ipv4Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - p.header_len(),
        })
    }

    /// Header bytes (options are never emitted).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header, with its checksum, into a buffer of at least 20 bytes.
    /// The total length is `20 + payload_len`, which must fit in 16 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>) {
        p.set_version_and_header_len(HEADER_LEN);
        p.set_tos(self.tos);
        p.set_total_len((HEADER_LEN + self.payload_len) as u16);
        p.set_ident(self.ident);
        p.set_dont_frag(self.dont_frag);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // The header of the DESIGN §3 ICRC test vector.
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x00, 0x34, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x26, 0xb7, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02,
    ];

    fn packet() -> [u8; 0x34] {
        let mut b = [0u8; 0x34];
        b[..20].copy_from_slice(&HDR);
        b
    }

    #[test]
    fn deconstruct() {
        let b = packet();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 0x34);
        assert!(p.dont_frag());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), PROTO_UDP);
        assert!(p.verify_checksum());
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.payload().len(), 0x34 - 20);
    }

    #[test]
    fn construct_matches_golden() {
        let repr = Ipv4Repr::parse(&Ipv4Packet::new_checked(&packet()[..]).unwrap()).unwrap();
        let mut out = [0u8; 0x34];
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..20], HDR);
    }

    #[test]
    fn rejects_bad_headers() {
        let b = packet();
        assert_eq!(
            Ipv4Packet::new_checked(&b[..19]).unwrap_err(),
            Error::Truncated("IPv4 header")
        );
        assert_eq!(
            Ipv4Packet::new_checked(&b[..0x33]).unwrap_err(),
            Error::Truncated("IPv4 payload")
        );
        let mut v = b;
        v[0] = 0x65;
        assert!(matches!(
            Ipv4Packet::new_checked(&v[..]),
            Err(Error::Malformed(_))
        ));
        let mut ihl = b;
        ihl[0] = 0x44;
        assert!(matches!(
            Ipv4Packet::new_checked(&ihl[..]),
            Err(Error::Malformed(_))
        ));
        let mut long_ihl = b;
        long_ihl[0] = 0x4f;
        long_ihl[3] = 0x20;
        assert!(Ipv4Packet::new_checked(&long_ihl[..0x20]).is_err());
        let mut csum = b;
        csum[11] ^= 1;
        let p = Ipv4Packet::new_checked(&csum[..]).unwrap();
        assert_eq!(
            Ipv4Repr::parse(&p).unwrap_err(),
            Error::Malformed("IPv4 header checksum")
        );
        let mut frag = b;
        frag[6] = 0x20;
        let mut p = Ipv4Packet::new_unchecked(&mut frag[..]);
        p.fill_checksum();
        assert!(matches!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&frag[..]).unwrap()),
            Err(Error::Unsupported(_))
        ));
    }

    proptest! {
        #[test]
        fn round_trip(src: [u8; 4], dst: [u8; 4], tos: u8, ident: u16, df: bool, ttl: u8,
                      protocol: u8, payload_len in 0usize..1500) {
            let repr = Ipv4Repr { src: src.into(), dst: dst.into(), tos, ident, dont_frag: df,
                                  ttl, protocol, payload_len };
            let mut buf = std::vec![0u8; 20 + payload_len];
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
            let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Ipv4Repr::parse(&p).unwrap(), repr);
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Ipv4Packet::new_checked(&data[..]) {
                let _ = (p.tos(), p.ident(), p.ttl(), p.src_addr(), p.dst_addr(), p.payload());
                let _ = Ipv4Repr::parse(&p);
            }
        }
    }
}
