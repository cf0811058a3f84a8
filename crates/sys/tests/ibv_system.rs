//! rdma-core's libibverbs where it is installed: it loads, is not taken for rverbs'
//! own, and lists its devices (none on a machine without RDMA devices). It is named by
//! its path: under `cargo test` the soname finds rverbs' own library first
//! (`LD_LIBRARY_PATH` holds the target directory), which `ibv_missing.rs`'s sibling
//! `crates/libibverbs/tests/own_library.rs` covers.

#[test]
fn the_systems_library_loads_when_installed() {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ];
    let Some(path) = dirs
        .iter()
        .map(|d| std::path::Path::new(d).join("libibverbs.so.1"))
        .find(|p| p.exists())
    else {
        println!("rdma-core's libibverbs is not installed: nothing to load");
        return;
    };
    rverbs_sys::ibv::load_library(Some(path.to_str().unwrap()))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let list = rverbs_sys::ibv::devices()
        .unwrap()
        .expect("ibv_get_device_list");
    for d in &list {
        assert!(!d.name.is_empty() && d.ibdev_path.starts_with('/'), "{d:?}");
    }
}
