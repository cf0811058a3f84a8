//! A RAW_PACKET queue pair of the soft device: a queue of the raw device (`crate::raw`,
//! the `rverbs-raw` crate) with its own receive queue, its completions moved into the
//! engine's CQs by the driver thread or the next poll.

use super::flow::SoftFlow;
use super::Shared;
use crate::device::guard::check_not_in_with;
use crate::device::ops::{DeviceFlow, DeviceQp, QpCreate};
use crate::device::wr::{LocalBuf, SendRequest};
use crate::error::{Error, Result};
use crate::raw::RawQpInner;
use rverbs_engine::modify::{QpAttr, QpAttrMask};
use rverbs_engine::{PdId, QpState, QpType, SendFlags, Wc, WrOpcode};
#[cfg(feature = "ffi")]
use rverbs_engine::{RecvWr, SendWr};
use rverbs_wire::grh::Gid;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

pub(crate) struct SoftRawQp {
    /// The device queue (first: it goes before the QP number is released).
    raw: RawQueue,
    shared: Arc<Shared>,
    qpn: u32,
    pd: PdId,
    _number: QpnRelease,
}

/// The raw device's queue of a QP, whose drop removes the queue and its flows.
struct RawQueue(Arc<RawQpInner>);

/// Gives the QP number back to the engine's number space when dropped.
struct QpnRelease {
    shared: Arc<Shared>,
    qpn: u32,
}

/// A RAW_PACKET QP: EPERM without CAP_NET_RAW (uverbs checks it before the
/// driver: `rdma_dev_has_raw_cap` in `create_qp`), EOPNOTSUPP on a context not in
/// raw mode, EINVAL with an SRQ (raw QPs here have their own receive queue).
pub(crate) fn create(
    shared: &Arc<Shared>,
    pd: PdId,
    init: &QpCreate<'_>,
) -> Result<Box<dyn DeviceQp>> {
    let verr =
        |errno, why| -> Error { rverbs_engine::VerbError::new("create_qp", errno, why).into() };

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
    if init.srq.is_some() {
        return Err(verr(
            rverbs_engine::Errno::Inval,
            "RAW_PACKET QPs take no SRQ here",
        ));
    }
    let qpn = {
        let mut e = shared.lock_verb("create_qp")?;
        let limits = e.config().limits;
        rverbs_engine::modify::check_cap(&init.cap, false, &limits).map_err(|e| {
            rverbs_engine::VerbError {
                verb: "create_qp",
                ..e
            }
        })?;
        // From the engine's number space: QP numbers stay unique on the context.
        e.reserve_qpn()?
    };
    let max_recv_wr = (init.cap.max_recv_wr as usize).max(1);
    let raw = match dev.create_qp_with_rq_numbered(max_recv_wr, qpn) {
        Ok(r) => r,
        Err(err) => {
            shared.lock().release_qpn(qpn);
            return Err(Error::io("creating the raw queue", err));
        }
    };
    let inner = Arc::new(crate::raw::RawQpInner {
        raw,
        pd,
        send_cq: init.send_cq.handle(),
        recv_cq: init.recv_cq.handle(),
        sq_sig_all: init.sq_sig_all,
        max_recv_wr,
        cap: init.cap,
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
    let qpn = inner.raw.qp_num();
    Ok(Box::new(SoftRawQp {
        raw: RawQueue(inner),
        shared: shared.clone(),
        qpn,
        pd,
        _number: QpnRelease {
            shared: shared.clone(),
            qpn,
        },
    }))
}

impl Drop for RawQueue {
    fn drop(&mut self) {
        // Dropping the device queue (with this last handle: the raw mode's list holds
        // weak ones) removes its flows; it takes the steering table's write lock,
        // never the engine's, so it runs here even inside `Mr::with` (the receive
        // thread never waits for a region while holding that lock: it copies frames
        // into the queue's own buffers).
        self.0.raw.set_notify(None);
    }
}

impl Drop for QpnRelease {
    fn drop(&mut self) {
        let qpn = self.qpn;
        self.shared.destroy(move |_, e| e.release_qpn(qpn));
    }
}

impl SoftRawQp {
    fn raw(&self) -> &RawQpInner {
        &self.raw.0
    }

    fn post_send_one(&self, wr: &SendRequest<'_>) -> Result<()> {
        let bufs = wr.bufs.as_slice();
        self.check_send(
            wr.opcode,
            wr.remote.is_some() || wr.ud.is_some(),
            bufs.len(),
        )?;
        // Buffers of another PD (IBTA 10.6.3.1; rxe's `copy_data` looks the key up in
        // the QP's PD): the request completes with a local protection error and
        // nothing is sent (an error completes whether signaled or not).
        let len = bufs.iter().map(LocalBuf::byte_len).sum();
        let frame = if bufs.iter().any(|b| b.mr.pd != self.pd) {
            None
        } else {
            Some(bufs.iter().flat_map(LocalBuf::bytes).collect())
        };
        self.send_frame(wr.wr_id, wr.flags, len, frame)
    }

    /// What a SEND on a RAW_PACKET QP must be before its buffers are read.
    fn check_send(&self, opcode: WrOpcode, addressed: bool, sges: usize) -> Result<()> {
        let r = self.raw();
        check_not_in_with("post_send")?;
        let inval = |why| -> Error {
            rverbs_engine::VerbError::new("post_send", rverbs_engine::Errno::Inval, why).into()
        };
        if r.lock().state != QpState::Rts {
            return Err(inval("the QP is not in RTS"));
        }
        if opcode != WrOpcode::Send || addressed {
            return Err(inval("a RAW_PACKET QP sends frames with SEND only"));
        }
        if sges > r.cap.max_send_sge as usize {
            return Err(over(
                "more SGEs than cap.max_send_sge",
                sges,
                r.cap.max_send_sge,
                "SGEs",
            ));
        }
        Ok(())
    }

    /// Sends one whole frame of `len` bytes (`None`: its buffers failed the protection
    /// check, and the request completes with LOC_PROT_ERR, sending nothing).
    fn send_frame(
        &self,
        wr_id: u64,
        flags: SendFlags,
        len: usize,
        frame: Option<Vec<u8>>,
    ) -> Result<()> {
        let r = self.raw();
        let s = &self.shared;
        if flags.contains(SendFlags::INLINE) && len > r.cap.max_inline_data as usize {
            return Err(over(
                "inline data beyond cap.max_inline_data",
                len,
                r.cap.max_inline_data,
                "bytes",
            ));
        }
        let Some(frame) = frame else {
            let wc = Wc {
                wr_id,
                status: rverbs_engine::WcStatus::LocProtErr,
                opcode: rverbs_engine::WcOpcode::Send,
                qp_num: self.qpn,
                ..Wc::default()
            };
            r.lock().local.push_back((r.send_cq, wc));
            let mut e = s.lock_verb("post_send")?;
            s.drain_raw_qps(&mut e);
            let now = s.now();
            s.flush(&mut e, now);
            return Ok(());
        };
        let signaled = r.sq_sig_all || flags.contains(SendFlags::SIGNALED);
        r.raw
            .post_send_wr(wr_id, &[&frame], signaled)
            .map_err(|e| Error::io("sending a raw frame", e))?;
        let mut e = s.lock_verb("post_send")?;
        if s.drain_raw_qps(&mut e) {
            let now = s.now();
            s.flush(&mut e, now);
        }
        Ok(())
    }

    /// Queues a receive of scatter list `targets` (checked for its length and SGE
    /// count), as the QP's state allows.
    fn post_targets(&self, wr_id: u64, targets: Vec<crate::raw::Target>) -> Result<()> {
        let r = self.raw();
        let err =
            |errno, why| -> Error { rverbs_engine::VerbError::new("post_recv", errno, why).into() };
        let mut st = r.lock();
        match st.state {
            QpState::Reset => {
                return Err(err(rverbs_engine::Errno::Inval, "the QP is in RESET"));
            }
            QpState::Err => {
                st.local.push_back((
                    r.recv_cq,
                    Wc {
                        wr_id,
                        status: rverbs_engine::WcStatus::WrFlushErr,
                        opcode: rverbs_engine::WcOpcode::Recv,
                        qp_num: self.qpn,
                        ..Wc::default()
                    },
                ));
                drop(st);
                let s = &self.shared;
                s.activity.fetch_add(1, Ordering::Release);
                s.wake();
                return Ok(());
            }
            _ => {}
        }
        if st.held.len() + st.posted.len() >= r.max_recv_wr {
            return Err(err(
                rverbs_engine::Errno::NoMem,
                "the receive queue is full",
            ));
        }
        if targets.iter().map(|t| t.len).sum::<usize>() == 0 {
            return Err(err(rverbs_engine::Errno::Inval, "no receive buffer"));
        }
        if st.state == QpState::Init {
            st.held.push_back((wr_id, targets));
            return Ok(());
        }
        r.post_to_device(&mut st, wr_id, targets)
            .map_err(|e| Error::io("posting a raw receive", e))
    }

    fn check_recv_sges(&self, n: usize) -> Result<()> {
        check_not_in_with("post_recv")?;
        if n > self.raw().cap.max_recv_sge as usize {
            return Err(rverbs_engine::VerbError::new(
                "post_recv",
                rverbs_engine::Errno::Inval,
                "more SGEs than cap.max_recv_sge",
            )
            .into());
        }
        Ok(())
    }
}

/// EINVAL for a request over one of the QP's caps.
fn over(why: &'static str, asked: usize, max: u32, unit: &'static str) -> Error {
    rverbs_engine::VerbError::new("post_send", rverbs_engine::Errno::Inval, why)
        .with_limit(asked as u64, max.into(), unit, "the QP takes at most")
        .into()
}

impl DeviceQp for SoftRawQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }

    fn state(&self) -> QpState {
        self.raw().state()
    }

    fn query(&self) -> Result<QpAttr> {
        check_not_in_with("query_qp")?;
        Ok(QpAttr {
            qp_state: self.raw().state(),
            port_num: 1,
            ..Default::default()
        })
    }

    /// A RAW_PACKET QP's modify, checked as `ib_modify_qp_is_ok()` does with the
    /// kernel's IB_QPT_RAW_PACKET column ([`rverbs_engine::modify::transition`]):
    /// mask bits rdma-core does not define are EOPNOTSUPP (as mlx5 answers); an
    /// illegal pair, a required attribute missing or any other attribute given
    /// (`CUR_STATE` included: no RAW_PACKET transition lists it) is EINVAL; a port other
    /// than 1 is EINVAL; a `rate_limit` other than 0 (unlimited) is EINVAL, because
    /// this device has no packet pacing (mlx5 answers EINVAL to a rate outside its
    /// range). Entering RTR hands the receives posted so far to the device; entering
    /// ERR flushes them (WR_FLUSH_ERR). RTS→SQD→RTS is allowed with no attribute;
    /// sends are refused outside RTS.
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let r = self.raw();
        check_not_in_with("modify_qp")?;
        let inval = |why| -> Error {
            rverbs_engine::VerbError::new("modify_qp", rverbs_engine::Errno::Inval, why).into()
        };
        if !QpAttrMask::ALL.contains(mask) {
            return Err(rverbs_engine::VerbError::new(
                "modify_qp",
                rverbs_engine::Errno::NotSupported,
                "unknown attribute mask bits",
            )
            .into());
        }
        // The engine first, then the QP's state: the driver thread's order (it drains
        // raw completions under the engine lock), and flushing needs both.
        let s = &self.shared;
        let mut e = s.lock_verb("modify_qp")?;
        let mut st = r.lock();
        let from = st.state;
        let to = if mask.contains(QpAttrMask::STATE) {
            attr.qp_state
        } else {
            st.state
        };
        let (req, opt) = rverbs_engine::modify::transition(QpType::RawPacket, from, to)
            .ok_or_else(|| inval("illegal transition for a RAW_PACKET QP"))?;
        let given = QpAttrMask(mask.0 & !QpAttrMask::STATE.0);
        if !given.contains(req) || given.0 & !(req.0 | opt.0) != 0 {
            return Err(inval("attribute mask does not fit the transition"));
        }
        if given.contains(QpAttrMask::PORT) && attr.port_num != 1 {
            return Err(inval("invalid port number"));
        }
        if given.contains(QpAttrMask::RATE_LIMIT) && attr.rate_limit != 0 {
            return Err(inval(
                "this device has no packet pacing (rate_limit must be 0)",
            ));
        }
        match to {
            QpState::Err => r.flush(&mut e, &mut st),
            QpState::Reset => r.reset(&mut e, &mut st),
            QpState::Rtr | QpState::Rts => {
                while let Some((wr_id, t)) = st.held.pop_front() {
                    if let Err(e) = r.post_to_device(&mut st, wr_id, t) {
                        return Err(Error::io("handing receives to the raw device", e));
                    }
                }
            }
            _ => {}
        }
        r.set_state(&mut st, to);
        drop(st);
        // Completions moved or made here become visible to pollers.
        let now = s.now();
        s.flush(&mut e, now);
        drop(e);
        s.wake();
        Ok(())
    }

    fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        self.post_send_one(wr)
    }

    fn post_send_list(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), (usize, Error)> {
        for (i, wr) in wrs.iter().enumerate() {
            self.post_send_one(wr).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    fn bind_mw(&self, _wr: &SendRequest<'_>) -> Result<u32> {
        let why = "a RAW_PACKET QP binds no memory windows";
        Err(rverbs_engine::VerbError::new("bind_mw", rverbs_engine::Errno::Inval, why).into())
    }

    fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        self.check_recv_sges(bufs.len())?;
        let targets: Vec<crate::raw::Target> = bufs
            .iter()
            .map(|b| {
                let region = b.mr.region.soft().cloned().ok_or_else(|| -> Error {
                    rverbs_engine::VerbError::new(
                        "post_recv",
                        rverbs_engine::Errno::Inval,
                        "a region of a system device, not of this soft device",
                    )
                    .into()
                })?;
                Ok(crate::raw::Target {
                    lkey: b.mr.lkey,
                    region: Some(region),
                    offset: b.offset,
                    len: b.len,
                })
            })
            .collect::<Result<_>>()?;
        self.post_targets(wr_id, targets)
    }

    #[cfg(feature = "ffi")]
    fn post_send_keyed(&self, wr: &SendWr) -> Result<()> {
        self.check_send(
            wr.opcode,
            wr.ud.is_some() || wr.remote_addr != 0 || wr.rkey != 0,
            wr.sg_list.len(),
        )?;
        // Each SGE's bytes, when its key names a region of the QP's PD that holds the
        // range (else LOC_PROT_ERR, as rxe's `copy_data`).
        let frame = {
            let e = self.shared.lock_verb("post_send")?;
            let mut f = Vec::new();
            let mut ok = true;
            for g in wr.sg_list.iter() {
                match e.local_region(g, self.pd, rverbs_engine::Access(0)) {
                    Some((mem, off)) => {
                        let at = f.len();
                        f.resize(at + g.length as usize, 0);
                        mem.read(off, &mut f[at..]);
                    }
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
            ok.then_some(f)
        };
        let len = wr.sg_list.iter().map(|g| g.length as usize).sum();
        self.send_frame(wr.wr_id, wr.flags, len, frame)
    }

    #[cfg(feature = "ffi")]
    fn post_recv_keyed(&self, wr: &RecvWr) -> Result<()> {
        self.check_recv_sges(wr.sg_list.len())?;
        let targets = {
            let e = self.shared.lock_verb("post_recv")?;
            wr.sg_list
                .iter()
                .map(|g| {
                    let found = e.local_region(g, self.pd, rverbs_engine::Access::LOCAL_WRITE);
                    crate::raw::Target {
                        lkey: g.lkey,
                        offset: found.as_ref().map_or(0, |f| f.1),
                        region: found.map(|f| f.0),
                        len: g.length as usize,
                    }
                })
                .collect()
        };
        self.post_targets(wr.wr_id, targets)
    }

    fn attach_mcast(&self, gid: &Gid) -> Result<()> {
        super::qp::attach_mcast(&self.shared, self.qpn, gid)
    }

    fn detach_mcast(&self, gid: &Gid) -> Result<()> {
        super::qp::detach_mcast(&self.shared, self.qpn, gid)
    }

    fn create_flow(&self, attr: &rverbs_flow::attr::FlowAttr) -> Result<Box<dyn DeviceFlow>> {
        let f = self.raw().raw.create_flow(attr)?;
        let id = f.id();
        Ok(Box::new(SoftFlow::Raw(Some(f), id)))
    }
}
