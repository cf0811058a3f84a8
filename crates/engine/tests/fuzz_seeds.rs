//! Replays `fuzz/seeds/engine/` through the engine fuzz target's oracle
//! (`fuzz/oracles/engine.rs`), so stable CI exercises it.

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/engine.rs");
}

mod replay {
    include!("../../../fuzz/oracles/replay.rs");
}

#[test]
fn engine_seeds() {
    replay::replay("engine", oracles::engine);
    // And a few synthetic inputs: empty, tiny, all zero, all 0xff.
    for data in [&[][..], &[0u8; 3][..], &[0u8; 300][..], &[0xffu8; 300][..]] {
        oracles::engine(data);
    }
}
