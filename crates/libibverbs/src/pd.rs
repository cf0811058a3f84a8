//! Protection domains, memory regions over caller memory, address handles and SRQs.
//!
//! Objects count their users (a PD its MRs, QPs, SRQs and AHs; an SRQ its QPs) so that
//! destroying one still in use is EBUSY, as the kernel answers libibverbs.

use crate::context::Ctx;
use crate::memory::CMemory;
use crate::*;
use rverbs_ibverbs::types::*;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[repr(C)]
pub(crate) struct PdObj {
    pub c: ibv_pd,
    pub rs: rverbs::Pd,
    pub users: AtomicUsize,
}

impl PdObj {
    /// # Safety
    /// `p` is NULL or a PD this library allocated and has not freed.
    pub(crate) unsafe fn from_c<'a>(p: *mut ibv_pd) -> Result<&'a PdObj, c_int> {
        // SAFETY: the caller's promise; PdObj starts with its ibv_pd.
        unsafe { arg(p as *const PdObj) }
    }
    pub(crate) unsafe fn ctx(&self) -> Result<&Ctx, c_int> {
        // SAFETY: a PD's context outlives it (the program's promise, as in C).
        unsafe { Ctx::from_c(self.c.context) }
    }
}

/// Refuses to free an object while others use it.
pub(crate) fn check_idle(users: &AtomicUsize) -> Result<(), c_int> {
    if users.load(Ordering::Acquire) != 0 {
        return Err(libc::EBUSY);
    }
    Ok(())
}

pub(crate) unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    ret_ptr(|| {
        // SAFETY: the caller's context.
        let ctx = unsafe { Ctx::from_c(context) }?;
        let rs = ctx.rs.alloc_pd().map_err(|e| errno_of(&e))?;
        ctx.hold();
        let b = Box::new(PdObj {
            c: ibv_pd { context, handle: 0 },
            rs,
            users: AtomicUsize::new(0),
        });
        let p = Box::into_raw(b);
        // SAFETY: just made.
        unsafe { (*p).c.handle = p as usize as u32 };
        Ok(p as *mut ibv_pd)
    })
}
export!(ibv_alloc_pd, "IBVERBS_1.1");

pub(crate) unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's PD.
        let o = unsafe { PdObj::from_c(pd) }?;
        check_idle(&o.users)?;
        // SAFETY: a live PD's context (kept by the PD's count).
        let ctx = unsafe { o.ctx() }? as *const Ctx;
        // SAFETY: made by Box::into_raw in ibv_alloc_pd; unused (checked above).
        drop(unsafe { Box::from_raw(pd as *mut PdObj) });
        // SAFETY: the PD was counted in its context and is gone.
        unsafe { Ctx::release(&*ctx) };
        Ok(())
    })
}
export!(ibv_dealloc_pd, "IBVERBS_1.1");

// ---- memory regions ----------------------------------------------------------------

#[repr(C)]
pub(crate) struct MrObj {
    pub c: ibv_mr,
    pub rs: rverbs::ffi::ForeignMr,
    pub pd: *const PdObj,
    /// The access flags it was registered with (after the optional ones were dropped).
    pub access: u32,
    /// Its virtual address.
    pub iova: u64,
}

/// `IBV_ACCESS_OPTIONAL_RANGE`: bits a provider may ignore (libibverbs drops the ones
/// the device does not support, e.g. RELAXED_ORDERING).
const ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> Result<*mut ibv_mr, c_int> {
    // SAFETY: the caller's PD.
    let o = unsafe { PdObj::from_c(pd) }?;
    if addr.is_null() && length > 0 {
        return Err(libc::EINVAL);
    }
    let access = (access as u32) & !ACCESS_OPTIONAL_RANGE;
    // SAFETY: the caller of ibv_reg_mr promises `addr..addr+length` stays mapped until
    // ibv_dereg_mr (verbs' contract); the region is dropped there.
    let mem = Arc::new(unsafe { CMemory::new(addr as *mut u8, length) });
    let rs = rverbs::ffi::reg_mr(&o.rs, mem, iova, rverbs::AccessFlags(access))
        .map_err(|e| errno_of(&e))?;
    let c = ibv_mr {
        context: o.c.context,
        pd,
        addr,
        length,
        handle: rs.lkey(),
        lkey: rs.lkey(),
        rkey: rs.rkey(),
    };
    o.users.fetch_add(1, Ordering::AcqRel);
    Ok(Box::into_raw(Box::new(MrObj {
        c,
        rs,
        pd: o,
        access,
        iova,
    })) as *mut ibv_mr)
}

unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    ret_ptr(|| reg(pd, addr, length, addr as u64, access))
}
export!(ibv_reg_mr, "IBVERBS_1.1");

unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    ret_ptr(|| reg(pd, addr, length, iova, access))
}
export!(ibv_reg_mr_iova, "IBVERBS_1.7");

unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    ret_ptr(|| reg(pd, addr, length, iova, access as c_int))
}
export!(ibv_reg_mr_iova2, "IBVERBS_1.8");

unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    ret_errno(|| {
        // SAFETY: NULL or made by Box::into_raw in `reg` (the caller's MR).
        let o = unsafe { out(mr as *mut MrObj) }?;
        // EBUSY while memory windows are bound to it: the region stays (a window's
        // key must never reach memory the program may free after this call).
        o.rs.dereg().map_err(|e| errno_of(&e))?;
        // SAFETY: made by Box::into_raw in `reg`; the caller gives it up.
        let b = unsafe { Box::from_raw(mr as *mut MrObj) };
        // SAFETY: the PD outlives its MRs (it cannot be freed while they count).
        unsafe { &*b.pd }.users.fetch_sub(1, Ordering::AcqRel);
        drop(b);
        Ok(())
    })
}
export!(ibv_dereg_mr, "IBVERBS_1.1");

// ---- address handles ---------------------------------------------------------------

#[repr(C)]
pub(crate) struct AhObj {
    pub c: ibv_ah,
    pub rs: rverbs::Ah,
    pub pd: *const PdObj,
}

/// The engine's AH attributes of a C `ibv_ah_attr`: RoCE needs the GRH (EINVAL
/// without `is_global`, as the kernel answers for a RoCE port).
pub(crate) fn ah_attr(a: &ibv_ah_attr) -> Result<rverbs::AhAttr, c_int> {
    if a.is_global == 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: reading the raw bytes of a 16-byte union.
    let dgid = rverbs::Gid(unsafe { a.grh.dgid.raw });
    Ok(rverbs::AhAttr {
        av: rverbs::AddressVector {
            dgid,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
            flow_label: a.grh.flow_label,
        },
        port_num: a.port_num,
    })
}

unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    ret_ptr(|| {
        // SAFETY: the caller's PD and attributes.
        let (o, a) = unsafe { (PdObj::from_c(pd)?, arg(attr)?) };
        let rs = o.rs.create_ah(&ah_attr(a)?).map_err(|e| errno_of(&e))?;
        o.users.fetch_add(1, Ordering::AcqRel);
        let b = Box::new(AhObj {
            c: ibv_ah {
                context: o.c.context,
                pd,
                handle: 0,
            },
            rs,
            pd: o,
        });
        Ok(Box::into_raw(b) as *mut ibv_ah)
    })
}
export!(ibv_create_ah, "IBVERBS_1.1");

unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    ret_errno(|| {
        if ah.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: made by Box::into_raw in ibv_create_ah; the caller gives it up.
        let b = unsafe { Box::from_raw(ah as *mut AhObj) };
        // SAFETY: the PD outlives its AHs.
        unsafe { &*b.pd }.users.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    })
}
export!(ibv_destroy_ah, "IBVERBS_1.1");

/// `ibv_init_ah_from_wc`: the AH attributes that answer a received UD datagram (the
/// GRH in front of the receive buffer gives the source GID).
unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr_out: *mut ibv_ah_attr,
) -> c_int {
    ret_neg(|| {
        // SAFETY: the caller's context, completion, GRH and output.
        let (ctx, wc, grh, out_attr) = unsafe {
            (
                Ctx::from_c(context)?,
                arg(wc)?,
                arg(grh)?,
                out(ah_attr_out)?,
            )
        };
        // SAFETY: the GRH is 40 plain bytes.
        let bytes: [u8; 40] =
            unsafe { std::ptr::read_unaligned(grh as *const ibv_grh as *const [u8; 40]) };
        let rwc = rverbs::Wc {
            wc_flags: rverbs::WcFlags(wc.wc_flags & 0xf),
            src_qp: wc.src_qp,
            ..Default::default()
        };
        let a = ctx
            .rs
            .init_ah_from_wc(port_num, &rwc, &bytes)
            .map_err(|e| errno_of(&e))?;
        // SAFETY: plain data.
        let mut c: ibv_ah_attr = unsafe { std::mem::zeroed() };
        c.grh.dgid = ibv_gid { raw: a.av.dgid.0 };
        c.grh.sgid_index = a.av.sgid_index;
        c.grh.hop_limit = a.av.hop_limit;
        c.grh.traffic_class = a.av.traffic_class;
        c.grh.flow_label = a.av.flow_label;
        c.is_global = 1;
        c.port_num = a.port_num;
        *out_attr = c;
        Ok(0)
    })
}
export!(ibv_init_ah_from_wc, "IBVERBS_1.1");

unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    ret_ptr(|| {
        // SAFETY: the caller's PD.
        let o = unsafe { PdObj::from_c(pd) }?;
        // SAFETY: plain data.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: forwarded as given.
        if unsafe { ibv_init_ah_from_wc(o.c.context, port_num, wc, grh, &mut a) } != 0 {
            // SAFETY: reading our own thread's errno.
            return Err(unsafe { *libc::__errno_location() });
        }
        // SAFETY: forwarded.
        let ah = unsafe { ibv_create_ah(pd, &mut a) };
        if ah.is_null() {
            // SAFETY: as above.
            return Err(unsafe { *libc::__errno_location() });
        }
        Ok(ah)
    })
}
export!(ibv_create_ah_from_wc, "IBVERBS_1.1");

// ---- shared receive queues ---------------------------------------------------------

#[repr(C)]
pub(crate) struct SrqObj {
    pub c: ibv_srq,
    pub rs: rverbs::Srq,
    pub pd: *const PdObj,
    pub users: AtomicUsize,
    pub attr: std::sync::Mutex<ibv_srq_attr>,
}

unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    ret_ptr(|| {
        // SAFETY: the caller's PD and attributes.
        let (o, init) = unsafe { (PdObj::from_c(pd)?, out(init)?) };
        let ctx = unsafe { o.ctx() }?;
        let a = rverbs::SrqInitAttr {
            max_wr: init.attr.max_wr,
            max_sge: init.attr.max_sge,
        };
        let rs = o.rs.create_srq(&a).map_err(|e| errno_of(&e))?;
        if init.attr.srq_limit > 0 {
            rs.arm_limit(init.attr.srq_limit)
                .map_err(|e| errno_of(&e))?;
        }
        // SAFETY: ibv_srq is plain data (pointers, integers, mutex/cond set up below).
        let mut c: ibv_srq = unsafe { std::mem::zeroed() };
        c.context = o.c.context;
        c.srq_context = init.srq_context;
        c.pd = pd;
        c.handle = rs.handle();
        o.users.fetch_add(1, Ordering::AcqRel);
        let p = Box::into_raw(Box::new(SrqObj {
            c,
            rs,
            pd: o,
            users: AtomicUsize::new(0),
            attr: std::sync::Mutex::new(init.attr),
        }));
        // SAFETY: just made.
        unsafe { init_sync(&mut (*p).c.mutex, &mut (*p).c.cond) };
        ctx.srqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(unsafe { (*p).c.handle }, p as usize);
        Ok(p as *mut ibv_srq)
    })
}
export!(ibv_create_srq, "IBVERBS_1.1");

/// `IBV_SRQ_MAX_WR` / `IBV_SRQ_LIMIT` of `enum ibv_srq_attr_mask`.
const SRQ_MAX_WR: c_int = 1;
const SRQ_LIMIT: c_int = 2;

unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's SRQ and attributes.
        let (s, a) = unsafe { (arg(srq as *const SrqObj)?, arg(attr)?) };
        if mask & !(SRQ_MAX_WR | SRQ_LIMIT) != 0 {
            return Err(libc::EINVAL);
        }
        if mask & SRQ_MAX_WR != 0 {
            // Resizing needs SRQ_RESIZE, which the device does not advertise.
            return Err(libc::EOPNOTSUPP);
        }
        if mask & SRQ_LIMIT != 0 {
            s.rs.arm_limit(a.srq_limit).map_err(|e| errno_of(&e))?;
            s.attr.lock().unwrap_or_else(|e| e.into_inner()).srq_limit = a.srq_limit;
        }
        Ok(())
    })
}
export!(ibv_modify_srq, "IBVERBS_1.1");

unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's SRQ and output.
        let (s, a) = unsafe { (arg(srq as *const SrqObj)?, out(attr)?) };
        *a = *s.attr.lock().unwrap_or_else(|e| e.into_inner());
        Ok(())
    })
}
export!(ibv_query_srq, "IBVERBS_1.1");

unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's SRQ.
        let s = unsafe { arg(srq as *const SrqObj) }?;
        check_idle(&s.users)?;
        // SAFETY: the SRQ's context is alive while the SRQ is.
        let ctx = unsafe { Ctx::from_c(s.c.context) }?;
        ctx.srqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&s.c.handle);
        // SAFETY: made by Box::into_raw in ibv_create_srq; unused (checked above).
        let b = unsafe { Box::from_raw(srq as *mut SrqObj) };
        // SAFETY: the PD outlives its SRQs.
        unsafe { &*b.pd }.users.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    })
}
export!(ibv_destroy_srq, "IBVERBS_1.1");

// ---- re-registration, imports ------------------------------------------------------

/// `enum ibv_rereg_mr_flags`.
const REREG_CHANGE_TRANSLATION: c_int = 1;
const REREG_CHANGE_PD: c_int = 2;
const REREG_CHANGE_ACCESS: c_int = 4;

unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    ret_errno(|| {
        if mr.is_null() {
            return Err(libc::EINVAL);
        }
        if flags & !(REREG_CHANGE_TRANSLATION | REREG_CHANGE_PD | REREG_CHANGE_ACCESS) != 0
            || flags == 0
        {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's MR (made by `reg`).
        let m = unsafe { &mut *(mr as *mut MrObj) };
        let new_pd = if flags & REREG_CHANGE_PD != 0 {
            pd
        } else {
            m.c.pd
        };
        let (a, len) = if flags & REREG_CHANGE_TRANSLATION != 0 {
            (addr, length)
        } else {
            (m.c.addr, m.c.length)
        };
        let acc = if flags & REREG_CHANGE_ACCESS != 0 {
            access
        } else {
            // The rights the region has now (the engine keeps them with its key).
            m.access as c_int
        };
        // SAFETY: the caller's new PD, or the MR's own.
        let po = unsafe { PdObj::from_c(new_pd) }?;
        if a.is_null() && len > 0 {
            return Err(libc::EINVAL);
        }
        let acc = (acc as u32) & !ACCESS_OPTIONAL_RANGE;
        // SAFETY: as for ibv_reg_mr: the caller keeps the new range mapped until
        // ibv_dereg_mr.
        let mem = Arc::new(unsafe { CMemory::new(a as *mut u8, len) });
        let iova = if flags & REREG_CHANGE_TRANSLATION != 0 {
            a as u64
        } else {
            m.iova
        };
        m.rs.rereg(&po.rs, mem, iova, rverbs::AccessFlags(acc))
            .map_err(|e| errno_of(&e))?;
        if new_pd != m.c.pd {
            po.users.fetch_add(1, Ordering::AcqRel);
            // SAFETY: the old PD outlives its MRs.
            unsafe { &*m.pd }.users.fetch_sub(1, Ordering::AcqRel);
            m.pd = po;
            m.c.pd = new_pd;
        }
        m.c.addr = a;
        m.c.length = len;
        m.iova = iova;
        m.access = acc;
        Ok(())
    })
}
export!(ibv_rereg_mr, "IBVERBS_1.1");

/// Importing objects of another process's context needs the kernel's shared uverbs
/// file descriptor, which soft contexts do not have: EOPNOTSUPP, as libibverbs answers
/// for a provider without import.
unsafe extern "C" fn ibv_import_device(_cmd_fd: c_int) -> *mut ibv_context {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}
export!(ibv_import_device, "IBVERBS_1.10");

unsafe extern "C" fn ibv_import_pd(_context: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}
export!(ibv_import_pd, "IBVERBS_1.10");

unsafe extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}
export!(ibv_import_mr, "IBVERBS_1.10");

unsafe extern "C" fn ibv_import_dm(_context: *mut ibv_context, _handle: u32) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}
export!(ibv_import_dm, "IBVERBS_1.13");

/// Only imported objects are unimported, and none ever is (see `ibv_import_device`).
unsafe extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}
export!(ibv_unimport_pd, "IBVERBS_1.10");

unsafe extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}
export!(ibv_unimport_mr, "IBVERBS_1.10");

unsafe extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}
export!(ibv_unimport_dm, "IBVERBS_1.13");

/// dma-buf regions: EOPNOTSUPP (the soft device reaches memory by CPU address only).
unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}
export!(ibv_reg_dmabuf_mr, "IBVERBS_1.12");
