//! Event channels, IDs and events: the `rdma_*` calls of rping, udaddy, ucmatose,
//! rdma_server / rdma_client and perftest's `-R`, over `rverbs::cm`.
//!
//! An ID made without a channel (`rdma_create_id(NULL, ...)`, `rdma_create_ep`) is
//! synchronous, as in librdmacm: it gets a channel of its own, and each call that
//! would queue an event (resolve, connect, accept) waits for it and returns its
//! outcome; `rdma_get_request` takes a listener's connect requests.
//! Errors are librdmacm's: -1 with `errno`.

use super::*;
use crate::cq::CqObj;
use crate::pd::PdObj;
use crate::qp::QpObj;
use rverbs::cm::{CmEvent, CmId, ConnParam, EventChannel, EventKind, PortSpace};
use std::collections::HashMap;
use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Duration;

#[repr(C)]
pub(super) struct ChanObj {
    c: rdma_event_channel,
    pub(super) rs: EventChannel,
}

/// CQs and channels `rdma_create_qp` made for an ID that brought none (destroyed
/// with its QP, as librdmacm's `ucma_destroy_cqs`).
#[derive(Default)]
struct OwnCqs {
    send: Option<(*mut ibv_cq, *mut ibv_comp_channel)>,
    recv: Option<(*mut ibv_cq, *mut ibv_comp_channel)>,
}

#[repr(C)]
pub(super) struct IdObj {
    pub(super) c: rdma_cm_id,
    pub(super) rs: CmId,
    /// A synchronous ID's own channel.
    pub(super) sync: Option<Box<ChanObj>>,
    own: OwnCqs,
    /// The QP this ID's `rdma_create_qp` made (`rdma_destroy_qp` destroys it).
    qp: *mut ibv_qp,
    /// `rdma_create_ep` on a passive ID: what each `rdma_get_request` makes a QP with.
    pub(super) ep_qp: Option<(ibv_qp_init_attr, *mut ibv_pd)>,
    /// The event a synchronous call consumed (`id->event`), freed by the next.
    pub(super) last: *mut EventObj,
}

/// An event and the private data its parameters point to.
#[repr(C)]
pub(super) struct EventObj {
    pub(super) c: rdma_cm_event,
    data: Vec<u8>,
}

/// The C ID of each rverbs ID the program holds (events name rverbs IDs).
static IDS: Mutex<Option<HashMap<CmId, usize>>> = Mutex::new(None);

fn register(rs: &CmId, p: *mut IdObj) {
    lock(&IDS)
        .get_or_insert_with(HashMap::new)
        .insert(rs.clone(), p as usize);
}

fn lookup(rs: &CmId) -> Option<*mut IdObj> {
    lock(&IDS)
        .as_ref()
        .and_then(|m| m.get(rs))
        .map(|p| *p as *mut IdObj)
}

pub(super) fn io_errno(e: &rverbs::Error) -> c_int {
    errno_of(e)
}

/// # Safety
/// `p` is NULL or an ID of this library that was not destroyed.
pub(super) unsafe fn id_obj<'a>(p: *mut rdma_cm_id) -> Result<&'a mut IdObj, c_int> {
    // SAFETY: the caller's promise; IdObj starts with its rdma_cm_id.
    unsafe { (p as *mut IdObj).as_mut() }.ok_or(libc::EINVAL)
}

/// # Safety
/// `p` is NULL or a channel of this library that was not destroyed.
unsafe fn chan_obj<'a>(p: *mut rdma_event_channel) -> Result<&'a ChanObj, c_int> {
    // SAFETY: the caller's promise; ChanObj starts with its rdma_event_channel.
    unsafe { arg(p as *const ChanObj) }
}

/// A channel whose descriptor blocks until the program sets `O_NONBLOCK` on it (as
/// librdmacm's does): [`rdma_get_cm_event`] then returns EAGAIN instead of waiting.
/// rverbs reads the descriptor only while it counts a queued event, so it never
/// blocks there itself.
fn new_chan() -> Result<Box<ChanObj>, c_int> {
    let rs = EventChannel::new().map_err(|e| io_errno(&e))?;
    let fd = rs.as_fd().as_raw_fd();
    // SAFETY: fcntl on the channel's own descriptor.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(Box::new(ChanObj {
        c: rdma_event_channel { fd },
        rs,
    }))
}

unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    ret_ptr(|| {
        init();
        Ok(Box::into_raw(new_chan()?) as *mut rdma_event_channel)
    })
}
export!(rdma_create_event_channel, "RDMACM_1.0");

unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    ret_void(|| {
        if !channel.is_null() {
            // SAFETY: made by Box::into_raw in rdma_create_event_channel; the caller
            // gives it up (events still queued go with it).
            drop(unsafe { Box::from_raw(channel as *mut ChanObj) });
        }
    })
}
export!(rdma_destroy_event_channel, "RDMACM_1.0");

pub(super) fn port_space(ps: rdma_port_space) -> Result<PortSpace, c_int> {
    match ps {
        RDMA_PS_TCP => Ok(PortSpace::Tcp),
        RDMA_PS_UDP => Ok(PortSpace::Udp),
        // The IB and IPoIB port spaces name no IP address: not on RoCE here.
        _ => Err(libc::EPROTONOSUPPORT),
    }
}

fn c_qp_type(ps: PortSpace) -> ibv_qp_type {
    match ps {
        PortSpace::Udp => 4,
        _ => 2,
    }
}

/// A new C ID over `rs`, reporting on `chan` (synchronous when NULL).
pub(super) fn new_id(
    rs: CmId,
    chan: *mut rdma_event_channel,
    context: *mut c_void,
    ps: rdma_port_space,
) -> Result<*mut IdObj, c_int> {
    let sync = if chan.is_null() {
        let c = new_chan()?;
        rs.migrate(&c.rs);
        Some(c)
    } else {
        None
    };
    // SAFETY: rdma_cm_id is plain data (pointers, integers, sockaddr storage).
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.context = context;
    c.ps = ps;
    c.qp_type = c_qp_type(rs.port_space());
    let p = Box::into_raw(Box::new(IdObj {
        c,
        rs,
        sync,
        own: OwnCqs::default(),
        qp: std::ptr::null_mut(),
        ep_qp: None,
        last: std::ptr::null_mut(),
    }));
    // SAFETY: just made.
    let o = unsafe { &mut *p };
    o.c.channel = match &mut o.sync {
        Some(s) => &mut s.c,
        None => chan,
    };
    register(&o.rs, p);
    refresh(o);
    Ok(p)
}

/// Copies what the rverbs ID knows into the C ID: its context, addresses and GIDs.
pub(super) fn refresh(o: &mut IdObj) {
    if let Some(ctx) = o.rs.context() {
        if let Ok(c) = c_context(&ctx.device().name) {
            o.c.verbs = c;
            o.c.port_num = 1;
        }
    }
    if let Some(a) = o.rs.local_addr() {
        put_sockaddr(&mut o.c.route.addr.src_storage, a);
        o.c.route.addr.ibaddr.sgid = ip_gid(a.ip());
    }
    if let Some(a) = o.rs.peer_addr() {
        put_sockaddr(&mut o.c.route.addr.dst_storage, a);
        o.c.route.addr.ibaddr.dgid = ip_gid(a.ip());
    }
    o.c.route.addr.ibaddr.pkey = 0xffffu16.to_be();
}

unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    ret_neg(|| {
        init();
        // SAFETY: the caller's out-pointer.
        let out = unsafe { out(id) }?;
        let chan = if channel.is_null() {
            None
        } else {
            // SAFETY: the caller's channel.
            Some(unsafe { chan_obj(channel) }?)
        };
        let space = port_space(ps)?;
        let tmp;
        let on = match chan {
            Some(c) => &c.rs,
            None => {
                tmp = EventChannel::new().map_err(|e| io_errno(&e))?;
                &tmp
            }
        };
        let rs = CmId::create(on, space).map_err(|e| io_errno(&e))?;
        *out = new_id(rs, channel, context, ps)? as *mut rdma_cm_id;
        Ok(0)
    })
}
export!(rdma_create_id, "RDMACM_1.0");

/// Destroys what `rdma_create_qp` made for the ID.
pub(super) fn destroy_qp(o: &mut IdObj) {
    o.rs.detach_qp();
    if !o.qp.is_null() {
        // SAFETY: the QP this ID created; the program gives it up with the ID's.
        unsafe { crate::qp::ibv_destroy_qp(o.qp) };
        o.qp = std::ptr::null_mut();
    }
    o.c.qp = std::ptr::null_mut();
    for (cq, ch) in [o.own.send.take(), o.own.recv.take()].into_iter().flatten() {
        // SAFETY: a CQ and channel this ID created, used by nothing else.
        unsafe {
            crate::cq::ibv_destroy_cq(cq);
            crate::cq::ibv_destroy_comp_channel(ch);
        }
    }
}

fn free_last(o: &mut IdObj) {
    if !o.last.is_null() {
        // SAFETY: an event this library made and kept for the ID.
        drop(unsafe { Box::from_raw(o.last) });
        o.last = std::ptr::null_mut();
        o.c.event = std::ptr::null_mut();
    }
}

pub(super) unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID.
        let o = unsafe { id_obj(id) }?;
        if let Some(m) = lock(&IDS).as_mut() {
            m.remove(&o.rs);
        }
        free_last(o);
        // SAFETY: made by Box::into_raw in new_id; the caller gives it up. Its QP
        // stays the program's (librdmacm's rdma_destroy_id leaves it too).
        drop(unsafe { Box::from_raw(id as *mut IdObj) });
        Ok(0)
    })
}
export!(rdma_destroy_id, "RDMACM_1.0");

unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and address.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: as above.
        let a = unsafe { sockaddr_in(addr) }?;
        o.rs.bind_addr(a).map_err(|e| io_errno(&e))?;
        refresh(o);
        Ok(0)
    })
}
export!(rdma_bind_addr, "RDMACM_1.0");

fn timeout(ms: c_int) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// A synchronous ID waits for the event its call queued, keeps it as `id->event`, and
/// turns a failure into an errno (librdmacm's `ucma_complete`).
pub(super) fn complete(o: &mut IdObj) -> Result<(), c_int> {
    let Some(ch) = o.sync.as_ref().map(|s| s.rs.clone()) else {
        return Ok(());
    };
    let Some(e) = ch.get_event(None) else {
        return Err(libc::EIO);
    };
    free_last(o);
    let status = e.status;
    let kind = e.kind;
    let ev = make_event(e, None)?;
    o.last = ev;
    // SAFETY: just made.
    o.c.event = unsafe { &mut (*ev).c };
    refresh(o);
    match kind {
        EventKind::AddrResolved | EventKind::RouteResolved | EventKind::Established => {
            if status != 0 {
                Err(-status)
            } else {
                Ok(())
            }
        }
        EventKind::Rejected => Err(libc::ECONNREFUSED),
        _ if status < 0 => Err(-status),
        _ => Err(libc::ECONNREFUSED),
    }
}

unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and addresses (src may be NULL).
        let o = unsafe { id_obj(id) }?;
        // SAFETY: as above.
        let dst = unsafe { sockaddr_in(dst_addr) }?;
        let src = if src_addr.is_null() {
            None
        } else {
            // SAFETY: as above.
            let s = unsafe { sockaddr_in(src_addr) }?;
            (!s.ip().is_unspecified()).then_some(s.ip())
        };
        o.rs.resolve_addr(src, dst, timeout(timeout_ms))
            .map_err(|e| io_errno(&e))?;
        refresh(o);
        complete(o)?;
        Ok(0)
    })
}
export!(rdma_resolve_addr, "RDMACM_1.0");

unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID.
        let o = unsafe { id_obj(id) }?;
        o.rs.resolve_route(timeout(timeout_ms))
            .map_err(|e| io_errno(&e))?;
        complete(o)?;
        Ok(0)
    })
}
export!(rdma_resolve_route, "RDMACM_1.0");

/// A completion channel and CQ of `n` entries for the ID (`ucma_create_cqs`).
fn own_cq(o: &IdObj, n: u32) -> Result<(*mut ibv_cq, *mut ibv_comp_channel), c_int> {
    // SAFETY: our entry points on the ID's context.
    let ch = unsafe { crate::cq::ibv_create_comp_channel(o.c.verbs) };
    if ch.is_null() {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM));
    }
    let id = &o.c as *const rdma_cm_id as *mut c_void;
    // SAFETY: as above; the channel was just made.
    let cq = unsafe { crate::cq::ibv_create_cq(o.c.verbs, n.max(1) as c_int, id, ch, 0) };
    if cq.is_null() {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM);
        // SAFETY: the channel just made, unused.
        unsafe { crate::cq::ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok((cq, ch))
}

/// The PD of the ID's device for callers that give none (librdmacm's `ucma_get_pd`:
/// one per device, kept for the process).
fn default_pd(verbs: *mut ibv_context) -> Result<*mut ibv_pd, c_int> {
    static PDS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
    let mut all = lock(&PDS);
    if let Some((_, pd)) = all.iter().find(|(c, _)| *c == verbs as usize) {
        return Ok(*pd as *mut ibv_pd);
    }
    // SAFETY: our entry point on the ID's context.
    let pd = unsafe { crate::pd::ibv_alloc_pd(verbs) };
    if pd.is_null() {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM));
    }
    all.push((verbs as usize, pd as usize));
    Ok(pd)
}

/// `rdma_create_qp(_ex)`: the QP on the ID's context, CQs made when absent, handed to
/// the CM (to INIT; UD on to RTS).
pub(super) fn create_qp(
    o: &mut IdObj,
    pd: *mut ibv_pd,
    a: &ibv_qp_init_attr_ex,
) -> Result<(), c_int> {
    if o.c.verbs.is_null() || !o.c.qp.is_null() {
        return Err(libc::EINVAL);
    }
    let pd = if pd.is_null() {
        default_pd(o.c.verbs)?
    } else {
        pd
    };
    // SAFETY: the caller's PD.
    if unsafe { PdObj::from_c(pd) }?.c.context != o.c.verbs {
        return Err(libc::EINVAL);
    }
    let mut a = *a;
    a.pd = pd;
    let mut made = OwnCqs::default();
    let cleanup = |m: &mut OwnCqs| {
        for (cq, ch) in [m.send.take(), m.recv.take()].into_iter().flatten() {
            // SAFETY: made just now, unused.
            unsafe {
                crate::cq::ibv_destroy_cq(cq);
                crate::cq::ibv_destroy_comp_channel(ch);
            }
        }
    };
    if a.send_cq.is_null() {
        let (cq, ch) = own_cq(o, a.cap.max_send_wr)?;
        made.send = Some((cq, ch));
        a.send_cq = cq;
    }
    if a.recv_cq.is_null() {
        match own_cq(o, a.cap.max_recv_wr) {
            Ok((cq, ch)) => {
                made.recv = Some((cq, ch));
                a.recv_cq = cq;
            }
            Err(e) => {
                cleanup(&mut made);
                return Err(e);
            }
        }
    }
    a.comp_mask |= 1; // IBV_QP_INIT_ATTR_PD
                      // SAFETY: our entry point with the attributes made above.
    let qp = unsafe { crate::qp_ex::create_qp_ex(o.c.verbs, &mut a) };
    if qp.is_null() {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL);
        cleanup(&mut made);
        return Err(e);
    }
    // SAFETY: the QP just made.
    let q = unsafe { QpObj::from_c(qp) }?;
    if let Err(e) = o.rs.attach_qp(Arc::clone(&q.rs)) {
        // SAFETY: the QP just made, unused.
        unsafe { crate::qp::ibv_destroy_qp(qp) };
        cleanup(&mut made);
        return Err(io_errno(&e));
    }
    // The CM moved it: the C view of its state follows (INIT; UD: RTS).
    // SAFETY: the live QP made above.
    unsafe { (*qp).state = if a.qp_type == 4 { 3 } else { 1 } };
    o.qp = qp;
    o.c.qp = qp;
    o.c.pd = pd;
    o.c.send_cq = a.send_cq;
    o.c.recv_cq = a.recv_cq;
    // SAFETY: the caller's CQs (checked by create_qp_ex).
    unsafe {
        o.c.send_cq_channel = CqObj::from_c(a.send_cq)?.c.channel;
        o.c.recv_cq_channel = CqObj::from_c(a.recv_cq)?.c.channel;
    }
    o.c.srq = a.srq;
    o.own = made;
    Ok(())
}

pub(super) fn ex_of(a: &ibv_qp_init_attr) -> ibv_qp_init_attr_ex {
    // SAFETY: ibv_qp_init_attr_ex is plain data.
    let mut x: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    x.qp_context = a.qp_context;
    x.send_cq = a.send_cq;
    x.recv_cq = a.recv_cq;
    x.srq = a.srq;
    x.cap = a.cap;
    x.qp_type = a.qp_type;
    x.sq_sig_all = a.sq_sig_all;
    x
}

unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and attributes.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: as above.
        let a = unsafe { out(qp_init_attr) }?;
        create_qp(o, pd, &ex_of(a))?;
        // librdmacm gives back the CQs it made in the caller's attributes.
        a.send_cq = o.c.send_cq;
        a.recv_cq = o.c.recv_cq;
        Ok(0)
    })
}
export!(rdma_create_qp, "RDMACM_1.0");

unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    qp_init_attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and attributes.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: as above.
        let a = unsafe { out(qp_init_attr) }?;
        let pd = if a.comp_mask & 1 != 0 {
            a.pd
        } else {
            std::ptr::null_mut()
        };
        create_qp(o, pd, a)?;
        a.send_cq = o.c.send_cq;
        a.recv_cq = o.c.recv_cq;
        Ok(0)
    })
}
export!(rdma_create_qp_ex, "RDMACM_1.0");

unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    ret_void(|| {
        // SAFETY: the caller's ID.
        if let Ok(o) = unsafe { id_obj(id) } {
            destroy_qp(o);
        }
    })
}
export!(rdma_destroy_qp, "RDMACM_1.0");

/// The private data of a C parameter block.
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes.
unsafe fn private(p: *const c_void, len: u8) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) }.to_vec()
}

/// rverbs' connection parameters from C ones (NULL: librdmacm's defaults), the
/// resources no more than the device gives (librdmacm `ucma_valid_param`).
///
/// # Safety
/// `p` is NULL or the caller's parameters.
unsafe fn rs_conn_param(o: &IdObj, p: *const rdma_conn_param) -> Result<ConnParam, c_int> {
    let mut cp = ConnParam::default();
    // SAFETY: the caller's promise.
    let Some(p) = (unsafe { p.as_ref() }) else {
        return Ok(cp);
    };
    let (max_resp, max_init) = match o.rs.context().map(|c| c.query_device()) {
        Some(Ok(a)) => (
            a.max_qp_rd_atom.min(255) as u8,
            a.max_qp_init_rd_atom.min(255) as u8,
        ),
        _ => (1, 1),
    };
    // SAFETY: the caller's private data of that length.
    cp.private_data = unsafe { private(p.private_data, p.private_data_len) };
    cp.responder_resources = p.responder_resources.min(max_resp);
    cp.initiator_depth = p.initiator_depth.min(max_init);
    cp.retry_count = p.retry_count.min(7);
    cp.rnr_retry_count = p.rnr_retry_count.min(7);
    Ok(cp)
}

unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID.
        let o = unsafe { id_obj(id) }?;
        // The CM moves the ID's QP; a QP the program manages itself (`qp_num` with no
        // QP on the ID) it cannot move.
        if o.c.qp.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's parameters (or NULL).
        let cp = unsafe { rs_conn_param(o, conn_param) }?;
        o.rs.connect(&cp).map_err(|e| io_errno(&e))?;
        complete(o)?;
        Ok(0)
    })
}
export!(rdma_connect, "RDMACM_1.0");

unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID.
        let o = unsafe { id_obj(id) }?;
        o.rs.listen(backlog.max(0) as u32)
            .map_err(|e| io_errno(&e))?;
        refresh(o);
        Ok(0)
    })
}
export!(rdma_listen, "RDMACM_1.0");

unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID.
        let o = unsafe { id_obj(id) }?;
        if o.c.qp.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's parameters (or NULL).
        let cp = unsafe { rs_conn_param(o, conn_param) }?;
        o.rs.accept(&cp).map_err(|e| io_errno(&e))?;
        // UD answers at once (a SIDR reply): nothing to wait for.
        if o.rs.port_space() != PortSpace::Udp {
            complete(o)?;
        }
        Ok(0)
    })
}
export!(rdma_accept, "RDMACM_1.0");

unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and private data.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: as above.
        let pd = unsafe { private(private_data, private_data_len) };
        o.rs.reject(&pd).map_err(|e| io_errno(&e))?;
        Ok(0)
    })
}
export!(rdma_reject, "RDMACM_1.0");

unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID.
        let o = unsafe { id_obj(id) }?;
        o.rs.disconnect().map_err(|e| io_errno(&e))?;
        Ok(0)
    })
}
export!(rdma_disconnect, "RDMACM_1.0");

/// The C event of an rverbs one; a connect request gets its new C ID (on `chan`, or
/// synchronous with NULL) with the listener's user context.
pub(super) fn make_event(
    e: CmEvent,
    chan: Option<*mut rdma_event_channel>,
) -> Result<*mut EventObj, c_int> {
    let listen = e.listen_id.as_ref().and_then(lookup);
    let id = match lookup(&e.id) {
        Some(p) => p,
        None if e.kind == EventKind::ConnectRequest => {
            // SAFETY: a live listener of this library (registered until destroyed).
            let l = listen.map(|l| unsafe { &*l });
            let ctx = l.map_or(std::ptr::null_mut(), |l| l.c.context);
            let ps = l.map_or(RDMA_PS_TCP, |l| l.c.ps);
            new_id(e.id.clone(), chan.unwrap_or(std::ptr::null_mut()), ctx, ps)?
        }
        None => return Err(libc::ENOENT),
    };
    // SAFETY: registered IDs are live.
    refresh(unsafe { &mut *id });
    let kind = match e.kind {
        EventKind::AddrResolved => RDMA_CM_EVENT_ADDR_RESOLVED,
        EventKind::AddrError => RDMA_CM_EVENT_ADDR_ERROR,
        EventKind::RouteResolved => RDMA_CM_EVENT_ROUTE_RESOLVED,
        EventKind::RouteError => RDMA_CM_EVENT_ROUTE_ERROR,
        EventKind::ConnectRequest => RDMA_CM_EVENT_CONNECT_REQUEST,
        EventKind::ConnectError => RDMA_CM_EVENT_CONNECT_ERROR,
        EventKind::Unreachable => RDMA_CM_EVENT_UNREACHABLE,
        EventKind::Rejected => RDMA_CM_EVENT_REJECTED,
        EventKind::Established => RDMA_CM_EVENT_ESTABLISHED,
        EventKind::Disconnected => RDMA_CM_EVENT_DISCONNECTED,
        EventKind::TimewaitExit => RDMA_CM_EVENT_TIMEWAIT_EXIT,
    };
    // SAFETY: rdma_cm_event is plain data.
    let mut c: rdma_cm_event = unsafe { std::mem::zeroed() };
    c.id = id as *mut rdma_cm_id;
    c.listen_id = listen.map_or(std::ptr::null_mut(), |l| l as *mut rdma_cm_id);
    c.event = kind;
    c.status = e.status;
    let mut b = Box::new(EventObj {
        c,
        data: e.private_data,
    });
    let (ptr, len) = if b.data.is_empty() {
        (std::ptr::null(), 0)
    } else {
        (
            b.data.as_ptr() as *const c_void,
            b.data.len().min(255) as u8,
        )
    };
    if let Some(ud) = e.ud {
        // SAFETY: ibv_ah_attr is plain data.
        let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
        ah.grh.dgid = ibv_gid {
            raw: ud.ah_attr.av.dgid.0,
        };
        ah.grh.sgid_index = ud.ah_attr.av.sgid_index;
        ah.grh.hop_limit = ud.ah_attr.av.hop_limit;
        ah.grh.traffic_class = ud.ah_attr.av.traffic_class;
        ah.grh.flow_label = ud.ah_attr.av.flow_label;
        ah.is_global = 1;
        ah.port_num = ud.ah_attr.port_num.max(1);
        b.c.param.ud = rdma_ud_param {
            private_data: ptr,
            private_data_len: len,
            ah_attr: ah,
            qp_num: ud.qp_num,
            qkey: ud.qkey,
        };
    } else {
        let req = e.id.request_params().unwrap_or_default();
        b.c.param.conn = rdma_conn_param {
            private_data: ptr,
            private_data_len: len,
            responder_resources: req.responder_resources,
            initiator_depth: req.initiator_depth,
            flow_control: 0,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            srq: 0,
            qp_num: 0,
        };
    }
    Ok(Box::into_raw(b))
}

unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's channel and out-pointer.
        let ch = unsafe { chan_obj(channel) }?;
        // SAFETY: as above.
        let out = unsafe { out(event) }?;
        // A program may make the descriptor non-blocking (librdmacm then returns
        // EAGAIN when no event waits).
        // SAFETY: fcntl on the channel's own descriptor.
        let flags = unsafe { libc::fcntl(ch.c.fd, libc::F_GETFL) };
        let nonblock = flags >= 0 && flags & libc::O_NONBLOCK != 0;
        loop {
            let e = if nonblock {
                ch.rs.try_get_event()
            } else {
                ch.rs.get_event(None)
            };
            let Some(e) = e else {
                return Err(libc::EAGAIN);
            };
            match make_event(e, Some(channel)) {
                Ok(p) => {
                    // SAFETY: just made.
                    *out = unsafe { &mut (*p).c };
                    return Ok(0);
                }
                // An event for an ID the program destroyed: nobody to tell.
                Err(libc::ENOENT) => continue,
                Err(e) => return Err(e),
            }
        }
    })
}
export!(rdma_get_cm_event, "RDMACM_1.0");

unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    ret_neg(|| {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: made by Box::into_raw in make_event (EventObj starts with its
        // rdma_cm_event); the caller gives it up.
        drop(unsafe { Box::from_raw(event as *mut EventObj) });
        Ok(0)
    })
}
export!(rdma_ack_cm_event, "RDMACM_1.0");

unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID.
        let o = unsafe { id_obj(id) }?;
        if channel.is_null() {
            let c = new_chan()?;
            o.rs.migrate(&c.rs);
            o.sync = Some(c);
            o.c.channel = &mut o.sync.as_mut().expect("just set").c;
        } else {
            // SAFETY: the caller's channel.
            let ch = unsafe { chan_obj(channel) }?;
            o.rs.migrate(&ch.rs);
            o.c.channel = channel;
            o.sync = None;
        }
        Ok(0)
    })
}
export!(rdma_migrate_id, "RDMACM_1.0");

unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID.
        let _ = unsafe { id_obj(id) }?;
        if optval.is_null() {
            return Err(libc::EINVAL);
        }
        // As the kernel's `rdma_set_option` checks them (ucma.c): the size of each.
        let want = match (level, optname) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS | RDMA_OPTION_ID_ACK_TIMEOUT) => 1,
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY) => 4,
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => return Err(libc::EINVAL),
            _ => return Err(libc::ENOSYS),
        };
        if optlen != want {
            return Err(libc::EINVAL);
        }
        // Accepted: type of service and ACK timeout are the path's defaults on this
        // device (CM traffic class 0, the QP's timeout from the CM), and port reuse
        // and v6-only change no binding here.
        Ok(0)
    })
}
export!(rdma_set_option, "RDMACM_1.0");

fn port_of(st: &libc::sockaddr_storage) -> u16 {
    // SAFETY: the storage holds an address this library wrote (or zeroes).
    unsafe { sockaddr_in(st as *const _ as *const libc::sockaddr) }
        .map_or(0, |a| a.port())
        .to_be()
}

unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    ret_val(0, || {
        // SAFETY: the caller's ID.
        unsafe { id_obj(id) }.map_or(0, |o| port_of(&o.c.route.addr.src_storage))
    })
}
export!(rdma_get_src_port, "RDMACM_1.0");

unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    ret_val(0, || {
        // SAFETY: the caller's ID.
        unsafe { id_obj(id) }.map_or(0, |o| port_of(&o.c.route.addr.dst_storage))
    })
}
export!(rdma_get_dst_port, "RDMACM_1.0");

/// `rdma_establish`: the program's own QP is connected (after `CONNECT_RESPONSE`).
/// This CM moves the ID's QP itself and never reports that event, so there is
/// nothing to establish: EINVAL, as librdmacm answers an ID in another state.
unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID.
        let _ = unsafe { id_obj(id) }?;
        Err(libc::EINVAL)
    })
}
export!(rdma_establish, "RDMACM_1.2");

/// `rdma_init_qp_attr` for the INIT state (port, P_Key index, access or Q_Key);
/// later states are the CM's to set on the ID's own QP (EINVAL).
unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's ID and out-pointers.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: as above.
        let a = unsafe { out(qp_attr) }?;
        // SAFETY: as above.
        let m = unsafe { out(qp_attr_mask) }?;
        if a.qp_state != 1 || o.c.verbs.is_null() {
            return Err(libc::EINVAL);
        }
        a.port_num = 1;
        a.pkey_index = 0;
        // IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT, and QKEY or ACCESS_FLAGS.
        *m = 1 | (1 << 4) | (1 << 5);
        if o.rs.port_space() == PortSpace::Udp {
            a.qkey = RDMA_UDP_QKEY;
            *m |= 1 << 6;
        } else {
            // IBV_ACCESS_LOCAL_WRITE: remote rights come with the connection.
            a.qp_access_flags = 1;
            *m |= 1 << 3;
        }
        Ok(0)
    })
}
export!(rdma_init_qp_attr, "RDMACM_1.2");

/// `rdma_get_devices`: the C context of every device (a NULL-terminated array).
unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    ret_ptr(|| {
        init();
        let infos = rverbs::devices().map_err(|e| errno_of(&e))?;
        let ctxs: Vec<*mut ibv_context> = infos
            .iter()
            .filter_map(|d| c_context(&d.name).ok())
            .collect();
        // SAFETY: calloc of n+1 pointers; freed by rdma_free_devices.
        let arr = unsafe { libc::calloc(ctxs.len() + 1, std::mem::size_of::<usize>()) }
            as *mut *mut ibv_context;
        if arr.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, c) in ctxs.iter().enumerate() {
            // SAFETY: i < len, inside the allocation.
            unsafe { *arr.add(i) = *c };
        }
        // SAFETY: NULL or the caller's int.
        if let Some(n) = unsafe { num_devices.as_mut() } {
            *n = ctxs.len() as c_int;
        }
        Ok(arr)
    })
}
export!(rdma_get_devices, "RDMACM_1.0");

unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: the array rdma_get_devices returned (or NULL); its contexts stay open.
    ret_void(|| unsafe { libc::free(list as *mut c_void) })
}
export!(rdma_free_devices, "RDMACM_1.0");
