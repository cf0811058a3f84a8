//! `rverbs demo`: a newcomer's first RDMA program. Two endpoints on the loopback soft
//! device (each its own context with its own 127.0.0.x address, in two threads' worth of
//! objects) exchange RC SEND/RECV, RDMA WRITE, RDMA READ and atomics over real RoCE v2
//! packets, check every byte, and report the speed.

use rverbs::*;
use std::io::Write;
use std::time::{Duration, Instant};

struct Side {
    ctx: Context,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn side(ctx: Context, len: usize) -> Result<Side> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4096)?;
    let mr = pd.reg_mr(len, AccessFlags::ALL)?;
    let mut attr = QpInitAttr::new(QpType::Rc, &cq);
    attr.cap.max_send_wr = 4096;
    attr.cap.max_recv_wr = 4096;
    let qp = pd.create_qp(&attr)?;
    Ok(Side { ctx, cq, mr, qp })
}

/// Waits for `n` completions on `cq`, failing on any error status.
/// Requests posted between two signaled ones: an unsignaled request holds its send
/// queue slot until a later signaled one completes, so at most this many (well under
/// the queue's 4096) are outstanding, whatever `-n` is.
const WINDOW: usize = 1024;

/// Whether request `i` of `iters` is signaled (and its completion awaited): the last
/// of each [`WINDOW`], and the last.
fn signaled(i: usize, iters: usize) -> bool {
    (i + 1) % WINDOW == 0 || i + 1 == iters
}

fn reap(cq: &Cq, n: usize) -> std::result::Result<Vec<Wc>, String> {
    let mut all = Vec::with_capacity(n);
    let mut buf = vec![Wc::default(); 64];
    let deadline = Instant::now() + Duration::from_secs(30);
    while all.len() < n {
        let got = cq.poll(&mut buf).map_err(|e| e.to_string())?;
        for wc in &buf[..got] {
            if wc.status != WcStatus::Success {
                return Err(format!("work request {} failed: {:?}", wc.wr_id, wc.status));
            }
            all.push(*wc);
        }
        if got == 0 {
            if Instant::now() > deadline {
                return Err(format!("timed out with {} of {n} completions", all.len()));
            }
            std::thread::yield_now();
        }
    }
    Ok(all)
}

fn mbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 * 8.0 / t.as_secs_f64() / 1e6
}

/// Runs the demo, printing to `out`. Returns an error text when anything fails.
pub fn run(out: &mut impl Write, iters: usize, size: usize) -> std::result::Result<(), String> {
    let e = |e: Error| e.to_string();
    let dev = device(None).map_err(e)?;
    let len = (size * 2).max(1 << 16);
    let a = side(dev.open().map_err(e)?, len).map_err(e)?;
    let b = side(dev.open().map_err(e)?, len).map_err(e)?;
    let (ga, gb) = (a.ctx.gid(1).ok_or("no GID")?, b.ctx.gid(1).ok_or("no GID")?);
    let w = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
    w(writeln!(
        out,
        "device {} (netdev {}, path MTU {} bytes)",
        dev.name,
        dev.ifname,
        dev.active_mtu().bytes()
    ))?;
    w(writeln!(
        out,
        "endpoint A: GID {ga}  QP {:#x}",
        a.qp.qp_num()
    ))?;
    w(writeln!(
        out,
        "endpoint B: GID {gb}  QP {:#x}",
        b.qp.qp_num()
    ))?;
    let opts = |psn| ConnectOpts {
        psn,
        mtu: dev.active_mtu(),
        ..ConnectOpts::default()
    };
    a.qp.connect(
        &PeerInfo {
            qpn: b.qp.qp_num(),
            psn: 0x2000,
            gid: gb,
        },
        &opts(0x1000),
    )
    .map_err(e)?;
    b.qp.connect(
        &PeerInfo {
            qpn: a.qp.qp_num(),
            psn: 0x1000,
            gid: ga,
        },
        &opts(0x2000),
    )
    .map_err(e)?;
    w(writeln!(
        out,
        "connected: RC, both QPs in {:?}",
        a.qp.state()
    ))?;

    let pattern: Vec<u8> = (0..size)
        .map(|i| (i.wrapping_mul(131) ^ (i >> 8)) as u8)
        .collect();
    a.mr.write(0, &pattern);

    // SEND / RECV
    let t = Instant::now();
    for i in 0..iters {
        b.qp.post_recv(i as u64, &[b.mr.slice(0..size)])
            .map_err(e)?;
        let sig = signaled(i, iters);
        a.qp.post_send(&SendRequest::send(i as u64, &[a.mr.slice(0..size)]).signaled(sig))
            .map_err(e)?;
        reap(&b.cq, 1)?;
        if sig {
            reap(&a.cq, 1)?;
        }
    }
    let dt = t.elapsed();
    if b.mr.to_vec()[..size] != pattern[..] {
        return Err("SEND: received bytes differ".into());
    }
    w(writeln!(
        out,
        "SEND/RECV   {iters} x {size} bytes: data verified, {:.1} Mbit/s",
        mbps(iters * size, dt)
    ))?;

    // RDMA WRITE into B's second half, then READ it back into A's second half.
    let remote = b.mr.remote(size..2 * size);
    let t = Instant::now();
    for i in 0..iters {
        let sig = signaled(i, iters);
        a.qp.post_send(&SendRequest::write(i as u64, &[a.mr.slice(0..size)], remote).signaled(sig))
            .map_err(e)?;
        if sig {
            reap(&a.cq, 1)?;
        }
    }
    let dt = t.elapsed();
    if b.mr.to_vec()[size..2 * size] != pattern[..] {
        return Err("WRITE: remote bytes differ".into());
    }
    w(writeln!(
        out,
        "RDMA WRITE  {iters} x {size} bytes: data verified, {:.1} Mbit/s",
        mbps(iters * size, dt)
    ))?;
    let t = Instant::now();
    for i in 0..iters {
        let sig = signaled(i, iters);
        a.qp.post_send(
            &SendRequest::read(i as u64, &[a.mr.slice(size..2 * size)], remote).signaled(sig),
        )
        .map_err(e)?;
        if sig {
            reap(&a.cq, 1)?;
        }
    }
    let dt = t.elapsed();
    if a.mr.to_vec()[size..2 * size] != pattern[..] {
        return Err("READ: local bytes differ".into());
    }
    w(writeln!(
        out,
        "RDMA READ   {iters} x {size} bytes: data verified, {:.1} Mbit/s",
        mbps(iters * size, dt)
    ))?;

    // Atomics on an 8-byte counter in B.
    b.mr.write(0, &0u64.to_ne_bytes());
    let counter = b.mr.remote(0..8);
    let t = Instant::now();
    for i in 0..iters {
        a.qp.post_send(&SendRequest::fetch_add(
            i as u64,
            a.mr.slice(0..8),
            counter,
            1,
        ))
        .map_err(e)?;
        reap(&a.cq, 1)?;
    }
    let dt = t.elapsed();
    let mut v = [0u8; 8];
    b.mr.read(0, &mut v);
    if u64::from_ne_bytes(v) != iters as u64 {
        return Err(format!(
            "FETCH_ADD: counter is {} after {iters} adds",
            u64::from_ne_bytes(v)
        ));
    }
    a.qp.post_send(&SendRequest::cmp_swap(
        0,
        a.mr.slice(0..8),
        counter,
        iters as u64,
        42,
    ))
    .map_err(e)?;
    reap(&a.cq, 1)?;
    b.mr.read(0, &mut v);
    if u64::from_ne_bytes(v) != 42 {
        return Err("CMP_SWAP did not swap".into());
    }
    w(writeln!(
        out,
        "ATOMICS     {iters} fetch-and-add + 1 compare-and-swap: counter verified, {:.1} usec/op round trip",
        dt.as_secs_f64() * 1e6 / iters as f64
    ))?;
    let (ca, cb) = (a.ctx.counters(), b.ctx.counters());
    w(writeln!(
        out,
        "wire: A sent {} packets ({} bytes; {} with their payload sent straight from its memory region), B sent {} packets; ICRC errors {}; retransmissions {}",
        ca.tx_packets,
        ca.tx_bytes,
        ca.tx_payloads_in_place,
        cb.tx_packets,
        ca.rx_icrc_errors + cb.rx_icrc_errors,
        ca.retransmitted_packets + cb.retransmitted_packets
    ))?;
    // Which carrier took the packets between the two endpoints (README, "Same-host
    // carrier").
    let carrier = match (a.ctx.same_host_stats(), b.ctx.same_host_stats()) {
        (Some(sa), Some(sb)) if sa.tx_datagrams + sb.tx_datagrams > 0 => format!(
            "same-host rings ({} of A's and {} of B's packets; RVERBS_SAME_HOST=0 for UDP)",
            sa.tx_datagrams, sb.tx_datagrams
        ),
        _ => "UDP over loopback".to_string(),
    };
    w(writeln!(out, "carrier: {carrier}"))?;
    w(writeln!(out, "demo passed"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn demo_passes_on_loopback() {
        let mut out = Vec::new();
        super::run(&mut out, 20, 10_000).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("SEND/RECV   20 x 10000 bytes: data verified"),
            "{text}"
        );
        assert!(text.contains("ICRC errors 0"), "{text}");
        // 10,000-byte messages: most of A's SEND and WRITE packets leave from the region.
        let in_place = text
            .split("bytes; ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok());
        assert!(in_place.is_some_and(|n| n >= 40), "{text}");
        // The two contexts of one process reach each other through the same-host
        // carrier, unless it is turned off.
        let carrier = if std::env::var("RVERBS_SAME_HOST").as_deref() == Ok("0") {
            "carrier: UDP over loopback"
        } else {
            "carrier: same-host rings"
        };
        assert!(text.contains(carrier), "{text}");
        assert!(text.ends_with("demo passed\n"), "{text}");
    }

    /// More requests than the send queue holds (4096): posted in windows, not all at
    /// once (it failed with "the send queue is full").
    #[test]
    fn more_iterations_than_the_queue_depth() {
        let mut out = Vec::new();
        super::run(&mut out, 4500, 64).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("RDMA READ   4500 x 64 bytes"), "{text}");
        assert!(text.ends_with("demo passed\n"), "{text}");
        assert!(super::signaled(1023, 4500) && super::signaled(4499, 4500));
        assert!(!super::signaled(0, 4500));
    }
}
