//! Work requests as the device sees them: [`SendRequest`], the [`LocalBuf`]s it names
//! and the region memory behind them ([`MrMem`]). The public builders live with the
//! verbs (the `verbs` module's `wr`); these are the types the device interface takes, kept
//! below the verbs so a device needs nothing of the handles that post them.

use rverbs_engine::{PdId, SendFlags, SendWr, Sge, UdDest, VecMemory, WrOpcode};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// A region's bytes: the soft device's (behind a lock the device takes too), or a
/// system device's registered memory, which the NIC writes at any time without a lock
/// and Rust therefore reaches only through volatile copies (`rverbs_sys::ibv::DmaMem`).
pub(crate) enum Region {
    Soft(Arc<VecMemory>),
    Hw(Arc<crate::sys::ibv::Mr>),
}

impl Region {
    /// The soft device's memory (`None` for a system device's region).
    pub(crate) fn soft(&self) -> Option<&Arc<VecMemory>> {
        match self {
            Region::Soft(m) => Some(m),
            Region::Hw(_) => None,
        }
    }

    /// Copies `dst.len()` bytes at `offset` out (the caller checked the range).
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) {
        match self {
            Region::Soft(m) => m.with(|b| dst.copy_from_slice(&b[offset..offset + dst.len()])),
            Region::Hw(m) => m
                .mem()
                .read(offset, dst)
                .expect("range checked by the caller"),
        }
    }

    /// Copies `src` in at `offset` (the caller checked the range).
    pub(crate) fn write(&self, offset: usize, src: &[u8]) {
        match self {
            Region::Soft(m) => m.with(|b| b[offset..offset + src.len()].copy_from_slice(src)),
            Region::Hw(m) => m
                .mem()
                .write(offset, src)
                .expect("range checked by the caller"),
        }
    }

    /// A copy of all the bytes.
    pub(crate) fn snapshot(&self) -> Vec<u8> {
        match self {
            Region::Soft(m) => m.snapshot(),
            Region::Hw(m) => {
                let mut v = vec![0; m.mem().len()];
                self.read(0, &mut v);
                v
            }
        }
    }

    /// `f` over the bytes: in place under the region's lock on the soft device; on a
    /// system device over a copy, whose changed bytes are copied back afterwards (the
    /// NIC takes no lock, so a slice into its memory could change under `f`).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        match self {
            Region::Soft(m) => m.with(f),
            Region::Hw(m) => {
                let before = self.snapshot();
                let mut work = before.clone();
                let r = f(&mut work);
                let mut i = 0;
                while i < work.len() {
                    if work[i] == before[i] {
                        i += 1;
                        continue;
                    }
                    let start = i;
                    while i < work.len() && work[i] != before[i] {
                        i += 1;
                    }
                    m.mem()
                        .write(start, &work[start..i])
                        .expect("inside the region");
                }
                r
            }
        }
    }
}

/// A registered region's memory and keys, as a device reads them from a [`LocalBuf`]
/// (the public [`crate::Mr`] owns one).
pub(crate) struct MrMem {
    pub(crate) region: Region,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) addr: u64,
    pub(crate) len: usize,
    /// The protection domain the region was registered in.
    pub(crate) pd: PdId,
}

/// A send work request, built from safe parts: an operation, the local buffers it
/// reads (or, for READ and atomics, writes) and, for one-sided operations, the peer's
/// [`RemoteBuf`]. It borrows the regions it names until it is posted.
///
/// A READ or WRITE moves exactly the peer's [`RemoteBuf`]: its length must be the
/// local buffers' total, else `post_send` fails with EINVAL naming both lengths.
///
/// ```no_run
/// # fn demo(qp: &rverbs::Qp, mr: &rverbs::Mr, peer: rverbs::RemoteBuf) -> rverbs::Result<()> {
/// use rverbs::{RemoteBuf, SendRequest};
/// // `peer`: 4096 bytes of the other side's memory.
/// qp.post_send(&SendRequest::write(1, &[mr.slice(0..4096)], peer).signaled(false))?;
/// qp.post_send(&SendRequest::read(2, &[mr.slice(4096..8192)], peer).fence())?;
/// let counter = RemoteBuf { len: 8, ..peer };
/// qp.post_send(&SendRequest::fetch_add(3, mr.slice(8192..8200), counter, 1))?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SendRequest<'a> {
    pub(crate) wr_id: u64,
    pub(crate) opcode: WrOpcode,
    pub(crate) bufs: Bufs<'a>,
    pub(crate) flags: SendFlags,
    pub(crate) imm: u32,
    pub(crate) remote: Option<RemoteBuf>,
    pub(crate) compare_add: u64,
    pub(crate) swap: u64,
    pub(crate) ud: Option<UdDest>,
    /// A BIND_MW request: the window's R_Key, and the one it gets once posted.
    pub(crate) bind: Option<(&'a AtomicU32, u32)>,
}

/// A request's local buffers: the usual single one in place (no allocation per
/// request), others on the heap.
#[derive(Clone)]
pub(crate) enum Bufs<'a> {
    One(LocalBuf<'a>),
    Many(Vec<LocalBuf<'a>>),
}

impl<'a> Bufs<'a> {
    pub(crate) fn as_slice(&self) -> &[LocalBuf<'a>] {
        match self {
            Bufs::One(b) => std::slice::from_ref(b),
            Bufs::Many(v) => v,
        }
    }
}

impl<'a> SendRequest<'a> {
    pub(crate) fn new(wr_id: u64, opcode: WrOpcode, bufs: &[LocalBuf<'a>]) -> Self {
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
            bind: None,
        }
    }

    /// Once the device took the request: a bound window has its new R_Key.
    pub(crate) fn posted(&self) {
        if let Some((key, new)) = self.bind {
            key.store(new, Ordering::Relaxed);
        }
    }

    /// EINVAL when a READ or WRITE names a [`RemoteBuf`] whose length differs from the
    /// local buffers' total: the transfer would run past what the peer offered, or
    /// move only part of it without saying so. rdma-core leaves such a request to the
    /// device (the responder answers a remote access error when it overruns the
    /// region, and a shorter transfer just succeeds); here both lengths are known at
    /// post time, so the request is refused before anything is sent. To move part of
    /// a peer's buffer, name that part: `RemoteBuf { addr, len, ..peer }`. Atomics
    /// (8 bytes at `remote.addr`) and requests without a `RemoteBuf` are not checked.
    pub(crate) fn check_remote_len(&self) -> crate::Result<()> {
        let Some(r) = self.remote else {
            return Ok(());
        };
        if !matches!(
            self.opcode,
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead
        ) {
            return Ok(());
        }
        let local: u64 = self.bufs.as_slice().iter().map(|b| b.len as u64).sum();
        if local == u64::from(r.len) {
            return Ok(());
        }
        let why = "the RemoteBuf's length is not the local buffers' total";
        Err(
            rverbs_engine::VerbError::new("post_send", rverbs_engine::Errno::Inval, why)
                .with_limit(
                    local,
                    r.len.into(),
                    "bytes in the local buffers",
                    "the RemoteBuf has",
                )
                .into(),
        )
    }

    pub(crate) fn to_engine(&self) -> SendWr {
        let r = self.remote.unwrap_or(RemoteBuf {
            addr: 0,
            rkey: 0,
            len: 0,
        });
        // A bind names its region in the opcode (the engine's MwBind), not as data.
        let data = if matches!(self.opcode, WrOpcode::BindMw(_)) {
            &[][..]
        } else {
            self.bufs.as_slice()
        };
        SendWr {
            wr_id: self.wr_id,
            opcode: self.opcode,
            sg_list: data.iter().map(LocalBuf::sge).collect(),
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

/// Bytes of a local memory region named in a work request.
#[derive(Clone, Copy)]
pub struct LocalBuf<'a> {
    pub(crate) mr: &'a MrMem,
    pub(crate) offset: usize,
    pub(crate) len: usize,
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
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.mr.region.read(self.offset, &mut v);
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

/// EINVAL when a buffer is 4 GiB or longer: `ibv_sge.length` (and the engine's) is 32
/// bits, and such a buffer was cut short to its length modulo 2^32.
pub(crate) fn sge_lens_fit(
    verb: &'static str,
    lens: impl IntoIterator<Item = usize>,
) -> crate::Result<()> {
    if lens.into_iter().any(|n| u32::try_from(n).is_err()) {
        let why = "a buffer of 4 GiB or more (an SGE's length is 32 bits)";
        return Err(rverbs_engine::VerbError::new(verb, rverbs_engine::Errno::Inval, why).into());
    }
    Ok(())
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
