//! Queue pairs ([`Qp`]): creation attributes, connection, state changes, posting
//! (through the device's QP, `crate::device::ops::DeviceQp`).

use super::*;
use crate::device::ops::DeviceQp;
use crate::error::Error;
use crate::error::Result;
use rverbs_engine::modify::{AhAttr, QpAttr, QpAttrMask, QpCap};
use rverbs_engine::{AddressVector, Mtu, QpState, QpType};
use rverbs_wire::grh::Gid;
use std::sync::Arc;

use crate::device::guard::check_not_in_with;

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
    /// 256 bytes of inline data ([`QpCap::default`]) and selective signaling.
    pub fn new(qp_type: QpType, cq: &'a Cq) -> Self {
        QpInitAttr {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap::default(),
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
    /// The device's QP (first: it is destroyed before what it uses).
    pub(crate) dev: Box<dyn DeviceQp>,
    pub(crate) pd: Arc<PdInner>,
    pub(crate) _cqs: [Arc<CqInner>; 2],
    pub(crate) _srq: Option<Arc<SrqInner>>,
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
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

/// Connection settings for [`Qp::connect`].
///
/// The defaults take rdma-core's `ibv_rc_pingpong` timers and retries — `timeout` 14
/// (4.096 µs · 2^14 ≈ 67 ms), `retry_cnt` 7, `rnr_retry` 7 (infinite), `min_rnr_timer`
/// 12 (0.64 ms) — and its default path MTU of 1024, which every RoCE netdev of 1500
/// bytes carries; on a device with a larger active MTU (4096 on `rv_lo`) set `mtu` to
/// `ctx.query_port(1)?.active_mtu` for fewer packets. Where `ibv_rc_pingpong` only
/// SENDs, these defaults let the peer do everything the verbs offer, as the crate's
/// examples need: `access` [`AccessFlags::ALL`] (remote READ, WRITE and atomics on
/// this QP; each region's own access flags still apply; `ibv_rc_pingpong` grants
/// none) and `rd_atomic` 16 READs/atomics in flight each way (it uses 1; rxe allows
/// 128). The rest: `psn` 0 (`ibv_rc_pingpong` draws a random one), `sgid_index` 1 (a
/// soft device's first address GID; `ibv_rc_pingpong` has no default, `-g`),
/// `hop_limit` 64 (Linux's default TTL; it uses 1), `traffic_class` 0 and `qkey`
/// 0x11111111 (`ibv_ud_pingpong`'s).
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
        self.dev.state()
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpAttr> {
        self.dev.query()
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
    /// `ibv_modify_qp` with an explicit attribute mask, as in C: only the fields of
    /// `attr` named by `mask` are read. Prefer [`Qp::modify`]; this is for attribute
    /// combinations [`QpModify`] has no setter for. (Checked like [`Qp::modify`]; a
    /// wrong mask is an error, never undefined behaviour.)
    pub fn modify_raw(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.dev.modify(attr, mask)
    }

    /// One step of the connection path with exactly the attributes Linux requires for
    /// it (`modify::required`), taken from `attr`.
    pub(crate) fn step(&self, attr: &QpAttr, from: QpState, to: QpState) -> Result<()> {
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
    pub(crate) fn connect_attr(peer: &PeerInfo, o: &ConnectOpts) -> QpAttr {
        let av = AddressVector {
            dgid: peer.gid,
            sgid_index: o.sgid_index,
            hop_limit: o.hop_limit,
            traffic_class: o.traffic_class,
            flow_label: 0,
        };
        QpAttr {
            port_num: 1,
            qp_access_flags: o.access,
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
    ///
    /// Beyond `ibv_post_send`'s checks, a READ or WRITE whose [`RemoteBuf`] length is
    /// not its local buffers' total is EINVAL, with both lengths in the message (see
    /// [`SendRequest`]).
    ///
    /// On a RAW_PACKET QP (in RTS, else EINVAL) the request is a SEND whose gathered
    /// buffers (or inline data: both are copies here) are one whole Ethernet frame,
    /// destination MAC first, no FCS; it goes out on the context's raw interface after
    /// the EGRESS flow rules (an EGRESS DROP rule stops it and the request still
    /// completes successfully, as on a NIC). Other opcodes are EINVAL; a frame over
    /// [`rverbs_raw::MAX_FRAME`] bytes completes with LOC_LEN_ERR.
    pub fn post_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        self.dev.post_send(wr)?;
        wr.posted();
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
        let r = self.dev.post_send_list(wrs);
        let taken = r.as_ref().err().map_or(wrs.len(), |(i, _)| *i);
        wrs[..taken.min(wrs.len())]
            .iter()
            .for_each(SendRequest::posted);
        r
    }

    /// `ibv_post_recv` of one request.
    ///
    /// On a RAW_PACKET QP the buffers receive one whole frame (as received: destination
    /// MAC first, a VLAN tag the driver stripped put back, no FCS); the completion on
    /// the receive CQ gives `byte_len`, [`rverbs_engine::WcFlags::IP_CSUM_OK`] and, when a
    /// TAG rule steered it, [`rverbs_engine::WcFlags::WITH_FLOW_TAG`] with
    /// [`Wc::flow_tag`](crate::Wc::flow_tag). A frame longer than the buffers completes with LOC_LEN_ERR; a
    /// frame steered to the QP while no receive is posted is dropped (no RNR on raw
    /// QPs); a receive whose region was dropped before its frame came completes with
    /// LOC_PROT_ERR and writes nothing. Receives posted before RTR wait for it. EINVAL in RESET, ENOMEM beyond
    /// `cap.max_recv_wr` outstanding; in ERR the receive completes at once with
    /// WR_FLUSH_ERR.
    pub fn post_recv(&self, wr_id: u64, bufs: &[LocalBuf<'_>]) -> Result<()> {
        self.dev.post_recv(wr_id, bufs)
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
        let f = self.dev.create_flow(attr)?;
        Ok(Flow {
            id: f.id(),
            inner: Some(f),
        })
    }
}
