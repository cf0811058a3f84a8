#![no_main]

#[allow(dead_code)]
mod oracles {
    include!("../oracles/engine.rs");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracles::engine(data));
