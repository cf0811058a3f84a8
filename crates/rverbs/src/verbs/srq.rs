//! Shared receive queues (`struct ibv_srq`): one pool of receive buffers for many QPs.

use crate::error::Result;
use crate::verbs::{LocalBuf, Pd, PdInner};
use rverbs_engine::SrqId;
use std::sync::Arc;

pub(crate) struct SrqInner {
    pub(crate) pd: Arc<PdInner>,
    pub(crate) id: SrqId,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // QPs attached to the SRQ hold it, so none is left when this runs.
        self.pd.ctx.dev().destroy_srq(self.id);
    }
}

/// Sizes of a new SRQ (`struct ibv_srq_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInitAttr {
    /// Most receives the SRQ holds.
    pub max_wr: u32,
    /// Most scatter/gather elements per receive.
    pub max_sge: u32,
}

impl SrqInitAttr {
    /// Room for `max_wr` receives of up to 4 SGEs each.
    pub fn new(max_wr: u32) -> Self {
        SrqInitAttr { max_wr, max_sge: 4 }
    }
}

/// A shared receive queue: QPs created with [`crate::QpInitAttr::srq`] take their
/// receive buffers from it, in the order posted. It stays alive while such a QP does.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::{AccessFlags, SrqInitAttr};
/// let ctx = rverbs::device(None)?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let srq = pd.create_srq(&SrqInitAttr::new(256))?;
/// let bufs = pd.reg_mr(256 * 4096, AccessFlags::LOCAL_WRITE)?;
/// for i in 0..256 {
///     srq.post_recv(i as u64, &[bufs.slice(i * 4096..(i + 1) * 4096)])?;
/// }
/// srq.arm_limit(16)?; // an AsyncEvent::SrqLimitReached when fewer than 16 remain
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

impl Pd {
    /// `ibv_create_srq`. EINVAL when `max_wr` or `max_sge` is 0 or above the device's
    /// limits ([`crate::DeviceAttr::max_srq_wr`], [`crate::DeviceAttr::max_srq_sge`]).
    pub fn create_srq(&self, attr: &SrqInitAttr) -> Result<Srq> {
        let pd = self.inner().clone();
        let id = pd.ctx.dev().create_srq(pd.id, attr.max_wr, attr.max_sge)?;
        Ok(Srq {
            inner: Arc::new(SrqInner { pd, id }),
        })
    }
}

impl Srq {
    /// `ibv_post_srq_recv` of one receive. ENOMEM when the SRQ is full, EINVAL with
    /// more SGEs than `max_sge`.
    pub fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        self.inner
            .pd
            .ctx
            .dev()
            .post_srq_recv(self.inner.id, wr_id, bufs)
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event — when a receive is
    /// taken and fewer than `limit` remain, [`crate::AsyncEvent::SrqLimitReached`] is
    /// reported once ([`crate::Context::get_async_event`]) and the limit disarms. 0
    /// disarms; above `max_wr` is EINVAL.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.inner.pd.ctx.dev().modify_srq(self.inner.id, limit)
    }

    /// The SRQ's handle number (what [`crate::AsyncEvent::SrqLimitReached`] reports).
    pub fn handle(&self) -> u32 {
        self.inner.id.raw()
    }
}
