// Fuzz oracles for `rverbs-wire`, shared by the cargo-fuzz targets in
// `fuzz/fuzz_targets/` and the stable replay test `crates/wire/tests/fuzz_seeds.rs`,
// which both `include!` this file. Each function must not panic on any input; the
// asserts are the round-trip / consistency properties the parsers promise.

use rverbs_wire::frame::{self, Decoded};
use rverbs_wire::icrc;
use rverbs_wire::rocev1;
use rverbs_wire::mad::bm::{BKeyInfo, BKeyInfoRepr, BmMad, BmMadRepr};
use rverbs_wire::mad::cm::{
    CmDrep, CmDrepRepr, CmDreq, CmDreqRepr, CmMad, CmMadRepr, CmMessage, CmMra, CmMraRepr,
    CmPath, CmPathRepr, CmRej, CmRejRepr, CmRep, CmRepRepr, CmReq, CmReqRepr, CmRtu,
    CmRtuRepr,
};
use rverbs_wire::mad::notice::{
    GsNotice, GsNoticeRepr, Notice, NoticeRepr, Trap256Details, Trap256DetailsRepr,
    Trap259BKeyDetails, Trap259BKeyDetailsRepr,
};
use rverbs_wire::mad::pma::{
    ClassPortInfo, ClassPortInfoRepr, PerfMad, PerfMadRepr, PortCounters, PortCountersExtended,
    PortCountersExtendedRepr, PortCountersRepr,
};
use rverbs_wire::mad::smp::{DrSmp, DrSmpRepr, Smp, SmpRepr};
use rverbs_wire::mad::{MadHeader, MadHeaderRepr};
use rverbs_wire::packet::{Packet, PacketRepr};

/// `Packet::new_checked`; on success every accessor, Display, and the
/// parse → emit → re-parse round trip.
pub fn packet(data: &[u8]) {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let bth = p.bth();
    let _ = (bth.opcode(), bth.solicited(), bth.mig_req(), bth.pad(), bth.tver());
    let _ = (bth.pkey(), bth.fecn(), bth.becn(), bth.resv6(), bth.dest_qp());
    let _ = (bth.ack_req(), bth.resv7(), bth.psn());
    assert_eq!(p.opcode(), bth.opcode());
    assert!(p.info().is_some(), "new_checked accepted an unknown opcode");
    if let Some(h) = p.reth() {
        let _ = (h.va(), h.rkey(), h.dma_len());
    }
    if let Some(h) = p.aeth() {
        let _ = (h.syndrome(), h.msn());
    }
    if let Some(h) = p.deth() {
        let _ = (h.qkey(), h.src_qp());
    }
    if let Some(h) = p.feth() {
        let _ = (h.selectivity(), h.placement());
    }
    if let Some(h) = p.atomic_eth() {
        let _ = (h.va(), h.rkey(), h.swap_add(), h.compare());
    }
    let _ = format!("{:?}", p.atomic_ack_eth());
    let _ = (p.immediate(), p.ieth_rkey(), p.icrc());
    let (header_len, payload_len) = (p.header_len(), p.payload_len());
    let range = p.payload_range();
    assert_eq!(range.len(), payload_len);
    assert_eq!(range.start, header_len);
    assert_eq!(p.payload(), &data[range.clone()]);
    assert_eq!(p.pad_bytes().len(), usize::from(bth.pad()));
    assert_eq!(p.without_icrc().len(), data.len() - 4);
    assert_eq!(header_len + payload_len + usize::from(bth.pad()) + 4, data.len());
    let text = p.to_string();
    assert!(!text.is_empty());

    let Ok(repr) = PacketRepr::parse(&p) else {
        return;
    };
    repr.validate()
        .expect("a repr parsed from a checked packet must validate");
    assert_eq!(repr.buffer_len(), data.len());
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).expect("emit of a parsed repr failed");
    let again = Packet::new_checked(&buf[..]).expect("emitted packet does not check");
    assert_eq!(PacketRepr::parse(&again).expect("re-parse failed"), repr);
    assert_eq!(again.payload(), p.payload());
}

/// The first byte picks Ethernet (even) or IP (odd); the rest is the frame. A RoCE
/// frame is displayed and its transport packet goes through [`packet`]; the ICRC
/// functions are run directly on the bytes too.
pub fn frame(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let ethernet = selector & 1 == 0;
    let decoded = if ethernet {
        frame::parse_ethernet(rest)
    } else {
        frame::parse_ip(rest)
    };
    if let Ok(Decoded::Roce(f)) = &decoded {
        let line = f.to_string();
        let tail = if f.icrc_ok { "icrc=ok" } else { "icrc=bad" };
        assert!(line.ends_with(tail), "{line}");
        let _ = (f.ip.src(), f.ip.dst(), format!("{:?}", f.ethernet));
        assert_eq!(f.ethernet.is_some(), ethernet);
        if !ethernet {
            assert_eq!(icrc::verify(rest), Ok(f.icrc_ok));
        }
        packet(f.packet.clone().into_inner());
    }
    // The same bytes as RoCE v1: an Ethernet frame, or bytes from the GRH on.
    let v1 = if ethernet {
        rocev1::parse_ethernet(rest)
    } else {
        rocev1::parse(rest).map(Some)
    };
    if let Ok(Some(p)) = v1 {
        assert_eq!(p.ethernet.is_some(), ethernet);
        let line = p.to_string();
        assert!(line.ends_with(if p.icrc_ok { "icrc=ok" } else { "icrc=bad" }), "{line}");
        packet(p.packet.clone().into_inner());
        // Re-emitting the parsed GRH fields and packet gives the same bytes, with the
        // ICRC fixed when it was bad.
        let repr = rocev1::RoceV1Repr {
            traffic_class: p.grh.traffic_class,
            flow_label: p.grh.flow_label,
            hop_limit: p.grh.hop_limit,
            sgid: p.grh.sgid,
            dgid: p.grh.dgid,
        };
        let ib = p.packet.clone().into_inner();
        let mut out = vec![0u8; 64 + ib.len()];
        let (n, start) = match &p.ethernet {
            Some(eth) => {
                let n = repr.emit_frame(eth, ib, &mut out).expect("re-emit frame");
                (n, eth.buffer_len())
            }
            None => (repr.emit(ib, &mut out).expect("re-emit"), 0),
        };
        let again = if p.ethernet.is_some() {
            rocev1::parse_ethernet(&out[..n]).expect("re-parse").expect("is v1")
        } else {
            rocev1::parse(&out[..n]).expect("re-parse")
        };
        assert!(again.icrc_ok);
        assert_eq!(again.grh, p.grh);
        let body = n - start - 4;
        assert_eq!(&out[start..start + body], &rest[start..start + body]);
        if p.icrc_ok {
            assert_eq!(&out[..n], &rest[..n]);
        }
    }
    // The ICRC functions on the bytes as an IP datagram.
    let computed = icrc::compute(rest);
    let verified = icrc::verify(rest);
    if let Ok(c) = computed {
        let carried = icrc::carried(rest).expect("compute succeeded but carried failed");
        assert_eq!(verified, Ok(c == carried));
        let mut fixed = rest.to_vec();
        icrc::fill(&mut fixed).expect("compute succeeded but fill failed");
        assert_eq!(icrc::verify(&fixed), Ok(true));
        assert_eq!(icrc::carried(&fixed), Ok(c));
    } else {
        assert!(verified.is_err());
    }
}

/// `new_checked` + `parse`; when parse succeeds, `emit` into a fresh buffer, re-parse
/// (must equal) and emit again (bytes must be identical).
macro_rules! round_trip {
    ($view:ident, $repr:ident, $bytes:expr) => {{
        if let Ok(view) = $view::new_checked($bytes) {
            if let Ok(repr) = $repr::parse(&view) {
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut $view::new_unchecked(&mut out[..]));
                let view2 = $view::new_checked(&out[..]).expect(concat!(
                    stringify!($repr),
                    ": emitted buffer fails check_len"
                ));
                let again = $repr::parse(&view2)
                    .expect(concat!(stringify!($repr), ": re-parse failed"));
                assert_eq!(again, repr, concat!(stringify!($repr), ": round trip"));
                let mut out2 = vec![0xA5u8; repr.buffer_len()];
                again.emit(&mut $view::new_unchecked(&mut out2[..]));
                assert_eq!(out, out2, concat!(stringify!($repr), ": emit not stable"));
            }
        }
    }};
}

/// Every attribute layout, over `bytes` wherever they sit in a MAD.
fn mad_attributes(bytes: &[u8]) {
    round_trip!(ClassPortInfo, ClassPortInfoRepr, bytes);
    round_trip!(PortCounters, PortCountersRepr, bytes);
    round_trip!(PortCountersExtended, PortCountersExtendedRepr, bytes);
    round_trip!(BKeyInfo, BKeyInfoRepr, bytes);
    round_trip!(Notice, NoticeRepr, bytes);
    round_trip!(GsNotice, GsNoticeRepr, bytes);
    round_trip!(Trap256Details, Trap256DetailsRepr, bytes);
    round_trip!(Trap259BKeyDetails, Trap259BKeyDetailsRepr, bytes);
    round_trip!(CmPath, CmPathRepr, bytes);
    round_trip!(CmReq, CmReqRepr, bytes);
    round_trip!(CmMra, CmMraRepr, bytes);
    round_trip!(CmRej, CmRejRepr, bytes);
    round_trip!(CmRep, CmRepRepr, bytes);
    round_trip!(CmRtu, CmRtuRepr, bytes);
    round_trip!(CmDreq, CmDreqRepr, bytes);
    round_trip!(CmDrep, CmDrepRepr, bytes);
}

/// Every MAD layout on the bytes: the common header (with its DR helpers checked
/// against the repr's), the class MADs, the CM dispatcher, and every attribute view
/// over the MAD's data areas.
pub fn mad(data: &[u8]) {
    if let Ok(h) = MadHeader::new_checked(data) {
        let r = MadHeaderRepr::parse(&h).expect("header parse after new_checked");
        assert_eq!(h.is_response(), r.is_response());
        assert_eq!(h.dr_direction(), r.dr_direction());
        assert_eq!(h.dr_status(), r.dr_status());
        assert_eq!(h.hop_pointer(), r.hop_pointer());
        assert_eq!(h.hop_count(), r.hop_count());
        assert_eq!(
            MadHeaderRepr::dr_status_word(r.dr_direction(), r.dr_status()),
            r.status
        );
        assert_eq!(
            MadHeaderRepr::dr_class_specific(r.hop_pointer(), r.hop_count()),
            r.class_specific
        );
        assert_eq!(h.payload().len(), data.len() - 24);
    }
    round_trip!(MadHeader, MadHeaderRepr, data);
    round_trip!(Smp, SmpRepr, data);
    round_trip!(DrSmp, DrSmpRepr, data);
    round_trip!(PerfMad, PerfMadRepr, data);
    round_trip!(BmMad, BmMadRepr, data);
    round_trip!(CmMad, CmMadRepr, data);
    if let Ok(m) = CmMad::new_checked(data) {
        let header = m.header();
        if let Ok(msg) = CmMessage::parse(header.attribute_id, m.data_ref()) {
            assert_eq!(msg.attribute_id(), header.attribute_id);
        }
    }
    if let Ok(m) = Smp::new_checked(data) {
        mad_attributes(m.data_ref());
    }
    if let Ok(m) = PerfMad::new_checked(data) {
        mad_attributes(m.data_ref());
    }
    if let Ok(m) = CmMad::new_checked(data) {
        mad_attributes(m.data_ref());
    }
    if let Ok(n) = Notice::new_checked(data) {
        mad_attributes(n.data_details_ref());
    }
    mad_attributes(data);
}

/// The parsers of a raw-mode device's receive path, on one Ethernet frame:
/// `rocev2::parse_frame_with` (with and without the UDP checksum check), ARP and
/// Neighbor Discovery. What `rocev2` accepts has a good ICRC by the independent
/// decoder too, and re-emits (with the ICRC recomputed) to a frame that parses to the
/// same fields; an ARP packet or ND message re-emits to one that parses equal.
pub fn raw_frame(data: &[u8]) {
    use rverbs_wire::arp::ArpRepr;
    use rverbs_wire::ndisc::{self, NdRepr};
    use rverbs_wire::rocev2::{self, RoceV2Repr};
    for check_udp in [true, false] {
        let Ok(f) = rocev2::parse_frame_with(data, check_udp) else {
            continue;
        };
        // (`frame` also checks the transport packet, which `rocev2` leaves to the
        // engine, so it may refuse what `rocev2` accepts; it never calls it not RoCE.)
        match frame::parse_ethernet(data) {
            Ok(Decoded::Roce(x)) => assert!(x.icrc_ok, "{x}"),
            Ok(Decoded::NotRoce) => panic!("rocev2 accepted what frame calls not RoCE"),
            Err(_) => {}
        }
        let repr = RoceV2Repr {
            src_mac: f.eth.src,
            dst_mac: f.eth.dst,
            src: f.src,
            dst: f.dst,
            src_port: f.src_port,
            hop_limit: f.hop_limit,
            traffic_class: f.traffic_class,
            flow_label: f.flow_label,
            ipv4_ident: f.ipv4_ident.unwrap_or(0),
        };
        let mut buf = vec![0u8; repr.frame_len(f.packet.len())];
        let n = repr.emit_frame(f.packet, &mut buf).expect("a parsed frame re-emits");
        assert_eq!(n, buf.len());
        rocev2::fill_icrc(&mut buf).expect("fill_icrc on an emitted frame");
        let g = rocev2::parse_frame(&buf).expect("the re-emitted frame parses");
        assert_eq!(
            (g.src, g.dst, g.src_port, g.hop_limit, g.traffic_class),
            (f.src, f.dst, f.src_port, f.hop_limit, f.traffic_class)
        );
        assert_eq!((g.flow_label, g.ipv4_ident), (f.flow_label, f.ipv4_ident));
        assert_eq!(g.packet.len(), f.packet.len());
        assert_eq!(g.packet[..g.packet.len() - 4], f.packet[..f.packet.len() - 4]);
        packet(f.packet);
    }
    // ARP from the Ethernet payload on (and from the first byte, as a bare packet).
    for at in [14usize, 0] {
        if let Some(Ok(a)) = data.get(at..).map(ArpRepr::parse) {
            let mut b = [0u8; 28];
            a.emit(&mut b).unwrap();
            assert_eq!(ArpRepr::parse(&b), Ok(a));
        }
    }
    if let Ok(Some((ip, nd))) = ndisc::parse_frame(data) {
        let mut b = [0u8; 64];
        let n = nd.emit(ip.src, ip.dst, &mut b).unwrap();
        assert_eq!(NdRepr::parse(ip.src, ip.dst, 255, &b[..n]), Ok(Some(nd)));
    }
    // And as a bare ICMPv6 message between two fixed addresses.
    let (s, d) = ("fd00::1".parse().unwrap(), "ff02::1:ff00:2".parse().unwrap());
    if let Ok(Some(nd)) = NdRepr::parse(s, d, 255, data) {
        let mut b = [0u8; 64];
        let n = nd.emit(s, d, &mut b).unwrap();
        assert_eq!(NdRepr::parse(s, d, 255, &b[..n]), Ok(Some(nd)));
    }
}
