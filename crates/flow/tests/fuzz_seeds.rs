//! Replays every seed under `fuzz/seeds/flow/` through the oracle the cargo-fuzz target
//! runs (`fuzz/oracles/flow.rs`), so stable CI exercises it and every crash stays fixed.

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/flow.rs");
}

mod replay {
    include!("../../../fuzz/oracles/replay.rs");
}

#[test]
fn flow() {
    replay::replay("flow", oracles::flow);
}
