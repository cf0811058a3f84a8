//! Memory windows ([`Mw`]): remote access to part of a region under a key of its own,
//! granted and revoked without registering the region again (IBTA 10.6.7).
//!
//! Type 1 windows are bound with [`Qp::bind_mw`] (`ibv_bind_mw`) and usable through
//! any QP of the PD; type 2 windows are bound by a work request
//! ([`SendRequest::bind_mw`]), usable only through that QP, and invalidated locally
//! ([`SendRequest::local_inv`]) or by the peer ([`SendRequest::send_inv`]). The same
//! calls run on the soft device and on a system device (rxe, mlx5: through the
//! provider's `alloc_mw` / `bind_mw` and BIND_MW / LOCAL_INV work requests); a device
//! without windows answers its own error (EOPNOTSUPP).

use super::*;
use crate::device::wr::LocalBuf;
use crate::error::Result;
use rverbs_engine::{Errno, MwBind, MwId, VerbError, WrOpcode};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

pub use rverbs_engine::MwType;

struct MwInner {
    pd: Arc<PdInner>,
    id: MwId,
    kind: MwType,
    rkey: AtomicU32,
    /// A type-1 window was bound at least once (an unbind names its last region).
    was_bound: AtomicBool,
}

impl Drop for MwInner {
    fn drop(&mut self) {
        self.pd.ctx.dev().dealloc_mw(self.id);
    }
}

/// A memory window (`struct ibv_mw`); deallocated when dropped (its key then grants
/// nothing).
///
/// ```no_run
/// # fn demo(pd: &rverbs::Pd, qp: &rverbs::Qp, mr: &rverbs::Mr) -> rverbs::Result<()> {
/// use rverbs::{AccessFlags, MwType, SendRequest};
/// // `mr` was registered with AccessFlags::MW_BIND.
/// let mw = pd.alloc_mw(MwType::Type2)?;
/// let bind = SendRequest::bind_mw(1, &mw, mr.slice(0..64), AccessFlags::REMOTE_WRITE);
/// let peer_gets = bind.bound().unwrap(); // address, new R_Key and length
/// qp.post_send(&bind)?;
/// // ... later, revoke it:
/// qp.post_send(&SendRequest::local_inv(2, peer_gets.rkey))?;
/// # Ok(()) }
/// ```
pub struct Mw {
    inner: Arc<MwInner>,
}

impl Pd {
    /// `ibv_alloc_mw`: a window of `kind` in this PD. A type-1 window grants nothing
    /// until bound; a type-2 window is free until a BIND_MW request binds it.
    pub fn alloc_mw(&self, kind: MwType) -> Result<Mw> {
        let (id, rkey) = self.inner.ctx.dev().alloc_mw(self.inner.id, kind)?;
        Ok(Mw {
            inner: Arc::new(MwInner {
                pd: self.inner.clone(),
                id,
                kind,
                rkey: AtomicU32::new(rkey),
                was_bound: AtomicBool::new(false),
            }),
        })
    }
}

impl Mw {
    /// The window's current R_Key (each bind gives it a new one).
    pub fn rkey(&self) -> u32 {
        self.inner.rkey.load(Ordering::Relaxed)
    }

    /// Its type.
    pub fn kind(&self) -> MwType {
        self.inner.kind
    }

    /// The R_Key the next bind gives it (`ibv_inc_rkey`: the low 8 bits, its key,
    /// advance by one; the rest names the window).
    fn next_rkey(&self) -> u32 {
        let k = self.rkey();
        (k & !0xff) | (k.wrapping_add(1) & 0xff)
    }

    fn check_pd(&self, verb: &'static str, pd: &Arc<PdInner>) -> Result<()> {
        if Arc::ptr_eq(&self.inner.pd, pd) {
            return Ok(());
        }
        Err(VerbError::new(verb, Errno::Inval, "the window belongs to another PD").into())
    }
}

fn bind_of(mw: &Mw, buf: Option<LocalBuf<'_>>, access: AccessFlags, rkey: u32) -> MwBind {
    let (mr_lkey, addr, length) = buf.map_or((0, 0, 0), |b| {
        (b.mr.lkey, b.mr.addr + b.offset as u64, b.len as u64)
    });
    MwBind {
        mw: mw.inner.id,
        key: (rkey & 0xff) as u8,
        mr_lkey,
        addr,
        length,
        access,
    }
}

impl Qp {
    /// `ibv_bind_mw` of a type-1 window: from when the bind executes (in order with
    /// this QP's earlier requests; its completion is `wr_id`, always signaled) the
    /// peer may use `buf` with the returned key and `access` (remote rights; the
    /// region needs [`AccessFlags::MW_BIND`]). Binding again moves the window and
    /// changes its key; the old key grants nothing.
    ///
    /// # Errors
    /// EINVAL for a type-2 window (bind those with [`SendRequest::bind_mw`]), a window
    /// or region of another PD; else the device's (EOPNOTSUPP without windows).
    pub fn bind_mw(
        &self,
        wr_id: u64,
        mw: &Mw,
        buf: LocalBuf<'_>,
        access: AccessFlags,
    ) -> Result<RemoteBuf> {
        let req = self.type1_bind(wr_id, mw, Some(buf), access)?;
        let rkey = self.dev.bind_mw(&req)?;
        mw.inner.rkey.store(rkey, Ordering::Relaxed);
        mw.inner.was_bound.store(true, Ordering::Relaxed);
        Ok(RemoteBuf {
            addr: buf.mr.addr + buf.offset as u64,
            rkey,
            len: u32::try_from(buf.len).unwrap_or(u32::MAX),
        })
    }

    /// Unbinds a type-1 window (`ibv_bind_mw` with length 0): from when it executes
    /// its key grants nothing. Errors as [`Qp::bind_mw`], and EINVAL for a window
    /// never bound (it grants nothing; rxe's provider needs the region of the last
    /// bind to post an unbind).
    pub fn unbind_mw(&self, wr_id: u64, mw: &Mw) -> Result<()> {
        if !mw.inner.was_bound.load(Ordering::Relaxed) {
            let why = "the window was never bound";
            return Err(VerbError::new("bind_mw", Errno::Inval, why).into());
        }
        let req = self.type1_bind(wr_id, mw, None, AccessFlags::NONE)?;
        let rkey = self.dev.bind_mw(&req)?;
        mw.inner.rkey.store(rkey, Ordering::Relaxed);
        Ok(())
    }

    fn type1_bind<'a>(
        &self,
        wr_id: u64,
        mw: &'a Mw,
        buf: Option<LocalBuf<'a>>,
        access: AccessFlags,
    ) -> Result<SendRequest<'a>> {
        mw.check_pd("bind_mw", &self.pd)?;
        if mw.kind() != MwType::Type1 {
            let why = "a type-2 window is bound by a BIND_MW work request";
            return Err(VerbError::new("bind_mw", Errno::Inval, why).into());
        }
        if buf.is_some_and(|b| b.mr.pd != self.pd.id) {
            let why = "the region belongs to another PD";
            return Err(VerbError::new("bind_mw", Errno::Inval, why).into());
        }
        let rkey = mw.next_rkey();
        let bufs: Vec<LocalBuf<'a>> = buf.into_iter().collect();
        Ok(SendRequest {
            bind: Some((&mw.inner.rkey, rkey)),
            ..SendRequest::new(
                wr_id,
                WrOpcode::BindMw(bind_of(mw, buf, access, rkey)),
                &bufs,
            )
        })
    }
}

impl<'a> SendRequest<'a> {
    /// BIND_MW of a type-2 window to `buf` with the remote rights `access`: executed
    /// in order with the QP's other requests; once posted, the window's key is
    /// [`SendRequest::bound`]'s and the old one grants nothing. The window is usable
    /// only through the QP it was bound on.
    pub fn bind_mw(wr_id: u64, mw: &'a Mw, buf: LocalBuf<'a>, access: AccessFlags) -> Self {
        let rkey = mw.next_rkey();
        SendRequest {
            bind: Some((&mw.inner.rkey, rkey)),
            ..Self::new(
                wr_id,
                WrOpcode::BindMw(bind_of(mw, Some(buf), access, rkey)),
                &[buf],
            )
        }
    }

    /// What a BIND_MW request gives the peer once posted: the window's address, new
    /// R_Key and length (`None` for other requests).
    pub fn bound(&self) -> Option<RemoteBuf> {
        match (self.opcode, self.bind) {
            (WrOpcode::BindMw(b), Some((_, rkey))) => Some(RemoteBuf {
                addr: b.addr,
                rkey,
                len: u32::try_from(b.length).unwrap_or(u32::MAX),
            }),
            _ => None,
        }
    }

    /// LOCAL_INV: invalidates the type-2 window whose R_Key is `rkey`, in order with
    /// the QP's requests (a local operation; its completion is `WcOpcode::LocalInv`).
    pub fn local_inv(wr_id: u64, rkey: u32) -> Self {
        SendRequest {
            remote: Some(RemoteBuf {
                addr: 0,
                rkey,
                len: 0,
            }),
            ..Self::new(wr_id, WrOpcode::LocalInv, &[])
        }
    }

    /// SEND with invalidate: sends `bufs` and has the receiver invalidate its type-2
    /// window `rkey` (the receiver's completion has `WcFlags::WITH_INV` and the key in
    /// `imm_data`).
    pub fn send_inv(wr_id: u64, bufs: &[LocalBuf<'a>], rkey: u32) -> Self {
        SendRequest {
            remote: Some(RemoteBuf {
                addr: 0,
                rkey,
                len: 0,
            }),
            ..Self::new(wr_id, WrOpcode::SendWithInv, bufs)
        }
    }
}
