//! The verbs objects: protection domains, memory regions, completion queues, queue pairs
//! and address handles, as RAII handles over an open [`Context`].
//!
//! # Memory safety
//!
//! The soft device writes registered memory from its driver thread while the
//! application runs. rverbs therefore never lends the device a pointer into memory the
//! application can also reach through `&`/`&mut`: a [`Mr`] *owns* its buffer, and both
//! the device and the application reach the bytes only through the region's lock
//! ([`Mr::read`], [`Mr::write`], [`Mr::with`]). Work requests name memory as a
//! [`LocalBuf`] borrowed from a live `Mr`, so a key can never point at freed memory; a
//! region deregistered while a request is in flight stays allocated until the device
//! lets go of it (the request then fails with a protection error instead of touching
//! anything). No `unsafe` is needed to use the API, and none is used to implement it
//! outside three system calls in `sys.rs`.

use crate::context::{Context, Shared};
use crate::error::{Error, Result};
use rverbs_engine::modify::{AhAttr, QpAttr, QpAttrMask, QpCap};
use rverbs_engine::{
    Access, AddressVector, AhId, CqId, Mtu, PdId, QpInit, QpState, QpType, RecvWr, SendFlags,
    SendWr, Sge, UdDest, VecMemory, Wc, WrOpcode,
};
use rverbs_wire::grh::Gid;
use std::ops::Range;
use std::sync::Arc;

struct PdInner {
    ctx: Context,
    id: PdId,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let _ = self.ctx.shared().lock().dealloc_pd(self.id);
    }
}

/// A protection domain (`struct ibv_pd`).
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let id = self.shared().lock().alloc_pd();
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: self.clone(),
                id,
            }),
        })
    }

    /// `ibv_create_cq` with room for `cqe` completions.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq> {
        let id = self.shared().lock().create_cq(cqe)?;
        Ok(Cq {
            inner: Arc::new(CqInner {
                ctx: self.clone(),
                id,
                empty_at: std::sync::atomic::AtomicU64::new(0),
            }),
        })
    }
}

/// A registered memory region that owns its buffer (`struct ibv_mr`).
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
        let keys = self
            .shared()
            .lock()
            .reg_mr(self.inner.id, region.clone(), addr, access.0)?;
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
        let id = self.shared().lock().create_ah(self.inner.id, attr.av())?;
        Ok(Ah {
            pd: self.inner.clone(),
            id,
        })
    }

    /// `ibv_create_qp`.
    pub fn create_qp(&self, attr: &QpInitAttr) -> Result<Qp> {
        let init = QpInit {
            pd: self.inner.id,
            qp_type: attr.qp_type,
            send_cq: attr.send_cq.inner.id,
            recv_cq: attr.recv_cq.inner.id,
            srq: None,
            cap: attr.cap,
            sq_sig_all: attr.sq_sig_all,
        };
        let qpn = self.shared().lock().create_qp(init)?;
        Ok(Qp {
            pd: self.inner.clone(),
            _cqs: [attr.send_cq.inner.clone(), attr.recv_cq.inner.clone()],
            qpn,
            qp_type: attr.qp_type,
        })
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let _ = self.pd.ctx.shared().lock().dereg_mr(self.lkey);
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
    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        self.region
            .with(|b| dst.copy_from_slice(&b[offset..offset + dst.len()]));
    }
    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, src: &[u8]) {
        self.region
            .with(|b| b[offset..offset + src.len()].copy_from_slice(src));
    }
    /// Runs `f` with the region's bytes; the device waits meanwhile.
    pub fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
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
    pub fn remote(&self, range: Range<usize>) -> RemoteBuf {
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
    fn sge(&self) -> Sge {
        Sge {
            addr: self.mr.addr + self.offset as u64,
            length: self.len as u32,
            lkey: self.mr.lkey,
        }
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

struct CqInner {
    ctx: Context,
    id: CqId,
    /// The context's activity count when a poll last found this CQ empty.
    empty_at: std::sync::atomic::AtomicU64,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let _ = self.ctx.shared().lock().destroy_cq(self.id);
    }
}

/// A completion queue (`struct ibv_cq`).
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

impl Cq {
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.inner.ctx.shared()
    }

    /// `ibv_poll_cq`: fills `out` with up to `out.len()` completions; returns how many.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize> {
        let n = self.poll_ready(out)?;
        if n > 0 {
            return Ok(n);
        }
        self.poll_progress(out)
    }

    /// The completions already in the CQ (no receiving).
    pub(crate) fn poll_ready(&self, out: &mut [Wc]) -> Result<usize> {
        use std::sync::atomic::Ordering;
        let shared = self.inner.ctx.shared();
        // Nothing happened since the last empty poll: no completion can have arrived
        // (every path that adds one bumps `activity` afterwards, under the lock).
        let seen = shared.activity.load(Ordering::Acquire);
        if seen != self.inner.empty_at.load(Ordering::Relaxed) {
            let n = shared.lock().poll_cq(self.inner.id, out)?;
            if n > 0 {
                return Ok(n);
            }
            self.inner.empty_at.store(seen, Ordering::Relaxed);
        }
        Ok(0)
    }

    /// Receives and runs timers on this thread, then polls the CQ.
    pub(crate) fn poll_progress(&self, out: &mut [Wc]) -> Result<usize> {
        use std::sync::atomic::Ordering;
        let shared = self.inner.ctx.shared();
        // Receive and run timers on this thread rather than wait for the driver
        // thread (`progress.rs`). If the driver holds the engine it is doing just that.
        let Ok(mut e) = shared.engine.try_lock() else {
            return Ok(0);
        };
        if !shared.progress(&mut e) {
            return Ok(0);
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

    /// Arms the CQ for one completion event (`ibv_req_notify_cq`); wait for it with
    /// [`Context::get_cq_event`].
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        Ok(self
            .inner
            .ctx
            .shared()
            .lock()
            .req_notify_cq(self.inner.id, solicited_only)?)
    }

    /// The handle number [`Context::get_cq_event`] reports for this CQ.
    pub fn handle(&self) -> u32 {
        self.inner.id.raw()
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

/// What a new QP is made of.
pub struct QpInitAttr<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Queue sizes.
    pub cap: QpCap,
    /// Every send completes signaled.
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    /// An RC/UC/UD QP with both queues on `cq` and modest queue sizes.
    pub fn new(qp_type: QpType, cq: &'a Cq) -> Self {
        QpInitAttr {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
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
}

/// A queue pair (`struct ibv_qp`).
pub struct Qp {
    pd: Arc<PdInner>,
    _cqs: [Arc<CqInner>; 2],
    qpn: u32,
    qp_type: QpType,
}

impl Drop for Qp {
    fn drop(&mut self) {
        let s = self.pd.ctx.shared();
        let mut e = s.lock();
        // ACKs this QP still owes its peer (deferred, `progress.rs`) leave first: a
        // program that exits right after its last completion must not leave the
        // peer retrying.
        s.flush_deferred(&mut e);
        let _ = e.destroy_qp(self.qpn);
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
    fn shared(&self) -> &Arc<Shared> {
        self.pd.ctx.shared()
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// The QP's state.
    pub fn state(&self) -> QpState {
        self.shared()
            .lock()
            .qp_state(self.qpn)
            .unwrap_or(QpState::Err)
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        Ok(self.shared().lock().query_qp(self.qpn)?)
    }

    /// `ibv_modify_qp` with an explicit attribute mask (checked exactly as Linux does).
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let s = self.shared();
        let mut e = s.lock();
        let now = s.now();
        e.modify_qp(self.qpn, attr, mask, now)?;
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
        self.modify(
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

    /// `ibv_post_send` of one request.
    pub fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        let s = self.shared();
        let mut e = s.lock();
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
        let s = self.shared();
        let mut e = s.lock();
        let now = s.now();
        let mut failed = None;
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(err) = e.post_send(self.qpn, wr.to_engine(), now) {
                failed = Some((i, Error::from(err)));
                break;
            }
        }
        s.flush(&mut e, now);
        s.wake_if_needed(&e);
        failed.map_or(Ok(()), Err)
    }

    /// `ibv_post_recv` of one request.
    pub fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        let s = self.shared();
        let now = s.now();
        let wr = RecvWr {
            wr_id,
            sg_list: bufs.iter().map(LocalBuf::sge).collect(),
        };
        let mut e = s.lock();
        e.post_recv(self.qpn, wr, now)?;
        // A receive posted to a QP in error completes at once: let pollers see it.
        // Deferred acknowledgements stay deferred: a receive is usually reposted
        // just before the reply that will carry them.
        s.settle(&mut e, now);
        Ok(())
    }
}

/// A send work request, built from safe parts.
#[derive(Clone)]
pub struct SendRequest<'a> {
    wr_id: u64,
    opcode: WrOpcode,
    bufs: Vec<LocalBuf<'a>>,
    flags: SendFlags,
    imm: u32,
    remote: Option<RemoteBuf>,
    compare_add: u64,
    swap: u64,
    ud: Option<UdDest>,
}

impl<'a> SendRequest<'a> {
    fn new(wr_id: u64, opcode: WrOpcode, bufs: &[LocalBuf<'a>]) -> Self {
        SendRequest {
            wr_id,
            opcode,
            bufs: bufs.to_vec(),
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
            sg_list: self.bufs.iter().map(LocalBuf::sge).collect(),
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
    fn av(&self) -> AddressVector {
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
        let _ = self.pd.ctx.shared().lock().destroy_ah(self.id);
    }
}
