//! A deterministic network simulator: engines joined by in-memory links on virtual time,
//! with seeded loss, duplication, reordering, corruption and delay. Tests (and users who
//! want to see how their traffic pattern behaves on a bad network) drive it.
//!
//! Each engine gets one address, `10.0.0.<i+1>` (or `fd00::<i+1>` with IPv6), and a GID
//! table holding just that address at index 0.

use crate::config::Config;
use crate::engine::Engine;
use crate::net::{self, Datagram, Transmit};
use crate::types::Nanos;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Faults and delay applied to every datagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub dup: f64,
    /// Probability a datagram is held back by up to `reorder_ns` extra.
    pub reorder: f64,
    /// Probability one bit of a datagram is flipped (the ICRC must catch it).
    pub corrupt: f64,
    /// One-way delay.
    pub delay_ns: Nanos,
    /// Extra delay of a reordered datagram (uniform in `0..reorder_ns`).
    pub reorder_ns: Nanos,
    /// Serialisation time per byte (0: infinite bandwidth).
    pub ns_per_byte: Nanos,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay_ns: 5_000,
            reorder_ns: 50_000,
            ns_per_byte: 0,
        }
    }
}

/// What happened on the simulated network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams the engines sent.
    pub sent: u64,
    /// Datagrams delivered (duplicates count twice).
    pub delivered: u64,
    /// Datagrams lost.
    pub lost: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Datagrams held back.
    pub reordered: u64,
    /// Datagrams with a flipped bit.
    pub corrupted: u64,
}

struct InFlight {
    at: Nanos,
    seq: u64,
    to: usize,
    t: Transmit,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Min-heap on (time, sequence).
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Engines on a simulated network.
pub struct Sim {
    /// The engines, by index.
    pub engines: Vec<Engine>,
    addrs: Vec<IpAddr>,
    /// Virtual time.
    pub now: Nanos,
    /// Faults.
    pub link: LinkConfig,
    /// When set, receivers are not told the IPv4 ID and must recover it from the ICRC.
    pub hide_ipv4_id: bool,
    /// Network statistics.
    pub stats: NetStats,
    /// Datagrams each engine sent with the selective-repeat marker
    /// ([`crate::selective::SR_MARK`]) set, by engine index.
    pub marked: Vec<u64>,
    /// The engines leave RoCE v2 ICRCs (and lent payloads) to the driver, played
    /// by [`Sim::send`].
    fills_icrc: bool,
    rng: u64,
    seq: u64,
    wire: BinaryHeap<InFlight>,
    link_free_at: Vec<Nanos>,
}

impl Sim {
    /// `n` engines on IPv4 (`ipv6 == false`) or IPv6 addresses, with `link` faults and a
    /// seed for both the faults and the engines' keys.
    pub fn new(n: usize, ipv6: bool, link: LinkConfig, seed: u64) -> Sim {
        Sim::with_config(n, ipv6, link, seed, Config::default())
    }

    /// [`Sim::new`] with engines made from `base` (its GID table and seed are replaced
    /// by each engine's own). With [`Config::sender_fills_icrc`] the simulator plays
    /// the driver as the `rverbs` device does: when an engine hands a RoCE v2 packet
    /// over, its payload left in a memory region ([`Config::lend_payloads`]) is read
    /// and its ICRC computed right then, so a retransmission reads the region again.
    pub fn with_config(n: usize, ipv6: bool, link: LinkConfig, seed: u64, base: Config) -> Sim {
        let addrs: Vec<IpAddr> = (0..n)
            .map(|i| {
                if ipv6 {
                    IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i as u16 + 1))
                } else {
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1))
                }
            })
            .collect();
        let engines = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                Engine::new(Config {
                    gids: vec![net::ip_to_gid(*a)],
                    seed: seed.wrapping_mul(31).wrapping_add(i as u64 + 1),
                    ..base.clone()
                })
            })
            .collect();
        Sim {
            fills_icrc: base.sender_fills_icrc,
            engines,
            link_free_at: vec![0; n],
            addrs,
            now: 0,
            link,
            hide_ipv4_id: false,
            stats: NetStats::default(),
            marked: vec![0; n],
            rng: seed ^ 0x9e37_79b9_7f4a_7c15,
            seq: 0,
            wire: BinaryHeap::new(),
        }
    }

    /// The address of engine `i`.
    pub fn addr(&self, i: usize) -> IpAddr {
        self.addrs[i]
    }

    fn rand(&mut self) -> u64 {
        let mut r = crate::rng::SplitMix64(self.rng);
        let v = r.next_u64();
        self.rng = r.0;
        v
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rand() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// Moves every pending transmit of every engine onto the wire.
    pub fn flush(&mut self) {
        for i in 0..self.engines.len() {
            while let Some(t) = self.engines[i].poll_transmit(self.now) {
                self.send(i, t);
            }
        }
    }

    fn send(&mut self, from: usize, mut t: Transmit) {
        self.stats.sent += 1;
        if t.payload.len() > 8 && t.payload[8] & crate::selective::SR_MARK != 0 {
            self.marked[from] += 1;
        }
        if self.fills_icrc && !t.roce_v1 {
            // What the device's driver does when it sends (`rverbs` context.rs,
            // `send_all`): the body comes out of its region now, and the ICRC covers
            // the port the datagram leaves from (here the QP's own).
            t.materialize();
            net::fill_icrc(t.src, t.dst, t.src_port, &mut t.payload);
        }
        let Some(to) = self.addrs.iter().position(|a| *a == t.dst) else {
            self.stats.lost += 1;
            return;
        };
        let start = if self.link.ns_per_byte > 0 {
            let s = self.link_free_at[from].max(self.now);
            self.link_free_at[from] = s + self.link.ns_per_byte * t.payload.len() as u64;
            self.link_free_at[from]
        } else {
            self.now
        };
        if self.chance(self.link.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.chance(self.link.corrupt) && !t.payload.is_empty() {
            let bit = (self.rand() % (t.payload.len() as u64 * 8)) as usize;
            t.payload[bit / 8] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        let mut at = start + self.link.delay_ns;
        if self.chance(self.link.reorder) && self.link.reorder_ns > 0 {
            at += self.rand() % self.link.reorder_ns;
            self.stats.reordered += 1;
        }
        if self.chance(self.link.dup) {
            self.stats.duplicated += 1;
            let extra = self.rand() % (self.link.reorder_ns.max(1));
            self.push(at + extra, to, t.clone());
        }
        self.push(at, to, t);
    }

    fn push(&mut self, at: Nanos, to: usize, t: Transmit) {
        self.seq += 1;
        self.wire.push(InFlight {
            at,
            seq: self.seq,
            to,
            t,
        });
    }

    /// The next moment something happens (a delivery or an engine timer).
    pub fn next_event(&self) -> Option<Nanos> {
        let wire = self.wire.peek().map(|f| f.at);
        let timers = self.engines.iter().filter_map(Engine::poll_timeout).min();
        match (wire, timers) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Advances to the next event and handles it. Returns `false` when nothing is left
    /// to happen.
    pub fn step(&mut self) -> bool {
        self.flush();
        let Some(at) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(at);
        while self.wire.peek().is_some_and(|f| f.at <= self.now) {
            let Some(f) = self.wire.pop() else { break };
            self.stats.delivered += 1;
            let d = Datagram {
                ipv4_id: if self.hide_ipv4_id { None } else { Some(0) },
                ..f.t.as_received()
            };
            self.engines[f.to].handle_datagram(self.now, &d);
        }
        for e in &mut self.engines {
            if e.poll_timeout().is_some_and(|t| t <= self.now) {
                e.handle_timeout(self.now);
            }
        }
        self.flush();
        true
    }

    /// Steps until `done` holds or virtual time passes `deadline`; returns whether
    /// `done` held.
    pub fn run_until(&mut self, deadline: Nanos, mut done: impl FnMut(&mut Sim) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.now > deadline || !self.step() {
                return done(self);
            }
        }
    }
}
