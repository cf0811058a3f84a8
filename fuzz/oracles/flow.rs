// Fuzz oracles for `rverbs-flow`, shared by `fuzz/fuzz_targets/flow.rs` and the stable
// replay test `crates/flow/tests/fuzz_seeds.rs` (both `include!` this file).
//
// Byte 0 modulo 3 chooses: 0 → the rest is an Ethernet frame, classified against a fixed rule
// set of every spec kind by the tuple-space lookup and by the linear scan, which must
// agree; 1 → the rest is a uverbs flow command (`ib_uverbs_flow_attr` + specs) for
// `decode_flow_attr`; what decodes must survive `validate`, `compile`, and encode back to
// bytes that decode to the same attribute; 2 → the rest is the text form of a rule
// (`rverbs_flow::text`): what parses writes back to text that parses to the same rule.

use rverbs_flow::attr::*;
use rverbs_flow::classify::{Classifier, Direction, Verdict};
use rverbs_flow::fields::FieldVector;
use rverbs_flow::uverbs::{decode_flow_attr, encode_flow_attr};
use std::net::{Ipv4Addr, Ipv6Addr};

fn rules() -> Vec<FlowAttr> {
    let v4 = |d| FlowSpec::ipv4_dst(Ipv4Addr::new(10, 0, 0, d));
    let mut dont_trap = FlowAttr::normal(0, vec![FlowSpec::udp_dst(None), FlowSpec::Tag(1)]);
    dont_trap.flags = FlowFlags::DONT_TRAP;
    vec![
        dont_trap,
        FlowAttr::normal(1, vec![v4(2), FlowSpec::udp_dst(Some(4791))]),
        FlowAttr::normal(1, vec![FlowSpec::vlan_id(100), FlowSpec::tcp_dst(Some(80))]),
        FlowAttr::normal(2, vec![FlowSpec::vxlan_vni(42), v4(2).into_inner(), FlowSpec::tcp_dst(None).into_inner()]),
        FlowAttr::normal(2, vec![FlowSpec::Gre(Layer::outer(
            GreFilter { protocol: 0x6558, key: 7, ..Default::default() },
            GreFilter { protocol: 0xffff, key: 0xffff_ffff, ..Default::default() }))]),
        FlowAttr::normal(3, vec![FlowSpec::Mpls(Layer::outer(MplsFilter { label: 400 << 12 }, MplsFilter { label: 0xffff_f000 }))]),
        FlowAttr::normal(3, vec![FlowSpec::udp_dst(Some(6635)), FlowSpec::Mpls(Layer::outer(MplsFilter { label: 300 << 12 }, MplsFilter { label: 0xffff_f000 }))]),
        FlowAttr::normal(4, vec![FlowSpec::Esp(Layer::outer(EspFilter { spi: 0x1000, seq: 0 }, EspFilter { spi: 0xffff_ffff, seq: 0 })), FlowSpec::Drop]),
        FlowAttr::normal(5, vec![FlowSpec::ipv6_dst(Ipv6Addr::LOCALHOST), FlowSpec::udp_dst(None)]),
        FlowAttr::of_type(FlowAttrType::AllDefault),
        FlowAttr::of_type(FlowAttrType::McDefault),
    ]
}

/// See the file comment.
pub fn flow(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel % 3 == 2 {
        let Ok(text) = std::str::from_utf8(rest) else {
            return;
        };
        let Ok(attr) = rverbs_flow::text::parse_rule(text) else {
            return;
        };
        let _ = validate(&attr, &FlowContext::raw_packet());
        let again = rverbs_flow::text::rule_to_string(&attr);
        let back = rverbs_flow::text::parse_rule(&again).expect("our own text parses");
        let strip = |a: &FlowAttr| {
            let mut a = a.clone();
            a.specs.retain(|s| !matches!(s, FlowSpec::Count(_)));
            a
        };
        assert_eq!(strip(&back), strip(&attr), "{again}");
    } else if sel % 3 == 0 {
        let mut c = Classifier::new();
        for (i, r) in rules().iter().enumerate() {
            validate(r, &FlowContext::raw_packet()).expect("oracle rule set is valid");
            c.insert(i as u32, r).expect("oracle rule compiles");
        }
        let _ = rverbs_flow::fields::checksums_ok(rest);
        let Ok(fv) = FieldVector::parse(rest) else {
            assert!(rest.len() < 14, "a frame of 14+ bytes always parses");
            return;
        };
        let (mut a, mut b) = (Verdict::default(), Verdict::default());
        c.classify_fields(&fv, rest.len(), Direction::Ingress, &mut a);
        c.classify_linear(&fv, rest.len(), Direction::Ingress, &mut b);
        assert_eq!(a, b, "tuple space and linear scan disagree");
    } else {
        let lookup = |_h: u32| Some(Counters::new());
        let Ok(attr) = decode_flow_attr(rest, &lookup) else {
            return;
        };
        let valid = validate(&attr, &FlowContext::raw_packet()).is_ok();
        if valid {
            rverbs_flow::classify::compile(&attr).expect("a validated flow compiles");
        }
        let again = encode_flow_attr(&attr);
        let back = decode_flow_attr(&again, &lookup).expect("our own encoding decodes");
        // Counters resolve to fresh objects; compare the rest.
        let strip = |a: &FlowAttr| {
            let mut a = a.clone();
            a.specs.retain(|s| !matches!(s, FlowSpec::Count(_)));
            a
        };
        assert_eq!(strip(&back), strip(&attr));
    }
}
