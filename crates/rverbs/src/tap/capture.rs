//! `RVERBS_PCAP`: every datagram a device sends and receives, written to a classic pcap
//! file (link type raw IP) with the IP and UDP headers as they were on the wire — for
//! Wireshark and `rverbs pcap decode`.
//!
//! A raw-mode context with a raw device writes LINKTYPE_ETHERNET instead: the frames of
//! the raw path (RoCE v1, RoCE v2, ARP, ND) exactly as sent and received, and the
//! datagrams that still use a UDP socket (to the context's own addresses) behind an
//! Ethernet header with zero MACs.
//!
//! Sent packets carry the header Linux builds for them (IPv4 ID 0 with DF, UDP checksum
//! computed). For received IPv4 packets the Identification is recovered from the ICRC
//! (the socket does not show it) so the ICRC in the capture verifies. TTL / hop limit,
//! TOS / traffic class and the IPv6 flow label are the real ones: the send path sets
//! them per datagram and the receive path reads them from the socket's control
//! messages (`rverbs-sys`). A sent IPv6 packet's flow label is chosen by the kernel and not
//! known here; it is written as 0.

use rverbs_wire::{icrc, ipv4, ipv6, udp};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::Path;
use std::time::SystemTime;

/// LINKTYPE_RAW: packets begin with an IPv4 or IPv6 header.
const LINKTYPE_RAW: u32 = 101;
/// LINKTYPE_ETHERNET: packets begin with an Ethernet II header.
const LINKTYPE_ETHERNET: u32 = 1;

pub(crate) struct PcapWriter {
    out: BufWriter<File>,
    ethernet: bool,
}

impl PcapWriter {
    /// A new capture file: LINKTYPE_ETHERNET when `ethernet`, else LINKTYPE_RAW.
    pub(crate) fn create(path: &Path, ethernet: bool) -> std::io::Result<PcapWriter> {
        let mut out = BufWriter::new(File::create(path)?);
        out.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&[0; 8])?;
        out.write_all(&65535u32.to_le_bytes())?;
        let linktype = if ethernet {
            LINKTYPE_ETHERNET
        } else {
            LINKTYPE_RAW
        };
        out.write_all(&linktype.to_le_bytes())?;
        out.flush()?;
        Ok(PcapWriter { out, ethernet })
    }

    /// Writes one whole Ethernet frame (raw mode only; ignored in a LINKTYPE_RAW file).
    pub(crate) fn write_frame(&mut self, frame: &[u8]) {
        if self.ethernet {
            self.record(&[], frame);
        }
    }

    /// One record: `head` then `body`.
    fn record(&mut self, head: &[u8], body: &[u8]) {
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let n = (head.len() + body.len()) as u32;
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&(t.as_secs() as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&t.subsec_micros().to_le_bytes());
        rec[8..12].copy_from_slice(&n.to_le_bytes());
        rec[12..16].copy_from_slice(&n.to_le_bytes());
        // A capture that cannot be written (disk full) must not disturb the traffic.
        let _ = self
            .out
            .write_all(&rec)
            .and_then(|_| self.out.write_all(head))
            .and_then(|_| self.out.write_all(body));
    }

    /// Writes one RoCE v2 datagram (`payload` = BTH .. ICRC) between `src` and `dst`,
    /// with its IP metadata.
    pub(crate) fn write(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        ports: (u16, u16),
        meta: crate::sys::IpMeta,
        payload: &[u8],
    ) {
        let (hop_limit, traffic_class) = (meta.hop_limit, meta.traffic_class);
        let udp_len = udp::HEADER_LEN + payload.len();
        let mut pkt = Vec::with_capacity(40 + udp_len);
        let ip_len = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                pkt.resize(ipv4::HEADER_LEN + udp_len, 0);
                let mut id = 0;
                let repr = |ident| ipv4::Ipv4Repr {
                    src: s,
                    dst: d,
                    tos: traffic_class,
                    ident,
                    dont_frag: true,
                    ttl: hop_limit,
                    protocol: ipv4::PROTO_UDP,
                    payload_len: udp_len,
                };
                repr(id).emit(&mut ipv4::Ipv4Packet::new_unchecked(&mut pkt[..]));
                self.udp(&mut pkt[ipv4::HEADER_LEN..], ports, payload);
                // The real ID is the one that makes the ICRC verify: ID 0 for datagrams
                // from the device's unconnected socket (DF), the connected socket's
                // count for the others (`conn_tx.rs`), the peer's for received ones.
                let (h, rest) = pkt.split_at(ipv4::HEADER_LEN);
                if let Ok(Some(found)) =
                    icrc::recover_ipv4_id(h, &rest[..udp::HEADER_LEN], &rest[udp::HEADER_LEN..])
                {
                    id = found;
                    repr(id).emit(&mut ipv4::Ipv4Packet::new_unchecked(&mut pkt[..]));
                }
                ipv4::HEADER_LEN
            }
            _ => {
                let to6 = |a: IpAddr| match a {
                    IpAddr::V4(v) => v.to_ipv6_mapped(),
                    IpAddr::V6(v) => v,
                };
                pkt.resize(ipv6::HEADER_LEN + udp_len, 0);
                ipv6::Ipv6Repr {
                    src: to6(src),
                    dst: to6(dst),
                    traffic_class,
                    flow_label: meta.flow_label,
                    next_header: ipv4::PROTO_UDP,
                    hop_limit,
                    payload_len: udp_len,
                }
                .emit(&mut ipv6::Ipv6Packet::new_unchecked(&mut pkt[..]));
                self.udp(&mut pkt[ipv6::HEADER_LEN..], ports, payload);
                ipv6::HEADER_LEN
            }
        };
        let mut u = udp::UdpPacket::new_unchecked(&mut pkt[ip_len..]);
        u.fill_checksum(src, dst);
        if self.ethernet {
            let mut eth = [0u8; 14];
            eth[12..14].copy_from_slice(if ip_len == ipv4::HEADER_LEN {
                &[0x08, 0x00]
            } else {
                &[0x86, 0xdd]
            });
            self.record(&eth, &pkt);
        } else {
            self.record(&[], &pkt);
        }
    }

    fn udp(&self, buf: &mut [u8], (src_port, dst_port): (u16, u16), payload: &[u8]) {
        udp::UdpRepr {
            src_port,
            dst_port,
            payload_len: payload.len(),
            checksum: 0,
        }
        .emit(&mut udp::UdpPacket::new_unchecked(&mut buf[..]));
        buf[udp::HEADER_LEN..udp::HEADER_LEN + payload.len()].copy_from_slice(payload);
    }

    pub(crate) fn flush(&mut self) {
        let _ = self.out.flush();
    }
}
