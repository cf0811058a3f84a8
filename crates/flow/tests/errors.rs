//! Every documented `ibv_create_flow` failure returns the errno the kernel (and mlx5, for
//! what a NIC accepts) returns: a table of typed attributes through `validate`, and a
//! table of raw uverbs commands through `decode_flow_attr`.

mod common;

use rverbs_flow::attr::*;
use rverbs_flow::error::errno::{EINVAL, ENOMEM, EOPNOTSUPP, EPERM};
use rverbs_flow::uverbs::{decode_flow_attr, encode_flow_attr};
use std::net::{Ipv4Addr, Ipv6Addr};

fn ipv4_ext(val: Ipv4ExtFilter, mask: Ipv4ExtFilter) -> FlowSpec {
    FlowSpec::Ipv4Ext(Layer::outer(val, mask))
}

fn ipv6(val: Ipv6Filter, mask: Ipv6Filter) -> FlowSpec {
    FlowSpec::Ipv6(Layer::outer(val, mask))
}

fn eth_type(val: u16, mask: u16) -> FlowSpec {
    FlowSpec::Eth(Layer::outer(
        EthFilter {
            ether_type: val,
            ..Default::default()
        },
        EthFilter {
            ether_type: mask,
            ..Default::default()
        },
    ))
}

fn with_flags(mut a: FlowAttr, flags: u32) -> FlowAttr {
    a.flags = FlowFlags::from_bits_retain(flags);
    a
}

fn typed_cases() -> Vec<(&'static str, FlowAttr, FlowContext, Option<i32>)> {
    let ok = FlowContext::raw_packet();
    let n = |specs| FlowAttr::normal(0, specs);
    let all_default = FlowAttr::of_type(FlowAttrType::AllDefault);
    let mc_default = FlowAttr::of_type(FlowAttrType::McDefault);
    let udp = FlowSpec::udp_dst(Some(4791));
    let v4 = FlowSpec::ipv4_dst(Ipv4Addr::new(10, 0, 0, 1));
    let counters = Counters::new();
    vec![
        // ---- success cases (the table must also accept what is valid) ----
        ("plain udp rule", n(vec![v4.clone(), udp.clone()]), ok, None),
        (
            "UD QP",
            n(vec![udp.clone()]),
            FlowContext {
                qp_type: FlowQpType::Ud,
                ..ok
            },
            None,
        ),
        (
            "priority 15 (last mlx5 table)",
            FlowAttr::normal(15, vec![udp.clone()]),
            ok,
            None,
        ),
        (
            "ethertype 0x0800 with IPv4",
            n(vec![eth_type(0x0800, 0xffff), v4.clone()]),
            ok,
            None,
        ),
        (
            "MPLS ethertype with IPv4",
            n(vec![eth_type(0x8847, 0xffff), v4.clone()]),
            ok,
            None,
        ),
        (
            "outer and inner IPv4",
            n(vec![
                v4.clone(),
                FlowSpec::vxlan_vni(5),
                v4.clone().into_inner(),
            ]),
            ok,
            None,
        ),
        (
            "sniffer",
            FlowAttr::of_type(FlowAttrType::Sniffer),
            ok,
            None,
        ),
        (
            "DONT_TRAP normal",
            with_flags(n(vec![udp.clone()]), 2),
            ok,
            None,
        ),
        (
            "EGRESS normal with DROP",
            with_flags(n(vec![udp.clone(), FlowSpec::Drop]), 4),
            ok,
            None,
        ),
        (
            "default priority ignored",
            FlowAttr {
                priority: 999,
                ..all_default.clone()
            },
            ok,
            None,
        ),
        (
            "MPLS at two positions",
            n(vec![
                FlowSpec::Mpls(Layer::outer(
                    MplsFilter { label: 1 << 12 },
                    MplsFilter { label: 0xfffff000 },
                )),
                FlowSpec::udp_dst(Some(6635)),
                FlowSpec::Mpls(Layer::outer(
                    MplsFilter { label: 2 << 12 },
                    MplsFilter { label: 0xfffff000 },
                )),
            ]),
            ok,
            None,
        ),
        (
            "tag, count and drop together",
            n(vec![
                udp.clone(),
                FlowSpec::Tag(0xff_ffff),
                FlowSpec::Count(counters.clone()),
                FlowSpec::Drop,
            ]),
            ok,
            None,
        ),
        // ---- uverbs_cmd.c ib_uverbs_ex_create_flow ----
        (
            "no CAP_NET_RAW",
            n(vec![udp.clone()]),
            FlowContext {
                cap_net_raw: false,
                ..ok
            },
            Some(EPERM),
        ),
        (
            "deprecated flag bit 0",
            with_flags(n(vec![udp.clone()]), 1),
            ok,
            Some(EINVAL),
        ),
        (
            "reserved flag bit 3",
            with_flags(n(vec![udp.clone()]), 8),
            ok,
            Some(EINVAL),
        ),
        (
            "DONT_TRAP on ALL_DEFAULT",
            with_flags(all_default.clone(), 2),
            ok,
            Some(EINVAL),
        ),
        (
            "DONT_TRAP on MC_DEFAULT",
            with_flags(mc_default.clone(), 2),
            ok,
            Some(EINVAL),
        ),
        (
            "11 specs",
            n((0..11).map(|_| FlowSpec::Drop).collect()),
            ok,
            Some(EINVAL),
        ),
        (
            "port 0",
            FlowAttr {
                port: 0,
                ..n(vec![udp.clone()])
            },
            ok,
            Some(EINVAL),
        ),
        (
            "port 2 of a 1-port device",
            FlowAttr {
                port: 2,
                ..n(vec![udp.clone()])
            },
            ok,
            Some(EINVAL),
        ),
        (
            "RC QP",
            n(vec![udp.clone()]),
            FlowContext {
                qp_type: FlowQpType::Other,
                ..ok
            },
            Some(EINVAL),
        ),
        // ---- kern_spec_to_ib_spec_filter / rdma-core ib_spec_to_kern_spec ----
        (
            "IPv6 flow label value >= 2^20",
            n(vec![ipv6(
                Ipv6Filter {
                    flow_label: 1 << 20,
                    ..Default::default()
                },
                Ipv6Filter::default(),
            )]),
            ok,
            Some(EINVAL),
        ),
        (
            "IPv6 flow label mask >= 2^20",
            n(vec![ipv6(
                Ipv6Filter::default(),
                Ipv6Filter {
                    flow_label: 0x1fffff,
                    ..Default::default()
                },
            )]),
            ok,
            Some(EINVAL),
        ),
        (
            "VXLAN inner",
            n(vec![FlowSpec::vxlan_vni(1).into_inner()]),
            ok,
            Some(EINVAL),
        ),
        (
            "VXLAN id >= 2^24",
            n(vec![FlowSpec::VxlanTunnel(Layer::outer(
                TunnelFilter { tunnel_id: 1 << 24 },
                TunnelFilter {
                    tunnel_id: 0xffffff,
                },
            ))]),
            ok,
            Some(EINVAL),
        ),
        (
            "GRE inner",
            n(vec![FlowSpec::Gre(Layer::inner(
                GreFilter::default(),
                GreFilter::default(),
            ))]),
            ok,
            Some(EINVAL),
        ),
        // ---- mlx5 parse_flow_attr: fields a NIC cannot match ----
        (
            "IPv4 ttl mask",
            n(vec![ipv4_ext(
                Ipv4ExtFilter::default(),
                Ipv4ExtFilter {
                    ttl: 0xff,
                    ..Default::default()
                },
            )]),
            ok,
            Some(EOPNOTSUPP),
        ),
        (
            "IPv4 flags mask",
            n(vec![ipv4_ext(
                Ipv4ExtFilter::default(),
                Ipv4ExtFilter {
                    flags: 0x7,
                    ..Default::default()
                },
            )]),
            ok,
            Some(EOPNOTSUPP),
        ),
        (
            "IPv6 hop limit mask",
            n(vec![ipv6(
                Ipv6Filter::default(),
                Ipv6Filter {
                    hop_limit: 0xff,
                    ..Default::default()
                },
            )]),
            ok,
            Some(EOPNOTSUPP),
        ),
        (
            "GRE c_ks_res0_ver mask",
            n(vec![FlowSpec::Gre(Layer::outer(
                GreFilter::default(),
                GreFilter {
                    c_ks_res0_ver: 0x2000,
                    ..Default::default()
                },
            ))]),
            ok,
            Some(EOPNOTSUPP),
        ),
        (
            "ESP seq mask",
            n(vec![FlowSpec::Esp(Layer::outer(
                EspFilter::default(),
                EspFilter { spi: 0, seq: 1 },
            ))]),
            ok,
            Some(EOPNOTSUPP),
        ),
        (
            "flow action handle",
            n(vec![udp.clone(), FlowSpec::ActionHandle(3)]),
            ok,
            Some(EOPNOTSUPP),
        ),
        (
            "tag >= 2^24",
            n(vec![udp.clone(), FlowSpec::Tag(1 << 24)]),
            ok,
            Some(EINVAL),
        ),
        (
            "two COUNT actions",
            n(vec![
                FlowSpec::Count(counters.clone()),
                FlowSpec::Count(Counters::new()),
            ]),
            ok,
            Some(EINVAL),
        ),
        (
            "ethertype contradicts IPv4",
            n(vec![eth_type(0x86dd, 0xffff), v4.clone()]),
            ok,
            Some(EINVAL),
        ),
        (
            "partial ethertype mask with IPv4",
            n(vec![eth_type(0x0800, 0xff00), v4.clone()]),
            ok,
            Some(EINVAL),
        ),
        (
            "IPv4 proto contradicts TCP",
            n(vec![
                ipv4_ext(
                    Ipv4ExtFilter {
                        proto: 17,
                        ..Default::default()
                    },
                    Ipv4ExtFilter {
                        proto: 0xff,
                        ..Default::default()
                    },
                ),
                FlowSpec::tcp_dst(None),
            ]),
            ok,
            Some(EINVAL),
        ),
        (
            "IPv6 next header contradicts UDP",
            n(vec![
                ipv6(
                    Ipv6Filter {
                        next_hdr: 6,
                        ..Default::default()
                    },
                    Ipv6Filter {
                        next_hdr: 0xff,
                        ..Default::default()
                    },
                ),
                udp.clone(),
            ]),
            ok,
            Some(EINVAL),
        ),
        (
            "EGRESS on ALL_DEFAULT",
            with_flags(all_default.clone(), 4),
            ok,
            Some(EINVAL),
        ),
        (
            "EGRESS on MC_DEFAULT",
            with_flags(mc_default.clone(), 4),
            ok,
            Some(EINVAL),
        ),
        (
            "tag on ALL_DEFAULT",
            FlowAttr {
                specs: vec![FlowSpec::Tag(1)],
                ..all_default.clone()
            },
            ok,
            Some(EINVAL),
        ),
        (
            "priority 16",
            FlowAttr::normal(16, vec![udp.clone()]),
            ok,
            Some(ENOMEM),
        ),
        // ---- duplicated specs ----
        (
            "two ETH specs",
            n(vec![FlowSpec::eth_dst(common::MAC_A), FlowSpec::vlan_id(3)]),
            ok,
            Some(EINVAL),
        ),
        (
            "IPv4 and IPv4_EXT",
            n(vec![
                v4.clone(),
                ipv4_ext(Ipv4ExtFilter::default(), Ipv4ExtFilter::default()),
            ]),
            ok,
            Some(EINVAL),
        ),
        (
            "IPv4 and IPv6 on one layer",
            n(vec![v4.clone(), FlowSpec::ipv6_dst(Ipv6Addr::LOCALHOST)]),
            ok,
            Some(EINVAL),
        ),
        (
            "TCP and UDP",
            n(vec![FlowSpec::tcp_dst(None), udp.clone()]),
            ok,
            Some(EINVAL),
        ),
        (
            "two tags",
            n(vec![FlowSpec::Tag(1), FlowSpec::Tag(2)]),
            ok,
            Some(EINVAL),
        ),
        (
            "two drops",
            n(vec![FlowSpec::Drop, FlowSpec::Drop]),
            ok,
            Some(EINVAL),
        ),
    ]
}

#[test]
fn typed_attributes_fail_with_the_kernels_errno() {
    let mut failures = Vec::new();
    for (name, attr, ctx, want) in typed_cases() {
        let got = validate(&attr, &ctx);
        if let Err(e) = &got {
            eprintln!("{name}: {e}");
        }
        match (&got, want) {
            (Ok(()), None) => {}
            (Err(e), Some(w)) if e.errno() == w => {
                assert!(!e.reason().is_empty(), "{name}: empty reason");
            }
            _ => failures.push(format!("{name}: want {want:?}, got {got:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every typed case that validates also encodes and decodes back to itself (specs with
/// counters resolve through the lookup).
#[test]
fn valid_attributes_round_trip_through_the_kernel_layout() {
    for (name, attr, ctx, want) in typed_cases() {
        if want.is_some() || validate(&attr, &ctx).is_err() {
            continue;
        }
        let bytes = encode_flow_attr(&attr);
        let counters: Vec<Counters> = attr.counters().into_iter().cloned().collect();
        let lookup = |h: u32| counters.iter().find(|c| c.handle() == h).cloned();
        let back = decode_flow_attr(&bytes, &lookup).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back, attr, "{name}");
    }
}

// ---- raw uverbs commands ----

fn hdr(ty: u32, size: u16, prio: u16, num: u8, port: u8, flags: u32) -> Vec<u8> {
    let mut b = ty.to_ne_bytes().to_vec();
    b.extend_from_slice(&size.to_ne_bytes());
    b.extend_from_slice(&prio.to_ne_bytes());
    b.extend_from_slice(&[num, 0, 0, port]);
    b.extend_from_slice(&flags.to_ne_bytes());
    b
}

fn spec(ty: u32, body: &[u8]) -> Vec<u8> {
    let mut b = ty.to_ne_bytes().to_vec();
    b.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(body);
    b
}

/// A command with `specs`, sizes filled in.
fn cmd(specs: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = specs.concat();
    let mut b = hdr(0, body.len() as u16, 0, specs.len() as u8, 1, 0);
    b.extend_from_slice(&body);
    b
}

fn patch(mut b: Vec<u8>, off: usize, bytes: &[u8]) -> Vec<u8> {
    b[off..off + bytes.len()].copy_from_slice(bytes);
    b
}

#[test]
fn raw_commands_fail_with_the_kernels_errno() {
    let udp = spec(0x41, &[0x12, 0xb7, 0, 0, 0xff, 0xff, 0, 0]);
    let counters = Counters::new();
    let handle = counters.handle();
    let cases: Vec<(&str, Vec<u8>, Option<i32>)> = vec![
        ("valid udp", cmd(std::slice::from_ref(&udp)), None),
        (
            "valid: extra filter bytes with zero mask",
            cmd(&[spec(
                0x41,
                &[0x12, 0xb7, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0],
            )]),
            None,
        ),
        (
            "valid count with a known handle",
            cmd(&[spec(0x1003, &[&handle.to_ne_bytes()[..], &[0; 4]].concat())]),
            None,
        ),
        ("shorter than flow_attr", vec![0; 15], Some(EINVAL)),
        (
            "flags >= RESERVED",
            patch(cmd(std::slice::from_ref(&udp)), 12, &8u32.to_ne_bytes()),
            Some(EINVAL),
        ),
        (
            "DONT_TRAP on ALL_DEFAULT",
            patch(
                patch(cmd(&[]), 0, &1u32.to_ne_bytes()),
                12,
                &2u32.to_ne_bytes(),
            ),
            Some(EINVAL),
        ),
        (
            "num_of_specs 11",
            patch(cmd(std::slice::from_ref(&udp)), 8, &[11]),
            Some(EINVAL),
        ),
        (
            "size beyond num_of_specs * 88",
            patch(cmd(std::slice::from_ref(&udp)), 4, &89u16.to_ne_bytes()),
            Some(EINVAL),
        ),
        (
            "reserved[0] set",
            patch(cmd(std::slice::from_ref(&udp)), 9, &[1]),
            Some(EINVAL),
        ),
        (
            "reserved[1] set",
            patch(cmd(std::slice::from_ref(&udp)), 10, &[1]),
            Some(EINVAL),
        ),
        (
            "unknown attr type",
            patch(cmd(std::slice::from_ref(&udp)), 0, &4u32.to_ne_bytes()),
            Some(EINVAL),
        ),
        (
            "size runs past the buffer",
            {
                let mut c = cmd(std::slice::from_ref(&udp));
                c.truncate(c.len() - 1);
                c
            },
            Some(EINVAL),
        ),
        (
            "spec reserved set",
            cmd(&[patch(udp.clone(), 6, &[1, 0])]),
            Some(EINVAL),
        ),
        (
            "unknown spec type",
            cmd(&[spec(0x99, &[0; 8])]),
            Some(EINVAL),
        ),
        (
            "IPV4_EXT type code reaches the kernel",
            cmd(&[spec(0x32, &[0; 24])]),
            Some(EINVAL),
        ),
        ("INNER | VXLAN", cmd(&[spec(0x150, &[0; 8])]), Some(EINVAL)),
        (
            "INNER on an action",
            cmd(&[spec(0x1101, &[])]),
            Some(EINVAL),
        ),
        (
            "filter size not a multiple of 4",
            cmd(&[spec(0x41, &[0; 12])]),
            Some(EINVAL),
        ),
        (
            "spec shorter than its header",
            {
                let mut c = cmd(&[spec(0x41, &[])]);
                c[20..22].copy_from_slice(&4u16.to_ne_bytes());
                c.truncate(16 + 8);
                c[4..6].copy_from_slice(&8u16.to_ne_bytes());
                c
            },
            Some(EINVAL),
        ),
        ("empty filter", cmd(&[spec(0x20, &[])]), Some(EINVAL)),
        (
            "mask bits beyond the kernel's filter",
            cmd(&[spec(
                0x41,
                &[0x12, 0xb7, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 1],
            )]),
            Some(EINVAL),
        ),
        (
            "IPv6 reserved mask byte set",
            cmd(&[spec(0x31, &patch(vec![0; 80], 79, &[1]))]),
            Some(EINVAL),
        ),
        (
            "IPv6 flow label >= 2^20",
            cmd(&[spec(0x31, &patch(vec![0; 80], 32, &[0, 0x10, 0, 0]))]),
            Some(EINVAL),
        ),
        (
            "VXLAN id >= 2^24",
            cmd(&[spec(0x50, &[1, 0, 0, 0, 0, 0, 0, 0])]),
            Some(EINVAL),
        ),
        (
            "fewer specs than num_of_specs",
            patch(cmd(std::slice::from_ref(&udp)), 8, &[2]),
            Some(EINVAL),
        ),
        (
            "bytes left after the specs",
            {
                let mut c = cmd(std::slice::from_ref(&udp));
                c[4..6].copy_from_slice(&24u16.to_ne_bytes());
                c.extend_from_slice(&[0; 8]);
                c
            },
            Some(EINVAL),
        ),
        (
            "spec size beyond attr size",
            patch(
                cmd(std::slice::from_ref(&udp)),
                16 + 4,
                &24u16.to_ne_bytes(),
            ),
            Some(EINVAL),
        ),
        (
            "tag of the wrong size",
            cmd(&[spec(0x1000, &[1, 0, 0, 0])]),
            Some(EINVAL),
        ),
        (
            "drop of the wrong size",
            cmd(&[spec(0x1001, &[0; 8])]),
            Some(EINVAL),
        ),
        (
            "action handle of the wrong size",
            cmd(&[spec(0x1002, &[0; 4])]),
            Some(EOPNOTSUPP),
        ),
        (
            "action handle nobody created",
            cmd(&[spec(0x1002, &[0; 8])]),
            Some(EINVAL),
        ),
        (
            "count of the wrong size",
            cmd(&[spec(0x1003, &[0; 4])]),
            Some(EINVAL),
        ),
        (
            "count with an unknown handle",
            cmd(&[spec(
                0x1003,
                &[&(handle + 1000).to_ne_bytes()[..], &[0; 4]].concat(),
            )]),
            Some(EINVAL),
        ),
        (
            "unknown action type",
            cmd(&[spec(0x1004, &[0; 8])]),
            Some(EINVAL),
        ),
    ];
    let lookup = |h: u32| (h == handle).then(|| counters.clone());
    let mut failures = Vec::new();
    for (name, bytes, want) in cases {
        let got = decode_flow_attr(&bytes, &lookup);
        if let Err(e) = &got {
            eprintln!("{name}: {e}");
        }
        match (&got, want) {
            (Ok(_), None) => {}
            (Err(e), Some(w)) if e.errno() == w => {}
            _ => failures.push(format!("{name}: want {want:?}, got {got:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Fuzz-found: two MPLS specs that land on the same label position (after an outer and
/// an inner IPv6 spec: both "first label after Ethernet") passed validation and then
/// contradicted each other when compiled. They are a duplicated spec.
#[test]
fn two_mpls_specs_at_one_position_are_duplicates() {
    let mpls = |label| {
        FlowSpec::Mpls(Layer::outer(
            MplsFilter { label },
            MplsFilter { label: 0xffff_f000 },
        ))
    };
    let attr = FlowAttr::normal(
        0,
        vec![
            FlowSpec::ipv6_dst(Ipv6Addr::LOCALHOST).into_inner(),
            mpls(1 << 12),
            FlowSpec::ipv6_dst(Ipv6Addr::LOCALHOST),
            mpls(2 << 12),
        ],
    );
    assert_eq!(
        validate(&attr, &FlowContext::raw_packet())
            .unwrap_err()
            .errno(),
        EINVAL
    );
}

/// Fuzz-found: an outer and an inner ESP spec both passed validation and then fought
/// over the packet's one SPI when compiled. They are duplicates.
#[test]
fn outer_and_inner_esp_are_duplicates() {
    let esp = |spi| {
        Layer::outer(
            EspFilter { spi, seq: 0 },
            EspFilter {
                spi: 0xffff_ffff,
                seq: 0,
            },
        )
    };
    let attr = FlowAttr::normal(
        0,
        vec![FlowSpec::Esp(esp(1)), FlowSpec::Esp(esp(2)).into_inner()],
    );
    let e = validate(&attr, &FlowContext::raw_packet()).unwrap_err();
    assert_eq!(e.errno(), EINVAL);
    assert!(e.reason().contains("duplicated esp"), "{e}");
}
