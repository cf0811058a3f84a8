//! Neighbour resolution of the raw path (RoCE v1 and raw-mode RoCE v2): the cache and
//! its state machine, without I/O (`rawnet.rs` sends the probes and the frames).
//!
//! It follows the kernel's neighbour layer (`net/core/neighbour.c`, used by ARP and ND
//! alike, and by `drivers/infiniband/core/addr.c` through `dst_neigh_lookup`) in
//! simplified form:
//!
//! * A destination with no entry gets an INCOMPLETE one: a broadcast ARP request (RFC
//!   826) or a multicast Neighbor Solicitation (RFC 4861 7.2.2) goes out at once, and
//!   frames for it wait in a bounded queue ([`QUEUE_FRAMES`], about the kernel's default
//!   `unres_qlen_bytes` of 212992 in MTU-1024 packets); when the queue is full the oldest
//!   frame is dropped for the new one, as `__neigh_event_send` does.
//! * Up to [`MAX_PROBES`] probes (RFC 4861 MAX_MULTICAST_SOLICIT; the kernel's ARP
//!   `mcast_solicit` default is also 3). The interval starts at [`FIRST_RETRANS_NS`]
//!   and doubles (exponential backoff as RFC 7048 allows; shorter than the kernel's
//!   fixed 1 s RetransTimer because the transport above retransmits anyway and a
//!   queue-pair connection should not stall for seconds). When every probe went
//!   unanswered the entry and its queued frames are dropped and counted; the next frame
//!   for that destination starts over, as a FAILED kernel entry does.
//! * A reply (or, per RFC 826's merge rule and RFC 4861 7.2.3, a request from a
//!   neighbour that names one of our addresses) makes the entry REACHABLE for
//!   [`REACHABLE_NS`] (RFC 4861 REACHABLE_TIME) and releases its queue. An expired entry
//!   is still used while it is re-probed by unicast (the kernel's STALE -> PROBE); if
//!   that fails, it is removed.

use rverbs_engine::Nanos;
use rverbs_wire::ethernet::MacAddr;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Probes sent before a destination is given up.
pub(crate) const MAX_PROBES: u32 = 3;
/// Interval before the second probe (then doubling).
pub(crate) const FIRST_RETRANS_NS: Nanos = 100_000_000;
/// How long a confirmed entry is used without asking again.
pub(crate) const REACHABLE_NS: Nanos = 30_000_000_000;
/// Frames queued per unresolved destination.
pub(crate) const QUEUE_FRAMES: usize = 256;
/// Most entries (a flood of requests from the link cannot grow the cache further).
pub(crate) const MAX_ENTRIES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Being resolved: `probes` sent, the next at `next`.
    Incomplete { probes: u32, next: Nanos },
    /// Confirmed until `until`.
    Reachable { mac: MacAddr, until: Nanos },
    /// Expired, still used, being re-confirmed by unicast probes.
    Probe {
        mac: MacAddr,
        probes: u32,
        next: Nanos,
    },
}

struct Entry {
    state: State,
    /// Whole frames waiting for the MAC (their first six bytes are overwritten).
    queue: VecDeque<Vec<u8>>,
}

/// What [`Neighbours::lookup`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Send to this MAC now; when `probe` is set, also send a unicast probe to it
    /// (the entry expired and is being re-confirmed).
    Mac { mac: MacAddr, probe: bool },
    /// Unresolved: queue the frame ([`Neighbours::enqueue`]); when `probe` is set,
    /// send the first broadcast / multicast probe now.
    Pending { probe: bool },
}

/// A probe to send: for `ip`, to `unicast` (a re-confirmation) or to everyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probe {
    pub(crate) ip: IpAddr,
    pub(crate) unicast: Option<MacAddr>,
}

/// The neighbour cache of one raw-mode device.
#[derive(Default)]
pub(crate) struct Neighbours {
    map: HashMap<IpAddr, Entry>,
}

fn backoff(probes: u32) -> Nanos {
    FIRST_RETRANS_NS << probes.saturating_sub(1).min(8)
}

impl Neighbours {
    /// The MAC for `ip` or what to do instead. `kernel` is asked on a miss (the
    /// namespace's own neighbour table; a complete entry there is taken as reachable).
    pub(crate) fn lookup(
        &mut self,
        ip: IpAddr,
        now: Nanos,
        kernel: impl FnOnce() -> Option<MacAddr>,
    ) -> Lookup {
        if let Some(e) = self.map.get_mut(&ip) {
            return match e.state {
                State::Reachable { mac, until } if now < until => Lookup::Mac { mac, probe: false },
                State::Reachable { mac, .. } => {
                    e.state = State::Probe {
                        mac,
                        probes: 1,
                        next: now + backoff(1),
                    };
                    Lookup::Mac { mac, probe: true }
                }
                State::Probe { mac, .. } => Lookup::Mac { mac, probe: false },
                State::Incomplete { .. } => Lookup::Pending { probe: false },
            };
        }
        if let Some(mac) = kernel() {
            self.insert(
                ip,
                State::Reachable {
                    mac,
                    until: now + REACHABLE_NS,
                },
            );
            return Lookup::Mac { mac, probe: false };
        }
        let created = self.insert(
            ip,
            State::Incomplete {
                probes: 1,
                next: now + backoff(1),
            },
        );
        Lookup::Pending { probe: created }
    }

    fn insert(&mut self, ip: IpAddr, state: State) -> bool {
        if self.map.len() >= MAX_ENTRIES && !self.map.contains_key(&ip) {
            return false;
        }
        self.map.insert(
            ip,
            Entry {
                state,
                queue: VecDeque::new(),
            },
        );
        true
    }

    /// Queues a frame for an unresolved `ip`. Returns the frames dropped to make room
    /// (the oldest), or the frame itself when there is no entry (the cache is full).
    pub(crate) fn enqueue(&mut self, ip: IpAddr, frame: Vec<u8>) -> Vec<Vec<u8>> {
        let Some(e) = self.map.get_mut(&ip) else {
            return vec![frame];
        };
        let mut dropped = Vec::new();
        while e.queue.len() >= QUEUE_FRAMES {
            dropped.extend(e.queue.pop_front());
        }
        e.queue.push_back(frame);
        dropped
    }

    /// Learns that `ip` is at `mac`. An existing entry is confirmed (RFC 826: "update
    /// the sender hardware address"); a new one is made only with `create` (the packet
    /// named one of our addresses as its target). Returns the frames that waited for
    /// it, their destination MAC filled in.
    pub(crate) fn learn(
        &mut self,
        ip: IpAddr,
        mac: MacAddr,
        now: Nanos,
        create: bool,
    ) -> Vec<Vec<u8>> {
        let reachable = State::Reachable {
            mac,
            until: now + REACHABLE_NS,
        };
        match self.map.get_mut(&ip) {
            Some(e) => {
                e.state = reachable;
                let mut out: Vec<Vec<u8>> = e.queue.drain(..).collect();
                for f in &mut out {
                    if f.len() >= 6 {
                        f[..6].copy_from_slice(&mac.0);
                    }
                }
                out
            }
            None => {
                if create && !mac.is_multicast() && mac.0 != [0; 6] {
                    self.insert(ip, reachable);
                }
                Vec::new()
            }
        }
    }

    /// Runs the retransmission timers: the probes due now, and the queued frames
    /// dropped because their destination did not answer.
    pub(crate) fn poll(&mut self, now: Nanos) -> (Vec<Probe>, Vec<Vec<u8>>) {
        let mut probes = Vec::new();
        let mut dropped = Vec::new();
        self.map.retain(|&ip, e| match &mut e.state {
            State::Incomplete { probes: n, next }
            | State::Probe {
                probes: n, next, ..
            } if *next <= now => {
                if *n >= MAX_PROBES {
                    dropped.extend(e.queue.drain(..));
                    return false;
                }
                *n += 1;
                *next = now + backoff(*n);
                probes.push(Probe {
                    ip,
                    unicast: match e.state {
                        State::Probe { mac, .. } => Some(mac),
                        _ => None,
                    },
                });
                true
            }
            _ => true,
        });
        (probes, dropped)
    }

    /// When [`Neighbours::poll`] next has something to do.
    pub(crate) fn next_due(&self) -> Option<Nanos> {
        self.map
            .values()
            .filter_map(|e| match e.state {
                State::Incomplete { next, .. } | State::Probe { next, .. } => Some(next),
                State::Reachable { .. } => None,
            })
            .min()
    }

    /// The entry for `ip`, when resolved (for tests and statistics).
    #[cfg(test)]
    fn mac(&self, ip: IpAddr) -> Option<MacAddr> {
        match self.map.get(&ip)?.state {
            State::Reachable { mac, .. } | State::Probe { mac, .. } => Some(mac),
            State::Incomplete { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    const M: MacAddr = MacAddr([2, 0, 0, 0, 0, 9]);

    #[test]
    fn resolves_queues_and_releases() {
        let mut n = Neighbours::default();
        let a = ip("10.0.0.2");
        assert_eq!(n.lookup(a, 0, || None), Lookup::Pending { probe: true });
        assert_eq!(n.lookup(a, 1, || None), Lookup::Pending { probe: false });
        assert!(n.enqueue(a, vec![0xee; 20]).is_empty());
        assert!(n.enqueue(a, vec![0xdd; 20]).is_empty());
        let out = n.learn(a, M, 5 * MS, false);
        assert_eq!(out.len(), 2);
        assert_eq!(&out[0][..6], &M.0);
        assert_eq!(out[0][6], 0xee);
        assert_eq!(out[1][6], 0xdd);
        assert_eq!(
            n.lookup(a, 6 * MS, || None),
            Lookup::Mac {
                mac: M,
                probe: false
            }
        );
        assert_eq!(n.next_due(), None);
    }

    #[test]
    fn gives_up_after_the_probes_with_backoff() {
        let mut n = Neighbours::default();
        let a = ip("fd00::77");
        assert_eq!(n.lookup(a, 0, || None), Lookup::Pending { probe: true });
        n.enqueue(a, vec![0; 20]);
        assert_eq!(n.next_due(), Some(100 * MS));
        assert_eq!(n.poll(99 * MS), (vec![], vec![]));
        let (p, d) = n.poll(100 * MS);
        assert_eq!((p.len(), d.len()), (1, 0));
        assert_eq!(p[0].unicast, None);
        assert_eq!(n.next_due(), Some(300 * MS), "the interval doubles");
        assert_eq!(n.poll(300 * MS).0.len(), 1);
        assert_eq!(n.next_due(), Some(700 * MS));
        // The third probe went unanswered: the entry and its frame go.
        assert_eq!(n.poll(700 * MS), (vec![], vec![vec![0; 20]]));
        assert_eq!(n.next_due(), None);
        // The next frame starts over.
        assert_eq!(
            n.lookup(a, 800 * MS, || None),
            Lookup::Pending { probe: true }
        );
    }

    #[test]
    fn bounded_queue_drops_oldest() {
        let mut n = Neighbours::default();
        let a = ip("10.0.0.3");
        n.lookup(a, 0, || None);
        for i in 0..QUEUE_FRAMES + 3 {
            let d = n.enqueue(a, vec![i as u8; 8]);
            assert_eq!(d.len(), usize::from(i >= QUEUE_FRAMES));
        }
        let out = n.learn(a, M, 1, false);
        assert_eq!(out.len(), QUEUE_FRAMES);
        assert_eq!(out[0][6], 3, "the three oldest were dropped");
        // No entry: nothing to queue on.
        assert_eq!(n.enqueue(ip("10.0.0.99"), vec![1; 8]), vec![vec![1; 8]]);
    }

    #[test]
    fn kernel_entry_learning_and_expiry() {
        let mut n = Neighbours::default();
        let a = ip("10.0.0.4");
        assert_eq!(
            n.lookup(a, 0, || Some(M)),
            Lookup::Mac {
                mac: M,
                probe: false
            }
        );
        // Unsolicited replies do not create entries; a request naming us does.
        let b = ip("10.0.0.5");
        assert!(n.learn(b, M, 0, false).is_empty());
        assert_eq!(n.mac(b), None);
        n.learn(b, M, 0, true);
        assert_eq!(n.mac(b), Some(M));
        // Broadcast or zero MACs are never learnt.
        let c = ip("10.0.0.6");
        n.learn(c, MacAddr::BROADCAST, 0, true);
        n.learn(c, MacAddr([0; 6]), 0, true);
        assert_eq!(n.mac(c), None);
        // Expired: still used, with a unicast re-probe; removed when unanswered.
        let t = REACHABLE_NS + 1;
        assert_eq!(
            n.lookup(a, t, || None),
            Lookup::Mac {
                mac: M,
                probe: true
            }
        );
        assert_eq!(
            n.lookup(a, t, || None),
            Lookup::Mac {
                mac: M,
                probe: false
            }
        );
        let (p, _) = n.poll(t + 100 * MS);
        assert_eq!(p[0].unicast, Some(M));
        n.poll(t + 300 * MS);
        n.poll(t + 700 * MS);
        assert_eq!(n.mac(a), None);
        // A confirmation while probing makes it reachable again.
        n.lookup(b, t, || None);
        n.learn(b, M, t + 1, false);
        assert_eq!(
            n.lookup(b, t + 2, || None),
            Lookup::Mac {
                mac: M,
                probe: false
            }
        );
    }

    #[test]
    fn cache_is_bounded() {
        let mut n = Neighbours::default();
        for i in 0..MAX_ENTRIES as u32 + 10 {
            let a = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            n.learn(a, M, 0, true);
        }
        assert_eq!(n.map.len(), MAX_ENTRIES);
        let extra = ip("192.168.0.1");
        assert_eq!(
            n.lookup(extra, 0, || None),
            Lookup::Pending { probe: false }
        );
        assert_eq!(n.enqueue(extra, vec![0; 8]).len(), 1);
    }
}
