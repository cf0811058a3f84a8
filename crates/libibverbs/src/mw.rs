//! Memory windows: the ops verbs.h's `ibv_alloc_mw`, `ibv_dealloc_mw` and `ibv_bind_mw`
//! inlines call, and the BIND_MW request of `ibv_post_send` and `ibv_wr_bind_mw`.
//!
//! The device binds, checks and invalidates windows (the engine, as rxe's `rxe_mw.c`);
//! here a C window is the engine's window plus the `ibv_mw` the program reads.

use crate::pd::{MrObj, PdObj};
use crate::*;
use rverbs::Error;
use rverbs_engine::{Access, Errno, MwBind, MwType, VerbError};
use rverbs_ibverbs::types::*;
use std::ffi::c_int;
use std::sync::atomic::Ordering;

/// `IBV_MW_TYPE_1`, `IBV_MW_TYPE_2`.
const MW_TYPE_1: u32 = 1;
const MW_TYPE_2: u32 = 2;
/// Rights a bind may grant: `IBV_ACCESS_LOCAL_WRITE`, `REMOTE_WRITE`, `REMOTE_READ`,
/// `REMOTE_ATOMIC`, `ZERO_BASED` (refused by the device's bind, as rxe does for type 1).
const MW_ACCESS_KNOWN: u32 = 0x2f;

#[repr(C)]
pub(crate) struct MwObj {
    pub c: ibv_mw,
    pub rs: rverbs::ffi::ForeignMw,
    pub pd: *const PdObj,
}

/// `ibv_context.ops.alloc_mw`.
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw {
    ret_ptr(|| {
        // SAFETY: the caller's PD.
        let o = unsafe { PdObj::from_c(pd) }?;
        let kind = match type_ {
            MW_TYPE_1 => MwType::Type1,
            MW_TYPE_2 => MwType::Type2,
            _ => return Err(libc::EINVAL),
        };
        let rs = rverbs::ffi::alloc_mw(&o.rs, kind).map_err(|e| errno_of(&e))?;
        let c = ibv_mw {
            context: o.c.context,
            pd,
            rkey: rs.rkey(),
            handle: rs.id().0,
            type_,
        };
        o.users.fetch_add(1, Ordering::AcqRel);
        Ok(Box::into_raw(Box::new(MwObj { c, rs, pd: o })) as *mut ibv_mw)
    })
}

/// `ibv_context.ops.dealloc_mw`.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    ret_errno(|| {
        // SAFETY: the caller's window (every ibv_mw of this library is an MwObj).
        let o = unsafe { arg(mw as *const MwObj) }?;
        let pd = o.pd;
        // SAFETY: made by Box::into_raw in alloc_mw; the program gives it up here.
        drop(unsafe { Box::from_raw(mw as *mut MwObj) });
        // SAFETY: the window's PD outlives it (it counted the window).
        unsafe { (*pd).users.fetch_sub(1, Ordering::AcqRel) };
        Ok(())
    })
}

fn inval(why: &'static str) -> Error {
    VerbError::new("bind_mw", Errno::Inval, why).into()
}

/// The engine's bind of `mw` with the new R_Key `rkey` (its low 8 bits are the key,
/// as rxe takes them) over `info`.
///
/// # Safety
/// `mw` is NULL or a window of this library; `info.mr` NULL or an MR of this library.
pub(crate) unsafe fn bind_of(
    mw: *mut ibv_mw,
    rkey: u32,
    info: &ibv_mw_bind_info,
) -> Result<MwBind, Error> {
    // SAFETY: the caller's promise.
    let w = unsafe { (mw as *const MwObj).as_ref() }.ok_or_else(|| inval("no window"))?;
    if info.mw_access_flags & !MW_ACCESS_KNOWN != 0 {
        return Err(inval("unknown window access flags"));
    }
    // SAFETY: the caller's promise.
    let mr_lkey = match unsafe { (info.mr as *const MrObj).as_ref() } {
        Some(m) => m.c.lkey,
        None if info.length == 0 => 0,
        None => return Err(inval("a window with a length needs an MR")),
    };
    Ok(MwBind {
        mw: w.rs.id(),
        key: rkey as u8,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access: Access(info.mw_access_flags),
    })
}
