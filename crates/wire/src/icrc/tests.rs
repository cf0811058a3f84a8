//! The ICRC's tests: known answers, the fast paths against the plain CRC, golden
//! captures.

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
