//! Replays `fuzz/seeds/engine/` through the engine fuzz target's oracle
//! (`fuzz/oracles/engine.rs`), so stable CI exercises it.

#[allow(dead_code)]
mod oracles {
    include!("../../../fuzz/oracles/engine.rs");
}

#[test]
fn engine_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/engine");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert!(!paths.is_empty());
    for p in paths {
        eprintln!("{}", p.display());
        oracles::engine(&std::fs::read(&p).unwrap());
    }
    // And a few synthetic inputs: empty, tiny, all zero, all 0xff.
    for data in [&[][..], &[0u8; 3][..], &[0u8; 300][..], &[0xffu8; 300][..]] {
        oracles::engine(data);
    }
}
