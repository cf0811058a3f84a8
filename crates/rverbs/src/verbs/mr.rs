//! Memory regions ([`Mr`]) and the buffers work requests name ([`LocalBuf`],
//! [`RemoteBuf`], [`AccessFlags`]).

use super::*;
use crate::device::wr::MrMem;
use std::ops::Range;
use std::sync::Arc;

use crate::device::guard::WithGuard;

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
    pub(crate) pd: Arc<PdInner>,
    pub(crate) mem: MrMem,
}

impl Drop for Mr {
    fn drop(&mut self) {
        self.pd.ctx.dev().dereg_mr(self.mem.lkey);
    }
}

impl Mr {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.mem.lkey
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.mem.rkey
    }
    /// The region's virtual address (what a peer puts in `remote_addr`).
    pub fn addr(&self) -> u64 {
        self.mem.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len
    }
    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.mem.len == 0
    }
    /// Copies bytes out of the region, starting at `offset`.
    ///
    /// # Panics
    /// If `offset + dst.len()` is beyond the region (like slicing out of bounds).
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(
            offset
                .checked_add(dst.len())
                .is_some_and(|e| e <= self.mem.len),
            "Mr::read outside the region"
        );
        self.mem.region.read(offset, dst);
    }
    /// Copies bytes into the region at `offset`.
    ///
    /// # Panics
    /// If `offset + src.len()` is beyond the region (like slicing out of bounds).
    pub fn write(&self, offset: usize, src: &[u8]) {
        assert!(
            offset
                .checked_add(src.len())
                .is_some_and(|e| e <= self.mem.len),
            "Mr::write outside the region"
        );
        self.mem.region.write(offset, src);
    }
    /// Runs `f` with the region's bytes; the soft device waits meanwhile (it cannot read
    /// or write this region until `f` returns, so `f` sees a consistent snapshot and its
    /// writes are never torn by the device).
    ///
    /// On a system device ([`crate::DeviceKind::System`]) the NIC takes no lock: `f`
    /// gets a copy of the region, and the bytes it changed are copied back when it
    /// returns; bytes the NIC wrote meanwhile at those offsets are overwritten. Prefer
    /// [`Mr::read`] / [`Mr::write`] (volatile copies of just the range) there.
    ///
    /// Verbs called from inside `f` (on any object of any context) fail with
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) instead of waiting for the device, which may itself be
    /// waiting for this region. Objects dropped inside `f` are destroyed a moment later
    /// by the device's driver thread. Copy out what you need, return, then post.
    ///
    /// # Panics
    /// The accessors that return no `Result` and need the device ([`Qp::state`],
    /// [`Context::gids`], [`Context::gid`], [`Context::gid_index_for`],
    /// [`Context::counters`]) panic when called inside `f`, rather than deadlock.
    pub fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let _g = WithGuard::enter();
        self.mem.region.with(f)
    }
    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        self.mem.region.snapshot()
    }
    /// The bytes `range` of this region, for a work request.
    ///
    /// # Panics
    /// If `range` is not inside the region (a caller bug, like slicing out of bounds).
    pub fn slice(&self, range: Range<usize>) -> LocalBuf<'_> {
        assert!(
            range.start <= range.end && range.end <= self.mem.len,
            "LocalBuf range outside the MR"
        );
        LocalBuf {
            mr: &self.mem,
            offset: range.start,
            len: range.end - range.start,
        }
    }
    /// The whole region, for a work request.
    pub fn all(&self) -> LocalBuf<'_> {
        self.slice(0..self.mem.len)
    }
    /// What a peer needs to read, write or use atomics on `range` of this region.
    ///
    /// # Panics
    /// If `range` is not inside the region, or is 4 GiB or longer (a RETH's DMA
    /// length is 32 bits).
    pub fn remote(&self, range: Range<usize>) -> RemoteBuf {
        assert!(
            range.start <= range.end && range.end <= self.mem.len,
            "RemoteBuf range outside the MR"
        );
        assert!(
            u32::try_from(range.end - range.start).is_ok(),
            "RemoteBuf of 4 GiB or more"
        );
        RemoteBuf {
            addr: self.mem.addr + range.start as u64,
            rkey: self.mem.rkey,
            len: (range.end - range.start) as u32,
        }
    }
}

/// Access rights of a memory region or QP (`enum ibv_access_flags`): the engine's
/// type, one name in the whole API (`AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ`,
/// `AccessFlags::ALL`; `QpAttr::qp_access_flags` is the same type).
pub use rverbs_engine::Access as AccessFlags;
