//! Fault injection (`RVERBS_FAULTS`): loss, duplication, reordering, corruption and delay
//! applied to a device's traffic, so an RDMA application can be tested on a bad network
//! without one. Loss, duplication and corruption apply to both directions; delay and
//! reordering to what the device sends.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::IpAddr;

/// What to inject. Probabilities are per datagram, in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// Datagrams lost.
    pub loss: f64,
    /// Datagrams delivered twice.
    pub dup: f64,
    /// Sent datagrams held back behind later ones (by up to 4 × `delay_us`, at least
    /// 200 µs).
    pub reorder: f64,
    /// Datagrams with one bit flipped (the ICRC catches them; they are counted).
    pub corrupt: f64,
    /// Delay added to every sent datagram, in microseconds.
    pub delay_us: u64,
    /// Seed of the fault generator (same seed, same decisions for the same traffic).
    pub seed: u64,
}

impl Faults {
    /// Parses `loss=0.05,dup=0.01,reorder=0.05,corrupt=0.01,delay_us=200,seed=7` (any
    /// subset, any order).
    pub fn parse(spec: &str) -> Result<Faults, String> {
        let mut f = Faults {
            seed: 1,
            ..Faults::default()
        };
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: want key=value"))?;
            let prob = |v: &str| -> Result<f64, String> {
                let p: f64 = v.parse().map_err(|_| format!("{k}={v}: not a number"))?;
                if (0.0..=1.0).contains(&p) {
                    Ok(p)
                } else {
                    Err(format!("{k}={v}: a probability must be within 0..1"))
                }
            };
            match k {
                "loss" => f.loss = prob(v)?,
                "dup" => f.dup = prob(v)?,
                "reorder" => f.reorder = prob(v)?,
                "corrupt" => f.corrupt = prob(v)?,
                "delay_us" => {
                    f.delay_us = v
                        .parse()
                        .map_err(|_| format!("delay_us={v}: not a whole number"))?;
                    if f.delay_us > 10_000_000 {
                        return Err(format!("delay_us={v}: at most 10 s"));
                    }
                }
                "seed" => {
                    f.seed = v
                        .parse()
                        .map_err(|_| format!("seed={v}: not a whole number"))?
                }
                _ => {
                    return Err(format!(
                        "unknown fault {k:?} (loss, dup, reorder, corrupt, delay_us, seed)"
                    ))
                }
            }
        }
        Ok(f)
    }
}

/// How many datagrams each fault touched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Dropped.
    pub lost: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Corrupted.
    pub corrupted: u64,
    /// Held back for reordering.
    pub reordered: u64,
    /// Delayed (including reordered).
    pub delayed: u64,
}

/// Something sent late: a datagram of the UDP path (source, destination, IP metadata,
/// bytes) or a whole frame of the raw path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Held {
    Datagram(IpAddr, IpAddr, (u8, u8, u32), Vec<u8>),
    Frame(Vec<u8>),
}

/// Something waiting for its delay to pass: (due time, sequence, what).
type Delayed = Reverse<(u64, u64, Held)>;

pub(crate) struct FaultState {
    pub(crate) f: Faults,
    rng: u64,
    seq: u64,
    pub(crate) stats: FaultStats,
    /// Held datagrams, and held frames (the raw device's own taps take those).
    delayed: BinaryHeap<Delayed>,
    delayed_frames: BinaryHeap<Delayed>,
}

/// What to do with one datagram.
pub(crate) struct Verdict {
    /// Copies to deliver (0 = lost).
    pub(crate) copies: u32,
    /// Delay in nanoseconds.
    pub(crate) delay_ns: u64,
    /// The bit to flip, as a draw to take modulo the datagram's bits
    /// ([`Verdict::corrupt`]); `None`: not corrupted.
    flip: Option<u64>,
}

impl Verdict {
    /// Delivered once, at once, unchanged: the datagram needs no bytes of its own
    /// (a carrier may send it on its batched path, its payload still in its region).
    pub(crate) fn untouched(&self) -> bool {
        self.copies == 1 && self.delay_ns == 0 && self.flip.is_none()
    }

    /// Applies the corruption chosen (if any) to the datagram's final `bytes`, of the
    /// length the verdict was made for.
    pub(crate) fn corrupt(&self, bytes: &mut [u8]) {
        if let Some(draw) = self.flip.filter(|_| !bytes.is_empty()) {
            let bit = (draw % (bytes.len() as u64 * 8)) as usize;
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
    }
}

impl FaultState {
    pub(crate) fn new(f: Faults) -> Self {
        FaultState {
            f,
            rng: f.seed ^ 0x9e37_79b9_7f4a_7c15,
            seq: 0,
            stats: FaultStats::default(),
            delayed: BinaryHeap::new(),
            delayed_frames: BinaryHeap::new(),
        }
    }

    fn next(&mut self) -> u64 {
        let mut r = rverbs_engine::rng::SplitMix64(self.rng);
        let v = r.next_u64();
        self.rng = r.0;
        v
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// Decides the fate of one datagram; corrupts `bytes` in place if so chosen.
    pub(crate) fn judge(&mut self, bytes: &mut [u8], outgoing: bool) -> Verdict {
        let v = self.decide(bytes.len(), outgoing);
        v.corrupt(bytes);
        v
    }

    /// Decides the fate of one datagram of `len` bytes without touching them (the
    /// same draws as [`FaultState::judge`]): the sender judges a datagram before it
    /// has its final bytes, and builds them only when the verdict changes them.
    pub(crate) fn decide(&mut self, len: usize, outgoing: bool) -> Verdict {
        if self.chance(self.f.loss) {
            self.stats.lost += 1;
            return Verdict {
                copies: 0,
                delay_ns: 0,
                flip: None,
            };
        }
        let mut flip = None;
        if len > 0 && self.chance(self.f.corrupt) {
            flip = Some(self.next());
            self.stats.corrupted += 1;
        }
        let copies = if self.chance(self.f.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        let mut delay_ns = 0;
        if outgoing {
            delay_ns = self.f.delay_us * 1000;
            if self.chance(self.f.reorder) {
                let span = (self.f.delay_us * 4).max(200) * 1000;
                delay_ns += 1 + self.next() % span;
                self.stats.reordered += 1;
            }
            if delay_ns > 0 {
                self.stats.delayed += 1;
            }
        }
        Verdict {
            copies,
            delay_ns,
            flip,
        }
    }

    pub(crate) fn hold(
        &mut self,
        due: u64,
        src: IpAddr,
        dst: IpAddr,
        meta: crate::sys::IpMeta,
        bytes: Vec<u8>,
    ) {
        let m = (meta.hop_limit, meta.traffic_class, meta.flow_label);
        self.push(due, Held::Datagram(src, dst, m, bytes));
    }

    /// Holds a raw-path frame until `due`.
    pub(crate) fn hold_frame(&mut self, due: u64, frame: Vec<u8>) {
        self.push(due, Held::Frame(frame));
    }

    fn push(&mut self, due: u64, what: Held) {
        self.seq += 1;
        let heap = match what {
            Held::Datagram(..) => &mut self.delayed,
            Held::Frame(_) => &mut self.delayed_frames,
        };
        heap.push(Reverse((due, self.seq, what)));
    }

    /// The next held datagram (or, with `frames`, frame) due at or before `now`.
    pub(crate) fn due(&mut self, now: u64, frames: bool) -> Option<Held> {
        let heap = if frames {
            &mut self.delayed_frames
        } else {
            &mut self.delayed
        };
        if heap.peek().is_some_and(|Reverse(d)| d.0 <= now) {
            heap.pop().map(|Reverse((_, _, what))| what)
        } else {
            None
        }
    }

    /// When the next held datagram (or frame) is due.
    pub(crate) fn next_due(&self, frames: bool) -> Option<u64> {
        let heap = if frames {
            &self.delayed_frames
        } else {
            &self.delayed
        };
        heap.peek().map(|Reverse(d)| d.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_form() {
        let f = Faults::parse("loss=0.05,dup=0.01,reorder=0.05,corrupt=0.01,delay_us=200,seed=7")
            .unwrap();
        assert_eq!(
            f,
            Faults {
                loss: 0.05,
                dup: 0.01,
                reorder: 0.05,
                corrupt: 0.01,
                delay_us: 200,
                seed: 7
            }
        );
        assert_eq!(Faults::parse("").unwrap().loss, 0.0);
        for bad in [
            "loss=2",
            "loss=x",
            "jitter=1",
            "loss",
            "delay_us=-1",
            "delay_us=99999999",
        ] {
            assert!(Faults::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates_are_about_right() {
        let mut s = FaultState::new(Faults {
            loss: 0.1,
            dup: 0.1,
            corrupt: 0.1,
            reorder: 0.1,
            delay_us: 0,
            seed: 3,
        });
        let mut copies = 0;
        for _ in 0..10_000 {
            let mut b = [0u8; 16];
            copies += s.judge(&mut b, true).copies;
        }
        let st = s.stats;
        for n in [st.lost, st.duplicated, st.corrupted, st.reordered] {
            assert!((800..1200).contains(&n), "{st:?}");
        }
        assert_eq!(u64::from(copies), 10_000 - st.lost + st.duplicated);
    }
}
