/work/wt/cmfix/target-perfcm/release/deps/rverbs_raw-078459a9acf4ae80.d: crates/raw/src/lib.rs crates/raw/src/netns.rs crates/raw/src/port.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_raw-078459a9acf4ae80.rlib: crates/raw/src/lib.rs crates/raw/src/netns.rs crates/raw/src/port.rs

/work/wt/cmfix/target-perfcm/release/deps/librverbs_raw-078459a9acf4ae80.rmeta: crates/raw/src/lib.rs crates/raw/src/netns.rs crates/raw/src/port.rs

crates/raw/src/lib.rs:
crates/raw/src/netns.rs:
crates/raw/src/port.rs:
