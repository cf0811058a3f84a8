//! Replays every seed under `fuzz/seeds/` through the same oracles the cargo-fuzz
//! targets run (`fuzz/oracles/wire.rs`), so stable CI exercises them and every crash
//! the fuzzer found (kept as a seed) stays fixed.

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/wire.rs");
}

mod replay {
    include!("../../../fuzz/oracles/replay.rs");
}
use replay::replay;

#[test]
fn packet() {
    replay("packet", oracles::packet);
}

#[test]
fn frame() {
    replay("frame", oracles::frame);
}

#[test]
fn raw_frame() {
    replay("raw_frame", oracles::raw_frame);
}

#[test]
fn mad() {
    replay("mad", oracles::mad);
}
