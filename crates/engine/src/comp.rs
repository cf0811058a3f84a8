//! The completer half of an RC QP: responses (ACK, NAK, READ response, ATOMIC ACK)
//! matched against the outstanding work requests, completions, and the decisions to
//! retry (IBTA 9.7.5.2, 9.7.6; rxe `rxe_comp.c`).
//!
//! Loss is recovered from what arrives before the local ACK timeout has to: a
//! sequence NAK goes back at once; a gap in READ responses waits a reordering window
//! measured from the QP's round trip (RFC 6298 SRTT, RFC 8985 6.2); a tail-loss probe
//! (RFC 8985 7) after about two round trips resends a packet that any responder
//! answers, and its answer shows which packets sent before it were lost. All of it is
//! standard go-back-N on the wire (IBTA 9.7.5.2.5): the peer, rxe or a NIC, sees only
//! requests resent earlier than a timeout would resend them, which it treats as
//! duplicates or executes (rxe `rxe_resp.c` `duplicate_request`). The timeout keeps
//! its IBTA meaning: only it, a NAK and an implied NAK spend `retry_cnt`.

use crate::qp::{Ctx, Qp, Retry, Wake, MAX_PROBES_PER_STALL, MIN_LOSS_WINDOW};
use crate::timers::{ack_timeout_ns, QpTimer, RNR_TIMER_NS};
use crate::types::*;
use rverbs_wire::opcode::Opcode;
use rverbs_wire::packet::Packet;
use rverbs_wire::psn::Psn;

/// READ responses at most this many PSNs past the first missing one are kept (their
/// data placed, their PSNs remembered); later ones are dropped and asked for again.
pub const MAX_READ_AHEAD_PSNS: u32 = 4096;

impl Qp {
    /// Handles an RC response (ACK, NAK, READ response, ATOMIC ACK): rxe `rxe_comp.c`.
    pub(crate) fn on_response(&mut self, pkt: &Packet<&[u8]>, ctx: &mut Ctx<'_>) -> Wake {
        if let Some(wake) = self.sr_on_report(pkt, ctx) {
            return wake;
        }
        let bth = pkt.bth();
        let psn = bth.psn();
        let op = bth.opcode();
        let outstanding = self.next_psn.forward_from(self.comp_psn);
        if outstanding == 0 || !psn.in_window(self.comp_psn, outstanding) {
            // ACKs repeat the last acknowledged PSN (comp_psn - 1): harmless.
            ctx.counters.rx_ghost_responses += 1;
            if outstanding != 0
                && self.timers.get(QpTimer::Retransmit).is_some()
                && self.stale_rearms < 2 * outstanding.max(self.win(ctx))
            {
                // The peer is alive and answering (responses or ACKs we already
                // have, sent before the ones our last retry asked for and still
                // arriving on a busy link): the retransmit timer restarts, as rxe's
                // completer re-arms it after every response it handles (`rxe_comp.c`
                // `COMPST_EXIT`), so a long replay does not burn the retry budget.
                // Only progress restores that budget, and a peer sending nothing but
                // stale responses restarts the timer a bounded number of times per
                // retry, so it cannot keep the QP from timing out.
                self.stale_rearms += 1;
                self.rearm(ctx.now);
                return Wake {
                    transmit: false,
                    timers: true,
                };
            }
            return Wake::default();
        }
        if !psn.in_window(self.comp_psn, self.sent_psn_end.forward_from(self.comp_psn)) {
            // A PSN given to a WQE but never sent (the window held it back): no
            // request of ours can have been answered there, so it acknowledges
            // nothing and is dropped as a ghost (IBTA 9.7.5.2.5: the requester
            // checks a response's PSN against those it has outstanding; rxe
            // `rxe_comp.c` completes a WQE only once it is wholly sent,
            // `wqe_state_pending`, and drops a response past one that is not).
            // Not a sign of a live peer either: no timer restart.
            ctx.counters.rx_ghost_responses += 1;
            return Wake::default();
        }
        let syndrome = pkt
            .aeth()
            .map(|a| rverbs_wire::ext::Syndrome::from_byte(a.syndrome()));
        use rverbs_wire::ext::{NakCode, Syndrome};
        let before = (self.comp_psn, self.sq.len());
        let mut wake = Wake {
            transmit: true,
            timers: true,
        };
        while let Some(w) = self.sq.front() {
            if !w.started {
                break;
            }
            let last = w.last_psn();
            if psn.is_after(last) {
                // The peer has gone past this WQE: a SEND/WRITE is acknowledged
                // implicitly; a READ/atomic whose response never came must be redone
                // (IBTA 9.7.5.1.3 implied NAK).
                if w.is_rd_atomic() {
                    ctx.counters.rx_ghost_responses += 1;
                    self.implied_nak(ctx);
                    break;
                }
                self.complete_front(WcStatus::Success, ctx);
                continue;
            }
            // psn falls inside this WQE.
            match (op, syndrome) {
                (Opcode::RC_ACKNOWLEDGE, Some(Syndrome::Ack { .. })) => {
                    if w.is_rd_atomic() {
                        // An ACK inside a READ/atomic range carries no data: ignore.
                        ctx.counters.rx_ghost_responses += 1;
                        wake.transmit = false;
                    } else if psn == last {
                        self.complete_front(WcStatus::Success, ctx);
                    } else {
                        self.comp_psn = psn.next();
                    }
                }
                (Opcode::RC_ACKNOWLEDGE, Some(Syndrome::RnrNak { timer })) => {
                    ctx.counters.rx_rnr_nak += 1;
                    if self.timers.get(QpTimer::RnrWait).is_some() && psn == self.comp_psn {
                        // Still waiting out an RNR NAK for this PSN, with nothing sent
                        // since (the wait ends before the resend): this one answers a
                        // packet that left before that NAK was handled, such as an ACK
                        // nudge that crossed it. The same refusal: the resend after the
                        // wait covers it, and counting it would spend a second RNR
                        // retry (IBTA 9.7.5.2.8) on one refusal.
                        wake.transmit = false;
                        break;
                    }
                    self.comp_psn = psn;
                    if self.rnr_left == 0 {
                        self.complete_front(WcStatus::RnrRetryExcErr, ctx);
                        break;
                    }
                    if self.attr.rnr_retry != 7 {
                        self.rnr_left -= 1;
                    }
                    self.go_back(psn);
                    self.timers.set(
                        QpTimer::RnrWait,
                        ctx.now + RNR_TIMER_NS[usize::from(timer & 31)],
                    );
                    self.timers.stop(QpTimer::Retransmit);
                }
                (Opcode::RC_ACKNOWLEDGE, Some(Syndrome::Nak(NakCode::PsnSequenceError))) => {
                    ctx.counters.rx_nak_seq += 1;
                    // Against comp_psn as it was before this response: the loop
                    // above may already have completed whole messages up to `psn`
                    // (rxe `check_psn` resets the retry counters, `started_retry`
                    // too, for each WQE a response completes implicitly).
                    if psn.is_after(before.0) {
                        // The NAK acknowledges every PSN before it: progress, so this
                        // is a new gap and gets its retry, from a full budget (rxe
                        // `rxe_comp.c` `check_ack`: `reset_retry_counters` before
                        // COMPST_ERROR_RETRY). Without it, a second gap reported before
                        // any ACK — likely once ACKs are coalesced — waited for the
                        // retransmit timer.
                        self.nak_retry = false;
                        self.retry_left = self.attr.retry_cnt;
                    }
                    self.comp_psn = psn;
                    // Acted on at once: the NAK names the gap (IBTA 9.7.5.2.4).
                    self.retry(ctx, Retry::SeqNak);
                }
                (Opcode::RC_ACKNOWLEDGE, Some(Syndrome::Nak(code))) => {
                    let status = match code {
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                        _ => WcStatus::BadRespErr,
                    };
                    self.complete_front(status, ctx);
                }
                (
                    Opcode::RC_RDMA_READ_RESPONSE_FIRST
                    | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                    | Opcode::RC_RDMA_READ_RESPONSE_LAST
                    | Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    _,
                ) => {
                    if w.wr.opcode != WrOpcode::RdmaRead {
                        ctx.counters.rx_ghost_responses += 1;
                        wake.transmit = false;
                        break;
                    }
                    let k = psn.forward_from(w.first_psn);
                    let mtu = self.mtu();
                    let off = k as usize * mtu;
                    let want = (w.len - off).min(mtu);
                    let data = pkt.payload();
                    // The last response of its piece ends with LAST (or ONLY).
                    let is_last = k + 1 == w.read_piece_end(k);
                    let ends = matches!(
                        op,
                        Opcode::RC_RDMA_READ_RESPONSE_LAST | Opcode::RC_RDMA_READ_RESPONSE_ONLY
                    );
                    let ahead = psn.forward_from(self.comp_psn);
                    if data.len() != want
                        || ends != is_last
                        || ahead >= MAX_READ_AHEAD_PSNS
                        || self.read_ahead.contains(&k)
                    {
                        ctx.counters.rx_ghost_responses += 1;
                        wake.transmit = false;
                        if ahead > 0 {
                            self.implied_nak(ctx);
                        }
                        break;
                    }
                    // The data goes in place even past a gap: the local buffer belongs
                    // to the WQE until it completes, and the completion still waits
                    // for every response. A response overtaken by later ones then
                    // costs nothing when it turns up, and a replay after a real loss
                    // only fills holes (responses past a gap were dropped before, so
                    // every reordering forced a replay of the rest of the READ). mlx5
                    // adapters place READ responses out of order the same way under
                    // adaptive routing (rdma-core `mlx5dv_create_qp(3)`,
                    // MLX5DV_QP_CREATE_OOO_DP); the wire protocol is unchanged.
                    if let Some(d) = &w.data {
                        d.write(off, data);
                    }
                    if ahead > 0 {
                        ctx.counters.rx_read_out_of_order += 1;
                        self.read_ahead.insert(k);
                        // A response is missing, or late: wait for it, then ask
                        // again from the gap.
                        self.implied_nak(ctx);
                        break;
                    }
                    let mut next = k + 1;
                    while self.read_ahead.remove(&next) {
                        next += 1;
                    }
                    if next >= w.npkts {
                        self.complete_front(WcStatus::Success, ctx);
                    } else {
                        self.comp_psn = w.first_psn.add(next);
                    }
                }
                (Opcode::RC_ATOMIC_ACKNOWLEDGE, _) => {
                    let ok = matches!(
                        w.wr.opcode,
                        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
                    ) && psn == w.first_psn;
                    match pkt.atomic_ack_eth() {
                        Some(a) if ok => {
                            if let Some(d) = &w.data {
                                d.write(0, &a.orig().to_ne_bytes());
                            }
                            self.complete_front(WcStatus::Success, ctx);
                        }
                        _ => {
                            ctx.counters.rx_ghost_responses += 1;
                            wake.transmit = false;
                        }
                    }
                }
                _ => {
                    ctx.counters.rx_ghost_responses += 1;
                    wake.transmit = false;
                }
            }
            break;
        }
        if (self.comp_psn, self.sq.len()) != before {
            // Progress: the retry budget is restored (IBTA 9.7.6.1.4; rxe
            // `reset_retry_counters` on every valid response), so only consecutive
            // fruitless retries count; a new gap may start a new retry.
            self.retry_left = self.attr.retry_cnt;
            self.nak_retry = false;
            self.timers.stop(QpTimer::Reorder);
            self.stale_rearms = 0;
            self.probes_sent = 0;
            let full = self.win(ctx);
            self.grow_window(self.comp_psn.forward_from(before.0), full);
            if let Some((gap, at)) = self.reorder_retry_at.take() {
                // The gap re-requested after the reordering window filled sooner than
                // the re-request could be answered: the original was only late.
                let srtt = self.rtt.srtt().unwrap_or(0);
                if gap.is_before(self.comp_psn) && ctx.now.saturating_sub(at) < srtt / 2 {
                    self.rtt.reordering_seen();
                }
            }
            if let Some((p, at)) = self.rtt_sample {
                if p.is_before(self.comp_psn) {
                    // Answered, and sent once: an RTT sample (RFC 6298, Karn).
                    self.rtt.update(ctx.now.saturating_sub(at));
                    self.rtt_sample = None;
                }
            }
            if let Some(&(at, _)) = self.sr.resent.get(&before.0.value()) {
                // Selective repeat: the first gap's resend (AckReq, ahead of new data)
                // and the cumulative ACK that moved past it. Under steady loss nearly
                // every message has a gap, and Karn's rule leaves no other sample.
                self.rtt.update(ctx.now.saturating_sub(at));
            }
            self.sr_progress();
            self.after_probe(ctx);
            self.unacked_since = (self.sent_psn_end != self.comp_psn).then_some(ctx.now);
            if !self.needs_nudge() {
                self.timers.stop(QpTimer::Nudge);
            }
            if !self.read_ahead.is_empty() {
                // Another hole, with responses already past it.
                self.implied_nak(ctx);
            }
            if !matches!(syndrome, Some(Syndrome::RnrNak { .. })) {
                self.rnr_left = self.attr.rnr_retry;
            }
        }
        self.rearm(ctx.now);
        self.check_drained(ctx);
        wake
    }

    /// Whether a tail-loss probe may go out: RC, packets unacknowledged, no RNR wait,
    /// probes left for this stall, and a SEND/WRITE packet to probe with.
    pub(crate) fn probe_wanted(&self) -> bool {
        self.qp_type == QpType::Rc
            && self.loss_recovery
            && self.can_send()
            && self.probes_sent < MAX_PROBES_PER_STALL
            && self.sent_psn_end != self.comp_psn
            && self.timers.get(QpTimer::RnrWait).is_none()
            && self.probe_target().is_some()
    }

    /// The packet the next probe resends: the last sent for the first probe of a
    /// stall, then the oldest unacknowledged ([`crate::qp::MAX_PROBES_PER_STALL`]), as its
    /// WQE's index and its PSN; `None` when that packet is a READ or atomic request.
    pub(crate) fn probe_target(&self) -> Option<(usize, Psn)> {
        let psn = if self.probes_sent == 0 {
            self.sent_psn_end.sub(1)
        } else {
            self.comp_psn
        };
        // (The last packet sent is in the last started WQE, the oldest unacknowledged
        // in the first: searched from that end, not across a window of thousands.)
        let idx = self.started_wqe_of(psn, self.probes_sent == 0)?;
        if !self.sq[idx].is_rd_atomic() {
            return Some((idx, psn));
        }
        if !self.sr.reports_seen {
            return None;
        }
        // Selective repeat: a SEND/WRITE packet the responder holds draws a report
        // of the first gap ([`crate::selective`]), and one it lacks fills a gap: the
        // last SEND/WRITE packet sent, when the one above is a READ or atomic.
        self.sq
            .iter()
            .enumerate()
            .take_while(|(_, w)| w.started)
            .filter(|(_, w)| !w.is_rd_atomic() && w.next_pkt > 0)
            .map(|(i, w)| (i, w.first_psn.add(w.next_pkt.min(w.npkts) - 1)))
            .filter(|(_, p)| !p.is_before(self.comp_psn))
            .last()
    }

    /// The index of the started WQE whose packets include `psn`; `near_end`: it is
    /// likely the newest (the last packet sent), else the oldest. Started WQEs are a
    /// prefix of the SQ (a WQE starts only at `sq_next`, after every one before it, and
    /// stays started until it completes) and their PSN ranges follow each other from
    /// the front's, so the likely ones are tried first and the rest is a binary search
    /// on the distance from the front's first PSN: not a walk across a window of
    /// hundreds of WQEs per packet sent.
    pub(crate) fn started_wqe_of(&self, psn: Psn, near_end: bool) -> Option<usize> {
        let has = |w: &crate::qp::SendWqe| w.started && psn.in_window(w.first_psn, w.npkts);
        let likely = if near_end {
            [self.sq_next, self.sq_next.wrapping_sub(1)]
        } else {
            [0, 0]
        };
        if let Some(&i) = likely.iter().find(|&&i| self.sq.get(i).is_some_and(has)) {
            return Some(i);
        }
        let base = self.sq.front().filter(|w| w.started)?.first_psn;
        let at = psn.forward_from(base);
        // (True for a prefix: the started WQEs that begin at or before `psn`.)
        let n = self
            .sq
            .partition_point(|w| w.started && w.first_psn.forward_from(base) <= at);
        let i = n.checked_sub(1)?;
        has(&self.sq[i]).then_some(i)
    }

    /// (Re)starts the tail-loss probe timer ([`crate::timers::Rtt::probe_ns`], doubled
    /// for each probe already sent in this stall) while a probe may go out before the
    /// retransmit timer, or stops it.
    pub(crate) fn arm_probe(&mut self, now: Nanos) {
        let wanted = self.probe_wanted();
        self.arm_probe_if(wanted, now);
    }

    /// [`Qp::arm_probe`] right after the requester sent a new SEND/WRITE packet (not
    /// one sent before) of an RC QP that sent no probe in this stall: the probe is
    /// then wanted whenever loss recovery is on and the QP may send, as
    /// [`Qp::probe_wanted`] would find with a search for the last packet's WQE per
    /// packet sent (that packet is the one just built, its WQE a SEND/WRITE).
    pub(crate) fn arm_probe_after_new(&mut self, now: Nanos) {
        if self.probes_sent != 0 {
            return self.arm_probe(now);
        }
        let wanted = self.loss_recovery && self.can_send();
        debug_assert_eq!(wanted, self.probe_wanted());
        self.arm_probe_if(wanted, now);
    }

    fn arm_probe_if(&mut self, wanted: bool, now: Nanos) {
        // Each probe of a stall waits twice as long as the one before; none is due at
        // or after the retransmit timer.
        // Selective repeat probes before the first RTT sample too (from a quarter of
        // the ACK timeout): gaps are recovered by reports, which a probe draws, and
        // the resends they start leave no sample (Karn).
        let sr = self.sr.reports_seen;
        let at = wanted
            .then(|| {
                self.rtt
                    .probe_ns(self.attr.timeout)
                    .or_else(|| sr.then(|| crate::timers::reorder_window_ns(self.attr.timeout)))
            })
            .flatten()
            .map(|d| now.saturating_add(d << self.probes_sent.min(16)))
            .filter(|&at| {
                self.timers
                    .get(QpTimer::Retransmit)
                    .is_none_or(|rto| at < rto)
            });
        self.timers.set_opt(QpTimer::Probe, at);
    }

    /// Restarts the timers after progress, or stops them when nothing is outstanding.
    pub(crate) fn rearm(&mut self, now: Nanos) {
        let outstanding = self.sq.iter().take(self.sq_next.max(1)).any(|w| w.started);
        let at = if outstanding && self.timers.get(QpTimer::RnrWait).is_none() {
            ack_timeout_ns(self.attr.timeout).map(|d| now + d)
        } else {
            None
        };
        self.timers.set_opt(QpTimer::Retransmit, at);
        self.arm_probe(now);
    }

    pub(crate) fn check_drained(&mut self, ctx: &mut Ctx<'_>) {
        if self.state == QpState::Sqd && !self.sqd_notified && self.sq.iter().all(|w| !w.started) {
            self.sqd_notified = true;
            if self.attr.en_sqd_async_notify {
                ctx.events.push_back(AsyncEvent::SqDrained(self.qpn));
            }
        }
    }

    /// Rewinds the requester to resend from `psn` (go-back-N).
    pub(crate) fn go_back(&mut self, psn: Psn) {
        self.noack_pkts = 0;
        self.sr.clear_queue();
        // Karn: what is sent again gives no RTT sample.
        self.rtt_sample = None;
        self.resent_end = Some(self.sent_psn_end);
        for (i, w) in self.sq.iter_mut().enumerate() {
            if !w.started {
                break;
            }
            let k = psn.forward_from(w.first_psn);
            if k < w.npkts {
                // (A READ asks again from the gap; an atomic is one request.)
                w.next_pkt = if w.is_rd_atomic() && w.wr.opcode != WrOpcode::RdmaRead {
                    0
                } else {
                    k
                };
                self.sq_next = i;
                // Later started WQEs are resent whole, keeping their PSNs.
                for later in self.sq.iter_mut().skip(i + 1) {
                    if !later.started {
                        break;
                    }
                    later.next_pkt = 0;
                }
                return;
            }
        }
    }

    /// A gap in READ responses, or an ACK past a READ/atomic that has not been
    /// answered (IBTA 9.7.5.1.3 implied NAK). The response may only be late
    /// (reordered): the first sign of the gap opens a reordering window
    /// ([`crate::timers::Rtt::reorder_ns`]); if the gap is still open when it closes (a later
    /// response, or the window's timer), the requester asks again from the gap, once
    /// per gap (`retry`), with the READ's RETH moved on to it (`build_request`,
    /// IBTA 9.7.5.1.3 / rxe `req_retry`).
    pub(crate) fn implied_nak(&mut self, ctx: &mut Ctx<'_>) {
        if self.nak_retry {
            return;
        }
        match self.timers.get(QpTimer::Reorder) {
            None => {
                ctx.counters.implied_nak_waits += 1;
                let wnd = self.rtt.reorder_ns(self.attr.timeout);
                self.timers.set(QpTimer::Reorder, ctx.now + wnd);
            }
            Some(t) if t <= ctx.now => self.retry(ctx, Retry::ImpliedNak),
            Some(_) => {}
        }
    }

    /// The answer to a tail-loss probe has arrived (progress past the probe's PSN).
    /// Go-back-N delivers in order, so packets sent before the probe that are still
    /// unacknowledged now were lost (the responder dropped them behind a gap; RFC
    /// 8985 6.1: a packet is lost once one sent after it is delivered): resend from
    /// the gap at once rather than at the ACK timeout. Not a retry (progress was
    /// made); once per probe, so one resend per gap per round trip.
    fn after_probe(&mut self, ctx: &mut Ctx<'_>) {
        let Some((psn, sent_end)) = self.probe else {
            return;
        };
        if !psn.is_before(self.comp_psn) {
            return;
        }
        self.probe = None;
        if self.sr.reports_seen {
            // Selective repeat: the responder holds what arrived past a gap and
            // reports it; its reports, not a go-back, recover the rest.
            return;
        }
        let lost = self.comp_psn.is_before(sent_end)
            && self
                .sq
                .front()
                .is_some_and(|w| w.started && !w.is_rd_atomic());
        if lost && self.state != QpState::Err {
            ctx.counters.probe_retries += 1;
            ctx.counters.probe_retry_wait_ns += self.stall_ns(ctx.now);
            self.shrink_window(false);
            self.nak_retry = true;
            self.resend_from_gap(ctx);
        }
    }

    /// How long the requester has gone without progress at `now`: since the last ACK
    /// that moved past something, or since the oldest unacknowledged packet went
    /// out (the recovery waits of `Counters`, e.g. `nak_retry_wait_ns`).
    pub(crate) fn stall_ns(&self, now: Nanos) -> Nanos {
        self.unacked_since.map_or(0, |u| now.saturating_sub(u))
    }

    /// A retry after a timeout, a sequence NAK or an implied NAK: spends one unit of
    /// retry_cnt, or fails the oldest WQE with RETRY_EXC_ERR.
    pub(crate) fn retry(&mut self, ctx: &mut Ctx<'_>, why: Retry) {
        self.timers.stop(QpTimer::Reorder);
        let waited = self.stall_ns(ctx.now);
        if why == Retry::Timeout {
            ctx.counters.retransmit_timeouts += 1;
            ctx.counters.timeout_wait_ns += waited;
            self.nak_retry = false;
            // A new stall: probes again after the resend.
            self.probes_sent = 0;
        } else if self.nak_retry {
            // One retry per gap: later packets behind the same gap are ignored until
            // progress or a timeout (rxe `comp.started_retry`).
            return;
        } else {
            self.nak_retry = true;
        }
        if self.retry_left == 0 {
            self.complete_front(WcStatus::RetryExcErr, ctx);
            return;
        }
        match why {
            Retry::SeqNak => {
                ctx.counters.nak_retries += 1;
                ctx.counters.nak_retry_wait_ns += waited;
            }
            Retry::ImpliedNak => {
                ctx.counters.reorder_retries += 1;
                ctx.counters.reorder_retry_wait_ns += waited;
                self.reorder_retry_at = Some((self.comp_psn, ctx.now));
            }
            Retry::Timeout => {}
        }
        self.retry_left -= 1;
        self.shrink_window(why == Retry::Timeout);
        let sent_once = self.resent_end.is_none_or(|e| !self.comp_psn.is_before(e));
        self.resend_from_gap(ctx);
        if why == Retry::SeqNak && sent_once && self.sq.front().is_some_and(|w| !w.is_rd_atomic()) {
            // The NAK says the gap's first packet, which left once, never arrived:
            // the ACK that moves past it answers the resend going out now, an RTT
            // sample Karn's rule allows. Under steady loss nearly every message is
            // resent in part, and without it the QP never measures its round trip
            // (no tail-loss probe, only the retransmit timer).
            self.rtt_sample = Some((self.comp_psn, ctx.now));
        }
    }

    /// A loss: the loss window becomes half what is outstanding (RFC 5681 3.1
    /// `ssthresh`), or its floor after a timeout, never below [`MIN_LOSS_WINDOW`];
    /// once per round trip of data (RFC 6582: a loss among the packets outstanding
    /// at the last shrink is the same episode; a timeout always shrinks).
    fn shrink_window(&mut self, timeout: bool) {
        // With selective repeat a loss costs the lost packets only, not a window:
        // the loss window, which bounds what go-back-N resends, has nothing to bound.
        if !self.loss_window_on || self.sr.reports_seen {
            return;
        }
        if let Some(rp) = self.recovery_point {
            if self.comp_psn.is_before(rp) && !timeout {
                return;
            }
        }
        self.recovery_point = Some(self.sent_psn_end);
        let out = self.sent_psn_end.forward_from(self.comp_psn);
        let now = self.loss_window.map_or(out, |w| w.min(out));
        self.loss_window = Some(if timeout {
            MIN_LOSS_WINDOW
        } else {
            (now / 2).max(MIN_LOSS_WINDOW)
        });
        self.loss_window_acked = 0;
    }

    /// `acked` PSNs acknowledged: the loss window grows by one packet per window
    /// acknowledged (RFC 5681 3.1 congestion avoidance), and ends at `full`.
    fn grow_window(&mut self, acked: u32, full: u32) {
        if self
            .recovery_point
            .is_some_and(|rp| !self.comp_psn.is_before(rp))
        {
            self.recovery_point = None;
        }
        let Some(mut w) = self.loss_window else {
            return;
        };
        self.loss_window_acked = self.loss_window_acked.saturating_add(acked);
        while self.loss_window_acked >= w {
            self.loss_window_acked -= w;
            w += 1;
        }
        self.loss_window = (w < full).then_some(w);
    }

    /// Rewinds the requester to `comp_psn` (go-back-N), counting the packets that
    /// will go out again, and restarts the timers.
    fn resend_from_gap(&mut self, ctx: &mut Ctx<'_>) {
        self.stale_rearms = 0;
        let from = self.comp_psn;
        // `retransmitted_packets` counts packets that went out before and will go
        // out again (go-back-N resends from the gap what was already sent, IBTA
        // 9.7.5.2.5): not the unsent rest of a message, and for a READ/atomic its one
        // request packet, not the response PSNs it spans. (rxe only counts retries,
        // `RXE_CNT_COMP_RETRY`; that is `retransmit_timeouts` + `rx_nak_seq` here.)
        let sent = |q: &Qp| -> u32 {
            q.sq.iter()
                .take_while(|w| w.started)
                .map(|w| {
                    if w.is_rd_atomic() {
                        w.requests_out()
                    } else {
                        w.next_pkt
                    }
                })
                .sum()
        };
        let before = sent(self);
        self.go_back(from);
        let resent = before.saturating_sub(sent(self));
        ctx.counters.retransmitted_packets += u64::from(resent);
        self.rearm(ctx.now);
    }
}
