/work/wt/cmfix/target-perfcm/release/deps/clap_lex-d8fa0df5ad0a98b9.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/clap_lex-1.1.2/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/clap_lex-1.1.2/src/ext.rs

/work/wt/cmfix/target-perfcm/release/deps/libclap_lex-d8fa0df5ad0a98b9.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/clap_lex-1.1.2/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/clap_lex-1.1.2/src/ext.rs

/work/wt/cmfix/target-perfcm/release/deps/libclap_lex-d8fa0df5ad0a98b9.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/clap_lex-1.1.2/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/clap_lex-1.1.2/src/ext.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/clap_lex-1.1.2/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/clap_lex-1.1.2/src/ext.rs:
