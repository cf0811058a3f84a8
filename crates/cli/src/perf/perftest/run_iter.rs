//! The data loops of `--perftest`, as perftest's `src/perftest_resources.c` runs them
//! (`run_iter_bw`, `run_iter_bw_server`, `run_iter_lat_write`, `run_iter_lat_send`,
//! `run_iter_lat`), and the figures perftest computes from their timestamps.

use super::*;

/// Counts of one size's traffic on our side.
#[derive(Default)]
pub(super) struct Counts {
    /// Per QP, its send-queue completions (the highest sequence number completed; they
    /// start at 1).
    sent_done: Vec<u64>,
    /// Receives completed, on all QPs.
    recvs: u64,
    /// Per QP, the receives posted.
    posted_recvs: Vec<u64>,
    /// When the first and the last receive completed.
    first_rx: Option<Instant>,
    last_rx: Option<Instant>,
    /// When anything last completed.
    last: Option<Instant>,
}

impl Conn {
    /// The first key of the connection, which the single handshakes carry.
    pub(super) fn me(&self) -> Dest {
        self.lanes[0].me
    }

    /// Fresh counts for a size.
    pub(super) fn counts(&self) -> Counts {
        Counts {
            sent_done: vec![0; self.lanes.len()],
            posted_recvs: vec![0; self.lanes.len()],
            ..Counts::default()
        }
    }

    /// Where the peer writes / sends to on QP `lane`'s behalf: area `n + lane`.
    pub(super) fn recv_area(&self, lane: usize) -> usize {
        (self.lanes.len() + lane) * self.half
    }

    pub(super) fn remote(&self, lane: usize, len: usize) -> RemoteBuf {
        let rem = &self.lanes[lane].rem;
        RemoteBuf {
            addr: rem.vaddr,
            rkey: rem.rkey,
            len: len as u32,
        }
    }

    /// The work request `id` (1-based) of `tool` for `size` bytes on QP `lane`.
    pub(super) fn request(&self, lane: usize, tool: Tool, id: u64, size: usize) -> SendRequest<'_> {
        let at = lane * self.half;
        let local = self.mr.slice(at..at + size);
        let id = wr_id(lane, id);
        match tool {
            Tool::WriteBw | Tool::WriteLat => {
                SendRequest::write(id, &[local], self.remote(lane, size))
            }
            Tool::ReadBw | Tool::ReadLat => {
                SendRequest::read(id, &[local], self.remote(lane, size))
            }
            Tool::SendBw | Tool::SendLat => {
                let l = &self.lanes[lane];
                match &l.ah {
                    // `ctx_set_send_reg_wrs` for UD: the AH, the peer's QPN and Q_Key.
                    Some(ah) => SendRequest::send(id, &[local]).to(ah, l.ud_dest.0, l.ud_dest.1),
                    None => SendRequest::send(id, &[local]),
                }
            }
            // `ctx_set_send_reg_wrs`: add ATOMIC_ADD_VALUE (1); swap ATOMIC_SWAP_VALUE
            // (0) with the compare value left 0.
            Tool::AtomicBw | Tool::AtomicLat if self.cmp_swap => {
                SendRequest::cmp_swap(id, self.mr.slice(at..at + 8), self.remote(lane, 8), 0, 0)
            }
            Tool::AtomicBw | Tool::AtomicLat => {
                SendRequest::fetch_add(id, self.mr.slice(at..at + 8), self.remote(lane, 8), 1)
            }
        }
    }

    /// Posts a receive of a whole area on QP `lane` (any size of a `-a` sweep fits).
    pub(super) fn post_recv(&self, c: &mut Counts, lane: usize) -> Result<(), String> {
        c.posted_recvs[lane] += 1;
        let at = self.recv_area(lane);
        self.lanes[lane]
            .qp
            .post_recv(
                RECV | wr_id(lane, c.posted_recvs[lane]),
                &[self.mr.slice(at..at + self.half)],
            )
            .map_err(|e| e.to_string())
    }

    /// Waits once for completions; receives are reposted while fewer than `want_rx`
    /// were posted on their QP. Errors on a failed completion or `STALL` without
    /// progress.
    pub(super) fn reap(&self, c: &mut Counts, want_rx: u64, since: Instant) -> Result<(), String> {
        let mut wcs = [Wc::default(); 32];
        let n = self
            .cq
            .wait(&mut wcs, self.spin, Duration::from_millis(1))
            .map_err(|e| e.to_string())?;
        let now = Instant::now();
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "work request {} ({:?}) completed with {:?}",
                    wc.wr_id & SEQ,
                    wc.opcode,
                    wc.status
                ));
            }
            // (A wr_id names a QP we have: we made them all.)
            let lane = lane_of(wc.wr_id) % self.lanes.len();
            if wc.opcode == WcOpcode::Recv {
                c.recvs += 1;
                c.first_rx.get_or_insert(now);
                c.last_rx = Some(now);
                if c.posted_recvs[lane] < want_rx {
                    self.post_recv(c, lane)?;
                }
            } else {
                c.sent_done[lane] = c.sent_done[lane].max(wc.wr_id & SEQ);
            }
            c.last = Some(now);
        }
        if c.last.unwrap_or(since).elapsed() > STALL {
            return Err(format!(
                "the perftest peer made no progress for {}s",
                STALL.as_secs()
            ));
        }
        Ok(())
    }

    /// Posts the first receives of a size (perftest's `ctx_set_recv_wqes`).
    pub(super) fn prepost(&self, c: &mut Counts, iters: u64) -> Result<(), String> {
        for lane in 0..self.lanes.len() {
            while c.posted_recvs[lane] < iters.min(self.rx_depth) {
                self.post_recv(c, lane)?;
            }
        }
        Ok(())
    }

    /// The sending side of a bandwidth test (`run_iter_bw`): `-n` requests, or as many
    /// as `-D` seconds take, at most `-t` outstanding, posted in chains of `-l` (one
    /// `ibv_post_send` each). Signaled: every `cq_mod`-th (perftest's `-Q`; with a post
    /// list, the list's size unless `-Q` divides it, as perftest sets it) and the last.
    /// After `-D` the last chain posted is signaled and everything outstanding is
    /// awaited; the figures cover the whole run.
    pub(super) fn bw_send(&self, tool: Tool, o: &Opts, size: usize) -> Result<Side, String> {
        self.bw_run(tool, o, size, &mut self.counts(), 0, false)
    }

    /// [`Oob::after_run`] for an exchange that needs the connection.
    pub(super) fn after_run<T>(
        &mut self,
        f: impl FnOnce(&mut Conn) -> Result<T, String>,
    ) -> Result<T, String> {
        self.oob.set_wait(None);
        let r = f(self);
        self.oob.set_wait(Some(peer_timeout()));
        r
    }

    /// A bidirectional size's figures: ours (`me`) and the peer's, exchanged as
    /// `xchg_bw_reports` does, together.
    pub(super) fn both_ways(&mut self, size: usize, me: &Side) -> Result<Report, String> {
        let theirs = BwReport::from_fields(&self.oob.reports(&BwReport::of(size, me))?)?;
        let peer = Side {
            sent: theirs.iters,
            secs: theirs.report().secs,
            ..Side::default()
        };
        Ok(Report::new(size, me, &peer, None))
    }

    /// Both directions of `ib_send_bw -b` (perftest's `run_iter_bi` over RC): the
    /// receives preposted in `c`, each side sends `-n` SENDs as [`Conn::bw_send`] does
    /// (the server once its first receive completed, so it does not start before the
    /// client) and receives `-n`, reposting as they complete.
    pub(super) fn bw_bi(
        &self,
        o: &Opts,
        size: usize,
        c: &mut Counts,
        client: bool,
    ) -> Result<Side, String> {
        self.bw_run(Tool::SendBw, o, size, c, o.iters, !client)
    }

    /// [`Conn::bw_send`], also receiving `want_rx` messages into `c`'s receives;
    /// with `wait_rx`, sending only once one arrived.
    pub(super) fn bw_run(
        &self,
        tool: Tool,
        o: &Opts,
        size: usize,
        c: &mut Counts,
        want_rx: u64,
        wait_rx: bool,
    ) -> Result<Side, String> {
        let list = o.post_list.max(1) as u64;
        let cq_mod = bw_cq_mod(o);
        let (start, cpu0) = (Instant::now(), crate::perf::cpu_seconds());
        let until = o.duration.map(|d| start + Duration::from_secs_f64(d));
        // Per QP (`-q`, perftest's `scnt[index]`): requests posted, and whether its
        // last chain is.
        let n = self.lanes.len();
        // `want_rx` on each QP (`run_iter_bi`: `iters * num_of_qps` in all).
        let want_all_rx = want_rx * n as u64;
        let (mut posted, mut done_posting) = (vec![0u64; n], vec![false; n]);
        let mut chain = Vec::with_capacity(list as usize);
        loop {
            let may_send = !wait_rx || c.recvs > 0;
            for lane in 0..n {
                while may_send
                    && !done_posting[lane]
                    && posted[lane] + list - c.sent_done[lane] <= o.depth as u64
                {
                    let p = posted[lane];
                    let last = match until {
                        Some(u) => Instant::now() >= u,
                        None => p + list >= o.iters,
                    };
                    chain.clear();
                    for id in p + 1..=p + list {
                        let sig = id % cq_mod == 0 || (last && id == p + list);
                        chain.push(self.request(lane, tool, id, size).signaled(sig));
                    }
                    self.lanes[lane]
                        .qp
                        .post_send_list(&chain)
                        .map_err(|(i, e)| {
                            format!("post_send of request {}: {e}", p + 1 + i as u64)
                        })?;
                    posted[lane] += list;
                    done_posting[lane] = last;
                }
            }
            let all_done = (0..n).all(|l| done_posting[l] && c.sent_done[l] >= posted[l]);
            if all_done && c.recvs >= want_all_rx {
                break;
            }
            self.reap(c, want_rx, start)?;
        }
        let posted: u64 = posted.iter().sum();
        let secs = start.elapsed().as_secs_f64();
        Ok(Side {
            sent: posted,
            rx: c.recvs.min(want_all_rx),
            secs,
            cpu: crate::perf::cpu_seconds() - cpu0,
            wall: secs,
            resent: 0,
            recovery: Default::default(),
        })
    }

    /// The receiving side of `ib_send_bw` (`run_iter_bw_server`): `iters` receives on
    /// each QP, timed from the first to the last.
    pub(super) fn bw_recv(&self, c: &mut Counts, iters: u64) -> Result<Side, String> {
        let (start, cpu0) = (Instant::now(), crate::perf::cpu_seconds());
        // `iters` on each QP (`-q`), reposted per QP.
        let all = iters * self.lanes.len() as u64;
        while c.recvs < all {
            self.reap(c, iters, start)?;
        }
        let secs = rx_span(start, c.first_rx, c.last_rx);
        Ok(Side {
            sent: 0,
            rx: all,
            secs,
            cpu: crate::perf::cpu_seconds() - cpu0,
            wall: start.elapsed().as_secs_f64(),
            resent: 0,
            recovery: Default::default(),
        })
    }

    /// `run_iter_lat_write`: each side WRITEs `size` bytes whose last byte is its
    /// sequence number and waits until the peer's WRITE brought the next number to the
    /// last byte of its own buffer. The server writes first. Returns the post times.
    pub(super) fn write_lat(
        &self,
        iters: u64,
        size: usize,
        server: bool,
    ) -> Result<Vec<Instant>, String> {
        let mut t = Vec::with_capacity(iters as usize);
        let mut c = self.counts();
        let mark = self.half + size - 1;
        let start = Instant::now();
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        while scnt < iters || rcnt < iters {
            if rcnt < iters && !(scnt < 1 && server) {
                rcnt += 1;
                let want = rcnt as u8;
                let since = Instant::now();
                while self.mr.with(|b| b[mark]) != want {
                    self.reap(&mut c, 0, since)?;
                }
                c.last = Some(Instant::now());
            }
            if scnt < iters {
                scnt += 1;
                self.mr.write(size - 1, &[scnt as u8]);
                t.push(Instant::now());
                let mut r = self.request(0, Tool::WriteLat, scnt, size);
                if size <= 220 {
                    r = r.inline();
                }
                self.lanes[0].qp.post_send(&r).map_err(|e| e.to_string())?;
                while c.sent_done[0] < scnt {
                    self.reap(&mut c, 0, start)?;
                }
            }
        }
        Ok(t)
    }

    /// `run_iter_lat_send`: SEND ping-pong; the client sends first. Receives were
    /// preposted before the size's handshake.
    pub(super) fn send_lat(
        &self,
        c: &mut Counts,
        iters: u64,
        size: usize,
        client: bool,
    ) -> Result<Vec<Instant>, String> {
        let mut t = Vec::with_capacity(iters as usize);
        let start = Instant::now();
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        // perftest's completion moderation: every `cq_mod`-th SEND and the last are
        // signaled, and each signaled one's completion is awaited right after it is
        // posted (`run_iter_lat_send`); only our completions change, not the wire
        // exchange.
        let cq_mod = self.cq_mod;
        while scnt < iters || rcnt < iters {
            if rcnt < iters && !(scnt < 1 && client) {
                let since = Instant::now();
                while c.recvs <= rcnt {
                    self.reap(c, iters, since)?;
                }
                rcnt += 1;
            }
            if scnt < iters {
                scnt += 1;
                t.push(Instant::now());
                let signaled = scnt % cq_mod == 0 || scnt == iters;
                let mut r = self
                    .request(0, Tool::SendLat, scnt, size)
                    .signaled(signaled);
                if size <= 236 {
                    r = r.inline();
                }
                self.lanes[0].qp.post_send(&r).map_err(|e| e.to_string())?;
                // A signaled SEND's completion is awaited before anything else
                // (`run_iter_lat_send`'s `poll == 1`).
                let since = Instant::now();
                while signaled && c.sent_done[0] < scnt {
                    self.reap(c, iters, since)?;
                }
            }
        }
        while c.sent_done[0] < iters {
            self.reap(c, iters, start)?;
        }
        Ok(t)
    }

    /// `run_iter_lat` (READ, atomic): one request at a time, each awaited.
    pub(super) fn rt_lat(
        &self,
        tool: Tool,
        iters: u64,
        size: usize,
    ) -> Result<Vec<Instant>, String> {
        let mut t = Vec::with_capacity(iters as usize);
        let mut c = self.counts();
        for i in 1..=iters {
            t.push(Instant::now());
            self.lanes[0]
                .qp
                .post_send(&self.request(0, tool, i, size))
                .map_err(|e| e.to_string())?;
            let since = Instant::now();
            while c.sent_done[0] < i {
                self.reap(&mut c, 0, since)?;
            }
        }
        Ok(t)
    }
}

/// The time a SEND receiver's figure is computed over: perftest's span from the first
/// receive to the last. When every message came in one poll (a few UD datagrams on a
/// loaded host), that span is 0 and would give no figure: the span then starts where
/// the wait for this size started (`start`), a lower bound of the rate.
pub(super) fn rx_span(start: Instant, first: Option<Instant>, last: Option<Instant>) -> f64 {
    match (first, last) {
        (Some(a), Some(b)) if b > a => (b - a).as_secs_f64(),
        (Some(a), Some(b)) => b.saturating_duration_since(start.min(a)).as_secs_f64(),
        _ => 0.0,
    }
}

/// perftest's latency figures from the post times (`print_report_lat`): the gaps
/// between consecutive posts, halved for WRITE and SEND (a round trip is two
/// messages), in nanoseconds.
pub(super) fn lat_samples(t: &[Instant], halve: bool) -> Vec<u64> {
    t.windows(2)
        .map(|w| {
            let d = (w[1] - w[0]).as_nanos() as u64;
            if halve {
                d / 2
            } else {
                d
            }
        })
        .collect()
}

pub(super) fn lat_report(o: &Opts, size: usize, t: &[Instant], halve: bool, cpu0: f64) -> Report {
    let secs = match (t.first(), t.last()) {
        (Some(a), Some(b)) => (*b - *a).as_secs_f64(),
        _ => 0.0,
    };
    let me = Side {
        sent: o.iters,
        rx: 0,
        secs,
        cpu: crate::perf::cpu_seconds() - cpu0,
        wall: secs,
        resent: 0,
        recovery: Default::default(),
    };
    Report::new(
        size,
        &me,
        &Side::default(),
        Lat::of(&mut lat_samples(t, halve)),
    )
}
