//! RoCE v2 frames as a raw-mode device builds and checks them itself: Ethernet, IPv4
//! (no options, DF) or IPv6, UDP to port 4791, the transport packet and its ICRC (IBTA
//! Annex A17.4).
//!
//! [`RoceV2Repr::emit_frame`] writes the headers around a transport packet whose ICRC is
//! already in place; [`fill_icrc`] recomputes it over the frame's real headers (needed
//! only when they differ from what the ICRC was computed for: the rverbs engine computes
//! it for IPv4 Identification 0 with DF and no options, which is what `emit_frame` writes
//! with `ipv4_ident: 0`).
//!
//! [`parse_frame`] is the receive check: every reason to drop a frame is its own
//! [`RxDrop`] value so a device can count them; the ICRC is checked against the real IP
//! header, including the IPv4 Identification (no guessing, unlike a UDP-socket receiver:
//! [`crate::icrc::recover_ipv4_id`]).

use crate::ethernet::{ethertype, EthernetFrame, EthernetRepr, MacAddr};
use crate::icrc::{self, ICRC_LEN};
use crate::ipv4::{self, Ipv4Packet, Ipv4Repr, PROTO_UDP};
use crate::ipv6::{self, Ipv6Packet, Ipv6Repr};
use crate::udp::{self, UdpPacket, UdpRepr, ROCE_V2_PORT};
use crate::{Error, Result};
use core::net::IpAddr;

/// Smallest transport packet: a BTH (12 bytes) and the ICRC.
const MIN_IB_LEN: usize = 12 + ICRC_LEN;

/// The headers a sender chooses for one RoCE v2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceV2Repr {
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source address (IPv4 and IPv6 must not be mixed).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port (the flow's entropy).
    pub src_port: u16,
    /// TTL / hop limit.
    pub hop_limit: u8,
    /// TOS / traffic class.
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits; ignored for IPv4).
    pub flow_label: u32,
    /// IPv4 Identification (ignored for IPv6).
    pub ipv4_ident: u16,
}

impl RoceV2Repr {
    /// Bytes of the frame around a transport packet of `ib_len` bytes (BTH .. ICRC).
    pub fn frame_len(&self, ib_len: usize) -> usize {
        let ip = if self.dst.is_ipv4() {
            ipv4::HEADER_LEN
        } else {
            ipv6::HEADER_LEN
        };
        14 + ip + udp::HEADER_LEN + ib_len
    }

    /// Writes the whole frame: Ethernet, IP (IPv4: DF, header checksum; IPv6: flow
    /// label, traffic class, hop limit), UDP (IPv6: the mandatory checksum, RFC 8200
    /// 8.1; IPv4: none, RFC 768 allows it, as rxe sends), then `ib_packet` as is.
    /// Returns the frame length.
    pub fn emit_frame(&self, ib_packet: &[u8], buf: &mut [u8]) -> Result<usize> {
        let n = self.frame_len(ib_packet.len());
        if buf.len() < n {
            return Err(Error::Truncated("RoCE v2 frame buffer"));
        }
        if ib_packet.len() < MIN_IB_LEN {
            return Err(Error::Truncated("RoCE v2 transport packet"));
        }
        let udp_len = udp::HEADER_LEN + ib_packet.len();
        let (et, ip_len) = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                if udp_len + ipv4::HEADER_LEN > usize::from(u16::MAX) {
                    return Err(Error::Malformed("RoCE v2 packet too long for IPv4"));
                }
                Ipv4Repr {
                    src: s,
                    dst: d,
                    tos: self.traffic_class,
                    ident: self.ipv4_ident,
                    dont_frag: true,
                    ttl: self.hop_limit,
                    protocol: PROTO_UDP,
                    payload_len: udp_len,
                }
                .emit(&mut Ipv4Packet::new_unchecked(&mut buf[14..34]));
                (ethertype::IPV4, ipv4::HEADER_LEN)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                if udp_len > usize::from(u16::MAX) {
                    return Err(Error::Malformed("RoCE v2 packet too long for IPv6"));
                }
                Ipv6Repr {
                    src: s,
                    dst: d,
                    traffic_class: self.traffic_class,
                    flow_label: self.flow_label & 0xf_ffff,
                    next_header: PROTO_UDP,
                    hop_limit: self.hop_limit,
                    payload_len: udp_len,
                }
                .emit(&mut Ipv6Packet::new_unchecked(&mut buf[14..54]));
                (ethertype::IPV6, ipv6::HEADER_LEN)
            }
            _ => return Err(Error::Malformed("IPv4 and IPv6 addresses mixed")),
        };
        EthernetRepr {
            src: self.src_mac,
            dst: self.dst_mac,
            vlan_tci: None,
            ethertype: et,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut buf[..14]));
        let u0 = 14 + ip_len;
        buf[u0 + udp::HEADER_LEN..n].copy_from_slice(ib_packet);
        let mut u = UdpPacket::new_unchecked(&mut buf[u0..n]);
        UdpRepr {
            src_port: self.src_port,
            dst_port: ROCE_V2_PORT,
            payload_len: ib_packet.len(),
            checksum: 0,
        }
        .emit(&mut u);
        if self.dst.is_ipv6() {
            u.fill_checksum(self.src, self.dst);
        }
        Ok(n)
    }
}

/// Recomputes the ICRC of an untagged frame [`RoceV2Repr::emit_frame`] wrote, over its
/// real IP and UDP headers, and then the IPv6 UDP checksum (which covers the ICRC).
pub fn fill_icrc(frame: &mut [u8]) -> Result<()> {
    let ip_len = match frame.get(14).map(|b| b >> 4) {
        Some(4) => ipv4::HEADER_LEN,
        Some(6) => ipv6::HEADER_LEN,
        _ => return Err(Error::Malformed("not an IP frame")),
    };
    let u0 = 14 + ip_len;
    let end = frame.len();
    if end < u0 + udp::HEADER_LEN + MIN_IB_LEN {
        return Err(Error::Truncated("RoCE v2 frame"));
    }
    let (head, rest) = frame.split_at_mut(u0);
    let (udph, ib) = rest.split_at_mut(udp::HEADER_LEN);
    let n = ib.len() - ICRC_LEN;
    let crc = icrc::compute_parts(&head[14..], udph, &ib[..n])?;
    ib[n..].copy_from_slice(&crc.to_le_bytes());
    if ip_len == ipv6::HEADER_LEN {
        let p = Ipv6Packet::new_checked(&frame[14..])?;
        let (s, d) = (p.src_addr(), p.dst_addr());
        UdpPacket::new_unchecked(&mut frame[u0..end]).fill_checksum(s.into(), d.into());
    }
    Ok(())
}

/// Why a received frame was not handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RxDrop {
    /// Not IPv4/IPv6 UDP to port 4791 (another EtherType, protocol or port).
    NotRoce,
    /// 802.1Q-tagged (the device handles untagged frames; bind it to a VLAN interface).
    Vlan,
    /// Truncated or inconsistent headers.
    Malformed(Error),
    /// An IPv4 fragment (RoCE v2 is sent with DF and never reassembled).
    Fragment,
    /// An IPv4 header with options (RoCE v2 senders never add any).
    IpOptions,
    /// A wrong IPv4 header checksum.
    IpChecksum,
    /// A wrong UDP checksum (zero means none, RFC 768; accepted for IPv6 too, as rxe
    /// sends it and RFC 6935 allows for tunnels).
    UdpChecksum,
    /// A wrong ICRC.
    Icrc,
}

/// A received RoCE v2 frame that passed every check.
#[derive(Debug, Clone, Copy)]
pub struct RoceV2Frame<'a> {
    /// The Ethernet header.
    pub eth: EthernetRepr,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// TTL / hop limit.
    pub hop_limit: u8,
    /// TOS / traffic class.
    pub traffic_class: u8,
    /// IPv6 flow label (0 for IPv4).
    pub flow_label: u32,
    /// IPv4 Identification (`None` for IPv6).
    pub ipv4_ident: Option<u16>,
    /// The transport packet, BTH through ICRC.
    pub packet: &'a [u8],
}

/// Checks a whole received frame (Ethernet padding allowed): headers, checksums and the
/// ICRC over the real IP header.
pub fn parse_frame(frame: &[u8]) -> core::result::Result<RoceV2Frame<'_>, RxDrop> {
    parse_frame_with(frame, true)
}

/// [`parse_frame`], checking the UDP checksum only with `check_udp`: a frame the
/// kernel already validated, or one made on this host whose checksum a NIC would fill
/// in (Linux marks both, `TP_STATUS_CSUM_VALID` / `TP_STATUS_CSUMNOTREADY`; over veth a
/// locally sent UDP datagram carries only the pseudo-header sum), skips it.
pub fn parse_frame_with(
    frame: &[u8],
    check_udp: bool,
) -> core::result::Result<RoceV2Frame<'_>, RxDrop> {
    let f = EthernetFrame::new_checked(frame).map_err(RxDrop::Malformed)?;
    let eth = EthernetRepr::parse(&f).map_err(RxDrop::Malformed)?;
    if !matches!(eth.ethertype, ethertype::IPV4 | ethertype::IPV6) {
        return Err(RxDrop::NotRoce);
    }
    if eth.vlan_tci.is_some() {
        return Err(RxDrop::Vlan);
    }
    let l3 = &frame[f.header_len()..];
    let (ip_hdr, ip_payload, src, dst, hop_limit, tc, fl, ident) =
        if eth.ethertype == ethertype::IPV4 {
            let p = Ipv4Packet::new_checked(l3).map_err(RxDrop::Malformed)?;
            if p.protocol() != PROTO_UDP {
                return Err(RxDrop::NotRoce);
            }
            if p.more_frags() || p.frag_offset() != 0 {
                return Err(RxDrop::Fragment);
            }
            if p.header_len() != ipv4::HEADER_LEN {
                return Err(RxDrop::IpOptions);
            }
            if !p.verify_checksum() {
                return Err(RxDrop::IpChecksum);
            }
            let total = usize::from(p.total_len());
            (
                &l3[..ipv4::HEADER_LEN],
                &l3[ipv4::HEADER_LEN..total],
                IpAddr::V4(p.src_addr()),
                IpAddr::V4(p.dst_addr()),
                p.ttl(),
                p.tos(),
                0,
                Some(p.ident()),
            )
        } else {
            let p = Ipv6Packet::new_checked(l3).map_err(RxDrop::Malformed)?;
            if p.next_header() != PROTO_UDP {
                return Err(RxDrop::NotRoce);
            }
            let end = ipv6::HEADER_LEN + usize::from(p.payload_len());
            (
                &l3[..ipv6::HEADER_LEN],
                &l3[ipv6::HEADER_LEN..end],
                IpAddr::V6(p.src_addr()),
                IpAddr::V6(p.dst_addr()),
                p.hop_limit(),
                p.traffic_class(),
                p.flow_label(),
                None,
            )
        };
    let u = UdpPacket::new_checked(ip_payload).map_err(RxDrop::Malformed)?;
    if u.dst_port() != ROCE_V2_PORT {
        return Err(RxDrop::NotRoce);
    }
    if check_udp && !u.verify_checksum(src, dst) {
        return Err(RxDrop::UdpChecksum);
    }
    let packet = u.payload();
    if packet.len() < MIN_IB_LEN {
        return Err(RxDrop::Malformed(Error::Truncated(
            "RoCE v2 transport packet",
        )));
    }
    let n = packet.len() - ICRC_LEN;
    let crc = icrc::compute_parts(ip_hdr, &ip_payload[..udp::HEADER_LEN], &packet[..n])
        .map_err(RxDrop::Malformed)?;
    let mut carried = [0u8; 4];
    carried.copy_from_slice(&packet[n..]);
    if crc != u32::from_le_bytes(carried) {
        return Err(RxDrop::Icrc);
    }
    Ok(RoceV2Frame {
        eth,
        src,
        dst,
        src_port: u.src_port(),
        hop_limit,
        traffic_class: tc,
        flow_label: fl,
        ipv4_ident: ident,
        packet,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{self, Decoded};
    use std::vec;
    use std::vec::Vec;

    /// A BTH-only packet (RC SEND ONLY, 4 bytes of payload) with room for the ICRC.
    fn ib() -> Vec<u8> {
        let mut p = vec![0u8; 12 + 4 + 4];
        p[0] = 0x04;
        p[2] = 0xff;
        p[3] = 0xff;
        p[7] = 0x11;
        p[12..16].copy_from_slice(b"ping");
        p
    }

    fn repr(src: &str, dst: &str) -> RoceV2Repr {
        RoceV2Repr {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            src_port: 0xc123,
            hop_limit: 7,
            traffic_class: 0x28,
            flow_label: 0x1_2345,
            ipv4_ident: 0x4242,
        }
    }

    fn build(r: &RoceV2Repr) -> Vec<u8> {
        let p = ib();
        let mut buf = vec![0u8; r.frame_len(p.len())];
        let n = r.emit_frame(&p, &mut buf).unwrap();
        assert_eq!(n, buf.len());
        fill_icrc(&mut buf).unwrap();
        buf
    }

    #[test]
    fn ipv4_and_ipv6_round_trip_with_real_headers() {
        for (s, d) in [("10.0.0.1", "10.0.0.2"), ("fd00::1", "fd00::2")] {
            let r = repr(s, d);
            let mut f = build(&r);
            f.extend_from_slice(&[0; 6]); // link padding is ignored
            let got = parse_frame(&f).unwrap();
            assert_eq!((got.src, got.dst, got.src_port), (r.src, r.dst, 0xc123));
            assert_eq!((got.hop_limit, got.traffic_class), (7, 0x28));
            assert_eq!(&got.packet[12..16], b"ping");
            if r.dst.is_ipv4() {
                assert_eq!((got.ipv4_ident, got.flow_label), (Some(0x4242), 0));
            } else {
                assert_eq!((got.ipv4_ident, got.flow_label), (None, 0x1_2345));
            }
            // The independent decoder agrees (ICRC over the same header).
            let Ok(Decoded::Roce(x)) = frame::parse_ethernet(&f) else {
                panic!("not RoCE")
            };
            assert!(x.icrc_ok);
        }
    }

    #[test]
    fn every_drop_reason() {
        let f = build(&repr("10.0.0.1", "10.0.0.2"));
        let mut bad = f.clone();
        bad[60] ^= 1; // payload bit
        assert_eq!(parse_frame(&bad).unwrap_err(), RxDrop::Icrc);
        let mut bad = f.clone();
        bad[14 + 4] ^= 1; // the Identification: the IP checksum catches it first
        assert_eq!(parse_frame(&bad).unwrap_err(), RxDrop::IpChecksum);
        // ... and with a fixed-up IP checksum the ICRC still catches it (no guessing).
        {
            let mut p = Ipv4Packet::new_unchecked(&mut bad[14..34]);
            p.fill_checksum();
        }
        assert_eq!(parse_frame(&bad).unwrap_err(), RxDrop::Icrc);
        let mut frag = f.clone();
        frag[14 + 6] |= 0x20; // MF
        assert_eq!(parse_frame(&frag).unwrap_err(), RxDrop::Fragment);
        let mut opts = f.clone();
        opts[14] = 0x46;
        assert_eq!(parse_frame(&opts).unwrap_err(), RxDrop::IpOptions);
        let mut port = f.clone();
        port[14 + 20 + 3] ^= 1;
        assert_eq!(parse_frame(&port).unwrap_err(), RxDrop::NotRoce);
        let mut csum = f.clone();
        csum[14 + 20 + 6] = 0x12; // a non-zero, wrong UDP checksum
        assert_eq!(parse_frame(&csum).unwrap_err(), RxDrop::UdpChecksum);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(parse_frame(&arp).unwrap_err(), RxDrop::NotRoce);
        assert!(matches!(
            parse_frame(&f[..40]).unwrap_err(),
            RxDrop::Malformed(_)
        ));
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0, 0, 5]);
        tagged.extend_from_slice(&f[12..]);
        assert_eq!(parse_frame(&tagged).unwrap_err(), RxDrop::Vlan);
        let f6 = build(&repr("fd00::1", "fd00::2"));
        let mut bad6 = f6.clone();
        bad6[80] ^= 1;
        assert_eq!(parse_frame(&bad6).unwrap_err(), RxDrop::UdpChecksum);
        // Without the UDP check, the ICRC still catches it.
        assert_eq!(parse_frame_with(&bad6, false).unwrap_err(), RxDrop::Icrc);
        // Errors on emit: mixed families, short buffer, short packet.
        let mut r = repr("10.0.0.1", "fd00::2");
        assert!(r.emit_frame(&ib(), &mut [0u8; 200]).is_err());
        r = repr("10.0.0.1", "10.0.0.2");
        assert!(r.emit_frame(&ib(), &mut [0u8; 20]).is_err());
        assert!(r.emit_frame(&[0u8; 8], &mut [0u8; 200]).is_err());
        assert!(fill_icrc(&mut [0u8; 10]).is_err());
    }

    #[test]
    fn engine_style_icrc_is_valid_with_ident_zero() {
        // An ICRC computed for ID 0 / DF / TTL and TOS masked stays valid in a frame
        // emitted with ipv4_ident 0 and any TTL / TOS.
        let mut r = repr("10.0.0.1", "10.0.0.2");
        r.ipv4_ident = 0;
        let mut zero = r;
        zero.hop_limit = 64;
        zero.traffic_class = 0;
        let f0 = build(&zero);
        let ib_with_icrc = &f0[14 + 20 + 8..];
        let mut buf = vec![0u8; r.frame_len(ib_with_icrc.len())];
        r.emit_frame(ib_with_icrc, &mut buf).unwrap();
        assert!(parse_frame(&buf).is_ok());
    }
}
