//! RC under loss, duplication, reordering and corruption.

mod common;
use common::*;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;

fn run(link: LinkConfig, seed: u64, n: usize, max_len: usize) -> Result<(), String> {
    run_in(Sim::new(2, seed % 2 == 0, link, seed), seed, n, max_len).map(|_| ())
}

/// `n` random SENDs, WRITEs, READs and atomics of up to `max_len` bytes from engine 0
/// to engine 1 of `sim`; checks every completion and the received data.
fn run_in(mut sim: Sim, seed: u64, n: usize, max_len: usize) -> Result<Sim, String> {
    let o = PairOpts {
        mem_len: 1 << 22,
        timeout: 8,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    let src = pattern(1 << 20, seed as u8);
    fill(&a, 0, &src);
    fill(&b, 2 << 20, &pattern(1 << 20, seed as u8 ^ 0x5a));
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut expect_recv = Vec::new();
    for i in 0..n {
        let len = (next() % max_len as u64) as u32;
        let off = next() % ((1 << 20) - u64::from(len));
        let kind = next() % 4;
        let mut w;
        match kind {
            0 => {
                sim.engines[1]
                    .post_recv(
                        b.qpn,
                        RecvWr {
                            wr_id: i as u64,
                            sg_list: vec![sge(&b, (1 << 20) + off, len)].into(),
                        },
                        sim.now,
                    )
                    .unwrap();
                w = wr(i as u64, WrOpcode::Send, vec![sge(&a, off, len)]);
                expect_recv.push((i as u64, off, len));
            }
            1 => {
                w = wr(i as u64, WrOpcode::RdmaWrite, vec![sge(&a, off, len)]);
                w.remote_addr = b.base + (3 << 20) + off;
                w.rkey = b.keys.rkey;
            }
            2 => {
                w = wr(
                    i as u64,
                    WrOpcode::RdmaRead,
                    vec![sge(&a, (1 << 20) + off, len)],
                );
                w.remote_addr = b.base + (2 << 20) + off;
                w.rkey = b.keys.rkey;
            }
            _ => {
                w = wr(
                    i as u64,
                    WrOpcode::AtomicFetchAndAdd,
                    vec![sge(&a, (3 << 20) + 8 * i as u64, 8)],
                );
                w.remote_addr = b.base + (1 << 21) - 8;
                w.rkey = b.keys.rkey;
                w.compare_add = 1;
            }
        }
        sim.engines[0]
            .post_send(a.qpn, w, sim.now)
            .map_err(|e| e.to_string())?;
    }
    let wcs = wait_wcs(&mut sim, &a, n, 600 * SEC);
    if wcs.len() != n {
        return Err(format!(
            "{} of {n} send completions; state {:?}; {:?}",
            wcs.len(),
            sim.engines[0].qp_state(a.qpn),
            sim.engines[0].counters()
        ));
    }
    for (i, wc) in wcs.iter().enumerate() {
        if wc.wr_id != i as u64 || wc.status != WcStatus::Success {
            return Err(format!("completion {i}: {wc:?}"));
        }
    }
    let rwcs = wait_wcs(&mut sim, &b, expect_recv.len(), 10 * SEC);
    if rwcs.len() != expect_recv.len() {
        return Err(format!(
            "{} of {} receive completions",
            rwcs.len(),
            expect_recv.len()
        ));
    }
    let bm = b.mem.snapshot();
    for (wc, (id, off, len)) in rwcs.iter().zip(&expect_recv) {
        if wc.wr_id != *id || wc.byte_len != *len || wc.status != WcStatus::Success {
            return Err(format!("recv {wc:?} expected id {id} len {len}"));
        }
        let (off, len) = (*off as usize, *len as usize);
        if bm[(1 << 20) + off..(1 << 20) + off + len] != src[off..off + len] {
            return Err(format!("recv {id}: data differs"));
        }
    }
    Ok(sim)
}

/// 5 % loss, 2 % duplicates, 5 % reordered, 1 % corrupted.
fn lossy_link() -> LinkConfig {
    LinkConfig {
        loss: 0.05,
        dup: 0.02,
        reorder: 0.05,
        corrupt: 0.01,
        ..Default::default()
    }
}

/// Two engines made from `base` on the [`lossy_link`], IPv6 for even seeds.
fn lossy_sim(seed: u64, base: Config) -> Sim {
    Sim::with_config(2, seed % 2 == 0, lossy_link(), seed, base)
}

#[test]
fn clean_mix() {
    run(LinkConfig::default(), 1, 300, 9000).unwrap();
}

#[test]
fn lossy_mix() {
    for seed in 1..6 {
        let link = lossy_link();
        run(link, seed, 200, 9000).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[test]
fn heavy_loss() {
    for seed in 1..4 {
        let link = LinkConfig {
            loss: 0.2,
            dup: 0.05,
            reorder: 0.1,
            corrupt: 0.02,
            ..Default::default()
        };
        run(link, seed, 100, 5000).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

/// The engines as the `rverbs` device runs them: payloads of 1 KiB and more stay in
/// their memory regions until the driver sends them (`Config::lend_payloads`), which
/// the simulator plays (`Sim::with_config`). Under loss, go-back-N rebuilds lent
/// packets (requests and READ responses) from the regions again, and every byte still
/// arrives.
#[test]
fn payloads_left_in_their_regions_survive_loss_and_retransmission() {
    for seed in 1..5 {
        let base = Config {
            sender_fills_icrc: true,
            lend_payloads: true,
            ..Config::default()
        };
        let sim = run_in(lossy_sim(seed, base), seed, 150, 9000)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let (a, b) = (sim.engines[0].counters(), sim.engines[1].counters());
        // Both sides lent (requests from A, READ responses from B); A went back to
        // resend, B answered repeated requests again (READs from its region anew).
        assert!(a.tx_payloads_in_place > 100, "seed {seed}: {a:?}");
        assert!(b.tx_payloads_in_place > 10, "seed {seed}: {b:?}");
        assert!(a.retransmitted_packets > 0, "seed {seed}: {a:?}");
        assert!(b.rx_duplicate_requests > 0, "seed {seed}: {b:?}");
        assert!(
            sim.stats.corrupted > 0 && sim.stats.lost > 0,
            "seed {seed}: {:?}",
            sim.stats
        );
    }
}

/// A long READ with pieces (`Config::read_piece_psns`) is asked for one window at a
/// time: each request's RETH covers at most the piece, the next goes once the piece
/// before is answered, so the responder never has more than a window of responses
/// in flight; the data arrives whole.
/// The same window and pieces set for the one QP (`Engine::set_qp_window`) on
/// engines configured for whole READs.
#[test]
fn long_reads_go_in_pieces_that_fit_the_window() {
    let piecewise = Config {
        max_unacked_psns: 32,
        read_piece_psns: 32,
        ..Config::default()
    };
    read_in_pieces(
        Sim::with_config(2, false, LinkConfig::default(), 21, piecewise),
        None,
    );
    read_in_pieces(
        Sim::new(2, false, LinkConfig::default(), 21),
        Some((32, 32)),
    );
}

/// Per-QP windows are clamped as the engine's are, and can be dropped again.
#[test]
fn a_qp_window_is_clamped_and_can_be_dropped() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 22);
    let (a, _) = pair(&mut sim, &PairOpts::default());
    let e = &mut sim.engines[0];
    assert_eq!(e.qp_window(a.qpn), Some((128, 0)));
    // Down to MIN_QP_WINDOW (a driver's share of a small peer buffer), not the
    // engine's 16-PSN floor.
    e.set_qp_window(a.qpn, Some((2, 100))).unwrap();
    assert_eq!(e.qp_window(a.qpn), Some((4, 4)));
    e.set_qp_window(a.qpn, Some((9, 100))).unwrap();
    assert_eq!(e.qp_window(a.qpn), Some((9, 9)));
    e.set_qp_window(a.qpn, Some((78, 0))).unwrap();
    assert_eq!(e.qp_window(a.qpn), Some((78, 0)));
    e.set_qp_window(a.qpn, None).unwrap();
    assert_eq!(e.qp_window(a.qpn), Some((128, 0)));
    assert!(e.set_qp_window(a.qpn + 1000, None).is_err());
    assert_eq!(e.qp_window(a.qpn + 1000), None);
    // The peer a window is about: the connected QP's destination GID.
    assert!(e.qp_dgid(a.qpn).is_some());
    assert_eq!(e.qp_dgid(a.qpn + 1000), None);
}

/// A 4-PSN window (one QP's share of a small peer buffer among many) still moves
/// everything: a 100-packet WRITE and a 100-packet READ go in bursts of at most four
/// packets, each burst answered before the next, and arrive whole.
#[test]
fn a_four_psn_window_moves_data_in_bursts_of_four() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 23);
    let (a, b) = pair(&mut sim, &read_opts());
    sim.engines[0].set_qp_window(a.qpn, Some((4, 4))).unwrap();
    let len = 100 * 1024;
    let src = pattern(len, 3);
    fill(&a, 0, &src);
    post_at(&mut sim, &a, &b, WrOpcode::RdmaWrite, 1, (0, len), 0);
    let back_src = pattern(len, 9);
    fill(&b, len, &back_src);
    post_at(
        &mut sim,
        &a,
        &b,
        WrOpcode::RdmaRead,
        2,
        (len, len),
        len as u64,
    );
    let mut rounds = 0;
    loop {
        let out = sent(&mut sim, 0, 0);
        for t in &out {
            sim.engines[1].handle_datagram(0, &t.as_received());
        }
        let back = sent(&mut sim, 1, 0);
        // WRITE packets, or READ responses to pieces of the window.
        assert!(
            out.len() <= 4 && back.len() <= 4,
            "{} / {}",
            out.len(),
            back.len()
        );
        for t in &back {
            sim.engines[0].handle_datagram(0, &t.as_received());
        }
        if out.is_empty() && back.is_empty() {
            break;
        }
        rounds += 1;
        assert!(rounds < 200, "no progress");
    }
    let wcs = drain(&mut sim, &a);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(b.mem.snapshot()[..len], src[..]);
    assert_eq!(a.mem.snapshot()[len..2 * len], back_src[..]);
    assert!(rounds >= 50, "{rounds} rounds for 200 packets in fours");
    assert_eq!(sim.engines[0].counters().retransmitted_packets, 0);
}

/// A READ that started under a wider window but had not asked for its first piece
/// when the window narrowed (another QP came to share the peer's buffer) asks in
/// pieces of the narrower window: a first piece wider than the window would never
/// fit it, and the READ would wait until its retries ran out.
#[test]
fn a_read_held_back_when_the_window_narrows_asks_in_narrower_pieces() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 24);
    let (a, b) = pair(&mut sim, &read_opts());
    sim.engines[0].set_qp_window(a.qpn, Some((32, 32))).unwrap();
    // 20 WRITE packets first: the READ behind them starts, but its 32-PSN first piece
    // waits until they are acknowledged.
    post_at(&mut sim, &a, &b, WrOpcode::RdmaWrite, 1, (0, 20 * 1024), 0);
    let len = 100 * 1024;
    let src = pattern(len, 5);
    fill(&b, 0x40000, &src);
    post_at(&mut sim, &a, &b, WrOpcode::RdmaRead, 2, (0, len), 0x40000);
    let first = sent(&mut sim, 0, 0);
    assert_eq!(first.len(), 20, "the WRITE only");
    sim.engines[0].set_qp_window(a.qpn, Some((8, 8))).unwrap();
    let mut pending = first;
    let mut asked = Vec::new();
    for _ in 0..100 {
        for t in &pending {
            let p = rverbs_wire::packet::Packet::new_checked(&t.payload[..]).unwrap();
            if let Some(r) = p.reth().filter(|_| p.bth().opcode().0 == 0x0c) {
                asked.push(r.dma_len());
            }
            sim.engines[1].handle_datagram(0, &t.as_received());
        }
        for t in &sent(&mut sim, 1, 0) {
            sim.engines[0].handle_datagram(0, &t.as_received());
        }
        pending = sent(&mut sim, 0, 0);
        if pending.is_empty() {
            break;
        }
    }
    let wcs = drain(&mut sim, &a);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(a.mem.snapshot()[..len], src[..]);
    // 100 KiB in pieces of the 8-PSN window (MTU 1024): twelve of 8 KiB, one of 4.
    let want: Vec<u32> = (0..13).map(|i| if i < 12 { 8192 } else { 4096 }).collect();
    assert_eq!(asked, want);
}

/// The other way: a window that widens between two pieces (a sharer left) gives the
/// READ's later pieces the wider size, from the end of the piece answered.
#[test]
fn a_read_asks_in_wider_pieces_when_the_window_widens() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 25);
    let (a, b) = pair(&mut sim, &read_opts());
    sim.engines[0].set_qp_window(a.qpn, Some((8, 8))).unwrap();
    let len = 100 * 1024;
    let src = pattern(len, 6);
    fill(&b, 0x40000, &src);
    post_at(&mut sim, &a, &b, WrOpcode::RdmaRead, 1, (0, len), 0x40000);
    let mut asked = Vec::new();
    for round in 0..100 {
        let out = sent(&mut sim, 0, 0);
        if out.is_empty() {
            break;
        }
        for t in &out {
            let p = rverbs_wire::packet::Packet::new_checked(&t.payload[..]).unwrap();
            asked.extend(p.reth().map(|r| r.dma_len()));
            sim.engines[1].handle_datagram(0, &t.as_received());
        }
        for t in &sent(&mut sim, 1, 0) {
            sim.engines[0].handle_datagram(0, &t.as_received());
        }
        if round == 0 {
            sim.engines[0].set_qp_window(a.qpn, Some((32, 32))).unwrap();
        }
    }
    let wcs = drain(&mut sim, &a);
    assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::Success));
    assert_eq!(a.mem.snapshot()[..len], src[..]);
    // 8 KiB, then up to the next 32-PSN boundary, then 32 KiB pieces, then the rest.
    assert_eq!(asked, [8192, 24 * 1024, 32 * 1024, 32 * 1024, 4096]);
}

/// Posts on `a` a signaled RDMA `op` (WRITE or READ) between `a`'s region at `local`
/// (offset, length) and offset `remote` of `b`'s.
fn post_at(
    sim: &mut Sim,
    a: &End,
    b: &End,
    op: WrOpcode,
    wr_id: u64,
    local: (usize, usize),
    remote: u64,
) {
    let mut w = wr(wr_id, op, vec![sge(a, local.0 as u64, local.1 as u32)]);
    w.remote_addr = b.base + remote;
    w.rkey = b.keys.rkey;
    sim.engines[0].post_send(a.qpn, w, sim.now).unwrap();
}

/// Everything engine `i` of `sim` sends at `now`.
fn sent(sim: &mut Sim, i: usize, now: Nanos) -> Vec<Transmit> {
    std::iter::from_fn(|| sim.engines[i].poll_transmit(now)).collect()
}

/// The pair of the READ-piece tests: 1 MiB regions, engines made from `cfg`.
fn read_pair(cfg: Config, seed: u64) -> (Sim, End, End) {
    let mut sim = Sim::with_config(2, false, LinkConfig::default(), seed, cfg);
    let (a, b) = pair(&mut sim, &read_opts());
    (sim, a, b)
}

fn read_opts() -> PairOpts {
    PairOpts {
        mem_len: 1 << 20,
        ..Default::default()
    }
}

/// Posts on `a` a signaled READ of `len` bytes from the start of `b`'s region into
/// the start of `a`'s.
fn post_read(sim: &mut Sim, a: &End, b: &End, wr_id: u64, len: usize) {
    let mut w = wr(wr_id, WrOpcode::RdmaRead, vec![sge(a, 0, len as u32)]);
    w.remote_addr = b.base;
    w.rkey = b.keys.rkey;
    sim.engines[0].post_send(a.qpn, w, sim.now).unwrap();
}

fn read_in_pieces(mut sim: Sim, qp_window: Option<(u32, u32)>) {
    let (a, b) = pair(&mut sim, &read_opts());
    if qp_window.is_some() {
        sim.engines[0].set_qp_window(a.qpn, qp_window).unwrap();
    }
    let len = 200 * 1024 + 100; // 201 response packets of MTU 1024: 7 pieces
    let src = pattern(len, 7);
    fill(&b, 0, &src);
    post_read(&mut sim, &a, &b, 1, len);
    let mut requests = Vec::new();
    for _ in 0..20 {
        let out = sent(&mut sim, 0, 0);
        for t in &out {
            let p = rverbs_wire::packet::Packet::new_checked(&t.payload[..]).unwrap();
            let r = p.reth().expect("only READ requests");
            requests.push((r.va() - b.base, r.dma_len()));
            sim.engines[1].handle_datagram(0, &t.as_received());
        }
        let back = sent(&mut sim, 1, 0);
        assert!(back.len() <= 32, "a burst of {} responses", back.len());
        for t in &back {
            sim.engines[0].handle_datagram(0, &t.as_received());
        }
        if out.is_empty() && back.is_empty() {
            break;
        }
    }
    let piece = 32 * 1024;
    let want: Vec<(u64, u32)> = (0..7)
        .map(|i| (i * piece as u64, piece.min(len - i as usize * piece) as u32))
        .collect();
    assert_eq!(requests, want);
    let wcs = drain(&mut sim, &a);
    assert_eq!(wcs.len(), 1);
    assert_eq!(
        (wcs[0].status, wcs[0].byte_len),
        (WcStatus::Success, len as u32)
    );
    assert_eq!(a.mem.snapshot()[..len], src[..]);
    assert_eq!(sim.engines[0].counters().retransmitted_packets, 0);
}

/// The READ requests of `a`'s engine in `out`: (offset into `b`'s region, length).
fn read_requests(out: &[Transmit], b: &End) -> Vec<(u64, u32)> {
    out.iter()
        .filter_map(|t| {
            let p = rverbs_wire::packet::Packet::new_checked(&t.payload[..]).ok()?;
            let r = p.reth()?;
            Some((r.va() - b.base, r.dma_len()))
        })
        .collect()
}

/// A READ of 100 packets in pieces of 32 (window 32) whose piece loses response 5:
/// the requester asks again from the gap to the piece's end; if the late response
/// turns up before that request leaves (the rest of the piece kept), it asks for the
/// next piece instead of nothing (it had stalled until the retransmit timer). And
/// with pieces smaller than the window, one piece is out at a time.
#[test]
fn a_read_piece_retry_and_a_late_response() {
    for late in [false, true] {
        let cfg = Config {
            max_unacked_psns: 32,
            read_piece_psns: 32,
            ..Config::default()
        };
        let (mut sim, a, b) = read_pair(cfg, 23);
        let len = 100 * 1024;
        fill(&b, 0, &pattern(len, 9));
        post_read(&mut sim, &a, &b, 1, len);
        let out = sent(&mut sim, 0, 0);
        assert_eq!(read_requests(&out, &b), [(0, 32 * 1024)]);
        for t in &out {
            sim.engines[1].handle_datagram(0, &t.as_received());
        }
        let back = sent(&mut sim, 1, 0);
        assert_eq!(back.len(), 32);
        for (i, t) in back.iter().enumerate() {
            if i != 5 {
                sim.engines[0].handle_datagram(0, &t.as_received());
            }
        }
        // The gap stays open past the reordering window: a retry from it is due.
        let mut now = 0;
        while let Some(at) = sim.engines[0].poll_timeout() {
            now = at;
            sim.engines[0].handle_timeout(now);
            if sim.engines[0].counters().retransmitted_packets > 0 {
                break;
            }
        }
        assert!(sim.engines[0].counters().retransmitted_packets > 0);
        if late {
            sim.engines[0].handle_datagram(now, &back[5].as_received());
        }
        let out = sent(&mut sim, 0, now);
        let want = if late {
            // Piece 1 is whole: piece 2.
            (32 * 1024, 32 * 1024)
        } else {
            // From the gap to the end of piece 1.
            (5 * 1024, 27 * 1024)
        };
        assert_eq!(read_requests(&out, &b), [want], "late {late}");
        for t in &out {
            sim.engines[1].handle_datagram(now, &t.as_received());
        }
        sim.now = now;
        let wcs = wait_wcs(&mut sim, &a, 1, SEC);
        assert_eq!(wcs.len(), 1, "late {late}");
        assert_eq!(wcs[0].status, WcStatus::Success);
        assert_eq!(a.mem.snapshot()[..len], pattern(len, 9)[..]);
    }

    // Pieces of 16 in a window of 64: still one request out at a time.
    let cfg = Config {
        max_unacked_psns: 64,
        read_piece_psns: 16,
        ..Config::default()
    };
    let (mut sim, a, b) = read_pair(cfg, 24);
    post_read(&mut sim, &a, &b, 1, 64 * 1024);
    let mut rounds = Vec::new();
    loop {
        let out = sent(&mut sim, 0, 0);
        if out.is_empty() {
            break;
        }
        rounds.push(read_requests(&out, &b));
        for t in &out {
            sim.engines[1].handle_datagram(0, &t.as_received());
        }
        let back = sent(&mut sim, 1, 0);
        for t in &back {
            sim.engines[0].handle_datagram(0, &t.as_received());
        }
    }
    let want: Vec<Vec<(u64, u32)>> = (0..4).map(|i| vec![(i * 16 * 1024, 16 * 1024)]).collect();
    assert_eq!(rounds, want);
    assert_eq!(drain(&mut sim, &a).len(), 1);

    // An unsignaled WRITE that asked for no ACK holds the READ's first piece back
    // (its responses would not fit the window): the requester asks for that ACK at
    // once (the WRITE again with AckReq, a nudge) instead of after the nudge timer.
    let cfg = Config {
        max_unacked_psns: 32,
        read_piece_psns: 32,
        ..Config::default()
    };
    let (mut sim, a, b) = read_pair(cfg, 25);
    let mut w = wr(2, WrOpcode::RdmaWrite, vec![sge(&a, 0, 100)]);
    w.remote_addr = b.base;
    w.rkey = b.keys.rkey;
    w.flags = SendFlags::default();
    sim.engines[0].post_send(a.qpn, w, 0).unwrap();
    post_read(&mut sim, &a, &b, 3, 64 * 1024);
    let out = sent(&mut sim, 0, 0);
    // BTH byte 8, bit 7: AckReq; bytes 9..12: the PSN.
    let asked: Vec<(bool, &[u8])> = out
        .iter()
        .map(|t| (t.payload[8] & 0x80 != 0, &t.payload[9..12]))
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!((asked[0].0, asked[1].0), (false, true));
    assert_eq!(asked[0].1, asked[1].1, "the same WRITE again");
    for t in &out {
        sim.engines[1].handle_datagram(0, &t.as_received());
    }
    let acks = sent(&mut sim, 1, 0);
    for t in &acks {
        sim.engines[0].handle_datagram(0, &t.as_received());
    }
    let out = sent(&mut sim, 0, 0);
    assert_eq!(read_requests(&out, &b), [(0, 32 * 1024)]);
}

/// Small requester windows (a peer with a small receive buffer) pace their ACK
/// requests, and READs in pieces of a window, so that mixed traffic under loss
/// still completes.
#[test]
fn small_windows_and_read_pieces_survive_loss() {
    for (seed, window, piece) in [
        (11, 16, 0),
        (12, 16, 16),
        (13, 40, 40),
        (14, 64, 0),
        (15, 24, 24),
    ] {
        let base = Config {
            max_unacked_psns: window,
            read_piece_psns: piece,
            ..Config::default()
        };
        run_in(lossy_sim(seed, base), seed, 150, 40_000)
            .unwrap_or_else(|e| panic!("seed {seed}, window {window}, pieces {piece}: {e}"));
    }
}

/// Regression: `retransmitted_packets` added, on every retry, every packet of every
/// started message from the gap on, sent or not (a 1 MiB WRITE with one lost packet
/// counted 1024 while only the 128-PSN window had gone out), so on a reordering link
/// it exceeded the packets sent. Go-back-N resends what was sent (IBTA 9.7.5.2.5).
#[test]
fn retransmitted_packets_counts_only_resent() {
    let mut sim = Sim::new(2, false, LinkConfig::default(), 9);
    let o = PairOpts {
        mem_len: 1 << 21,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(&a, 0, 1 << 20)]);
    w.remote_addr = b.base;
    w.rkey = b.keys.rkey;
    sim.engines[0].post_send(a.qpn, w, 0).unwrap();
    let deliver = |sim: &mut Sim, to: usize, t: &Transmit| {
        sim.engines[to].handle_datagram(0, &t.as_received());
    };
    // The window goes out; the first packet is lost.
    let mut window = Vec::new();
    while let Some(t) = sim.engines[0].poll_transmit(0) {
        window.push(t);
    }
    assert_eq!(window.len(), MAX_UNACKED_PSNS as usize);
    for t in &window[1..] {
        deliver(&mut sim, 1, t);
    }
    // One NAK sequence error comes back and the requester goes back to the gap.
    let mut naks = Vec::new();
    while let Some(t) = sim.engines[1].poll_transmit(0) {
        naks.push(t);
    }
    assert_eq!(naks.len(), 1);
    deliver(&mut sim, 0, &naks[0]);
    assert_eq!(sim.engines[0].counters().rx_nak_seq, 1);
    assert_eq!(
        sim.engines[0].counters().retransmitted_packets,
        u64::from(MAX_UNACKED_PSNS)
    );
    let wcs = wait_wcs(&mut sim, &a, 1, SEC);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let c = sim.engines[0].counters();
    assert!(c.retransmitted_packets <= c.tx_packets, "{c:?}");
}

/// A requester allowed a larger window (`Config::max_unacked_psns`) sends that many
/// PSNs before it waits for an ACK, asks for ACKs at rxe's pace all the same (every 16
/// packets at a message end once 32 are out), and the stream completes. A smaller
/// window (for a peer whose receive buffer holds fewer packets) asks in proportion,
/// at the latest every half window, so it never fills before an answer is on its way;
/// windows under 16 PSNs are raised to 16.
#[test]
fn the_window_sets_how_far_a_stream_runs_ahead_and_the_ack_pace_follows_small_ones() {
    let mut asked = Vec::new();
    let windows = [
        (128, 128),
        (512, 512),
        (0, 16),
        (48, 48),
        (100, 100),
        (16, 16),
    ];
    for (window, expect) in windows {
        let mut sim = Sim::new(2, false, LinkConfig::default(), 9);
        sim.engines[0] = Engine::new(Config {
            gids: vec![net::ip_to_gid(std::net::Ipv4Addr::new(10, 0, 0, 1).into())],
            seed: 9 * 31 + 1,
            max_unacked_psns: window,
            ..Config::default()
        });
        let o = PairOpts {
            mem_len: 1 << 21,
            ..Default::default()
        };
        let (a, b) = pair(&mut sim, &o);
        // 64 WRITEs of 16 packets (MTU 1024), only the last signaled: a bulk stream.
        for i in 0..64u64 {
            let mut w = wr(i, WrOpcode::RdmaWrite, vec![sge(&a, i << 14, 1 << 14)]);
            w.remote_addr = b.base + (i << 14);
            w.rkey = b.keys.rkey;
            if i < 63 {
                w.flags = SendFlags::default();
            }
            sim.engines[0].post_send(a.qpn, w, 0).unwrap();
        }
        let mut out = Vec::new();
        while let Some(t) = sim.engines[0].poll_transmit(0) {
            out.push(t);
        }
        assert_eq!(out.len(), expect, "window {window}");
        // BTH byte 8, bit 7: AckReq.
        asked.push(
            (0..out.len())
                .filter(|&k| out[k].payload[8] & 0x80 != 0)
                .collect::<Vec<_>>(),
        );
        for t in &out {
            sim.engines[1].handle_datagram(0, &t.as_received());
        }
        let wcs = wait_wcs(&mut sim, &a, 1, SEC);
        assert_eq!(wcs.len(), 1, "window {window}");
        assert_eq!(wcs[0].status, WcStatus::Success, "window {window}");
        let c = sim.engines[0].counters();
        assert_eq!(c.retransmitted_packets, 0, "window {window}: {c:?}");
    }
    // The same packets ask with either large window (the last packets of messages 2,
    // 3, ...), and the larger one keeps asking at that pace.
    assert_eq!(asked[0], [31, 47, 63, 79, 95, 111, 127]);
    assert_eq!(asked[1][..7], asked[0][..]);
    assert_eq!(asked[1].len(), (512 - 32) / 16 + 1);
    // Smaller windows: a quarter out and an eighth since the last request (every
    // message end of 16 packets from the first on); a 16-PSN window, whose first
    // message fills it, asks in its middle too (every half window).
    assert_eq!(asked[2], [7, 15]);
    assert_eq!(asked[3], [15, 31, 47]);
    assert_eq!(asked[4], [31, 47, 63, 79, 95]);
    assert_eq!(asked[5], [7, 15]);
}
