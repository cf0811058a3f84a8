//! Protection domains ([`Pd`]) and what is made in one: memory regions, QPs, AHs.

use super::*;
use crate::error::Error;
use crate::error::Result;
use crate::soft::Shared;
use rverbs_engine::{PdId, QpInit, QpState, QpType, VecMemory};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) id: PdId,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let id = self.id;
        self.ctx.shared().destroy(move |_, e| {
            let _ = e.dealloc_pd(id);
        });
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
        let id = self.shared().lock_verb("alloc_pd")?.alloc_pd();
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
        let id = self.shared().lock_verb("create_cq")?.create_cq(cqe)?;
        let inner = Arc::new(CqInner {
            ctx: self.clone(),
            id,
            empty_at: AtomicU64::new(0),
            events: AtomicU32::new(0),
            acked: AtomicU32::new(0),
            roce: std::sync::atomic::AtomicBool::new(false),
        });
        self.bind_cq(&inner, channel);
        Ok(Cq { inner })
    }
}

impl Pd {
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.inner.ctx.shared()
    }

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
        // The buffer's own address is the region's virtual address, as with real
        // verbs; it is only a number to the device. (Moving the Vec keeps its heap
        // buffer, so the address stays the buffer's.)
        let addr = buf.as_ptr() as u64;
        let region = Arc::new(VecMemory::from_vec(buf));
        let keys = self.shared().lock_verb("reg_mr")?.reg_mr(
            self.inner.id,
            region.clone(),
            addr,
            access,
        )?;
        Ok(Mr {
            pd: self.inner.clone(),
            region,
            lkey: keys.lkey,
            rkey: keys.rkey,
            addr,
            len,
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
        let shared = self.shared();
        let mut engine = shared.lock_verb("create_ah")?;
        // Checked under the engine lock, which the address re-scan holds while it
        // frees and reuses GID slots (context.rs `rescan`): checked before it, the
        // slot could be freed and given to a new address in between, and the AH would
        // silently send from that address. Lock order: engine, then the GID table.
        self.inner.ctx.check_sgid(attr.av.sgid_index, "create_ah")?;
        let id = engine.create_ah(self.inner.id, attr.av)?;
        drop(engine);
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
        if attr.qp_type == QpType::RawPacket {
            return self.create_raw_qp(attr);
        }
        let init = QpInit {
            pd: self.inner.id,
            qp_type: attr.qp_type,
            send_cq: attr.send_cq.inner.id,
            recv_cq: attr.recv_cq.inner.id,
            srq: attr.srq.map(|s| s.inner.id),
            cap: attr.cap,
            sq_sig_all: attr.sq_sig_all,
        };
        let qpn = self.shared().lock_verb("create_qp")?.create_qp(init)?;
        for cq in [attr.send_cq, attr.recv_cq] {
            cq.inner.roce.store(true, Ordering::Relaxed);
        }
        if attr.qp_type == QpType::Ud {
            // Its receives carry a GRH with the datagram's TTL / TOS.
            self.shared().udp.recv_meta_user(true);
        }
        Ok(Qp {
            pd: self.inner.clone(),
            _cqs: [attr.send_cq.inner.clone(), attr.recv_cq.inner.clone()],
            _srq: attr.srq.map(|s| s.inner.clone()),
            qpn,
            qp_type: attr.qp_type,
            raw: None,
        })
    }

    /// A RAW_PACKET QP: EPERM without CAP_NET_RAW (uverbs checks it before the
    /// driver: `rdma_dev_has_raw_cap` in `create_qp`), EOPNOTSUPP on a context not in
    /// raw mode, EINVAL with an SRQ (raw QPs here have their own receive queue).
    pub(crate) fn create_raw_qp(&self, attr: &QpInitAttr) -> Result<Qp> {
        let verr =
            |errno, why| -> Error { rverbs_engine::VerbError::new("create_qp", errno, why).into() };
        let shared = self.shared();
        if !rverbs_raw::has_cap_net_raw() {
            return Err(verr(
                rverbs_engine::Errno::Perm,
                "RAW_PACKET QPs need CAP_NET_RAW",
            ));
        }
        let Some(mode) = &shared.raw else {
            return Err(verr(
                rverbs_engine::Errno::NotSupported,
                "the context is not in raw mode (OpenOptions::raw_interface)",
            ));
        };
        let Some(dev) = &mode.dev else {
            return Err(verr(
                rverbs_engine::Errno::Perm,
                "the context was opened without CAP_NET_RAW",
            ));
        };
        if attr.srq.is_some() {
            return Err(verr(
                rverbs_engine::Errno::Inval,
                "RAW_PACKET QPs take no SRQ here",
            ));
        }
        let qpn = {
            let mut e = shared.lock_verb("create_qp")?;
            let limits = e.config().limits;
            rverbs_engine::modify::check_cap(&attr.cap, false, &limits).map_err(|e| {
                rverbs_engine::VerbError {
                    verb: "create_qp",
                    ..e
                }
            })?;
            // From the engine's number space: QP numbers stay unique on the context.
            e.reserve_qpn()?
        };
        let max_recv_wr = (attr.cap.max_recv_wr as usize).max(1);
        let raw = match dev.create_qp_with_rq_numbered(max_recv_wr, qpn) {
            Ok(r) => r,
            Err(err) => {
                shared.lock().release_qpn(qpn);
                return Err(Error::io("creating the raw queue", err));
            }
        };
        let inner = Arc::new(crate::raw::RawQpInner {
            raw,
            pd: self.inner.id,
            send_cq: attr.send_cq.inner.id,
            recv_cq: attr.recv_cq.inner.id,
            sq_sig_all: attr.sq_sig_all,
            max_recv_wr,
            cap: attr.cap,
            st: Mutex::new(crate::raw::RawQpState {
                state: QpState::Reset,
                held: Default::default(),
                posted: Default::default(),
                local: Default::default(),
            }),
            state_now: Default::default(),
        });
        // The device's receive thread wakes the driver, which moves completions into
        // the CQs (and so fires armed CQs' events).
        let weak = Arc::downgrade(shared);
        inner.raw.set_notify(Some(Arc::new(move || {
            if let Some(s) = weak.upgrade() {
                s.activity.fetch_add(1, Ordering::Release);
                s.wake();
            }
        })));
        mode.qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&inner));
        Ok(Qp {
            pd: self.inner.clone(),
            _cqs: [attr.send_cq.inner.clone(), attr.recv_cq.inner.clone()],
            _srq: None,
            qpn: inner.raw.qp_num(),
            qp_type: QpType::RawPacket,
            raw: Some(inner),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<PdInner> {
        &self.inner
    }
}
