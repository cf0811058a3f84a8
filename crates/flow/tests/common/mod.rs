//! Frame builders for the flow tests (checksums are not needed by the parser and left 0;
//! [`with_checksums`] fills them in for frames sent through a kernel).
#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
pub const MAC_MC: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 1];

/// Ethernet header (+ one 802.1Q tag when `vlan` is Some(tci)).
pub fn eth(
    dst: [u8; 6],
    src: [u8; 6],
    vlan: Option<u16>,
    ethertype: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(tci) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, tos: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, tos];
    h.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(payload);
    h
}

pub fn ipv6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: u8,
    tc: u8,
    flow_label: u32,
    payload: &[u8],
) -> Vec<u8> {
    let vtf = (6u32 << 28) | (u32::from(tc) << 20) | (flow_label & 0xfffff);
    let mut h = vtf.to_be_bytes().to_vec();
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(payload);
    h
}

pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = sport.to_be_bytes().to_vec();
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(payload);
    h
}

pub fn tcp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = sport.to_be_bytes().to_vec();
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&[0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    h.extend_from_slice(payload);
    h
}

pub fn vxlan(vni: u32, inner: &[u8]) -> Vec<u8> {
    let mut h = vec![0x08, 0, 0, 0];
    h.extend_from_slice(&(vni << 8).to_be_bytes());
    h.extend_from_slice(inner);
    h
}

pub fn gre(proto: u16, key: Option<u32>, payload: &[u8]) -> Vec<u8> {
    let flags: u16 = if key.is_some() { 0x2000 } else { 0 };
    let mut h = flags.to_be_bytes().to_vec();
    h.extend_from_slice(&proto.to_be_bytes());
    if let Some(k) = key {
        h.extend_from_slice(&k.to_be_bytes());
    }
    h.extend_from_slice(payload);
    h
}

pub fn mpls(label: u32, tc: u8, bos: bool, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let e = (label << 12) | (u32::from(tc & 7) << 9) | (u32::from(bos) << 8) | u32::from(ttl);
    let mut h = e.to_be_bytes().to_vec();
    h.extend_from_slice(payload);
    h
}

pub fn esp(spi: u32, seq: u32) -> Vec<u8> {
    let mut h = spi.to_be_bytes().to_vec();
    h.extend_from_slice(&seq.to_be_bytes());
    h.extend_from_slice(&[0xaa; 16]);
    h
}

pub fn a4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

pub fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// An IPv4/UDP frame A→B.
pub fn udp4(src: &str, dst: &str, sport: u16, dport: u16) -> Vec<u8> {
    eth(
        MAC_B,
        MAC_A,
        None,
        0x0800,
        &ipv4(a4(src), a4(dst), 17, 0, &udp(sport, dport, b"payload")),
    )
}

/// An IPv4/TCP frame A→B.
pub fn tcp4(src: &str, dst: &str, sport: u16, dport: u16) -> Vec<u8> {
    eth(
        MAC_B,
        MAC_A,
        None,
        0x0800,
        &ipv4(a4(src), a4(dst), 6, 0, &tcp(sport, dport, b"payload")),
    )
}

/// A VXLAN frame A→B (10.0.0.1 → 10.0.0.2, UDP `sport` → 4789) carrying `inner`.
pub fn vxlan4(sport: u16, vni: u32, inner: &[u8]) -> Vec<u8> {
    eth(
        MAC_B,
        MAC_A,
        None,
        0x0800,
        &ipv4(
            a4("10.0.0.1"),
            a4("10.0.0.2"),
            17,
            0,
            &udp(sport, 4789, &vxlan(vni, inner)),
        ),
    )
}

/// Fills in the IPv4 header and UDP checksums of an untagged IPv4/UDP frame.
pub fn with_checksums(mut f: Vec<u8>) -> Vec<u8> {
    fn sum(b: &[u8]) -> u16 {
        let mut acc: u32 = b
            .chunks(2)
            .map(|c| (u32::from(c[0]) << 8) | u32::from(*c.get(1).unwrap_or(&0)))
            .sum();
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }
    let ip = sum(&f[14..34]);
    f[24..26].copy_from_slice(&ip.to_be_bytes());
    let mut pseudo = f[26..34].to_vec();
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&((f.len() - 34) as u16).to_be_bytes());
    pseudo.extend_from_slice(&f[34..]);
    let udp = sum(&pseudo);
    f[40..42].copy_from_slice(&udp.to_be_bytes());
    f
}
