//! The verbs objects: protection domains, memory regions, completion queues, queue pairs
//! and address handles, as RAII handles over an open [`Context`].
//!
//! See the crate documentation's *Memory safety* section for the rules these types
//! enforce.

use crate::channel::CompChannel;
use crate::context::Context;
use crate::soft::Shared;
use crate::error::Error;
use crate::error::Result;
use crate::qp_attr::QpModify;
use crate::srq::{Srq, SrqInner};
use rverbs_engine::modify::{AhAttr, QpAttr, QpAttrMask, QpCap};
use rverbs_engine::{
    Access, AddressVector, AhId, CqId, Mtu, PdId, QpInit, QpState, QpType, RecvWr, SendFlags,
    SendWr, Sge, UdDest, VecMemory, Wc, WrOpcode,
};
use rverbs_wire::grh::Gid;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) use crate::soft::guard::check_not_in_with;
use crate::soft::guard::WithGuard;

/// EINVAL when a buffer is 4 GiB or longer: `ibv_sge.length` (and the engine's) is 32
/// bits, and such a buffer was cut short to its length modulo 2^32.
pub(crate) fn sge_lens_fit(
    verb: &'static str,
    lens: impl IntoIterator<Item = usize>,
) -> Result<()> {
    if lens.into_iter().any(|n| u32::try_from(n).is_err()) {
        let why = "a buffer of 4 GiB or more (an SGE's length is 32 bits)";
        return Err(rverbs_engine::VerbError::new(verb, rverbs_engine::Errno::Inval, why).into());
    }
    Ok(())
}

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
    inner: Arc<PdInner>,
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

    fn new_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
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

/// A registered memory region that owns its buffer (`struct ibv_mr`). The
/// application reaches the bytes with [`Mr::read`], [`Mr::write`] and [`Mr::with`];
/// work requests name them with [`Mr::slice`] / [`Mr::all`], peers with
/// [`Mr::remote`]. See the crate's *Memory safety* section.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::AccessFlags;
/// let ctx = rverbs::device(None)?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let mr = pd.reg_mr_from(b"hello".to_vec(), AccessFlags::ALL)?;
/// mr.write(0, b"J");
/// let mut out = [0u8; 5];
/// mr.read(0, &mut out);
/// assert_eq!(&out, b"Jello");
/// let upper = mr.with(|bytes| {
///     bytes.make_ascii_uppercase();
///     bytes.to_vec()
/// });
/// assert_eq!(upper, b"JELLO");
/// let for_the_peer = mr.remote(0..5); // address, rkey, length
/// # let _ = for_the_peer; Ok(()) }
/// ```
pub struct Mr {
    pd: Arc<PdInner>,
    region: Arc<VecMemory>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
}

impl Pd {
    fn shared(&self) -> &Arc<Shared> {
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
            access.0,
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

    /// `ibv_create_ah` towards `dgid` from the source GID at `sgid_index`.
    pub fn create_ah(&self, attr: &AhAttrs) -> Result<Ah> {
        let shared = self.shared();
        let mut engine = shared.lock_verb("create_ah")?;
        // Checked under the engine lock, which the address re-scan holds while it
        // frees and reuses GID slots (context.rs `rescan`): checked before it, the
        // slot could be freed and given to a new address in between, and the AH would
        // silently send from that address. Lock order: engine, then the GID table.
        self.inner.ctx.check_sgid(attr.sgid_index, "create_ah")?;
        let id = engine.create_ah(self.inner.id, attr.av())?;
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
    fn create_raw_qp(&self, attr: &QpInitAttr) -> Result<Qp> {
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

impl Drop for Mr {
    fn drop(&mut self) {
        let lkey = self.lkey;
        self.pd.ctx.shared().destroy(move |_, e| {
            let _ = e.dereg_mr(lkey);
        });
    }
}

impl Mr {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// The region's virtual address (what a peer puts in `remote_addr`).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Copies bytes out of the region, starting at `offset`.
    ///
    /// # Panics
    /// If `offset + dst.len()` is beyond the region (like slicing out of bounds).
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        self.region
            .with(|b| dst.copy_from_slice(&b[offset..offset + dst.len()]));
    }
    /// Copies bytes into the region at `offset`.
    ///
    /// # Panics
    /// If `offset + src.len()` is beyond the region (like slicing out of bounds).
    pub fn write(&self, offset: usize, src: &[u8]) {
        self.region
            .with(|b| b[offset..offset + src.len()].copy_from_slice(src));
    }
    /// Runs `f` with the region's bytes; the device waits meanwhile (it cannot read or
    /// write this region until `f` returns, so `f` sees a consistent snapshot and its
    /// writes are never torn by the device).
    ///
    /// Verbs called from inside `f` (on any object of any context) fail with
    /// [`Error::WouldDeadlock`] instead of waiting for the device, which may itself be
    /// waiting for this region. Objects dropped inside `f` are destroyed a moment later
    /// by the device's driver thread. Copy out what you need, return, then post.
    ///
    /// # Panics
    /// The accessors that return no `Result` and need the device ([`Qp::state`],
    /// [`Context::gids`], [`Context::gid`], [`Context::gid_index_for`],
    /// [`Context::counters`]) panic when called inside `f`, rather than deadlock.
    pub fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let _g = WithGuard::enter();
        self.region.with(f)
    }
    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        self.region.snapshot()
    }
    /// The bytes `range` of this region, for a work request.
    ///
    /// # Panics
    /// If `range` is not inside the region (a caller bug, like slicing out of bounds).
    pub fn slice(&self, range: Range<usize>) -> LocalBuf<'_> {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "LocalBuf range outside the MR"
        );
        LocalBuf {
            mr: self,
            offset: range.start,
            len: range.end - range.start,
        }
    }
    /// The whole region, for a work request.
    pub fn all(&self) -> LocalBuf<'_> {
        self.slice(0..self.len)
    }
    /// What a peer needs to read, write or use atomics on `range` of this region.
    ///
    /// # Panics
    /// If `range` is not inside the region, or is 4 GiB or longer (a RETH's DMA
    /// length is 32 bits).
    pub fn remote(&self, range: Range<usize>) -> RemoteBuf {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "RemoteBuf range outside the MR"
        );
        assert!(
            u32::try_from(range.end - range.start).is_ok(),
            "RemoteBuf of 4 GiB or more"
        );
        RemoteBuf {
            addr: self.addr + range.start as u64,
            rkey: self.rkey,
            len: (range.end - range.start) as u32,
        }
    }
}

/// Access rights of a memory region or QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessFlags(pub Access);

impl AccessFlags {
    /// Local read only.
    pub const NONE: AccessFlags = AccessFlags(Access::NONE);
    /// Local write.
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(Access::LOCAL_WRITE);
    /// Remote write (needs local write).
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(Access::REMOTE_WRITE);
    /// Remote read.
    pub const REMOTE_READ: AccessFlags = AccessFlags(Access::REMOTE_READ);
    /// Remote atomics (needs local write).
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(Access::REMOTE_ATOMIC);
    /// Everything.
    pub const ALL: AccessFlags = AccessFlags(Access(
        Access::LOCAL_WRITE.0
            | Access::REMOTE_WRITE.0
            | Access::REMOTE_READ.0
            | Access::REMOTE_ATOMIC.0,
    ));
}

impl std::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, o: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | o.0)
    }
}

/// Bytes of a local memory region named in a work request.
#[derive(Clone, Copy)]
pub struct LocalBuf<'a> {
    mr: &'a Mr,
    offset: usize,
    len: usize,
}

impl LocalBuf<'_> {
    /// The buffer's length in bytes.
    pub(crate) fn byte_len(&self) -> usize {
        self.len
    }

    /// (Callers check [`sge_lens_fit`] first: `length` is 32 bits.)
    pub(crate) fn sge(&self) -> Sge {
        Sge {
            addr: self.mr.addr + self.offset as u64,
            length: self.len as u32,
            lkey: self.mr.lkey,
        }
    }

    /// A copy of the bytes.
    fn bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.mr.read(self.offset, &mut v);
        v
    }
}

/// A peer's memory: address, key and length, as exchanged out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length.
    pub len: u32,
}

pub(crate) struct CqInner {
    ctx: Context,
    id: CqId,
    /// The context's activity count when a poll last found this CQ empty.
    empty_at: AtomicU64,
    /// Completion events handed out, and acknowledged.
    events: AtomicU32,
    acked: AtomicU32,
    /// A RoCE QP (RC/UC/UD, not RAW_PACKET) was created with this CQ: on a raw-mode
    /// context, an empty poll then reads the RoCE socket itself. A CQ that only RAW_PACKET
    /// QPs use leaves RoCE traffic to the driver thread, so a raw packet poller pays no
    /// system call per empty poll.
    roce: std::sync::atomic::AtomicBool,
}

impl CqInner {
    pub(crate) fn id(&self) -> CqId {
        self.id
    }

    pub(crate) fn count_event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let s = self.ctx.shared();
        let id = self.id;
        s.destroy(move |s, e| {
            let _ = e.destroy_cq(id);
            // After the engine let the number go, under its lock: no new event for
            // this CQ can be dispatched to the channel any more.
            s.unbind_cq(id);
        });
    }
}

/// A completion queue (`struct ibv_cq`). Cheap to clone; poll it from any thread.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::{Wc, WcStatus};
/// let ctx = rverbs::device(None)?.open()?;
/// let cq = ctx.create_cq(256)?;
/// // One buffer for every poll: no allocation per completion.
/// let mut wcs = [Wc::default(); 32];
/// let n = cq.poll(&mut wcs)?;
/// for wc in &wcs[..n] {
///     if wc.status != WcStatus::Success {
///         eprintln!("work request {} failed: {:?}", wc.wr_id, wc.status);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

impl Cq {
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.inner.ctx.shared()
    }

    pub(crate) fn from_inner(inner: Arc<CqInner>) -> Self {
        Cq { inner }
    }

    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out` and returns how
    /// many (0 when the CQ is empty). Nothing is allocated per completion: reuse one
    /// buffer of `Wc`s across calls.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        let shared = self.inner.ctx.shared();
        if shared.raw.is_some() {
            // Raw-mode contexts: RAW_PACKET completions from the raw device's queues;
            // RoCE from its socket, read (as the UDP sockets are) only when the CQ has
            // nothing, and only for a CQ of RoCE QPs: a system call per poll would
            // slow a busy raw packet poller down (the driver thread reads it then).
            let mut e = shared.lock_verb("poll_cq")?;
            if shared.drain_raw_qps(&mut e) {
                let now = shared.now();
                shared.flush(&mut e, now);
            }
            let n = e.poll_cq(self.inner.id, out)?;
            if n > 0 {
                return Ok(n);
            }
            if !self.carries_roce() || !shared.receive_raw_net(&mut e, shared.now()) {
                return Ok(0);
            }
            let now = shared.now();
            shared.flush(&mut e, now);
            return Ok(e.poll_cq(self.inner.id, out)?);
        }
        let n = self.poll_ready(out)?;
        if n > 0 {
            return Ok(n);
        }
        self.poll_progress(out, shared.now())
    }

    /// True if a RoCE QP (not RAW_PACKET) uses this CQ.
    pub(crate) fn carries_roce(&self) -> bool {
        self.inner.roce.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The completions already in the CQ (no receiving).
    pub(crate) fn poll_ready(&self, out: &mut [Wc]) -> Result<usize> {
        use std::sync::atomic::Ordering;
        // Before the shortcut below: the receive that follows an empty poll
        // (`poll_progress`) may write into a region this thread holds in `Mr::with`.
        check_not_in_with("poll_cq")?;
        let shared = self.inner.ctx.shared();
        // Nothing happened since the last empty poll: no completion can have arrived
        // (every path that adds one bumps `activity` afterwards, under the lock).
        let seen = shared.activity.load(Ordering::Acquire);
        if seen != self.inner.empty_at.load(Ordering::Relaxed) {
            let n = shared.lock_verb("poll_cq")?.poll_cq(self.inner.id, out)?;
            if n > 0 {
                return Ok(n);
            }
            self.inner.empty_at.store(seen, Ordering::Relaxed);
        }
        Ok(0)
    }

    /// Receives and runs timers on this thread, then polls the CQ (`now`: a fresh
    /// clock reading, [`crate::soft::Shared::now`]). Callers check
    /// [`check_not_in_with`] first ([`Cq::poll_ready`] does).
    pub(crate) fn poll_progress(&self, out: &mut [Wc], now: rverbs_engine::Nanos) -> Result<usize> {
        use std::sync::atomic::Ordering;
        use std::sync::TryLockError;
        let shared = self.inner.ctx.shared();
        // Receive and run timers on this thread rather than wait for the driver
        // thread (`progress.rs`). If the driver holds the engine it is doing just that.
        // A poisoned engine is used as every other path uses it: treated as busy, a
        // caller that sleeps on the sockets (the driver then leaves them to it) would
        // never receive.
        let mut e = match shared.engine.try_lock() {
            Ok(e) => e,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(0),
        };
        if !shared.progress(&mut e, now) {
            return Ok(0);
        }
        if shared.raw.is_some() && shared.drain_raw_qps(&mut e) {
            let now = shared.now();
            shared.flush(&mut e, now);
        }
        let seen = shared.activity.load(Ordering::Acquire);
        let n = e.poll_cq(self.inner.id, out)?;
        if n == 0 {
            // Nothing for this caller to answer: send the deferred ACKs now.
            shared.flush_deferred(&mut e);
            self.inner.empty_at.store(seen, Ordering::Relaxed);
        }
        Ok(n)
    }

    /// Arms the CQ for one completion event (`ibv_req_notify_cq`): the next completion
    /// (with `solicited_only`, the next solicited or error completion) queues an event
    /// on the CQ's channel ([`CompChannel::get_cq_event`], or
    /// [`Context::get_cq_event`] for a CQ made without a channel).
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        use std::sync::atomic::Ordering;
        let shared = self.inner.ctx.shared();
        shared
            .lock_verb("req_notify_cq")?
            .req_notify_cq(self.inner.id, solicited_only)?;
        // The event needs the driver thread to receive: end its stand-off (the other
        // half of the handshake is in `progress::Standoff::until`).
        shared.cq_armed.store(true, Ordering::SeqCst);
        if shared.driver_standoff.load(Ordering::SeqCst) {
            shared.wake();
        }
        Ok(())
    }

    /// `ibv_ack_cq_events`: acknowledges `n` of the events [`CompChannel::get_cq_event`]
    /// returned for this CQ. Acknowledging more than were received is EINVAL.
    ///
    /// (Safety does not depend on it: the `Cq` an event returns is a counted handle,
    /// so no CQ is destroyed under an unacknowledged event. The count is kept for
    /// programs that check it, as `ibv_destroy_cq` does.)
    pub fn ack_events(&self, n: u32) -> Result<()> {
        let got = self.inner.events.load(Ordering::Relaxed);
        self.inner
            .acked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| {
                a.checked_add(n).filter(|&t| t <= got)
            })
            .map(|_| ())
            .map_err(|_| {
                rverbs_engine::VerbError::new(
                    "ack_cq_events",
                    rverbs_engine::Errno::Inval,
                    "more events acknowledged than received",
                )
                .into()
            })
    }

    /// Completion events received for this CQ and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        self.inner.events.load(Ordering::Relaxed) - self.inner.acked.load(Ordering::Relaxed)
    }

    /// The CQ's handle number (what [`Context::get_cq_event`] and
    /// [`crate::AsyncEvent::CqErr`] report).
    pub fn handle(&self) -> u32 {
        self.inner.id.raw()
    }

    /// True if `self` and `other` are handles of the same CQ.
    pub fn same_as(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Polls until at least one completion arrives or `timeout` passes (busy-polling
    /// with yields: the latency-first choice).
    pub fn poll_wait(&self, out: &mut [Wc], timeout: std::time::Duration) -> Result<usize> {
        let start = std::time::Instant::now();
        loop {
            let n = self.poll(out)?;
            if n > 0 || start.elapsed() >= timeout {
                return Ok(n);
            }
            std::thread::yield_now();
        }
    }
}

/// What a new QP is made of (`struct ibv_qp_init_attr`): start from [`QpInitAttr::new`]
/// and change what differs, with the builder methods or the fields.
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::{QpCap, QpInitAttr, QpType};
/// let ctx = rverbs::device(None)?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let (scq, rcq) = (ctx.create_cq(256)?, ctx.create_cq(256)?);
/// let srq = pd.create_srq(&rverbs::SrqInitAttr::new(512))?;
/// let qp = pd.create_qp(
///     &QpInitAttr::new(QpType::Rc, &scq)
///         .recv_cq(&rcq)
///         .srq(&srq)
///         .cap(QpCap { max_send_wr: 128, max_send_sge: 2, max_inline_data: 64, ..QpCap::default() })
///         .sq_sig_all(true),
/// )?;
/// # let _ = qp; Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct QpInitAttr<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Shared receive queue: receives come from it, and [`Qp::post_recv`] is refused.
    pub srq: Option<&'a Srq>,
    /// Queue sizes (the receive sizes are ignored with an SRQ).
    pub cap: QpCap,
    /// Every send completes signaled, whatever [`SendRequest::signaled`] says.
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    /// An RC/UC/UD QP with both queues on `cq`, no SRQ, 1024-deep queues of 4 SGEs,
    /// 256 bytes of inline data and selective signaling.
    pub fn new(qp_type: QpType, cq: &'a Cq) -> Self {
        QpInitAttr {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 1024,
                max_recv_wr: 1024,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            sq_sig_all: false,
        }
    }

    /// Send completions go to `cq`.
    pub fn send_cq(mut self, cq: &'a Cq) -> Self {
        self.send_cq = cq;
        self
    }

    /// Receive completions go to `cq`.
    pub fn recv_cq(mut self, cq: &'a Cq) -> Self {
        self.recv_cq = cq;
        self
    }

    /// Receives come from `srq`.
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self
    }

    /// Queue sizes.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }

    /// Whether every send completes signaled.
    pub fn sq_sig_all(mut self, yes: bool) -> Self {
        self.sq_sig_all = yes;
        self
    }
}

/// A queue pair (`struct ibv_qp`): created in RESET by [`Pd::create_qp`], brought up
/// with [`Qp::connect`] (or step by step with [`Qp::modify`]), then used with
/// [`Qp::post_send`] and [`Qp::post_recv`].
///
/// ```no_run
/// # fn main() -> rverbs::Result<()> {
/// use rverbs::{AccessFlags, ConnectOpts, PeerInfo, QpInitAttr, QpType, SendRequest};
/// let ctx = rverbs::device(None)?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(64)?;
/// let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
/// let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
/// qp.init(&ConnectOpts::default())?;
/// qp.post_recv(1, &[mr.slice(0..2048)])?; // before the peer can send
/// // ... exchange qp.qp_num() and ctx.gid(1) with the peer, then:
/// # let peer = PeerInfo { qpn: 0x11, psn: 0, gid: ctx.gid(1).unwrap() };
/// qp.connect(&peer, &ConnectOpts::default())?;
/// qp.post_send(&SendRequest::send(2, &[mr.slice(2048..4096)]).imm(7))?;
/// # Ok(()) }
/// ```
pub struct Qp {
    pd: Arc<PdInner>,
    _cqs: [Arc<CqInner>; 2],
    _srq: Option<Arc<SrqInner>>,
    qpn: u32,
    qp_type: QpType,
    raw: Option<Arc<crate::raw::RawQpInner>>,
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            // Dropping the device queue removes its flows; it takes the steering
            // table's write lock, never the engine's, so it runs here even inside
            // `Mr::with` (the receive thread never waits for a region while holding
            // that lock: it copies frames into the queue's own buffers).
            raw.raw.set_notify(None);
            drop(raw);
            let qpn = self.qpn;
            self.pd.ctx.shared().destroy(move |_, e| e.release_qpn(qpn));
            return;
        }
        let qpn = self.qpn;
        let ud = self.qp_type == QpType::Ud;
        self.pd.ctx.shared().destroy(move |s, e| {
            if ud {
                // Destroying a QP destroys its flows.
                s.ud_steering.remove_qp(qpn);
                s.udp.recv_meta_user(false);
            }
            // ACKs this QP still owes its peer (deferred, `progress.rs`) leave first:
            // a program that exits right after its last completion must not leave the
            // peer retrying.
            s.flush_deferred(e);
            let dgid = e.qp_dgid(qpn);
            let _ = e.destroy_qp(qpn);
            // Out of the sharing of its loopback peer's buffer: the QPs still
            // connected there get wider windows, and what the narrower ones held
            // back goes at once.
            if dgid.is_some_and(|g| s.reshare_peer(e, g)) {
                s.flush(e, s.now());
            }
        });
    }
}

/// The other end of an RC/UC connection, as exchanged out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's QP number.
    pub qpn: u32,
    /// The peer's first send PSN (our receive PSN).
    pub psn: u32,
    /// The peer's GID.
    pub gid: Gid,
}

/// Connection settings for [`Qp::connect`], with ibv_rc_pingpong's defaults.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOpts {
    /// Our source GID index.
    pub sgid_index: u8,
    /// Path MTU.
    pub mtu: Mtu,
    /// Our first send PSN.
    pub psn: u32,
    /// Remote access rights we grant the peer on this QP.
    pub access: AccessFlags,
    /// Local ACK timeout exponent (4.096 µs · 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code we ask the peer to wait.
    pub min_rnr_timer: u8,
    /// READ/atomic depth in each direction.
    pub rd_atomic: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Q_Key (UD).
    pub qkey: u32,
}

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts {
            sgid_index: 1,
            mtu: Mtu::M1024,
            psn: 0,
            access: AccessFlags::ALL,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            rd_atomic: 16,
            hop_limit: 64,
            traffic_class: 0,
            qkey: 0x1111_1111,
        }
    }
}

impl Qp {
    /// The QP's transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    fn shared(&self) -> &Arc<Shared> {
        self.pd.ctx.shared()
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// The context the QP belongs to.
    pub fn context(&self) -> &Context {
        &self.pd.ctx
    }

    /// The QP's state.
    pub fn state(&self) -> QpState {
        if let Some(r) = &self.raw {
            return r.state();
        }
        self.shared()
            .lock()
            .qp_state(self.qpn)
            .unwrap_or(QpState::Err)
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        if let Some(r) = &self.raw {
            crate::verbs::check_not_in_with("query_qp")?;
            return Ok(QpAttr {
                qp_state: r.state(),
                port_num: 1,
                ..Default::default()
            });
        }
        Ok(self.shared().lock_verb("query_qp")?.query_qp(self.qpn)?)
    }

    /// `ibv_modify_qp` with typed attributes: the mask is the set of attributes
    /// [`QpModify`] was given (checked exactly as Linux checks it: a missing required
    /// or a forbidden attribute is EINVAL).
    pub fn modify(&self, m: &QpModify) -> Result<()> {
        self.modify_raw(&m.attr, m.mask)
    }

    /// `ibv_modify_qp` with an explicit attribute mask, as in C: only the fields of
    /// `attr` named by `mask` are read. Prefer [`Qp::modify`]; this is for attribute
    /// combinations [`QpModify`] has no setter for. (Checked like [`Qp::modify`]; a
    /// wrong mask is an error, never undefined behaviour.)
    pub fn modify_raw(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        if let Some(r) = &self.raw {
            return self.modify_raw_packet(r, attr, mask);
        }
        let s = self.shared();
        let av = attr.ah_attr.filter(|_| mask.contains(QpAttrMask::AV));
        // Over loopback an RC peer is a socket on this machine whose receive buffer
        // the kernel shows (asked before the engine lock is taken): the QPs connected
        // to a peer with less room than ours get windows its buffer takes together
        // (`peer_window`).
        let peer_rcvbuf = match av {
            // (With the same-host carrier the datagrams wait in its ring, no
            // larger than this, instead: `same_host.rs`.)
            Some(h) if self.qp_type == QpType::Rc && s.info.is_loopback() => {
                crate::soft::window::peer_rcvbuf(h.av.dgid).map(|b| match &s.rings {
                    Some(_) => b.min(crate::same_host::RING_ROOM),
                    None => b,
                })
            }
            _ => None,
        };
        let mut e = s.lock_verb("modify_qp")?;
        // Under the engine lock, as in `Pd::create_ah` (the re-scan may reuse a slot).
        if let Some(h) = &av {
            self.pd.ctx.check_sgid(h.av.sgid_index, "modify_qp")?;
        }
        let now = s.now();
        let old_dgid = e.qp_dgid(self.qpn);
        e.modify_qp(self.qpn, attr, mask, now)?;
        if let Some(h) = av.filter(|_| self.qp_type == QpType::Rc) {
            // The peer's window if it is tighter than the engine's (our buffer's),
            // with our READ pieces (the responses come to us); else the engine's. The
            // peer's buffer is shared by every QP connected to it, this one included:
            // their windows are set again for one more sharer (and again for one less
            // when a QP leaves: below, `Qp::drop`, `Shared::dispatch`).
            match peer_rcvbuf {
                Some(b) => {
                    s.peer_rcvbufs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(h.av.dgid, b);
                    crate::soft::window::share_peer_buffer(&mut e, h.av.dgid, b)?;
                }
                // Without the peer's buffer only this QP's window is known (the
                // engine's).
                None => e.set_qp_window(self.qpn, None)?,
            }
            // A QP moved to another peer (a new address vector) leaves its old one.
            if let Some(old) = old_dgid.filter(|&o| o != h.av.dgid) {
                s.reshare_peer(&mut e, old);
            }
        } else if mask.contains(QpAttrMask::STATE)
            && matches!(attr.qp_state, QpState::Reset | QpState::Err)
        {
            // Out of the sharing: the QPs left connected to its peer take its share
            // (and send what it lets go with the flush below).
            if let Some(old) = old_dgid {
                s.reshare_peer(&mut e, old);
            }
        }
        s.flush(&mut e, now);
        drop(e);
        s.wake();
        Ok(())
    }

    /// One step of the connection path with exactly the attributes Linux requires for
    /// it (`modify::required`), taken from `attr`.
    fn step(&self, attr: &QpAttr, from: QpState, to: QpState) -> Result<()> {
        let mask = rverbs_engine::modify::required(self.qp_type, from, to).ok_or(
            rverbs_engine::VerbError::new(
                "modify_qp",
                rverbs_engine::Errno::Inval,
                "illegal transition",
            ),
        )?;
        self.modify_raw(
            &QpAttr {
                qp_state: to,
                ..*attr
            },
            mask,
        )
    }

    /// The attributes of the whole connection path, from `o` and the peer.
    fn connect_attr(peer: &PeerInfo, o: &ConnectOpts) -> QpAttr {
        let av = AddressVector {
            dgid: peer.gid,
            sgid_index: o.sgid_index,
            hop_limit: o.hop_limit,
            traffic_class: o.traffic_class,
            flow_label: 0,
        };
        QpAttr {
            port_num: 1,
            qp_access_flags: o.access.0,
            qkey: o.qkey,
            path_mtu: o.mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: o.rd_atomic,
            min_rnr_timer: o.min_rnr_timer,
            ah_attr: Some(AhAttr { av, port_num: 1 }),
            sq_psn: o.psn,
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            max_rd_atomic: o.rd_atomic,
            ..Default::default()
        }
    }

    /// RESET → INIT with the access rights (RC/UC) or Q_Key (UD) of `o`; receives may be
    /// posted from then on.
    pub fn init(&self, o: &ConnectOpts) -> Result<()> {
        let nobody = PeerInfo {
            qpn: 0,
            psn: 0,
            gid: Gid::ZERO,
        };
        self.step(
            &Self::connect_attr(&nobody, o),
            QpState::Reset,
            QpState::Init,
        )
    }

    /// (RESET →) INIT → RTR → RTS towards `peer` (RC/UC), or → RTS (UD). A QP already
    /// in INIT (see [`Qp::init`]) keeps its INIT attributes.
    pub fn connect(&self, peer: &PeerInfo, o: &ConnectOpts) -> Result<()> {
        if self.state() == QpState::Reset {
            self.init(o)?;
        }
        let attr = Self::connect_attr(peer, o);
        self.step(&attr, QpState::Init, QpState::Rtr)?;
        self.step(&attr, QpState::Rtr, QpState::Rts)
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
    fn modify_raw_packet(
        &self,
        r: &crate::raw::RawQpInner,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<()> {
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
        let s = self.shared();
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

    /// `ibv_post_send` of one request.
    ///
    /// On a RAW_PACKET QP (in RTS, else EINVAL) the request is a SEND whose gathered
    /// buffers (or inline data: both are copies here) are one whole Ethernet frame,
    /// destination MAC first, no FCS; it goes out on the context's raw interface after
    /// the EGRESS flow rules (an EGRESS DROP rule stops it and the request still
    /// completes successfully, as on a NIC). Other opcodes are EINVAL; a frame over
    /// [`rverbs_raw::MAX_FRAME`] bytes completes with LOC_LEN_ERR.
    pub fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        if let Some(r) = &self.raw {
            return self.post_send_raw(r, wr);
        }
        sge_lens_fit("post_send", wr.bufs.as_slice().iter().map(|b| b.len))?;
        let s = self.shared();
        let mut e = s.lock_verb("post_send")?;
        let now = s.now();
        e.post_send(self.qpn, wr.to_engine(), now)?;
        s.flush(&mut e, now);
        s.wake_if_needed(&e);
        Ok(())
    }

    /// `ibv_post_send` of a chain of requests: the device is entered once and the
    /// packets of the whole chain leave together, which is what makes small messages
    /// cheap (perftest's post-list `-l`).
    ///
    /// # Errors
    /// Like `ibv_post_send`'s `bad_wr`: on a refused request, the index of that request
    /// and the error; the requests before it were posted, those from it on were not.
    pub fn post_send_list(
        &self,
        wrs: &[SendRequest<'_>],
    ) -> std::result::Result<(), (usize, Error)> {
        if let Some(r) = &self.raw {
            for (i, wr) in wrs.iter().enumerate() {
                self.post_send_raw(r, wr).map_err(|e| (i, e))?;
            }
            return Ok(());
        }
        let s = self.shared();
        let mut e = s.lock_verb("post_send").map_err(|e| (0, e))?;
        let now = s.now();
        let mut failed = None;
        for (i, wr) in wrs.iter().enumerate() {
            let fits = sge_lens_fit("post_send", wr.bufs.as_slice().iter().map(|b| b.len));
            if let Err(err) = fits.and_then(|()| Ok(e.post_send(self.qpn, wr.to_engine(), now)?)) {
                failed = Some((i, err));
                break;
            }
        }
        s.flush(&mut e, now);
        s.wake_if_needed(&e);
        failed.map_or(Ok(()), Err)
    }

    fn post_send_raw(&self, r: &crate::raw::RawQpInner, wr: &SendRequest<'_>) -> Result<()> {
        check_not_in_with("post_send")?;
        let inval = |why| -> Error {
            rverbs_engine::VerbError::new("post_send", rverbs_engine::Errno::Inval, why).into()
        };
        if r.lock().state != QpState::Rts {
            return Err(inval("the QP is not in RTS"));
        }
        if wr.opcode != WrOpcode::Send || wr.remote.is_some() || wr.ud.is_some() {
            return Err(inval("a RAW_PACKET QP sends frames with SEND only"));
        }
        if wr.bufs.as_slice().len() > r.cap.max_send_sge as usize {
            return Err(inval("more SGEs than cap.max_send_sge"));
        }
        let frame: Vec<u8> = wr
            .bufs
            .as_slice()
            .iter()
            .flat_map(LocalBuf::bytes)
            .collect();
        if wr.flags.contains(SendFlags::INLINE) && frame.len() > r.cap.max_inline_data as usize {
            return Err(inval("inline data beyond cap.max_inline_data"));
        }
        let signaled = r.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
        let s = self.shared();
        // Buffers of another PD (IBTA 10.6.3.1; rxe's `copy_data` looks the key up in
        // the QP's PD): the request completes with a local protection error and
        // nothing is sent (an error completes whether signaled or not).
        if wr.bufs.as_slice().iter().any(|b| b.mr.pd.id != self.pd.id) {
            let wc = Wc {
                wr_id: wr.wr_id,
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
        }
        r.raw
            .post_send_wr(wr.wr_id, &[&frame], signaled)
            .map_err(|e| Error::io("sending a raw frame", e))?;
        let mut e = s.lock_verb("post_send")?;
        if s.drain_raw_qps(&mut e) {
            let now = s.now();
            s.flush(&mut e, now);
        }
        Ok(())
    }

    /// `ibv_post_recv` of one request.
    ///
    /// On a RAW_PACKET QP the buffers receive one whole frame (as received: destination
    /// MAC first, a VLAN tag the driver stripped put back, no FCS); the completion on
    /// the receive CQ gives `byte_len`, [`rverbs_engine::WcFlags::IP_CSUM_OK`] and, when a
    /// TAG rule steered it, [`rverbs_engine::WcFlags::WITH_FLOW_TAG`] with
    /// [`Wc::flow_tag`]. A frame longer than the buffers completes with LOC_LEN_ERR; a
    /// frame steered to the QP while no receive is posted is dropped (no RNR on raw
    /// QPs); a receive whose region was dropped before its frame came completes with
    /// LOC_PROT_ERR and writes nothing. Receives posted before RTR wait for it. EINVAL in RESET, ENOMEM beyond
    /// `cap.max_recv_wr` outstanding; in ERR the receive completes at once with
    /// WR_FLUSH_ERR.
    pub fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        if let Some(r) = &self.raw {
            return self.post_recv_raw(r, wr_id, bufs);
        }
        sge_lens_fit("post_recv", bufs.iter().map(|b| b.len))?;
        let s = self.shared();
        let wr = RecvWr {
            wr_id,
            sg_list: bufs.iter().map(LocalBuf::sge).collect(),
        };
        let mut e = s.lock_verb("post_recv")?;
        // Posting a receive starts no timer and sends nothing (the engine only
        // queues it, or completes it at once on a QP in error), so the clock is read
        // only when `settle` flushes; while answers are deferred (flush_pending,
        // written under the engine lock held here) the time they were deferred at
        // stands for it. (A ping-pong reposts a receive between taking the request
        // and answering it: one clock read less on its critical path.)
        let now = match s.flush_pending.load(std::sync::atomic::Ordering::Relaxed) {
            0 => s.now(),
            at => at,
        };
        e.post_recv(self.qpn, wr, now)?;
        // A receive posted to a QP in error completes at once: let pollers see it.
        // Deferred acknowledgements stay deferred: a receive is usually reposted
        // just before the reply that will carry them.
        s.settle(&mut e, now);
        Ok(())
    }
}

impl Qp {
    fn post_recv_raw(
        &self,
        r: &crate::raw::RawQpInner,
        wr_id: u64,
        bufs: &[LocalBuf<'_>],
    ) -> Result<()> {
        check_not_in_with("post_recv")?;
        let err =
            |errno, why| -> Error { rverbs_engine::VerbError::new("post_recv", errno, why).into() };
        if bufs.len() > r.cap.max_recv_sge as usize {
            return Err(err(
                rverbs_engine::Errno::Inval,
                "more SGEs than cap.max_recv_sge",
            ));
        }
        let targets: Vec<crate::raw::Target> = bufs
            .iter()
            .map(|b| crate::raw::Target {
                lkey: b.mr.lkey,
                region: b.mr.region.clone(),
                offset: b.offset,
                len: b.len,
            })
            .collect();
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
                let s = self.shared();
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

    /// `ibv_create_flow`: steers the frames `attr` selects to this QP until the returned
    /// [`Flow`] is dropped (`ibv_destroy_flow`; no frame is steered by it once the drop
    /// returns). Errors as the kernel's `ib_uverbs_ex_create_flow` and mlx5 give them:
    /// EPERM without CAP_NET_RAW, EINVAL for a QP that is neither RAW_PACKET nor UD and
    /// for every malformed attribute, EOPNOTSUPP for unsupported attributes or mask
    /// bits (the whole list: [`rverbs_flow::attr::validate`]).
    ///
    /// On a RAW_PACKET QP the rule is installed in the raw device's classifier: NORMAL
    /// rules by priority (lower wins), ALL_DEFAULT / MC_DEFAULT for frames no rule took,
    /// SNIFFER for copies of everything, DONT_TRAP, EGRESS, TAG, DROP and COUNT, as
    /// described in the `rverbs-raw` crate.
    ///
    /// On a UD QP (any context) the rule steers received RoCE v2 UD datagrams by their
    /// outer headers: a datagram a NORMAL rule takes goes to this QP instead of the QP
    /// its BTH names; SNIFFER rules get a copy of every datagram; DROP drops; a
    /// datagram no rule takes goes to its BTH QP as usual. A UDP socket shows no
    /// Ethernet header, so an ETH spec sees MAC addresses `00:00:00:00:00:00`, the
    /// EtherType of the IP version and no VLAN tag: EtherType matches work, a rule on a
    /// non-zero MAC or a VLAN never matches. IPV4 / IPV6 / UDP specs see the addresses,
    /// TTL / hop limit, TOS / traffic class and flow label as received, UDP source port
    /// and destination port 4791. ALL_DEFAULT / MC_DEFAULT, EGRESS and TAG are
    /// EOPNOTSUPP on UD QPs. Datagrams to QP1 (the GSI) are never steered.
    pub fn create_flow(&self, attr: &rverbs_flow::attr::FlowAttr) -> Result<Flow> {
        use rverbs_flow::attr::{FlowContext, FlowQpType};
        check_not_in_with("create_flow")?;
        let qp_type = match self.qp_type {
            QpType::RawPacket => FlowQpType::RawPacket,
            QpType::Ud => FlowQpType::Ud,
            _ => FlowQpType::Other,
        };
        rverbs_flow::attr::validate(
            attr,
            &FlowContext {
                qp_type,
                cap_net_raw: rverbs_raw::has_cap_net_raw(),
                num_ports: 1,
            },
        )?;
        let Some(r) = &self.raw else {
            let id = self.shared().ud_steering.insert(self.qpn, attr)?;
            return Ok(Flow {
                id,
                inner: Some(FlowInner::Ud {
                    id,
                    shared: Arc::downgrade(self.shared()),
                }),
            });
        };
        let f = r.raw.create_flow(attr)?;
        Ok(Flow {
            id: f.id(),
            inner: Some(FlowInner::Raw(f)),
        })
    }
}

/// A flow rule made by [`Qp::create_flow`] (`struct ibv_flow`); dropping it is
/// `ibv_destroy_flow`. A flow outlives nothing: destroying its QP removes it (then
/// [`Flow::destroy`] is EINVAL).
pub struct Flow {
    id: rverbs_flow::classify::FlowId,
    /// `None` once destroyed.
    inner: Option<FlowInner>,
}

enum FlowInner {
    /// A rule of the raw device (RAW_PACKET QP).
    Raw(rverbs_raw::Flow),
    /// A rule of the context's UD steering table; emptied once destroyed.
    Ud {
        id: rverbs_flow::classify::FlowId,
        shared: std::sync::Weak<Shared>,
    },
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Flow({:#x})", self.id().raw())
    }
}

impl Flow {
    /// The flow's handle.
    pub fn id(&self) -> rverbs_flow::classify::FlowId {
        self.id
    }

    /// `ibv_destroy_flow` with its result: EINVAL if the flow is already gone (its QP
    /// was destroyed). Inside [`Mr::with`] this is EDEADLK (dropping the flow there
    /// works: the driver thread removes it).
    pub fn destroy(mut self) -> Result<()> {
        match self.inner.take() {
            None => Ok(()),
            Some(FlowInner::Raw(f)) => Ok(f.destroy()?),
            Some(FlowInner::Ud { id, shared }) => {
                check_not_in_with("destroy_flow")?;
                let gone = shared.upgrade().is_some_and(|s| s.ud_steering.remove(id));
                if gone {
                    Ok(())
                } else {
                    Err(rverbs_flow::error::FlowError::inval("flow already destroyed").into())
                }
            }
        }
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        if let Some(FlowInner::Ud { id, shared }) = &self.inner {
            let Some(s) = shared.upgrade() else { return };
            let id = *id;
            if check_not_in_with("destroy_flow").is_ok() {
                s.ud_steering.remove(id);
            } else {
                // The driver may hold the table while it waits for the region this
                // thread holds: remove the flow from the driver thread instead.
                s.destroy(move |s, _| {
                    s.ud_steering.remove(id);
                });
            }
        }
    }
}

/// A send work request, built from safe parts: an operation, the local buffers it
/// reads (or, for READ and atomics, writes) and, for one-sided operations, the peer's
/// [`RemoteBuf`]. It borrows the regions it names until it is posted.
///
/// ```no_run
/// # fn demo(qp: &rverbs::Qp, mr: &rverbs::Mr, peer: rverbs::RemoteBuf) -> rverbs::Result<()> {
/// use rverbs::SendRequest;
/// qp.post_send(&SendRequest::write(1, &[mr.slice(0..4096)], peer).signaled(false))?;
/// qp.post_send(&SendRequest::read(2, &[mr.slice(4096..8192)], peer).fence())?;
/// qp.post_send(&SendRequest::fetch_add(3, mr.slice(8192..8200), peer, 1))?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SendRequest<'a> {
    wr_id: u64,
    opcode: WrOpcode,
    bufs: Bufs<'a>,
    flags: SendFlags,
    imm: u32,
    remote: Option<RemoteBuf>,
    compare_add: u64,
    swap: u64,
    ud: Option<UdDest>,
}

/// A request's local buffers: the usual single one in place (no allocation per
/// request), others on the heap.
#[derive(Clone)]
enum Bufs<'a> {
    One(LocalBuf<'a>),
    Many(Vec<LocalBuf<'a>>),
}

impl<'a> Bufs<'a> {
    fn as_slice(&self) -> &[LocalBuf<'a>] {
        match self {
            Bufs::One(b) => std::slice::from_ref(b),
            Bufs::Many(v) => v,
        }
    }
}

impl<'a> SendRequest<'a> {
    fn new(wr_id: u64, opcode: WrOpcode, bufs: &[LocalBuf<'a>]) -> Self {
        SendRequest {
            wr_id,
            opcode,
            bufs: match bufs {
                [one] => Bufs::One(*one),
                _ => Bufs::Many(bufs.to_vec()),
            },
            flags: SendFlags::SIGNALED,
            imm: 0,
            remote: None,
            compare_add: 0,
            swap: 0,
            ud: None,
        }
    }

    /// SEND of `bufs`.
    pub fn send(wr_id: u64, bufs: &[LocalBuf<'a>]) -> Self {
        Self::new(wr_id, WrOpcode::Send, bufs)
    }

    /// RDMA WRITE of `bufs` to `remote`.
    pub fn write(wr_id: u64, bufs: &[LocalBuf<'a>], remote: RemoteBuf) -> Self {
        SendRequest {
            remote: Some(remote),
            ..Self::new(wr_id, WrOpcode::RdmaWrite, bufs)
        }
    }

    /// RDMA READ from `remote` into `bufs`.
    pub fn read(wr_id: u64, bufs: &[LocalBuf<'a>], remote: RemoteBuf) -> Self {
        SendRequest {
            remote: Some(remote),
            ..Self::new(wr_id, WrOpcode::RdmaRead, bufs)
        }
    }

    /// Atomic fetch-and-add of `add` on the 8 bytes at `remote`; the original value
    /// lands in `result` (8 bytes).
    pub fn fetch_add(wr_id: u64, result: LocalBuf<'a>, remote: RemoteBuf, add: u64) -> Self {
        SendRequest {
            remote: Some(remote),
            compare_add: add,
            ..Self::new(wr_id, WrOpcode::AtomicFetchAndAdd, &[result])
        }
    }

    /// Atomic compare-and-swap on the 8 bytes at `remote`; the original value lands in
    /// `result` (8 bytes).
    pub fn cmp_swap(
        wr_id: u64,
        result: LocalBuf<'a>,
        remote: RemoteBuf,
        compare: u64,
        swap: u64,
    ) -> Self {
        SendRequest {
            remote: Some(remote),
            compare_add: compare,
            swap,
            ..Self::new(wr_id, WrOpcode::AtomicCmpAndSwp, &[result])
        }
    }

    /// Adds immediate data (SEND → SEND with immediate, WRITE → WRITE with immediate).
    pub fn imm(mut self, imm: u32) -> Self {
        self.imm = imm;
        self.opcode = match self.opcode {
            WrOpcode::Send => WrOpcode::SendWithImm,
            WrOpcode::RdmaWrite => WrOpcode::RdmaWriteWithImm,
            o => o,
        };
        self
    }

    /// Whether a successful completion is generated (default: yes).
    pub fn signaled(mut self, yes: bool) -> Self {
        self.flags = if yes {
            SendFlags(self.flags.0 | SendFlags::SIGNALED.0)
        } else {
            SendFlags(self.flags.0 & !SendFlags::SIGNALED.0)
        };
        self
    }

    /// Copies the data at post time (`IBV_SEND_INLINE`).
    pub fn inline(mut self) -> Self {
        self.flags = self.flags | SendFlags::INLINE;
        self
    }

    /// Sets the solicited-event bit.
    pub fn solicited(mut self) -> Self {
        self.flags = self.flags | SendFlags::SOLICITED;
        self
    }

    /// Waits for earlier READs and atomics first (`IBV_SEND_FENCE`).
    pub fn fence(mut self) -> Self {
        self.flags = self.flags | SendFlags::FENCE;
        self
    }

    /// UD destination.
    pub fn to(mut self, ah: &Ah, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.ud = Some(UdDest {
            ah: ah.id,
            remote_qpn,
            remote_qkey,
        });
        self
    }

    fn to_engine(&self) -> SendWr {
        let r = self.remote.unwrap_or(RemoteBuf {
            addr: 0,
            rkey: 0,
            len: 0,
        });
        SendWr {
            wr_id: self.wr_id,
            opcode: self.opcode,
            sg_list: self.bufs.as_slice().iter().map(LocalBuf::sge).collect(),
            flags: self.flags,
            imm_data: self.imm,
            remote_addr: r.addr,
            rkey: r.rkey,
            compare_add: self.compare_add,
            swap: self.swap,
            ud: self.ud,
        }
    }
}

/// Address-handle attributes.
#[derive(Debug, Clone, Copy)]
pub struct AhAttrs {
    /// Destination GID.
    pub dgid: Gid,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
}

impl AhAttrs {
    /// Towards `dgid` from the source GID at `sgid_index`, with hop limit 64, traffic
    /// class 0 and flow label 0.
    pub fn to(dgid: Gid, sgid_index: u8) -> Self {
        AhAttrs {
            dgid,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    pub(crate) fn av(&self) -> AddressVector {
        AddressVector {
            dgid: self.dgid,
            sgid_index: self.sgid_index,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
        }
    }
}

/// An address handle (`struct ibv_ah`).
pub struct Ah {
    pd: Arc<PdInner>,
    id: AhId,
}

impl Drop for Ah {
    fn drop(&mut self) {
        let id = self.id;
        self.pd.ctx.shared().destroy(move |_, e| {
            let _ = e.destroy_ah(id);
        });
    }
}

impl Cq {
    /// Waits for completions with a spin-then-sleep policy: polls (receiving on this
    /// thread) for up to `spin`, then sleeps once in `poll(2)` on the device's sockets
    /// until a datagram arrives, the engine's next timer is due or `timeout` passes,
    /// and polls again. Returns how many completions were written to `out`; 0 means
    /// nothing completed in that time (a datagram that completed nothing, such as an
    /// incoming RDMA WRITE, also ends the sleep), so callers loop.
    ///
    /// A spin of zero sleeps at once: the right choice when cores are fewer than busy
    /// threads, where spinning only delays the thread that would produce the
    /// completion. A long spin gives the lowest latency on an idle machine.
    pub fn wait(
        &self,
        out: &mut [rverbs_engine::Wc],
        spin: std::time::Duration,
        timeout: std::time::Duration,
    ) -> crate::Result<usize> {
        let shared = self.shared();
        let as_ns = |d: std::time::Duration| d.as_nanos().min(u128::from(u64::MAX)) as rverbs_engine::Nanos;
        let (spin, timeout) = (as_ns(spin), as_ns(timeout));
        // One clock read per pass, which the pass's receive uses too (the first pass
        // reuses the start's): a ping-pong waits once per message, and clock reads
        // showed in its profile.
        let start = shared.now();
        let mut now = start;
        loop {
            let n = self.poll_ready(out)?;
            if n > 0 {
                return Ok(n);
            }
            let waited = now - start;
            if waited < spin {
                let n = self.poll_progress(out, now)?;
                if n > 0 {
                    return Ok(n);
                }
                std::hint::spin_loop();
                now = shared.now();
                continue;
            }
            if waited >= timeout {
                return Ok(0);
            }
            let sleep = shared.plan_sleep(now, timeout - waited);
            if shared.net.is_some() {
                // Raw mode: the engine's packets come from the RoCE socket (the UDP
                // sockets only carry this host's own traffic); `poll` reads it. A CQ
                // of RAW_PACKET QPs only leaves the sockets to the driver thread.
                let ms = crate::sys::poll_ms(sleep);
                let mut fds = Vec::new();
                if self.carries_roce() {
                    shared.app_poll_at.store(now + sleep, Ordering::Relaxed);
                    shared.watch_fds(&mut fds);
                }
                let mut woke = Vec::new();
                let _ = crate::sys::poll_readable(&fds, ms, &mut woke);
                return self.poll(out);
            }
            shared.app_poll_at.store(now + sleep, Ordering::Relaxed);
            // With no timer due sooner, sleep in recvmmsg itself (one system call
            // per wake-up); otherwise, or when another thread is receiving, in
            // poll(2), which returns at once when a datagram is already waiting.
            if sleep < crate::soft::progress::SLEEP_RECV_NS || shared.sleep_receive().is_none() {
                let ms = crate::sys::poll_ms(sleep);
                let mut ready = Vec::new();
                let mut fds = Vec::new();
                shared.watch_fds(&mut fds);
                let _ = shared.poll_wait(&fds, ms, &mut ready);
            }
            return self.poll(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{ConnectOpts, Gid, PeerInfo, QpInitAttr, QpType};

    /// A free loopback address: nothing is bound to its port 4791.
    fn unbound_address() -> std::net::Ipv4Addr {
        (2..=254)
            .rev()
            .map(|x| std::net::Ipv4Addr::new(127, 0, 0, x))
            .find(|ip| std::net::UdpSocket::bind((*ip, 4791)).is_ok())
            .expect("a free 127.0.0.x:4791")
    }

    /// An RC QP connected over loopback to an address no socket holds (the kernel shows
    /// no receive buffer) keeps the engine's window. Once a socket with a small buffer
    /// is there and a second QP connects to it, both share that buffer (the first one
    /// too: its packets go to the same socket), and when the second leaves, the first
    /// gets the whole buffer's window.
    #[test]
    fn a_peer_without_a_socket_leaves_the_engines_window() {
        let dev = crate::device(None).unwrap();
        let ctx = dev.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let qp = |_: ()| pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
        let (first, second) = (qp(()), qp(()));
        let window = |q: &crate::Qp| {
            let e = ctx.shared().lock();
            (
                e.qp_window(q.qp_num()).unwrap().0,
                e.config().max_unacked_psns,
            )
        };
        let at = unbound_address();
        let to = |qpn| PeerInfo {
            qpn,
            psn: 0,
            gid: Gid::from(at),
        };
        first.connect(&to(0x55), &ConnectOpts::default()).unwrap();
        let (w, own) = window(&first);
        assert_eq!(w, own, "no peer socket: the engine's window");
        // Now a peer socket there, with 128 KiB of buffer (24 PSNs for one QP).
        let Ok(peer) = std::net::UdpSocket::bind((at, 4791)) else {
            eprintln!("{at}:4791 was taken meanwhile: the rest is skipped");
            return;
        };
        socket2::SockRef::from(&peer)
            .set_recv_buffer_size(64 << 10)
            .unwrap();
        if own <= 24 {
            return; // (our own buffer is smaller still: nothing to see)
        }
        second.connect(&to(0x56), &ConnectOpts::default()).unwrap();
        assert_eq!(
            (window(&first).0, window(&second).0),
            (12, 12),
            "two sharers"
        );
        drop(second);
        assert_eq!(window(&first).0, 24, "alone again");
    }
}

#[cfg(test)]
mod sge_tests {
    /// A buffer of 4 GiB or more is EINVAL (its SGE length would be cut to 32 bits).
    #[test]
    fn buffers_of_4_gib_or_more_are_refused() {
        assert!(super::sge_lens_fit("post_send", [0, 8, u32::MAX as usize]).is_ok());
        let e = super::sge_lens_fit("post_send", [8, 1 << 32]).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(super::sge_lens_fit("post_recv", [(1 << 32) + 16]).is_err());
    }
}
