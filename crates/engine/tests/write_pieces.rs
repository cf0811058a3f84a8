//! `Config::write_pieces`: a multi-packet RC RDMA WRITE leaves as WRITE ONLY pieces,
//! each with a RETH for its part of the range (the `rverbs` loopback device's
//! packetization, so a WRITE rides one `UDP_SEGMENT` train). Traces driven packet by
//! packet, as in `traces.rs`.

mod common;
mod driver;
use common::*;
use driver::*;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;

fn sim_on(link: LinkConfig, seed: u64, pieces: bool) -> Sim {
    Sim::with_config(
        2,
        false,
        link,
        seed,
        Config {
            write_pieces: pieces,
            ..Config::default()
        },
    )
}

fn sim(pieces: bool) -> Sim {
    sim_on(LinkConfig::default(), 21, pieces)
}

fn opts(qp_type: QpType) -> PairOpts {
    PairOpts {
        qp_type,
        psn: [100, 900],
        ..Default::default()
    }
}

fn write(id: u64, op: WrOpcode, a: &End, len: u32, b: &End, off: u64) -> SendWr {
    let mut w = wr(id, op, vec![sge(a, 0, len)]);
    w.remote_addr = b.base + off;
    w.rkey = b.keys.rkey;
    w.flags = SendFlags::SIGNALED;
    w
}

fn post(sim: &mut Sim, e: &End, w: SendWr) {
    let now = sim.now;
    sim.engines[e.engine].post_send(e.qpn, w, now).unwrap();
}

/// A packet as (opcode, PSN, RETH va offset from the peer's base and RETH length).
type Line = (String, u32, Option<(u64, u32)>);

/// Each packet's [`Line`].
fn reths(ps: &[Pkt], base: u64) -> Vec<Line> {
    ps.iter()
        .map(|p| {
            let r = p.repr();
            (
                p.opcode().to_string(),
                p.psn(),
                r.reth.map(|r| (r.va - base, r.dma_len)),
            )
        })
        .collect()
}

/// A WRITE ONLY piece's [`Line`]: PSN, offset and length of its part of the range.
fn only(psn: u32, off: u64, len: u32) -> Line {
    ("RC_RDMA_WRITE_ONLY".to_string(), psn, Some((off, len)))
}

fn st(wcs: &[Wc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

#[test]
fn a_multi_packet_write_leaves_as_write_only_pieces_and_lands_whole() {
    let mut sim = sim(true);
    let (a, b) = pair(&mut sim, &opts(QpType::Rc));
    let data = pattern(2500, 9);
    fill(&a, 0, &data);
    post(
        &mut sim,
        &a,
        write(1, WrOpcode::RdmaWrite, &a, 2500, &b, 300),
    );
    let p = tx(&mut sim, 0);
    assert_eq!(
        reths(&p, b.base),
        [
            only(100, 300, 1024),
            only(101, 1324, 1024),
            only(102, 2348, 452),
        ]
    );
    // Equal lengths but the last: one train for a driver that batches.
    assert_eq!(p[0].t.payload.len(), p[1].t.payload.len());
    // Only the last piece asks for the ACK, as the LAST of one message would.
    let asks: Vec<bool> = p.iter().map(|p| p.packet().bth().ack_req()).collect();
    assert_eq!(asks, [false, false, true]);
    rx_all(&mut sim, &p);
    let ack = tx(&mut sim, 1);
    // The responder counts three messages.
    assert_eq!(lines(&ack), ["RC_ACKNOWLEDGE 102 ACK msn=3"]);
    rx_all(&mut sim, &ack);
    let wcs = drain(&mut sim, &a);
    assert_eq!(st(&wcs), [(1, WcStatus::Success)]);
    assert_eq!(
        (wcs[0].opcode, wcs[0].byte_len),
        (WcOpcode::RdmaWrite, 2500)
    );
    assert_eq!(&b.mem.snapshot()[300..2800], &data[..]);
    assert!(
        drain(&mut sim, &b).is_empty(),
        "a plain WRITE completes nothing at the responder"
    );
}

#[test]
fn without_the_option_or_for_uc_immediate_and_one_packet_the_wire_is_unchanged() {
    let first_last = |sim: &mut Sim, qp_type: QpType, op: WrOpcode, len: u32| {
        let (a, b) = pair(sim, &opts(qp_type));
        if op == WrOpcode::RdmaWriteWithImm {
            post_recv1(sim, &b, 5, 0, 0, 0);
        }
        let mut w = write(1, op, &a, len, &b, 0);
        w.imm_data = 0xabcd;
        post(sim, &a, w);
        let p = tx(sim, 0);
        let base = b.base;
        rx_all(sim, &p);
        (reths(&p, base), b)
    };
    let full = |op: &str, psn, reth| (op.to_string(), psn, reth);
    // The option off: FIRST/MIDDLE/LAST, one RETH for the whole message.
    let (r, _) = first_last(&mut sim(false), QpType::Rc, WrOpcode::RdmaWrite, 2500);
    assert_eq!(
        r,
        [
            full("RC_RDMA_WRITE_FIRST", 100, Some((0, 2500))),
            full("RC_RDMA_WRITE_MIDDLE", 101, None),
            full("RC_RDMA_WRITE_LAST", 102, None),
        ]
    );
    // UC: a lost piece would leave a hole in a WRITE that completes.
    let (r, _) = first_last(&mut sim(true), QpType::Uc, WrOpcode::RdmaWrite, 2500);
    assert_eq!(
        r,
        [
            full("UC_RDMA_WRITE_FIRST", 100, Some((0, 2500))),
            full("UC_RDMA_WRITE_MIDDLE", 101, None),
            full("UC_RDMA_WRITE_LAST", 102, None),
        ]
    );
    // With immediate: the responder's completion reports the RETH length.
    let mut s = sim(true);
    let (r, b) = first_last(&mut s, QpType::Rc, WrOpcode::RdmaWriteWithImm, 2500);
    assert_eq!(
        r,
        [
            full("RC_RDMA_WRITE_FIRST", 100, Some((0, 2500))),
            full("RC_RDMA_WRITE_MIDDLE", 101, None),
            full("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 102, None),
        ]
    );
    let wcs = drain(&mut s, &b);
    assert_eq!(
        (wcs.len(), wcs[0].opcode, wcs[0].byte_len, wcs[0].imm_data),
        (1, WcOpcode::RecvRdmaWithImm, 2500, 0xabcd)
    );
    // One packet: a WRITE ONLY as always.
    let (r, _) = first_last(&mut sim(true), QpType::Rc, WrOpcode::RdmaWrite, 1024);
    assert_eq!(r, [full("RC_RDMA_WRITE_ONLY", 100, Some((0, 1024)))]);
}

#[test]
fn a_lost_piece_is_resent_from_its_own_offset() {
    let mut sim = sim(true);
    let (a, b) = pair(&mut sim, &opts(QpType::Rc));
    let data = pattern(4000, 3);
    fill(&a, 0, &data);
    post(&mut sim, &a, write(1, WrOpcode::RdmaWrite, &a, 4000, &b, 0));
    let p = tx(&mut sim, 0);
    assert_eq!(p.len(), 4);
    // Lose the second piece: the responder NAKs the gap once, the requester goes back.
    rx(&mut sim, &p[0]);
    rx(&mut sim, &p[2]);
    rx(&mut sim, &p[3]);
    let nak = tx(&mut sim, 1);
    assert_eq!(lines(&nak), ["RC_ACKNOWLEDGE 101 NAK-SEQ msn=1"]);
    rx_all(&mut sim, &nak);
    let resent = tx(&mut sim, 0);
    assert_eq!(
        reths(&resent, b.base),
        [
            only(101, 1024, 1024),
            only(102, 2048, 1024),
            only(103, 3072, 928),
        ]
    );
    rx_all(&mut sim, &resent);
    let ack = tx(&mut sim, 1);
    assert_eq!(lines(&ack), ["RC_ACKNOWLEDGE 103 ACK msn=4"]);
    rx_all(&mut sim, &ack);
    assert_eq!(st(&drain(&mut sim, &a)), [(1, WcStatus::Success)]);
    assert_eq!(&b.mem.snapshot()[..4000], &data[..]);
}

#[test]
fn a_range_that_ends_inside_the_write_fails_it_at_the_first_piece_outside() {
    let mut sim = sim(true);
    let o = opts(QpType::Rc);
    let (a, b) = pair(&mut sim, &o);
    fill(&a, 0, &pattern(3000, 5));
    let before = b.mem.snapshot();
    // 3000 bytes at 2048 before the end of the peer's region: pieces 0 and 1 fit.
    let off = o.mem_len as u64 - 2048;
    post(
        &mut sim,
        &a,
        write(1, WrOpcode::RdmaWrite, &a, 3000, &b, off),
    );
    let p = tx(&mut sim, 0);
    assert_eq!(p.len(), 3);
    rx_all(&mut sim, &p);
    let nak = tx(&mut sim, 1);
    assert_eq!(lines(&nak), ["RC_ACKNOWLEDGE 102 NAK-ACC msn=2"]);
    rx_all(&mut sim, &nak);
    let wcs = drain(&mut sim, &a);
    assert_eq!(st(&wcs), [(1, WcStatus::RemAccessErr)]);
    // The pieces inside the range were written (the target of a failed WRITE is
    // undefined); nothing outside it was touched.
    let after = b.mem.snapshot();
    let off = off as usize;
    assert_eq!(&after[off..], &pattern(3000, 5)[..2048]);
    assert_eq!(&after[..off], &before[..off]);
    assert_eq!(sim.engines[0].qp_state(a.qpn), Some(QpState::Err));
}

#[test]
fn pieces_survive_a_lossy_reordering_network() {
    let link = LinkConfig {
        loss: 0.05,
        reorder: 0.05,
        dup: 0.02,
        ..LinkConfig::default()
    };
    let mut sim = sim_on(link, 7, true);
    let o = PairOpts {
        mem_len: 1 << 20,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    let data = pattern(1 << 19, 11);
    fill(&a, 0, &data);
    for i in 0..8u64 {
        let len = 1 << 16;
        let mut w = wr(i, WrOpcode::RdmaWrite, vec![sge(&a, i * len, len as u32)]);
        w.remote_addr = b.base + (1 << 19) + i * len;
        w.rkey = b.keys.rkey;
        w.flags = SendFlags::SIGNALED;
        post(&mut sim, &a, w);
    }
    let wcs = wait_wcs(&mut sim, &a, 8, 60 * SEC);
    assert_eq!(
        st(&wcs),
        (0..8).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(&b.mem.snapshot()[1 << 19..], &data[..]);
    assert!(sim.stats.lost > 0, "the network lost packets");
}
