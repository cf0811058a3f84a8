//! What the CM hands the program: events ([`CmEvent`], [`EventKind`], [`UdParam`]) and
//! the connection parameters it offers ([`ConnParam`]).

use super::CmId;
use crate::AhAttr;

/// What happened (`enum rdma_cm_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// [`CmId::resolve_addr`] found the device and the local address.
    AddrResolved,
    /// Address resolution failed (`status`: a negative errno).
    AddrError,
    /// [`CmId::resolve_route`] finished.
    RouteResolved,
    /// Route resolution failed (`status`: a negative errno).
    RouteError,
    /// A peer connects to a listener: `id` is the new ID, `listen_id` the listener.
    ConnectRequest,
    /// The connection could not be completed locally (`status`: a negative errno).
    ConnectError,
    /// The peer did not answer (`status` -ETIMEDOUT), or a SIDR reply said no
    /// (`status`: the SIDR status).
    Unreachable,
    /// The peer rejected (`status`: the REJ reason, 28 when its consumer rejected;
    /// 8 when nobody listens on the port).
    Rejected,
    /// Connected; for UD, `ud` says where the peer's QP is.
    Established,
    /// The connection is gone (the peer's DREQ, or the answer to ours).
    Disconnected,
    /// The time-wait period after a disconnect ended.
    TimewaitExit,
}

/// Where a UD peer is (`struct rdma_ud_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdParam {
    /// The peer's QP number.
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// The address handle attributes towards it.
    pub ah_attr: AhAttr,
}

/// An event (`struct rdma_cm_event`).
#[derive(Debug, Clone)]
pub struct CmEvent {
    /// What happened.
    pub kind: EventKind,
    /// The ID it happened to (the new ID for a connect request).
    pub id: CmId,
    /// The listener, for a connect request.
    pub listen_id: Option<CmId>,
    /// 0, a negative errno, or a reject reason ([`EventKind`] says which).
    pub status: i32,
    /// The peer's private data (the user's part of the REQ; the whole field of a REP,
    /// REJ, RTU or DREQ, as the kernel delivers it).
    pub private_data: Vec<u8>,
    /// UD peers: where to send.
    pub ud: Option<UdParam>,
}

/// What [`CmId::connect`] and [`CmId::accept`] take (`struct rdma_conn_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data: at most 56 bytes in a connect (92 less rdma_cm's header), 196 in
    /// an accept, 180 in a UD resolve (216 less the header), 136 in a UD accept.
    pub private_data: Vec<u8>,
    /// RDMA reads / atomics accepted at once.
    pub responder_resources: u8,
    /// RDMA reads / atomics issued at once.
    pub initiator_depth: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits, 7 = infinite).
    pub rnr_retry_count: u8,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}
