//! CQs, completion channels and QPs of a system device: each call goes straight to
//! the provider (`ibv_poll_cq`, `ibv_post_send`, ... through the context's ops), with
//! no lock and no thread of rverbs in between.

use super::conv::{self, inval, verr};
use super::{check_lens, Tables};
use crate::device::ops::{CqOwner, DeviceChannel, DeviceCq, DeviceFlow, DeviceMad, DeviceQp};
use crate::device::wr::{LocalBuf, Region, SendRequest};
use crate::error::{Error, Result};
use crate::sys::ibv;
use rverbs_engine::mad::gsi::{AgentId, GsiDest, GsiRecv, Registration};
use rverbs_engine::mad::{GrhArea, Mad, MadResult, MadStats, Trap};
use rverbs_engine::modify::{QpAttr, QpAttrMask, QpCap};
use rverbs_engine::{CqId, Errno, QpState, QpType, VerbError, Wc, WrOpcode};
use rverbs_wire::grh::Gid;
use std::any::Any;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

fn unsupported(verb: &'static str, why: &'static str) -> Error {
    VerbError::new(verb, Errno::NotSupported, why).into()
}

type Owners = Mutex<HashMap<u64, Weak<dyn Any + Send + Sync>>>;

/// A completion channel: the library's, and the public CQ handle of each of its CQs.
#[derive(Clone)]
pub(crate) struct HwChannel {
    ch: Arc<ibv::Channel>,
    owners: Arc<Owners>,
}

impl HwChannel {
    pub(crate) fn new(ctx: &Arc<ibv::Context>) -> Result<HwChannel> {
        Ok(HwChannel {
            ch: ibv::Channel::new(ctx).map_err(|e| verr("create_comp_channel", e))?,
            owners: Arc::default(),
        })
    }

    pub(crate) fn share(&self) -> Arc<HwChannel> {
        Arc::new(self.clone())
    }

    fn owner(&self, id: u64) -> Option<CqOwner> {
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .and_then(Weak::upgrade)
    }
}

impl DeviceChannel for HwChannel {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn get_cq_event(&self, timeout: Option<Duration>) -> Option<CqOwner> {
        let until = timeout.map(|t| Instant::now() + t);
        loop {
            let ms = until.map_or(-1, |u| {
                crate::sys::poll_ms(u.saturating_duration_since(Instant::now()).as_nanos() as u64)
            });
            // An event of a CQ whose handle is gone is dropped (acknowledged).
            if let Some(o) = self.ch.get_cq_event(ms).and_then(|id| self.owner(id)) {
                return Some(o);
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return None;
            }
        }
    }

    fn try_get_cq_event(&self) -> Option<CqOwner> {
        while let Some(id) = self.ch.get_cq_event(0) {
            if let Some(o) = self.owner(id) {
                return Some(o);
            }
        }
        None
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.ch.fd()
    }

    fn is_empty(&self) -> bool {
        let mut ready = Vec::new();
        crate::sys::poll_readable(&[self.ch.fd().as_raw_fd()], 0, &mut ready).is_ok()
            && !ready.first().copied().unwrap_or(false)
    }
}

/// A CQ of a system device.
pub(crate) struct HwCq {
    cq: Arc<ibv::Cq>,
    ch: Arc<HwChannel>,
    id: u32,
    dialect: conv::WcDialect,
}

impl HwCq {
    pub(crate) fn new(
        ctx: &Arc<ibv::Context>,
        cqe: u32,
        ch: Arc<HwChannel>,
        id: u32,
        dialect: conv::WcDialect,
    ) -> Result<HwCq> {
        let cq =
            ibv::Cq::new(ctx, cqe, Some(&ch.ch), id.into()).map_err(|e| verr("create_cq", e))?;
        Ok(HwCq {
            cq: Arc::new(cq),
            ch,
            id,
            dialect,
        })
    }

    pub(crate) fn raw(&self) -> Arc<ibv::Cq> {
        self.cq.clone()
    }
}

impl Drop for HwCq {
    fn drop(&mut self) {
        self.ch
            .owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&u64::from(self.id));
    }
}

impl DeviceCq for HwCq {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn handle(&self) -> CqId {
        CqId::from_raw(self.id)
    }

    fn bind(&self, owner: Weak<dyn Any + Send + Sync>, _channel: Option<&dyn DeviceChannel>) {
        // The channel was given to `ibv_create_cq` (Device::create_cq).
        self.ch
            .owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.id.into(), owner);
    }

    fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        let mut buf = [ibv::zeroed_wc(); 32];
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(buf.len());
            let n = self
                .cq
                .poll(&mut buf[..want])
                .map_err(|e| verr("poll_cq", e))?;
            for (o, w) in out[done..].iter_mut().zip(&buf[..n]) {
                *o = conv::wc(w, self.dialect);
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    fn wait(&self, out: &mut [Wc], spin: Duration, timeout: Duration) -> Result<usize> {
        let start = Instant::now();
        loop {
            let n = self.poll(out)?;
            let waited = start.elapsed();
            if n > 0 || waited >= timeout {
                return Ok(n);
            }
            if waited < spin {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50).min(timeout - waited));
            }
        }
    }

    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.cq
            .req_notify(solicited_only)
            .map_err(|e| verr("req_notify_cq", e))
    }
}

/// The library's view of a request's buffers: ranges of this device's regions.
pub(crate) fn sges<'a>(verb: &'static str, bufs: &[LocalBuf<'a>]) -> Result<Vec<ibv::Sge<'a>>> {
    check_lens(verb, bufs)?;
    bufs.iter()
        .map(|b| match &b.mr.region {
            Region::Hw(mr) => Ok(ibv::Sge {
                mr,
                offset: b.offset,
                len: b.len,
            }),
            Region::Soft(_) => Err(inval(verb, "a region of the soft device, not of this one")),
        })
        .collect()
}

/// A QP of a system device.
pub(crate) struct HwQp {
    /// Shared with its flow rules, which the kernel wants gone before the QP.
    qp: Arc<ibv::Qp>,
    qpn: u32,
    tables: Arc<Tables>,
    qp_type: QpType,
    cap: QpCap,
}

impl HwQp {
    pub(crate) fn new(qp: ibv::Qp, tables: Arc<Tables>, qp_type: QpType, cap: QpCap) -> HwQp {
        HwQp {
            qpn: qp.qp_num(),
            qp: Arc::new(qp),
            tables,
            qp_type,
            cap,
        }
    }

    /// Posts `wrs` as one chain.
    fn post(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), (usize, Error)> {
        let mut ahs = Vec::with_capacity(wrs.len());
        let mut lists = Vec::with_capacity(wrs.len());
        for (i, w) in wrs.iter().enumerate() {
            w.check_remote_len().map_err(|e| (i, e))?;
            lists.push(sges("post_send", w.bufs.as_slice()).map_err(|e| (i, e))?);
            ahs.push(match (&w.ud, self.qp_type) {
                (Some(d), QpType::Ud) => Some(self.tables.ah(d.ah).map_err(|e| (i, e))?),
                (None, QpType::Ud) => {
                    return Err((i, inval("post_send", "a UD send needs a destination")))
                }
                _ => None,
            });
        }
        let mws = wrs
            .iter()
            .enumerate()
            .map(|(i, w)| {
                match w.opcode {
                    WrOpcode::BindMw(b) => self.tables.mw(b.mw, "post_send").map(Some),
                    _ => Ok(None),
                }
                .map_err(|e| (i, e))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut c = Vec::with_capacity(wrs.len());
        for (i, (((w, list), ah), mw)) in wrs.iter().zip(&lists).zip(&ahs).zip(&mws).enumerate() {
            let opcode = conv::wr_opcode(&w.opcode).map_err(|e| (i, e))?;
            let r = w.remote.unwrap_or(crate::RemoteBuf {
                addr: 0,
                rkey: 0,
                len: 0,
            });
            let remote = match (&w.opcode, ah, &w.ud) {
                (WrOpcode::BindMw(b), _, _) => {
                    ibv::Remote::Bind(bind_of(mw, list, b).map_err(|e| (i, e))?)
                }
                (_, Some(ah), Some(d)) => ibv::Remote::Ud {
                    ah,
                    qpn: d.remote_qpn,
                    qkey: d.remote_qkey,
                },
                (WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead, _, _) => {
                    ibv::Remote::Rdma {
                        addr: r.addr,
                        rkey: r.rkey,
                    }
                }
                (WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd, _, _) => {
                    ibv::Remote::Atomic {
                        addr: r.addr,
                        rkey: r.rkey,
                        compare_add: w.compare_add,
                        swap: w.swap,
                    }
                }
                _ => ibv::Remote::None,
            };
            c.push(ibv::SendWr {
                wr_id: w.wr_id,
                opcode,
                flags: w.flags.0,
                // verbs.h: imm_data is big-endian, invalidate_rkey host order (the
                // key is the request's RemoteBuf's, as the engine's `SendWr::rkey`).
                imm_be: if matches!(w.opcode, WrOpcode::SendWithInv | WrOpcode::LocalInv) {
                    r.rkey
                } else {
                    w.imm.to_be()
                },
                // A bind's buffer is its range (in `remote`), not data.
                sges: if matches!(remote, ibv::Remote::Bind(_)) {
                    &[]
                } else {
                    list
                },
                remote,
            });
        }
        self.qp
            .post_send(&c)
            .map_err(|(i, e)| (i, verr("post_send", e)))
    }
}

impl DeviceQp for HwQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }

    fn state(&self) -> QpState {
        self.qp
            .query()
            .map_or(QpState::Err, |(a, _)| conv::state_of(a.qp_state))
    }

    fn query(&self) -> Result<QpAttr> {
        let (a, _) = self.qp.query().map_err(|e| verr("query_qp", e))?;
        let mut q = conv::qp_attr_of(&a);
        if q.cap.max_send_wr == 0 && q.cap.max_recv_wr == 0 {
            q.cap = self.cap;
        }
        Ok(q)
    }

    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        if mask.contains(QpAttrMask::AV) && attr.ah_attr.is_none() {
            return Err(inval("modify_qp", "AV set without an address"));
        }
        self.qp
            .modify(&conv::qp_attr(attr), mask.0)
            .map_err(|e| verr("modify_qp", e))
    }

    fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        self.post(std::slice::from_ref(wr)).map_err(|(_, e)| e)
    }

    fn post_send_list(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), (usize, Error)> {
        self.post(wrs)
    }

    fn bind_mw(&self, wr: &SendRequest<'_>) -> Result<u32> {
        let WrOpcode::BindMw(b) = wr.opcode else {
            return Err(inval("bind_mw", "not a bind request"));
        };
        let mw = self.tables.mw(b.mw, "bind_mw")?;
        let list = sges("bind_mw", wr.bufs.as_slice())?;
        let range = list.first().copied();
        mw.bind(&self.qp, wr.wr_id, wr.flags.0, range, b.access.0)
            .map_err(|e| verr("bind_mw", e))
    }

    fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        let s = sges("post_recv", bufs)?;
        self.qp
            .post_recv(wr_id, &s)
            .map_err(|e| verr("post_recv", e))
    }

    fn attach_mcast(&self, gid: &Gid) -> Result<()> {
        self.qp
            .mcast(gid.0, true)
            .map_err(|e| verr("attach_mcast", e))
    }

    fn detach_mcast(&self, gid: &Gid) -> Result<()> {
        self.qp
            .mcast(gid.0, false)
            .map_err(|e| verr("detach_mcast", e))
    }

    fn modify_from_cm(&self, attr: &ibv::types::ibv_qp_attr, mask: u32) -> Result<()> {
        self.qp.modify(attr, mask).map_err(|e| verr("modify_qp", e))
    }

    fn create_flow(&self, attr: &rverbs_flow::attr::FlowAttr) -> Result<Box<dyn DeviceFlow>> {
        let (head, specs) = conv::flow_rule(attr)?;
        let rule = ibv::FlowRule::create(&self.qp, &head, &specs)
            .map_err(|e| verr("ibv_create_flow", e))?;
        Ok(Box::new(HwFlow(rule)))
    }
}

/// A flow rule of a system device (the provider's).
struct HwFlow(ibv::FlowRule);

impl DeviceFlow for HwFlow {
    fn id(&self) -> rverbs_flow::classify::FlowId {
        rverbs_flow::classify::FlowId::from_raw(self.0.handle().into())
    }

    fn destroy(self: Box<Self>) -> Result<()> {
        self.0.destroy().map_err(|e| verr("ibv_destroy_flow", e))
    }
}

/// The BIND_MW part of a request: its window (looked up by `post`), the range of its
/// one buffer and the rights.
fn bind_of<'a>(
    mw: &'a Option<Arc<ibv::Mw>>,
    list: &'a [ibv::Sge<'a>],
    b: &rverbs_engine::MwBind,
) -> Result<ibv::MwBind<'a>> {
    let mw = mw
        .as_deref()
        .ok_or_else(|| inval("post_send", "no such memory window"))?;
    Ok(ibv::MwBind {
        mw,
        rkey: (mw.rkey() & !0xff) | u32::from(b.key),
        range: list.first().copied(),
        access: b.access.0,
    })
}

/// Management datagrams are not offered on a system device (its GSI QP belongs to the
/// kernel's MAD layer, reached through libibumad): every call is EOPNOTSUPP or empty.
pub(crate) struct HwMad;

const NO_MAD: &str = "management datagrams are offered on the soft device only";

impl DeviceMad for HwMad {
    fn register_agent(&self, _reg: Option<Registration>) -> Result<AgentId> {
        Err(unsupported("umad_register", NO_MAD))
    }
    fn unregister_agent(&self, _id: AgentId) {}
    fn send(&self, _id: AgentId, _dest: GsiDest, _mad: &Mad) -> Result<()> {
        Err(unsupported("umad_send", NO_MAD))
    }
    fn send_as_is(&self, _id: AgentId, _dest: GsiDest, _mad: &Mad) -> Result<()> {
        Err(unsupported("umad_send", NO_MAD))
    }
    fn try_recv(&self, _id: AgentId) -> Option<GsiRecv> {
        None
    }
    fn requeue(&self, _id: AgentId, _mads: Vec<GsiRecv>) {}
    fn process_mad(
        &self,
        _mad_flags: u32,
        _port: u8,
        _in_wc: Option<&Wc>,
        _in_grh: Option<&GrhArea>,
        in_mad: &Mad,
    ) -> (MadResult, Mad) {
        (MadResult::FAILURE, *in_mad)
    }
    fn local_smp(&self, _smp: &Mad) -> Result<Mad> {
        Err(unsupported("process_mad", NO_MAD))
    }
    fn poll_trap(&self) -> Option<Trap> {
        None
    }
    fn stats(&self) -> MadStats {
        MadStats::default()
    }
    fn pma_counters(&self) -> rverbs_engine::mad::pma::PortTotals {
        Default::default()
    }
    fn set_b_key(&self, _key: u64, _protect: bool) {}
    fn set_m_key(&self, _key: u64, _protect_bits: u8) {}
}
