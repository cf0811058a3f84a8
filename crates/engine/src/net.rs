//! The engine's edge: datagrams in, datagrams out. Addresses are IP addresses (a RoCE
//! GID is an IPv6 address or an IPv4-mapped one); the driver owns sockets.

use rverbs_wire::grh::Gid;
use rverbs_wire::{icrc, ipv4, udp};
use std::net::{IpAddr, Ipv4Addr};

/// A datagram the engine wants sent to UDP port 4791.
///
/// The ICRC in `payload` is computed for the IP header a Linux unconnected UDP socket
/// with `IP_PMTUDISC_DO` produces: for IPv4, Identification 0 and DF set (DESIGN §3;
/// the ICRC covers the ID, so a driver that sends a different ID must recompute it).
/// TTL / hop limit, TOS / traffic class and the flow label are masked out of the ICRC
/// (DESIGN §3, checked on every rxe capture), so the driver may send `hop_limit` and
/// `traffic_class` as they are (it does, per datagram) and the kernel may choose the
/// IPv6 flow label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Source address (the QP's source GID).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port (0xC000..=0xFFFF, fixed per QP like rxe).
    pub src_port: u16,
    /// TTL / hop limit.
    pub hop_limit: u8,
    /// TOS / traffic class.
    pub traffic_class: u8,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// Send as RoCE v1 (IBTA Annex A16: Ethernet type 0x8915, a GRH with `src` and
    /// `dst` as GIDs, no IP or UDP header) because the QP's or AH's `sgid_index` names a
    /// RoCE v1 GID entry; the ICRC in `payload` is then the v1 one
    /// ([`rverbs_wire::icrc::compute_grh_parts`]) and `src_port` is unused.
    pub roce_v1: bool,
    /// BTH through ICRC (a RoCE v2 packet's ICRC is zero when the driver fills it,
    /// [`crate::Config::sender_fills_icrc`]), without the bytes of `body` if it has
    /// one: they belong at `body.at()`.
    pub payload: Vec<u8>,
    /// Payload bytes the packet takes straight from registered memory when it is sent
    /// ([`crate::Config::lend_payloads`]); `None` when `payload` is the whole packet.
    pub body: Option<Body>,
}

/// The payload of a [`Transmit`] left in registered memory: `len` bytes at `offset`
/// of a region, to go between the packet's headers and its pad and ICRC (at byte
/// `at` of [`Transmit::payload`]). The driver sends them from there
/// ([`crate::Memory::lend`], [`Transmit::parts`]) and computes the ICRC over them
/// (a RoCE v2 packet with a body always leaves its ICRC to the driver), or copies them
/// in first ([`Transmit::materialize`]).
#[derive(Clone)]
pub struct Body {
    mem: std::sync::Arc<dyn crate::Memory>,
    offset: usize,
    len: usize,
    at: usize,
}

impl Body {
    pub(crate) fn new(
        mem: std::sync::Arc<dyn crate::Memory>,
        offset: usize,
        len: usize,
        at: usize,
    ) -> Self {
        Body {
            mem,
            offset,
            len,
            at,
        }
    }

    /// The region the bytes are in.
    pub fn memory(&self) -> &std::sync::Arc<dyn crate::Memory> {
        &self.mem
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no bytes (the engine never makes such a body).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where they go in the packet: after this many bytes of [`Transmit::payload`].
    pub fn at(&self) -> usize {
        self.at
    }

    /// The bytes, from the region [`Body::memory`] lent ([`crate::Memory::lend`]);
    /// empty if `lent` is shorter than the region was when the request was posted (a
    /// packet that short is dropped by its receiver, never sent with other bytes).
    pub fn bytes<'a>(&self, lent: &'a [u8]) -> &'a [u8] {
        lent.get(self.offset..self.offset + self.len).unwrap_or(&[])
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Body {
    fn eq(&self, o: &Body) -> bool {
        std::sync::Arc::ptr_eq(&self.mem, &o.mem)
            && (self.offset, self.len, self.at) == (o.offset, o.len, o.at)
    }
}

impl Eq for Body {}

/// A datagram received on UDP port 4791.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// Source address.
    pub src: IpAddr,
    /// Destination address (which local GID it was sent to).
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// TTL / hop limit as received.
    pub hop_limit: u8,
    /// TOS / traffic class as received.
    pub traffic_class: u8,
    /// IPv6 flow label as received (0 for IPv4).
    pub flow_label: u32,
    /// The IPv4 Identification when the driver could read it (raw sockets); `None` when
    /// the socket hides it, in which case the engine recovers it from the ICRC.
    pub ipv4_id: Option<u16>,
    /// Received as RoCE v1 (EtherType 0x8915): `src` and `dst` are the GRH's GIDs
    /// ([`gid_to_ip`]), the ICRC is the v1 one, `src_port` and `ipv4_id` mean nothing,
    /// and a UD receive's network header area is the GRH itself (NxtHdr 0x1B).
    pub roce_v1: bool,
    /// The receiver already checked the ICRC against the real headers (a raw-mode
    /// device reads whole frames: `rverbs_wire::rocev2` / `rocev1`), so the engine does
    /// not check it again from rebuilt ones.
    pub icrc_checked: bool,
    /// BTH through ICRC.
    pub payload: &'a [u8],
}

impl Transmit {
    /// The packet's length in bytes, its body's included.
    pub fn len(&self) -> usize {
        self.payload.len() + self.body.as_ref().map_or(0, Body::len)
    }

    /// True for an empty packet (never made by the engine).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the body (if any) into `payload`, which then holds the whole packet:
    /// for every path that needs the packet's bytes in one piece (fault injection,
    /// captures, raw frames). The region must not be lent by this thread.
    pub fn materialize(&mut self) {
        let Some(b) = self.body.take() else { return };
        let (at, n) = (b.at.min(self.payload.len()), b.len);
        let old = self.payload.len();
        self.payload.resize(old + n, 0);
        self.payload.copy_within(at..old, at + n);
        b.mem.read(b.offset, &mut self.payload[at..at + n]);
    }

    /// Writes the whole packet into `dst` ([`Transmit::len`] bytes), reading the
    /// body straight from its region: [`Transmit::materialize`] without the copy into
    /// `payload` (a same-host sender writes it into its ring this way).
    ///
    /// # Panics
    /// If `dst` is not `len()` bytes long.
    pub fn write_into(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len());
        let Some(b) = &self.body else {
            dst.copy_from_slice(&self.payload);
            return;
        };
        let at = b.at.min(self.payload.len());
        dst[..at].copy_from_slice(&self.payload[..at]);
        b.mem.read(b.offset, &mut dst[at..at + b.len]);
        dst[at + b.len..].copy_from_slice(&self.payload[at..]);
    }

    /// The packet in three pieces to be sent (or hashed) one after the other: the
    /// payload before the body, `body` (the body's bytes, from [`Body::bytes`]; empty
    /// when there is no body) and the rest of the payload.
    pub fn parts<'a>(&'a self, body: &'a [u8]) -> [&'a [u8]; 3] {
        match &self.body {
            Some(b) => {
                let (head, tail) = self.payload.split_at(b.at.min(self.payload.len()));
                [head, body, tail]
            }
            None => [&self.payload, &[], &[]],
        }
    }

    /// The datagram a receiver sees when this one arrives unchanged: the same
    /// addresses, port, IP header fields and network type, with the IPv4
    /// Identification 0 that a Linux unconnected socket with DF set sends (DESIGN §3).
    /// Simulators, benchmarks and tests deliver transmits with it. A transmit with a
    /// body must be [materialized](Transmit::materialize) first.
    pub fn as_received(&self) -> Datagram<'_> {
        Datagram {
            src: self.src,
            dst: self.dst,
            src_port: self.src_port,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
            ipv4_id: Some(0),
            roce_v1: self.roce_v1,
            icrc_checked: false,
            payload: &self.payload,
        }
    }
}

/// The IP address a GID stands for.
pub fn gid_to_ip(g: Gid) -> IpAddr {
    match g.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(g.into()),
    }
}

/// The GID of an IP address.
pub fn ip_to_gid(a: IpAddr) -> Gid {
    match a {
        IpAddr::V4(v4) => v4.into(),
        IpAddr::V6(v6) => v6.into(),
    }
}

/// The IPv4 and UDP headers of a datagram sent as [`Transmit`] describes (ID 0, DF),
/// for [`icrc::recover_ipv4_id`], which needs them unmasked.
fn ipv4_headers(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, ib_len: usize) -> [u8; 28] {
    let mut h = [0u8; 28];
    let udp_len = udp::HEADER_LEN + ib_len;
    // `Ipv4Repr::emit` without its header checksum: the ICRC masks that field to ones
    // (IBTA A17.3.3, `icrc::compute_parts`), so it would be computed for nothing.
    let mut p = ipv4::Ipv4Packet::new_unchecked(&mut h[..20]);
    p.set_version_and_header_len(ipv4::HEADER_LEN);
    p.set_tos(0);
    p.set_total_len((ipv4::HEADER_LEN + udp_len) as u16);
    p.set_ident(0);
    p.set_dont_frag(true);
    p.set_ttl(64);
    p.set_protocol(ipv4::PROTO_UDP);
    p.set_src_addr(src);
    p.set_dst_addr(dst);
    let u = udp::UdpRepr {
        src_port,
        dst_port: udp::ROCE_V2_PORT,
        payload_len: ib_len,
        checksum: 0,
    };
    u.emit(&mut udp::UdpPacket::new_unchecked(&mut h[20..28]));
    h
}

/// The GRH of a RoCE v1 packet of `ib_len` bytes (BTH through ICRC) between two GIDs
/// given as addresses (IBTA 8.3.1: IPVer 6, NxtHdr 0x1B, PayLen = `ib_len`).
pub fn v1_grh(
    src: IpAddr,
    dst: IpAddr,
    traffic_class: u8,
    flow_label: u32,
    hop_limit: u8,
    ib_len: usize,
) -> rverbs_wire::grh::GrhRepr {
    rverbs_wire::grh::GrhRepr {
        traffic_class,
        flow_label: flow_label & 0xf_ffff,
        payload_len: u16::try_from(ib_len).unwrap_or(u16::MAX),
        next_header: rverbs_wire::grh::NEXT_HEADER_BTH,
        hop_limit,
        sgid: ip_to_gid(src),
        dgid: ip_to_gid(dst),
    }
}

/// The RoCE v1 ICRC of `payload` (BTH through ICRC) sent from `src` to `dst`; the
/// masked GRH fields (TClass, FlowLabel, HopLmt) do not matter.
fn v1_icrc(src: IpAddr, dst: IpAddr, payload: &[u8]) -> Option<u32> {
    let n = payload.len().checked_sub(icrc::ICRC_LEN)?;
    let mut grh = [0u8; rverbs_wire::grh::GRH_LEN];
    v1_grh(src, dst, 0, 0, 0, payload.len()).emit(&mut grh);
    icrc::compute_grh_parts(&grh, &payload[..n]).ok()
}

/// [`fill_icrc`], or its RoCE v1 form when `roce_v1` (the ICRC then covers a GRH
/// instead of the IP and UDP headers; `src_port` is unused).
pub fn fill_icrc_for(roce_v1: bool, src: IpAddr, dst: IpAddr, src_port: u16, payload: &mut [u8]) {
    if !roce_v1 {
        return fill_icrc(src, dst, src_port, payload);
    }
    let n = payload.len().saturating_sub(icrc::ICRC_LEN);
    // Our own layouts are well formed; a failure leaves a zero ICRC (a dropped packet).
    let crc = v1_icrc(src, dst, payload).unwrap_or(0);
    payload[n..].copy_from_slice(&crc.to_le_bytes());
}

/// [`fill_icrc_for`] continuing from `cache`'s CRC state for the packet's masked IP and
/// UDP headers ([`icrc::compute_addrs_cached`]; the same bytes).
pub(crate) fn fill_icrc_for_cached(
    cache: &mut icrc::PrefixCache,
    roce_v1: bool,
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    payload: &mut [u8],
) {
    if roce_v1 {
        return fill_icrc_for(true, src, dst, src_port, payload);
    }
    fill_icrc_cached(cache, src, dst, 0, src_port, payload);
}

/// [`fill_icrc`] for a datagram that leaves with IPv4 Identification `ipv4_id` (a
/// connected socket numbers its datagrams; unused for IPv6), continuing from `cache`'s
/// CRC state for the packet's masked IP and UDP headers ([`icrc::compute_addrs_cached`]).
pub fn fill_icrc_cached(
    cache: &mut icrc::PrefixCache,
    src: IpAddr,
    dst: IpAddr,
    ipv4_id: u16,
    src_port: u16,
    payload: &mut [u8],
) {
    let n = payload.len().saturating_sub(icrc::ICRC_LEN);
    // As in `fill_icrc`: our own layouts always hold a BTH; a failure leaves a zero ICRC.
    let crc =
        icrc::compute_addrs_cached(cache, src, dst, ipv4_id, src_port, &payload[..n]).unwrap_or(0);
    payload[n..].copy_from_slice(&crc.to_le_bytes());
}

/// [`fill_icrc_cached`] of a packet whose body (if any) is `body` ([`Body::bytes`]):
/// the ICRC of the whole packet, written into the last four bytes of its payload.
pub fn fill_icrc_cached_parts(
    cache: &mut icrc::PrefixCache,
    src: IpAddr,
    dst: IpAddr,
    ipv4_id: u16,
    src_port: u16,
    t: &mut Transmit,
    body: &[u8],
) {
    if t.body.is_none() {
        return fill_icrc_cached(cache, src, dst, ipv4_id, src_port, &mut t.payload);
    }
    let [head, body, tail] = t.parts(body);
    let tail = &tail[..tail.len().saturating_sub(icrc::ICRC_LEN)];
    // As in `fill_icrc`: a failure leaves a zero ICRC.
    let crc =
        icrc::compute_addrs_cached_parts(cache, src, dst, ipv4_id, src_port, [head, body, tail])
            .unwrap_or(0);
    let n = t.payload.len().saturating_sub(icrc::ICRC_LEN);
    t.payload[n..].copy_from_slice(&crc.to_le_bytes());
}

/// Computes and stores the ICRC of an outgoing packet (the last four bytes of
/// `payload` are overwritten), for IPv4 ID 0 with DF (see [`Transmit`]).
pub fn fill_icrc(src: IpAddr, dst: IpAddr, src_port: u16, payload: &mut [u8]) {
    let n = payload.len().saturating_sub(icrc::ICRC_LEN);
    // The IP and UDP headers of the datagram, written straight in masked form. Our own
    // layouts always hold a BTH; a failure leaves a zero ICRC (a dropped packet).
    let crc = icrc::compute_addrs(src, dst, 0, src_port, &payload[..n]).unwrap_or(0);
    payload[n..].copy_from_slice(&crc.to_le_bytes());
}

/// Checks the ICRC of a received datagram. For IPv4 with an unknown Identification
/// (a plain UDP socket hides it), the one ID that makes the ICRC match is recovered from
/// the ICRC itself (`icrc::recover_ipv4_id`, DESIGN §3), at a 2^-16 false-accept rate.
pub fn icrc_ok(d: &Datagram<'_>) -> bool {
    if d.payload.len() < icrc::ICRC_LEN + 12 {
        return false;
    }
    if d.roce_v1 {
        let n = d.payload.len() - icrc::ICRC_LEN;
        let mut carried = [0u8; 4];
        carried.copy_from_slice(&d.payload[n..]);
        return v1_icrc(d.src, d.dst, d.payload) == Some(u32::from_le_bytes(carried));
    }
    if let (IpAddr::V4(s), IpAddr::V4(t), None) = (d.src, d.dst, d.ipv4_id) {
        let h = ipv4_headers(s, t, d.src_port, d.payload.len());
        return matches!(
            icrc::recover_ipv4_id(&h[..20], &h[20..28], d.payload),
            Ok(Some(_))
        );
    }
    let n = d.payload.len() - icrc::ICRC_LEN;
    let mut carried = [0u8; 4];
    carried.copy_from_slice(&d.payload[n..]);
    // The IPv4 ID is used only for an IPv4 header (`compute_addrs` ignores it for IPv6).
    let id = d.ipv4_id.unwrap_or(0);
    match icrc::compute_addrs(d.src, d.dst, id, d.src_port, &d.payload[..n]) {
        Ok(c) => c == u32::from_le_bytes(carried),
        Err(_) => false,
    }
}

/// [`icrc_ok`] continuing from `cache`'s CRC state for the datagram's masked IP and UDP
/// headers ([`icrc::compute_addrs_cached`]). For IPv4 with an unknown Identification the
/// ICRC with ID 0 comes from the cache and the ID is solved from it
/// ([`icrc::PrefixCache::solve_ipv4_id`], the second half of `recover_ipv4_id`): the
/// same answer.
pub(crate) fn icrc_ok_cached(cache: &mut icrc::PrefixCache, d: &Datagram<'_>) -> bool {
    if d.roce_v1 || d.payload.len() < icrc::ICRC_LEN + 12 {
        return icrc_ok(d);
    }
    let n = d.payload.len() - icrc::ICRC_LEN;
    let mut carried = [0u8; 4];
    carried.copy_from_slice(&d.payload[n..]);
    let carried = u32::from_le_bytes(carried);
    let v4 = matches!((d.src, d.dst), (IpAddr::V4(_), IpAddr::V4(_)));
    if v4 && d.ipv4_id.is_none() {
        let Ok(c0) =
            icrc::compute_addrs_cached(cache, d.src, d.dst, 0, d.src_port, &d.payload[..n])
        else {
            return false;
        };
        return cache
            .solve_ipv4_id(carried, c0, ipv4::HEADER_LEN, n)
            .is_some();
    }
    // The IPv4 ID is used only for an IPv4 header (`compute_addrs` ignores it for IPv6).
    let id = d.ipv4_id.unwrap_or(0);
    icrc::compute_addrs_cached(cache, d.src, d.dst, id, d.src_port, &d.payload[..n])
        .is_ok_and(|c| c == carried)
}

/// UDP source port of an RC/UC QP, as rxe and rdma-core choose it: the flow label of
/// the path, or when that is 0 one derived from both QPNs (`rdma_calc_flow_label`),
/// folded to 14 bits over 0xC000 (`rdma_flow_label_to_udp_sport`). The derived label is
/// symmetric, so both directions of a connection use the same port.
pub fn connected_src_port(lqpn: u32, rqpn: u32, flow_label: u32) -> u16 {
    let fl = if flow_label != 0 {
        flow_label & 0xf_ffff
    } else {
        let mut v = u64::from(lqpn) * u64::from(rqpn);
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xf_ffff) as u32
    };
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    0xc000 | low as u16
}

/// UDP source port of a UD QP: `0xC000 + hash_32(qpn, 14)` (rxe `rxe_qp.c`).
pub fn ud_src_port(qpn: u32) -> u16 {
    const GOLDEN_RATIO_32: u32 = 0x61c8_8647;
    0xc000 + (qpn.wrapping_mul(GOLDEN_RATIO_32) >> (32 - 14)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ports_match_rxe() {
        // rxe-peer README: QPNs 0x11 and 0x15 give 0xc165; QP1 gives 55410.
        assert_eq!(connected_src_port(0x11, 0x15, 0), 0xc165);
        assert_eq!(connected_src_port(0x15, 0x11, 0), 0xc165);
        assert_eq!(ud_src_port(1), 55410);
        // golden rc_atomic_cswap.pcap: QP 0x28 both ends -> 50752.
        assert_eq!(connected_src_port(0x28, 0x28, 0), 50752);
    }

    #[test]
    fn icrc_round_trip_v4_and_v6() {
        for (s, d) in [
            (
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "10.0.0.2".parse().unwrap(),
            ),
            ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap()),
        ] {
            let mut p = vec![0u8; 12 + 8 + 4];
            p[0] = 0x04;
            fill_icrc(s, d, 0xc000, &mut p);
            let dg = Datagram {
                src: s,
                dst: d,
                src_port: 0xc000,
                hop_limit: 3,
                traffic_class: 7,
                flow_label: 0,
                ipv4_id: None,
                roce_v1: false,
                icrc_checked: false,
                payload: &p,
            };
            assert!(icrc_ok(&dg));
            let mut bad = p.clone();
            bad[13] ^= 1;
            assert!(!icrc_ok(&Datagram {
                payload: &bad,
                ..dg
            }));
            assert!(!icrc_ok(&Datagram {
                src_port: 0xc001,
                ..dg
            }));
            // The same bytes are not a valid RoCE v1 packet.
            assert!(!icrc_ok(&Datagram {
                roce_v1: true,
                icrc_checked: false,
                ..dg
            }));
        }
    }

    /// The cached check and fill agree with the plain ones on good, corrupted and
    /// foreign-ID packets of every family, with one cache reused throughout, and both
    /// give the right answer: a corrupted packet fails; a good one passes unless its IPv4
    /// ID is given and is not the one its ICRC was made with.
    #[test]
    fn cached_icrc_matches_plain() {
        let mut cache = icrc::PrefixCache::new();
        let v4: (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let v6: (IpAddr, IpAddr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        for (s, d) in [v4, v6, (v4.0, v6.1)] {
            for len in [16usize, 20, 24, 64, 200] {
                let mut p: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(13)).collect();
                p[0] = 0x04;
                let mut q = p.clone();
                fill_icrc(s, d, 0xc001, &mut p);
                fill_icrc_for_cached(&mut cache, false, s, d, 0xc001, &mut q);
                assert_eq!(p, q);
                let v4 = s.is_ipv4() && d.is_ipv4();
                // A packet sent with IPv4 ID 0x1234 (as rxe does): found from the ICRC.
                let mut r = p.clone();
                let n = r.len() - 4;
                let c = icrc::compute_addrs(s, d, 0x1234, 0xc001, &r[..n]).unwrap();
                r[n..].copy_from_slice(&c.to_le_bytes());
                for (ipv4_id, payload, made_with) in [
                    (None, &p, 0),
                    (Some(0), &p, 0),
                    (None, &r, 0x1234),
                    (Some(0x1234), &r, 0x1234),
                    (Some(1), &r, 0x1234),
                ] {
                    let mut bad = payload.clone();
                    bad[len / 2] ^= 0x10;
                    // (IPv6 and mixed pairs have no ID: `r` is `p` there.)
                    let good = !v4 || ipv4_id.is_none_or(|id| id == made_with);
                    for (pl, expect) in [(payload, good), (&bad, false)] {
                        let dg = Datagram {
                            src: s,
                            dst: d,
                            src_port: 0xc001,
                            hop_limit: 1,
                            traffic_class: 0,
                            flow_label: 0,
                            ipv4_id,
                            roce_v1: false,
                            icrc_checked: false,
                            payload: pl,
                        };
                        assert_eq!(
                            icrc_ok_cached(&mut cache, &dg),
                            icrc_ok(&dg),
                            "{s} {len} {ipv4_id:?}"
                        );
                        assert_eq!(icrc_ok(&dg), expect, "{s} {d} {len} {ipv4_id:?}");
                    }
                }
            }
        }
    }

    /// A RoCE v1 ICRC matches the wire crate's frame parser for the same GRH, ignores
    /// the masked fields and the UDP port, and catches a wrong GID.
    #[test]
    fn icrc_round_trip_v1() {
        let (s, d): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "fe80::2".parse().unwrap());
        let mut p = vec![0u8; 12 + 8 + 4];
        p[0] = 0x04;
        fill_icrc_for(true, s, d, 0, &mut p);
        let dg = Datagram {
            src: s,
            dst: d,
            src_port: 0,
            hop_limit: 9,
            traffic_class: 0x28,
            flow_label: 0x12345,
            ipv4_id: None,
            roce_v1: true,
            icrc_checked: false,
            payload: &p,
        };
        assert!(icrc_ok(&dg));
        assert!(icrc_ok(&Datagram {
            src_port: 0xc123,
            ..dg
        }));
        assert!(!icrc_ok(&Datagram {
            roce_v1: false,
            icrc_checked: false,
            ..dg
        }));
        assert!(!icrc_ok(&Datagram {
            dst: "fe80::3".parse().unwrap(),
            ..dg
        }));
        let mut frame = vec![0u8; 40];
        v1_grh(s, d, 1, 2, 3, p.len()).emit(&mut frame);
        frame.extend_from_slice(&p);
        assert!(rverbs_wire::rocev1::parse(&frame).unwrap().icrc_ok);
    }
}
