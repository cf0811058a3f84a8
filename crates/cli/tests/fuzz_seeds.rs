//! Replays every seed under `fuzz/seeds/` through the same oracles the cargo-fuzz
//! targets run (`fuzz/oracles/cli.rs`), so stable CI exercises them and every crash
//! the fuzzer found (kept as a seed) stays fixed.

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/cli.rs");
}

mod replay {
    include!("../../../fuzz/oracles/replay.rs");
}
use replay::replay;

#[test]
fn pcap_record() {
    replay("pcap_record", oracles::pcap_record);
}

#[test]
fn pcap_file() {
    replay("pcap_file", oracles::pcap_file);
}

#[test]
fn perf_ctrl() {
    replay("perf_ctrl", oracles::perf_ctrl);
}

#[test]
fn interop_exchange() {
    replay("interop_exchange", oracles::interop_exchange);
}
