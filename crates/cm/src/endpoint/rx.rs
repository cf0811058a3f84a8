//! The receive side of [`Cm`]: every CM MAD that arrives, checked, then handled by
//! its message's rules (IBTA 12.6, as `cm.c`'s `cm_*_handler`s).

use super::*;

impl Cm {
    /// Takes a MAD received on QP1 from `src` (the GRH's source GID). Anything that is
    /// not a well-formed CM message for a known ID in a state that takes it is
    /// dropped and counted in [`CmStats`].
    pub fn handle_mad(&mut self, now: Nanos, src: Gid, mad: &[u8]) {
        self.stats.rx += 1;
        let Ok(view) = CmMad::new_checked(mad) else {
            self.stats.malformed += 1;
            return;
        };
        let h = view.header();
        if h.base_version != BASE_VERSION || h.mgmt_class != class::CM {
            self.stats.wrong_class += 1;
            return;
        }
        if h.class_version != CM_CLASS_VERSION {
            self.stats.bad_class_version += 1;
            return;
        }
        if h.method != method::SEND {
            self.stats.bad_method += 1;
            return;
        }
        let msg = match CmMessage::parse(h.attribute_id, view.data_ref()) {
            Ok(m) => m,
            Err(WireError::Unsupported(_)) => {
                self.stats.unknown_attribute += 1;
                return;
            }
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let tid = h.transaction_id;
        match msg {
            CmMessage::Req(m) => self.on_req(now, src, tid, &m),
            CmMessage::Mra(m) => self.on_mra(now, &m),
            CmMessage::Rej(m) => self.on_rej(now, &m),
            CmMessage::Rep(m) => self.on_rep(now, src, tid, &m),
            CmMessage::Rtu(m) => self.on_rtu(&m),
            CmMessage::Dreq(m) => self.on_dreq(src, tid, &m),
            CmMessage::Drep(m) => self.on_drep(now, &m),
            CmMessage::SidrReq(m) => self.on_sidr_req(src, tid, &m),
            CmMessage::SidrRep(m) => self.on_sidr_rep(&m),
        }
    }

    /// `cm_acquire_id`: the ID `local` if its remote ID is `remote`.
    fn acquire(&self, local: u32, remote: u32) -> Option<u32> {
        self.conns
            .get(&local)
            .filter(|c| c.remote_id == remote && c.listen.is_none())
            .map(|c| c.local_id)
    }

    /// `cm_issue_rej`: a REJ straight back to a message no ID takes.
    fn issue_rej(&mut self, dest: Gid, tid: u64, their: u32, ours: u32, kind: u8, reason: u16) {
        let rej = CmRejRepr {
            local_comm_id: ours,
            remote_comm_id: their,
            message_rejected: kind,
            reject_info_length: 0,
            reason,
            ari: [0; 72],
            private_data: [0; 148],
        };
        self.send(dest, build_mad(tid, CmMessage::Rej(rej)));
    }

    /// `cm_req_handler` with `cm_match_req`.
    fn on_req(&mut self, now: Nanos, src: Gid, tid: u64, m: &CmReqRepr) {
        let qp_type = match (m.transport_service_type, m.extended_transport_type) {
            (transport::RC, _) => QpType::Rc,
            (transport::UC, _) => QpType::Uc,
            _ => {
                self.stats.unsupported_transport += 1;
                return;
            }
        };
        let guid = m.local_ca_guid;
        // Duplicate REQ: the ID it created answers from its state (cm_dup_req_handler).
        if let Some(&cur) = self.remote_ids.get(&(m.local_comm_id, guid)) {
            self.stats.duplicates += 1;
            let Some(c) = self.conns.get(&cur) else {
                return;
            };
            match c.state {
                State::MraReqSent => {
                    let mad = mra_mad(c, message_kind::REQ);
                    self.send(src, mad);
                }
                State::Timewait => {
                    let mad = rej_mad(c, State::Timewait, rej::STALE_CONN, &[], &[]);
                    self.send(src, mad);
                }
                _ => {}
            }
            return;
        }
        // Stale connection: the QPN belongs to a live connection (cm_insert_remote_qpn).
        if let Some(&cur) = self.remote_qpns.get(&(m.local_qpn, guid)) {
            let stale = (m.local_comm_id, 0, message_kind::REQ);
            return self.reject_stale(now, src, tid, stale, cur);
        }
        let Some(&listener) = self.listeners.get(&m.service_id) else {
            self.stats.no_listener += 1;
            self.issue_rej(
                src,
                tid,
                m.local_comm_id,
                0,
                message_kind::REQ,
                rej::INVALID_SERVICE_ID,
            );
            return;
        };
        let p = m.primary_path;
        if !self.is_local_gid(&p.remote_port_gid) {
            // cm_init_av_by_path fails: REJ invalid GID with our GID as ARI.
            let mut rej_m = CmRejRepr {
                local_comm_id: 0,
                remote_comm_id: m.local_comm_id,
                message_rejected: message_kind::REQ,
                reject_info_length: 16,
                reason: rej::INVALID_GID,
                ari: [0; 72],
                private_data: [0; 148],
            };
            rej_m.ari[..16].copy_from_slice(&self.cfg.local_gid);
            self.send(src, build_mad(tid, CmMessage::Rej(rej_m)));
            return;
        }
        let left = self
            .conns
            .get(&listener)
            .and_then(|c| c.listen)
            .map_or(0, |(_, left)| left);
        if left == 0 {
            // ucma_event_handler: -ENOMEM, and cm_destroy_id leaves the REQ unanswered
            // so the peer's retry may find room.
            self.stats.backlog_full += 1;
            return;
        }
        if let Some((_, left)) = self
            .conns
            .get_mut(&listener)
            .and_then(|c| c.listen.as_mut())
        {
            *left -= 1;
        }
        let id = self.create_id();
        let plt = p.local_ack_timeout.saturating_sub(1);
        let path = Path {
            local_gid: p.remote_port_gid,
            remote_gid: p.local_port_gid,
            mtu: m.path_mtu,
            pkey: m.partition_key,
            packet_life_time: plt,
            sl: p.sl,
            traffic_class: p.traffic_class,
            hop_limit: p.hop_limit,
            flow_label: p.flow_label,
            rate: p.packet_rate,
        };
        let auto_mra = self.cfg.auto_mra;
        let Some(c) = self.conns.get_mut(&id.0) else {
            return;
        };
        c.state = state::step(State::Idle, Input::RecvReq).unwrap_or(State::ReqRcvd);
        c.remote_id = m.local_comm_id;
        c.service_id = m.service_id;
        c.tid = tid;
        // Answers go where the REQ came from (on RoCE the kernel takes the MAC from
        // the received frame, so its REP returns to the sender whatever GID the REQ
        // names); the QP's path keeps the REQ's GIDs.
        c.peer = src;
        c.remote_ca_guid = guid;
        c.qp_type = qp_type;
        c.remote_qpn = m.local_qpn;
        c.sq_psn = m.starting_psn;
        c.path = path;
        c.av_timeout = (plt + 1).min(31);
        c.timeout_ms = consts::convert_to_ms(m.local_cm_response_timeout);
        c.max_cm_retries = m.max_cm_retries;
        c.initiator_depth = m.responder_resources;
        c.responder_resources = m.initiator_depth;
        c.retry_count = m.retry_count;
        c.rnr_retry_count = m.rnr_retry_count;
        c.pending_on = Some(listener);
        c.in_remote_tables = true;
        if let Some(t) = auto_mra {
            // cma_ib_req_handler: ib_send_cm_mra(CMA_CM_MRA_SETTING), delayed.
            c.state = state::step(c.state, Input::SendMra).unwrap_or(State::MraReqSent);
            c.service_timeout = t & 0x1f;
        }
        self.remote_ids.insert((m.local_comm_id, guid), id.0);
        self.remote_qpns.insert((m.local_qpn, guid), id.0);
        let req = ReqInfo {
            listener: CmId(listener),
            remote_comm_id: m.local_comm_id,
            service_id: m.service_id,
            remote_ca_guid: guid,
            remote_qpn: m.local_qpn,
            qp_type,
            starting_psn: m.starting_psn,
            responder_resources: m.initiator_depth,
            initiator_depth: m.responder_resources,
            path,
            retry_count: m.retry_count,
            rnr_retry_count: m.rnr_retry_count,
            srq: m.srq,
            flow_control: m.end_to_end_flow_control,
            src_gid: src,
            private_data: m.private_data.to_vec(),
        };
        self.events.push_back(Event::ConnectRequest {
            id,
            req: Box::new(req),
        });
    }

    /// `cm_rep_handler` and `cm_dup_rep_handler`.
    fn on_rep(&mut self, now: Nanos, src: Gid, tid: u64, m: &CmRepRepr) {
        let Some(local) = self.acquire(m.remote_comm_id, 0).filter(|l| {
            matches!(
                self.conns.get(l).map(|c| c.state),
                Some(State::ReqSent | State::MraReqRcvd)
            )
        }) else {
            // A duplicate: answer from state.
            if let Some(local) = self.acquire(m.remote_comm_id, m.local_comm_id) {
                self.stats.duplicates += 1;
                let Some(c) = self.conns.get(&local) else {
                    return;
                };
                let mad = match c.state {
                    State::Established => Some(rtu_mad(c)),
                    State::MraRepSent => Some(mra_mad(c, message_kind::REP)),
                    _ => None,
                };
                if let Some(mad) = mad {
                    self.send(src, mad);
                }
            } else {
                self.stats.unmatched += 1;
            }
            return;
        };
        let guid = m.local_ca_guid;
        if self.remote_ids.contains_key(&(m.local_comm_id, guid)) {
            self.stats.duplicates += 1;
            return;
        }
        if let Some(&cur) = self.remote_qpns.get(&(m.local_qpn, guid)) {
            let stale = (m.local_comm_id, m.remote_comm_id, message_kind::REP);
            return self.reject_stale(now, src, tid, stale, cur);
        }
        let Some(c) = self.conns.get_mut(&local) else {
            return;
        };
        c.state = state::step(c.state, Input::RecvRep).unwrap_or(State::RepRcvd);
        c.remote_id = m.local_comm_id;
        c.remote_ca_guid = guid;
        c.remote_qpn = m.local_qpn;
        c.initiator_depth = m.responder_resources;
        c.responder_resources = m.initiator_depth;
        c.sq_psn = m.starting_psn;
        c.rnr_retry_count = m.rnr_retry_count;
        c.av_timeout = consts::ack_timeout(m.target_ack_delay, c.av_timeout.saturating_sub(1));
        c.in_remote_tables = true;
        self.remote_ids.insert((m.local_comm_id, guid), local);
        self.remote_qpns.insert((m.local_qpn, guid), local);
        self.cancel(local);
        let rep = RepInfo {
            remote_comm_id: m.local_comm_id,
            remote_ca_guid: guid,
            remote_qpn: m.local_qpn,
            starting_psn: m.starting_psn,
            responder_resources: m.initiator_depth,
            initiator_depth: m.responder_resources,
            target_ack_delay: m.target_ack_delay,
            rnr_retry_count: m.rnr_retry_count,
            srq: m.srq,
            private_data: m.private_data.to_vec(),
        };
        self.events.push_back(Event::ConnectResponse {
            id: CmId(local),
            rep: Box::new(rep),
        });
    }

    /// `cm_rtu_handler`.
    fn on_rtu(&mut self, m: &CmRtuRepr) {
        let Some(local) = self.acquire(m.remote_comm_id, m.local_comm_id) else {
            self.stats.unmatched += 1;
            return;
        };
        if !matches!(
            self.conns.get(&local).map(|c| c.state),
            Some(State::RepSent | State::MraRepRcvd)
        ) {
            self.stats.duplicates += 1;
            return;
        }
        let _ = self.transition(local, Input::RecvRtu);
        self.cancel(local);
        self.events.push_back(Event::Established {
            id: CmId(local),
            private_data: m.private_data.to_vec(),
        });
    }

    /// `cm_mra_handler` (with `cm_acquire_mraed_id`).
    fn on_mra(&mut self, now: Nanos, m: &CmMraRepr) {
        let local = match m.message_mraed {
            message_kind::REQ => self.acquire(m.remote_comm_id, 0),
            message_kind::REP | message_kind::OTHER => {
                self.acquire(m.remote_comm_id, m.local_comm_id)
            }
            _ => None,
        };
        let Some(local) = local else {
            self.stats.unmatched += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&local) else {
            return;
        };
        let timeout = convert_to_ns(m.service_timeout) + convert_to_ns(c.av_timeout);
        let next = match (c.state, m.message_mraed) {
            (State::ReqSent, message_kind::REQ) => State::MraReqRcvd,
            (State::RepSent, message_kind::REP) => State::MraRepRcvd,
            (State::MraReqRcvd | State::MraRepRcvd, _) => {
                self.stats.duplicates += 1;
                return;
            }
            _ => {
                self.stats.unmatched += 1;
                return;
            }
        };
        debug_assert_eq!(state::step(c.state, Input::RecvMra), Ok(next));
        c.state = next;
        // ib_modify_mad: the outstanding MAD now waits `timeout`, retries unchanged.
        if let Some(out) = c.out.as_mut() {
            out.timeout = timeout;
        }
        self.set_deadline(local, Some(now + timeout));
        self.events.push_back(Event::MraReceived {
            id: CmId(local),
            service_timeout: m.service_timeout,
        });
    }

    /// `cm_rej_handler` (with `cm_acquire_rejected_id`).
    fn on_rej(&mut self, now: Nanos, m: &CmRejRepr) {
        let local = if m.reason == rej::TIMEOUT {
            let guid = u64::from_be_bytes(m.ari[..8].try_into().unwrap_or([0; 8]));
            self.remote_ids.get(&(m.local_comm_id, guid)).copied()
        } else if m.message_rejected == message_kind::REQ {
            self.acquire(m.remote_comm_id, 0)
        } else {
            self.acquire(m.remote_comm_id, m.local_comm_id)
        };
        let Some(local) = local else {
            self.stats.unmatched += 1;
            return;
        };
        let Some(st) = self.conns.get(&local).map(|c| c.state) else {
            self.stats.unmatched += 1;
            return;
        };
        let input = if m.reason == rej::STALE_CONN {
            Input::RecvRejStale
        } else {
            Input::RecvRej
        };
        let unseen = self
            .conns
            .get(&local)
            .is_some_and(|c| c.pending_on.is_some());
        match state::step(st, input) {
            Ok(State::Timewait) => self.enter_timewait(now, local, input),
            Ok(next) => {
                self.reset_to_idle(local);
                if let Some(c) = self.conns.get_mut(&local) {
                    c.state = next;
                }
            }
            Err(_) => {
                self.stats.unmatched += 1;
                return;
            }
        }
        if unseen {
            // The peer gave up on a request our consumer has not read yet: the ID
            // goes with its queued event (ucma ignores events for connections it has
            // not handed out).
            self.set_deadline(local, None);
            self.conns.remove(&local);
            return;
        }
        let n = (m.reject_info_length as usize).min(private_len::REJ_ARI);
        self.events.push_back(Event::Rejected {
            id: CmId(local),
            reason: m.reason,
            ari: m.ari[..n].to_vec(),
            private_data: m.private_data.to_vec(),
        });
    }

    /// `cm_dreq_handler`.
    fn on_dreq(&mut self, src: Gid, tid: u64, m: &CmDreqRepr) {
        let Some(local) = self.acquire(m.remote_comm_id, m.local_comm_id) else {
            // cm_issue_drep: answer so the peer can leave its DREQ_SENT.
            self.stats.duplicates += 1;
            let drep = CmDrepRepr {
                local_comm_id: m.remote_comm_id,
                remote_comm_id: m.local_comm_id,
                private_data: [0; 224],
            };
            self.send(src, build_mad(tid, CmMessage::Drep(drep)));
            return;
        };
        let Some(c) = self.conns.get_mut(&local) else {
            return;
        };
        if c.local_qpn != m.remote_qpn_eecn {
            self.stats.unmatched += 1;
            return;
        }
        match c.state {
            State::RepSent | State::DreqSent | State::Established | State::MraRepRcvd => {}
            State::Timewait => {
                // The DREP again, with the ID's transaction ID and private data.
                self.stats.duplicates += 1;
                let mad = drep_mad(c);
                self.send(src, mad);
                return;
            }
            State::DreqRcvd => {
                self.stats.duplicates += 1;
                return;
            }
            _ => {
                self.stats.unmatched += 1;
                return;
            }
        }
        c.state = state::step(c.state, Input::RecvDreq).unwrap_or(State::DreqRcvd);
        c.tid = tid;
        self.cancel(local);
        self.events.push_back(Event::DisconnectRequest {
            id: CmId(local),
            private_data: m.private_data.to_vec(),
        });
    }

    /// `cm_drep_handler`.
    fn on_drep(&mut self, now: Nanos, m: &CmDrepRepr) {
        let Some(local) = self.acquire(m.remote_comm_id, m.local_comm_id) else {
            self.stats.unmatched += 1;
            return;
        };
        if !self
            .conns
            .get(&local)
            .is_some_and(|c| state::accepts(c.state, Input::RecvDrep))
        {
            self.stats.unmatched += 1;
            return;
        }
        self.enter_timewait(now, local, Input::RecvDrep);
        self.events.push_back(Event::Disconnected {
            id: CmId(local),
            private_data: m.private_data.to_vec(),
            timed_out: false,
        });
    }

    /// `cm_sidr_req_handler`.
    fn on_sidr_req(&mut self, src: Gid, tid: u64, m: &CmSidrReqRepr) {
        if self.remote_sidr.contains_key(&(m.request_id, src)) {
            self.stats.duplicates += 1;
            return;
        }
        let listener = self.listeners.get(&m.service_id).copied();
        let left = listener
            .and_then(|l| self.conns.get(&l))
            .and_then(|c| c.listen)
            .map(|(_, left)| left);
        if left == Some(0) {
            self.stats.backlog_full += 1;
            return;
        }
        let id = self.create_id();
        let Some(c) = self.conns.get_mut(&id.0) else {
            return;
        };
        c.state = state::step(State::Idle, Input::RecvSidrReq).unwrap_or(State::SidrReqRcvd);
        c.remote_id = m.request_id;
        c.service_id = m.service_id;
        c.tid = tid;
        c.peer = src;
        let Some(listener) = listener else {
            self.stats.no_listener += 1;
            let mad = sidr_rep_mad(c, sidr_status::UNSUPPORTED, 0, 0, &[], &[]);
            self.conns.remove(&id.0);
            self.send(src, mad);
            return;
        };
        c.pending_on = Some(listener);
        c.sidr_key = Some((m.request_id, src));
        self.remote_sidr.insert((m.request_id, src), id.0);
        if let Some((_, left)) = self
            .conns
            .get_mut(&listener)
            .and_then(|c| c.listen.as_mut())
        {
            *left -= 1;
        }
        self.events.push_back(Event::SidrRequest {
            id,
            listener: CmId(listener),
            service_id: m.service_id,
            pkey: m.partition_key,
            src_gid: src,
            private_data: m.private_data.to_vec(),
        });
    }

    /// `cm_sidr_rep_handler`.
    fn on_sidr_rep(&mut self, m: &CmSidrRepRepr) {
        let Some(local) = self
            .acquire(m.request_id, 0)
            .filter(|l| self.conns.get(l).map(|c| c.state) == Some(State::SidrReqSent))
        else {
            self.stats.unmatched += 1;
            return;
        };
        let _ = self.transition(local, Input::RecvSidrRep);
        self.cancel(local);
        let n = (m.additional_information_length as usize).min(private_len::SIDR_REP_INFO);
        self.events.push_back(Event::SidrReply {
            id: CmId(local),
            status: m.status,
            qpn: m.qpn,
            qkey: m.q_key,
            info: m.additional_information[..n].to_vec(),
            private_data: m.private_data.to_vec(),
        });
    }

    /// A REQ or REP naming a QPN of a live connection (`cm_insert_remote_qpn`): REJ
    /// "stale connection" to the sender (`(their comm ID, ours, message kind)`), and
    /// the live connection `cur` is disconnected if established (IBTA 12.9.8.3.1).
    fn reject_stale(&mut self, now: Nanos, src: Gid, tid: u64, stale: (u32, u32, u8), cur: u32) {
        let (theirs, ours, kind) = stale;
        self.stats.stale += 1;
        self.issue_rej(src, tid, theirs, ours, kind, rej::STALE_CONN);
        if self.conns.get(&cur).map(|c| c.state) == Some(State::Established) {
            let _ = self.disconnect(now, CmId(cur), &[]);
        }
    }
}
