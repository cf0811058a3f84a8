//! The QP's steps of selective repeat: holding and carrying out requests past a gap
//! and reporting it (responder), resending what a report shows missing (requester).
//! The protocol, its marker and the state a QP carries are [`crate::selective`].

use crate::qp::{Ctx, Qp, Wake};
use crate::timers::reorder_window_ns;
use crate::types::*;
use rverbs_wire::ext::{NakCode, Syndrome};
use rverbs_wire::opcode::Opcode;
use rverbs_wire::packet::Packet;
use rverbs_wire::psn::Psn;

use crate::selective::{SR_MARK, SR_MAX_HELD_BYTES, SR_MAX_HELD_PSNS};

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
        self.sr.held[k] = Some(self.sr.keep(bytes));
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
                self.sr.recycle(b);
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
        // The responder answered: the stall's probes start over from one PTO (RFC 8985
        // 7.2 arms the probe timer again on every ACK), so a tail that the resends
        // lost again costs one probe timeout, not a doubled one per report.
        self.probes_sent = 0;
        self.arm_probe(ctx.now);
        let mut wake = self.sr_resend_gap(from, got, ctx);
        wake.timers = true;
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
        // A resend goes out ahead of new data and with AckReq, so its answer is due one
        // unqueued round trip after it (the smallest sample, plus RFC 8985's quarter
        // for reordering), not a smoothed one that includes whole messages queued.
        let again_after = self
            .rtt
            .min_rtt()
            .map_or(reorder_window_ns(self.attr.timeout), |m| m + m / 4);
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
            let Some(idx) = self.started_wqe_of(p, false) else {
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
            ctx.counters.selective_wait_ns += self.stall_ns(ctx.now);
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
