//! One port's connection manager at run time: the sans-IO [`rverbs_cm::Cm`] of a
//! context, fed with the CM MADs its GSI receives (a MAD agent registered for class
//! 0x07 version 2, method Send: every CM message, IBTA 12.6) and with the time; what
//! it sends goes out through the same agent. A thread per port receives MADs and runs
//! the timers; consumer calls run the machine in the caller's thread.
//!
//! Lock order: a port's state, then an ID's state, then the engine (QP modifies and
//! MAD sends); channels' queues are leaves. An ID dropped anywhere is not destroyed
//! under these locks but queued ([`Port::doom`]) and destroyed by the next turn.

use super::channel::RawEvent;
use super::{EventKind, IdInner};
use crate::error::Result;
use crate::mad::{MadAgent, MadDest, Registration};
use crate::verbs::Context;
use crate::{AccessFlags, AhAttr, Gid, Mtu, QpModify, QpState};
use rverbs_cm::cma::CmaHeader;
use rverbs_cm::consts::{rej, sidr_status};
use rverbs_cm::{Cm, CmId as RawId, Config, Event, Nanos, QpAttr as CmQpAttr};
use rverbs_wire::mad::{class, method};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// rdma_cm's Q_Key for UD port spaces (`RDMA_UDP_QKEY`).
pub(crate) const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// How long the port thread sleeps between looks at its MADs and timers.
const POLL: Duration = Duration::from_millis(1);

pub(crate) struct PortState {
    pub(crate) cm: Cm,
    /// Every ID of this port with a communication ID, by it.
    pub(crate) ids: HashMap<u32, Weak<IdInner>>,
}

/// The CM of one context.
pub(crate) struct Port {
    pub(crate) ctx: Context,
    agent: MadAgent,
    epoch: Instant,
    pub(crate) st: Mutex<PortState>,
    doomed: Mutex<Vec<RawId>>,
}

fn ports() -> &'static Mutex<Vec<Weak<Port>>> {
    static PORTS: Mutex<Vec<Weak<Port>>> = Mutex::new(Vec::new());
    &PORTS
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish() as u32
}

pub(crate) fn random_psn() -> u32 {
    random_u32() & 0xff_ffff
}

impl Port {
    /// The port of `ctx`, started on first use.
    pub(crate) fn of(ctx: &Context) -> Result<Arc<Port>> {
        let mut all = lock(ports());
        all.retain(|w| w.strong_count() > 0);
        if let Some(p) = all
            .iter()
            .filter_map(Weak::upgrade)
            .find(|p| Arc::ptr_eq(&p.ctx.inner, &ctx.inner))
        {
            return Ok(p);
        }
        let reg = Registration {
            mgmt_class: class::CM,
            class_version: rverbs_wire::mad::cm::CM_CLASS_VERSION,
            methods: 1 << method::SEND,
        };
        // The context's previous port may still be dropping on another thread (its
        // last reference went there, e.g. the port thread's): its agent, which holds
        // the CM class, goes when that drop ends.
        let mut tries = 0;
        let agent = loop {
            match ctx.register_mad_agent(Some(reg)) {
                Err(crate::Error::Verb(v)) if v.errno == crate::Errno::Inval && tries < 500 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(1));
                }
                r => break r?,
            }
        };
        let gids = ctx.gids();
        let guid = ctx.query_device().map(|a| a.node_guid).unwrap_or(0);
        let mut cm = Cm::new(Config {
            ca_guid: guid,
            local_gid: gids.first().map_or([0; 16], |g| g.0),
            hi_tid: agent.id(),
            id_xor: random_u32(),
            ..Config::default()
        });
        for g in gids.iter().skip(1).filter(|g| **g != Gid::ZERO) {
            cm.add_local_gid(g.0);
        }
        let port = Arc::new(Port {
            ctx: ctx.clone(),
            agent,
            epoch: Instant::now(),
            st: Mutex::new(PortState {
                cm,
                ids: HashMap::new(),
            }),
            doomed: Mutex::new(Vec::new()),
        });
        let weak = Arc::downgrade(&port);
        std::thread::Builder::new()
            .name("rverbs-cm".into())
            .spawn(move || run(weak))
            .map_err(|e| crate::Error::io("starting the CM thread", e))?;
        all.push(Arc::downgrade(&port));
        Ok(port)
    }

    /// Where a CM MAD goes, and from which GID: the port's address GID of the
    /// destination's family, as the path rdma_cm resolved (kernel cma.c sends from
    /// the GID of the bound address), never the default GID fe80::EUI-64, which is
    /// the first IPv6 entry of the table but names no address the peer resolved.
    fn dest(&self, gid: [u8; 16]) -> MadDest {
        let g = Gid(gid);
        MadDest {
            sgid_index: self.ctx.gid_index_for(g.to_ipv4_mapped().is_none()),
            ..MadDest::gsi(g)
        }
    }

    pub(crate) fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    /// Queues the destruction of a communication ID (from a `Drop`).
    pub(crate) fn doom(&self, id: RawId) {
        lock(&self.doomed).push(id);
    }

    /// Runs `f` on the CM, then sends what it queued and dispatches its events.
    pub(crate) fn with<R>(self: &Arc<Self>, f: impl FnOnce(&mut PortState, Nanos) -> R) -> R {
        let mut graveyard = Vec::new();
        let r = {
            let mut st = lock(&self.st);
            let now = self.now();
            self.reap(&mut st, now);
            let r = f(&mut st, now);
            self.turn(&mut st, now, &mut graveyard);
            r
        };
        drop(graveyard);
        r
    }

    fn reap(&self, st: &mut PortState, now: Nanos) {
        let doomed = std::mem::take(&mut *lock(&self.doomed));
        for id in doomed {
            let _ = st.cm.destroy(now, id);
            st.ids.remove(&id.0);
        }
    }

    /// Timers, transmits, events; IDs upgraded on the way are dropped by the caller
    /// after the lock (their `Drop` takes it).
    fn turn(&self, st: &mut PortState, now: Nanos, graveyard: &mut Vec<Arc<IdInner>>) {
        st.cm.handle_timeout(now);
        loop {
            self.flush(st);
            let Some(ev) = st.cm.poll_event_held() else {
                break;
            };
            self.dispatch(st, now, ev, graveyard);
        }
    }

    /// Sends what the CM queued.
    fn flush(&self, st: &mut PortState) {
        while let Some(t) = st.cm.poll_transmit() {
            // A send fails only for a destination without a source GID of its
            // family; the CM's retries and timeout then report it.
            let _ = self.agent.send_as_is(self.dest(t.dest), &t.mad);
        }
    }

    fn id(st: &PortState, id: RawId, graveyard: &mut Vec<Arc<IdInner>>) -> Option<Arc<IdInner>> {
        let a = st.ids.get(&id.0)?.upgrade()?;
        graveyard.push(a.clone());
        Some(a)
    }

    fn dispatch(
        &self,
        st: &mut PortState,
        now: Nanos,
        ev: Event,
        graveyard: &mut Vec<Arc<IdInner>>,
    ) {
        match ev {
            Event::ConnectRequest { id, req } => {
                let listener = Self::id(st, req.listener, graveyard);
                let hdr = CmaHeader::parse(&req.private_data).ok();
                match (listener, hdr) {
                    (Some(l), Some((hdr, user))) if l.accepts_dst(hdr.dst) => {
                        let child = IdInner::child(&l, id, hdr, req.clone());
                        st.ids.insert(id.0, Arc::downgrade(&child));
                        graveyard.push(child.clone());
                        l.chan.push(RawEvent {
                            kind: EventKind::ConnectRequest,
                            id: child,
                            listen_id: Some(l.clone()),
                            status: 0,
                            private_data: user.to_vec(),
                            ud: None,
                        });
                    }
                    // cma.c: no rdma_cm listener for the address, or a header that
                    // does not check (cma_check_hdr): the CM ID is destroyed with a
                    // consumer-defined reject.
                    _ => {
                        let _ = st.cm.reject(now, id, rej::CONSUMER_DEFINED, &[], &[]);
                        let _ = st.cm.destroy(now, id);
                    }
                }
            }
            Event::SidrRequest {
                id,
                listener,
                private_data,
                ..
            } => {
                let l = Self::id(st, listener, graveyard);
                let hdr = CmaHeader::parse(&private_data).ok();
                match (l, hdr) {
                    (Some(l), Some((hdr, user))) if l.accepts_dst(hdr.dst) => {
                        let child = IdInner::sidr_child(&l, id, hdr);
                        st.ids.insert(id.0, Arc::downgrade(&child));
                        graveyard.push(child.clone());
                        l.chan.push(RawEvent {
                            kind: EventKind::ConnectRequest,
                            id: child,
                            listen_id: Some(l.clone()),
                            status: 0,
                            private_data: user.to_vec(),
                            ud: None,
                        });
                    }
                    _ => {
                        let r = rverbs_cm::SidrReply::status(sidr_status::REJECT);
                        let _ = st.cm.sidr_reply(now, id, &r);
                        let _ = st.cm.destroy(now, id);
                    }
                }
            }
            Event::ConnectResponse { id, rep } => {
                let Some(i) = Self::id(st, id, graveyard) else {
                    return;
                };
                // librdmacm `ucma_process_conn_resp`: the QP to RTR and RTS, then the
                // RTU; a QP that refuses is rejected (REJ consumer defined).
                let moved = i.qp_arc().map_or(Err(libc::EINVAL), |qp| {
                    move_qp(&self.ctx, &st.cm, id, &qp, true).map_err(|e| e.errno())
                });
                match moved {
                    Ok(()) => {
                        let _ = st.cm.rtu(now, id, &[]);
                        // The RTU is on the wire before the program hears ESTABLISHED
                        // and may post (librdmacm reports it after ucma's accept, whose
                        // `ib_send_cm_rtu` has posted the RTU, cm.c): a passive peer
                        // enters ESTABLISHED before our first request reaches its QP.
                        self.flush(st);
                        i.chan.push(RawEvent::new(
                            EventKind::Established,
                            i.clone(),
                            0,
                            rep.private_data.clone(),
                        ));
                    }
                    Err(errno) => {
                        let _ = st.cm.reject(now, id, rej::CONSUMER_DEFINED, &[], &[]);
                        i.chan.push(RawEvent::new(
                            EventKind::ConnectError,
                            i.clone(),
                            -errno,
                            Vec::new(),
                        ));
                    }
                }
            }
            Event::Established { id, private_data } => {
                if let Some(i) = Self::id(st, id, graveyard) {
                    i.chan.push(RawEvent::new(
                        EventKind::Established,
                        i.clone(),
                        0,
                        private_data,
                    ));
                }
            }
            Event::Rejected {
                id,
                reason,
                private_data,
                ..
            } => {
                if let Some(i) = Self::id(st, id, graveyard) {
                    i.qp_to_error();
                    i.chan.push(RawEvent::new(
                        EventKind::Rejected,
                        i.clone(),
                        i32::from(reason),
                        private_data,
                    ));
                }
            }
            Event::Unreachable { id, .. } => {
                if let Some(i) = Self::id(st, id, graveyard) {
                    i.qp_to_error();
                    i.chan.push(RawEvent::new(
                        EventKind::Unreachable,
                        i.clone(),
                        -libc::ETIMEDOUT,
                        Vec::new(),
                    ));
                }
            }
            Event::MraReceived { .. } => {}
            Event::DisconnectRequest { id, private_data } => {
                if let Some(i) = Self::id(st, id, graveyard) {
                    i.chan.push(RawEvent::new(
                        EventKind::Disconnected,
                        i.clone(),
                        0,
                        private_data,
                    ));
                }
            }
            Event::Disconnected {
                id,
                private_data,
                timed_out,
            } => {
                if let Some(i) = Self::id(st, id, graveyard) {
                    i.chan.push(RawEvent::new(
                        EventKind::Disconnected,
                        i.clone(),
                        if timed_out { -libc::ETIMEDOUT } else { 0 },
                        private_data,
                    ));
                }
            }
            Event::TimewaitExit { id } => {
                if let Some(i) = Self::id(st, id, graveyard) {
                    i.chan.push(RawEvent::new(
                        EventKind::TimewaitExit,
                        i.clone(),
                        0,
                        Vec::new(),
                    ));
                }
            }
            Event::SidrReply {
                id,
                status,
                qpn,
                qkey,
                private_data,
                ..
            } => {
                let Some(i) = Self::id(st, id, graveyard) else {
                    return;
                };
                // cma.c `cma_sidr_rep_handler`: anything but success is UNREACHABLE
                // with the SIDR status.
                if status == sidr_status::SUCCESS {
                    let ud = i.remote_ah(&self.ctx).map(|ah_attr| super::UdParam {
                        qp_num: qpn,
                        qkey,
                        ah_attr,
                    });
                    let mut e = RawEvent::new(EventKind::Established, i.clone(), 0, private_data);
                    e.ud = ud;
                    i.chan.push(e);
                } else {
                    i.chan.push(RawEvent::new(
                        EventKind::Unreachable,
                        i.clone(),
                        i32::from(status),
                        private_data,
                    ));
                }
            }
        }
    }

    /// Releases a delivered connect request's place in its listener's backlog.
    pub(crate) fn taken(self: &Arc<Self>, id: RawId) {
        self.with(|st, _| st.cm.backlog_release(id));
    }
}

impl Drop for Port {
    /// The last ID went: what it still owed its peer (a DREQ, a REJ) leaves now, as
    /// the kernel's `cm_destroy_id` sends it.
    fn drop(&mut self) {
        let doomed = std::mem::take(self.doomed.get_mut().unwrap_or_else(|e| e.into_inner()));
        let st = self.st.get_mut().unwrap_or_else(|e| e.into_inner());
        let now = self.epoch.elapsed().as_nanos() as Nanos;
        for id in doomed {
            let _ = st.cm.destroy(now, id);
        }
        let mut out = Vec::new();
        while let Some(t) = st.cm.poll_transmit() {
            out.push(t);
        }
        for t in out {
            let _ = self.agent.send_as_is(self.dest(t.dest), &t.mad);
        }
    }
}

/// The port thread: MADs in, timers, until the last ID of the port is gone.
fn run(weak: Weak<Port>) {
    loop {
        // The thread holds the port only while it works: the last ID's owner closes
        // the port (and an auto-opened context with it) when it drops the ID.
        let Some(port) = weak.upgrade() else {
            return;
        };
        port.with(|st, now| {
            while let Some(r) = port.agent.recv(Duration::ZERO) {
                st.cm.handle_mad(now, r.src_gid().0, &r.mad);
            }
        });
        let wait = {
            let st = lock(&port.st);
            st.cm.poll_timeout().map_or(POLL, |t| {
                Duration::from_nanos(t.saturating_sub(port.now())).min(POLL)
            })
        };
        drop(port);
        std::thread::sleep(wait);
    }
}

/// Whether a CM port of `ctx` is still running.
pub(crate) fn running(ctx: &Context) -> bool {
    lock(ports())
        .iter()
        .filter_map(Weak::upgrade)
        .any(|p| Arc::ptr_eq(&p.ctx.inner, &ctx.inner))
}

/// The sgid index of `gid` in the context's table.
pub(crate) fn sgid_index(ctx: &Context, gid: &[u8; 16]) -> Option<u8> {
    ctx.gids()
        .iter()
        .position(|g| g.0 == *gid)
        .and_then(|i| u8::try_from(i).ok())
}

/// The QP of an ID through INIT (again, with the CM's access flags), RTR and RTS
/// with the CM's attributes (kernel `ib_cm_init_qp_attr` for each state, as
/// librdmacm's `ucma_modify_qp_rtr` / `_rts` apply them).
pub(crate) fn move_qp(
    ctx: &Context,
    cm: &Cm,
    id: RawId,
    qp: &crate::Qp,
    to_rts: bool,
) -> Result<()> {
    let bad = |why| -> crate::Error {
        rverbs_engine::VerbError::new("rdma_cm modify_qp", rverbs_engine::Errno::Inval, why).into()
    };
    let cm_attr = |s| {
        cm.qp_attr(id, s)
            .map_err(|_| bad("no QP attributes in this state"))
    };
    let a: CmQpAttr = cm_attr(rverbs_cm::QpState::Init)?;
    let mut m = QpModify::to(QpState::Init);
    if let Some(f) = a.access_flags {
        m = m.access(AccessFlags::NONE.with(rverbs_engine::Access(f)));
    }
    qp.modify(&m)?;
    let a = cm_attr(rverbs_cm::QpState::Rtr)?;
    let mut m = QpModify::to(QpState::Rtr);
    if let Some(p) = a.ah {
        let sgid = sgid_index(ctx, &p.local_gid)
            .ok_or(bad("the path's source GID is not in the table"))?;
        let mut ah = AhAttr::to(Gid(p.remote_gid), sgid);
        ah.av.hop_limit = p.hop_limit;
        ah.av.traffic_class = p.traffic_class;
        ah.av.flow_label = p.flow_label;
        m = m.path(ah);
    }
    if let Some(mtu) = a.path_mtu {
        m = m.path_mtu(Mtu::from_enum(mtu).unwrap_or(Mtu::M1024));
    }
    if let Some(q) = a.dest_qpn {
        m = m.dest_qpn(q);
    }
    if let Some(p) = a.rq_psn {
        m = m.rq_psn(p);
    }
    if let Some(v) = a.max_dest_rd_atomic {
        m = m.max_dest_rd_atomic(v);
    }
    if let Some(v) = a.min_rnr_timer {
        // ib_cm leaves 0; librdmacm's QPs get the verbs default of 12 (0.64 ms)
        // when the CM says 0 (0 would be 655 ms per RNR NAK).
        m = m.min_rnr_timer(if v == 0 { 12 } else { v });
    }
    qp.modify(&m)?;
    if !to_rts {
        return Ok(());
    }
    let a = cm_attr(rverbs_cm::QpState::Rts)?;
    let mut m = QpModify::to(QpState::Rts);
    if let Some(v) = a.sq_psn {
        m = m.sq_psn(v);
    }
    if let Some(v) = a.timeout {
        m = m.timeout(v);
    }
    if let Some(v) = a.retry_cnt {
        m = m.retry_cnt(v);
    }
    if let Some(v) = a.rnr_retry {
        m = m.rnr_retry(v);
    }
    if let Some(v) = a.max_rd_atomic {
        m = m.max_rd_atomic(v);
    }
    qp.modify(&m)
}
