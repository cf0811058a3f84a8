//! Many RC QP pairs between two processes, all created, connected and used at once:
//! memory per QP (RSS growth of each process) and setup time, for N pairs and, as the
//! baseline measured in the same run, for N/10 pairs.
//!
//! ```text
//! cargo bench -p rverbs --bench qp_scale            # 1000 pairs (and 100)
//! cargo bench -p rverbs --bench qp_scale -- 5000    # another N
//! QP_SCALE_WR=1024 cargo bench -p rverbs --bench qp_scale   # deeper queues
//! ```
//!
//! The benchmark runs itself a second time as the peer process (`QP_SCALE_ROLE=peer`),
//! talks to it over TCP on loopback, and only ever kills that child.

#[path = "../tests/common/ctl.rs"]
mod ctl;

use ctl::*;
use rverbs::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MSG: usize = 64;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// One side of a round: N QPs on one CQ, one region with a slot per QP.
struct Side {
    ctx: Context,
    cq: Cq,
    mr: Mr,
    qps: Vec<Qp>,
    _pd: Pd,
}

/// Creates `n` QPs; returns the side and the time taken.
fn create(ctx: &Context, n: usize) -> Res<(Side, Duration)> {
    let t = Instant::now();
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq((4 * n).max(16) as u32)?;
    let mr = pd.reg_mr(n * MSG * 2, AccessFlags::ALL)?;
    // Queue depth: QP_SCALE_WR (default 16).
    let wr: u32 = std::env::var("QP_SCALE_WR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let cap = QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qps = (0..n)
        .map(|_| pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(cap)))
        .collect::<Result<Vec<_>>>()?;
    Ok((
        Side {
            ctx: ctx.clone(),
            cq,
            mr,
            qps,
            _pd: pd,
        },
        t.elapsed(),
    ))
}

fn connect(s: &Side, p: &PeerLine) -> Res<Duration> {
    let t = Instant::now();
    if p.qpns.len() != s.qps.len() {
        return Err("QP count mismatch".into());
    }
    connect_all(&s.qps, p, &ConnectOpts::default())?;
    Ok(t.elapsed())
}

fn wait_n(cq: &Cq, n: usize) -> Res {
    let mut buf = [Wc::default(); 256];
    let mut got = 0;
    let start = Instant::now();
    while got < n {
        let k = cq.poll(&mut buf)?;
        if let Some(w) = buf[..k].iter().find(|w| w.status != WcStatus::Success) {
            return Err(format!("completion {w:?}").into());
        }
        got += k;
        if k == 0 {
            if start.elapsed() > Duration::from_secs(120) {
                return Err(format!("{got} of {n} completions").into());
            }
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// The peer process: per round, create N QPs, connect, post a receive on each, then
/// wait for every SEND and WRITE; report its RSS growth.
fn peer() -> Res {
    let ctx = device(None)?.open()?;
    let l = TcpListener::bind("127.0.0.1:0")?;
    println!("port {}", l.local_addr()?.port());
    std::io::stdout().flush()?;
    let mut c = Ctl::new(l.accept()?.0)?;
    loop {
        let cmd = c.recv()?;
        let Some(n) = cmd.strip_prefix("round ") else {
            return Ok(());
        };
        let n: usize = n.parse()?;
        let rss0 = rss_kib();
        let (side, _) = create(&ctx, n)?;
        c.send(&info_line(&side.ctx, &side.mr, &side.qps))?;
        let p = parse_info(&c.recv()?)?;
        connect(&side, &p)?;
        for (i, q) in side.qps.iter().enumerate() {
            q.post_recv(i as u64, &[side.mr.slice(i * MSG..(i + 1) * MSG)])?;
        }
        let rss1 = rss_kib();
        c.send("ready")?;
        wait_n(&side.cq, n)?;
        // Every receive holds the sender's pattern.
        let bad = (0..n).find(|&i| {
            side.mr
                .with(|b| b[i * MSG..(i + 1) * MSG].iter().any(|&x| x != i as u8))
        });
        if let Some(i) = bad {
            return Err(format!("QP {i}: received bytes differ").into());
        }
        c.send(&format!("done {}", rss1.saturating_sub(rss0)))?;
        c.recv()?; // the WRITEs are checked by the driver before the round ends
        let ok = (0..n).all(|i| {
            side.mr.with(|b| {
                b[(n + i) * MSG..(n + i + 1) * MSG]
                    .iter()
                    .all(|&x| x == !(i as u8))
            })
        });
        c.send(if ok { "writes ok" } else { "writes differ" })?;
    }
}

struct Round {
    n: usize,
    create: Duration,
    connect: Duration,
    traffic: Duration,
    rss_self: u64,
    rss_peer: u64,
}

fn round(c: &mut Ctl, ctx: &Context, n: usize) -> Res<Round> {
    c.send(&format!("round {n}"))?;
    let rss0 = rss_kib();
    let (side, create_t) = create(ctx, n)?;
    let p = parse_info(&c.recv()?)?;
    c.send(&info_line(&side.ctx, &side.mr, &side.qps))?;
    let connect_t = connect(&side, &p)?;
    let rss_self = rss_kib().saturating_sub(rss0);
    if c.recv()? != "ready" {
        return Err("peer not ready".into());
    }
    // Use every QP at once: a SEND and an RDMA WRITE on each before any completes.
    let t = Instant::now();
    for i in 0..n {
        side.mr.write(i * MSG, &[i as u8; MSG]);
        side.mr.write((n + i) * MSG, &[!(i as u8); MSG]);
    }
    for (i, q) in side.qps.iter().enumerate() {
        q.post_send(&SendRequest::send(
            i as u64,
            &[side.mr.slice(i * MSG..(i + 1) * MSG)],
        ))?;
        let remote = RemoteBuf {
            addr: p.addr + ((n + i) * MSG) as u64,
            rkey: p.rkey,
            len: MSG as u32,
        };
        q.post_send(&SendRequest::write(
            i as u64,
            &[side.mr.slice((n + i) * MSG..(n + i + 1) * MSG)],
            remote,
        ))?;
    }
    wait_n(&side.cq, 2 * n)?;
    let traffic = t.elapsed();
    let done = c.recv()?;
    let rss_peer: u64 = done.strip_prefix("done ").ok_or("peer failed")?.parse()?;
    c.send("check")?;
    if c.recv()? != "writes ok" {
        return Err("the peer's WRITE targets differ".into());
    }
    Ok(Round {
        n,
        create: create_t,
        connect: connect_t,
        traffic,
        rss_self,
        rss_peer,
    })
}

/// Keeps the memory figures of `a` and the best times of both.
fn best(a: Round, b: Round) -> Round {
    Round {
        create: a.create.min(b.create),
        connect: a.connect.min(b.connect),
        traffic: a.traffic.min(b.traffic),
        ..a
    }
}

fn main() -> Res {
    if std::env::var("QP_SCALE_ROLE").as_deref() == Ok("peer") {
        return peer();
    }
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or(Ok(1000), |a| a.parse())?;
    let mut child = Command::new(std::env::current_exe()?)
        .env("QP_SCALE_ROLE", "peer")
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut first = String::new();
    out.read_line(&mut first)?;
    let port: u16 = first
        .strip_prefix("port ")
        .ok_or("peer did not start")?
        .trim()
        .parse()?;
    let ctx = device(None)?.open()?;
    let mut c = Ctl::new(TcpStream::connect(("127.0.0.1", port))?)?;
    let result = (|| -> Res<Vec<Round>> {
        // Warm-up (allocator, page faults of the first objects), then the baseline
        // and the measured size.
        round(&mut c, &ctx, 10)?;
        // The first round of N gives the memory figures (later rounds reuse the pages
        // the allocator kept); times are the best of three rounds of each size.
        let first = round(&mut c, &ctx, n)?;
        let mut small = round(&mut c, &ctx, n / 10)?;
        let mut big = Round { ..first };
        for _ in 0..2 {
            small = best(small, round(&mut c, &ctx, n / 10)?);
            big = best(big, round(&mut c, &ctx, n)?);
        }
        Ok(vec![small, big, first])
    })();
    let _ = c.send("bye");
    // Closing the connection ends the peer wherever it is waiting; kill it (the
    // process this benchmark started) if it does not exit.
    drop(c);
    let start = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if start.elapsed() > Duration::from_secs(5) {
            child.kill()?;
            child.wait()?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let rounds = result?;
    if !st.is_some_and(|s| s.success()) {
        return Err(format!("peer exited with {st:?}").into());
    }
    println!(
        "RC QP pairs between two processes (loopback soft device, debug={})",
        cfg!(debug_assertions)
    );
    println!(
        "{:>6} {:>10} {:>11} {:>12} {:>12}",
        "pairs", "create ms", "connect ms", "traffic ms", "setup us/QP"
    );
    let first = &rounds[2];
    println!(
        "memory: {:.2} KiB per QP in this process, {:.2} KiB in the peer ({} pairs, RSS growth)",
        first.rss_self as f64 / first.n as f64,
        first.rss_peer as f64 / first.n as f64,
        first.n
    );
    for r in &rounds[..2] {
        let setup = r.create + r.connect;
        println!(
            "{:>6} {:>10.2} {:>11.2} {:>12.2} {:>12.2}",
            r.n,
            r.create.as_secs_f64() * 1e3,
            r.connect.as_secs_f64() * 1e3,
            r.traffic.as_secs_f64() * 1e3,
            setup.as_secs_f64() * 1e6 / r.n as f64,
        );
    }
    let (b, m) = (&rounds[0], &rounds[1]);
    let per = |r: &Round| (r.create + r.connect).as_secs_f64() / r.n as f64;
    println!(
        "setup time per QP at {} pairs / at {} pairs: {:.2}x (1.00 = linear scaling; best of 3)",
        m.n,
        b.n,
        per(m) / per(b)
    );
    Ok(())
}
