//! The objects of an open [`Context`]: PD, device memory and MR, completion channel,
//! CQ, QP, AH, SRQ, and the data path (post, poll, notify) through the context's ops.

use super::{check_rc as check, einval, need, nonnull, ops, zeroed, Context, LoadError};
use rverbs_ibverbs::consts::*;
use rverbs_ibverbs::types as t;
use std::ffi::{c_int, c_void};
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

type AllocPd = unsafe extern "C" fn(*mut t::ibv_context) -> *mut t::ibv_pd;
type DeallocPd = unsafe extern "C" fn(*mut t::ibv_pd) -> c_int;
type RegMr = unsafe extern "C" fn(*mut t::ibv_pd, *mut c_void, usize, c_int) -> *mut t::ibv_mr;
type DeregMr = unsafe extern "C" fn(*mut t::ibv_mr) -> c_int;
type CreateChannel = unsafe extern "C" fn(*mut t::ibv_context) -> *mut t::ibv_comp_channel;
type DestroyChannel = unsafe extern "C" fn(*mut t::ibv_comp_channel) -> c_int;
type CreateCq = unsafe extern "C" fn(
    *mut t::ibv_context,
    c_int,
    *mut c_void,
    *mut t::ibv_comp_channel,
    c_int,
) -> *mut t::ibv_cq;
type DestroyCq = unsafe extern "C" fn(*mut t::ibv_cq) -> c_int;
type GetCqEvent =
    unsafe extern "C" fn(*mut t::ibv_comp_channel, *mut *mut t::ibv_cq, *mut *mut c_void) -> c_int;
type AckCqEvents = unsafe extern "C" fn(*mut t::ibv_cq, u32);
type CreateQp = unsafe extern "C" fn(*mut t::ibv_pd, *mut t::ibv_qp_init_attr) -> *mut t::ibv_qp;
type ModifyQp = unsafe extern "C" fn(*mut t::ibv_qp, *mut t::ibv_qp_attr, c_int) -> c_int;
type QueryQp = unsafe extern "C" fn(
    *mut t::ibv_qp,
    *mut t::ibv_qp_attr,
    c_int,
    *mut t::ibv_qp_init_attr,
) -> c_int;
type DestroyQp = unsafe extern "C" fn(*mut t::ibv_qp) -> c_int;
type CreateAh = unsafe extern "C" fn(*mut t::ibv_pd, *mut t::ibv_ah_attr) -> *mut t::ibv_ah;
type DestroyAh = unsafe extern "C" fn(*mut t::ibv_ah) -> c_int;
type CreateSrq = unsafe extern "C" fn(*mut t::ibv_pd, *mut t::ibv_srq_init_attr) -> *mut t::ibv_srq;
type ModifySrq = unsafe extern "C" fn(*mut t::ibv_srq, *mut t::ibv_srq_attr, c_int) -> c_int;
type DestroySrq = unsafe extern "C" fn(*mut t::ibv_srq) -> c_int;
type Mcast = unsafe extern "C" fn(*mut t::ibv_qp, *const t::ibv_gid, u16) -> c_int;

/// The exported functions behind the objects.
pub(crate) struct ObjApi {
    alloc_pd: AllocPd,
    dealloc_pd: DeallocPd,
    reg_mr: RegMr,
    dereg_mr: DeregMr,
    create_channel: CreateChannel,
    destroy_channel: DestroyChannel,
    create_cq: CreateCq,
    destroy_cq: DestroyCq,
    get_cq_event: GetCqEvent,
    ack_cq_events: AckCqEvents,
    create_qp: CreateQp,
    modify_qp: ModifyQp,
    query_qp: QueryQp,
    destroy_qp: DestroyQp,
    create_ah: CreateAh,
    destroy_ah: DestroyAh,
    create_srq: CreateSrq,
    modify_srq: ModifySrq,
    destroy_srq: DestroySrq,
    attach_mcast: Mcast,
    detach_mcast: Mcast,
}

impl ObjApi {
    pub(crate) fn load(h: *mut c_void) -> Result<ObjApi, LoadError> {
        Ok(ObjApi {
            alloc_pd: need!(h, "ibv_alloc_pd"),
            dealloc_pd: need!(h, "ibv_dealloc_pd"),
            reg_mr: need!(h, "ibv_reg_mr"),
            dereg_mr: need!(h, "ibv_dereg_mr"),
            create_channel: need!(h, "ibv_create_comp_channel"),
            destroy_channel: need!(h, "ibv_destroy_comp_channel"),
            create_cq: need!(h, "ibv_create_cq"),
            destroy_cq: need!(h, "ibv_destroy_cq"),
            get_cq_event: need!(h, "ibv_get_cq_event"),
            ack_cq_events: need!(h, "ibv_ack_cq_events"),
            create_qp: need!(h, "ibv_create_qp"),
            modify_qp: need!(h, "ibv_modify_qp"),
            query_qp: need!(h, "ibv_query_qp"),
            destroy_qp: need!(h, "ibv_destroy_qp"),
            create_ah: need!(h, "ibv_create_ah"),
            destroy_ah: need!(h, "ibv_destroy_ah"),
            create_srq: need!(h, "ibv_create_srq"),
            modify_srq: need!(h, "ibv_modify_srq"),
            destroy_srq: need!(h, "ibv_destroy_srq"),
            attach_mcast: need!(h, "ibv_attach_mcast"),
            detach_mcast: need!(h, "ibv_detach_mcast"),
        })
    }
}

fn obj(ctx: &Context) -> &ObjApi {
    &ctx.api.obj
}

macro_rules! owned {
    ($(#[$m:meta])* $name:ident, $c:ty) => {
        $(#[$m])*
        pub struct $name {
            pub(super) ptr: NonNull<$c>,
            pub(super) ctx: Arc<Context>,
        }
        // SAFETY: the object is owned by this value (destroyed once in Drop) and
        // libibverbs' verbs on it are thread-safe.
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}
    };
}

owned!(
    /// A protection domain (`struct ibv_pd`).
    Pd, t::ibv_pd
);

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated in `alloc`, freed once after its MRs, QPs, AHs and SRQs
        // (each holds an Arc of this value).
        unsafe { (obj(&self.ctx).dealloc_pd)(self.ptr.as_ptr()) };
    }
}

impl Pd {
    /// `ibv_alloc_pd`.
    pub fn alloc(ctx: &Arc<Context>) -> io::Result<Arc<Pd>> {
        // SAFETY: a live context.
        let ptr = nonnull(unsafe { (obj(ctx).alloc_pd)(ctx.ptr) })?;
        Ok(Arc::new(Pd {
            ptr,
            ctx: ctx.clone(),
        }))
    }
}

/// Memory a device may read and write at any time (page-aligned, anonymous, zeroed):
/// the bytes of a hardware memory region. Rust reaches them only through volatile
/// copies, so no reference ever covers bytes the device changes underneath.
pub struct DmaMem {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
}

// SAFETY: the mapping is owned by this value (unmapped once in Drop); every access is
// a volatile copy of bytes, which another thread (or the device) may race without
// undefined behaviour for plain bytes accessed only this way.
unsafe impl Send for DmaMem {}
// SAFETY: as above.
unsafe impl Sync for DmaMem {}

impl Drop for DmaMem {
    fn drop(&mut self) {
        // SAFETY: the range mapped in `new`, unmapped once; its MR (which holds an Arc
        // of this value) was deregistered first.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.map_len) };
    }
}

impl DmaMem {
    /// `len` zero bytes (at least one page is mapped, so even an empty region has an
    /// address).
    pub fn new(len: usize) -> io::Result<DmaMem> {
        let map_len = len.max(1);
        // SAFETY: a new private anonymous mapping at an address of the kernel's
        // choosing; the result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(DmaMem { ptr, len, map_len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address the device is given.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    fn range(&self, offset: usize, n: usize) -> Option<*mut u8> {
        let end = offset.checked_add(n)?;
        // SAFETY: offset <= end <= len, inside the mapping.
        (end <= self.len).then(|| unsafe { self.ptr.as_ptr().add(offset) })
    }

    /// Copies bytes at `offset` into `dst`; `None` when the range is outside.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Option<()> {
        let p = self.range(offset, dst.len())?;
        let mut i = 0;
        // Bytes up to an 8-byte boundary, then words, then the tail (as vm-memory's
        // volatile copies: one access per aligned word).
        while i < dst.len() {
            // SAFETY: `p + i` is inside the mapping (checked by `range`).
            let at = unsafe { p.add(i) };
            if at as usize % 8 == 0 && dst.len() - i >= 8 {
                // SAFETY: an aligned word inside the mapping that the device may write
                // concurrently: a volatile read never creates a reference to it.
                let w = unsafe { at.cast::<u64>().read_volatile() };
                dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
                i += 8;
            } else {
                // SAFETY: as above, one byte.
                dst[i] = unsafe { at.read_volatile() };
                i += 1;
            }
        }
        Some(())
    }

    /// Copies `src` to `offset`; `None` when the range is outside.
    pub fn write(&self, offset: usize, src: &[u8]) -> Option<()> {
        let p = self.range(offset, src.len())?;
        let mut i = 0;
        while i < src.len() {
            // SAFETY: `p + i` is inside the mapping (checked by `range`).
            let at = unsafe { p.add(i) };
            if at as usize % 8 == 0 && src.len() - i >= 8 {
                let w = u64::from_ne_bytes(src[i..i + 8].try_into().expect("8 bytes"));
                // SAFETY: as in `read`, a volatile store of an aligned word.
                unsafe { at.cast::<u64>().write_volatile(w) };
                i += 8;
            } else {
                // SAFETY: as in `read`, a volatile byte store.
                unsafe { at.write_volatile(src[i]) };
                i += 1;
            }
        }
        Some(())
    }
}

/// A memory region (`struct ibv_mr`) over a [`DmaMem`], which it keeps alive.
pub struct Mr {
    pub(super) ptr: NonNull<t::ibv_mr>,
    mem: Arc<DmaMem>,
    pub(super) pd: Arc<Pd>,
}

// SAFETY: owned (deregistered once in Drop); verbs on it are thread-safe.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in `reg`, deregistered once; the memory (`mem`) is
        // released only after this, so the device never holds a key to freed memory.
        unsafe { (obj(&self.pd.ctx).dereg_mr)(self.ptr.as_ptr()) };
    }
}

impl Mr {
    /// `ibv_reg_mr` of all of `mem` with `IBV_ACCESS_*` bits `access`.
    pub fn reg(pd: &Arc<Pd>, mem: Arc<DmaMem>, access: u32) -> io::Result<Mr> {
        let access = c_int::try_from(access).map_err(|_| einval())?;
        // SAFETY: a live PD, and the whole of a mapping this MR keeps alive until it
        // is deregistered.
        let ptr = nonnull(unsafe {
            (obj(&pd.ctx).reg_mr)(pd.ptr.as_ptr(), mem.ptr.as_ptr().cast(), mem.len, access)
        })?;
        Ok(Mr {
            ptr,
            mem,
            pd: pd.clone(),
        })
    }

    fn mr(&self) -> &t::ibv_mr {
        // SAFETY: live until Drop; only its public fields are read.
        unsafe { self.ptr.as_ref() }
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.mr().lkey
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.mr().rkey
    }

    /// The memory.
    pub fn mem(&self) -> &Arc<DmaMem> {
        &self.mem
    }
}

owned!(
    /// A completion channel (`struct ibv_comp_channel`).
    Channel, t::ibv_comp_channel
);

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once after its CQs (each holds an Arc).
        unsafe { (obj(&self.ctx).destroy_channel)(self.ptr.as_ptr()) };
    }
}

impl Channel {
    /// `ibv_create_comp_channel`.
    pub fn new(ctx: &Arc<Context>) -> io::Result<Arc<Channel>> {
        // SAFETY: a live context.
        let ptr = nonnull(unsafe { (obj(ctx).create_channel)(ctx.ptr) })?;
        Ok(Arc::new(Channel {
            ptr,
            ctx: ctx.clone(),
        }))
    }

    /// The channel's fd: readable while an event waits.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the channel's fd, open until Drop, which this borrow cannot outlive.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.ptr.as_ref().fd) }
    }

    /// `ibv_get_cq_event` once the fd is readable (up to `timeout_ms`, -1 forever), then
    /// `ibv_ack_cq_events` at once: the [`Cq::id`] of the CQ, or `None`.
    pub fn get_cq_event(&self, timeout_ms: i32) -> Option<u64> {
        use std::os::fd::AsRawFd;
        let mut ready = Vec::new();
        crate::poll::poll_readable(&[self.fd().as_raw_fd()], timeout_ms, &mut ready).ok()?;
        if !ready.first().copied().unwrap_or(false) {
            return None;
        }
        let (mut cq, mut cq_ctx) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: a live channel whose fd is readable (no blocking); out pointers.
        if unsafe { (obj(&self.ctx).get_cq_event)(self.ptr.as_ptr(), &mut cq, &mut cq_ctx) } != 0 {
            return None;
        }
        // SAFETY: `cq` was just returned: a CQ of this channel, alive because its
        // destruction waits for this acknowledgement.
        unsafe { (obj(&self.ctx).ack_cq_events)(cq, 1) };
        Some(cq_ctx as u64)
    }
}

/// A completion queue (`struct ibv_cq`).
pub struct Cq {
    ptr: NonNull<t::ibv_cq>,
    ctx: Arc<Context>,
    _channel: Option<Arc<Channel>>,
    id: u64,
}

// SAFETY: owned (destroyed once in Drop); libibverbs' CQ verbs are thread-safe.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once after its QPs (each holds an Arc);
        // every event was acknowledged when it was read.
        unsafe { (obj(&self.ctx).destroy_cq)(self.ptr.as_ptr()) };
    }
}

impl Cq {
    /// `ibv_create_cq` with `cqe` entries, its events on `channel`; `id` is its
    /// `cq_context`, what [`Channel::get_cq_event`] returns for it.
    pub fn new(
        ctx: &Arc<Context>,
        cqe: u32,
        channel: Option<&Arc<Channel>>,
        id: u64,
    ) -> io::Result<Cq> {
        let cqe = c_int::try_from(cqe).map_err(|_| einval())?;
        let ch = channel.map_or(std::ptr::null_mut(), |c| c.ptr.as_ptr());
        // SAFETY: a live context and channel (kept alive by this CQ); `id` is an
        // opaque number, never dereferenced.
        let ptr = nonnull(unsafe { (obj(ctx).create_cq)(ctx.ptr, cqe, id as *mut c_void, ch, 0) })?;
        Ok(Cq {
            ptr,
            ctx: ctx.clone(),
            _channel: channel.cloned(),
            id,
        })
    }

    /// The value given at creation.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The entries the provider gave it (at least the requested number).
    pub fn cqe(&self) -> i32 {
        // SAFETY: live until Drop; a plain field read.
        unsafe { self.ptr.as_ref().cqe }
    }

    /// `ibv_poll_cq` (inline in verbs.h: `ops.poll_cq`) into `out`: how many it filled.
    pub fn poll(&self, out: &mut [t::ibv_wc]) -> io::Result<usize> {
        let f = ops(&self.ctx)
            .poll_cq
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP))?;
        let n = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        // SAFETY: a live CQ; `out` has room for `n` entries the provider writes.
        let r = unsafe { f(self.ptr.as_ptr(), n, out.as_mut_ptr()) };
        if r < 0 {
            return Err(io::Error::from_raw_os_error(-r));
        }
        Ok(r as usize)
    }

    /// `ibv_req_notify_cq` (inline in verbs.h: `ops.req_notify_cq`).
    pub fn req_notify(&self, solicited_only: bool) -> io::Result<()> {
        let f = ops(&self.ctx)
            .req_notify_cq
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP))?;
        // SAFETY: a live CQ.
        check(unsafe { f(self.ptr.as_ptr(), c_int::from(solicited_only)) })
    }
}

owned!(
    /// An address handle (`struct ibv_ah`).
    Ah, t::ibv_ah
);

/// An address handle with its PD.
pub struct AhHandle {
    ah: Ah,
    _pd: Arc<Pd>,
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created in `AhHandle::new`, destroyed once; a posted UD send that
        // named it was copied into the provider's queue by then.
        unsafe { (obj(&self.ctx).destroy_ah)(self.ptr.as_ptr()) };
    }
}

impl AhHandle {
    /// `ibv_create_ah`.
    pub fn new(pd: &Arc<Pd>, attr: &t::ibv_ah_attr) -> io::Result<AhHandle> {
        let mut a = *attr;
        // SAFETY: a live PD and an attribute struct the call only reads.
        let ptr = nonnull(unsafe { (obj(&pd.ctx).create_ah)(pd.ptr.as_ptr(), &mut a) })?;
        Ok(AhHandle {
            ah: Ah {
                ptr,
                ctx: pd.ctx.clone(),
            },
            _pd: pd.clone(),
        })
    }
}

/// A shared receive queue (`struct ibv_srq`).
pub struct Srq {
    ptr: NonNull<t::ibv_srq>,
    pd: Arc<Pd>,
    id: u64,
}

// SAFETY: owned (destroyed once in Drop); SRQ verbs are thread-safe.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once after its QPs (each holds an Arc).
        unsafe { (obj(&self.pd.ctx).destroy_srq)(self.ptr.as_ptr()) };
    }
}

impl Srq {
    /// `ibv_create_srq`; `id` is its `srq_context` (reported by async events).
    pub fn new(pd: &Arc<Pd>, max_wr: u32, max_sge: u32, id: u64) -> io::Result<Arc<Srq>> {
        let mut a: t::ibv_srq_init_attr = zeroed();
        a.srq_context = id as *mut c_void;
        a.attr.max_wr = max_wr;
        a.attr.max_sge = max_sge;
        // SAFETY: a live PD; `id` is never dereferenced.
        let ptr = nonnull(unsafe { (obj(&pd.ctx).create_srq)(pd.ptr.as_ptr(), &mut a) })?;
        Ok(Arc::new(Srq {
            ptr,
            pd: pd.clone(),
            id,
        }))
    }

    /// The value given at creation.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`.
    pub fn set_limit(&self, limit: u32) -> io::Result<()> {
        let mut a: t::ibv_srq_attr = zeroed();
        a.srq_limit = limit;
        // SAFETY: a live SRQ and an attribute struct.
        check(unsafe {
            (obj(&self.pd.ctx).modify_srq)(self.ptr.as_ptr(), &mut a, IBV_SRQ_LIMIT as c_int)
        })
    }

    /// `ibv_post_srq_recv` (inline in verbs.h: `ops.post_srq_recv`) of one request.
    pub fn post_recv(&self, wr_id: u64, bufs: &[Sge<'_>]) -> io::Result<()> {
        let f = ops(&self.pd.ctx)
            .post_srq_recv
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP))?;
        let mut sges = to_sges(bufs)?;
        let mut wr = recv_wr(wr_id, &mut sges);
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live SRQ; the request and its SGEs live across the call, and each
        // SGE is a checked range of a registered region.
        check(unsafe { f(self.ptr.as_ptr(), &mut wr, &mut bad) })
    }
}

/// A range of a registered region, as a work request names it.
#[derive(Clone, Copy)]
pub struct Sge<'a> {
    /// The region.
    pub mr: &'a Arc<Mr>,
    /// Start, from the region's first byte.
    pub offset: usize,
    /// Length.
    pub len: usize,
}

pub(super) fn to_sges(bufs: &[Sge<'_>]) -> io::Result<Vec<t::ibv_sge>> {
    bufs.iter()
        .map(|b| {
            let end = b.offset.checked_add(b.len).ok_or_else(einval)?;
            if end > b.mr.mem.len {
                return Err(einval());
            }
            Ok(t::ibv_sge {
                addr: b.mr.mem.addr() + b.offset as u64,
                length: u32::try_from(b.len).map_err(|_| einval())?,
                lkey: b.mr.lkey(),
            })
        })
        .collect()
}

fn recv_wr(wr_id: u64, sges: &mut [t::ibv_sge]) -> t::ibv_recv_wr {
    let mut wr: t::ibv_recv_wr = zeroed();
    wr.wr_id = wr_id;
    wr.sg_list = sges.as_mut_ptr();
    wr.num_sge = sges.len() as c_int;
    wr
}

/// Where a send goes beyond the QP's connection.
#[derive(Clone, Copy)]
pub enum Remote<'a> {
    /// SEND on a connected QP; LOCAL_INV and SEND_WITH_INV carry their R_Key in
    /// [`SendWr::imm_be`] (host order: the union's `invalidate_rkey`).
    None,
    /// BIND_MW: the window, its new R_Key and what it grants.
    Bind(super::MwBind<'a>),
    /// RDMA WRITE / READ: the peer's address and key.
    Rdma {
        /// Virtual address.
        addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Atomics: the peer's 8 bytes and the operands.
    Atomic {
        /// Virtual address.
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// Compare (CMP_AND_SWP) or add (FETCH_AND_ADD).
        compare_add: u64,
        /// Swap value.
        swap: u64,
    },
    /// UD: the address handle, QP number and Q_Key.
    Ud {
        /// The address handle.
        ah: &'a AhHandle,
        /// The remote QP number.
        qpn: u32,
        /// The remote Q_Key.
        qkey: u32,
    },
}

/// A send work request (`struct ibv_send_wr`), built from checked parts.
pub struct SendWr<'a> {
    /// The caller's id, returned in the completion.
    pub wr_id: u64,
    /// `IBV_WR_*`.
    pub opcode: u32,
    /// `IBV_SEND_*`.
    pub flags: u32,
    /// Immediate data in network order as the peer sees it.
    pub imm_be: u32,
    /// Local buffers.
    pub sges: &'a [Sge<'a>],
    /// The far side.
    pub remote: Remote<'a>,
}

/// A queue pair (`struct ibv_qp`).
pub struct Qp {
    pub(super) ptr: NonNull<t::ibv_qp>,
    pub(super) pd: Arc<Pd>,
    _cqs: [Arc<Cq>; 2],
    _srq: Option<Arc<Srq>>,
}

// SAFETY: owned (destroyed once in Drop); QP verbs are thread-safe in libibverbs.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, before its PD, CQs and SRQ.
        unsafe { (obj(&self.pd.ctx).destroy_qp)(self.ptr.as_ptr()) };
    }
}

/// What a new QP is made of (`struct ibv_qp_init_attr` with owned objects).
pub struct QpInit<'a> {
    /// `IBV_QPT_*`.
    pub qp_type: u32,
    /// The send CQ.
    pub send_cq: &'a Arc<Cq>,
    /// The receive CQ.
    pub recv_cq: &'a Arc<Cq>,
    /// The SRQ, if any.
    pub srq: Option<&'a Arc<Srq>>,
    /// Queue sizes.
    pub cap: t::ibv_qp_cap,
    /// Every send request is signaled.
    pub sq_sig_all: bool,
}

impl Qp {
    /// `ibv_create_qp`; `cap` becomes what the provider granted.
    pub fn new(pd: &Arc<Pd>, init: &QpInit<'_>) -> io::Result<(Qp, t::ibv_qp_cap)> {
        let mut a: t::ibv_qp_init_attr = zeroed();
        a.send_cq = init.send_cq.ptr.as_ptr();
        a.recv_cq = init.recv_cq.ptr.as_ptr();
        a.srq = init.srq.map_or(std::ptr::null_mut(), |s| s.ptr.as_ptr());
        a.cap = init.cap;
        a.qp_type = init.qp_type;
        a.sq_sig_all = c_int::from(init.sq_sig_all);
        // SAFETY: a live PD, CQs and SRQ of the same context, kept alive by the QP.
        let ptr = nonnull(unsafe { (obj(&pd.ctx).create_qp)(pd.ptr.as_ptr(), &mut a) })?;
        Ok((
            Qp {
                ptr,
                pd: pd.clone(),
                _cqs: [init.send_cq.clone(), init.recv_cq.clone()],
                _srq: init.srq.cloned(),
            },
            a.cap,
        ))
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: live until Drop; a plain field read.
        unsafe { self.ptr.as_ref().qp_num }
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &t::ibv_qp_attr, mask: u32) -> io::Result<()> {
        let mut a = *attr;
        let mask = c_int::try_from(mask).map_err(|_| einval())?;
        // SAFETY: a live QP and an attribute struct.
        check(unsafe { (obj(&self.pd.ctx).modify_qp)(self.ptr.as_ptr(), &mut a, mask) })
    }

    /// `ibv_query_qp` of every attribute.
    pub fn query(&self) -> io::Result<(t::ibv_qp_attr, t::ibv_qp_init_attr)> {
        let mut a: t::ibv_qp_attr = zeroed();
        let mut i: t::ibv_qp_init_attr = zeroed();
        let all = (1 << 21) - 1;
        // SAFETY: a live QP and two out structs.
        check(unsafe { (obj(&self.pd.ctx).query_qp)(self.ptr.as_ptr(), &mut a, all, &mut i) })?;
        // The init attributes' pointers are the library's; only numbers leave here.
        i.send_cq = std::ptr::null_mut();
        i.recv_cq = std::ptr::null_mut();
        i.srq = std::ptr::null_mut();
        i.qp_context = std::ptr::null_mut();
        Ok((a, i))
    }

    /// `ibv_post_recv` (inline in verbs.h: `ops.post_recv`) of one request.
    pub fn post_recv(&self, wr_id: u64, bufs: &[Sge<'_>]) -> io::Result<()> {
        let f = ops(&self.pd.ctx)
            .post_recv
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP))?;
        let mut sges = to_sges(bufs)?;
        let mut wr = recv_wr(wr_id, &mut sges);
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; the request and its SGEs live across the call, and each
        // SGE is a checked range of a registered region.
        check(unsafe { f(self.ptr.as_ptr(), &mut wr, &mut bad) })
    }

    /// `ibv_post_send` (inline in verbs.h: `ops.post_send`) of a chain: on a refused
    /// request, its index and the error.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), (usize, io::Error)> {
        let f = ops(&self.pd.ctx)
            .post_send
            .ok_or((0, io::Error::from_raw_os_error(libc::EOPNOTSUPP)))?;
        let mut sges = Vec::with_capacity(wrs.len());
        for (i, w) in wrs.iter().enumerate() {
            if w.flags & IBV_SEND_INLINE != 0 && w.sges.iter().any(|s| s.mr.pd.ptr != self.pd.ptr) {
                // An inline send is read by the provider from `addr`, not by key:
                // only regions of this QP's PD, whose ranges were checked.
                return Err((i, einval()));
            }
            // The provider reads `wr.bind_mw` for a BIND_MW opcode and only then
            // (verbs.h's union): the two must agree, and a bind carries no data
            // (rxe's provider refuses SGEs on it).
            if let Remote::Bind(b) = w.remote {
                if w.opcode != IBV_WR_BIND_MW || !w.sges.is_empty() {
                    return Err((i, einval()));
                }
                if !Arc::ptr_eq(&b.mw.pd.ctx, &self.pd.ctx) {
                    return Err((i, einval()));
                }
            } else if w.opcode == IBV_WR_BIND_MW {
                return Err((i, einval()));
            }
            sges.push(to_sges(w.sges).map_err(|e| (i, e))?);
        }
        let mut binding = super::mw::Binding::new(wrs);
        let mut c: Vec<t::ibv_send_wr> = wrs
            .iter()
            .zip(sges.iter_mut())
            .enumerate()
            .map(|(i, (w, s))| {
                let mut wr: t::ibv_send_wr = zeroed();
                wr.wr_id = w.wr_id;
                wr.sg_list = s.as_mut_ptr();
                wr.num_sge = s.len() as c_int;
                wr.opcode = w.opcode;
                wr.send_flags = w.flags;
                wr.imm.imm_data = w.imm_be;
                match w.remote {
                    Remote::None => {}
                    Remote::Rdma { addr, rkey } => {
                        wr.wr.rdma = t::ibv_send_wr_rdma {
                            remote_addr: addr,
                            rkey,
                        }
                    }
                    Remote::Atomic {
                        addr,
                        rkey,
                        compare_add,
                        swap,
                    } => {
                        wr.wr.atomic = t::ibv_send_wr_atomic {
                            remote_addr: addr,
                            compare_add,
                            swap,
                            rkey,
                        }
                    }
                    Remote::Ud { ah, qpn, qkey } => {
                        wr.wr.ud = t::ibv_send_wr_ud {
                            ah: ah.ah.ptr.as_ptr(),
                            remote_qpn: qpn,
                            remote_qkey: qkey,
                        }
                    }
                    Remote::Bind(b) => {
                        wr.ext.bind_mw = t::ibv_send_wr_bind_mw {
                            mw: b.mw.ptr.as_ptr(),
                            rkey: b.rkey,
                            bind_info: binding.info(&b).map_err(|e| (i, e))?,
                        }
                    }
                }
                Ok(wr)
            })
            .collect::<Result<_, (usize, io::Error)>>()?;
        for i in 1..c.len() {
            let next: *mut t::ibv_send_wr = &mut c[i];
            c[i - 1].next = next;
        }
        let Some(first) = c.first_mut() else {
            return Ok(());
        };
        let mut bad: *mut t::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: a live QP; the chain, its SGEs (checked ranges of registered regions)
        // and its AHs (alive through the borrows in `wrs`) live across the call.
        let rc = unsafe { f(self.ptr.as_ptr(), first, &mut bad) };
        if rc == 0 {
            binding.posted(wrs);
            return Ok(());
        }
        let base = c.as_ptr();
        let idx = if bad.is_null() {
            0
        } else {
            // SAFETY: `bad` points into `c` (the provider returns an element of the
            // chain it was given).
            usize::try_from(unsafe { bad.offset_from(base) }).unwrap_or(0)
        };
        binding.posted(&wrs[..idx.min(wrs.len())]);
        let e = if rc == -1 {
            io::Error::last_os_error()
        } else {
            io::Error::from_raw_os_error(rc.abs())
        };
        Err((idx, e))
    }

    /// `ibv_attach_mcast` (`attach`) or `ibv_detach_mcast` with LID 0 (RoCE).
    pub fn mcast(&self, gid: [u8; 16], attach: bool) -> io::Result<()> {
        let g = t::ibv_gid { raw: gid };
        let f = if attach {
            obj(&self.pd.ctx).attach_mcast
        } else {
            obj(&self.pd.ctx).detach_mcast
        };
        // SAFETY: a live QP and a GID the call reads.
        check(unsafe { f(self.ptr.as_ptr(), &g, 0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dma_memory_is_reached_by_checked_copies() {
        let m = DmaMem::new(16).unwrap();
        assert_eq!(m.write(4, b"abcd"), Some(()));
        let mut out = [0u8; 6];
        assert_eq!(m.read(3, &mut out), Some(()));
        assert_eq!(&out, b"\0abcd\0");
        // Unaligned starts and ends around whole words.
        let big = DmaMem::new(64).unwrap();
        let data: Vec<u8> = (1..=37).collect();
        assert_eq!(big.write(3, &data), Some(()));
        let mut back = vec![0u8; 39];
        assert_eq!(big.read(2, &mut back), Some(()));
        assert_eq!(back[0], 0);
        assert_eq!(&back[1..38], &data[..]);
        assert_eq!(back[38], 0);
        assert_eq!(m.write(14, b"abc"), None);
        assert_eq!(m.read(usize::MAX, &mut out), None);
        assert!(DmaMem::new(0).unwrap().is_empty());
    }
}
