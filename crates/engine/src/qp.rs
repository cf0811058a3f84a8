//! A queue pair: its attributes, its queues, and the requester and completer halves of
//! the transport (IBTA 9.7.5/9.7.6; rxe `rxe_req.c`, `rxe_comp.c`). The responder half is
//! in `resp.rs`.

use crate::counters::Counters;
use crate::memory::Memory;
use crate::modify::{QpAttr, QpAttrMask};
use crate::net::{self, Transmit};
use crate::objects::{resolve_sges, Cq, Data, Mr, RecvWqe, Srq};
use crate::slab::Slab;
use crate::types::*;
use rverbs_wire::bth::{Bth, BthRepr};
use rverbs_wire::ext::{AtomicEthRepr, DethRepr, RethRepr};
use rverbs_wire::grh::Gid;
use rverbs_wire::opcode::Opcode;
use rverbs_wire::packet::{Packet, PacketRepr};
use rverbs_wire::psn::Psn;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

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

/// Local ACK timeout: 4.096 µs · 2^timeout (IBTA 9.7.6.1.3); 0 means infinite.
pub fn ack_timeout_ns(timeout: u8) -> Option<Nanos> {
    (timeout != 0).then(|| 4096u64 << timeout.min(31))
}

/// The longest an RC requester with nothing more to send waits, under
/// [`crate::AckPolicy::Coalesce`], before it asks for an ACK it has not asked for (the
/// ACK nudge): 1 ms.
pub const ACK_NUDGE_MAX_NS: Nanos = 1_000_000;

/// The shortest such wait, unless the ACK timeout is shorter than twice it: 100 µs, two
/// round trips between two processes on loopback whose threads sleep (about 2 × 25 µs,
/// README "Benchmarks"), so a ping-pong's next request, which postpones the nudge,
/// normally comes first.
pub const ACK_NUDGE_MIN_NS: Nanos = 100_000;

/// How long an unacknowledged tail whose last packet did not ask for an ACK waits
/// before the requester asks (the ACK nudge, [`crate::AckPolicy::Coalesce`]): an
/// eighth of the local ACK timeout, within [[`ACK_NUDGE_MIN_NS`],
/// [`ACK_NUDGE_MAX_NS`]], and never more than half the timeout, so the nudge's answer
/// can arrive before the retransmit timer fires and counts a retry (1 ms when the
/// timeout is infinite).
pub fn ack_nudge_ns(timeout: u8) -> Nanos {
    ack_timeout_ns(timeout).map_or(ACK_NUDGE_MAX_NS, |t| {
        (t / 8).clamp(ACK_NUDGE_MIN_NS.min(t / 2), ACK_NUDGE_MAX_NS)
    })
}

/// The longest the requester waits for a missing READ response to turn up late
/// before asking again from it.
pub const MAX_REORDER_WINDOW_NS: Nanos = 1_000_000;

/// READ responses at most this many PSNs past the first missing one are kept (their
/// data placed, their PSNs remembered); later ones are dropped and asked for again.
pub const MAX_READ_AHEAD_PSNS: u32 = 4096;

/// How long a gap in READ responses may be reordering rather than loss: a quarter of
/// the local ACK timeout, at most [`MAX_REORDER_WINDOW_NS`] (1 ms when the timeout is
/// infinite). A time window, as TCP RACK's `reo_wnd` (RFC 8985 6.2: a quarter of the
/// minimum RTT; the engine keeps no RTT estimate, the ACK timeout stands in for it).
/// rxe does not act on such gaps at all and waits for its retransmit timer
/// (`rxe_comp.c` `check_psn` returns `COMPST_DONE` for a READ response ahead of
/// `comp.psn`).
pub fn reorder_window_ns(timeout: u8) -> Nanos {
    ack_timeout_ns(timeout).map_or(MAX_REORDER_WINDOW_NS, |t| {
        (t / 4).min(MAX_REORDER_WINDOW_NS)
    })
}

/// The RNR NAK timer table (IBTA 9.7.5.2.8, table 45), in nanoseconds. Code 0 is the
/// longest, 655.36 ms.
pub const RNR_TIMER_NS: [Nanos; 32] = [
    655_360_000,
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
];

/// Shared state every QP operation may touch.
pub(crate) struct Ctx<'a> {
    pub(crate) mrs: &'a Slab<Mr>,
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
    pub(crate) ack_policy: crate::engine::AckPolicy,
    pub(crate) now: Nanos,
    /// Datagram buffers handed back by the driver ([`crate::Engine::recycle`]).
    pub(crate) spare: &'a std::cell::RefCell<Vec<Vec<u8>>>,
    /// CRC states of recent masked IP + UDP header prefixes, for outgoing ICRCs.
    pub(crate) icrc: &'a std::cell::RefCell<rverbs_wire::icrc::PrefixCache>,
    /// Finished work requests whose memory is freed later ([`crate::Engine::reclaim`]).
    pub(crate) dead: &'a mut Vec<Dead>,
}

/// A work request the engine is done with, kept until [`crate::Engine::reclaim`] so
/// its buffers (SGE lists, INLINE data, region references) are not freed between a
/// packet's arrival and the answer the application sends to it.
pub(crate) enum Dead {
    Send(#[allow(dead_code)] SendWqe),
    Recv(#[allow(dead_code)] RecvWqe, #[allow(dead_code)] Data),
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
            Dead::Send(w) => w.wr.sg_list.spilled() || w.data.as_ref().is_some_and(Data::frees),
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
    pub(crate) fn is_rd_atomic(&self) -> bool {
        matches!(
            self.wr.opcode,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }

    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }

    fn fully_sent(&self) -> bool {
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
    fn requests_out(&self) -> u32 {
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
    /// The ACK nudge timer ([`ack_nudge_ns`]).
    pub(crate) nudge_at: Option<Nanos>,
    /// Send the ACK nudge at the next chance.
    pub(crate) nudge_due: bool,
    pub(crate) rd_outstanding: u32,
    /// This QP's own requester window and READ piece, when its driver set them
    /// ([`crate::Engine::set_qp_window`]); otherwise the engine's.
    pub(crate) window: Option<(u32, u32)>,
    pub(crate) retry_left: u8,
    pub(crate) rnr_left: u8,
    pub(crate) retransmit_at: Option<Nanos>,
    pub(crate) rnr_wait_until: Option<Nanos>,
    pub(crate) nak_retry: bool,
    /// An implied NAK waits until then for the missing response to arrive late before
    /// the requester asks again from the gap (`implied_nak`, `reorder_window_ns`).
    pub(crate) reorder_until: Option<Nanos>,
    /// READ responses of the oldest WQE received past the first missing one: their
    /// data is in place; these are their packet indexes in the READ (`on_response`).
    pub(crate) read_ahead: BTreeSet<u32>,
    /// Retransmit-timer restarts by stale responses since the last progress or retry.
    pub(crate) stale_rearms: u32,
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
    fn win(&self, ctx: &Ctx<'_>) -> u32 {
        self.window.map_or(ctx.max_unacked, |w| w.0)
    }

    /// Response packets one READ request asks for at most (0: all,
    /// [`SendWqe::read_piece_end`]; [`crate::Config::read_piece_psns`], or this QP's
    /// own).
    fn piece(&self, ctx: &Ctx<'_>) -> u32 {
        self.window.map_or(ctx.read_piece, |w| w.1)
    }

    /// The window whose quarter and eighth pace a stream's ACK requests
    /// ([`crate::AckPolicy::Coalesce`]): rxe's, or the QP's own when smaller.
    fn pace_window(&self, ctx: &Ctx<'_>) -> u32 {
        self.win(ctx).min(MAX_UNACKED_PSNS)
    }

    pub(crate) fn new(qpn: u32, init: &crate::engine::QpInit) -> Self {
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
            nudge_at: None,
            nudge_due: false,
            rd_outstanding: 0,
            window: None,
            retry_left: 0,
            rnr_left: 0,
            retransmit_at: None,
            rnr_wait_until: None,
            nak_retry: false,
            reorder_until: None,
            read_ahead: BTreeSet::new(),
            stale_rearms: 0,
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

    fn reset(&mut self) {
        let init = crate::engine::QpInit {
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
        let timer_at = self.timer_at;
        *self = Qp::new(self.qpn, &init);
        self.timer_at = timer_at;
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
        self.retransmit_at = None;
        self.rnr_wait_until = None;
        self.reorder_until = None;
        self.read_ahead.clear();
        self.rd_outstanding = 0;
        self.unacked_since = None;
        self.nudge_at = None;
        self.nudge_due = false;
    }

    pub(crate) fn send_wc(&self, w: &SendWqe, status: WcStatus) -> Wc {
        let opcode = match w.wr.opcode {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
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
        let Some(w) = self.sq.pop_front() else { return };
        self.sq_next = self.sq_next.saturating_sub(1);
        self.read_ahead.clear();
        if w.rd_counted {
            self.rd_outstanding = self.rd_outstanding.saturating_sub(1);
        }
        if w.started {
            self.comp_psn = w.first_psn.add(w.npkts);
        }
        let signaled = self.sq_sig_all || w.wr.flags.contains(SendFlags::SIGNALED);
        let mut ok = true;
        if status != WcStatus::Success || signaled {
            let wc = self.send_wc(&w, status);
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
        // Freed after the answer leaves, not on the way to it.
        ctx.bury(Dead::Send(w));
    }

    // ---------------------------------------------------------------- requester

    fn can_send(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
    }

    /// Builds the next requester packet, if the QP may send one now: a due ACK nudge,
    /// else the next new or retransmitted packet. When there is nothing to send and
    /// the unacknowledged tail asked for no ACK, the nudge timer starts.
    pub(crate) fn next_request(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
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
        if self.nudge_at.is_none() && self.needs_nudge() {
            self.nudge_at = Some(ctx.now + ack_nudge_ns(self.attr.timeout));
        }
        None
    }

    /// An ACK is requested and not yet received: the last PSN asked for is not yet
    /// acknowledged.
    fn ack_outstanding(&self) -> bool {
        self.ack_req_psn
            .is_some_and(|p| !p.is_before(self.comp_psn))
    }

    /// Packets are out that no ACK will cover unless the requester asks
    /// (`AckPolicy::Coalesce`; the responder ACKs only AckReq packets, IBTA 9.7.5.1.1,
    /// rxe `rxe_resp.c` `acknowledge`).
    fn needs_nudge(&self) -> bool {
        // Whatever the policy now: under `EveryMessage` every message end asks, so an
        // idle tail is never unasked, unless it was sent before a switch from
        // `Coalesce` (`Engine::set_ack_policy`).
        self.qp_type == QpType::Rc
            && self.can_send()
            && self.rnr_wait_until.is_none()
            && self.sent_psn_end != self.comp_psn
            && !self.ack_outstanding()
    }

    /// The ACK nudge: the last packet sent, again, with AckReq. The responder sees a
    /// duplicate and acknowledges everything up to it (C9-105; rxe `rxe_resp.c`
    /// `duplicate_request`), or — if that packet was lost — executes it and ACKs. Not
    /// a retry: `retry_left` and the retransmit timer are left alone, so if the nudge
    /// is answered by nothing the timeout runs as before.
    fn build_nudge(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        if !self.needs_nudge() {
            return None;
        }
        let last = self.sent_psn_end.sub(1);
        let idx = self
            .sq
            .iter()
            .take_while(|w| w.started)
            .position(|w| last.in_window(w.first_psn, w.npkts))?;
        let w = &self.sq[idx];
        // A READ/atomic asks by itself; a message still being (re)sent asks at its end.
        if w.is_rd_atomic() || !w.fully_sent() || last != w.last_psn() {
            return None;
        }
        let t = self.build_request(idx, w.npkts - 1, last, true, ctx);
        ctx.counters.ack_nudges += 1;
        ctx.counters.tx_packets += 1;
        ctx.counters.tx_bytes += t.len() as u64;
        ctx.counters.tx_payloads_in_place += u64::from(t.body.is_some());
        Some(t)
    }

    /// The next new (or go-back-N retransmitted) request packet.
    fn next_new_request(&mut self, ctx: &mut Ctx<'_>) -> Option<Transmit> {
        if !self.can_send() {
            return None;
        }
        if self.rnr_wait_until.is_some_and(|t| t > ctx.now) {
            return None;
        }
        self.rnr_wait_until = None;
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
                if rc && fence && self.rd_outstanding > 0 {
                    return None;
                }
                if rc && rd_atomic && self.rd_outstanding >= max_rd {
                    return None;
                }
                if rc && self.next_psn.forward_from(self.comp_psn) >= self.win(ctx) {
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
            let (comp_psn, win) = (self.comp_psn, self.win(ctx));
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
            if rc && i64::from(psn.diff(comp_psn)) >= i64::from(win) {
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
            let t = self.build_request(idx, next_pkt, psn, false, ctx);
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
            if rc && self.retransmit_at.is_none() {
                self.retransmit_at = ack_timeout_ns(self.attr.timeout).map(|d| ctx.now + d);
            }
            ctx.counters.tx_packets += 1;
            ctx.counters.tx_bytes += t.len() as u64;
            ctx.counters.tx_payloads_in_place += u64::from(t.body.is_some());
            return Some(t);
        }
    }

    fn fail_wqe_at(&mut self, idx: usize, status: WcStatus, ctx: &mut Ctx<'_>) {
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
    fn build_request(
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

    /// Whether the last packet of `w` (PSN `psn`) asks for an ACK ([`crate::AckPolicy`]).
    fn ack_wanted(&self, w: &SendWqe, rd_atomic: bool, psn: Psn, ctx: &Ctx<'_>) -> bool {
        use crate::engine::AckPolicy;
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

    /// Serialises a packet for `av` and fills its ICRC.
    pub(crate) fn transmit(
        &self,
        repr: &PacketRepr<'_>,
        av: &AddressVector,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        let body = repr.payload;
        self.transmit_with(repr, body.len(), |buf| buf.copy_from_slice(body), av, ctx)
    }

    /// [`Qp::transmit`] of a packet whose `len` payload bytes `fill` writes straight
    /// into the datagram (`repr.payload` is empty), saving a staging buffer and a copy
    /// per packet.
    pub(crate) fn transmit_with(
        &self,
        repr: &PacketRepr<'_>,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        av: &AddressVector,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        self.transmit_from(repr, len, fill, None, av, ctx)
    }

    /// [`Qp::transmit_with`] of a packet whose payload is also `len` bytes at `offset`
    /// of `mem`: with [`crate::Config::lend_payloads`], a RoCE v2 packet of at least
    /// [`crate::LEND_MIN`] payload bytes leaves them there ([`Transmit::body`]) and
    /// `fill` is not called.
    pub(crate) fn transmit_from(
        &self,
        repr: &PacketRepr<'_>,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        lend: Option<(&Arc<dyn Memory>, usize)>,
        av: &AddressVector,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        let empty = PacketRepr {
            payload: &[],
            ..*repr
        };
        let hdr = empty.buffer_len() - rverbs_wire::icrc::ICRC_LEN;
        let pad = len.wrapping_neg() & 3;
        // A recycled buffer when the driver gave some back: no allocation, and its pages
        // are already mapped. Its old bytes are not cleared first (a data stream's
        // buffers come back at full length, and zeroing 4 KiB per packet only to
        // overwrite it showed in profiles): every byte is written below — the header
        // room zeroed and emitted, the payload by `fill` (which writes all of it), the
        // pad and ICRC zeroed.
        let roce_v1 = Self::roce_v1(av, ctx);
        // (`lend_payloads` holds only with `sender_fills_icrc`: the driver hashes the
        // body into the ICRC as it sends it.)
        let lend = lend.filter(|_| ctx.lend_payloads && !roce_v1 && len >= crate::LEND_MIN);
        let inline = if lend.is_some() { 0 } else { len };
        let n = hdr + inline + pad + rverbs_wire::icrc::ICRC_LEN;
        let mut payload = ctx.spare.borrow_mut().pop().unwrap_or_default();
        if payload.len() < n {
            payload.resize(n, 0);
        } else {
            payload.truncate(n);
        }
        payload[..hdr].fill(0);
        // Headers (and a zero ICRC, overwritten below). Our own Reprs always match
        // their opcode; a failure here is a bug, so send what we have rather than
        // panic in the data path.
        let _ = empty.emit(&mut payload[..hdr + rverbs_wire::icrc::ICRC_LEN]);
        if inline > 0 {
            fill(&mut payload[hdr..hdr + inline]);
        }
        if len > 0 {
            Bth::new_unchecked(&mut payload[..rverbs_wire::bth::BTH_LEN]).set_pad(pad as u8);
        }
        payload[hdr + inline..].fill(0);
        let body = lend.map(|(mem, offset)| net::Body::new(mem.clone(), offset, len, hdr));
        self.addressed(payload, body, roce_v1, av, ctx)
    }

    /// Whether `av`'s source GID is a RoCE v1 entry.
    fn roce_v1(av: &AddressVector, ctx: &Ctx<'_>) -> bool {
        ctx.gid_roce_v1
            .get(usize::from(av.sgid_index))
            .copied()
            .unwrap_or(false)
    }

    /// The [`Transmit`] of a packet built in `payload` (BTH through a zero ICRC, `body`
    /// aside): addressed along `av`, its ICRC filled unless the driver fills it.
    fn addressed(
        &self,
        mut payload: Vec<u8>,
        body: Option<net::Body>,
        roce_v1: bool,
        av: &AddressVector,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        let src = net::gid_to_ip(
            ctx.gids
                .get(usize::from(av.sgid_index))
                .copied()
                .unwrap_or(Gid::ZERO),
        );
        let dst = net::gid_to_ip(av.dgid);
        let src_port = ctx.src_port.unwrap_or(self.src_port);
        if roce_v1 || !ctx.sender_fills_icrc {
            net::fill_icrc_for_cached(
                &mut ctx.icrc.borrow_mut(),
                roce_v1,
                src,
                dst,
                src_port,
                &mut payload,
            );
        }
        Transmit {
            src,
            dst,
            src_port,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
            flow_label: av.flow_label,
            roce_v1,
            payload,
            body,
        }
    }

    /// An RC ACKNOWLEDGE (BTH, AETH, ICRC: 20 bytes) written straight into a buffer:
    /// the same bytes as [`Qp::transmit`] of its [`PacketRepr`] (a test checks), without
    /// the generic header walk, for the packet every signaled message costs.
    pub(crate) fn ack_packet(
        &self,
        bth: &rverbs_wire::bth::BthRepr,
        aeth: rverbs_wire::ext::AethRepr,
        ctx: &Ctx<'_>,
    ) -> Transmit {
        use rverbs_wire::bth::BTH_LEN;
        const AETH_LEN: usize = 4;
        let av = self.peer_av();
        let mut payload = ctx.spare.borrow_mut().pop().unwrap_or_default();
        payload.clear();
        payload.resize(BTH_LEN + AETH_LEN + rverbs_wire::icrc::ICRC_LEN, 0);
        bth.emit(&mut Bth::new_unchecked(&mut payload[..BTH_LEN]));
        aeth.emit(&mut payload[BTH_LEN..BTH_LEN + AETH_LEN]);
        self.addressed(payload, None, Self::roce_v1(&av, ctx), &av, ctx)
    }

    // ---------------------------------------------------------------- completer

    /// Handles an RC response (ACK, NAK, READ response, ATOMIC ACK): rxe `rxe_comp.c`.
    pub(crate) fn on_response(&mut self, pkt: &Packet<&[u8]>, ctx: &mut Ctx<'_>) -> Wake {
        let bth = pkt.bth();
        let psn = bth.psn();
        let op = bth.opcode();
        let outstanding = self.next_psn.forward_from(self.comp_psn);
        if outstanding == 0 || !psn.in_window(self.comp_psn, outstanding) {
            // ACKs repeat the last acknowledged PSN (comp_psn - 1): harmless.
            ctx.counters.rx_ghost_responses += 1;
            if outstanding != 0
                && self.retransmit_at.is_some()
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
                    if self.rnr_wait_until.is_some() && psn == self.comp_psn {
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
                    self.rnr_wait_until = Some(ctx.now + RNR_TIMER_NS[usize::from(timer & 31)]);
                    self.retransmit_at = None;
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
                    self.retry(ctx, false);
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
            self.reorder_until = None;
            self.stale_rearms = 0;
            self.unacked_since = (self.sent_psn_end != self.comp_psn).then_some(ctx.now);
            if !self.needs_nudge() {
                self.nudge_at = None;
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

    /// Restarts the timer after progress, or stops it when nothing is outstanding.
    pub(crate) fn rearm(&mut self, now: Nanos) {
        let outstanding = self.sq.iter().take(self.sq_next.max(1)).any(|w| w.started);
        self.retransmit_at = if outstanding && self.rnr_wait_until.is_none() {
            ack_timeout_ns(self.attr.timeout).map(|d| now + d)
        } else {
            None
        };
    }

    fn check_drained(&mut self, ctx: &mut Ctx<'_>) {
        if self.state == QpState::Sqd && !self.sqd_notified && self.sq.iter().all(|w| !w.started) {
            self.sqd_notified = true;
            if self.attr.en_sqd_async_notify {
                ctx.events.push_back(AsyncEvent::SqDrained(self.qpn));
            }
        }
    }

    /// Rewinds the requester to resend from `psn` (go-back-N).
    fn go_back(&mut self, psn: Psn) {
        self.noack_pkts = 0;
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
    /// ([`reorder_window_ns`]); if the gap is still open when it closes (a later
    /// response, or the window's timer), the requester asks again from the gap, once
    /// per gap (`retry`), with the READ's RETH moved on to it (`build_request`,
    /// IBTA 9.7.5.1.3 / rxe `req_retry`).
    fn implied_nak(&mut self, ctx: &mut Ctx<'_>) {
        if self.nak_retry {
            return;
        }
        match self.reorder_until {
            None => {
                ctx.counters.implied_nak_waits += 1;
                self.reorder_until = Some(ctx.now + reorder_window_ns(self.attr.timeout));
            }
            Some(t) if t <= ctx.now => self.retry(ctx, false),
            Some(_) => {}
        }
    }

    /// A retry after a timeout (`timeout == true`) or a sequence NAK / implied NAK:
    /// spends one unit of retry_cnt, or fails the oldest WQE with RETRY_EXC_ERR.
    pub(crate) fn retry(&mut self, ctx: &mut Ctx<'_>, timeout: bool) {
        self.reorder_until = None;
        if timeout {
            ctx.counters.retransmit_timeouts += 1;
            self.nak_retry = false;
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
        self.retry_left -= 1;
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

    /// The timer fired.
    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx<'_>) -> Wake {
        let mut wake = Wake::default();
        if self.rnr_wait_until.is_some_and(|t| t <= ctx.now) {
            self.rnr_wait_until = None;
            self.rearm(ctx.now);
            wake = Wake {
                transmit: true,
                timers: true,
            };
        }
        if self.reorder_until.is_some_and(|t| t <= ctx.now) {
            self.reorder_until = None;
            // The gap outlived the reordering window: ask again from it.
            if self.state != QpState::Err && self.sq.front().is_some_and(|w| w.started) {
                self.retry(ctx, false);
            }
            wake = Wake {
                transmit: true,
                timers: true,
            };
        }
        if self.nudge_at.is_some_and(|t| t <= ctx.now) {
            self.nudge_at = None;
            if self.needs_nudge() {
                // New packets since the timer started postpone the nudge.
                let ready = self.last_tx_at + ack_nudge_ns(self.attr.timeout);
                if ctx.now < ready {
                    self.nudge_at = Some(ready);
                } else {
                    self.nudge_due = true;
                    wake.transmit = true;
                }
            }
            wake.timers = true;
        }
        if self.retransmit_at.is_some_and(|t| t <= ctx.now) && self.state != QpState::Err {
            self.retransmit_at = None;
            let outstanding = self.sq.front().is_some_and(|w| w.started);
            if outstanding {
                self.retry(ctx, true);
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
        // Runs after every packet in or out: plain compares, not an iterator chain (which
        // compiled to a stack copy of the four options and a loop over it).
        fn earlier(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            }
        }
        earlier(
            earlier(self.retransmit_at, self.rnr_wait_until),
            earlier(self.reorder_until, self.nudge_at),
        )
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::QpInit;
    use crate::modify::QpCap;
    use rverbs_wire::ext::{AethRepr, NakCode, Syndrome};

    /// `transmit_with` builds the same datagram as emitting the whole packet at once,
    /// for every pad length and with and without extension headers.
    #[test]
    fn transmit_with_matches_a_whole_emit() {
        let qp = Qp::new(
            0x11,
            &QpInit {
                pd: PdId(0),
                qp_type: QpType::Rc,
                send_cq: CqId(0),
                recv_cq: CqId(0),
                srq: None,
                cap: QpCap::default(),
                sq_sig_all: false,
            },
        );
        let (mrs, mut cqs, mut srqs) = (Slab::default(), Slab::default(), Slab::default());
        let (mut events, mut comp_events, mut counters) =
            (VecDeque::new(), VecDeque::new(), Counters::default());
        let gids = [Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 1))];
        let ctx = Ctx {
            mrs: &mrs,
            cqs: &mut cqs,
            srqs: &mut srqs,
            events: &mut events,
            comp_events: &mut comp_events,
            counters: &mut counters,
            gids: &gids,
            gid_roce_v1: &[],
            src_port: None,
            sender_fills_icrc: false,
            lend_payloads: false,
            max_unacked: MAX_UNACKED_PSNS,
            read_piece: 0,
            write_pieces: false,
            ack_policy: crate::engine::AckPolicy::default(),
            now: 0,
            spare: &std::cell::RefCell::new(Vec::new()),
            icrc: &Default::default(),
            dead: &mut Vec::new(),
        };
        let av = AddressVector {
            dgid: Gid::from(std::net::Ipv4Addr::new(10, 0, 0, 2)),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        };
        let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) | 1).collect();
        for (opcode, aeth, reth) in [
            (Opcode::RC_SEND_ONLY, None, None),
            (
                Opcode::RC_RDMA_WRITE_ONLY,
                None,
                Some(RethRepr {
                    va: 0x1234,
                    rkey: 0x5678,
                    dma_len: 9,
                }),
            ),
            (
                Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                Some(AethRepr {
                    syndrome: Syndrome::ACK,
                    msn: 3,
                }),
                None,
            ),
        ] {
            for len in 0..9 {
                let bth = BthRepr {
                    opcode,
                    solicited: false,
                    mig_req: true,
                    pad: 0,
                    pkey: DEFAULT_PKEY,
                    fecn: false,
                    becn: false,
                    dest_qp: 0x22,
                    ack_req: true,
                    psn: Psn::new(5),
                };
                let whole = PacketRepr {
                    aeth,
                    reth,
                    ..PacketRepr::new(bth, &data[..len])
                };
                let split = PacketRepr {
                    payload: &[],
                    ..whole
                };
                let a = qp.transmit(&whole, &av, &ctx);
                let built = || {
                    qp.transmit_with(
                        &split,
                        len,
                        |buf| buf.copy_from_slice(&data[..len]),
                        &av,
                        &ctx,
                    )
                };
                assert_eq!(a, built(), "{opcode:?} len {len}");
                // A recycled buffer, dirty and larger than needed, gives the same bytes.
                ctx.spare.borrow_mut().push(vec![0xAA; 4096]);
                let c = qp.transmit(&whole, &av, &ctx);
                assert!(ctx.spare.borrow().is_empty(), "the spare buffer was used");
                assert_eq!(a, c, "{opcode:?} len {len}, recycled buffer");
                // Dirty and shorter than the packet (it grows).
                let mut short = vec![0x55u8; 4096];
                short.truncate(9);
                ctx.spare.borrow_mut().push(short);
                assert_eq!(a, built(), "{opcode:?} len {len}, short recycled buffer");
                let mut expect = vec![0u8; whole.buffer_len()];
                whole.emit(&mut expect).unwrap();
                let n = expect.len() - 4;
                assert_eq!(&a.payload[..n], &expect[..n], "{opcode:?} len {len}");
            }
        }
        // The ACK builder writes what the generic path writes, ICRC included, in a fresh
        // or a dirty recycled buffer.
        for (syndrome, msn, psn) in [
            (Syndrome::ACK, 0, 0),
            (Syndrome::ACK, 0xab_cdef, 0xff_ffff),
            (Syndrome::Nak(NakCode::PsnSequenceError), 7, 12),
            (Syndrome::RnrNak { timer: 0x1f }, 1, 2),
        ] {
            let bth = qp.resp_bth(Opcode::RC_ACKNOWLEDGE, Psn::new(psn));
            let aeth = AethRepr { syndrome, msn };
            let repr = PacketRepr {
                aeth: Some(aeth),
                ..PacketRepr::new(bth, &[])
            };
            let want = qp.transmit(&repr, &qp.peer_av(), &ctx);
            assert_eq!(qp.ack_packet(&bth, aeth, &ctx), want, "{syndrome:?}");
            ctx.spare.borrow_mut().push(vec![0xAA; 4096]);
            assert_eq!(
                qp.ack_packet(&bth, aeth, &ctx),
                want,
                "{syndrome:?} recycled"
            );
        }
        // With `lend_payloads` (and the ICRC left to the sender), a payload of at
        // least LEND_MIN bytes stays in its region: the packet is the headers, pad
        // and ICRC around a body, and materializes to the copied packet; shorter ones
        // and RoCE v1 packets are copied as before.
        let big: Vec<u8> = (0..crate::LEND_MIN + 8)
            .map(|i| (i * 13 + 1) as u8)
            .collect();
        let mem: Arc<dyn Memory> = Arc::new(crate::VecMemory::from_vec(big.clone()));
        let mut ctx = Ctx {
            sender_fills_icrc: true,
            lend_payloads: true,
            ..ctx
        };
        for v1 in [false, true] {
            ctx.gid_roce_v1 = if v1 { &[true] } else { &[] };
            for len in crate::LEND_MIN - 1..crate::LEND_MIN + 4 {
                let repr = PacketRepr::new(qp.resp_bth(Opcode::RC_SEND_ONLY, Psn::new(7)), &[]);
                let copied = qp.transmit_with(
                    &repr,
                    len,
                    |buf| buf.copy_from_slice(&big[3..3 + len]),
                    &av,
                    &ctx,
                );
                assert!(copied.body.is_none());
                let filled = std::cell::Cell::new(false);
                let mut lent = qp.transmit_from(
                    &repr,
                    len,
                    |buf| {
                        filled.set(true);
                        buf.copy_from_slice(&big[3..3 + len]);
                    },
                    Some((&mem, 3)),
                    &av,
                    &ctx,
                );
                if v1 || len < crate::LEND_MIN {
                    assert_eq!(lent, copied, "len {len}, v1 {v1}: copied");
                    assert!(filled.get());
                    let mut whole = vec![0u8; copied.len()];
                    copied.write_into(&mut whole);
                    assert_eq!(whole, copied.payload);
                    continue;
                }
                assert!(!filled.get(), "len {len}: a lent payload is not copied");
                let b = lent.body.clone().expect("a body");
                assert_eq!((b.len(), b.at()), (len, 12), "len {len}");
                assert_eq!(lent.len(), copied.len(), "len {len}");
                assert_eq!(b.bytes(&big), &big[3..3 + len]);
                // A lent region shorter than the body (never: regions do not shrink)
                // gives no bytes, not others.
                assert!(b.bytes(&big[..len]).is_empty());
                let parts = lent.parts(b.bytes(&big)).concat();
                assert_eq!(parts, copied.payload, "len {len}: the pieces");
                let mut whole = vec![0u8; lent.len()];
                lent.write_into(&mut whole);
                assert_eq!(whole, copied.payload, "len {len}: written in place");
                lent.materialize();
                assert_eq!(lent, copied, "len {len}: materialized");
            }
        }
    }
}
