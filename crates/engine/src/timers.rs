//! The engine's timer queue: one entry per QP with a deadline, earliest first.
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

#[cfg(test)]
mod tests {
    use super::*;
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
