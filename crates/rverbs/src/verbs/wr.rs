//! Work requests ([`SendRequest`]).

use super::*;
use rverbs_engine::{SendFlags, UdDest, WrOpcode};

impl<'a> SendRequest<'a> {
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
}
