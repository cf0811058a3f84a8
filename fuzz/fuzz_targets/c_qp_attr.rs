#![no_main]

#[allow(dead_code)]
mod oracles {
    include!("../oracles/libibverbs.rs");
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracles::c_qp_attr(data));
