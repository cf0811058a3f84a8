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
mod tests;
