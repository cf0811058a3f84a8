//! The selective-repeat state a QP carries and the constants of its wire marker; the
//! protocol that uses them is [`crate::selective`]. A leaf module, so the QP can hold
//! the state without importing the protocol that imports the QP.

use crate::types::*;
use rverbs_wire::psn::Psn;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The marker: bit 6 of BTH byte 8 (the reserved bits after AckReq, IBTA 9.2).
pub const SR_MARK: u8 = 0x40;

/// A responder holds requests at most this many PSNs past the expected one.
pub const SR_MAX_HELD_PSNS: u32 = 1024;

/// A responder holds at most this many bytes of requests per QP: as many 4 KiB
/// packets as [`SR_MAX_HELD_PSNS`], with their headers.
pub const SR_MAX_HELD_BYTES: usize = SR_MAX_HELD_PSNS as usize * (4096 + 64);

/// Selective-repeat state of one QP.
#[derive(Default)]
pub(crate) struct SrState {
    // responder
    /// A marked request arrived: the requester speaks selective repeat.
    pub(crate) peer: bool,
    /// Requests past the gap, `held[i]` at PSN `epsn + i` (`held[0]`, the expected
    /// PSN, is always empty).
    pub(crate) held: VecDeque<Option<Vec<u8>>>,
    pub(crate) held_bytes: usize,
    // requester
    /// A report arrived: the responder speaks selective repeat.
    pub(crate) reports_seen: bool,
    /// PSNs the responder reported received past a gap.
    pub(crate) sacked: BTreeSet<u32>,
    /// PSNs resent selectively: when, and `sent_psn_end` then (a packet at or past
    /// it was sent after the resend).
    pub(crate) resent: BTreeMap<u32, (Nanos, Psn)>,
    /// PSNs to resend.
    pub(crate) queue: VecDeque<Psn>,
}

impl SrState {
    /// Forgets everything (the QP is reset or flushed).
    pub(crate) fn clear(&mut self) {
        *self = SrState::default();
    }

    /// Drops the held requests.
    pub(crate) fn clear_held(&mut self) {
        self.held.clear();
        self.held_bytes = 0;
    }

    /// The requester goes back N: its queue of selective resends is moot.
    pub(crate) fn clear_queue(&mut self) {
        self.queue.clear();
    }

    /// Requests are held past a gap.
    pub(crate) fn holding(&self) -> bool {
        self.held_bytes > 0
    }

    /// Requester: a gap reported selectively was resent and is not yet acknowledged
    /// ([`Qp::send_win`]).
    pub(crate) fn filling_gap(&self) -> bool {
        !self.resent.is_empty()
    }
}
