//! Whole RoCE v2 frames: (Ethernet →) IPv4/IPv6 → UDP/4791 → transport packet, with
//! the ICRC checked. This is what a capture decoder or a raw-socket receiver sees.

use crate::ethernet::{ethertype, EthernetFrame, EthernetRepr};
use crate::icrc;
use crate::ipv4::{Ipv4Packet, Ipv4Repr, PROTO_UDP};
use crate::ipv6::{Ipv6Packet, Ipv6Repr};
use crate::packet::Packet;
use crate::udp::{UdpPacket, UdpRepr, ROCE_V2_PORT};
use crate::Result;
use core::fmt;
use core::net::{IpAddr, SocketAddr};

/// The IP header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.src.into(),
            IpRepr::V6(r) => r.src.into(),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.dst.into(),
            IpRepr::V6(r) => r.dst.into(),
        }
    }
}

/// A parsed RoCE v2 frame.
#[derive(Debug, Clone)]
pub struct RoceFrame<'a> {
    /// The Ethernet header, when the frame had one.
    pub ethernet: Option<EthernetRepr>,
    /// The IP header.
    pub ip: IpRepr,
    /// The UDP header.
    pub udp: UdpRepr,
    /// The transport packet (BTH through ICRC), checked.
    pub packet: Packet<&'a [u8]>,
    /// Whether the ICRC matched.
    pub icrc_ok: bool,
}

/// What a captured frame turned out to be.
#[derive(Debug, Clone)]
pub enum Decoded<'a> {
    /// Not RoCE v2 (another EtherType, IP protocol or UDP port).
    NotRoce,
    /// A RoCE v2 frame.
    Roce(RoceFrame<'a>),
}

/// Parses an Ethernet II frame (optionally 802.1Q-tagged).
pub fn parse_ethernet(frame: &[u8]) -> Result<Decoded<'_>> {
    let eth = EthernetFrame::new_checked(frame)?;
    let repr = EthernetRepr::parse(&eth)?;
    if !matches!(repr.ethertype, ethertype::IPV4 | ethertype::IPV6) {
        return Ok(Decoded::NotRoce);
    }
    let payload = &frame[eth.header_len()..];
    Ok(match parse_ip(payload)? {
        Decoded::Roce(mut f) => {
            f.ethernet = Some(repr);
            Decoded::Roce(f)
        }
        Decoded::NotRoce => Decoded::NotRoce,
    })
}

/// Parses an IP datagram (IPv4 or IPv6 by its version nibble). Trailing bytes past the
/// IP length (link padding) are ignored.
pub fn parse_ip(datagram: &[u8]) -> Result<Decoded<'_>> {
    let (ip, ip_payload) = match datagram.first().map(|b| b >> 4) {
        Some(6) => {
            let p = Ipv6Packet::new_checked(datagram)?;
            let repr = Ipv6Repr::parse(&p)?;
            if repr.next_header != PROTO_UDP {
                return Ok(Decoded::NotRoce);
            }
            (IpRepr::V6(repr), p.payload())
        }
        _ => {
            let p = Ipv4Packet::new_checked(datagram)?;
            if p.protocol() != PROTO_UDP {
                return Ok(Decoded::NotRoce);
            }
            (IpRepr::V4(Ipv4Repr::parse(&p)?), p.payload())
        }
    };
    let u = UdpPacket::new_checked(ip_payload)?;
    if u.dst_port() != ROCE_V2_PORT {
        return Ok(Decoded::NotRoce);
    }
    let udp = UdpRepr::parse(&u)?;
    let packet = Packet::new_checked(u.payload())?;
    let icrc_ok = icrc::verify(datagram)?;
    Ok(Decoded::Roce(RoceFrame {
        ethernet: None,
        ip,
        udp,
        packet,
        icrc_ok,
    }))
}

/// `<src-ip>:<src-port> > <dst-ip>:<dst-port> <packet summary> icrc=<ok|bad>`
impl fmt::Display for RoceFrame<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let src = SocketAddr::new(self.ip.src(), self.udp.src_port);
        let dst = SocketAddr::new(self.ip.dst(), self.udp.dst_port);
        let icrc = if self.icrc_ok { "ok" } else { "bad" };
        write!(f, "{src} > {dst} {} icrc={icrc}", self.packet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use std::string::ToString;
    use std::vec::Vec;

    fn vector() -> Vec<u8> {
        let s = "4500003400004000401126b70a0000010a000002c00012b7002000000430ffff000000118000000068656c6c6f000000";
        let mut d: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect();
        d.extend_from_slice(&[0x06, 0x45, 0x16, 0x76]);
        d
    }

    #[test]
    fn decodes_the_design_vector() {
        let d = vector();
        let Decoded::Roce(f) = parse_ip(&d).unwrap() else {
            panic!("not RoCE")
        };
        assert!(f.icrc_ok);
        assert_eq!(
            f.to_string(),
            "10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qpn=0x11 psn=0 ackreq pad=3 payload=5 icrc=ok"
        );
        let mut eth = std::vec![0u8; 14];
        eth[12] = 0x08;
        eth.extend_from_slice(&d);
        eth.extend_from_slice(&[0; 6]); // link padding is ignored
        let Decoded::Roce(f) = parse_ethernet(&eth).unwrap() else {
            panic!("not RoCE")
        };
        assert!(f.icrc_ok && f.ethernet.is_some());
    }

    #[test]
    fn not_roce_and_errors() {
        let mut d = vector();
        d[23] = 0xb8; // UDP destination port 4791 -> 4792
        assert!(matches!(parse_ip(&d), Ok(Decoded::NotRoce)));
        let mut arp = std::vec![0u8; 60];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(matches!(parse_ethernet(&arp), Ok(Decoded::NotRoce)));
        let d = vector();
        assert_eq!(
            parse_ip(&d[..50]).unwrap_err(),
            Error::Truncated("IPv4 payload")
        );
        let mut bad = vector();
        bad[40] ^= 0x01; // one payload bit
        let Decoded::Roce(f) = parse_ip(&bad).unwrap() else {
            panic!()
        };
        assert!(!f.icrc_ok);
    }
}
