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

use crate::qp::{Ctx, Qp, Wake};
use crate::timers::reorder_window_ns;
use crate::types::*;
use rverbs_wire::ext::{NakCode, Syndrome};
use rverbs_wire::opcode::Opcode;
use rverbs_wire::packet::Packet;
use rverbs_wire::psn::Psn;

pub use crate::selective_state::{SR_MARK, SR_MAX_HELD_BYTES, SR_MAX_HELD_PSNS};

impl Qp {
    /// Whether the packet about to leave carries [`SR_MARK`]: every RC request when
    /// selective repeat is on, and the responder's reports.
    pub(crate) fn sr_marks(&self, payload: &[u8]) -> bool {
        if !self.selective || self.qp_type != QpType::Rc || payload.len() < 13 {
            return false;
        }
        let op = Opcode(payload[0]);
        match op.info() {
            Some(i) if i.is_request => true,
            _ => {
                op == Opcode::RC_ACKNOWLEDGE
                    && self.sr.peer
                    && Syndrome::from_byte(payload[12]) == Syndrome::Nak(NakCode::PsnSequenceError)
            }
        }
    }

    /// Responder: a request arrived; a marked one shows the requester speaks
    /// selective repeat.
    pub(crate) fn sr_note_request(&mut self, pkt: &Packet<&[u8]>) {
        if self.selective && self.qp_type == QpType::Rc && pkt.bth().resv7() & SR_MARK != 0 {
            self.sr.peer = true;
        }
    }

    /// Responder: whether a request past the expected PSN is held (rather than
    /// dropped behind a NAK, go-back-N).
    pub(crate) fn sr_holds(&self) -> bool {
        self.selective && self.sr.peer && self.qp_type == QpType::Rc
    }

    /// Responder: holds the request `pkt` (`bytes`, the datagram's payload), `ahead`
    /// PSNs past the expected one, and reports the gap before it if it ends one, or
    /// the first gap if it was held already.
    pub(crate) fn sr_hold(
        &mut self,
        pkt: &Packet<&[u8]>,
        bytes: &[u8],
        ahead: u32,
        ctx: &mut Ctx<'_>,
    ) -> Wake {
        let k = ahead as usize;
        let have = self.sr.held.get(k).is_some_and(Option::is_some);
        if have {
            return self.sr_report_first_gap(ctx);
        }
        if ahead >= SR_MAX_HELD_PSNS || self.sr.held_bytes + bytes.len() > SR_MAX_HELD_BYTES {
            // Sent again later: once the gap before it is filled, the report of the
            // next gap asks for it.
            ctx.counters.rx_selective_overflow += 1;
            return Wake::default();
        }
        if self.sr.held.len() <= k {
            self.sr.held.resize_with(k + 1, || None);
        }
        self.sr.held[k] = Some(bytes.to_vec());
        self.sr.held_bytes += bytes.len();
        ctx.counters.rx_selective_held += 1;
        if self.sr.held[k - 1].is_some() {
            // Right behind a packet held: no new gap.
            return Wake::default();
        }
        // (`held[0]` is the expected PSN, always missing: a gap starts there at the
        // latest.)
        let start = (0..k)
            .rev()
            .find(|&i| self.sr.held[i].is_some())
            .map_or(0, |i| i + 1);
        self.sr_report(self.epsn.add(start as u32), pkt.bth().psn(), ctx)
    }

    /// Responder: reports the first gap (from the expected PSN to the first packet
    /// held), if packets are held.
    pub(crate) fn sr_report_first_gap(&mut self, ctx: &mut Ctx<'_>) -> Wake {
        match self.sr.held.iter().position(Option::is_some) {
            Some(k) => self.sr_report(self.epsn, self.epsn.add(k as u32), ctx),
            None => Wake::default(),
        }
    }

    /// Responder: queues a report of the gap from `start` up to `held` (exclusive).
    fn sr_report(&mut self, start: Psn, held: Psn, ctx: &mut Ctx<'_>) -> Wake {
        ctx.counters.tx_selective_reports += 1;
        self.out.push_back(crate::qp::RespOut::Ack {
            psn: held,
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError).to_byte(),
            msn: start.value(),
        });
        Wake {
            transmit: true,
            timers: false,
        }
    }

    /// Responder: the expected PSN moved on from `from` (a request was carried
    /// out); the held requests move with it. Returns the next held request if it is
    /// now the expected one.
    pub(crate) fn sr_advance(&mut self, from: Psn, ctx: &mut Ctx<'_>) -> Option<Vec<u8>> {
        let n = self.epsn.forward_from(from) as usize;
        for _ in 0..n.min(self.sr.held.len()) {
            if let Some(b) = self.sr.held.pop_front().flatten() {
                // Inside a READ's response PSNs: no request of the peer's can be there.
                self.sr.held_bytes -= b.len();
                ctx.counters.rx_ghost_responses += 1;
            }
        }
        let b = self.sr.held.front_mut()?.take()?;
        self.sr.held_bytes -= b.len();
        ctx.counters.rx_selective_placed += 1;
        Some(b)
    }

    /// Requester: handles `pkt` if it is a report ([`crate::selective`]); `None` when it
    /// is not one (an ordinary response).
    pub(crate) fn sr_on_report(&mut self, pkt: &Packet<&[u8]>, ctx: &mut Ctx<'_>) -> Option<Wake> {
        let bth = pkt.bth();
        if !self.selective || bth.opcode() != Opcode::RC_ACKNOWLEDGE || bth.resv7() & SR_MARK == 0 {
            return None;
        }
        let aeth = pkt.aeth()?;
        if Syndrome::from_byte(aeth.syndrome()) != Syndrome::Nak(NakCode::PsnSequenceError) {
            return None;
        }
        let got = bth.psn();
        let start = Psn::new(aeth.msn());
        let out = self.sent_psn_end.forward_from(self.comp_psn);
        // The PSN held must be one we sent and have not had acknowledged; the gap
        // starts at or before it (and may have been acknowledged in part since).
        let from = if start.is_before(self.comp_psn) {
            self.comp_psn
        } else {
            start
        };
        if out == 0 || !got.in_window(self.comp_psn, out) || got.is_before(from) {
            ctx.counters.rx_ghost_responses += 1;
            return Some(Wake::default());
        }
        ctx.counters.rx_selective_reports += 1;
        if !self.sr.reports_seen {
            self.sr.reports_seen = true;
            // A loss window from a loss before the first report (`Qp::loss_window`)
            // bounds go-back-N's resends; selective repeat resends no more than it lost.
            self.loss_window = None;
            self.recovery_point = None;
        }
        self.sr.sacked.insert(got.value());
        let mut wake = self.sr_resend_gap(from, got, ctx);
        // The first gap's resends that went out before `got` did, still
        // unacknowledged: lost too (RFC 8985 6.1: a packet is lost once one sent
        // after it is delivered). (Only before the first PSN reported held: a resend
        // behind that may be held itself, behind an earlier gap.)
        let c = self.comp_psn;
        let first_held = self
            .sr
            .sacked
            .iter()
            .map(|&p| Psn::new(p).forward_from(c))
            .min()
            .unwrap_or(u32::MAX);
        let again: Vec<Psn> = self
            .sr
            .resent
            .iter()
            .map(|(&p, &(_, end))| (Psn::new(p), end))
            .filter(|&(p, end)| {
                p.forward_from(c) < first_held && p.is_before(from) && !got.is_before(end)
            })
            .map(|(p, _)| p)
            .collect();
        for p in again {
            if !self.sr.queue.contains(&p) {
                self.sr
                    .resent
                    .insert(p.value(), (ctx.now, self.sent_psn_end));
                self.sr.queue.push_back(p);
                wake.transmit = true;
            }
        }
        Some(wake)
    }

    /// Requester: queues the PSNs from `from` up to `got` (exclusive) that no report
    /// has shown received and that were not resent within the last round trip (or
    /// were, before `got` was sent). A READ request in the gap: the implied NAK's
    /// reordering window, then go-back-N from the gap.
    fn sr_resend_gap(&mut self, from: Psn, got: Psn, ctx: &mut Ctx<'_>) -> Wake {
        let again_after = self
            .rtt
            .srtt()
            .map_or(reorder_window_ns(self.attr.timeout), |s| s + s / 4);
        let n = got.forward_from(from);
        let mut queued = false;
        // The WQEs hold consecutive PSNs: one walk along them for the whole gap.
        let mut idx = 0;
        for i in 0..n {
            let p = from.add(i);
            while self
                .sq
                .get(idx)
                .is_some_and(|w| w.started && !p.in_window(w.first_psn, w.npkts))
            {
                idx += 1;
            }
            let Some(w) = self.sq.get(idx).filter(|w| w.started) else {
                break;
            };
            if self.sr.sacked.contains(&p.value()) {
                continue;
            }
            if self.sr.resent.get(&p.value()).is_some_and(|&(t, end)| {
                ctx.now < t.saturating_add(again_after) && got.is_before(end)
            }) {
                continue;
            }
            if w.wr.opcode == WrOpcode::RdmaRead {
                // A READ request in the gap, or its responses' PSNs: lost, or late
                // (a request sent again is answered with the whole piece again).
                // The implied NAK's reordering window, then go-back-N from the gap
                // (IBTA 9.7.5.1.3), as for a gap in READ responses.
                self.implied_nak(ctx);
                return Wake {
                    transmit: queued,
                    timers: true,
                };
            }
            if w.is_rd_atomic() && p != w.first_psn {
                continue;
            }
            self.sr
                .resent
                .insert(p.value(), (ctx.now, self.sent_psn_end));
            if !self.sr.queue.contains(&p) {
                self.sr.queue.push_back(p);
            }
            queued = true;
        }
        Wake {
            transmit: queued,
            timers: false,
        }
    }

    /// Requester: the next selective resend, if one is queued: the packet at its PSN,
    /// with AckReq.
    pub(crate) fn sr_next_resend(&mut self, ctx: &mut Ctx<'_>) -> Option<crate::net::Transmit> {
        while let Some(p) = self.sr.queue.pop_front() {
            if p.is_before(self.comp_psn) || !p.is_before(self.sent_psn_end) {
                continue;
            }
            let Some(idx) = self
                .sq
                .iter()
                .take_while(|w| w.started)
                .position(|w| p.in_window(w.first_psn, w.npkts))
            else {
                continue;
            };
            let w = &self.sq[idx];
            let k = p.forward_from(w.first_psn);
            let sent = if w.is_rd_atomic() {
                w.wr.opcode != WrOpcode::RdmaRead && k == 0 && w.fully_sent()
            } else {
                k < w.next_pkt
            };
            if !sent {
                // Not sent (yet, or again after a go-back): it leaves in turn.
                continue;
            }
            let t = self.build_request(idx, k, p, true, ctx);
            // Karn: no RTT sample from what is sent again.
            self.rtt_sample = None;
            ctx.counters.selective_retransmits += 1;
            ctx.counters.retransmitted_packets += 1;
            ctx.counters.tx_packets += 1;
            ctx.counters.tx_bytes += t.len() as u64;
            ctx.counters.tx_payloads_in_place += u64::from(t.body.is_some());
            return Some(t);
        }
        None
    }

    /// Requester: progress to `comp_psn`; what lies before it is forgotten.
    pub(crate) fn sr_progress(&mut self) {
        if self.sr.sacked.is_empty() && self.sr.resent.is_empty() {
            return;
        }
        let c = self.comp_psn;
        self.sr.sacked.retain(|&p| !Psn::new(p).is_before(c));
        self.sr.resent.retain(|&p, _| !Psn::new(p).is_before(c));
    }
}
