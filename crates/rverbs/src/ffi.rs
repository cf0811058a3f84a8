//! Hooks for the C library (`crates/libibverbs`, feature `ffi`): a C caller names its
//! memory by address and key, not by a borrowed [`Mr`](crate::Mr), so the library
//! registers regions over its own [`Memory`] and posts the engine's work requests
//! directly. Not a stable API; the Rust API is the rest of the crate.

use crate::error::{Error, Result};
use crate::verbs::{Ah, Pd, PdInner, Qp, Srq};
use rverbs_engine::{Access, AhId, Memory, MwId, MwType, QpType, RecvWr, SendWr};
use std::sync::Arc;

/// The soft device behind `ctx`: the C library is built over it (EOPNOTSUPP on
/// another device).
fn soft(ctx: &crate::verbs::Context) -> Result<&Arc<crate::soft::Shared>> {
    ctx.soft().ok_or_else(|| {
        rverbs_engine::VerbError::new(
            "libibverbs",
            rverbs_engine::Errno::NotSupported,
            "the C library runs over the soft device only",
        )
        .into()
    })
}

/// A region registered over caller-provided memory; deregistered when dropped.
pub struct ForeignMr {
    pd: Arc<PdInner>,
    lkey: u32,
    rkey: u32,
    /// Deregistered by [`ForeignMr::dereg`] (nothing left to do when dropped).
    gone: bool,
}

impl ForeignMr {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
}

impl ForeignMr {
    /// `ibv_rereg_mr`: the region becomes `mem` at `iova` in `pd` with `access`, keys
    /// unchanged. On an error the region stays as it was.
    pub fn rereg(
        &mut self,
        pd: &Pd,
        mem: Arc<dyn Memory>,
        iova: u64,
        access: Access,
    ) -> Result<()> {
        if !Arc::ptr_eq(&pd.inner.ctx.inner, &self.pd.ctx.inner) {
            return Err(rverbs_engine::VerbError::new(
                "rereg_mr",
                rverbs_engine::Errno::Inval,
                "the PD belongs to another context",
            )
            .into());
        }
        soft(&pd.inner.ctx)?.lock_verb("rereg_mr")?.rereg_mr(
            self.lkey,
            pd.inner.id,
            mem,
            iova,
            access,
        )?;
        self.pd = pd.inner.clone();
        Ok(())
    }
}

impl ForeignMr {
    /// `ibv_dereg_mr` with its answer: EBUSY while memory windows are bound to the
    /// region (it stays registered), else deregistered now.
    pub fn dereg(&mut self) -> Result<()> {
        if !self.gone {
            soft(&self.pd.ctx)?
                .lock_verb("dereg_mr")?
                .dereg_mr(self.lkey)?;
            self.gone = true;
        }
        Ok(())
    }
}

impl Drop for ForeignMr {
    fn drop(&mut self) {
        if self.gone {
            return;
        }
        let lkey = self.lkey;
        if let Some(s) = self.pd.ctx.soft() {
            s.destroy(move |_, e| {
                let _ = e.dereg_mr(lkey);
            });
        }
    }
}

/// `ibv_reg_mr_iova2`: `mem` at virtual address `iova` in `pd`.
pub fn reg_mr(pd: &Pd, mem: Arc<dyn Memory>, iova: u64, access: Access) -> Result<ForeignMr> {
    let keys = soft(&pd.inner.ctx)?
        .lock_verb("reg_mr")?
        .reg_mr(pd.inner.id, mem, iova, access)?;
    Ok(ForeignMr {
        pd: pd.inner.clone(),
        lkey: keys.lkey,
        rkey: keys.rkey,
        gone: false,
    })
}

/// A memory window; deallocated when dropped.
pub struct ForeignMw {
    pd: Arc<PdInner>,
    id: MwId,
    rkey: u32,
}

impl ForeignMw {
    /// The engine's name of the window (what a BIND_MW work request names).
    pub fn id(&self) -> MwId {
        self.id
    }
    /// The R_Key it was allocated with.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
}

impl Drop for ForeignMw {
    fn drop(&mut self) {
        let id = self.id;
        if let Some(s) = self.pd.ctx.soft() {
            s.destroy(move |_, e| {
                let _ = e.dealloc_mw(id);
            });
        }
    }
}

/// `ibv_alloc_mw`: a window of `kind` in `pd`.
pub fn alloc_mw(pd: &Pd, kind: MwType) -> Result<ForeignMw> {
    let (id, rkey) = soft(&pd.inner.ctx)?
        .lock_verb("alloc_mw")?
        .alloc_mw(pd.inner.id, kind)?;
    Ok(ForeignMw {
        pd: pd.inner.clone(),
        id,
        rkey,
    })
}

/// `ibv_post_send` of a chain: the device is entered once. On a refused request, its
/// index and the error (the requests before it were posted).
pub fn post_send(
    qp: &Qp,
    wrs: impl IntoIterator<Item = Result<SendWr>>,
) -> std::result::Result<(), (usize, Error)> {
    let s = soft(&qp.pd.ctx).map_err(|e| (0, e))?;
    if qp.qp_type == QpType::RawPacket {
        // The raw device's queue, not the engine's: one request at a time.
        for (i, wr) in wrs.into_iter().enumerate() {
            wr.and_then(|wr| qp.dev.post_send_keyed(&wr))
                .map_err(|e| (i, e))?;
        }
        return Ok(());
    }
    let mut e = s.lock_verb("post_send").map_err(|e| (0, e))?;
    let now = s.now();
    let mut failed = None;
    for (i, wr) in wrs.into_iter().enumerate() {
        if let Err(err) = wr.and_then(|wr| Ok(e.post_send(qp.qp_num(), wr, now)?)) {
            failed = Some((i, err));
            break;
        }
    }
    s.flush(&mut e, now);
    s.wake_if_needed(&e);
    failed.map_or(Ok(()), Err)
}

/// `ibv_post_recv` of one request.
pub fn post_recv(qp: &Qp, wr: RecvWr) -> Result<()> {
    let s = soft(&qp.pd.ctx)?;
    if qp.qp_type == QpType::RawPacket {
        return qp.dev.post_recv_keyed(&wr);
    }
    let mut e = s.lock_verb("post_recv")?;
    // As `Qp::post_recv`: the deferred time stands for the clock while answers wait.
    let now = match s.flush_pending.load(std::sync::atomic::Ordering::Relaxed) {
        0 => s.now(),
        at => at,
    };
    e.post_recv(qp.qp_num(), wr, now)?;
    s.settle(&mut e, now);
    Ok(())
}

/// `ibv_post_srq_recv` of one request.
pub fn post_srq_recv(srq: &Srq, wr: RecvWr) -> Result<()> {
    Ok(soft(&srq.inner.pd.ctx)?
        .lock_verb("post_srq_recv")?
        .post_srq_recv(srq.inner.id, wr)?)
}

/// The engine's handle of an address handle (a UD send's destination).
pub fn ah_id(ah: &Ah) -> AhId {
    ah.id
}
