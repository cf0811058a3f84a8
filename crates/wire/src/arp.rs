//! ARP for IPv4 over Ethernet (RFC 826), as a raw-mode device resolves neighbours with:
//! requests to find a peer's MAC address, replies (and requests naming us) to learn it.
//!
//! The packet (RFC 826 "Packet format"): `ar$hrd` 16 bits (1 = Ethernet), `ar$pro` 16
//! bits (0x0800 = IPv4), `ar$hln` 8 (6), `ar$pln` 8 (4), `ar$op` 16 (1 request, 2
//! reply), then sender hardware and protocol addresses, then target hardware and
//! protocol addresses: 28 bytes for Ethernet/IPv4. Other hardware or protocol types are
//! refused as [`Error::Unsupported`].

use crate::ethernet::MacAddr;
use crate::field::{set_u16, u16_at};
use crate::{Error, Result};
use core::net::Ipv4Addr;

/// EtherType of ARP.
pub const ETHERTYPE: u16 = 0x0806;
/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;
/// `ar$hrd` of Ethernet (RFC 826; "ares_hrd$Ethernet").
const HRD_ETHERNET: u16 = 1;
/// `ar$pro` of IPv4 (its EtherType).
const PRO_IPV4: u16 = 0x0800;

/// `ar$op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOp {
    /// `ares_op$REQUEST` (1).
    Request,
    /// `ares_op$REPLY` (2).
    Reply,
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Request or reply.
    pub op: ArpOp,
    /// Sender hardware address.
    pub sender_mac: MacAddr,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in a request).
    pub target_mac: MacAddr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parses the payload of an EtherType 0x0806 frame (Ethernet padding after the 28
    /// bytes is ignored).
    pub fn parse(b: &[u8]) -> Result<ArpRepr> {
        if b.len() < PACKET_LEN {
            return Err(Error::Truncated("ARP packet"));
        }
        if u16_at(b, 0) != HRD_ETHERNET || u16_at(b, 2) != PRO_IPV4 {
            return Err(Error::Unsupported("ARP hardware or protocol type"));
        }
        if b[4] != 6 || b[5] != 4 {
            return Err(Error::Malformed("ARP address lengths for Ethernet/IPv4"));
        }
        let op = match u16_at(b, 6) {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            _ => return Err(Error::Unsupported("ARP opcode")),
        };
        let mac = |at: usize| {
            let mut m = [0u8; 6];
            m.copy_from_slice(&b[at..at + 6]);
            MacAddr(m)
        };
        let ip = |at: usize| Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3]);
        Ok(ArpRepr {
            op,
            sender_mac: mac(8),
            sender_ip: ip(14),
            target_mac: mac(18),
            target_ip: ip(24),
        })
    }

    /// Writes the 28-byte packet into `b` (at least [`PACKET_LEN`] bytes).
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if b.len() < PACKET_LEN {
            return Err(Error::Truncated("ARP packet buffer"));
        }
        set_u16(b, 0, HRD_ETHERNET);
        set_u16(b, 2, PRO_IPV4);
        b[4] = 6;
        b[5] = 4;
        set_u16(
            b,
            6,
            match self.op {
                ArpOp::Request => 1,
                ArpOp::Reply => 2,
            },
        );
        b[8..14].copy_from_slice(&self.sender_mac.0);
        b[14..18].copy_from_slice(&self.sender_ip.octets());
        b[18..24].copy_from_slice(&self.target_mac.0);
        b[24..28].copy_from_slice(&self.target_ip.octets());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as Linux sends it (`arping`-style bytes written from RFC 826's layout).
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 1,
        2, 1, 0, 0, 0, 0, 0, 0, 10, 1, 2, 2,
    ];

    #[test]
    fn request_round_trip() {
        let r = ArpRepr::parse(&REQUEST).unwrap();
        assert_eq!(r.op, ArpOp::Request);
        assert_eq!(r.sender_mac, MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(r.sender_ip, Ipv4Addr::new(10, 1, 2, 1));
        assert_eq!(r.target_ip, Ipv4Addr::new(10, 1, 2, 2));
        let mut out = [0u8; 28];
        r.emit(&mut out).unwrap();
        assert_eq!(out, REQUEST);
    }

    #[test]
    fn refuses_what_it_does_not_speak() {
        assert_eq!(
            ArpRepr::parse(&REQUEST[..27]),
            Err(Error::Truncated("ARP packet"))
        );
        let mut b = REQUEST;
        b[1] = 6; // IEEE 802 hardware
        assert!(matches!(ArpRepr::parse(&b), Err(Error::Unsupported(_))));
        let mut b = REQUEST;
        b[4] = 8;
        assert!(matches!(ArpRepr::parse(&b), Err(Error::Malformed(_))));
        let mut b = REQUEST;
        b[7] = 3; // RARP request
        assert!(matches!(ArpRepr::parse(&b), Err(Error::Unsupported(_))));
        assert!(ArpRepr::parse(&REQUEST)
            .unwrap()
            .emit(&mut [0u8; 27])
            .is_err());
    }
}
