//! RoCE v1 through the engine: a `sgid_index` naming a v1 GID entry
//! (`Config::gid_roce_v1`) makes every packet a v1 one (v1 ICRC, `Transmit::roce_v1`),
//! a UD receive's network header area is the GRH itself (NxtHdr 0x1B), and a connected
//! QP refuses packets that arrive with the other network type.

mod common;
use common::*;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;
use rverbs_wire::grh::{Grh, GrhRepr, NEXT_HEADER_BTH};

/// Two engines whose GID tables hold each address twice, like a raw-mode device:
/// index 0 RoCE v1, index 1 RoCE v2.
fn v1_sim(ipv6: bool, seed: u64) -> Sim {
    let mut sim = Sim::new(2, ipv6, LinkConfig::default(), seed);
    for i in 0..2 {
        let g = net::ip_to_gid(sim.addr(i));
        sim.engines[i] = Engine::new(Config {
            gids: vec![g, g],
            gid_roce_v1: vec![true, false],
            seed: seed + i as u64,
            first_qpn: 0x20 + 0x10 * i as u32,
            ..Config::default()
        });
    }
    sim
}

#[test]
fn rc_send_write_read_over_v1() {
    for ipv6 in [false, true] {
        let mut sim = v1_sim(ipv6, 11);
        let o = PairOpts::default();
        let (a, b) = pair(&mut sim, &o); // sgid_index 0: RoCE v1
        let msg = pattern(3000, 5);
        fill(&a, 0, &msg);
        post_recv1(&mut sim, &b, 9, 0, 4096, 0);
        sim.engines[0]
            .post_send(a.qpn, wr(1, WrOpcode::Send, vec![sge(&a, 0, 3000)]), 0)
            .unwrap();
        // Every packet the sender emits is RoCE v1 with a v1 ICRC.
        let mut sent = 0;
        while let Some(t) = sim.engines[0].poll_transmit(0) {
            assert!(t.roce_v1);
            let d = t.as_received();
            assert!(net::icrc_ok(&d));
            assert!(!net::icrc_ok(&Datagram {
                roce_v1: false,
                icrc_checked: false,
                ..d
            }));
            sim.engines[1].handle_datagram(0, &d);
            sent += 1;
        }
        assert_eq!(sent, 3, "3000 bytes at MTU 1024");
        let wcs = wait_wcs(&mut sim, &b, 1, SEC);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
            (9, WcStatus::Success, 3000)
        );
        assert_eq!(&b.mem.snapshot()[..3000], &msg[..]);
        // The ACK came back as v1 too (the sim carries `roce_v1` through).
        let wcs = wait_wcs(&mut sim, &a, 1, SEC);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::Success));

        let mut r = wr(2, WrOpcode::RdmaRead, vec![sge(&a, 8192, 3000)]);
        r.remote_addr = b.base;
        r.rkey = b.keys.rkey;
        sim.engines[0].post_send(a.qpn, r, 0).unwrap();
        let wcs = wait_wcs(&mut sim, &a, 1, SEC);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (2, WcStatus::Success));
        assert_eq!(&a.mem.snapshot()[8192..8192 + 3000], &msg[..]);
        assert_eq!(sim.engines[1].counters().rx_icrc_errors, 0);
    }
}

#[test]
fn connected_qp_refuses_the_other_network_type() {
    let mut sim = v1_sim(false, 12);
    let o = PairOpts::default();
    let (a, b) = pair(&mut sim, &o);
    post_recv1(&mut sim, &b, 1, 0, 64, 0);
    sim.engines[0]
        .post_send(a.qpn, wr(1, WrOpcode::Send, vec![sge(&a, 0, 16)]), 0)
        .unwrap();
    let t = sim.engines[0].poll_transmit(0).unwrap();
    assert!(t.roce_v1);
    // The same packet re-signed as RoCE v2 (valid ICRC) to a QP bound to a v1 GID.
    let mut p = t.payload.clone();
    net::fill_icrc(t.src, t.dst, 0xc000, &mut p);
    let d = Datagram {
        src: t.src,
        dst: t.dst,
        src_port: 0xc000,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        ipv4_id: Some(0),
        roce_v1: false,
        icrc_checked: false,
        payload: &p,
    };
    let before = sim.engines[1].counters().rx_wrong_source;
    sim.engines[1].handle_datagram(0, &d);
    assert_eq!(sim.engines[1].counters().rx_wrong_source, before + 1);
    assert!(drain(&mut sim, &b).is_empty());
    // A v1 packet with a bad ICRC is counted and dropped.
    let mut bad = t.payload.clone();
    let n = bad.len();
    bad[n - 1] ^= 1;
    let before = sim.engines[1].counters().rx_icrc_errors;
    sim.engines[1].handle_datagram(
        0,
        &Datagram {
            roce_v1: true,
            icrc_checked: false,
            payload: &bad,
            ..d
        },
    );
    assert_eq!(sim.engines[1].counters().rx_icrc_errors, before + 1);
    assert!(drain(&mut sim, &b).is_empty());
}

#[test]
fn ud_over_v1_gets_the_grh_as_its_network_header() {
    for ipv6 in [false, true] {
        let mut sim = v1_sim(ipv6, 13);
        let o = PairOpts {
            qp_type: QpType::Ud,
            ..Default::default()
        };
        let (a, b) = pair(&mut sim, &o);
        post_recv1(&mut sim, &b, 1, 0, 256, 0);
        let mut av = av_to(&sim, 1);
        av.hop_limit = 7;
        av.traffic_class = 0x20;
        av.flow_label = 0x4_5678;
        let ah = sim.engines[0].create_ah(a.pd, av).unwrap();
        fill(&a, 0, b"ping over v1");
        let mut w = wr(1, WrOpcode::Send, vec![sge(&a, 0, 12)]);
        w.ud = Some(UdDest {
            ah,
            remote_qpn: b.qpn,
            remote_qkey: 0x1111_1111,
        });
        sim.engines[0].post_send(a.qpn, w, 0).unwrap();
        let wcs = wait_wcs(&mut sim, &b, 1, SEC);
        assert_eq!(
            (wcs[0].status, wcs[0].byte_len),
            (WcStatus::Success, 40 + 12)
        );
        assert!(wcs[0].wc_flags.contains(WcFlags::GRH));
        let m = b.mem.snapshot();
        let grh = GrhRepr::parse(&Grh::new_checked(&m[..40]).unwrap()).unwrap();
        assert_eq!(grh.next_header, NEXT_HEADER_BTH);
        assert_eq!(grh.sgid, net::ip_to_gid(sim.addr(0)));
        assert_eq!(grh.dgid, net::ip_to_gid(sim.addr(1)));
        assert_eq!(
            (grh.hop_limit, grh.traffic_class, grh.flow_label),
            (7, 0x20, 0x4_5678)
        );
        // BTH 12 + DETH 8 + 12 bytes + ICRC 4.
        assert_eq!(grh.payload_len, 36);
        assert_eq!(&m[40..52], b"ping over v1");
    }
}
