//! What one size's run measured and how it is reported: each side's counts, the
//! latency percentiles, the loss-recovery events, the combined [`Report`].

use super::*;

/// The RC requester's loss-recovery events of one side (the engine's `Counters`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Go-back-N resends started by a NAK sequence error (`nak_retries`).
    pub nak: u64,
    /// Resends after a READ-response gap outlived the reordering window
    /// (`reorder_retries`).
    pub reorder: u64,
    /// Tail-loss probes sent (`tail_loss_probes`).
    pub probe: u64,
    /// Resends a probe's answer started (`probe_retries`).
    pub probe_resend: u64,
    /// Local ACK timeouts (`retransmit_timeouts`).
    pub timeout: u64,
    /// Packets resent selectively, on a selective-repeat peer's report
    /// (`selective_retransmits`; `RVERBS_SELECTIVE_REPEAT=1` on both sides).
    pub selective: u64,
}

impl Recovery {
    pub(super) fn of(c: &rverbs::Counters) -> Recovery {
        Recovery {
            nak: c.nak_retries,
            reorder: c.reorder_retries,
            probe: c.tail_loss_probes,
            probe_resend: c.probe_retries,
            timeout: c.retransmit_timeouts,
            selective: c.selective_retransmits,
        }
    }

    pub(super) fn since(self, before: Recovery) -> Recovery {
        Recovery {
            nak: self.nak.saturating_sub(before.nak),
            reorder: self.reorder.saturating_sub(before.reorder),
            probe: self.probe.saturating_sub(before.probe),
            probe_resend: self.probe_resend.saturating_sub(before.probe_resend),
            timeout: self.timeout.saturating_sub(before.timeout),
            selective: self.selective.saturating_sub(before.selective),
        }
    }

    pub(super) fn plus(self, o: Recovery) -> Recovery {
        Recovery {
            nak: self.nak + o.nak,
            reorder: self.reorder + o.reorder,
            probe: self.probe + o.probe,
            probe_resend: self.probe_resend + o.probe_resend,
            timeout: self.timeout + o.timeout,
            selective: self.selective + o.selective,
        }
    }

    pub(super) fn any(&self) -> bool {
        *self != Recovery::default()
    }
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "nak={} reorder={} probe={} probe_resend={} timeout={} selective={}",
            self.nak, self.reorder, self.probe, self.probe_resend, self.timeout, self.selective
        )
    }
}

/// What one side did for one size.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Side {
    /// Messages this side sent (bw) or iterations (lat client).
    pub sent: u64,
    /// Messages this side received (SEND / TCP).
    pub rx: u64,
    /// Seconds from this side's first send to its last completion (0: sent nothing).
    pub secs: f64,
    /// Process CPU seconds over the test.
    pub cpu: f64,
    /// Wall seconds over the test.
    pub wall: f64,
    /// Packets this side sent again during the test ([`Bench::resent`]): loss, or a
    /// receive buffer that overflowed.
    pub resent: u64,
    /// Its RC loss-recovery events during the test ([`Bench::recovery`]).
    pub recovery: Recovery,
}

impl Side {
    pub(super) fn msg(&self) -> Msg {
        Msg::new("stats")
            .with("sent", self.sent)
            .with("rx", self.rx)
            .with("secs", self.secs)
            .with("cpu", self.cpu)
            .with("wall", self.wall)
            .with("resent", self.resent)
            .with("rec_nak", self.recovery.nak)
            .with("rec_reorder", self.recovery.reorder)
            .with("rec_probe", self.recovery.probe)
            .with("rec_probe_resend", self.recovery.probe_resend)
            .with("rec_timeout", self.recovery.timeout)
            .with("rec_selective", self.recovery.selective)
    }

    pub(super) fn from_msg(m: &Msg) -> Result<Side, String> {
        Ok(Side {
            sent: m.u64("sent")?,
            rx: m.u64("rx")?,
            secs: m.f64("secs")?,
            cpu: m.f64("cpu")?,
            wall: m.f64("wall")?,
            // (Absent from an older peer's report.)
            resent: m.u64("resent").unwrap_or(0),
            recovery: Recovery {
                nak: m.u64("rec_nak").unwrap_or(0),
                reorder: m.u64("rec_reorder").unwrap_or(0),
                probe: m.u64("rec_probe").unwrap_or(0),
                probe_resend: m.u64("rec_probe_resend").unwrap_or(0),
                timeout: m.u64("rec_timeout").unwrap_or(0),
                selective: m.u64("rec_selective").unwrap_or(0),
            },
        })
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lat {
    /// Minimum.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
    /// Mean.
    pub avg: f64,
}

impl Lat {
    /// Percentiles of samples in nanoseconds (nearest rank); `None` when empty.
    pub fn of(samples: &mut [u64]) -> Option<Lat> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let n = samples.len();
        let at = |q: f64| {
            let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
            samples[rank - 1] as f64 / 1000.0
        };
        Some(Lat {
            min: samples[0] as f64 / 1000.0,
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: samples[n - 1] as f64 / 1000.0,
            avg: samples.iter().sum::<u64>() as f64 / n as f64 / 1000.0,
        })
    }
}

/// The result of one size.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Message size.
    pub size: usize,
    /// Messages moved (both directions).
    pub msgs: u64,
    /// Bytes moved (both directions).
    pub bytes: u64,
    /// Seconds of the transfer.
    pub secs: f64,
    /// This process's CPU seconds.
    pub cpu_local: f64,
    /// The peer process's CPU seconds.
    pub cpu_peer: f64,
    /// This process's CPU seconds per wall second (1.0 = one core busy).
    pub cpu_util: f64,
    /// Latencies (latency tests, on the client).
    pub lat: Option<Lat>,
    /// Packets resent by both sides ([`Side::resent`]).
    pub resent: u64,
    /// Both sides' loss-recovery events ([`Side::recovery`]).
    pub recovery: Recovery,
}

impl Report {
    pub(super) fn new(size: usize, me: &Side, peer: &Side, lat: Option<Lat>) -> Report {
        let msgs = me.sent + peer.sent;
        let secs = me.secs.max(peer.secs);
        Report {
            size,
            msgs,
            bytes: msgs * size as u64,
            secs,
            cpu_local: me.cpu,
            cpu_peer: peer.cpu,
            cpu_util: if me.wall > 0.0 { me.cpu / me.wall } else { 0.0 },
            lat,
            resent: me.resent + peer.resent,
            recovery: me.recovery.plus(peer.recovery),
        }
    }

    /// Gbit/s.
    pub fn gbps(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 * 8.0 / self.secs / 1e9
        } else {
            0.0
        }
    }

    /// Millions of messages per second.
    pub fn mpps(&self) -> f64 {
        if self.secs > 0.0 {
            self.msgs as f64 / self.secs / 1e6
        } else {
            0.0
        }
    }

    /// CPU seconds of both processes per GB (1e9 bytes) moved.
    pub fn cpu_per_gb(&self) -> f64 {
        if self.bytes > 0 {
            (self.cpu_local + self.cpu_peer) / (self.bytes as f64 / 1e9)
        } else {
            0.0
        }
    }

    /// The JSON object.
    pub fn json(&self, o: &Opts) -> Json {
        let mut j = Json::obj()
            .with("test", o.op.name())
            .with("kind", o.kind.name())
            .with(
                "role",
                if o.server.is_some() {
                    "client"
                } else {
                    "server"
                },
            )
            .with("size", self.size)
            .with("msgs", self.msgs)
            .with("bytes", self.bytes)
            .with("secs", self.secs)
            .with("gbps", self.gbps())
            .with("mpps", self.mpps())
            .with("cpu_local_s", self.cpu_local)
            .with("cpu_peer_s", self.cpu_peer)
            .with("cpu_util", self.cpu_util)
            .with("cpu_s_per_gb", self.cpu_per_gb())
            .with("depth", o.depth)
            .with("post_list", o.post_list)
            .with("bidir", o.bidir)
            .with("resent_packets", self.resent)
            .with(
                "recovery",
                Json::obj()
                    .with("nak", self.recovery.nak)
                    .with("reorder", self.recovery.reorder)
                    .with("probe", self.recovery.probe)
                    .with("probe_resend", self.recovery.probe_resend)
                    .with("timeout", self.recovery.timeout)
                    .with("selective", self.recovery.selective),
            );
        if let Some(l) = &self.lat {
            j = j.with(
                "lat_us",
                Json::obj()
                    .with("min", l.min)
                    .with("p50", l.p50)
                    .with("p99", l.p99)
                    .with("p99_9", l.p999)
                    .with("max", l.max)
                    .with("avg", l.avg),
            );
        }
        j
    }
}

/// Wall time and process CPU time since a side started its test: what its [`Side`]
/// reports at the end.
pub(super) struct Meter {
    pub(super) start: Instant,
    cpu0: f64,
}

impl Meter {
    pub(super) fn start() -> Meter {
        Meter {
            start: Instant::now(),
            cpu0: cpu_seconds(),
        }
    }

    /// Wall seconds since the start.
    pub(super) fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The side's counts, with the CPU and wall time spent until now.
    pub(super) fn side(&self, sent: u64, rx: u64, secs: f64) -> Side {
        Side {
            sent,
            rx,
            secs,
            cpu: cpu_seconds() - self.cpu0,
            wall: self.secs(),
            resent: 0,
            recovery: Recovery::default(),
        }
    }
}
