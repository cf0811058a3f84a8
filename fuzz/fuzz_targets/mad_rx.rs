#![no_main]

#[allow(dead_code)]
mod oracles {
    include!("../oracles/mad_rx.rs");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracles::mad_rx(data));
