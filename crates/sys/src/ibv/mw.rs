//! Memory windows (`struct ibv_mw`): `ibv_alloc_mw`, `ibv_dealloc_mw` and
//! `ibv_bind_mw`, which verbs.h defines inline over the context's ops, and the
//! window of a BIND_MW work request.
//!
//! A bound window lets a peer write the region's memory with the window's R_Key, so
//! the window keeps the last region it was bound to registered (an `Arc` of the
//! [`Mr`], whose [`super::DmaMem`] it keeps mapped) until it is bound elsewhere or
//! deallocated: the region's memory cannot be freed while a key to it may be valid.

use super::{check_rc as check, einval, nonnull, ops, Mr, Pd, Qp, Sge};
use rverbs_ibverbs::consts::*;
use rverbs_ibverbs::types as t;
use std::ffi::c_uint;
use std::io;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

/// A memory window.
pub struct Mw {
    pub(super) ptr: NonNull<t::ibv_mw>,
    pub(super) pd: Arc<Pd>,
    type2: bool,
    /// The region of the last bind (see the module's note). Its lock also orders the
    /// reads and writes of the window's `rkey`, which the provider's bind changes.
    bound: Mutex<Option<Arc<Mr>>>,
}

// SAFETY: owned (deallocated once in Drop); the window's `rkey` is only read and
// written under `bound`'s lock, and the verbs on a window are thread-safe.
unsafe impl Send for Mw {}
// SAFETY: as above.
unsafe impl Sync for Mw {}

impl Drop for Mw {
    fn drop(&mut self) {
        if let Some(f) = ops(&self.pd.ctx).dealloc_mw {
            // SAFETY: allocated in `alloc`, deallocated once, before the region it was
            // bound to (`bound`) and its PD are released.
            unsafe { f(self.ptr.as_ptr()) };
        }
    }
}

fn no_op() -> io::Error {
    // verbs.h: a provider without the op gives EOPNOTSUPP (alloc) / ENOSYS (bind).
    io::Error::from_raw_os_error(libc::EOPNOTSUPP)
}

impl Mw {
    /// `ibv_alloc_mw` of type 2 (`type2`) or type 1 in `pd`.
    pub fn alloc(pd: &Arc<Pd>, type2: bool) -> io::Result<Arc<Mw>> {
        let f = ops(&pd.ctx).alloc_mw.ok_or_else(no_op)?;
        let kind = if type2 { IBV_MW_TYPE_2 } else { IBV_MW_TYPE_1 };
        // SAFETY: a live PD; the window is kept until Drop with an Arc of the PD.
        let ptr = nonnull(unsafe { f(pd.ptr.as_ptr(), kind) })?;
        Ok(Arc::new(Mw {
            ptr,
            pd: pd.clone(),
            type2,
            bound: Mutex::new(None),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Option<Arc<Mr>>> {
        self.bound.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rkey_locked(&self) -> u32 {
        // SAFETY: live until Drop; `rkey` is written only under the same lock (by the
        // provider's bind, or `set_rkey`).
        unsafe { std::ptr::addr_of!((*self.ptr.as_ptr()).rkey).read() }
    }

    /// The window's current R_Key (`mw->rkey`).
    pub fn rkey(&self) -> u32 {
        let _g = self.lock();
        self.rkey_locked()
    }

    /// Whether it is a type-2 window.
    pub fn is_type2(&self) -> bool {
        self.type2
    }

    /// `ibv_bind_mw` of a type-1 window on `qp`: `range` of a region (or `None`:
    /// unbind) with the remote rights `access`; posts the provider's BIND_MW request
    /// (completion `wr_id`, `send_flags`) and returns the window's new R_Key.
    ///
    /// # Errors
    /// EINVAL for a type-2 window, a QP of another context, or an unbind of a window
    /// never bound (an unbind names the window's last region: rxe's provider reads
    /// the region of every bind); EPERM for a region of another PD; else the
    /// provider's.
    pub fn bind(
        &self,
        qp: &Qp,
        wr_id: u64,
        send_flags: u32,
        range: Option<Sge<'_>>,
        access: u32,
    ) -> io::Result<u32> {
        if self.type2 || !Arc::ptr_eq(&qp.pd.ctx, &self.pd.ctx) {
            return Err(einval());
        }
        let f = ops(&self.pd.ctx)
            .bind_mw
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSYS))?;
        let mut g = self.lock();
        let b = MwBind {
            mw: self,
            rkey: 0,
            range,
            access,
        };
        let mut req = t::ibv_mw_bind {
            wr_id,
            send_flags: send_flags as c_uint,
            bind_info: b.info_for(g.as_ref())?,
        };
        // SAFETY: a live QP and window of the same context, and a bind request whose
        // region is live (a borrow in `range`, or the one `g` keeps) and of the
        // window's PD (checked by `info_for`); the provider posts it and updates
        // `mw->rkey`, which is read and written under this lock.
        check(unsafe { f(qp.ptr.as_ptr(), self.ptr.as_ptr(), &mut req) })?;
        if let Some(r) = range {
            *g = Some(Arc::clone(r.mr));
        }
        Ok(self.rkey_locked())
    }

    /// Sets `mw->rkey` after a BIND_MW work request was posted (as a program does
    /// with `ibv_inc_rkey`'s value).
    fn set_rkey(&self, g: &mut MutexGuard<'_, Option<Arc<Mr>>>, rkey: u32, mr: Option<Arc<Mr>>) {
        // SAFETY: live until Drop; written under the lock `g` holds.
        unsafe { std::ptr::addr_of_mut!((*self.ptr.as_ptr()).rkey).write(rkey) };
        if let Some(m) = mr {
            **g = Some(m);
        }
    }
}

/// A BIND_MW work request's window part (`wr.bind_mw`).
#[derive(Clone, Copy)]
pub struct MwBind<'a> {
    /// The window (type 2).
    pub mw: &'a Mw,
    /// Its new R_Key (`ibv_inc_rkey` of the current one).
    pub rkey: u32,
    /// The bound range of a region, `None` to bind nothing.
    pub range: Option<Sge<'a>>,
    /// `IBV_ACCESS_*` rights the window grants.
    pub access: u32,
}

impl MwBind<'_> {
    /// `struct ibv_mw_bind_info`, refused as verbs.h's `ibv_bind_mw` refuses it: a
    /// range outside its region (EINVAL) or a region of another PD (EPERM). An
    /// unbind has length 0 and names the region `last` (none: EINVAL).
    fn info_for(&self, last: Option<&Arc<Mr>>) -> io::Result<t::ibv_mw_bind_info> {
        let Some(r) = self.range else {
            let mr = last.ok_or_else(einval)?;
            return Ok(t::ibv_mw_bind_info {
                mr: mr.ptr.as_ptr(),
                addr: 0,
                length: 0,
                mw_access_flags: self.access as c_uint,
            });
        };
        if r.mr.pd.ptr != self.mw.pd.ptr {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let end = r.offset.checked_add(r.len).ok_or_else(einval)?;
        if end > r.mr.mem().len() {
            return Err(einval());
        }
        Ok(t::ibv_mw_bind_info {
            mr: r.mr.ptr.as_ptr(),
            addr: r.mr.mem().addr() + r.offset as u64,
            length: r.len as u64,
            mw_access_flags: self.access as c_uint,
        })
    }
}

/// The windows of a chain's BIND_MW requests, locked (in address order, once each)
/// across `ibv_post_send`: the provider reads each window's `rkey` while posting,
/// and it is written under the same lock after.
pub(super) struct Binding<'a> {
    held: Vec<(&'a Mw, MutexGuard<'a, Option<Arc<Mr>>>)>,
}

impl<'a> Binding<'a> {
    pub(super) fn new(wrs: &[super::SendWr<'a>]) -> Binding<'a> {
        let mut ws: Vec<&'a Mw> = wrs
            .iter()
            .filter_map(|w| match w.remote {
                super::Remote::Bind(b) => Some(b.mw),
                _ => None,
            })
            .collect();
        ws.sort_by_key(|m| m.ptr.as_ptr() as usize);
        ws.dedup_by_key(|m| m.ptr.as_ptr() as usize);
        Binding {
            held: ws.into_iter().map(|m| (m, m.lock())).collect(),
        }
    }

    fn last(&self, mw: &Mw) -> Option<&Arc<Mr>> {
        self.held
            .iter()
            .find(|(m, _)| m.ptr == mw.ptr)
            .and_then(|(_, g)| g.as_ref())
    }

    /// The request's `ibv_mw_bind_info` (an unbind names the window's last region,
    /// kept registered by the lock this holds).
    pub(super) fn info(&self, b: &MwBind<'_>) -> io::Result<t::ibv_mw_bind_info> {
        b.info_for(self.last(b.mw))
    }

    /// After the provider took `wrs` (the chain's first ones): each BIND_MW window
    /// gets its new R_Key and keeps its new region registered.
    pub(super) fn posted(&mut self, wrs: &[super::SendWr<'_>]) {
        for w in wrs {
            if let super::Remote::Bind(b) = w.remote {
                if let Some((m, g)) = self.held.iter_mut().find(|(m, _)| m.ptr == b.mw.ptr) {
                    m.set_rkey(g, b.rkey, b.range.map(|r| Arc::clone(r.mr)));
                }
            }
        }
    }
}
