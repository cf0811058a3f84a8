// Fuzz oracles for `rverbs-cli`'s capture decoder and interop exchange parser, shared by the cargo-fuzz targets in
// `fuzz/fuzz_targets/` and the stable replay test `crates/cli/tests/fuzz_seeds.rs`,
// which both `include!` this file.

use pcap_parser::Linktype;
use rverbs_cli::pcap::{decode, decode_record, DecodeError, Record};

/// Link types `decode_record` knows, and one it does not (147, USER0).
pub const LINKTYPES: [i32; 9] = [0, 1, 101, 108, 113, 228, 229, 276, 147];

/// The first byte picks a link type from [`LINKTYPES`]; the rest is one record.
pub fn pcap_record(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let linktype = LINKTYPES[usize::from(selector) % LINKTYPES.len()];
    match decode_record(Linktype(linktype), rest) {
        Record::NotRoce => {}
        Record::Roce { line, icrc_ok } => {
            let tail = if icrc_ok { "icrc=ok" } else { "icrc=bad" };
            // The verdict ends the line, or comes just before a QP1 MAD's summary.
            let mad = format!("{tail} mad ");
            assert!(line.ends_with(tail) || line.contains(&mad), "{line}");
            if let Some(i) = line.find(" mad ") {
                assert!(line[..i].ends_with(tail), "{line}");
            }
            assert!(!line.contains('\n'), "{line}");
        }
        Record::Malformed(why) => {
            assert!(!why.is_empty());
            assert!(!why.contains('\n'), "{why}");
            if linktype == 147 {
                assert_eq!(why, "unsupported link type 147");
            }
        }
    }
}

/// The bytes as a whole pcap/pcapng capture, decoded into a sink; the totals must add up.
pub fn pcap_file(data: &[u8]) {
    match decode(data, &mut std::io::sink()) {
        Ok(t) => {
            assert_eq!(t.roce, t.icrc_ok + t.icrc_bad);
            assert!(t.roce + t.malformed <= t.packets);
        }
        Err(DecodeError::Io(e)) => panic!("reading a byte slice cannot fail: {e}"),
        Err(_) => {}
    }
}

/// The bytes as what a `rverbs perf` peer sends on the control connection: every line
/// parses to a message or an error, and a parsed message renders back to a line that
/// parses to the same message. Then the same bytes as what a perftest peer sends to
/// `--perftest` (see [`perftest_bytes`]).
pub fn perf_ctrl(data: &[u8]) {
    perftest_bytes(data);
    use rverbs_cli::perf::ctrl::{read_msg, Msg};
    let mut r = data;
    for _ in 0..64 {
        match read_msg(&mut r) {
            Ok(m) => {
                assert_eq!(Msg::parse(&m.render()).as_ref(), Ok(&m));
                for k in ["size", "sent", "qpn", "gid", "secs"] {
                    let _ = (m.u64(k), m.hex(k), m.gid(k), m.f64(k));
                }
            }
            Err(e) => {
                assert!(!e.is_empty());
                if e.contains("closed") || e.contains("cut short") {
                    break;
                }
            }
        }
    }
}

/// The bytes as an `rverbs interop-peer` exchange line: parsing never panics, and what
/// parses encodes back to a line that parses to the same values.
pub fn interop_exchange(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = rverbs_cli::interop::decode(text) {
        let line = rverbs_cli::interop::encode(&p);
        assert_eq!(rverbs_cli::interop::decode(&line), Ok(p), "{line}");
        assert!(p.qpn <= 0xff_ffff && p.psn <= 0xff_ffff);
    }
}

/// The bytes as each field a perftest peer sends to `rverbs perf --perftest`: its
/// version, page size and cache line, MTU, 108-byte key message and bandwidth report.
/// Each parses to a value in range or an error, and what parses encodes back to the
/// same value.
pub fn perftest_bytes(data: &[u8]) {
    use rverbs_cli::perf::perftest::{
        decode, encode, parse_mtu, parse_sys, parse_version, BwReport, KEY_MSG_SIZE_GID,
    };
    let key = &data[..data.len().min(KEY_MSG_SIZE_GID)];
    if let Ok(d) = decode(key) {
        assert_eq!(decode(&encode(&d)), Ok(d));
        assert!(d.qpn <= 0xff_ffff && d.psn <= 0xff_ffff);
    }
    if let Ok(v) = parse_version(&data[..data.len().min(16)]) {
        assert!(v < 100_000_000);
    }
    if let Some(m) = parse_mtu(&data[..data.len().min(2)]) {
        assert!((256..=4096).contains(&m.bytes()));
    }
    if data.len() >= 8 {
        if let Ok((c, l)) = parse_sys(&data[..4], &data[4..8]) {
            assert!((4096..=1 << 26).contains(&c) && (64..=4096).contains(&l));
        }
    }
    if data.len() >= 40 {
        let mut f = [[0u8; 8]; 5];
        for (i, x) in f.iter_mut().enumerate() {
            x.copy_from_slice(&data[8 * i..8 * i + 8]);
        }
        if let Ok(r) = BwReport::from_fields(&f) {
            assert_eq!(r.fields(), f);
            assert!(r.bw_avg.is_finite() && r.bw_avg >= 0.0 && r.msg_rate >= 0.0);
        }
    }
}
