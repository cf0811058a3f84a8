#![no_main]

#[allow(dead_code)]
mod oracles {
    include!("../oracles/cli.rs");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracles::perf_ctrl(data));
