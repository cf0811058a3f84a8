//! The general services interface (QP1) of the soft port: UD over RoCE v2 with a GRH,
//! P_Key 0xFFFF and Q_Key 0x80010000 (IBTA 13.5; kernel `core/mad.c`, `core/agent.c`).
//!
//! A MAD received on QP1 is validated (kernel `validate_mad`: base version, no SMPs on
//! QP1, CM uses only Send), given to the device's [`MadPort::process_mad`], and, when
//! the device neither answered nor consumed it, to the agent registered for it:
//! responses by the high 32 bits of their TransactionID (the agent's id, which
//! [`Engine::gsi_send`](crate::Engine::gsi_send) puts there as the kernel's `ib_umad_write` does), requests by
//! (class, class version, method). A Get or Set nobody takes gets the automatic
//! GetResp with status 0x000C ([`unmatched_response`]). Responses go back to the
//! requester's GID and QP (from the GRH and the DETH), with the GSI Q_Key.

use super::{unmatched_response, GrhArea, Mad, MadPort, MadResult, NodeIdentity, Trap, PORT};
use crate::counters::Counters;
use crate::net::{self, Datagram, Transmit};
use crate::types::{Errno, Nanos, VerbError, VerbResult, Wc, WcFlags, WcOpcode};
use crate::Engine;
use rverbs_wire::bth::BthRepr;
use rverbs_wire::ext::DethRepr;
use rverbs_wire::grh::Gid;
use rverbs_wire::mad::{class, method, MadHeader, MAD_LEN};
use rverbs_wire::opcode::Opcode;
use rverbs_wire::packet::{Packet, PacketRepr};
use rverbs_wire::psn::Psn;
use std::collections::{BTreeMap, VecDeque};

/// The GSI's QP number.
pub const GSI_QPN: u32 = 1;
/// The GSI's well-known Q_Key (IBTA 10.2.4; kernel `IB_QP1_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The P_Key GSI packets carry on RoCE (the default, full-member P_Key).
pub const GSI_PKEY: u16 = 0xffff;
/// Most MADs one agent's receive queue holds; more are dropped (and counted).
pub const AGENT_QUEUE: usize = 1024;

/// A registered MAD agent (its id is also the high half of its TransactionIDs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentId(pub u32);

/// What an agent receives unsolicited (libibumad `umad_register`): requests of one
/// management class and class version, for the methods whose bit is set in
/// `methods` (bit n = method n). An empty method set receives only responses to the
/// agent's own requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub class_version: u8,
    /// Method bit mask (bit n = method n, 0..=127).
    pub methods: u128,
}

/// A MAD received by an agent, with how it came (`struct ib_mad_recv_wc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GsiRecv {
    /// The receive completion: `src_qp` is the sender's QP, `qp_num` 1, the GRH flag set.
    pub wc: Wc,
    /// The network header area (IPv6 header or 20 zero bytes + IPv4 header).
    pub grh: GrhArea,
    /// The MAD.
    pub mad: Mad,
}

impl GsiRecv {
    /// The sender's GID (from the GRH).
    pub fn src_gid(&self) -> Gid {
        super::grh_sgid(&self.grh)
    }
}

/// Where a MAD goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GsiDest {
    /// Destination GID.
    pub dgid: Gid,
    /// Destination QP (1 for the peer's GSI).
    pub qpn: u32,
    /// Q_Key ([`GSI_QKEY`] for the GSI).
    pub qkey: u32,
    /// Source GID index; `None` picks the first local GID of the same family. An index
    /// that names a RoCE v1 entry ([`crate::Config::gid_roce_v1`]) sends the MAD as
    /// RoCE v1.
    pub sgid_index: Option<u8>,
}

impl GsiDest {
    /// The GSI of the port with GID `dgid`.
    pub fn gsi(dgid: Gid) -> Self {
        GsiDest {
            dgid,
            qpn: GSI_QPN,
            qkey: GSI_QKEY,
            sgid_index: None,
        }
    }
}

#[derive(Debug, Default)]
struct Agent {
    reg: Option<Registration>,
    queue: VecDeque<GsiRecv>,
}

/// The GSI of one port: the device's MAD state, the agents and the MADs to send.
#[derive(Debug)]
pub struct Gsi {
    /// The device side (SMA, PMA, BMA).
    pub port: MadPort,
    agents: BTreeMap<u32, Agent>,
    next_agent: u32,
    tx: VecDeque<Transmit>,
    psn: u32,
}

impl Default for Gsi {
    fn default() -> Self {
        Gsi {
            port: MadPort::new(NodeIdentity::default()),
            agents: BTreeMap::new(),
            next_agent: 1,
            tx: VecDeque::new(),
            psn: 0,
        }
    }
}

fn is_sm_class(c: u8) -> bool {
    c == class::SUBN_LID_ROUTED || c == class::SUBN_DIRECTED_ROUTE
}

/// The kernel's `validate_mad` for a MAD received on QP1: base version 1, no SMPs,
/// and CM attributes other than ClassPortInfo use only Send.
pub fn valid_on_gsi(mad: &Mad) -> bool {
    let h = MadHeader::new_unchecked(&mad[..]);
    if h.base_version() != rverbs_wire::mad::BASE_VERSION || is_sm_class(h.mgmt_class()) {
        return false;
    }
    !(h.mgmt_class() == class::CM
        && h.attribute_id() != rverbs_wire::mad::attr::CLASS_PORT_INFO
        && h.method() != method::SEND)
}

impl Gsi {
    fn build(
        &mut self,
        counters: &mut Counters,
        src: Gid,
        src_port: u16,
        dest: (Gid, u32, u32),
        mad: &Mad,
        roce_v1: bool,
    ) {
        let bth = BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad: 0,
            pkey: GSI_PKEY,
            fecn: false,
            becn: false,
            dest_qp: dest.1 & 0xff_ffff,
            ack_req: false,
            psn: Psn::new(self.psn),
        };
        self.psn = (self.psn + 1) & 0xff_ffff;
        let repr = PacketRepr {
            deth: Some(DethRepr {
                qkey: dest.2,
                src_qp: GSI_QPN,
            }),
            ..PacketRepr::new(bth, &mad[..])
        };
        let mut payload = vec![0u8; repr.buffer_len()];
        if repr.emit(&mut payload).is_err() {
            return;
        }
        let (s, d) = (net::gid_to_ip(src), net::gid_to_ip(dest.0));
        net::fill_icrc_for(roce_v1, s, d, src_port, &mut payload);
        counters.tx_packets += 1;
        counters.tx_bytes += payload.len() as u64;
        self.port.stats.gsi_sent += 1;
        self.tx.push_back(Transmit {
            src: s,
            dst: d,
            src_port,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            roce_v1,
            payload,
            body: None,
        });
    }

    /// Sends the BM traps the port raised to the trap destination.
    fn send_traps(&mut self, counters: &mut Counters, gids: &[Gid], src_port: u16) {
        while let Some((gid, qp, qkey, mad)) = self.port.outgoing.pop_front() {
            let Some(src) = pick_sgid(gids, gid, None) else {
                continue;
            };
            self.build(counters, src, src_port, (gid, qp, qkey), &mad, false);
        }
    }

    fn deliver(&mut self, agent: u32, r: GsiRecv) -> bool {
        match self.agents.get_mut(&agent) {
            Some(a) if a.queue.len() < AGENT_QUEUE => {
                a.queue.push_back(r);
                true
            }
            _ => false,
        }
    }

    fn find_agent(&self, mad: &Mad) -> Option<u32> {
        let h = MadHeader::new_unchecked(&mad[..]);
        if super::response_mad(mad) {
            let hi = (h.transaction_id() >> 32) as u32;
            return self.agents.contains_key(&hi).then_some(hi);
        }
        let m = h.method() & 0x7f;
        self.agents.iter().find_map(|(&id, a)| {
            a.reg
                .filter(|r| {
                    r.mgmt_class == h.mgmt_class()
                        && r.class_version == h.class_version()
                        && r.methods & (1u128 << m) != 0
                })
                .map(|_| id)
        })
    }
}

/// The source GID for a destination: the given index, or the first local GID of the
/// same family (IPv4-mapped or IPv6).
fn pick_sgid(gids: &[Gid], dgid: Gid, index: Option<u8>) -> Option<Gid> {
    match index {
        Some(i) => gids.get(usize::from(i)).copied(),
        None => {
            let v4 = dgid.to_ipv4_mapped().is_some();
            gids.iter()
                .copied()
                .find(|g| g.to_ipv4_mapped().is_some() == v4)
        }
    }
}

impl Engine {
    fn gsi_src_port(&self) -> u16 {
        self.config().src_port.unwrap_or(net::ud_src_port(GSI_QPN))
    }

    /// The port's MAD state (keys, identity, statistics).
    pub fn mad_port(&self) -> &MadPort {
        &self.gsi.port
    }

    /// The port's MAD state, mutably (to set the node identity or keys locally).
    pub fn mad_port_mut(&mut self) -> &mut MadPort {
        &mut self.gsi.port
    }

    /// `process_mad` on this port, as the kernel's sysfs counters and local tools call
    /// it (see [`MadPort::process_mad`]); BM traps it raises are sent at once.
    pub fn process_mad(
        &mut self,
        now: Nanos,
        mad_flags: u32,
        port: u8,
        in_wc: Option<&Wc>,
        in_grh: Option<&GrhArea>,
        in_mad: &Mad,
    ) -> (MadResult, Mad) {
        self.gsi.port.port_gid = self.config().gids.first().copied().unwrap_or(Gid::ZERO);
        self.gsi.port.sma.mtu_code = self.config().limits.active_mtu as u8;
        let r =
            self.gsi
                .port
                .process_mad(now, &self.counters, mad_flags, port, in_wc, in_grh, in_mad);
        let sp = self.gsi_src_port();
        let gids = self.config().gids.clone();
        self.gsi.send_traps(&mut self.counters, &gids, sp);
        r
    }

    /// Gives a locally built SMP to the port's SMA (kernel `core/mad.c`
    /// `handle_outgoing_dr_smp`; RoCE has no QP0, so an SMP can only be local): a
    /// directed-route SMP first goes through the CA's hop-pointer rules
    /// ([`super::sma::dr_smp_send`]) and must end at this port. The M_Key is checked
    /// (flags 0), with a WC synthesised as the kernel's `build_smp_wc` does. An SMP the
    /// SMA drops for its M_Key fails with EINVAL, as `handle_outgoing_dr_smp` fails the
    /// send when `process_mad` returns IB_MAD_RESULT_FAILURE.
    pub fn local_smp(&mut self, now: Nanos, mad: &Mad) -> VerbResult<Mad> {
        const VERB: &str = "local_smp";
        let mut smp = *mad;
        let h = MadHeader::new_unchecked(&smp[..]);
        let dr_slid = u16::from_be_bytes([smp[32], smp[33]]);
        match h.mgmt_class() {
            class::SUBN_DIRECTED_ROUTE => {
                if !super::sma::dr_smp_send(&mut smp, PORT) || !super::sma::dr_is_local(&smp) {
                    return Err(VerbError::new(
                        VERB,
                        Errno::Inval,
                        "the directed route does not end at this port",
                    ));
                }
            }
            class::SUBN_LID_ROUTED => {}
            _ => return Err(VerbError::new(VERB, Errno::Inval, "not an SMP")),
        }
        let wc = Wc {
            opcode: WcOpcode::Recv,
            byte_len: MAD_LEN as u32,
            src_qp: 0,
            qp_num: 0,
            slid: dr_slid,
            ..Wc::default()
        };
        let drops = self.gsi.port.stats.mkey_drops;
        let (r, out) = self.process_mad(now, 0, PORT, Some(&wc), None, &smp);
        if r.contains(MadResult::SUCCESS | MadResult::REPLY) {
            Ok(out)
        } else if self.gsi.port.stats.mkey_drops != drops {
            Err(VerbError::new(
                VERB,
                Errno::Inval,
                "dropped by the SMA (M_Key violation)",
            ))
        } else {
            Err(VerbError::new(VERB, Errno::Inval, "the SMA did not answer"))
        }
    }

    /// Registers a MAD agent (libibumad `umad_register`). Fails with EINVAL when
    /// another agent already has one of the methods of that class and version.
    pub fn gsi_register(&mut self, reg: Option<Registration>) -> VerbResult<AgentId> {
        if let Some(r) = reg {
            let clash = self.gsi.agents.values().filter_map(|a| a.reg).any(|o| {
                o.mgmt_class == r.mgmt_class
                    && o.class_version == r.class_version
                    && o.methods & r.methods != 0
            });
            if clash {
                return Err(VerbError::new(
                    "gsi_register",
                    Errno::Inval,
                    "a method of this class is already registered",
                ));
            }
        }
        let id = self.gsi.next_agent;
        self.gsi.next_agent = self.gsi.next_agent.wrapping_add(1).max(1);
        self.gsi.agents.insert(
            id,
            Agent {
                reg,
                queue: VecDeque::new(),
            },
        );
        Ok(AgentId(id))
    }

    /// Unregisters an agent; MADs still queued for it are dropped.
    pub fn gsi_unregister(&mut self, agent: AgentId) -> VerbResult<()> {
        self.gsi
            .agents
            .remove(&agent.0)
            .map(|_| ())
            .ok_or(VerbError::new(
                "gsi_unregister",
                Errno::Inval,
                "no such agent",
            ))
    }

    /// Sends a MAD from QP1 (`umad_send`). A request's TransactionID gets the agent's
    /// id in its high 32 bits, so the response finds the agent.
    pub fn gsi_send(&mut self, agent: AgentId, dest: GsiDest, mad: &Mad) -> VerbResult<()> {
        self.gsi_send_tid(agent, dest, mad, true)
    }

    /// Sends a MAD from QP1 with its TransactionID as given: for a sender that forms
    /// its own, as the kernel's CM does (cm.c `cm_form_tid` for its requests, the
    /// request's TransactionID echoed in REP, REJ, MRA and DREP), sending through
    /// `ib_post_send_mad` with no rewrite.
    pub fn gsi_send_as_is(&mut self, agent: AgentId, dest: GsiDest, mad: &Mad) -> VerbResult<()> {
        self.gsi_send_tid(agent, dest, mad, false)
    }

    fn gsi_send_tid(
        &mut self,
        agent: AgentId,
        dest: GsiDest,
        mad: &Mad,
        stamp_tid: bool,
    ) -> VerbResult<()> {
        const VERB: &str = "gsi_send";
        if !self.gsi.agents.contains_key(&agent.0) {
            return Err(VerbError::new(VERB, Errno::Inval, "no such agent"));
        }
        let src = pick_sgid(&self.config().gids, dest.dgid, dest.sgid_index).ok_or(
            VerbError::new(VERB, Errno::Inval, "no source GID for this destination"),
        )?;
        let mut m = *mad;
        if stamp_tid && !super::response_mad(&m) {
            let mut h = MadHeader::new_unchecked(&mut m[..]);
            let tid = h.transaction_id();
            h.set_transaction_id((u64::from(agent.0) << 32) | (tid & 0xffff_ffff));
        }
        let sp = self.gsi_src_port();
        // An AH / destination whose source GID index names a RoCE v1 entry sends the
        // MAD as RoCE v1 (as a UD QP does, `qp.rs`; the kernel's `ib_create_send_mad`
        // takes the AH's GID type the same way).
        let roce_v1 = dest
            .sgid_index
            .is_some_and(|i| self.config().gid_roce_v1.get(usize::from(i)) == Some(&true));
        self.gsi.build(
            &mut self.counters,
            src,
            sp,
            (dest.dgid, dest.qpn, dest.qkey),
            &m,
            roce_v1,
        );
        Ok(())
    }

    /// The next MAD received for an agent.
    pub fn gsi_recv(&mut self, agent: AgentId) -> Option<GsiRecv> {
        self.gsi.agents.get_mut(&agent.0)?.queue.pop_front()
    }

    /// Puts a received MAD back at the front of an agent's queue (a waiter that took
    /// it while looking for something else).
    pub fn gsi_requeue(&mut self, agent: AgentId, r: GsiRecv) {
        if let Some(a) = self.gsi.agents.get_mut(&agent.0) {
            a.queue.push_front(r);
        }
    }

    /// The next trap the port raised (for local listeners).
    pub fn poll_trap(&mut self) -> Option<Trap> {
        self.gsi.port.poll_trap()
    }

    pub(crate) fn gsi_poll_transmit(&mut self) -> Option<Transmit> {
        self.gsi.tx.pop_front()
    }

    /// A datagram for QP1.
    pub(crate) fn gsi_datagram(&mut self, now: Nanos, pkt: &Packet<&[u8]>, d: &Datagram<'_>) {
        let bth = pkt.bth();
        if bth.pkey() & 0x7fff != GSI_PKEY & 0x7fff {
            self.counters.rx_bad_pkey += 1;
            return;
        }
        if bth.opcode() != Opcode::UD_SEND_ONLY {
            self.counters.rx_wrong_transport += 1;
            return;
        }
        let Some(deth) = pkt.deth() else {
            self.counters.rx_malformed += 1;
            return;
        };
        if deth.qkey() != GSI_QKEY {
            self.counters.rx_bad_qkey += 1;
            return;
        }
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += d.payload.len() as u64;
        let Ok(mad) = <Mad>::try_from(pkt.payload()) else {
            // A MAD is exactly 256 bytes (IBTA 13.4.2).
            self.gsi.port.stats.gsi_dropped += 1;
            return;
        };
        let wc = Wc {
            opcode: WcOpcode::Recv,
            byte_len: (crate::GRH_AREA + MAD_LEN) as u32,
            qp_num: GSI_QPN,
            src_qp: deth.src_qp(),
            wc_flags: WcFlags::GRH,
            ..Wc::default()
        };
        let grh = crate::grh_area(d, d.payload.len());
        self.gsi_receive(now, wc, grh, mad);
    }

    /// The GSI receive path for one MAD (kernel `ib_mad_recv_done`).
    pub fn gsi_receive(&mut self, now: Nanos, wc: Wc, grh: GrhArea, mad: Mad) {
        if !valid_on_gsi(&mad) {
            self.gsi.port.stats.gsi_dropped += 1;
            return;
        }
        self.gsi.port.stats.gsi_received += 1;
        let (r, out) = self.process_mad(now, 0, PORT, Some(&wc), Some(&grh), &mad);
        let requester = (super::grh_sgid(&grh), wc.src_qp, GSI_QKEY);
        let local = super::grh_dgid(&grh);
        let gids = self.config().gids.clone();
        let src = if gids.contains(&local) {
            Some(local)
        } else {
            pick_sgid(&gids, requester.0, None)
        };
        let sp = self.gsi_src_port();
        // Answers go back over the network type the request came in on: a RoCE v1 GRH
        // (IPVer 6, NxtHdr 0x1B, IBTA 8.3.1) in the area means RoCE v1 (the kernel's
        // `ib_create_ah_from_wc` picks the v1 GID of the receiving port the same way).
        let v1 = grh[0] >> 4 == 6 && grh[6] == rverbs_wire::grh::NEXT_HEADER_BTH;
        if r.contains(MadResult::SUCCESS) {
            if r.contains(MadResult::CONSUMED) {
                return;
            }
            if r.contains(MadResult::REPLY) {
                if let Some(src) = src {
                    self.gsi
                        .build(&mut self.counters, src, sp, requester, &out, v1);
                }
                return;
            }
        }
        if let Some(agent) = self.gsi.find_agent(&mad) {
            if !self.gsi.deliver(agent, GsiRecv { wc, grh, mad }) {
                self.gsi.port.stats.gsi_dropped += 1;
            }
            return;
        }
        match (
            r.contains(MadResult::SUCCESS),
            unmatched_response(&mad),
            src,
        ) {
            (true, Some(resp), Some(src)) => {
                self.gsi.port.stats.gsi_unsupported_replies += 1;
                self.gsi
                    .build(&mut self.counters, src, sp, requester, &resp, v1);
            }
            _ => self.gsi.port.stats.gsi_dropped += 1,
        }
    }
}
