//! Selective repeat (`rverbs_engine::selective`), packet by packet: the marker on
//! requests, the responder's hold and reports past a gap, the requester's resend of
//! only the missing packet, and the in-order delivery once the gap fills.

mod common;
mod driver;
use common::*;
use driver::*;
use rverbs_engine::selective::SR_MARK;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;

fn marked(p: &Pkt) -> bool {
    p.packet().bth().resv7() & SR_MARK != 0
}

/// A connected pair with selective repeat on `sr` (requester, responder) whose
/// requester has measured its round trip (a SEND at PSN 100 and its ACK), and a
/// six-packet SEND (PSNs 101..=106) with its receive posted, sent but not delivered.
fn six_packet_send(sr: [bool; 2]) -> (Sim, End, End, Vec<Pkt>) {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 9);
    for (e, on) in sim.engines.iter_mut().zip(sr) {
        e.set_selective_repeat(on);
    }
    let o = PairOpts {
        psn: [100, 900],
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    let now = sim.now;
    post_recv1(&mut sim, &b, 6, 0, 64, now);
    let mut w = wr(0, WrOpcode::Send, vec![sge(&a, 0, 8)]);
    w.flags = SendFlags::SIGNALED;
    sim.engines[0].post_send(a.qpn, w, now).unwrap();
    let p = tx(&mut sim, 0);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    rx_all(&mut sim, &ack);
    assert_eq!(
        (drain(&mut sim, &a).len(), drain(&mut sim, &b).len()),
        (1, 1)
    );
    assert!(sim.engines[0].qp_srtt(a.qpn).is_some(), "no RTT sample");
    post_recv1(&mut sim, &b, 7, 0, 8192, now);
    fill(&a, 0, &pattern(6000, 5));
    let mut w = wr(1, WrOpcode::Send, vec![sge(&a, 0, 6000)]);
    w.flags = SendFlags::SIGNALED;
    sim.engines[0].post_send(a.qpn, w, now).unwrap();
    let p = tx(&mut sim, 0);
    assert_eq!(p.len(), 6);
    (sim, a, b, p)
}

/// Packet 102 is lost. The responder holds 103..=106 and reports the gap once, when
/// 103 ends it (a marked NAK sequence error: BTH PSN the packet held, MSN field the
/// gap's first PSN); the requester resends 102 alone; the responder then carries out
/// 102..=106 in order and ACKs 106; the SEND completes once on each side with the
/// right bytes.
#[test]
fn a_lost_packet_is_resent_alone_and_the_held_ones_are_carried_out() {
    let (mut sim, a, b, p) = six_packet_send([true, true]);
    assert!(p.iter().all(marked), "every request carries the marker");
    rx(&mut sim, &p[0]);
    rx_all(&mut sim, &p[2..]);
    let reports = tx(&mut sim, 1);
    assert_eq!(lines(&reports), ["RC_ACKNOWLEDGE 103 NAK-SEQ msn=102"]);
    assert!(reports.iter().all(marked), "reports carry the marker");
    assert!(
        drain(&mut sim, &b).is_empty(),
        "nothing completes past the gap"
    );
    rx_all(&mut sim, &reports);
    let resend = tx(&mut sim, 0);
    assert_eq!(
        lines(&resend),
        ["RC_SEND_MIDDLE 102"],
        "only the missing packet"
    );
    assert!(resend[0].repr().bth.ack_req);
    assert_eq!(resend[0].payload(), p[1].payload());
    rx_all(&mut sim, &resend);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), ["RC_ACKNOWLEDGE 106 ACK msn=2"]);
    assert!(!marked(&ack[0]), "an ordinary ACK is not marked");
    rx_all(&mut sim, &ack);
    let sw = drain(&mut sim, &a);
    assert_eq!((sw.len(), sw[0].status), (1, WcStatus::Success));
    let rw = drain(&mut sim, &b);
    assert_eq!((rw.len(), rw[0].wr_id, rw[0].byte_len), (1, 7, 6000));
    assert_eq!(b.mem.snapshot()[..6000], pattern(6000, 5)[..]);
    let (ca, cb) = (sim.engines[0].counters(), sim.engines[1].counters());
    assert_eq!((ca.rx_selective_reports, ca.selective_retransmits), (1, 1));
    assert_eq!(ca.retransmitted_packets, 1);
    assert_eq!(
        (
            cb.rx_selective_held,
            cb.rx_selective_placed,
            cb.tx_selective_reports
        ),
        (4, 4, 1)
    );
    assert_eq!((cb.tx_nak_seq, ca.rx_nak_seq), (0, 0));
    assert_eq!(sim.engines[0].poll_timeout(), None, "nothing outstanding");
}

/// The responder without selective repeat (as kernel rxe): the marked requests are
/// executed as any others, the gap draws one plain NAK and the requester goes back N.
#[test]
fn a_responder_without_it_answers_go_back_n() {
    let (mut sim, a, b, p) = six_packet_send([true, false]);
    rx(&mut sim, &p[0]);
    rx_all(&mut sim, &p[2..]);
    let nak = tx(&mut sim, 1);
    assert_eq!(lines(&nak), ["RC_ACKNOWLEDGE 102 NAK-SEQ msn=1"]);
    assert!(!marked(&nak[0]));
    rx_all(&mut sim, &nak);
    let again = tx(&mut sim, 0);
    assert_eq!(
        lines(&again),
        (102..=106)
            .enumerate()
            .map(|(i, psn)| format!("RC_SEND_{} {psn}", if i == 4 { "LAST" } else { "MIDDLE" }))
            .collect::<Vec<_>>(),
        "go-back-N"
    );
    rx_all(&mut sim, &again);
    let ack = tx(&mut sim, 1);
    rx_all(&mut sim, &ack);
    assert_eq!(drain(&mut sim, &a).len(), 1);
    assert_eq!(drain(&mut sim, &b).len(), 1);
    assert_eq!(sim.engines[0].counters().rx_selective_reports, 0);
}

/// The requester without it (as kernel rxe or a NIC): its requests carry no marker,
/// so the responder with selective repeat on answers with a plain NAK and nothing it
/// sends is marked.
#[test]
fn a_requester_without_it_gets_no_marker() {
    let (mut sim, a, b, p) = six_packet_send([false, true]);
    assert!(!p.iter().any(marked));
    rx(&mut sim, &p[0]);
    rx_all(&mut sim, &p[2..]);
    let nak = tx(&mut sim, 1);
    assert_eq!(lines(&nak), ["RC_ACKNOWLEDGE 102 NAK-SEQ msn=1"]);
    assert!(!marked(&nak[0]));
    rx_all(&mut sim, &nak);
    let again = tx(&mut sim, 0);
    assert_eq!(again.len(), 5, "go-back-N");
    rx_all(&mut sim, &again);
    let ack = tx(&mut sim, 1);
    assert!(!ack.iter().any(marked));
    rx_all(&mut sim, &ack);
    assert_eq!(drain(&mut sim, &a).len(), 1);
    assert_eq!(drain(&mut sim, &b).len(), 1);
    assert_eq!(sim.engines[1].counters().rx_selective_held, 0);
}

/// Two gaps (102 and 105 lost) and the first report lost: the second gap's report
/// names only 105 (the packets between are held, not resent); the tail-loss probe
/// (the last packet, held already) draws a report of the first gap, 102 is resent,
/// and once it is carried out up to 105 the responder reports that gap again.
#[test]
fn two_gaps_and_a_lost_report() {
    let (mut sim, a, b, p) = six_packet_send([true, true]);
    rx(&mut sim, &p[0]);
    rx_all(&mut sim, &[p[2].clone(), p[3].clone(), p[5].clone()]);
    let reports = tx(&mut sim, 1);
    assert_eq!(
        lines(&reports),
        [
            "RC_ACKNOWLEDGE 103 NAK-SEQ msn=102",
            "RC_ACKNOWLEDGE 106 NAK-SEQ msn=105"
        ]
    );
    // The first report is lost.
    rx(&mut sim, &reports[1]);
    let resend = tx(&mut sim, 0);
    assert_eq!(
        lines(&resend),
        ["RC_SEND_MIDDLE 105"],
        "only the second gap"
    );
    rx_all(&mut sim, &resend);
    assert!(tx(&mut sim, 1).is_empty(), "105 joins what is held");
    // The probe: the last packet again; the responder has it and reports gap one.
    fire(&mut sim, 0);
    let probe = tx(&mut sim, 0);
    assert_eq!(lines(&probe), ["RC_SEND_LAST 106"]);
    rx_all(&mut sim, &probe);
    let again = tx(&mut sim, 1);
    assert_eq!(lines(&again), ["RC_ACKNOWLEDGE 103 NAK-SEQ msn=102"]);
    rx_all(&mut sim, &again);
    let resend = tx(&mut sim, 0);
    assert_eq!(lines(&resend), ["RC_SEND_MIDDLE 102"]);
    rx_all(&mut sim, &resend);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), ["RC_ACKNOWLEDGE 106 ACK msn=2"]);
    rx_all(&mut sim, &ack);
    assert_eq!(drain(&mut sim, &a).len(), 1);
    let rw = drain(&mut sim, &b);
    assert_eq!((rw.len(), rw[0].byte_len), (1, 6000));
    assert_eq!(b.mem.snapshot()[..6000], pattern(6000, 5)[..]);
    let c = sim.engines[0].counters();
    assert_eq!((c.selective_retransmits, c.retransmit_timeouts), (2, 0));
}

/// With the loss window on (`Config::loss_window`, as the soft device has it), a gap
/// reported selectively costs its packet only: the window does not shrink, and while
/// the gap is filled the requester may send up to twice its window (what arrives past
/// the gap is held), so the rest of the WRITE leaves with the resend.
#[test]
fn a_selective_loss_keeps_the_window() {
    let cfg = Config {
        loss_window: true,
        selective_repeat: true,
        ..Config::default()
    };
    let mut sim = Sim::with_config(2, false, LinkConfig::default(), 5, cfg);
    let o = PairOpts {
        psn: [100, 900],
        mem_len: 1 << 20,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    let data = pattern(200 * 1024, 7);
    fill(&a, 0, &data);
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(&a, 0, 200 * 1024)]);
    w.remote_addr = b.base;
    w.rkey = b.keys.rkey;
    w.flags = SendFlags::SIGNALED;
    let now = sim.now;
    sim.engines[0].post_send(a.qpn, w, now).unwrap();
    let p = tx(&mut sim, 0);
    assert_eq!(p.len(), 128, "the whole window");
    rx_all(&mut sim, &p[..10]);
    rx_all(&mut sim, &p[11..]);
    let back = tx(&mut sim, 1);
    assert!(back
        .iter()
        .any(|r| r.line() == "RC_ACKNOWLEDGE 111 NAK-SEQ msn=110"));
    rx_all(&mut sim, &back);
    let out = tx(&mut sim, 0);
    assert_eq!(out.len(), 73, "the resend, then the rest of the WRITE");
    assert_eq!(out[0].line(), "RC_RDMA_WRITE_MIDDLE 110");
    assert_eq!((out[1].psn(), out[72].psn()), (228, 299));
    rx_all(&mut sim, &out);
    let ack = tx(&mut sim, 1);
    rx_all(&mut sim, &ack);
    assert_eq!(drain(&mut sim, &a).len(), 1);
    assert_eq!(&b.mem.snapshot()[..200 * 1024], &data[..]);
    let c = sim.engines[0].counters();
    assert_eq!((c.selective_retransmits, c.retransmitted_packets), (1, 1));
}
