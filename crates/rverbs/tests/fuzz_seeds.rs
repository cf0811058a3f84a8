//! Replays every seed under `fuzz/seeds/` through the same oracles the cargo-fuzz
//! targets run (`fuzz/oracles/rverbs.rs`), so stable CI exercises them and every crash
//! the fuzzer found (kept as a seed) stays fixed.

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/rverbs.rs");
}

mod replay {
    include!("../../../fuzz/oracles/replay.rs");
}
use replay::replay;

#[test]
fn grh_ah() {
    replay("grh_ah", oracles::grh_ah);
}

#[test]
fn same_host_ring() {
    replay("same_host_ring", oracles::same_host_ring);
}
