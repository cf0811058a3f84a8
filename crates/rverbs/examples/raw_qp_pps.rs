//! Raw receive packets per second through the verbs API — a RAW_PACKET `rverbs::Qp`
//! with 101 flow rules, posted receive buffers in an `Mr`, completions polled from an
//! `rverbs::Cq` and each buffer re-posted — against a bare `AF_PACKET` reader (one
//! `recv` per frame, no steering) on the same veth interface, same offered load,
//! alternating rounds in one run. Root only (creates two namespaces and a veth pair).
//!
//! Usage: `cargo run --release -p rverbs --example raw_qp_pps -- [seconds] [rounds] [v2]`
//! (defaults 2 and 3); `bench/raw_pps.sh` measures the `rverbs-raw` layer alone. With
//! `v2` the receiving interface gets an address (10.0.0.2/24) and the context opens
//! the soft device of that interface, so RoCE v2 (and ARP) run on the raw path beside
//! the RAW_PACKET QP, as in a raw-mode application that also speaks RoCE.

// The frames, sender, rules and bare reader of `rverbs-raw`'s `raw_pps`, so that both
// examples measure the same thing.
#[path = "../../raw/examples/common/pps.rs"]
mod pps;

use pps::{bare_receiver, measure, median, rules};
use rverbs::{
    AccessFlags, ConnectOpts, Context, OpenOptions, PeerInfo, QpCap, QpInitAttr, QpType, Wc,
    WcStatus,
};
use rverbs_raw::netns::VethPair;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const SLOTS: usize = 4096;
const SLOT: usize = 128;

fn round(pair: &VethPair, secs: f64, verbs: bool, v2: bool) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let if_b = pair.if_b.clone();
    let (stop2, got2) = (stop.clone(), got.clone());
    let rx = if verbs {
        let ctx = VethPair::in_ns(&pair.ns_b, move || {
            let dev = if v2 {
                rverbs::devices()
                    .expect("devices")
                    .into_iter()
                    .find(|d| d.ifname == if_b)
                    .expect("a soft device on the veth end")
            } else {
                rverbs::device(None).expect("loopback device")
            };
            Context::open_with(
                dev,
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
            let _flows: Vec<_> = rules().iter().map(|a| qp.create_flow(a).unwrap()).collect();
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
        bare_receiver(pair, stop2, got2)
    };
    // Let the receiver set up before offering load.
    std::thread::sleep(Duration::from_millis(300));
    let (pps, _, _) = measure(pair, secs, &stop, &got);
    rx.join().unwrap();
    pps
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let v2 = args.next().as_deref() == Some("v2");
    let Some(pair) = VethPair::new() else {
        std::process::exit(0);
    };
    if v2 {
        let ok = std::process::Command::new("ip")
            .args([
                "-n",
                &pair.ns_b,
                "addr",
                "add",
                "10.0.0.2/24",
                "dev",
                &pair.if_b,
            ])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "adding 10.0.0.2/24 to {}", pair.if_b);
    }
    println!(
        "raw receive on veth, 64-byte frames, {secs} s x {rounds} rounds{}",
        if v2 {
            ", context on the interface's own device (RoCE v2 on the raw path)"
        } else {
            ""
        }
    );
    println!("{:>5} {:>12} {:>16}", "round", "bare pps", "verbs QP pps");
    let (mut bare, mut verbs) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let b = round(&pair, secs, false, v2);
        let v = round(&pair, secs, true, v2);
        println!("{r:>5} {b:>12.0} {v:>16.0}");
        bare.push(b);
        verbs.push(v);
    }
    let (b, v) = (median(&mut bare), median(&mut verbs));
    println!(
        "median: bare {b:.0} pps; RAW_PACKET rverbs::Qp {v:.0} pps ({:.2}x bare)",
        v / b
    );
}
