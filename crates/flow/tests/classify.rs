//! Steering semantics on built frames: which rule of which priority receives each kind
//! of traffic, DONT_TRAP / DROP / TAG / COUNT / SNIFFER / defaults / EGRESS, removal,
//! and the tuple-space lookup agreeing with the linear scan on random rule sets.

mod common;
use common::*;

use proptest::prelude::*;
use rverbs_flow::attr::*;
use rverbs_flow::classify::{Classifier, Delivery, Direction, Verdict};
use rverbs_flow::fields::FieldVector;

fn add(c: &mut Classifier, qpn: u32, attr: FlowAttr) -> rverbs_flow::FlowId {
    validate(&attr, &FlowContext::raw_packet()).unwrap();
    c.insert(qpn, &attr).unwrap()
}

fn rx(c: &Classifier, frame: &[u8]) -> Verdict {
    let mut v = Verdict::default();
    c.classify(frame, Direction::Ingress, &mut v).unwrap();
    // The linear scan must decide the same.
    let mut l = Verdict::default();
    c.classify_linear(
        &FieldVector::parse(frame).unwrap(),
        frame.len(),
        Direction::Ingress,
        &mut l,
    );
    assert_eq!(strip(&v), strip(&l), "tuple space and linear scan disagree");
    v
}

fn strip(v: &Verdict) -> (Vec<(u32, Option<u32>)>, bool) {
    (
        v.deliveries
            .iter()
            .map(|d: &Delivery| (d.qpn, d.tag))
            .collect(),
        v.dropped,
    )
}

fn qpns(v: &Verdict) -> Vec<u32> {
    v.deliveries.iter().map(|d| d.qpn).collect()
}

#[test]
fn lower_priority_number_wins_and_ties_go_to_the_first_created() {
    let mut c = Classifier::new();
    add(
        &mut c,
        1,
        FlowAttr::normal(5, vec![FlowSpec::udp_dst(None)]),
    );
    add(
        &mut c,
        2,
        FlowAttr::normal(1, vec![FlowSpec::udp_dst(Some(4791))]),
    );
    add(
        &mut c,
        3,
        FlowAttr::normal(1, vec![FlowSpec::ipv4_dst(a4("10.0.0.2"))]),
    );
    assert_eq!(qpns(&rx(&c, &udp4("10.0.0.1", "10.0.0.2", 1, 4791))), [2]);
    assert_eq!(qpns(&rx(&c, &udp4("10.0.0.1", "10.0.0.2", 1, 53))), [3]);
    assert_eq!(qpns(&rx(&c, &udp4("10.0.0.1", "10.0.0.9", 1, 53))), [1]);
    assert_eq!(
        qpns(&rx(&c, &tcp4("10.0.0.1", "10.0.0.9", 1, 53))),
        Vec::<u32>::new()
    );
}

#[test]
fn tcp_udp_ports_and_protocols_are_distinguished() {
    let mut c = Classifier::new();
    add(
        &mut c,
        1,
        FlowAttr::normal(0, vec![FlowSpec::tcp_dst(Some(80))]),
    );
    add(
        &mut c,
        2,
        FlowAttr::normal(0, vec![FlowSpec::udp_dst(Some(80))]),
    );
    add(
        &mut c,
        3,
        FlowAttr::normal(
            0,
            vec![FlowSpec::Udp(Layer::outer(
                TcpUdpFilter {
                    dst_port: 0,
                    src_port: 0x1200,
                },
                TcpUdpFilter {
                    dst_port: 0,
                    src_port: 0xff00,
                },
            ))],
        ),
    );
    assert_eq!(qpns(&rx(&c, &tcp4("1.1.1.1", "2.2.2.2", 9, 80))), [1]);
    assert_eq!(qpns(&rx(&c, &udp4("1.1.1.1", "2.2.2.2", 9, 80))), [2]);
    // Partial mask: source ports 0x1200..=0x12ff.
    assert_eq!(qpns(&rx(&c, &udp4("1.1.1.1", "2.2.2.2", 0x12ab, 81))), [3]);
    assert!(rx(&c, &udp4("1.1.1.1", "2.2.2.2", 0x13ab, 81))
        .deliveries
        .is_empty());
}

#[test]
fn vlan_tag_matches_only_tagged_frames() {
    let mut c = Classifier::new();
    add(&mut c, 1, FlowAttr::normal(0, vec![FlowSpec::vlan_id(100)]));
    let payload = ipv4(a4("1.1.1.1"), a4("2.2.2.2"), 17, 0, &udp(1, 2, b"x"));
    // Priority 5 in the PCP bits must not matter (mask is the VID).
    let tagged = eth(MAC_B, MAC_A, Some((5 << 13) | 100), 0x0800, &payload);
    let other_vid = eth(MAC_B, MAC_A, Some(101), 0x0800, &payload);
    let untagged = eth(MAC_B, MAC_A, None, 0x0800, &payload);
    assert_eq!(qpns(&rx(&c, &tagged)), [1]);
    assert!(rx(&c, &other_vid).deliveries.is_empty());
    assert!(rx(&c, &untagged).deliveries.is_empty());
    // EtherType is the one after the tag (ibv_create_flow(3) note 3).
    let mut c = Classifier::new();
    add(
        &mut c,
        2,
        FlowAttr::normal(
            0,
            vec![FlowSpec::Eth(Layer::outer(
                EthFilter {
                    ether_type: 0x0800,
                    ..Default::default()
                },
                EthFilter {
                    ether_type: 0xffff,
                    ..Default::default()
                },
            ))],
        ),
    );
    assert_eq!(qpns(&rx(&c, &tagged)), [2]);
}

#[test]
fn ipv6_fields() {
    let mut c = Classifier::new();
    add(
        &mut c,
        1,
        FlowAttr::normal(
            0,
            vec![
                FlowSpec::Ipv6(Layer::outer(
                    Ipv6Filter {
                        dst_ip: a6("fd00::2"),
                        flow_label: 0x12345,
                        traffic_class: 0xb8,
                        ..Default::default()
                    },
                    Ipv6Filter {
                        dst_ip: a6("ffff:ffff:ffff:ffff::"),
                        flow_label: 0xfffff,
                        traffic_class: 0xfc,
                        ..Default::default()
                    },
                )),
                FlowSpec::udp_dst(Some(4791)),
            ],
        ),
    );
    let f = |dst: &str, fl: u32, tc: u8, dport: u16| {
        eth(
            MAC_B,
            MAC_A,
            None,
            0x86dd,
            &ipv6(a6("fd00::1"), a6(dst), 17, tc, fl, &udp(1, dport, b"x")),
        )
    };
    assert_eq!(qpns(&rx(&c, &f("fd00::99", 0x12345, 0xb9, 4791))), [1]);
    assert!(rx(&c, &f("fd01::2", 0x12345, 0xb8, 4791))
        .deliveries
        .is_empty());
    assert!(rx(&c, &f("fd00::2", 0x12346, 0xb8, 4791))
        .deliveries
        .is_empty());
    assert!(rx(&c, &f("fd00::2", 0x12345, 0x00, 4791))
        .deliveries
        .is_empty());
    assert!(rx(&c, &f("fd00::2", 0x12345, 0xb8, 4792))
        .deliveries
        .is_empty());
    // IPv6 with a hop-by-hop extension header before UDP.
    let mut hbh = vec![17, 0, 1, 4, 0, 0, 0, 0];
    hbh.extend(udp(1, 4791, b"x"));
    let with_ext = eth(
        MAC_B,
        MAC_A,
        None,
        0x86dd,
        &ipv6(a6("fd00::1"), a6("fd00::2"), 0, 0xb8, 0x12345, &hbh),
    );
    assert_eq!(qpns(&rx(&c, &with_ext)), [1]);
}

#[test]
fn vxlan_inner_headers() {
    let mut c = Classifier::new();
    let inner_v4 = FlowSpec::ipv4_dst(a4("192.168.0.2")).into_inner();
    add(
        &mut c,
        1,
        FlowAttr::normal(
            0,
            vec![
                FlowSpec::vxlan_vni(42),
                inner_v4.clone(),
                FlowSpec::tcp_dst(Some(22)).into_inner(),
            ],
        ),
    );
    add(
        &mut c,
        2,
        FlowAttr::normal(1, vec![FlowSpec::vxlan_vni(42)]),
    );
    add(&mut c, 3, FlowAttr::normal(2, vec![inner_v4.clone()]));
    let inner = |dst: &str, dport| {
        eth(
            MAC_A,
            MAC_B,
            None,
            0x0800,
            &ipv4(a4("192.168.0.1"), a4(dst), 6, 0, &tcp(5, dport, b"in")),
        )
    };
    let outer = |vni, inner: &[u8]| vxlan4(49152, vni, inner);
    assert_eq!(qpns(&rx(&c, &outer(42, &inner("192.168.0.2", 22)))), [1]);
    assert_eq!(qpns(&rx(&c, &outer(42, &inner("192.168.0.2", 23)))), [2]);
    assert_eq!(qpns(&rx(&c, &outer(43, &inner("192.168.0.2", 22)))), [3]);
    assert!(rx(&c, &outer(43, &inner("192.168.0.3", 22)))
        .deliveries
        .is_empty());
    // The same inner header without a tunnel is not "inner".
    assert!(rx(&c, &inner("192.168.0.2", 22)).deliveries.is_empty());
}

#[test]
fn gre_mpls_and_esp() {
    let mut c = Classifier::new();
    add(
        &mut c,
        1,
        FlowAttr::normal(
            0,
            vec![FlowSpec::Gre(Layer::outer(
                GreFilter {
                    protocol: 0x6558,
                    key: 7,
                    ..Default::default()
                },
                GreFilter {
                    protocol: 0xffff,
                    key: 0xffff_ffff,
                    ..Default::default()
                },
            ))],
        ),
    );
    let label_mask = MplsFilter { label: 0xffff_f000 };
    add(
        &mut c,
        2,
        FlowAttr::normal(
            0,
            vec![
                FlowSpec::udp_dst(Some(6635)),
                FlowSpec::Mpls(Layer::outer(MplsFilter { label: 300 << 12 }, label_mask)),
            ],
        ),
    );
    add(
        &mut c,
        3,
        FlowAttr::normal(
            0,
            vec![FlowSpec::Mpls(Layer::outer(
                MplsFilter { label: 400 << 12 },
                label_mask,
            ))],
        ),
    );
    add(
        &mut c,
        4,
        FlowAttr::normal(
            0,
            vec![FlowSpec::Esp(Layer::outer(
                EspFilter {
                    spi: 0x1000,
                    seq: 0,
                },
                EspFilter {
                    spi: 0xffff_ffff,
                    seq: 0,
                },
            ))],
        ),
    );
    let inner = eth(
        MAC_A,
        MAC_B,
        None,
        0x0800,
        &ipv4(a4("1.1.1.1"), a4("2.2.2.2"), 17, 0, &udp(1, 2, b"i")),
    );
    let gre_frame = |key| {
        eth(
            MAC_B,
            MAC_A,
            None,
            0x0800,
            &ipv4(
                a4("10.0.0.1"),
                a4("10.0.0.2"),
                47,
                0,
                &gre(0x6558, key, &inner),
            ),
        )
    };
    assert_eq!(qpns(&rx(&c, &gre_frame(Some(7)))), [1]);
    assert!(rx(&c, &gre_frame(Some(8))).deliveries.is_empty());
    assert!(
        rx(&c, &gre_frame(None)).deliveries.is_empty(),
        "key masked but absent"
    );
    let mpls_udp = eth(
        MAC_B,
        MAC_A,
        None,
        0x0800,
        &ipv4(
            a4("10.0.0.1"),
            a4("10.0.0.2"),
            17,
            0,
            &udp(1, 6635, &mpls(300, 0, true, 64, b"x")),
        ),
    );
    assert_eq!(qpns(&rx(&c, &mpls_udp)), [2]);
    let mpls_eth = eth(MAC_B, MAC_A, None, 0x8847, &mpls(400, 3, true, 9, b"x"));
    assert_eq!(qpns(&rx(&c, &mpls_eth)), [3]);
    let mpls_eth_other = eth(MAC_B, MAC_A, None, 0x8847, &mpls(300, 3, true, 9, b"x"));
    assert!(
        rx(&c, &mpls_eth_other).deliveries.is_empty(),
        "label 300 after Ethernet is not MPLS-in-UDP"
    );
    let esp_frame = |spi| {
        eth(
            MAC_B,
            MAC_A,
            None,
            0x0800,
            &ipv4(a4("10.0.0.1"), a4("10.0.0.2"), 50, 0, &esp(spi, 1)),
        )
    };
    assert_eq!(qpns(&rx(&c, &esp_frame(0x1000))), [4]);
    assert!(rx(&c, &esp_frame(0x1001)).deliveries.is_empty());
}

#[test]
fn dont_trap_drop_tag_count_sniffer_and_defaults() {
    let mut c = Classifier::new();
    let counters = Counters::new();
    let sniff = add(&mut c, 9, FlowAttr::of_type(FlowAttrType::Sniffer));
    let mut watch = FlowAttr::normal(
        0,
        vec![
            FlowSpec::udp_dst(None),
            FlowSpec::Tag(5),
            FlowSpec::Count(counters.clone()),
        ],
    );
    watch.flags = FlowFlags::DONT_TRAP;
    add(&mut c, 1, watch);
    add(
        &mut c,
        2,
        FlowAttr::normal(1, vec![FlowSpec::udp_dst(Some(4791)), FlowSpec::Tag(0xabc)]),
    );
    add(
        &mut c,
        3,
        FlowAttr::normal(1, vec![FlowSpec::udp_dst(Some(666)), FlowSpec::Drop]),
    );
    add(&mut c, 4, FlowAttr::of_type(FlowAttrType::AllDefault));
    add(&mut c, 5, FlowAttr::of_type(FlowAttrType::McDefault));

    let v = rx(&c, &udp4("1.1.1.1", "2.2.2.2", 1, 4791));
    assert_eq!(
        strip(&v),
        (vec![(9, None), (1, Some(5)), (2, Some(0xabc))], false)
    );
    let v = rx(&c, &udp4("1.1.1.1", "2.2.2.2", 1, 666));
    assert_eq!(
        strip(&v),
        (vec![(9, None), (1, Some(5))], true),
        "sniffer and DONT_TRAP see it, then DROP"
    );
    // UDP nobody traps: the DONT_TRAP rule, then the unicast default.
    let v = rx(&c, &udp4("1.1.1.1", "2.2.2.2", 1, 53));
    assert_eq!(qpns(&v), [9, 1, 4]);
    // Multicast nobody traps: both defaults.
    let mc = eth(
        MAC_MC,
        MAC_A,
        None,
        0x0800,
        &ipv4(a4("1.1.1.1"), a4("239.0.0.1"), 6, 0, &tcp(1, 2, b"")),
    );
    assert_eq!(qpns(&rx(&c, &mc)), [9, 5, 4]);
    let arp = eth([0xff; 6], MAC_A, None, 0x0806, &[0; 28]);
    assert_eq!(qpns(&rx(&c, &arp)), [9, 5, 4]);
    let frame_len = udp4("1.1.1.1", "2.2.2.2", 1, 4791).len() as u64;
    assert_eq!(counters.read().packets, 3);
    assert_eq!(counters.read().bytes, 3 * frame_len);
    // Removing the sniffer stops its copies at once; a second remove fails.
    assert!(c.remove(sniff));
    assert!(!c.remove(sniff));
    assert_eq!(qpns(&rx(&c, &arp)), [5, 4]);
    assert_eq!(c.remove_qp(4), 1);
    assert_eq!(qpns(&rx(&c, &arp)), [5]);
}

#[test]
fn removal_takes_effect_immediately_and_slots_are_reused_safely() {
    let mut c = Classifier::new();
    let a = add(
        &mut c,
        1,
        FlowAttr::normal(0, vec![FlowSpec::udp_dst(Some(1))]),
    );
    let b = add(
        &mut c,
        2,
        FlowAttr::normal(3, vec![FlowSpec::udp_dst(None)]),
    );
    let f = udp4("1.1.1.1", "2.2.2.2", 5, 1);
    assert_eq!(qpns(&rx(&c, &f)), [1]);
    assert!(c.remove(a));
    assert_eq!(qpns(&rx(&c, &f)), [2]);
    let a2 = add(
        &mut c,
        3,
        FlowAttr::normal(0, vec![FlowSpec::udp_dst(Some(1))]),
    );
    assert_ne!(a, a2, "a reused slot gets a new id");
    assert!(!c.remove(a), "the old id does not remove the new flow");
    assert_eq!(qpns(&rx(&c, &f)), [3]);
    assert!(c.remove(b) && c.remove(a2));
    assert!(c.is_empty());
    assert_eq!(c.ingress_groups(), 0);
}

#[test]
fn egress_rules_drop_and_count_sent_frames() {
    let mut c = Classifier::new();
    let counters = Counters::new();
    let mut e = FlowAttr::normal(
        0,
        vec![
            FlowSpec::udp_dst(Some(9)),
            FlowSpec::Count(counters.clone()),
            FlowSpec::Drop,
        ],
    );
    e.flags = FlowFlags::EGRESS;
    add(&mut c, 1, e);
    add(&mut c, 7, FlowAttr::of_type(FlowAttrType::Sniffer));
    let mut v = Verdict::default();
    c.classify(&udp4("1.1.1.1", "2.2.2.2", 5, 9), Direction::Egress, &mut v)
        .unwrap();
    assert!(v.dropped);
    assert_eq!(qpns(&v), [7], "sniffers see sent frames");
    c.classify(
        &udp4("1.1.1.1", "2.2.2.2", 5, 10),
        Direction::Egress,
        &mut v,
    )
    .unwrap();
    assert!(!v.dropped);
    // Egress rules do not steer received frames.
    assert_eq!(qpns(&rx(&c, &udp4("1.1.1.1", "2.2.2.2", 5, 9))), [7]);
    assert_eq!(counters.read().packets, 1);
}

#[test]
fn short_frames_are_an_error_not_a_panic() {
    let c = Classifier::new();
    let mut v = Verdict::default();
    for len in 0..14 {
        assert!(c
            .classify(&vec![0u8; len], Direction::Ingress, &mut v)
            .is_err());
    }
    // Truncated headers: no panic, fields simply absent.
    let full = udp4("1.1.1.1", "2.2.2.2", 5, 9);
    for len in 14..full.len() {
        c.classify(&full[..len], Direction::Ingress, &mut v)
            .unwrap();
    }
}

// ---- tuple space == linear scan on random rules and frames ----

fn arb_spec() -> impl Strategy<Value = FlowSpec> {
    prop_oneof![
        (0u8..3).prop_map(|d| FlowSpec::eth_dst([2, 0, 0, 0, 0, d])),
        (0u16..3).prop_map(FlowSpec::vlan_id),
        (0u8..3).prop_map(|d| FlowSpec::ipv4_dst(std::net::Ipv4Addr::new(10, 0, 0, d))),
        (0u8..3).prop_map(|s| FlowSpec::Ipv4(Layer::outer(
            Ipv4Filter {
                src_ip: std::net::Ipv4Addr::new(10, 0, s, 0),
                ..Default::default()
            },
            Ipv4Filter {
                src_ip: std::net::Ipv4Addr::new(255, 255, 255, 0),
                ..Default::default()
            }
        ))),
        proptest::option::of(0u16..3).prop_map(FlowSpec::udp_dst),
        proptest::option::of(0u16..3).prop_map(FlowSpec::tcp_dst),
        (0u32..3).prop_map(FlowSpec::vxlan_vni),
        (0u8..3)
            .prop_map(|d| FlowSpec::ipv4_dst(std::net::Ipv4Addr::new(10, 0, 0, d)).into_inner()),
    ]
}

fn arb_attr() -> impl Strategy<Value = FlowAttr> {
    (
        0u16..4,
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(arb_spec(), 0..3),
    )
        .prop_map(|(prio, dont_trap, drop, mut specs)| {
            if drop {
                specs.push(FlowSpec::Drop);
            }
            let mut a = FlowAttr::normal(prio, specs);
            if dont_trap {
                a.flags = FlowFlags::DONT_TRAP;
            }
            a
        })
}

fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        0u8..3,
        proptest::option::of(0u16..3),
        0u8..3,
        0u8..3,
        0u8..3,
        any::<bool>(),
        0u16..3,
        proptest::option::of((0u32..3, 0u8..3)),
    )
        .prop_map(|(dmac, vlan, src, dst, _x, is_tcp, port, tunnel)| {
            let l4 = |proto_tcp: bool, port: u16, body: &[u8]| {
                if proto_tcp {
                    tcp(1, port, body)
                } else {
                    udp(1, port, body)
                }
            };
            let ip = |s: u8, d: u8, p: u8, body: &[u8]| {
                ipv4(
                    a4(&format!("10.0.{s}.1")),
                    a4(&format!("10.0.0.{d}")),
                    p,
                    0,
                    body,
                )
            };
            let payload = match tunnel {
                Some((vni, idst)) => {
                    let inner = eth(
                        MAC_A,
                        MAC_B,
                        None,
                        0x0800,
                        &ip(0, idst, 17, &udp(1, port, b"i")),
                    );
                    ip(src, dst, 17, &udp(1, 4789, &vxlan(vni, &inner)))
                }
                None => ip(
                    src,
                    dst,
                    if is_tcp { 6 } else { 17 },
                    &l4(is_tcp, port, b"p"),
                ),
            };
            eth([2, 0, 0, 0, 0, dmac], MAC_A, vlan, 0x0800, &payload)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn tuple_space_agrees_with_linear_scan(
        rules in proptest::collection::vec(arb_attr(), 0..40),
        removals in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
        frames in proptest::collection::vec(arb_frame(), 1..20),
    ) {
        let mut c = Classifier::new();
        let mut ids = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            if validate(r, &FlowContext::raw_packet()).is_ok() {
                ids.push(c.insert(i as u32, r).unwrap());
            }
        }
        for ix in removals {
            if !ids.is_empty() {
                let id = ids.remove(ix.index(ids.len()));
                prop_assert!(c.remove(id));
            }
        }
        for f in frames {
            let fv = FieldVector::parse(&f).unwrap();
            let (mut a, mut b) = (Verdict::default(), Verdict::default());
            c.classify_fields(&fv, f.len(), Direction::Ingress, &mut a);
            c.classify_linear(&fv, f.len(), Direction::Ingress, &mut b);
            prop_assert_eq!(a, b);
        }
    }
}
