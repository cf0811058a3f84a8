//! Queue pairs: create / modify / query / destroy, and the posting ops verbs.h's
//! `ibv_post_send`, `ibv_post_recv` and `ibv_post_srq_recv` inlines call.
//!
//! A C work request names memory by address and lkey; it becomes the engine's work
//! request as is (the engine checks keys, ranges, PDs and access, as a device does).
//! INLINE data may come from any caller memory: it is copied at post time into the
//! QP's own small registered buffer, from which the engine takes its copy.

use crate::context::Ctx;
use crate::cq::CqObj;
use crate::pd::{AhObj, PdObj, SrqObj};
use crate::*;
use rverbs::{Error, QpAttr, QpAttrMask, QpState};
use rverbs_engine::{
    Errno, RecvWr, SendFlags, SendWr, SgList, Sge, UdDest, VecMemory, VerbError, WrOpcode,
};
use rverbs_ibverbs::types::*;
use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// The QP's buffer for INLINE sends.
pub(crate) struct Scratch {
    pub mem: Arc<VecMemory>,
    pub mr: rverbs::ffi::ForeignMr,
}

/// Requests being built between `ibv_wr_start` and `ibv_wr_complete`.
#[derive(Default)]
pub(crate) struct Build {
    pub wrs: Vec<SendWr>,
    /// INLINE data of the request at the same index (copied when it was set).
    pub inline: Vec<Option<Vec<u8>>>,
    pub err: Option<Error>,
}

#[repr(C)]
pub(crate) struct QpObj {
    pub c: ibv_qp_ex,
    pub rs: Arc<rverbs::Qp>,
    pub pd: *const PdObj,
    pub send_cq: *const CqObj,
    pub recv_cq: *const CqObj,
    pub srq: *const SrqObj,
    pub cap: ibv_qp_cap,
    pub sq_sig_all: bool,
    pub scratch: Option<Scratch>,
    pub build: Mutex<Build>,
}

impl QpObj {
    /// # Safety
    /// `p` is NULL or a QP this library created and has not destroyed.
    pub(crate) unsafe fn from_c<'a>(p: *mut ibv_qp) -> Result<&'a QpObj, c_int> {
        // SAFETY: the caller's promise; QpObj starts with its ibv_qp(_ex).
        unsafe { arg(p as *const QpObj) }
    }
}

fn verr(verb: &'static str, errno: Errno, why: &'static str) -> Error {
    VerbError::new(verb, errno, why).into()
}

pub(crate) fn qp_type(t: u32) -> Result<rverbs::QpType, c_int> {
    Ok(match t {
        2 => rverbs::QpType::Rc,
        3 => rverbs::QpType::Uc,
        4 => rverbs::QpType::Ud,
        8 => rverbs::QpType::RawPacket,
        9 | 10 => return Err(libc::EOPNOTSUPP),
        _ => return Err(libc::EINVAL),
    })
}

fn c_qp_type(t: rverbs::QpType) -> u32 {
    match t {
        rverbs::QpType::Rc => 2,
        rverbs::QpType::Uc => 3,
        rverbs::QpType::Ud => 4,
        rverbs::QpType::RawPacket => 8,
    }
}

/// Creates a QP from the fields `ibv_qp_init_attr` and `_ex` share.
pub(crate) fn new_qp(pd: *mut ibv_pd, a: &ibv_qp_init_attr) -> Result<*mut QpObj, c_int> {
    // SAFETY: the caller's PD.
    let o = unsafe { PdObj::from_c(pd) }?;
    // SAFETY: a live PD's context.
    let ctx = unsafe { o.ctx() }?;
    // SAFETY: the caller's CQs and SRQ (NULL CQs are EINVAL).
    let (scq, rcq) = unsafe { (CqObj::from_c(a.send_cq)?, CqObj::from_c(a.recv_cq)?) };
    // SAFETY: NULL or the caller's SRQ.
    let srq = unsafe { (a.srq as *const SrqObj).as_ref() };
    let ty = qp_type(a.qp_type)?;
    let cap = rverbs::QpCap {
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    let mut init = rverbs::QpInitAttr::new(ty, &scq.rs)
        .recv_cq(&rcq.rs)
        .cap(cap)
        .sq_sig_all(a.sq_sig_all != 0);
    if let Some(s) = srq {
        init = init.srq(&s.rs);
    }
    let rs = o.rs.create_qp(&init).map_err(|e| errno_of(&e))?;
    let scratch = if cap.max_inline_data > 0 {
        let mem = Arc::new(VecMemory::zeroed(cap.max_inline_data as usize));
        let mr = rverbs::ffi::reg_mr(&o.rs, mem.clone(), 0, rverbs::AccessFlags::LOCAL_WRITE)
            .map_err(|e| errno_of(&e))?;
        Some(Scratch { mem, mr })
    } else {
        None
    };
    // SAFETY: ibv_qp_ex is plain data (pointers, integers, nullable fns, mutex/cond).
    let mut c: ibv_qp_ex = unsafe { std::mem::zeroed() };
    c.qp_base.context = o.c.context;
    c.qp_base.qp_context = a.qp_context;
    c.qp_base.pd = pd;
    c.qp_base.send_cq = a.send_cq;
    c.qp_base.recv_cq = a.recv_cq;
    c.qp_base.srq = a.srq;
    c.qp_base.handle = rs.qp_num();
    c.qp_base.qp_num = rs.qp_num();
    c.qp_base.state = 0;
    c.qp_base.qp_type = a.qp_type;
    o.users.fetch_add(1, Ordering::AcqRel);
    scq.users.fetch_add(1, Ordering::AcqRel);
    rcq.users.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = srq {
        s.users.fetch_add(1, Ordering::AcqRel);
    }
    let p = Box::into_raw(Box::new(QpObj {
        c,
        rs: Arc::new(rs),
        pd: o,
        send_cq: scq,
        recv_cq: rcq,
        srq: a.srq as *const SrqObj,
        cap: a.cap,
        sq_sig_all: a.sq_sig_all != 0,
        scratch,
        build: Mutex::default(),
    }));
    // SAFETY: just made.
    unsafe { init_sync(&mut (*p).c.qp_base.mutex, &mut (*p).c.qp_base.cond) };
    let qpn = unsafe { (*p).c.qp_base.qp_num };
    ctx.qps
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(qpn, p as usize);
    Ok(p)
}

pub(crate) unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    ret_ptr(|| {
        // SAFETY: the caller's attributes.
        let a = unsafe { arg(attr) }?;
        new_qp(pd, a).map(|p| p as *mut ibv_qp)
    })
}
export!(ibv_create_qp, "IBVERBS_1.1");

pub(crate) unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's QP.
        let q = unsafe { QpObj::from_c(qp) }?;
        // SAFETY: a live QP's context.
        let ctx = unsafe { Ctx::from_c(q.c.qp_base.context) }?;
        ctx.qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&q.c.qp_base.qp_num);
        // SAFETY: made by Box::into_raw in new_qp; the caller gives it up.
        let b = unsafe { Box::from_raw(qp as *mut QpObj) };
        // SAFETY: the objects a QP counted itself in outlive it (they cannot be freed
        // while counted).
        unsafe {
            (*b.pd).users.fetch_sub(1, Ordering::AcqRel);
            (*b.send_cq).users.fetch_sub(1, Ordering::AcqRel);
            (*b.recv_cq).users.fetch_sub(1, Ordering::AcqRel);
            if let Some(s) = b.srq.as_ref() {
                s.users.fetch_sub(1, Ordering::AcqRel);
            }
        }
        Ok(())
    })
}
export!(ibv_destroy_qp, "IBVERBS_1.1");

fn qp_state(v: u32) -> Result<QpState, c_int> {
    Ok(match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return Err(libc::EINVAL),
    })
}

fn c_qp_state(s: QpState) -> u32 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

/// The engine's attributes of a C `ibv_qp_attr`: only the fields `mask` names are read
/// (and checked: an enum value out of range is EINVAL). Mask bits rdma-core does not
/// define are EOPNOTSUPP before any field is looked at, as libibverbs'
/// `ibv_cmd_modify_qp` refuses them before the kernel sees the attributes (the engine
/// checks the rest: `rverbs_engine::modify::check_modify`).
pub(crate) fn qp_attr(a: &ibv_qp_attr, mask: u32) -> Result<QpAttr, c_int> {
    let m = QpAttrMask(mask);
    if !QpAttrMask::ALL.contains(m) {
        return Err(libc::EOPNOTSUPP);
    }
    let mut r = QpAttr::default();
    if m.contains(QpAttrMask::STATE) {
        r.qp_state = qp_state(a.qp_state)?;
    }
    if m.contains(QpAttrMask::CUR_STATE) {
        r.cur_qp_state = qp_state(a.cur_qp_state)?;
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        r.path_mtu = u8::try_from(a.path_mtu)
            .ok()
            .and_then(rverbs::Mtu::from_enum)
            .ok_or(libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::PATH_MIG_STATE) {
        r.path_mig_state = match a.path_mig_state {
            0 => rverbs::MigState::Migrated,
            1 => rverbs::MigState::Rearm,
            2 => rverbs::MigState::Armed,
            _ => return Err(libc::EINVAL),
        };
    }
    if m.contains(QpAttrMask::AV) {
        r.ah_attr = Some(crate::pd::ah_attr(&a.ah_attr)?);
    }
    r.qkey = a.qkey;
    r.rq_psn = a.rq_psn;
    r.sq_psn = a.sq_psn;
    r.dest_qp_num = a.dest_qp_num;
    r.qp_access_flags = rverbs::AccessFlags(a.qp_access_flags);
    r.cap = rverbs::QpCap {
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    r.pkey_index = a.pkey_index;
    r.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    r.max_rd_atomic = a.max_rd_atomic;
    r.max_dest_rd_atomic = a.max_dest_rd_atomic;
    r.min_rnr_timer = a.min_rnr_timer;
    r.port_num = a.port_num;
    r.timeout = a.timeout;
    r.retry_cnt = a.retry_cnt;
    r.rnr_retry = a.rnr_retry;
    r.rate_limit = a.rate_limit;
    Ok(r)
}

pub(crate) unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's QP and attributes.
        let (q, a) = unsafe { (QpObj::from_c(qp)?, arg(attr)?) };
        let mask = attr_mask as u32;
        let r = qp_attr(a, mask)?;
        q.rs.modify_raw(&r, QpAttrMask(mask))
            .map_err(|e| errno_of(&e))?;
        if mask & 1 != 0 {
            // SAFETY: the caller's live QP; libibverbs keeps `state` current too.
            unsafe { (*qp).state = a.qp_state };
        }
        Ok(())
    })
}
export!(ibv_modify_qp, "IBVERBS_1.1");

pub(crate) unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's QP and outputs.
        let (q, a, init) = unsafe { (QpObj::from_c(qp)?, out(attr)?, out(init_attr)?) };
        let r = q.rs.query().map_err(|e| errno_of(&e))?;
        // SAFETY: plain data.
        let mut c: ibv_qp_attr = unsafe { std::mem::zeroed() };
        c.qp_state = c_qp_state(r.qp_state);
        c.cur_qp_state = c.qp_state;
        c.path_mtu = r.path_mtu as u32;
        c.path_mig_state = r.path_mig_state as u32;
        c.qkey = r.qkey;
        c.rq_psn = r.rq_psn;
        c.sq_psn = r.sq_psn;
        c.dest_qp_num = r.dest_qp_num;
        c.qp_access_flags = r.qp_access_flags.0;
        c.cap = ibv_qp_cap {
            max_send_wr: r.cap.max_send_wr,
            max_recv_wr: r.cap.max_recv_wr,
            max_send_sge: r.cap.max_send_sge,
            max_recv_sge: r.cap.max_recv_sge,
            max_inline_data: r.cap.max_inline_data,
        };
        if let Some(ah) = r.ah_attr {
            c.ah_attr.grh.dgid = ibv_gid { raw: ah.av.dgid.0 };
            c.ah_attr.grh.sgid_index = ah.av.sgid_index;
            c.ah_attr.grh.hop_limit = ah.av.hop_limit;
            c.ah_attr.grh.traffic_class = ah.av.traffic_class;
            c.ah_attr.grh.flow_label = ah.av.flow_label;
            c.ah_attr.is_global = 1;
            c.ah_attr.port_num = ah.port_num;
        }
        c.pkey_index = r.pkey_index;
        c.en_sqd_async_notify = u8::from(r.en_sqd_async_notify);
        c.max_rd_atomic = r.max_rd_atomic;
        c.max_dest_rd_atomic = r.max_dest_rd_atomic;
        c.min_rnr_timer = r.min_rnr_timer;
        c.port_num = r.port_num;
        c.timeout = r.timeout;
        c.retry_cnt = r.retry_cnt;
        c.rnr_retry = r.rnr_retry;
        c.rate_limit = r.rate_limit;
        *a = c;
        init.qp_context = q.c.qp_base.qp_context;
        init.send_cq = q.c.qp_base.send_cq;
        init.recv_cq = q.c.qp_base.recv_cq;
        init.srq = q.c.qp_base.srq;
        init.cap = c.cap;
        init.qp_type = c_qp_type(q.rs.qp_type());
        init.sq_sig_all = c_int::from(q.sq_sig_all);
        Ok(())
    })
}
export!(ibv_query_qp, "IBVERBS_1.1");

// ---- posting -----------------------------------------------------------------------

/// Most SGEs one C work request may name (beyond any device cap; a larger count is a
/// corrupt request, EINVAL before reading the list).
const MAX_SGE: c_int = 1 << 12;
/// Longest chain of work requests walked in one post.
const MAX_CHAIN: usize = 1 << 20;

/// # Safety
/// `sg_list` holds `num_sge` SGEs when `num_sge > 0`.
unsafe fn sges(
    sg_list: *const ibv_sge,
    num_sge: c_int,
    verb: &'static str,
) -> Result<SgList, Error> {
    if !(0..=MAX_SGE).contains(&num_sge) {
        return Err(verr(verb, Errno::Inval, "num_sge out of range"));
    }
    if num_sge == 0 {
        return Ok(SgList::new());
    }
    if sg_list.is_null() {
        return Err(verr(verb, Errno::Inval, "sg_list is NULL"));
    }
    // SAFETY: the caller's promise.
    let s = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
    Ok(s.iter()
        .map(|g| Sge {
            addr: g.addr,
            length: g.length,
            lkey: g.lkey,
        })
        .collect())
}

/// `enum ibv_send_flags` bits the device takes (FENCE, SIGNALED, SOLICITED, INLINE);
/// IP_CSUM (16) is accepted and has no meaning on RoCE.
const SEND_FLAGS_KNOWN: u32 = 0x1f;

/// The engine's request of a C `ibv_send_wr`.
///
/// # Safety
/// `w`'s `sg_list` is valid for `num_sge` entries; for INLINE, each SGE's range is
/// readable caller memory; a UD request's `ah` is NULL or one of ours.
pub(crate) unsafe fn send_wr(q: &QpObj, w: &ibv_send_wr) -> Result<SendWr, Error> {
    const V: &str = "post_send";
    let opcode = match w.opcode {
        0 => WrOpcode::RdmaWrite,
        1 => WrOpcode::RdmaWriteWithImm,
        2 => WrOpcode::Send,
        3 => WrOpcode::SendWithImm,
        4 => WrOpcode::RdmaRead,
        5 => WrOpcode::AtomicCmpAndSwp,
        6 => WrOpcode::AtomicFetchAndAdd,
        7 => WrOpcode::LocalInv,
        8 => {
            // SAFETY: the bind member the opcode selects; its window and MR are NULL
            // or the caller's objects of this library.
            let b = unsafe { w.ext.bind_mw };
            WrOpcode::BindMw(unsafe { crate::mw::bind_of(b.mw, b.rkey, &b.bind_info) }?)
        }
        9 => WrOpcode::SendWithInv,
        _ => return Err(verr(V, Errno::Inval, "opcode not supported")),
    };
    if w.send_flags & !SEND_FLAGS_KNOWN != 0 {
        return Err(verr(V, Errno::Inval, "unknown send flags"));
    }
    let flags = SendFlags(w.send_flags & 0xf);
    // SAFETY: the caller's promise.
    let mut sg_list = unsafe { sges(w.sg_list, w.num_sge, V) }?;
    if flags.contains(SendFlags::INLINE) {
        sg_list = inline_copy(q, &sg_list)?;
    }
    // SAFETY: reading the union members the opcode / QP type selects, all plain data.
    let (imm, rdma, atomic, ud) = unsafe { (w.imm, w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let mut r = SendWr {
        wr_id: w.wr_id,
        opcode,
        sg_list,
        flags,
        imm_data: 0,
        remote_addr: 0,
        rkey: 0,
        compare_add: 0,
        swap: 0,
        ud: None,
    };
    match opcode {
        // SAFETY (unions): plain u32s.
        WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm => {
            r.imm_data = u32::from_be(unsafe { imm.imm_data })
        }
        WrOpcode::SendWithInv | WrOpcode::LocalInv => r.rkey = unsafe { imm.invalidate_rkey },
        _ => {}
    }
    match opcode {
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
            r.remote_addr = rdma.remote_addr;
            r.rkey = rdma.rkey;
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            r.remote_addr = atomic.remote_addr;
            r.rkey = atomic.rkey;
            r.compare_add = atomic.compare_add;
            r.swap = atomic.swap;
        }
        _ => {}
    }
    if q.rs.qp_type() == rverbs::QpType::Ud {
        // SAFETY: NULL or the caller's AH.
        let ah = unsafe { (ud.ah as *const AhObj).as_ref() }
            .ok_or_else(|| verr(V, Errno::Inval, "UD send without an address handle"))?;
        r.ud = Some(UdDest {
            ah: rverbs::ffi::ah_id(&ah.rs),
            remote_qpn: ud.remote_qpn,
            remote_qkey: ud.remote_qkey,
        });
    }
    Ok(r)
}

/// Copies INLINE data out of caller memory into the QP's scratch region and returns
/// the one SGE naming it (the engine then takes its own copy at post time).
fn inline_copy(q: &QpObj, sg: &[Sge]) -> Result<SgList, Error> {
    const V: &str = "post_send";
    let total: u64 = sg.iter().map(|s| u64::from(s.length)).sum();
    let Some(s) = &q.scratch else {
        if total == 0 {
            return Ok(SgList::new());
        }
        return Err(verr(V, Errno::Inval, "inline data above max_inline_data"));
    };
    s.mem.with(|b| {
        if total > b.len() as u64 {
            return Err(verr(V, Errno::Inval, "inline data above max_inline_data"));
        }
        let mut at = 0usize;
        for g in sg {
            let n = g.length as usize;
            if n == 0 {
                continue;
            }
            // SAFETY: INLINE's contract: the SGE's range is readable caller memory for
            // the duration of the post.
            unsafe {
                std::ptr::copy_nonoverlapping(g.addr as usize as *const u8, b[at..].as_mut_ptr(), n)
            };
            at += n;
        }
        Ok(())
    })?;
    Ok([Sge {
        addr: 0,
        length: total as u32,
        lkey: s.mr.lkey(),
    }]
    .into())
}

/// `ibv_context.ops.post_send`: the chain is converted as the device takes it (no
/// list built first); a refused request is found again by its index for `bad_wr`.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    let mut failed = 0usize;
    let r = ret_errno(|| {
        // SAFETY: the caller's QP.
        let q = unsafe { QpObj::from_c(qp) }?;
        let mut p = wr;
        let mut n = 0usize;
        let wrs = std::iter::from_fn(|| {
            if p.is_null() {
                return None;
            }
            n += 1;
            if n > MAX_CHAIN {
                p = std::ptr::null_mut();
                return Some(Err(verr("post_send", Errno::Inval, "chain too long")));
            }
            // SAFETY: a request of the caller's chain, valid for the post.
            let w = unsafe { &*p };
            p = w.next;
            // SAFETY: as above.
            Some(unsafe { send_wr(q, w) })
        });
        rverbs::ffi::post_send(&q.rs, wrs).map_err(|(i, e)| {
            failed = i;
            errno_of(&e)
        })
    });
    if r != 0 && !bad_wr.is_null() {
        // The request at index `failed` (the first when the QP itself was refused).
        let mut p = wr;
        for _ in 0..failed {
            // SAFETY: the first `failed` requests of the chain were walked above.
            p = unsafe { (*p).next };
        }
        // SAFETY: the caller's out-parameter.
        unsafe { *bad_wr = p };
    }
    r
}

/// # Safety
/// `w` is a valid `ibv_recv_wr` of the caller.
unsafe fn recv_wr(w: &ibv_recv_wr, verb: &'static str) -> Result<RecvWr, Error> {
    Ok(RecvWr {
        wr_id: w.wr_id,
        // SAFETY: the caller's promise.
        sg_list: unsafe { sges(w.sg_list, w.num_sge, verb) }?,
    })
}

/// Posts a chain of receives one by one, reporting the first refused in `bad_wr`.
fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    verb: &'static str,
    mut post: impl FnMut(RecvWr) -> rverbs::Result<()>,
) -> c_int {
    let mut cur = wr;
    let r = ret_errno(|| {
        let mut n = 0usize;
        while !cur.is_null() {
            n += 1;
            if n > MAX_CHAIN {
                return Err(libc::EINVAL);
            }
            // SAFETY: a request of the caller's chain.
            let w = unsafe { &*cur };
            // SAFETY: as above.
            unsafe { recv_wr(w, verb) }
                .and_then(&mut post)
                .map_err(|e| errno_of(&e))?;
            cur = w.next;
        }
        Ok(())
    });
    if r != 0 && !bad_wr.is_null() {
        // SAFETY: the caller's out-parameter.
        unsafe { *bad_wr = if cur.is_null() { wr } else { cur } };
    }
    r
}

/// `ibv_context.ops.post_recv`.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller's QP.
    let q = match unsafe { QpObj::from_c(qp) } {
        Ok(q) => q,
        Err(e) => return e,
    };
    post_recv_chain(wr, bad_wr, "post_recv", |w| {
        rverbs::ffi::post_recv(&q.rs, w)
    })
}

/// `ibv_context.ops.post_srq_recv`.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller's SRQ.
    let s = match unsafe { arg(srq as *const SrqObj) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    post_recv_chain(wr, bad_wr, "post_srq_recv", |w| {
        rverbs::ffi::post_srq_recv(&s.rs, w)
    })
}

// ---- multicast ---------------------------------------------------------------------

unsafe extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's QP and GID.
        let (q, g) = unsafe { (QpObj::from_c(qp)?, arg(gid)?) };
        // SAFETY: 16 plain bytes.
        let gid = rverbs::Gid(unsafe { g.raw });
        q.rs.attach_mcast(&gid, lid).map_err(|e| errno_of(&e))
    })
}
export!(ibv_attach_mcast, "IBVERBS_1.1");

unsafe extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's QP and GID.
        let (q, g) = unsafe { (QpObj::from_c(qp)?, arg(gid)?) };
        // SAFETY: 16 plain bytes.
        let gid = rverbs::Gid(unsafe { g.raw });
        q.rs.detach_mcast(&gid, lid).map_err(|e| errno_of(&e))
    })
}
export!(ibv_detach_mcast, "IBVERBS_1.1");

/// No ordering promise beyond the transport's (0: neither whole-message nor 128-byte
/// in-order placement is guaranteed to a CPU reading while data lands).
unsafe extern "C" fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, _op: u32, _flags: u32) -> c_int {
    ret_val(0, || {
        // SAFETY: the caller's QP.
        let _ = unsafe { QpObj::from_c(qp) };
        0
    })
}
export!(ibv_query_qp_data_in_order, "IBVERBS_1.14");

/// `ibv_context.ops.bind_mw`: what the `ibv_bind_mw` inline calls for a type-1 window
/// (it checked the type and the MR's PD). Posts the BIND_MW request with the next key
/// (`ibv_inc_rkey`) and gives the window that key, as rdma-core's rxe provider does:
/// the program undoes it if the request completes in error.
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's QP, window and bind request.
        let (q, b, m) = unsafe { (QpObj::from_c(qp)?, arg(mw_bind)?, arg(mw)?) };
        let cur = m.rkey;
        if b.bind_info.mw_access_flags & (1 << 5) != 0 {
            return Err(libc::EINVAL);
        }
        if b.send_flags & !0x1f != 0 {
            return Err(libc::EINVAL);
        }
        let rkey = (cur & !0xff) | (cur.wrapping_add(1) & 0xff);
        // SAFETY: `mw` is the caller's window, `bind_info.mr` NULL or its MR.
        let bind =
            unsafe { crate::mw::bind_of(mw, rkey, &b.bind_info) }.map_err(|e| errno_of(&e))?;
        let wr = SendWr {
            wr_id: b.wr_id,
            opcode: WrOpcode::BindMw(bind),
            sg_list: SgList::default(),
            flags: SendFlags(b.send_flags & 0xf),
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
        };
        rverbs::ffi::post_send(&q.rs, [Ok(wr)]).map_err(|(_, e)| errno_of(&e))?;
        // SAFETY: the caller's window (the program reads its key after the call).
        unsafe { (*mw).rkey = rkey };
        Ok(())
    })
}
