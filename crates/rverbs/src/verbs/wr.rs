//! Work requests ([`SendRequest`]).

use super::*;
use rverbs_engine::{SendFlags, SendWr, UdDest, WrOpcode};

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
        }
    }

    /// SEND of `bufs`.
    pub fn send(wr_id: u64, bufs: &[LocalBuf<'a>]) -> Self {
        Self::new(wr_id, WrOpcode::Send, bufs)
    }

    /// RDMA WRITE of `bufs` to `remote`, whose `len` must be the buffers' total (else
    /// `post_send` is EINVAL; name part of a peer's buffer with a shorter `RemoteBuf`).
    pub fn write(wr_id: u64, bufs: &[LocalBuf<'a>], remote: RemoteBuf) -> Self {
        SendRequest {
            remote: Some(remote),
            ..Self::new(wr_id, WrOpcode::RdmaWrite, bufs)
        }
    }

    /// RDMA READ from `remote` into `bufs`, whose total must be `remote.len` (else
    /// `post_send` is EINVAL).
    pub fn read(wr_id: u64, bufs: &[LocalBuf<'a>], remote: RemoteBuf) -> Self {
        SendRequest {
            remote: Some(remote),
            ..Self::new(wr_id, WrOpcode::RdmaRead, bufs)
        }
    }

    /// Atomic fetch-and-add of `add` on the 8 bytes at `remote`; the original value
    /// lands in `result` (8 bytes).
    ///
    /// Byte order: `add` is a number (it travels big-endian in the AtomicETH); the
    /// responder adds it to the target read as a u64 in the responder's native byte
    /// order, as rxe does; the original value arrives big-endian in the AtomicAckETH
    /// and is stored in `result` in this host's native order
    /// (`u64::from_ne_bytes` reads it back).
    pub fn fetch_add(wr_id: u64, result: LocalBuf<'a>, remote: RemoteBuf, add: u64) -> Self {
        SendRequest {
            remote: Some(remote),
            compare_add: add,
            ..Self::new(wr_id, WrOpcode::AtomicFetchAndAdd, &[result])
        }
    }

    /// Atomic compare-and-swap on the 8 bytes at `remote`; the original value lands in
    /// `result` (8 bytes). Byte order as for [`SendRequest::fetch_add`]: `compare` and
    /// `swap` are numbers, the target is the responder's native u64, `result` this
    /// host's.
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
    ///
    /// `imm` is a number: it travels big-endian (ImmDt, IBTA 9.3.6), and an rverbs
    /// receiver's `Wc::imm_data` is the same number. A libibverbs peer holds immediate
    /// data as a `__be32`: it sees `htobe32(imm)` in `wc.imm_data`, and what it posts
    /// as `imm_data` arrives here as `be32toh` of it.
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
