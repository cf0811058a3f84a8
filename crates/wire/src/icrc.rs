//! The RoCE v2 Invariant CRC (IBTA Annex A17.3.3; computed as the kernel's
//! `drivers/infiniband/sw/rxe/rxe_icrc.c` does).
//!
//! The ICRC is the standard CRC-32 (reflected, polynomial 0xEDB88320, as in zlib and
//! Ethernet) over:
//! 1. eight 0xFF bytes standing for the masked LRH (the kernel folds these into its
//!    seed 0xdebb20e3);
//! 2. the IP header with the fields that routers change set to all ones — IPv4: TOS,
//!    TTL, header checksum; IPv6: traffic class, flow label, hop limit;
//! 3. the UDP header with the checksum set to 0xFFFF;
//! 4. the BTH with byte 4 (FECN, BECN, reserved) set to 0xFF;
//! 5. the rest of the transport headers, the payload and the pad.
//!
//! It is appended after the pad, least significant byte first. The IPv4 Identification,
//! flags and lengths are covered, so a receiver needs the real IP header to check it.
//! A ConnectX-4 Lx CNP carries exactly this value (and not the one without the stand-in);
//! RoCE v1 uses the same rule with the GRH in place of the IP and UDP headers
//! ([`compute_grh_parts`]; evidence in `testdata/icrc/README.md`).
//!
//! A receiver on a plain UDP socket knows every covered byte but the 16-bit IPv4
//! Identification (the kernel's rxe sends unpredictable non-zero IDs). Because the CRC
//! is affine over GF(2), [`recover_ipv4_id`] solves for the one ID (if any) that makes the
//! carried ICRC match, at the cost of one ICRC pass plus a few polynomial products.

use crate::bth::BTH_LEN;
use crate::{ipv4, ipv6, udp, Error, Result};
use core::net::IpAddr;
use crc32fast::Hasher;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

const MAX_MASKED: usize = 60 + udp::HEADER_LEN + BTH_LEN;

/// The CRC-32 of the eight 0xFF bytes standing for the masked LRH: the state every
/// ICRC continues from (its register before the final inversion is the kernel's seed
/// 0xdebb20e3), so they need not be hashed each time.
const LRH_CRC: u32 = 0x2144_df1c;

/// Below this many bytes an update takes [`crc_short`] rather than a `crc32fast`
/// hasher: for short inputs crc32fast uses a table method too (its carry-less multiply
/// path starts at 128 bytes), and setting up its hasher (a CPU feature check each time)
/// costs about as much as hashing a small ACK.
const SHORT: usize = 128;

/// The CRC-32 tables for eight bytes at a time ("slice-by-8"): `T[0]` is the classic
/// byte table of the reflected polynomial 0xEDB88320, and `T[k][b]` is the CRC of byte
/// `b` followed by `k` zero bytes.
static T: [[u32; 256]; 8] = crc_tables();

const fn crc_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// Continues the CRC-32 `crc` (a finished value, as `crc32fast::Hasher::finalize`
/// returns and `new_with_initial` takes) over `data`, eight bytes per step.
fn crc_short(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ c;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        c = T[7][(lo & 0xff) as usize]
            ^ T[6][((lo >> 8) & 0xff) as usize]
            ^ T[5][((lo >> 16) & 0xff) as usize]
            ^ T[4][(lo >> 24) as usize]
            ^ T[3][(hi & 0xff) as usize]
            ^ T[2][((hi >> 8) & 0xff) as usize]
            ^ T[1][((hi >> 16) & 0xff) as usize]
            ^ T[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        c = T[0][((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// Continues the CRC-32 `crc` over `data`: [`crc_short`] for short inputs, crc32fast
/// (carry-less multiplication where the CPU has it) for long ones. Inlined into its
/// callers: with several of them the compiler kept it out of line, and the per-packet
/// path (`compute_addrs_cached_parts`) took 50 more instructions per round trip.
#[inline(always)]
fn crc_update(crc: u32, data: &[u8]) -> u32 {
    if data.len() < SHORT {
        crc_short(crc, data)
    } else {
        let mut h = Hasher::new_with_initial(crc);
        h.update(data);
        h.finalize()
    }
}

/// The ICRC of a packet given as its three parts: the IP header (IPv4 with any options,
/// or the 40-byte IPv6 header), the 8-byte UDP header, and the IB transport packet from
/// the BTH up to (not including) the ICRC. Returns the value whose little-endian bytes
/// are the trailer.
pub fn compute_parts(ip_header: &[u8], udp_header: &[u8], ib_packet: &[u8]) -> Result<u32> {
    if ip_header.is_empty() {
        return Err(Error::Truncated("IP header"));
    }
    if udp_header.len() != udp::HEADER_LEN {
        return Err(Error::Truncated("UDP header"));
    }
    if ib_packet.len() < BTH_LEN {
        return Err(Error::Truncated("BTH"));
    }
    let ip_len = ip_header.len();
    match ip_header[0] >> 4 {
        4 if (ipv4::HEADER_LEN..=60).contains(&ip_len) => {}
        6 if ip_len == ipv6::HEADER_LEN => {}
        4 | 6 => return Err(Error::Malformed("IP header length for ICRC")),
        _ => return Err(Error::Malformed("IP version is neither 4 nor 6")),
    }
    let mut masked = [0u8; MAX_MASKED];
    let (ip, rest) = masked.split_at_mut(ip_len);
    ip.copy_from_slice(ip_header);
    if ip[0] >> 4 == 4 {
        ip[1] = 0xff; // TOS
        ip[8] = 0xff; // TTL
        ip[10] = 0xff; // header checksum
        ip[11] = 0xff;
    } else {
        ip[0] |= 0x0f; // traffic class (high nibble) ...
        ip[1] = 0xff; // ... traffic class (low nibble) and flow label
        ip[2] = 0xff;
        ip[3] = 0xff;
        ip[7] = 0xff; // hop limit
    }
    rest[..8].copy_from_slice(udp_header);
    rest[6] = 0xff; // UDP checksum
    rest[7] = 0xff;
    Ok(hash_masked(
        &mut masked,
        ip_len + udp::HEADER_LEN,
        ib_packet,
    ))
}

/// Finishes an ICRC: `masked[..at]` holds the masked IP and UDP headers; appends the BTH
/// (byte 4 masked) and hashes them after the LRH stand-in, then the rest of `ib_packet`
/// (at least [`BTH_LEN`] bytes).
fn hash_masked(masked: &mut [u8; MAX_MASKED], at: usize, ib_packet: &[u8]) -> u32 {
    masked[at..at + BTH_LEN].copy_from_slice(&ib_packet[..BTH_LEN]);
    masked[at + 4] = 0xff; // BTH byte 4: FECN, BECN, resv6
    let crc = crc_update(LRH_CRC, &masked[..at + BTH_LEN]);
    crc_update(crc, &ib_packet[BTH_LEN..])
}

/// The ICRC of a RoCE v2 packet from `src` to `dst` (UDP source port `src_port`), with
/// the IP and UDP headers a Linux UDP socket sends written straight in their masked form
/// instead of being emitted and then masked ([`compute_parts`] over the real headers
/// gives the same value; a test checks it): when both addresses are IPv4, a 20-byte IPv4
/// header with Identification `ipv4_id`, DF set and fragment offset 0; otherwise a 40-byte
/// IPv6 header (an IPv4 address as its IPv4-mapped form) and `ipv4_id` is unused. Either
/// way protocol / next header UDP, UDP destination port 4791, and lengths for
/// `ib_packet` (BTH up to, not including, the ICRC) plus the ICRC, truncated to 16 bits
/// as the header emitters do.
pub fn compute_addrs(
    src: IpAddr,
    dst: IpAddr,
    ipv4_id: u16,
    src_port: u16,
    ib_packet: &[u8],
) -> Result<u32> {
    if ib_packet.len() < BTH_LEN {
        return Err(Error::Truncated("BTH"));
    }
    let (prefix, at) = masked_prefix(src, dst, ipv4_id, src_port, ib_packet.len());
    let mut masked = [0u8; MAX_MASKED];
    masked[..PREFIX_MAX].copy_from_slice(&prefix);
    Ok(hash_masked(&mut masked, at, ib_packet))
}

/// Longest masked IP + UDP header prefix [`masked_prefix`] writes (IPv6).
const PREFIX_MAX: usize = ipv6::HEADER_LEN + udp::HEADER_LEN;

/// The masked IP and UDP headers [`compute_addrs`] hashes for a packet of `ib_len` bytes
/// (BTH up to, not including, the ICRC), zero-padded to [`PREFIX_MAX`], and their length.
fn masked_prefix(
    src: IpAddr,
    dst: IpAddr,
    ipv4_id: u16,
    src_port: u16,
    ib_len: usize,
) -> ([u8; PREFIX_MAX], usize) {
    let udp_len = udp::HEADER_LEN + ib_len + ICRC_LEN;
    let mut masked = [0u8; PREFIX_MAX];
    let ip_len = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = &mut masked[..ipv4::HEADER_LEN];
            ip[0] = 0x45; // version 4, IHL 5
            ip[1] = 0xff; // TOS (masked)
            ip[2..4].copy_from_slice(&((ipv4::HEADER_LEN + udp_len) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&ipv4_id.to_be_bytes());
            ip[6] = 0x40; // DF, fragment offset 0
            ip[8] = 0xff; // TTL (masked)
            ip[9] = ipv4::PROTO_UDP;
            ip[10] = 0xff; // header checksum (masked)
            ip[11] = 0xff;
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            ipv4::HEADER_LEN
        }
        _ => {
            let to6 = |a: IpAddr| match a {
                IpAddr::V4(v) => v.to_ipv6_mapped(),
                IpAddr::V6(v) => v,
            };
            let ip = &mut masked[..ipv6::HEADER_LEN];
            ip[0] = 0x6f; // version 6, traffic class (masked) ...
            ip[1] = 0xff; // ... traffic class and flow label (masked)
            ip[2] = 0xff;
            ip[3] = 0xff;
            ip[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            ip[6] = ipv4::PROTO_UDP;
            ip[7] = 0xff; // hop limit (masked)
            ip[8..24].copy_from_slice(&to6(src).octets());
            ip[24..40].copy_from_slice(&to6(dst).octets());
            ipv6::HEADER_LEN
        }
    };
    let u = &mut masked[ip_len..ip_len + udp::HEADER_LEN];
    u[0..2].copy_from_slice(&src_port.to_be_bytes());
    u[2..4].copy_from_slice(&udp::ROCE_V2_PORT.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    u[6] = 0xff; // UDP checksum (masked)
    u[7] = 0xff;
    (masked, ip_len + udp::HEADER_LEN)
}

/// How many flows a [`PrefixCache`] remembers: a ping-pong touches two (one each
/// way), four when both ends share one engine.
const PREFIX_WAYS: usize = 4;

/// `DELTA[i][v]`: what a byte `v` instead of 0 in the masked IP + UDP prefix adds to the
/// CRC state after it, when `DELTA_FOLLOWING[i]` prefix bytes follow it. The CRC is
/// linear: the change is the CRC register of `v` followed by that many zero bytes,
/// starting from zero. These are the bytes of the length fields, the only prefix bytes
/// that change from packet to packet of a flow: IPv4 total length (bytes 2, 3 of 28),
/// IPv6 payload length (bytes 4, 5 of 48), UDP length (the prefix's bytes -4, -3), and
/// the IPv4 Identification (bytes 4, 5 of 28), which a connected socket numbers per
/// datagram (DESIGN §3).
const DELTA_FOLLOWING: [usize; 8] = [25, 24, 43, 42, 3, 2, 23, 22];
static DELTA: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 8 {
        let mut v = 0;
        while v < 256 {
            // The byte itself, then DELTA_FOLLOWING[i] zero bytes (reflected CRC-32).
            let mut reg = v as u32;
            let mut bits = 8 * (1 + DELTA_FOLLOWING[i]);
            while bits > 0 {
                reg = gf2::mul_x(reg);
                bits -= 1;
            }
            t[i][v] = reg;
            v += 1;
        }
        i += 1;
    }
    t
};

/// One flow of a [`PrefixCache`]: its addresses and UDP source port, and the CRC state
/// after the LRH stand-in and its masked IP + UDP headers with both length fields and
/// the IPv4 Identification zero.
#[derive(Debug, Clone, Copy)]
struct PrefixEntry {
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    /// The prefix is a 20-byte IPv4 header (else a 40-byte IPv6 one).
    v4: bool,
    state: u32,
}

/// Remembers, for the last few flows (address pair, UDP source port), the CRC state
/// after the LRH stand-in and the masked IP and UDP headers with their length fields
/// and IPv4 Identification zero, for [`compute_addrs_cached`]. On a small packet those
/// 36 or 56 bytes are most of what the ICRC hashes; a packet's own lengths and ID are
/// added in from tables (the CRC is linear), so one entry serves every length and ID
/// of its flow.
///
/// An entry is keyed by everything its state depends on, so it never goes stale.
#[derive(Debug, Clone, Default)]
pub struct PrefixCache {
    entries: [Option<PrefixEntry>; PREFIX_WAYS],
    /// The entry the next miss replaces (round robin).
    next: usize,
    /// Tables that solve the IPv4 ID for the packet lengths seen most
    /// ([`PrefixCache::solve_ipv4_id`]).
    solver: IdSolver,
}

/// Solves for the IPv4 Identification ([`ipv4_id_from_crcs`]) through a table per byte
/// count `m` after the ID, for the two counts met most recently (a ping-pong's message
/// and its ACK): the product by `x^(-8m)` is linear in its 32-bit operand, so four
/// byte lookups replace `popcount(m)` products. A table (4 KiB, held inline: the crate
/// does not allocate; 1,024 products to build) is built only for a count met
/// [`IdSolver::BUILD_AFTER`] times without one (among the four counts met most), so a
/// stream of ever-changing lengths never pays for building.
#[derive(Clone)]
struct IdSolver {
    /// (m, table); m = 0: no table yet (a real count is at least 24).
    tables: [(usize, [[u32; 256]; 4]); 2],
    /// The table the next build replaces.
    next: usize,
    /// Counts met without a table, and how often (the least met is forgotten first).
    pending: [(usize, u32); 4],
}

impl Default for IdSolver {
    fn default() -> Self {
        IdSolver {
            tables: [(0, [[0; 256]; 4]); 2],
            next: 0,
            pending: [(0, 0); 4],
        }
    }
}

impl core::fmt::Debug for IdSolver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let ms = [self.tables[0].0, self.tables[1].0];
        f.debug_struct("IdSolver").field("tables_for", &ms).finish()
    }
}

impl IdSolver {
    /// Solves met for one count before it gets a table.
    const BUILD_AFTER: u32 = 16;

    /// `d · x^(-8m) mod P` ([`gf2::mul_x_pow_neg_8m`]), from a table when `m` has one.
    fn mul(&mut self, d: u32, m: usize) -> u32 {
        if let Some((_, t)) = self.tables.iter().find(|(tm, _)| *tm == m) {
            return t[0][(d & 0xff) as usize]
                ^ t[1][((d >> 8) & 0xff) as usize]
                ^ t[2][((d >> 16) & 0xff) as usize]
                ^ t[3][(d >> 24) as usize];
        }
        let slot = match self.pending.iter().position(|p| p.0 == m) {
            Some(i) => i,
            None => {
                let (i, _) = self
                    .pending
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, p)| p.1)
                    .unwrap_or((0, &(0, 0)));
                self.pending[i] = (m, 0);
                i
            }
        };
        self.pending[slot].1 += 1;
        if self.pending[slot].1 >= Self::BUILD_AFTER {
            let (tm, t) = &mut self.tables[self.next];
            *tm = m;
            for (j, row) in t.iter_mut().enumerate() {
                for (b, v) in row.iter_mut().enumerate() {
                    *v = gf2::mul_x_pow_neg_8m((b as u32) << (8 * j), m);
                }
            }
            self.next = (self.next + 1) % self.tables.len();
            self.pending[slot] = (0, 0);
        }
        gf2::mul_x_pow_neg_8m(d, m)
    }
}

impl PrefixCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The CRC state after the LRH stand-in and the masked IP and UDP headers of a
    /// packet of `ib_len` bytes (BTH up to, not including, the ICRC).
    fn state(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        ipv4_id: u16,
        src_port: u16,
        ib_len: usize,
    ) -> u32 {
        let hit = self
            .entries
            .iter()
            .flatten()
            .find(|e| e.src_port == src_port && e.src == src && e.dst == dst);
        let e = match hit {
            Some(e) => *e,
            None => {
                let (mut prefix, at) = masked_prefix(src, dst, 0, src_port, 0);
                let v4 = at == ipv4::HEADER_LEN + udp::HEADER_LEN;
                let ip_len_at = if v4 { 2 } else { 4 };
                prefix[ip_len_at] = 0;
                prefix[ip_len_at + 1] = 0;
                prefix[at - 4] = 0;
                prefix[at - 3] = 0;
                let e = PrefixEntry {
                    src,
                    dst,
                    src_port,
                    v4,
                    state: crc_update(LRH_CRC, &prefix[..at]),
                };
                self.entries[self.next] = Some(e);
                self.next = (self.next + 1) % PREFIX_WAYS;
                e
            }
        };
        // The same (truncating) lengths as `masked_prefix`.
        let udp_len = udp::HEADER_LEN + ib_len + ICRC_LEN;
        let (ip_field, t) = if e.v4 {
            ((ipv4::HEADER_LEN + udp_len) as u16, 0)
        } else {
            (udp_len as u16, 2)
        };
        let udp_len = udp_len as u16;
        // IPv6 has no Identification (`masked_prefix` ignores it there).
        let id = if e.v4 { ipv4_id } else { 0 };
        e.state
            ^ DELTA[t][usize::from(ip_field >> 8)]
            ^ DELTA[t + 1][usize::from(ip_field & 0xff)]
            ^ DELTA[4][usize::from(udp_len >> 8)]
            ^ DELTA[5][usize::from(udp_len & 0xff)]
            ^ DELTA[6][usize::from(id >> 8)]
            ^ DELTA[7][usize::from(id & 0xff)]
    }
}

impl PrefixCache {
    /// [`ipv4_id_from_crcs`] (the same answer), faster for packet lengths that repeat:
    /// see `IdSolver` (private).
    pub fn solve_ipv4_id(
        &mut self,
        carried: u32,
        c0: u32,
        ip_len: usize,
        ib_len: usize,
    ) -> Option<u16> {
        let m = id_solve_span(carried, c0, ip_len, ib_len)?;
        if m == 0 {
            return Some(0);
        }
        let v = self.solver.mul(carried ^ c0, m);
        (v >> 16 == 0).then(|| (v as u16).swap_bytes())
    }
}

/// [`compute_addrs`] continuing from the state `cache` holds for the packet's masked IP
/// and UDP headers (computing and remembering it on a miss): the same value, without
/// hashing the headers again for each packet of a flow.
pub fn compute_addrs_cached(
    cache: &mut PrefixCache,
    src: IpAddr,
    dst: IpAddr,
    ipv4_id: u16,
    src_port: u16,
    ib_packet: &[u8],
) -> Result<u32> {
    compute_addrs_cached_parts(cache, src, dst, ipv4_id, src_port, [ib_packet, &[], &[]])
}

/// [`compute_addrs_cached`] of a packet given in three pieces, `parts[0]` (holding at
/// least the BTH), `parts[1]` and `parts[2]`, as if they were one: a sender that takes
/// a packet's payload straight from registered memory computes the ICRC without
/// gathering the packet first.
pub fn compute_addrs_cached_parts(
    cache: &mut PrefixCache,
    src: IpAddr,
    dst: IpAddr,
    ipv4_id: u16,
    src_port: u16,
    parts: [&[u8]; 3],
) -> Result<u32> {
    let ib_packet = parts[0];
    if ib_packet.len() < BTH_LEN {
        return Err(Error::Truncated("BTH"));
    }
    let ib_len = parts.iter().map(|p| p.len()).sum();
    let state = cache.state(src, dst, ipv4_id, src_port, ib_len);
    let mut bth = [0u8; BTH_LEN];
    bth.copy_from_slice(&ib_packet[..BTH_LEN]);
    bth[4] = 0xff; // BTH byte 4: FECN, BECN, resv6
    let mut crc = crc_update(state, &bth);
    for p in [&ib_packet[BTH_LEN..], parts[1], parts[2]] {
        if !p.is_empty() {
            crc = crc_update(crc, p);
        }
    }
    Ok(crc)
}

/// The RoCE v1 ICRC of a packet given as its GRH (40 bytes) and the IB transport packet
/// from the BTH up to (not including) the ICRC. Returns the value whose little-endian
/// bytes are the trailer.
///
/// This is the IBTA vol1 7.8.1 ICRC of an IB packet that carries a GRH: because a router
/// may rewrite the whole LRH, none of it is covered and its 8 bytes enter as all ones
/// (only a packet without a GRH covers its LRH, with VL set to ones); the GRH is covered
/// with TClass, FlowLabel and HopLmt set to ones, and the BTH with resv8a (byte 4) set to
/// ones. A RoCE v1 packet (Annex A16) is exactly such a packet without its LRH and VCRC.
/// The RoCE v2 ICRC (Annex A17.3.3) keeps the same all-ones LRH stand-in in front of the
/// IP and UDP headers, so this is [`compute_parts`]' IPv6 masking without a UDP header.
///
/// Checked against hardware: the six GRH-carrying packets of a 2008 capture of Mellanox
/// HCAs carry exactly this value, and no neighbouring rule matches them (real or
/// VL-masked LRH, no stand-in, any mask left out, IPVer masked); a ConnectX-4 Lx RoCE v2
/// CNP confirms the stand-in on mlx5. The same rule is written out in Mellanox's MPGA
/// packet analyzer (`update_ICRC`, IBA_GLOBAL branch) and in the RoCE v1 Soft-RoCE of
/// System Fabric Works and Mellanox (`SoftRoCE/rxe-dev`, `rxe_icrc.c`). Sources and tests:
/// `testdata/icrc/README.md`, `tests/icrc_hardware.rs`.
pub fn compute_grh_parts(grh: &[u8], ib_packet: &[u8]) -> Result<u32> {
    if grh.len() != crate::grh::GRH_LEN {
        return Err(Error::Truncated("GRH"));
    }
    if ib_packet.len() < BTH_LEN {
        return Err(Error::Truncated("BTH"));
    }
    let mut masked = [0u8; crate::grh::GRH_LEN + BTH_LEN];
    masked[..40].copy_from_slice(grh);
    masked[0] |= 0x0f; // TClass (high nibble) ...
    masked[1] = 0xff; // ... TClass (low nibble) and FlowLabel
    masked[2] = 0xff;
    masked[3] = 0xff;
    masked[7] = 0xff; // HopLmt
    masked[40..].copy_from_slice(&ib_packet[..BTH_LEN]);
    masked[40 + 4] = 0xff; // BTH byte 4: FECN, BECN, resv6

    // After the eight all-ones bytes of the LRH stand-in (`LRH_CRC`).
    let crc = crc_update(LRH_CRC, &masked);
    Ok(crc_update(crc, &ib_packet[BTH_LEN..]))
}

/// Splits an IP datagram (IPv4 or IPv6, starting at the IP header, possibly followed by
/// link-layer padding) into IP header, UDP header and UDP payload.
fn split(datagram: &[u8]) -> Result<(&[u8], &[u8], &[u8])> {
    let (ip_header, ip_payload) = match datagram.first().map(|b| b >> 4) {
        Some(4) => {
            let p = ipv4::Ipv4Packet::new_checked(datagram)?;
            let hl = p.header_len();
            (&datagram[..hl], p.payload())
        }
        Some(6) => {
            let p = ipv6::Ipv6Packet::new_checked(datagram)?;
            (&datagram[..ipv6::HEADER_LEN], p.payload())
        }
        Some(_) => return Err(Error::Malformed("IP version is neither 4 nor 6")),
        None => return Err(Error::Truncated("IP header")),
    };
    let u = udp::UdpPacket::new_checked(ip_payload)?;
    let udp_len = usize::from(u.len());
    Ok((
        ip_header,
        &ip_payload[..udp::HEADER_LEN],
        &ip_payload[udp::HEADER_LEN..udp_len],
    ))
}

/// The ICRC a datagram should carry: computed over everything but the last four bytes of
/// its UDP payload.
pub fn compute(datagram: &[u8]) -> Result<u32> {
    let (ip, udp_hdr, payload) = split(datagram)?;
    if payload.len() < BTH_LEN + ICRC_LEN {
        return Err(Error::Truncated("RoCE v2 packet"));
    }
    compute_parts(ip, udp_hdr, &payload[..payload.len() - ICRC_LEN])
}

/// The ICRC a datagram carries (its last four UDP payload bytes, little-endian).
pub fn carried(datagram: &[u8]) -> Result<u32> {
    let (_, _, payload) = split(datagram)?;
    let Some(at) = payload.len().checked_sub(ICRC_LEN) else {
        return Err(Error::Truncated("ICRC"));
    };
    let mut b = [0u8; 4];
    b.copy_from_slice(&payload[at..]);
    Ok(u32::from_le_bytes(b))
}

/// True when a datagram's ICRC is right.
pub fn verify(datagram: &[u8]) -> Result<bool> {
    Ok(compute(datagram)? == carried(datagram)?)
}

/// Computes the ICRC of a datagram and writes it into its last four UDP payload bytes.
pub fn fill(datagram: &mut [u8]) -> Result<()> {
    let crc = compute(datagram)?;
    let (ip, udp_hdr, payload) = split(datagram)?;
    let end = ip.len() + udp_hdr.len() + payload.len();
    datagram[end - ICRC_LEN..end].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Recovers the IPv4 Identification a packet was sent with from its ICRC.
///
/// `ip_header` is the IPv4 header (with any options) as the receiver rebuilt it; the
/// value in its Identification field (bytes 4..6) is ignored. `udp_header` is the 8-byte
/// UDP header and `ib_packet_with_icrc` the UDP payload: BTH through pad, then the ICRC.
///
/// Returns `Some(id)` when exactly one ID makes the carried ICRC match (there is never
/// more than one), `None` when no ID does. Every single-bit error is still caught, but a
/// packet corrupted over 32 bits or more finds some ID with probability 2^-16, so this is
/// a weaker check than [`verify`] with a known ID.
/// IPv6 headers are an error: they can be rebuilt exactly, so use [`verify`].
///
/// Cost: one ICRC pass plus at most 17 products by constant polynomials mod P (eight
/// table lookups each), one per set bit of the byte count after the ID.
pub fn recover_ipv4_id(
    ip_header: &[u8],
    udp_header: &[u8],
    ib_packet_with_icrc: &[u8],
) -> Result<Option<u16>> {
    match ip_header.first() {
        None => return Err(Error::Truncated("IP header")),
        Some(b) if b >> 4 != 4 => {
            return Err(Error::Malformed("IP ID recovery needs an IPv4 header"))
        }
        Some(_) => {}
    }
    let ip_len = ip_header.len();
    if !(ipv4::HEADER_LEN..=60).contains(&ip_len) {
        return Err(Error::Malformed("IP header length for ICRC"));
    }
    let Some(ib_len) = ib_packet_with_icrc.len().checked_sub(ICRC_LEN) else {
        return Err(Error::Truncated("ICRC"));
    };
    if ib_packet_with_icrc.len() > usize::from(u16::MAX) - udp::HEADER_LEN {
        return Err(Error::Malformed(
            "UDP payload longer than a UDP length can say",
        ));
    }
    let (ib_packet, trailer) = ib_packet_with_icrc.split_at(ib_len);
    let mut ip = [0u8; 60];
    ip[..ip_len].copy_from_slice(ip_header);
    ip[4] = 0;
    ip[5] = 0;
    let c0 = compute_parts(&ip[..ip_len], udp_header, ib_packet)?;
    let mut b = [0u8; ICRC_LEN];
    b.copy_from_slice(trailer);
    let carried = u32::from_le_bytes(b);
    Ok(ipv4_id_from_crcs(carried, c0, ip_len, ib_len))
}

/// The second half of [`recover_ipv4_id`], for a caller that already has `c0`, the ICRC
/// of the packet with Identification 0 (e.g. from [`compute_addrs_cached`]): the one ID
/// that turns `c0` into the `carried` ICRC, for an IPv4 header of `ip_len` bytes and an
/// IB packet of `ib_len` bytes (BTH up to, not including, the ICRC). `None` when no ID
/// does or the lengths are out of range (`ip_len` 20..=60, UDP length within 16 bits).
pub fn ipv4_id_from_crcs(carried: u32, c0: u32, ip_len: usize, ib_len: usize) -> Option<u16> {
    let m = id_solve_span(carried, c0, ip_len, ib_len)?;
    if m == 0 {
        return Some(0);
    }
    let v = gf2::mul_x_pow_neg_8m(carried ^ c0, m);
    // `v` is the two ID bytes as they entered the register: first byte in bits 0..8.
    if v >> 16 == 0 {
        Some((v as u16).swap_bytes())
    } else {
        None
    }
}

/// For [`ipv4_id_from_crcs`]: `Some(0)` when the ICRCs match (ID 0, what Linux sends
/// from an unconnected socket with DF: no products needed), `None` when the lengths are
/// out of range, else the byte count `m` of the CRC'd stream from the first ID byte to
/// its end (the ID and the rest of the IP header, the UDP header, and the IB packet
/// without the ICRC).
fn id_solve_span(carried: u32, c0: u32, ip_len: usize, ib_len: usize) -> Option<usize> {
    if carried == c0 {
        return Some(0);
    }
    if !(ipv4::HEADER_LEN..=60).contains(&ip_len)
        || ib_len + ICRC_LEN > usize::from(u16::MAX) - udp::HEADER_LEN
    {
        return None;
    }
    Some((ip_len - 4) + udp::HEADER_LEN + ib_len)
}

/// [`recover_ipv4_id`] over a whole IPv4 datagram (IP header first, possibly followed by
/// link-layer padding) whose Identification field holds any value.
pub fn verify_ipv4_unknown_id(datagram_without_real_id: &[u8]) -> Result<Option<u16>> {
    let (ip, udp_hdr, payload) = split(datagram_without_real_id)?;
    recover_ipv4_id(ip, udp_hdr, payload)
}

/// Arithmetic on polynomials over GF(2) modulo the CRC-32 polynomial P, in the
/// bit-reflected representation the CRC register uses: bit 31 holds the coefficient of
/// x^0, bit 0 that of x^31. The technique is zlib's (`crc32.c`: `multmodp`, `x2nmodp`,
/// `crc32_combine`), written afresh here.
///
/// Why it recovers the ID: the CRC register (before the final inversion) is linear in
/// the message bits for a fixed length, so changing the two ID bytes from 0 to `id`
/// changes the ICRC by the CRC of a message that is `id` followed by zeros, i.e. by
/// `id(x) · x^(32 + 8k) mod P`, where `k` bytes follow the ID. Written as a register
/// value, the two ID bytes alone (first byte in bits 0..8) already stand for
/// `id(x) · x^16`, so the change is `v · x^(8m) mod P` with `m = k + 2`. Since x is
/// invertible mod P (P has a constant term), `v = (carried ^ c0) · x^(-8m) mod P`, and
/// the ID is valid only when `v` fits in 16 bits. x^-1 = (P - 1) / x needs no Euclid.
mod gf2 {
    /// The reflected CRC-32 polynomial (x^32 implied).
    pub(super) const POLY: u32 = 0xedb8_8320;
    /// The polynomial 1.
    pub(super) const ONE: u32 = 0x8000_0000;

    /// `a · x mod P`.
    pub(super) const fn mul_x(a: u32) -> u32 {
        (a >> 1) ^ (POLY & (a & 1).wrapping_neg())
    }

    /// `a · x^-1 mod P`: undoes [`mul_x`] (bit 31, x^0, of its result is set exactly when
    /// it reduced, because POLY has bit 31 set and `a >> 1` has not).
    pub(super) const fn div_x(a: u32) -> u32 {
        if a & ONE != 0 {
            ((a ^ POLY) << 1) | 1
        } else {
            a << 1
        }
    }

    /// `a · b mod P`: shift-and-add over the 32 coefficients of `a`, without branches.
    pub(super) const fn mul(a: u32, mut b: u32) -> u32 {
        let mut a = a;
        let mut p = 0;
        let mut i = 0;
        while i < 32 {
            p ^= b & (a >> 31).wrapping_neg();
            a <<= 1;
            b = mul_x(b);
            i += 1;
        }
        p
    }

    /// `X_POW_NEG_8[n] = x^(-8 · 2^n) mod P`.
    pub(super) const X_POW_NEG_8: [u32; 32] = {
        let mut t = [0u32; 32];
        let mut x = ONE;
        let mut i = 0;
        while i < 8 {
            x = div_x(x);
            i += 1;
        }
        t[0] = x;
        let mut n = 1;
        while n < 32 {
            t[n] = mul(t[n - 1], t[n - 1]);
            n += 1;
        }
        t
    };

    /// How many bits `m` may have: the CRC'd stream after the ID is at most
    /// 56 + 65535 bytes (IPv4 header rest with options, UDP length).
    pub(super) const M_BITS: usize = 17;

    /// `MUL_NEG_8[n][i][d] = (d << 4i) · x^(-8 · 2^n) mod P`: a product by one of the
    /// constants in [`X_POW_NEG_8`] is then eight lookups, one per nibble of the other
    /// factor (the product is linear in it). 17 × 8 × 16 words = 8.5 KiB.
    pub(super) static MUL_NEG_8: [[[u32; 16]; 8]; M_BITS] = {
        let mut t = [[[0u32; 16]; 8]; M_BITS];
        let mut n = 0;
        while n < M_BITS {
            let mut i = 0;
            while i < 8 {
                let mut d = 0;
                while d < 16 {
                    t[n][i][d] = mul((d as u32) << (4 * i), X_POW_NEG_8[n]);
                    d += 1;
                }
                i += 1;
            }
            n += 1;
        }
        t
    };

    /// `a · x^(-8 · 2^n) mod P` through [`MUL_NEG_8`].
    pub(super) fn mul_neg_8_pow2(a: u32, n: usize) -> u32 {
        let t = &MUL_NEG_8[n];
        let mut p = 0;
        let mut i = 0;
        while i < 8 {
            p ^= t[i][((a >> (4 * i)) & 0xf) as usize];
            i += 1;
        }
        p
    }

    /// `a · x^(-8m) mod P` by square-and-multiply over the bits of `m` (`m < 2^17`):
    /// `popcount(m)` products.
    pub(super) fn mul_x_pow_neg_8m(mut a: u32, m: usize) -> u32 {
        debug_assert!(m >> M_BITS == 0);
        let mut n = 0;
        while n < M_BITS {
            if (m >> n) & 1 != 0 {
                a = mul_neg_8_pow2(a, n);
            }
            n += 1;
        }
        a
    }
}

/// The tests' pcap reader (shared with `tests/icrc_hardware.rs`).
#[cfg(test)]
#[path = "../tests/common/pcap.rs"]
mod test_pcap;

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> std::vec::Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn lrh_state_is_the_crc_of_eight_ones_bytes() {
        assert_eq!(LRH_CRC, crc32fast::hash(&[0xff; 8]));
        assert_eq!(!LRH_CRC, 0xdebb_20e3); // the kernel's seed (rxe_icrc.c)
    }

    #[test]
    fn crc_short_is_crc32_at_every_length_and_seed() {
        // The slice-by-8 tables against crc32fast, continuing from several states (the
        // LRH stand-in's among them) over every length through two whole words past
        // the threshold, so every remainder is taken; and `crc_update` on both sides.
        let data: std::vec::Vec<u8> = (0..SHORT + 17).map(|i| (i * 131 + 7) as u8).collect();
        for seed in [0, LRH_CRC, 0xffff_ffff, 0x1234_5678] {
            for n in 0..data.len() {
                let mut h = crc32fast::Hasher::new_with_initial(seed);
                h.update(&data[..n]);
                let want = h.finalize();
                assert_eq!(
                    crc_short(seed, &data[..n]),
                    want,
                    "{n} bytes from {seed:#x}"
                );
                assert_eq!(
                    crc_update(seed, &data[..n]),
                    want,
                    "{n} bytes from {seed:#x}"
                );
            }
        }
    }

    #[test]
    fn one_pass_and_split_hashing_agree_at_every_length() {
        // compute_parts hashes the masked headers and the rest in two updates, each by
        // table or by crc32fast after its length; every way must be the plain CRC of the
        // masked stream.
        let d = hex(VECTOR);
        let (ip, udp_hdr) = (&d[..20], &d[20..28]);
        let mut bth = d[28..40].to_vec();
        for n in [0, 1, SHORT - 1, SHORT, SHORT + 1, 4096] {
            bth.truncate(12);
            bth.extend((0..n).map(|i| (i * 7 + 3) as u8));
            let mut stream = std::vec![0xffu8; 8];
            stream.extend_from_slice(ip);
            stream.extend_from_slice(udp_hdr);
            stream.extend_from_slice(&bth);
            let at = 8;
            stream[at + 1] = 0xff;
            stream[at + 8] = 0xff;
            stream[at + 10] = 0xff;
            stream[at + 11] = 0xff;
            stream[at + 26] = 0xff;
            stream[at + 27] = 0xff;
            stream[at + 32] = 0xff;
            assert_eq!(
                compute_parts(ip, udp_hdr, &bth).unwrap(),
                crc32fast::hash(&stream),
                "{n} bytes after the BTH"
            );
        }
    }

    /// DESIGN §3: IPv4 10.0.0.1 → 10.0.0.2, RC SEND_ONLY "hello", ICRC 06 45 16 76.
    const VECTOR: &str = "4500003400004000401126b70a0000010a000002c00012b7002000000430ffff000000118000000068656c6c6f000000";

    #[test]
    fn design_vector() {
        let mut d = hex(VECTOR);
        d.extend_from_slice(&[0, 0, 0, 0]);
        fill(&mut d).unwrap();
        assert_eq!(&d[d.len() - 4..], &[0x06, 0x45, 0x16, 0x76]);
        assert!(verify(&d).unwrap());
        // Masked fields do not change it ...
        let mut m = d.clone();
        m[1] = 0xb8; // TOS
        m[8] = 3; // TTL
        m[26] = 0x12; // UDP checksum
        m[32] = 0xc0; // BTH FECN/BECN
        assert!(verify(&m).unwrap());
        // ... and every other bit does.
        for byte in 0..d.len() {
            if [1, 8, 10, 11, 26, 27, 32].contains(&byte) {
                continue;
            }
            for bit in 0..8 {
                let mut c = d.clone();
                c[byte] ^= 1 << bit;
                // A flip may break the IP/UDP framing itself; then it is an error, not a pass.
                assert_ne!(verify(&c), Ok(true), "byte {byte} bit {bit}");
            }
        }
    }

    #[test]
    fn ipv6_masks_tc_flow_and_hop_limit() {
        let mut d = std::vec![0u8; 40 + 8 + 12 + 4];
        d[0] = 0x60;
        d[4..6].copy_from_slice(&(8u16 + 16).to_be_bytes());
        d[6] = 17;
        d[7] = 64;
        d[8] = 0xfd;
        d[24] = 0xfd;
        d[40..42].copy_from_slice(&0xc000u16.to_be_bytes());
        d[42..44].copy_from_slice(&4791u16.to_be_bytes());
        d[44..46].copy_from_slice(&24u16.to_be_bytes());
        d[48] = 0x11; // RC ACKNOWLEDGE (no AETH needed for the CRC itself)
        fill(&mut d).unwrap();
        let mut m = d.clone();
        m[0] = 0x6f;
        m[1] = 0xab;
        m[3] = 0x42;
        m[7] = 1;
        assert!(verify(&m).unwrap());
        m[9] ^= 1;
        assert!(!verify(&m).unwrap());
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(compute(&[]).is_err());
        assert!(compute(&[0x55; 60]).is_err());
        assert!(compute_parts(&[0x45; 20], &[0; 7], &[0; 12]).is_err());
        assert!(compute_parts(&[0x45; 20], &[0; 8], &[0; 11]).is_err());
        assert!(compute_parts(&[0x65; 20], &[0; 8], &[0; 12]).is_err());
        // The IP header announces 52 bytes; 20 are present.
        assert!(compute(&hex(VECTOR)[..20]).is_err());
    }

    // ---- IPv4 Identification recovery ----

    use proptest::prelude::*;
    use std::vec::Vec;

    /// An IPv4/UDP/RoCE v2 datagram with `ib_len` bytes of IB packet (BTH onwards, before
    /// the ICRC), `opt_words` words of IP options, and its ICRC filled in.
    fn datagram(id: u16, src: u32, dst: u32, opt_words: usize, ib: &[u8], sport: u16) -> Vec<u8> {
        let hl = 20 + 4 * opt_words;
        let udp_len = 8 + ib.len() + ICRC_LEN;
        let mut d = std::vec![0u8; hl + udp_len];
        d[0] = 0x40 | (hl / 4) as u8;
        d[1] = 0x02;
        d[2..4].copy_from_slice(&((hl + udp_len) as u16).to_be_bytes());
        d[4..6].copy_from_slice(&id.to_be_bytes());
        d[6] = 0x40; // DF
        d[8] = 64;
        d[9] = 17;
        d[12..16].copy_from_slice(&src.to_be_bytes());
        d[16..20].copy_from_slice(&dst.to_be_bytes());
        for (i, b) in d[20..hl].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37) | 1; // opaque option bytes (no EOL)
        }
        d[hl..hl + 2].copy_from_slice(&sport.to_be_bytes());
        d[hl + 2..hl + 4].copy_from_slice(&4791u16.to_be_bytes());
        d[hl + 4..hl + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        d[hl + 8..hl + 8 + ib.len()].copy_from_slice(ib);
        fill(&mut d).unwrap();
        d
    }

    fn ip_len(d: &[u8]) -> usize {
        usize::from(d[0] & 0x0f) * 4
    }

    /// Reproducible pseudo-random numbers (SplitMix64).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn gf2_inverse_of_x_and_table() {
        use gf2::*;
        let x = mul_x(ONE);
        assert_eq!(x, 0x4000_0000);
        assert_eq!(mul(x, div_x(ONE)), ONE);
        let mut rng = Rng(1);
        for _ in 0..1000 {
            let a = rng.next() as u32;
            assert_eq!(mul_x(div_x(a)), a);
            assert_eq!(div_x(mul_x(a)), a);
            let b = rng.next() as u32;
            assert_eq!(mul(a, b), mul(b, a));
            assert_eq!(mul(a, ONE), a);
            assert_eq!(mul(a, x), mul_x(a));
        }
        // X_POW_NEG_8[n] is the inverse of x^(8 · 2^n), the latter built by repeated
        // squaring of x^8 = eight multiplications by x.
        let mut fwd = ONE;
        for _ in 0..8 {
            fwd = mul_x(fwd);
        }
        for inv in X_POW_NEG_8 {
            assert_eq!(mul(fwd, inv), ONE);
            fwd = mul(fwd, fwd);
        }
        // The nibble tables multiply by the same constants.
        for (n, &c) in X_POW_NEG_8[..M_BITS].iter().enumerate() {
            for _ in 0..200 {
                let a = rng.next() as u32;
                assert_eq!(mul_neg_8_pow2(a, n), mul(a, c));
            }
        }
    }

    /// The GF(2) model matches the real CRC: a change of `v` in the register followed by
    /// `m` zero bytes changes the CRC by `v · x^(8m)`; dividing that back gives `v`.
    #[test]
    fn gf2_matches_crc32_linearity() {
        let mut rng = Rng(2);
        for _ in 0..200 {
            let m = 2 + rng.below(300);
            let mut msg: Vec<u8> = (0..m).map(|_| rng.next() as u8).collect();
            let a = crc32fast::hash(&msg);
            let (b0, b1) = (rng.next() as u8, rng.next() as u8);
            msg[0] ^= b0;
            msg[1] ^= b1;
            let t = a ^ crc32fast::hash(&msg);
            let v = gf2::mul_x_pow_neg_8m(t, m);
            assert_eq!(v, u32::from(b0) | u32::from(b1) << 8);
        }
    }

    #[test]
    fn design_vector_has_id_zero_and_others_are_found() {
        let mut d = hex(VECTOR);
        d.extend_from_slice(&[0, 0, 0, 0]);
        fill(&mut d).unwrap();
        assert_eq!(verify_ipv4_unknown_id(&d), Ok(Some(0)));
        for id in [1u16, 0x00ff, 0xff00, 0x176c, 0xffff] {
            d[4..6].copy_from_slice(&id.to_be_bytes());
            fill(&mut d).unwrap();
            d[4..6].copy_from_slice(&[0xde, 0xad]); // what the receiver puts there is ignored
            assert_eq!(verify_ipv4_unknown_id(&d), Ok(Some(id)));
        }
    }

    #[test]
    fn recovery_rejects_bad_inputs() {
        let mut d = hex(VECTOR);
        d.extend_from_slice(&[0, 0, 0, 0]);
        fill(&mut d).unwrap();
        let (ip, udp_hdr, ib) = (&d[..20], &d[20..28], &d[28..]);
        assert_eq!(recover_ipv4_id(ip, udp_hdr, ib), Ok(Some(0)));
        assert!(recover_ipv4_id(&[], udp_hdr, ib).is_err());
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        assert!(recover_ipv4_id(&v6, udp_hdr, ib).is_err());
        assert!(recover_ipv4_id(&ip[..19], udp_hdr, ib).is_err());
        assert!(recover_ipv4_id(ip, &udp_hdr[..7], ib).is_err());
        assert!(recover_ipv4_id(ip, udp_hdr, &ib[..15]).is_err()); // BTH + ICRC = 16
        assert!(recover_ipv4_id(ip, udp_hdr, &ib[..3]).is_err());
        let huge = std::vec![0u8; 65536];
        assert!(recover_ipv4_id(ip, udp_hdr, &huge).is_err());
        assert!(verify_ipv4_unknown_id(&d[..30]).is_err());
    }

    #[test]
    fn compute_addrs_gives_the_design_vector() {
        let d = hex(VECTOR);
        let (s, t) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        assert_eq!(
            compute_addrs(s, t, 0, 0xc000, &d[28..]),
            Ok(u32::from_le_bytes([0x06, 0x45, 0x16, 0x76]))
        );
        assert!(compute_addrs(s, t, 0, 0xc000, &d[28..39]).is_err());
    }

    /// The real headers of a datagram [`compute_addrs`] describes, emitted with the given
    /// masked fields (TOS / traffic class, TTL / hop limit, flow label, UDP checksum).
    fn emitted_headers(
        src: IpAddr,
        dst: IpAddr,
        id: u16,
        sport: u16,
        ib_len: usize,
        noise: (u8, u8, u32, u16),
    ) -> std::vec::Vec<u8> {
        let (tos, ttl, flow, csum) = noise;
        let udp_payload = ib_len + ICRC_LEN;
        let mut h = std::vec![0u8; 48];
        let ip_len = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let r = ipv4::Ipv4Repr {
                    src: s,
                    dst: d,
                    tos,
                    ident: id,
                    dont_frag: true,
                    ttl,
                    protocol: ipv4::PROTO_UDP,
                    payload_len: udp::HEADER_LEN + udp_payload,
                };
                r.emit(&mut ipv4::Ipv4Packet::new_unchecked(&mut h[..20]));
                20
            }
            _ => {
                let to6 = |a: IpAddr| match a {
                    IpAddr::V4(v) => v.to_ipv6_mapped(),
                    IpAddr::V6(v) => v,
                };
                let r = ipv6::Ipv6Repr {
                    src: to6(src),
                    dst: to6(dst),
                    traffic_class: tos,
                    flow_label: flow & 0xf_ffff,
                    next_header: ipv4::PROTO_UDP,
                    hop_limit: ttl,
                    payload_len: udp::HEADER_LEN + udp_payload,
                };
                r.emit(&mut ipv6::Ipv6Packet::new_unchecked(&mut h[..40]));
                40
            }
        };
        let u = udp::UdpRepr {
            src_port: sport,
            dst_port: udp::ROCE_V2_PORT,
            payload_len: udp_payload,
            checksum: csum,
        };
        u.emit(&mut udp::UdpPacket::new_unchecked(
            &mut h[ip_len..ip_len + 8],
        ));
        h.truncate(ip_len + 8);
        h
    }

    proptest! {
        /// `compute_addrs` equals `compute_parts` over the emitted headers, for IPv4,
        /// IPv6 and mixed pairs (sent as IPv6 with the IPv4-mapped address), any masked
        /// field values and packet lengths on both sides of the one-pass limit.
        #[test]
        fn compute_addrs_matches_emitted_headers(
            a4: [u8; 4], b4: [u8; 4], a6: [u8; 16], b6: [u8; 16], family in 0u8..4,
            id: u16, sport: u16, noise: (u8, u8, u32, u16),
            ib in proptest::collection::vec(any::<u8>(), 12..600),
        ) {
            let (src, dst) = match family {
                0 => (IpAddr::from(a4), IpAddr::from(b4)),
                1 => (IpAddr::from(a6), IpAddr::from(b6)),
                2 => (IpAddr::from(a4), IpAddr::from(b6)),
                _ => (IpAddr::from(a6), IpAddr::from(b4)),
            };
            let h = emitted_headers(src, dst, id, sport, ib.len(), noise);
            let ip_len = h.len() - 8;
            prop_assert_eq!(
                compute_addrs(src, dst, id, sport, &ib),
                compute_parts(&h[..ip_len], &h[ip_len..], &ib)
            );
        }
    }

    proptest! {
        /// One cache fed a random stream of packets over a few flows (so entries are hit,
        /// missed and evicted, and a flow comes back with other lengths, IDs and ports
        /// than its cached entry) always gives what `compute_addrs` gives.
        #[test]
        fn cached_matches_uncached(
            addrs: [[u8; 16]; 3],
            packets in proptest::collection::vec(
                (0usize..3, 0usize..3, 0u8..4, any::<u16>(), 0u16..2,
                 proptest::collection::vec(any::<u8>(), 0..300)),
                1..40),
        ) {
            let mut cache = PrefixCache::new();
            for (s, d, family, id, sport, ib) in packets {
                let ip = |i: usize, v6: bool| -> IpAddr {
                    if v6 { IpAddr::from(addrs[i]) } else {
                        IpAddr::from([addrs[i][0], addrs[i][1], addrs[i][2], addrs[i][3]])
                    }
                };
                let (src, dst) = (ip(s, family & 1 != 0), ip(d, family & 2 != 0));
                let sport = 0xc000 + sport;
                prop_assert_eq!(
                    compute_addrs_cached(&mut cache, src, dst, id, sport, &ib),
                    compute_addrs(src, dst, id, sport, &ib)
                );
            }
        }
    }

    proptest! {
        /// The cached solver gives what `ipv4_id_from_crcs` gives, for lengths that
        /// repeat (so tables are built, used and replaced) and ones that do not, for
        /// right and wrong ICRCs alike.
        #[test]
        fn cached_id_solver_matches_the_plain_one(
            seq in proptest::collection::vec(
                (prop_oneof![Just(20usize), Just(24), Just(40), 12usize..2000],
                 any::<u16>(), any::<u32>(), any::<bool>()),
                1..200),
        ) {
            let mut cache = PrefixCache::new();
            let (s, t) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
            for (len, id, noise, corrupt) in seq {
                let ib = std::vec![0x5au8; len];
                let c0 = compute_addrs(s, t, 0, 0xc000, &ib).unwrap();
                let mut carried = compute_addrs(s, t, id, 0xc000, &ib).unwrap();
                if corrupt {
                    carried ^= noise | 1;
                }
                prop_assert_eq!(
                    cache.solve_ipv4_id(carried, c0, 20, len),
                    ipv4_id_from_crcs(carried, c0, 20, len)
                );
                if !corrupt {
                    prop_assert_eq!(cache.solve_ipv4_id(carried, c0, 20, len), Some(id));
                }
            }
            // Out of range, as the plain one.
            prop_assert_eq!(cache.solve_ipv4_id(1, 2, 19, 40), None);
            prop_assert_eq!(cache.solve_ipv4_id(1, 2, 20, 65_530), None);
        }
    }

    /// A flow whose length, ID or port changes after its prefix was cached gets a new
    /// prefix, not the stale one; more flows than the cache holds evict and recompute.
    #[test]
    fn cached_prefix_is_never_stale() {
        let (s, t) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let mut cache = PrefixCache::new();
        let ib = [0x5au8; 64];
        for round in 0..3 {
            for len in 12..=64 {
                for (id, port) in [(0, 0xc000), (7, 0xc000), (0xbeef, 0xc000), (0, 0xc001)] {
                    assert_eq!(
                        compute_addrs_cached(&mut cache, s, t, id, port, &ib[..len]),
                        compute_addrs(s, t, id, port, &ib[..len]),
                        "round {round} len {len} id {id} port {port}"
                    );
                }
            }
        }
        // Lengths whose IP and UDP length fields wrap at 16 bits, as `compute_addrs`
        // writes them, for both families.
        let big = std::vec![0x3cu8; 65_560];
        for (s, t) in [(s, t), (IpAddr::from([0xfd; 16]), t)] {
            for len in [65_490, 65_503, 65_504, 65_523, 65_524, 65_560] {
                assert_eq!(
                    compute_addrs_cached(&mut cache, s, t, 3, 0xc000, &big[..len]),
                    compute_addrs(s, t, 3, 0xc000, &big[..len]),
                    "len {len}"
                );
            }
        }
        assert!(compute_addrs_cached(&mut cache, s, t, 0, 0xc000, &ib[..11]).is_err());
    }

    /// A packet in three pieces has the ICRC of the whole, wherever it is cut (after
    /// the BTH), for both families; a first piece shorter than the BTH is an error.
    #[test]
    fn icrc_of_parts_is_the_icrc_of_the_whole() {
        let mut cache = PrefixCache::new();
        let ib: std::vec::Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for (s, t) in [
            (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2])),
            (IpAddr::from([0xfd; 16]), IpAddr::from([0xfe; 16])),
        ] {
            for a in (BTH_LEN..=ib.len()).step_by(7) {
                for b in (a..=ib.len()).step_by(11).chain([ib.len()]) {
                    let parts = [&ib[..a], &ib[a..b], &ib[b..]];
                    assert_eq!(
                        compute_addrs_cached_parts(&mut cache, s, t, 9, 0xc123, parts).unwrap(),
                        compute_addrs(s, t, 9, 0xc123, &ib).unwrap(),
                        "cut at {a} and {b}"
                    );
                }
            }
            let short = [&ib[..BTH_LEN - 1], &ib[BTH_LEN - 1..], &[][..]];
            assert!(compute_addrs_cached_parts(&mut cache, s, t, 0, 0xc000, short).is_err());
        }
    }

    /// `ipv4_id_from_crcs` with the cached ID-0 ICRC finds what `recover_ipv4_id` finds,
    /// and nothing for lengths no datagram can have.
    #[test]
    fn id_from_cached_crcs() {
        let ib: std::vec::Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(29)).collect();
        let mut cache = PrefixCache::new();
        let (s, t) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        for id in [0u16, 1, 0x1234, 0xffff] {
            let d = datagram(id, 0x0a00_0001, 0x0a00_0002, 0, &ib, 0xc000);
            let carried = carried(&d).unwrap();
            let c0 = compute_addrs_cached(&mut cache, s, t, 0, 0xc000, &ib).unwrap();
            assert_eq!(ipv4_id_from_crcs(carried, c0, 20, ib.len()), Some(id));
            assert_eq!(ipv4_id_from_crcs(carried ^ 1, c0, 20, ib.len()), None);
        }
        assert_eq!(ipv4_id_from_crcs(1, 2, 19, 40), None);
        assert_eq!(ipv4_id_from_crcs(1, 2, 20, 65_530), None);
    }

    proptest! {
        #[test]
        fn recovers_the_id_used(id: u16, garbage: u16, src: u32, dst: u32, sport: u16,
                                opt_words in 0usize..=10,
                                ib in proptest::collection::vec(any::<u8>(), 12..4200)) {
            let mut d = datagram(id, src, dst, opt_words, &ib, sport);
            prop_assert!(verify(&d).unwrap());
            d[4..6].copy_from_slice(&garbage.to_be_bytes());
            let hl = ip_len(&d);
            prop_assert_eq!(recover_ipv4_id(&d[..hl], &d[hl..hl + 8], &d[hl + 8..]), Ok(Some(id)));
            prop_assert_eq!(verify_ipv4_unknown_id(&d), Ok(Some(id)));
        }
    }

    /// No single-bit error gives any ID, for every RoCE v2 packet size. The ID is solved
    /// as `v = (carried ^ c0) · x^(-8m)`; a bit `b` flipped `j` bytes after the first ID
    /// byte adds `(1 << b) · x^(-8j)` to `v`, and a bit `b` flipped in the ICRC adds
    /// `(1 << b) · x^(-8m)`. Neither ever fits in 16 bits for `j`, `m` up to the largest
    /// packet (IPv4 options 40 bytes, IB packet 4200), so such an error is always caught.
    #[test]
    fn single_bit_errors_are_always_caught() {
        use gf2::*;
        let max_m = (60 - 4) + 8 + 4200;
        let mut y = ONE; // x^(-8j)
        for j in 0..=max_m {
            for b in 0..32 {
                if b < 8 && j >= 2 {
                    assert_ne!(mul(1 << b, y) >> 16, 0, "bit {b} of byte {j} after the ID");
                }
                if j >= (20 - 4) + 8 + 12 {
                    assert_ne!(mul(1 << b, y) >> 16, 0, "ICRC bit {b}, m = {j}");
                }
            }
            for _ in 0..8 {
                y = div_x(y);
            }
        }
        // The same through the API, on random packets and bits.
        let mut rng = Rng(3);
        for _ in 0..4000 {
            let ib: Vec<u8> = (0..12 + rng.below(4189))
                .map(|_| rng.next() as u8)
                .collect();
            let opt_words = rng.below(11);
            let mut d = datagram(rng.next() as u16, 1, 2, opt_words, &ib, 0xc000);
            let start = 28 + 4 * opt_words;
            // Any bit of the IB packet or its ICRC but the masked BTH byte 4.
            let byte = loop {
                let b = start + rng.below(ib.len() + ICRC_LEN);
                if b != start + 4 {
                    break b;
                }
            };
            d[byte] ^= 1 << rng.below(8);
            assert_eq!(verify_ipv4_unknown_id(&d), Ok(None), "byte {byte}");
        }
    }

    /// Errors spread over 32 bits or more find some ID once in about 2^16 packets: a
    /// random non-zero 4-byte error moves `v` to a uniformly random non-zero value, which
    /// fits in 16 bits with probability (2^16 - 1) / (2^32 - 1).
    #[test]
    fn burst_errors_false_accept_rate() {
        const TRIALS: u32 = 1 << 20;
        let mut rng = Rng(4);
        let mut false_accepts = 0u32;
        let mut ib = Vec::new();
        for _ in 0..TRIALS {
            ib.clear();
            let len = 12 + rng.below(52);
            ib.extend((0..len).map(|_| rng.next() as u8));
            let id = rng.next() as u16;
            let mut d = datagram(id, rng.next() as u32, rng.next() as u32, 0, &ib, 0xc000);
            // Four bytes of the payload or ICRC (after the BTH), not all unchanged.
            let at = 28 + BTH_LEN + rng.below(len - BTH_LEN + ICRC_LEN - 3);
            let err = loop {
                let e = rng.next() as u32;
                if e != 0 {
                    break e;
                }
            };
            for (b, e) in d[at..at + 4].iter_mut().zip(err.to_le_bytes()) {
                *b ^= e;
            }
            match verify_ipv4_unknown_id(&d).unwrap() {
                None => {}
                Some(got) => {
                    assert_ne!(got, id, "an error went undetected with the true ID");
                    false_accepts += 1;
                }
            }
        }
        // Expected 2^20 / 2^16 = 16 (Poisson): P(X < 5) and P(X > 32) are each below
        // 1e-3 for a 2^-16 rate; 2^-15 would give 32 and 2^-17 8 on average.
        std::eprintln!("{false_accepts} false accepts in {TRIALS} corrupted packets");
        assert!(
            (5..=32).contains(&false_accepts),
            "{false_accepts} false accepts in {TRIALS}"
        );
    }

    /// The Ethernet frames of a classic pcap file.
    fn pcap_frames(file: &[u8]) -> Vec<&[u8]> {
        let (linktype, records) = super::test_pcap::pcap_records(file);
        assert_eq!(linktype, 1, "link type is not Ethernet");
        records
            .into_iter()
            .map(|r| {
                assert_eq!(
                    r.data.len(),
                    r.orig_len,
                    "a frame was cut by the snap length"
                );
                r.data
            })
            .collect()
    }

    /// The kernel's rxe sends non-zero IDs; every captured IPv4 RoCE v2 packet gives its
    /// ID back from a copy with the ID zeroed.
    #[test]
    fn recovers_rxe_ids_from_golden_captures() {
        let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = [
            manifest.join("../../testdata/rxe"),
            manifest.join("../../../shared/rxe-peer/reference/pcap"),
        ]
        .into_iter()
        .find(|d| d.is_dir());
        let Some(dir) = dir else {
            std::eprintln!("SKIPPED: no rxe captures (testdata/rxe or the shared reference)");
            return;
        };
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
            .collect();
        paths.sort();
        assert!(!paths.is_empty());
        let (mut checked, mut non_zero) = (0, 0);
        for path in &paths {
            let file = std::fs::read(path).unwrap();
            for (n, frame) in pcap_frames(&file).into_iter().enumerate() {
                // Ethernet II, IPv4, UDP to 4791.
                if frame.len() < 14 + 20 + 8 || frame[12..14] != [0x08, 0x00] {
                    continue;
                }
                let ip = &frame[14..];
                let hl = ip_len(ip);
                if ip[9] != 17 || ip[hl + 2..hl + 4] != 4791u16.to_be_bytes() {
                    continue;
                }
                let real = u16::from_be_bytes([ip[4], ip[5]]);
                let at = std::format!("{} frame {}", path.display(), n + 1);
                assert!(verify(ip).unwrap(), "{at}: capture's ICRC is wrong");
                let mut copy = ip.to_vec();
                copy[4] = 0;
                copy[5] = 0;
                assert_eq!(verify_ipv4_unknown_id(&copy), Ok(Some(real)), "{at}");
                // Corrupt one payload byte: the real ID must no longer be found.
                let last = copy.len() - ICRC_LEN - 1;
                copy[last] ^= 0x10;
                assert_ne!(verify_ipv4_unknown_id(&copy), Ok(Some(real)), "{at}");
                checked += 1;
                non_zero += usize::from(real != 0);
            }
        }
        std::eprintln!(
            "{checked} IPv4 RoCE v2 packets ({non_zero} with non-zero IDs) from {}",
            dir.display()
        );
        assert!(checked >= 50 && non_zero >= 20, "{checked} / {non_zero}");
    }
}
