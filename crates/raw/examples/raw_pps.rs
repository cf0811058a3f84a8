//! Raw receive packets per second on a veth pair: the flow-steered raw device (frames
//! classified against 101 rules and queued on a RAW_PACKET QP that a consumer drains),
//! reading with the TPACKET_V3 ring and with plain recvmsg, against a bare AF_PACKET
//! reader (one `recv` per frame, no steering) on the same interface, same offered load,
//! same run.
//!
//! A sender in namespace A offers 64-byte UDP frames as fast as one thread can send them;
//! the receiver in namespace B counts what it got per second. Rounds alternate between
//! the two receivers. Root only (it creates the namespaces); run via `bench/raw_pps.sh`.
//!
//! Usage: `raw_pps [seconds-per-round] [rounds]` (defaults 2 and 3).

#[path = "common/pps.rs"]
mod pps;

use pps::{bare_receiver, measure, median, rules};
use rverbs_raw::netns::VethPair;
use rverbs_raw::{RawDevice, RxMode};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn round(pair: &VethPair, secs: f64, steered: Option<RxMode>) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    // Receiver first.
    let (rx_thread, dev) = if let Some(mode) = steered {
        let if_b = pair.if_b.clone();
        let dev = VethPair::in_ns(&pair.ns_b, move || {
            RawDevice::open_with(&if_b, mode).expect("device")
        });
        let qp = dev.create_qp(1 << 16);
        let flows: Vec<_> = rules()
            .iter()
            .map(|a| qp.create_flow(a).expect("flow"))
            .collect();
        let (stop2, got2) = (stop.clone(), got.clone());
        let t = std::thread::spawn(move || {
            let _flows = flows;
            while !stop2.load(Ordering::Relaxed) {
                if qp.recv(Duration::from_millis(20)).is_some() {
                    got2.fetch_add(1, Ordering::Relaxed);
                    got2.fetch_add(qp.drain().len() as u64, Ordering::Relaxed);
                }
            }
        });
        (t, Some(dev))
    } else {
        (bare_receiver(pair, stop.clone(), got.clone()), None)
    };
    let (pps, sent, dt) = measure(pair, secs, &stop, &got);
    rx_thread.join().unwrap();
    drop(dev);
    (pps, sent as f64 / (dt + 0.2))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let Some(pair) = VethPair::new() else {
        std::process::exit(0);
    };
    println!("raw receive on veth, 64-byte frames, {secs} s x {rounds} rounds");
    println!(
        "{:>5} {:>12} {:>14} {:>14} {:>12}",
        "round", "bare pps", "ring pps", "plain pps", "offered pps"
    );
    let (mut bare, mut ring, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let (b, ob) = round(&pair, secs, None);
        let (g, og) = round(&pair, secs, Some(RxMode::Ring));
        let (p, op) = round(&pair, secs, Some(RxMode::Plain));
        let offered = (ob + og + op) / 3.0;
        println!("{r:>5} {b:>12.0} {g:>14.0} {p:>14.0} {offered:>12.0}");
        bare.push(b);
        ring.push(g);
        plain.push(p);
    }
    let (b, g, p) = (median(&mut bare), median(&mut ring), median(&mut plain));
    println!(
        "median: bare {b:.0} pps; steered ring {g:.0} pps ({:.2}x bare); steered plain {p:.0} pps ({:.2}x bare)",
        g / b,
        p / b
    );
}
