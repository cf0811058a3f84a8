//! The responder half of a QP: requests in, data into memory, ACKs / NAKs / READ
//! responses / ATOMIC ACKs out (IBTA 9.7.5.1, 9.9; rxe `rxe_resp.c`).

use crate::net::{self, Datagram, Transmit};
use crate::objects::{check_rkey, resolve_sges};
use crate::qp::{Ctx, InMsg, Qp, Resource, ResourceKind, RespOut, Wake, DEFAULT_PKEY};
use crate::types::*;
use rverbs_wire::bth::BthRepr;
use rverbs_wire::ext::{AethRepr, AtomicAckEthRepr, NakCode, Syndrome};
use rverbs_wire::grh::Gid;
use rverbs_wire::opcode::{OpKind, Opcode};
use rverbs_wire::packet::{Packet, PacketRepr};
use rverbs_wire::psn::Psn;
use rverbs_wire::{ipv4, ipv6};
use std::net::IpAddr;

/// The largest RDMA WRITE or READ a RETH may ask for: 2^31 bytes, IBTA's largest
/// message (the DMA Length field is 32 bits wide); a longer one is an invalid request
/// (rxe `rxe_resp.c` `check_length`: NAK invalid request).
const MAX_DMA_LEN: usize = 1 << 31;

/// How a request ends when it cannot be carried out (IBTA 9.9.2, error classes).
enum Fail {
    /// Class B: NAK sequence error (once) and drop.
    OutOfSequence,
    /// RNR NAK; the PSN is not consumed.
    Rnr,
    /// Class C (RC): NAK with this code, the QP goes to the error state. `recv` says
    /// whether a receive WQE in progress completes with the given status.
    Fatal(NakCode, Option<WcStatus>),
    /// Class D (UC/UD): drop the message silently (counted).
    DropMessage,
}

impl Qp {
    /// Handles a request packet for this QP.
    pub(crate) fn on_request(
        &mut self,
        pkt: &Packet<&[u8]>,
        d: &Datagram<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Wake {
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            ctx.counters.rx_wrong_state += 1;
            return Wake::default();
        }
        if !self.comm_est && self.state == QpState::Rtr {
            self.comm_est = true;
            ctx.events.push_back(AsyncEvent::CommEst(self.qpn));
        }
        let wake = Wake {
            transmit: true,
            timers: false,
        };
        if self.qp_type == QpType::Ud {
            self.on_ud(pkt, d, ctx);
            return Wake::default();
        }
        let psn = pkt.bth().psn();
        let diff = psn.diff(self.epsn);
        let info = pkt.info().expect("checked packet");
        if self.qp_type == QpType::Uc {
            if diff != 0 {
                // A gap: the message in progress is lost; resynchronise on the next
                // FIRST/ONLY (IBTA 9.8.3.1, class D1/E).
                self.abandon_message(ctx);
                if !info.starts_message {
                    self.drop_msg = true;
                    ctx.counters.rx_dropped_messages += 1;
                    return Wake::default();
                }
                self.epsn = psn;
            }
        } else {
            self.sr_note_request(pkt);
            if diff < 0 {
                ctx.counters.rx_duplicate_requests += 1;
                self.duplicate(pkt, ctx);
                return wake;
            } else if diff > 0 {
                ctx.counters.rx_out_of_sequence += 1;
                if self.sr_holds() {
                    return self.sr_hold(pkt, d.payload, diff as u32, ctx);
                }
                return self.fail_request(Fail::OutOfSequence, psn, ctx);
            }
        }
        let from = self.epsn;
        match self.execute(pkt, ctx) {
            Ok(()) => {
                if self.qp_type == QpType::Rc {
                    self.nak_seq_sent = false;
                }
                ctx.counters.rx_packets += 1;
                ctx.counters.rx_bytes += d.payload.len() as u64;
                if self.sr.holding() {
                    return self.carry_out_held(from, ctx);
                }
                wake
            }
            Err(f) => {
                // The requester goes back to this PSN: what is held behind it comes
                // again.
                self.sr.clear_held();
                self.fail_request(f, psn, ctx)
            }
        }
    }

    /// Selective repeat ([`crate::selective`]): the gap before held requests has
    /// filled (the expected PSN moved on from `from`); the requests held behind it
    /// are carried out in PSN order, as if they had just arrived, until the next gap.
    /// One ACK follows for the last of them (when a SEND/WRITE; READ responses and
    /// ATOMIC ACKs acknowledge by themselves), so the requester completes what the
    /// reports told it had arrived.
    fn carry_out_held(&mut self, mut from: Psn, ctx: &mut Ctx<'_>) -> Wake {
        // Held packets are whole copies (`sr_hold`): the datagram being handled, whose
        // payload `ctx.placing` may stand for, is done.
        ctx.placing = None;
        let wake = Wake {
            transmit: true,
            timers: false,
        };
        let mut last = None;
        while let Some(bytes) = self.sr_advance(from, ctx) {
            let Ok(pkt) = Packet::new_checked(&bytes[..]) else {
                // (Checked when it arrived.)
                self.sr.clear_held();
                break;
            };
            let psn = pkt.bth().psn();
            from = self.epsn;
            match self.execute(&pkt, ctx) {
                Ok(()) => {
                    ctx.counters.rx_packets += 1;
                    ctx.counters.rx_bytes += bytes.len() as u64;
                    last = pkt
                        .info()
                        .filter(|i| matches!(i.kind, OpKind::Send | OpKind::RdmaWrite))
                        .map(|_| psn);
                    self.sr.recycle(bytes);
                }
                Err(f) => {
                    // An RNR or error NAK: the requester goes back to it, and sends
                    // everything after it again.
                    self.sr.clear_held();
                    return self.fail_request(f, psn, ctx);
                }
            }
        }
        if let Some(psn) = last {
            self.queue_ack(psn, Syndrome::ACK);
        }
        // Carried out up to another gap: reported again, in case its report was lost.
        self.sr_report_first_gap(ctx);
        wake
    }

    fn fail_request(&mut self, f: Fail, psn: Psn, ctx: &mut Ctx<'_>) -> Wake {
        let wake = Wake {
            transmit: true,
            timers: false,
        };
        match f {
            Fail::OutOfSequence => {
                if !self.nak_seq_sent {
                    self.nak_seq_sent = true;
                    ctx.counters.tx_nak_seq += 1;
                    self.queue_ack(self.epsn, Syndrome::Nak(NakCode::PsnSequenceError));
                    return wake;
                }
                Wake::default()
            }
            Fail::Rnr => {
                ctx.counters.tx_rnr_nak += 1;
                self.queue_ack(
                    psn,
                    Syndrome::RnrNak {
                        timer: self.attr.min_rnr_timer,
                    },
                );
                wake
            }
            Fail::DropMessage => {
                self.abandon_message(ctx);
                self.drop_msg = true;
                ctx.counters.rx_dropped_messages += 1;
                Wake::default()
            }
            Fail::Fatal(code, recv_status) => {
                if self.qp_type != QpType::Rc {
                    return self.fail_request(Fail::DropMessage, psn, ctx);
                }
                ctx.counters.tx_nak_fatal += 1;
                if let (Some(status), Some(InMsg::Send { wqe, .. })) =
                    (recv_status, self.in_msg.take())
                {
                    let wc = self.recv_wc(wqe.wr_id, status, WcOpcode::Recv, 0);
                    ctx.push_wc(self.recv_cq, wc, false);
                }
                // The NAK is the last thing this QP sends: build it before flushing.
                // Responses queued for earlier requests (READ responses, ATOMIC ACKs)
                // still leave first, in PSN order: those requests were carried out,
                // and their requester expects the answers before the NAK (IBTA
                // 9.7.5.1; rxe's responder has sent them by the time it NAKs).
                let nak = self.ack_transmit(psn, Syndrome::Nak(code), self.msn, ctx);
                let earlier = std::mem::take(&mut self.out);
                self.fail(ctx);
                self.out = earlier;
                self.pending_nak = Some(nak);
                wake
            }
        }
    }

    fn abandon_message(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(InMsg::Send { wqe, .. }) = self.in_msg.take() {
            // UC: the receive WQE is reused by the next message (rxe keeps it).
            match self.srq {
                None => self.rq.push_front(wqe),
                Some(id) => {
                    if let Some(s) = ctx.srqs.get_mut(id.0) {
                        s.queue.push_front(wqe);
                    }
                }
            }
        }
    }

    /// Carries out an in-sequence RC/UC request.
    fn execute(&mut self, pkt: &Packet<&[u8]>, ctx: &mut Ctx<'_>) -> Result<(), Fail> {
        let info = pkt.info().expect("checked packet");
        let bth = pkt.bth();
        let psn = bth.psn();
        let mtu = self.mtu();
        let payload = pkt.payload();
        let in_msg = self.in_msg.is_some()
            || (self.qp_type == QpType::Uc && self.drop_msg && !info.starts_message);
        if self.drop_msg {
            if info.starts_message {
                self.drop_msg = false;
            } else {
                self.epsn = psn.next();
                if info.ends_message {
                    self.drop_msg = false;
                }
                ctx.counters.rx_dropped_messages += 1;
                return Ok(());
            }
        }
        // Opcode sequence (IBTA 9.7.5.1.2 / C9-?): inside a message only MIDDLE/LAST of
        // the same operation; outside only FIRST/ONLY.
        let same_kind = matches!(
            (&self.in_msg, info.kind),
            (Some(InMsg::Send { .. }), OpKind::Send)
                | (Some(InMsg::Write { .. }), OpKind::RdmaWrite)
        );
        if in_msg == info.starts_message || (in_msg && !same_kind) {
            return Err(Fail::Fatal(
                NakCode::InvalidRequest,
                Some(WcStatus::RemInvReqErr),
            ));
        }
        // Payload size rules: FIRST and MIDDLE carry exactly one MTU, LAST 1..=MTU,
        // ONLY 0..=MTU (IBTA 9.7.5.1.2 length checks).
        if matches!(info.kind, OpKind::Send | OpKind::RdmaWrite) {
            let ok = if !info.ends_message {
                payload.len() == mtu
            } else if !info.starts_message {
                (1..=mtu).contains(&payload.len())
            } else {
                payload.len() <= mtu
            };
            if !ok {
                return Err(Fail::Fatal(
                    NakCode::InvalidRequest,
                    Some(WcStatus::RemInvReqErr),
                ));
            }
        }
        let access = self.attr.qp_access_flags;
        let rc = self.qp_type == QpType::Rc;
        match info.kind {
            OpKind::Send => {
                if info.starts_message {
                    let Some(wqe) = self.take_recv(ctx) else {
                        return Err(if rc { Fail::Rnr } else { Fail::DropMessage });
                    };
                    match resolve_sges(ctx.mrs, self.pd, &wqe.sges, Access::LOCAL_WRITE) {
                        Ok((data, cap)) => {
                            self.in_msg = Some(InMsg::Send {
                                wqe,
                                data,
                                cap,
                                offset: 0,
                            })
                        }
                        Err(status) => {
                            let wc = self.recv_wc(wqe.wr_id, status, WcOpcode::Recv, 0);
                            ctx.push_wc(self.recv_cq, wc, false);
                            return Err(Fail::Fatal(NakCode::RemoteOperationalError, None));
                        }
                    }
                }
                let Some(InMsg::Send {
                    data, cap, offset, ..
                }) = &mut self.in_msg
                else {
                    return Err(Fail::Fatal(NakCode::InvalidRequest, None));
                };
                if *offset + payload.len() > *cap {
                    return Err(Fail::Fatal(
                        NakCode::InvalidRequest,
                        Some(WcStatus::LocLenErr),
                    ));
                }
                data.place(*offset, payload, ctx.placing);
                *offset += payload.len();
                if info.ends_message {
                    if let Some(rkey) = pkt.ieth_rkey().filter(|&k| crate::objects::is_mw_key(k)) {
                        // SEND with invalidate of a memory window's R_Key: the window
                        // becomes free; one that cannot be invalidated fails the
                        // receive (rxe `invalidate_rkey` → RESPST_ERR_INVALIDATE_RKEY,
                        // REM_INV_REQ_ERR).
                        if crate::objects::invalidate_mw(ctx.mws, rkey).is_err() {
                            return Err(Fail::Fatal(
                                NakCode::InvalidRequest,
                                Some(WcStatus::RemInvReqErr),
                            ));
                        }
                    }
                }
            }
            OpKind::RdmaWrite => {
                // An operation the QP does not enable is an invalid request, even
                // with length 0; an R_Key that does not allow it is an access error
                // (rxe `check_op_valid` → NAK invalid request, class C).
                if info.starts_message && !access.contains(Access::REMOTE_WRITE) {
                    return Err(Fail::Fatal(NakCode::InvalidRequest, None));
                }
                if info.has_immediate() && info.ends_message && !self.recv_available(ctx) {
                    // WRITE with immediate consumes a receive WQE (IBTA 9.4.4): none →
                    // RNR NAK, which consumes nothing (IBTA 9.7.5.2.8). So it comes
                    // before any state of the message is kept, as rxe's `check_resource`
                    // runs before `check_rkey` sets up the write: a WRITE ONLY's resend
                    // must start a new message, a WRITE LAST's resend finds the message
                    // its FIRST began as it was.
                    return Err(if rc { Fail::Rnr } else { Fail::DropMessage });
                }
                if info.starts_message {
                    let reth = pkt.reth().expect("WRITE FIRST/ONLY has a RETH");
                    let len = reth.dma_len() as usize;
                    if len > MAX_DMA_LEN {
                        return Err(Fail::Fatal(NakCode::InvalidRequest, None));
                    }
                    let seg = if len == 0 {
                        None
                    } else {
                        match check_rkey(
                            ctx.mrs,
                            ctx.mws,
                            self.pd,
                            self.qpn,
                            reth.rkey(),
                            reth.va(),
                            len as u64,
                            Access::REMOTE_WRITE,
                        ) {
                            Some(s) => Some(s),
                            None => return Err(Fail::Fatal(NakCode::RemoteAccessError, None)),
                        }
                    };
                    self.in_msg = Some(InMsg::Write {
                        seg,
                        len,
                        offset: 0,
                    });
                }
                let Some(InMsg::Write { seg, len, offset }) = &mut self.in_msg else {
                    return Err(Fail::Fatal(NakCode::InvalidRequest, None));
                };
                if *offset + payload.len() > *len
                    || (info.ends_message && *offset + payload.len() != *len)
                {
                    return Err(Fail::Fatal(NakCode::InvalidRequest, None));
                }
                if let Some(s) = seg {
                    crate::memory::place(&*s.mem, s.offset + *offset, payload, ctx.placing);
                }
                *offset += payload.len();
            }
            OpKind::RdmaReadRequest => {
                let reth = pkt.reth().expect("READ request has a RETH");
                let len = reth.dma_len() as usize;
                // Not enabled on the QP: invalid request (rxe `check_op_valid`); so is
                // a length past the largest message (`MAX_DMA_LEN`), whose responses
                // would also wrap the 24-bit PSN space back onto the request's PSN.
                let seg = if !access.contains(Access::REMOTE_READ) || len > MAX_DMA_LEN {
                    return Err(Fail::Fatal(NakCode::InvalidRequest, None));
                } else if len == 0 {
                    crate::objects::Seg {
                        mem: std::sync::Arc::new(crate::memory::VecMemory::zeroed(0)),
                        offset: 0,
                        len: 0,
                    }
                } else {
                    check_rkey(
                        ctx.mrs,
                        ctx.mws,
                        self.pd,
                        self.qpn,
                        reth.rkey(),
                        reth.va(),
                        len as u64,
                        Access::REMOTE_READ,
                    )
                    .ok_or(Fail::Fatal(NakCode::RemoteAccessError, None))?
                };
                let npkts = len.div_ceil(mtu).max(1) as u32;
                self.msn = (self.msn + 1) & 0xff_ffff;
                self.save_resource(Resource {
                    first_psn: psn,
                    npkts,
                    kind: ResourceKind::Read { seg: seg.clone() },
                });
                self.out.push_back(RespOut::Read {
                    seg,
                    first_psn: psn,
                    npkts,
                    next: 0,
                    sent: 0,
                    msn: self.msn,
                });
                self.epsn = psn.add(npkts);
                return Ok(());
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let a = pkt.atomic_eth().expect("atomic has an AtomicETH");
                if !access.contains(Access::REMOTE_ATOMIC) {
                    // Not enabled on the QP: invalid request (rxe `check_op_valid`).
                    return Err(Fail::Fatal(NakCode::InvalidRequest, None));
                }
                if a.va() % 8 != 0 {
                    return Err(Fail::Fatal(NakCode::InvalidRequest, None));
                }
                let seg = check_rkey(
                    ctx.mrs,
                    ctx.mws,
                    self.pd,
                    self.qpn,
                    a.rkey(),
                    a.va(),
                    8,
                    Access::REMOTE_ATOMIC,
                )
                .ok_or(Fail::Fatal(NakCode::RemoteAccessError, None))?;
                let op = if info.kind == OpKind::CompareSwap {
                    crate::memory::AtomicOp::CmpSwap {
                        compare: a.compare(),
                        swap: a.swap_add(),
                    }
                } else {
                    crate::memory::AtomicOp::FetchAdd(a.swap_add())
                };
                let orig = seg.mem.atomic(seg.offset, op);
                self.msn = (self.msn + 1) & 0xff_ffff;
                self.save_resource(Resource {
                    first_psn: psn,
                    npkts: 1,
                    kind: ResourceKind::Atomic { orig },
                });
                self.out.push_back(RespOut::AtomicAck {
                    psn,
                    orig,
                    msn: self.msn,
                });
                self.epsn = psn.next();
                return Ok(());
            }
            _ => return Err(Fail::Fatal(NakCode::InvalidRequest, None)),
        }
        self.epsn = psn.next();
        if info.ends_message {
            self.msn = (self.msn + 1) & 0xff_ffff;
            self.finish_message(pkt, ctx);
        }
        // Only when asked (IBTA 9.7.5.1.1; rxe `rxe_resp.c` `acknowledge`): the
        // requester coalesces ACKs with AckReq, and one ACK covers every earlier PSN.
        if rc && bth.ack_req() {
            self.queue_ack(psn, Syndrome::ACK);
        }
        Ok(())
    }

    /// Completes the receive side of a finished SEND or WRITE with immediate.
    fn finish_message(&mut self, pkt: &Packet<&[u8]>, ctx: &mut Ctx<'_>) {
        let info = pkt.info().expect("checked packet");
        let solicited = pkt.bth().solicited();
        match self.in_msg.take() {
            Some(InMsg::Send {
                wqe, offset, data, ..
            }) => {
                let mut wc =
                    self.recv_wc(wqe.wr_id, WcStatus::Success, WcOpcode::Recv, offset as u32);
                if let Some(imm) = pkt.immediate() {
                    wc.imm_data = imm;
                    wc.wc_flags = WcFlags::WITH_IMM;
                } else if let Some(rkey) = pkt.ieth_rkey() {
                    // (A window's R_Key was invalidated as the message ended; an MR's
                    // stays valid: rverbs has no fast-registered MRs.)
                    wc.imm_data = rkey;
                    wc.wc_flags = WcFlags::WITH_INV;
                }
                if !ctx.push_wc(self.recv_cq, wc, solicited) {
                    self.fail(ctx);
                }
                // Freed after the answer leaves, not on the way to it.
                ctx.bury(crate::qp::Dead::Recv(wqe, data));
            }
            Some(InMsg::Write { len, .. }) if info.has_immediate() => {
                let Some(wqe) = self.take_recv(ctx) else {
                    return;
                };
                let mut wc = self.recv_wc(
                    wqe.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    len as u32,
                );
                wc.imm_data = pkt.immediate().unwrap_or(0);
                wc.wc_flags = WcFlags::WITH_IMM;
                if !ctx.push_wc(self.recv_cq, wc, solicited) {
                    self.fail(ctx);
                }
            }
            _ => {}
        }
    }

    /// A receive WQE is there for a message that needs one (RQ or SRQ).
    fn recv_available(&self, ctx: &Ctx<'_>) -> bool {
        match self.srq {
            None => !self.rq.is_empty(),
            Some(id) => ctx.srqs.get(id.0).is_some_and(|s| !s.queue.is_empty()),
        }
    }

    fn save_resource(&mut self, r: Resource) {
        let max = usize::from(self.attr.max_dest_rd_atomic.max(1));
        while self.resources.len() >= max {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
    }

    /// A request with a PSN before the expected one (IBTA 9.7.5.1.4).
    fn duplicate(&mut self, pkt: &Packet<&[u8]>, ctx: &mut Ctx<'_>) {
        let info = pkt.info().expect("checked packet");
        let psn = pkt.bth().psn();
        let mtu = self.mtu();
        match info.kind {
            OpKind::RdmaReadRequest | OpKind::CompareSwap | OpKind::FetchAdd => {
                let found = self
                    .resources
                    .iter()
                    .find(|r| psn.in_window(r.first_psn, r.npkts));
                match found.map(|r| (r.first_psn, r.npkts, &r.kind)) {
                    Some((first, npkts, ResourceKind::Read { seg }))
                        if info.kind == OpKind::RdmaReadRequest =>
                    {
                        // Replay from the PSN asked for; the request's RETH must agree
                        // with the saved one at that offset.
                        let k = psn.forward_from(first);
                        let off = k as usize * mtu;
                        let reth = pkt.reth().expect("READ has RETH");
                        if reth.dma_len() as usize + off != seg.len {
                            ctx.counters.rx_ghost_responses += 1;
                            return;
                        }
                        // One response stream per READ resource: a repeated request
                        // moves the stream still queued for it to the asked PSN instead
                        // of queueing another copy behind it, as rxe's
                        // `duplicate_request` points `qp->resp.res` at the resource and
                        // resets its cursor (`cur_psn`, `read.va`, `read.resid`). Stacked
                        // copies each resent the whole rest of the READ, and a replay for
                        // a newer gap waited behind all of them.
                        let queued = self.out.iter_mut().find_map(|o| match o {
                            RespOut::Read {
                                first_psn, next, ..
                            } if *first_psn == first => Some(next),
                            _ => None,
                        });
                        if let Some(next) = queued {
                            ctx.counters.rx_read_replays_merged += 1;
                            *next = k;
                            return;
                        }
                        let seg = seg.clone();
                        let msn = self.msn;
                        // No stream queued: the first one sent every response.
                        self.out.push_back(RespOut::Read {
                            seg,
                            first_psn: first,
                            npkts,
                            next: k,
                            sent: npkts,
                            msn,
                        });
                    }
                    Some((first, _, ResourceKind::Atomic { orig }))
                        if first == psn && info.kind != OpKind::RdmaReadRequest =>
                    {
                        // The saved original value, without executing again.
                        let orig = *orig;
                        let msn = self.msn;
                        self.out.push_back(RespOut::AtomicAck { psn, orig, msn });
                    }
                    _ => ctx.counters.rx_ghost_responses += 1,
                }
            }
            _ => {
                // SEND/WRITE: acknowledge again up to the last PSN seen (C9-105).
                self.queue_ack(self.epsn.sub(1), Syndrome::ACK);
            }
        }
    }

    /// Queues an ACK or NAK; consecutive plain ACKs coalesce into the latest.
    pub(crate) fn queue_ack(&mut self, psn: Psn, syndrome: Syndrome) {
        let syn = syndrome.to_byte();
        if let Syndrome::Ack { .. } = syndrome {
            if let Some(RespOut::Ack {
                psn: p,
                syndrome: s,
                msn: m,
            }) = self.out.back_mut()
            {
                if Syndrome::from_byte(*s) == Syndrome::ACK {
                    *p = psn;
                    *m = self.msn;
                    return;
                }
            }
        }
        self.out.push_back(RespOut::Ack {
            psn,
            syndrome: syn,
            msn: self.msn,
        });
    }

    fn ack_transmit(&self, psn: Psn, syndrome: Syndrome, msn: u32, ctx: &Ctx<'_>) -> Transmit {
        self.ack_packet(
            &self.resp_bth(Opcode::RC_ACKNOWLEDGE, psn),
            AethRepr { syndrome, msn },
            ctx,
        )
    }

    pub(crate) fn resp_bth(&self, opcode: Opcode, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            // rxe sends M = 0 (golden captures; rxe_req.c bth_init).
            mig_req: false,
            pad: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: self.attr.dest_qp_num,
            ack_req: false,
            psn,
        }
    }

    /// The connected peer's address vector (RC/UC; set at RTR).
    pub(crate) fn peer_av(&self) -> AddressVector {
        self.attr.ah_attr.map(|a| a.av).unwrap_or(AddressVector {
            dgid: Gid::ZERO,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        })
    }

    /// Builds the next responder packet, if any.
    /// Whether [`Qp::next_response`] may have a packet to send: a response queued or
    /// a NAK pending (without either it sends nothing whatever the state). The
    /// requester's stream asks this before every packet instead of calling it.
    pub(crate) fn response_waiting(&self) -> bool {
        !self.out.is_empty() || self.pending_nak.is_some()
    }

    pub(crate) fn next_response(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) && self.pending_nak.is_none()
        {
            self.out.clear();
            return None;
        }
        // After a fatal NAK (the QP is in the error state), the responses queued
        // before it, then the NAK, then nothing.
        if self.out.is_empty() {
            if let Some(nak) = self.pending_nak.take() {
                ctx.counters.tx_packets += 1;
                ctx.counters.tx_bytes += nak.payload.len() as u64;
                return Some(nak);
            }
        }
        let mtu = self.mtu();
        let t = match self.out.front_mut()? {
            RespOut::Ack { psn, syndrome, msn } => {
                let (psn, syn, msn) = (*psn, Syndrome::from_byte(*syndrome), *msn);
                self.out.pop_front();
                if let Syndrome::Ack { .. } = syn {
                    ctx.counters.tx_acks += 1;
                }
                self.ack_transmit(psn, syn, msn, ctx)
            }
            RespOut::AtomicAck { psn, orig, msn } => {
                let (psn, orig, msn) = (*psn, *orig, *msn);
                self.out.pop_front();
                let repr = PacketRepr {
                    aeth: Some(AethRepr {
                        syndrome: Syndrome::ACK,
                        msn,
                    }),
                    atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
                    ..PacketRepr::new(self.resp_bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn), &[])
                };
                self.transmit(&repr, &self.peer_av(), ctx)
            }
            RespOut::Read {
                seg,
                first_psn,
                npkts,
                next,
                sent,
                msn,
            } => {
                let k = *next;
                if k < *sent {
                    ctx.counters.tx_read_responses_resent += 1;
                }
                *sent = (*sent).max(k + 1);
                let off = k as usize * mtu;
                let len = seg.len.saturating_sub(off).min(mtu);
                let (mem, at) = (seg.mem.clone(), seg.offset + off);
                // FIRST/ONLY only at the resource's first PSN: a replay from a later PSN
                // continues with MIDDLE/LAST, as rxe's `duplicate_request` sets
                // `rdatm_res_state_replay` and its completer expects.
                let starts = k == 0;
                let ends = k + 1 >= *npkts;
                let opcode = match (starts, ends) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                };
                let psn = first_psn.add(k);
                let msn = *msn;
                *next += 1;
                if *next >= *npkts {
                    self.out.pop_front();
                }
                let aeth = (starts || ends).then_some(AethRepr {
                    syndrome: Syndrome::ACK,
                    msn,
                });
                let repr = PacketRepr {
                    aeth,
                    ..PacketRepr::new(self.resp_bth(opcode, psn), &[])
                };
                let read = |buf: &mut [u8]| mem.read(at, buf);
                self.transmit_from(&repr, len, read, Some((&mem, at)), &self.peer_av(), ctx)
            }
        };
        ctx.counters.tx_packets += 1;
        ctx.counters.tx_bytes += t.len() as u64;
        ctx.counters.tx_payloads_in_place += u64::from(t.body.is_some());
        Some(t)
    }

    /// A UD datagram: Q_Key check, one receive WQE, the GRH area, a completion.
    fn on_ud(&mut self, pkt: &Packet<&[u8]>, d: &Datagram<'_>, ctx: &mut Ctx<'_>) {
        let Some(deth) = pkt.deth() else {
            ctx.counters.rx_malformed += 1;
            return;
        };
        if deth.qkey() != self.attr.qkey {
            ctx.counters.rx_bad_qkey += 1;
            return;
        }
        let payload = pkt.payload();
        if payload.len() > self.mtu() {
            ctx.counters.rx_dropped_messages += 1;
            return;
        }
        let Some(wqe) = self.take_recv(ctx) else {
            // UD has no RNR: the datagram is dropped (IBTA 9.8.4, class D).
            ctx.counters.rx_dropped_messages += 1;
            return;
        };
        ctx.counters.rx_packets += 1;
        ctx.counters.rx_bytes += d.payload.len() as u64;
        let (data, cap) = match resolve_sges(ctx.mrs, self.pd, &wqe.sges, Access::LOCAL_WRITE) {
            Ok(x) => x,
            Err(status) => {
                let wc = self.recv_wc(wqe.wr_id, status, WcOpcode::Recv, 0);
                ctx.push_wc(self.recv_cq, wc, false);
                self.fail(ctx);
                return;
            }
        };
        let total = GRH_AREA + payload.len();
        if total > cap {
            ctx.counters.rx_dropped_messages += 1;
            let wc = self.recv_wc(wqe.wr_id, WcStatus::LocLenErr, WcOpcode::Recv, 0);
            if !ctx.push_wc(self.recv_cq, wc, false) {
                self.fail(ctx);
            }
            return;
        }
        data.write(
            0,
            // The whole UDP payload, pad included: rxe copies the received IP header
            // itself (`rxe_resp.c` `send_data_in` of `ip_hdr(skb)`), whose length
            // covers BTH through ICRC with the pad bytes (IBTA 9.3.1.3, pad to 4).
            &grh_area(d, d.payload.len()),
        );
        data.place(GRH_AREA, payload, ctx.placing);
        let mut wc = self.recv_wc(wqe.wr_id, WcStatus::Success, WcOpcode::Recv, total as u32);
        wc.src_qp = deth.src_qp();
        wc.wc_flags = WcFlags::GRH;
        if let Some(imm) = pkt.immediate() {
            wc.imm_data = imm;
            wc.wc_flags = WcFlags(WcFlags::GRH.0 | WcFlags::WITH_IMM.0);
        }
        if !ctx.push_wc(self.recv_cq, wc, pkt.bth().solicited()) {
            self.fail(ctx);
        }
    }
}

/// Bytes at the start of a UD receive buffer reserved for the network header.
pub const GRH_AREA: usize = 40;

/// The 40-byte network-header area of a UD receive, as rxe writes it (`rxe_resp.c`
/// `send_data_in`, and rdma-core's `ibv_init_ah_from_wc` reading it back): IPv6 → the
/// IPv6 header; IPv4 → 20 zero bytes, then the IPv4 header with a valid checksum.
pub fn grh_area(d: &Datagram<'_>, ib_len: usize) -> [u8; GRH_AREA] {
    let mut area = [0u8; GRH_AREA];
    if d.roce_v1 {
        // RoCE v1: the GRH as received (IBTA 8.3; NxtHdr 0x1B, which rdma-core's
        // `ibv_init_ah_from_wc` maps to a RoCE v1 source GID).
        net::v1_grh(
            d.src,
            d.dst,
            d.traffic_class,
            d.flow_label,
            d.hop_limit,
            ib_len,
        )
        .emit(&mut area);
        return area;
    }
    let udp_len = 8 + ib_len;
    match (d.src, d.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let repr = ipv4::Ipv4Repr {
                src,
                dst,
                tos: d.traffic_class,
                ident: d.ipv4_id.unwrap_or(0),
                dont_frag: true,
                ttl: d.hop_limit,
                protocol: ipv4::PROTO_UDP,
                payload_len: udp_len,
            };
            repr.emit(&mut ipv4::Ipv4Packet::new_unchecked(&mut area[20..]));
        }
        _ => {
            let repr = ipv6::Ipv6Repr {
                src: net_to_v6(d.src),
                dst: net_to_v6(d.dst),
                traffic_class: d.traffic_class,
                flow_label: d.flow_label,
                next_header: ipv4::PROTO_UDP,
                hop_limit: d.hop_limit,
                payload_len: udp_len,
            };
            repr.emit(&mut ipv6::Ipv6Packet::new_unchecked(&mut area[..]));
        }
    }
    area
}

fn net_to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped(),
        IpAddr::V6(v) => v,
    }
}
