//! The verbs vocabulary the engine speaks: handles, access flags, work requests, work
//! completions, QP types and states, async events and errors. Names and values follow
//! rdma-core's `libibverbs/verbs.h` so the public API above can map them one to one.

use core::fmt;
use rverbs_wire::grh::Gid;

/// Time on the engine's clock, in nanoseconds from an arbitrary origin. The engine never
/// reads a clock: every call that may depend on time is given `now`.
pub type Nanos = u64;

/// The errno a libibverbs user would see for a failed verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Errno {
    /// Invalid argument (EINVAL).
    Inval,
    /// Out of memory or resources (ENOMEM).
    NoMem,
    /// The object is in use (EBUSY).
    Busy,
    /// Operation not supported (EOPNOTSUPP).
    NotSupported,
    /// Permission denied (EPERM).
    Perm,
    /// No data (ENODATA).
    NoData,
    /// No such entry (ENOENT).
    NoEnt,
    /// No such device (ENODEV), e.g. a GID's network device name that `if_nametoindex`
    /// cannot resolve.
    NoDev,
    /// Protocol not supported (EPROTONOSUPPORT), e.g. a GRH whose next header is
    /// neither UDP nor BTH (`ibv_init_ah_from_wc`).
    ProtoNotSupported,
}

impl Errno {
    /// The Linux errno value.
    pub const fn code(self) -> i32 {
        match self {
            Errno::Perm => 1,
            Errno::NoEnt => 2,
            Errno::NoMem => 12,
            Errno::Busy => 16,
            Errno::NoDev => 19,
            Errno::Inval => 22,
            Errno::NoData => 61,
            Errno::ProtoNotSupported => 93,
            Errno::NotSupported => 95,
        }
    }
}

/// A failed verb: which verb, the errno, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbError {
    /// The verb that failed, e.g. `"modify_qp"`.
    pub verb: &'static str,
    /// The errno.
    pub errno: Errno,
    /// A short reason.
    pub reason: &'static str,
    /// For a size over a limit: the size asked for and the limit, printed after the
    /// reason.
    pub limit: Option<Limit>,
}

/// The numbers behind a size error, printed as "(3 SGEs, the QP takes at most 2)":
/// `asked`, `unit`, `against`, `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// What was asked for.
    pub asked: u64,
    /// The most the object takes.
    pub max: u64,
    /// The unit, plural (`"SGEs"`, `"bytes"`; empty for a bare number).
    pub unit: &'static str,
    /// What sets the limit, with its verb (`"the QP takes at most"`).
    pub against: &'static str,
}

impl VerbError {
    /// Builds an error.
    pub const fn new(verb: &'static str, errno: Errno, reason: &'static str) -> Self {
        VerbError {
            verb,
            errno,
            reason,
            limit: None,
        }
    }

    /// The error with the numbers of a size over a limit.
    pub const fn with_limit(
        mut self,
        asked: u64,
        max: u64,
        unit: &'static str,
        against: &'static str,
    ) -> Self {
        self.limit = Some(Limit {
            asked,
            max,
            unit,
            against,
        });
        self
    }
}

impl fmt::Display for VerbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed (errno {}): {}",
            self.verb,
            self.errno.code(),
            self.reason
        )?;
        if let Some(l) = self.limit {
            write!(f, " ({}", l.asked)?;
            if !l.unit.is_empty() {
                write!(f, " {}", l.unit)?;
            }
            write!(f, ", {} {})", l.against, l.max)?;
        }
        Ok(())
    }
}

impl std::error::Error for VerbError {}

/// Result of a verb.
pub type VerbResult<T> = Result<T, VerbError>;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub(crate) u32);

        impl $name {
            /// The raw handle value (a table index).
            pub const fn raw(self) -> u32 {
                self.0
            }

            /// The handle numbered `raw`, for a device other than the engine that hands
            /// out its own numbers (rverbs' device interface). Given to an engine, a
            /// number that names none of its live objects is EINVAL.
            pub const fn from_raw(raw: u32) -> Self {
                $name(raw)
            }
        }
    };
}

handle!(
    /// A protection domain.
    PdId
);
handle!(
    /// A completion queue.
    CqId
);
handle!(
    /// A shared receive queue.
    SrqId
);
handle!(
    /// An address handle.
    AhId
);

/// Memory access rights (`enum ibv_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    /// The local side may write (needed for receive buffers and READ/atomic targets).
    pub const LOCAL_WRITE: Access = Access(1 << 0);
    /// Remote RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    /// Remote RDMA READ.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// Remote atomics.
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    /// Memory windows may be bound to the region (`IBV_ACCESS_MW_BIND`).
    pub const MW_BIND: Access = Access(1 << 4);
    /// The window's addresses start at 0 (`IBV_ACCESS_ZERO_BASED`).
    pub const ZERO_BASED: Access = Access(1 << 5);
    /// No access beyond local read.
    pub const NONE: Access = Access(0);
    /// Every right: local write, remote write, read and atomics.
    pub const ALL: Access = Access(
        Access::LOCAL_WRITE.0
            | Access::REMOTE_WRITE.0
            | Access::REMOTE_READ.0
            | Access::REMOTE_ATOMIC.0,
    );

    /// True when all rights in `other` are present.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union.
    pub const fn with(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        self.with(o)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Access({:#x})", self.0)
    }
}

/// QP transport type (`enum ibv_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// Raw Ethernet frames (`IBV_QPT_RAW_PACKET`): no transport header, frames are
    /// steered to the QP by flow rules. The engine has no RAW_PACKET datapath; rverbs
    /// backs such QPs with a raw-mode device (see `rverbs::OpenOptions::raw_interface`).
    RawPacket,
}

/// QP state (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QpState {
    /// Reset.
    Reset,
    /// Initialised.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error.
    Err,
}

/// Path MTU (`enum ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    M256 = 1,
    /// 512 bytes.
    M512 = 2,
    /// 1024 bytes.
    M1024 = 3,
    /// 2048 bytes.
    M2048 = 4,
    /// 4096 bytes.
    M4096 = 5,
}

impl Mtu {
    /// The MTU in bytes.
    pub const fn bytes(self) -> usize {
        128 << (self as u32)
    }

    /// From the `ibv_mtu` enum value.
    pub const fn from_enum(v: u8) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::M256,
            2 => Mtu::M512,
            3 => Mtu::M1024,
            4 => Mtu::M2048,
            5 => Mtu::M4096,
            _ => return None,
        })
    }

    /// The largest IB MTU that fits a netdev MTU, as rxe computes it
    /// (`rxe_net.c`/`rxe.c`: netdev MTU minus 80 bytes of RoCE v2 headers, rounded down).
    pub const fn from_netdev_mtu(netdev_mtu: usize) -> Option<Mtu> {
        let room = netdev_mtu.saturating_sub(80);
        if room >= 4096 {
            Some(Mtu::M4096)
        } else if room >= 2048 {
            Some(Mtu::M2048)
        } else if room >= 1024 {
            Some(Mtu::M1024)
        } else if room >= 512 {
            Some(Mtu::M512)
        } else if room >= 256 {
            Some(Mtu::M256)
        } else {
            None
        }
    }
}

/// Where a packet goes and comes from at the IP level: the resolved address vector of
/// an RC/UC QP or a UD address handle (`struct ibv_ah_attr` with its GRH).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressVector {
    /// Destination GID.
    pub dgid: Gid,
    /// Index of the source GID in the port's table.
    pub sgid_index: u8,
    /// Hop limit (IPv6) / TTL (IPv4).
    pub hop_limit: u8,
    /// Traffic class (IPv6) / TOS (IPv4).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

/// A scatter/gather element (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Virtual address inside the MR.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the MR.
    pub lkey: u32,
}

/// How many SGEs an [`SgList`] holds without an allocation.
pub const SG_INLINE: usize = 2;

/// The scatter/gather list of a work request: up to [`SG_INLINE`] elements are kept in
/// place, more in a `Vec`. Posting a work request of one or two SGEs (nearly all of
/// them) allocates nothing. Dereferences to `[Sge]`; built from a `Vec`, an array or
/// an iterator (`vec![sge].into()`, `[sge].into()`, `iter.collect()`).
#[derive(Clone, Default)]
pub struct SgList(SgRepr);

#[derive(Clone)]
enum SgRepr {
    Inline { len: u8, sges: [Sge; SG_INLINE] },
    Heap(Vec<Sge>),
}

impl Default for SgRepr {
    fn default() -> Self {
        SgRepr::Inline {
            len: 0,
            sges: [Sge::default(); SG_INLINE],
        }
    }
}

impl SgList {
    /// An empty list.
    pub fn new() -> Self {
        SgList::default()
    }

    /// Kept in a heap allocation (more than [`SG_INLINE`] elements were pushed).
    pub fn spilled(&self) -> bool {
        matches!(self.0, SgRepr::Heap(_))
    }

    /// Removes every element.
    pub fn clear(&mut self) {
        *self = SgList::new();
    }

    /// Appends `sge`; the list moves to the heap when it outgrows [`SG_INLINE`].
    pub fn push(&mut self, sge: Sge) {
        match &mut self.0 {
            SgRepr::Inline { len, sges } if usize::from(*len) < SG_INLINE => {
                sges[usize::from(*len)] = sge;
                *len += 1;
            }
            SgRepr::Inline { len, sges } => {
                let mut v = Vec::with_capacity(SG_INLINE * 2);
                v.extend_from_slice(&sges[..usize::from(*len)]);
                v.push(sge);
                self.0 = SgRepr::Heap(v);
            }
            SgRepr::Heap(v) => v.push(sge),
        }
    }
}

impl core::ops::Deref for SgList {
    type Target = [Sge];
    fn deref(&self) -> &[Sge] {
        match &self.0 {
            SgRepr::Inline { len, sges } => &sges[..usize::from(*len)],
            SgRepr::Heap(v) => v,
        }
    }
}

impl core::ops::DerefMut for SgList {
    fn deref_mut(&mut self) -> &mut [Sge] {
        match &mut self.0 {
            SgRepr::Inline { len, sges } => &mut sges[..usize::from(*len)],
            SgRepr::Heap(v) => v,
        }
    }
}

impl PartialEq for SgList {
    fn eq(&self, o: &SgList) -> bool {
        **self == **o
    }
}

impl Eq for SgList {}

impl fmt::Debug for SgList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FromIterator<Sge> for SgList {
    fn from_iter<I: IntoIterator<Item = Sge>>(it: I) -> Self {
        let mut l = SgList::new();
        for s in it {
            l.push(s);
        }
        l
    }
}

impl From<Vec<Sge>> for SgList {
    fn from(v: Vec<Sge>) -> Self {
        if v.len() <= SG_INLINE {
            v.into_iter().collect()
        } else {
            SgList(SgRepr::Heap(v))
        }
    }
}

impl<const N: usize> From<[Sge; N]> for SgList {
    fn from(a: [Sge; N]) -> Self {
        a.into_iter().collect()
    }
}

impl From<&[Sge]> for SgList {
    fn from(a: &[Sge]) -> Self {
        a.iter().copied().collect()
    }
}

/// Send work request opcode (`enum ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA WRITE with immediate.
    RdmaWriteWithImm,
    /// SEND.
    Send,
    /// SEND with immediate.
    SendWithImm,
    /// RDMA READ.
    RdmaRead,
    /// Atomic compare and swap.
    AtomicCmpAndSwp,
    /// Atomic fetch and add.
    AtomicFetchAndAdd,
    /// SEND with invalidate.
    SendWithInv,
    /// Bind a memory window (`IBV_WR_BIND_MW`; `ibv_bind_mw` for type 1): a local
    /// operation, carried out in order when the requester reaches it.
    BindMw(MwBind),
    /// Invalidate the type-2 memory window whose R_Key is [`SendWr::rkey`]
    /// (`IBV_WR_LOCAL_INV`): a local operation.
    LocalInv,
}

/// Memory window type (`enum ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Type 1: bound with `ibv_bind_mw`, not bound to a QP.
    Type1,
    /// Type 2 (2B): bound by a BIND_MW work request, usable only through that QP.
    Type2,
}

/// A memory window, as the engine names it (its slot; the R_Key's index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwId(pub u32);

/// What a BIND_MW work request binds (`struct ibv_mw_bind_info` with the window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The window.
    pub mw: MwId,
    /// The new low 8 bits of its R_Key (the rest is the window's index).
    pub key: u8,
    /// Local key of the MR the window is bound to (ignored when `length` is 0).
    pub mr_lkey: u32,
    /// First address of the window, inside the MR.
    pub addr: u64,
    /// Length; 0 unbinds a type-1 window.
    pub length: u64,
    /// Remote rights the window grants (REMOTE_WRITE / READ / ATOMIC).
    pub access: Access,
}

/// Send flags (`enum ibv_send_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// Wait for prior RDMA READ and atomic requests to complete before this one starts.
    pub const FENCE: SendFlags = SendFlags(1 << 0);
    /// Generate a completion.
    pub const SIGNALED: SendFlags = SendFlags(1 << 1);
    /// Set the solicited-event bit.
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);
    /// The data is copied at post time (`sg_list` addresses need no MR).
    pub const INLINE: SendFlags = SendFlags(1 << 3);

    /// True when every flag of `o` is set.
    pub const fn contains(self, o: SendFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, o: SendFlags) -> SendFlags {
        SendFlags(self.0 | o.0)
    }
}

impl fmt::Debug for SendFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SendFlags({:#x})", self.0)
    }
}

/// A send work request (`struct ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub opcode: WrOpcode,
    /// Local buffers (for INLINE, the data to copy; lkeys are then ignored).
    pub sg_list: SgList,
    /// Flags.
    pub flags: SendFlags,
    /// Immediate data, a host-order number: it travels big-endian in the ImmDt header
    /// (IBTA 9.3.6), so the receiver's [`Wc::imm_data`] is this same number. (In C,
    /// `ibv_send_wr.imm_data` is a `__be32`: a C peer's `be32toh(imm_data)` is this
    /// value.)
    pub imm_data: u32,
    /// Remote address for RDMA and atomics.
    pub remote_addr: u64,
    /// Remote key for RDMA and atomics; the R_Key to invalidate for SEND with invalidate.
    pub rkey: u32,
    /// Compare (CmpSwap) or add (FetchAdd) operand, a host-order number (it travels
    /// big-endian in the AtomicETH, IBTA 9.3.4; the responder compares or adds it to
    /// the 8 bytes at the target read in *its* host byte order, as rxe does).
    pub compare_add: u64,
    /// Swap operand (CmpSwap), as `compare_add`.
    pub swap: u64,
    /// UD destination: address handle, remote QPN and Q_Key.
    pub ud: Option<UdDest>,
}

impl SendWr {
    /// A signaled SEND of `sg_list`.
    pub fn send(wr_id: u64, sg_list: impl Into<SgList>) -> Self {
        SendWr {
            wr_id,
            opcode: WrOpcode::Send,
            sg_list: sg_list.into(),
            flags: SendFlags::SIGNALED,
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
        }
    }
}

/// Data supplied at post time for an INLINE send: the engine copies it, so the caller
/// may reuse its buffer at once.
pub type InlineData = Vec<u8>;

/// UD destination of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// Address handle.
    pub ah: AhId,
    /// Destination QPN.
    pub remote_qpn: u32,
    /// Q_Key; when bit 31 is set the QP's own Q_Key is sent instead (IBTA 10.2.4).
    pub remote_qkey: u32,
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Buffers, filled in order.
    pub sg_list: SgList,
}

/// Work completion status (`enum ibv_wc_status`, same numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Success.
    Success = 0,
    /// Local length error.
    LocLenErr = 1,
    /// Local QP operation error.
    LocQpOpErr = 2,
    /// Local protection error.
    LocProtErr = 4,
    /// Flushed because the QP entered the error state.
    WrFlushErr = 5,
    /// Memory window bind error.
    MwBindErr = 6,
    /// Bad response from the remote side.
    BadRespErr = 7,
    /// Local access error.
    LocAccessErr = 8,
    /// Remote invalid request.
    RemInvReqErr = 9,
    /// Remote access error.
    RemAccessErr = 10,
    /// Remote operation error.
    RemOpErr = 11,
    /// Transport retry counter exceeded.
    RetryExcErr = 12,
    /// RNR retry counter exceeded.
    RnrRetryExcErr = 13,
    /// Fatal error.
    FatalErr = 19,
    /// Response timeout.
    RespTimeoutErr = 20,
    /// General error.
    GeneralErr = 21,
}

/// Work completion opcode (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// SEND (with or without immediate or invalidate).
    Send,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA READ.
    RdmaRead,
    /// Compare and swap.
    CompSwap,
    /// Fetch and add.
    FetchAdd,
    /// A received SEND.
    Recv,
    /// A received RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// A memory window bind.
    BindMw,
    /// A local invalidate.
    LocalInv,
}

/// Work completion flags (`enum ibv_wc_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// The first 40 bytes of the receive buffer hold the GRH / network header.
    pub const GRH: WcFlags = WcFlags(1 << 0);
    /// `imm_data` is valid.
    pub const WITH_IMM: WcFlags = WcFlags(1 << 1);
    /// The frame is IP and its IPv4 header and TCP/UDP checksums are good
    /// (`IBV_WC_IP_CSUM_OK`, bit `IBV_WC_IP_CSUM_OK_SHIFT` = 2 in rdma-core `verbs.h`).
    pub const IP_CSUM_OK: WcFlags = WcFlags(1 << 2);
    /// `invalidated_rkey` is valid.
    pub const WITH_INV: WcFlags = WcFlags(1 << 3);
    /// [`Wc::flow_tag`] is valid: a flow rule with a TAG action steered the frame.
    /// (rdma-core reports it through `ibv_wc_read_flow_tag` of an extended CQ made with
    /// `IBV_WC_EX_WITH_FLOW_TAG`; this bit is the rverbs equivalent, above rdma-core's
    /// `ibv_wc_flags` bits.)
    pub const WITH_FLOW_TAG: WcFlags = WcFlags(1 << 8);

    /// True when every flag of `o` is set.
    pub const fn contains(self, o: WcFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

impl fmt::Debug for WcFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WcFlags({:#x})", self.0)
    }
}

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode.
    pub opcode: WcOpcode,
    /// Vendor error (0).
    pub vendor_err: u32,
    /// Bytes received (receive side) or transferred (READ/atomics).
    pub byte_len: u32,
    /// When `WITH_IMM`: the immediate data as the number the sender posted (ImmDt read
    /// big-endian, IBTA 9.3.6), not the raw `__be32` libibverbs puts in
    /// `ibv_wc.imm_data`: a C receiver's `be32toh(wc.imm_data)` is this value. When
    /// `WITH_INV`: the invalidated R_Key.
    pub imm_data: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// Source QP (UD receives).
    pub src_qp: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index (UD/GSI receives).
    pub pkey_index: u16,
    /// Source LID (always 0 on RoCE).
    pub slid: u16,
    /// Service level (0).
    pub sl: u8,
    /// Path bits (0).
    pub dlid_path_bits: u8,
    /// Flow tag of the steering rule that delivered a RAW_PACKET receive, valid with
    /// [`WcFlags::WITH_FLOW_TAG`] (`ibv_wc_read_flow_tag`).
    pub flow_tag: u32,
}

impl Default for Wc {
    /// An empty slot for [`crate::Engine::poll_cq`] to fill.
    fn default() -> Self {
        Wc {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            vendor_err: 0,
            byte_len: 0,
            imm_data: 0,
            qp_num: 0,
            src_qp: 0,
            wc_flags: WcFlags::default(),
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            flow_tag: 0,
        }
    }
}

/// Asynchronous events (`enum ibv_event_type`), each naming its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A CQ overflowed: completions were lost, the CQ is in error.
    CqErr(CqId),
    /// A QP entered the error state because of an error.
    QpFatal(u32),
    /// A QP in RTR received its first packet.
    CommEst(u32),
    /// The SQ of a QP in SQD is drained.
    SqDrained(u32),
    /// An SRQ's WQE count fell below its limit (the limit is disarmed).
    SrqLimitReached(SrqId),
    /// The last WQE of a QP attached to an SRQ was consumed (QP in error).
    QpLastWqeReached(u32),
    /// Something happened to a port (by number): raised by devices that watch their
    /// ports (a system device's kernel driver); the engine raises none.
    Port(PortEvent, u8),
    /// `IBV_EVENT_DEVICE_FATAL`: the device is unusable (a system device's driver).
    DeviceFatal,
}

/// What happened to a port (`enum ibv_event_type`'s port events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortEvent {
    /// `IBV_EVENT_PORT_ACTIVE`: the port is up.
    Active,
    /// `IBV_EVENT_PORT_ERR`: the port went down.
    Err,
    /// `IBV_EVENT_LID_CHANGE`.
    LidChange,
    /// `IBV_EVENT_PKEY_CHANGE`.
    PkeyChange,
    /// `IBV_EVENT_SM_CHANGE`.
    SmChange,
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    ClientReregister,
    /// `IBV_EVENT_GID_CHANGE`: the GID table changed (an address came or went).
    GidChange,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle a device makes from its own number is that number; an engine given a
    /// number that names none of its objects answers EINVAL.
    #[test]
    fn handles_from_raw_numbers() {
        assert_eq!(CqId::from_raw(7).raw(), 7);
        assert_eq!(PdId::from_raw(3), PdId(3));
        let mut e = crate::Engine::new(crate::Config::default());
        let err = e.poll_cq(CqId::from_raw(99), &mut []).unwrap_err();
        assert_eq!(err.errno, Errno::Inval);
        let pd = e.alloc_pd();
        assert_eq!(PdId::from_raw(pd.raw()), pd);
    }

    fn sge(i: u64) -> Sge {
        Sge {
            addr: 0x1000 * i,
            length: i as u32,
            lkey: 7,
        }
    }

    /// An `SgList` behaves as the `Vec` it replaces, in place up to `SG_INLINE`.
    #[test]
    fn sg_list_keeps_order_and_spills_past_its_inline_capacity() {
        for n in 0..6u64 {
            let v: Vec<Sge> = (1..=n).map(sge).collect();
            let mut pushed = SgList::new();
            for s in &v {
                pushed.push(*s);
            }
            let from_vec = SgList::from(v.clone());
            let collected: SgList = v.iter().copied().collect();
            for l in [&pushed, &from_vec, &collected] {
                assert_eq!(&l[..], &v[..]);
                assert_eq!(l.spilled(), v.len() > SG_INLINE, "{n} elements");
            }
            assert_eq!(pushed, from_vec);
            assert_eq!(format!("{pushed:?}"), format!("{v:?}"));
            let mut m = pushed.clone();
            if let Some(first) = m.first_mut() {
                first.length = 999;
                assert_ne!(m, pushed);
            }
            m.clear();
            assert!(m.is_empty() && !m.spilled());
        }
        assert_eq!(SgList::from([sge(1), sge(2)]).len(), 2);
        assert_eq!(SgList::from(&[sge(3)][..])[0], sge(3));
    }
}
