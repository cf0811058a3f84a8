//! The header fields flow specs match on, pulled out of an Ethernet frame into a fixed
//! layout (like a NIC's match parameter block: mlx5's `fte_match_param` has outer
//! headers, inner headers and "misc" tunnel fields), so that a rule is one mask and one
//! value over the same layout and matching is a few word compares.
//!
//! The parser is total: any byte string gives a field vector (headers it cannot read are
//! simply absent) or, for fewer than 14 bytes, [`FrameError`]. It never panics and reads
//! each byte at most a bounded number of times.

use rverbs_wire::checksum::sum;
use std::fmt;

/// Bytes in a [`FieldVector`].
pub const FV_BYTES: usize = 160;
/// 64-bit words in a [`FieldVector`].
pub const FV_WORDS: usize = FV_BYTES / 8;

/// Start of the outer header block.
pub const OUTER: usize = 0;
/// Start of the inner (tunnelled) header block.
pub const INNER: usize = 64;
/// Start of the tunnel / misc block.
pub const MISC: usize = 128;

// Offsets inside a header block (outer or inner).
/// Destination MAC (6 bytes).
pub const DMAC: usize = 0;
/// Source MAC (6 bytes).
pub const SMAC: usize = 6;
/// EtherType after the last VLAN tag (2 bytes, big-endian).
pub const ETHERTYPE: usize = 12;
/// TCI of the first VLAN tag (2 bytes, big-endian).
pub const VLAN: usize = 14;
/// Source IP (16 bytes; an IPv4 address fills the first 4).
pub const SIP: usize = 16;
/// Destination IP (16 bytes; an IPv4 address fills the first 4).
pub const DIP: usize = 32;
/// IPv6 flow label (4 bytes, big-endian, 20 bits used).
pub const FLOW_LABEL: usize = 48;
/// IP protocol / final IPv6 next header.
pub const PROTO: usize = 52;
/// IPv4 TOS / IPv6 traffic class.
pub const TOS: usize = 53;
/// L4 source port (2 bytes, big-endian).
pub const SPORT: usize = 54;
/// L4 destination port (2 bytes, big-endian).
pub const DPORT: usize = 56;
/// Presence bits of the block ([`P_L2`], ...).
pub const PRESENT: usize = 58;
/// Presence bits of the misc block ([`M_ESP`], ...), in the outer block.
pub const MISC_PRESENT: usize = OUTER + 59;

/// Presence: an Ethernet header (always for the outer block).
pub const P_L2: u8 = 1;
/// Presence: at least one VLAN tag.
pub const P_VLAN: u8 = 2;
/// Presence: an IPv4 header.
pub const P_IPV4: u8 = 4;
/// Presence: an IPv6 header.
pub const P_IPV6: u8 = 8;
/// Presence: TCP/UDP ports were read (not for non-first fragments).
pub const P_PORTS: u8 = 16;

// Misc block.
/// ESP SPI (4 bytes, big-endian).
pub const ESP_SPI: usize = MISC;
/// GRE protocol (2 bytes, big-endian).
pub const GRE_PROTO: usize = MISC + 4;
/// GRE key (4 bytes, big-endian).
pub const GRE_KEY: usize = MISC + 8;
/// VXLAN VNI (4 bytes, big-endian, 24 bits used).
pub const VNI: usize = MISC + 12;
/// First MPLS label stack entry after Ethernet.
pub const MPLS_ETH: usize = MISC + 16;
/// First MPLS entry after UDP (MPLS-in-UDP, port 6635).
pub const MPLS_UDP: usize = MISC + 20;
/// First MPLS entry after GRE (protocol 0x8847).
pub const MPLS_GRE: usize = MISC + 24;
/// First MPLS entry after the inner Ethernet header.
pub const MPLS_INNER: usize = MISC + 28;

/// Misc presence: ESP header.
pub const M_ESP: u8 = 1;
/// Misc presence: GRE header.
pub const M_GRE: u8 = 2;
/// Misc presence: GRE key.
pub const M_GRE_KEY: u8 = 4;
/// Misc presence: VXLAN header.
pub const M_VXLAN: u8 = 8;
/// Misc presence: MPLS after Ethernet.
pub const M_MPLS_ETH: u8 = 16;
/// Misc presence: MPLS after UDP.
pub const M_MPLS_UDP: u8 = 32;
/// Misc presence: MPLS after GRE.
pub const M_MPLS_GRE: u8 = 64;
/// Misc presence: MPLS after the inner Ethernet header.
pub const M_MPLS_INNER: u8 = 128;

/// UDP port of VXLAN (RFC 7348).
pub const VXLAN_PORT: u16 = 4789;
/// UDP port of MPLS-in-UDP (RFC 7510).
pub const MPLS_UDP_PORT: u16 = 6635;

/// A frame too short to be Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameError {
    /// The frame's length.
    pub len: usize,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-byte frame is shorter than an Ethernet header",
            self.len
        )
    }
}

impl std::error::Error for FrameError {}

/// The match fields of one frame (or a rule's mask or value over the same layout).
#[derive(Clone, PartialEq, Eq)]
pub struct FieldVector {
    b: [u8; FV_BYTES],
}

impl Default for FieldVector {
    fn default() -> Self {
        Self { b: [0; FV_BYTES] }
    }
}

impl fmt::Debug for FieldVector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, chunk) in self.b.chunks(16).enumerate() {
            if chunk.iter().any(|&x| x != 0) {
                write!(f, "{:3}:", i * 16)?;
                for x in chunk {
                    write!(f, " {x:02x}")?;
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

impl FieldVector {
    /// The raw bytes.
    pub fn bytes(&self) -> &[u8; FV_BYTES] {
        &self.b
    }

    /// The raw bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8; FV_BYTES] {
        &mut self.b
    }

    /// The layout as native-endian words (what the classifier compares).
    pub fn words(&self) -> [u64; FV_WORDS] {
        let mut w = [0u64; FV_WORDS];
        for (i, c) in self.b.chunks_exact(8).enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            w[i] = u64::from_ne_bytes(a);
        }
        w
    }

    /// Whether the outer destination MAC is multicast (I/G bit).
    pub fn is_multicast(&self) -> bool {
        self.b[OUTER + DMAC] & 1 == 1
    }

    /// Presence bits of the block at `block` ([`OUTER`] or [`INNER`]).
    pub fn present(&self, block: usize) -> u8 {
        self.b[block + PRESENT]
    }

    /// Misc presence bits.
    pub fn misc_present(&self) -> u8 {
        self.b[MISC_PRESENT]
    }

    fn set(&mut self, off: usize, v: &[u8]) {
        self.b[off..off + v.len()].copy_from_slice(v);
    }

    fn flag(&mut self, off: usize, bit: u8) {
        self.b[off] |= bit;
    }

    /// Parses `frame` (starting at the destination MAC, no FCS) into a fresh vector.
    pub fn parse(frame: &[u8]) -> Result<Self, FrameError> {
        let mut fv = Self::default();
        fv.parse_into(frame)?;
        Ok(fv)
    }

    /// Parses `frame` into `self`, clearing it first.
    pub fn parse_into(&mut self, frame: &[u8]) -> Result<(), FrameError> {
        self.b = [0; FV_BYTES];
        let Some((ethertype, off)) = self.l2(OUTER, frame) else {
            return Err(FrameError { len: frame.len() });
        };
        self.l3(OUTER, ethertype, frame, off);
        Ok(())
    }

    /// Ethernet + up to two VLAN tags. Returns the EtherType after the tags and the
    /// offset of what follows.
    fn l2(&mut self, block: usize, b: &[u8]) -> Option<(u16, usize)> {
        let hdr = b.get(..14)?;
        self.set(block + DMAC, &hdr[0..6]);
        self.set(block + SMAC, &hdr[6..12]);
        self.flag(block + PRESENT, P_L2);
        let mut ethertype = be16(b, 12)?;
        let mut off = 14;
        // 802.1Q (0x8100), 802.1ad (0x88a8) and the old QinQ 0x9100.
        let mut tags = 0;
        while matches!(ethertype, 0x8100 | 0x88a8 | 0x9100) && tags < 2 {
            // A truncated tag ends the parse: the frame is still Ethernet (its EtherType
            // stays the TPID), it just has no readable VLAN or upper layers.
            let (Some(tci), Some(next)) = (be16(b, off), be16(b, off + 2)) else {
                break;
            };
            if tags == 0 {
                self.set(block + VLAN, &tci.to_be_bytes());
                self.flag(block + PRESENT, P_VLAN);
            }
            ethertype = next;
            off += 4;
            tags += 1;
        }
        self.set(block + ETHERTYPE, &ethertype.to_be_bytes());
        Some((ethertype, off))
    }

    /// The network layer at `off` for `ethertype`, then L4 / tunnels.
    fn l3(&mut self, block: usize, ethertype: u16, b: &[u8], off: usize) {
        match ethertype {
            0x0800 => self.ipv4(block, b, off),
            0x86dd => self.ipv6(block, b, off),
            0x8847 | 0x8848 => {
                let (slot, bit) = if block == OUTER {
                    (MPLS_ETH, M_MPLS_ETH)
                } else {
                    (MPLS_INNER, M_MPLS_INNER)
                };
                self.mpls(slot, bit, b, off);
            }
            _ => {}
        }
    }

    fn mpls(&mut self, slot: usize, bit: u8, b: &[u8], off: usize) {
        if let Some(entry) = b.get(off..off + 4) {
            self.set(slot, entry);
            self.flag(MISC_PRESENT, bit);
        }
    }

    fn ipv4(&mut self, block: usize, b: &[u8], off: usize) {
        let Some(h) = b.get(off..off + 20) else {
            return;
        };
        let ihl = usize::from(h[0] & 0x0f) * 4;
        if h[0] >> 4 != 4 || ihl < 20 {
            return;
        }
        self.flag(block + PRESENT, P_IPV4);
        self.b[block + TOS] = h[1];
        self.b[block + PROTO] = h[9];
        self.set(block + SIP, &h[12..16]);
        self.set(block + DIP, &h[16..20]);
        let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let frag_off = u16::from_be_bytes([h[6], h[7]]) & 0x1fff;
        if frag_off != 0 {
            return; // not the first fragment: no L4 header here
        }
        // The datagram ends at its total length (Ethernet may pad short frames).
        let end = (off + total.max(ihl)).min(b.len());
        let Some(payload) = b.get(..end) else {
            return;
        };
        self.l4(block, h[9], payload, off + ihl);
    }

    fn ipv6(&mut self, block: usize, b: &[u8], off: usize) {
        let Some(h) = b.get(off..off + 40) else {
            return;
        };
        if h[0] >> 4 != 6 {
            return;
        }
        self.flag(block + PRESENT, P_IPV6);
        let vtf = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        self.b[block + TOS] = ((vtf >> 20) & 0xff) as u8;
        self.set(block + FLOW_LABEL, &(vtf & 0x000f_ffff).to_be_bytes());
        self.set(block + SIP, &h[8..24]);
        self.set(block + DIP, &h[24..40]);
        let plen = usize::from(u16::from_be_bytes([h[4], h[5]]));
        let end = (off + 40 + plen).min(b.len());
        let b = &b[..end];
        let mut next = h[6];
        let mut pos = off + 40;
        // Extension headers (RFC 8200 4.1), at most 8 of them.
        for _ in 0..8 {
            match next {
                0 | 43 | 60 => {
                    let (Some(nh), Some(len)) = (b.get(pos).copied(), b.get(pos + 1).copied())
                    else {
                        break;
                    };
                    next = nh;
                    pos += (usize::from(len) + 1) * 8;
                }
                51 => {
                    // AH: length in 4-byte units minus 2.
                    let (Some(nh), Some(len)) = (b.get(pos).copied(), b.get(pos + 1).copied())
                    else {
                        break;
                    };
                    next = nh;
                    pos += (usize::from(len) + 2) * 4;
                }
                44 => {
                    let (Some(nh), Some(fo)) = (b.get(pos).copied(), be16(b, pos + 2)) else {
                        break;
                    };
                    next = nh;
                    pos += 8;
                    if fo >> 3 != 0 {
                        self.b[block + PROTO] = next;
                        return;
                    }
                }
                _ => break,
            }
        }
        self.b[block + PROTO] = next;
        self.l4(block, next, b, pos);
    }

    fn l4(&mut self, block: usize, proto: u8, b: &[u8], off: usize) {
        match proto {
            6 | 17 => {
                let (Some(sport), Some(dport)) = (be16(b, off), be16(b, off + 2)) else {
                    return;
                };
                self.set(block + SPORT, &sport.to_be_bytes());
                self.set(block + DPORT, &dport.to_be_bytes());
                self.flag(block + PRESENT, P_PORTS);
                if proto == 17 && block == OUTER {
                    match dport {
                        VXLAN_PORT => self.vxlan(b, off + 8),
                        MPLS_UDP_PORT => self.mpls(MPLS_UDP, M_MPLS_UDP, b, off + 8),
                        _ => {}
                    }
                }
            }
            47 if block == OUTER => self.gre(b, off),
            // ESP encrypts what follows, so a packet has one readable SPI: the outer one,
            // or one inside a tunnel.
            50 => {
                if let Some(spi) = b.get(off..off + 4) {
                    self.set(ESP_SPI, spi);
                    self.flag(MISC_PRESENT, M_ESP);
                }
            }
            _ => {}
        }
    }

    /// VXLAN (RFC 7348): flags (I bit 0x08), 3 reserved, VNI 3, reserved 1; then the inner
    /// Ethernet frame.
    fn vxlan(&mut self, b: &[u8], off: usize) {
        let Some(h) = b.get(off..off + 8) else {
            return;
        };
        if h[0] & 0x08 == 0 {
            return; // VNI not valid
        }
        self.set(VNI, &[0, h[4], h[5], h[6]]);
        self.flag(MISC_PRESENT, M_VXLAN);
        let inner = &b[off + 8..];
        if let Some((et, ioff)) = self.l2(INNER, inner) {
            self.l3(INNER, et, inner, ioff);
        }
    }

    /// GRE (RFC 2784 / 2890): C K S bits, version, protocol, then optional checksum, key and
    /// sequence words.
    fn gre(&mut self, b: &[u8], off: usize) {
        let (Some(flags), Some(proto)) = (be16(b, off), be16(b, off + 2)) else {
            return;
        };
        if flags & 0x0007 != 0 {
            return; // only version 0 carries these options
        }
        self.set(GRE_PROTO, &proto.to_be_bytes());
        self.flag(MISC_PRESENT, M_GRE);
        let mut pos = off + 4;
        if flags & 0x8000 != 0 {
            pos += 4;
        }
        if flags & 0x2000 != 0 {
            let Some(key) = b.get(pos..pos + 4) else {
                return;
            };
            self.set(GRE_KEY, key);
            self.flag(MISC_PRESENT, M_GRE_KEY);
            pos += 4;
        }
        if flags & 0x1000 != 0 {
            pos += 4;
        }
        let Some(inner) = b.get(pos..) else {
            return;
        };
        match proto {
            0x6558 => {
                if let Some((et, ioff)) = self.l2(INNER, inner) {
                    self.l3(INNER, et, inner, ioff);
                }
            }
            0x0800 | 0x86dd => self.l3(INNER, proto, inner, 0),
            0x8847 | 0x8848 => self.mpls(MPLS_GRE, M_MPLS_GRE, inner, 0),
            _ => {}
        }
    }
}

fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuzz-found: a 16-byte frame whose VLAN tag is cut short used to be rejected as
    /// "not Ethernet"; it is an Ethernet frame with nothing readable after the TPID.
    #[test]
    fn truncated_vlan_tag_is_still_ethernet() {
        let mut f = vec![
            2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x81, 0x00, 0x65, 0x74,
        ];
        let fv = FieldVector::parse(&f).unwrap();
        assert_eq!(fv.present(OUTER), P_L2);
        assert_eq!(&fv.bytes()[ETHERTYPE..ETHERTYPE + 2], &[0x81, 0x00]);
        f.extend_from_slice(&[0x08, 0x00]);
        let fv = FieldVector::parse(&f).unwrap();
        assert_eq!(fv.present(OUTER), P_L2 | P_VLAN);
        assert_eq!(&fv.bytes()[VLAN..VLAN + 2], &[0x65, 0x74]);
        assert_eq!(&fv.bytes()[ETHERTYPE..ETHERTYPE + 2], &[0x08, 0x00]);
    }
}

/// Whether `frame` is an IP packet whose checksums verify, what `IBV_WC_IP_CSUM_OK` reports
/// (mlx5: IPv4 header checksum and TCP/UDP checksum both good): IPv4 header checksum
/// (RFC 791), and for an unfragmented TCP or UDP payload its checksum over the pseudo
/// header (RFC 793, RFC 768; UDP over IPv4 with checksum 0 carries none and passes;
/// RFC 8200 8.1). Non-IP frames, fragments and other protocols: false.
pub fn checksums_ok(frame: &[u8]) -> bool {
    let mut fv = FieldVector::default();
    let Some((ethertype, off)) = fv.l2(OUTER, frame) else {
        return false;
    };
    match ethertype {
        0x0800 => {
            let Some(h) = frame.get(off..off + 20) else {
                return false;
            };
            let ihl = usize::from(h[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let (Some(hdr), Some(dgram)) = (frame.get(off..off + ihl), frame.get(off..off + total))
            else {
                return false;
            };
            if h[0] >> 4 != 4 || ihl < 20 || total < ihl || sum(hdr, 0) != 0xffff {
                return false;
            }
            let frag = u16::from_be_bytes([h[6], h[7]]) & 0x3fff; // MF + offset
            let (proto, l4) = (h[9], &dgram[ihl..]);
            if frag != 0 || !matches!(proto, 6 | 17) {
                return false;
            }
            if proto == 17 && l4.len() >= 8 && l4[6] == 0 && l4[7] == 0 {
                return true; // no UDP checksum
            }
            let mut pseudo = [0u8; 12];
            pseudo[..8].copy_from_slice(&h[12..20]);
            pseudo[9] = proto;
            pseudo[10..].copy_from_slice(&(l4.len() as u16).to_be_bytes());
            l4.len() >= if proto == 6 { 20 } else { 8 } && sum(l4, sum(&pseudo, 0)) == 0xffff
        }
        0x86dd => {
            let Some(h) = frame.get(off..off + 40) else {
                return false;
            };
            let plen = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let Some(l4) = frame.get(off + 40..off + 40 + plen) else {
                return false;
            };
            let proto = h[6];
            if h[0] >> 4 != 6
                || !matches!(proto, 6 | 17)
                || l4.len() < if proto == 6 { 20 } else { 8 }
            {
                return false;
            }
            let mut pseudo = [0u8; 40];
            pseudo[..32].copy_from_slice(&h[8..40]);
            pseudo[32..36].copy_from_slice(&(l4.len() as u32).to_be_bytes());
            pseudo[39] = proto;
            sum(l4, sum(&pseudo, 0)) == 0xffff
        }
        _ => false,
    }
}

#[cfg(test)]
mod checksum_tests {
    use super::*;

    fn csum(acc: u32, b: &[u8]) -> u16 {
        !(sum(b, acc) as u16)
    }

    /// IPv4/UDP frame with correct checksums; `udp_csum` false leaves the UDP one 0.
    fn v4_udp(payload: &[u8], udp_csum: bool) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 8, 0];
        let total = 20 + 8 + payload.len();
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            1,
            0x40,
            0,
            64,
            17,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
        ];
        let c = csum(0, &ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut udp = vec![0x30, 0x39, 0x12, 0xb7, 0, (8 + payload.len()) as u8, 0, 0];
        udp.extend_from_slice(payload);
        if udp_csum {
            let mut pseudo = vec![10, 0, 0, 1, 10, 0, 0, 2, 0, 17, 0, udp.len() as u8];
            pseudo.extend_from_slice(&udp);
            let c = csum(0, &pseudo);
            udp[6..8].copy_from_slice(&c.to_be_bytes());
        }
        f.extend_from_slice(&ip);
        f.extend_from_slice(&udp);
        f
    }

    #[test]
    fn good_and_bad_checksums() {
        for with in [true, false] {
            let good = v4_udp(b"hello, flow", with);
            assert!(checksums_ok(&good), "udp csum {with}");
            let mut bad_ip = good.clone();
            bad_ip[14 + 8] ^= 1; // TTL without fixing the header checksum
            assert!(!checksums_ok(&bad_ip));
            let mut bad_payload = good.clone();
            *bad_payload.last_mut().unwrap() ^= 0x40;
            assert_eq!(
                checksums_ok(&bad_payload),
                !with,
                "a zero UDP checksum covers nothing"
            );
        }
        assert!(!checksums_ok(&[0u8; 60]), "not IP");
        assert!(!checksums_ok(&v4_udp(b"x", true)[..40]), "cut short");
    }

    /// The DESIGN §3 RoCE v2 vector: IPv4 header checksum 0x26b7 valid, UDP checksum 0.
    #[test]
    fn roce_vector_from_design() {
        let hex = "4500003400004000401126b70a0000010a000002c00012b7002000000430ffff000000118000000068656c6c6f00000006451676";
        let ip: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 8, 0];
        f.extend_from_slice(&ip);
        assert!(checksums_ok(&f));
    }
}
