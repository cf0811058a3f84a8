//! The requester half of an RC/UC/UD QP: work requests out as request packets,
//! go-back-N resends from where the completer rewound it, the ACK nudge and the
//! tail-loss probe (IBTA 9.7.4, 9.7.5.1; rxe `rxe_req.c`; RFC 8985 7).

use crate::net::Transmit;
use crate::objects::resolve_sges;
use crate::qp::{Ctx, Qp, SendWqe, DEFAULT_PKEY, MAX_PKT_PER_ACK};
use crate::timers::{ack_nudge_ns, ack_timeout_ns, QpTimer};
use crate::types::*;
use rverbs_wire::bth::BthRepr;
use rverbs_wire::ext::{AtomicEthRepr, DethRepr, RethRepr};
use rverbs_wire::opcode::Opcode;
use rverbs_wire::packet::PacketRepr;
use rverbs_wire::psn::Psn;

impl Qp {
    pub(crate) fn can_send(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
    }

    /// Builds the next requester packet, if the QP may send one now: a due ACK nudge,
    /// else the next new or retransmitted packet. When there is nothing to send and
    /// the unacknowledged tail asked for no ACK, the nudge timer starts.
    pub(crate) fn next_request(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        if self.probe_due {
            self.probe_due = false;
            if let Some(t) = self.build_probe(ctx) {
                return Some(t);
            }
        }
        if self.nudge_due {
            self.nudge_due = false;
            if let Some(t) = self.build_nudge(ctx) {
                return Some(t);
            }
        }
        let t = self.next_new_request(ctx);
        if t.is_some() {
            self.last_tx_at = ctx.now;
            return t;
        }
        if self.nudge_due {
            // Set on the way (a failed WQE waits behind unacknowledged ones).
            self.nudge_due = false;
            if let Some(t) = self.build_nudge(ctx) {
                return Some(t);
            }
        }
        if self.timers.get(QpTimer::Nudge).is_none() && self.needs_nudge() {
            self.timers
                .set(QpTimer::Nudge, ctx.now + ack_nudge_ns(self.attr.timeout));
        }
        None
    }

    /// An ACK is requested and not yet received: the last PSN asked for is not yet
    /// acknowledged.
    pub(crate) fn ack_outstanding(&self) -> bool {
        self.ack_req_psn
            .is_some_and(|p| !p.is_before(self.comp_psn))
    }

    /// Packets are out that no ACK will cover unless the requester asks
    /// (`AckPolicy::Coalesce`; the responder ACKs only AckReq packets, IBTA 9.7.5.1.1,
    /// rxe `rxe_resp.c` `acknowledge`).
    pub(crate) fn needs_nudge(&self) -> bool {
        // Whatever the policy now: under `EveryMessage` every message end asks, so an
        // idle tail is never unasked, unless it was sent before a switch from
        // `Coalesce` (`Engine::set_ack_policy`).
        self.qp_type == QpType::Rc
            && self.can_send()
            && self.timers.get(QpTimer::RnrWait).is_none()
            && self.sent_psn_end != self.comp_psn
            && !self.ack_outstanding()
    }

    /// The ACK nudge: the last packet sent, again, with AckReq. The responder sees a
    /// duplicate and acknowledges everything up to it (C9-105; rxe `rxe_resp.c`
    /// `duplicate_request`), or — if that packet was lost — executes it and ACKs. Not
    /// a retry: `retry_left` and the retransmit timer are left alone, so if the nudge
    /// is answered by nothing the timeout runs as before.
    pub(crate) fn build_nudge(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        if !self.needs_nudge() {
            return None;
        }
        let last = self.sent_psn_end.sub(1);
        let idx = self.started_wqe_of(last, true)?;
        let w = &self.sq[idx];
        // A READ/atomic asks by itself; a message still being (re)sent asks at its end.
        if w.is_rd_atomic() || !w.fully_sent() || last != w.last_psn() {
            return None;
        }
        let t = self.build_request(idx, w.npkts - 1, last, true, ctx);
        // Karn: the nudge's answer may be the first copy's.
        self.rtt_sample = None;
        ctx.counters.ack_nudges += 1;
        ctx.counters.tx_packets += 1;
        ctx.counters.tx_bytes += t.len() as u64;
        ctx.counters.tx_payloads_in_place += u64::from(t.body.is_some());
        Some(t)
    }

    /// The tail-loss probe (RFC 8985 7.3), when the probe timer found packets still
    /// unacknowledged: a SEND/WRITE packet sent again with AckReq: the last one sent
    /// first, then the oldest unacknowledged ([`crate::qp::MAX_PROBES_PER_STALL`]). The
    /// responder executes it if it was the one missing, or re-ACKs what it has for a
    /// duplicate (C9-105; rxe `rxe_resp.c` `duplicate_request`), a standard request
    /// any responder answers. Not a retry: `retry_left` and the retransmit timer are
    /// left alone, so the ACK timeout keeps its IBTA meaning. READ and atomic requests
    /// are not probed (their recovery is the implied NAK's and the timeout's: a READ
    /// request sent again replays the whole piece).
    pub(crate) fn build_probe(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        if !self.probe_wanted() {
            return None;
        }
        let (idx, psn) = self.probe_target()?;
        let k = psn.forward_from(self.sq[idx].first_psn);
        let t = self.build_request(idx, k, psn, true, ctx);
        self.probes_sent += 1;
        self.probe = Some((psn, self.sent_psn_end));
        self.rtt_sample = None;
        self.arm_probe(ctx.now);
        ctx.counters.tail_loss_probes += 1;
        ctx.counters.probe_wait_ns += self.stall_ns(ctx.now);
        ctx.counters.tx_packets += 1;
        ctx.counters.tx_bytes += t.len() as u64;
        ctx.counters.tx_payloads_in_place += u64::from(t.body.is_some());
        Some(t)
    }

    /// The next new (or go-back-N retransmitted) request packet.
    pub(crate) fn next_new_request(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        if !self.can_send() {
            return None;
        }
        if self
            .timers
            .get(QpTimer::RnrWait)
            .is_some_and(|t| t > ctx.now)
        {
            return None;
        }
        self.timers.stop(QpTimer::RnrWait);
        if let Some(t) = self.sr_next_resend(ctx) {
            return Some(t);
        }
        loop {
            let idx = self.sq_next;
            let mtu = self.mtu();
            let rc = self.qp_type == QpType::Rc;
            let max_rd = u32::from(self.attr.max_rd_atomic.max(1));
            let (started, fence, rd_atomic) = {
                let w = self.sq.get(idx)?;
                (
                    w.started,
                    w.wr.flags.contains(SendFlags::FENCE),
                    w.is_rd_atomic(),
                )
            };
            if !started {
                if self.state == QpState::Sqd {
                    return None;
                }
                if self.sq[idx].is_local_op() {
                    // BIND_MW / LOCAL_INV: carried out once everything before it has
                    // completed (its completion follows theirs in order; rxe's
                    // `rxe_do_local_ops` runs when the requester reaches it).
                    if idx != 0 {
                        if self.needs_nudge() {
                            self.nudge_due = true;
                        }
                        return None;
                    }
                    let status = self.local_op(ctx);
                    self.complete_front(status, ctx);
                    if status != WcStatus::Success {
                        return None;
                    }
                    continue;
                }
                if rc && fence && self.rd_outstanding > 0 {
                    return None;
                }
                if rc && rd_atomic && self.rd_outstanding >= max_rd {
                    return None;
                }
                if rc && self.next_psn.forward_from(self.comp_psn) >= self.send_win(ctx) {
                    return None;
                }
                let pd = self.pd;
                let piece = self.piece(ctx);
                let w = self.sq.get_mut(idx)?;
                if !w.inline {
                    let need = if rd_atomic {
                        Access::LOCAL_WRITE
                    } else {
                        Access::NONE
                    };
                    match resolve_sges(ctx.mrs, pd, &w.wr.sg_list, need) {
                        Ok((d, _)) => w.data = Some(d),
                        Err(status) => {
                            // A bad local buffer fails this WQE (IBTA 10.8.3 local
                            // protection error); the QP leaves RTS.
                            self.fail_wqe_at(idx, status, ctx);
                            return None;
                        }
                    }
                }
                w.npkts = match w.wr.opcode {
                    WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 1,
                    _ => w.len.div_ceil(mtu).max(1) as u32,
                };
                w.first_psn = self.next_psn;
                w.started = true;
                w.next_pkt = 0;
                w.piece = if w.wr.opcode == WrOpcode::RdmaRead {
                    piece
                } else {
                    0
                };
                self.next_psn = self.next_psn.add(w.npkts);
            }
            let (comp_psn, win, swin) = (self.comp_psn, self.win(ctx), self.send_win(ctx));
            let (cur_piece, sent_end) = (self.piece(ctx), self.sent_psn_end);
            let w = &mut self.sq[idx];
            // (Only READs have pieces.)
            let pieces = w.piece > 0;
            if pieces && cur_piece > 0 && cur_piece != w.piece {
                // The window changed since the READ started (`Engine::set_qp_window`:
                // another QP came to share the peer's buffer, or left it). Pieces not
                // asked for yet take the new size, once nothing of this READ is out:
                // a piece asked for keeps its end (its LAST response is expected
                // there, and a retry must ask up to it). (A first piece larger than a
                // narrowed window would wait for room forever.)
                let at = w.first_psn.add(w.next_pkt);
                let fresh = !at.is_before(sent_end);
                if fresh && (w.next_pkt == 0 || at == comp_psn) {
                    w.piece = cur_piece;
                }
            }
            // Responses may have acknowledged what a go-back was to send again: a
            // READ's late response closed the gap (the rest were kept), or an ACK
            // handled after a sequence NAK, in the same batch, covered the PSN the
            // NAK asked for and more. Send from what is still unacknowledged (for a
            // READ, ask from what is still missing, or the next piece): the packets
            // before `comp_psn` are answered, and the window below counts from it.
            // (`comp_psn` only passes responses that all arrived.)
            let done = comp_psn.forward_from(w.first_psn);
            if done > w.next_pkt && done < w.npkts {
                w.next_pkt = done;
            }
            if w.fully_sent() {
                self.sq_next += 1;
                continue;
            }
            let psn = w.first_psn.add(w.next_pkt);
            let piece_end = w.read_piece_end(w.next_pkt);
            // Signed: a PSN before `comp_psn` is inside the window, not 2^24 past it
            // (rxe `rxe_req.c` compares PSNs with `psn_compare`).
            if rc && i64::from(psn.diff(comp_psn)) >= i64::from(swin) {
                return None;
            }
            // READ pieces: one out at a time (the WQE counts once against
            // `max_rd_atomic`), so a later piece (or a retry within one) goes once
            // everything before it is answered; the first goes once all its responses
            // fit in the window. Unacknowledged requests before a READ hold its first
            // piece back: if nothing asked for their ACK, ask now (a nudge) instead of
            // waiting for the nudge timer.
            let held = pieces
                && if w.next_pkt > 0 {
                    psn != comp_psn
                } else {
                    w.first_psn.add(piece_end).forward_from(comp_psn) > win
                };
            if held {
                if self.needs_nudge() {
                    self.nudge_due = true;
                }
                return None;
            }
            let next_pkt = w.next_pkt;
            // Sent before: a go-back-N resend, which gives no RTT sample (Karn).
            let again = psn.is_before(sent_end);
            let t = self.build_request(idx, next_pkt, psn, false, ctx);
            // (`build_request` clears `noack_pkts` when the packet asks for an ACK.)
            if rc && !again && self.noack_pkts == 0 && self.rtt_sample.is_none() {
                self.rtt_sample = Some((psn, ctx.now));
            }
            let w = &mut self.sq[idx];
            let end = if w.is_rd_atomic() {
                w.first_psn.add(piece_end)
            } else {
                psn.next()
            };
            // Forward distances from `comp_psn`, not the signed PSN compare: a READ of
            // 2^23 packets (2 GiB at MTU 256) ends exactly half the PSN space ahead,
            // which the signed compare reads as behind, and `sent_psn_end` (which
            // bounds the responses accepted) would stay put.
            if end.forward_from(self.comp_psn) > self.sent_psn_end.forward_from(self.comp_psn) {
                self.sent_psn_end = end;
            }
            if rc && self.unacked_since.is_none() {
                self.unacked_since = Some(ctx.now);
            }
            // A new SEND/WRITE packet: the last one sent, the first probe's target.
            let new_plain = !again && !w.is_rd_atomic();
            if w.is_rd_atomic() {
                // (One piece of a READ is out at a time: the WQE counts once.)
                w.next_pkt = piece_end;
                if !w.rd_counted {
                    w.rd_counted = true;
                    self.rd_outstanding += 1;
                }
            } else {
                w.next_pkt += 1;
            }
            if w.fully_sent() {
                self.sq_next += 1;
                if !rc {
                    // UC and UD complete when the last packet leaves (IBTA 9.8.3).
                    self.complete_front(WcStatus::Success, ctx);
                }
            }
            if rc {
                // RFC 8985 7.2: the probe timer restarts whenever a packet is sent.
                if new_plain {
                    self.arm_probe_after_new(ctx.now);
                } else {
                    self.arm_probe(ctx.now);
                }
            }
            if rc && self.timers.get(QpTimer::Retransmit).is_none() {
                self.timers.set_opt(
                    QpTimer::Retransmit,
                    ack_timeout_ns(self.attr.timeout).map(|d| ctx.now + d),
                );
            }
            ctx.counters.tx_packets += 1;
            ctx.counters.tx_bytes += t.len() as u64;
            ctx.counters.tx_payloads_in_place += u64::from(t.body.is_some());
            return Some(t);
        }
    }

    /// Carries out the local operation at the front of the SQ: its completion status
    /// (rxe: a failed bind is MW_BIND_ERR, a failed invalidate LOC_QP_OP_ERR).
    fn local_op(&mut self, ctx: &mut Ctx<'_>) -> WcStatus {
        let Some(w) = self.sq.front() else {
            return WcStatus::Success;
        };
        match w.wr.opcode {
            WrOpcode::BindMw(b) => {
                match crate::objects::bind_mw(ctx.mrs, ctx.mws, self.pd, self.qpn, &b) {
                    Ok(()) => WcStatus::Success,
                    Err(_) => WcStatus::MwBindErr,
                }
            }
            WrOpcode::LocalInv => match crate::objects::invalidate_mw(ctx.mws, w.wr.rkey) {
                Ok(()) => WcStatus::Success,
                Err(_) => WcStatus::LocQpOpErr,
            },
            _ => WcStatus::Success,
        }
    }

    pub(crate) fn fail_wqe_at(&mut self, idx: usize, status: WcStatus, ctx: &mut Ctx<'_>) {
        // A work queue completes in posting order (IBTA ch. 10 work completions). Everything
        // before idx is already sent and, for RC, waits for its ACK: the requester stops
        // at this WQE and fails it once it is the front of the SQ (the response that
        // completes the ones before wakes the requester, which lands here with idx 0),
        // as rxe's completer reaches a failed WQE only after those before it.
        if idx == 0 {
            self.complete_front(status, ctx);
        } else if self.needs_nudge() {
            // The WQEs before wait for an ACK nobody asked for: ask now.
            self.nudge_due = true;
        }
    }

    /// Builds packet `k` of WQE `idx` with PSN `psn`; `force_ack` sets AckReq (the ACK
    /// nudge).
    pub(crate) fn build_request(
        &mut self,
        idx: usize,
        k: u32,
        psn: Psn,
        force_ack: bool,
        ctx: &mut Ctx<'_>,
    ) -> Transmit {
        let mtu = self.mtu();
        let rc = self.qp_type == QpType::Rc;
        let qkey_own = self.attr.qkey;
        let w = &self.sq[idx];
        let n = w.npkts;
        let first = k == 0;
        let last = k + 1 >= n;
        let kind_only = first && last;
        let mut payload_range = (0usize, 0usize);
        let tbase: u8 = match self.qp_type {
            QpType::Rc => 0x00,
            QpType::Uc => 0x20,
            // The engine never creates RAW_PACKET QPs (create_qp refuses them).
            QpType::Ud | QpType::RawPacket => 0x60,
        };
        let seg_op = |f: u8, m: u8, l: u8, o: u8| -> u8 {
            if kind_only {
                o
            } else if first {
                f
            } else if last {
                l
            } else {
                m
            }
        };
        let mut reth = None;
        let mut atomic = None;
        let mut imm = None;
        let mut ieth = None;
        let opcode = match w.wr.opcode {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => {
                payload_range = (k as usize * mtu, (w.len - k as usize * mtu).min(mtu));
                match w.wr.opcode {
                    WrOpcode::SendWithImm if last => imm = Some(w.wr.imm_data),
                    WrOpcode::SendWithInv if last => ieth = Some(w.wr.rkey),
                    _ => {}
                }
                match (w.wr.opcode, last) {
                    (WrOpcode::SendWithImm, true) => seg_op(0, 1, 0x03, 0x05),
                    (WrOpcode::SendWithInv, true) => seg_op(0, 1, 0x16, 0x17),
                    _ => seg_op(0x00, 0x01, 0x02, 0x04),
                }
            }
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                payload_range = (k as usize * mtu, (w.len - k as usize * mtu).min(mtu));
                let with_imm = w.wr.opcode == WrOpcode::RdmaWriteWithImm;
                // One WRITE ONLY per packet, its RETH naming its part of the range
                // ([`crate::Config::write_pieces`]); else one RETH, the whole range's,
                // on the FIRST.
                let piece = rc && ctx.write_pieces && !with_imm && !kind_only;
                if first || piece {
                    let (off, len) = if piece { payload_range } else { (0, w.len) };
                    reth = Some(RethRepr {
                        va: w.wr.remote_addr.wrapping_add(off as u64),
                        rkey: w.wr.rkey,
                        dma_len: len as u32,
                    });
                }
                if piece {
                    0x0a
                } else if with_imm && last {
                    imm = Some(w.wr.imm_data);
                    seg_op(0x06, 0x07, 0x09, 0x0b)
                } else {
                    seg_op(0x06, 0x07, 0x08, 0x0a)
                }
            }
            WrOpcode::RdmaRead => {
                // This piece of the READ ([`SendWqe::read_piece_end`]): from the
                // response packet `next_pkt` (a retry asks again from the gap,
                // IBTA 9.7.5.1.3) to the piece's end.
                let off = w.next_pkt as usize * mtu;
                let end = (w.read_piece_end(w.next_pkt) as usize * mtu).min(w.len);
                reth = Some(RethRepr {
                    va: w.wr.remote_addr.wrapping_add(off as u64),
                    rkey: w.wr.rkey,
                    dma_len: end.saturating_sub(off) as u32,
                });
                0x0c
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let cs = w.wr.opcode == WrOpcode::AtomicCmpAndSwp;
                atomic = Some(AtomicEthRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add: if cs { w.wr.swap } else { w.wr.compare_add },
                    compare: if cs { w.wr.compare_add } else { 0 },
                });
                if cs {
                    0x13
                } else {
                    0x14
                }
            }
            // Local operations never start (no PSN, no packet): `next_new_request`
            // carries them out at the front of the SQ, and only started WQEs are sent
            // or resent.
            WrOpcode::BindMw(_) | WrOpcode::LocalInv => {
                unreachable!("a local operation is never sent")
            }
        };
        let ends_message = match w.wr.opcode {
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => true,
            _ => last,
        };
        let ack_req = if rc {
            self.noack_pkts += 1;
            let rd_atomic = w.is_rd_atomic();
            let ask = force_ack
                || self.noack_pkts >= MAX_PKT_PER_ACK.min(self.win(ctx) / 2)
                || self.loss_window_asks(psn, ctx)
                || (ends_message && self.ack_wanted(w, rd_atomic, psn, ctx));
            if ask {
                self.noack_pkts = 0;
                self.noack_wqes = 0;
                // What the answer will acknowledge: this PSN, or the last PSN of a
                // READ piece or an atomic.
                let covered = if rd_atomic {
                    w.first_psn.add(w.read_piece_end(w.next_pkt) - 1)
                } else {
                    psn
                };
                self.ack_req_psn = Some(match self.ack_req_psn {
                    Some(p) if p.is_after(covered) && !p.is_before(self.comp_psn) => p,
                    _ => covered,
                });
                ctx.counters.tx_ack_requests += 1;
            } else if ends_message {
                self.noack_wqes += 1;
            }
            ask
        } else {
            false
        };
        let (dest_qp, deth, av) = match (self.qp_type, w.ud) {
            (QpType::Ud, Some((av, rqpn, qkey))) => {
                // A Q_Key with the high bit set means "use the QP's own" (IBTA 10.2.4).
                let qkey = if qkey & 0x8000_0000 != 0 {
                    qkey_own
                } else {
                    qkey
                };
                (
                    rqpn,
                    Some(DethRepr {
                        qkey,
                        src_qp: self.qpn,
                    }),
                    av,
                )
            }
            _ => (self.attr.dest_qp_num, None, self.peer_av()),
        };
        let bth = BthRepr {
            opcode: Opcode(tbase | opcode),
            // Solicited Event: the last packet of a SEND or a WRITE with immediate
            // (IBTA 9.2.3; rxe `rxe_req.c` `init_req_packet`), never a READ or atomic.
            solicited: last
                && w.wr.flags.contains(SendFlags::SOLICITED)
                && matches!(
                    w.wr.opcode,
                    WrOpcode::Send
                        | WrOpcode::SendWithImm
                        | WrOpcode::SendWithInv
                        | WrOpcode::RdmaWriteWithImm
                ),
            // rxe sends M = 0 (golden captures; rxe_req.c bth_init).
            mig_req: false,
            pad: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req,
            psn,
        };
        let repr = PacketRepr {
            deth,
            reth,
            atomic_eth: atomic,
            immediate: imm,
            ieth_rkey: ieth,
            ..PacketRepr::new(bth, &[])
        };
        let (off, len) = payload_range;
        let data = w.data.as_ref();
        self.transmit_from(
            &repr,
            len,
            |buf| match data {
                Some(d) => d.read(off, buf),
                // (Every message with a payload has its data resolved when it starts;
                // the buffer may hold a recycled packet's bytes.)
                None => buf.fill(0),
            },
            data.and_then(|d| d.within_one(off, len)),
            &av,
            ctx,
        )
    }

    /// While a loss window ([`Qp::loss_window`]) holds the requester to fewer PSNs
    /// than its window, packet `psn` asks for an ACK when it fills the loss window
    /// (the requester waits for an ACK after it: without AckReq nothing would come
    /// until the nudge) or half of it has gone without asking.
    fn loss_window_asks(&self, psn: Psn, ctx: &Ctx<'_>) -> bool {
        self.loss_window
            .filter(|&lw| lw < self.win(ctx))
            .is_some_and(|lw| {
                psn.next().forward_from(self.comp_psn) >= lw || self.noack_pkts >= lw / 2
            })
    }

    /// Whether the last packet of `w` (PSN `psn`) asks for an ACK ([`crate::AckPolicy`]).
    pub(crate) fn ack_wanted(&self, w: &SendWqe, rd_atomic: bool, psn: Psn, ctx: &Ctx<'_>) -> bool {
        use crate::config::AckPolicy;
        match ctx.ack_policy {
            // rxe `rxe_req.c` `init_req_packet`: AckReq on every message's last packet.
            AckPolicy::EveryMessage => true,
            AckPolicy::Coalesce => {
                // READ/atomic requests: their responses come anyway (rxe sets it too).
                rd_atomic
                    // A completion waits for this ACK (IBTA 9.7.5.1.1: it also
                    // completes every unsignaled WQE before).
                    || self.sq_sig_all
                    || w.wr.flags.contains(SendFlags::SIGNALED)
                    // An ordering point the application asked for.
                    || w.wr.flags.contains(SendFlags::FENCE)
                    // A retransmission (go-back-N or timeout): recovery asks as rxe does.
                    || psn.is_before(self.sent_psn_end)
                    // The send queue drains for SQD: the event waits for the ACKs.
                    || self.state == QpState::Sqd
                    // SQ slots free only on ACKs: ask before unsignaled work fills it.
                    || self.noack_wqes + 1 >= (self.attr.cap.max_send_wr / 2).max(1)
                    // A stream with a quarter of the PSN window unacknowledged asks
                    // every eighth of the window, so ACKs free the window in steps
                    // and the requester never waits a round trip for half of it.
                    // (rxe's window sets the pace for larger windows than rxe's:
                    // asking every 64 packets of a 512-PSN window made a `-Q 100`
                    // ping-pong that sleeps 0.7 µs slower per round trip, for no
                    // bandwidth. A smaller window keeps the proportions.)
                    || (psn.next().forward_from(self.comp_psn) >= self.pace_window(ctx) / 4
                        && self.noack_pkts >= self.pace_window(ctx) / 8)
                    // A stream that has asked for nothing for a quarter of the ACK
                    // timeout: ask, so the retransmit timer (armed when the oldest
                    // unacknowledged packet went out, or at the last progress) does
                    // not fire on a stream that never pauses long enough for a nudge.
                    || (!self.ack_outstanding()
                        && ack_timeout_ns(self.attr.timeout).is_some_and(|t| {
                            self.unacked_since
                                .is_some_and(|u| ctx.now >= u.saturating_add(t / 4))
                        }))
            }
        }
    }
}
