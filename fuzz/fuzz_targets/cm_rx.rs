#![no_main]

#[allow(dead_code)]
mod oracles {
    include!("../oracles/cm.rs");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracles::cm_rx(data));
