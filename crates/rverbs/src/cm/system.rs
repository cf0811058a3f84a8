//! IDs on a system device (the kernel's rxe, a ConnectX...): the kernel's rdma_cm
//! through the system's `librdmacm.so.1` (`rverbs_sys::ibv::CmIdHandle`), behind the
//! same [`CmId`] calls and [`EventChannel`] events as the soft device's CM.
//!
//! The context is the program's own: the librdmacm ID carries no QP, so the QP stays on
//! the context the program opened (librdmacm opens contexts of its own, and its
//! `rdma_create_qp` would want a PD of those). The QP is moved with the attributes the
//! kernel computes (`rdma_init_qp_attr`), as librdmacm moves a QP of its own
//! (librdmacm/cma.c `ucma_modify_qp_rtr` / `_rts`, `ucma_init_ud_qp`); a REP arrives as
//! `CONNECT_RESPONSE`, after which the QP goes to RTS and `rdma_establish` sends the RTU.
//!
//! Events: each [`EventChannel`] with system IDs has a librdmacm channel and a thread
//! that waits on its fd, reads each event, converts it (a connect request's new ID
//! becomes a new [`CmId`]), acknowledges it at once and queues it on the ID's channel.
//! The thread ends when the rverbs channel is gone (later events are dropped, as the
//! soft device drops events for a channel that is gone).

use super::channel::ChanInner;
use super::*;
use crate::sys::ibv::consts as c;
use crate::sys::ibv::{self, CmChannel, CmEventData, CmIdHandle};
use std::collections::HashMap;
use std::sync::Weak;

/// An ID of the system's CM and the context its QP is on.
pub(super) struct SysId {
    pub(super) h: CmIdHandle,
    pub(super) ctx: Context,
}

/// How long the event thread waits before it looks whether its channel is gone.
const WAKE_MS: i32 = 100;

/// The bits of a mask from `rdma_init_qp_attr` that no `ibv_modify_qp` takes (the
/// kernel's SMAC / VID bits 21-24, which librdmacm masks off too: cma.c
/// `ucma_modify_qp_rtr`'s workaround).
const KERNEL_ONLY_MASK: u32 = 0x1e0_0000;

fn registry() -> &'static Mutex<HashMap<usize, Weak<IdInner>>> {
    static IDS: std::sync::OnceLock<Mutex<HashMap<usize, Weak<IdInner>>>> =
        std::sync::OnceLock::new();
    IDS.get_or_init(Mutex::default)
}

fn lookup(key: usize) -> Option<Arc<IdInner>> {
    lock(registry()).get(&key).and_then(Weak::upgrade)
}

pub(super) fn forget(key: usize) {
    lock(registry()).remove(&key);
}

fn io_err(what: &'static str, e: std::io::Error) -> Error {
    Error::io(what, e)
}

/// Loads the system's CM (`RVERBS_LIBRDMACM` names another file).
pub(super) fn load() -> std::result::Result<(), ibv::CmLoadError> {
    ibv::load_rdmacm(crate::device::options::librdmacm_path().as_deref())
}

/// The system CM, or why it is missing, as an error of `verb`.
fn loaded(verb: &'static str) -> Result<()> {
    load().map_err(|e| {
        Error::NoDevice(format!(
            "{verb} on a system device needs the system's RDMA CM: {e}"
        ))
    })
}

/// The librdmacm channel of `chan`, made (with its event thread) on first use.
fn channel_of(chan: &Arc<ChanInner>) -> Result<Arc<CmChannel>> {
    let mut s = lock(&chan.sys);
    if let Some(c) = s.as_ref() {
        return Ok(c.clone());
    }
    loaded("rdma_create_event_channel")?;
    let ch = CmChannel::new()
        .map_err(|e| Error::NoDevice(e.to_string()))?
        .map_err(|e| io_err("rdma_create_event_channel", e))?;
    let (weak, thread_ch) = (Arc::downgrade(chan), ch.clone());
    std::thread::Builder::new()
        .name("rverbs-rdmacm".into())
        .spawn(move || run(weak, thread_ch))
        .map_err(|e| Error::io("starting the RDMA CM event thread", e))?;
    *s = Some(ch.clone());
    Ok(ch)
}

/// Makes `id` (which has no device yet) an ID of the system's CM on `ctx`.
pub(super) fn bind_context(id: &CmId, ctx: &Context) -> Result<()> {
    const VERB: &str = "rdma_create_id";
    let chan = id.inner.chan.get().ok_or(errno(VERB, libc::EINVAL))?;
    let ch = channel_of(&chan)?;
    let h =
        CmIdHandle::create(&ch, u32::from(id.inner.ps.number())).map_err(|e| io_err(VERB, e))?;
    lock(registry()).insert(h.key(), Arc::downgrade(&id.inner));
    lock(&id.inner.st).sys = Some(Arc::new(SysId {
        h,
        ctx: ctx.clone(),
    }));
    Ok(())
}

fn ms(t: Duration) -> i32 {
    i32::try_from(t.as_millis()).unwrap_or(i32::MAX).max(1)
}

/// `rdma_bind_addr`: an address of the ID's context (or unspecified).
pub(super) fn bind_addr(id: &CmId, s: &SysId, addr: SocketAddr) -> Result<()> {
    const VERB: &str = "rdma_bind_addr";
    if !addr.ip().is_unspecified() && !s.ctx.device().addrs.contains(&addr.ip()) {
        return Err(errno(VERB, libc::EADDRNOTAVAIL));
    }
    s.h.bind_addr(&addr).map_err(|e| io_err(VERB, e))?;
    lock(&id.inner.st).local = s.h.local_addr().or(Some(addr));
    Ok(())
}

/// `rdma_resolve_addr` from `src`, or from the context's address of the family.
pub(super) fn resolve_addr(
    id: &CmId,
    s: &SysId,
    src: Option<IpAddr>,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<()> {
    const VERB: &str = "rdma_resolve_addr";
    let from = src.or_else(|| local_ip(&s.ctx, dst.is_ipv6()));
    if let Some(f) = from {
        if !s.ctx.device().addrs.contains(&f) {
            return Err(errno(VERB, libc::EADDRNOTAVAIL));
        }
    }
    let from = from.map(|f| SocketAddr::new(f, 0));
    s.h.resolve_addr(from.as_ref(), &dst, ms(timeout))
        .map_err(|e| io_err(VERB, e))?;
    lock(&id.inner.st).remote = Some(dst);
    Ok(())
}

/// `rdma_resolve_route`.
pub(super) fn resolve_route(s: &SysId, timeout: Duration) -> Result<()> {
    s.h.resolve_route(ms(timeout))
        .map_err(|e| io_err("rdma_resolve_route", e))
}

/// `rdma_listen` (on the wildcard address when the ID is not bound).
pub(super) fn listen(id: &CmId, s: &SysId, backlog: u32) -> Result<()> {
    if lock(&id.inner.st).local.is_none() {
        bind_addr(id, s, "0.0.0.0:0".parse().expect("literal"))?;
    }
    s.h.listen(i32::try_from(backlog).unwrap_or(0))
        .map_err(|e| io_err("rdma_listen", e))?;
    lock(&id.inner.st).local = s.h.local_addr();
    Ok(())
}

fn modify(qp: &Qp, attr: &ibv::types::ibv_qp_attr, mask: u32) -> Result<()> {
    qp.dev.modify_from_cm(attr, mask & !KERNEL_ONLY_MASK)
}

/// The kernel's attributes for moving the ID's QP to `state`.
fn attrs(s: &SysId, state: u32) -> Result<(ibv::types::ibv_qp_attr, u32)> {
    s.h.init_qp_attr(state)
        .map_err(|e| io_err("rdma_init_qp_attr", e))
}

/// A new QP of the ID to INIT (UD: on to RTS with PSN 0, as `ucma_init_ud_qp`).
pub(super) fn init_qp(s: &SysId, qp: &Qp, ud: bool) -> Result<()> {
    if !Arc::ptr_eq(&qp.pd.ctx.inner, &s.ctx.inner)
        && qp.pd.ctx.device().name != s.ctx.device().name
    {
        return Err(errno("rdma_create_qp", libc::EINVAL));
    }
    let (a, m) = attrs(s, c::IBV_QPS_INIT)?;
    modify(qp, &a, m)?;
    if ud {
        let mut a = ibv::zeroed_qp_attr();
        a.qp_state = c::IBV_QPS_RTR;
        modify(qp, &a, c::IBV_QP_STATE)?;
        a.qp_state = c::IBV_QPS_RTS;
        a.sq_psn = 0;
        modify(qp, &a, c::IBV_QP_STATE | c::IBV_QP_SQ_PSN)?;
    }
    Ok(())
}

/// The RC QP to RTR and RTS with the kernel's attributes (`resp` / `depth`: the
/// consumer's read limits, when it gave them), as librdmacm before an accept and on a
/// REP.
fn to_rts(s: &SysId, qp: &Qp, resp: Option<u8>, depth: Option<u8>) -> Result<()> {
    let (a, m) = attrs(s, c::IBV_QPS_INIT)?;
    modify(qp, &a, m)?;
    let (mut a, m) = attrs(s, c::IBV_QPS_RTR)?;
    if let Some(r) = resp {
        a.max_dest_rd_atomic = r;
    }
    modify(qp, &a, m)?;
    let (mut a, m) = attrs(s, c::IBV_QPS_RTS)?;
    if let Some(d) = depth {
        a.max_rd_atomic = d;
    }
    modify(qp, &a, m)
}

fn params<'a>(p: &'a ConnParam, qp: &Qp) -> ibv::ConnParams<'a> {
    ibv::ConnParams {
        private_data: &p.private_data,
        info: ibv::ConnInfo {
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: qp._srq.is_some(),
            qp_num: qp.qp_num(),
        },
    }
}

/// `rdma_connect` with the ID's QP.
pub(super) fn connect(id: &CmId, s: &SysId, p: &ConnParam) -> Result<()> {
    const VERB: &str = "rdma_connect";
    let qp = id.inner.qp_arc().ok_or(errno(VERB, libc::EINVAL))?;
    lock(&id.inner.st).sys_failed = false;
    s.h.connect(&params(p, &qp)).map_err(|e| io_err(VERB, e))
}

/// `rdma_accept`: an RC QP goes to RTS first (librdmacm `rdma_accept`).
pub(super) fn accept(id: &CmId, s: &SysId, p: &ConnParam) -> Result<()> {
    const VERB: &str = "rdma_accept";
    let qp = id.inner.qp_arc().ok_or(errno(VERB, libc::EINVAL))?;
    if id.inner.ps != PortSpace::Udp {
        to_rts(s, &qp, Some(p.responder_resources), Some(p.initiator_depth))?;
    }
    s.h.accept(&params(p, &qp)).map_err(|e| {
        id.inner.qp_to_error();
        io_err(VERB, e)
    })
}

/// `rdma_reject` with private data.
pub(super) fn reject(s: &SysId, private_data: &[u8]) -> Result<()> {
    s.h.reject(private_data)
        .map_err(|e| io_err("rdma_reject", e))
}

/// `rdma_disconnect`: the QP to ERR first, as librdmacm does with its own.
pub(super) fn disconnect(id: &CmId, s: &SysId) -> Result<()> {
    id.inner.qp_to_error();
    s.h.disconnect().map_err(|e| io_err("rdma_disconnect", e))
}

/// `rdma_migrate_id` to `to`'s librdmacm channel.
pub(super) fn migrate(id: &CmId, s: &SysId, to: &EventChannel) -> Result<()> {
    let ch = channel_of(&to.inner)?;
    s.h.migrate(&ch).map_err(|e| io_err("rdma_migrate_id", e))?;
    id.inner.chan.migrate(&id.inner, to);
    Ok(())
}

fn run(chan: Weak<ChanInner>, ch: Arc<CmChannel>) {
    while chan.strong_count() > 0 {
        match ch.get_event(WAKE_MS) {
            Ok(Some(ev)) => dispatch(ev),
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A failed read (the kernel's ucma refused it): not a reason to spin.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn conn_param(i: &ibv::ConnInfo) -> ConnParam {
    ConnParam {
        private_data: Vec::new(),
        responder_resources: i.responder_resources,
        initiator_depth: i.initiator_depth,
        retry_count: i.retry_count,
        rnr_retry_count: i.rnr_retry_count,
    }
}

fn push(id: &Arc<IdInner>, kind: EventKind, status: i32, ev: &mut CmEventData) {
    let mut raw = RawEvent::new(
        kind,
        id.clone(),
        status,
        std::mem::take(&mut ev.private_data),
    );
    raw.ud = ev.ud.as_ref().map(|u| UdParam {
        qp_num: u.qp_num,
        qkey: u.qkey,
        ah_attr: crate::hw::ah_attr_from_c(&u.ah_attr),
    });
    id.chan.push(raw);
}

fn dispatch(mut ev: CmEventData) {
    if ev.event == ibv::types::RDMA_CM_EVENT_CONNECT_REQUEST {
        return request(ev);
    }
    let Some(me) = lookup(ev.id) else { return };
    let Some(s) = lock(&me.st).sys.clone() else {
        return;
    };
    use ibv::types::*;
    let kind = match ev.event {
        RDMA_CM_EVENT_ADDR_RESOLVED => {
            lock(&me.st).local = s.h.local_addr();
            EventKind::AddrResolved
        }
        RDMA_CM_EVENT_ADDR_ERROR => EventKind::AddrError,
        RDMA_CM_EVENT_ROUTE_RESOLVED => EventKind::RouteResolved,
        RDMA_CM_EVENT_ROUTE_ERROR => EventKind::RouteError,
        RDMA_CM_EVENT_CONNECT_RESPONSE => {
            // The REP: the QP to RTS with the kernel's attributes, then the RTU.
            let done = me
                .qp_arc()
                .ok_or(errno("rdma_establish", libc::EINVAL))
                .and_then(|qp| to_rts(&s, &qp, None, None))
                .and_then(|()| s.h.establish().map_err(|e| io_err("rdma_establish", e)));
            match done {
                Ok(()) => EventKind::Established,
                Err(e) => {
                    // As librdmacm's `connect_error`: the REJ or DREQ that follows
                    // is not the consumer's news.
                    me.qp_to_error();
                    lock(&me.st).sys_failed = true;
                    ev.status = -e.errno();
                    EventKind::ConnectError
                }
            }
        }
        RDMA_CM_EVENT_CONNECT_ERROR => EventKind::ConnectError,
        RDMA_CM_EVENT_UNREACHABLE => {
            me.qp_to_error();
            EventKind::Unreachable
        }
        RDMA_CM_EVENT_REJECTED | RDMA_CM_EVENT_DISCONNECTED if lock(&me.st).sys_failed => {
            return;
        }
        RDMA_CM_EVENT_REJECTED => {
            me.qp_to_error();
            EventKind::Rejected
        }
        RDMA_CM_EVENT_ESTABLISHED => EventKind::Established,
        RDMA_CM_EVENT_DISCONNECTED => EventKind::Disconnected,
        RDMA_CM_EVENT_TIMEWAIT_EXIT => EventKind::TimewaitExit,
        // Device removal, address change and multicast events have no EventKind.
        _ => return,
    };
    let status = ev.status;
    push(&me, kind, status, &mut ev);
}

/// A connect request: its new ID becomes a [`CmId`] on the listener's channel, on the
/// listener's context (or, for a wildcard listener reached through another device, a
/// context of that device).
fn request(mut ev: CmEventData) {
    let Some(h) = ev.new_id.take() else { return };
    // Without its listener the request is dropped; destroying the new ID rejects it.
    let Some(l) = lookup(ev.listen_id) else {
        return;
    };
    let Some(ls) = lock(&l.st).sys.clone() else {
        return;
    };
    let ctx = match h.device_name() {
        Some(n) if n != ls.ctx.device().name => {
            match crate::device(Some(&n)).and_then(|d| auto_context(&d)) {
                Ok(c) => c,
                Err(_) => return,
            }
        }
        _ => ls.ctx.clone(),
    };
    let key = h.key();
    let (local, remote) = (h.local_addr(), h.peer_addr());
    let child = Arc::new(IdInner {
        chan: l.chan.clone(),
        ps: l.ps,
        st: Mutex::new(IdState {
            local,
            remote,
            sys: Some(Arc::new(SysId { h, ctx })),
            sys_req: ev.conn.as_ref().map(conn_param),
            psn: port::random_psn(),
            ..IdState::default()
        }),
        users: AtomicUsize::new(0),
        destroyed: AtomicBool::new(false),
    });
    lock(registry()).insert(key, Arc::downgrade(&child));
    let mut raw = RawEvent::new(
        EventKind::ConnectRequest,
        child,
        ev.status,
        std::mem::take(&mut ev.private_data),
    );
    raw.listen_id = Some(l.clone());
    l.chan.push(raw);
}
