//! Engine data-path benchmarks (see `README.md` beside this file).
//!
//! * `rc/{send,write}/mtu{1024,4096}/{64,4096,65536}`: one RC message through the whole
//!   requester → responder → completer path of two engines wired back to back in-process
//!   (no loss, no delay, IPv4 with the ID given as 0), including the post, the ACK and
//!   the completions. Throughput in message bytes.
//! * `memcpy/{64,4096,65536}`: a plain copy of the same bytes, the baseline.
//! * `icrc/{fill,verify,recover_id}/{n}`: the per-packet ICRC work on a SEND ONLY
//!   packet with `n` payload bytes: computing it for a transmit, checking it with the
//!   IPv4 ID known (`ipv4_id: Some(0)`), and checking it with the ID recovered from the
//!   ICRC (`ipv4_id: None`).
//!
//! After the criterion groups a summary prints, per RC case, messages/s, packets/s
//! (both directions, ACKs included) and bytes/s from its own short timed loop, with the
//! ratio to a memcpy of the same bytes timed in the same loop. It is skipped under
//! `--profile-time`; `cargo bench -p rverbs-engine --bench engine -- summary` runs it
//! alone (the filter matches no criterion benchmark).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rverbs_engine::modify::{AhAttr, ModifyLimits, QpAttr, QpAttrMask, QpCap};
use rverbs_engine::*;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [64, 4096, 65536];
const MTUS: [Mtu; 2] = [Mtu::M1024, Mtu::M4096];
const NOW: Nanos = 1_000_000;
/// Virtual time per round of deliveries: the clock moves as it would on a real host
/// (timers never fire: nothing is lost and `handle_timeout` is never called).
const TICK: Nanos = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    Write,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
        }
    }
}

/// One side: engine, CQ, QP, MR.
struct Side {
    engine: Engine,
    cq: CqId,
    qpn: u32,
    keys: MrKeys,
    base: u64,
}

/// Two engines with one connected RC QP each, wired back to back.
struct Pair {
    a: Side,
    b: Side,
    wcs: Vec<Wc>,
    now: Nanos,
}

fn addr(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1))
}

fn side(i: usize, mtu: Mtu, mem_len: usize) -> Side {
    let mut engine = Engine::new(Config {
        gids: vec![net::ip_to_gid(addr(i))],
        limits: ModifyLimits {
            active_mtu: mtu,
            ..ModifyLimits::default()
        },
        seed: 0x1234 + i as u64,
        ..Config::default()
    });
    let pd = engine.alloc_pd();
    let cq = engine.create_cq(1024).expect("create_cq");
    let base = 0x10_0000 * (i as u64 + 1);
    let keys = engine
        .reg_mr(
            pd,
            Arc::new(VecMemory::zeroed(mem_len)),
            base,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .expect("reg_mr");
    let qpn = engine
        .create_qp(QpInit {
            pd,
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 256,
                max_recv_wr: 256,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .expect("create_qp");
    Side {
        engine,
        cq,
        qpn,
        keys,
        base,
    }
}

fn connect(s: &mut Side, me: usize, peer_qpn: u32, mtu: Mtu) {
    let psn = |i: usize| 0x10_0000 * (i as u32 + 1);
    let av = AddressVector {
        dgid: net::ip_to_gid(addr(1 - me)),
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    let e = &mut s.engine;
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        ..Default::default()
    };
    let mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    e.modify_qp(s.qpn, &init, mask, NOW).expect("INIT");
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: mtu,
        dest_qp_num: peer_qpn,
        rq_psn: psn(1 - me),
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
        ah_attr: Some(AhAttr { av, port_num: 1 }),
        ..Default::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    e.modify_qp(s.qpn, &rtr, mask, NOW).expect("RTR");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: psn(me),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
        ..Default::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    e.modify_qp(s.qpn, &rts, mask, NOW).expect("RTS");
}

/// Moves every transmit of `from` into `to`; returns how many.
fn deliver(from: &mut Engine, to: &mut Engine, now: Nanos) -> u64 {
    let mut n = 0;
    while let Some(t) = from.poll_transmit(now) {
        to.handle_datagram(now, &t.as_received());
        n += 1;
    }
    n
}

impl Pair {
    fn new(mtu: Mtu, max_len: usize) -> Pair {
        let mut a = side(0, mtu, max_len);
        let mut b = side(1, mtu, max_len);
        let (qa, qb) = (a.qpn, b.qpn);
        connect(&mut a, 0, qb, mtu);
        connect(&mut b, 1, qa, mtu);
        let wc = Wc::default();
        Pair {
            a,
            b,
            wcs: vec![wc; 16],
            now: NOW,
        }
    }

    /// One `len`-byte message from A to B, run to completion. Returns the number of
    /// datagrams exchanged.
    fn message(&mut self, op: Op, len: usize) -> u64 {
        let (a, b) = (&mut self.a, &mut self.b);
        self.now += TICK;
        if op == Op::Send {
            b.engine
                .post_recv(
                    b.qpn,
                    RecvWr {
                        wr_id: 2,
                        sg_list: vec![Sge {
                            addr: b.base,
                            length: len as u32,
                            lkey: b.keys.lkey,
                        }]
                        .into(),
                    },
                    self.now,
                )
                .expect("post_recv");
        }
        let sg = vec![Sge {
            addr: a.base,
            length: len as u32,
            lkey: a.keys.lkey,
        }];
        let wr = match op {
            Op::Send => SendWr::send(1, sg),
            Op::Write => SendWr {
                opcode: WrOpcode::RdmaWrite,
                remote_addr: b.base,
                rkey: b.keys.rkey,
                ..SendWr::send(1, sg)
            },
        };
        a.engine.post_send(a.qpn, wr, self.now).expect("post_send");
        let mut packets = 0;
        loop {
            let now = self.now;
            let n = deliver(&mut a.engine, &mut b.engine, now)
                + deliver(&mut b.engine, &mut a.engine, now);
            self.now += TICK;
            if n == 0 {
                break;
            }
            packets += n;
        }
        let got = a.engine.poll_cq(a.cq, &mut self.wcs).expect("poll_cq");
        assert!(got == 1 && self.wcs[0].status == WcStatus::Success);
        if op == Op::Send {
            let got = b.engine.poll_cq(b.cq, &mut self.wcs).expect("poll_cq");
            assert!(got == 1 && self.wcs[0].status == WcStatus::Success);
        }
        packets
    }
}

fn mtu_bytes(m: Mtu) -> usize {
    match m {
        Mtu::M256 => 256,
        Mtu::M512 => 512,
        Mtu::M1024 => 1024,
        Mtu::M2048 => 2048,
        Mtu::M4096 => 4096,
    }
}

fn rc(c: &mut Criterion) {
    for op in [Op::Send, Op::Write] {
        for mtu in MTUS {
            let mut g = c.benchmark_group(format!("rc/{}/mtu{}", op.name(), mtu_bytes(mtu)));
            for len in SIZES {
                let mut p = Pair::new(mtu, len);
                g.throughput(Throughput::Bytes(len as u64));
                g.bench_with_input(BenchmarkId::from_parameter(len), &len, |bch, &len| {
                    bch.iter(|| p.message(op, black_box(len)))
                });
            }
            g.finish();
        }
    }
}

fn memcpy(c: &mut Criterion) {
    let mut g = c.benchmark_group("memcpy");
    for len in SIZES {
        let src = vec![0x5au8; len];
        let mut dst = vec![0u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::from_parameter(len), &len, |bch, _| {
            bch.iter(|| dst.copy_from_slice(black_box(&src)))
        });
    }
    g.finish();
}

/// A SEND ONLY packet (BTH, `n` payload bytes, ICRC) from 10.0.0.1 to 10.0.0.2.
fn send_only(n: usize) -> Vec<u8> {
    let mut p = vec![0u8; 12 + n + 4];
    p[0] = 0x04; // RC SEND ONLY
    p[1] = 0x40; // migreq
    p[2] = 0xff; // P_Key
    p[3] = 0xff;
    for (i, b) in p[12..12 + n].iter_mut().enumerate() {
        *b = i as u8;
    }
    net::fill_icrc(addr(0), addr(1), 0xc000, &mut p);
    p
}

fn icrc(c: &mut Criterion) {
    let mut g = c.benchmark_group("icrc");
    for n in [64usize, 1024, 4096] {
        let mut p = send_only(n);
        g.throughput(Throughput::Bytes(p.len() as u64));
        g.bench_with_input(BenchmarkId::new("fill", n), &n, |bch, _| {
            bch.iter(|| net::fill_icrc(addr(0), addr(1), 0xc000, black_box(&mut p)))
        });
        for (name, id) in [("verify", Some(0)), ("recover_id", None)] {
            let d = Datagram {
                src: addr(0),
                dst: addr(1),
                src_port: 0xc000,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
                ipv4_id: id,
                roce_v1: false,
                icrc_checked: false,
                payload: &p,
            };
            assert!(net::icrc_ok(&d));
            g.bench_with_input(BenchmarkId::new(name, n), &n, |bch, _| {
                bch.iter(|| net::icrc_ok(black_box(&d)))
            });
        }
    }
    g.finish();
}

/// Messages/s, packets/s and bytes/s per RC case from a short timed loop, next to a
/// memcpy of the same bytes timed the same way.
fn summary(_: &mut Criterion) {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list" || a == "--profile-time") {
        return;
    }
    let quick = args.iter().any(|a| a == "--test");
    let budget = Duration::from_millis(if quick { 1 } else { 300 });
    /// Runs `f` in batches of at least ~50 µs for `budget`; returns the seconds per
    /// call of the fastest batch (the figure least disturbed by other processes on a
    /// shared machine) and what one call returns.
    fn timed(budget: Duration, mut f: impl FnMut() -> u64) -> (f64, u64) {
        let per_call = f();
        let mut batch = 1u32;
        loop {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            if t.elapsed() >= Duration::from_micros(50) || batch >= 1 << 20 {
                break;
            }
            batch *= 2;
        }
        let start = Instant::now();
        let mut best = f64::INFINITY;
        while best.is_infinite() || start.elapsed() < budget {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            best = best.min(t.elapsed().as_secs_f64() / f64::from(batch));
        }
        (best, per_call)
    }
    println!();
    println!(
        "summary (fastest ~50 us batch in {budget:?} per case; packets = datagrams both ways)"
    );
    println!(
        "{:<24} {:>8} {:>12} {:>12} {:>12} {:>10}",
        "case", "pkts/msg", "msg/s", "pkts/s", "MB/s", "x memcpy"
    );
    for op in [Op::Send, Op::Write] {
        for mtu in MTUS {
            for len in SIZES {
                let mut p = Pair::new(mtu, len);
                p.message(op, len);
                let (secs, pkts) = timed(budget, || p.message(op, len));
                let src = vec![0x5au8; len];
                let mut dst = vec![0u8; len];
                let (copy_secs, _) = timed(budget, || {
                    dst.copy_from_slice(black_box(&src));
                    black_box(&dst);
                    0
                });
                let bps = len as f64 / secs;
                println!(
                    "{:<24} {:>8} {:>12.0} {:>12.0} {:>12.1} {:>10.4}",
                    format!("rc/{}/mtu{}/{}", op.name(), mtu_bytes(mtu), len),
                    pkts,
                    1.0 / secs,
                    pkts as f64 / secs,
                    bps / 1e6,
                    copy_secs / secs
                );
            }
        }
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500))
}

criterion_group! {
    name = benches;
    config = config();
    targets = rc, memcpy, icrc, summary
}
criterion_main!(benches);
