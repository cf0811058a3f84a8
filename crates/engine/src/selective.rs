//! Selective repeat between two rverbs engines ([`crate::Config::selective_repeat`]).
//!
//! IBTA RC is go-back-N (9.7.5.1.2): a responder drops every request behind a gap
//! and NAKs the gap once, and the requester resends everything from it. On a lossy
//! path a loss then costs a window of packets. With selective repeat (after IRN,
//! Mittal et al., SIGCOMM 2018, and the selective-repeat modes of recent RoCE NICs)
//! the responder keeps what arrives past a gap and reports it, and the requester
//! resends only the missing packets.
//!
//! **What the responder does with a packet past a gap.** It holds the packet (its
//! bytes, at most [`SR_MAX_HELD_PSNS`] PSNs past the gap and [`SR_MAX_HELD_BYTES`] per
//! QP; past that it is dropped and counted, and sent again later) and carries it out
//! when the gap before it fills, in PSN order, through the same steps as an in-order
//! packet. Everything a peer or the application can see therefore happens in PSN
//! order, as IBTA requires: receive WQEs are consumed in message order (a SEND's
//! WQE is only known once every message before it has started, and a lost packet
//! may hold the end of one message and the start of the next), completions, the
//! MSN and every ACK are cumulative and in order, READ responses and ATOMIC ACKs
//! leave in request order, an atomic executes once, in order, after the requests
//! before it, and an RNR or error NAK stops at the request that caused it (what is
//! held behind it is dropped: the requester sends it again after the NAK). WRITE
//! payloads are written at their address when the packet is carried out, not on
//! arrival: only a FIRST or ONLY carries the address and the R_Key, so a MIDDLE or
//! LAST behind a lost FIRST has nowhere to go yet; one whose FIRST has arrived could
//! go straight to its offset (mlx5's out-of-order placement does), which would save
//! a copy and the hold's memory but no round trip, and round trips are what
//! selective repeat saves. One path for every opcode keeps the order rules above in
//! one place (`Qp::execute`).
//!
//! **What it reports.** A *report* is an RC ACKNOWLEDGE whose AETH says NAK PSN
//! sequence error, with the marker below set, whose BTH PSN is a packet held and
//! whose AETH MSN field carries the first PSN of the gap just before it: the gap is
//! the PSNs from the one to the other. The responder reports a gap when a packet
//! arrives right after it (its PSN before is missing), so once per gap rather than
//! once per packet, which at a few hundred packets in flight would flood the
//! reverse path; and it reports the first gap again when a packet it holds arrives
//! again (a tail-loss probe, or a resend that crossed a report: the report was
//! lost, or the resend was) and when held packets were carried out up to another
//! gap. The requester resends each PSN of the gap that no report has shown
//! received, at most once per round trip (`Qp::sr_resend_gap`), with AckReq, and
//! again when a report shows a packet sent after that resend arrived while the
//! resend's PSN, in the first gap, is still unacknowledged (RFC 8985 6.1); while it
//! fills a gap it may send up to twice its window (`Qp::send_win`: what arrives
//! past the gap is held, up to [`SR_MAX_HELD_PSNS`]);
//! cumulative ACKs (one after every run of held packets carried out) complete the
//! work requests as before. A gap that holds a READ request is the implied NAK's:
//! a reordering window, then go-back-N from the gap (a READ request spans its
//! responses' PSNs, and one sent again is answered with its whole piece again, so
//! it is not resent on a report that may only show reordering).
//!
//! Once a requester has had a report, its recovery is the reports': no loss window
//! (it bounds what go-back-N resends; [`crate::Config::loss_window`]), no go-back
//! after a tail-loss probe's answer, and probes that target a SEND/WRITE packet
//! even past a READ or atomic (one the responder holds draws a report of the first
//! gap) and start before the first RTT sample. The local ACK timeout keeps its IBTA
//! meaning and, with NAKs, the implied NAK and RNR, recovers by going back N.
//!
//! **How the two sides learn that both speak it.** In-band, from a marker: bit 6 of
//! BTH byte 8, one of the seven reserved bits after AckReq ([`SR_MARK`]). A
//! requester with selective repeat on sets it on every RC request; a responder with
//! it on that receives a marked request holds and reports from then on (until the
//! QP is reset); the reports, and only they, carry the marker back. Nothing else
//! changes on the wire, and nothing is exchanged out of band, so unmodified
//! programs need nothing extra.
//!
//! **Why a peer that does not speak it is not confused.** IBTA 9.2 says reserved
//! BTH fields are sent as 0 and ignored by the receiver. Kernel rxe never looks at
//! them: `rxe_recv.c` `hdr_check` checks TVer, the QPN, the QP's type and state, the
//! addresses and the P_Key/Q_Key; the PSN and AckReq are read through masks
//! (`BTH_PSN_MASK`, `BTH_ACK_MASK` in `rxe_hdr.h`) that leave the reserved bits out;
//! and byte 8 is inside the ICRC, which both sides compute over the bits as sent.
//! So a standard responder executes marked requests exactly as unmarked ones and
//! never marks anything itself: the rverbs requester then never sees a report and
//! stays go-back-N. A standard requester never marks, so an rverbs responder never
//! holds or reports for it: it sees go-back-N and standard NAKs only.
//!
//! **Why it is still an opt-in.** What rxe does is shown above; what every NIC does
//! cannot be: a NIC's firmware might use a reserved bit for an extension of its own
//! (the bits of BTH byte 4 are already outside the ICRC for that kind of reason), and
//! a NIC *responder* that set this bit on its NAKs would be taken for a selective
//! one. So each side turns it on ([`crate::Config::selective_repeat`]; the soft
//! device reads `RVERBS_SELECTIVE_REPEAT=1`), and the marker then only confirms that
//! the peer did too: one side on and the other off is plain go-back-N.
//!
//! This module is the protocol's leaf: its constants and the state a QP carries
//! (`SrState`), so the QP holds the state without importing the steps that act on it
//! (the engine's `sr` module).

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

/// Buffers of held requests a responder keeps for the next ones once their requests
/// are carried out ([`SrState::keep`]), at most this many per QP (1 MiB of 4 KiB
/// packets).
pub const SR_SPARE_BUFFERS: usize = 256;

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
    /// Buffers of requests carried out, for the next ones held. Under steady loss
    /// nearly every request arrives past a gap, and a buffer allocated and freed
    /// per request cost more than the copy into it: the hold grows to hundreds of
    /// packets and drains to nothing at each gap, and the allocator gave the pages
    /// back and faulted them in again every time (a 1 % loss run's responder spent
    /// about 15 % of its time in page faults, page clearing and malloc).
    pub(crate) spare: Vec<Vec<u8>>,
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

    /// A copy of the request `bytes` to hold, in a spare buffer when there is one.
    pub(crate) fn keep(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(bytes);
        b
    }

    /// The buffer of a held request carried out (or dropped): kept for the next one
    /// held, up to [`SR_SPARE_BUFFERS`].
    pub(crate) fn recycle(&mut self, b: Vec<u8>) {
        if self.spare.len() < SR_SPARE_BUFFERS {
            self.spare.push(b);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_buffers_are_reused_up_to_the_bound() {
        let mut s = SrState::default();
        let a = s.keep(&[1; 100]);
        assert_eq!(a, [1; 100]);
        let at = a.as_ptr();
        s.recycle(a);
        // The next request held goes into the same buffer, with its own bytes only.
        let b = s.keep(&[2; 50]);
        assert_eq!(b.as_ptr(), at);
        assert_eq!(b, [2; 50]);
        assert!(s.spare.is_empty());
        for _ in 0..SR_SPARE_BUFFERS + 10 {
            s.recycle(vec![0; 8]);
        }
        assert_eq!(s.spare.len(), SR_SPARE_BUFFERS);
        // A reset forgets them.
        s.clear();
        assert!(s.spare.is_empty());
    }
}
