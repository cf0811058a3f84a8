//! CM layout tests: golden MADs from real kernel rxe traffic, and the generic
//! layout properties.
//!
//! The golden bytes are the 256-byte MADs of `rdmacm_rping.pcap` (frames 1, 2, 3, 28
//! and 29: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + DETH 8 bytes, then the MAD, then
//! the 4-byte ICRC), extracted with a throwaway script. The expected values are those
//! of Wireshark's decode (`tshark-verbose.txt` for the REQ, `tshark -V` on the same
//! pcap for the others), except two REQ fields where Wireshark's dissector is wrong,
//! noted at the assertions.

use super::*;
use crate::mad::tests::{hex, layout_tests};
use crate::mad::{method, MadHeader};
use proptest::prelude::*;
use std::vec;
use std::vec::Vec;

/// Frame 1 of `rdmacm_rping.pcap`: the REQ MAD.
const GOLDEN_REQ: &str = include_str!("../../../../../testdata/cm/rping-req.hex");

/// Frame 2 of `rdmacm_rping.pcap`: the REP MAD.
const GOLDEN_REP: &str = include_str!("../../../../../testdata/cm/rping-rep.hex");

/// Frame 3 of `rdmacm_rping.pcap`: the RTU MAD.
const GOLDEN_RTU: &str = include_str!("../../../../../testdata/cm/rping-rtu.hex");

/// Frame 28 of `rdmacm_rping.pcap`: the DREQ MAD.
const GOLDEN_DREQ: &str = include_str!("../../../../../testdata/cm/rping-dreq.hex");

/// Frame 29 of `rdmacm_rping.pcap`: the DREP MAD.
const GOLDEN_DREP: &str = include_str!("../../../../../testdata/cm/rping-drep.hex");

layout_tests!(path: CmPath, CmPathRepr);
layout_tests!(req: CmReq, CmReqRepr);
layout_tests!(mra: CmMra, CmMraRepr);
layout_tests!(rej: CmRej, CmRejRepr);
layout_tests!(rep: CmRep, CmRepRepr);
layout_tests!(rtu: CmRtu, CmRtuRepr);
layout_tests!(dreq: CmDreq, CmDreqRepr);
layout_tests!(drep: CmDrep, CmDrepRepr);
layout_tests!(sidr_req: CmSidrReq, CmSidrReqRepr);
layout_tests!(sidr_rep: CmSidrRep, CmSidrRepRepr);

/// Parses a golden MAD, checks the common header Wireshark shows for all five
/// (base version 1, class 0x07, class version 2, Send, status 0, TID 0x247fd4c1a),
/// checks that re-emitting gives the same 256 bytes, and returns the message.
fn golden(hex_str: &str, attribute_id: u16) -> CmMessage {
    let bytes = hex(hex_str);
    assert_eq!(bytes.len(), MAD_LEN);
    let mad = CmMad::new_checked(&bytes[..]).unwrap();
    let repr = CmMadRepr::parse(&mad).unwrap();
    let h = repr.header;
    assert_eq!(
        (h.base_version, h.mgmt_class, h.class_version),
        (1, 0x07, 2)
    );
    assert_eq!((h.method, h.status, h.class_specific), (method::SEND, 0, 0));
    assert_eq!(h.transaction_id, 0x0000_0002_47fd_4c1a);
    assert_eq!((h.attribute_id, h.attribute_modifier), (attribute_id, 0));
    assert_eq!(repr.message.attribute_id(), attribute_id);
    let mut out = [0xEEu8; MAD_LEN];
    repr.emit(&mut CmMad::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &bytes[..], "re-emit differs");
    repr.message
}

fn ipv4_mapped_gid(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

#[test]
fn golden_req() {
    let CmMessage::Req(req) = golden(GOLDEN_REQ, attr::CM_REQ) else {
        panic!("not a REQ")
    };
    assert_eq!(req.local_comm_id, 0x1a4c_fd47);
    // IP CM service ID: prefix 0000000001, protocol 0x06 (TCP), port 0x1c06.
    assert_eq!(req.service_id, 0x0000_0000_0106_1c06);
    assert_eq!(req.local_ca_guid, 0x5054_00ff_fe77_0003);
    assert_eq!(req.local_q_key, 0);
    assert_eq!(req.local_qpn, 0x29);
    assert_eq!(req.responder_resources, 1);
    assert_eq!(req.local_eecn, 0);
    assert_eq!(req.initiator_depth, 1);
    assert_eq!(req.remote_eecn, 0);
    assert_eq!(req.remote_cm_response_timeout, 0x14);
    assert_eq!(req.transport_service_type, transport::RC);
    assert!(!req.end_to_end_flow_control);
    assert_eq!(req.starting_psn, 0xa4_6f83);
    assert_eq!(req.local_cm_response_timeout, 0x14);
    assert_eq!(req.retry_count, 7);
    assert_eq!(req.partition_key, 0xffff);
    assert_eq!(req.path_mtu, 3);
    assert!(!req.rdc_exists);
    assert_eq!(req.rnr_retry_count, 7);
    assert_eq!(req.max_cm_retries, 15);
    assert!(!req.srq);
    assert_eq!(req.extended_transport_type, 0);

    let p = req.primary_path;
    assert_eq!((p.local_port_lid, p.remote_port_lid), (0xffff, 0xffff));
    assert_eq!(p.local_port_gid, ipv4_mapped_gid([10, 77, 0, 3]));
    assert_eq!(p.remote_port_gid, ipv4_mapped_gid([10, 77, 0, 2]));
    // Message bytes 88-91 are 52 52 f0 00. IBTA (kernel CM_REQ_PRIMARY_FLOW_LABEL =
    // CM_FIELD32_LOC(88, 20)) puts the flow label in the top 20 bits of that word:
    // 0x5252f. Wireshark shows 0x00525 because its dissector reads only 3 bytes
    // (0x5252f0) under the 32-bit mask 0xfffff000.
    assert_eq!(p.flow_label, 0x5252f);
    // Packet rate is the low 6 bits of byte 91 (CM_FIELD_BLOC(91, 2, 6)) = 0.
    // Wireshark shows 0x12 because it applies the 6-bit mask to byte 88 (0x52).
    assert_eq!(p.packet_rate, 0);
    assert_eq!((p.traffic_class, p.hop_limit), (0, 0x40));
    assert_eq!((p.sl, p.subnet_local), (0, false));
    assert_eq!(p.local_ack_timeout, 0x13);

    let a = req.alternate_path;
    assert_eq!((a.local_port_lid, a.remote_port_lid), (0, 0));
    assert_eq!((a.local_port_gid, a.remote_port_gid), ([0; 16], [0; 16]));
    assert_eq!((a.flow_label, a.packet_rate, a.traffic_class), (0, 0, 0));
    assert_eq!(
        (a.hop_limit, a.sl, a.subnet_local, a.local_ack_timeout),
        (0, 0, false, 0)
    );

    // IP CM private data: version 0.0, IP version 4, source port 0xadb7, source and
    // destination IPv4 addresses in the last 4 bytes of two 16-byte fields.
    let pd = &req.private_data;
    assert_eq!(&pd[..4], &[0x00, 0x40, 0xad, 0xb7]);
    assert_eq!(&pd[16..20], &[10, 77, 0, 3]);
    assert_eq!(&pd[32..36], &[10, 77, 0, 2]);
    assert!(pd[36..].iter().all(|&b| b == 0));
}

#[test]
fn golden_rep() {
    let CmMessage::Rep(rep) = golden(GOLDEN_REP, attr::CM_REP) else {
        panic!("not a REP")
    };
    assert_eq!(
        (rep.local_comm_id, rep.remote_comm_id),
        (0x8d1f_2b6f, 0x1a4c_fd47)
    );
    assert_eq!(
        (rep.local_q_key, rep.local_qpn, rep.local_eecn),
        (0, 0x29, 0)
    );
    assert_eq!(rep.starting_psn, 0x73_9acb);
    assert_eq!((rep.responder_resources, rep.initiator_depth), (1, 1));
    assert_eq!(rep.target_ack_delay, 0x0f);
    assert_eq!(rep.failover_accepted, 0);
    assert!(!rep.end_to_end_flow_control);
    assert_eq!(rep.rnr_retry_count, 7);
    assert!(!rep.srq);
    assert_eq!(rep.local_ca_guid, 0x5054_00ff_fe77_0002);
    assert_eq!(rep.private_data, [0; 196]);
}

#[test]
fn golden_rtu() {
    let CmMessage::Rtu(rtu) = golden(GOLDEN_RTU, attr::CM_RTU) else {
        panic!("not an RTU")
    };
    assert_eq!(
        (rtu.local_comm_id, rtu.remote_comm_id),
        (0x1a4c_fd47, 0x8d1f_2b6f)
    );
    assert_eq!(rtu.private_data, [0; 224]);
}

#[test]
fn golden_dreq() {
    let CmMessage::Dreq(dreq) = golden(GOLDEN_DREQ, attr::CM_DREQ) else {
        panic!("not a DREQ")
    };
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (0x1a4c_fd47, 0x8d1f_2b6f)
    );
    assert_eq!(dreq.remote_qpn_eecn, 0x29);
    assert_eq!(dreq.private_data, [0; 220]);
}

#[test]
fn golden_drep() {
    let CmMessage::Drep(drep) = golden(GOLDEN_DREP, attr::CM_DREP) else {
        panic!("not a DREP")
    };
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (0x8d1f_2b6f, 0x1a4c_fd47)
    );
    assert_eq!(drep.private_data, [0; 224]);
}

#[test]
fn mra_and_rej_bytes_by_hand() {
    // kernel ibta_vol1_c12.h: CM_MRA_MESSAGE_MRAED CM_FIELD8_LOC(8, 2),
    // CM_MRA_SERVICE_TIMEOUT CM_FIELD8_LOC(9, 5); CM_REJ_MESSAGE_REJECTED (8, 2),
    // CM_REJ_REJECTED_INFO_LENGTH (9, 7), CM_REJ_REASON (10, 16), ARI at 12, private
    // data at 84.
    let mut m = [0u8; CM_DATA_LEN];
    m[..8].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]);
    m[8] = 0x40; // REP
    m[9] = 0x0b << 3;
    m[10] = 0xAA;
    let mra = CmMraRepr::parse(&CmMra::new_checked(&m[..]).unwrap()).unwrap();
    assert_eq!((mra.local_comm_id, mra.remote_comm_id), (1, 2));
    assert_eq!(
        (mra.message_mraed, mra.service_timeout),
        (message_kind::REP, 0x0b)
    );
    assert_eq!(mra.private_data[0], 0xAA);

    let mut r = [0u8; CM_DATA_LEN];
    r[..8].copy_from_slice(&[0, 0, 0, 3, 0, 0, 0, 4]);
    r[8] = 0x00; // REQ
    r[9] = 16 << 1;
    r[10..12].copy_from_slice(&28u16.to_be_bytes()); // consumer reject
    r[12] = 0x11;
    r[83] = 0x22;
    r[84] = 0x33;
    r[231] = 0x44;
    let rej = CmRejRepr::parse(&CmRej::new_checked(&r[..]).unwrap()).unwrap();
    assert_eq!((rej.local_comm_id, rej.remote_comm_id), (3, 4));
    assert_eq!(
        (rej.message_rejected, rej.reject_info_length),
        (message_kind::REQ, 16)
    );
    assert_eq!(rej.reason, 28);
    assert_eq!((rej.ari[0], rej.ari[71]), (0x11, 0x22));
    assert_eq!((rej.private_data[0], rej.private_data[147]), (0x33, 0x44));

    // Whole MADs around them round-trip too.
    for (attribute_id, body) in [(attr::CM_MRA, m), (attr::CM_REJ, r)] {
        let mut mad = [0u8; MAD_LEN];
        let mut h = MadHeader::new_checked(&mut mad[..]).unwrap();
        h.set_base_version(1);
        h.set_mgmt_class(class::CM);
        h.set_class_version(CM_CLASS_VERSION);
        h.set_method(method::SEND);
        h.set_attribute_id(attribute_id);
        CmMad::new_checked(&mut mad[..])
            .unwrap()
            .data_mut()
            .copy_from_slice(&body);
        let repr = CmMadRepr::parse(&CmMad::new_checked(&mad[..]).unwrap()).unwrap();
        let mut out = [0u8; MAD_LEN];
        repr.emit(&mut CmMad::new_unchecked(&mut out[..]));
        assert_eq!(out, mad);
    }
}

#[test]
fn cm_mad_rejects_what_it_does_not_model() {
    let mut mad = hex(GOLDEN_RTU);
    assert!(matches!(
        CmMad::new_checked(&mad[..MAD_LEN - 1]),
        Err(Error::Truncated("CM MAD"))
    ));
    mad[17] = 0x19; // LAP
    assert_eq!(
        CmMadRepr::parse(&CmMad::new_checked(&mad[..]).unwrap()),
        Err(Error::Unsupported("CM attribute (LAP, APR or unknown)"))
    );
    mad[1] = class::PERF_MGMT;
    assert_eq!(
        CmMadRepr::parse(&CmMad::new_checked(&mad[..]).unwrap()),
        Err(Error::Malformed(
            "MAD class is not communication management (0x07)"
        ))
    );
}

const CM_ATTRS: [u16; 9] = [
    attr::CM_REQ,
    attr::CM_MRA,
    attr::CM_REJ,
    attr::CM_REP,
    attr::CM_RTU,
    attr::CM_DREQ,
    attr::CM_DREP,
    attr::CM_SIDR_REQ,
    attr::CM_SIDR_REP,
];

proptest! {
    #[test]
    fn cm_mad_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), MAD_LEN..MAD_LEN + 16)) {
        let mad = CmMad::new_checked(&bytes[..]).unwrap();
        let _ = CmMadRepr::parse(&mad);
        let _ = (mad.header(), mad.data_ref().len());
    }

    #[test]
    fn cm_mad_round_trip(mut bytes in prop::collection::vec(any::<u8>(), MAD_LEN), which in 0..CM_ATTRS.len()) {
        bytes[0] = 1;
        bytes[1] = class::CM;
        bytes[16..18].copy_from_slice(&CM_ATTRS[which].to_be_bytes());
        let repr = CmMadRepr::parse(&CmMad::new_checked(&bytes[..]).unwrap()).unwrap();
        let mut out: Vec<u8> = vec![0u8; repr.buffer_len()];
        repr.emit(&mut CmMad::new_unchecked(&mut out[..]));
        let again = CmMadRepr::parse(&CmMad::new_checked(&out[..]).unwrap()).unwrap();
        prop_assert_eq!(again, repr);
    }
}

/// SIDR fields sit where kernel `ibta_vol1_c12.h` puts them (`CM_SIDR_REQ_*` and
/// `CM_SIDR_REP_*`: request ID at 0, P_Key at 4, service ID at 8 / 12, QPN at 8,
/// Q_Key at 20, additional information at 24, private data at 16 / 96).
#[test]
fn sidr_fields_follow_the_kernel_table() {
    let mut data = [0u8; CM_DATA_LEN];
    data[0..4].copy_from_slice(&0x1122_3344u32.to_be_bytes());
    data[4..6].copy_from_slice(&0xffffu16.to_be_bytes());
    data[8..16].copy_from_slice(&0x0000_0000_0111_4e20u64.to_be_bytes());
    data[16] = 0xab;
    data[231] = 0xcd;
    let CmMessage::SidrReq(req) = CmMessage::parse(attr::CM_SIDR_REQ, &data).unwrap() else {
        panic!("not a SIDR REQ")
    };
    assert_eq!(
        (req.request_id, req.partition_key, req.service_id),
        (0x1122_3344, 0xffff, 0x0111_4e20)
    );
    assert_eq!((req.private_data[0], req.private_data[215]), (0xab, 0xcd));

    let mut data = [0u8; CM_DATA_LEN];
    data[0..4].copy_from_slice(&0x1122_3344u32.to_be_bytes());
    data[4] = 2; // reject
    data[5] = 3;
    data[8..11].copy_from_slice(&[0x00, 0x01, 0x23]);
    data[12..20].copy_from_slice(&0x0111_4e20u64.to_be_bytes());
    data[20..24].copy_from_slice(&0x8765_4321u32.to_be_bytes());
    data[24] = 0x5a;
    data[96] = 0xa5;
    data[231] = 0x77;
    let CmMessage::SidrRep(rep) = CmMessage::parse(attr::CM_SIDR_REP, &data).unwrap() else {
        panic!("not a SIDR REP")
    };
    assert_eq!((rep.request_id, rep.status), (0x1122_3344, 2));
    assert_eq!(rep.additional_information_length, 3);
    assert_eq!(
        (rep.qpn, rep.service_id, rep.q_key),
        (0x123, 0x0111_4e20, 0x8765_4321)
    );
    assert_eq!(rep.additional_information[0], 0x5a);
    assert_eq!((rep.private_data[0], rep.private_data[135]), (0xa5, 0x77));
    let mut out = [0u8; CM_DATA_LEN];
    CmMessage::SidrRep(rep).emit(&mut out);
    assert_eq!(out, data);
}
