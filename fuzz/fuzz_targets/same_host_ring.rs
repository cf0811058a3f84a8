#![no_main]

#[allow(dead_code)]
mod oracles {
    include!("../oracles/rverbs.rs");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracles::same_host_ring(data));
