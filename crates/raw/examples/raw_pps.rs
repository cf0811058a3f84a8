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

use rverbs_flow::attr::{FlowAttr, FlowSpec};
use rverbs_raw::netns::VethPair;
use rverbs_raw::{RawDevice, RawPort, RxMode};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Offers frames until `stop`; returns frames sent.
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

fn round(pair: &VethPair, secs: f64, steered: Option<RxMode>) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let if_b = pair.if_b.clone();
    // Receiver first.
    let (rx_thread, dev) = if let Some(mode) = steered {
        let dev = VethPair::in_ns(&pair.ns_b, move || {
            RawDevice::open_with(&if_b, mode).expect("device")
        });
        let qp = dev.create_qp(1 << 16);
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
            flows.push(qp.create_flow(&a).expect("flow"));
        }
        flows.push(
            qp.create_flow(&FlowAttr::normal(
                15,
                vec![
                    FlowSpec::ipv4_dst(Ipv4Addr::new(10, 0, 0, 2)),
                    FlowSpec::udp_dst(Some(4791)),
                ],
            ))
            .expect("flow"),
        );
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
        let port = VethPair::in_ns(&pair.ns_b, move || RawPort::open(&if_b).expect("port"));
        port.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let _ = port.set_recv_buffer_size(4 << 20);
        let (stop2, got2) = (stop.clone(), got.clone());
        let t = std::thread::spawn(move || {
            let mut buf = vec![0u8; 9220];
            while !stop2.load(Ordering::Relaxed) {
                if port.recv(&mut buf).is_ok() {
                    got2.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        (t, None)
    };
    let if_a = pair.if_a.clone();
    let tx_port = VethPair::in_ns(&pair.ns_a, move || RawPort::open(&if_a).expect("sender"));
    let stop_tx = stop.clone();
    let tx = std::thread::spawn(move || sender(tx_port, stop_tx));
    // Warm up, then measure a window.
    std::thread::sleep(Duration::from_millis(200));
    let (g0, t0) = (got.load(Ordering::Relaxed), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (g1, dt) = (got.load(Ordering::Relaxed), t0.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    let sent = tx.join().unwrap();
    rx_thread.join().unwrap();
    drop(dev);
    ((g1 - g0) as f64 / dt, sent as f64 / (dt + 0.2))
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
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let (b, g, p) = (med(&mut bare), med(&mut ring), med(&mut plain));
    println!(
        "median: bare {b:.0} pps; steered ring {g:.0} pps ({:.2}x bare); steered plain {p:.0} pps ({:.2}x bare)",
        g / b,
        p / b
    );
}
