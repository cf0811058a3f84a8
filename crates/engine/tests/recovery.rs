//! Loss recovery before the local ACK timeout, driven packet by packet: tail-loss
//! probes (RFC 8985 TLP) after about two round trips, the second probe that gets past
//! a lost sequence NAK, the resend a probe's answer starts, and the ACK timeout's IBTA
//! meaning left intact (probes are not retries).

mod common;
mod driver;
use common::*;
use driver::*;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;

/// The shortest probe timeout (`timers::MIN_PROBE_NS`): the trace's round trips take
/// no virtual time, so 2 x SRTT is below it.
const PTO: Nanos = 200_000;

fn l(op: &str, psn: u32) -> String {
    format!("{op} {psn}")
}

fn la(op: &str, psn: u32, aeth: &str) -> String {
    format!("{op} {psn} {aeth}")
}

fn signaled(mut w: SendWr) -> SendWr {
    w.flags = w.flags | SendFlags::SIGNALED;
    w
}

fn send(sim: &mut Sim, e: &End, w: SendWr) {
    let now = sim.now;
    sim.engines[e.engine].post_send(e.qpn, w, now).unwrap();
}

/// A connected pair whose requester has measured its round trip (one SEND and its ACK),
/// with a receive posted for the next SEND.
fn measured_pair(cfg: Config) -> (Sim, End, End) {
    let mut sim = Sim::with_config(2, false, LinkConfig::default(), 5, cfg);
    let o = PairOpts {
        psn: [100, 900],
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    let now = sim.now;
    post_recv1(&mut sim, &b, 1, 0, 64, now);
    post_recv1(&mut sim, &b, 2, 0, 4096, now);
    send(
        &mut sim,
        &a,
        signaled(wr(1, WrOpcode::Send, vec![sge(&a, 0, 8)])),
    );
    let p = tx(&mut sim, 0);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    rx_all(&mut sim, &ack);
    assert_eq!(drain(&mut sim, &a).len(), 1);
    assert!(sim.engines[0].qp_srtt(a.qpn).is_some(), "no RTT sample");
    (sim, a, b)
}

fn four_packet_send(sim: &mut Sim, a: &End) -> Vec<Pkt> {
    fill(a, 0, &pattern(4000, 3));
    send(
        sim,
        a,
        signaled(wr(2, WrOpcode::Send, vec![sge(a, 0, 4000)])),
    );
    let p = tx(sim, 0);
    assert_eq!(
        lines(&p),
        [
            l("RC_SEND_FIRST", 101),
            l("RC_SEND_MIDDLE", 102),
            l("RC_SEND_MIDDLE", 103),
            l("RC_SEND_LAST", 104),
        ]
    );
    p
}

/// The last packet of a message is lost: nothing would ask for it before the ACK
/// timeout. The probe resends it with AckReq after the probe timeout; the responder
/// executes it and ACKs. No retry is spent and no timeout counted.
#[test]
fn a_lost_tail_is_resent_by_a_probe_well_before_the_timeout() {
    let (mut sim, a, b) = measured_pair(Config::default());
    let p = four_packet_send(&mut sim, &a);
    let t0 = sim.now;
    rx_all(&mut sim, &p[..3]);
    assert!(tx(&mut sim, 1).is_empty(), "no AckReq yet, no NAK");
    assert_eq!(fire(&mut sim, 0), t0 + PTO, "the probe timeout");
    let probe = tx(&mut sim, 0);
    assert_eq!(lines(&probe), [l("RC_SEND_LAST", 104)]);
    assert!(probe[0].repr().bth.ack_req);
    rx_all(&mut sim, &probe);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 104, "ACK msn=2")]);
    rx_all(&mut sim, &ack);
    let wcs = drain(&mut sim, &a);
    assert_eq!(
        (wcs.len(), wcs[0].wr_id, wcs[0].status),
        (1, 2, WcStatus::Success)
    );
    assert_eq!(drain(&mut sim, &b).len(), 2);
    let c = sim.engines[0].counters();
    assert_eq!((c.tail_loss_probes, c.probe_retries), (1, 0));
    assert_eq!((c.retransmit_timeouts, c.retransmitted_packets), (0, 0));
    // Nothing outstanding: no timer left.
    assert_eq!(sim.engines[0].poll_timeout(), None);
}

/// A middle packet is lost and so is the responder's one sequence NAK. The first probe
/// (the last packet) is out of sequence behind the NAKed gap and draws nothing (rxe
/// `check_psn` drops it too); the second resends the oldest unacknowledged packet,
/// which the responder has: it ACKs what it has, and that answer, short of packets
/// sent before the probe, starts the go-back at once.
#[test]
fn a_lost_nak_is_got_past_by_the_second_probe() {
    let (mut sim, a, b) = measured_pair(Config::default());
    let p = four_packet_send(&mut sim, &a);
    let t0 = sim.now;
    rx(&mut sim, &p[0]);
    rx(&mut sim, &p[2]);
    rx(&mut sim, &p[3]);
    let nak = tx(&mut sim, 1);
    assert_eq!(lines(&nak), [la("RC_ACKNOWLEDGE", 102, "NAK-SEQ msn=1")]);
    // (The NAK is lost.)
    assert_eq!(fire(&mut sim, 0), t0 + PTO, "first probe");
    let first = tx(&mut sim, 0);
    assert_eq!(lines(&first), [l("RC_SEND_LAST", 104)]);
    rx_all(&mut sim, &first);
    assert!(
        tx(&mut sim, 1).is_empty(),
        "behind a NAKed gap: dropped silently"
    );
    assert_eq!(
        fire(&mut sim, 0),
        t0 + 3 * PTO,
        "second probe, twice the wait"
    );
    let second = tx(&mut sim, 0);
    assert_eq!(lines(&second), [l("RC_SEND_FIRST", 101)]);
    rx_all(&mut sim, &second);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), [la("RC_ACKNOWLEDGE", 101, "ACK msn=1")]);
    rx_all(&mut sim, &ack);
    // 102..104 left before the probe and are still unacknowledged: lost.
    let resent = tx(&mut sim, 0);
    assert_eq!(
        lines(&resent),
        [
            l("RC_SEND_MIDDLE", 102),
            l("RC_SEND_MIDDLE", 103),
            l("RC_SEND_LAST", 104),
        ]
    );
    rx_all(&mut sim, &resent);
    let ack = tx(&mut sim, 1);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(2, WcStatus::Success)]);
    assert_eq!(&b.mem.snapshot()[..4000], &pattern(4000, 3)[..]);
    let c = sim.engines[0].counters();
    assert_eq!((c.tail_loss_probes, c.probe_retries), (2, 1));
    assert_eq!((c.retransmit_timeouts, c.rx_nak_seq), (0, 0));
    assert_eq!(c.retransmitted_packets, 3);
    assert_eq!(sim.engines[0].poll_timeout(), None);
}

/// Probes answered by nothing leave the timeout to do what IBTA says: the probes of a
/// stall back off (each wait twice the last) and stop short of the retransmit timer,
/// which fires at its own time and counts a retry; retry_cnt + 1 fruitless timeouts
/// fail the request with RETRY_EXC_ERR, as without probes.
#[test]
fn unanswered_probes_leave_the_timeout_its_meaning() {
    let (mut sim, a, _b) = measured_pair(Config::default());
    let to: Nanos = 4096 << 10;
    let t0 = sim.now;
    let _ = four_packet_send(&mut sim, &a);
    // 0.2, 0.6, 1.4 and 3.0 ms; the next (6.2 ms) would come after the 4.19 ms timeout.
    let mut at = t0;
    for k in 0..4 {
        at += PTO << k;
        assert_eq!(fire(&mut sim, 0), at, "probe {k}");
        assert_eq!(tx(&mut sim, 0).len(), 1);
    }
    assert_eq!(
        fire(&mut sim, 0),
        t0 + to,
        "the timeout, where it always was"
    );
    let c = sim.engines[0].counters();
    assert_eq!((c.tail_loss_probes, c.retransmit_timeouts), (4, 1));
    // Keep losing everything: the budget (retry_cnt 7) is spent by timeouts only.
    let mut fails = Vec::new();
    for _ in 0..100 {
        let _ = tx(&mut sim, 0);
        fire(&mut sim, 0);
        fails = drain(&mut sim, &a);
        if !fails.is_empty() {
            break;
        }
    }
    assert_eq!(st(&fails), [(2, WcStatus::RetryExcErr)]);
    assert_eq!(sim.engines[0].counters().retransmit_timeouts, 8);
}

/// With `Config::loss_recovery` off the requester waits for the timeout, as rxe's does.
#[test]
fn probes_can_be_turned_off() {
    let cfg = Config {
        loss_recovery: false,
        ..Config::default()
    };
    let (mut sim, a, _b) = measured_pair(cfg);
    let t0 = sim.now;
    let _ = four_packet_send(&mut sim, &a);
    assert_eq!(fire(&mut sim, 0), t0 + (4096 << 10));
    assert_eq!(sim.engines[0].counters().tail_loss_probes, 0);
}

fn st(wcs: &[Wc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// `Config::loss_window`: a sequence NAK halves the window for the go-back (half the
/// 118 PSNs outstanding from the NAKed one: 59 packets resent, the last asking for an
/// ACK, since the requester waits after it), and the WRITE still completes, whole,
/// without a timeout.
#[test]
fn a_loss_halves_the_window_for_the_go_back() {
    let cfg = Config {
        loss_window: true,
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
    send(&mut sim, &a, signaled(w));
    let p = tx(&mut sim, 0);
    assert_eq!(p.len(), 128, "the whole window");
    rx_all(&mut sim, &p[..10]);
    rx(&mut sim, &p[11]);
    let nak = tx(&mut sim, 1);
    assert_eq!(lines(&nak), [la("RC_ACKNOWLEDGE", 110, "NAK-SEQ msn=0")]);
    rx_all(&mut sim, &nak);
    let again = tx(&mut sim, 0);
    assert_eq!(again.len(), 59, "half of the 118 outstanding from PSN 110");
    assert_eq!((again[0].psn(), again[58].psn()), (110, 168));
    assert!(
        again[58].repr().bth.ack_req,
        "the packet that fills the window asks"
    );
    let mut out = again;
    let mut wcs = Vec::new();
    for _ in 0..100 {
        rx_all(&mut sim, &out);
        let back = tx(&mut sim, 1);
        rx_all(&mut sim, &back);
        wcs.extend(drain(&mut sim, &a));
        if !wcs.is_empty() {
            break;
        }
        out = tx(&mut sim, 0);
        if out.is_empty() {
            fire(&mut sim, 0);
            out = tx(&mut sim, 0);
        }
    }
    assert_eq!(st(&wcs), [(1, WcStatus::Success)]);
    assert_eq!(&b.mem.snapshot()[..200 * 1024], &data[..]);
    assert_eq!(sim.engines[0].counters().retransmit_timeouts, 0);
}
