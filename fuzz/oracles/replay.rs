// Replays the committed seeds of one fuzz target through its oracle, on the stable
// toolchain (`include!`d by the `tests/fuzz_seeds.rs` of each crate with a target).

/// Runs `oracle` on every file of `fuzz/seeds/<target>/`.
pub fn replay(target: &str, oracle: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds").join(target);
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
