//! `rverbs pcap decode` agrees with Wireshark's InfiniBand dissector (`tshark`) on the
//! opcode, QPN, PSN, flags and every extension-header field of each packet of the
//! kernel-rxe golden captures in `testdata/rxe/`.
//!
//! tshark is optional on a developer's machine, so the test is ignored unless asked
//! for (`cargo test -p rverbs-cli --test tshark -- --ignored`); run, it fails without
//! tshark. CI installs tshark and runs it.

use rverbs_wire::opcode::Opcode;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// tshark field → our key. Our keys are `<group>.<name>` as printed by the decoder.
const FIELDS: &[(&str, &str)] = &[
    ("infiniband.bth.opcode", "opcode"),
    ("infiniband.bth.destqp", "qpn"),
    ("infiniband.bth.psn", "psn"),
    ("infiniband.bth.a", "ackreq"),
    ("infiniband.bth.se", "se"),
    ("infiniband.bth.padcnt", "pad"),
    ("infiniband.reth.va", "va"),
    ("infiniband.reth.r_key", "rkey"),
    ("infiniband.reth.dmalen", "reth.len"),
    ("infiniband.aeth.syndrome", "aeth.syn"),
    ("infiniband.aeth.msn", "aeth.msn"),
    ("infiniband.deth.q_key", "deth.qkey"),
    ("infiniband.deth.srcqp", "deth.srcqp"),
    ("infiniband.atomiceth.swapdt", "atomic.swap_add"),
    ("infiniband.atomiceth.cmpdt", "atomic.compare"),
    ("infiniband.atomicacketh.origremdt", "atomic_ack.orig"),
    ("infiniband.immdt", "imm"),
];

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rxe")
}

fn captures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(testdata())
        .expect("testdata/rxe")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    v.sort();
    assert!(
        v.len() >= 15,
        "expected the 15 rxe golden captures, found {}",
        v.len()
    );
    v
}

/// Parses a number as tshark or our decoder prints it (decimal or 0x-hex, or hex bytes
/// with no prefix for `immdt`).
fn num(s: &str, hex_bytes: bool) -> u64 {
    if hex_bytes {
        return u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    }
    match s {
        "True" | "1" if !s.starts_with("0x") => 1,
        "False" => 0,
        _ => match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).unwrap(),
            None => s.parse().unwrap_or_else(|_| panic!("not a number: {s}")),
        },
    }
}

/// One tshark row per frame: key → value, only for fields present.
fn tshark_rows(pcap: &Path) -> Option<Vec<BTreeMap<&'static str, u64>>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(pcap)
        .args(["-T", "fields", "-E", "separator=\t"]);
    cmd.args(["-o", "infiniband.try_heuristic_first:FALSE"]);
    for (f, _) in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("tshark: {e}"),
    };
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.lines()
            .map(|line| {
                let mut row = BTreeMap::new();
                for ((_, key), value) in FIELDS.iter().zip(line.split('\t')) {
                    // A field present several times (e.g. nested MAD data) is comma-joined;
                    // the transport headers occur once, so take the first.
                    let value = value.split(',').next().unwrap_or("");
                    if !value.is_empty() {
                        row.insert(*key, num(value, *key == "imm"));
                    }
                }
                row
            })
            .collect(),
    )
}

/// One row per line of our decoder's output, keyed like [`FIELDS`].
fn our_rows(pcap: &Path) -> Vec<BTreeMap<&'static str, u64>> {
    let mut out = Vec::new();
    let totals = rverbs_cli::pcap::decode(std::fs::File::open(pcap).unwrap(), &mut out).unwrap();
    assert_eq!(
        (totals.malformed, totals.icrc_bad),
        (0, 0),
        "{}",
        pcap.display()
    );
    let text = String::from_utf8(out).unwrap();
    let names: BTreeMap<&str, u8> = Opcode::all().map(|(o, i)| (i.name, o.0)).collect();
    let key = |group: &str, name: &str| -> Option<&'static str> {
        let full = format!("{group}.{name}");
        FIELDS
            .iter()
            .map(|(_, k)| *k)
            .find(|k| *k == full || (*k == name && group != "aeth"))
    };
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with("packets=")) {
        let mut row = BTreeMap::new();
        let mut tokens = line.split_whitespace();
        let _index = tokens.next();
        let (_src, _gt, _dst) = (tokens.next(), tokens.next(), tokens.next());
        let op = tokens.next().unwrap();
        row.insert("opcode", u64::from(names[op]));
        row.insert("ackreq", 0);
        row.insert("se", 0);
        row.insert("pad", 0);
        let mut group = "bth";
        for t in tokens {
            match t.split_once('=') {
                None => match t {
                    "ackreq" | "se" => {
                        row.insert(if t == "se" { "se" } else { "ackreq" }, 1);
                    }
                    "ACK" | "NAK" | "RNR" | "RESERVED" => {}
                    g => group = g,
                },
                Some((name, value)) => {
                    let name = if group == "aeth" && name == "syn" {
                        "syn"
                    } else {
                        name
                    };
                    if let Some(k) = key(group, name) {
                        row.insert(k, num(value, false));
                    }
                }
            }
        }
        rows.push(row);
    }
    rows
}

#[test]
#[ignore = "needs tshark (Wireshark); CI runs it with --ignored"]
fn decoder_agrees_with_tshark_on_every_golden_packet() {
    let mut compared = 0;
    for pcap in captures() {
        let theirs = tshark_rows(&pcap)
            .expect("tshark is not installed: needs tshark (Wireshark); CI runs it with --ignored");
        let ours = our_rows(&pcap);
        assert_eq!(ours.len(), theirs.len(), "{}: packet count", pcap.display());
        for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(o, t, "{} packet {}", pcap.display(), i + 1);
            assert!(
                t.len() >= 6,
                "tshark decoded too little of packet {}: {t:?}",
                i + 1
            );
            compared += 1;
        }
    }
    assert!(compared >= 150, "only {compared} packets compared");
    eprintln!("compared {compared} packets with tshark: all fields agree");
}
