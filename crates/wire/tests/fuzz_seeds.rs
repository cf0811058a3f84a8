//! Replays every seed under `fuzz/seeds/` through the same oracles the cargo-fuzz
//! targets run (`fuzz/oracles/wire.rs`), so stable CI exercises them and every crash
//! the fuzzer found (kept as a seed) stays fixed.

use std::path::Path;

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/wire.rs");
}

fn replay(target: &str, oracle: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no seeds in {}", dir.display());
    for path in paths {
        let data = std::fs::read(&path).unwrap();
        // Named on stderr so a failure says which seed it was.
        eprintln!("{}", path.display());
        oracle(&data);
    }
}

#[test]
fn packet() {
    replay("packet", oracles::packet);
}

#[test]
fn frame() {
    replay("frame", oracles::frame);
}

#[test]
fn mad() {
    replay("mad", oracles::mad);
}
