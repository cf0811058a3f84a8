//! The RoCE v2 Invariant CRC (IBTA Annex A17.3.3; computed as the kernel's
//! `drivers/infiniband/sw/rxe/rxe_icrc.c` does).
//!
//! The ICRC is the standard CRC-32 (reflected, polynomial 0xEDB88320, as in zlib and
//! Ethernet) over:
//! 1. eight 0xFF bytes standing for the masked LRH (the kernel folds these into its
//!    seed 0xdebb20e3);
//! 2. the IP header with the fields that routers change set to all ones — IPv4: TOS,
//!    TTL, header checksum; IPv6: traffic class, flow label, hop limit;
//! 3. the UDP header with the checksum set to 0xFFFF;
//! 4. the BTH with byte 4 (FECN, BECN, reserved) set to 0xFF;
//! 5. the rest of the transport headers, the payload and the pad.
//!
//! It is appended after the pad, least significant byte first. The IPv4 Identification,
//! flags and lengths are covered, so a receiver needs the real IP header to check it.

use crate::bth::BTH_LEN;
use crate::{ipv4, ipv6, udp, Error, Result};
use crc32fast::Hasher;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

const MAX_MASKED: usize = 60 + udp::HEADER_LEN + BTH_LEN;

/// The ICRC of a packet given as its three parts: the IP header (IPv4 with any options,
/// or the 40-byte IPv6 header), the 8-byte UDP header, and the IB transport packet from
/// the BTH up to (not including) the ICRC. Returns the value whose little-endian bytes
/// are the trailer.
pub fn compute_parts(ip_header: &[u8], udp_header: &[u8], ib_packet: &[u8]) -> Result<u32> {
    if ip_header.is_empty() {
        return Err(Error::Truncated("IP header"));
    }
    if udp_header.len() != udp::HEADER_LEN {
        return Err(Error::Truncated("UDP header"));
    }
    if ib_packet.len() < BTH_LEN {
        return Err(Error::Truncated("BTH"));
    }
    let ip_len = ip_header.len();
    match ip_header[0] >> 4 {
        4 if (ipv4::HEADER_LEN..=60).contains(&ip_len) => {}
        6 if ip_len == ipv6::HEADER_LEN => {}
        4 | 6 => return Err(Error::Malformed("IP header length for ICRC")),
        _ => return Err(Error::Malformed("IP version is neither 4 nor 6")),
    }
    let mut masked = [0u8; MAX_MASKED];
    let (ip, rest) = masked.split_at_mut(ip_len);
    ip.copy_from_slice(ip_header);
    if ip[0] >> 4 == 4 {
        ip[1] = 0xff; // TOS
        ip[8] = 0xff; // TTL
        ip[10] = 0xff; // header checksum
        ip[11] = 0xff;
    } else {
        ip[0] |= 0x0f; // traffic class (high nibble) ...
        ip[1] = 0xff; // ... traffic class (low nibble) and flow label
        ip[2] = 0xff;
        ip[3] = 0xff;
        ip[7] = 0xff; // hop limit
    }
    rest[..8].copy_from_slice(udp_header);
    rest[6] = 0xff; // UDP checksum
    rest[7] = 0xff;
    rest[8..8 + BTH_LEN].copy_from_slice(&ib_packet[..BTH_LEN]);
    rest[8 + 4] = 0xff; // BTH byte 4: FECN, BECN, resv6
    let masked_len = ip_len + udp::HEADER_LEN + BTH_LEN;

    let mut h = Hasher::new();
    h.update(&[0xff; 8]);
    h.update(&masked[..masked_len]);
    h.update(&ib_packet[BTH_LEN..]);
    Ok(h.finalize())
}

/// Splits an IP datagram (IPv4 or IPv6, starting at the IP header, possibly followed by
/// link-layer padding) into IP header, UDP header and UDP payload.
fn split(datagram: &[u8]) -> Result<(&[u8], &[u8], &[u8])> {
    let (ip_header, ip_payload) = match datagram.first().map(|b| b >> 4) {
        Some(4) => {
            let p = ipv4::Ipv4Packet::new_checked(datagram)?;
            let hl = p.header_len();
            (&datagram[..hl], p.payload())
        }
        Some(6) => {
            let p = ipv6::Ipv6Packet::new_checked(datagram)?;
            (&datagram[..ipv6::HEADER_LEN], p.payload())
        }
        Some(_) => return Err(Error::Malformed("IP version is neither 4 nor 6")),
        None => return Err(Error::Truncated("IP header")),
    };
    let u = udp::UdpPacket::new_checked(ip_payload)?;
    let udp_len = usize::from(u.len());
    Ok((
        ip_header,
        &ip_payload[..udp::HEADER_LEN],
        &ip_payload[udp::HEADER_LEN..udp_len],
    ))
}

/// The ICRC a datagram should carry: computed over everything but the last four bytes of
/// its UDP payload.
pub fn compute(datagram: &[u8]) -> Result<u32> {
    let (ip, udp_hdr, payload) = split(datagram)?;
    if payload.len() < BTH_LEN + ICRC_LEN {
        return Err(Error::Truncated("RoCE v2 packet"));
    }
    compute_parts(ip, udp_hdr, &payload[..payload.len() - ICRC_LEN])
}

/// The ICRC a datagram carries (its last four UDP payload bytes, little-endian).
pub fn carried(datagram: &[u8]) -> Result<u32> {
    let (_, _, payload) = split(datagram)?;
    let Some(at) = payload.len().checked_sub(ICRC_LEN) else {
        return Err(Error::Truncated("ICRC"));
    };
    let mut b = [0u8; 4];
    b.copy_from_slice(&payload[at..]);
    Ok(u32::from_le_bytes(b))
}

/// True when a datagram's ICRC is right.
pub fn verify(datagram: &[u8]) -> Result<bool> {
    Ok(compute(datagram)? == carried(datagram)?)
}

/// Computes the ICRC of a datagram and writes it into its last four UDP payload bytes.
pub fn fill(datagram: &mut [u8]) -> Result<()> {
    let crc = compute(datagram)?;
    let (ip, udp_hdr, payload) = split(datagram)?;
    let end = ip.len() + udp_hdr.len() + payload.len();
    datagram[end - ICRC_LEN..end].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> std::vec::Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// DESIGN §3: IPv4 10.0.0.1 → 10.0.0.2, RC SEND_ONLY "hello", ICRC 06 45 16 76.
    const VECTOR: &str = "4500003400004000401126b70a0000010a000002c00012b7002000000430ffff000000118000000068656c6c6f000000";

    #[test]
    fn design_vector() {
        let mut d = hex(VECTOR);
        d.extend_from_slice(&[0, 0, 0, 0]);
        fill(&mut d).unwrap();
        assert_eq!(&d[d.len() - 4..], &[0x06, 0x45, 0x16, 0x76]);
        assert!(verify(&d).unwrap());
        // Masked fields do not change it ...
        let mut m = d.clone();
        m[1] = 0xb8; // TOS
        m[8] = 3; // TTL
        m[26] = 0x12; // UDP checksum
        m[32] = 0xc0; // BTH FECN/BECN
        assert!(verify(&m).unwrap());
        // ... and every other bit does.
        for byte in 0..d.len() {
            if [1, 8, 10, 11, 26, 27, 32].contains(&byte) {
                continue;
            }
            for bit in 0..8 {
                let mut c = d.clone();
                c[byte] ^= 1 << bit;
                // A flip may break the IP/UDP framing itself; then it is an error, not a pass.
                assert_ne!(verify(&c), Ok(true), "byte {byte} bit {bit}");
            }
        }
    }

    #[test]
    fn ipv6_masks_tc_flow_and_hop_limit() {
        let mut d = std::vec![0u8; 40 + 8 + 12 + 4];
        d[0] = 0x60;
        d[4..6].copy_from_slice(&(8u16 + 16).to_be_bytes());
        d[6] = 17;
        d[7] = 64;
        d[8] = 0xfd;
        d[24] = 0xfd;
        d[40..42].copy_from_slice(&0xc000u16.to_be_bytes());
        d[42..44].copy_from_slice(&4791u16.to_be_bytes());
        d[44..46].copy_from_slice(&24u16.to_be_bytes());
        d[48] = 0x11; // RC ACKNOWLEDGE (no AETH needed for the CRC itself)
        fill(&mut d).unwrap();
        let mut m = d.clone();
        m[0] = 0x6f;
        m[1] = 0xab;
        m[3] = 0x42;
        m[7] = 1;
        assert!(verify(&m).unwrap());
        m[9] ^= 1;
        assert!(!verify(&m).unwrap());
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(compute(&[]).is_err());
        assert!(compute(&[0x55; 60]).is_err());
        assert!(compute_parts(&[0x45; 20], &[0; 7], &[0; 12]).is_err());
        assert!(compute_parts(&[0x45; 20], &[0; 8], &[0; 11]).is_err());
        assert!(compute_parts(&[0x65; 20], &[0; 8], &[0; 12]).is_err());
        // The IP header announces 52 bytes; 20 are present.
        assert!(compute(&hex(VECTOR)[..20]).is_err());
    }
}
