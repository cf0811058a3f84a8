//! Endpoints joined by an in-memory link on virtual time, with seeded loss,
//! duplication, reordering and a per-message drop filter, for tests and benchmarks
//! (after `rverbs_engine::sim`). Node `i` has the GID `::ffff:10.0.0.<i+1>`.

use crate::Nanos;
use crate::{Cm, Config, Event, Gid};
use rverbs_wire::mad::MAD_LEN;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Faults and delay applied to every MAD.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Probability a MAD is lost.
    pub loss: f64,
    /// Probability a MAD is delivered twice.
    pub dup: f64,
    /// Probability a MAD is held back by up to `reorder_ns` extra.
    pub reorder: f64,
    /// One-way delay.
    pub delay_ns: Nanos,
    /// Extra delay of a reordered MAD.
    pub reorder_ns: Nanos,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            delay_ns: 10_000,
            reorder_ns: 200_000,
        }
    }
}

/// What happened on the link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// MADs the endpoints sent.
    pub sent: u64,
    /// MADs delivered (duplicates twice).
    pub delivered: u64,
    /// Lost at random.
    pub lost: u64,
    /// Dropped by the filter.
    pub filtered: u64,
    /// Extra copies.
    pub duplicated: u64,
    /// Held back.
    pub reordered: u64,
    /// Sent to a GID no node has.
    pub unroutable: u64,
}

/// Decides whether to drop a MAD: `(from node, to node, attribute ID, MAD)`.
pub type Filter = Box<dyn FnMut(usize, usize, u16, &[u8]) -> bool>;

type Flight = Reverse<(Nanos, u64, usize, usize, Box<[u8; MAD_LEN]>)>;

/// The simulated network.
pub struct Sim {
    nodes: Vec<Cm>,
    gids: Vec<Gid>,
    events: Vec<VecDeque<Event>>,
    link: LinkConfig,
    rng: u64,
    seq: u64,
    now: Nanos,
    flights: BinaryHeap<Flight>,
    filter: Option<Filter>,
    held: Vec<bool>,
    /// Link counters.
    pub net: NetStats,
}

impl core::fmt::Debug for Sim {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sim")
            .field("nodes", &self.nodes.len())
            .field("now", &self.now)
            .field("net", &self.net)
            .finish()
    }
}

/// Node `i`'s GID.
pub fn node_gid(i: usize) -> Gid {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12] = 10;
    g[15] = (i + 1) as u8;
    g
}

impl Sim {
    /// `n` nodes with configurations from `cfg(i)` (its `local_gid` is set to
    /// [`node_gid`]), on `link`, with faults drawn from `seed`.
    pub fn new(
        n: usize,
        mut cfg: impl FnMut(usize) -> Config,
        link: LinkConfig,
        seed: u64,
    ) -> Self {
        let gids: Vec<Gid> = (0..n).map(node_gid).collect();
        let nodes = (0..n)
            .map(|i| {
                Cm::new(Config {
                    local_gid: gids[i],
                    ..cfg(i)
                })
            })
            .collect();
        Sim {
            nodes,
            gids,
            events: vec![VecDeque::new(); n],
            link,
            rng: seed | 1,
            seq: 0,
            now: 0,
            flights: BinaryHeap::new(),
            filter: None,
            held: vec![false; n],
            net: NetStats::default(),
        }
    }

    /// Node `i`'s CM.
    pub fn node(&mut self, i: usize) -> &mut Cm {
        &mut self.nodes[i]
    }

    /// Current virtual time.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Sets the drop filter.
    pub fn set_filter(&mut self, f: impl FnMut(usize, usize, u16, &[u8]) -> bool + 'static) {
        self.filter = Some(Box::new(f));
    }

    /// Removes the drop filter.
    pub fn clear_filter(&mut self) {
        self.filter = None;
    }

    /// Changes the link's faults.
    pub fn set_link(&mut self, link: LinkConfig) {
        self.link = link;
    }

    /// Takes node `i`'s events so far.
    pub fn events(&mut self, i: usize) -> Vec<Event> {
        self.collect();
        self.events[i].drain(..).collect()
    }

    fn rand(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// While held, node `i`'s events stay in its CM (a consumer that does not read
    /// them: connect requests then fill the listener's backlog).
    pub fn hold_events(&mut self, i: usize, hold: bool) {
        self.held[i] = hold;
    }

    fn collect(&mut self) {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if self.held[i] {
                continue;
            }
            while let Some(e) = n.poll_event() {
                self.events[i].push_back(e);
            }
        }
    }

    /// Moves every queued MAD onto the link.
    fn pump(&mut self) {
        for from in 0..self.nodes.len() {
            while let Some(t) = self.nodes[from].poll_transmit() {
                self.net.sent += 1;
                let Some(to) = self.gids.iter().position(|g| *g == t.dest) else {
                    self.net.unroutable += 1;
                    continue;
                };
                let attr = u16::from_be_bytes([t.mad[16], t.mad[17]]);
                if let Some(f) = self.filter.as_mut() {
                    if f(from, to, attr, &t.mad[..]) {
                        self.net.filtered += 1;
                        continue;
                    }
                }
                if self.rand() < self.link.loss {
                    self.net.lost += 1;
                    continue;
                }
                let copies = if self.rand() < self.link.dup {
                    self.net.duplicated += 1;
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    let mut at = self.now + self.link.delay_ns;
                    if self.rand() < self.link.reorder {
                        self.net.reordered += 1;
                        at += (self.rand() * self.link.reorder_ns as f64) as Nanos;
                    }
                    self.seq += 1;
                    self.flights
                        .push(Reverse((at, self.seq, from, to, t.mad.clone())));
                }
            }
        }
    }

    /// Runs until nothing is in flight and no timer is due before `until`; returns
    /// the time reached.
    pub fn run_until(&mut self, until: Nanos) -> Nanos {
        loop {
            self.pump();
            self.collect();
            let next_flight = self.flights.peek().map(|Reverse(f)| f.0);
            let next_timer = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
            let next = match (next_flight, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if next > until {
                break;
            }
            self.now = self.now.max(next);
            while let Some(Reverse(f)) = self.flights.peek() {
                if f.0 > self.now {
                    break;
                }
                let Some(Reverse((_, _, from, to, mad))) = self.flights.pop() else {
                    break;
                };
                self.net.delivered += 1;
                let src = self.gids[from];
                self.nodes[to].handle_mad(self.now, src, &mad[..]);
            }
            for n in self.nodes.iter_mut() {
                if n.poll_timeout().is_some_and(|t| t <= self.now) {
                    n.handle_timeout(self.now);
                }
            }
        }
        self.now = self.now.max(until);
        self.collect();
        self.now
    }

    /// Runs `d` nanoseconds of virtual time.
    pub fn run_for(&mut self, d: Nanos) -> Nanos {
        let until = self.now + d;
        self.run_until(until)
    }

    /// Injects a MAD into node `to` as if `from` had sent it (hostile input).
    pub fn inject(&mut self, from: usize, to: usize, mad: &[u8]) {
        let src = self.gids[from];
        let now = self.now;
        self.nodes[to].handle_mad(now, src, mad);
        self.collect();
    }
}
