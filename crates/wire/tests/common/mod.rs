//! Helpers shared by the golden tests: the rxe captures in `testdata/rxe/` and the text
//! decodes that came with them (see `testdata/rxe/README.md` for where they come from).

use pcap_parser::{Linktype, PcapCapture};
use std::path::PathBuf;

/// Every capture in `testdata/rxe/`, in the order the decodes list them.
pub const FILES: [&str; 15] = [
    "host_rc_probe.pcap",
    "host_ud_probe.pcap",
    "rc_atomic_cswap.pcap",
    "rc_atomic_fadd.pcap",
    "rc_read.pcap",
    "rc_read_segmented.pcap",
    "rc_send_bw.pcap",
    "rc_send_ipv6.pcap",
    "rc_send_pingpong.pcap",
    "rc_send_segmented.pcap",
    "rc_write.pcap",
    "rc_write_segmented.pcap",
    "rdmacm_rping.pcap",
    "uc_send_pingpong.pcap",
    "ud_send_pingpong.pcap",
];

/// `testdata/rxe/` at the workspace root.
pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rxe")
}

/// A text file from `testdata/rxe/`.
pub fn read_text(name: &str) -> String {
    let path = testdata().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One pcap file: its name and its frames (whole Ethernet frames, no FCS).
pub struct Capture {
    pub name: &'static str,
    pub frames: Vec<Vec<u8>>,
}

/// Loads a classic pcap file from `testdata/rxe/`, checking that it is Ethernet and that
/// no frame was cut short by the snap length.
pub fn load(name: &'static str) -> Capture {
    let path = testdata().join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cap = PcapCapture::from_file(&bytes).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert_eq!(cap.header.network, Linktype::ETHERNET, "{name}: link type");
    let frames = cap
        .blocks
        .iter()
        .map(|b| {
            assert_eq!(b.caplen, b.origlen, "{name}: a frame was truncated");
            assert_eq!(b.data.len(), b.caplen as usize, "{name}: short record");
            b.data.to_vec()
        })
        .collect();
    Capture { name, frames }
}

/// Every capture, in [`FILES`] order.
pub fn all() -> Vec<Capture> {
    FILES.iter().map(|f| load(f)).collect()
}

/// Splits a decode that heads each file's section with a line starting with `marker`
/// and naming the `.pcap` file, into `(file name, lines of its section)`.
pub fn sections<'a>(text: &'a str, marker: &str) -> Vec<(String, Vec<&'a str>)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(marker) {
            let file = rest
                .split_whitespace()
                .find(|w| w.ends_with(".pcap"))
                .unwrap_or_else(|| panic!("no file name in {line:?}"));
            let file = file.rsplit('/').next().unwrap().to_string();
            out.push((file, Vec::new()));
        } else if let Some((_, lines)) = out.last_mut() {
            lines.push(line);
        }
    }
    out
}

/// `key=value` pairs of a whitespace-separated line.
pub fn kv<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Parses `0x1f` as hexadecimal or `31` as decimal.
pub fn num(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .unwrap_or_else(|e| panic!("{s:?}: {e}"))
}
