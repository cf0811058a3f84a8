//! IPv6 Neighbor Discovery (RFC 4861): the Neighbor Solicitation and Advertisement
//! messages a raw-mode device resolves IPv6 neighbours with, inside ICMPv6 (RFC 4443).
//!
//! Layouts (RFC 4861 4.3 and 4.4): type (135 NS, 136 NA), code 0, checksum, 32 bits
//! (reserved in an NS; R, S, O flags in the top bits for an NA), the 128-bit target
//! address, then options of `type, length in 8-byte units, data` — here the source
//! (type 1) or target (type 2) link-layer address option (RFC 4861 4.6.1). The ICMPv6
//! checksum covers the IPv6 pseudo-header (RFC 8200 8.1). Validation follows RFC 4861
//! 7.1.1 / 7.1.2: hop limit 255, code 0, at least 24 bytes, a valid checksum, a
//! non-multicast target, no zero-length option.

use crate::checksum;
use crate::ethernet::{ethertype, EthernetFrame, EthernetRepr, MacAddr};
use crate::ipv6::{Ipv6Packet, Ipv6Repr, HEADER_LEN as IPV6_LEN};
use crate::{Error, Result};
use core::net::Ipv6Addr;

/// IPv6 next-header value of ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;
/// ICMPv6 type of a Neighbor Solicitation.
pub const TYPE_NS: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement.
pub const TYPE_NA: u8 = 136;
/// Length of an NS or NA with one link-layer address option.
pub const MESSAGE_LEN: usize = 32;
/// The hop limit every ND message carries (RFC 4861 7.1.1: a receiver drops others).
pub const HOP_LIMIT: u8 = 255;

/// A Neighbor Solicitation or Advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NdRepr {
    /// Neighbor Solicitation: who has `target`?
    Solicit {
        /// The address being resolved.
        target: Ipv6Addr,
        /// The source link-layer address option, if present.
        source_mac: Option<MacAddr>,
    },
    /// Neighbor Advertisement: `target` is at `target_mac`.
    Advert {
        /// Router flag.
        router: bool,
        /// Solicited flag (an answer to a solicitation).
        solicited: bool,
        /// Override flag.
        override_flag: bool,
        /// The address advertised.
        target: Ipv6Addr,
        /// The target link-layer address option, if present.
        target_mac: Option<MacAddr>,
    },
}

/// The solicited-node multicast address of `a` (RFC 4291 2.7.1: ff02::1:ff00:0/104 plus
/// the low 24 bits).
pub fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// The Ethernet address of IPv6 multicast address `a` (RFC 2464 7: 33:33 and the low
/// 32 bits).
pub fn multicast_mac(a: Ipv6Addr) -> MacAddr {
    let o = a.octets();
    MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

fn icmp_sum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u32 {
    let mut acc = checksum::sum(&src.octets(), 0);
    acc = checksum::sum(&dst.octets(), acc);
    acc = checksum::sum(&(msg.len() as u32).to_be_bytes(), acc);
    acc = checksum::sum(&[0, 0, 0, PROTO_ICMPV6], acc);
    checksum::sum(msg, acc)
}

impl NdRepr {
    /// Parses an ICMPv6 message received from `src` to `dst` with `hop_limit`:
    /// `Ok(None)` for ICMPv6 types other than NS and NA, an error for an NS or NA that
    /// fails RFC 4861's validity checks.
    pub fn parse(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, msg: &[u8]) -> Result<Option<Self>> {
        let Some(&ty) = msg.first() else {
            return Err(Error::Truncated("ICMPv6 header"));
        };
        if ty != TYPE_NS && ty != TYPE_NA {
            return Ok(None);
        }
        if msg.len() < 24 {
            return Err(Error::Truncated("neighbor discovery message"));
        }
        if hop_limit != HOP_LIMIT {
            return Err(Error::Malformed("ND hop limit is not 255"));
        }
        if msg[1] != 0 {
            return Err(Error::Malformed("ND code is not 0"));
        }
        if icmp_sum(src, dst, msg) != 0xffff {
            return Err(Error::Malformed("ICMPv6 checksum"));
        }
        let mut t = [0u8; 16];
        t.copy_from_slice(&msg[8..24]);
        let target = Ipv6Addr::from(t);
        if target.is_multicast() {
            return Err(Error::Malformed("ND target is multicast"));
        }
        // Options: the link-layer address one we look for (1 in an NS, 2 in an NA).
        let want = if ty == TYPE_NS { 1 } else { 2 };
        let mut mac = None;
        let mut opts = &msg[24..];
        while !opts.is_empty() {
            if opts.len() < 2 {
                return Err(Error::Truncated("ND option"));
            }
            let len = usize::from(opts[1]) * 8;
            if len == 0 {
                return Err(Error::Malformed("ND option of length 0"));
            }
            if opts.len() < len {
                return Err(Error::Truncated("ND option"));
            }
            if opts[0] == want && len == 8 {
                let mut m = [0u8; 6];
                m.copy_from_slice(&opts[2..8]);
                mac = Some(MacAddr(m));
            }
            opts = &opts[len..];
        }
        Ok(Some(if ty == TYPE_NS {
            NdRepr::Solicit {
                target,
                source_mac: mac,
            }
        } else {
            NdRepr::Advert {
                router: msg[4] & 0x80 != 0,
                solicited: msg[4] & 0x40 != 0,
                override_flag: msg[4] & 0x20 != 0,
                target,
                target_mac: mac,
            }
        }))
    }

    /// Bytes [`NdRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        let has = match self {
            NdRepr::Solicit { source_mac, .. } => source_mac.is_some(),
            NdRepr::Advert { target_mac, .. } => target_mac.is_some(),
        };
        if has {
            MESSAGE_LEN
        } else {
            24
        }
    }

    /// Writes the ICMPv6 message, checksum included, for an IPv6 packet from `src` to
    /// `dst`; returns its length.
    pub fn emit(&self, src: Ipv6Addr, dst: Ipv6Addr, b: &mut [u8]) -> Result<usize> {
        let n = self.buffer_len();
        if b.len() < n {
            return Err(Error::Truncated("ND message buffer"));
        }
        let b = &mut b[..n];
        b.fill(0);
        let (target, mac, opt) = match *self {
            NdRepr::Solicit { target, source_mac } => {
                b[0] = TYPE_NS;
                (target, source_mac, 1)
            }
            NdRepr::Advert {
                router,
                solicited,
                override_flag,
                target,
                target_mac,
            } => {
                b[0] = TYPE_NA;
                b[4] = (u8::from(router) << 7)
                    | (u8::from(solicited) << 6)
                    | (u8::from(override_flag) << 5);
                (target, target_mac, 2)
            }
        };
        b[8..24].copy_from_slice(&target.octets());
        if let Some(m) = mac {
            b[24] = opt;
            b[25] = 1;
            b[26..32].copy_from_slice(&m.0);
        }
        let c = !(icmp_sum(src, dst, b) as u16);
        b[2..4].copy_from_slice(&c.to_be_bytes());
        Ok(n)
    }
}

/// A Neighbor Solicitation for `target` from `src_ip` / `src_mac`, as a whole Ethernet
/// frame: to the target's solicited-node group, or, to re-confirm a known neighbour
/// (`unicast`), to the target itself at that MAC (RFC 4861 7.2.2, 7.3.3 PROBE); returns
/// its length.
pub fn emit_solicit_frame(
    src_mac: MacAddr,
    src_ip: Ipv6Addr,
    target: Ipv6Addr,
    unicast: Option<MacAddr>,
    buf: &mut [u8],
) -> Result<usize> {
    let (group, dst_mac) = match unicast {
        Some(m) => (target, m),
        None => {
            let g = solicited_node(target);
            (g, multicast_mac(g))
        }
    };
    let eth = EthernetRepr {
        src: src_mac,
        dst: dst_mac,
        vlan_tci: None,
        ethertype: ethertype::IPV6,
    };
    let nd = NdRepr::Solicit {
        target,
        source_mac: Some(src_mac),
    };
    let total = eth.buffer_len() + IPV6_LEN + nd.buffer_len();
    if buf.len() < total {
        return Err(Error::Truncated("ND frame buffer"));
    }
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    let ip = Ipv6Repr {
        src: src_ip,
        dst: group,
        traffic_class: 0,
        flow_label: 0,
        next_header: PROTO_ICMPV6,
        hop_limit: HOP_LIMIT,
        payload_len: nd.buffer_len(),
    };
    let at = eth.buffer_len();
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut buf[at..at + IPV6_LEN]));
    nd.emit(src_ip, group, &mut buf[at + IPV6_LEN..total])?;
    Ok(total)
}

/// Parses a whole Ethernet frame as an ND message: `Ok(None)` when it is not IPv6
/// ICMPv6 NS/NA (or carries extension headers, which ND messages from Linux never do),
/// else the IPv6 header and the message.
pub fn parse_frame(frame: &[u8]) -> Result<Option<(Ipv6Repr, NdRepr)>> {
    let f = EthernetFrame::new_checked(frame)?;
    if f.ethertype() != ethertype::IPV6 {
        return Ok(None);
    }
    let p = Ipv6Packet::new_checked(f.payload())?;
    let ip = Ipv6Repr::parse(&p)?;
    if ip.next_header != PROTO_ICMPV6 {
        return Ok(None);
    }
    let msg = &f.payload()[IPV6_LEN..IPV6_LEN + ip.payload_len];
    Ok(NdRepr::parse(ip.src, ip.dst, ip.hop_limit, msg)?.map(|nd| (ip, nd)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn solicited_node_and_its_mac() {
        // RFC 4291 2.7.1 example form: 4037::01:800:200e:8c6c -> ff02::1:ff0e:8c6c.
        assert_eq!(
            solicited_node(a("4037::1:800:200e:8c6c")),
            a("ff02::1:ff0e:8c6c")
        );
        assert_eq!(
            multicast_mac(a("ff02::1:ff0e:8c6c")),
            MacAddr([0x33, 0x33, 0xff, 0x0e, 0x8c, 0x6c])
        );
    }

    #[test]
    fn solicit_frame_round_trip() {
        let mac = MacAddr([2, 0, 0, 0, 0, 7]);
        let mut buf = [0u8; 128];
        let n = emit_solicit_frame(mac, a("fd00::1"), a("fd00::2"), None, &mut buf).unwrap();
        assert_eq!(n, 14 + 40 + 32);
        assert_eq!(&buf[..6], &[0x33, 0x33, 0xff, 0, 0, 2]);
        let (ip, nd) = parse_frame(&buf[..n]).unwrap().unwrap();
        assert_eq!((ip.dst, ip.hop_limit), (a("ff02::1:ff00:2"), 255));
        assert_eq!(
            nd,
            NdRepr::Solicit {
                target: a("fd00::2"),
                source_mac: Some(mac)
            }
        );
        // One flipped bit fails the checksum; a lower hop limit fails validation.
        let mut bad = buf;
        bad[n - 1] ^= 1;
        assert!(parse_frame(&bad[..n]).is_err());
        // The unicast form goes to the target itself.
        let peer = MacAddr([2, 0, 0, 0, 0, 8]);
        let mut u = [0u8; 128];
        let m = emit_solicit_frame(mac, a("fd00::1"), a("fd00::2"), Some(peer), &mut u).unwrap();
        assert_eq!(&u[..6], &peer.0);
        assert_eq!(parse_frame(&u[..m]).unwrap().unwrap().0.dst, a("fd00::2"));
        assert!(emit_solicit_frame(mac, a("fd00::1"), a("fd00::2"), None, &mut u[..50]).is_err());
        let mut bad = buf;
        bad[14 + 7] = 254;
        assert_eq!(
            parse_frame(&bad[..n]).unwrap_err(),
            Error::Malformed("ND hop limit is not 255")
        );
    }

    #[test]
    fn advert_round_trip_and_option_errors() {
        let na = NdRepr::Advert {
            router: false,
            solicited: true,
            override_flag: true,
            target: a("fd00::2"),
            target_mac: Some(MacAddr([2, 0, 0, 0, 0, 9])),
        };
        let (s, d) = (a("fd00::2"), a("fd00::1"));
        let mut m = [0u8; 40];
        let n = na.emit(s, d, &mut m).unwrap();
        assert_eq!(n, 32);
        assert_eq!(m[4], 0x60);
        assert_eq!(NdRepr::parse(s, d, 255, &m[..n]).unwrap(), Some(na));
        // Another pseudo-header address: bad checksum.
        assert!(NdRepr::parse(a("fd00::3"), d, 255, &m[..n]).is_err());
        // A zero-length option.
        let mut z = m;
        z[25] = 0;
        let c = {
            z[2] = 0;
            z[3] = 0;
            !(icmp_sum(s, d, &z[..n]) as u16)
        };
        z[2..4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(
            NdRepr::parse(s, d, 255, &z[..n]).unwrap_err(),
            Error::Malformed("ND option of length 0")
        );
        // Other ICMPv6 (an echo request) is not ND.
        assert_eq!(NdRepr::parse(s, d, 64, &[128, 0, 0, 0]).unwrap(), None);
        assert!(NdRepr::parse(s, d, 255, &[]).is_err());
        assert!(NdRepr::parse(s, d, 255, &m[..20]).is_err());
    }
}
