//! What one size's run measured and how it is reported: each side's counts, the
//! latency percentiles, the loss-recovery events, the combined [`Report`].

use super::*;

/// The RC requester's loss-recovery events of one side (the engine's `Counters`), and
/// how long each kind waited: the stall from the requester's last progress to the
/// event (the engine's `*_wait_ns`), and how late the timers ran.
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
    /// The summed waits of the six kinds above, in nanoseconds, in that order.
    pub wait_ns: [u64; 6],
    /// QP timer deadlines handled (`timer_fires`).
    pub timer_fires: u64,
    /// Nanoseconds those deadlines were handled late, summed (`timer_late_ns`).
    pub timer_late_ns: u64,
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
            wait_ns: [
                c.nak_retry_wait_ns,
                c.reorder_retry_wait_ns,
                c.probe_wait_ns,
                c.probe_retry_wait_ns,
                c.timeout_wait_ns,
                c.selective_wait_ns,
            ],
            timer_fires: c.timer_fires,
            timer_late_ns: c.timer_late_ns,
        }
    }

    /// The six event counts, in the order of [`Recovery::wait_ns`], with their names.
    fn events(&self) -> [(&'static str, u64); 6] {
        [
            ("nak", self.nak),
            ("reorder", self.reorder),
            ("probe", self.probe),
            ("probe_resend", self.probe_resend),
            ("timeout", self.timeout),
            ("selective", self.selective),
        ]
    }

    /// Every field combined with `o`'s by `f`.
    fn zip(self, o: Recovery, f: impl Fn(u64, u64) -> u64) -> Recovery {
        let mut wait_ns = self.wait_ns;
        for (w, b) in wait_ns.iter_mut().zip(o.wait_ns) {
            *w = f(*w, b);
        }
        Recovery {
            nak: f(self.nak, o.nak),
            reorder: f(self.reorder, o.reorder),
            probe: f(self.probe, o.probe),
            probe_resend: f(self.probe_resend, o.probe_resend),
            timeout: f(self.timeout, o.timeout),
            selective: f(self.selective, o.selective),
            wait_ns,
            timer_fires: f(self.timer_fires, o.timer_fires),
            timer_late_ns: f(self.timer_late_ns, o.timer_late_ns),
        }
    }

    pub(super) fn since(self, before: Recovery) -> Recovery {
        self.zip(before, u64::saturating_sub)
    }

    pub(super) fn plus(self, o: Recovery) -> Recovery {
        self.zip(o, u64::saturating_add)
    }

    /// Any recovery event (timers alone, which run without loss too, are not one).
    pub(super) fn any(&self) -> bool {
        self.events().iter().any(|&(_, n)| n > 0)
    }

    /// The mean wait of each kind in microseconds (0 for a kind that did not occur),
    /// in the order of [`Recovery::wait_ns`].
    pub fn mean_wait_us(&self) -> [f64; 6] {
        let ev = self.events();
        std::array::from_fn(|i| mean_us(self.wait_ns[i], ev[i].1))
    }

    /// The mean lateness of the timers in microseconds.
    pub fn timer_late_us(&self) -> f64 {
        mean_us(self.timer_late_ns, self.timer_fires)
    }
}

/// `ns / n` in microseconds, 0 when `n` is 0.
fn mean_us(ns: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        ns as f64 / n as f64 / 1e3
    }
}

impl std::fmt::Display for Recovery {
    /// `nak=3 (wait 120 us) ... timeout=0; timers 40, late 15 us`: each kind's count
    /// and, where it occurred, its mean wait since the last progress.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waits = self.mean_wait_us();
        for (i, (name, n)) in self.events().into_iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={n}")?;
            if n > 0 {
                write!(f, " (wait {:.0} us)", waits[i])?;
            }
        }
        write!(
            f,
            "; timers {}, late {:.0} us",
            self.timer_fires,
            self.timer_late_us()
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
            .with("rec_wait_ns", wait_list(&self.recovery.wait_ns))
            .with("rec_timer_fires", self.recovery.timer_fires)
            .with("rec_timer_late_ns", self.recovery.timer_late_ns)
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
                // (Absent from an older peer's report, as the waits are.)
                wait_ns: m
                    .str("rec_wait_ns")
                    .ok()
                    .and_then(parse_wait_list)
                    .unwrap_or_default(),
                timer_fires: m.u64("rec_timer_fires").unwrap_or(0),
                timer_late_ns: m.u64("rec_timer_late_ns").unwrap_or(0),
            },
        })
    }
}

/// The six recovery waits as one control-message value: `1,2,3,4,5,6`.
fn wait_list(w: &[u64; 6]) -> String {
    w.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// [`wait_list`]'s value back; `None` unless it is six numbers.
fn parse_wait_list(s: &str) -> Option<[u64; 6]> {
    let v: Vec<u64> = s
        .split(',')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
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
                    .with("selective", self.recovery.selective)
                    .with("wait_us", {
                        let w = self.recovery.mean_wait_us();
                        Json::obj()
                            .with("nak", w[0])
                            .with("reorder", w[1])
                            .with("probe", w[2])
                            .with("probe_resend", w[3])
                            .with("timeout", w[4])
                            .with("selective", w[5])
                    })
                    .with("timer_fires", self.recovery.timer_fires)
                    .with("timer_late_us", self.recovery.timer_late_us()),
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
