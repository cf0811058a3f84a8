#![no_main]

#[allow(dead_code)]
mod oracles {
    include!("../oracles/flow.rs");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracles::flow(data));
