//! Random attributes of every spec kind survive the kernel layout and the text form.

use proptest::prelude::*;
use rverbs_flow::attr::*;
use rverbs_flow::text::{parse_rule, rule_to_string};
use rverbs_flow::uverbs::{decode_flow_attr, encode_flow_attr};
use std::net::{Ipv4Addr, Ipv6Addr};

fn layer<F: std::fmt::Debug + Clone + 'static>(
    f: impl Strategy<Value = F> + Clone,
) -> impl Strategy<Value = Layer<F>> {
    (any::<bool>(), f.clone(), f).prop_map(|(inner, val, mask)| Layer { inner, val, mask })
}

fn spec() -> impl Strategy<Value = FlowSpec> {
    let eth = (
        any::<[u8; 6]>(),
        any::<[u8; 6]>(),
        any::<u16>(),
        any::<u16>(),
    )
        .prop_map(|(d, s, t, v)| EthFilter {
            dst_mac: d,
            src_mac: s,
            ether_type: t,
            vlan_tag: v,
        });
    let v4 = (any::<u32>(), any::<u32>()).prop_map(|(s, d)| Ipv4Filter {
        src_ip: Ipv4Addr::from(s),
        dst_ip: Ipv4Addr::from(d),
    });
    let v4x = (any::<u32>(), any::<u32>(), any::<[u8; 4]>()).prop_map(|(s, d, b)| Ipv4ExtFilter {
        src_ip: Ipv4Addr::from(s),
        dst_ip: Ipv4Addr::from(d),
        proto: b[0],
        tos: b[1],
        ttl: b[2],
        flags: b[3],
    });
    let v6 = (
        any::<u128>(),
        any::<u128>(),
        0u32..1 << 20,
        any::<[u8; 3]>(),
    )
        .prop_map(|(s, d, l, b)| Ipv6Filter {
            src_ip: Ipv6Addr::from(s),
            dst_ip: Ipv6Addr::from(d),
            flow_label: l,
            next_hdr: b[0],
            traffic_class: b[1],
            hop_limit: b[2],
        });
    let ports = (any::<u16>(), any::<u16>()).prop_map(|(d, s)| TcpUdpFilter {
        dst_port: d,
        src_port: s,
    });
    let vni = (0u32..1 << 24).prop_map(|t| TunnelFilter { tunnel_id: t });
    let gre = (any::<u16>(), any::<u16>(), any::<u32>()).prop_map(|(c, p, k)| GreFilter {
        c_ks_res0_ver: c,
        protocol: p,
        key: k,
    });
    let mpls = any::<u32>().prop_map(|l| MplsFilter { label: l });
    let esp = (any::<u32>(), any::<u32>()).prop_map(|(a, b)| EspFilter { spi: a, seq: b });
    prop_oneof![
        layer(eth).prop_map(FlowSpec::Eth),
        layer(v4).prop_map(FlowSpec::Ipv4),
        layer(v4x).prop_map(FlowSpec::Ipv4Ext),
        layer(v6).prop_map(FlowSpec::Ipv6),
        layer(ports.clone()).prop_map(FlowSpec::Tcp),
        layer(ports).prop_map(FlowSpec::Udp),
        layer(vni).prop_map(|mut l| {
            l.inner = false;
            FlowSpec::VxlanTunnel(l)
        }),
        layer(gre).prop_map(FlowSpec::Gre),
        layer(mpls).prop_map(FlowSpec::Mpls),
        layer(esp).prop_map(FlowSpec::Esp),
        any::<u32>().prop_map(FlowSpec::Tag),
        Just(FlowSpec::Drop),
    ]
}

fn attr() -> impl Strategy<Value = FlowAttr> {
    (
        0u32..4,
        any::<u16>(),
        1u8..3,
        0u32..8,
        proptest::collection::vec(spec(), 0..10),
    )
        .prop_map(|(t, priority, port, flags, specs)| FlowAttr {
            attr_type: FlowAttrType::from_raw(t).unwrap(),
            priority,
            port,
            flags: FlowFlags::from_bits_retain(flags & !1),
            specs,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// encode → decode is the identity; what the kernel's command checks reject,
    /// `validate` rejects too.
    #[test]
    fn kernel_layout_round_trip(a in attr()) {
        let bytes = encode_flow_attr(&a);
        match decode_flow_attr(&bytes, &|_| None) {
            Ok(b) => prop_assert_eq!(b, a),
            Err(e) => prop_assert!(
                validate(&a, &FlowContext::raw_packet()).is_err(),
                "decode rejected ({}) what validate accepts", e
            ),
        }
    }

    /// text → attr → text → attr is stable, and the text form keeps every field.
    #[test]
    fn text_round_trip(a in attr()) {
        let text = rule_to_string(&a);
        let b = parse_rule(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(&b, &a, "{}", text);
    }
}
