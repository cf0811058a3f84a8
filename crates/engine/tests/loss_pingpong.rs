//! The 100 KB RC ping-pong under loss, in virtual time: what `bench/loss.sh` measures
//! between two processes (`rverbs pingpong rc -s 100000`), here on the simulated
//! network, so that a slower recovery is a diff, not a noisy figure.
//!
//! Each iteration (40 with go-back-N, 100 with selective repeat) sends 100,000 bytes one way as a SEND and back as a SEND, over a link
//! of 10 µs one-way delay and 1 GB/s (MTU 1024: 98 packets a message), with loss on
//! every datagram in both directions (requests, ACKs, reports, probes). Every message
//! must arrive whole. The table (time per iteration, its ratio to the clean run,
//! packets sent again, tail-loss probes, retransmit timeouts) is compared with
//! `tests/snapshots/loss_pingpong.txt`; to accept a new one:
//!
//! ```text
//! UPDATE_SNAPSHOTS=1 cargo test -p rverbs-engine --test loss_pingpong
//! ```
//!
//! With selective repeat on both sides the issue's goals hold here: within 1.5x the
//! clean time per iteration at 1 % loss and within 5x at 10 %.

mod common;
use common::*;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;
use std::fmt::Write as _;

const SIZE: u32 = 100_000;
/// Iterations per run: fewer for go-back-N, whose lossy runs resend whole windows
/// (the simulation's time goes there), more for selective repeat, whose first
/// iterations (before an RTT sample) should not dominate its figure.
const ITERS: [u64; 2] = [40, 100];
const SEEDS: [u64; 3] = [1, 2, 3];
const LOSS: [f64; 4] = [0.0, 0.01, 0.05, 0.10];

struct Run {
    /// Virtual µs per iteration.
    per_iter_us: f64,
    retransmitted: u64,
    probes: u64,
    timeouts: u64,
}

/// `ITERS` ping-pongs of `SIZE` bytes; `Err` names the first message that did not
/// arrive whole within 20 virtual seconds.
fn pingpong(loss: f64, selective: bool, seed: u64) -> Result<Run, String> {
    let iters = ITERS[usize::from(selective)];
    let link = LinkConfig {
        loss,
        delay_ns: 10_000,
        ns_per_byte: 1,
        ..Default::default()
    };
    let mut sim = Sim::new(2, false, link, seed);
    for e in sim.engines.iter_mut() {
        e.set_selective_repeat(selective);
    }
    let o = PairOpts {
        mem_len: 1 << 18,
        // `rverbs pingpong`'s default local ACK timeout (14: 67 ms).
        timeout: 14,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    // Each side sends from 128 KiB on and receives at 0.
    let out = 128 * 1024;
    fill(&a, out as usize, &pattern(SIZE as usize, 1));
    fill(&b, out as usize, &pattern(SIZE as usize, 2));
    let t0 = sim.now;
    for i in 0..iters {
        for (from, to) in [(&a, &b), (&b, &a)] {
            let now = sim.now;
            post_recv1(&mut sim, to, i, 0, SIZE, now);
            let mut w = wr(i, WrOpcode::Send, vec![sge(from, out, SIZE)]);
            w.flags = SendFlags::SIGNALED;
            sim.engines[from.engine]
                .post_send(from.qpn, w, now)
                .map_err(|e| format!("post_send: {e:?}"))?;
            let got = wait_wcs(&mut sim, to, 1, 20 * SEC);
            let ok = got.len() == 1
                && got[0].status == WcStatus::Success
                && got[0].byte_len == SIZE
                && to.mem.snapshot()[..SIZE as usize]
                    == pattern(SIZE as usize, if from.engine == 0 { 1 } else { 2 })[..];
            if !ok {
                return Err(format!("iteration {i}, engine {}: {got:?}", to.engine));
            }
            // The sender's completion, before the next message reuses nothing.
            let sent = wait_wcs(&mut sim, from, 1, 20 * SEC);
            if sent.len() != 1 || sent[0].status != WcStatus::Success {
                return Err(format!("iteration {i}, send of {}: {sent:?}", from.engine));
            }
        }
    }
    let per_iter_us = (sim.now - t0) as f64 / iters as f64 / 1000.0;
    let (c0, c1) = (sim.engines[0].counters(), sim.engines[1].counters());
    Ok(Run {
        per_iter_us,
        retransmitted: c0.retransmitted_packets + c1.retransmitted_packets,
        probes: c0.tail_loss_probes + c1.tail_loss_probes,
        timeouts: c0.retransmit_timeouts + c1.retransmit_timeouts,
    })
}

#[test]
fn pingpong_under_loss_in_virtual_time() {
    let mut table = String::from(
        "# 100 KB RC ping-pong under loss, virtual time (tests/loss_pingpong.rs). Regenerate: UPDATE_SNAPSHOTS=1 cargo test -p rverbs-engine --test loss_pingpong\n\
         # us/iter: virtual µs per iteration; ratio: to the clean run; retx: packets sent again; tlp: tail-loss probes; tmo: retransmit timeouts (both sides)\n\
         # mode       loss seed |    us/iter  ratio |   retx   tlp  tmo\n",
    );
    let mut failures = Vec::new();
    let mut worst = std::collections::BTreeMap::new();
    for selective in [false, true] {
        let mode = if selective { "selective" } else { "go-back-N" };
        let clean = pingpong(0.0, selective, 1)
            .expect("the clean run")
            .per_iter_us;
        for loss in LOSS {
            for seed in SEEDS {
                match pingpong(loss, selective, seed) {
                    Ok(r) => {
                        let ratio = r.per_iter_us / clean;
                        writeln!(
                            table,
                            "{mode:<10} {loss:>5.2} {seed:>4} | {:>10.1} {ratio:>6.2} | {:>6} {:>5} {:>4}",
                            r.per_iter_us, r.retransmitted, r.probes, r.timeouts
                        )
                        .unwrap();
                        let w = worst
                            .entry((selective, (loss * 100.0) as u32))
                            .or_insert(0.0f64);
                        *w = w.max(ratio);
                    }
                    Err(e) => failures.push(format!("{mode} loss {loss} seed {seed}: {e}")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The issue's goals, for selective repeat (go-back-N is what a kernel or NIC peer
    // gets; its figures are in the table).
    assert!(
        worst[&(true, 1)] <= 1.5,
        "1 % loss: {:.2}x\n{table}",
        worst[&(true, 1)]
    );
    assert!(
        worst[&(true, 10)] <= 5.0,
        "10 % loss: {:.2}x\n{table}",
        worst[&(true, 10)]
    );
    let path = format!(
        "{}/tests/snapshots/loss_pingpong.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &table).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        want == table,
        "the ping-pong table differs from {path} (rerun with UPDATE_SNAPSHOTS=1 to accept):\nwant:\n{want}\ngot:\n{table}"
    );
}
