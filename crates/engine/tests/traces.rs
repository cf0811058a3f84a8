//! Exchanges driven packet by packet: each test moves every datagram by hand, drops,
//! duplicates or reorders chosen ones by index, and checks the packets seen (opcode,
//! PSN, AETH syndrome and MSN), the completions and the virtual time of retries.

mod common;
mod driver;
use common::*;
use driver::*;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;

fn sim2() -> Sim {
    Sim::new(2, false, LinkConfig::default(), 11)
}

fn opts() -> PairOpts {
    PairOpts {
        psn: [100, 900],
        ..Default::default()
    }
}

fn recv(sim: &mut Sim, e: &End, wr_id: u64, off: u64, len: u32) {
    let now = sim.now;
    post_recv1(sim, e, wr_id, off, len, now);
}

fn send(sim: &mut Sim, e: &End, w: SendWr) {
    let now = sim.now;
    sim.engines[e.engine].post_send(e.qpn, w, now).unwrap();
}

fn rdma(id: u64, op: WrOpcode, local: Sge, peer: &End, off: u64) -> SendWr {
    let mut w = wr(id, op, vec![local]);
    w.remote_addr = peer.base + off;
    w.rkey = peer.keys.rkey;
    w.flags = SendFlags::SIGNALED;
    w
}

fn signaled(mut w: SendWr) -> SendWr {
    w.flags = w.flags | SendFlags::SIGNALED;
    w
}

fn st(wcs: &[Wc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

fn l(op: &str, psn: u32) -> String {
    format!("{op} {psn}")
}

fn la(op: &str, psn: u32, aeth: &str) -> String {
    format!("{op} {psn} {aeth}")
}

#[test]
fn duplicate_read_request_replays_from_the_asked_psn() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    let data = pattern(5000, 9);
    fill(&b, 0, &data);
    send(
        &mut sim,
        &a,
        rdma(1, WrOpcode::RdmaRead, sge(&a, 0, 3000), &b, 0),
    );
    let req = tx(&mut sim, 0);
    assert_eq!(lines(&req), [l("RC_RDMA_READ_REQUEST", 100)]);
    rx_all(&mut sim, &req);
    let resp = tx(&mut sim, 1);
    assert_eq!(
        lines(&resp),
        [
            la("RC_RDMA_READ_RESPONSE_FIRST", 100, "ACK msn=1"),
            l("RC_RDMA_READ_RESPONSE_MIDDLE", 101),
            la("RC_RDMA_READ_RESPONSE_LAST", 102, "ACK msn=1"),
        ]
    );
    // The MIDDLE is lost: the LAST behind it is an implied NAK. Its data is placed, and
    // the requester waits the reordering window (two SRTTs of this QP, at least 50 µs,
    // at most a quarter of the 4.19 ms ACK timeout and 1 ms) for the MIDDLE to turn up
    // late before it asks again for the rest, from PSN 101.
    rx(&mut sim, &resp[0]);
    let t0 = sim.now;
    rx(&mut sim, &resp[2]);
    assert!(tx(&mut sim, 0).is_empty());
    let srtt = sim.engines[0]
        .qp_srtt(a.qpn)
        .expect("the FIRST gave an RTT sample");
    let window = (2 * srtt).clamp(50_000, 1_000_000);
    assert_eq!(fire(&mut sim, 0), t0 + window, "reordering window");
    let again = tx(&mut sim, 0);
    assert_eq!(lines(&again), [l("RC_RDMA_READ_REQUEST", 101)]);
    let reth = again[0].repr().reth.unwrap();
    assert_eq!((reth.va, reth.dma_len), (b.base + 1024, 3000 - 1024));
    rx_all(&mut sim, &again);
    let replay = tx(&mut sim, 1);
    assert_eq!(
        lines(&replay),
        [
            // A replay from a later PSN continues MIDDLE/LAST (rxe rdatm_res_state_replay).
            l("RC_RDMA_READ_RESPONSE_MIDDLE", 101),
            la("RC_RDMA_READ_RESPONSE_LAST", 102, "ACK msn=1"),
        ]
    );
    assert_eq!(replay[0].payload(), &data[1024..2048]);
    // The MIDDLE fills the hole; the LAST was already in place, so the READ completes
    // there and the replayed LAST is a stale response.
    rx(&mut sim, &replay[0]);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    rx(&mut sim, &replay[1]);
    let c = sim.engines[0].counters();
    assert_eq!((c.implied_nak_waits, c.rx_read_out_of_order), (1, 1));
    assert_eq!(&a.mem.snapshot()[..3000], &data[..3000]);
    // One request sent again, two responses sent again: each side counts its own.
    assert_eq!(c.retransmitted_packets, 1);
    assert_eq!(sim.engines[1].counters().tx_read_responses_resent, 2);

    // A second READ loses only its LAST: after the timeout the requester asks for the
    // last PSN, and the replay is a single READ_RESPONSE_LAST.
    send(
        &mut sim,
        &a,
        rdma(2, WrOpcode::RdmaRead, sge(&a, 8192, 2000), &b, 3000),
    );
    let req = tx(&mut sim, 0);
    assert_eq!(lines(&req), [l("RC_RDMA_READ_REQUEST", 103)]);
    rx_all(&mut sim, &req);
    let resp = tx(&mut sim, 1);
    assert_eq!(resp.len(), 2);
    rx(&mut sim, &resp[0]);
    let t0 = sim.now;
    assert!(tx(&mut sim, 0).is_empty());
    assert_eq!(
        fire(&mut sim, 0),
        t0 + (4096 << 10),
        "timeout 10 = 4.194304 ms"
    );
    let again = tx(&mut sim, 0);
    assert_eq!(lines(&again), [l("RC_RDMA_READ_REQUEST", 104)]);
    rx_all(&mut sim, &again);
    let replay = tx(&mut sim, 1);
    assert_eq!(
        lines(&replay),
        [la("RC_RDMA_READ_RESPONSE_LAST", 104, "ACK msn=2")]
    );
    rx_all(&mut sim, &replay);
    assert_eq!(st(&drain(&mut sim, &a)), [(2, WcStatus::Success)]);
    assert_eq!(&a.mem.snapshot()[8192..10192], &data[3000..5000]);
    assert_eq!(sim.engines[1].counters().rx_duplicate_requests, 2);
}

#[test]
fn nak_sequence_error_once_per_gap_then_go_back_n() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    let msg = pattern(4000, 1);
    fill(&a, 0, &msg);
    recv(&mut sim, &b, 7, 0, 4096);
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 4000)])),
    );
    let p = tx(&mut sim, 0);
    assert_eq!(
        lines(&p),
        [
            l("RC_SEND_FIRST", 100),
            l("RC_SEND_MIDDLE", 101),
            l("RC_SEND_MIDDLE", 102),
            l("RC_SEND_LAST", 103),
        ]
    );
    // Lose 101: 102 and 103 are out of sequence, but only one NAK goes back.
    rx(&mut sim, &p[0]);
    rx(&mut sim, &p[2]);
    rx(&mut sim, &p[3]);
    let nak = tx(&mut sim, 1);
    assert_eq!(lines(&nak), [la("RC_ACKNOWLEDGE", 101, "NAK-SEQ msn=0")]);
    rx_all(&mut sim, &nak);
    let resent = tx(&mut sim, 0);
    assert_eq!(
        lines(&resent),
        [
            l("RC_SEND_MIDDLE", 101),
            l("RC_SEND_MIDDLE", 102),
            l("RC_SEND_LAST", 103),
        ]
    );
    rx_all(&mut sim, &resent);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 103, "ACK msn=1")]);
    rx_all(&mut sim, &ack);
    let wcs = drain(&mut sim, &b);
    assert_eq!((wcs.len(), wcs[0].wr_id, wcs[0].byte_len), (1, 7, 4000));
    assert_eq!(&b.mem.snapshot()[..4000], &msg[..]);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    let (ca, cb) = (sim.engines[0].counters(), sim.engines[1].counters());
    assert_eq!((cb.tx_nak_seq, ca.rx_nak_seq), (1, 1));
    assert_eq!(ca.retransmitted_packets, 3);
    assert_eq!(cb.rx_out_of_sequence, 2);
}

#[test]
fn psn_wraps_at_2_pow_24_inside_a_message() {
    let mut sim = sim2();
    let o = PairOpts {
        psn: [0xff_fffe, 0xff_ffff],
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    let msg = pattern(3500, 4);
    fill(&a, 0, &msg);
    recv(&mut sim, &b, 1, 0, 4096);
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 3500)])),
    );
    let mut w = rdma(2, WrOpcode::RdmaWrite, sge(&a, 0, 2048), &b, 8192);
    w.flags = SendFlags::SIGNALED;
    send(&mut sim, &a, w);
    let p = tx(&mut sim, 0);
    assert_eq!(
        lines(&p),
        [
            l("RC_SEND_FIRST", 0xff_fffe),
            l("RC_SEND_MIDDLE", 0xff_ffff),
            l("RC_SEND_MIDDLE", 0),
            l("RC_SEND_LAST", 1),
            l("RC_RDMA_WRITE_FIRST", 2),
            l("RC_RDMA_WRITE_LAST", 3),
        ]
    );
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 3, "ACK msn=2")]);
    rx_all(&mut sim, &ack);
    assert_eq!(
        st(&drain(&mut sim, &a)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let m = b.mem.snapshot();
    assert_eq!(&m[..3500], &msg[..]);
    assert_eq!(&m[8192..10240], &msg[..2048]);
    assert_eq!(sim.engines[0].query_qp(a.qpn).unwrap().sq_psn, 4);
    assert_eq!(sim.engines[1].query_qp(b.qpn).unwrap().rq_psn, 4);
}

#[test]
fn rnr_nak_then_retry_after_the_rnr_timer() {
    let mut sim = sim2();
    let o = PairOpts {
        min_rnr_timer: 14,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    sim.now = 1_000;
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 64)])),
    );
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("RC_SEND_ONLY", 100)]);
    rx_all(&mut sim, &p);
    let rnr = tx(&mut sim, 1);
    assert_eq!(lines(&rnr), [la("RC_ACKNOWLEDGE", 100, "RNR t=14 msn=0")]);
    sim.now = 2_000;
    rx_all(&mut sim, &rnr);
    assert!(tx(&mut sim, 0).is_empty(), "nothing before the RNR timer");
    recv(&mut sim, &b, 5, 0, 64);
    // IBTA table 45: code 14 = 1.28 ms.
    assert_eq!(fire(&mut sim, 0), 2_000 + 1_280_000);
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("RC_SEND_ONLY", 100)]);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 100, "ACK msn=1")]);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    assert_eq!(st(&drain(&mut sim, &b)), [(5, WcStatus::Success)]);
}

#[test]
fn rnr_retry_exhausted_fails_and_flushes() {
    let mut sim = sim2();
    let o = PairOpts {
        min_rnr_timer: 1,
        rnr_retry: 2,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    send(&mut sim, &a, wr(1, WrOpcode::Send, vec![sge(&a, 0, 64)]));
    send(
        &mut sim,
        &a,
        rdma(2, WrOpcode::RdmaWrite, sge(&a, 0, 64), &b, 0),
    );
    send(&mut sim, &a, wr(3, WrOpcode::Send, vec![sge(&a, 0, 64)]));
    let mut sends = 0;
    let mut last_rnr_at = 0;
    for round in 0..3 {
        if round > 0 {
            // IBTA table 45: code 1 = 10 µs.
            assert_eq!(fire(&mut sim, 0), last_rnr_at + 10_000, "round {round}");
        }
        let p = tx(&mut sim, 0);
        assert_eq!(
            lines(&p),
            [
                l("RC_SEND_ONLY", 100),
                l("RC_RDMA_WRITE_ONLY", 101),
                l("RC_SEND_ONLY", 102)
            ],
            "round {round}"
        );
        sends += 1;
        rx_all(&mut sim, &p);
        let back = tx(&mut sim, 1);
        let mut expect = vec![la("RC_ACKNOWLEDGE", 100, "RNR t=1 msn=0")];
        if round == 0 {
            // 101 is out of sequence behind the RNR'd 100: one NAK for the gap.
            expect.push(la("RC_ACKNOWLEDGE", 100, "NAK-SEQ msn=0"));
        }
        assert_eq!(lines(&back), expect, "round {round}");
        sim.now += 500;
        last_rnr_at = sim.now;
        rx_all(&mut sim, &back);
    }
    assert_eq!(sends, 3, "rnr_retry 2 = the first try and two retries");
    assert!(tx(&mut sim, 0).is_empty());
    assert_eq!(
        st(&drain(&mut sim, &a)),
        [
            (1, WcStatus::RnrRetryExcErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
    assert_eq!(events(&mut sim, 0), [AsyncEvent::QpFatal(a.qpn)]);
    assert_eq!(sim.engines[0].counters().rx_rnr_nak, 3);
    assert!(drain(&mut sim, &b).is_empty());
}

#[test]
fn rnr_retry_7_is_infinite() {
    let mut sim = sim2();
    let o = PairOpts {
        min_rnr_timer: 1,
        rnr_retry: 7,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 8)])),
    );
    for round in 0..50 {
        if round > 0 {
            fire(&mut sim, 0);
        }
        let p = tx(&mut sim, 0);
        assert_eq!(lines(&p), [l("RC_SEND_ONLY", 100)], "round {round}");
        rx_all(&mut sim, &p);
        let rnr = tx(&mut sim, 1);
        assert_eq!(lines(&rnr), [la("RC_ACKNOWLEDGE", 100, "RNR t=1 msn=0")]);
        rx_all(&mut sim, &rnr);
    }
    recv(&mut sim, &b, 9, 0, 8);
    fire(&mut sim, 0);
    let p = tx(&mut sim, 0);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 100, "ACK msn=1")]);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Rts));
}

#[test]
fn lost_ack_then_duplicate_request_is_acked_again_not_redelivered() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    fill(&a, 0, b"once only");
    recv(&mut sim, &b, 1, 0, 64);
    recv(&mut sim, &b, 2, 64, 64);
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 9)])),
    );
    let p = tx(&mut sim, 0);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 100, "ACK msn=1")]);
    // The ACK is lost; the requester retransmits after 4.096 µs · 2^10.
    assert_eq!(fire(&mut sim, 0), 4096 << 10);
    let again = tx(&mut sim, 0);
    assert_eq!(lines(&again), [l("RC_SEND_ONLY", 100)]);
    rx_all(&mut sim, &again);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 100, "ACK msn=1")]);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    assert_eq!(st(&drain(&mut sim, &b)), [(1, WcStatus::Success)]);
    assert_eq!(sim.engines[1].counters().rx_duplicate_requests, 1);
    assert_eq!(&b.mem.snapshot()[..9], b"once only");
}

#[test]
fn duplicated_atomic_returns_the_saved_value_and_executes_once() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    b.mem.write(64, &40u64.to_ne_bytes());
    let mut w = rdma(1, WrOpcode::AtomicFetchAndAdd, sge(&a, 0, 8), &b, 64);
    w.compare_add = 2;
    send(&mut sim, &a, w);
    let req = tx(&mut sim, 0);
    assert_eq!(lines(&req), [l("RC_FETCH_ADD", 100)]);
    // The network delivers the request twice.
    rx(&mut sim, &req[0]);
    rx(&mut sim, &req[0]);
    let acks = tx(&mut sim, 1);
    assert_eq!(
        lines(&acks),
        [
            la("RC_ATOMIC_ACKNOWLEDGE", 100, "ACK msn=1"),
            la("RC_ATOMIC_ACKNOWLEDGE", 100, "ACK msn=1"),
        ]
    );
    for ack in &acks {
        assert_eq!(ack.repr().atomic_ack_eth.unwrap().orig, 40);
    }
    let value = |b: &End| u64::from_ne_bytes(b.mem.snapshot()[64..72].try_into().unwrap());
    assert_eq!(value(&b), 42);
    // Both ACKs are lost; the retransmission gets the saved value too.
    fire(&mut sim, 0);
    let again = tx(&mut sim, 0);
    assert_eq!(lines(&again), [l("RC_FETCH_ADD", 100)]);
    rx_all(&mut sim, &again);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ATOMIC_ACKNOWLEDGE", 100, "ACK msn=1")]);
    assert_eq!(ack[0].repr().atomic_ack_eth.unwrap().orig, 40);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    assert_eq!(value(&b), 42, "executed once");
    assert_eq!(&a.mem.snapshot()[..8], &40u64.to_ne_bytes());
    assert_eq!(sim.engines[1].counters().rx_duplicate_requests, 2);
}

#[test]
fn retransmit_timeout_timing_and_retry_exhaustion() {
    let mut sim = sim2();
    let o = PairOpts {
        timeout: 12,
        retry_cnt: 3,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    let to: Nanos = 4096 << 12; // 4.096 µs · 2^12 = 16.777216 ms
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 8)])),
    );
    send(
        &mut sim,
        &a,
        signaled(wr(2, WrOpcode::Send, vec![sge(&a, 0, 8)])),
    );
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("RC_SEND_ONLY", 100), l("RC_SEND_ONLY", 101)]);
    // The peer is gone: everything is dropped.
    for k in 1..=3 {
        assert_eq!(fire(&mut sim, 0), k * to, "retry {k}");
        let p = tx(&mut sim, 0);
        assert_eq!(lines(&p), [l("RC_SEND_ONLY", 100), l("RC_SEND_ONLY", 101)]);
        assert!(drain(&mut sim, &a).is_empty());
    }
    assert_eq!(fire(&mut sim, 0), 4 * to, "timeout · (retry_cnt + 1)");
    assert!(tx(&mut sim, 0).is_empty());
    assert_eq!(
        st(&drain(&mut sim, &a)),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
    assert_eq!(sim.engines[0].counters().retransmit_timeouts, 4);
    assert_eq!(sim.engines[0].poll_timeout(), None);
    let _ = b;
}

#[test]
fn cq_overflow_is_an_event_a_count_and_a_dead_qp() {
    let mut sim = sim2();
    let o = opts();
    let a = end(&mut sim, 0, &PairOpts { cqe: 4, ..opts() });
    let b = end(&mut sim, 1, &o);
    connect(&mut sim, 0, a.qpn, 1, b.qpn, &o, 0);
    connect(&mut sim, 1, b.qpn, 0, a.qpn, &o, 1);
    for i in 0..10 {
        recv(&mut sim, &b, i, 64 * i, 64);
        send(
            &mut sim,
            &a,
            signaled(wr(i, WrOpcode::Send, vec![sge(&a, 0, 8)])),
        );
    }
    let p = tx(&mut sim, 0);
    assert_eq!(p.len(), 10);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 109, "ACK msn=10")]);
    rx_all(&mut sim, &ack);
    let wcs = drain(&mut sim, &a);
    assert_eq!(
        st(&wcs),
        (0..4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    let lost = sim.engines[0].counters().cq_overflows;
    assert_eq!(
        wcs.len() as u64 + lost,
        10,
        "every completion seen or counted"
    );
    assert_eq!(
        events(&mut sim, 0),
        [AsyncEvent::CqErr(a.cq), AsyncEvent::QpFatal(a.qpn)]
    );
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
    assert_eq!(drain(&mut sim, &b).len(), 10);
}

#[test]
fn srq_shared_by_two_qps_fires_the_limit_event_once() {
    let mut sim = sim2();
    let o = opts();
    let mem = std::sync::Arc::new(VecMemory::zeroed(4096));
    let (pd, cq, srq, keys) = {
        let e = &mut sim.engines[1];
        let pd = e.alloc_pd();
        let cq = e.create_cq(64).unwrap();
        let srq = e.create_srq(pd, 16, 1, 0).unwrap();
        let keys = e
            .reg_mr(pd, mem.clone(), 0x1000, Access::LOCAL_WRITE)
            .unwrap();
        (pd, cq, srq, keys)
    };
    let mut ends = Vec::new();
    for _ in 0..2 {
        let a = end(&mut sim, 0, &o);
        let qpn = sim.engines[1]
            .create_qp(QpInit {
                pd,
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                srq: Some(srq),
                cap: o.cap,
                sq_sig_all: false,
            })
            .unwrap();
        connect(&mut sim, 0, a.qpn, 1, qpn, &o, 0);
        connect(&mut sim, 1, qpn, 0, a.qpn, &o, 1);
        ends.push((a, qpn));
    }
    for i in 0..6u64 {
        sim.engines[1]
            .post_srq_recv(
                srq,
                RecvWr {
                    wr_id: i,
                    sg_list: vec![Sge {
                        addr: 0x1000 + 64 * i,
                        length: 64,
                        lkey: keys.lkey,
                    }]
                    .into(),
                },
            )
            .unwrap();
    }
    sim.engines[1].arm_srq(srq, 3).unwrap();
    let mut fired_after = Vec::new();
    for i in 0..6u64 {
        let (a, _) = &ends[(i % 2) as usize];
        send(&mut sim, a, wr(i, WrOpcode::Send, vec![sge(a, 0, 8)]));
        let p = tx(&mut sim, 0);
        rx_all(&mut sim, &p);
        if events(&mut sim, 1).contains(&AsyncEvent::SrqLimitReached(srq)) {
            fired_after.push(i + 1);
        }
        let acks = tx(&mut sim, 1);
        rx_all(&mut sim, &acks);
    }
    assert_eq!(fired_after, [4], "once, when 2 < limit 3 WQEs are left");
    let mut buf = [Wc::default(); 16];
    let n = sim.engines[1].poll_cq(cq, &mut buf).unwrap();
    let got: Vec<(u64, u32)> = buf[..n].iter().map(|w| (w.wr_id, w.qp_num)).collect();
    let expect: Vec<(u64, u32)> = (0..6u64).map(|i| (i, ends[(i % 2) as usize].1)).collect();
    assert_eq!(got, expect);
}

#[test]
fn uc_lost_middle_packet_drops_that_message_only() {
    let mut sim = sim2();
    let o = PairOpts {
        qp_type: QpType::Uc,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    let big = pattern(3000, 2);
    fill(&a, 0, &big);
    fill(&a, 4096, b"the next message");
    recv(&mut sim, &b, 10, 0, 4096);
    recv(&mut sim, &b, 11, 4096, 4096);
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 3000)])),
    );
    send(
        &mut sim,
        &a,
        signaled(wr(2, WrOpcode::Send, vec![sge(&a, 4096, 16)])),
    );
    let p = tx(&mut sim, 0);
    assert_eq!(
        lines(&p),
        [
            l("UC_SEND_FIRST", 100),
            l("UC_SEND_MIDDLE", 101),
            l("UC_SEND_LAST", 102),
            l("UC_SEND_ONLY", 103),
        ]
    );
    // UC completes at the requester when the packets leave.
    assert_eq!(
        st(&drain(&mut sim, &a)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    rx(&mut sim, &p[0]);
    rx(&mut sim, &p[2]);
    rx(&mut sim, &p[3]);
    assert!(tx(&mut sim, 1).is_empty(), "UC never acknowledges");
    let wcs = drain(&mut sim, &b);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect::<Vec<_>>(),
        [(10, WcStatus::Success, 16)],
        "the broken message is dropped; its receive WQE takes the next one"
    );
    assert_eq!(&b.mem.snapshot()[..16], b"the next message");
    assert!(sim.engines[1].counters().rx_dropped_messages >= 1);
    assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Rts));
}

#[test]
fn ud_wrong_qkey_is_dropped_and_privileged_qkey_sends_the_qp_qkey() {
    let mut sim = Sim::new(2, true, LinkConfig::default(), 12);
    let o = PairOpts {
        qp_type: QpType::Ud,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    fill(&a, 0, b"datagram");
    recv(&mut sim, &b, 1, 0, 1024);
    let av = av_to(&sim, 1);
    let ah = sim.engines[0].create_ah(a.pd, av).unwrap();
    let ud = |qkey| {
        let mut w = wr(1, WrOpcode::Send, vec![sge(&a, 0, 8)]);
        w.ud = Some(UdDest {
            ah,
            remote_qpn: b.qpn,
            remote_qkey: qkey,
        });
        w
    };
    send(&mut sim, &a, ud(0x2222_2222));
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("UD_SEND_ONLY", 100)]);
    assert_eq!(p[0].repr().deth.unwrap().qkey, 0x2222_2222);
    rx_all(&mut sim, &p);
    assert!(drain(&mut sim, &b).is_empty());
    assert_eq!(sim.engines[1].counters().rx_bad_qkey, 1);
    // High bit set in the WR: the QP's own Q_Key goes on the wire (IBTA 10.2.4).
    send(&mut sim, &a, ud(0x8000_0000));
    let p = tx(&mut sim, 0);
    let deth = p[0].repr().deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (0x1111_1111, a.qpn));
    rx_all(&mut sim, &p);
    let wcs = drain(&mut sim, &b);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len, w.src_qp))
            .collect::<Vec<_>>(),
        [(1, WcStatus::Success, 40 + 8, a.qpn)]
    );
    assert_eq!(&b.mem.snapshot()[40..48], b"datagram");
}

#[test]
fn fenced_send_waits_for_the_read_before_it() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    recv(&mut sim, &b, 1, 0, 64);
    send(
        &mut sim,
        &a,
        rdma(1, WrOpcode::RdmaRead, sge(&a, 0, 2000), &b, 0),
    );
    let mut f = wr(2, WrOpcode::Send, vec![sge(&a, 4096, 8)]);
    f.flags = SendFlags::FENCE | SendFlags::SIGNALED;
    send(&mut sim, &a, f);
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("RC_RDMA_READ_REQUEST", 100)]);
    rx_all(&mut sim, &p);
    let resp = tx(&mut sim, 1);
    assert_eq!(resp.len(), 2);
    rx(&mut sim, &resp[0]);
    assert!(tx(&mut sim, 0).is_empty(), "the READ is not complete yet");
    rx(&mut sim, &resp[1]);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("RC_SEND_ONLY", 102)]);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(2, WcStatus::Success)]);

    // Without FENCE the SEND goes out behind the READ request at once.
    send(
        &mut sim,
        &a,
        rdma(3, WrOpcode::RdmaRead, sge(&a, 0, 2000), &b, 0),
    );
    recv(&mut sim, &b, 2, 0, 64);
    send(
        &mut sim,
        &a,
        signaled(wr(4, WrOpcode::Send, vec![sge(&a, 4096, 8)])),
    );
    let p = tx(&mut sim, 0);
    assert_eq!(
        lines(&p),
        [l("RC_RDMA_READ_REQUEST", 103), l("RC_SEND_ONLY", 105)]
    );
}

#[test]
fn reordered_read_response_is_placed_and_not_asked_for_again() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    let data = pattern(4000, 3);
    fill(&b, 0, &data);
    send(
        &mut sim,
        &a,
        rdma(1, WrOpcode::RdmaRead, sge(&a, 0, 4000), &b, 0),
    );
    let req = tx(&mut sim, 0);
    rx_all(&mut sim, &req);
    let resp = tx(&mut sim, 1);
    assert_eq!(resp.len(), 4);
    // 101 is overtaken by 102 and 103, then turns up within the reordering window.
    rx(&mut sim, &resp[0]);
    rx(&mut sim, &resp[2]);
    rx(&mut sim, &resp[3]);
    assert!(tx(&mut sim, 0).is_empty());
    assert!(drain(&mut sim, &a).is_empty());
    rx(&mut sim, &resp[1]);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    assert_eq!(&a.mem.snapshot()[..4000], &data[..]);
    // Nothing was asked again, and no timer is left behind.
    assert!(tx(&mut sim, 0).is_empty());
    assert_eq!(sim.engines[0].poll_timeout(), None);
    let c = sim.engines[0].counters();
    assert_eq!(
        (c.implied_nak_waits, c.rx_read_out_of_order, c.tx_packets),
        (1, 2, 1)
    );
    assert_eq!(sim.engines[1].counters().rx_duplicate_requests, 0);
}

#[test]
fn repeated_read_request_moves_the_queued_stream_instead_of_adding_one() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    let data = pattern(3000, 5);
    fill(&b, 0, &data);
    send(
        &mut sim,
        &a,
        rdma(1, WrOpcode::RdmaRead, sge(&a, 0, 3000), &b, 0),
    );
    let req = tx(&mut sim, 0);
    assert_eq!(lines(&req), [l("RC_RDMA_READ_REQUEST", 100)]);
    // The request arrives twice (duplicated on the wire) before the responder has sent
    // anything: one stream of three responses goes out, not two (rxe
    // `duplicate_request` resets the resource's cursor).
    rx(&mut sim, &req[0]);
    rx(&mut sim, &req[0]);
    let resp = tx(&mut sim, 1);
    assert_eq!(
        lines(&resp),
        [
            la("RC_RDMA_READ_RESPONSE_FIRST", 100, "ACK msn=1"),
            l("RC_RDMA_READ_RESPONSE_MIDDLE", 101),
            la("RC_RDMA_READ_RESPONSE_LAST", 102, "ACK msn=1"),
        ]
    );
    let cb = sim.engines[1].counters();
    assert_eq!(
        (cb.rx_duplicate_requests, cb.rx_read_replays_merged),
        (1, 1)
    );
    // The stream moved back before it sent anything: nothing was sent twice.
    assert_eq!(cb.tx_read_responses_resent, 0);
    rx_all(&mut sim, &resp);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    assert_eq!(&a.mem.snapshot()[..3000], &data[..]);
}

#[test]
fn retry_budget_is_restored_by_each_read_response_that_makes_progress() {
    let mut sim = sim2();
    let o = PairOpts {
        retry_cnt: 1,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    let data = pattern(3000, 8);
    fill(&b, 0, &data);
    send(
        &mut sim,
        &a,
        rdma(1, WrOpcode::RdmaRead, sge(&a, 0, 3000), &b, 0),
    );
    let req = tx(&mut sim, 0);
    rx_all(&mut sim, &req);
    // Every response is lost: the timeout spends the only retry.
    assert_eq!(tx(&mut sim, 1).len(), 3);
    fire(&mut sim, 0);
    let again = tx(&mut sim, 0);
    assert_eq!(lines(&again), [l("RC_RDMA_READ_REQUEST", 100)]);
    rx_all(&mut sim, &again);
    let resp = tx(&mut sim, 1);
    // Only the FIRST arrives: progress, so the budget is back to 1 (IBTA 9.7.6.1.4;
    // rxe `reset_retry_counters`) and the next timeout retries instead of failing,
    // from PSN 101 with the RETH moved on by one MTU.
    rx(&mut sim, &resp[0]);
    fire(&mut sim, 0);
    let again = tx(&mut sim, 0);
    assert_eq!(lines(&again), [l("RC_RDMA_READ_REQUEST", 101)]);
    let reth = again[0].repr().reth.unwrap();
    assert_eq!((reth.va, reth.dma_len), (b.base + 1024, 3000 - 1024));
    assert!(drain(&mut sim, &a).is_empty());
    // Lost again, twice in a row without progress: now the budget is spent.
    fire(&mut sim, 0);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::RetryExcErr)]);
    assert_eq!(sim.engines[0].counters().retransmit_timeouts, 3);
}

/// Stale responses restart the retransmit timer (rxe re-arms it after every response),
/// but only a bounded number of times per retry: a peer that sends nothing but old
/// ACKs cannot keep a QP from timing out. (Without tail-loss probes: the timeout's
/// own rule, which a probe, lost too here, would only come before.)
#[test]
fn stale_acks_delay_the_timeout_a_bounded_number_of_times() {
    let cfg = Config {
        loss_recovery: false,
        ..Config::default()
    };
    let mut sim = Sim::with_config(2, false, LinkConfig::default(), 11, cfg);
    let o = PairOpts {
        retry_cnt: 0,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    recv(&mut sim, &b, 1, 0, 64);
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 8)])),
    );
    let p = tx(&mut sim, 0);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 100, "ACK msn=1")]);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    // The next SEND is lost; the peer replays its old ACK every half timeout.
    send(
        &mut sim,
        &a,
        signaled(wr(2, WrOpcode::Send, vec![sge(&a, 0, 8)])),
    );
    assert_eq!(lines(&tx(&mut sim, 0)), [l("RC_SEND_ONLY", 101)]);
    let half: Nanos = (4096 << 10) / 2;
    let mut stale = 0;
    loop {
        sim.now += half;
        if sim.engines[0].poll_timeout().is_some_and(|t| t <= sim.now) {
            fire(&mut sim, 0);
            break;
        }
        rx(&mut sim, &ack[0]);
        stale += 1;
        assert!(stale < 1000, "the stale ACKs keep the QP alive");
    }
    // 2 · 128 restarts, then the 257th ACK restarts nothing and the timer fires.
    assert_eq!(stale, 257);
    assert_eq!(st(&drain(&mut sim, &a)), [(2, WcStatus::RetryExcErr)]);
}

/// A WRITE ONLY with immediate that finds no receive WQE is refused with an RNR NAK,
/// which consumes nothing (IBTA 9.7.5.2.8): its resend, once a receive is posted, is
/// a new message, not the continuation of one the refused packet began.
#[test]
fn rnr_refused_write_only_with_immediate_is_accepted_when_resent() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    fill(&a, 0, b"written after an RNR");
    let mut w = rdma(1, WrOpcode::RdmaWriteWithImm, sge(&a, 0, 20), &b, 256);
    w.imm_data = 0x1234;
    send(&mut sim, &a, w);
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 100)]);
    rx_all(&mut sim, &p);
    let rnr = tx(&mut sim, 1);
    assert_eq!(lines(&rnr), [la("RC_ACKNOWLEDGE", 100, "RNR t=1 msn=0")]);
    rx_all(&mut sim, &rnr);
    recv(&mut sim, &b, 7, 0, 0);
    fire(&mut sim, 0);
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 100)]);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 100, "ACK msn=1")]);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    let wb = drain(&mut sim, &b);
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        [(7, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 20, 0x1234)]
    );
    assert_eq!(&b.mem.snapshot()[256..276], b"written after an RNR");
    assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Rts));
    assert_eq!(sim.engines[1].counters().tx_nak_fatal, 0);
}

/// The RNR NAK of a WRITE LAST with immediate refuses that packet only: the FIRST and
/// MIDDLE before it were accepted, and the resent LAST completes the same message.
#[test]
fn rnr_refused_write_last_with_immediate_completes_the_message_when_resent() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    let data = pattern(2500, 9);
    fill(&a, 0, &data);
    let mut w = rdma(1, WrOpcode::RdmaWriteWithImm, sge(&a, 0, 2500), &b, 4096);
    w.imm_data = 0x55;
    send(&mut sim, &a, w);
    let p = tx(&mut sim, 0);
    assert_eq!(
        lines(&p),
        [
            l("RC_RDMA_WRITE_FIRST", 100),
            l("RC_RDMA_WRITE_MIDDLE", 101),
            l("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 102),
        ]
    );
    rx_all(&mut sim, &p);
    let back = tx(&mut sim, 1);
    assert_eq!(
        lines(&back).last().unwrap(),
        &la("RC_ACKNOWLEDGE", 102, "RNR t=1 msn=0")
    );
    rx_all(&mut sim, &back);
    recv(&mut sim, &b, 8, 0, 0);
    fire(&mut sim, 0);
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 102)]);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 102, "ACK msn=1")]);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    let wb = drain(&mut sim, &b);
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        [(8, WcStatus::Success, 2500, 0x55)]
    );
    assert_eq!(&b.mem.snapshot()[4096..4096 + 2500], &data[..]);
}

/// A SEND FIRST refused with an RNR NAK leaves no message begun: the rest of the
/// message is out of sequence behind it, and the resend from FIRST delivers it whole.
#[test]
fn rnr_refused_send_first_is_resent_from_first() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    let data = pattern(2500, 4);
    fill(&a, 0, &data);
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 2500)])),
    );
    let p = tx(&mut sim, 0);
    assert_eq!(
        lines(&p),
        [
            l("RC_SEND_FIRST", 100),
            l("RC_SEND_MIDDLE", 101),
            l("RC_SEND_LAST", 102),
        ]
    );
    rx_all(&mut sim, &p);
    let back = tx(&mut sim, 1);
    assert_eq!(
        lines(&back),
        [
            la("RC_ACKNOWLEDGE", 100, "RNR t=1 msn=0"),
            la("RC_ACKNOWLEDGE", 100, "NAK-SEQ msn=0"),
        ]
    );
    rx_all(&mut sim, &back);
    recv(&mut sim, &b, 3, 0, 4096);
    fire(&mut sim, 0);
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p)[0], l("RC_SEND_FIRST", 100));
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 102, "ACK msn=1")]);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    assert_eq!(st(&drain(&mut sim, &b)), [(3, WcStatus::Success)]);
    assert_eq!(&b.mem.snapshot()[..2500], &data[..]);
}

/// UC: a WRITE ONLY with immediate that finds no receive is dropped (IBTA 9.8.3, no
/// RNR on UC), and leaves nothing behind: the next one, with a receive posted, lands.
#[test]
fn uc_write_with_immediate_dropped_for_no_receive_leaves_no_message_begun() {
    let mut sim = sim2();
    let o = PairOpts {
        qp_type: QpType::Uc,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    fill(&a, 0, b"first");
    fill(&a, 64, b"second");
    let mut w = rdma(1, WrOpcode::RdmaWriteWithImm, sge(&a, 0, 5), &b, 0);
    w.imm_data = 1;
    send(&mut sim, &a, w);
    let p = tx(&mut sim, 0);
    rx_all(&mut sim, &p);
    assert!(drain(&mut sim, &b).is_empty());
    assert_eq!(sim.engines[1].counters().rx_dropped_messages, 1);
    recv(&mut sim, &b, 2, 0, 0);
    let mut w = rdma(2, WrOpcode::RdmaWriteWithImm, sge(&a, 64, 6), &b, 64);
    w.imm_data = 2;
    send(&mut sim, &a, w);
    let p = tx(&mut sim, 0);
    assert_eq!(lines(&p), [l("UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 101)]);
    rx_all(&mut sim, &p);
    let wb = drain(&mut sim, &b);
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.status, w.imm_data))
            .collect::<Vec<_>>(),
        [(2, WcStatus::Success, 2)]
    );
    assert_eq!(&b.mem.snapshot()[64..70], b"second");
    assert_eq!(sim.engines[1].counters().rx_dropped_messages, 1);
    assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Rts));
}

/// A WRITE with a bad R_Key behind a READ, both received before the responder sends:
/// the READ's responses, already due, leave before the WRITE's fatal NAK (IBTA
/// 9.7.5.1: responses in PSN order), then nothing. The requester completes the READ
/// with its data, then the WRITE with a remote access error.
#[test]
fn fatal_nak_goes_after_the_read_responses_queued_before_it() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    let data = pattern(3000, 7);
    fill(&b, 0, &data);
    send(
        &mut sim,
        &a,
        rdma(1, WrOpcode::RdmaRead, sge(&a, 0, 3000), &b, 0),
    );
    let mut w = rdma(2, WrOpcode::RdmaWrite, sge(&a, 4096, 16), &b, 0);
    w.rkey ^= 0x55;
    send(&mut sim, &a, w);
    let p = tx(&mut sim, 0);
    assert_eq!(
        lines(&p),
        [l("RC_RDMA_READ_REQUEST", 100), l("RC_RDMA_WRITE_ONLY", 103)]
    );
    rx_all(&mut sim, &p);
    assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Err));
    let back = tx(&mut sim, 1);
    assert_eq!(
        lines(&back),
        [
            la("RC_RDMA_READ_RESPONSE_FIRST", 100, "ACK msn=1"),
            l("RC_RDMA_READ_RESPONSE_MIDDLE", 101),
            la("RC_RDMA_READ_RESPONSE_LAST", 102, "ACK msn=1"),
            la("RC_ACKNOWLEDGE", 103, "NAK-ACC msn=1"),
        ]
    );
    assert_eq!(events(&mut sim, 1), [AsyncEvent::QpFatal(b.qpn)]);
    rx_all(&mut sim, &back);
    assert!(tx(&mut sim, 1).is_empty(), "nothing after the NAK");
    assert_eq!(
        st(&drain(&mut sim, &a)),
        [(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
    assert_eq!(&a.mem.snapshot()[..3000], &data[..]);
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
}

/// After a fatal NAK the QP is already in the error state, with earlier READ responses
/// and the NAK still to leave: the application moving it to ERR stops them, as a move
/// to ERR stops any responder output (they kept streaming, the flush being skipped for
/// a QP already in ERR).
#[test]
fn moving_to_err_after_a_fatal_nak_stops_what_was_still_to_leave() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    send(
        &mut sim,
        &a,
        rdma(1, WrOpcode::RdmaRead, sge(&a, 0, 3000), &b, 0),
    );
    let mut w = rdma(2, WrOpcode::RdmaWrite, sge(&a, 4096, 16), &b, 0);
    w.rkey ^= 0x55;
    send(&mut sim, &a, w);
    let p = tx(&mut sim, 0);
    rx_all(&mut sim, &p);
    assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Err));
    let attr = rverbs_engine::modify::QpAttr {
        qp_state: QpState::Err,
        ..Default::default()
    };
    sim.engines[1]
        .modify_qp(b.qpn, &attr, rverbs_engine::modify::QpAttrMask::STATE, 0)
        .unwrap();
    assert!(tx(&mut sim, 1).is_empty(), "sent after the move to ERR");
}

/// The same with an atomic before the failing WRITE: its ATOMIC ACKNOWLEDGE, with the
/// original value, leaves before the NAK, and the atomic executed once.
#[test]
fn fatal_nak_goes_after_the_atomic_ack_queued_before_it() {
    let mut sim = sim2();
    let (a, b) = pair(&mut sim, &opts());
    fill(&b, 64, &40u64.to_ne_bytes());
    let mut w = rdma(1, WrOpcode::AtomicFetchAndAdd, sge(&a, 0, 8), &b, 64);
    w.compare_add = 5;
    send(&mut sim, &a, w);
    let mut w = rdma(2, WrOpcode::RdmaWrite, sge(&a, 4096, 16), &b, 0);
    w.rkey ^= 0x55;
    send(&mut sim, &a, w);
    let p = tx(&mut sim, 0);
    rx_all(&mut sim, &p);
    let back = tx(&mut sim, 1);
    assert_eq!(
        lines(&back),
        [
            la("RC_ATOMIC_ACKNOWLEDGE", 100, "ACK msn=1"),
            la("RC_ACKNOWLEDGE", 101, "NAK-ACC msn=1"),
        ]
    );
    rx_all(&mut sim, &back);
    assert!(tx(&mut sim, 1).is_empty(), "nothing after the NAK");
    assert_eq!(
        st(&drain(&mut sim, &a)),
        [(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
    assert_eq!(&a.mem.snapshot()[..8], &40u64.to_ne_bytes());
    assert_eq!(&b.mem.snapshot()[64..72], &45u64.to_ne_bytes());
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
    assert_eq!(sim.engines[1].qp_state(b.qpn), Some(QpState::Err));
}

/// A mid-message AckReq packet P overtaken by P+1: the responder NAKs the gap at P,
/// then executes P and ACKs it; both answers reach the requester in one batch. The
/// sequence NAK sends it back to P, the ACK then acknowledges P: it goes on from P+1
/// at once (IBTA 9.7.5.2.5), not after the retransmit timeout.
#[test]
fn ack_after_a_sequence_nak_moves_the_go_back_point_up() {
    let mut sim = sim2();
    let o = PairOpts {
        mem_len: 1 << 20,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    let data = pattern(200 * 1024, 3);
    fill(&a, 0, &data);
    send(
        &mut sim,
        &a,
        rdma(1, WrOpcode::RdmaWrite, sge(&a, 0, 200 * 1024), &b, 0),
    );
    let p = tx(&mut sim, 0);
    let i = p
        .iter()
        .position(|p| p.packet().bth().ack_req())
        .expect("an AckReq packet in the first window");
    let ack_req = p[i].psn();
    let sent_end = p.last().unwrap().psn() + 1;
    // Everything before P, then P+1, then P; the rest of the window is lost.
    rx_all(&mut sim, &p[..i]);
    rx(&mut sim, &p[i + 1]);
    rx(&mut sim, &p[i]);
    let back = tx(&mut sim, 1);
    assert_eq!(
        lines(&back),
        [
            la("RC_ACKNOWLEDGE", ack_req, "NAK-SEQ msn=0"),
            la("RC_ACKNOWLEDGE", ack_req, "ACK msn=0"),
        ]
    );
    rx_all(&mut sim, &back);
    let t = sim.now;
    let again = tx(&mut sim, 0);
    assert_eq!(sim.now, t);
    assert!(
        !again.is_empty(),
        "the requester waits for its retransmit timer"
    );
    assert_eq!(
        again[0].psn(),
        ack_req + 1,
        "resends from the first PSN not ACKed"
    );
    // The window counts from the ACKed PSN: the resend goes past the first burst's end.
    assert_eq!(again.last().unwrap().psn(), ack_req + 1 + 127);
    assert!(again.last().unwrap().psn() >= sent_end);
    assert_eq!(sim.engines[0].counters().retransmit_timeouts, 0);
    // And the WRITE completes without a timeout.
    let mut wcs = Vec::new();
    let mut out = again;
    for _ in 0..10 {
        rx_all(&mut sim, &out);
        let back = tx(&mut sim, 1);
        rx_all(&mut sim, &back);
        wcs.extend(drain(&mut sim, &a));
        if !wcs.is_empty() {
            break;
        }
        out = tx(&mut sim, 0);
    }
    assert_eq!(st(&wcs), [(1, WcStatus::Success)]);
    assert_eq!(sim.engines[0].counters().retransmit_timeouts, 0);
    assert_eq!(&b.mem.snapshot()[..data.len()], &data[..]);
}

/// An ACK for a PSN the requester gave a WQE but has not sent yet (the window held
/// it back) answers nothing: it is a ghost, and the WRITE completes only once all of
/// it went out and was acknowledged.
#[test]
fn ack_for_a_psn_not_yet_sent_is_a_ghost() {
    use rverbs_wire::bth::BthRepr;
    use rverbs_wire::ext::{AethRepr, Syndrome};
    use rverbs_wire::opcode::Opcode;
    use rverbs_wire::packet::PacketRepr;
    let mut sim = sim2();
    let o = PairOpts {
        mem_len: 1 << 20,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    let len = 300 * 1024;
    let data = pattern(len, 6);
    fill(&a, 0, &data);
    send(
        &mut sim,
        &a,
        rdma(1, WrOpcode::RdmaWrite, sge(&a, 0, len as u32), &b, 0),
    );
    let p = tx(&mut sim, 0);
    assert_eq!(p.len(), 128, "one window");
    // The WRITE's last PSN, 399, and one inside its unsent part, 300.
    for psn in [399, 300] {
        let bth = BthRepr {
            mig_req: false,
            ack_req: false,
            ..bth(Opcode::RC_ACKNOWLEDGE, a.qpn, psn)
        };
        let aeth = AethRepr {
            syndrome: Syndrome::ACK,
            msn: 1,
        };
        let ack = craft(
            &sim,
            1,
            0,
            &PacketRepr {
                aeth: Some(aeth),
                ..PacketRepr::new(bth, &[])
            },
        );
        let ghosts = sim.engines[0].counters().rx_ghost_responses;
        rx(&mut sim, &ack);
        assert_eq!(
            sim.engines[0].counters().rx_ghost_responses,
            ghosts + 1,
            "ACK {psn}"
        );
        assert!(
            drain(&mut sim, &a).is_empty(),
            "ACK {psn} completed the WRITE"
        );
        assert!(tx(&mut sim, 0).is_empty(), "ACK {psn} opened the window");
    }
    // The real exchange still completes it.
    let mut wcs = Vec::new();
    let mut out = p;
    for _ in 0..10 {
        rx_all(&mut sim, &out);
        let back = tx(&mut sim, 1);
        rx_all(&mut sim, &back);
        wcs.extend(drain(&mut sim, &a));
        if !wcs.is_empty() {
            break;
        }
        out = tx(&mut sim, 0);
    }
    assert_eq!(st(&wcs), [(1, WcStatus::Success)]);
    assert_eq!(&b.mem.snapshot()[..len], &data[..]);
    assert_eq!(sim.engines[0].counters().retransmit_timeouts, 0);
}
