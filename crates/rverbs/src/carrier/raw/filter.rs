//! The RoCE socket's classic BPF filter (opcodes and ancillary offsets of
//! linux/filter.h; `bpf(4)`).

use rverbs_raw::SockFilter;
use rverbs_wire::arp;
use rverbs_wire::ethernet::{ethertype, EthernetFrame};
use rverbs_wire::ndisc;

/// The classic BPF program of the RoCE socket (opcodes and ancillary offsets of
/// linux/filter.h; `bpf(4)`): frames for this host's link address, broadcast or
/// multicast (`SKF_AD_PKTTYPE` not `PACKET_OTHERHOST`) that are RoCE v1 (EtherType
/// 0x8915, IBTA Annex A16), ARP (RFC 826), ICMPv6 Neighbor Solicitations and
/// Advertisements (RFC 4861 4.3-4.4, types 135 and 136) right after the IPv6 header,
/// and with `v2` IPv4 / IPv6 UDP to port 4791 (IBTA Annex A17). The kernel's packet
/// taps see a frame after it took a VLAN tag out (`skb_vlan_untag`), so tagged frames
/// pass too and are counted as such by the receiver. Which IP address a frame is for
/// is checked by the receiver (counted as `rx_not_ours`), not here: the addresses
/// change while the socket lives.
pub(crate) fn roce_filter(v2: bool) -> Vec<SockFilter> {
    const LD_W_ABS: u16 = 0x20;
    const LD_H_ABS: u16 = 0x28;
    const LD_B_ABS: u16 = 0x30;
    const LD_H_IND: u16 = 0x48;
    const LDX_B_MSH: u16 = 0xb1;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const SKF_AD_PKTTYPE: u32 = (-0x1000i32 + 4) as u32;
    const PACKET_OTHERHOST: u32 = 3;
    #[derive(Clone, Copy, PartialEq)]
    enum L {
        Next,
        Accept,
        Reject,
        V4,
        V6,
        Icmp6,
    }
    // (code, k, jump-if-true, jump-if-false) with symbolic targets; a label marks the
    // next instruction.
    let mut ins: Vec<(u16, u32, L, L)> = Vec::new();
    let mut at: Vec<(L, usize)> = Vec::new();
    let port = u32::from(rverbs_wire::udp::ROCE_V2_PORT);
    ins.push((LD_W_ABS, SKF_AD_PKTTYPE, L::Next, L::Next));
    ins.push((JEQ_K, PACKET_OTHERHOST, L::Reject, L::Next));
    ins.push((LD_H_ABS, 12, L::Next, L::Next));
    ins.push((JEQ_K, ethertype::ROCE_V1.into(), L::Accept, L::Next));
    ins.push((JEQ_K, arp::ETHERTYPE.into(), L::Accept, L::Next));
    if v2 {
        ins.push((JEQ_K, ethertype::IPV4.into(), L::V4, L::Next));
    }
    ins.push((JEQ_K, ethertype::IPV6.into(), L::V6, L::Reject));
    if v2 {
        at.push((L::V4, ins.len()));
        ins.push((LD_B_ABS, 14 + 9, L::Next, L::Next));
        ins.push((JEQ_K, 17, L::Next, L::Reject));
        // X = the IPv4 header's length; A = the UDP destination port behind it.
        ins.push((LDX_B_MSH, 14, L::Next, L::Next));
        ins.push((LD_H_IND, 14 + 2, L::Next, L::Next));
        ins.push((JEQ_K, port, L::Accept, L::Reject));
    }
    at.push((L::V6, ins.len()));
    ins.push((LD_B_ABS, 14 + 6, L::Next, L::Next));
    if v2 {
        ins.push((JEQ_K, u32::from(ndisc::PROTO_ICMPV6), L::Icmp6, L::Next));
        ins.push((JEQ_K, 17, L::Next, L::Reject));
        ins.push((LD_H_ABS, 14 + 40 + 2, L::Next, L::Next));
        ins.push((JEQ_K, port, L::Accept, L::Reject));
    } else {
        ins.push((JEQ_K, u32::from(ndisc::PROTO_ICMPV6), L::Icmp6, L::Reject));
    }
    at.push((L::Icmp6, ins.len()));
    ins.push((LD_B_ABS, 14 + 40, L::Next, L::Next));
    ins.push((JEQ_K, 135, L::Accept, L::Next));
    ins.push((JEQ_K, 136, L::Accept, L::Reject));
    at.push((L::Reject, ins.len()));
    ins.push((RET_K, 0, L::Next, L::Next));
    at.push((L::Accept, ins.len()));
    ins.push((RET_K, u32::MAX, L::Next, L::Next));
    let off = |pc: usize, l: L| -> u8 {
        if l == L::Next {
            return 0;
        }
        let to = at.iter().find(|(m, _)| *m == l).map_or(pc + 1, |&(_, i)| i);
        // Forward jumps only, within one byte: the program is short.
        u8::try_from(to - pc - 1).unwrap_or(0)
    };
    ins.iter()
        .enumerate()
        .map(|(pc, &(code, k, t, f))| SockFilter {
            code,
            jt: off(pc, t),
            jf: off(pc, f),
            k,
        })
        .collect()
}

pub(crate) fn is_icmpv6(f: &[u8]) -> bool {
    EthernetFrame::new_checked(f)
        .ok()
        .and_then(|e| e.payload().get(6).copied())
        == Some(ndisc::PROTO_ICMPV6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_wire::ethernet::MacAddr;
    use std::net::IpAddr;

    fn run_bpf(prog: &[SockFilter], f: &[u8], pkttype: u32) -> Option<u32> {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let ld = |off: usize, n: usize| -> Option<u32> {
            let b = f.get(off..off + n)?;
            Some(b.iter().fold(0u32, |acc, &v| acc << 8 | u32::from(v)))
        };
        loop {
            let i = prog.get(pc)?;
            pc += 1;
            match i.code {
                0x20 if i.k == (-0x1000i32 + 4) as u32 => a = pkttype,
                0x28 => a = ld(i.k as usize, 2)?,
                0x30 => a = ld(i.k as usize, 1)?,
                0x48 => a = ld(x as usize + i.k as usize, 2)?,
                0xb1 => x = (ld(i.k as usize, 1)? & 0xf) * 4,
                0x15 => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                0x06 => return Some(i.k),
                _ => return None,
            }
        }
    }

    #[test]
    fn roce_socket_filter() {
        use rverbs_wire::rocev2::RoceV2Repr;
        let v4 = |s: &str| s.parse::<IpAddr>().unwrap();
        let repr = |src: &str, dst: &str| RoceV2Repr {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src: v4(src),
            dst: v4(dst),
            src_port: 0xc000,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            ipv4_ident: 0,
        };
        let emit = |r: RoceV2Repr| {
            let ib = [0u8; 16];
            let mut f = vec![0u8; r.frame_len(ib.len())];
            r.emit_frame(&ib, &mut f).unwrap();
            f
        };
        let roce4 = emit(repr("10.0.0.1", "10.0.0.2"));
        let roce6 = emit(repr("fd00::1", "fd00::2"));
        // The same with IPv4 options (IHL 6): the port is found behind them.
        let mut opts = roce4[..34].to_vec();
        opts.extend_from_slice(&[1, 1, 1, 0]);
        opts.extend_from_slice(&roce4[34..]);
        opts[14] = 0x46;
        let mut other_port = roce4.clone();
        other_port[36..38].copy_from_slice(&4790u16.to_be_bytes());
        let mut tcp = roce4.clone();
        tcp[23] = 6;
        let mut v1 = vec![0u8; 80];
        v1[12..14].copy_from_slice(&ethertype::ROCE_V1.to_be_bytes());
        let mut arp_f = vec![0u8; 42];
        arp_f[12..14].copy_from_slice(&arp::ETHERTYPE.to_be_bytes());
        let nd = |ty: u8| {
            let mut f = vec![0u8; 14 + 40 + 24];
            f[12..14].copy_from_slice(&ethertype::IPV6.to_be_bytes());
            f[14 + 6] = ndisc::PROTO_ICMPV6;
            f[14 + 40] = ty;
            f
        };
        let mut short = roce4[..30].to_vec();
        short[23] = 17;
        for v2 in [true, false] {
            let prog = roce_filter(v2);
            let pass = |f: &[u8], pkttype: u32| run_bpf(&prog, f, pkttype).map(|k| k != 0);
            let want = Some(v2);
            assert_eq!(pass(&roce4, 0), want, "v2 {v2}");
            assert_eq!(pass(&roce6, 0), want);
            assert_eq!(pass(&opts, 2), want, "multicast, options");
            assert_eq!(pass(&roce4, 3), Some(false), "another host's MAC");
            assert_eq!(pass(&v1, 0), Some(true));
            assert_eq!(pass(&v1, 3), Some(false));
            assert_eq!(pass(&arp_f, 1), Some(true), "broadcast ARP");
            assert_eq!(pass(&nd(135), 2), Some(true));
            assert_eq!(pass(&nd(136), 0), Some(true));
            assert_eq!(pass(&nd(128), 0), Some(false), "echo request");
            assert_eq!(pass(&other_port, 0), Some(false));
            assert_eq!(pass(&tcp, 0), Some(false));
            // Too short for the port: the kernel's load fails, which rejects the frame
            // (`None` here, never an accept).
            assert_ne!(pass(&short, 0), Some(true));
        }
    }
}
