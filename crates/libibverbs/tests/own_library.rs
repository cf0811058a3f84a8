//! Under `rverbs exec`, `LD_LIBRARY_PATH` finds this library first as
//! `libibverbs.so.1`: the loader of the system's devices (`rverbs_sys::ibv`) must
//! recognise it rather than list the soft devices a second time as system ones.

mod common;

use rverbs_sys::ibv::{load_library, LoadError};

#[test]
fn the_loader_of_system_devices_refuses_this_library() {
    let so = common::lib_path();
    let e = load_library(Some(so.to_str().unwrap())).unwrap_err();
    assert_eq!(e, LoadError::OwnLibrary);
    let msg = e.to_string();
    assert!(
        msg.contains("libibverbs.so.1") && msg.contains("rverbs exec"),
        "{msg}"
    );
    // Listing devices reports the same, not an empty list.
    assert_eq!(
        rverbs_sys::ibv::devices().unwrap_err(),
        LoadError::OwnLibrary
    );
}
