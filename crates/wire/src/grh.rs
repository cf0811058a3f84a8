//! The InfiniBand Global Route Header (IBTA 8.3) and GIDs.
//!
//! The GRH has the same 40-byte layout as an IPv6 header: IPVer, TClass, FlowLabel,
//! PayLen, NxtHdr, HopLmt, SGID, DGID. It appears on the wire in RoCE v1 (after the
//! Ethernet header, NxtHdr 0x1B) and, on every transport, as the first 40 bytes of a UD
//! receive buffer (for RoCE v2 over IPv4 that area holds 20 zero bytes and the IPv4
//! header instead; see [`crate::grh::GRH_LEN`] and the GID/UD code above this crate).

use crate::ipv6::{addr_at, Ipv6Packet};
use crate::{Error, Result};
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

/// Length of a GRH.
pub const GRH_LEN: usize = 40;
/// NxtHdr value meaning "an IBA transport header (BTH) follows" (IBTA 8.3.1).
pub const NEXT_HEADER_BTH: u8 = 0x1B;

/// A 128-bit Global Identifier. For RoCE it is an IPv6 address, or an IPv4-mapped one
/// (`::ffff:a.b.c.d`) for IPv4.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID (an empty table slot).
    pub const ZERO: Gid = Gid([0; 16]);

    /// The GID's bytes.
    pub const fn octets(&self) -> [u8; 16] {
        self.0
    }

    /// The subnet prefix (upper 64 bits).
    pub fn subnet_prefix(&self) -> u64 {
        crate::field::u64_at(&self.0, 0)
    }

    /// The interface ID (lower 64 bits).
    pub fn interface_id(&self) -> u64 {
        crate::field::u64_at(&self.0, 8)
    }

    /// The IPv4 address when this GID is IPv4-mapped (`::ffff:a.b.c.d`).
    pub fn to_ipv4_mapped(&self) -> Option<Ipv4Addr> {
        // One 128-bit compare on the bytes (the engine asks for every packet it builds),
        // the same test as `Ipv6Addr::to_ipv4_mapped` without going through segments.
        let g = u128::from_be_bytes(self.0);
        if g >> 32 == 0xffff {
            Some(Ipv4Addr::from(g as u32))
        } else {
            None
        }
    }

    /// True for an IPv6 multicast GID (first byte 0xff).
    pub fn is_multicast(&self) -> bool {
        self.0[0] == 0xff
    }

    /// The GID in the fixed-width form `show_gids` and sysfs print
    /// (`fe80:0000:0000:0000:5054:00ff:fe77:0002`).
    pub fn sysfs(&self) -> SysfsGid {
        SysfsGid(*self)
    }

    /// The GID as 32 hex digits in byte order, no colons (the form `ibv_rc_pingpong`
    /// and perftest exchange; [`Gid::from_hex`] and `FromStr` read it back).
    pub fn hex(&self) -> HexGid {
        HexGid(*self)
    }

    /// Exactly 32 hex digits (either case) in byte order, nothing else: the strict
    /// reader of [`Gid::hex`] for exchange protocols.
    pub fn from_hex(s: &str) -> core::result::Result<Gid, GidParseError> {
        let b = s.as_bytes();
        if b.len() != 32 {
            return Err(GidParseError);
        }
        let digit = |c: u8| (c as char).to_digit(16).ok_or(GidParseError);
        let mut g = [0u8; 16];
        for (o, pair) in g.iter_mut().zip(b.chunks_exact(2)) {
            *o = (digit(pair[0])? << 4 | digit(pair[1])?) as u8;
        }
        Ok(Gid(g))
    }
}

/// Display adapter printing a GID as 32 hex digits (see [`Gid::hex`]).
#[derive(Clone, Copy)]
pub struct HexGid(Gid);

impl fmt::Display for HexGid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 .0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Self {
        Gid(a.octets())
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(a: Ipv4Addr) -> Self {
        Gid(a.to_ipv6_mapped().octets())
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(g: Gid) -> Self {
        Ipv6Addr::from(g.0)
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Ipv6Addr::from(self.0), f)
    }
}

/// The error of parsing a [`Gid`] from text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidParseError;

impl fmt::Display for GidParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "not a GID (want an IPv6 address such as fe80::1, ::ffff:a.b.c.d, a.b.c.d, \
             eight 4-digit groups as show_gids prints, or 32 hex digits)",
        )
    }
}

impl core::error::Error for GidParseError {}

/// Parses the forms a GID is written in: any IPv6 text, which includes `::ffff:1.2.3.4`
/// and the eight 4-digit groups of sysfs and `show_gids`
/// (`fe80:0000:0000:0000:5054:00ff:fe77:0002`); a bare IPv4 address, taken as its
/// IPv4-mapped GID (RoCE v2, IBTA A17.4.5.1); and 32 hex digits without colons, in
/// byte order (the form `ibv_rc_pingpong` exchanges, see [`Gid::hex`]). Surrounding
/// whitespace is ignored. [`Gid`]'s `Display` gives the IPv6 text back.
impl core::str::FromStr for Gid {
    type Err = GidParseError;

    fn from_str(s: &str) -> core::result::Result<Gid, GidParseError> {
        let s = s.trim();
        if let Ok(v6) = s.parse::<Ipv6Addr>() {
            return Ok(Gid::from(v6));
        }
        if let Ok(v4) = s.parse::<Ipv4Addr>() {
            return Ok(Gid::from(v4));
        }
        Gid::from_hex(s)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// Display adapter printing a GID as eight 4-digit groups (see [`Gid::sysfs`]).
#[derive(Clone, Copy)]
pub struct SysfsGid(Gid);

impl fmt::Display for SysfsGid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0 .0.chunks_exact(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// A checked view of a 40-byte GRH. Unlike [`Ipv6Packet`] it does not require the
/// payload to follow (a UD receive buffer holds only the header).
#[derive(Debug, Clone)]
pub struct Grh<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Grh<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Grh { buffer }
    }

    /// Wraps a buffer of at least 40 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let g = Self::new_unchecked(buffer);
        g.check_len()?;
        Ok(g)
    }

    /// Checks that 40 bytes are present.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < GRH_LEN {
            return Err(Error::Truncated("GRH"));
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn ip6(&self) -> Ipv6Packet<&[u8]> {
        Ipv6Packet::new_unchecked(&self.buffer.as_ref()[..GRH_LEN])
    }

    /// IPVer (6 for a real GRH).
    pub fn ip_version(&self) -> u8 {
        self.ip6().version()
    }

    /// TClass.
    pub fn traffic_class(&self) -> u8 {
        self.ip6().traffic_class()
    }

    /// FlowLabel.
    pub fn flow_label(&self) -> u32 {
        self.ip6().flow_label()
    }

    /// PayLen.
    pub fn payload_len(&self) -> u16 {
        self.ip6().payload_len()
    }

    /// NxtHdr.
    pub fn next_header(&self) -> u8 {
        self.ip6().next_header()
    }

    /// HopLmt.
    pub fn hop_limit(&self) -> u8 {
        self.ip6().hop_limit()
    }

    /// SGID.
    pub fn sgid(&self) -> Gid {
        Gid(addr_at(self.buffer.as_ref(), 8).octets())
    }

    /// DGID.
    pub fn dgid(&self) -> Gid {
        Gid(addr_at(self.buffer.as_ref(), 24).octets())
    }
}

/// An owned GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    /// TClass.
    pub traffic_class: u8,
    /// FlowLabel (20 bits).
    pub flow_label: u32,
    /// PayLen.
    pub payload_len: u16,
    /// NxtHdr.
    pub next_header: u8,
    /// HopLmt.
    pub hop_limit: u8,
    /// SGID.
    pub sgid: Gid,
    /// DGID.
    pub dgid: Gid,
}

impl GrhRepr {
    /// Reads a checked GRH; IPVer must be 6 (IBTA 8.3.1).
    pub fn parse<T: AsRef<[u8]>>(g: &Grh<T>) -> Result<Self> {
        g.check_len()?;
        if g.ip_version() != 6 {
            return Err(Error::Malformed("GRH IPVer is not 6"));
        }
        Ok(GrhRepr {
            traffic_class: g.traffic_class(),
            flow_label: g.flow_label(),
            payload_len: g.payload_len(),
            next_header: g.next_header(),
            hop_limit: g.hop_limit(),
            sgid: g.sgid(),
            dgid: g.dgid(),
        })
    }

    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        GRH_LEN
    }

    /// Writes the GRH into the first 40 bytes of `buf` (which must be that long).
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = Ipv6Packet::new_unchecked(&mut buf[..GRH_LEN]);
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.sgid.into());
        p.set_dst_addr(self.dgid.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::string::ToString;

    #[test]
    fn gid_forms() {
        let g = Gid::from(Ipv4Addr::new(10, 77, 0, 2));
        assert_eq!(g.to_string(), "::ffff:10.77.0.2");
        assert_eq!(
            g.sysfs().to_string(),
            "0000:0000:0000:0000:0000:ffff:0a4d:0002"
        );
        assert_eq!(g.to_ipv4_mapped(), Some(Ipv4Addr::new(10, 77, 0, 2)));
        let ll: Gid = "fe80::5054:ff:fe77:2".parse::<Ipv6Addr>().unwrap().into();
        assert_eq!(ll.subnet_prefix(), 0xfe80_0000_0000_0000);
        assert_eq!(ll.interface_id(), 0x5054_00ff_fe77_0002);
        assert!(!ll.is_multicast());
        assert_eq!(ll.to_ipv4_mapped(), None);
    }

    #[test]
    fn gid_from_str_forms_and_errors() {
        let v4 = Gid::from(Ipv4Addr::new(1, 2, 3, 4));
        assert_eq!("::ffff:1.2.3.4".parse::<Gid>(), Ok(v4));
        assert_eq!("1.2.3.4".parse::<Gid>(), Ok(v4));
        assert_eq!(
            "0000:0000:0000:0000:0000:ffff:0102:0304".parse::<Gid>(),
            Ok(v4)
        );
        assert_eq!("00000000000000000000ffff01020304".parse::<Gid>(), Ok(v4));
        let ll: Gid = " fe80:0000:0000:0000:5054:00ff:fe77:0002\n"
            .parse()
            .unwrap();
        assert_eq!(ll.to_string(), "fe80::5054:ff:fe77:2");
        assert_eq!("fe80::5054:ff:fe77:2".parse::<Gid>(), Ok(ll));
        assert_eq!(ll.hex().to_string(), "fe80000000000000505400fffe770002");
        assert_eq!(ll.hex().to_string().parse::<Gid>(), Ok(ll));
        for bad in [
            "",
            "fe80::1::2",
            "1.2.3",
            "1.2.3.256",
            "fe80:0000:0000:0000:5054:00ff:fe77",
            "fe80000000000000505400fffe77000",
            "fe80000000000000505400fffe77000g",
            "+e80000000000000505400fffe770002",
            "cat: read error",
            "fe80::1%eth0",
        ] {
            assert_eq!(bad.parse::<Gid>(), Err(GidParseError), "{bad:?}");
        }
        assert!(GidParseError.to_string().contains("show_gids"));
        assert_eq!(Gid::from_hex("FE80000000000000505400FFFE770002"), Ok(ll));
        assert_eq!(Gid::from_hex("fe80::5054:ff:fe77:2"), Err(GidParseError));
        assert_eq!(
            Gid::from_hex(" fe80000000000000505400fffe770002"),
            Err(GidParseError)
        );
    }

    proptest! {
        /// Any text is a GID or an error, never a panic; a GID read back prints as
        /// one that parses to itself.
        #[test]
        fn any_text_parses_or_errs(s in "\\PC{0,40}", hex in "[0-9a-fA-F:.x ]{0,40}") {
            for t in [&s, &hex] {
                if let Ok(g) = t.parse::<Gid>() {
                    prop_assert_eq!(g.to_string().parse::<Gid>(), Ok(g));
                }
                let _ = Gid::from_hex(t);
            }
        }

        /// Display, sysfs and hex forms all parse back to the same GID.
        #[test]
        fn text_forms_round_trip(b: [u8; 16]) {
            let g = Gid(b);
            prop_assert_eq!(g.to_string().parse::<Gid>(), Ok(g));
            prop_assert_eq!(g.sysfs().to_string().parse::<Gid>(), Ok(g));
            prop_assert_eq!(g.hex().to_string().parse::<Gid>(), Ok(g));
        }

        /// The byte test agrees with `Ipv6Addr::to_ipv4_mapped` on any GID, and on GIDs
        /// one byte away from an IPv4-mapped one.
        #[test]
        fn ipv4_mapped_matches_std(b: [u8; 16], v4: [u8; 4], at in 0usize..12, x: u8) {
            let g = Gid(b);
            prop_assert_eq!(g.to_ipv4_mapped(), Ipv6Addr::from(b).to_ipv4_mapped());
            let mut m = Gid::from(Ipv4Addr::from(v4)).0;
            m[at] = x;
            prop_assert_eq!(Gid(m).to_ipv4_mapped(), Ipv6Addr::from(m).to_ipv4_mapped());
        }
    }

    #[test]
    fn short_and_wrong_version() {
        assert_eq!(
            Grh::new_checked(&[0u8; 39][..]).unwrap_err(),
            Error::Truncated("GRH")
        );
        let g = Grh::new_checked(&[0x45u8; 40][..]).unwrap();
        assert!(matches!(GrhRepr::parse(&g), Err(Error::Malformed(_))));
    }

    proptest! {
        #[test]
        fn round_trip(tc: u8, fl in 0u32..0x10_0000, len: u16, nh: u8, hl: u8,
                      s: [u8; 16], d: [u8; 16]) {
            let repr = GrhRepr { traffic_class: tc, flow_label: fl, payload_len: len,
                next_header: nh, hop_limit: hl, sgid: Gid(s), dgid: Gid(d) };
            let mut buf = [0u8; 40];
            repr.emit(&mut buf);
            prop_assert_eq!(GrhRepr::parse(&Grh::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
