//! Goodput under loss, in virtual time: what `bench/loss.sh` measures between two
//! processes, here on the simulated network, so that a slower recovery is a diff, not
//! a noisy figure. Two workloads, as the bench's:
//!
//! - the 100 KB RC ping-pong (`rverbs pingpong rc -s 100000`): each iteration sends
//!   100,000 bytes one way as a SEND and back as a SEND (40 iterations with
//!   go-back-N, 100 with selective repeat, whose first iterations, before an RTT
//!   sample, should not dominate its figure);
//! - 64 KiB WRITE bandwidth (`rverbs perf write bw`): 600 signaled WRITEs, 32 in
//!   flight.
//!
//! The link has 10 µs one-way delay and 1 GB/s (MTU 1024: 64 to 98 packets a
//! message), loss on every datagram in both directions (requests, ACKs, reports,
//! probes), and the engines run the soft device's configuration (the loss window on).
//! Every message must arrive whole. The table (time per iteration or Gb/s, the
//! ratio to the clean run, packets sent again, tail-loss probes, retransmit
//! timeouts) is compared with `tests/snapshots/loss_goodput.txt`; to accept a new one:
//!
//! ```text
//! UPDATE_SNAPSHOTS=1 cargo test -p rverbs-engine --test loss_goodput
//! ```
//!
//! With selective repeat on both sides the issue's goals hold here: the ping-pong
//! within 1.5x the clean time per iteration at 1 % loss and within 5x at 10 %; WRITE
//! bandwidth at least 0.7x clean at 1 % and 0.2x at 10 %. Go-back-N, what a kernel
//! or NIC peer gets, is reported beside it.

mod common;
use common::*;
use rverbs_engine::sim::{LinkConfig, Sim};
use rverbs_engine::*;
use std::fmt::Write as _;

/// The ping-pong's message.
const SIZE: u32 = 100_000;
/// Ping-pong iterations, by `selective` (see the module doc).
const ITERS: [u64; 2] = [40, 100];
/// The WRITEs of the bandwidth run: size, count, how many in flight.
const WRITE: (u32, u64, u64) = (65536, 600, 32);
const SEEDS: [u64; 2] = [1, 2];
const LOSS: [f64; 4] = [0.0, 0.01, 0.05, 0.10];

#[derive(Clone, Copy, PartialEq)]
enum Work {
    PingPong,
    WriteBw,
}

struct Run {
    /// Virtual µs per ping-pong iteration, or Gb/s of WRITE payload.
    figure: f64,
    retransmitted: u64,
    probes: u64,
    timeouts: u64,
}

/// Two engines with the soft device's recovery configuration, one connected RC pair.
fn setup(loss: f64, selective: bool, seed: u64) -> (Sim, End, End) {
    let link = LinkConfig {
        loss,
        delay_ns: 10_000,
        ns_per_byte: 1,
        ..Default::default()
    };
    let cfg = Config {
        // As the soft device (`rverbs` soft/open.rs).
        loss_window: true,
        ..Config::default()
    };
    let mut sim = Sim::with_config(2, false, link, seed, cfg);
    for e in sim.engines.iter_mut() {
        e.set_selective_repeat(selective);
    }
    let o = PairOpts {
        mem_len: 1 << 21,
        // `rverbs pingpong` and `rverbs perf`'s default local ACK timeout (14: 67 ms).
        timeout: 14,
        ..Default::default()
    };
    let (a, b) = pair(&mut sim, &o);
    (sim, a, b)
}

fn counters(sim: &Sim, figure: f64) -> Run {
    let (c0, c1) = (sim.engines[0].counters(), sim.engines[1].counters());
    Run {
        figure,
        retransmitted: c0.retransmitted_packets + c1.retransmitted_packets,
        probes: c0.tail_loss_probes + c1.tail_loss_probes,
        timeouts: c0.retransmit_timeouts + c1.retransmit_timeouts,
    }
}

/// The ping-pong; `Err` names the first message that did not arrive whole within 20
/// virtual seconds.
fn pingpong(loss: f64, selective: bool, seed: u64) -> Result<Run, String> {
    let iters = ITERS[usize::from(selective)];
    let (mut sim, a, b) = setup(loss, selective, seed);
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
            let sent = wait_wcs(&mut sim, from, 1, 20 * SEC);
            if sent.len() != 1 || sent[0].status != WcStatus::Success {
                return Err(format!("iteration {i}, send of {}: {sent:?}", from.engine));
            }
        }
    }
    let per_iter_us = (sim.now - t0) as f64 / iters as f64 / 1000.0;
    Ok(counters(&sim, per_iter_us))
}

/// WRITE bandwidth; `Err` when a WRITE fails or the stream stalls for 20 virtual
/// seconds. Each WRITE carries its index in its first bytes, checked at the end.
fn write_bw(loss: f64, selective: bool, seed: u64) -> Result<Run, String> {
    let (size, total, depth) = WRITE;
    let (mut sim, a, b) = setup(loss, selective, seed);
    let slots = 16u64;
    let t0 = sim.now;
    let (mut posted, mut done) = (0u64, 0u64);
    while done < total {
        while posted < total && posted - done < depth {
            let now = sim.now;
            // The source slot holds the WRITE's index (the last one to use each
            // destination slot is checked below).
            let src = (posted % slots) * u64::from(size);
            fill(&a, src as usize, &posted.to_le_bytes());
            let mut w = wr(posted, WrOpcode::RdmaWrite, vec![sge(&a, src, size)]);
            w.flags = SendFlags::SIGNALED;
            w.remote_addr = b.base + src;
            w.rkey = b.keys.rkey;
            sim.engines[0]
                .post_send(a.qpn, w, now)
                .map_err(|e| format!("post_send: {e:?}"))?;
            posted += 1;
        }
        let got = wait_wcs(&mut sim, &a, 1, 20 * SEC);
        if got.is_empty() {
            return Err(format!("no completion after {done} WRITEs"));
        }
        if let Some(w) = got.iter().find(|w| w.status != WcStatus::Success) {
            return Err(format!("WRITE {}: {:?}", w.wr_id, w.status));
        }
        done += got.len() as u64;
    }
    let secs_ns = (sim.now - t0) as f64;
    let m = b.mem.snapshot();
    for slot in 0..slots {
        let last = (total - 1) - ((total - 1 - slot) % slots);
        let at = (slot * u64::from(size)) as usize;
        if m[at..at + 8] != last.to_le_bytes() {
            return Err(format!("slot {slot}: not WRITE {last}'s bytes"));
        }
    }
    let gbps = (total * u64::from(size)) as f64 * 8.0 / secs_ns;
    Ok(counters(&sim, gbps))
}

#[test]
fn goodput_under_loss_in_virtual_time() {
    let mut table = String::from(
        "# Goodput under loss, virtual time (tests/loss_goodput.rs). Regenerate: UPDATE_SNAPSHOTS=1 cargo test -p rverbs-engine --test loss_goodput\n\
         # pingpong: virtual µs per 100 KB iteration; write: Gb/s of 64 KiB WRITEs; ratio: to the clean run (time: higher is worse; Gb/s: lower is worse)\n\
         # retx: packets sent again; tlp: tail-loss probes; tmo: retransmit timeouts (both sides)\n\
         # work     mode       loss seed |     figure  ratio |   retx   tlp  tmo\n",
    );
    let mut failures = Vec::new();
    // The worst ratio to the clean run, by (work, selective, loss %), made "higher is
    // worse" for both workloads.
    let mut worst = std::collections::BTreeMap::new();
    for (work, name) in [(Work::PingPong, "pingpong"), (Work::WriteBw, "write")] {
        let run = |loss, selective, seed| match work {
            Work::PingPong => pingpong(loss, selective, seed),
            Work::WriteBw => write_bw(loss, selective, seed),
        };
        for selective in [false, true] {
            let mode = if selective { "selective" } else { "go-back-N" };
            let clean = run(0.0, selective, 1).expect("the clean run").figure;
            for loss in LOSS {
                for seed in SEEDS {
                    match run(loss, selective, seed) {
                        Ok(r) => {
                            let ratio = r.figure / clean;
                            writeln!(
                                table,
                                "{name:<8} {mode:<10} {loss:>5.2} {seed:>4} | {:>10.2} {ratio:>6.2} | {:>6} {:>5} {:>4}",
                                r.figure, r.retransmitted, r.probes, r.timeouts
                            )
                            .unwrap();
                            let slow = if work == Work::PingPong {
                                ratio
                            } else {
                                1.0 / ratio
                            };
                            let key = (name, selective, (loss * 100.0).round() as u32);
                            let w = worst.entry(key).or_insert(0.0f64);
                            *w = w.max(slow);
                        }
                        Err(e) => {
                            failures.push(format!("{name} {mode} loss {loss} seed {seed}: {e}"))
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The issue's goals, for selective repeat.
    for (name, loss, most) in [
        ("pingpong", 1, 1.5),
        ("pingpong", 10, 5.0),
        ("write", 1, 1.0 / 0.7),
        ("write", 10, 1.0 / 0.2),
    ] {
        let w = worst[&(name, true, loss)];
        assert!(
            w <= most,
            "{name} at {loss} % loss: {w:.2}x slower than clean\n{table}"
        );
    }
    let path = format!(
        "{}/tests/snapshots/loss_goodput.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &table).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        want == table,
        "the goodput table differs from {path} (rerun with UPDATE_SNAPSHOTS=1 to accept):\nwant:\n{want}\ngot:\n{table}"
    );
}
