/work/wt/cmfix/target-perfcm/release/deps/strsim-06a432877410bfb0.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/strsim-0.11.1/src/lib.rs

/work/wt/cmfix/target-perfcm/release/deps/libstrsim-06a432877410bfb0.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/strsim-0.11.1/src/lib.rs

/work/wt/cmfix/target-perfcm/release/deps/libstrsim-06a432877410bfb0.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/strsim-0.11.1/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/strsim-0.11.1/src/lib.rs:
