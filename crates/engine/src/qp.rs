//! A queue pair: its attributes, its queues, its state changes (modify, reset, error
//! and flush) and its timers' dispatch. The transport's halves follow the protocol's
//! split (IBTA 9.7; rxe's files): the requester in `req.rs`, the completer in
//! `comp.rs`, the responder in `resp.rs`; packets are built in `tx.rs`, timer lengths
//! and the timer table are in `timers.rs`.

use crate::counters::Counters;
use crate::modify::{QpAttr, QpAttrMask};
use crate::net::{self, Transmit};
use crate::objects::{Cq, Data, Mr, RecvWqe, Srq};
use crate::slab::Slab;
use crate::timers::{ack_nudge_ns, QpTimer, Rtt, TimerTable};
use crate::types::*;
use rverbs_wire::grh::Gid;
use rverbs_wire::psn::Psn;
use std::collections::{BTreeSet, VecDeque};

/// By default, at most this many PSNs may be outstanding (sent, not acknowledged)
/// (rxe `RXE_MAX_UNACKED_PSNS`; [`crate::Config::max_unacked_psns`]).
pub const MAX_UNACKED_PSNS: u32 = 128;
/// The requester asks for an ACK at least every this many packets (rxe
/// `RXE_MAX_PKT_PER_ACK`), besides the last packet of every message; every half
/// window when the window ([`crate::Config::max_unacked_psns`]) is smaller than 128.
pub const MAX_PKT_PER_ACK: u32 = 64;
/// The smallest requester window [`crate::Config::max_unacked_psns`] may set.
pub const MIN_UNACKED_PSNS: u32 = 16;
/// The smallest window [`crate::Engine::set_qp_window`] gives one QP: a driver that
/// splits a small peer buffer among many QPs may go below [`MIN_UNACKED_PSNS`] (with
/// so few PSNs out, the requester asks for an ACK at every message end and every half
/// window within a long message).
pub const MIN_QP_WINDOW: u32 = 4;
/// The default P_Key (index 0 of the only P_Key table entry): the wire format's.
pub use rverbs_wire::bth::DEFAULT_PKEY;

/// Most tail-loss probes a requester sends for one stall (between two signs of
/// progress): the last packet sent first (RFC 8985 7.3), then the oldest
/// unacknowledged one, each probe timeout twice the one before, and none due at or
/// after the local ACK timeout, which then recovers as IBTA says. Probes after the
/// first resend the oldest packet because a responder that has NAKed a gap drops
/// every later packet silently until the gap is filled (rxe `rxe_resp.c`
/// `check_psn`, `sent_psn_nak`): only the packet at or before the gap draws an answer
/// (an ACK of all it has, C9-105 / rxe `duplicate_request`, or the execution of the
/// missing packet), so a lost NAK or a lost answer costs a probe timeout, not the ACK
/// timeout. With the doubling, a stall sends a handful of probes at most (8 within
/// the default 67 ms timeout from a 200 µs start), one packet each.
pub const MAX_PROBES_PER_STALL: u8 = 8;

/// The smallest loss window ([`Qp::loss_window`]): [`MIN_UNACKED_PSNS`].
pub const MIN_LOSS_WINDOW: u32 = MIN_UNACKED_PSNS;

/// Why the requester goes back ([`Qp::retry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The local ACK timeout (IBTA 9.7.6.1.3).
    Timeout,
    /// A NAK sequence error (IBTA 9.7.5.2.4).
    SeqNak,
    /// A gap in READ responses, or an ACK past an unanswered READ/atomic, that
    /// outlived the reordering window (IBTA 9.7.5.1.3 implied NAK).
    ImpliedNak,
}

/// Shared state every QP operation may touch.
pub(crate) struct Ctx<'a> {
    pub(crate) mrs: &'a Slab<Mr>,
    pub(crate) mws: &'a mut Slab<crate::objects::Mw>,
    pub(crate) cqs: &'a mut Slab<Cq>,
    pub(crate) srqs: &'a mut Slab<Srq>,
    pub(crate) events: &'a mut VecDeque<AsyncEvent>,
    pub(crate) comp_events: &'a mut VecDeque<CqId>,
    pub(crate) counters: &'a mut Counters,
    pub(crate) gids: &'a [Gid],
    /// Which `gids` entries are RoCE v1 ([`crate::Config::gid_roce_v1`]).
    pub(crate) gid_roce_v1: &'a [bool],
    pub(crate) src_port: Option<u16>,
    /// The driver computes RoCE v2 ICRCs ([`crate::Config::sender_fills_icrc`]).
    pub(crate) sender_fills_icrc: bool,
    /// Large payloads stay in their region ([`crate::Config::lend_payloads`]).
    pub(crate) lend_payloads: bool,
    /// The RC requester's window in PSNs ([`crate::Config::max_unacked_psns`]).
    pub(crate) max_unacked: u32,
    /// Response packets one READ request asks for at most; 0: a whole READ
    /// ([`crate::Config::read_piece_psns`]).
    pub(crate) read_piece: u32,
    /// Multi-packet RC WRITEs leave as WRITE ONLY pieces ([`crate::Config::write_pieces`]).
    pub(crate) write_pieces: bool,
    /// When RC requesters set AckReq ([`crate::Config::ack_policy`]).
    pub(crate) ack_policy: crate::config::AckPolicy,
    pub(crate) now: Nanos,
    /// Datagram buffers handed back by the driver ([`crate::Engine::recycle`]).
    pub(crate) spare: &'a std::cell::RefCell<Vec<Vec<u8>>>,
    /// CRC states of recent masked IP + UDP header prefixes, for outgoing ICRCs.
    pub(crate) icrc: &'a std::cell::RefCell<rverbs_wire::icrc::PrefixCache>,
    /// Finished work requests whose memory is freed later ([`crate::Engine::reclaim`]).
    pub(crate) dead: &'a mut Vec<Dead>,
    /// Where a received datagram's payload really is, when its carrier left it in
    /// place ([`crate::Placing`]): placements copy from there.
    pub(crate) placing: Option<crate::Placing<'a>>,
}

/// A work request the engine is done with, kept until [`crate::Engine::reclaim`] so
/// its buffers (SGE lists, INLINE data, region references) are not freed between a
/// packet's arrival and the answer the application sends to it.
pub(crate) enum Dead {
    Send(#[allow(dead_code)] SendWqe),
    Recv(#[allow(dead_code)] RecvWqe, #[allow(dead_code)] Data),
}

impl Dead {
    /// Whether dropping `w` frees memory (a heap SGE list, a large INLINE copy, the
    /// last reference to a region): such a WQE is kept for [`crate::Engine::reclaim`].
    pub(crate) fn send_frees(w: &SendWqe) -> bool {
        w.wr.sg_list.spilled() || w.data.as_ref().is_some_and(Data::frees)
    }
}

/// Most finished work requests kept for [`crate::Engine::reclaim`]; past that they are
/// freed at once (an engine whose user never reclaims stays bounded).
pub(crate) const DEAD_MAX: usize = 64;

impl Ctx<'_> {
    /// Keeps `d` for [`crate::Engine::reclaim`] (freeing the older ones when
    /// [`DEAD_MAX`] are kept).
    pub(crate) fn bury(&mut self, d: Dead) {
        // Nothing to free (no heap list, no large INLINE copy, no last reference to a
        // region): dropped here, which costs less than the move.
        let frees = match &d {
            Dead::Send(w) => Dead::send_frees(w),
            Dead::Recv(w, data) => w.sges.spilled() || data.frees(),
        };
        if !frees {
            return;
        }
        if self.dead.len() >= DEAD_MAX {
            self.dead.clear();
        }
        self.dead.push(d);
    }

    /// Adds a completion; on overflow the completion is counted as lost, the CQ is put
    /// in error and `false` is returned (the caller moves the QP to the error state).
    pub(crate) fn push_wc(&mut self, cq: CqId, wc: Wc, solicited: bool) -> bool {
        let Some(c) = self.cqs.get_mut(cq.0) else {
            return false;
        };
        if c.overflowed || c.entries.len() >= c.capacity {
            self.counters.cq_overflows += 1;
            if !c.overflowed {
                c.overflowed = true;
                self.events.push_back(AsyncEvent::CqErr(cq));
            }
            return false;
        }
        c.entries.push_back(wc);
        if let Some(solicited_only) = c.armed {
            if !solicited_only || solicited || wc.status != WcStatus::Success {
                c.armed = None;
                self.comp_events.push_back(cq);
            }
        }
        true
    }
}

/// A send WQE and its progress.
pub(crate) struct SendWqe {
    pub(crate) wr: SendWr,
    /// An INLINE send: its bytes, copied at post time, are in `data` from the start.
    pub(crate) inline: bool,
    pub(crate) ud: Option<(AddressVector, u32, u32)>,
    pub(crate) len: usize,
    pub(crate) data: Option<Data>,
    pub(crate) started: bool,
    pub(crate) first_psn: Psn,
    /// PSNs the WQE uses: packets for SEND/WRITE, response packets for READ, 1 for atomics.
    pub(crate) npkts: u32,
    /// Packets sent (SEND/WRITE); for a READ, the response packet its next (or
    /// re-sent) request starts at, which is also how many responses were asked for
    /// so far (the end of the last piece requested, [`SendWqe::read_piece_end`]); for
    /// an atomic, whether the request is out.
    pub(crate) next_pkt: u32,
    /// READ/atomic: counted against `max_rd_atomic`.
    pub(crate) rd_counted: bool,
    /// READ: response packets one request asks for at most (0: all), fixed when the
    /// WQE starts ([`Qp::piece`]), so a later change of the QP's window cannot move
    /// the boundaries of requests already out.
    pub(crate) piece: u32,
}

impl SendWqe {
    /// BIND_MW or LOCAL_INV: no packet, carried out by the requester itself.
    pub(crate) fn is_local_op(&self) -> bool {
        matches!(self.wr.opcode, WrOpcode::BindMw(_) | WrOpcode::LocalInv)
    }

    pub(crate) fn is_rd_atomic(&self) -> bool {
        matches!(
            self.wr.opcode,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }

    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }

    pub(crate) fn fully_sent(&self) -> bool {
        self.next_pkt >= self.npkts
    }

    /// READ or atomic: the end (exclusive, in response packets) of the request that
    /// holds response packet `k`: the WQE's end (an atomic's, a READ's without
    /// pieces), or with pieces ([`crate::Config::read_piece_psns`],
    /// `piece` > 0) the next multiple of `piece`. Each piece is one READ request, sent
    /// once all its responses fit in the requester's window (after the piece before
    /// is answered): a READ's responses come as one burst the window does not
    /// otherwise bound, and a peer whose receive buffer holds a window and no more
    /// dropped most of a long READ's and went back again and again. The pieces are
    /// ordinary READ requests, each with its own RETH and the PSN of its first
    /// response, as a re-sent READ request that reads from the middle of a range is
    /// (IBTA 9.7.5.1.3; rxe `req_retry`), so any responder, rxe's included, serves
    /// them.
    pub(crate) fn read_piece_end(&self, k: u32) -> u32 {
        if self.piece == 0 {
            return self.npkts;
        }
        (k / self.piece + 1)
            .saturating_mul(self.piece)
            .min(self.npkts)
    }

    /// Requests this WQE has out (READ pieces asked for; 1 for an atomic that is
    /// out; 0 for SEND/WRITE), for `retransmitted_packets`.
    pub(crate) fn requests_out(&self) -> u32 {
        let piece = self.piece;
        match self.wr.opcode {
            // Whole pieces up to `next_pkt` (after a go-back, the piece holding the
            // gap is no longer out).
            WrOpcode::RdmaRead if piece > 0 => {
                self.next_pkt / piece
                    + u32::from(self.next_pkt == self.npkts && self.npkts % piece != 0)
            }
            _ if self.is_rd_atomic() => u32::from(self.fully_sent()),
            _ => 0,
        }
    }
}

/// Responder output waiting to be sent, in PSN order.
pub(crate) enum RespOut {
    Ack {
        psn: Psn,
        syndrome: u8,
        msn: u32,
    },
    Read {
        seg: crate::objects::Seg,
        first_psn: Psn,
        npkts: u32,
        next: u32,
        /// Responses of this READ sent before (those below are replays).
        sent: u32,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
}

/// Saved READ/atomic request, for replay of duplicates (IBTA 9.7.5.1.4).
pub(crate) struct Resource {
    pub(crate) first_psn: Psn,
    pub(crate) npkts: u32,
    pub(crate) kind: ResourceKind,
}

pub(crate) enum ResourceKind {
    Read { seg: crate::objects::Seg },
    Atomic { orig: u64 },
}

/// The message a responder is in the middle of.
pub(crate) enum InMsg {
    Send {
        wqe: RecvWqe,
        data: Data,
        cap: usize,
        offset: usize,
    },
    Write {
        seg: Option<crate::objects::Seg>,
        len: usize,
        offset: usize,
    },
}

pub(crate) struct Qp {
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) state: QpState,
    pub(crate) pd: u32,
    pub(crate) send_cq: CqId,
    pub(crate) recv_cq: CqId,
    pub(crate) srq: Option<SrqId>,
    pub(crate) sq_sig_all: bool,
    /// The attributes set by `modify_qp`; `qp_state` in it is not kept: `state` is the
    /// state (query_qp fills it in).
    pub(crate) attr: QpAttr,
    pub(crate) src_port: u16,
    pub(crate) sq: VecDeque<SendWqe>,
    pub(crate) rq: VecDeque<RecvWqe>,
    // requester / completer
    pub(crate) sq_next: usize,
    pub(crate) next_psn: Psn,
    pub(crate) comp_psn: Psn,
    pub(crate) noack_pkts: u32,
    /// Messages ended since the last packet with AckReq (`AckPolicy::Coalesce`).
    pub(crate) noack_wqes: u32,
    /// One past the highest PSN sent: a packet before it is a retransmission.
    pub(crate) sent_psn_end: Psn,
    /// The last PSN an AckReq (or a READ/atomic request) asked to be acknowledged;
    /// an ACK is on its way while it is not before `comp_psn`.
    pub(crate) ack_req_psn: Option<Psn>,
    /// When the oldest packet still unacknowledged went out, or the last progress
    /// after it (`AckPolicy::Coalesce`: a stream asks for an ACK once it is old).
    pub(crate) unacked_since: Option<Nanos>,
    /// When a new request packet last went out.
    pub(crate) last_tx_at: Nanos,
    /// Send the ACK nudge at the next chance.
    pub(crate) nudge_due: bool,
    pub(crate) rd_outstanding: u32,
    /// This QP's own requester window and READ piece, when its driver set them
    /// ([`crate::Engine::set_qp_window`]); otherwise the engine's.
    pub(crate) window: Option<(u32, u32)>,
    pub(crate) retry_left: u8,
    pub(crate) rnr_left: u8,
    /// The QP's timers: retransmit (local ACK timeout), RNR wait, reordering window
    /// and ACK nudge ([`QpTimer`]).
    pub(crate) timers: TimerTable,
    pub(crate) nak_retry: bool,
    /// READ responses of the oldest WQE received past the first missing one: their
    /// data is in place; these are their packet indexes in the READ (`on_response`).
    pub(crate) read_ahead: BTreeSet<u32>,
    /// Retransmit-timer restarts by stale responses since the last progress or retry.
    pub(crate) stale_rearms: u32,
    /// The round-trip estimate ([`Rtt`]).
    pub(crate) rtt: Rtt,
    /// The packet being timed for an RTT sample: its PSN and when it left. Taken
    /// when a new AckReq packet leaves and none is timed; dropped when anything is
    /// sent again (Karn's rule).
    pub(crate) rtt_sample: Option<(Psn, Nanos)>,
    /// `sent_psn_end` at the last go-back: a packet before it may have left twice,
    /// so a resend of it gives no RTT sample (Karn).
    pub(crate) resent_end: Option<Psn>,
    /// The gap a reordering-window retry asked again for, and when (`comp::retry`),
    /// to tell a needless re-request (`Rtt::reordering_seen`).
    pub(crate) reorder_retry_at: Option<(Psn, Nanos)>,
    /// After a loss, the requester's window in PSNs (RFC 5681 3.1, in packets): half
    /// what was outstanding, at least [`MIN_LOSS_WINDOW`], growing by one packet per
    /// window acknowledged, and gone once it reaches the configured window. Go-back-N
    /// resends everything outstanding behind a gap, so on a lossy path a window far
    /// larger than the path needs costs most of its packets twice per loss.
    pub(crate) loss_window: Option<u32>,
    /// Packets acknowledged towards the loss window's next step.
    pub(crate) loss_window_acked: u32,
    /// `sent_psn_end` when the loss window last shrank: losses among the packets
    /// outstanding then are the same episode and shrink it no further (RFC 6582
    /// `recover`), until the ACKs pass it.
    pub(crate) recovery_point: Option<Psn>,
    /// Tail-loss probes are on ([`crate::Config::loss_recovery`]).
    pub(crate) loss_recovery: bool,
    /// The loss window is on ([`crate::Config::loss_window`]).
    pub(crate) loss_window_on: bool,
    /// Selective repeat is on ([`crate::Config::selective_repeat`]).
    pub(crate) selective: bool,
    /// Selective repeat, both halves ([`crate::selective`]).
    pub(crate) sr: crate::selective::SrState,
    /// Tail-loss probes sent since the last progress ([`MAX_PROBES_PER_STALL`]).
    pub(crate) probes_sent: u8,
    /// Send a tail-loss probe at the next chance (`req::build_probe`).
    pub(crate) probe_due: bool,
    /// The last probe sent: its PSN and `sent_psn_end` when it left, so its answer
    /// tells which packets sent before it were lost (`comp::after_probe`).
    pub(crate) probe: Option<(Psn, Psn)>,
    pub(crate) sqd_notified: bool,
    // responder
    pub(crate) epsn: Psn,
    pub(crate) msn: u32,
    pub(crate) in_msg: Option<InMsg>,
    pub(crate) drop_msg: bool,
    pub(crate) nak_seq_sent: bool,
    pub(crate) comm_est: bool,
    pub(crate) resources: VecDeque<Resource>,
    pub(crate) out: VecDeque<RespOut>,
    /// A fatal NAK built just before the QP entered the error state; it leaves once
    /// the responses queued before it in `out` have (`Qp::next_response`).
    pub(crate) pending_nak: Option<Transmit>,
    // scheduling
    pub(crate) active: bool,
    /// The deadline the engine's timer set holds for this QP (`engine::rearm`).
    pub(crate) timer_at: Option<Nanos>,
}

/// What a QP wants from the engine after an operation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wake {
    /// It may have packets to send.
    pub(crate) transmit: bool,
    /// Its deadlines changed.
    pub(crate) timers: bool,
}

impl Qp {
    /// The requester window in PSNs ([`crate::Config::max_unacked_psns`], or this
    /// QP's own).
    pub(crate) fn win(&self, ctx: &Ctx<'_>) -> u32 {
        self.window.map_or(ctx.max_unacked, |w| w.0)
    }

    /// Response packets one READ request asks for at most (0: all,
    /// [`SendWqe::read_piece_end`]; [`crate::Config::read_piece_psns`], or this QP's
    /// own).
    pub(crate) fn piece(&self, ctx: &Ctx<'_>) -> u32 {
        self.window.map_or(ctx.read_piece, |w| w.1)
    }

    /// The window new packets are sent within: [`Qp::win`], or the loss window when
    /// smaller; while a gap the responder reported selectively is being filled, up to
    /// twice that ([`crate::selective`]: what arrives past the gap is held, not in
    /// the peer's receive buffer, so the stream need not stop for the gap's round
    /// trip). (A READ piece's room is checked against [`Qp::win`]: a piece larger
    /// than the loss window would never fit.)
    pub(crate) fn send_win(&self, ctx: &Ctx<'_>) -> u32 {
        let w = self.win(ctx).min(self.loss_window.unwrap_or(u32::MAX));
        if self.sr.filling_gap() {
            w.saturating_mul(2)
                .min(crate::selective::SR_MAX_HELD_PSNS)
                .max(w)
        } else {
            w
        }
    }

    /// The window whose quarter and eighth pace a stream's ACK requests
    /// ([`crate::AckPolicy::Coalesce`]): rxe's, or the QP's own when smaller.
    pub(crate) fn pace_window(&self, ctx: &Ctx<'_>) -> u32 {
        self.win(ctx).min(MAX_UNACKED_PSNS)
    }

    pub(crate) fn new(qpn: u32, init: &crate::config::QpInit) -> Self {
        let qp_type = init.qp_type;
        Qp {
            qpn,
            qp_type,
            state: QpState::Reset,
            pd: init.pd.0,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            sq_sig_all: init.sq_sig_all,
            attr: QpAttr {
                cap: init.cap,
                ..QpAttr::default()
            },
            src_port: if qp_type == QpType::Ud {
                net::ud_src_port(qpn)
            } else {
                0xc000
            },
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            sq_next: 0,
            next_psn: Psn::ZERO,
            comp_psn: Psn::ZERO,
            noack_pkts: 0,
            noack_wqes: 0,
            sent_psn_end: Psn::ZERO,
            ack_req_psn: None,
            unacked_since: None,
            last_tx_at: 0,
            nudge_due: false,
            rd_outstanding: 0,
            window: None,
            retry_left: 0,
            rnr_left: 0,
            timers: TimerTable::default(),
            nak_retry: false,
            read_ahead: BTreeSet::new(),
            stale_rearms: 0,
            rtt: Rtt::default(),
            rtt_sample: None,
            resent_end: None,
            reorder_retry_at: None,
            loss_window: None,
            loss_window_acked: 0,
            recovery_point: None,
            loss_recovery: true,
            loss_window_on: false,
            selective: false,
            sr: Default::default(),
            probes_sent: 0,
            probe_due: false,
            probe: None,
            sqd_notified: false,
            epsn: Psn::ZERO,
            msn: 0,
            in_msg: None,
            drop_msg: false,
            nak_seq_sent: false,
            comm_est: false,
            resources: VecDeque::new(),
            out: VecDeque::new(),
            pending_nak: None,
            active: false,
            timer_at: None,
        }
    }

    pub(crate) fn mtu(&self) -> usize {
        self.attr.path_mtu.bytes()
    }

    /// Applies an already validated modify (see `modify::check_modify`).
    pub(crate) fn apply_modify(
        &mut self,
        attr: &QpAttr,
        mask: QpAttrMask,
        next: QpState,
        ctx: &mut Ctx<'_>,
    ) {
        let m = |b: QpAttrMask| mask.contains(b);
        let a = &mut self.attr;
        if m(QpAttrMask::QKEY) {
            a.qkey = attr.qkey;
        }
        if m(QpAttrMask::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if m(QpAttrMask::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if m(QpAttrMask::PORT) {
            a.port_num = attr.port_num;
        }
        if m(QpAttrMask::AV) {
            a.ah_attr = attr.ah_attr;
        }
        if m(QpAttrMask::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if m(QpAttrMask::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if m(QpAttrMask::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
            self.retry_left = attr.retry_cnt;
        }
        if m(QpAttrMask::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            self.rnr_left = attr.rnr_retry;
        }
        if m(QpAttrMask::RQ_PSN) {
            a.rq_psn = attr.rq_psn;
            self.epsn = Psn::new(attr.rq_psn);
            // (Held requests are aligned with the expected PSN.)
            self.sr.clear_held();
        }
        if m(QpAttrMask::SQ_PSN) {
            a.sq_psn = attr.sq_psn;
            self.next_psn = Psn::new(attr.sq_psn);
            self.comp_psn = self.next_psn;
            self.sent_psn_end = self.next_psn;
            self.ack_req_psn = None;
        }
        if m(QpAttrMask::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if m(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if m(QpAttrMask::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if m(QpAttrMask::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num;
        }
        if m(QpAttrMask::EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        if m(QpAttrMask::CAP) {
            a.cap = attr.cap;
        }
        if m(QpAttrMask::RATE_LIMIT) {
            a.rate_limit = attr.rate_limit;
        }
        if m(QpAttrMask::PATH_MIG_STATE) {
            a.path_mig_state = attr.path_mig_state;
        }
        if self.qp_type != QpType::Ud && (m(QpAttrMask::AV) || m(QpAttrMask::DEST_QPN)) {
            let fl = a.ah_attr.map_or(0, |h| h.av.flow_label);
            self.src_port = net::connected_src_port(self.qpn, a.dest_qp_num, fl);
        }
        let prev = self.state;
        self.state = next;
        match next {
            QpState::Reset => self.reset(),
            QpState::Err if prev != QpState::Err => self.flush(ctx),
            // Already in the error state after a fatal NAK, whose earlier responses
            // and the NAK itself were still to leave (`next_response`): the
            // application's move to ERR stops them, as it does any responder output.
            QpState::Err => {
                self.out.clear();
                self.pending_nak = None;
            }
            QpState::Sqd => {
                self.sqd_notified = false;
                // The drain completes on the ACKs of what is out: ask for them now
                // rather than after the nudge delay (AckPolicy::Coalesce).
                if self.needs_nudge() {
                    self.nudge_due = true;
                }
            }
            _ => {}
        }
    }

    pub(crate) fn reset(&mut self) {
        let init = crate::config::QpInit {
            pd: PdId(self.pd),
            qp_type: self.qp_type,
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            srq: self.srq,
            cap: self.attr.cap,
            sq_sig_all: self.sq_sig_all,
        };
        let ud_mtu = self.attr.path_mtu;
        // What the engine's timer set holds is not the QP's to forget: `engine::rearm`
        // removes it after this modify (the fresh QP has no deadline).
        let (timer_at, probes, window) = (self.timer_at, self.loss_recovery, self.loss_window_on);
        let selective = self.selective;
        *self = Qp::new(self.qpn, &init);
        self.selective = selective;
        self.timer_at = timer_at;
        self.loss_recovery = probes;
        self.loss_window_on = window;
        if self.qp_type == QpType::Ud {
            // UD keeps the port's MTU (set at create_qp) across a reset.
            self.attr.path_mtu = ud_mtu;
        }
    }

    /// Moves the QP to the error state because of an error (QP_FATAL).
    pub(crate) fn fail(&mut self, ctx: &mut Ctx<'_>) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        ctx.events.push_back(AsyncEvent::QpFatal(self.qpn));
        self.flush(ctx);
    }

    /// Completes every outstanding WQE with WR_FLUSH_ERR (IBTA 10.3.1, "Error state").
    pub(crate) fn flush(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(w) = self.sq.pop_front() {
            let wc = self.send_wc(&w, WcStatus::WrFlushErr);
            ctx.push_wc(self.send_cq, wc, false);
        }
        self.sq_next = 0;
        if let Some(InMsg::Send { wqe, .. }) = self.in_msg.take() {
            let wc = self.recv_wc(wqe.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
            ctx.push_wc(self.recv_cq, wc, false);
        }
        while let Some(r) = self.rq.pop_front() {
            let wc = self.recv_wc(r.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
            ctx.push_wc(self.recv_cq, wc, false);
        }
        if self.srq.is_some() {
            ctx.events.push_back(AsyncEvent::QpLastWqeReached(self.qpn));
        }
        self.out.clear();
        self.resources.clear();
        self.timers.stop_all();
        self.rtt_sample = None;
        self.probe_due = false;
        self.probe = None;
        self.read_ahead.clear();
        self.sr.clear();
        self.rd_outstanding = 0;
        self.unacked_since = None;
        self.nudge_due = false;
    }

    pub(crate) fn send_wc(&self, w: &SendWqe, status: WcStatus) -> Wc {
        let opcode = match w.wr.opcode {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            WrOpcode::BindMw(_) => WcOpcode::BindMw,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
        };
        Wc {
            wr_id: w.wr.wr_id,
            status,
            opcode,
            byte_len: w.len as u32,
            qp_num: self.qpn,
            ..Wc::default()
        }
    }

    pub(crate) fn recv_wc(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            byte_len,
            qp_num: self.qpn,
            ..Wc::default()
        }
    }

    /// Completes the oldest send WQE. Errors always complete; successes only when
    /// signaled. An error, or a full CQ, moves the QP to the error state (or SQE for
    /// UC/UD local errors, IBTA 10.3.1).
    pub(crate) fn complete_front(&mut self, status: WcStatus, ctx: &mut Ctx<'_>) {
        // Read where it lies: a WQE is a few hundred bytes, and moving it out of the
        // queue (and again into the dead list) cost more than completing it.
        let Some(w) = self.sq.front() else { return };
        let (rd_counted, end) = (w.rd_counted, w.started.then(|| w.first_psn.add(w.npkts)));
        let signaled = self.sq_sig_all || w.wr.flags.contains(SendFlags::SIGNALED);
        let wc = (status != WcStatus::Success || signaled).then(|| self.send_wc(w, status));
        if Dead::send_frees(w) {
            // Freed after the answer leaves, not on the way to it.
            if let Some(w) = self.sq.pop_front() {
                ctx.bury(Dead::Send(w));
            }
        } else {
            // Nothing to free: dropped in place.
            self.sq.drain(..1);
        }
        self.sq_next = self.sq_next.saturating_sub(1);
        self.read_ahead.clear();
        if rd_counted {
            self.rd_outstanding = self.rd_outstanding.saturating_sub(1);
        }
        if let Some(end) = end {
            self.comp_psn = end;
        }
        let mut ok = true;
        if let Some(wc) = wc {
            ok = ctx.push_wc(self.send_cq, wc, false);
        }
        if status != WcStatus::Success {
            if self.qp_type != QpType::Rc
                && status != WcStatus::WrFlushErr
                && self.state == QpState::Rts
            {
                // Send queue error: the rest of the SQ is flushed, receives go on.
                self.state = QpState::Sqe;
                while let Some(w) = self.sq.pop_front() {
                    let wc = self.send_wc(&w, WcStatus::WrFlushErr);
                    ctx.push_wc(self.send_cq, wc, false);
                }
                self.sq_next = 0;
            } else {
                self.fail(ctx);
            }
        } else if !ok {
            self.fail(ctx);
        }
    }

    /// Takes a receive WQE from the RQ or the SRQ (raising the SRQ limit event).
    pub(crate) fn take_recv(&mut self, ctx: &mut Ctx<'_>) -> Option<RecvWqe> {
        match self.srq {
            None => self.rq.pop_front(),
            Some(id) => {
                let srq = ctx.srqs.get_mut(id.0)?;
                let w = srq.queue.pop_front()?;
                if srq.limit > 0 && (srq.queue.len() as u32) < srq.limit {
                    srq.limit = 0;
                    ctx.events.push_back(AsyncEvent::SrqLimitReached(id));
                }
                Some(w)
            }
        }
    }

    /// The timer fired.
    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx<'_>) -> Wake {
        let mut wake = Wake::default();
        if self.timers.expired(QpTimer::RnrWait, ctx.now) {
            self.timers.stop(QpTimer::RnrWait);
            self.rearm(ctx.now);
            wake = Wake {
                transmit: true,
                timers: true,
            };
        }
        if self.timers.expired(QpTimer::Reorder, ctx.now) {
            self.timers.stop(QpTimer::Reorder);
            // The gap outlived the reordering window: ask again from it.
            if self.state != QpState::Err && self.sq.front().is_some_and(|w| w.started) {
                self.retry(ctx, Retry::ImpliedNak);
            }
            wake = Wake {
                transmit: true,
                timers: true,
            };
        }
        if self.timers.expired(QpTimer::Nudge, ctx.now) {
            self.timers.stop(QpTimer::Nudge);
            if self.needs_nudge() {
                // New packets since the timer started postpone the nudge.
                let ready = self.last_tx_at + ack_nudge_ns(self.attr.timeout);
                if ctx.now < ready {
                    self.timers.set(QpTimer::Nudge, ready);
                } else {
                    self.nudge_due = true;
                    wake.transmit = true;
                }
            }
            wake.timers = true;
        }
        if self.timers.expired(QpTimer::Probe, ctx.now) {
            self.timers.stop(QpTimer::Probe);
            if self.probe_wanted() {
                self.probe_due = true;
                wake.transmit = true;
            }
            wake.timers = true;
        }
        if self.timers.expired(QpTimer::Retransmit, ctx.now) && self.state != QpState::Err {
            self.timers.stop(QpTimer::Retransmit);
            let outstanding = self.sq.front().is_some_and(|w| w.started);
            if outstanding {
                self.retry(ctx, Retry::Timeout);
            }
            wake = Wake {
                transmit: true,
                timers: true,
            };
        }
        wake
    }

    /// The earliest deadline of this QP.
    pub(crate) fn deadline(&self) -> Option<Nanos> {
        self.timers.next_timeout()
    }
}
