//! RoCE v1 (IBTA Annex A16) on the raw device: EtherType 0x8915 frames with a GRH,
//! no IP or UDP header, received on the RoCE socket beside RoCE v2 (`mod.rs`).

use super::{FrameTap, NextHop};
use crate::carrier::{Arrival, Sink};
use crate::error::Result;
use crate::sys::IpMeta;
use rverbs_wire::ethernet::{ethertype, EthernetRepr, MacAddr};
use rverbs_wire::grh::{Gid, GRH_LEN};
use rverbs_wire::rocev1::{self, RoceV1Repr};
use std::sync::atomic::{AtomicU64, Ordering};

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
    pub(crate) fn open(ifname: &str) -> Result<V1Port> {
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

    /// Hands one received v1 frame to `sink` (capture and faults first, `taps`): a
    /// frame that does not parse or whose ICRC is wrong is counted and dropped here
    /// (the engine checks the ICRC again). True if it reached the sink.
    pub(crate) fn receive_frame(
        &self,
        taps: &dyn FrameTap,
        frame: &mut [u8],
        sink: &mut dyn Sink,
    ) -> bool {
        let copies = taps.arrive(frame);
        let mut any = false;
        for _ in 0..copies {
            any |= self.receive_one(frame, sink);
        }
        any
    }

    /// One received v1 frame (after capture and faults).
    fn receive_one(&self, frame: &mut [u8], sink: &mut dyn Sink) -> bool {
        let (src, dst, ip, range) = {
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
            let (src, dst) = (p.grh.sgid, p.grh.dgid);
            let ip = IpMeta {
                hop_limit: p.grh.hop_limit,
                traffic_class: p.grh.traffic_class,
                flow_label: p.grh.flow_label,
            };
            let range = super::range_in(frame, p.packet.into_inner());
            (src, dst, ip, range)
        };
        sink.deliver(Arrival {
            src: rverbs_engine::net::gid_to_ip(src),
            dst: rverbs_engine::net::gid_to_ip(dst),
            src_port: 0,
            ip,
            ipv4_id: None,
            roce_v1: true,
            icrc_checked: true,
            framed: true,
            bytes: &mut frame[range],
            source: None,
        });
        true
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
