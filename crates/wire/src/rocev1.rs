//! RoCE v1 frames (IBTA Annex A16): Ethernet with EtherType 0x8915, then the 40-byte IB
//! GRH (IPVer 6, NxtHdr 0x1B, PayLen counting the BTH through the ICRC, IBTA 8.3.1),
//! then the transport packet and its ICRC ([`crate::icrc::compute_grh_parts`]: the IBTA
//! 7.8.1 ICRC of an IB packet with a GRH, whose LRH enters as eight bytes of ones; checked
//! against the ICRCs Mellanox HCAs put on GRH-carrying IB packets, see
//! `testdata/icrc/README.md`).
//!
//! The Ethernet minimum frame size may add padding after the ICRC; PayLen says where
//! the packet ends, so the parser ignores it.

use crate::ethernet::{ethertype, EthernetFrame, EthernetRepr};
use crate::grh::{Gid, Grh, GrhRepr, GRH_LEN, NEXT_HEADER_BTH};
use crate::icrc::{self, ICRC_LEN};
use crate::packet::Packet;
use crate::{Error, Result};
use core::fmt;

/// The GRH fields a RoCE v1 sender chooses (PayLen and NxtHdr follow from the packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceV1Repr {
    /// GRH TClass.
    pub traffic_class: u8,
    /// GRH FlowLabel (20 bits; higher bits are an error on emit).
    pub flow_label: u32,
    /// GRH HopLmt.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: Gid,
    /// Destination GID.
    pub dgid: Gid,
}

impl RoceV1Repr {
    /// Writes the GRH, then `ib_packet` (BTH through the 4-byte ICRC slot, whose content
    /// is ignored), and fills in the ICRC. Returns the bytes written
    /// (`GRH_LEN + ib_packet.len()`).
    pub fn emit(&self, ib_packet: &[u8], buf: &mut [u8]) -> Result<usize> {
        if self.flow_label >> 20 != 0 {
            return Err(Error::Malformed("GRH FlowLabel wider than 20 bits"));
        }
        if ib_packet.len() < crate::bth::BTH_LEN + ICRC_LEN {
            return Err(Error::Truncated("BTH"));
        }
        let Ok(payload_len) = u16::try_from(ib_packet.len()) else {
            return Err(Error::Malformed("packet longer than GRH PayLen can say"));
        };
        let total = GRH_LEN + ib_packet.len();
        if buf.len() < total {
            return Err(Error::Truncated("RoCE v1 output buffer"));
        }
        GrhRepr {
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
            payload_len,
            next_header: NEXT_HEADER_BTH,
            hop_limit: self.hop_limit,
            sgid: self.sgid,
            dgid: self.dgid,
        }
        .emit(&mut buf[..GRH_LEN]);
        buf[GRH_LEN..total].copy_from_slice(ib_packet);
        fill_icrc(&mut buf[..total])?;
        Ok(total)
    }

    /// Writes an Ethernet header (`eth.ethertype` is replaced by 0x8915), then
    /// [`Self::emit`]. Returns the frame length (without any minimum-size padding).
    pub fn emit_frame(
        &self,
        eth: &EthernetRepr,
        ib_packet: &[u8],
        buf: &mut [u8],
    ) -> Result<usize> {
        let eth = EthernetRepr {
            ethertype: ethertype::ROCE_V1,
            ..*eth
        };
        let hl = eth.buffer_len();
        if buf.len() < hl {
            return Err(Error::Truncated("RoCE v1 output buffer"));
        }
        eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..hl]));
        Ok(hl + self.emit(ib_packet, &mut buf[hl..])?)
    }
}

/// Computes the ICRC of `grh_and_packet` (GRH, BTH ..., 4-byte ICRC slot, nothing after)
/// and writes it into the last four bytes.
pub fn fill_icrc(grh_and_packet: &mut [u8]) -> Result<()> {
    let crc = compute(grh_and_packet)?;
    let n = grh_and_packet.len();
    grh_and_packet[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// The ICRC that `grh_and_packet` (GRH, BTH ..., ICRC, nothing after) should carry.
fn compute(grh_and_packet: &[u8]) -> Result<u32> {
    if grh_and_packet.len() < GRH_LEN + crate::bth::BTH_LEN + ICRC_LEN {
        return Err(Error::Truncated("RoCE v1 packet"));
    }
    let (grh, rest) = grh_and_packet.split_at(GRH_LEN);
    icrc::compute_grh_parts(grh, &rest[..rest.len() - ICRC_LEN])
}

/// A parsed RoCE v1 packet.
#[derive(Debug, Clone)]
pub struct RoceV1Packet<'a> {
    /// The Ethernet header, when parsed from a frame.
    pub ethernet: Option<EthernetRepr>,
    /// The GRH.
    pub grh: GrhRepr,
    /// The transport packet (BTH through ICRC), checked.
    pub packet: Packet<&'a [u8]>,
    /// Whether the ICRC matched.
    pub icrc_ok: bool,
}

/// Parses bytes starting at the GRH: IPVer must be 6 and NxtHdr 0x1B (IBTA 8.3.1), PayLen
/// must fit in the buffer; bytes after PayLen (link padding) are ignored.
pub fn parse(grh_and_packet: &[u8]) -> Result<RoceV1Packet<'_>> {
    let view = Grh::new_checked(grh_and_packet)?;
    let grh = GrhRepr::parse(&view)?;
    if grh.next_header != NEXT_HEADER_BTH {
        return Err(Error::Malformed("GRH NxtHdr is not 0x1B (BTH)"));
    }
    let end = GRH_LEN + usize::from(grh.payload_len);
    if grh_and_packet.len() < end {
        return Err(Error::Truncated("RoCE v1 packet (GRH PayLen)"));
    }
    let packet = Packet::new_checked(&grh_and_packet[GRH_LEN..end])?;
    let icrc_ok = compute(&grh_and_packet[..end])? == packet.icrc();
    Ok(RoceV1Packet {
        ethernet: None,
        grh,
        packet,
        icrc_ok,
    })
}

/// Parses an Ethernet II frame (optionally 802.1Q-tagged): `Ok(None)` when its EtherType
/// is not 0x8915, else the RoCE v1 packet or why it is malformed.
pub fn parse_ethernet(frame: &[u8]) -> Result<Option<RoceV1Packet<'_>>> {
    let eth = EthernetFrame::new_checked(frame)?;
    let repr = EthernetRepr::parse(&eth)?;
    if repr.ethertype != ethertype::ROCE_V1 {
        return Ok(None);
    }
    let mut p = parse(&frame[eth.header_len()..])?;
    p.ethernet = Some(repr);
    Ok(Some(p))
}

/// `<sgid> > <dgid> <packet summary> icrc=<ok|bad>`
impl fmt::Display for RoceV1Packet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let icrc = if self.icrc_ok { "ok" } else { "bad" };
        write!(
            f,
            "{} > {} {} icrc={icrc}",
            self.grh.sgid, self.grh.dgid, self.packet
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::MacAddr;
    use std::string::ToString;
    use std::vec::Vec;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// GRH fe80::1 → fe80::2 (TClass 0, FlowLabel 0, PayLen 24, NxtHdr 0x1B, HopLmt 64),
    /// then the DESIGN §3 RC SEND_ONLY "hello" to QP 0x11. The ICRC 9d ac 45 7a was
    /// computed outside this crate (Python's zlib.crc32 over eight 0xff bytes, the GRH with
    /// TClass/FlowLabel/HopLmt set to ones and the BTH with byte 4 set to 0xff, then the
    /// payload and pad); the rule itself is checked against hardware-sent packets in
    /// `tests/icrc_hardware.rs`.
    const GRH_AND_PACKET: &str = "6000000000181b40fe800000000000000000000000000001fe8000000000000000000000000000020430ffff000000118000000068656c6c6f000000";
    const ICRC: [u8; 4] = [0x9d, 0xac, 0x45, 0x7a];

    fn vector() -> Vec<u8> {
        let mut v = hex(GRH_AND_PACKET);
        v.extend_from_slice(&ICRC);
        v
    }

    fn repr() -> RoceV1Repr {
        RoceV1Repr {
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            sgid: Gid(hex("fe800000000000000000000000000001").try_into().unwrap()),
            dgid: Gid(hex("fe800000000000000000000000000002").try_into().unwrap()),
        }
    }

    #[test]
    fn hand_built_vector() {
        let v = vector();
        let mut buf = [0u8; 128];
        let n = repr().emit(&v[GRH_LEN..], &mut buf).unwrap();
        assert_eq!(&buf[..n], &v[..]);
        let p = parse(&v).unwrap();
        assert!(p.icrc_ok);
        assert_eq!(p.grh.payload_len, 24);
        assert_eq!(p.packet.payload(), b"hello");
        assert_eq!(
            p.to_string(),
            "fe80::1 > fe80::2 RC_SEND_ONLY qpn=0x11 psn=0 ackreq pad=3 payload=5 icrc=ok"
        );
    }

    #[test]
    fn masked_fields_and_every_other_bit() {
        let v = vector();
        let mut m = v.clone();
        m[0] = 0x6f; // TClass high nibble
        m[1] = 0xa5; // TClass low nibble, FlowLabel
        m[2] = 0x12;
        m[3] = 0x34;
        m[7] = 1; // HopLmt
        m[GRH_LEN + 4] = 0xc0; // BTH FECN/BECN
        assert!(parse(&m).unwrap().icrc_ok);
        for byte in 0..v.len() {
            if [1, 2, 3, 7, GRH_LEN + 4].contains(&byte) {
                continue;
            }
            for bit in 0..8 {
                if byte == 0 && bit < 4 {
                    continue; // TClass high nibble
                }
                let mut c = v.clone();
                c[byte] ^= 1 << bit;
                // A flip in the framing fields is an error rather than a bad ICRC.
                if let Ok(p) = parse(&c) {
                    assert!(!p.icrc_ok, "byte {byte} bit {bit}");
                }
            }
        }
    }

    #[test]
    fn ethernet_frames_with_vlan_and_padding() {
        let v = vector();
        let eth = EthernetRepr {
            src: MacAddr([0x52, 0x54, 0, 0, 0, 1]),
            dst: MacAddr([0x52, 0x54, 0, 0, 0, 2]),
            vlan_tci: Some(0x2005),
            ethertype: ethertype::IPV4, // replaced
        };
        let mut buf = [0u8; 160];
        let n = repr().emit_frame(&eth, &v[GRH_LEN..], &mut buf).unwrap();
        assert_eq!(n, 18 + v.len());
        assert_eq!(&buf[16..18], &[0x89, 0x15]);
        // Minimum-size padding after the ICRC is ignored.
        let p = parse_ethernet(&buf[..n + 10]).unwrap().unwrap();
        assert!(p.icrc_ok);
        assert_eq!(p.ethernet.unwrap().vlan_tci, Some(0x2005));
        assert_eq!(p.ethernet.unwrap().ethertype, ethertype::ROCE_V1);
        // Another EtherType is not RoCE v1.
        buf[17] = 0x16;
        assert!(parse_ethernet(&buf[..n]).unwrap().is_none());
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let v = vector();
        assert_eq!(parse(&v[..39]).unwrap_err(), Error::Truncated("GRH"));
        assert_eq!(
            parse(&v[..v.len() - 1]).unwrap_err(),
            Error::Truncated("RoCE v1 packet (GRH PayLen)")
        );
        let mut c = v.clone();
        c[6] = 17; // NxtHdr UDP
        assert!(matches!(parse(&c), Err(Error::Malformed(_))));
        let mut c = v.clone();
        c[0] = 0x40; // IPVer 4
        assert!(matches!(parse(&c), Err(Error::Malformed(_))));
        let mut c = v.clone();
        c[5] = 8; // PayLen shorter than a BTH + ICRC
        assert!(parse(&c).is_err());
        let mut c = v.clone();
        c[5] = 22; // not a multiple of 4
        assert!(parse(&c).is_err());
        assert!(parse_ethernet(&[0u8; 10]).is_err());

        let mut small = [0u8; 40];
        assert_eq!(
            repr().emit(&v[GRH_LEN..], &mut small).unwrap_err(),
            Error::Truncated("RoCE v1 output buffer")
        );
        assert_eq!(
            repr()
                .emit(&v[GRH_LEN..GRH_LEN + 8], &mut [0u8; 64])
                .unwrap_err(),
            Error::Truncated("BTH")
        );
        let wide = RoceV1Repr {
            flow_label: 1 << 20,
            ..repr()
        };
        assert!(matches!(
            wide.emit(&v[GRH_LEN..], &mut [0u8; 64]),
            Err(Error::Malformed(_))
        ));
        assert!(icrc::compute_grh_parts(&v[..39], &v[GRH_LEN..]).is_err());
        assert!(icrc::compute_grh_parts(&v[..40], &v[GRH_LEN..GRH_LEN + 11]).is_err());
        assert!(fill_icrc(&mut [0u8; 50]).is_err());
    }
}
