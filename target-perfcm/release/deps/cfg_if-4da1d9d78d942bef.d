/work/wt/cmfix/target-perfcm/release/deps/cfg_if-4da1d9d78d942bef.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/work/wt/cmfix/target-perfcm/release/deps/libcfg_if-4da1d9d78d942bef.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/work/wt/cmfix/target-perfcm/release/deps/libcfg_if-4da1d9d78d942bef.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs:
