//! The RDMA side of `rverbs perf`: one RC QP per process, a region of two halves
//! (what this side sends or reads from, and what the peer writes or sends into).

use super::ctrl::{self, Ctrl, Msg};
use super::{Bench, Op, Opts, PeerDone, Plan, Progress, Side, STALL};
use rverbs::{
    device, AccessFlags, ConnectOpts, Context, Cq, Mr, Mtu, Pd, PeerInfo, Qp, QpInitAttr, QpType,
    RemoteBuf, SendRequest, Wc, WcOpcode, WcStatus,
};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// An RC connection and its memory.
pub struct Rdma {
    op: Op,
    depth: usize,
    post_list: usize,
    /// `-Q` as given.
    cq_mod: Option<usize>,
    /// The latency tests' completion moderation (`Opts::lat_cq_mod`).
    lat_cq_mod: u64,
    /// SEND and WRITE messages of at most this size go INLINE (`Opts::inline_size`).
    inline_size: usize,
    spin: Duration,
    /// Atomics are compare-and-swap (`Opts::cmp_swap`).
    cmp_swap: bool,
    cq: Cq,
    mr: Mr,
    qp: Qp,
    /// Offset of the second half (where the peer writes / sends to).
    half: usize,
    /// The peer's region: its first half is readable, its second writable.
    peer_addr: u64,
    peer_rkey: u32,
    peer_half: usize,
    _pd: Pd,
    ctx: Context,
}

fn mtu_of(bytes: usize) -> Result<Mtu, String> {
    Ok(match bytes {
        256 => Mtu::M256,
        512 => Mtu::M512,
        1024 => Mtu::M1024,
        2048 => Mtu::M2048,
        4096 => Mtu::M4096,
        _ => {
            return Err(format!(
                "invalid MTU {bytes} (valid: 256, 512, 1024, 2048, 4096)"
            ))
        }
    })
}

fn wc_error(wc: &Wc) -> String {
    format!(
        "work request {} ({:?}) completed with {:?}",
        wc.wr_id, wc.opcode, wc.status
    )
}

impl Rdma {
    /// Creates the QP and region, exchanges their details over `c`, connects.
    pub fn connect(
        o: &Opts,
        c: &mut Ctrl,
        peer: Option<SocketAddr>,
        max_size: usize,
    ) -> Result<Rdma, String> {
        let e = |e: rverbs::Error| e.to_string();
        let dev = device(o.dev.as_deref()).map_err(e)?;
        let ctx = dev.open().map_err(e)?;
        let pd = ctx.alloc_pd().map_err(e)?;
        // Two halves, each 8-byte aligned for atomics.
        let half = max_size.max(8).div_ceil(8) * 8 + 8;
        let rx_depth = if o.op == Op::Send {
            (2 * o.depth).max(512)
        } else {
            1
        };
        let cq = ctx.create_cq((o.depth + rx_depth + 64) as u32).map_err(e)?;
        let mr = pd.reg_mr(2 * half, AccessFlags::ALL).map_err(e)?;
        let mut attr = QpInitAttr::new(QpType::Rc, &cq);
        attr.cap.max_send_wr = o.depth as u32 + 1;
        attr.cap.max_recv_wr = rx_depth as u32;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = attr.cap.max_inline_data.max(o.inline_size as u32);
        let qp = pd.create_qp(&attr).map_err(e)?;
        let psn = std::process::id() & 0xff_ffff;
        let ipv6 = |a: IpAddr| match a {
            IpAddr::V6(v) => v.to_ipv4_mapped().is_none(),
            IpAddr::V4(_) => false,
        };
        let sgid = match o.gid_idx {
            Some(i) => i,
            None => ctx
                .gid_index_for(peer.is_some_and(|p| ipv6(p.ip())))
                .ok_or_else(|| format!("no GID of the peer's address family on {}", dev.name))?,
        };
        let gid = ctx.gid(sgid).ok_or("no such GID index")?;
        // perftest's default: the port's active MTU; the path takes the smaller of
        // both sides'.
        let my_mtu = if o.mtu == 0 {
            dev.active_mtu()
        } else {
            mtu_of(o.mtu)?
        };
        let mut copts = ConnectOpts {
            sgid_index: sgid,
            mtu: my_mtu,
            psn,
            timeout: o.ack_timeout,
            retry_cnt: o.retry_count,
            ..ConnectOpts::default()
        };
        qp.init(&copts).map_err(e)?;
        let me = Msg::new("qp")
            .with("qpn", format!("{:x}", qp.qp_num()))
            .with("psn", format!("{psn:x}"))
            .with("gid", gid.hex().to_string())
            .with("addr", format!("{:x}", mr.addr()))
            .with("rkey", format!("{:x}", mr.rkey()))
            .with("half", half)
            .with("mtu", my_mtu.bytes());
        c.send(&me)?;
        let them = c.recv()?.expect("qp")?;
        let peer_half = them.u64("half")? as usize;
        copts.mtu = copts.mtu.min(mtu_of(them.u64("mtu")? as usize)?);
        if peer_half != half {
            return Err("the peer's region differs in size".into());
        }
        let rem = PeerInfo {
            qpn: them.hex("qpn")? as u32 & 0xff_ffff,
            psn: them.hex("psn")? as u32 & 0xff_ffff,
            gid: them.gid("gid")?,
        };
        let r = Rdma {
            op: o.op,
            depth: o.depth,
            post_list: o.post_list,
            cq_mod: o.cq_mod,
            lat_cq_mod: o.lat_cq_mod(),
            inline_size: o.inline_size,
            spin: o.spin,
            cmp_swap: o.cmp_swap,
            half,
            peer_addr: them.hex("addr")?,
            peer_rkey: them.hex("rkey")? as u32,
            peer_half,
            cq,
            mr,
            qp,
            _pd: pd,
            ctx,
        };
        // Receives first, so the peer's first SEND finds one.
        if o.op == Op::Send {
            for i in 0..rx_depth {
                r.qp.post_recv(i as u64, &[r.mr.slice(half..2 * half)])
                    .map_err(e)?;
            }
        }
        r.qp.connect(&rem, &copts).map_err(e)?;
        // Both QPs must be ready before either sends.
        c.send(&Msg::new("connected"))?;
        c.recv()?.expect("connected")?;
        Ok(r)
    }

    fn remote(&self, size: usize, writable: bool) -> RemoteBuf {
        let off = if writable { self.peer_half } else { 0 };
        RemoteBuf {
            addr: self.peer_addr + off as u64,
            rkey: self.peer_rkey,
            len: size as u32,
        }
    }

    /// One request of this test's operation, of `size` bytes.
    fn request(&self, wr_id: u64, size: usize) -> SendRequest<'_> {
        match self.op {
            Op::Send => SendRequest::send(wr_id, &[self.mr.slice(0..size)]),
            Op::Write => {
                SendRequest::write(wr_id, &[self.mr.slice(0..size)], self.remote(size, true))
            }
            Op::Read => SendRequest::read(
                wr_id,
                &[self.mr.slice(self.half..self.half + size)],
                self.remote(size, false),
            ),
            // perftest's values: add 1; compare 0 and swap 0 (ATOMIC_ADD_VALUE,
            // ATOMIC_SWAP_VALUE in perftest_resources.h).
            _ if self.cmp_swap => SendRequest::cmp_swap(
                wr_id,
                self.mr.slice(self.half..self.half + 8),
                self.remote(8, true),
                0,
                0,
            ),
            _ => SendRequest::fetch_add(
                wr_id,
                self.mr.slice(self.half..self.half + 8),
                self.remote(8, true),
                1,
            ),
        }
    }

    fn repost_recv(&self, wr_id: u64) -> Result<(), String> {
        self.qp
            .post_recv(wr_id, &[self.mr.slice(self.half..2 * self.half)])
            .map_err(|e| e.to_string())
    }
}

impl Bench for Rdma {
    fn resent(&self) -> u64 {
        // Requests sent again, and READ responses sent again for a repeated request
        // (a READ's recovery costs both sides packets).
        let c = self.ctx.counters();
        c.retransmitted_packets + c.tx_read_responses_resent
    }

    fn recovery(&self) -> super::Recovery {
        super::Recovery::of(&self.ctx.counters())
    }

    fn bw(
        &mut self,
        plan: &Plan,
        peer: &PeerDone,
        ctrl_w: &mut TcpStream,
        p: &mut Progress,
    ) -> Result<Side, String> {
        let l = self.post_list.min(self.depth).max(1);
        // Completion moderation: signal one request in `cq_mod` (a multiple of the
        // post list, so duration mode can stop at a signaled one; -Q or a quarter of
        // the depth, at most 16).
        let cq_mod = match self.cq_mod {
            Some(q) => l * (q.min(self.depth) / l).max(1),
            None => l * (self.depth / (4 * l)).clamp(1, 16),
        };
        let inline = matches!(self.op, Op::Send | Op::Write) && plan.size <= self.inline_size;
        let meter = super::Meter::start();
        let (mut posted, mut completed, mut rx) = (0u64, 0u64, 0u64);
        let mut send_secs = 0.0;
        let mut done_sent = !plan.sends;
        if done_sent {
            ctrl::send(ctrl_w, &Msg::new("done").with("sent", 0))?;
        }
        let mut stopped = !plan.sends;
        let mut wcs = vec![Wc::default(); 64];
        let mut batch = Vec::with_capacity(l);
        let mut last_progress = Instant::now();
        loop {
            if !stopped {
                while posted - completed + l as u64 <= self.depth as u64 {
                    if plan.stop(posted) && (plan.iters.is_some() || posted % cq_mod as u64 == 0) {
                        stopped = true;
                        break;
                    }
                    let k = match plan.iters {
                        Some(n) => (l as u64).min(n - posted) as usize,
                        None => l,
                    };
                    batch.clear();
                    for i in 0..k as u64 {
                        let idx = posted + i + 1;
                        let last = plan.iters == Some(idx);
                        let mut r = self
                            .request(idx, plan.size)
                            .signaled(idx % cq_mod as u64 == 0 || last);
                        if inline {
                            r = r.inline();
                        }
                        batch.push(r);
                    }
                    if k == 1 {
                        self.qp.post_send(&batch[0]).map_err(|e| e.to_string())?;
                    } else {
                        self.qp
                            .post_send_list(&batch)
                            .map_err(|(i, e)| format!("post list, request {i}: {e}"))?;
                    }
                    posted += k as u64;
                }
            }
            // Nothing to post: wait (spin, then sleep) for the device instead of
            // spinning on the CPU the peer may need.
            let can_post = !stopped && posted - completed + (l as u64) <= self.depth as u64;
            let n = if can_post {
                self.cq.poll(&mut wcs)
            } else {
                self.cq.wait(&mut wcs, self.spin, Duration::from_millis(1))
            }
            .map_err(|e| e.to_string())?;
            if n > 0 {
                last_progress = Instant::now();
            }
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    return Err(wc_error(wc));
                }
                if wc.opcode == WcOpcode::Recv {
                    rx += 1;
                    self.repost_recv(wc.wr_id)?;
                } else {
                    completed = completed.max(wc.wr_id);
                }
            }
            if stopped && !done_sent && completed == posted {
                send_secs = meter.secs();
                ctrl::send(ctrl_w, &Msg::new("done").with("sent", posted))?;
                done_sent = true;
            }
            if done_sent {
                if let Some(want) = peer.get()? {
                    if !plan.receives || rx >= want {
                        break;
                    }
                }
            }
            if n == 0 && !can_post && last_progress.elapsed() > STALL {
                return Err(format!(
                    "no progress for {}s (posted {posted}, completed {completed}, received {rx})",
                    STALL.as_secs()
                ));
            }
            if plan.progress {
                p.tick(posted.max(rx), plan.iters);
            }
        }
        Ok(meter.side(posted, rx, send_secs))
    }

    fn lat(
        &mut self,
        plan: &Plan,
        peer: &PeerDone,
        ctrl_w: &mut TcpStream,
        p: &mut Progress,
    ) -> Result<(Side, Vec<u64>), String> {
        let size = plan.size;
        let meter = super::Meter::start();
        let mut wcs = vec![Wc::default(); 16];
        let mut samples = Vec::with_capacity(plan.iters.unwrap_or(100_000) as usize);
        let inline = matches!(self.op, Op::Send | Op::Write) && size <= self.inline_size;
        let e = |e: rverbs::Error| e.to_string();
        // perftest's completion moderation (`run_iter_lat_send`): SEND and WRITE
        // ping-pongs signal every `cq_mod`-th request and the last; READs and atomics
        // are each awaited, so every one is signaled. An unsignaled request completes
        // on a later ACK, which the engine asks for only as needed (AckPolicy).
        let cq_mod = match self.op {
            Op::Send | Op::Write => self.lat_cq_mod,
            _ => 1,
        };
        // Posts request `wr_id`; true if it is signaled.
        let post = |me: &Self, wr_id: u64| -> Result<bool, String> {
            let n = wr_id + 1;
            let signaled = n % cq_mod == 0 || plan.iters == Some(n);
            let mut r = me.request(wr_id, size).signaled(signaled);
            if inline {
                r = r.inline();
            }
            me.qp.post_send(&r).map_err(e)?;
            Ok(signaled)
        };
        // The WRITE ping-pong marker: the last byte of the message, never 0.
        let mark = |i: u64| (i % 255) as u8 + 1;
        let (mut iters, mut rx) = (0u64, 0u64);
        // Receives completed and not reposted yet. They are reposted once the round
        // trip is over (client) or the echo has left (server), not between the
        // message's arrival and the answer: the receive queue holds `rx_depth`
        // buffers and a ping-pong has one message in flight, so none is missed.
        let mut done_recvs: Vec<u64> = Vec::with_capacity(wcs.len());
        // Polls the CQ once: error completions fail, receives are counted (and queued
        // in `done`), and `want` (if given) reports whether a completion of that
        // opcode arrived.
        let reap = |me: &Self,
                    wcs: &mut [Wc],
                    rx: &mut u64,
                    done: &mut Vec<u64>,
                    want: WcOpcode|
         -> Result<bool, String> {
            let n = me
                .cq
                .wait(wcs, me.spin, Duration::from_millis(1))
                .map_err(e)?;
            let mut got = false;
            for wc in &wcs[..n] {
                if wc.status != WcStatus::Success {
                    return Err(wc_error(wc));
                }
                if wc.opcode == WcOpcode::Recv {
                    *rx += 1;
                    done.push(wc.wr_id);
                }
                got |= wc.opcode == want;
            }
            Ok(got)
        };
        let repost = |me: &Self, done: &mut Vec<u64>| -> Result<(), String> {
            for wr_id in done.drain(..) {
                me.repost_recv(wr_id)?;
            }
            Ok(())
        };
        let stalled = |since: Instant| -> Result<(), String> {
            if since.elapsed() > STALL {
                Err(format!("no answer for {}s", STALL.as_secs()))
            } else {
                Ok(())
            }
        };
        if plan.sends {
            // The client drives: one message, wait for the answer, repeat.
            while !plan.stop(iters) {
                let t0 = Instant::now();
                match self.op {
                    Op::Send => {
                        let before = rx;
                        // As perftest (`run_iter_lat_send`): a signaled SEND's own
                        // completion is awaited before the answer is looked for.
                        if post(self, iters)? {
                            while !reap(self, &mut wcs, &mut rx, &mut done_recvs, WcOpcode::Send)? {
                                stalled(t0)?;
                            }
                        }
                        while rx == before {
                            reap(self, &mut wcs, &mut rx, &mut done_recvs, WcOpcode::Recv)?;
                            stalled(t0)?;
                        }
                    }
                    Op::Write => {
                        let m = mark(iters);
                        self.mr.write(size - 1, &[m]);
                        post(self, iters)?;
                        let h = self.half;
                        while self.mr.with(|b| b[h + size - 1]) != m {
                            reap(self, &mut wcs, &mut rx, &mut done_recvs, WcOpcode::Send)?;
                            stalled(t0)?;
                        }
                    }
                    _ => {
                        let want = if self.op == Op::Read {
                            WcOpcode::RdmaRead
                        } else if self.cmp_swap {
                            WcOpcode::CompSwap
                        } else {
                            WcOpcode::FetchAdd
                        };
                        post(self, iters)?;
                        while !reap(self, &mut wcs, &mut rx, &mut done_recvs, want)? {
                            stalled(t0)?;
                        }
                    }
                }
                let dt = t0.elapsed().as_nanos() as u64;
                samples.push(match self.op {
                    Op::Send | Op::Write => dt / 2,
                    _ => dt,
                });
                repost(self, &mut done_recvs)?;
                iters += 1;
                if plan.progress {
                    p.tick(iters, plan.iters);
                }
            }
            let secs = meter.secs();
            ctrl::send(ctrl_w, &Msg::new("done").with("sent", iters))?;
            while peer.get()?.is_none() {
                std::thread::yield_now();
            }
            // Let the last unsignaled work drain before the next size.
            let _ = reap(self, &mut wcs, &mut rx, &mut done_recvs, WcOpcode::Send);
            repost(self, &mut done_recvs)?;
            return Ok((meter.side(iters, rx, secs), samples));
        }
        // The server answers SENDs and WRITEs; READs and atomics need no CPU of it.
        ctrl::send(ctrl_w, &Msg::new("done").with("sent", 0))?;
        let mut answered = 0u64;
        // The stall clocks start when a wait first comes back empty (a reap waits at
        // most 1 ms), not at every message: clock reads between a message's arrival
        // and its echo would be on the measured round trip.
        let mut idle_since = Some(Instant::now());
        loop {
            let target = peer.get()?;
            if target.is_some_and(|t| answered >= t) {
                break;
            }
            let mut progressed = false;
            match self.op {
                Op::Send => {
                    // (A message may have come while the last echo's completion was
                    // awaited: it is answered before anything else is waited for.)
                    if rx <= answered
                        && reap(self, &mut wcs, &mut rx, &mut done_recvs, WcOpcode::Send)?
                    {
                        progressed = true;
                    }
                    if rx > answered {
                        // The echo's completion is awaited as the client's is
                        // (perftest's server runs the same loop).
                        let mut since = None;
                        let signaled = post(self, answered)?;
                        answered += 1;
                        repost(self, &mut done_recvs)?;
                        while signaled
                            && !reap(self, &mut wcs, &mut rx, &mut done_recvs, WcOpcode::Send)?
                        {
                            stalled(*since.get_or_insert_with(Instant::now))?;
                        }
                        // The idle stall check runs from the echo's completion, not
                        // from its post (a slow completion must not shorten it).
                        progressed = true;
                    }
                }
                Op::Write => {
                    let m = mark(answered);
                    let h = self.half;
                    let _ = reap(self, &mut wcs, &mut rx, &mut done_recvs, WcOpcode::Send)?;
                    if self.mr.with(|b| b[h + size - 1]) == m {
                        self.mr.write(size - 1, &[m]);
                        post(self, answered)?;
                        answered += 1;
                        progressed = true;
                    }
                }
                _ => {
                    if target.is_none() {
                        std::thread::yield_now();
                        continue;
                    }
                    break;
                }
            }
            if progressed {
                idle_since = None;
            } else if target.is_none() {
                stalled(*idle_since.get_or_insert_with(Instant::now))?;
            }
        }
        let _ = reap(self, &mut wcs, &mut rx, &mut done_recvs, WcOpcode::Send);
        repost(self, &mut done_recvs)?;
        Ok((meter.side(0, rx, 0.0), Vec::new()))
    }
}
