//! RC, UC and UD basics on a clean simulated network.

mod common;
use common::*;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;

#[test]
fn rc_send_recv_segmented() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 1);
    let o = PairOpts::default();
    let (a, b) = pair(&mut sim, &o);
    let msg = pattern(2500, 7);
    fill(&a, 0, &msg);
    post_recv1(&mut sim, &b, 77, 0, 4096, 0);
    sim.engines[0]
        .post_send(a.qpn, wr(5, WrOpcode::Send, vec![sge(&a, 0, 2500)]), 0)
        .unwrap();
    let wcs = wait_wcs(&mut sim, &b, 1, SEC);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
        (77, WcStatus::Success, 2500)
    );
    assert_eq!(&b.mem.snapshot()[..2500], &msg[..]);
    let wcs = wait_wcs(&mut sim, &a, 1, SEC);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
        (5, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!(sim.stats.sent, 4, "3 data packets and one coalesced ACK");
}

#[test]
fn rc_write_read_atomics() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 2);
    let o = PairOpts::default();
    let (a, b) = pair(&mut sim, &o);
    let data = pattern(5000, 3);
    fill(&a, 0, &data);
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(&a, 0, 5000)]);
    w.remote_addr = b.base + 100;
    w.rkey = b.keys.rkey;
    sim.engines[0].post_send(a.qpn, w, 0).unwrap();
    let mut r = wr(2, WrOpcode::RdmaRead, vec![sge(&a, 10_000, 5000)]);
    r.remote_addr = b.base + 100;
    r.rkey = b.keys.rkey;
    sim.engines[0].post_send(a.qpn, r, 0).unwrap();
    b.mem.write(8192, &40u64.to_ne_bytes());
    let mut fa = wr(3, WrOpcode::AtomicFetchAndAdd, vec![sge(&a, 20_000, 8)]);
    fa.remote_addr = b.base + 8192;
    fa.rkey = b.keys.rkey;
    fa.compare_add = 2;
    sim.engines[0].post_send(a.qpn, fa, 0).unwrap();
    let mut cs = wr(4, WrOpcode::AtomicCmpAndSwp, vec![sge(&a, 20_008, 8)]);
    cs.remote_addr = b.base + 8192;
    cs.rkey = b.keys.rkey;
    cs.compare_add = 42;
    cs.swap = 7;
    sim.engines[0].post_send(a.qpn, cs, 0).unwrap();
    let wcs = wait_wcs(&mut sim, &a, 4, SEC);
    let ids: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success)
        ]
    );
    let bm = b.mem.snapshot();
    assert_eq!(&bm[100..5100], &data[..]);
    let am = a.mem.snapshot();
    assert_eq!(&am[10_000..15_000], &data[..]);
    assert_eq!(
        u64::from_ne_bytes(am[20_000..20_008].try_into().unwrap()),
        40
    );
    assert_eq!(
        u64::from_ne_bytes(am[20_008..20_016].try_into().unwrap()),
        42
    );
    assert_eq!(u64::from_ne_bytes(bm[8192..8200].try_into().unwrap()), 7);
}

#[test]
fn uc_and_ud_send() {
    for qp_type in [QpType::Uc, QpType::Ud] {
        let mut sim = Sim::new(2, qp_type == QpType::Ud, LinkConfig::default(), 3);
        let o = PairOpts {
            qp_type,
            ..Default::default()
        };
        let (a, b) = pair(&mut sim, &o);
        fill(&a, 0, b"hello, datagram");
        post_recv1(&mut sim, &b, 9, 0, 1024, 0);
        let mut w = wr(1, WrOpcode::SendWithImm, vec![sge(&a, 0, 15)]);
        w.imm_data = 0x1234_5678;
        if qp_type == QpType::Ud {
            let av = av_to(&sim, 1);
            let ah = sim.engines[0].create_ah(a.pd, av).unwrap();
            w.ud = Some(UdDest {
                ah,
                remote_qpn: b.qpn,
                remote_qkey: 0x1111_1111,
            });
        }
        sim.engines[0].post_send(a.qpn, w, 0).unwrap();
        let wcs = wait_wcs(&mut sim, &b, 1, SEC);
        assert_eq!(wcs.len(), 1, "{qp_type:?}");
        let wc = wcs[0];
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.imm_data, 0x1234_5678);
        let m = b.mem.snapshot();
        if qp_type == QpType::Ud {
            assert_eq!(wc.byte_len, 40 + 15);
            assert!(wc.wc_flags.contains(WcFlags::GRH));
            assert_eq!(wc.src_qp, a.qpn);
            assert_eq!(m[0] >> 4, 6, "IPv6 header in the GRH area");
            assert_eq!(&m[40..55], b"hello, datagram");
        } else {
            assert_eq!(wc.byte_len, 15);
            assert_eq!(&m[..15], b"hello, datagram");
        }
        let wcs = wait_wcs(&mut sim, &a, 1, SEC);
        assert_eq!(wcs[0].status, WcStatus::Success);
    }
}

/// Regression: the IP length in a UD receive's GRH area left out the BTH pad bytes, so
/// for payloads not a multiple of 4 it disagreed with the header on the wire (rxe
/// copies the received IP header, whose length covers the pad; IBTA 9.3.1.3).
#[test]
fn ud_grh_length_includes_pad() {
    for ipv6 in [false, true] {
        for len in [1usize, 2, 3, 4, 5] {
            let mut sim = Sim::new(2, ipv6, LinkConfig::default(), 4);
            let o = PairOpts {
                qp_type: QpType::Ud,
                ..Default::default()
            };
            let (a, b) = pair(&mut sim, &o);
            post_recv1(&mut sim, &b, 1, 0, 256, 0);
            let av = av_to(&sim, 1);
            let ah = sim.engines[0].create_ah(a.pd, av).unwrap();
            let mut w = wr(1, WrOpcode::Send, vec![sge(&a, 0, len as u32)]);
            w.ud = Some(UdDest {
                ah,
                remote_qpn: b.qpn,
                remote_qkey: 0x1111_1111,
            });
            sim.engines[0].post_send(a.qpn, w, 0).unwrap();
            let wcs = wait_wcs(&mut sim, &b, 1, SEC);
            assert_eq!(wcs.len(), 1);
            // BTH 12 + DETH 8 + payload + pad + ICRC 4, plus the UDP header.
            let udp_len = 8 + 12 + 8 + len.next_multiple_of(4) + 4;
            let m = b.mem.snapshot();
            let ip_len = if ipv6 {
                usize::from(u16::from_be_bytes([m[4], m[5]]))
            } else {
                usize::from(u16::from_be_bytes([m[22], m[23]])) - 20
            };
            assert_eq!(ip_len, udp_len, "ipv6 {ipv6} len {len}");
        }
    }
}

/// Two engines with an RC pair; `a` (on engine 0) has posted one 64-byte SEND and sent
/// it (the packets are returned, never delivered), so its retransmit timer is armed.
fn one_send_out(seed: u64) -> (Sim, End, Vec<Transmit>) {
    let mut sim = Sim::new(2, false, LinkConfig::default(), seed);
    let (a, _b) = pair(&mut sim, &PairOpts::default());
    let e = &mut sim.engines[0];
    e.post_send(a.qpn, wr(1, WrOpcode::Send, vec![sge(&a, 0, 64)]), 0)
        .unwrap();
    let mut sent = Vec::new();
    while let Some(t) = e.poll_transmit(0) {
        sent.push(t);
    }
    (sim, a, sent)
}

/// A QP destroyed with its retransmit timer armed leaves no timer behind (the engine
/// keeps each QP's armed deadline in the QP itself), and a QP whose timer fired is
/// re-armed for its next retry.
#[test]
fn destroyed_qp_leaves_no_timer_and_a_fired_timer_rearms() {
    let (mut sim, a, sent) = one_send_out(3);
    let e = &mut sim.engines[0];
    assert_eq!(sent.len(), 1, "one SEND ONLY, lost");
    let first = e.poll_timeout().expect("the retransmit timer is armed");
    e.handle_timeout(first);
    let again = e.poll_transmit(first).expect("a retransmission");
    assert_eq!(again.payload, sent[0].payload, "the same packet again");
    let second = e.poll_timeout().expect("re-armed after the retry");
    assert!(second > first, "{second} after {first}");
    e.destroy_qp(a.qpn).unwrap();
    assert_eq!(e.poll_timeout(), None);
    e.handle_timeout(second);
    assert!(e.poll_transmit(second).is_none());
}

/// A QP moved to RESET with its retransmit timer armed leaves no timer behind either:
/// the reset QP has no deadline, so the engine has none for it (a stale entry made
/// `poll_timeout` ask for a wake-up that fires nothing).
#[test]
fn reset_qp_leaves_no_timer() {
    let (mut sim, a, sent) = one_send_out(4);
    assert_eq!(sent.len(), 1);
    let e = &mut sim.engines[0];
    assert!(e.poll_timeout().is_some(), "the retransmit timer is armed");
    let reset = rverbs_engine::modify::QpAttr {
        qp_state: QpState::Reset,
        ..Default::default()
    };
    e.modify_qp(a.qpn, &reset, rverbs_engine::modify::QpAttrMask::STATE, 0)
        .unwrap();
    assert_eq!(e.qp_state(a.qpn), Some(QpState::Reset));
    assert_eq!(e.poll_timeout(), None, "no timer for a reset QP");
}

/// What a finished work request owns is freed off the packet path: a request whose
/// data is a list of more than two segments is kept until `Engine::reclaim` (64 at
/// most without it); a one- or two-segment request holds nothing that needs freeing
/// and is dropped when it completes.
#[test]
fn completed_requests_are_freed_by_reclaim_and_stay_bounded_without_it() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 9);
    let o = PairOpts::default();
    let (a, b) = pair(&mut sim, &o);
    let refs = |e: &End| std::sync::Arc::strong_count(&e.mem);
    let (a0, b0) = (refs(&a), refs(&b));
    // SEND and receive of `n` segments of 16 bytes each.
    let send = |sim: &mut Sim, i: u64, n: u64| {
        let recv: Vec<Sge> = (0..n).map(|k| sge(&b, 16 * k, 16)).collect();
        let now = sim.now;
        sim.engines[b.engine]
            .post_recv(
                b.qpn,
                RecvWr {
                    wr_id: i,
                    sg_list: recv.into(),
                },
                now,
            )
            .unwrap();
        let sg: Vec<Sge> = (0..n).map(|k| sge(&a, 16 * k, 16)).collect();
        sim.engines[0]
            .post_send(a.qpn, wr(i, WrOpcode::Send, sg), now)
            .unwrap();
        let wcs = wait_wcs(sim, &b, 1, SEC);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (i, WcStatus::Success));
        let wcs = wait_wcs(sim, &a, 1, SEC);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (i, WcStatus::Success));
    };
    for n in [1, 2] {
        send(&mut sim, n, n);
        assert_eq!(
            (refs(&a), refs(&b)),
            (a0, b0),
            "{n} segment(s): nothing kept"
        );
    }
    send(&mut sim, 3, 3);
    // The finished SEND (its three gathered segments) and receive (its three
    // scattered ones) still hold their region until reclaimed.
    assert_eq!((refs(&a), refs(&b)), (a0 + 3, b0 + 3));
    sim.engines[0].reclaim();
    sim.engines[1].reclaim();
    assert_eq!((refs(&a), refs(&b)), (a0, b0));
    // Never reclaimed: at most 64 kept per engine, and the messages still flow.
    for i in 4..200 {
        send(&mut sim, i, 3);
        assert!(refs(&a) <= a0 + 3 * 64 && refs(&b) <= b0 + 3 * 64);
    }
    assert!(refs(&a) > a0 && refs(&b) > b0);
    sim.engines[0].reclaim();
    sim.engines[1].reclaim();
    assert_eq!((refs(&a), refs(&b)), (a0, b0));
}

/// INLINE data is copied when the request is posted: the source may change at once.
/// Sizes from 1 to 400 bytes; the 400-byte one needs two packets (MTU 256), each read
/// from that copy.
#[test]
fn rc_inline_send_copies_at_post() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 11);
    let mut o = PairOpts {
        mtu: Mtu::M256,
        ..PairOpts::default()
    };
    o.cap.max_inline_data = 512;
    let (a, b) = pair(&mut sim, &o);
    let sizes = [1usize, 63, 64, 65, 200, 400];
    for (i, &n) in sizes.iter().enumerate() {
        post_recv1(&mut sim, &b, 100 + i as u64, (i * 512) as u64, 512, 0);
        let msg = pattern(n, i as u8 + 1);
        fill(&a, 0, &msg);
        let mut w = wr(i as u64, WrOpcode::Send, vec![sge(&a, 0, n as u32)]);
        w.flags = SendFlags::INLINE | SendFlags::SIGNALED;
        sim.engines[0].post_send(a.qpn, w, 0).unwrap();
        // The caller reuses its buffer before anything is sent.
        fill(&a, 0, &vec![0xEE; n]);
        let wcs = wait_wcs(&mut sim, &b, 1, SEC);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].byte_len as usize),
            (100 + i as u64, WcStatus::Success, n),
            "{n} bytes"
        );
        assert_eq!(
            &b.mem.snapshot()[i * 512..i * 512 + n],
            &msg[..],
            "{n} bytes"
        );
        let wcs = wait_wcs(&mut sim, &a, 1, SEC);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (i as u64, WcStatus::Success));
    }
}

/// The Solicited Event bit goes on the last packet of a SEND or a WRITE with
/// immediate that asked for it, never on a plain WRITE, a READ or an atomic request
/// (IBTA 9.2.3; rxe `init_req_packet`).
#[test]
fn solicited_event_only_on_sends_and_writes_with_immediate() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 5);
    let (a, b) = pair(&mut sim, &PairOpts::default());
    let cases = [
        (WrOpcode::Send, 3000, true),
        (WrOpcode::RdmaWriteWithImm, 100, true),
        (WrOpcode::RdmaWrite, 100, false),
        (WrOpcode::RdmaRead, 100, false),
        (WrOpcode::AtomicFetchAndAdd, 8, false),
    ];
    for (i, (op, len, se)) in cases.into_iter().enumerate() {
        let mut w = wr(i as u64, op, vec![sge(&a, 0, len)]);
        w.flags = w.flags | SendFlags::SOLICITED;
        w.remote_addr = b.base;
        w.rkey = b.keys.rkey;
        sim.engines[0].post_send(a.qpn, w, sim.now).unwrap();
        let out: Vec<Transmit> =
            std::iter::from_fn(|| sim.engines[0].poll_transmit(sim.now)).collect();
        // BTH byte 1, bit 7: SE.
        let bits: Vec<bool> = out.iter().map(|t| t.payload[1] & 0x80 != 0).collect();
        let mut want = vec![false; out.len()];
        *want.last_mut().unwrap() = se;
        assert_eq!(bits, want, "{op:?}");
        if op == WrOpcode::Send || op == WrOpcode::RdmaWriteWithImm {
            let now = sim.now;
            post_recv1(&mut sim, &b, i as u64, 0, 4096, now);
        }
        for t in &out {
            sim.engines[1].handle_datagram(sim.now, &t.as_received());
        }
        assert_eq!(wait_wcs(&mut sim, &a, 1, SEC).len(), 1, "{op:?}");
    }
}
