//! Hostile and malformed CM MADs: each is dropped and counted under its cause, and
//! never changes a connection.

use rverbs_cm::consts::MS;
use rverbs_cm::sim::{node_gid, LinkConfig, Sim};
use rverbs_cm::{AcceptParams, Config, ConnectParams, Event, Path, State};
use rverbs_wire::mad::cm::{CmMad, CmMadRepr, CmMessage, CmRtuRepr};
use rverbs_wire::mad::{class, method, MadHeaderRepr, MAD_LEN};

const SID: u64 = 0x0106_0001;

fn established() -> (Sim, rverbs_cm::CmId, rverbs_cm::CmId) {
    let mut sim = Sim::new(
        2,
        |i| Config {
            ca_guid: 0x77 + i as u64,
            id_xor: 0x1000_0000 * (i as u32 + 1),
            ..Config::default()
        },
        LinkConfig::default(),
        9,
    );
    let l = sim.node(1).create_id();
    sim.node(1).listen(l, SID, 0).unwrap();
    let a = sim.node(0).create_id();
    let p = ConnectParams::rdma_cm(SID, 5, 6, Path::roce(node_gid(0), node_gid(1)));
    sim.node(0).connect(0, a, &p).unwrap();
    sim.run_for(MS);
    let Some(Event::ConnectRequest { id: p, .. }) = sim.events(1).pop() else {
        panic!()
    };
    let now = sim.now();
    let acc = AcceptParams {
        qpn: 8,
        starting_psn: 9,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        failover_accepted: 0,
        srq: false,
        flow_control: false,
        private_data: vec![],
    };
    sim.node(1).accept(now, p, &acc).unwrap();
    sim.run_for(MS);
    let now = sim.now();
    sim.node(0).rtu(now, a, &[]).unwrap();
    sim.run_for(MS);
    sim.events(0);
    sim.events(1);
    (sim, a, p)
}

fn mad(attr: u16, message: CmMessage, tweak: impl FnOnce(&mut MadHeaderRepr)) -> Vec<u8> {
    let mut h = MadHeaderRepr {
        base_version: 1,
        mgmt_class: class::CM,
        class_version: 2,
        method: method::SEND,
        status: 0,
        class_specific: 0,
        transaction_id: 1,
        attribute_id: attr,
        attribute_modifier: 0,
    };
    let mut buf = vec![0u8; MAD_LEN];
    CmMadRepr { header: h, message }.emit(&mut CmMad::new_unchecked(&mut buf[..]));
    h.attribute_id = u16::from_be_bytes([buf[16], buf[17]]);
    tweak(&mut h);
    CmMad::new_unchecked(&mut buf[..]).set_header(h);
    buf
}

#[test]
fn each_bad_mad_is_counted_under_its_cause() {
    let (mut sim, a, p) = established();
    let rtu = |local, remote| {
        CmMessage::Rtu(CmRtuRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; 224],
        })
    };
    let good = mad(0x14, rtu(a.0, p.0), |_| {});
    let before = sim.node(1).stats();
    let sent_before = sim.net.sent;

    sim.inject(0, 1, &good[..100]);
    sim.inject(
        0,
        1,
        &mad(0x14, rtu(a.0, p.0), |h| h.mgmt_class = class::PERF_MGMT),
    );
    sim.inject(0, 1, &mad(0x14, rtu(a.0, p.0), |h| h.base_version = 2));
    sim.inject(0, 1, &mad(0x14, rtu(a.0, p.0), |h| h.class_version = 1));
    sim.inject(0, 1, &mad(0x14, rtu(a.0, p.0), |h| h.method = method::GET));
    sim.inject(0, 1, &mad(0x14, rtu(a.0, p.0), |h| h.attribute_id = 0x0019)); // LAP
    sim.inject(0, 1, &mad(0x14, rtu(a.0, p.0), |h| h.attribute_id = 0x0001));
    sim.inject(0, 1, &mad(0x14, rtu(a.0, p.0), |h| h.attribute_id = 0xbeef));
    sim.inject(0, 1, &mad(0x14, rtu(a.0 ^ 1, p.0), |_| {})); // wrong remote ID
    sim.inject(0, 1, &mad(0x14, rtu(a.0, 0x0bad_0bad), |_| {})); // unknown local ID
    sim.inject(0, 1, &good); // a duplicate RTU: established already
    let s = sim.node(1).stats();
    assert_eq!(s.rx - before.rx, 11);
    assert_eq!(s.malformed - before.malformed, 1);
    assert_eq!(s.wrong_class - before.wrong_class, 2);
    assert_eq!(s.bad_class_version - before.bad_class_version, 1);
    assert_eq!(s.bad_method - before.bad_method, 1);
    assert_eq!(s.unknown_attribute - before.unknown_attribute, 3);
    assert_eq!(s.unmatched - before.unmatched, 2);
    assert_eq!(s.duplicates - before.duplicates, 1);
    assert!(sim.events(1).is_empty());
    assert_eq!(sim.node(1).state(p), Some(State::Established));
    sim.run_for(10 * MS);
    assert_eq!(sim.net.sent, sent_before, "nothing answers a dropped MAD");

    // A DREQ naming the wrong QPN is dropped; the connection stays.
    let dreq = mad(
        0x15,
        CmMessage::Dreq(rverbs_wire::mad::cm::CmDreqRepr {
            local_comm_id: a.0,
            remote_comm_id: p.0,
            remote_qpn_eecn: 0x999,
            private_data: [0; 220],
        }),
        |_| {},
    );
    sim.inject(0, 1, &dreq);
    assert_eq!(sim.node(1).state(p), Some(State::Established));
    assert_eq!(sim.node(1).stats().unmatched - before.unmatched, 3);
}

#[test]
fn random_bytes_never_panic_and_are_all_counted() {
    let (mut sim, a, p) = established();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..20_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = [MAD_LEN, MAD_LEN, 3, 255, 300][(x % 5) as usize];
        let mut buf: Vec<u8> = (0..len)
            .map(|k| (x.rotate_left((k % 64) as u32) >> 7) as u8)
            .collect();
        if len >= MAD_LEN && i % 2 == 0 {
            // A plausible CM header over random contents, aimed at the live IDs.
            buf[..4].copy_from_slice(&[1, class::CM, 2, method::SEND]);
            buf[16..18].copy_from_slice(&(0x10 + (x >> 40) as u16 % 9).to_be_bytes());
            if i % 4 == 0 {
                buf[24..28].copy_from_slice(&a.0.to_be_bytes());
                buf[28..32].copy_from_slice(&p.0.to_be_bytes());
            }
        }
        let to = (x >> 20) as usize & 1;
        sim.inject(1 - to, to, &buf);
        if i % 1000 == 0 {
            sim.run_for(1000 * MS);
        }
    }
    sim.run_for(200_000 * MS);
    let s = sim.node(0).stats();
    let t = sim.node(1).stats();
    assert!(s.rx + t.rx >= 20_000);
    assert!(s.malformed + t.malformed > 1000);
    assert!(s.unknown_attribute + t.unknown_attribute + s.wrong_class + t.wrong_class > 1000);
    // Still a working CM afterwards.
    let l = sim.node(1).create_id();
    sim.node(1).listen(l, SID + 7, 0).unwrap();
}

#[test]
fn a_req_for_a_gid_the_port_lacks_is_rejected_invalid_gid() {
    let mut sim = Sim::new(2, |_| Config::default(), LinkConfig::default(), 3);
    let l = sim.node(1).create_id();
    sim.node(1).listen(l, SID, 0).unwrap();
    let mut other = node_gid(1);
    other[15] = 99;
    // Delivered to node 1's CM, naming a GID node 1 does not have.
    let p = ConnectParams::rdma_cm(SID, 5, 6, Path::roce(node_gid(0), other));
    let a = sim.node(0).create_id();
    sim.node(0).connect(0, a, &p).unwrap();
    let t = sim.node(0).poll_transmit().unwrap();
    sim.inject(0, 1, &t.mad[..]);
    sim.run_for(MS);
    let ev = sim.events(0);
    assert!(
        matches!(&ev[..], [Event::Rejected { id, reason: 12, ari, .. }] if *id == a && ari[..] == node_gid(1)),
        "{ev:?}"
    );
    // Once the port has that GID, the same REQ is taken.
    sim.node(1).add_local_gid(other);
    let b = sim.node(0).create_id();
    let now = sim.now();
    sim.node(0).connect(now, b, &p).unwrap();
    let t = sim.node(0).poll_transmit().unwrap();
    sim.inject(0, 1, &t.mad[..]);
    assert!(matches!(sim.events(1)[..], [Event::ConnectRequest { .. }]));
}
