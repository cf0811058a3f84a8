//! Protection domains ([`Pd`]) and what is made in one: memory regions, QPs, AHs.

use super::*;
use crate::device::ops::QpCreate;
use crate::device::wr::MrMem;
use crate::error::Error;
use crate::error::Result;
use rverbs_engine::PdId;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) id: PdId,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        self.ctx.dev().dealloc_pd(self.id);
    }
}

/// A protection domain (`struct ibv_pd`): the scope of memory regions, QPs, SRQs and
/// address handles (a QP can only use regions and AHs of its own PD). Cheap to clone.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::{AccessFlags, QpInitAttr, QpType};
/// let ctx = rverbs::device(None)?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let mr = pd.reg_mr(1 << 20, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
/// let cq = ctx.create_cq(128)?;
/// let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
/// # let _ = (mr, qp); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let id = self.dev().alloc_pd()?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: self.clone(),
                id,
            }),
        })
    }

    /// `ibv_create_cq` with room for `cqe` completions. Its completion events, once
    /// armed with [`Cq::req_notify`], go to the context's built-in channel
    /// ([`Context::get_cq_event`]); see [`Context::create_cq_on`] for a channel of
    /// its own.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq> {
        self.new_cq(cqe, None)
    }

    /// `ibv_create_cq` on the completion channel `channel`.
    pub fn create_cq_on(&self, cqe: u32, channel: &CompChannel) -> Result<Cq> {
        self.new_cq(cqe, Some(channel))
    }

    pub(crate) fn new_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        if let Some(ch) = channel {
            if !Arc::ptr_eq(&ch.context().inner, &self.inner) {
                return Err(rverbs_engine::VerbError::new(
                    "create_cq",
                    rverbs_engine::Errno::Inval,
                    "the completion channel belongs to another context",
                )
                .into());
            }
        }
        let dev = self.dev().create_cq(cqe, channel.map(|c| &*c.inner))?;
        let inner = Arc::new(CqInner {
            dev,
            ctx: self.clone(),
            events: AtomicU32::new(0),
            acked: AtomicU32::new(0),
        });
        self.bind_cq(&inner, channel);
        Ok(Cq { inner })
    }
}

impl Pd {
    /// The context the PD was allocated on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// `ibv_reg_mr` of a new zeroed buffer of `len` bytes.
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Mr> {
        self.reg_mr_from(vec![0; len], access)
    }

    /// `ibv_reg_mr` of `buf`, which the region takes over.
    pub fn reg_mr_from(&self, buf: Vec<u8>, access: AccessFlags) -> Result<Mr> {
        let len = buf.len();
        let crate::device::ops::Registered { region, addr, keys } =
            self.inner.ctx.dev().reg_mr(self.inner.id, buf, access)?;
        Ok(Mr {
            pd: self.inner.clone(),
            mem: MrMem {
                region,
                lkey: keys.lkey,
                rkey: keys.rkey,
                addr,
                len,
                pd: self.inner.id,
            },
        })
    }

    /// `ibv_create_ah` towards `attr.av.dgid` from the source GID at
    /// `attr.av.sgid_index` of port `attr.port_num` (1; another port is EINVAL).
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        if attr.port_num != 1 {
            return Err(rverbs_engine::VerbError::new(
                "create_ah",
                rverbs_engine::Errno::Inval,
                "no such port",
            )
            .into());
        }
        let id = self.inner.ctx.dev().create_ah(self.inner.id, attr)?;
        Ok(Ah {
            pd: self.inner.clone(),
            id,
        })
    }

    /// `ibv_create_qp`: a QP in the RESET state (see [`QpInitAttr`] for what it is made
    /// of, [`Qp::connect`] / [`Qp::modify`] to bring it up). The CQs, the SRQ and this PD
    /// must belong to this PD's context (EINVAL otherwise); the SRQ must be of this PD.
    pub fn create_qp(&self, attr: &QpInitAttr) -> Result<Qp> {
        let inval = |why| -> Error {
            rverbs_engine::VerbError::new("create_qp", rverbs_engine::Errno::Inval, why).into()
        };
        for cq in [attr.send_cq, attr.recv_cq] {
            if !Arc::ptr_eq(&cq.inner.ctx.inner, &self.inner.ctx.inner) {
                return Err(inval("a CQ belongs to another context"));
            }
        }
        if let Some(srq) = attr.srq {
            if !Arc::ptr_eq(&srq.inner.pd, &self.inner) {
                return Err(inval("the SRQ belongs to another protection domain"));
            }
        }
        let init = QpCreate {
            qp_type: attr.qp_type,
            send_cq: &*attr.send_cq.inner.dev,
            recv_cq: &*attr.recv_cq.inner.dev,
            srq: attr.srq.map(|s| s.inner.id),
            cap: attr.cap,
            sq_sig_all: attr.sq_sig_all,
        };
        let dev = self.inner.ctx.dev().create_qp(self.inner.id, &init)?;
        Ok(Qp {
            qpn: dev.qp_num(),
            dev,
            pd: self.inner.clone(),
            _cqs: [attr.send_cq.inner.clone(), attr.recv_cq.inner.clone()],
            _srq: attr.srq.map(|s| s.inner.clone()),
            qp_type: attr.qp_type,
        })
    }

    pub(crate) fn inner(&self) -> &Arc<PdInner> {
        &self.inner
    }
}
