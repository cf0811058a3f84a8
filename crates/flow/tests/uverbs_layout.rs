//! The uverbs serialisation against byte vectors written by hand from the structure
//! layouts in rdma-core `kernel-headers/rdma/ib_user_verbs.h` (`ib_uverbs_flow_attr`,
//! `ib_uverbs_flow_spec_*`) and `libibverbs/kern-abi.h` (`ibv_kern_spec_ipv4`). Host-order
//! fields are little-endian here, so the vectors are for little-endian targets.
#![cfg(target_endian = "little")]

use rverbs_flow::attr::*;
use rverbs_flow::uverbs::{decode_flow_attr, encode_create_flow, encode_flow_attr, spec_len};
use std::net::{Ipv4Addr, Ipv6Addr};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn no_counters(_: u32) -> Option<Counters> {
    None
}

fn roundtrip(attr: &FlowAttr) {
    let back = decode_flow_attr(&encode_flow_attr(attr), &no_counters).unwrap();
    assert_eq!(&back, attr);
}

/// The example of `ibv_create_flow(3)`: destination MAC 66:11:22:33:44:55 (and an
/// all-ones source MAC mask) plus IPv4 source 0x0B86C806.
#[test]
fn man_page_example() {
    let attr = FlowAttr::normal(
        0,
        vec![
            FlowSpec::Eth(Layer::outer(
                EthFilter {
                    dst_mac: [0x66, 0x11, 0x22, 0x33, 0x44, 0x55],
                    ..Default::default()
                },
                EthFilter {
                    dst_mac: [0xff; 6],
                    src_mac: [0xff; 6],
                    ..Default::default()
                },
            )),
            FlowSpec::Ipv4(Layer::outer(
                Ipv4Filter {
                    src_ip: Ipv4Addr::from(0x0B86_C806),
                    ..Default::default()
                },
                Ipv4Filter {
                    src_ip: Ipv4Addr::BROADCAST,
                    ..Default::default()
                },
            )),
        ],
    );
    let want = hex("
        00000000 4000 0000 02 0000 01 00000000
        20000000 2800 0000  661122334455 000000000000 0000 0000  ffffffffffff ffffffffffff 0000 0000
        30000000 1800 0000  0b86c806 00000000  ffffffff 00000000");
    assert_eq!(encode_flow_attr(&attr), want);
    roundtrip(&attr);
    // ib_uverbs_create_flow: comp_mask, qp_handle, then the attribute.
    let cmd = encode_create_flow(&attr, 0x1234);
    assert_eq!(&cmd[..8], &hex("00000000 34120000")[..]);
    assert_eq!(&cmd[8..], &want[..]);
}

#[test]
fn every_spec_layout() {
    let ipv6 = FlowSpec::Ipv6(Layer::inner(
        Ipv6Filter {
            src_ip: Ipv6Addr::from([0x11; 16]),
            dst_ip: Ipv6Addr::from([0x22; 16]),
            flow_label: 0xabcde,
            next_hdr: 17,
            traffic_class: 0x2e,
            hop_limit: 0,
        },
        Ipv6Filter {
            src_ip: Ipv6Addr::UNSPECIFIED,
            dst_ip: Ipv6Addr::from([0xff; 16]),
            flow_label: 0xfffff,
            next_hdr: 0xff,
            traffic_class: 0xfc,
            hop_limit: 0,
        },
    ));
    let v4ext = FlowSpec::Ipv4Ext(Layer::outer(
        Ipv4ExtFilter {
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            proto: 17,
            tos: 0x10,
            ttl: 0,
            flags: 0,
        },
        Ipv4ExtFilter {
            src_ip: Ipv4Addr::BROADCAST,
            dst_ip: Ipv4Addr::new(255, 255, 255, 0),
            proto: 0xff,
            tos: 0xff,
            ttl: 0,
            flags: 0,
        },
    ));
    let cases: Vec<(FlowSpec, usize, &str)> = vec![
        (v4ext, spec_len::IPV4_EXT, "
            30000000 2000 0000  0a000001 0a000002 11 10 00 00  ffffffff ffffff00 ff ff 00 00"),
        (ipv6, spec_len::IPV6, "
            31010000 5800 0000
            11111111111111111111111111111111 22222222222222222222222222222222 000abcde 11 2e 00 00
            00000000000000000000000000000000 ffffffffffffffffffffffffffffffff 000fffff ff fc 00 00"),
        (FlowSpec::Tcp(Layer::outer(TcpUdpFilter { dst_port: 80, src_port: 0x1234 }, TcpUdpFilter { dst_port: 0xffff, src_port: 0xff00 })), spec_len::TCP_UDP, "
            40000000 1000 0000  0050 1234  ffff ff00"),
        (FlowSpec::udp_dst(Some(4791)).into_inner(), spec_len::TCP_UDP, "
            41010000 1000 0000  12b7 0000  ffff 0000"),
        (FlowSpec::vxlan_vni(0x123456), spec_len::TUNNEL, "
            50000000 1000 0000  00123456  00ffffff"),
        (FlowSpec::Gre(Layer::outer(GreFilter { c_ks_res0_ver: 0, protocol: 0x6558, key: 0xdeadbeef }, GreFilter { c_ks_res0_ver: 0, protocol: 0xffff, key: 0xffffffff })), spec_len::GRE, "
            51000000 1800 0000  0000 6558 deadbeef  0000 ffff ffffffff"),
        (FlowSpec::Mpls(Layer::inner(MplsFilter { label: 0x0006_4140 }, MplsFilter { label: 0xffff_f000 })), spec_len::MPLS, "
            60010000 1000 0000  00064140  fffff000"),
        (FlowSpec::Esp(Layer::outer(EspFilter { spi: 0x0102_0304, seq: 0 }, EspFilter { spi: 0xffff_ffff, seq: 0 })), spec_len::ESP, "
            34000000 1800 0000  01020304 00000000  ffffffff 00000000"),
        (FlowSpec::vlan_id(0x123), spec_len::ETH, "
            20000000 2800 0000  000000000000 000000000000 0000 0123  000000000000 000000000000 0000 0fff"),
        (FlowSpec::Tag(0x00abcdef), spec_len::TAG, "
            00100000 1000 0000  efcdab00 00000000"),
        (FlowSpec::Drop, spec_len::DROP, "
            01100000 0800 0000"),
        (FlowSpec::ActionHandle(7), spec_len::HANDLE, "
            02100000 1000 0000  07000000 00000000"),
    ];
    for (spec, len, bytes) in cases {
        let attr = FlowAttr::normal(3, vec![spec.clone()]);
        let enc = encode_flow_attr(&attr);
        let mut want = hex(&format!("00000000 {:02x}00 0300 01 0000 01 00000000", len));
        want.extend(hex(bytes));
        assert_eq!(enc, want, "{}", spec.name());
        assert_eq!(enc.len(), 16 + len, "{}", spec.name());
        if !matches!(spec, FlowSpec::ActionHandle(_)) {
            roundtrip(&attr);
        }
    }
}

#[test]
fn count_carries_the_counters_handle_and_flags_priority_port() {
    let c = Counters::new();
    let attr = FlowAttr {
        attr_type: FlowAttrType::Sniffer,
        priority: 0x0102,
        port: 2,
        flags: FlowFlags::DONT_TRAP | FlowFlags::EGRESS,
        specs: vec![FlowSpec::Count(c.clone())],
    };
    let mut want = hex("03000000 1000 0201 01 0000 02 06000000 03100000 1000 0000");
    want.extend_from_slice(&c.handle().to_le_bytes());
    want.extend_from_slice(&[0; 4]);
    assert_eq!(encode_flow_attr(&attr), want);
    let lookup = |h: u32| (h == c.handle()).then(|| c.clone());
    assert_eq!(decode_flow_attr(&want, &lookup).unwrap(), attr);
}
