//! Management datagrams: the device's `process_mad` (SMA, PMA, BMA) and the GSI (QP1).
//!
//! [`MadPort::process_mad`] follows the kernel's `ib_device_ops.process_mad`
//! (`include/rdma/ib_verbs.h`, as extended by the 2005 openib "process_mad extension":
//! the received work completion and GRH are passed in, so key-violation traps can name
//! the offender). Flags are today's [`flags::IGNORE_MKEY`] and [`flags::IGNORE_BKEY`];
//! the result is a set of [`MadResult`] bits (kernel `ib_mad.h` `IB_MAD_RESULT_*`).
//!
//! * SMA, classes 0x01 / 0x81 ([`sma`]): NodeInfo, NodeDescription, PortInfo, GUIDInfo,
//!   P_KeyTable, with the M_Key rules of the kernel's qib/hfi1 `check_mkey` and
//!   Trap 256;
//! * PMA, class 0x04 ([`pma`]): ClassPortInfo, PortCounters, PortCountersExtended fed by
//!   the engine's [`Counters`];
//! * BMA, class 0x05 ([`bma`]): ClassPortInfo (the trap destination) and BKeyInfo under
//!   the B_Key, with BM Trap 259;
//! * everything else is left to the GSI's agents ([`gsi`]).

pub mod bma;
/// The GSI (QP1): MAD receive, dispatch, responses and agents.
pub mod gsi;
pub mod pma;
pub mod sma;

use crate::counters::Counters;
use crate::types::{Nanos, Wc};
use rverbs_wire::grh::Gid;
use rverbs_wire::mad::notice::{notice_type, producer_type, NoticeRepr};
use rverbs_wire::mad::{attr, method, status, MadHeader, MAD_LEN};
use std::collections::VecDeque;

/// One MAD, always 256 bytes.
pub type Mad = [u8; MAD_LEN];

/// The 40-byte network-header area of a received UD datagram (see
/// [`crate::grh_area`]): an IPv6 header, or 20 zero bytes and an IPv4 header. This is
/// what the kernel hands `process_mad` as `in_grh` on RoCE.
pub type GrhArea = [u8; crate::GRH_AREA];

/// `process_mad` flags (kernel `include/rdma/ib_mad.h` `enum ib_process_mad_flags`).
pub mod flags {
    /// Skip the M_Key check (the caller is trusted, e.g. a local query).
    pub const IGNORE_MKEY: u32 = 1;
    /// Skip the B_Key check.
    pub const IGNORE_BKEY: u32 = 2;
}

/// What `process_mad` did (kernel `ib_mad.h` `IB_MAD_RESULT_*`: FAILURE 0,
/// SUCCESS 1 << 0, REPLY 1 << 1, CONSUMED 1 << 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MadResult(pub u32);

impl MadResult {
    /// Nothing was done (`IB_MAD_RESULT_FAILURE`).
    pub const FAILURE: MadResult = MadResult(0);
    /// The MAD was looked at (`IB_MAD_RESULT_SUCCESS`).
    pub const SUCCESS: MadResult = MadResult(1);
    /// `out_mad` holds a response to send (`IB_MAD_RESULT_REPLY`).
    pub const REPLY: MadResult = MadResult(2);
    /// The MAD was used up (dropped on purpose): nobody else gets it
    /// (`IB_MAD_RESULT_CONSUMED`).
    pub const CONSUMED: MadResult = MadResult(4);

    /// Every bit of `other` is set.
    pub const fn contains(self, other: MadResult) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for MadResult {
    type Output = MadResult;
    fn bitor(self, rhs: MadResult) -> MadResult {
        MadResult(self.0 | rhs.0)
    }
}

/// Identity of the node, reported by NodeInfo / NodeDescription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    /// NodeGUID (also the PortGUID and SystemImageGUID of the single port).
    pub node_guid: u64,
    /// NodeDescription (at most 64 bytes are reported).
    pub description: String,
    /// VendorID (24 bits).
    pub vendor_id: u32,
    /// DeviceID.
    pub device_id: u16,
    /// Revision.
    pub revision: u32,
}

impl Default for NodeIdentity {
    fn default() -> Self {
        NodeIdentity {
            node_guid: 0,
            description: "rverbs soft RoCE".into(),
            vendor_id: 0,
            device_id: 0,
            revision: 1,
        }
    }
}

/// A trap the port raised, as the complete Trap MAD it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trap {
    /// The Trap(Notice) MAD: an SMP (class 0x01) for SM traps, a BM MAD for BM traps.
    pub mad: Mad,
}

impl Trap {
    /// Management class of the trap MAD.
    pub fn class(&self) -> u8 {
        self.mad[1]
    }

    /// Trap number of the Notice it carries.
    pub fn number(&self) -> u16 {
        u16::from_be_bytes([self.mad[68], self.mad[69]])
    }
}

/// Counters the MAD layer keeps itself (the traffic counters live in [`Counters`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MadStats {
    /// MADs received on QP1 that were dropped: bad version/class for QP1, bad size,
    /// no agent and no automatic answer, an agent queue full (PMA QP1Dropped).
    pub gsi_dropped: u64,
    /// MADs received on QP1 and accepted.
    pub gsi_received: u64,
    /// MADs sent from QP1.
    pub gsi_sent: u64,
    /// Automatic "unsupported method/attribute" GetResps sent.
    pub gsi_unsupported_replies: u64,
    /// Traps raised (before rate limiting).
    pub traps_raised: u64,
    /// Traps not sent because of the rate limit (kernel qib `qib_send_trap`, o14-2).
    pub traps_suppressed: u64,
    /// BM MADs dropped for a wrong B_Key.
    pub bkey_drops: u64,
    /// SMPs dropped for a wrong M_Key.
    pub mkey_drops: u64,
}

/// The MAD state of one port: the SMA's port attributes and keys, the PMA's counter
/// baselines, the BMA's keys and trap destination, and the traps raised.
#[derive(Debug, Clone)]
pub struct MadPort {
    /// Node identity (NodeInfo, NodeDescription).
    pub node: NodeIdentity,
    pub(crate) sma: sma::SmaState,
    pub(crate) pma: pma::PmaState,
    pub(crate) bma: bma::BmaState,
    /// Earliest time the next SM trap may be sent (kernel qib `trap_timeout`).
    trap_allowed_at: Option<Nanos>,
    /// The same for BM traps, which go to another manager (the BM trap destination)
    /// and have their own limit, so an SM trap never silences a BM one.
    bm_trap_allowed_at: Option<Nanos>,
    traps: VecDeque<Trap>,
    /// BM traps to send over the GSI: (TrapGID, TrapQP, TrapQKey, MAD).
    pub(crate) outgoing: VecDeque<(Gid, u32, u32, Mad)>,
    /// MAD statistics.
    pub stats: MadStats,
    /// The port's GID 0, used as IssuerGID of BM traps when no GRH names the
    /// receiving address.
    pub(crate) port_gid: Gid,
}

/// Most traps kept for local listeners; older ones are dropped first.
pub const MAX_QUEUED_TRAPS: usize = 64;

/// The port number of the single soft port.
pub const PORT: u8 = 1;

impl MadPort {
    /// A port with the given identity, keys all zero (no protection).
    pub fn new(node: NodeIdentity) -> Self {
        MadPort {
            node,
            sma: sma::SmaState::default(),
            pma: pma::PmaState::default(),
            bma: bma::BmaState::default(),
            trap_allowed_at: None,
            bm_trap_allowed_at: None,
            traps: VecDeque::new(),
            outgoing: VecDeque::new(),
            stats: MadStats::default(),
            port_gid: Gid::ZERO,
        }
    }

    /// The kernel's `process_mad`: handles `in_mad` for `port` and says what it did.
    ///
    /// `counters` are the port's traffic counters (the PMA reads and clears them);
    /// `in_wc` / `in_grh` describe how the MAD arrived (both `None` for a local call,
    /// which skips the B_Key check as in the kernel). `now` drives the M_Key / B_Key
    /// lease timers and the trap rate limit.
    #[allow(clippy::too_many_arguments)]
    pub fn process_mad(
        &mut self,
        now: Nanos,
        counters: &Counters,
        mad_flags: u32,
        port: u8,
        in_wc: Option<&Wc>,
        in_grh: Option<&GrhArea>,
        in_mad: &Mad,
    ) -> (MadResult, Mad) {
        let mut out = *in_mad;
        let h = MadHeader::new_unchecked(&in_mad[..]);
        // The device has one port: the kernel's core checks the port number before it
        // calls a driver's process_mad (`rdma_is_port_valid`); answering for port 2
        // would report port 1's counters and PortInfo as port 2's.
        if h.base_version() != rverbs_wire::mad::BASE_VERSION || port != PORT {
            return (MadResult::FAILURE, out);
        }
        use rverbs_wire::mad::class;
        let class = h.mgmt_class();
        let ours = matches!(
            class,
            class::SUBN_LID_ROUTED | class::SUBN_DIRECTED_ROUTE | class::PERF_MGMT | class::BM
        );
        // Every class this port answers is at class version 1; a Get or Set of another
        // version is answered with status 0x0004 (kernel include/rdma/ib_mad.h
        // IB_MGMT_MAD_STATUS_BAD_VERSION). Nothing else is: a response (or a Trap,
        // Report or TrapRepress) is never answered (the kernel's
        // `generate_unmatched_resp` answers only Get and Set; mlx4/mlx5 `process_mad`
        // pass other PMA methods through): answered, a GetResp of another version sent
        // back to a port that answers the same way would bounce between the two
        // forever. Such a MAD goes on to the agents.
        if ours && h.class_version() != 1 {
            if matches!(h.method(), method::GET | method::SET) {
                let r = reply_status(&mut out, status::BAD_VERSION);
                return (r, out);
            }
            return (MadResult::SUCCESS, out);
        }
        let result = match class {
            rverbs_wire::mad::class::SUBN_LID_ROUTED
            | rverbs_wire::mad::class::SUBN_DIRECTED_ROUTE => {
                sma::process(self, now, counters, mad_flags, port, in_wc, &mut out)
            }
            rverbs_wire::mad::class::PERF_MGMT => pma::process(self, counters, port, &mut out),
            rverbs_wire::mad::class::BM => {
                bma::process(self, now, mad_flags, in_wc, in_grh, &mut out)
            }
            _ => MadResult::SUCCESS,
        };
        (result, out)
    }

    /// The next trap raised for local listeners (oldest first).
    pub fn poll_trap(&mut self) -> Option<Trap> {
        self.traps.pop_front()
    }

    /// Whether a BM trap destination is set (BM ClassPortInfo TrapGID / TrapQP).
    pub fn bm_trap_destination(&self) -> Option<(Gid, u32, u32)> {
        self.bma.trap_destination()
    }

    /// Current M_Key (PortInfo).
    pub fn m_key(&self) -> u64 {
        self.sma.m_key
    }

    /// Current B_Key (BKeyInfo).
    pub fn b_key(&self) -> u64 {
        self.bma.b_key
    }

    /// Sets the B_Key and its protect bit directly (the administrator's local path,
    /// as a BM Set(BKeyInfo) with the right key would).
    pub fn set_b_key(&mut self, key: u64, protect: bool) {
        self.bma.b_key = key;
        self.bma.protect = protect;
    }

    /// Sets the M_Key and protect bits directly (local administration).
    pub fn set_m_key(&mut self, key: u64, protect_bits: u8) {
        self.sma.m_key = key;
        self.sma.protect_bits = protect_bits & 3;
    }

    /// M_KeyViolations (PortInfo).
    pub fn m_key_violations(&self) -> u16 {
        self.sma.m_key_violations
    }

    /// B_KeyViolations (BKeyInfo).
    pub fn b_key_violations(&self) -> u16 {
        self.bma.violations
    }

    /// Queues a trap subject to the port's rate limit: one trap per
    /// 4.096 us * 2^SubnetTimeOut (kernel qib `qib_send_trap`, o14-2), counted per
    /// class: qib's limiter is its SMA's (QP0) alone, and a BM trap goes to another
    /// manager. Returns whether it was queued.
    pub(crate) fn raise_trap(&mut self, now: Nanos, trap: Trap) -> bool {
        self.stats.traps_raised += 1;
        let timeout_ns = 4096u64 << self.sma.subnet_timeout.min(31);
        let allowed_at = if trap.class() == rverbs_wire::mad::class::BM {
            &mut self.bm_trap_allowed_at
        } else {
            &mut self.trap_allowed_at
        };
        if allowed_at.is_some_and(|t| now < t) {
            self.stats.traps_suppressed += 1;
            return false;
        }
        *allowed_at = Some(now.saturating_add(timeout_ns / 1000 * 1000));
        if trap.class() == rverbs_wire::mad::class::BM {
            if let Some((gid, qp, qkey)) = self.bma.trap_destination() {
                if self.outgoing.len() < MAX_QUEUED_TRAPS {
                    self.outgoing.push_back((gid, qp, qkey, trap.mad));
                }
            }
        }
        if self.traps.len() >= MAX_QUEUED_TRAPS {
            self.traps.pop_front();
        }
        self.traps.push_back(trap);
        true
    }
}

/// Turns `mad` into its GetResp (kernel qib/hfi1 `reply()`): method GetResp, and the
/// direction bit for directed-route SMPs.
pub(crate) fn reply(mad: &mut Mad) -> MadResult {
    let mut h = MadHeader::new_unchecked(&mut mad[..]);
    h.set_method(method::GET_RESP);
    if h.mgmt_class() == rverbs_wire::mad::class::SUBN_DIRECTED_ROUTE {
        h.set_dr_direction(true);
    }
    MadResult::SUCCESS | MadResult::REPLY
}

/// ORs `code` into the status word and replies.
pub(crate) fn reply_status(mad: &mut Mad, code: u16) -> MadResult {
    let mut h = MadHeader::new_unchecked(&mut mad[..]);
    let s = h.status();
    h.set_status(s | code);
    reply(mad)
}

/// The automatic answer of the kernel's GSI to a MAD nobody handles (`core/mad.c`
/// `generate_unmatched_resp`): Get and Set get a GetResp with status 0x000C
/// (unsupported method/attribute), directed-route SMPs with the D bit too; other
/// methods get nothing.
pub fn unmatched_response(in_mad: &Mad) -> Option<Mad> {
    let h = MadHeader::new_unchecked(&in_mad[..]);
    if h.method() != method::GET && h.method() != method::SET {
        return None;
    }
    let mut out = *in_mad;
    let mut o = MadHeader::new_unchecked(&mut out[..]);
    o.set_method(method::GET_RESP);
    let mut s = status::METHOD_ATTR_UNSUPPORTED;
    if h.mgmt_class() == rverbs_wire::mad::class::SUBN_DIRECTED_ROUTE {
        s |= status::DR_DIRECTION;
    }
    o.set_status(s);
    Some(out)
}

/// Whether a MAD is a response, which the MAD layer routes by TransactionID to the
/// agent that sent the request and whose TransactionID it leaves alone (kernel
/// `ib_response_mad`, used by `find_mad_agent` and `ib_umad_write`): the R bit of the
/// method, TrapRepress (the answer to a Trap), and a BM Send whose attribute modifier
/// has the response bit (`IB_BM_ATTR_MOD_RESP`, bit 0).
pub fn response_mad(mad: &Mad) -> bool {
    let h = MadHeader::new_unchecked(&mad[..]);
    h.is_response()
        || h.method() == method::TRAP_REPRESS
        || (h.mgmt_class() == rverbs_wire::mad::class::BM && h.attribute_modifier() & 1 != 0)
}

/// A generic security Notice from a CA (IBTA 13.4.8.2), for traps 256 and 259.
pub(crate) fn security_notice(trap_number: u16, issuer_lid: u16) -> NoticeRepr {
    NoticeRepr {
        is_generic: true,
        notice_type: notice_type::SECURITY,
        producer_type_or_vendor_id: producer_type::CA,
        trap_number_or_device_id: trap_number,
        issuer_lid,
        notice_toggle: false,
        notice_count: 0,
        data_details: [0; 54],
    }
}

/// A Trap(Notice) MAD header for `class` (TID chosen by the sender).
pub(crate) fn trap_header(class: u8, tid: u64) -> rverbs_wire::mad::MadHeaderRepr {
    rverbs_wire::mad::MadHeaderRepr {
        base_version: 1,
        mgmt_class: class,
        class_version: 1,
        method: method::TRAP,
        status: 0,
        class_specific: 0,
        transaction_id: tid,
        attribute_id: attr::NOTICE,
        attribute_modifier: 0,
    }
}

/// The source GID of a GRH area (IPv6 header, or IPv4 header at +20 mapped to
/// `::ffff:a.b.c.d`), as `ibv_init_ah_from_wc` reads it.
pub fn grh_sgid(area: &GrhArea) -> Gid {
    grh_addr(area, true)
}

/// The destination GID of a GRH area.
pub fn grh_dgid(area: &GrhArea) -> Gid {
    grh_addr(area, false)
}

fn grh_addr(area: &GrhArea, src: bool) -> Gid {
    if area[0] >> 4 == 6 {
        let at = if src { 8 } else { 24 };
        let mut g = [0u8; 16];
        g.copy_from_slice(&area[at..at + 16]);
        Gid(g)
    } else {
        let at = if src { 32 } else { 36 };
        Gid::from(std::net::Ipv4Addr::new(
            area[at],
            area[at + 1],
            area[at + 2],
            area[at + 3],
        ))
    }
}

#[cfg(test)]
mod tests;
