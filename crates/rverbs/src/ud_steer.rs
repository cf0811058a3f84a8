//! Flow steering of RoCE v2 UD datagrams: `Qp::create_flow` on a UD QP.
//!
//! The kernel's flows on UD QPs steer IP traffic to the QP (IPoIB's model). Here a flow
//! on a UD QP steers received **RoCE v2 UD datagrams** by their outer headers: each one
//! (BTH transport UD, destination QP other than the GSI's QP1) is matched, before the
//! engine sees it, as the frame it arrived in:
//!
//! * **ETH**: the context receives through UDP sockets, which do not show the Ethernet
//!   header, so the frame's MAC addresses are taken as `00:00:00:00:00:00`, its
//!   EtherType is 0x0800 or 0x86DD from the IP version and it carries no VLAN tag. An
//!   ETH spec matching the EtherType works; one asking for a particular (non-zero) MAC
//!   address or a VLAN tag never matches.
//! * **IPV4 / IPV4_EXT / IPV6**: the addresses, TTL / hop limit, TOS / traffic class
//!   and flow label as received (protocol 17).
//! * **UDP**: the source port as received, destination port 4791. TCP and tunnel specs
//!   never match.
//!
//! A datagram a NORMAL rule takes goes to the rule's QP instead of the QP its BTH names
//! (priorities as for raw frames: the lowest priority value wins; a DONT_TRAP rule's QP
//! gets a copy and the datagram goes on). SNIFFER rules get a copy of every datagram. A
//! DROP rule drops it (COUNT counts what its rule matched). A datagram no rule takes
//! goes to its BTH destination QP as usual. The receiving QP's Q_Key, state and receive
//! queue rules apply unchanged. Not supported on UD QPs (EOPNOTSUPP): ALL_DEFAULT and
//! MC_DEFAULT rules (a datagram nobody steers already has its QP), EGRESS rules and TAG
//! (UD completions carry no flow tag here).

use rverbs_engine::{Datagram, Engine, Nanos};
use rverbs_flow::attr::{FlowAttr, FlowAttrType, FlowFlags};
use rverbs_flow::classify::{Classifier, Direction, FlowId, Verdict};
use rverbs_flow::error::FlowError;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

/// The UD flow table of a context.
#[derive(Default)]
pub(crate) struct UdSteering {
    table: RwLock<Table>,
    /// Flows installed (the driver skips steering when 0).
    active: AtomicUsize,
    /// Datagrams a DROP rule dropped.
    pub(crate) dropped: AtomicU64,
    /// The classifier's scratch: the frame a datagram is matched as, and its verdict
    /// (taken only while flows are installed, always under the engine lock).
    scratch: Mutex<(Vec<u8>, Verdict)>,
}

#[derive(Default)]
struct Table {
    classifier: Classifier,
    /// Per flow: whether a match takes the datagram (NORMAL without DONT_TRAP).
    traps: HashMap<FlowId, bool>,
}

impl UdSteering {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs a validated `attr` for UD QP `qpn`.
    pub(crate) fn insert(&self, qpn: u32, attr: &FlowAttr) -> Result<FlowId, FlowError> {
        if matches!(
            attr.attr_type,
            FlowAttrType::AllDefault | FlowAttrType::McDefault
        ) {
            return Err(FlowError::notsupp(
                "ALL_DEFAULT / MC_DEFAULT rules on UD QPs (unsteered datagrams go to their BTH QP)",
            ));
        }
        if attr.flags.contains(FlowFlags::EGRESS) {
            return Err(FlowError::notsupp("EGRESS rules on UD QPs"));
        }
        if attr.tag().is_some() {
            return Err(FlowError::notsupp(
                "TAG on UD QPs (UD completions carry no flow tag)",
            ));
        }
        let traps =
            attr.attr_type == FlowAttrType::Normal && !attr.flags.contains(FlowFlags::DONT_TRAP);
        let mut t = self.write();
        let id = t.classifier.insert(qpn, attr)?;
        t.traps.insert(id, traps);
        self.active.fetch_add(1, Ordering::Release);
        Ok(id)
    }

    /// Removes a flow; false if it was gone.
    pub(crate) fn remove(&self, id: FlowId) -> bool {
        let mut t = self.write();
        let gone = t.classifier.remove(id);
        if gone {
            t.traps.remove(&id);
            self.active.fetch_sub(1, Ordering::Release);
        }
        gone
    }

    /// Removes every flow of a destroyed QP.
    pub(crate) fn remove_qp(&self, qpn: u32) {
        let mut t = self.write();
        let n = t.classifier.remove_qp(qpn);
        if n > 0 {
            let live: std::collections::HashSet<FlowId> =
                t.classifier.flows().into_iter().map(|f| f.id).collect();
            t.traps.retain(|id, _| live.contains(id));
            self.active.fetch_sub(n, Ordering::Release);
        }
    }

    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire) > 0
    }

    /// Steers one received datagram; false when it is not subject to steering (not
    /// UD, or to QP1), so the caller feeds it to the engine as usual. The table's read
    /// lock is held through delivery: once a flow's removal returned, no datagram is
    /// steered by it.
    pub(crate) fn steer(&self, engine: &mut Engine, now: Nanos, d: &Datagram<'_>) -> bool {
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (frame, v) = &mut *scratch;
        let p = d.payload;
        // BTH (IBTA 9.2): opcode byte 0 (transport in its top 3 bits, 011 = UD),
        // destination QP in bytes 5..8.
        if p.len() < 12 || p[0] >> 5 != 0b011 {
            return false;
        }
        let dest_qp = u32::from_be_bytes([0, p[5], p[6], p[7]]);
        if dest_qp == 1 {
            return false;
        }
        // The ICRC first, once: a corrupted datagram is one ICRC error, and no rule's
        // counter or drop sees it (each delivery below would check it again, and
        // count it again).
        if !engine.check_icrc(d) {
            return true;
        }
        let d = &Datagram {
            icrc_checked: true,
            ..*d
        };
        outer_frame(d, frame);
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        v.clear();
        if t.classifier.classify(frame, Direction::Ingress, v).is_err() {
            return false;
        }
        if v.dropped {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let taken = v
            .deliveries
            .iter()
            .any(|x| t.traps.get(&x.flow).copied().unwrap_or(false));
        for x in &v.deliveries {
            engine.handle_datagram_to(now, d, x.qpn);
        }
        if !taken {
            engine.handle_datagram(now, d);
        }
        true
    }
}

/// The Ethernet + IP + UDP frame a datagram arrived in, as far as a UDP socket shows
/// it (see the module docs), followed by the RoCE payload.
fn outer_frame(d: &Datagram<'_>, f: &mut Vec<u8>) {
    f.clear();
    f.extend_from_slice(&[0; 12]);
    let udp_len = (8 + d.payload.len()) as u16;
    match (d.src, d.dst) {
        (IpAddr::V4(s), IpAddr::V4(t)) => {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            // RFC 791 header, no options, DF (the device sends with DF).
            f.extend_from_slice(&[0x45, d.traffic_class]);
            f.extend_from_slice(&(20 + udp_len).to_be_bytes());
            f.extend_from_slice(&d.ipv4_id.unwrap_or(0).to_be_bytes());
            f.extend_from_slice(&[0x40, 0, d.hop_limit, 17, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&t.octets());
        }
        (s, t) => {
            let (s, t) = (v6(s), v6(t));
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            // RFC 8200 fixed header.
            let vtf = (6u32 << 28) | (u32::from(d.traffic_class) << 20) | (d.flow_label & 0xfffff);
            f.extend_from_slice(&vtf.to_be_bytes());
            f.extend_from_slice(&udp_len.to_be_bytes());
            f.extend_from_slice(&[17, d.hop_limit]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&t.octets());
        }
    }
    f.extend_from_slice(&d.src_port.to_be_bytes());
    f.extend_from_slice(&crate::ROCE_PORT.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(d.payload);
}

fn v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped(),
        IpAddr::V6(v) => v,
    }
}
