//! What the two raw receive-rate examples (`rverbs-raw`'s `raw_pps`, `rverbs`'
//! `raw_qp_pps`) share, so that they offer the same load and steer with the same rules:
//! the 64-byte UDP frames, the sender, the 101 flow rules, the bare `AF_PACKET` reader
//! they are compared with, and the measured window.

use rverbs_flow::attr::{FlowAttr, FlowSpec};
use rverbs_raw::netns::VethPair;
use rverbs_raw::RawPort;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A 64-byte IPv4/UDP frame 10.0.0.1 → 10.0.0.2, source port `seq`, destination 4791.
pub fn frame(seq: u16) -> Vec<u8> {
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
pub fn sender(port: RawPort, stop: Arc<AtomicBool>) -> u64 {
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

/// 100 rules that do not match, then the real one at the lowest priority.
pub fn rules() -> Vec<FlowAttr> {
    let mut rules: Vec<FlowAttr> = (0..100u16)
        .map(|i| {
            FlowAttr::normal(
                i % 15,
                vec![
                    FlowSpec::ipv4_dst(Ipv4Addr::new(10, 9, (i >> 8) as u8, i as u8)),
                    FlowSpec::udp_dst(Some(i + 1)),
                ],
            )
        })
        .collect();
    rules.push(FlowAttr::normal(
        15,
        vec![
            FlowSpec::ipv4_dst(Ipv4Addr::new(10, 0, 0, 2)),
            FlowSpec::udp_dst(Some(4791)),
        ],
    ));
    rules
}

/// The baseline receiver: a bare `AF_PACKET` socket on B's veth end, one `recv` per
/// frame, counting into `got` until `stop`.
pub fn bare_receiver(
    pair: &VethPair,
    stop: Arc<AtomicBool>,
    got: Arc<AtomicU64>,
) -> JoinHandle<()> {
    let if_b = pair.if_b.clone();
    let port = VethPair::in_ns(&pair.ns_b, move || RawPort::open(&if_b).expect("port"));
    port.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let _ = port.set_recv_buffer_size(4 << 20);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 9220];
        while !stop.load(Ordering::Relaxed) {
            if port.recv(&mut buf).is_ok() {
                got.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

/// Offers load from namespace A, warms up 200 ms, then counts `got` over `secs`;
/// sets `stop` and returns (frames received per second, frames sent, window seconds).
pub fn measure(
    pair: &VethPair,
    secs: f64,
    stop: &Arc<AtomicBool>,
    got: &AtomicU64,
) -> (f64, u64, f64) {
    let if_a = pair.if_a.clone();
    let tx_port = VethPair::in_ns(&pair.ns_a, move || RawPort::open(&if_a).expect("sender"));
    let stop_tx = stop.clone();
    let tx = std::thread::spawn(move || sender(tx_port, stop_tx));
    std::thread::sleep(Duration::from_millis(200));
    let (g0, t0) = (got.load(Ordering::Relaxed), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (g1, dt) = (got.load(Ordering::Relaxed), t0.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    let sent = tx.join().unwrap();
    ((g1 - g0) as f64 / dt, sent, dt)
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
