//! Raw receive packets per second through the verbs API — a RAW_PACKET `rverbs::Qp`
//! with 101 flow rules, posted receive buffers in an `Mr`, completions polled from an
//! `rverbs::Cq` and each buffer re-posted — against a bare `AF_PACKET` reader (one
//! `recv` per frame, no steering) on the same veth interface, same offered load,
//! alternating rounds in one run. Root only (creates two namespaces and a veth pair).
//!
//! Usage: `cargo run --release -p rverbs --example raw_qp_pps -- [seconds] [rounds]`
//! (defaults 2 and 3); `bench/raw_pps.sh` measures the `rverbs-raw` layer alone.

use rverbs::flow::attr::{FlowAttr, FlowSpec};
use rverbs::{
    AccessFlags, ConnectOpts, Context, OpenOptions, PeerInfo, QpCap, QpInitAttr, QpType, Wc,
    WcStatus,
};
use rverbs_raw::netns::VethPair;
use rverbs_raw::RawPort;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLOTS: usize = 4096;
const SLOT: usize = 128;

fn frame(seq: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x08, 0x00];
    let udp_len = 8 + 18u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(20 + udp_len).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(64, 0xab);
    f
}

fn sender(port: RawPort, stop: Arc<AtomicBool>) -> u64 {
    let frames: Vec<Vec<u8>> = (0..256).map(frame).collect();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for f in &frames {
            if port.send(f).is_ok() {
                n += 1;
            }
        }
    }
    n
}

fn round(pair: &VethPair, secs: f64, verbs: bool) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let if_b = pair.if_b.clone();
    let (stop2, got2) = (stop.clone(), got.clone());
    let rx = if verbs {
        let ctx = VethPair::in_ns(&pair.ns_b, move || {
            Context::open_with(
                rverbs::device(None).expect("loopback device"),
                &OpenOptions {
                    raw_interface: Some(if_b),
                    ..Default::default()
                },
            )
            .expect("raw context")
        });
        std::thread::spawn(move || {
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(SLOTS as u32).unwrap();
            let mr = pd.reg_mr(SLOTS * SLOT, AccessFlags::LOCAL_WRITE).unwrap();
            let qp = pd
                .create_qp(&QpInitAttr::new(QpType::RawPacket, &cq).cap(QpCap {
                    max_send_wr: 1,
                    max_recv_wr: SLOTS as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                }))
                .unwrap();
            let nobody = PeerInfo {
                qpn: 0,
                psn: 0,
                gid: rverbs::Gid::ZERO,
            };
            qp.connect(&nobody, &ConnectOpts::default()).unwrap();
            for i in 0..SLOTS {
                qp.post_recv(i as u64, &[mr.slice(i * SLOT..(i + 1) * SLOT)])
                    .unwrap();
            }
            // 100 rules that do not match, the real one at the lowest priority.
            let mut flows = Vec::new();
            for i in 0..100u16 {
                let a = FlowAttr::normal(
                    i % 15,
                    vec![
                        FlowSpec::ipv4_dst(Ipv4Addr::new(10, 9, (i >> 8) as u8, i as u8)),
                        FlowSpec::udp_dst(Some(i + 1)),
                    ],
                );
                flows.push(qp.create_flow(&a).unwrap());
            }
            flows.push(
                qp.create_flow(&FlowAttr::normal(
                    15,
                    vec![
                        FlowSpec::ipv4_dst(Ipv4Addr::new(10, 0, 0, 2)),
                        FlowSpec::udp_dst(Some(4791)),
                    ],
                ))
                .unwrap(),
            );
            let mut wcs = [Wc::default(); 64];
            while !stop2.load(Ordering::Relaxed) {
                let n = cq.poll_wait(&mut wcs, Duration::from_millis(20)).unwrap();
                for wc in &wcs[..n] {
                    if wc.status == WcStatus::Success {
                        got2.fetch_add(1, Ordering::Relaxed);
                    }
                    let i = wc.wr_id as usize;
                    qp.post_recv(wc.wr_id, &[mr.slice(i * SLOT..(i + 1) * SLOT)])
                        .unwrap();
                }
            }
        })
    } else {
        let port = VethPair::in_ns(&pair.ns_b, move || RawPort::open(&if_b).expect("port"));
        port.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let _ = port.set_recv_buffer_size(4 << 20);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 9220];
            while !stop2.load(Ordering::Relaxed) {
                if port.recv(&mut buf).is_ok() {
                    got2.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    // Let the receiver set up before offering load.
    std::thread::sleep(Duration::from_millis(300));
    let if_a = pair.if_a.clone();
    let tx_port = VethPair::in_ns(&pair.ns_a, move || RawPort::open(&if_a).expect("sender"));
    let stop_tx = stop.clone();
    let tx = std::thread::spawn(move || sender(tx_port, stop_tx));
    std::thread::sleep(Duration::from_millis(200));
    let (g0, t0) = (got.load(Ordering::Relaxed), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (g1, dt) = (got.load(Ordering::Relaxed), t0.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    tx.join().unwrap();
    rx.join().unwrap();
    (g1 - g0) as f64 / dt
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let Some(pair) = VethPair::new() else {
        std::process::exit(0);
    };
    println!("raw receive on veth, 64-byte frames, {secs} s x {rounds} rounds");
    println!("{:>5} {:>12} {:>16}", "round", "bare pps", "verbs QP pps");
    let (mut bare, mut verbs) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let b = round(&pair, secs, false);
        let v = round(&pair, secs, true);
        println!("{r:>5} {b:>12.0} {v:>16.0}");
        bare.push(b);
        verbs.push(v);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let (b, v) = (med(&mut bare), med(&mut verbs));
    println!(
        "median: bare {b:.0} pps; RAW_PACKET rverbs::Qp {v:.0} pps ({:.2}x bare)",
        v / b
    );
}
