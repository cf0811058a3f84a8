//! ACK coalescing (`AckPolicy::Coalesce`, the default): the requester sets AckReq only
//! where a completion or a decision waits for the ACK (IBTA 9.7.5.1.1: ACKs are
//! cumulative), the responder ACKs only what asks (rxe `rxe_resp.c` `acknowledge`) and
//! every duplicate (C9-105), and an unsignaled tail is completed by an ACK nudge rather
//! than the retransmit timer. `AckPolicy::EveryMessage` keeps rxe's AckReq on every
//! message (`rxe_req.c`).

mod common;
mod driver;
use common::*;
use driver::*;
use rverbs_engine::modify::{QpAttr, QpAttrMask, QpCap};
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;
use rverbs_wire::opcode::Opcode;

fn sim2(policy: AckPolicy) -> Sim {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 21);
    for e in &mut sim.engines {
        e.set_ack_policy(policy);
    }
    sim
}

fn opts() -> PairOpts {
    PairOpts {
        psn: [100, 900],
        ..Default::default()
    }
}

/// An 8-byte SEND from `a`'s region, signaled or not.
fn send8(id: u64, a: &End, signaled: bool) -> SendWr {
    let mut w = wr(id, WrOpcode::Send, vec![sge(a, 0, 8)]);
    w.flags = if signaled {
        SendFlags::SIGNALED
    } else {
        SendFlags(0)
    };
    w
}

fn post(sim: &mut Sim, e: &End, w: SendWr) -> VerbResult<()> {
    let now = sim.now;
    sim.engines[e.engine].post_send(e.qpn, w, now)
}

fn recvs(sim: &mut Sim, b: &End, n: u64) {
    for i in 0..n {
        let now = sim.now;
        post_recv1(sim, b, 1000 + i, 64, 64, now);
    }
}

/// Moves everything engine `from` wants to send to its peer.
fn pass(sim: &mut Sim, from: usize) {
    let ps = tx(sim, from);
    rx_all(sim, &ps);
}

fn ack_req(p: &Pkt) -> bool {
    p.packet().bth().ack_req()
}

fn acks(ps: &[Pkt]) -> usize {
    ps.iter()
        .filter(|p| p.opcode() == Opcode::RC_ACKNOWLEDGE)
        .count()
}

/// Sends `n` SENDs from `a` to `b` one packet at a time, each delivered and answered
/// before the next leaves (as in a ping-pong), and returns (request packets, ACK
/// packets).
fn one_by_one(sim: &mut Sim, a: &End, ws: Vec<SendWr>) -> (Vec<Pkt>, Vec<Pkt>) {
    let (mut reqs, mut answers) = (Vec::new(), Vec::new());
    for w in ws {
        post(sim, a, w).unwrap();
        let r = tx(sim, 0);
        rx_all(sim, &r);
        let ans = tx(sim, 1);
        rx_all(sim, &ans);
        reqs.extend(r);
        answers.extend(ans);
    }
    (reqs, answers)
}

#[test]
fn unsignaled_sends_are_not_acked_one_by_one_signaled_ones_are() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let (a, b) = pair(&mut sim, &opts());
    recvs(&mut sim, &b, 20);
    // Ten unsignaled SENDs, then a signaled one.
    let ws = (0..11).map(|i| send8(i, &a, i == 10)).collect();
    let (reqs, answers) = one_by_one(&mut sim, &a, ws);
    assert_eq!(reqs.len(), 11);
    let asked: Vec<bool> = reqs.iter().map(ack_req).collect();
    assert_eq!(asked, [vec![false; 10], vec![true]].concat());
    assert_eq!(lines(&answers), [la("RC_ACKNOWLEDGE", 110, "ACK msn=11")]);
    // The one ACK completes all eleven; only the signaled one reports.
    let wcs = drain(&mut sim, &a);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(10, WcStatus::Success)]
    );
    assert_eq!(drain(&mut sim, &b).len(), 11, "every SEND was received");
    // Nothing is outstanding: no timer remains (no nudge, no retransmission).
    assert_eq!(sim.engines[0].poll_timeout(), None);
    // An unsignaled but fenced SEND asks too.
    let mut f = send8(15, &a, false);
    f.flags = SendFlags::FENCE;
    let (reqs, answers) = one_by_one(&mut sim, &a, vec![f]);
    assert!(ack_req(&reqs[0]));
    assert_eq!(acks(&answers), 1);
    // Five signaled SENDs, each answered before the next: five ACKs.
    let ws = (20..25).map(|i| send8(i, &a, true)).collect();
    let (reqs, answers) = one_by_one(&mut sim, &a, ws);
    assert!(reqs.iter().all(ack_req));
    assert_eq!(acks(&answers), 5);
    assert_eq!(drain(&mut sim, &a).len(), 5);
    let (ca, cb) = (sim.engines[0].counters(), sim.engines[1].counters());
    assert_eq!((ca.tx_ack_requests, cb.tx_acks, ca.ack_nudges), (7, 7, 0));
    assert_eq!(ca.retransmit_timeouts + ca.retransmitted_packets, 0);
}

fn la(op: &str, psn: u32, aeth: &str) -> String {
    format!("{op} {psn} {aeth}")
}

/// `AckPolicy::EveryMessage` asks on every message end, as before coalescing (and as
/// rxe): the same workload costs one ACK per message.
#[test]
fn every_message_policy_acks_every_message() {
    let mut sim = sim2(AckPolicy::EveryMessage);
    let (a, b) = pair(&mut sim, &opts());
    recvs(&mut sim, &b, 20);
    let ws = (0..11).map(|i| send8(i, &a, i == 10)).collect();
    let (reqs, answers) = one_by_one(&mut sim, &a, ws);
    assert!(reqs.iter().all(ack_req));
    assert_eq!(acks(&answers), 11);
    // A 3-packet WRITE: AckReq on its last packet only.
    let mut w = wr(50, WrOpcode::RdmaWrite, vec![sge(&a, 0, 3000)]);
    w.remote_addr = b.base;
    w.rkey = b.keys.rkey;
    post(&mut sim, &a, w).unwrap();
    let reqs = tx(&mut sim, 0);
    assert_eq!(
        reqs.iter().map(ack_req).collect::<Vec<_>>(),
        [false, false, true]
    );
    let c = sim.engines[0].counters();
    assert_eq!((c.tx_ack_requests, c.ack_nudges), (12, 0));
    rx_all(&mut sim, &reqs);
    assert_eq!(acks(&tx(&mut sim, 1)), 1);
    assert_eq!(sim.engines[1].counters().tx_acks, 12);
}

/// With max_send_wr 8, the 4th unsignaled message in a row asks for an ACK, so the
/// queue never fills with work nobody will acknowledge; the ACK frees the slots.
#[test]
fn sq_pressure_asks_for_an_ack_before_the_sq_fills() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let o = PairOpts {
        cap: QpCap {
            max_send_wr: 8,
            ..opts().cap
        },
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    recvs(&mut sim, &b, 40);
    for i in 0..8 {
        post(&mut sim, &a, send8(i, &a, false)).unwrap();
    }
    let err = post(&mut sim, &a, send8(8, &a, false)).unwrap_err();
    assert_eq!(err.errno, Errno::NoMem, "the SQ is full");
    let reqs = tx(&mut sim, 0);
    assert_eq!(
        reqs.iter().map(ack_req).collect::<Vec<_>>(),
        [false, false, false, true, false, false, false, true]
    );
    rx_all(&mut sim, &reqs[..4]);
    let ans = tx(&mut sim, 1);
    assert_eq!(lines(&ans), [la("RC_ACKNOWLEDGE", 103, "ACK msn=4")]);
    rx_all(&mut sim, &ans);
    // Four slots are free again.
    for i in 8..12 {
        post(&mut sim, &a, send8(i, &a, false)).unwrap();
    }
    assert!(post(&mut sim, &a, send8(12, &a, false)).is_err());
    rx_all(&mut sim, &reqs[4..]);
    let more = tx(&mut sim, 0);
    assert_eq!(more.len(), 4);
    rx_all(&mut sim, &more);
    pass(&mut sim, 1);
    // Everything completes: the SQ takes 8 again.
    let wcs = wait_wcs(&mut sim, &a, 0, 10 * MS);
    assert!(wcs.is_empty(), "unsignaled: no completions");
    for i in 13..21 {
        post(&mut sim, &a, send8(i, &a, i == 20)).unwrap();
    }
    let wcs = wait_wcs(&mut sim, &a, 1, 10 * MS);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (20, WcStatus::Success));
    assert_eq!(sim.engines[0].counters().retransmit_timeouts, 0);
}

/// A burst of unsignaled one-packet WRITEs: once a quarter of the 128-PSN window is
/// unacknowledged, every 16th packet asks, so ACKs free the window in steps (as rxe's
/// per-message ACKs of 16-packet messages would) and a bulk stream does not stall a
/// round trip on half of it.
#[test]
fn a_bulk_stream_asks_every_eighth_of_the_window() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let (a, b) = pair(&mut sim, &opts());
    for i in 0..100 {
        let mut w = wr(i, WrOpcode::RdmaWrite, vec![sge(&a, 0, 64)]);
        w.flags = SendFlags(0);
        w.remote_addr = b.base;
        w.rkey = b.keys.rkey;
        post(&mut sim, &a, w).unwrap();
    }
    let reqs = tx(&mut sim, 0);
    assert_eq!(reqs.len(), 100);
    let at: Vec<usize> = (0..100).filter(|&i| ack_req(&reqs[i])).collect();
    assert_eq!(at, [31, 47, 63, 79, 95]);
    rx_all(&mut sim, &reqs);
    pass(&mut sim, 1);
}

/// An unsignaled tail with nothing after it: after `ack_nudge_ns` the last packet goes
/// again with AckReq; the responder sees a duplicate and ACKs; the requester's queue
/// empties with no retry counted and no error.
#[test]
fn ack_nudge_completes_an_unsignaled_tail_without_a_retry() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let o = opts();
    let (a, b) = pair(&mut sim, &o);
    recvs(&mut sim, &b, 4);
    let t0 = sim.now;
    for i in 0..3 {
        post(&mut sim, &a, send8(i, &a, false)).unwrap();
    }
    let reqs = tx(&mut sim, 0);
    assert!(!reqs.iter().any(ack_req));
    rx_all(&mut sim, &reqs);
    assert!(tx(&mut sim, 1).is_empty(), "no AckReq, no ACK");
    assert_eq!(drain(&mut sim, &b).len(), 3);
    // The nudge timer, before the retransmit timer.
    let nudge = ack_nudge_ns(o.timeout);
    assert!(nudge < ack_timeout_ns(o.timeout).unwrap() / 2);
    assert_eq!(fire(&mut sim, 0), t0 + nudge);
    let n = tx(&mut sim, 0);
    assert_eq!(lines(&n), ["RC_SEND_ONLY 102"]);
    assert!(ack_req(&n[0]));
    assert_eq!(n[0].payload(), reqs[2].payload());
    rx_all(&mut sim, &n);
    let ans = tx(&mut sim, 1);
    assert_eq!(lines(&ans), [la("RC_ACKNOWLEDGE", 102, "ACK msn=3")]);
    rx_all(&mut sim, &ans);
    assert_eq!(sim.engines[0].poll_timeout(), None, "nothing outstanding");
    assert!(drain(&mut sim, &b).is_empty(), "not delivered twice");
    let (ca, cb) = (sim.engines[0].counters(), sim.engines[1].counters());
    assert_eq!(ca.ack_nudges, 1);
    assert_eq!(
        (
            ca.retransmit_timeouts,
            ca.retransmitted_packets,
            ca.rx_nak_seq
        ),
        (0, 0, 0)
    );
    assert_eq!(cb.rx_duplicate_requests, 1);
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Rts));
}

/// An unsignaled tail sent under `Coalesce` still gets its nudge after the engine
/// switched to `EveryMessage` (`Engine::set_ack_policy` applies to packets built from
/// then on), not a retransmit timeout.
#[test]
fn a_tail_sent_before_a_policy_switch_is_still_nudged() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let o = opts();
    let (a, b) = pair(&mut sim, &o);
    recvs(&mut sim, &b, 2);
    let t0 = sim.now;
    for i in 0..2 {
        post(&mut sim, &a, send8(i, &a, false)).unwrap();
    }
    let reqs = tx(&mut sim, 0);
    assert!(!reqs.iter().any(ack_req));
    sim.engines[0].set_ack_policy(AckPolicy::EveryMessage);
    rx_all(&mut sim, &reqs);
    assert!(tx(&mut sim, 1).is_empty());
    assert_eq!(fire(&mut sim, 0), t0 + ack_nudge_ns(o.timeout));
    let n = tx(&mut sim, 0);
    assert_eq!(lines(&n), ["RC_SEND_ONLY 101"]);
    assert!(ack_req(&n[0]));
    rx_all(&mut sim, &n);
    let ans = tx(&mut sim, 1);
    rx_all(&mut sim, &ans);
    assert_eq!(sim.engines[0].poll_timeout(), None, "nothing outstanding");
    let ca = sim.engines[0].counters();
    assert_eq!((ca.ack_nudges, ca.retransmit_timeouts), (1, 0));
}

/// The same for a 3-packet RDMA WRITE: the nudge is its LAST packet again, with its
/// payload; the responder ACKs the duplicate and does not write twice.
#[test]
fn ack_nudge_of_a_write_tail() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let (a, b) = pair(&mut sim, &opts());
    let data = pattern(2500, 3);
    fill(&a, 0, &data);
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(&a, 0, 2500)]);
    w.flags = SendFlags(0);
    w.remote_addr = b.base + 4096;
    w.rkey = b.keys.rkey;
    post(&mut sim, &a, w).unwrap();
    let reqs = tx(&mut sim, 0);
    assert_eq!(
        lines(&reqs),
        [
            "RC_RDMA_WRITE_FIRST 100",
            "RC_RDMA_WRITE_MIDDLE 101",
            "RC_RDMA_WRITE_LAST 102"
        ]
    );
    assert!(!reqs.iter().any(ack_req));
    rx_all(&mut sim, &reqs);
    assert!(tx(&mut sim, 1).is_empty());
    fire(&mut sim, 0);
    let n = tx(&mut sim, 0);
    assert_eq!(lines(&n), ["RC_RDMA_WRITE_LAST 102"]);
    assert!(ack_req(&n[0]));
    assert_eq!(n[0].payload(), reqs[2].payload());
    // Overwrite the target: a second execution of the duplicate would show.
    b.mem.write(4096 + 2048, &[0xee; 452]);
    rx_all(&mut sim, &n);
    assert_eq!(
        lines(&tx(&mut sim, 1)),
        [la("RC_ACKNOWLEDGE", 102, "ACK msn=1")]
    );
    assert_eq!(
        &b.mem.snapshot()[4096 + 2048..4096 + 2500],
        &[0xee; 452][..]
    );
    assert_eq!(sim.engines[1].counters().rx_duplicate_requests, 1);
}

/// A nudge that is lost is not tried again: the retransmit timer fires at its usual
/// time, counts one retry, and the resend asks for an ACK.
#[test]
fn a_lost_nudge_leaves_recovery_to_the_retransmit_timer() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let o = opts();
    let (a, b) = pair(&mut sim, &o);
    recvs(&mut sim, &b, 4);
    let t0 = sim.now;
    post(&mut sim, &a, send8(1, &a, false)).unwrap();
    let reqs = tx(&mut sim, 0);
    rx_all(&mut sim, &reqs);
    fire(&mut sim, 0);
    assert_eq!(tx(&mut sim, 0).len(), 1, "the nudge, lost");
    assert_eq!(fire(&mut sim, 0), t0 + ack_timeout_ns(o.timeout).unwrap());
    let again = tx(&mut sim, 0);
    assert_eq!(lines(&again), ["RC_SEND_ONLY 100"]);
    assert!(ack_req(&again[0]), "a retransmitted message end asks");
    rx_all(&mut sim, &again);
    pass(&mut sim, 1);
    let c = sim.engines[0].counters();
    assert_eq!((c.ack_nudges, c.retransmit_timeouts), (1, 1));
    assert_eq!(sim.engines[0].poll_timeout(), None);
    // The next signaled SEND completes normally.
    post(&mut sim, &a, send8(2, &a, true)).unwrap();
    let wcs = wait_wcs(&mut sim, &a, 1, 10 * MS);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (2, WcStatus::Success));
}

/// Posting more work postpones the nudge: the timer that was started runs out, finds
/// a newer packet, and waits `ack_nudge_ns` after that one.
#[test]
fn posting_more_work_postpones_the_nudge() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let o = opts();
    let (a, b) = pair(&mut sim, &o);
    recvs(&mut sim, &b, 4);
    let nudge = ack_nudge_ns(o.timeout);
    let t0 = sim.now;
    post(&mut sim, &a, send8(1, &a, false)).unwrap();
    pass(&mut sim, 0);
    sim.now = t0 + nudge / 2;
    post(&mut sim, &a, send8(2, &a, false)).unwrap();
    let second = tx(&mut sim, 0);
    assert!(!ack_req(&second[0]));
    rx_all(&mut sim, &second);
    assert_eq!(fire(&mut sim, 0), t0 + nudge, "the first deadline");
    assert!(tx(&mut sim, 0).is_empty(), "postponed, not sent");
    assert_eq!(fire(&mut sim, 0), t0 + nudge / 2 + nudge);
    let n = tx(&mut sim, 0);
    assert_eq!(lines(&n), ["RC_SEND_ONLY 101"]);
    rx_all(&mut sim, &n);
    pass(&mut sim, 1);
    assert_eq!(sim.engines[0].poll_timeout(), None);
    assert_eq!(sim.engines[0].counters().ack_nudges, 1);
}

/// A stream of unsignaled SENDs that never pauses long enough for a nudge (one every
/// third of `ack_nudge_ns`): the first message end a quarter of the ACK timeout after
/// the oldest unacknowledged packet asks, so the retransmit timer never fires.
#[test]
fn a_slow_unsignaled_stream_asks_before_the_retransmit_timer() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let o = opts();
    let (a, b) = pair(&mut sim, &o);
    recvs(&mut sim, &b, 400);
    let gap = ack_nudge_ns(o.timeout) / 3;
    let limit = ack_timeout_ns(o.timeout).unwrap() / 4;
    let mut asked = Vec::new();
    for i in 0..300u64 {
        post(&mut sim, &a, send8(i, &a, false)).unwrap();
        let r = tx(&mut sim, 0);
        asked.push(ack_req(&r[0]));
        rx_all(&mut sim, &r);
        pass(&mut sim, 1);
        sim.now += gap;
        if sim.engines[0].poll_timeout().is_some_and(|t| t <= sim.now) {
            let now = sim.now;
            sim.engines[0].handle_timeout(now);
            pass(&mut sim, 0);
            pass(&mut sim, 1);
        }
    }
    let c = sim.engines[0].counters();
    assert_eq!(c.retransmit_timeouts, 0);
    assert_eq!(c.ack_nudges, 0, "the stream never paused for a nudge");
    // After each ACK the next SEND is the oldest unacknowledged one; the one sent
    // `limit` after it (k gaps later) asks, and its ACK starts the next round.
    let k = limit.div_ceil(gap) as usize;
    let at: Vec<usize> = (0..asked.len()).filter(|&i| asked[i]).collect();
    assert_eq!(at[0], k, "{asked:?}");
    assert!(at.windows(2).all(|w| w[1] - w[0] == k + 1), "{at:?}");
    assert_eq!(at.len(), (300 - k).div_ceil(k + 1));
}

/// Modify to SQD with an unsignaled tail out: the requester asks at once, so the SQ
/// drains (and the event comes) on the ACK instead of after the nudge delay.
#[test]
fn sqd_asks_for_the_tail_at_once() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let (a, b) = pair(&mut sim, &opts());
    recvs(&mut sim, &b, 4);
    for i in 0..2 {
        post(&mut sim, &a, send8(i, &a, false)).unwrap();
    }
    pass(&mut sim, 0);
    let now = sim.now;
    sim.engines[0]
        .modify_qp(
            a.qpn,
            &QpAttr {
                qp_state: QpState::Sqd,
                en_sqd_async_notify: true,
                ..Default::default()
            },
            QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY,
            now,
        )
        .unwrap();
    let n = tx(&mut sim, 0);
    assert_eq!(lines(&n), ["RC_SEND_ONLY 101"]);
    assert!(ack_req(&n[0]));
    assert_eq!(sim.now, now, "no wait");
    rx_all(&mut sim, &n);
    pass(&mut sim, 1);
    assert!(events(&mut sim, 0).contains(&AsyncEvent::SqDrained(a.qpn)));
}

/// A WQE with a bad local buffer behind unsignaled ones: it can only fail once those
/// are acknowledged, so the requester asks for that ACK at once.
#[test]
fn a_failing_wqe_behind_an_unsignaled_tail_asks_at_once() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let (a, b) = pair(&mut sim, &opts());
    recvs(&mut sim, &b, 4);
    post(&mut sim, &a, send8(1, &a, false)).unwrap();
    let mut bad = send8(2, &a, true);
    bad.sg_list[0].lkey ^= 0x5a5a_0000;
    post(&mut sim, &a, bad).unwrap();
    let r = tx(&mut sim, 0);
    assert_eq!(lines(&r), ["RC_SEND_ONLY 100", "RC_SEND_ONLY 100"]);
    assert_eq!(r.iter().map(ack_req).collect::<Vec<_>>(), [false, true]);
    rx_all(&mut sim, &r);
    pass(&mut sim, 1);
    // The ACK frees the SQ's front; the requester then fails the bad WQE.
    assert!(tx(&mut sim, 0).is_empty());
    let wcs = drain(&mut sim, &a);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(2, WcStatus::LocProtErr)]
    );
}

/// Posts `w`, letting the network run while the send queue is full (at 20 % loss the
/// retransmit timer, 4 ms here, can hold a whole queue's worth of work), as an
/// application waits for room.
fn post_waiting(sim: &mut Sim, a: &End, w: SendWr) {
    let limit = sim.now + 10 * SEC;
    loop {
        match post(sim, a, w.clone()) {
            Ok(()) => return,
            Err(e) if e.errno == Errno::NoMem && sim.now < limit => {
                let until = sim.now + MS;
                sim.run_until(until, |_| false);
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

/// Unsignaled tails under loss, duplication and reordering (the loss matrix's links):
/// every SEND and WRITE arrives exactly once and in order, nothing fails, the last
/// messages complete through nudges or retries, and the network goes quiet.
#[test]
fn unsignaled_tails_under_loss_complete() {
    for (seed, (loss, dup, reorder)) in [
        (0.0, 0.0, 0.0),
        (0.01, 0.02, 0.05),
        (0.05, 0.02, 0.05),
        (0.20, 0.0, 0.0),
        (0.0, 0.02, 0.05),
        (0.05, 0.0, 0.05),
    ]
    .into_iter()
    .enumerate()
    {
        let link = LinkConfig {
            loss,
            dup,
            reorder,
            corrupt: if loss > 0.0 { 0.01 } else { 0.0 },
            ..Default::default()
        };
        let mut sim = Sim::new(2, seed % 2 == 1, link, 900 + seed as u64);
        let o = PairOpts {
            mem_len: 1 << 20,
            cap: QpCap {
                max_send_wr: 64,
                ..opts().cap
            },
            ..opts()
        };
        let (a, b) = pair(&mut sim, &o);
        let n = 150u64;
        let src = pattern(1 << 19, seed as u8);
        fill(&a, 0, &src);
        for i in 0..n {
            let now = sim.now;
            post_recv1(&mut sim, &b, i, (i * 2000) % (1 << 19), 2000, now);
        }
        // Bursts of unsignaled SENDs and WRITEs of 0..2000 bytes, each burst ending
        // unsignaled, with pauses longer than the nudge delay between bursts.
        let mut posted = 0u64;
        let mut write_at = 1 << 19;
        let mut writes = Vec::new();
        while posted < n {
            for _ in 0..(posted % 7 + 1).min(n - posted) {
                let len = ((posted * 397) % 2000) as u32;
                let off = (posted * 977) % (1 << 18);
                let mut w = wr(posted, WrOpcode::Send, vec![sge(&a, off, len)]);
                w.flags = SendFlags(0);
                post_waiting(&mut sim, &a, w);
                let mut w = wr(
                    10_000 + posted,
                    WrOpcode::RdmaWrite,
                    vec![sge(&a, off, len)],
                );
                w.flags = SendFlags(0);
                w.remote_addr = b.base + write_at;
                w.rkey = b.keys.rkey;
                writes.push((write_at as usize, off as usize, len as usize));
                write_at += u64::from(len);
                post_waiting(&mut sim, &a, w);
                posted += 1;
            }
            let until = sim.now + 3 * MS;
            sim.run_until(until, |_| false);
        }
        let mut got = Vec::new();
        let done = sim.run_until(sim.now + 60 * SEC, |s| {
            got.extend(drain(s, &b));
            got.len() as u64 >= n
        });
        assert!(done, "seed {seed}: {} of {n} receives", got.len());
        // Let the last ACKs and timers play out.
        let mut steps = 0;
        while sim.step() {
            steps += 1;
            assert!(steps < 1_000_000, "seed {seed}: never went quiet");
        }
        let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
        assert_eq!(
            ids,
            (0..n).collect::<Vec<_>>(),
            "seed {seed}: in order, once"
        );
        for w in &got {
            assert_eq!(w.status, WcStatus::Success, "seed {seed}");
            let (len, off) = ((w.wr_id * 397) % 2000, (w.wr_id * 977) % (1 << 18));
            assert_eq!(u64::from(w.byte_len), len, "seed {seed}");
            let at = ((w.wr_id * 2000) % (1 << 19)) as usize;
            let m = b.mem.snapshot();
            assert_eq!(
                &m[at..at + len as usize],
                &src[off as usize..(off + len) as usize]
            );
        }
        let m = b.mem.snapshot();
        for &(at, off, len) in &writes {
            assert_eq!(&m[at..at + len], &src[off..off + len], "seed {seed}: WRITE");
        }
        let wcs = drain(&mut sim, &a);
        assert!(
            wcs.is_empty(),
            "seed {seed}: unsignaled, no errors: {wcs:?}"
        );
        assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Rts));
        let c = sim.engines[0].counters();
        // An unasked tail draws a nudge, or a tail-loss probe first once the QP has
        // measured its round trip: either asks the responder for the ACK.
        assert!(
            c.ack_nudges + c.tail_loss_probes > 0,
            "seed {seed}: the bursts' tails were asked for an ACK"
        );
        if loss == 0.0 && dup == 0.0 && reorder == 0.0 {
            assert_eq!(c.retransmit_timeouts, 0, "seed {seed}");
        }
        // The SQ is empty: a full queue of signaled SENDs goes in and completes.
        for i in 0..64 {
            let mut w = wr(50_000 + i, WrOpcode::RdmaWrite, vec![sge(&a, 0, 8)]);
            w.remote_addr = b.base;
            w.rkey = b.keys.rkey;
            post(&mut sim, &a, w).unwrap();
        }
        let wcs = wait_wcs(&mut sim, &a, 64, 60 * SEC);
        assert_eq!(wcs.len(), 64, "seed {seed}");
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    }
}

/// A sequence NAK that implicitly acknowledges whole messages is progress: a retry
/// already under way for an earlier gap does not swallow it (rxe `rxe_comp.c`
/// `check_psn` resets the retry counters, `started_retry` included, for every WQE the
/// response completes implicitly, before `check_ack` reaches the NAK). Here the ACKs of
/// a go-back-N resend are lost and the resend has a gap of its own, at a message
/// boundary: its NAK must start the next retry at once, not leave it to the timer.
#[test]
fn a_nak_past_whole_messages_retries_at_once_during_a_retry() {
    for policy in [AckPolicy::Coalesce, AckPolicy::EveryMessage] {
        let mut sim = sim2(policy);
        let (a, b) = pair(&mut sim, &opts());
        recvs(&mut sim, &b, 10);
        // A signaled SEND, acknowledged: comp_psn 101.
        let (_, ans) = one_by_one(&mut sim, &a, vec![send8(0, &a, true)]);
        assert_eq!(acks(&ans), 1);
        assert_eq!(drain(&mut sim, &a).len(), 1);
        for i in 1..=6 {
            post(&mut sim, &a, send8(i, &a, false)).unwrap();
        }
        let r = tx(&mut sim, 0);
        assert_eq!(r.len(), 6);
        // 101 is lost: NAK(101), with nothing acknowledged before it.
        rx_all(&mut sim, &r[1..]);
        let nak = tx(&mut sim, 1);
        assert_eq!(lines(&nak), [la("RC_ACKNOWLEDGE", 101, "NAK-SEQ msn=1")]);
        rx_all(&mut sim, &nak);
        let again = tx(&mut sim, 0);
        assert_eq!(
            again.iter().map(Pkt::psn).collect::<Vec<_>>(),
            [101, 102, 103, 104, 105, 106]
        );
        // 103 is lost on the resend and the ACK for 101..102 on the way back.
        rx_all(&mut sim, &again[..2]);
        rx_all(&mut sim, &again[3..]);
        let ans = tx(&mut sim, 1);
        let naks: Vec<Pkt> = ans
            .into_iter()
            .filter(|p| p.line().contains("NAK-SEQ"))
            .collect();
        assert_eq!(lines(&naks), [la("RC_ACKNOWLEDGE", 103, "NAK-SEQ msn=3")]);
        rx_all(&mut sim, &naks);
        let third = tx(&mut sim, 0);
        assert_eq!(
            third.iter().map(Pkt::psn).collect::<Vec<_>>(),
            [103, 104, 105, 106],
            "{policy:?}: the new gap is resent at once"
        );
        rx_all(&mut sim, &third);
        pass(&mut sim, 1);
        let c = sim.engines[0].counters();
        assert_eq!((c.rx_nak_seq, c.retransmit_timeouts), (2, 0), "{policy:?}");
        assert_eq!(drain(&mut sim, &b).len(), 7, "{policy:?}");
        assert!(drain(&mut sim, &a).is_empty());
        assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Rts));
    }
}

/// A nudge that crosses a late RNR NAK: the responder has no receive for the unsignaled
/// tail and refuses it, its RNR NAK is slow, and the nudge (the same packet, asking)
/// is refused too. The second RNR NAK answers a packet that left before the first one
/// was handled, so it is the same refusal: one RNR retry is spent (`rnr_retry` 1
/// here), not two, and the message is delivered after the RNR timer instead of failing
/// with RNR_RETRY_EXC_ERR.
#[test]
fn a_nudge_crossing_a_late_rnr_nak_spends_one_rnr_retry() {
    let mut sim = sim2(AckPolicy::Coalesce);
    let o = PairOpts {
        rnr_retry: 1,
        min_rnr_timer: 1,
        ..opts()
    };
    let (a, b) = pair(&mut sim, &o);
    post(&mut sim, &a, send8(1, &a, false)).unwrap();
    let reqs = tx(&mut sim, 0);
    assert!(!ack_req(&reqs[0]));
    rx_all(&mut sim, &reqs);
    // The first refusal, held back on the way.
    let late = tx(&mut sim, 1);
    assert_eq!(lines(&late), [la("RC_ACKNOWLEDGE", 100, "RNR t=1 msn=0")]);
    fire(&mut sim, 0);
    let nudge = tx(&mut sim, 0);
    assert_eq!(lines(&nudge), ["RC_SEND_ONLY 100"]);
    assert!(ack_req(&nudge[0]));
    rx_all(&mut sim, &nudge);
    let second = tx(&mut sim, 1);
    assert_eq!(lines(&second), [la("RC_ACKNOWLEDGE", 100, "RNR t=1 msn=0")]);
    rx_all(&mut sim, &late);
    rx_all(&mut sim, &second);
    assert!(drain(&mut sim, &a).is_empty(), "no error completion");
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Rts));
    recvs(&mut sim, &b, 1);
    // After the RNR timer (IBTA table 45: code 1 = 10 µs) the retry is accepted.
    let at = sim.now;
    assert_eq!(fire(&mut sim, 0), at + 10_000);
    let again = tx(&mut sim, 0);
    assert_eq!(lines(&again), ["RC_SEND_ONLY 100"]);
    rx_all(&mut sim, &again);
    pass(&mut sim, 1);
    assert_eq!(drain(&mut sim, &b).len(), 1, "delivered once");
    let c = sim.engines[0].counters();
    assert_eq!(c.rx_rnr_nak, 2);
    assert_eq!(sim.engines[0].poll_timeout(), None, "nothing outstanding");
    // The next signaled SEND completes normally.
    recvs(&mut sim, &b, 1);
    post(&mut sim, &a, send8(2, &a, true)).unwrap();
    let wcs = wait_wcs(&mut sim, &a, 1, 10 * MS);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (2, WcStatus::Success));
}
