//! The consumer-facing types of the CM: IDs, parameters of each call, events, counters
//! and QP attributes (the kernel's `ib_cm_*_param` and `ib_cm_*_event_param`, from
//! `include/rdma/ib_cm.h`).

use crate::consts;
use crate::state::InvalidTransition;
use rverbs_wire::mad::MAD_LEN;

/// A GID (on RoCE v2 an IPv6 or IPv4-mapped address).
pub type Gid = [u8; 16];

/// A communication ID, named by its local communication ID on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CmId(pub u32);

/// Why a consumer call failed (the errno the kernel returns in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmError {
    /// No such communication ID (`EINVAL`).
    UnknownId,
    /// The call is not valid in the ID's state (`EINVAL`).
    InvalidState(InvalidTransition),
    /// Private data (or ARI / additional information) longer than the message holds
    /// (`EINVAL`).
    PrivateDataTooLong,
    /// Another ID listens on the service ID (`EADDRINUSE` from rdma_listen; ib_cm's
    /// `ib_cm_listen` says `EBUSY`).
    AddrInUse,
    /// The connection was already established (`EISCONN`, `cm_establish`).
    AlreadyConnected,
    /// An argument out of range (`EINVAL`).
    InvalidArgument(&'static str),
}

impl CmError {
    /// The errno a C caller sees.
    pub const fn errno(&self) -> i32 {
        match self {
            CmError::AddrInUse => 98,
            CmError::AlreadyConnected => 106,
            _ => 22,
        }
    }
}

impl core::fmt::Display for CmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CmError::UnknownId => f.write_str("unknown communication ID"),
            CmError::InvalidState(t) => write!(f, "{t}"),
            CmError::PrivateDataTooLong => f.write_str("private data too long"),
            CmError::AddrInUse => f.write_str("service ID already has a listener"),
            CmError::AlreadyConnected => f.write_str("already connected"),
            CmError::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
        }
    }
}

impl std::error::Error for CmError {}

impl From<InvalidTransition> for CmError {
    fn from(t: InvalidTransition) -> Self {
        CmError::InvalidState(t)
    }
}

/// The port the CM runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The CA's node GUID (REQ/REP `LocalCAGUID`, REJ timeout ARI).
    pub ca_guid: u64,
    /// The port's GID (index 0): a REQ must name it, or one added with
    /// [`crate::Cm::add_local_gid`], as its remote port GID.
    pub local_gid: Gid,
    /// The CA's ACK delay (REP `TargetACKDelay`; rxe 15).
    pub ack_delay: u8,
    /// The high 32 bits of every TransactionID: the MAD agent's id (kernel
    /// `mad_agent->hi_tid`).
    pub hi_tid: u32,
    /// XORed into the cyclic ID counter to give local communication IDs (kernel
    /// `cm.random_id_operand`); pick it at random outside tests.
    pub id_xor: u32,
    /// rdma_cm's delayed MRA: a received REQ moves at once to MRA_REQ_SENT with this
    /// service timeout, and the MRA goes out only when a duplicate REQ shows the peer
    /// is about to give up (Linux before 6.15, `CMA_CM_MRA_SETTING`). `None`: newer
    /// kernels, duplicates are dropped while the consumer decides.
    pub auto_mra: Option<u8>,
    /// Most connect requests a listener queues undelivered (ucma `max_backlog`).
    pub max_backlog: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ca_guid: 0,
            local_gid: [0; 16],
            ack_delay: consts::RXE_ACK_DELAY,
            hi_tid: 1,
            id_xor: 0,
            auto_mra: None,
            max_backlog: consts::MAX_BACKLOG,
        }
    }
}

/// A path (what rdma_resolve_route yields on RoCE: GIDs from IP addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// Our GID.
    pub local_gid: Gid,
    /// The peer's GID (where CM MADs go).
    pub remote_gid: Gid,
    /// Path MTU (IBTA encoding: 1 = 256 ... 5 = 4096).
    pub mtu: u8,
    /// Partition key.
    pub pkey: u16,
    /// Packet life time (4.096 us x 2^n).
    pub packet_life_time: u8,
    /// Service level.
    pub sl: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit (> 1 on RoCE: the REQ then carries permissive LIDs).
    pub hop_limit: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Static rate (6 bits).
    pub rate: u8,
}

impl Path {
    /// A RoCE path between two GIDs as rdma_cm resolves it: MTU 1024, default P_Key,
    /// packet life time [`consts::CMA_IBOE_PACKET_LIFETIME`], hop limit 64.
    pub fn roce(local_gid: Gid, remote_gid: Gid) -> Self {
        Path {
            local_gid,
            remote_gid,
            mtu: 3,
            pkey: 0xffff,
            packet_life_time: consts::CMA_IBOE_PACKET_LIFETIME,
            sl: 0,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            rate: 0,
        }
    }
}

/// The QP types a connection can carry (REQ transport service type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
}

/// What `connect` needs (kernel `struct ib_cm_req_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The service ID to connect to.
    pub service_id: u64,
    /// Our QP's number.
    pub qpn: u32,
    /// QP type.
    pub qp_type: QpType,
    /// The PSN we expect to receive first (the kernel puts its `rq_psn` here).
    pub starting_psn: u32,
    /// RDMA reads / atomics we accept at once.
    pub responder_resources: u8,
    /// RDMA reads / atomics we issue at once.
    pub initiator_depth: u8,
    /// The path.
    pub path: Path,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// RNR retry count (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// How long the peer's CM takes to answer (4.096 us x 2^n).
    pub remote_cm_response_timeout: u8,
    /// How long ours takes.
    pub local_cm_response_timeout: u8,
    /// Resends of an unanswered REQ (4 bits).
    pub max_cm_retries: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Private data (at most [`consts::private_len::REQ`]).
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// rdma_connect's values (kernel cma.c `cma_connect_ib`): response timeouts
    /// [`consts::CMA_CM_RESPONSE_TIMEOUT`], [`consts::CMA_MAX_CM_RETRIES`] retries,
    /// retry and RNR retry 7.
    pub fn rdma_cm(service_id: u64, qpn: u32, starting_psn: u32, path: Path) -> Self {
        ConnectParams {
            service_id,
            qpn,
            qp_type: QpType::Rc,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            path,
            retry_count: 7,
            rnr_retry_count: 7,
            remote_cm_response_timeout: consts::CMA_CM_RESPONSE_TIMEOUT,
            local_cm_response_timeout: consts::CMA_CM_RESPONSE_TIMEOUT,
            max_cm_retries: consts::CMA_MAX_CM_RETRIES,
            srq: false,
            flow_control: false,
            private_data: Vec::new(),
        }
    }
}

/// What `accept` needs (kernel `struct ib_cm_rep_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// Our QP's number.
    pub qpn: u32,
    /// The PSN we expect to receive first.
    pub starting_psn: u32,
    /// RDMA reads / atomics we accept at once.
    pub responder_resources: u8,
    /// RDMA reads / atomics we issue at once.
    pub initiator_depth: u8,
    /// RNR retry count the peer should use (3 bits).
    pub rnr_retry_count: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Private data (at most [`consts::private_len::REP`]).
    pub private_data: Vec<u8>,
}

/// What `sidr_request` needs (kernel `struct ib_cm_sidr_req_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrParams {
    /// The service ID to resolve.
    pub service_id: u64,
    /// The peer port's GID.
    pub remote_gid: Gid,
    /// Partition key.
    pub pkey: u16,
    /// Time to wait for each try (rdma_cm: 1 << (20 - 8) = 4096 ms).
    pub timeout_ms: u64,
    /// Resends.
    pub max_cm_retries: u8,
    /// Private data (at most [`consts::private_len::SIDR_REQ`]).
    pub private_data: Vec<u8>,
}

/// The answer to a SIDR_REQ (kernel `struct ib_cm_sidr_rep_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReply {
    /// Status ([`consts::sidr_status`]).
    pub status: u8,
    /// Our UD QPN.
    pub qpn: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// Additional information (at most [`consts::private_len::SIDR_REP_INFO`]).
    pub info: Vec<u8>,
    /// Private data (at most [`consts::private_len::SIDR_REP`]).
    pub private_data: Vec<u8>,
}

impl SidrReply {
    /// A reply with only a status (a reject or an error).
    pub fn status(status: u8) -> Self {
        SidrReply {
            status,
            qpn: 0,
            qkey: 0,
            info: Vec::new(),
            private_data: Vec::new(),
        }
    }
}

/// A received REQ, as the passive consumer sees it (kernel `ib_cm_req_event_param`:
/// resources are swapped to our point of view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqInfo {
    /// The listener the REQ matched.
    pub listener: CmId,
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// The service ID.
    pub service_id: u64,
    /// The peer's CA GUID.
    pub remote_ca_guid: u64,
    /// The peer's QPN.
    pub remote_qpn: u32,
    /// QP type.
    pub qp_type: QpType,
    /// The PSN the peer expects first (our send queue PSN).
    pub starting_psn: u32,
    /// Reads we may accept (the peer's initiator depth).
    pub responder_resources: u8,
    /// Reads we may issue (the peer's responder resources).
    pub initiator_depth: u8,
    /// The path from our side (local = the REQ's remote port).
    pub path: Path,
    /// Transport retry count.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry_count: u8,
    /// The peer's SRQ flag.
    pub srq: bool,
    /// The peer's flow control flag.
    pub flow_control: bool,
    /// The GID the REQ came from.
    pub src_gid: Gid,
    /// The whole private-data field (92 bytes).
    pub private_data: Vec<u8>,
}

/// A received REP, as the active consumer sees it (`ib_cm_rep_event_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepInfo {
    /// The peer's communication ID.
    pub remote_comm_id: u32,
    /// The peer's CA GUID.
    pub remote_ca_guid: u64,
    /// The peer's QPN.
    pub remote_qpn: u32,
    /// The PSN the peer expects first (our send queue PSN).
    pub starting_psn: u32,
    /// Reads we may accept.
    pub responder_resources: u8,
    /// Reads we may issue.
    pub initiator_depth: u8,
    /// The peer's ACK delay.
    pub target_ack_delay: u8,
    /// RNR retry count for our QP.
    pub rnr_retry_count: u8,
    /// The peer's SRQ flag.
    pub srq: bool,
    /// The whole private-data field (196 bytes).
    pub private_data: Vec<u8>,
}

/// Which outstanding message went unanswered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswered {
    /// Our REQ (`IB_CM_REQ_ERROR`).
    Req,
    /// Our REP (`IB_CM_REP_ERROR`).
    Rep,
    /// Our SIDR_REQ (`IB_CM_SIDR_REQ_ERROR`).
    SidrReq,
}

/// What the consumer is told (kernel `enum ib_cm_event_type`, with rdma_cm's names
/// where they differ).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A REQ for a listener: accept, reject or MRA the new ID.
    ConnectRequest {
        /// The new ID.
        id: CmId,
        /// The REQ.
        req: Box<ReqInfo>,
    },
    /// A REP for our REQ: move the QP to RTR/RTS ([`crate::Cm::qp_attr`]) and send the RTU.
    ConnectResponse {
        /// The ID.
        id: CmId,
        /// The REP.
        rep: Box<RepInfo>,
    },
    /// The passive side got the RTU (or [`crate::Cm::establish`]).
    Established {
        /// The ID.
        id: CmId,
        /// The RTU's private data (224 bytes; empty after `establish`).
        private_data: Vec<u8>,
    },
    /// The peer rejected.
    Rejected {
        /// The ID.
        id: CmId,
        /// The REJ reason ([`consts::rej`]).
        reason: u16,
        /// Additional reject information (its declared length).
        ari: Vec<u8>,
        /// The whole private-data field (148 bytes).
        private_data: Vec<u8>,
    },
    /// Our REQ, REP or SIDR_REQ went unanswered after every retry (rdma_cm
    /// `RDMA_CM_EVENT_UNREACHABLE`, status `-ETIMEDOUT`).
    Unreachable {
        /// The ID.
        id: CmId,
        /// The message.
        message: Unanswered,
    },
    /// The peer MRAed our message (our timer was extended).
    MraReceived {
        /// The ID.
        id: CmId,
        /// The peer's service timeout.
        service_timeout: u8,
    },
    /// The peer sent a DREQ: answer with [`crate::Cm::disconnect`] (rdma_cm
    /// `RDMA_CM_EVENT_DISCONNECTED`).
    DisconnectRequest {
        /// The ID.
        id: CmId,
        /// The whole private-data field (220 bytes).
        private_data: Vec<u8>,
    },
    /// The DREP for our DREQ came, or the DREQ went unanswered (`timed_out`).
    Disconnected {
        /// The ID.
        id: CmId,
        /// The DREP's private data (empty on timeout).
        private_data: Vec<u8>,
        /// The DREQ ran out of retries (`IB_CM_DREQ_ERROR`).
        timed_out: bool,
    },
    /// The time-wait period ended; the ID is idle (rdma_cm
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`).
    TimewaitExit {
        /// The ID.
        id: CmId,
    },
    /// A SIDR_REQ for a listener: answer with [`crate::Cm::sidr_reply`].
    SidrRequest {
        /// The new ID.
        id: CmId,
        /// The listener.
        listener: CmId,
        /// The service ID.
        service_id: u64,
        /// Partition key.
        pkey: u16,
        /// The GID it came from.
        src_gid: Gid,
        /// The whole private-data field (216 bytes).
        private_data: Vec<u8>,
    },
    /// The SIDR_REP for our SIDR_REQ.
    SidrReply {
        /// The ID.
        id: CmId,
        /// Status ([`consts::sidr_status`]).
        status: u8,
        /// The peer's UD QPN.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// Additional information (its declared length).
        info: Vec<u8>,
        /// The whole private-data field (136 bytes).
        private_data: Vec<u8>,
    },
}

/// A CM MAD to send to the peer's QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The peer port's GID.
    pub dest: Gid,
    /// The 256-byte MAD.
    pub mad: Box<[u8; MAD_LEN]>,
}

/// Counters: what was sent and received, and every drop with its cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs handed out by `poll_transmit`'s queue (retries included).
    pub tx: u64,
    /// Resends of unanswered MADs.
    pub retries: u64,
    /// MADs given to `handle_mad`.
    pub rx: u64,
    /// Dropped: shorter than a MAD or a message that does not parse.
    pub malformed: u64,
    /// Dropped: not base version 1 / class 0x07.
    pub wrong_class: u64,
    /// Dropped: class version other than 2.
    pub bad_class_version: u64,
    /// Dropped: method other than Send.
    pub bad_method: u64,
    /// Dropped: LAP, APR, ClassPortInfo or an unknown attribute.
    pub unknown_attribute: u64,
    /// Dropped: REQ with a transport type other than RC or UC.
    pub unsupported_transport: u64,
    /// Dropped: no ID with those communication IDs, or not in a state that takes it.
    pub unmatched: u64,
    /// Duplicates (answered from state or dropped; kernel `cm_rx_duplicates`).
    pub duplicates: u64,
    /// REQs rejected for no listener (REJ 8) and SIDR_REQs answered unsupported.
    pub no_listener: u64,
    /// REQs / REPs rejected as stale connections (REJ 10).
    pub stale: u64,
    /// Connect requests dropped because the listener's backlog was full.
    pub backlog_full: u64,
    /// Outstanding MADs that ran out of retries.
    pub timeouts: u64,
}

/// The QP attributes the CM decides for one transition (kernel
/// `ib_cm_init_qp_attr`); `None` fields are not in the mask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// Access flags (INIT; ibverbs `IBV_ACCESS_*` bits).
    pub access_flags: Option<u32>,
    /// P_Key (INIT; the caller maps it to an index).
    pub pkey: Option<u16>,
    /// Destination GID, SL, traffic class, hop limit, flow label (RTR).
    pub ah: Option<Path>,
    /// Path MTU (RTR).
    pub path_mtu: Option<u8>,
    /// Destination QPN (RTR).
    pub dest_qpn: Option<u32>,
    /// Receive PSN (RTR).
    pub rq_psn: Option<u32>,
    /// Max incoming reads (RTR, RC).
    pub max_dest_rd_atomic: Option<u8>,
    /// Min RNR timer (RTR, RC).
    pub min_rnr_timer: Option<u8>,
    /// Send PSN (RTS).
    pub sq_psn: Option<u32>,
    /// Local ACK timeout (RTS, RC).
    pub timeout: Option<u8>,
    /// Retry count (RTS, RC).
    pub retry_cnt: Option<u8>,
    /// RNR retry (RTS, RC).
    pub rnr_retry: Option<u8>,
    /// Max outstanding reads (RTS, RC).
    pub max_rd_atomic: Option<u8>,
}

/// ibverbs `IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// ibverbs `IBV_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: u32 = 1 << 2;
/// ibverbs `IBV_ACCESS_REMOTE_ATOMIC`.
pub const ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;

/// The QP state a [`QpAttr`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// INIT.
    Init,
    /// RTR.
    Rtr,
    /// RTS.
    Rts,
}
