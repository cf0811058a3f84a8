//! One port's connection manager: communication IDs, listeners, the MADs in flight and
//! their retries, and the events for the consumer.
//!
//! Behaviour follows Linux `drivers/infiniband/core/cm.c` function by function (named
//! at each handler); rdma_cm's share (backlog, delayed MRA) follows `cma.c` and
//! `ucma.c`. The MAD layer's part — resend an unanswered MAD every `timeout` up to
//! `retries` times, then fail it (`core/mad.c` `timeout_sends`) — is folded in here,
//! since the CM is the only user of it.

mod rx;

use crate::api::*;
use crate::consts::{self, convert_to_ns, private_len, rej, sidr_status, Nanos, MS};
use crate::state::{self, Input, InvalidTransition, State};
use rverbs_wire::mad::cm::{
    message_kind, transport, CmDrepRepr, CmDreqRepr, CmMad, CmMadRepr, CmMessage, CmMraRepr,
    CmPathRepr, CmRejRepr, CmRepRepr, CmReqRepr, CmRtuRepr, CmSidrRepRepr, CmSidrReqRepr,
    CM_CLASS_VERSION,
};
use rverbs_wire::mad::{class, method, MadHeaderRepr, BASE_VERSION, MAD_LEN};
use rverbs_wire::Error as WireError;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A MAD waiting for its answer.
#[derive(Debug, Clone)]
struct Outstanding {
    mad: Box<[u8; MAD_LEN]>,
    timeout: Nanos,
    retries_left: u8,
}

#[derive(Debug, Clone)]
struct Conn {
    state: State,
    local_id: u32,
    remote_id: u32,
    service_id: u64,
    tid: u64,
    peer: Gid,
    remote_ca_guid: u64,
    qp_type: QpType,
    local_qpn: u32,
    remote_qpn: u32,
    sq_psn: u32,
    rq_psn: u32,
    path: Path,
    /// The QP's local ACK timeout and the time-wait exponent (kernel `av.timeout`).
    av_timeout: u8,
    timeout_ms: u64,
    max_cm_retries: u8,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    service_timeout: u8,
    private_data: Vec<u8>,
    out: Option<Outstanding>,
    deadline: Option<Nanos>,
    /// Passive, not yet delivered: counted against this listener's backlog.
    pending_on: Option<u32>,
    in_remote_tables: bool,
    sidr_key: Option<(u32, Gid)>,
    /// Listener: the service ID and the backlog left.
    listen: Option<(u64, u32)>,
}

impl Conn {
    fn new(local_id: u32) -> Self {
        Conn {
            state: State::Idle,
            local_id,
            remote_id: 0,
            service_id: 0,
            tid: 0,
            peer: [0; 16],
            remote_ca_guid: 0,
            qp_type: QpType::Rc,
            local_qpn: 0,
            remote_qpn: 0,
            sq_psn: 0,
            rq_psn: 0,
            path: Path::roce([0; 16], [0; 16]),
            av_timeout: 0,
            timeout_ms: 0,
            max_cm_retries: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            service_timeout: 0,
            private_data: Vec::new(),
            out: None,
            deadline: None,
            pending_on: None,
            in_remote_tables: false,
            sidr_key: None,
            listen: None,
        }
    }
}

/// One port's connection manager.
#[derive(Debug)]
pub struct Cm {
    cfg: Config,
    conns: BTreeMap<u32, Conn>,
    next_id: u32,
    listeners: BTreeMap<u64, u32>,
    /// (remote comm ID, remote CA GUID) -> local ID (kernel `remote_id_table`).
    remote_ids: BTreeMap<(u32, u64), u32>,
    /// (remote QPN, remote CA GUID) -> local ID (kernel `remote_qp_table`).
    remote_qpns: BTreeMap<(u32, u64), u32>,
    /// (request ID, source GID) -> local ID (kernel `remote_sidr_table`).
    remote_sidr: BTreeMap<(u32, Gid), u32>,
    timers: BTreeSet<(Nanos, u32)>,
    extra_gids: BTreeSet<Gid>,
    tx: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: CmStats,
}

fn pad<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out[..data.len()].copy_from_slice(data);
    out
}

fn check_len(data: &[u8], max: usize) -> Result<(), CmError> {
    if data.len() > max {
        Err(CmError::PrivateDataTooLong)
    } else {
        Ok(())
    }
}

fn build_mad(tid: u64, message: CmMessage) -> Box<[u8; MAD_LEN]> {
    let mut buf = Box::new([0u8; MAD_LEN]);
    let repr = CmMadRepr {
        header: MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class: class::CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id: tid,
            attribute_id: 0,
            attribute_modifier: 0,
        },
        message,
    };
    repr.emit(&mut CmMad::new_unchecked(&mut buf[..]));
    buf
}

impl Cm {
    /// A CM with no IDs.
    pub fn new(cfg: Config) -> Self {
        Cm {
            cfg,
            conns: BTreeMap::new(),
            next_id: 0,
            listeners: BTreeMap::new(),
            remote_ids: BTreeMap::new(),
            remote_qpns: BTreeMap::new(),
            remote_sidr: BTreeMap::new(),
            timers: BTreeSet::new(),
            extra_gids: BTreeSet::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            stats: CmStats::default(),
        }
    }

    /// Another GID of the port that REQs may name (the port's GID table: IPv4 and
    /// IPv6 addresses of the netdev).
    pub fn add_local_gid(&mut self, gid: Gid) {
        self.extra_gids.insert(gid);
    }

    /// Forgets a GID added with [`Cm::add_local_gid`] (an address went away).
    pub fn remove_local_gid(&mut self, gid: &Gid) {
        self.extra_gids.remove(gid);
    }

    fn is_local_gid(&self, gid: &Gid) -> bool {
        *gid == self.cfg.local_gid || self.extra_gids.contains(gid)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// The state of an ID (`None` once destroyed).
    pub fn state(&self, id: CmId) -> Option<State> {
        self.conns.get(&id.0).map(|c| c.state)
    }

    /// How many IDs exist (listeners included).
    pub fn id_count(&self) -> usize {
        self.conns.len()
    }

    /// A new idle ID (kernel `ib_create_cm_id`: a cyclic counter XOR a random operand,
    /// skipping IDs in use and 0, which means "unknown" in messages).
    pub fn create_id(&mut self) -> CmId {
        loop {
            let id = self.next_id ^ self.cfg.id_xor;
            self.next_id = self.next_id.wrapping_add(1);
            if id != 0 && !self.conns.contains_key(&id) {
                self.conns.insert(id, Conn::new(id));
                return CmId(id);
            }
        }
    }

    /// The kernel's TransactionID for an ID (cm.c `cm_form_tid`): the MAD agent's
    /// `hi_tid` over the local ID as the little-endian host reads its big-endian
    /// value (so the low word is byte-swapped on the wire, as in rxe captures).
    pub fn form_tid(&self, id: CmId) -> u64 {
        ((self.cfg.hi_tid as u64) << 32) | id.0.swap_bytes() as u64
    }

    fn conn(&mut self, id: CmId) -> Result<&mut Conn, CmError> {
        self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)
    }

    fn set_deadline(&mut self, local: u32, at: Option<Nanos>) {
        if let Some(c) = self.conns.get_mut(&local) {
            if let Some(old) = c.deadline.take() {
                self.timers.remove(&(old, local));
            }
            c.deadline = at;
            if let Some(at) = at {
                self.timers.insert((at, local));
            }
        }
    }

    fn send(&mut self, dest: Gid, mad: Box<[u8; MAD_LEN]>) {
        self.stats.tx += 1;
        self.tx.push_back(Transmit { dest, mad });
    }

    /// Sends a MAD that waits for an answer, resent every `timeout_ms` up to the ID's
    /// `max_cm_retries` times.
    fn send_tracked(&mut self, now: Nanos, local: u32, mad: Box<[u8; MAD_LEN]>) {
        let Some(c) = self.conns.get_mut(&local) else {
            return;
        };
        let timeout = c.timeout_ms.max(1) * MS;
        c.out = Some(Outstanding {
            mad: mad.clone(),
            timeout,
            retries_left: c.max_cm_retries,
        });
        let dest = c.peer;
        self.send(dest, mad);
        self.set_deadline(local, Some(now + timeout));
    }

    fn cancel(&mut self, local: u32) {
        if let Some(c) = self.conns.get_mut(&local) {
            c.out = None;
        }
        self.set_deadline(local, None);
    }

    fn remove_remote(&mut self, local: u32) {
        let Some(c) = self.conns.get_mut(&local) else {
            return;
        };
        if c.in_remote_tables {
            c.in_remote_tables = false;
            let (rid, rq, guid) = (c.remote_id, c.remote_qpn, c.remote_ca_guid);
            if self.remote_ids.get(&(rid, guid)) == Some(&local) {
                self.remote_ids.remove(&(rid, guid));
            }
            if self.remote_qpns.get(&(rq, guid)) == Some(&local) {
                self.remote_qpns.remove(&(rq, guid));
            }
        }
    }

    fn transition(&mut self, local: u32, input: Input) -> Result<State, CmError> {
        let c = self.conns.get_mut(&local).ok_or(CmError::UnknownId)?;
        let next = state::step(c.state, input)?;
        c.state = next;
        Ok(next)
    }

    /// `cm_reset_to_idle`.
    fn reset_to_idle(&mut self, local: u32) {
        self.remove_remote(local);
        self.cancel(local);
        self.release_backlog(local);
    }

    /// `cm_enter_timewait`: the remote entries go, the time-wait period starts.
    fn enter_timewait(&mut self, now: Nanos, local: u32, input: Input) {
        let Some(c) = self.conns.get_mut(&local) else {
            return;
        };
        let Ok(next) = state::step(c.state, input) else {
            return;
        };
        debug_assert_eq!(next, State::Timewait);
        c.state = next;
        self.remove_remote(local);
        self.cancel(local);
        self.release_backlog(local);
        let Some(c) = self.conns.get_mut(&local) else {
            return;
        };
        let wait = convert_to_ns(c.av_timeout);
        self.set_deadline(local, Some(now + wait));
    }

    fn release_backlog(&mut self, local: u32) {
        let Some(l) = self.conns.get_mut(&local).and_then(|c| c.pending_on.take()) else {
            return;
        };
        self.events.retain(|e| !matches!(e, Event::ConnectRequest { id, .. } | Event::SidrRequest { id, .. } if id.0 == local));
        if let Some((_, left)) = self.conns.get_mut(&l).and_then(|c| c.listen.as_mut()) {
            *left += 1;
        }
    }

    // ---- consumer calls -------------------------------------------------------------

    /// Listens on `service_id` (kernel `ib_cm_listen`; the backlog is ucma's: 0 or
    /// more than [`Config::max_backlog`] means the maximum).
    pub fn listen(&mut self, id: CmId, service_id: u64, backlog: u32) -> Result<(), CmError> {
        let max = self.cfg.max_backlog;
        let c = self.conn(id)?;
        state::step(c.state, Input::Listen)?;
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::AddrInUse);
        }
        let backlog = if backlog == 0 || backlog > max {
            max
        } else {
            backlog
        };
        let c = self.conn(id)?;
        c.state = state::step(c.state, Input::Listen)?;
        c.service_id = service_id;
        c.listen = Some((service_id, backlog));
        self.listeners.insert(service_id, id.0);
        Ok(())
    }

    /// Sends a REQ (kernel `ib_send_cm_req`).
    pub fn connect(&mut self, now: Nanos, id: CmId, p: &ConnectParams) -> Result<(), CmError> {
        check_len(&p.private_data, private_len::REQ)?;
        if p.qpn >= 1 << 24 || p.starting_psn >= 1 << 24 {
            return Err(CmError::InvalidArgument("QPN and PSN are 24 bits"));
        }
        let tid = self.form_tid(id);
        let (ack_delay, guid) = (self.cfg.ack_delay, self.cfg.ca_guid);
        let c = self.conn(id)?;
        state::step(c.state, Input::SendReq)?;
        let path = p.path;
        let routed = path.hop_limit > 1;
        let lid = |l: u16| if routed { 0xffff } else { l };
        let wire_path = CmPathRepr {
            local_port_lid: lid(0),
            remote_port_lid: lid(0),
            local_port_gid: path.local_gid,
            remote_port_gid: path.remote_gid,
            flow_label: path.flow_label & 0xf_ffff,
            packet_rate: path.rate & 0x3f,
            traffic_class: path.traffic_class,
            hop_limit: path.hop_limit,
            sl: path.sl & 0xf,
            subnet_local: !routed,
            local_ack_timeout: consts::ack_timeout(ack_delay, path.packet_life_time),
        };
        let req = CmReqRepr {
            local_comm_id: id.0,
            service_id: p.service_id,
            local_ca_guid: guid,
            local_q_key: 0,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout & 0x1f,
            transport_service_type: match p.qp_type {
                QpType::Rc => transport::RC,
                QpType::Uc => transport::UC,
            },
            end_to_end_flow_control: p.flow_control,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: p.local_cm_response_timeout & 0x1f,
            retry_count: p.retry_count.min(7),
            partition_key: path.pkey,
            path_mtu: path.mtu & 0xf,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: p.max_cm_retries & 0xf,
            srq: p.srq,
            extended_transport_type: 0,
            primary_path: wire_path,
            alternate_path: CmPathRepr {
                local_port_lid: 0,
                remote_port_lid: 0,
                local_port_gid: [0; 16],
                remote_port_gid: [0; 16],
                flow_label: 0,
                packet_rate: 0,
                traffic_class: 0,
                hop_limit: 0,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: 0,
            },
            private_data: pad(&p.private_data),
        };
        c.state = state::step(c.state, Input::SendReq)?;
        c.service_id = p.service_id;
        c.tid = tid;
        c.peer = path.remote_gid;
        c.path = path;
        c.qp_type = p.qp_type;
        c.local_qpn = p.qpn;
        c.rq_psn = p.starting_psn;
        c.av_timeout = (path.packet_life_time + 1).min(31);
        c.timeout_ms = consts::req_timeout_ms(path.packet_life_time, p.remote_cm_response_timeout);
        c.max_cm_retries = p.max_cm_retries & 0xf;
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        c.retry_count = p.retry_count.min(7);
        c.rnr_retry_count = p.rnr_retry_count.min(7);
        let mad = build_mad(tid, CmMessage::Req(req));
        self.send_tracked(now, id.0, mad);
        Ok(())
    }

    /// Sends a REP (kernel `ib_send_cm_rep`).
    pub fn accept(&mut self, now: Nanos, id: CmId, p: &AcceptParams) -> Result<(), CmError> {
        check_len(&p.private_data, private_len::REP)?;
        if p.qpn >= 1 << 24 || p.starting_psn >= 1 << 24 {
            return Err(CmError::InvalidArgument("QPN and PSN are 24 bits"));
        }
        let (ack_delay, guid) = (self.cfg.ack_delay, self.cfg.ca_guid);
        let c = self.conn(id)?;
        state::step(c.state, Input::SendRep)?;
        let rep = CmRepRepr {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            local_q_key: 0,
            local_qpn: p.qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: ack_delay & 0x1f,
            failover_accepted: p.failover_accepted & 3,
            end_to_end_flow_control: p.flow_control,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq,
            local_ca_guid: guid,
            private_data: pad(&p.private_data),
        };
        c.state = state::step(c.state, Input::SendRep)?;
        c.initiator_depth = p.initiator_depth;
        c.responder_resources = p.responder_resources;
        c.rq_psn = p.starting_psn;
        c.local_qpn = p.qpn;
        let mad = build_mad(c.tid, CmMessage::Rep(rep));
        self.release_backlog(id.0);
        self.send_tracked(now, id.0, mad);
        Ok(())
    }

    /// Sends the RTU after a REP (kernel `ib_send_cm_rtu`).
    pub fn rtu(&mut self, _now: Nanos, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        check_len(private_data, private_len::RTU)?;
        let c = self.conn(id)?;
        state::step(c.state, Input::SendRtu)?;
        c.state = state::step(c.state, Input::SendRtu)?;
        c.private_data = private_data.to_vec();
        let mad = rtu_mad(c);
        let dest = c.peer;
        self.send(dest, mad);
        Ok(())
    }

    /// Sends an MRA (kernel `ib_send_cm_mra`); with [`consts::MRA_FLAG_DELAY`] in
    /// `service_timeout` it is only recorded, and sent when a duplicate arrives.
    pub fn mra(
        &mut self,
        _now: Nanos,
        id: CmId,
        service_timeout: u8,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_len(private_data, private_len::MRA)?;
        let c = self.conn(id)?;
        let kind = match c.state {
            State::ReqRcvd => message_kind::REQ,
            State::RepRcvd => message_kind::REP,
            s => {
                return Err(CmError::InvalidState(InvalidTransition {
                    state: s,
                    input: Input::SendMra,
                }))
            }
        };
        c.state = state::step(c.state, Input::SendMra)?;
        c.service_timeout = service_timeout & 0x1f;
        c.private_data = private_data.to_vec();
        if service_timeout & consts::MRA_FLAG_DELAY == 0 {
            let mad = mra_mad(c, kind);
            let dest = c.peer;
            self.send(dest, mad);
        }
        Ok(())
    }

    /// Sends a REJ (kernel `ib_send_cm_rej`).
    pub fn reject(
        &mut self,
        now: Nanos,
        id: CmId,
        reason: u16,
        ari: &[u8],
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_len(private_data, private_len::REJ)?;
        check_len(ari, private_len::REJ_ARI)?;
        let c = self.conn(id)?;
        let from = c.state;
        let next = state::step(from, Input::SendRej)?;
        let mad = rej_mad(c, from, reason, ari, private_data);
        let dest = c.peer;
        if next == State::Timewait {
            self.enter_timewait(now, id.0, Input::SendRej);
        } else {
            self.reset_to_idle(id.0);
            self.conn(id)?.state = next;
        }
        self.send(dest, mad);
        Ok(())
    }

    /// rdma_disconnect: a DREQ when established (kernel `ib_send_cm_dreq`), the DREP
    /// when the peer's DREQ came (`ib_send_cm_drep`).
    pub fn disconnect(&mut self, now: Nanos, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conn(id)?;
        match c.state {
            State::DreqRcvd => {
                check_len(private_data, private_len::DREP)?;
                c.private_data = private_data.to_vec();
                let mad = drep_mad(c);
                let dest = c.peer;
                self.enter_timewait(now, id.0, Input::SendDrep);
                self.send(dest, mad);
                Ok(())
            }
            s => {
                check_len(private_data, private_len::DREQ)?;
                state::step(s, Input::SendDreq)?;
                c.state = state::step(s, Input::SendDreq)?;
                let dreq = CmDreqRepr {
                    local_comm_id: c.local_id,
                    remote_comm_id: c.remote_id,
                    remote_qpn_eecn: c.remote_qpn,
                    private_data: pad(private_data),
                };
                let tid = self.form_tid(id);
                self.send_tracked(now, id.0, build_mad(tid, CmMessage::Dreq(dreq)));
                Ok(())
            }
        }
    }

    /// The first packet reached the QP before the RTU (kernel `ib_cm_notify` with
    /// `IB_EVENT_COMM_EST`).
    pub fn establish(&mut self, id: CmId) -> Result<(), CmError> {
        let c = self.conn(id)?;
        if c.state == State::Established {
            return Err(CmError::AlreadyConnected);
        }
        state::step(c.state, Input::CommEst)?;
        c.state = state::step(c.state, Input::CommEst)?;
        self.cancel(id.0);
        self.events.push_back(Event::Established {
            id,
            private_data: Vec::new(),
        });
        Ok(())
    }

    /// Sends a SIDR_REQ (kernel `ib_send_cm_sidr_req`).
    pub fn sidr_request(&mut self, now: Nanos, id: CmId, p: &SidrParams) -> Result<(), CmError> {
        check_len(&p.private_data, private_len::SIDR_REQ)?;
        let tid = self.form_tid(id);
        let c = self.conn(id)?;
        state::step(c.state, Input::SendSidrReq)?;
        c.state = state::step(c.state, Input::SendSidrReq)?;
        c.service_id = p.service_id;
        c.peer = p.remote_gid;
        c.timeout_ms = p.timeout_ms;
        c.max_cm_retries = p.max_cm_retries;
        let req = CmSidrReqRepr {
            request_id: id.0,
            partition_key: p.pkey,
            service_id: p.service_id,
            private_data: pad(&p.private_data),
        };
        self.send_tracked(now, id.0, build_mad(tid, CmMessage::SidrReq(req)));
        Ok(())
    }

    /// Answers a SIDR_REQ (kernel `ib_send_cm_sidr_rep`); the ID goes idle.
    pub fn sidr_reply(&mut self, _now: Nanos, id: CmId, r: &SidrReply) -> Result<(), CmError> {
        check_len(&r.private_data, private_len::SIDR_REP)?;
        check_len(&r.info, private_len::SIDR_REP_INFO)?;
        if r.qpn >= 1 << 24 {
            return Err(CmError::InvalidArgument("QPN is 24 bits"));
        }
        let c = self.conn(id)?;
        state::step(c.state, Input::SendSidrRep)?;
        let mad = sidr_rep_mad(c, r.status, r.qpn, r.qkey, &r.info, &r.private_data);
        let dest = c.peer;
        self.finish_sidr(id.0);
        self.send(dest, mad);
        Ok(())
    }

    fn finish_sidr(&mut self, local: u32) {
        self.release_backlog(local);
        if let Some(c) = self.conns.get_mut(&local) {
            c.state = state::step(c.state, Input::SendSidrRep).unwrap_or(State::Idle);
            if let Some(k) = c.sidr_key.take() {
                self.remote_sidr.remove(&k);
            }
        }
    }

    /// Destroys an ID, telling the peer as the kernel's `cm_destroy_id` does: REJ
    /// timeout for a pending REQ, REJ consumer-defined for an unanswered one, a DREQ
    /// for a connection, a DREP for a disconnect request, SIDR reject. A listener's
    /// undelivered connect requests are rejected too.
    pub fn destroy(&mut self, now: Nanos, id: CmId) -> Result<(), CmError> {
        let st = self.conn(id)?.state;
        match st {
            State::Listen => {
                let (sid, _) = self.conn(id)?.listen.take().unwrap_or((0, 0));
                self.listeners.remove(&sid);
                let orphans: Vec<u32> = self
                    .conns
                    .values()
                    .filter(|c| c.pending_on == Some(id.0))
                    .map(|c| c.local_id)
                    .collect();
                for o in orphans {
                    let _ = self.destroy(now, CmId(o));
                }
            }
            State::ReqSent | State::MraReqRcvd => {
                let guid = self.cfg.ca_guid.to_be_bytes();
                let _ = self.reject(now, id, rej::TIMEOUT, &guid, &[]);
            }
            State::ReqRcvd
            | State::MraReqSent
            | State::RepRcvd
            | State::MraRepSent
            | State::RepSent
            | State::MraRepRcvd => {
                let _ = self.reject(now, id, rej::CONSUMER_DEFINED, &[], &[]);
            }
            State::Established => {
                let _ = self.disconnect(now, id, &[]);
            }
            State::DreqRcvd => {
                let _ = self.disconnect(now, id, &[]);
            }
            State::SidrReqRcvd => {
                let _ = self.sidr_reply(now, id, &SidrReply::status(sidr_status::REJECT));
            }
            State::DreqSent | State::Timewait | State::SidrReqSent | State::Idle => {}
        }
        self.remove_remote(id.0);
        self.release_backlog(id.0);
        self.set_deadline(id.0, None);
        if let Some(c) = self.conns.remove(&id.0) {
            if let Some(k) = c.sidr_key {
                self.remote_sidr.remove(&k);
            }
        }
        self.events.retain(|e| event_id(e) != Some(id));
        Ok(())
    }

    /// The attributes for moving the ID's QP to `qp_state` (kernel
    /// `cm_init_qp_init_attr` / `cm_init_qp_rtr_attr` / `cm_init_qp_rts_attr`).
    pub fn qp_attr(&self, id: CmId, qp_state: QpState) -> Result<QpAttr, CmError> {
        let c = self.conns.get(&id.0).ok_or(CmError::UnknownId)?;
        use State::*;
        let ok = match qp_state {
            QpState::Init => matches!(
                c.state,
                ReqSent
                    | MraReqRcvd
                    | ReqRcvd
                    | MraReqSent
                    | RepRcvd
                    | MraRepSent
                    | RepSent
                    | MraRepRcvd
                    | Established
            ),
            QpState::Rtr | QpState::Rts => matches!(
                c.state,
                ReqRcvd | MraReqSent | RepRcvd | MraRepSent | RepSent | MraRepRcvd | Established
            ),
        };
        if !ok {
            return Err(CmError::InvalidArgument("no QP attributes in this state"));
        }
        let rc = c.qp_type == QpType::Rc;
        let mut a = QpAttr::default();
        match qp_state {
            QpState::Init => {
                let mut f = ACCESS_REMOTE_WRITE;
                if c.responder_resources != 0 {
                    f |= ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
                }
                a.access_flags = Some(f);
                a.pkey = Some(c.path.pkey);
            }
            QpState::Rtr => {
                a.ah = Some(c.path);
                a.path_mtu = Some(c.path.mtu);
                a.dest_qpn = Some(c.remote_qpn);
                a.rq_psn = Some(c.rq_psn);
                if rc {
                    a.max_dest_rd_atomic = Some(c.responder_resources);
                    a.min_rnr_timer = Some(0);
                }
            }
            QpState::Rts => {
                a.sq_psn = Some(c.sq_psn);
                if rc {
                    a.retry_cnt = Some(c.retry_count);
                    a.rnr_retry = Some(c.rnr_retry_count);
                    a.max_rd_atomic = Some(c.initiator_depth);
                    a.timeout = Some(c.av_timeout);
                }
            }
        }
        Ok(a)
    }

    // ---- sans-IO plumbing -----------------------------------------------------------

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.tx.pop_front()
    }

    /// The next event. Delivering a connect request frees its place in the
    /// listener's backlog (ucma `ucma_get_event`).
    pub fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front()?;
        if let Event::ConnectRequest { id, .. } | Event::SidrRequest { id, .. } = &e {
            self.backlog_release(*id);
        }
        Some(e)
    }

    /// The next event, leaving a connect request counted against its listener's
    /// backlog until [`Cm::backlog_release`]: for a driver that queues events for its
    /// consumer, where the backlog is what the consumer has not yet taken (ucma
    /// counts it down in `ucma_event_handler` and up in `ucma_get_event`).
    pub fn poll_event_held(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The consumer took the connect request of `id` (see [`Cm::poll_event_held`]): its
    /// place in the listener's backlog is free again. Idempotent.
    pub fn backlog_release(&mut self, id: CmId) {
        if let Some(l) = self.conns.get_mut(&id.0).and_then(|c| c.pending_on.take()) {
            if let Some((_, left)) = self.conns.get_mut(&l).and_then(|c| c.listen.as_mut()) {
                *left += 1;
            }
        }
    }

    /// When [`Cm::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Runs every timer due at `now`: resends, send errors and time-wait exits.
    pub fn handle_timeout(&mut self, now: Nanos) {
        while let Some(&(at, local)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.remove(&(at, local));
            let Some(c) = self.conns.get_mut(&local) else {
                continue;
            };
            c.deadline = None;
            if c.state == State::Timewait {
                // cm_timewait_handler
                c.state = state::step(c.state, Input::TimewaitExpired).unwrap_or(State::Idle);
                self.events
                    .push_back(Event::TimewaitExit { id: CmId(local) });
                continue;
            }
            let Some(out) = c.out.as_mut() else {
                continue;
            };
            if out.retries_left > 0 {
                out.retries_left -= 1;
                let (mad, timeout, dest) = (out.mad.clone(), out.timeout, c.peer);
                self.stats.retries += 1;
                self.send(dest, mad);
                self.set_deadline(local, Some(now + timeout));
                continue;
            }
            c.out = None;
            self.stats.timeouts += 1;
            self.send_error(now, local);
        }
    }

    /// `cm_process_send_error`.
    fn send_error(&mut self, now: Nanos, local: u32) {
        let Some(st) = self.conns.get(&local).map(|c| c.state) else {
            return;
        };
        let id = CmId(local);
        match st {
            State::ReqSent | State::MraReqRcvd => {
                self.reset_to_idle(local);
                let _ = self.transition(local, Input::Timeout);
                self.events.push_back(Event::Unreachable {
                    id,
                    message: Unanswered::Req,
                });
            }
            State::RepSent | State::MraRepRcvd => {
                self.reset_to_idle(local);
                let _ = self.transition(local, Input::Timeout);
                self.events.push_back(Event::Unreachable {
                    id,
                    message: Unanswered::Rep,
                });
            }
            State::DreqSent => {
                self.enter_timewait(now, local, Input::Timeout);
                self.events.push_back(Event::Disconnected {
                    id,
                    private_data: Vec::new(),
                    timed_out: true,
                });
            }
            State::SidrReqSent => {
                let _ = self.transition(local, Input::Timeout);
                self.events.push_back(Event::Unreachable {
                    id,
                    message: Unanswered::SidrReq,
                });
            }
            _ => {}
        }
    }
}

fn event_id(e: &Event) -> Option<CmId> {
    Some(match e {
        Event::ConnectRequest { id, .. }
        | Event::ConnectResponse { id, .. }
        | Event::Established { id, .. }
        | Event::Rejected { id, .. }
        | Event::Unreachable { id, .. }
        | Event::MraReceived { id, .. }
        | Event::DisconnectRequest { id, .. }
        | Event::Disconnected { id, .. }
        | Event::TimewaitExit { id }
        | Event::SidrRequest { id, .. }
        | Event::SidrReply { id, .. } => *id,
    })
}

fn rtu_mad(c: &Conn) -> Box<[u8; MAD_LEN]> {
    build_mad(
        c.tid,
        CmMessage::Rtu(CmRtuRepr {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            private_data: pad(&c.private_data[..c.private_data.len().min(224)]),
        }),
    )
}

fn mra_mad(c: &Conn, kind: u8) -> Box<[u8; MAD_LEN]> {
    build_mad(
        c.tid,
        CmMessage::Mra(CmMraRepr {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            message_mraed: kind,
            service_timeout: c.service_timeout & 0x1f,
            private_data: pad(&c.private_data[..c.private_data.len().min(222)]),
        }),
    )
}

fn drep_mad(c: &Conn) -> Box<[u8; MAD_LEN]> {
    build_mad(
        c.tid,
        CmMessage::Drep(CmDrepRepr {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            private_data: pad(&c.private_data[..c.private_data.len().min(224)]),
        }),
    )
}

/// `cm_format_rej`: local ID and rejected message by the state it was sent from.
fn rej_mad(c: &Conn, from: State, reason: u16, ari: &[u8], pd: &[u8]) -> Box<[u8; MAD_LEN]> {
    let (local, kind) = match from {
        State::ReqRcvd => (0, message_kind::REQ),
        State::MraReqSent => (c.local_id, message_kind::REQ),
        State::RepRcvd | State::MraRepSent => (c.local_id, message_kind::REP),
        _ => (c.local_id, message_kind::OTHER),
    };
    build_mad(
        c.tid,
        CmMessage::Rej(CmRejRepr {
            local_comm_id: local,
            remote_comm_id: c.remote_id,
            message_rejected: kind,
            reject_info_length: ari.len() as u8,
            reason,
            ari: pad(ari),
            private_data: pad(pd),
        }),
    )
}

fn sidr_rep_mad(
    c: &Conn,
    status: u8,
    qpn: u32,
    qkey: u32,
    info: &[u8],
    pd: &[u8],
) -> Box<[u8; MAD_LEN]> {
    build_mad(
        c.tid,
        CmMessage::SidrRep(CmSidrRepRepr {
            request_id: c.remote_id,
            status,
            additional_information_length: info.len() as u8,
            vendor_id_h: 0,
            qpn,
            vendor_id_l: 0,
            service_id: c.service_id,
            q_key: qkey,
            additional_information: pad(info),
            private_data: pad(pd),
        }),
    )
}
