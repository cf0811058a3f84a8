//! The RDMA connection manager (librdmacm's model): connect queue pairs by IP address
//! and port instead of exchanging QP numbers out of band, wire-compatible with the
//! kernel's rdma_cm (rping, udaddy, ucmatose, perftest `-R` on a kernel rxe peer).
//!
//! * [`EventChannel`]: where events arrive (`rdma_event_channel`): blocking
//!   [`EventChannel::get_event`] with a timeout, and a file descriptor ([`AsFd`]) that
//!   is readable while an event waits, for `poll`/`epoll`.
//! * [`CmId`] (`rdma_cm_id`): [`CmId::resolve_addr`] / [`CmId::resolve_route`] from IP
//!   addresses (on RoCE v2 a GID *is* the IP address), [`CmId::bind_addr`] and
//!   [`CmId::listen`] with a backlog, [`CmId::create_qp`] (the QP is moved through
//!   INIT/RTR/RTS by the CM, as librdmacm does), [`CmId::connect`] /
//!   [`CmId::accept`] / [`CmId::reject`] with private data, [`CmId::disconnect`].
//!   The UDP port space ([`PortSpace::Udp`]) resolves a UD peer with SIDR.
//! * [`CmId::create_ep`] (`rdma_create_ep`): address and route resolved in one call.
//! * [`close`]: a program's last step, as its exit closes no context.
//!
//! On a system device (the kernel's rxe, a ConnectX) the same calls run on the kernel's
//! rdma_cm through the system's `librdmacm.so.1` (`system.rs`); the QP stays on the
//! program's context and is moved with the kernel's attributes.
//!
//! The soft device's protocol is the sans-IO `rverbs-cm` crate; this module drives it with
//! the CM MADs of the context's GSI (QP1, through a [`crate::mad::MadAgent`] for class
//! 0x07) and a thread per context for its timers. It lives in `rverbs` rather than a
//! crate above it because the IDs create and move QPs and reach the context's MAD
//! agent and clock, which are crate-private; `rverbs-cm` depends only on the wire
//! crate, so there is no cycle.
//!
//! ```
//! use rverbs::cm::{CmId, ConnParam, EventChannel, EventKind, PortSpace};
//! use rverbs::{AccessFlags, QpInitAttr, QpType, SendRequest};
//! use std::time::Duration;
//!
//! let t = Some(Duration::from_secs(10));
//! let dev = rverbs::device(None)?; // the loopback device: one 127.0.0.x per context
//! let (server_ctx, client_ctx) = (dev.open()?, dev.open()?);
//!
//! // Server: listen on its address, any free port.
//! let sch = EventChannel::new()?;
//! let listener = CmId::create_on(&sch, &server_ctx, PortSpace::Tcp)?;
//! let ip = rverbs::cm::local_ip(&server_ctx, false).unwrap();
//! listener.bind_addr(std::net::SocketAddr::new(ip, 0))?;
//! listener.listen(4)?;
//! let addr = listener.local_addr().unwrap();
//!
//! // Client: resolve, create its QP on the ID, connect with private data.
//! let cch = EventChannel::new()?;
//! let client = CmId::create_on(&cch, &client_ctx, PortSpace::Tcp)?;
//! client.resolve_addr(None, addr, Duration::from_secs(2))?;
//! assert_eq!(cch.get_event(t).unwrap().kind, EventKind::AddrResolved);
//! client.resolve_route(Duration::from_secs(2))?;
//! assert_eq!(cch.get_event(t).unwrap().kind, EventKind::RouteResolved);
//! let (cpd, ccq) = (client_ctx.alloc_pd()?, client_ctx.create_cq(16)?);
//! let cqp = client.create_qp(&cpd, &QpInitAttr::new(QpType::Rc, &ccq))?;
//! client.connect(&ConnParam { private_data: b"hello".to_vec(), ..ConnParam::default() })?;
//!
//! // Server: the request, its private data, a QP on the new ID, accept.
//! let req = sch.get_event(t).unwrap();
//! assert_eq!(req.kind, EventKind::ConnectRequest);
//! assert_eq!(&req.private_data[..5], b"hello");
//! let (spd, scq) = (server_ctx.alloc_pd()?, server_ctx.create_cq(16)?);
//! let sqp = req.id.create_qp(&spd, &QpInitAttr::new(QpType::Rc, &scq))?;
//! let smr = spd.reg_mr(64, AccessFlags::ALL)?;
//! sqp.post_recv(1, &[smr.slice(0..64)])?;
//! req.id.accept(&ConnParam::default())?;
//!
//! assert_eq!(cch.get_event(t).unwrap().kind, EventKind::Established);
//! let cmr = cpd.reg_mr(64, AccessFlags::ALL)?;
//! cmr.write(0, b"ping");
//! cqp.post_send(&SendRequest::send(1, &[cmr.slice(0..4)]))?;
//! let mut wc = [rverbs::Wc::default()];
//! assert_eq!(scq.poll_wait(&mut wc, Duration::from_secs(5))?, 1);
//! assert_eq!(wc[0].byte_len, 4);
//!
//! client.disconnect()?;
//! assert_eq!(sch.get_event(t).unwrap().kind, EventKind::Established);
//! assert_eq!(sch.get_event(t).unwrap().kind, EventKind::Disconnected);
//! # Ok::<(), rverbs::Error>(())
//! ```

mod channel;
mod event;
mod localhost;
mod open;
mod port;
mod qp;
mod system;

use crate::error::{Error, Result};
use crate::verbs::Context;
use crate::{AhAttr, Gid, Pd, Qp, QpInitAttr, QpModify, QpState, QpType};
pub use channel::EventChannel;
use channel::{ChanRef, RawEvent};
pub use event::{CmEvent, ConnParam, EventKind, UdParam};
use open::{auto_context, device_for, ephemeral_port, route_source, WILDCARD};
pub use open::{close, set_context_opener, set_wildcard_device, ContextOpener, WildcardDevice};
use port::Port;
use rverbs_cm::cma::{self, CmaHeader};
use rverbs_cm::{consts, CmId as RawId, ConnectParams, Path, ReqInfo, SidrParams};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use rverbs_cm::cma::PortSpace;
pub use rverbs_cm::consts::rej as reject_reason;
pub use rverbs_cm::consts::sidr_status;

/// How long a connection to `127.0.0.1` on the loopback device waits for a listener
/// to be announced (see `localhost.rs`).
const LOCALHOST_WAIT: Duration = Duration::from_secs(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno(what: &'static str, e: i32) -> Error {
    Error::io(what, std::io::Error::from_raw_os_error(e))
}

fn cm_err(what: &'static str, e: rverbs_cm::CmError) -> Error {
    errno(what, e.errno())
}

#[derive(Default)]
struct IdState {
    port: Option<Arc<Port>>,
    cm: Option<RawId>,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    route: Option<Path>,
    qp: Option<Arc<Qp>>,
    psn: u32,
    /// Passive side: the REQ (absent for SIDR).
    req: Option<Box<ReqInfo>>,
    /// Passive UD side: answered with a SIDR reply.
    sidr: bool,
    /// CM response timeout and retries for what this ID sends (`None`: rdma_cm's).
    timeouts: Option<(u8, u8)>,
    /// A loopback listener's announcement, so `127.0.0.1` reaches it.
    announced: Option<std::os::unix::net::UnixDatagram>,
    /// On a system device: the ID of the system's CM (then `port` is `None`).
    sys: Option<Arc<system::SysId>>,
    /// System device, passive side: what the peer's REQ offered.
    sys_req: Option<ConnParam>,
    /// System device: completing the connection failed locally, so the REJ or DREQ
    /// that follows is not reported (librdmacm's `connect_error`).
    sys_failed: bool,
}

pub(crate) struct IdInner {
    chan: ChanRef,
    ps: PortSpace,
    st: Mutex<IdState>,
    /// The program's handles ([`CmId`]s); the CM's own references (a queued event, a
    /// dispatch in progress) are not counted. The last handle destroys the ID.
    users: AtomicUsize,
    /// Destroyed by its last handle: its events are no longer delivered.
    destroyed: AtomicBool,
}

impl Drop for IdInner {
    fn drop(&mut self) {
        let s = self.st.get_mut().unwrap_or_else(|e| e.into_inner());
        if let (Some(p), Some(id)) = (s.port.take(), s.cm.take()) {
            p.doom(id);
        }
        if let Some(sys) = s.sys.take() {
            system::forget(sys.h.key());
        }
    }
}

impl IdInner {
    /// `rdma_destroy_id`: the CM forgets the ID before this returns (a listener's port
    /// is free at once, a connection's REJ / DREQ is sent, as the kernel's
    /// `cm_destroy_id`), whatever references the CM itself still holds.
    fn destroy_now(self: &Arc<Self>) {
        self.destroyed.store(true, Ordering::Release);
        let (port, cm, announced, sys) = {
            let mut s = lock(&self.st);
            (
                s.port.clone(),
                s.cm.take(),
                s.announced.take(),
                s.sys.take(),
            )
        };
        drop(announced);
        // A system ID: the system's `rdma_destroy_id` runs when its last reference
        // goes, which is here unless a call on it is still running.
        if let Some(sys) = sys {
            system::forget(sys.h.key());
            drop(sys);
        }
        if let (Some(p), Some(id)) = (&port, cm) {
            p.doom(id);
            // A turn destroys what is doomed before anything else.
            p.with(|_, _| ());
        }
        // Its events not yet delivered go (ucma `ucma_cleanup_ctx_events`): the new
        // IDs of requests to a listener are destroyed (rejected) with them.
        drop(self.chan.purge(self));
        if let Some(p) = port {
            p.with(|_, _| ());
            lock(&self.st).port = None;
        }
    }

    pub(super) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    fn qp_arc(&self) -> Option<Arc<Qp>> {
        lock(&self.st).qp.clone()
    }

    fn qp_to_error(&self) {
        if let Some(qp) = self.qp_arc() {
            let _ = qp.modify(&QpModify::to(QpState::Err));
        }
    }

    /// A listener bound to a specific address takes only requests for it.
    fn accepts_dst(&self, dst: IpAddr) -> bool {
        match lock(&self.st).local {
            Some(a) if !a.ip().is_unspecified() => a.ip() == dst,
            _ => true,
        }
    }

    fn child(l: &Arc<IdInner>, id: RawId, hdr: CmaHeader, req: Box<ReqInfo>) -> Arc<IdInner> {
        let lport = lock(&l.st).local.map_or(0, |a| a.port());
        let me = lock(&l.st).port.clone();
        Arc::new(IdInner {
            chan: l.chan.clone(),
            ps: l.ps,
            st: Mutex::new(IdState {
                port: me,
                cm: Some(id),
                local: Some(SocketAddr::new(hdr.dst, lport)),
                remote: Some(SocketAddr::new(hdr.src, hdr.src_port)),
                route: Some(req.path),
                req: Some(req),
                psn: port::random_psn(),
                ..IdState::default()
            }),
            users: AtomicUsize::new(0),
            destroyed: AtomicBool::new(false),
        })
    }

    fn sidr_child(l: &Arc<IdInner>, id: RawId, hdr: CmaHeader) -> Arc<IdInner> {
        let lport = lock(&l.st).local.map_or(0, |a| a.port());
        let me = lock(&l.st).port.clone();
        Arc::new(IdInner {
            chan: l.chan.clone(),
            ps: l.ps,
            st: Mutex::new(IdState {
                port: me,
                cm: Some(id),
                local: Some(SocketAddr::new(hdr.dst, lport)),
                remote: Some(SocketAddr::new(hdr.src, hdr.src_port)),
                sidr: true,
                psn: port::random_psn(),
                ..IdState::default()
            }),
            users: AtomicUsize::new(0),
            destroyed: AtomicBool::new(false),
        })
    }

    /// The AH attributes towards the resolved peer.
    fn remote_ah(&self, ctx: &Context) -> Option<AhAttr> {
        let r = lock(&self.st).route?;
        let sgid = port::sgid_index(ctx, &r.local_gid)?;
        Some(AhAttr::to(Gid(r.remote_gid), sgid))
    }
}

/// A communication identifier (`struct rdma_cm_id`). Cheap to clone; the ID is
/// destroyed (telling the peer: a REJ, DREQ or DREP as the kernel's
/// `cm_destroy_id`; a listener's port free for the next listen) when the last clone
/// goes, before that drop returns.
pub struct CmId {
    inner: Arc<IdInner>,
}

impl CmId {
    /// A handle of the program's on `inner`.
    pub(super) fn hold(inner: Arc<IdInner>) -> CmId {
        inner.users.fetch_add(1, Ordering::AcqRel);
        CmId { inner }
    }
}

impl Clone for CmId {
    fn clone(&self) -> CmId {
        CmId::hold(self.inner.clone())
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if self.inner.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.destroy_now();
        }
    }
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.inner.st);
        f.debug_struct("CmId")
            .field("cm_id", &s.cm.map(|c| c.0))
            .field("local", &s.local)
            .field("remote", &s.remote)
            .finish()
    }
}

impl PartialEq for CmId {
    fn eq(&self, o: &CmId) -> bool {
        Arc::ptr_eq(&self.inner, &o.inner)
    }
}

impl Eq for CmId {}

impl std::hash::Hash for CmId {
    /// By identity, as [`PartialEq`].
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.inner), h)
    }
}

/// The context's first IP address of a family (its first RoCE v2 address GID): what
/// peers connect to. On the loopback device each context has its own `127.0.0.x`.
pub fn local_ip(ctx: &Context, ipv6: bool) -> Option<IpAddr> {
    let g = ctx.gid(ctx.gid_index_for(ipv6)?)?;
    Some(match g.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(std::net::Ipv6Addr::from(g.0)),
    })
}

impl CmId {
    /// A new ID on `chan` for the port space (`rdma_create_id`); its device is chosen
    /// by the first bind or address resolution.
    pub fn create(chan: &EventChannel, ps: PortSpace) -> Result<CmId> {
        if !matches!(ps, PortSpace::Tcp | PortSpace::Udp) {
            return Err(errno("rdma_create_id", libc::EPROTONOSUPPORT));
        }
        Ok(CmId::hold(Arc::new(IdInner {
            chan: ChanRef::new(chan),
            ps,
            st: Mutex::new(IdState::default()),
            users: AtomicUsize::new(0),
            destroyed: AtomicBool::new(false),
        })))
    }

    /// A new ID bound to a context (its device and addresses).
    pub fn create_on(chan: &EventChannel, ctx: &Context, ps: PortSpace) -> Result<CmId> {
        let id = CmId::create(chan, ps)?;
        if ctx.device().kind == crate::DeviceKind::System {
            system::bind_context(&id, ctx)?;
        } else {
            lock(&id.inner.st).port = Some(Port::of(ctx)?);
        }
        Ok(id)
    }

    /// `rdma_create_ep`: a new ID on a channel of its own (returned with it; on `ctx`
    /// when given) with the address and route to `dst` resolved, waiting up to
    /// `timeout` for each.
    pub fn create_ep(
        ctx: Option<&Context>,
        src: Option<IpAddr>,
        dst: SocketAddr,
        ps: PortSpace,
        timeout: Duration,
    ) -> Result<(CmId, EventChannel)> {
        let ch = EventChannel::new()?;
        let id = match ctx {
            Some(c) => CmId::create_on(&ch, c, ps)?,
            None => CmId::create(&ch, ps)?,
        };
        id.resolve_addr(src, dst, timeout)?;
        id.expect(&ch, EventKind::AddrResolved, timeout)?;
        id.resolve_route(timeout)?;
        id.expect(&ch, EventKind::RouteResolved, timeout)?;
        Ok((id, ch))
    }

    fn expect(&self, ch: &EventChannel, kind: EventKind, timeout: Duration) -> Result<()> {
        match ch.get_event(Some(timeout)) {
            Some(e) if e.kind == kind => Ok(()),
            Some(e) => Err(errno(
                "rdma_create_ep",
                e.status
                    .checked_neg()
                    .filter(|s| *s > 0)
                    .unwrap_or(libc::EINVAL),
            )),
            None => Err(errno("rdma_create_ep", libc::ETIMEDOUT)),
        }
    }

    fn push(&self, kind: EventKind, status: i32) {
        self.inner
            .chan
            .push(RawEvent::new(kind, self.inner.clone(), status, Vec::new()));
    }

    /// The channel the ID reports on, while it exists.
    pub fn channel(&self) -> Option<EventChannel> {
        self.inner.chan.get().map(|inner| EventChannel { inner })
    }

    /// `rdma_migrate_id`: the ID (and its queued events) moves to `chan`. On a system
    /// device a failure of the system's `rdma_migrate_id` leaves it where it was: see
    /// [`CmId::try_migrate`].
    pub fn migrate(&self, chan: &EventChannel) {
        let _ = self.try_migrate(chan);
    }

    /// [`CmId::migrate`], with the system CM's error (the soft device's never fails).
    pub fn try_migrate(&self, chan: &EventChannel) -> Result<()> {
        match self.sys() {
            Some(s) => system::migrate(self, &s, chan),
            None => {
                self.inner.chan.migrate(&self.inner, chan);
                Ok(())
            }
        }
    }

    fn sys(&self) -> Option<Arc<system::SysId>> {
        lock(&self.inner.st).sys.clone()
    }

    /// The context the ID is on (once bound or resolved).
    pub fn context(&self) -> Option<Context> {
        let s = lock(&self.inner.st);
        match (&s.port, &s.sys) {
            (Some(p), _) => Some(p.ctx.clone()),
            (None, Some(sys)) => Some(sys.ctx.clone()),
            (None, None) => None,
        }
    }

    /// Whether the ID runs on the system's RDMA CM (a system device's ID).
    pub fn is_system(&self) -> bool {
        self.sys().is_some()
    }

    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }

    /// The local address (after bind, resolve or on a connect request).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        if let Some(s) = self.sys() {
            if let Some(a) = s.h.local_addr() {
                return Some(a);
            }
        }
        lock(&self.inner.st).local
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        if let Some(a) = self.sys().and_then(|s| s.h.peer_addr()) {
            if !a.ip().is_unspecified() {
                return Some(a);
            }
        }
        lock(&self.inner.st).remote
    }

    /// On the ID of a connect request: what the peer's REQ offered (responder
    /// resources, initiator depth, retry count, RNR retry count), for
    /// `rdma_cm_event.param.conn`.
    pub fn request_params(&self) -> Option<ConnParam> {
        let s = lock(&self.inner.st);
        if let Some(p) = &s.sys_req {
            return Some(p.clone());
        }
        let r = s.req.as_ref()?;
        Some(ConnParam {
            private_data: Vec::new(),
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
        })
    }

    /// The ID's QP (after [`CmId::create_qp`]).
    pub fn qp(&self) -> Option<Arc<Qp>> {
        self.inner.qp_arc()
    }

    /// Sets the CM response timeout (4.096 µs · 2^`timeout`) and the resends of an
    /// unanswered REQ / SIDR_REQ; rdma_cm's are 20 (4.3 s) and 15.
    /// On a system device the kernel's CM keeps its own (EOPNOTSUPP).
    pub fn set_cm_timeouts(&self, timeout: u8, retries: u8) -> Result<()> {
        if timeout > 31 || retries > 15 {
            return Err(errno("rdma_set_option", libc::EINVAL));
        }
        if self.is_system() {
            return Err(errno("rdma_set_option", libc::EOPNOTSUPP));
        }
        lock(&self.inner.st).timeouts = Some((timeout, retries));
        Ok(())
    }

    /// An ID with no device yet, whose address `ip` belongs to a system device (the
    /// kernel's rdma_cm would pick that device), becomes an ID of the system's CM on a
    /// context of it; otherwise nothing changes.
    fn system_for(&self, ip: IpAddr) -> Result<()> {
        {
            let s = lock(&self.inner.st);
            if s.port.is_some() || s.sys.is_some() {
                return Ok(());
            }
        }
        match device_for(ip) {
            Ok(d) if d.kind == crate::DeviceKind::System => {
                system::bind_context(self, &auto_context(&d)?)
            }
            _ => Ok(()),
        }
    }

    fn ensure_port(&self, ip: IpAddr) -> Result<Arc<Port>> {
        let bound = lock(&self.inner.st).port.clone();
        if let Some(p) = bound {
            return Ok(p);
        }
        let ctx = auto_context(&device_for(ip)?)?;
        let p = Port::of(&ctx)?;
        lock(&self.inner.st).port = Some(p.clone());
        Ok(p)
    }

    fn local_ip_of(port: &Port, ipv6: bool) -> Option<IpAddr> {
        local_ip(&port.ctx, ipv6)
    }

    /// `rdma_bind_addr`: the local address and port (0: a free one). An unspecified
    /// address binds the ID's context's address of that family (the default device's
    /// when the ID has no context yet).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        const VERB: &str = "rdma_bind_addr";
        if lock(&self.inner.st).local.is_some() {
            return Err(errno(VERB, libc::EINVAL));
        }
        if !addr.ip().is_unspecified() {
            self.system_for(addr.ip())?;
        }
        if let Some(s) = self.sys() {
            return system::bind_addr(self, &s, addr);
        }
        let bound = lock(&self.inner.st).port.clone();
        let port = match bound {
            Some(p) => p,
            None if addr.ip().is_unspecified() => {
                let chosen = WILDCARD.get().and_then(|f| f());
                let p = Port::of(&auto_context(&crate::device(chosen.as_deref())?)?)?;
                lock(&self.inner.st).port = Some(p.clone());
                p
            }
            None => self.ensure_port(addr.ip())?,
        };
        // The context needs an address of the family (its GID is what peers reach).
        if Self::local_ip_of(&port, addr.is_ipv6()).is_none() {
            return Err(errno(VERB, libc::EADDRNOTAVAIL));
        }
        let ip = if addr.ip().is_unspecified() {
            // Listening on any address: requests for every address of the context.
            addr.ip()
        } else if addr.ip() == localhost::LOCALHOST && port.ctx.device().is_loopback() {
            // `127.0.0.1` on the loopback device is this context's own 127.0.0.x.
            Self::local_ip_of(&port, false).ok_or(errno(VERB, libc::EADDRNOTAVAIL))?
        } else if port
            .ctx
            .gids()
            .iter()
            .any(|g| g.0 == cma::ip_to_gid(addr.ip()))
        {
            addr.ip()
        } else {
            return Err(errno(VERB, libc::EADDRNOTAVAIL));
        };
        let p = if addr.port() == 0 {
            ephemeral_port()
        } else {
            addr.port()
        };
        lock(&self.inner.st).local = Some(SocketAddr::new(ip, p));
        Ok(())
    }

    /// `rdma_listen` with a backlog (0: the maximum, 1024). EADDRINUSE when another ID
    /// listens on the port of this port space.
    pub fn listen(&self, backlog: u32) -> Result<()> {
        const VERB: &str = "rdma_listen";
        if let Some(s) = self.sys() {
            return system::listen(self, &s, backlog);
        }
        if lock(&self.inner.st).local.is_none() {
            self.bind_addr("0.0.0.0:0".parse().expect("literal"))?;
        }
        let (port, local) = {
            let s = lock(&self.inner.st);
            (s.port.clone(), s.local)
        };
        let (Some(port), Some(local)) = (port, local) else {
            return Err(errno(VERB, libc::EINVAL));
        };
        let sid = cma::service_id(self.inner.ps, local.port());
        let me = self.inner.clone();
        port.with(|st, now| {
            let id = st.cm.create_id();
            if let Err(e) = st.cm.listen(id, sid, backlog) {
                let _ = st.cm.destroy(now, id);
                return Err(cm_err(VERB, e));
            }
            st.ids.insert(id.0, Arc::downgrade(&me));
            lock(&me.st).cm = Some(id);
            Ok(())
        })?;
        if port.ctx.device().is_loopback() {
            let ip = if local.ip().is_unspecified() {
                local_ip(&port.ctx, local.is_ipv6())
            } else {
                Some(local.ip())
            };
            if let Some(ip) = ip {
                lock(&self.inner.st).announced =
                    localhost::announce(self.inner.ps, local.port(), ip);
            }
        }
        Ok(())
    }

    /// A loopback context reaches `127.0.0.1` as the address of the listener on the
    /// port (see `localhost.rs`); other addresses are themselves.
    fn through_localhost(&self, port: &Port, dst: SocketAddr, wait: Duration) -> SocketAddr {
        if dst.ip() != localhost::LOCALHOST
            || !port.ctx.device().is_loopback()
            || port::sgid_index(&port.ctx, &cma::ip_to_gid(dst.ip())).is_some()
        {
            return dst;
        }
        match localhost::find_within(self.inner.ps, dst.port(), wait) {
            Some(ip) => SocketAddr::new(ip, dst.port()),
            None => dst,
        }
    }

    /// `rdma_resolve_addr`: picks the device that reaches `dst` (from `src`, or the
    /// address the host routes from) and queues [`EventKind::AddrResolved`], or
    /// [`EventKind::AddrError`] when no device has an address of the family.
    /// EINVAL for an unspecified or multicast destination or mixed families. On the
    /// soft device the answer is immediate (a GID is the IP address; the carrier
    /// resolves neighbours itself), so the timeout is never reached; on a system device
    /// the kernel resolves the neighbour within it.
    pub fn resolve_addr(
        &self,
        src: Option<IpAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        const VERB: &str = "rdma_resolve_addr";
        let d = dst.ip();
        if d.is_unspecified() || d.is_multicast() {
            return Err(errno(VERB, libc::EINVAL));
        }
        if src.is_some_and(|s| s.is_ipv6() != d.is_ipv6()) {
            return Err(errno(VERB, libc::EINVAL));
        }
        if let Some(from) = src.or_else(|| route_source(d).ok()) {
            self.system_for(from)?;
        }
        if let Some(s) = self.sys() {
            return system::resolve_addr(self, &s, src, dst, timeout);
        }
        let has_port = lock(&self.inner.st).port.is_some();
        let port = if has_port {
            self.ensure_port(d)?
        } else {
            let from = match src {
                Some(s) => s,
                None => match route_source(d) {
                    Ok(s) => s,
                    Err(e) => {
                        self.push(
                            EventKind::AddrError,
                            -e.raw_os_error().unwrap_or(libc::EHOSTUNREACH),
                        );
                        return Ok(());
                    }
                },
            };
            match self.ensure_port(from) {
                Ok(p) => p,
                Err(e) => {
                    self.push(EventKind::AddrError, -e.errno());
                    return Ok(());
                }
            }
        };
        let Some(mine) = src.or_else(|| Self::local_ip_of(&port, d.is_ipv6())) else {
            self.push(EventKind::AddrError, -libc::EADDRNOTAVAIL);
            return Ok(());
        };
        {
            let mut s = lock(&self.inner.st);
            let lp = s.local.map_or_else(ephemeral_port, |a| a.port());
            s.local = Some(SocketAddr::new(mine, lp));
            s.remote = Some(self.through_localhost(&port, dst, Duration::ZERO));
        }
        self.push(EventKind::AddrResolved, 0);
        Ok(())
    }

    /// `rdma_resolve_route` (immediate, as [`CmId::resolve_addr`]): on RoCE the path is the two GIDs (the IP addresses), the
    /// device's path MTU and rdma_cm's packet life time. Queues
    /// [`EventKind::RouteResolved`] or [`EventKind::RouteError`] (a source address
    /// not in the GID table). EINVAL before [`CmId::resolve_addr`].
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        if let Some(s) = self.sys() {
            return system::resolve_route(&s, timeout);
        }
        let (port, local, remote) = {
            let s = lock(&self.inner.st);
            (s.port.clone(), s.local, s.remote)
        };
        let (Some(port), Some(local), Some(remote)) = (port, local, remote) else {
            return Err(errno("rdma_resolve_route", libc::EINVAL));
        };
        let lg = cma::ip_to_gid(local.ip());
        if port::sgid_index(&port.ctx, &lg).is_none() {
            self.push(EventKind::RouteError, -libc::EADDRNOTAVAIL);
            return Ok(());
        }
        let mut path = Path::roce(lg, cma::ip_to_gid(remote.ip()));
        path.mtu = port.ctx.device().active_mtu() as u8;
        lock(&self.inner.st).route = Some(path);
        self.push(EventKind::RouteResolved, 0);
        Ok(())
    }

    /// `rdma_connect`: a REQ (RC) or SIDR_REQ (UD) to the resolved peer, with
    /// rdma_cm's header before the private data. The QP (from [`CmId::create_qp`]) is
    /// moved to RTS when the REP comes; [`EventKind::Established`] follows (or
    /// [`EventKind::Rejected`], [`EventKind::Unreachable`]).
    pub fn connect(&self, p: &ConnParam) -> Result<()> {
        const VERB: &str = "rdma_connect";
        if let Some(s) = self.sys() {
            return system::connect(self, &s, p);
        }
        let (port, local, remote, route, qp, psn, timeouts) = {
            let s = lock(&self.inner.st);
            if s.cm.is_some() {
                return Err(errno(VERB, libc::EINVAL));
            }
            (
                s.port.clone(),
                s.local,
                s.remote,
                s.route,
                s.qp.clone(),
                s.psn,
                s.timeouts,
            )
        };
        let (Some(port), Some(local), Some(remote), Some(mut route), Some(qp)) =
            (port, local, remote, route, qp)
        else {
            return Err(errno(VERB, libc::EINVAL));
        };
        let mut remote = remote;
        if remote.ip() == localhost::LOCALHOST && port.ctx.device().is_loopback() {
            let r = self.through_localhost(&port, remote, LOCALHOST_WAIT);
            if r.ip() == localhost::LOCALHOST {
                // Nobody listens on the port: what the kernel's CM answers a REQ for
                // a service nobody listens on (a REJ "invalid service ID"; for UD, a
                // SIDR_REP "unsupported"), without a REQ to nobody's address.
                if self.inner.ps == PortSpace::Udp {
                    self.push(
                        EventKind::Unreachable,
                        i32::from(consts::sidr_status::UNSUPPORTED),
                    );
                } else {
                    self.push(
                        EventKind::Rejected,
                        i32::from(consts::rej::INVALID_SERVICE_ID),
                    );
                }
                return Ok(());
            }
            // The listener came after the address was resolved.
            remote = r;
            route.remote_gid = cma::ip_to_gid(r.ip());
            let mut s = lock(&self.inner.st);
            s.remote = Some(r);
            s.route = Some(route);
        }
        let hdr = CmaHeader {
            src_port: local.port(),
            src: local.ip(),
            dst: remote.ip(),
        };
        let sid = cma::service_id(self.inner.ps, remote.port());
        let me = self.inner.clone();
        let (resp_timeout, retries) =
            timeouts.unwrap_or((consts::CMA_CM_RESPONSE_TIMEOUT, consts::CMA_MAX_CM_RETRIES));
        if self.inner.ps == PortSpace::Udp {
            let pd = hdr
                .encode(&p.private_data, consts::private_len::SIDR_REQ)
                .map_err(|e| cm_err(VERB, e))?;
            return port.with(|st, now| {
                let id = st.cm.create_id();
                let r = st.cm.sidr_request(
                    now,
                    id,
                    &SidrParams {
                        service_id: sid,
                        remote_gid: route.remote_gid,
                        pkey: 0xffff,
                        timeout_ms: consts::convert_to_ms(resp_timeout).max(1),
                        max_cm_retries: retries,
                        private_data: pd,
                    },
                );
                if let Err(e) = r {
                    let _ = st.cm.destroy(now, id);
                    return Err(cm_err(VERB, e));
                }
                st.ids.insert(id.0, Arc::downgrade(&me));
                lock(&me.st).cm = Some(id);
                Ok(())
            });
        }
        let pd = hdr
            .encode(&p.private_data, consts::private_len::REQ)
            .map_err(|e| cm_err(VERB, e))?;
        let mut cp = ConnectParams::rdma_cm(sid, qp.qp_num(), psn, route);
        cp.responder_resources = p.responder_resources;
        cp.initiator_depth = p.initiator_depth;
        cp.retry_count = p.retry_count.min(7);
        cp.rnr_retry_count = p.rnr_retry_count.min(7);
        cp.remote_cm_response_timeout = resp_timeout;
        cp.local_cm_response_timeout = resp_timeout;
        cp.max_cm_retries = retries;
        cp.private_data = pd;
        port.with(|st, now| {
            let id = st.cm.create_id();
            if let Err(e) = st.cm.connect(now, id, &cp) {
                let _ = st.cm.destroy(now, id);
                return Err(cm_err(VERB, e));
            }
            st.ids.insert(id.0, Arc::downgrade(&me));
            lock(&me.st).cm = Some(id);
            Ok(())
        })
    }

    fn port_and_id(&self, verb: &'static str) -> Result<(Arc<Port>, RawId)> {
        let s = lock(&self.inner.st);
        match (s.port.clone(), s.cm) {
            (Some(p), Some(id)) => Ok((p, id)),
            _ => Err(errno(verb, libc::EINVAL)),
        }
    }

    /// `rdma_accept` on the ID of a connect request: RC moves the ID's QP to RTS and
    /// sends the REP ([`EventKind::Established`] follows on the RTU); UD answers the
    /// SIDR_REQ with the QP's number and Q_Key.
    pub fn accept(&self, p: &ConnParam) -> Result<()> {
        const VERB: &str = "rdma_accept";
        if let Some(s) = self.sys() {
            return system::accept(self, &s, p);
        }
        let (port, id) = self.port_and_id(VERB)?;
        let (qp, psn, sidr, req) = {
            let s = lock(&self.inner.st);
            (s.qp.clone(), s.psn, s.sidr, s.req.clone())
        };
        let qp = qp.ok_or(errno(VERB, libc::EINVAL))?;
        if sidr {
            let reply = rverbs_cm::SidrReply {
                status: consts::sidr_status::SUCCESS,
                qpn: qp.qp_num(),
                qkey: port::RDMA_UDP_QKEY,
                info: Vec::new(),
                private_data: p.private_data.clone(),
            };
            return port.with(|st, now| {
                st.cm
                    .sidr_reply(now, id, &reply)
                    .map_err(|e| cm_err(VERB, e))
            });
        }
        let req = req.ok_or(errno(VERB, libc::EINVAL))?;
        let ap = rverbs_cm::AcceptParams {
            qpn: qp.qp_num(),
            starting_psn: psn,
            // cma.c `cma_accept_ib`: the consumer's values, no more than the peer
            // offers (librdmacm `ucma_valid_param` limits them to the device's).
            responder_resources: p.responder_resources.min(req.responder_resources.max(1)),
            initiator_depth: p.initiator_depth.min(req.initiator_depth.max(1)),
            rnr_retry_count: p.rnr_retry_count.min(7),
            failover_accepted: 0,
            srq: false,
            flow_control: false,
            private_data: p.private_data.clone(),
        };
        let ctx = port.ctx.clone();
        port.with(|st, now| {
            st.cm.accept(now, id, &ap).map_err(|e| cm_err(VERB, e))?;
            // The QP is at RTS before the REP leaves (librdmacm `rdma_accept`).
            if let Err(e) = port::move_qp(&ctx, &st.cm, id, &qp, true) {
                let _ = st
                    .cm
                    .reject(now, id, consts::rej::CONSUMER_DEFINED, &[], &[]);
                return Err(e);
            }
            Ok(())
        })
    }

    /// `rdma_reject` with private data: a REJ "consumer defined" (reason 28), or a
    /// SIDR reply "rejected" for UD.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        const VERB: &str = "rdma_reject";
        if let Some(s) = self.sys() {
            return system::reject(&s, private_data);
        }
        let (port, id) = self.port_and_id(VERB)?;
        let sidr = lock(&self.inner.st).sidr;
        let pd = private_data.to_vec();
        port.with(|st, now| {
            if sidr {
                let mut r = rverbs_cm::SidrReply::status(consts::sidr_status::REJECT);
                r.private_data = pd;
                st.cm.sidr_reply(now, id, &r)
            } else {
                st.cm
                    .reject(now, id, consts::rej::CONSUMER_DEFINED, &[], &pd)
            }
            .map_err(|e| cm_err(VERB, e))
        })
    }

    /// `rdma_disconnect`: the QP to ERR, then a DREQ (or the DREP to the peer's DREQ).
    pub fn disconnect(&self) -> Result<()> {
        const VERB: &str = "rdma_disconnect";
        if let Some(s) = self.sys() {
            return system::disconnect(self, &s);
        }
        let (port, id) = self.port_and_id(VERB)?;
        self.inner.qp_to_error();
        port.with(|st, now| st.cm.disconnect(now, id, &[]).map_err(|e| cm_err(VERB, e)))
    }

    /// The counters of the CM this ID runs on (MADs, drops by cause, retries).
    pub fn cm_stats(&self) -> Option<rverbs_cm::CmStats> {
        let port = lock(&self.inner.st).port.clone()?;
        let s = lock(&port.st).cm.stats();
        Some(s)
    }
}
