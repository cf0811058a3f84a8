//! The per-message cost of the soft device's software, without the scheduler: one
//! thread plays both ends of an 8-byte RC SEND ping-pong between two contexts on the
//! loopback device, busy-polling each CQ (which receives on the polling thread), and,
//! as the baseline measured in the same run, the same ping-pong between two plain UDP
//! sockets (send, poll with `MSG_DONTWAIT` until it arrives, answer).
//!
//! Both ends run on one core, so a round trip is two kernel loopback passes plus the
//! software on both sides: `rverbs - udp` per round trip is twice what rverbs adds to
//! one hop over the kernel's own UDP path (building, checking and acknowledging
//! packets, the engine, the CQ). Profile it with `perf record` on the bench binary.
//!
//! ```text
//! cargo bench -p rverbs --bench pingpong            # 200000 round trips per figure
//! cargo bench -p rverbs --bench pingpong -- 50000   # another count
//! PINGPONG_ONLY=rverbs cargo bench -p rverbs --bench pingpong   # one side, to profile
//! PINGPONG_SIGNAL=32 cargo bench -p rverbs --bench pingpong  # signal 1 send in 32
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use common::{connected_pair, End};
use rverbs::*;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

const SIZE: usize = 8;

/// Polls `e`'s CQ until a receive completes; send completions are only counted.
fn await_recv(e: &End, wcs: &mut [Wc]) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let n = e.cq.poll(wcs)?;
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            if wc.opcode == WcOpcode::Recv {
                return Ok(());
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no answer in 10 s");
    }
}

/// Posts an inline SEND, signaled once in `every` (perftest's completion moderation).
fn post(e: &End, wr_id: u64, every: u64) -> Result<()> {
    let r = SendRequest::send(wr_id, &[e.mr.slice(0..SIZE)]).inline();
    e.qp.post_send(&r.signaled(wr_id % every == 0))
}

fn repost(e: &End) -> Result<()> {
    e.qp.post_recv(0, &[e.mr.slice(SIZE..2 * SIZE)])
}

/// `n` round trips between two RC QPs; returns ns per round trip.
fn rverbs_rtt(n: u64) -> Result<f64> {
    let (a, b) = connected_pair(&device(None)?, 2 * SIZE, 2 * SIZE);
    for e in [&a, &b] {
        for _ in 0..16 {
            repost(e)?;
        }
    }
    let mut wcs = vec![Wc::default(); 16];
    let every: u64 = std::env::var("PINGPONG_SIGNAL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut one = |i: u64| -> Result<()> {
        post(&a, i, every)?;
        await_recv(&b, &mut wcs)?;
        repost(&b)?;
        post(&b, i, every)?;
        await_recv(&a, &mut wcs)?;
        repost(&a)
    };
    for i in 0..n / 10 {
        one(i)?;
    }
    let t = Instant::now();
    for i in 0..n {
        one(i)?;
    }
    Ok(t.elapsed().as_nanos() as f64 / n as f64)
}

/// `n` round trips between two UDP sockets on 127.0.0.1; returns ns per round trip.
fn udp_rtt(n: u64) -> std::io::Result<f64> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    a.connect(b.local_addr()?)?;
    b.connect(a.local_addr()?)?;
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    // A RoCE v2 SEND ONLY of 8 bytes: BTH, payload, ICRC.
    let msg = [0u8; 12 + SIZE + 4];
    let mut buf = [0u8; 64];
    let spin = |s: &UdpSocket, buf: &mut [u8]| -> std::io::Result<()> {
        loop {
            match s.recv(buf) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    };
    let mut one = || -> std::io::Result<()> {
        a.send(&msg)?;
        spin(&b, &mut buf)?;
        b.send(&msg)?;
        spin(&a, &mut buf)
    };
    for _ in 0..n / 10 {
        one()?;
    }
    let t = Instant::now();
    for _ in 0..n {
        one()?;
    }
    Ok(t.elapsed().as_nanos() as f64 / n as f64)
}

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    match std::env::var("PINGPONG_ONLY").as_deref() {
        Ok("rverbs") => {
            let r = rverbs_rtt(n).expect("rverbs ping-pong");
            return println!("pingpong {SIZE} B, one thread: rverbs RC SEND {r:.0} ns/RTT");
        }
        Ok("udp") => {
            let u = udp_rtt(n).expect("udp ping-pong");
            return println!("pingpong {SIZE} B, one thread: UDP {u:.0} ns/RTT");
        }
        _ => {}
    }
    // Alternate so both see the same machine state; report the medians.
    let (mut r, mut u) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        u.push(udp_rtt(n).expect("udp ping-pong"));
        r.push(rverbs_rtt(n).expect("rverbs ping-pong"));
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (r, u) = (med(&mut r), med(&mut u));
    println!(
        "pingpong {SIZE} B, one thread, {n} round trips x 3 (medians): \
         rverbs RC SEND {:.0} ns/RTT, UDP {:.0} ns/RTT, ratio {:.2}, \
         software per hop {:.0} ns",
        r,
        u,
        r / u,
        (r - u) / 2.0
    );
}
