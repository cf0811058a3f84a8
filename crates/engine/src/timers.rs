//! Time in the engine: the transport's timer lengths (IBTA 9.7.6.1.3 local ACK
//! timeout, 9.7.5.2.8 RNR NAK timer; the ACK nudge and the reordering window), each
//! QP's [`TimerTable`], and the engine's timer queue: one entry per QP with a
//! deadline, earliest first.
//!
//! Every packet in or out may move its QP's deadline (an RC requester arms its
//! retransmit timer when it sends and drops it when the last ACK comes), so a ping-pong
//! removes and inserts an entry on every hop. While few QPs have deadlines the entries
//! live in a sorted `Vec` (a binary search and a short shift, no allocation once it has
//! grown); a `BTreeSet`, which allocated a node for the first entry and freed it with
//! the last, every hop, takes over when many QPs have deadlines at once.

use crate::types::Nanos;
use std::collections::BTreeSet;

/// One QP's deadline (ordered by time, then QP number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TimerEntry {
    pub(crate) at: Nanos,
    pub(crate) qpn: u32,
}

/// Most entries kept in the sorted `Vec`; more move to the B-tree.
const SMALL_MAX: usize = 32;

/// A set of [`TimerEntry`]s, earliest first. At most one of the two stores holds
/// entries at any time.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    /// Sorted ascending, no duplicates; used while `large` is empty.
    small: Vec<TimerEntry>,
    large: BTreeSet<TimerEntry>,
}

impl Timers {
    /// Adds `e` (no effect if it is there already).
    pub(crate) fn insert(&mut self, e: TimerEntry) {
        if !self.large.is_empty() {
            self.large.insert(e);
            return;
        }
        match self.small.binary_search(&e) {
            Ok(_) => {}
            Err(i) if self.small.len() < SMALL_MAX => self.small.insert(i, e),
            Err(_) => {
                self.large.extend(self.small.drain(..));
                self.large.insert(e);
            }
        }
    }

    /// Removes `e` if it is there.
    pub(crate) fn remove(&mut self, e: &TimerEntry) {
        if !self.large.is_empty() {
            self.large.remove(e);
        } else if let Ok(i) = self.small.binary_search(e) {
            self.small.remove(i);
        }
    }

    /// The earliest entry.
    pub(crate) fn first(&self) -> Option<&TimerEntry> {
        if self.large.is_empty() {
            self.small.first()
        } else {
            self.large.first()
        }
    }

    /// Removes and returns the earliest entry.
    pub(crate) fn pop_first(&mut self) -> Option<TimerEntry> {
        if !self.large.is_empty() {
            self.large.pop_first()
        } else if self.small.is_empty() {
            None
        } else {
            Some(self.small.remove(0))
        }
    }
}

/// Local ACK timeout: 4.096 µs · 2^timeout (IBTA 9.7.6.1.3); 0 means infinite.
pub fn ack_timeout_ns(timeout: u8) -> Option<Nanos> {
    (timeout != 0).then(|| 4096u64 << timeout.min(31))
}

/// The longest an RC requester with nothing more to send waits, under
/// [`crate::AckPolicy::Coalesce`], before it asks for an ACK it has not asked for (the
/// ACK nudge): 1 ms.
pub const ACK_NUDGE_MAX_NS: Nanos = 1_000_000;

/// The shortest such wait, unless the ACK timeout is shorter than twice it: 100 µs, two
/// round trips between two processes on loopback whose threads sleep (about 2 × 25 µs,
/// README "Benchmarks"), so a ping-pong's next request, which postpones the nudge,
/// normally comes first.
pub const ACK_NUDGE_MIN_NS: Nanos = 100_000;

/// How long an unacknowledged tail whose last packet did not ask for an ACK waits
/// before the requester asks (the ACK nudge, [`crate::AckPolicy::Coalesce`]): an
/// eighth of the local ACK timeout, within [[`ACK_NUDGE_MIN_NS`],
/// [`ACK_NUDGE_MAX_NS`]], and never more than half the timeout, so the nudge's answer
/// can arrive before the retransmit timer fires and counts a retry (1 ms when the
/// timeout is infinite).
pub fn ack_nudge_ns(timeout: u8) -> Nanos {
    ack_timeout_ns(timeout).map_or(ACK_NUDGE_MAX_NS, |t| {
        (t / 8).clamp(ACK_NUDGE_MIN_NS.min(t / 2), ACK_NUDGE_MAX_NS)
    })
}

/// The longest the requester waits for a missing READ response to turn up late
/// before asking again from it.
pub const MAX_REORDER_WINDOW_NS: Nanos = 1_000_000;

/// How long a gap in READ responses may be reordering rather than loss before the QP
/// has measured its round trip: a quarter of the local ACK timeout, at most
/// [`MAX_REORDER_WINDOW_NS`] (1 ms when the timeout is infinite); once it has,
/// [`Rtt::reorder_ns`]. A time window, as TCP RACK's `reo_wnd` (RFC 8985 6.2).
/// rxe does not act on such gaps at all and waits for its retransmit timer
/// (`rxe_comp.c` `check_psn` returns `COMPST_DONE` for a READ response ahead of
/// `comp.psn`).
pub fn reorder_window_ns(timeout: u8) -> Nanos {
    ack_timeout_ns(timeout).map_or(MAX_REORDER_WINDOW_NS, |t| {
        (t / 4).min(MAX_REORDER_WINDOW_NS)
    })
}

/// The RNR NAK timer table (IBTA 9.7.5.2.8, table 45), in nanoseconds. Code 0 is the
/// longest, 655.36 ms.
pub const RNR_TIMER_NS: [Nanos; 32] = [
    655_360_000,
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
];

/// The shortest reordering window once the round trip is measured: 50 µs, two round
/// trips between two processes on loopback whose threads sleep (about 2 x 25 µs), so a
/// response that a driver thread's wake-up delayed is not taken for a loss.
pub const MIN_REORDER_WINDOW_NS: Nanos = 50_000;

/// The shortest tail-loss probe timeout: 200 µs, twice [`ACK_NUDGE_MIN_NS`] (four such
/// loopback round trips), so an ACK that a sleeping peer thread or the responder's
/// deferred ACK holds back does not draw a probe.
pub const MIN_PROBE_NS: Nanos = 200_000;

/// A QP's round-trip estimate (RFC 6298 2: SRTT and RTTVAR, gains 1/8 and 1/4),
/// from the ACKs and responses of packets sent once (Karn's rule, RFC 6298 3: a
/// sample of a packet sent again is ambiguous and is not taken).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rtt {
    /// Smoothed round trip; `None` before the first sample.
    srtt: Option<Nanos>,
    /// The smallest sample (RFC 8985 6.2 `min_RTT`): a packet that waited behind no
    /// other, as a resend does.
    min: Option<Nanos>,
    /// Its mean deviation.
    rttvar: Nanos,
    /// The reordering window in quarters of SRTT (RFC 8985 6.2 `reo_wnd_mult`);
    /// 0 stands for the initial [`INITIAL_REORDER_QUARTERS`].
    reo_quarters: u32,
}

/// The reordering window starts at two SRTTs (eight quarters; RFC 8985 starts at one
/// quarter): a READ's responses past a gap are kept, so waiting longer costs little,
/// while a needless re-request replays the rest of the piece.
pub const INITIAL_REORDER_QUARTERS: u32 = 8;

/// The reordering window grows (doubles) on a needless re-request up to this many
/// quarters of SRTT, and never past [`reorder_window_ns`].
pub const MAX_REORDER_QUARTERS: u32 = 64;

impl Rtt {
    /// Takes one round-trip sample `r`.
    pub(crate) fn update(&mut self, r: Nanos) {
        self.min = Some(self.min.map_or(r, |m| m.min(r)));
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
    }

    /// The smoothed round trip, once measured.
    pub(crate) fn srtt(&self) -> Option<Nanos> {
        self.srtt
    }

    /// The smallest round trip seen, once measured.
    pub(crate) fn min_rtt(&self) -> Option<Nanos> {
        self.min
    }

    /// The tail-loss probe timeout (RFC 8985 7.2: PTO = 2 x SRTT): at least
    /// [`MIN_PROBE_NS`] and at most half the local ACK timeout `timeout` (IBTA
    /// encoding), so the probe's answer can come before the retransmit timer fires.
    /// `None` (no probe) before the first sample, or when the timeout is infinite
    /// and nothing bounds a probe.
    pub(crate) fn probe_ns(&self, timeout: u8) -> Option<Nanos> {
        let t = ack_timeout_ns(timeout)?;
        Some((2 * self.srtt?).max(MIN_PROBE_NS).min(t / 2))
    }

    /// The reordering window (RFC 8985 6.2: quarters of the round trip, from
    /// [`INITIAL_REORDER_QUARTERS`], more after needless re-requests), at least
    /// [`MIN_REORDER_WINDOW_NS`] and never longer than [`reorder_window_ns`], which
    /// is also the window before the first sample.
    pub(crate) fn reorder_ns(&self, timeout: u8) -> Nanos {
        let ceiling = reorder_window_ns(timeout);
        let q = Nanos::from(self.quarters());
        self.srtt.map_or(ceiling, |s| {
            (s / 4 * q).max(MIN_REORDER_WINDOW_NS).min(ceiling)
        })
    }

    fn quarters(&self) -> u32 {
        if self.reo_quarters == 0 {
            INITIAL_REORDER_QUARTERS
        } else {
            self.reo_quarters
        }
    }

    /// A re-request after the reordering window was needless: the response it asked
    /// for again arrived too soon after it to be the answer (RFC 8985 6.2 step 4,
    /// where TCP learns it from a DSACK). The window doubles.
    pub(crate) fn reordering_seen(&mut self) {
        self.reo_quarters = (self.quarters() * 2).min(MAX_REORDER_QUARTERS);
    }
}

/// One of a QP's timers (after quinn-proto's `Timer`), each an entry of its
/// [`TimerTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QpTimer {
    /// The local ACK timeout (IBTA 9.7.6.1.3): a retry when it fires.
    Retransmit = 0,
    /// An RNR NAK's wait (IBTA 9.7.5.2.8): the requester sends nothing until it ends.
    RnrWait = 1,
    /// The reordering window of a gap in READ responses ([`reorder_window_ns`]).
    Reorder = 2,
    /// The ACK nudge ([`ack_nudge_ns`]).
    Nudge = 3,
    /// The tail-loss probe ([`Rtt::probe_ns`]).
    Probe = 4,
}

impl QpTimer {
    /// How many timers a QP has.
    pub(crate) const COUNT: usize = 5;
}

/// A QP's deadlines, one slot per [`QpTimer`] (after quinn-proto's `TimerTable`):
/// setting, stopping and reading a timer is one store or load, and the QP's next
/// deadline is the minimum of the slots.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerTable {
    at: [Option<Nanos>; QpTimer::COUNT],
}

impl TimerTable {
    /// Starts (or moves) `t` to fire at `at`.
    pub(crate) fn set(&mut self, t: QpTimer, at: Nanos) {
        self.at[t as usize] = Some(at);
    }

    /// Starts `t` at `at`, or stops it when `at` is `None`.
    pub(crate) fn set_opt(&mut self, t: QpTimer, at: Option<Nanos>) {
        self.at[t as usize] = at;
    }

    /// Stops `t`.
    pub(crate) fn stop(&mut self, t: QpTimer) {
        self.at[t as usize] = None;
    }

    /// When `t` fires, if it runs.
    pub(crate) fn get(&self, t: QpTimer) -> Option<Nanos> {
        self.at[t as usize]
    }

    /// `t` runs and its deadline is not after `now`.
    pub(crate) fn expired(&self, t: QpTimer, now: Nanos) -> bool {
        self.at[t as usize].is_some_and(|at| at <= now)
    }

    /// Stops every timer.
    pub(crate) fn stop_all(&mut self) {
        self.at = [None; QpTimer::COUNT];
    }

    /// The earliest deadline of all running timers.
    pub(crate) fn next_timeout(&self) -> Option<Nanos> {
        // Runs after every packet in or out: a plain loop over the slots.
        let mut first: Option<Nanos> = None;
        for at in self.at.into_iter().flatten() {
            if first.is_none_or(|f| at < f) {
                first = Some(at);
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6298 2.2 / 2.3 arithmetic, and the probe and reordering bounds.
    #[test]
    fn rtt_estimate_follows_rfc_6298() {
        let mut r = Rtt::default();
        assert_eq!((r.srtt(), r.probe_ns(8)), (None, None));
        assert_eq!(r.reorder_ns(8), reorder_window_ns(8));
        r.update(80_000);
        assert_eq!((r.srtt, r.rttvar), (Some(80_000), 40_000));
        r.update(160_000);
        // RTTVAR = 3/4 * 40 + 1/4 * |80 - 160| = 50; SRTT = 7/8 * 80 + 1/8 * 160 = 90.
        assert_eq!((r.srtt, r.rttvar), (Some(90_000), 50_000));
        // The smallest sample is kept apart (RFC 8985 min_RTT).
        assert_eq!(r.min_rtt(), Some(80_000));
        r.update(20_000);
        assert_eq!(r.min_rtt(), Some(20_000));
        r.update(160_000);
        assert_eq!(r.min_rtt(), Some(20_000));
        let mut r = Rtt::default();
        assert_eq!(r.min_rtt(), None);
        r.update(80_000);
        r.update(160_000);
        // 2 x SRTT, above the floor, below half the 1.05 ms timeout.
        assert_eq!(r.probe_ns(8), Some(180_000.max(MIN_PROBE_NS)));
        assert_eq!(r.probe_ns(20), Some(MIN_PROBE_NS.max(180_000)));
        // Half the timeout caps it: timeout 4 is 65.5 µs.
        assert_eq!(r.probe_ns(4), Some(ack_timeout_ns(4).unwrap() / 2));
        // Infinite timeout: no probe.
        assert_eq!(r.probe_ns(0), None);
        // Two SRTTs at first, floored, capped by the timeout's quarter.
        assert_eq!(r.reorder_ns(14), 180_000);
        let mut fast = Rtt::default();
        fast.update(10_000);
        assert_eq!(fast.reorder_ns(14), MIN_REORDER_WINDOW_NS);
        let mut slow = Rtt::default();
        slow.update(100_000);
        assert_eq!(slow.reorder_ns(14), 200_000);
        // Needless re-requests double it, up to 64 quarters and the ceiling.
        slow.reordering_seen();
        assert_eq!(slow.reorder_ns(14), 400_000);
        for _ in 0..10 {
            slow.reordering_seen();
        }
        assert_eq!(slow.reorder_ns(14), reorder_window_ns(14));
        assert_eq!(slow.reorder_ns(8), reorder_window_ns(8));
        let mut slow = Rtt::default();
        slow.update(2_000_000);
        assert_eq!(slow.reorder_ns(8), reorder_window_ns(8));
        assert_eq!(slow.probe_ns(14), Some(4_000_000));
    }

    use std::collections::BTreeSet;

    /// The same operations on `Timers` and on a plain `BTreeSet` give the same results,
    /// across the move from the small store to the large one and back.
    #[test]
    fn behaves_as_an_ordered_set_in_both_stores() {
        let mut t = Timers::default();
        let mut model = BTreeSet::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        // How often each store was the one in use (both must be exercised).
        let (mut in_small, mut in_large) = (0u32, 0u32);
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Phases that grow past SMALL_MAX and drain back to empty.
            let grow = (step / 2_000) % 2 == 0;
            let e = TimerEntry {
                at: x % 97,
                qpn: (x >> 32) as u32 % 61,
            };
            // Growing: half inserts, a quarter pops, a quarter removes. Draining: half
            // pops, half removes, so the set empties and the next phase starts in the
            // small store again.
            match (grow, x % 4) {
                (true, 0 | 1) => {
                    t.insert(e);
                    model.insert(e);
                }
                (true, 2) | (false, 1 | 2) => assert_eq!(t.pop_first(), model.pop_first()),
                _ => {
                    t.remove(&e);
                    model.remove(&e);
                }
            }
            assert_eq!(t.first(), model.first(), "step {step}");
            assert!(t.small.is_empty() || t.large.is_empty());
            assert!(t.small.len() <= SMALL_MAX);
            if !t.large.is_empty() {
                in_large += 1;
            } else if !t.small.is_empty() {
                in_small += 1;
            }
        }
        assert!(in_small > 200 && in_large > 1000, "{in_small} {in_large}");
    }
}
