// A system device's region memory, which the NIC writes without any lock, has no
// slice view from safe code: only volatile copies (`read` / `write`).
fn main() {
    let mem = rverbs_sys::ibv::DmaMem::new(64).unwrap();
    let _bytes: &[u8] = &mem[..];
}
