/work/wt/cmfix/target-perfcm/release/deps/colorchoice-73fad8745cdfa2a6.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/colorchoice-1.0.5/src/lib.rs

/work/wt/cmfix/target-perfcm/release/deps/libcolorchoice-73fad8745cdfa2a6.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/colorchoice-1.0.5/src/lib.rs

/work/wt/cmfix/target-perfcm/release/deps/libcolorchoice-73fad8745cdfa2a6.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/colorchoice-1.0.5/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/colorchoice-1.0.5/src/lib.rs:
