//! RoCE v2 on the raw device, and neighbour resolution for the whole raw path.
//!
//! A raw-mode context with CAP_NET_RAW sends and receives its RoCE v2 packets as whole
//! Ethernet frames on its interface instead of through UDP sockets:
//!
//! * **Send.** Ethernet + IPv4 (DF, the address vector's TTL and TOS, Identification 0,
//!   a real header checksum) or IPv6 (hop limit, traffic class, flow label) + UDP to
//!   port 4791 from the QP's entropy port (`rxe_qp.c` / `rdma_flow_label_to_udp_sport`,
//!   as the engine picks it), IPv6 with its UDP checksum
//!   ([`rverbs_wire::rocev2::RoceV2Repr`]). The engine's ICRC covers exactly that IPv4
//!   header (ID 0, DF, no options), so it is sent as is. The destination MAC comes from
//!   the neighbour cache (`neigh.rs`), which sends ARP requests (RFC 826) and Neighbor
//!   Solicitations (RFC 4861) itself and queues frames meanwhile. Multicast goes to the
//!   group's MAC (RFC 1112 6.4, RFC 2464 7), plus a local copy when this context joined
//!   the group (the kernel's `IP_MULTICAST_LOOP`; the raw device never sees its own
//!   frames). Packets to one of the context's own addresses, and to addresses outside
//!   the interface's prefixes (a router's business), go through the UDP socket as
//!   before: the kernel routes them (over `lo` for our own addresses).
//! * **Receive.** A plain `AF_PACKET` socket of its own on the interface (not the raw
//!   device's ring, which keeps serving RAW_PACKET QPs, flows and sniffers: they still
//!   see every frame) with a classic BPF socket filter ([`roce_filter`]) that lets only
//!   RoCE v2 (UDP port 4791), RoCE v1 (EtherType 0x8915), ARP and Neighbor Discovery
//!   frames for this host's link address (or broadcast / multicast) in. It is
//!   non-blocking and read inline, like the UDP sockets: under the engine lock by
//!   whichever thread receives (the driver thread, a poller, a thread asleep in
//!   `Cq::wait` on its descriptor), frame by frame with no thread hop and no queue in
//!   between. RoCE v2 frames are checked ([`rverbs_wire::rocev2::parse_frame`]: IP
//!   fragments, options and checksums, the UDP checksum, the ICRC over the real IP
//!   header, no Identification guessing), must be for one of our addresses or a joined
//!   group, and reach the engine with the real TTL, TOS, flow label and Identification.
//!   Every drop is counted ([`RawNetStats`]). The UDP sockets stay bound to port 4791
//!   (no ICMP port unreachable from the kernel) behind a socket filter that drops what
//!   arrived on this interface (`sys::drop_from_interface`), so nothing is handled twice.
//! * ARP and Neighbor Discovery packets feed the neighbour cache; the kernel receives
//!   them too (the raw device copies frames, it does not steal them) and answers
//!   requests for our addresses itself.
//!
//! `RVERBS_FAULTS` and `RVERBS_PCAP` see these frames as they see datagrams on the UDP
//! path (the capture of a raw-mode context is LINKTYPE_ETHERNET, see `capture.rs`).

pub(crate) mod filter;
pub(crate) mod neigh;
pub(crate) mod v1;

use crate::carrier::udp::Udp;
use crate::carrier::{Arrival, Carrier, Seal, Sink, TxQueue, Waker};
use crate::sys::IpMeta;
use filter::{is_icmpv6, roce_filter};
use neigh::{Lookup, Neighbours, Probe};
use rverbs_engine::{Nanos, Transmit};
use rverbs_raw::{RawDevice, RawPort, RawQp};
use rverbs_wire::arp::{self, ArpOp, ArpRepr};
use rverbs_wire::ethernet::{ethertype, EthernetFrame, EthernetRepr, MacAddr};
use rverbs_wire::ndisc::{self, NdRepr};
use rverbs_wire::rocev2::{self, RoceV2Repr, RxDrop};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use v1::V1Port;

/// Most frames one [`Shared::net_receive`] takes from the RoCE socket (bounded so a
/// flood cannot keep the engine lock and starve the timers).
const RX_BUDGET: usize = 256;

/// Counts of a raw-mode context's own network path ([`crate::Context::raw_net_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawNetStats {
    /// RoCE v2 frames taken from the raw device (and multicast copies to ourselves).
    pub rx_frames: u64,
    /// Of those, handed to the engine.
    pub rx_delivered: u64,
    /// Dropped: for another IP address or MAC address.
    pub rx_not_ours: u64,
    /// Dropped: truncated or inconsistent headers.
    pub rx_malformed: u64,
    /// Dropped: 802.1Q-tagged (bind the context to the VLAN interface instead).
    pub rx_vlan: u64,
    /// Dropped: IPv4 fragments.
    pub rx_fragments: u64,
    /// Dropped: IPv4 headers with options.
    pub rx_ip_options: u64,
    /// Dropped: wrong IPv4 header checksum.
    pub rx_ip_checksum: u64,
    /// Dropped: wrong UDP checksum.
    pub rx_udp_checksum: u64,
    /// Dropped: wrong ICRC (checked over the real IP header).
    pub rx_icrc_errors: u64,
    /// RoCE v2 frames sent on the raw device.
    pub tx_frames: u64,
    /// RoCE v2 packets sent through the UDP socket instead (to our own addresses, or
    /// outside the interface's prefixes).
    pub tx_via_socket: u64,
    /// Multicast frames also delivered to this context (it joined the group).
    pub tx_looped: u64,
    /// ARP requests and Neighbor Solicitations sent.
    pub neigh_probes: u64,
    /// ARP and ND packets received.
    pub neigh_rx: u64,
    /// Neighbour entries confirmed or learnt from them.
    pub neigh_learned: u64,
    /// Frames (RoCE v1 and v2) that waited for a neighbour.
    pub neigh_queued: u64,
    /// Frames dropped: their neighbour did not answer, or its queue was full.
    pub neigh_dropped: u64,
}

#[derive(Default)]
struct Counts {
    rx_frames: AtomicU64,
    rx_delivered: AtomicU64,
    rx_not_ours: AtomicU64,
    rx_malformed: AtomicU64,
    rx_vlan: AtomicU64,
    rx_fragments: AtomicU64,
    rx_ip_options: AtomicU64,
    rx_ip_checksum: AtomicU64,
    rx_udp_checksum: AtomicU64,
    rx_icrc_errors: AtomicU64,
    tx_frames: AtomicU64,
    tx_via_socket: AtomicU64,
    tx_looped: AtomicU64,
    neigh_probes: AtomicU64,
    neigh_rx: AtomicU64,
    neigh_learned: AtomicU64,
    neigh_queued: AtomicU64,
    neigh_dropped: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The raw device's IP side: RoCE v2 frames, ARP and ND.
pub(crate) struct NetPort {
    /// RoCE v2 goes through the raw device too (else only RoCE v1, ARP and ND do).
    pub(crate) v2: bool,
    /// Sends (through the raw device, so EGRESS rules and sniffers see them; it has no
    /// flows and receives nothing).
    qp: RawQp,
    /// The RoCE socket: receives what [`roce_filter`] lets in, non-blocking.
    rx: RawPort,
    /// Its receive buffer (used under the engine lock).
    rx_buf: Mutex<Vec<u8>>,
    pub(crate) mac: MacAddr,
    ifname: String,
    /// The ARP table of the interface's namespace, opened when the context was (sends
    /// run on whichever thread flushes, maybe in another namespace; a seq_file re-read
    /// from offset 0 shows the current table of the namespace it was opened in).
    arp_table: Option<Mutex<std::fs::File>>,
    neigh: Mutex<Neighbours>,
    /// Frames for this context itself (multicast loop), handled with received ones.
    local: Mutex<VecDeque<Vec<u8>>>,
    /// The interface's (address, prefix length) pairs: read when the context opens and
    /// by the driver's address re-scan, both in the interface's namespace (senders may
    /// run in another one, where `getifaddrs` would not see the interface).
    prefixes: Mutex<Vec<(IpAddr, u8)>>,
    counts: Counts,
}

impl NetPort {
    pub(crate) fn open(dev: &RawDevice, ifname: &str, v2: bool) -> crate::Result<NetPort> {
        let mac = crate::sys::interface_mac(ifname)
            .map(MacAddr)
            .map_err(|e| crate::Error::io("reading the raw interface's MAC address", e))?;
        let rx = RawPort::open_filtered(ifname, &roce_filter(v2))
            .map_err(|e| crate::Error::io("opening the RoCE AF_PACKET socket", e))?;
        let _ = rx.set_recv_buffer_size(4 << 20);
        // Room for a long READ response's burst when the process may raise the limit
        // (as the UDP sockets).
        let _ = crate::sys::force_recv_buffer(&rx, 64 << 20);
        Ok(NetPort {
            v2,
            qp: dev.create_qp(1),
            rx,
            rx_buf: Mutex::new(vec![0u8; rverbs_raw::MAX_FRAME + 4]),
            mac,
            ifname: ifname.to_string(),
            arp_table: std::fs::File::open("/proc/thread-self/net/arp")
                .ok()
                .map(Mutex::new),
            neigh: Mutex::new(Neighbours::default()),
            local: Mutex::new(VecDeque::new()),
            prefixes: Mutex::new(interface_prefixes(ifname)),
            counts: Counts::default(),
        })
    }

    /// The RoCE socket's descriptor (polled beside the UDP sockets).
    pub(crate) fn rx_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.rx)
    }

    pub(crate) fn stats(&self) -> RawNetStats {
        let c = &self.counts;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RawNetStats {
            rx_frames: l(&c.rx_frames),
            rx_delivered: l(&c.rx_delivered),
            rx_not_ours: l(&c.rx_not_ours),
            rx_malformed: l(&c.rx_malformed),
            rx_vlan: l(&c.rx_vlan),
            rx_fragments: l(&c.rx_fragments),
            rx_ip_options: l(&c.rx_ip_options),
            rx_ip_checksum: l(&c.rx_ip_checksum),
            rx_udp_checksum: l(&c.rx_udp_checksum),
            rx_icrc_errors: l(&c.rx_icrc_errors),
            tx_frames: l(&c.tx_frames),
            tx_via_socket: l(&c.tx_via_socket),
            tx_looped: l(&c.tx_looped),
            neigh_probes: l(&c.neigh_probes),
            neigh_rx: l(&c.neigh_rx),
            neigh_learned: l(&c.neigh_learned),
            neigh_queued: l(&c.neigh_queued),
            neigh_dropped: l(&c.neigh_dropped),
        }
    }

    fn lock_neigh(&self) -> std::sync::MutexGuard<'_, Neighbours> {
        self.neigh.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn prefixes(&self) -> std::sync::MutexGuard<'_, Vec<(IpAddr, u8)>> {
        self.prefixes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-reads the interface's prefixes (on the driver thread, in its namespace).
    pub(crate) fn refresh_prefixes(&self) {
        let p = interface_prefixes(&self.ifname);
        *self.prefixes() = p;
    }

    /// Whether `dst` is inside one of the interface's prefixes (IPv6 link-local always).
    fn on_link(&self, dst: IpAddr) -> bool {
        if let IpAddr::V6(v6) = dst {
            if v6.segments()[0] & 0xffc0 == 0xfe80 {
                return true;
            }
        }
        self.prefixes()
            .iter()
            .any(|&(a, len)| same_prefix(a, dst, len))
    }

    /// A complete entry of the kernel's ARP table for `ip` (IPv4 only: the kernel's
    /// IPv6 neighbour table is only readable through netlink).
    fn kernel_neighbour(&self, ip: IpAddr) -> Option<MacAddr> {
        let IpAddr::V4(v4) = ip else { return None };
        use std::io::{Read, Seek};
        let mut f = self
            .arp_table
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        f.rewind().ok()?;
        let mut s = String::new();
        f.read_to_string(&mut s).ok()?;
        v1::arp_lookup(&s, v4)
    }
}

/// Whether `a` and `b` share their first `len` bits (same family only).
fn same_prefix(a: IpAddr, b: IpAddr, len: u8) -> bool {
    let (a, b, bits): (u128, u128, u32) = match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a).into(), u32::from(b).into(), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    let len = u32::from(len).min(bits);
    if len == 0 {
        return true;
    }
    let shift = bits - len;
    (a >> shift) == (b >> shift)
}

/// The interface's addresses with their prefix lengths.
fn interface_prefixes(ifname: &str) -> Vec<(IpAddr, u8)> {
    let Ok(ifaces) = if_addrs::get_if_addrs() else {
        return Vec::new();
    };
    ifaces
        .iter()
        .filter(|i| i.name == ifname)
        .map(|i| match &i.addr {
            if_addrs::IfAddr::V4(v) => (IpAddr::V4(v.ip), v.prefixlen),
            if_addrs::IfAddr::V6(v) => (IpAddr::V6(v.ip), v.prefixlen),
        })
        .collect()
}

/// The Ethernet address of an IP multicast group (RFC 1112 6.4: 01:00:5e and the low
/// 23 bits; RFC 2464 7: 33:33 and the low 32 bits).
pub(crate) fn multicast_mac(group: IpAddr) -> MacAddr {
    match group {
        IpAddr::V4(g) => {
            let o = g.octets();
            MacAddr([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
        }
        IpAddr::V6(g) => ndisc::multicast_mac(g),
    }
}

/// Where a frame goes on the link.
pub(crate) enum NextHop {
    /// A MAC known without asking (multicast, EUI-64 link-local GIDs).
    Mac(MacAddr),
    /// A neighbour to resolve.
    Resolve(IpAddr),
}

impl RawNet {
    /// The raw device's RoCE path over `port` (and `v1`), beside the UDP carrier
    /// `udp` (the context's addresses and groups); `epoch`: the soft device's clock.
    pub(crate) fn new(
        port: NetPort,
        v1: Option<V1Port>,
        taps: Box<dyn FrameTap>,
        udp: Arc<Udp>,
        waker: Waker,
        epoch: std::time::Instant,
    ) -> RawNet {
        RawNet {
            port,
            v1,
            taps,
            udp,
            waker,
            epoch,
        }
    }

    fn net(&self) -> Option<&NetPort> {
        Some(&self.port)
    }

    fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    fn wake(&self) {
        self.waker.wake();
    }

    /// Whether RoCE v2 goes through the raw device.
    pub(crate) fn raw_v2(&self) -> bool {
        self.port.v2
    }

    /// The RoCE v1 port, when the raw device speaks it.
    pub(crate) fn v1(&self) -> Option<&V1Port> {
        self.v1.as_ref()
    }

    /// Counts of the raw RoCE v2 path and neighbour resolution.
    pub(crate) fn stats(&self) -> RawNetStats {
        self.port.stats()
    }

    /// Re-reads the interface's prefixes (on the driver thread, in its namespace).
    pub(crate) fn refresh_prefixes(&self) {
        self.port.refresh_prefixes();
    }

    /// Sends one RoCE v2 datagram of a raw-mode context as a frame. False when it is
    /// for the UDP socket instead (our own address, or off-link): the caller sends it
    /// there.
    pub(crate) fn net_send_v2(&self, t: &Transmit) -> bool {
        let Some(net) = self.net().filter(|n| n.v2) else {
            return false;
        };
        let now = self.now();
        let multicast = t.dst.is_multicast();
        if !multicast && (self.is_local_addr(t.dst) || !net.on_link(t.dst)) {
            bump(&net.counts.tx_via_socket);
            return false;
        }
        let repr = RoceV2Repr {
            src_mac: net.mac,
            dst_mac: if multicast {
                multicast_mac(t.dst)
            } else {
                MacAddr([0; 6])
            },
            src: t.src,
            dst: t.dst,
            src_port: t.src_port,
            // 0 means the default, as on the UDP path (1 to a group).
            hop_limit: match t.hop_limit {
                0 if multicast => 1,
                0 => 64,
                h => h,
            },
            traffic_class: t.traffic_class,
            flow_label: t.flow_label,
            // The engine's ICRC is for ID 0 with DF (`net::fill_icrc`).
            ipv4_ident: 0,
        };
        let mut frame = vec![0u8; repr.frame_len(t.payload.len())];
        if repr.emit_frame(&t.payload, &mut frame).is_err() {
            // Mixed address families or an oversized packet: nothing to send.
            bump(&net.counts.neigh_dropped);
            return true;
        }
        if multicast {
            if self.joined(t.dst) {
                bump(&net.counts.tx_looped);
                net.local
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_back(frame.clone());
                self.wake();
            }
            self.net_emit(net, &frame);
            return true;
        }
        self.net_output(net, frame, NextHop::Resolve(t.dst), now);
        true
    }

    /// Sends a RoCE v1 frame (destination MAC still blank) to `hop`.
    pub(crate) fn net_send_v1(&self, v1: &V1Port, frame: Vec<u8>, hop: NextHop) {
        match self.net() {
            Some(net) => self.net_output(net, frame, hop, self.now()),
            None => v1.count_no_neighbour(),
        }
    }

    /// Sends `frame` to `hop`: now when its MAC is known, else after resolution.
    fn net_output(&self, net: &NetPort, mut frame: Vec<u8>, hop: NextHop, now: Nanos) {
        let ip = match hop {
            NextHop::Mac(mac) => {
                frame[..6].copy_from_slice(&mac.0);
                self.net_emit(net, &frame);
                return;
            }
            NextHop::Resolve(ip) => ip,
        };
        // One lock for the lookup and the queueing, so a timer cannot drop the entry
        // between them.
        let mut neigh = net.lock_neigh();
        let l = neigh.lookup(ip, now, || net.kernel_neighbour(ip));
        let dropped = match l {
            Lookup::Pending { .. } => Some(neigh.enqueue(ip, std::mem::take(&mut frame))),
            Lookup::Mac { .. } => None,
        };
        drop(neigh);
        match l {
            Lookup::Mac { mac, probe } => {
                frame[..6].copy_from_slice(&mac.0);
                self.net_emit(net, &frame);
                if probe {
                    self.net_probe(
                        net,
                        Probe {
                            ip,
                            unicast: Some(mac),
                        },
                    );
                }
            }
            Lookup::Pending { probe } => {
                bump(&net.counts.neigh_queued);
                self.count_neigh_drops(net, &dropped.unwrap_or_default());
                if probe {
                    self.net_probe(net, Probe { ip, unicast: None });
                    // The driver runs the retransmission timer.
                    self.wake();
                }
            }
        }
    }

    fn count_neigh_drops(&self, net: &NetPort, frames: &[Vec<u8>]) {
        for f in frames {
            bump(&net.counts.neigh_dropped);
            if f.get(12..14) == Some(&ethertype::ROCE_V1.to_be_bytes()[..]) {
                if let Some(v1) = self.v1.as_ref() {
                    v1.count_no_neighbour();
                }
            }
        }
    }

    /// Sends an ARP request or a Neighbor Solicitation for `p.ip`.
    fn net_probe(&self, net: &NetPort, p: Probe) {
        // From one of our addresses of the family, preferably in the target's prefix.
        let ours: Vec<IpAddr> = self
            .local_addrs()
            .into_iter()
            .filter(|a| a.is_ipv4() == p.ip.is_ipv4())
            .collect();
        let prefixes = net.prefixes().clone();
        let src = ours
            .iter()
            .find(|&&a| {
                prefixes
                    .iter()
                    .any(|&(b, len)| b == a && same_prefix(a, p.ip, len))
            })
            .or(ours.first())
            .copied();
        let mut buf = [0u8; 128];
        let n = match (src, p.ip) {
            (Some(IpAddr::V4(s)), IpAddr::V4(target)) => {
                let eth = EthernetRepr {
                    src: net.mac,
                    dst: p.unicast.unwrap_or(MacAddr::BROADCAST),
                    vlan_tci: None,
                    ethertype: arp::ETHERTYPE,
                };
                eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
                let req = ArpRepr {
                    op: ArpOp::Request,
                    sender_mac: net.mac,
                    sender_ip: s,
                    target_mac: MacAddr([0; 6]),
                    target_ip: target,
                };
                match req.emit(&mut buf[14..]) {
                    Ok(()) => 14 + arp::PACKET_LEN,
                    Err(_) => return,
                }
            }
            (Some(IpAddr::V6(s)), IpAddr::V6(target)) => {
                match ndisc::emit_solicit_frame(net.mac, s, target, p.unicast, &mut buf) {
                    Ok(n) => n,
                    Err(_) => return,
                }
            }
            // No address of the family to ask from: the queue fails on its timer.
            _ => return,
        };
        bump(&net.counts.neigh_probes);
        self.net_emit(net, &buf[..n]);
    }

    /// One frame onto the wire through the frame taps (capture; faults: loss,
    /// duplication, corruption of the bytes after the Ethernet header, delay).
    pub(crate) fn net_emit(&self, net: &NetPort, frame: &[u8]) {
        if self
            .taps
            .emit(self.now(), frame, &mut |f| self.net_post(net, f))
        {
            self.wake();
        }
    }

    /// Sends one frame as it is (the taps had it).
    fn net_post(&self, net: &NetPort, frame: &[u8]) {
        // A send error is a lost packet: the transport's retransmission covers it.
        if let Ok(true) = net.qp.post_send(frame) {
            let et = frame.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
            let udp = match et {
                Some(ethertype::IPV4) => frame.get(23) == Some(&17),
                Some(ethertype::IPV6) => frame.get(20) == Some(&17),
                _ => false,
            };
            if udp {
                bump(&net.counts.tx_frames);
            } else if et == Some(ethertype::ROCE_V1) {
                if let Some(v1) = self.v1.as_ref() {
                    v1.count_tx();
                }
            }
        }
    }

    /// Runs the neighbour timers (probes, give-ups); when they next need to run.
    fn net_due(&self, now: Nanos) -> Option<Nanos> {
        let net = &self.port;
        let (probes, dropped) = net.lock_neigh().poll(now);
        self.count_neigh_drops(net, &dropped);
        for p in probes {
            self.net_probe(net, p);
        }
        net.lock_neigh().next_due()
    }

    /// Takes what is waiting on the RoCE socket (up to [`RX_BUDGET`] frames) and the
    /// multicast copies to ourselves, under the engine lock: RoCE v2 and v1 to the
    /// engine, ARP and ND to the neighbour cache. True if the engine got anything (the
    /// caller then sends what it answers).
    fn net_receive(&self, sink: &mut dyn Sink) -> bool {
        let net = &self.port;
        let now = self.now();
        let mut any = false;
        {
            let mut buf = net.rx_buf.lock().unwrap_or_else(|e| e.into_inner());
            for _ in 0..RX_BUDGET {
                // Non-blocking: WouldBlock when the socket is empty; any other error
                // (the interface went away) ends this pass too.
                let Ok(r) = net.rx.recv(&mut buf[..]) else {
                    break;
                };
                let f = &mut buf[r.start..r.start + r.len];
                if r.truncated {
                    // Longer than any frame the link carries: a counted drop.
                    self.count_truncated(net, f);
                    continue;
                }
                any |= self.net_frame(net, now, f, r.csum_ok, sink);
            }
        }
        let local: Vec<Vec<u8>> = net
            .local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for mut f in local {
            // Our own copy: its checksums are known good.
            any |= self.net_frame(net, now, &mut f, true, sink);
        }
        any
    }

    /// One frame of the RoCE socket (`csum_ok`: the kernel vouched for its UDP
    /// checksum) by EtherType.
    fn net_frame(
        &self,
        net: &NetPort,
        now: Nanos,
        f: &mut [u8],
        csum_ok: bool,
        sink: &mut dyn Sink,
    ) -> bool {
        let et = EthernetFrame::new_checked(&f[..]).map(|e| e.ethertype());
        match et {
            Ok(arp::ETHERTYPE) => self.net_arp(net, f, now),
            Ok(ethertype::IPV6) if is_icmpv6(f) => self.net_nd(net, f, now),
            Ok(ethertype::ROCE_V1) => {
                if let Some(v1) = self.v1.as_ref() {
                    return v1.receive_frame(&*self.taps, f, sink);
                }
            }
            Ok(ethertype::IPV4 | ethertype::IPV6) if !self.raw_v2() => {}
            _ => {
                let copies = self.taps.arrive(f);
                let mut any = false;
                for _ in 0..copies {
                    any |= self.net_rx_v2(net, f, csum_ok, sink);
                }
                return any;
            }
        }
        false
    }

    /// Counts a frame the RoCE socket could not take whole.
    fn count_truncated(&self, net: &NetPort, f: &[u8]) {
        if f.get(12..14) == Some(&ethertype::ROCE_V1.to_be_bytes()[..]) {
            if let Some(v1) = self.v1.as_ref() {
                v1.count_malformed();
            }
            return;
        }
        bump(&net.counts.rx_frames);
        bump(&net.counts.rx_malformed);
    }

    fn net_rx_v2(&self, net: &NetPort, f: &mut [u8], csum_ok: bool, sink: &mut dyn Sink) -> bool {
        let c = &net.counts;
        let p = rocev2::parse_frame_with(f, !csum_ok);
        // Other frames the socket filter let in are not RoCE: not counted.
        if let Err(RxDrop::NotRoce) = p {
            return false;
        }
        bump(&c.rx_frames);
        let p = match p {
            Ok(p) => p,
            Err(why) => {
                bump(match why {
                    RxDrop::NotRoce | RxDrop::Malformed(_) => &c.rx_malformed,
                    RxDrop::Vlan => &c.rx_vlan,
                    RxDrop::Fragment => &c.rx_fragments,
                    RxDrop::IpOptions => &c.rx_ip_options,
                    RxDrop::IpChecksum => &c.rx_ip_checksum,
                    RxDrop::UdpChecksum => &c.rx_udp_checksum,
                    RxDrop::Icrc => &c.rx_icrc_errors,
                });
                return false;
            }
        };
        let mac_ok = p.eth.dst == net.mac || p.eth.dst.is_multicast();
        let ip_ok = if p.dst.is_multicast() {
            self.joined(p.dst)
        } else {
            self.is_local_addr(p.dst)
        };
        if !mac_ok || !ip_ok {
            bump(&c.rx_not_ours);
            return false;
        }
        bump(&c.rx_delivered);
        let (src, dst, src_port, ipv4_id) = (p.src, p.dst, p.src_port, p.ipv4_ident);
        let ip = IpMeta {
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
            flow_label: p.flow_label,
        };
        let range = range_in(f, p.packet);
        sink.deliver(Arrival {
            src,
            dst,
            src_port,
            ip,
            ipv4_id,
            roce_v1: false,
            icrc_checked: true,
            framed: true,
            bytes: &mut f[range],
            source: None,
        });
        true
    }

    /// An ARP packet: learn the sender (RFC 826 merge: update a known entry; add one when
    /// the packet is for one of our addresses). The kernel answers requests itself.
    fn net_arp(&self, net: &NetPort, f: &[u8], now: Nanos) {
        self.taps.record(f);
        bump(&net.counts.neigh_rx);
        let Ok(frame) = EthernetFrame::new_checked(f) else {
            return;
        };
        let Ok(a) = ArpRepr::parse(frame.payload()) else {
            return;
        };
        let for_us = self.is_local_addr(IpAddr::V4(a.target_ip));
        self.net_learn(net, IpAddr::V4(a.sender_ip), a.sender_mac, now, for_us);
    }

    /// A Neighbor Advertisement confirms (RFC 4861 7.2.5); a Solicitation for one of
    /// our addresses teaches us the sender's link-layer address (RFC 4861 7.2.3).
    fn net_nd(&self, net: &NetPort, f: &[u8], now: Nanos) {
        self.taps.record(f);
        bump(&net.counts.neigh_rx);
        match ndisc::parse_frame(f) {
            Ok(Some((
                _,
                NdRepr::Advert {
                    target,
                    target_mac: Some(mac),
                    ..
                },
            ))) => self.net_learn(net, IpAddr::V6(target), mac, now, false),
            Ok(Some((
                ip,
                NdRepr::Solicit {
                    target,
                    source_mac: Some(mac),
                },
            ))) if !ip.src.is_unspecified() => {
                let for_us = self.is_local_addr(IpAddr::V6(target));
                self.net_learn(net, IpAddr::V6(ip.src), mac, now, for_us)
            }
            _ => {}
        }
    }

    fn net_learn(&self, net: &NetPort, ip: IpAddr, mac: MacAddr, now: Nanos, create: bool) {
        let released = net.lock_neigh().learn(ip, mac, now, create);
        bump(&net.counts.neigh_learned);
        for f in released {
            self.net_emit(net, &f);
        }
    }

    /// Whether `a` is one of the context's unicast addresses.
    pub(crate) fn is_local_addr(&self, a: IpAddr) -> bool {
        !a.is_multicast() && self.udp.has_socket(a)
    }

    /// Whether the context joined multicast group `g` (it has a socket for it).
    fn joined(&self, g: IpAddr) -> bool {
        self.udp.has_socket(g)
    }

    /// The context's unicast addresses.
    fn local_addrs(&self) -> Vec<IpAddr> {
        self.udp
            .socket_addrs()
            .into_iter()
            .filter(|a| !a.is_multicast())
            .collect()
    }
}

/// The taps of a carrier of Ethernet frames (the `tap` module implements it): what the raw
/// device sends and receives passes them whole.
pub(crate) trait FrameTap: Send + Sync {
    /// Judges one frame to send: the copies to put on the wire now go through `wire`,
    /// delayed ones are held (true: the driver must look at the deadline).
    fn emit(&self, now: Nanos, frame: &[u8], wire: &mut dyn FnMut(&[u8])) -> bool;
    /// Records one frame as it is (sent or received, not judged: ARP, ND).
    fn record(&self, frame: &[u8]);
    /// One received frame: recorded, then judged: how many copies to take in.
    fn arrive(&self, frame: &mut [u8]) -> u32;
    /// Sends the held frames that are due now through `wire`; when the next is.
    fn due(&self, now: Nanos, wire: &mut dyn FnMut(&[u8])) -> Option<Nanos>;
}

/// Where `inner` (a slice of `outer`, as a parser returns it) lies in `outer`.
pub(crate) fn range_in(outer: &[u8], inner: &[u8]) -> std::ops::Range<usize> {
    let start = (inner.as_ptr() as usize).wrapping_sub(outer.as_ptr() as usize);
    let start = start.min(outer.len());
    start..(start + inner.len()).min(outer.len())
}

/// The raw carrier: RoCE v1, and with `NetPort::v2` RoCE v2, as Ethernet frames on the
/// raw device, with neighbour resolution; its frames pass its own taps.
pub(crate) struct RawNet {
    port: NetPort,
    v1: Option<V1Port>,
    taps: Box<dyn FrameTap>,
    /// The UDP carrier: the context's addresses and groups (its sockets).
    udp: Arc<Udp>,
    waker: Waker,
    epoch: std::time::Instant,
}

impl RawNet {
    /// Whether this carrier sends `t` as frames: RoCE v1 always; RoCE v2 to a group or
    /// an on-link address that is not our own (the rest goes to the UDP socket).
    fn takes(&self, t: &Transmit) -> bool {
        if t.roce_v1 {
            return true;
        }
        self.port.v2
            && (t.dst.is_multicast() || (!self.is_local_addr(t.dst) && self.port.on_link(t.dst)))
    }
}

impl Carrier for RawNet {
    fn frames(&self, t: &Transmit) -> bool {
        self.takes(t)
    }

    fn seal(&self, t: &mut Transmit) -> Seal {
        // (Frames keep the engine's ICRC, the QP's entropy port, as rxe sends.)
        if self.takes(t) {
            Seal::Frames
        } else {
            Seal::Pass
        }
    }

    fn send(&self, q: &mut TxQueue, _now: Nanos) {
        let queue = std::mem::take(&mut q.queue);
        for mut t in queue {
            if t.roce_v1 {
                t.materialize();
                if let Some(v1) = &self.v1 {
                    if let Some((frame, hop)) = v1.frame(&t) {
                        self.net_send_v1(v1, frame, hop);
                    }
                }
                q.drop_one(t);
                continue;
            }
            if self.port.v2 {
                t.materialize();
                if self.net_send_v2(&t) {
                    q.drop_one(t);
                    continue;
                }
            }
            q.rest.push(t);
        }
        std::mem::swap(&mut q.queue, &mut q.rest);
    }

    fn receive(&self, _budget: usize, sink: &mut dyn Sink) -> usize {
        // (Its own budget, `RX_BUDGET` frames; what the engine answers leaves at once.)
        let any = self.net_receive(sink);
        if any {
            sink.batch_end(1, true);
        }
        usize::from(any)
    }

    fn watch(&self, fds: &mut Vec<std::os::fd::RawFd>) {
        fds.push(self.port.rx_fd());
    }

    fn poll(&self, now: Nanos) -> Option<Nanos> {
        let held = self.taps.due(now, &mut |f| self.net_post(&self.port, f));
        match (held, self.net_due(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a classic BPF program over `f` (the few opcodes `roce_filter` uses, with
    /// `pkttype` for `SKF_AD_PKTTYPE`): the kernel's verdict, or `None` for an
    /// opcode, an offset or a jump the kernel would refuse or fail on.

    #[test]
    fn prefixes_and_multicast_macs() {
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(same_prefix(a("10.1.2.3"), a("10.1.2.200"), 24));
        assert!(!same_prefix(a("10.1.2.3"), a("10.1.3.1"), 24));
        assert!(same_prefix(a("10.1.2.3"), a("10.9.9.9"), 8));
        assert!(same_prefix(a("10.1.2.3"), a("1.1.1.1"), 0));
        assert!(same_prefix(a("fd00::1"), a("fd00::ffff"), 64));
        assert!(!same_prefix(a("fd00::1"), a("fd01::1"), 64));
        assert!(!same_prefix(a("10.0.0.1"), a("fd00::1"), 0));
        assert!(
            same_prefix(a("10.0.0.1"), a("10.0.0.1"), 40),
            "clamped to 32"
        );
        assert_eq!(
            multicast_mac(a("239.129.2.3")),
            MacAddr([0x01, 0, 0x5e, 0x01, 2, 3])
        );
        assert_eq!(
            multicast_mac(a("ff0e::1:2:3")),
            MacAddr([0x33, 0x33, 0, 2, 0, 3])
        );
    }
}
