/work/wt/cmfix/target-perfcm/release/deps/is_terminal_polyfill-7b4ba9aa65a29949.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/is_terminal_polyfill-1.70.2/src/lib.rs

/work/wt/cmfix/target-perfcm/release/deps/libis_terminal_polyfill-7b4ba9aa65a29949.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/is_terminal_polyfill-1.70.2/src/lib.rs

/work/wt/cmfix/target-perfcm/release/deps/libis_terminal_polyfill-7b4ba9aa65a29949.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/is_terminal_polyfill-1.70.2/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/is_terminal_polyfill-1.70.2/src/lib.rs:
