//! Raw mode: RAW_PACKET QPs and flow steering through the verbs API, backed by an
//! [`rverbs_raw::RawDevice`] on the context's interface.
//!
//! A context opened with [`crate::OpenOptions::raw_interface`] owns a raw device bound to
//! that interface (an `AF_PACKET` socket with a `TPACKET_V3` ring and the
//! [`rverbs_flow`] classifier; see the `rverbs-raw` crate). A RAW_PACKET [`crate::Qp`]
//! is a queue of that device: its posted receive buffers are filled with whole frames
//! by the device's receive thread, and its completions are moved into the QP's rverbs
//! [`crate::Cq`]s by the context's driver thread (woken by the receive thread) or by the
//! next [`crate::Cq::poll`], so polling, `req_notify` and completion channels work as
//! for any other QP. The RoCE engine's RC/UC/UD datapath does not see raw QPs at all.
//! The context's own RoCE frames (v2, v1, ARP, ND) do not pass through the device's
//! queues: they come through a socket of their own, read inline (`rawnet.rs`).

use crate::context::Shared;
use crate::error::Result;
use crate::rawnet::NextHop;
use rverbs_engine::{CqId, Engine, QpState, VecMemory, Wc, WcFlags, WcOpcode, WcStatus};
use rverbs_raw::{RawDevice, RawQp, RawRecvWr, RawWc, RawWcOpcode, RawWcStatus};
use rverbs_wire::ethernet::{ethertype, EthernetRepr, MacAddr};
use rverbs_wire::grh::{Gid, GRH_LEN};
use rverbs_wire::rocev1::{self, RoceV1Repr};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The raw side of a context.
pub(crate) struct RawMode {
    /// The interface the context is bound to.
    pub(crate) ifname: String,
    /// The device, or `None` when the process lacked CAP_NET_RAW when the context was
    /// opened (creating a RAW_PACKET QP or a flow is then EPERM, as in the kernel).
    pub(crate) dev: Option<RawDevice>,
    /// Live raw QPs, whose completions the driver moves into their CQs.
    pub(crate) qps: Mutex<Vec<Weak<RawQpInner>>>,
    /// RoCE v1 on the device (with `dev`): the GID table then has v1 entries.
    pub(crate) v1: Option<V1Port>,
    /// RoCE v2, v1, ARP and ND on the interface (with `dev`; `rawnet.rs`): sent
    /// through the device, received on a socket of their own, read inline.
    pub(crate) net: Option<crate::rawnet::NetPort>,
}

/// RoCE v1 (IBTA Annex A16) on the raw path: EtherType 0x8915 frames, received on the
/// RoCE socket of `rawnet.rs`, and the interface's MAC to send from.
pub(crate) struct V1Port {
    mac: MacAddr,
    /// Frames dropped: malformed or bad ICRC on receive, no neighbour on send.
    pub(crate) stats: V1Stats,
}

/// Counts of the RoCE v1 path.
#[derive(Default)]
pub(crate) struct V1Stats {
    pub(crate) rx_frames: AtomicU64,
    pub(crate) rx_malformed: AtomicU64,
    pub(crate) rx_icrc_errors: AtomicU64,
    pub(crate) tx_frames: AtomicU64,
    pub(crate) tx_no_neighbour: AtomicU64,
}

impl V1Port {
    fn open(ifname: &str) -> Result<V1Port> {
        let mac = crate::sys::interface_mac(ifname)
            .map(MacAddr)
            .map_err(|e| crate::Error::io("reading the raw interface's MAC address", e))?;
        Ok(V1Port {
            mac,
            stats: V1Stats::default(),
        })
    }

    /// One engine datagram marked `roce_v1` as an Ethernet frame with a blank
    /// destination MAC: GRH from the datagram's addresses (as GIDs) and path fields, the
    /// ICRC recomputed over it; and where the frame goes. `None` (counted) when the
    /// frame cannot be built.
    pub(crate) fn frame(&self, t: &rverbs_engine::Transmit) -> Option<(Vec<u8>, NextHop)> {
        let sgid = rverbs_engine::net::ip_to_gid(t.src);
        let dgid = rverbs_engine::net::ip_to_gid(t.dst);
        let repr = RoceV1Repr {
            traffic_class: t.traffic_class,
            flow_label: t.flow_label & 0xf_ffff,
            // 0 means the default, as on the UDP path.
            hop_limit: if t.hop_limit == 0 { 64 } else { t.hop_limit },
            sgid,
            dgid,
        };
        let eth = EthernetRepr {
            src: self.mac,
            dst: MacAddr([0; 6]),
            vlan_tci: None,
            ethertype: ethertype::ROCE_V1,
        };
        let mut frame = vec![0u8; eth.buffer_len() + GRH_LEN + t.payload.len()];
        match repr.emit_frame(&eth, &t.payload, &mut frame) {
            Ok(n) => {
                frame.truncate(n);
                Some((frame, v1_next_hop(&dgid)))
            }
            Err(_) => {
                self.count_no_neighbour();
                None
            }
        }
    }

    /// Counts a frame not sent for want of a neighbour.
    pub(crate) fn count_no_neighbour(&self) {
        self.stats.tx_no_neighbour.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a frame sent.
    pub(crate) fn count_tx(&self) {
        self.stats.tx_frames.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a received frame dropped as malformed before it could be parsed.
    pub(crate) fn count_malformed(&self) {
        self.stats.rx_frames.fetch_add(1, Ordering::Relaxed);
        self.stats.rx_malformed.fetch_add(1, Ordering::Relaxed);
    }

    /// Feeds one received v1 frame to the engine (capture and faults first): a frame
    /// that does not parse or whose ICRC is wrong is counted and dropped here (the
    /// engine checks the ICRC again). True if it reached the engine.
    pub(crate) fn receive_frame(
        &self,
        shared: &Shared,
        engine: &mut Engine,
        now: rverbs_engine::Nanos,
        frame: &mut [u8],
    ) -> bool {
        shared.record_frame(frame);
        let copies = match &shared.faults {
            Some(f) => {
                let from = frame.len().min(14);
                f.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .judge(&mut frame[from..], false)
                    .copies
            }
            None => 1,
        };
        let mut any = false;
        for _ in 0..copies {
            any |= self.receive_one(engine, now, frame);
        }
        any
    }

    /// One received v1 frame (after capture and faults).
    fn receive_one(&self, engine: &mut Engine, now: rverbs_engine::Nanos, frame: &[u8]) -> bool {
        {
            self.stats.rx_frames.fetch_add(1, Ordering::Relaxed);
            let p = match rocev1::parse_ethernet(frame) {
                Ok(Some(p)) => p,
                _ => {
                    self.stats.rx_malformed.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
            };
            if !p.icrc_ok {
                self.stats.rx_icrc_errors.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            let d = rverbs_engine::Datagram {
                src: rverbs_engine::net::gid_to_ip(p.grh.sgid),
                dst: rverbs_engine::net::gid_to_ip(p.grh.dgid),
                src_port: 0,
                hop_limit: p.grh.hop_limit,
                traffic_class: p.grh.traffic_class,
                flow_label: p.grh.flow_label,
                ipv4_id: None,
                roce_v1: true,
                icrc_checked: true,
                payload: p.packet.into_inner(),
            };
            engine.handle_datagram(now, &d);
            true
        }
    }
}

/// Where a RoCE v1 frame to `gid` goes, as the kernel's `rdma_addr_find_l2_eth_by_grh`
/// (`core/addr.c`) decides: a link-local GID (fe80::/64) whose interface ID is an
/// EUI-64 (`ff:fe` in its middle) gives the MAC directly (`rdma_link_local_addr` /
/// `rdma_get_ll_mac`); a multicast GID maps to 33:33 + its low 32 bits
/// (`rdma_is_multicast_addr` -> `ipv6_eth_mc_map`); any other GID is an IP address
/// (IPv4-mapped or IPv6) whose neighbour is resolved (ARP / ND, `neigh.rs`), as
/// `addr_resolve` does through the routing table's neighbour.
pub(crate) fn v1_next_hop(gid: &Gid) -> NextHop {
    let g = gid.octets();
    if g[0] == 0xff {
        return NextHop::Mac(MacAddr([0x33, 0x33, g[12], g[13], g[14], g[15]]));
    }
    if g[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0] && g[11] == 0xff && g[12] == 0xfe {
        return NextHop::Mac(MacAddr([g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]]));
    }
    NextHop::Resolve(rverbs_engine::net::gid_to_ip(*gid))
}

/// The MAC of `ip` in `/proc/net/arp` text: a complete entry (flags with ATF_COM, 0x2).
pub(crate) fn arp_lookup(table: &str, ip: std::net::Ipv4Addr) -> Option<MacAddr> {
    let want = ip.to_string();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f[0] != want {
            continue;
        }
        let flags = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).ok()?;
        if flags & 0x2 == 0 {
            continue;
        }
        let mut mac = [0u8; 6];
        let parts: Vec<&str> = f[3].split(':').collect();
        if parts.len() != 6 {
            continue;
        }
        for (m, p) in mac.iter_mut().zip(parts) {
            *m = u8::from_str_radix(p, 16).ok()?;
        }
        return Some(MacAddr(mac));
    }
    None
}

/// How the raw device receives for RAW_PACKET QPs and flows: the TPACKET_V3 ring
/// (default: fewest wake-ups and the best packet rate; a partly filled block waits up
/// to 2 ms, which only raw QPs see — RoCE itself comes through its own socket,
/// `rawnet.rs`), or `RVERBS_RAW_RX=plain` (one `recvmsg` per frame, handed over at
/// once).
fn rx_mode() -> rverbs_raw::RxMode {
    match std::env::var("RVERBS_RAW_RX").as_deref() {
        Ok("plain") => rverbs_raw::RxMode::Plain,
        _ => rverbs_raw::RxMode::Ring,
    }
}

impl RawMode {
    /// Opens raw mode on `ifname`: the device when the process holds CAP_NET_RAW, and
    /// with `v2` RoCE v2 on it too (`rawnet.rs`).
    pub(crate) fn open(ifname: &str, v2: bool) -> Result<RawMode> {
        let dev = if rverbs_raw::has_cap_net_raw() {
            Some(
                RawDevice::open_with(ifname, rx_mode())
                    .map_err(|e| crate::Error::io("opening the raw device (AF_PACKET)", e))?,
            )
        } else {
            None
        };
        let (v1, net) = match &dev {
            Some(d) => (
                Some(V1Port::open(ifname)?),
                Some(crate::rawnet::NetPort::open(d, ifname, v2)?),
            ),
            None => (None, None),
        };
        Ok(RawMode {
            ifname: ifname.to_string(),
            dev,
            qps: Mutex::new(Vec::new()),
            v1,
            net,
        })
    }
}

/// One scatter entry of a posted receive: a range of a region (the region's bytes stay
/// alive while the request is posted).
pub(crate) struct Target {
    /// The region's key when posted: a receive whose region was deregistered since
    /// completes with LOC_PROT_ERR and writes nothing (rule 4 of the crate docs).
    pub(crate) lkey: u32,
    pub(crate) region: Arc<VecMemory>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// A RAW_PACKET QP's state beside its [`RawQp`].
pub(crate) struct RawQpInner {
    pub(crate) raw: RawQp,
    /// The QP's protection domain: its receive buffers must be in it (and allow local
    /// write), as the engine checks for its own QPs.
    pub(crate) pd: rverbs_engine::PdId,
    pub(crate) send_cq: CqId,
    pub(crate) recv_cq: CqId,
    pub(crate) sq_sig_all: bool,
    pub(crate) max_recv_wr: usize,
    /// The QP's `cap` (scatter/gather and inline limits are checked as the engine does).
    pub(crate) cap: rverbs_engine::modify::QpCap,
    pub(crate) st: Mutex<RawQpState>,
    /// `st.state`, readable without `st`'s lock: the driver holds that lock while it
    /// waits for a region's lock to scatter a frame, so [`crate::Qp::state`] called
    /// inside that region's [`crate::Mr::with`] must not take it.
    pub(crate) state_now: AtomicU8,
}

const STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];

pub(crate) struct RawQpState {
    pub(crate) state: QpState,
    /// Receives posted before RTR: handed to the device when the QP reaches RTR (a raw
    /// QP's receive queue takes frames only from RTR on).
    pub(crate) held: VecDeque<(u64, Vec<Target>)>,
    /// Receives handed to the device, in order (the device completes them in order).
    pub(crate) posted: VecDeque<(u64, Vec<Target>)>,
    /// Completions made here (flushes), waiting to be moved into the CQs.
    pub(crate) local: VecDeque<(CqId, Wc)>,
}

impl RawQpInner {
    /// The QP's state, without taking `st`'s lock.
    pub(crate) fn state(&self) -> QpState {
        STATES[usize::from(self.state_now.load(Ordering::Acquire)).min(STATES.len() - 1)]
    }

    /// Sets the state (under `st`'s lock, so both copies agree).
    pub(crate) fn set_state(&self, st: &mut RawQpState, to: QpState) {
        st.state = to;
        let i = STATES
            .iter()
            .position(|s| *s == to)
            .unwrap_or(STATES.len() - 1);
        self.state_now.store(i as u8, Ordering::Release);
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, RawQpState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wc(&self, w: &RawWc) -> Wc {
        let mut flags = WcFlags::default();
        let mut flow_tag = 0;
        if let Some(t) = w.flow_tag {
            flags = WcFlags(flags.0 | WcFlags::WITH_FLOW_TAG.0);
            flow_tag = t;
        }
        if w.csum_ok {
            flags = WcFlags(flags.0 | WcFlags::IP_CSUM_OK.0);
        }
        Wc {
            wr_id: w.wr_id,
            status: match w.status {
                RawWcStatus::Success => WcStatus::Success,
                RawWcStatus::LocLenErr => WcStatus::LocLenErr,
                RawWcStatus::WrFlushErr => WcStatus::WrFlushErr,
            },
            opcode: match w.opcode {
                RawWcOpcode::Send => WcOpcode::Send,
                RawWcOpcode::Recv => WcOpcode::Recv,
            },
            byte_len: w.byte_len,
            qp_num: self.raw.qp_num(),
            wc_flags: flags,
            flow_tag,
            ..Wc::default()
        }
    }

    /// Moves this QP's completions into its CQs: received frames are scattered into
    /// the posted regions first (region lock after the engine lock, the device's order).
    pub(crate) fn drain(&self, engine: &mut Engine) -> bool {
        let mut st = self.lock();
        self.drain_locked(engine, &mut st)
    }

    /// [`RawQpInner::drain`] with the state already locked (engine lock first, then
    /// the state: the order every path takes).
    fn drain_locked(&self, engine: &mut Engine, st: &mut RawQpState) -> bool {
        let mut any = false;
        while let Some((cq, wc)) = st.local.pop_front() {
            let _ = engine.push_wc(cq, wc, false);
            any = true;
        }
        for w in self.raw.poll_cq(usize::MAX) {
            any = true;
            let wc = self.wc(&w);
            if w.opcode == RawWcOpcode::Recv {
                let Some((wr_id, targets)) = st.posted.pop_front() else {
                    continue;
                };
                debug_assert_eq!(wr_id, w.wr_id);
                let mut wc = wc;
                if w.status == RawWcStatus::Success {
                    let ok = |t: &Target| {
                        engine.lkey_allows(t.lkey, self.pd, rverbs_engine::Access::LOCAL_WRITE)
                    };
                    if targets.iter().all(ok) {
                        scatter(&w.buf[..w.byte_len as usize], &targets);
                    } else {
                        wc.status = WcStatus::LocProtErr;
                    }
                }
                let _ = engine.push_wc(self.recv_cq, wc, false);
            } else {
                let _ = engine.push_wc(self.send_cq, wc, false);
            }
        }
        any
    }

    /// Flushes every receive (held or posted) with WR_FLUSH_ERR, as entering ERR does.
    ///
    /// Receives the device completed before the flush (frames already in their
    /// buffers, completions not yet moved into the CQ by the driver thread) keep their
    /// SUCCESS and come first: the device's queue is taken back at once, then what it
    /// completed is drained (those are the oldest entries of `posted`, the device
    /// completes in order), and only the rest is flushed.
    pub(crate) fn flush(&self, engine: &mut Engine, st: &mut RawQpState) {
        let from_device = self.raw.flush_recv();
        self.drain_locked(engine, st);
        let mut flushed: Vec<u64> = st.held.drain(..).map(|(id, _)| id).collect();
        debug_assert_eq!(st.posted.len(), from_device.len());
        st.posted.clear();
        flushed.extend(from_device.iter().map(|w| w.wr_id));
        for wr_id in flushed {
            st.local.push_back((
                self.recv_cq,
                Wc {
                    wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    qp_num: self.raw.qp_num(),
                    ..Wc::default()
                },
            ));
        }
    }

    /// Discards every receive without a completion, as entering RESET does; receives
    /// the device completed before still complete (their frames are in place).
    pub(crate) fn reset(&self, engine: &mut Engine, st: &mut RawQpState) {
        self.raw.flush_recv();
        self.drain_locked(engine, st);
        st.posted.clear();
        st.held.clear();
    }

    /// Hands `wr` to the device's receive queue.
    pub(crate) fn post_to_device(
        &self,
        st: &mut RawQpState,
        wr_id: u64,
        targets: Vec<Target>,
    ) -> std::io::Result<()> {
        let len: usize = targets.iter().map(|t| t.len).sum();
        self.raw.post_recv(RawRecvWr {
            wr_id,
            buf: vec![0; len],
        })?;
        st.posted.push_back((wr_id, targets));
        Ok(())
    }
}

/// Copies `frame` into the scatter list `targets`, in order.
fn scatter(mut frame: &[u8], targets: &[Target]) {
    for t in targets {
        if frame.is_empty() {
            break;
        }
        let n = t.len.min(frame.len());
        t.region
            .with(|b| b[t.offset..t.offset + n].copy_from_slice(&frame[..n]));
        frame = &frame[n..];
    }
}

impl Shared {
    /// Moves the completions of every raw QP into their CQs and receives what waits on
    /// the RoCE socket (under the engine lock); true if anything moved.
    pub(crate) fn drain_raw(&self, engine: &mut Engine) -> bool {
        // RoCE v2 / v1, ARP and ND from the RoCE socket, inline.
        self.drain_raw_qps(engine) | self.net_receive(engine, self.now())
    }

    /// [`Shared::drain_raw`] without reading the RoCE socket: only the raw QPs'
    /// completions (no system call).
    pub(crate) fn drain_raw_qps(&self, engine: &mut Engine) -> bool {
        let Some(raw) = &self.raw else {
            return false;
        };
        let qps: Vec<Arc<RawQpInner>> = {
            let mut l = raw.qps.lock().unwrap_or_else(|e| e.into_inner());
            l.retain(|w| w.strong_count() > 0);
            l.iter().filter_map(Weak::upgrade).collect()
        };
        let mut any = false;
        for q in qps {
            any |= q.drain(engine);
        }
        any
    }

    /// Sends a RoCE v1 datagram through the raw device.
    pub(crate) fn v1_send(&self, t: &rverbs_engine::Transmit) {
        let Some(v1) = self.raw.as_ref().and_then(|r| r.v1.as_ref()) else {
            return;
        };
        if let Some((frame, hop)) = v1.frame(t) {
            self.net_send_v1(v1, frame, hop);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_destinations() {
        let mac = |g: Gid| match v1_next_hop(&g) {
            NextHop::Mac(m) => Some(m),
            NextHop::Resolve(_) => None,
        };
        let hop = |g: Gid| match v1_next_hop(&g) {
            NextHop::Mac(_) => None,
            NextHop::Resolve(ip) => Some(ip),
        };
        let v6 = |s: &str| Gid::from(s.parse::<std::net::Ipv6Addr>().unwrap());
        assert_eq!(
            mac(v6("fe80::5054:ff:fe77:2")),
            Some(MacAddr([0x52, 0x54, 0, 0x77, 0, 2]))
        );
        assert_eq!(
            mac(v6("ff0e::1:2:3")),
            Some(MacAddr([0x33, 0x33, 0, 2, 0, 3]))
        );
        // Link-local but not EUI-64, a global IPv6 GID and an IPv4-mapped one: resolved.
        assert_eq!(hop(v6("fe80::1")), Some("fe80::1".parse().unwrap()));
        assert_eq!(hop(v6("fd00::1")), Some("fd00::1".parse().unwrap()));
        let v4 = Gid::from(std::net::Ipv4Addr::new(10, 9, 0, 2));
        assert_eq!(hop(v4), Some("10.9.0.2".parse().unwrap()));
    }

    #[test]
    fn arp_table_lookup() {
        let t = "IP address       HW type     Flags       HW address            Mask     Device\n\
                 10.9.0.2         0x1         0x2         52:54:00:12:34:56     *        v0\n\
                 10.9.0.3         0x1         0x0         00:00:00:00:00:00     *        v0\n\
                 10.9.0.4         0x1         0x2         bad                   *        v0\n";
        let ip = |s: &str| s.parse().unwrap();
        assert_eq!(
            arp_lookup(t, ip("10.9.0.2")),
            Some(MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]))
        );
        assert_eq!(arp_lookup(t, ip("10.9.0.3")), None, "incomplete entry");
        assert_eq!(arp_lookup(t, ip("10.9.0.4")), None, "malformed entry");
        assert_eq!(arp_lookup(t, ip("10.9.0.5")), None);
        assert_eq!(arp_lookup("", ip("10.9.0.2")), None);
    }
}
