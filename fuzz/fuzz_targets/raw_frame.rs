#![no_main]

#[allow(dead_code)]
mod oracles {
    include!("../oracles/wire.rs");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracles::raw_frame(data));
