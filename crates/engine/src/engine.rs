//! The engine: object tables, the verbs, and the sans-IO event loop interface
//! (`handle_datagram`, `poll_transmit`, `poll_timeout`, `handle_timeout`), after
//! quinn-proto's `Connection`.

mod verbs;

use crate::config::{AckPolicy, Config, QpInit, FIRST_QPN};
use crate::counters::Counters;
use crate::memory::Placing;
use crate::modify::{check_cap, check_modify, QpAttr, QpAttrMask};
use crate::net::{self, Datagram, Transmit};
use crate::objects::*;
use crate::qp::{Ctx, Qp, SendWqe, Wake, DEFAULT_PKEY};
use crate::slab::Slab;
use crate::timers::{TimerEntry, Timers};
use crate::types::*;
use rverbs_wire::grh::Gid;
use rverbs_wire::opcode::Transport;
use rverbs_wire::packet::Packet;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher for QPN-keyed maps, looked up several times per packet. The keys are QPNs
/// this engine allocated (a peer's packet only looks one up), so there is nothing for
/// SipHash's flood resistance to protect: one multiply (Fibonacci hashing) will do.
#[derive(Default)]
struct QpnHasher(u64);

impl Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type QpnMap<V> = HashMap<u32, V, BuildHasherDefault<QpnHasher>>;

/// A requester window within `floor` ..= 2^23 (past half the 24-bit PSN space a
/// responder could not tell a new PSN from a duplicate), and a READ piece of at most
/// that window.
fn clamp_window(window: u32, piece: u32, floor: u32) -> (u32, u32) {
    let w = window.clamp(floor, 1 << 23);
    (w, piece.min(w))
}

/// Re-states QP `qpn`'s deadline in the timer set. Every packet in or out comes here and
/// the deadline is mostly unchanged, so the QP remembers what the set holds for it
/// (`Qp::timer_at`): no lookup at all in the common case.
fn rearm(timers: &mut Timers, qpn: u32, qp: &mut Qp) {
    let at = qp.deadline();
    if qp.timer_at == at {
        return;
    }
    if let Some(old) = qp.timer_at {
        timers.remove(&TimerEntry { at: old, qpn });
    }
    if let Some(at) = at {
        timers.insert(TimerEntry { at, qpn });
    }
    qp.timer_at = at;
}

/// The soft RoCE v2 transport engine of one port.
pub struct Engine {
    cfg: Config,
    /// Datagram buffers to reuse (see [`Engine::recycle`]).
    spare: std::cell::RefCell<Vec<Vec<u8>>>,
    /// Finished work requests not freed yet (see [`Engine::reclaim`]).
    dead: Vec<crate::qp::Dead>,
    /// CRC states of recent masked IP + UDP header prefixes, shared by the ICRCs of
    /// outgoing and incoming packets (`rverbs_wire::icrc::PrefixCache`).
    icrc: std::cell::RefCell<rverbs_wire::icrc::PrefixCache>,
    rng: u64,
    pds: Slab<Pd>,
    mrs: Slab<Mr>,
    mws: Slab<Mw>,
    /// Tag of the last key of each freed MR slot, so the next key of the slot differs.
    mr_freed_tags: HashMap<u32, u32>,
    cqs: Slab<Cq>,
    srqs: Slab<Srq>,
    ahs: Slab<Ah>,
    qps: QpnMap<Qp>,
    /// QP numbers of QPs that live outside the engine (see [`Engine::reserve_qpn`]).
    reserved_qpns: QpnMap<()>,
    mcast: crate::mcast::McastTable,
    next_qpn: u32,
    active: VecDeque<u32>,
    timers: Timers,
    events: VecDeque<AsyncEvent>,
    comp_events: VecDeque<CqId>,
    pub(crate) counters: Counters,
    /// QP1 and the device's MAD agents (`crate::mad`).
    pub(crate) gsi: crate::mad::gsi::Gsi,
}

const MAX_QPN: u32 = 0xff_ffff;

macro_rules! ctx {
    ($s:ident, $now:expr) => {
        Ctx {
            mrs: &$s.mrs,
            mws: &mut $s.mws,
            cqs: &mut $s.cqs,
            srqs: &mut $s.srqs,
            events: &mut $s.events,
            comp_events: &mut $s.comp_events,
            counters: &mut $s.counters,
            gids: &$s.cfg.gids,
            gid_roce_v1: &$s.cfg.gid_roce_v1,
            src_port: $s.cfg.src_port,
            sender_fills_icrc: $s.cfg.sender_fills_icrc,
            lend_payloads: $s.cfg.lend_payloads && $s.cfg.sender_fills_icrc,
            max_unacked: $s.cfg.max_unacked_psns,
            read_piece: $s.cfg.read_piece_psns,
            write_pieces: $s.cfg.write_pieces,
            ack_policy: $s.cfg.ack_policy,
            now: $now,
            spare: &$s.spare,
            icrc: &$s.icrc,
            dead: &mut $s.dead,
            placing: None,
        }
    };
}

/// Most datagram buffers [`Engine::recycle`] keeps.
pub const SPARE_BUFFERS: usize = 256;

fn err(verb: &'static str, errno: Errno, reason: &'static str) -> VerbError {
    VerbError::new(verb, errno, reason)
}

impl Engine {
    /// A new engine.
    pub fn new(mut cfg: Config) -> Self {
        // The window and READ piece are kept clamped ([`Config::max_unacked_psns`]).
        (cfg.max_unacked_psns, cfg.read_piece_psns) = clamp_window(
            cfg.max_unacked_psns,
            cfg.read_piece_psns,
            crate::MIN_UNACKED_PSNS,
        );
        let rng = cfg.seed | 1;
        let next_qpn = if (FIRST_QPN..=MAX_QPN).contains(&cfg.first_qpn) {
            cfg.first_qpn
        } else {
            FIRST_QPN
        };
        Engine {
            spare: std::cell::RefCell::new(Vec::new()),
            dead: Vec::with_capacity(crate::qp::DEAD_MAX),
            icrc: Default::default(),
            cfg,
            rng,
            pds: Slab::default(),
            mrs: Slab::default(),
            mws: Slab::default(),
            mr_freed_tags: HashMap::new(),
            cqs: Slab::default(),
            srqs: Slab::default(),
            ahs: Slab::default(),
            qps: QpnMap::default(),
            reserved_qpns: QpnMap::default(),
            mcast: Default::default(),
            next_qpn,
            active: VecDeque::new(),
            timers: Timers::default(),
            events: VecDeque::new(),
            comp_events: VecDeque::new(),
            counters: Counters::default(),
            gsi: crate::mad::gsi::Gsi::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Replaces the GID table (addresses came or went).
    pub fn set_gids(&mut self, gids: Vec<Gid>) {
        self.cfg.gids = gids;
    }

    /// Changes when RC requesters ask for ACKs ([`Config::ack_policy`]); applies to the
    /// packets built from now on (a tail already sent without AckReq is still nudged).
    pub fn set_ack_policy(&mut self, policy: AckPolicy) {
        self.cfg.ack_policy = policy;
    }

    /// Turns selective repeat ([`Config::selective_repeat`]) on or off for the QPs
    /// created from now on.
    pub fn set_selective_repeat(&mut self, on: bool) {
        self.cfg.selective_repeat = on;
    }

    /// Replaces which GID entries are RoCE v1 ([`Config::gid_roce_v1`]).
    pub fn set_gid_roce_v1(&mut self, roce_v1: Vec<bool>) {
        self.cfg.gid_roce_v1 = roce_v1;
    }

    /// True when an address handle or a QP's path uses source GID `index` (the GID
    /// table keeps such an entry until it is released).
    pub fn sgid_in_use(&self, index: usize) -> bool {
        self.ahs
            .iter()
            .any(|a| usize::from(a.av.sgid_index) == index)
            || self.qps.values().any(|q| {
                q.attr
                    .ah_attr
                    .is_some_and(|h| usize::from(h.av.sgid_index) == index)
            })
    }

    /// Port counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// `ibv_create_qp`: returns the QP number. The QP starts in RESET.
    pub fn create_qp(&mut self, init: QpInit) -> VerbResult<u32> {
        const VERB: &str = "create_qp";
        if self.qps.len() as u32 >= self.cfg.max_qp {
            return Err(err(VERB, Errno::NoMem, "too many QPs"));
        }
        if self.pds.get(init.pd.0).is_none() {
            return Err(err(VERB, Errno::Inval, "no such PD"));
        }
        if init.qp_type == QpType::RawPacket {
            // The engine's datapath is RoCE v2 only; rverbs backs RAW_PACKET QPs with a
            // raw-mode device and only asks the engine for their completions.
            return Err(err(
                VERB,
                Errno::NotSupported,
                "the RoCE engine has no RAW_PACKET transport",
            ));
        }
        if self.cqs.get(init.send_cq.0).is_none() || self.cqs.get(init.recv_cq.0).is_none() {
            return Err(err(VERB, Errno::Inval, "no such CQ"));
        }
        if let Some(s) = init.srq {
            if self.srqs.get(s.0).is_none_or(|s| s.pd != init.pd.0) {
                return Err(err(VERB, Errno::Inval, "no such SRQ in this PD"));
            }
        }
        check_cap(&init.cap, init.srq.is_some(), &self.cfg.limits)
            .map_err(|e| VerbError { verb: VERB, ..e })?;
        let qpn = self.next_free_qpn();
        self.pd_use(init.pd, VERB, 1)?;
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users += 1;
            }
        }
        if let Some(s) = init.srq.and_then(|s| self.srqs.get_mut(s.0)) {
            s.users += 1;
        }
        let mut qp = Qp::new(qpn, &init);
        qp.loss_recovery = self.cfg.loss_recovery;
        qp.loss_window_on = self.cfg.loss_window;
        qp.selective = self.cfg.selective_repeat;
        if init.qp_type == QpType::Ud {
            // UD has no path: datagrams are limited by the port's active MTU.
            qp.attr.path_mtu = self.cfg.limits.active_mtu;
        }
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// The next QP number no QP (engine or reserved) uses, advancing the counter.
    fn next_free_qpn(&mut self) -> u32 {
        let mut qpn = self.next_qpn;
        while self.qps.contains_key(&qpn) || self.reserved_qpns.contains_key(&qpn) {
            qpn = if qpn >= MAX_QPN { FIRST_QPN } else { qpn + 1 };
        }
        self.next_qpn = if qpn >= MAX_QPN { FIRST_QPN } else { qpn + 1 };
        qpn
    }

    /// Takes a QP number for a QP that lives outside the engine (rverbs' RAW_PACKET QPs),
    /// from the same space as [`Engine::create_qp`]'s, so QP numbers stay unique on the
    /// device; packets to it find no engine QP. ENOMEM at the device's QP limit.
    pub fn reserve_qpn(&mut self) -> VerbResult<u32> {
        if (self.qps.len() + self.reserved_qpns.len()) as u32 >= self.cfg.max_qp {
            return Err(err("create_qp", Errno::NoMem, "too many QPs"));
        }
        let qpn = self.next_free_qpn();
        self.reserved_qpns.insert(qpn, ());
        Ok(qpn)
    }

    /// Gives back a number from [`Engine::reserve_qpn`].
    pub fn release_qpn(&mut self, qpn: u32) {
        self.reserved_qpns.remove(&qpn);
    }

    /// `ibv_destroy_qp`. Outstanding work is discarded without completions, as the
    /// kernel does.
    pub fn destroy_qp(&mut self, qpn: u32) -> VerbResult<()> {
        let qp = self
            .qps
            .remove(&qpn)
            .ok_or(err("destroy_qp", Errno::Inval, "no such QP"))?;
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users = c.users.saturating_sub(1);
            }
        }
        if let Some(s) = qp.srq.and_then(|s| self.srqs.get_mut(s.0)) {
            s.users = s.users.saturating_sub(1);
        }
        if let Some(at) = qp.timer_at {
            self.timers.remove(&TimerEntry { at, qpn });
        }
        // As uverbs does, a destroyed QP leaves its multicast groups.
        self.mcast.detach_all(qpn);
        self.pd_use(PdId(qp.pd), "destroy_qp", -1)
    }

    /// `ibv_attach_mcast`: `qpn` (a UD QP) receives the datagrams sent to the multicast
    /// GID `gid` (with QPN 0xFFFFFF). EINVAL for another QP type, a GID that is not
    /// multicast or an unknown QP (the kernel's `ib_attach_mcast`). Attaching a QP that
    /// is already a member succeeds and changes nothing, as in uverbs
    /// (`ib_uverbs_attach_mcast` returns 0 for a group already on the QP's list) and
    /// rxe (`rxe_attach_mcg`).
    pub fn attach_mcast(&mut self, qpn: u32, gid: Gid) -> VerbResult<()> {
        const V: &str = "attach_mcast";
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(err(V, Errno::Inval, "no such QP"))?;
        if qp.qp_type != QpType::Ud {
            return Err(err(V, Errno::Inval, "only UD QPs join multicast groups"));
        }
        if !crate::mcast::is_multicast_gid(&gid) {
            return Err(err(V, Errno::Inval, "the GID is not a multicast address"));
        }
        // false = already a member: not an error (see above).
        self.mcast.attach(gid, qpn);
        Ok(())
    }

    /// True when some QP is attached to the multicast group `gid`.
    pub fn mcast_has_members(&self, gid: &Gid) -> bool {
        !self.mcast.members(gid).is_empty()
    }

    /// `ibv_detach_mcast`; EINVAL when the QP is not attached to the group.
    pub fn detach_mcast(&mut self, qpn: u32, gid: &Gid) -> VerbResult<()> {
        if self.mcast.detach(gid, qpn) {
            Ok(())
        } else {
            Err(err(
                "detach_mcast",
                Errno::Inval,
                "the QP is not attached to the group",
            ))
        }
    }

    /// `ibv_modify_qp`, validated exactly as Linux does (see [`crate::modify`]).
    pub fn modify_qp(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
        now: Nanos,
    ) -> VerbResult<()> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(err("modify_qp", Errno::Inval, "no such QP"))?;
        let mut limits = self.cfg.limits;
        limits.gid_table_len = self.cfg.gids.len() as u32;
        let next = check_modify(qp.qp_type, qp.state, attr, mask, &limits)?;
        if mask.contains(QpAttrMask::AV) {
            let av = attr.ah_attr.ok_or(err(
                "modify_qp",
                Errno::Inval,
                "AV in the mask but no ah_attr",
            ))?;
            self.check_av(&av.av, "modify_qp")?;
        }
        let mut ctx = ctx!(self, now);
        let Some(qp) = self.qps.get_mut(&qpn) else {
            unreachable!("checked above")
        };
        let reset = next == QpState::Reset && qp.state != QpState::Reset;
        let cqs = [qp.send_cq, qp.recv_cq];
        qp.apply_modify(attr, mask, next, &mut ctx);
        rearm(&mut self.timers, qpn, qp);
        if reset {
            // The QP's completions not yet polled go with it, as the Linux mlx5 driver
            // cleans its CQs on the RESET transition (`__mlx5_ib_cq_clean` in
            // drivers/infiniband/hw/mlx5/qp.c): a QP brought back up from ERR does not
            // hand its new user the flushed requests of its previous life.
            for id in cqs {
                if let Some(c) = self.cqs.get_mut(id.0) {
                    c.entries.retain(|w| w.qp_num != qpn);
                }
            }
        }
        self.wake(qpn);
        Ok(())
    }

    /// `ibv_query_qp`: the current attributes.
    pub fn query_qp(&self, qpn: u32) -> VerbResult<QpAttr> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or(err("query_qp", Errno::Inval, "no such QP"))?;
        let mut a = qp.attr;
        a.qp_state = qp.state;
        a.cur_qp_state = qp.state;
        a.sq_psn = qp.next_psn.value();
        a.rq_psn = qp.epsn.value();
        Ok(a)
    }

    /// `ibv_post_send` of one work request. Errors are those of the post itself
    /// (EINVAL, ENOMEM); failures while executing come back as completions.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr, now: Nanos) -> VerbResult<()> {
        const VERB: &str = "post_send";
        // One lookup for the whole post (the checks below borrow other fields).
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(err(VERB, Errno::Inval, "no such QP"))?;
        match qp.state {
            QpState::Rts | QpState::Sqd | QpState::Err => {}
            QpState::Sqe => {}
            _ => return Err(err(VERB, Errno::Inval, "the QP is not in RTS")),
        }
        let allowed = match qp.qp_type {
            QpType::Rc => true,
            QpType::Uc => matches!(
                wr.opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::BindMw(_)
                    | WrOpcode::LocalInv
            ),
            QpType::Ud => matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm),
            // Never created by the engine (create_qp refuses them).
            QpType::RawPacket => false,
        };
        if !allowed {
            return Err(err(
                VERB,
                Errno::Inval,
                "opcode not supported on this QP type",
            ));
        }
        let cap = qp.attr.cap;
        if qp.sq.len() >= cap.max_send_wr as usize {
            return Err(
                err(VERB, Errno::NoMem, "the send queue is full").with_limit(
                    qp.sq.len() as u64 + 1,
                    cap.max_send_wr.into(),
                    "WRs",
                    "the send queue takes at most",
                ),
            );
        }
        let local_op = matches!(wr.opcode, WrOpcode::BindMw(_) | WrOpcode::LocalInv);
        if local_op && (!wr.sg_list.is_empty() || wr.flags.contains(SendFlags::INLINE)) {
            return Err(err(VERB, Errno::Inval, "a local operation carries no data"));
        }
        let inline = wr.flags.contains(SendFlags::INLINE);
        if !inline && wr.sg_list.len() > cap.max_send_sge as usize {
            return Err(err(VERB, Errno::Inval, "too many SGEs").with_limit(
                wr.sg_list.len() as u64,
                cap.max_send_sge.into(),
                "SGEs",
                "the QP takes at most",
            ));
        }
        let len: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        if inline && len > u64::from(cap.max_inline_data) {
            return Err(
                err(VERB, Errno::Inval, "inline data above max_inline_data").with_limit(
                    len,
                    cap.max_inline_data.into(),
                    "bytes",
                    "the QP takes at most",
                ),
            );
        }
        if len > 1 << 31 {
            return Err(err(VERB, Errno::Inval, "message longer than 2 GiB"));
        }
        let atomic = matches!(
            wr.opcode,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        );
        if atomic && (len != 8 || wr.sg_list.len() != 1) {
            return Err(err(VERB, Errno::Inval, "an atomic needs one 8-byte SGE"));
        }
        if inline && (atomic || wr.opcode == WrOpcode::RdmaRead) {
            return Err(err(
                VERB,
                Errno::Inval,
                "INLINE only applies to SEND and WRITE",
            ));
        }
        let ud = match (qp.qp_type, wr.ud) {
            (QpType::Ud, Some(d)) => {
                let ah = self
                    .ahs
                    .get(d.ah.0)
                    .ok_or(err(VERB, Errno::Inval, "no such AH"))?;
                if ah.pd != qp.pd {
                    return Err(err(VERB, Errno::Inval, "the AH belongs to another PD"));
                }
                if len > qp.mtu() as u64 {
                    return Err(err(
                        VERB,
                        Errno::Inval,
                        "UD message longer than the path MTU",
                    ));
                }
                Some((ah.av, d.remote_qpn & 0xff_ffff, d.remote_qkey))
            }
            (QpType::Ud, None) => {
                return Err(err(VERB, Errno::Inval, "UD send without a destination"))
            }
            _ => None,
        };
        // INLINE: copy now, so the caller may reuse its buffer at once.
        let inline_data = if inline {
            // In the WQE when small, else one allocation; filled in place straight
            // from the regions (no gather list).
            let mut buf = crate::objects::InlineBytes::zeroed(len as usize);
            if let Some(b) = buf.as_mut() {
                gather_sges(&self.mrs, qp.pd, &wr.sg_list, Access::NONE, b).map_err(|_| {
                    err(VERB, Errno::Inval, "inline SGE outside a registered region")
                })?;
            }
            Some(buf)
        } else {
            None
        };
        let state = qp.state;
        let wqe = SendWqe {
            wr,
            inline: inline_data.is_some(),
            ud,
            len: len as usize,
            data: inline_data.map(crate::objects::Data::Inline),
            started: false,
            first_psn: rverbs_wire::psn::Psn::ZERO,
            npkts: 0,
            next_pkt: 0,
            rd_counted: false,
            piece: 0,
        };
        if matches!(state, QpState::Err | QpState::Sqe) {
            // Posted to a QP in error: completes at once with a flush error.
            let wc = qp.send_wc(&wqe, WcStatus::WrFlushErr);
            let mut ctx = ctx!(self, now);
            ctx.push_wc(qp.send_cq, wc, false);
            return Ok(());
        }
        qp.sq.push_back(wqe);
        // (`Engine::wake` without a second lookup.)
        if !qp.active {
            qp.active = true;
            self.active.push_back(qpn);
        }
        Ok(())
    }

    /// `ibv_post_recv` of one work request.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr, now: Nanos) -> VerbResult<()> {
        const VERB: &str = "post_recv";
        let mut ctx = ctx!(self, now);
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(err(VERB, Errno::Inval, "no such QP"))?;
        if qp.srq.is_some() {
            return Err(err(VERB, Errno::Inval, "the QP uses an SRQ"));
        }
        if qp.state == QpState::Reset {
            return Err(err(VERB, Errno::Inval, "the QP is in RESET"));
        }
        if wr.sg_list.len() > qp.attr.cap.max_recv_sge as usize {
            return Err(err(VERB, Errno::Inval, "too many SGEs").with_limit(
                wr.sg_list.len() as u64,
                qp.attr.cap.max_recv_sge.into(),
                "SGEs",
                "the QP takes at most",
            ));
        }
        if qp.rq.len() >= qp.attr.cap.max_recv_wr as usize {
            return Err(
                err(VERB, Errno::NoMem, "the receive queue is full").with_limit(
                    qp.rq.len() as u64 + 1,
                    qp.attr.cap.max_recv_wr.into(),
                    "WRs",
                    "the receive queue takes at most",
                ),
            );
        }
        if qp.state == QpState::Err {
            let wc = qp.recv_wc(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
            ctx.push_wc(qp.recv_cq, wc, false);
            return Ok(());
        }
        qp.rq.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sg_list,
        });
        Ok(())
    }

    // -------------------------------------------------------------- event loop

    fn wake(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            if !qp.active {
                qp.active = true;
                self.active.push_back(qpn);
            }
        }
    }

    /// Feeds one received datagram. Bad packets are dropped and counted, never fatal.
    pub fn handle_datagram(&mut self, now: Nanos, d: &Datagram<'_>) {
        self.handle_placed(now, d, None)
    }

    /// [`Engine::handle_datagram`] for a datagram whose payload bytes are not in
    /// `d.payload` but where `placing` says (a carrier that leaves payloads in its
    /// own memory): a SEND, WRITE or READ response payload is copied from there
    /// straight into its region. The ICRC must be trusted (`icrc_checked`): it
    /// covers bytes the buffer does not hold. A datagram for the GSI QP, whose MADs
    /// are read, not placed, is dropped (counted as malformed).
    pub fn handle_datagram_placed(&mut self, now: Nanos, d: &Datagram<'_>, placing: Placing<'_>) {
        if !d.icrc_checked {
            self.counters.rx_malformed += 1;
            return;
        }
        self.handle_placed(now, d, Some(placing))
    }

    fn handle_placed(&mut self, now: Nanos, d: &Datagram<'_>, placing: Option<Placing<'_>>) {
        if !d.icrc_checked && !net::icrc_ok_cached(self.icrc.get_mut(), d) {
            self.counters.rx_icrc_errors += 1;
            return;
        }
        let Ok(pkt) = Packet::new_checked(d.payload) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let bth = pkt.bth();
        if bth.tver() != rverbs_wire::bth::TVER {
            self.counters.rx_malformed += 1;
            return;
        }
        if pkt.info().is_none() {
            self.counters.rx_malformed += 1;
            return;
        }
        let qpn = bth.dest_qp();
        if qpn == crate::mad::gsi::GSI_QPN {
            if placing.is_some() {
                self.counters.rx_malformed += 1;
                return;
            }
            self.gsi_datagram(now, &pkt, d);
            return;
        }
        if qpn == crate::mcast::MULTICAST_QPN {
            // IBTA 10.5.2.4: a copy to every QP attached to the destination group.
            let members = self.mcast.members(&net::ip_to_gid(d.dst)).to_vec();
            if members.is_empty() {
                self.counters.rx_unknown_qp += 1;
            }
            for m in members {
                self.deliver(now, m, &pkt, d, placing);
            }
            return;
        }
        self.deliver(now, qpn, &pkt, d, placing);
    }

    /// Checks a received datagram's ICRC once, before it is classified and handed to
    /// [`Engine::handle_datagram`] / [`Engine::handle_datagram_to`] (possibly several
    /// times) with `icrc_checked` set: false when it is bad, which is counted here
    /// (`rx_icrc_errors`, once per datagram). A NIC drops such a packet before any
    /// steering sees it.
    pub fn check_icrc(&mut self, d: &Datagram<'_>) -> bool {
        if d.icrc_checked || net::icrc_ok_cached(self.icrc.get_mut(), d) {
            return true;
        }
        self.counters.rx_icrc_errors += 1;
        false
    }

    /// Feeds one received UD datagram to the UD QP `qpn` instead of its BTH destination
    /// QP (flow steering decided where it goes; the packet is checked exactly as
    /// [`Engine::handle_datagram`] checks it, ICRC included, and the QP's Q_Key and
    /// state rules apply). A packet that is not UD, or a `qpn` that is not a UD QP, is
    /// counted and dropped.
    pub fn handle_datagram_to(&mut self, now: Nanos, d: &Datagram<'_>, qpn: u32) {
        if !d.icrc_checked && !net::icrc_ok_cached(self.icrc.get_mut(), d) {
            self.counters.rx_icrc_errors += 1;
            return;
        }
        let Ok(pkt) = Packet::new_checked(d.payload) else {
            self.counters.rx_malformed += 1;
            return;
        };
        if pkt.bth().tver() != rverbs_wire::bth::TVER {
            self.counters.rx_malformed += 1;
            return;
        }
        match pkt.info() {
            None => self.counters.rx_malformed += 1,
            Some(i) if i.transport != Transport::Ud => self.counters.rx_wrong_transport += 1,
            Some(_) => self.deliver(now, qpn, &pkt, d, None),
        }
    }

    /// The per-QP part of [`Engine::handle_datagram`].
    fn deliver(
        &mut self,
        now: Nanos,
        qpn: u32,
        pkt: &Packet<&[u8]>,
        d: &Datagram<'_>,
        placing: Option<Placing<'_>>,
    ) {
        let bth = pkt.bth();
        let Some(info) = pkt.info() else {
            return;
        };
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.counters.rx_unknown_qp += 1;
            return;
        };
        let transport_ok = matches!(
            (info.transport, qp.qp_type),
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud)
        );
        if !transport_ok {
            self.counters.rx_wrong_transport += 1;
            return;
        }
        // P_Key match (IBTA 10.9.3): equal low 15 bits, at least one full member.
        let pkey = bth.pkey();
        if (pkey & 0x7fff) != (DEFAULT_PKEY & 0x7fff)
            || (pkey & 0x8000 == 0 && DEFAULT_PKEY & 0x8000 == 0)
        {
            self.counters.rx_bad_pkey += 1;
            return;
        }
        if qp.qp_type != QpType::Ud {
            // Connected QPs accept packets only from their peer, to their own address.
            let av = qp.attr.ah_attr.map(|a| a.av);
            let peer_ok = av.is_some_and(|av| {
                let i = usize::from(av.sgid_index);
                net::ip_to_gid(d.src) == av.dgid
                    && self.cfg.gids.get(i) == Some(&net::ip_to_gid(d.dst))
                    && self.cfg.gid_roce_v1.get(i).copied().unwrap_or(false) == d.roce_v1
            });
            if !peer_ok {
                self.counters.rx_wrong_source += 1;
                return;
            }
        }
        let mut ctx = ctx!(self, now);
        ctx.placing = placing;
        let wake = if info.is_request {
            qp.on_request(pkt, d, &mut ctx)
        } else if qp.qp_type == QpType::Rc
            && matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Sqe)
        {
            ctx.counters.rx_packets += 1;
            ctx.counters.rx_bytes += d.payload.len() as u64;
            qp.on_response(pkt, &mut ctx)
        } else {
            ctx.counters.rx_wrong_state += 1;
            Wake::default()
        };
        rearm(&mut self.timers, qpn, qp);
        if wake.transmit && !qp.active {
            qp.active = true;
            self.active.push_back(qpn);
        }
    }

    /// The next datagram to send, if any. Call until `None` after every input.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if let Some(t) = self.gsi_poll_transmit() {
            return Some(t);
        }
        while let Some(&qpn) = self.active.front() {
            let mut ctx = ctx!(self, now);
            let Some(qp) = self.qps.get_mut(&qpn) else {
                self.active.pop_front();
                continue;
            };
            let response = if qp.response_waiting() {
                qp.next_response(&mut ctx)
            } else {
                None
            };
            let t = match response {
                Some(t) => Some(t),
                None => qp.next_request(&mut ctx),
            };
            match t {
                Some(t) => {
                    // Round robin: the QP goes to the back while it has more (alone,
                    // it stays where it is).
                    if self.active.len() > 1 {
                        self.active.pop_front();
                        self.active.push_back(qpn);
                    }
                    rearm(&mut self.timers, qpn, qp);
                    return Some(t);
                }
                None => {
                    self.active.pop_front();
                    qp.active = false;
                    rearm(&mut self.timers, qpn, qp);
                }
            }
        }
        None
    }

    /// Hands back the buffer of a [`Transmit`] the driver has sent, so a later packet
    /// reuses it instead of allocating (and faulting in) a new one. Optional; at most
    /// [`SPARE_BUFFERS`] are kept, and larger-than-needed ones are fine. The buffer
    /// keeps its length and bytes: the next packet built in it overwrites every byte
    /// it uses, so one as long as the last one needs no zeroing.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        let spare = self.spare.get_mut();
        if spare.len() < SPARE_BUFFERS && buf.capacity() > 0 {
            spare.push(buf);
        }
    }

    /// Frees the work requests that completed since the last call (their SGE lists,
    /// INLINE data and memory-region references). Completing a request does not free
    /// it at once, so that the frees stay off the path between a packet's arrival and
    /// the answer the application sends: call this once that answer has left (the
    /// `rverbs` device does after each send). Optional; at most
    /// 64 are kept, older ones are freed as new ones come. Requests with nothing to
    /// free (two SGEs or fewer, INLINE data of 64 bytes or less, regions still
    /// registered) are dropped when they complete and not kept.
    pub fn reclaim(&mut self) {
        self.dead.clear();
    }

    /// When [`Engine::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.first().map(|t| t.at)
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        while let Some(&t) = self.timers.first() {
            if t.at > now {
                break;
            }
            self.timers.pop_first();
            let mut ctx = ctx!(self, now);
            let Some(qp) = self.qps.get_mut(&t.qpn) else {
                continue;
            };
            ctx.counters.timer_fires += 1;
            ctx.counters.timer_late_ns += now - t.at;
            qp.timer_at = None;
            let wake = qp.on_timer(&mut ctx);
            rearm(&mut self.timers, t.qpn, qp);
            if wake.transmit && !qp.active {
                qp.active = true;
                self.active.push_back(t.qpn);
            }
        }
    }

    /// Gives RC QP `qpn` its own requester window and READ piece (see
    /// [`Config::max_unacked_psns`] and [`Config::read_piece_psns`], which it
    /// overrides; clamped the same way but down to [`crate::MIN_QP_WINDOW`], the piece
    /// to the window): for a driver that knows how many packets this QP's peer can
    /// take at once (the `rverbs` loopback device reads the peer socket's receive
    /// buffer and splits it among the QPs sending to it). `None` goes back to the
    /// engine's.
    pub fn set_qp_window(&mut self, qpn: u32, window: Option<(u32, u32)>) -> VerbResult<()> {
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or(err("set_qp_window", Errno::Inval, "no such QP"))?;
        let before = qp.window;
        qp.window = window.map(|(w, piece)| clamp_window(w, piece, crate::qp::MIN_QP_WINDOW));
        // A wider window may let queued work go at once.
        if qp.window != before && !qp.active {
            qp.active = true;
            self.active.push_back(qpn);
        }
        Ok(())
    }

    /// The requester window and READ piece QP `qpn` uses ([`Engine::set_qp_window`]).
    pub fn qp_window(&self, qpn: u32) -> Option<(u32, u32)> {
        let qp = self.qps.get(&qpn)?;
        Some(
            qp.window
                .unwrap_or((self.cfg.max_unacked_psns, self.cfg.read_piece_psns)),
        )
    }

    /// The RC QPs connected to `dgid` (an address vector with that destination GID,
    /// in RTR or later and not in error), in QP number order: the QPs whose packets
    /// share that peer's receive buffer.
    pub fn rc_qps_to(&self, dgid: Gid) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .qps
            .iter()
            .filter(|(_, q)| {
                q.qp_type == QpType::Rc
                    && matches!(
                        q.state,
                        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
                    )
                    && q.attr.ah_attr.is_some_and(|a| a.av.dgid == dgid)
            })
            .map(|(&n, _)| n)
            .collect();
        v.sort_unstable();
        v
    }

    /// The destination GID of QP `qpn`'s address vector (`None`: no such QP, or none
    /// set yet).
    pub fn qp_dgid(&self, qpn: u32) -> Option<Gid> {
        self.qps.get(&qpn)?.attr.ah_attr.map(|a| a.av.dgid)
    }

    /// QP `qpn`'s smoothed round-trip time (RFC 6298 SRTT, from the ACKs of packets
    /// sent once), once it has measured one.
    pub fn qp_srtt(&self, qpn: u32) -> Option<Nanos> {
        self.qps.get(&qpn).and_then(|q| q.rtt.srtt())
    }

    /// The state of a QP.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state)
    }

    /// Number of live QPs.
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycle_keeps_a_bounded_pool_of_non_empty_buffers() {
        let mut e = Engine::new(Config::default());
        e.recycle(Vec::new());
        assert!(
            e.spare.get_mut().is_empty(),
            "an unallocated Vec is not kept"
        );
        for _ in 0..SPARE_BUFFERS + 10 {
            e.recycle(vec![1u8; 100]);
        }
        let spare = e.spare.get_mut();
        assert_eq!(spare.len(), SPARE_BUFFERS);
        // Kept as they were: the next packet overwrites what it uses, no zeroing.
        assert!(spare.iter().all(|b| b.len() == 100 && b.capacity() >= 100));
    }
}
